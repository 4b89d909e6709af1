//! [`discover`]: the group versions and resources a member serves (`status.apiEnablements`)
//! and whether discovery was complete (the `CompleteAPIEnablements` condition).
//!
//! Aggregated discovery (`apidiscovery.k8s.io/v2`, Kubernetes 1.26+) answers in two
//! requests; a server without it gets the classic walk, a request per group version, a
//! few at a time. Either way a group version that fails (an aggregated API server that
//! is down, a `Stale` entry) is named in the condition and does not fail the rest.

use causeway_crds::federation::cluster::{ApiEnablement, ApiResourceRef, conditions};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::core::discovery::v2::APIGroupDiscoveryList;

use crate::clusters::health::Probe;

/// How many group versions the classic walk asks for at once.
const CONCURRENT: usize = 8;

/// How long one discovery request may take, retries included, before what it asked
/// for counts as failed. kube's client retries a 503 (what kube-apiserver answers for
/// an aggregated API server that is down) up to 15 times over minutes.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request gave nothing.
#[derive(Debug)]
enum Failure {
    Kube(kube::Error),
    Timeout(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Kube(e) => e.fmt(f),
            Failure::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
        }
    }
}

/// `request`, given at most `limit`.
async fn ask<T>(
    limit: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(limit, request).await {
        Ok(answer) => answer.map_err(Failure::Kube),
        Err(_) => Err(Failure::Timeout(limit)),
    }
}

/// What discovery found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Apis {
    /// The group versions served and their resources, sorted (`status.apiEnablements`).
    pub enablements: Vec<ApiEnablement>,
    /// What could not be discovered (a group version, or `/api`, `/apis`) and why.
    pub failed: Vec<(String, String)>,
}

impl Apis {
    /// Pure: the `CompleteAPIEnablements` verdict as (status, reason, message), the shape
    /// of a health probe's: `True`/`Complete`, `False`/`Partial` (the failures named) or
    /// `False`/`Empty`.
    pub fn verdict(&self) -> Probe {
        let failures = || {
            self.failed
                .iter()
                .map(|(what, why)| format!("{what}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        match (self.enablements.is_empty(), self.failed.is_empty()) {
            (true, true) => (
                "False",
                conditions::REASON_EMPTY,
                "discovery found no APIs on the cluster".into(),
            ),
            (true, false) => (
                "False",
                conditions::REASON_EMPTY,
                format!("discovery found no APIs on the cluster ({})", failures()),
            ),
            (false, false) => (
                "False",
                conditions::REASON_PARTIAL,
                format!(
                    "collected {} group versions; discovery failed for {}",
                    self.enablements.len(),
                    failures()
                ),
            ),
            (false, true) => (
                "True",
                conditions::REASON_COMPLETE,
                format!("collected all {} group versions", self.enablements.len()),
            ),
        }
    }

    fn sort(mut self) -> Self {
        for e in &mut self.enablements {
            e.resources.sort_by(|a, b| a.name.cmp(&b.name));
        }
        self.enablements
            .sort_by(|a, b| a.group_version.cmp(&b.group_version));
        self.failed.sort();
        self
    }
}

/// Discovers what `member` serves: aggregated discovery, else the classic walk. Each
/// request may take `limit` ([`DISCOVERY_TIMEOUT`] is a good one).
pub async fn discover(member: &kube::Client, limit: Duration) -> Apis {
    match aggregated(member, limit).await {
        Ok(apis) => apis.sort(),
        Err(Fallback::Classic) => classic(member, limit).await.sort(),
        Err(Fallback::Unreachable(e)) => Apis {
            enablements: Vec::new(),
            failed: vec![("/api".into(), e.to_string())],
        },
    }
}

enum Fallback {
    /// The server does not do aggregated discovery.
    Classic,
    /// The server did not answer: the classic walk would not fare better.
    Unreachable(Failure),
}

/// Aggregated discovery of `/api` and `/apis`.
async fn aggregated(member: &kube::Client, limit: Duration) -> Result<Apis, Fallback> {
    let no_aggregation = |e: Failure| match e {
        Failure::Kube(kube::Error::Api(_) | kube::Error::SerdeError(_)) => Fallback::Classic,
        e => Fallback::Unreachable(e),
    };
    let core = ask(limit, member.list_core_api_versions_aggregated())
        .await
        .map_err(no_aggregation)?;
    if core.items.is_empty() {
        // A server that ignores the Accept header answers a legacy APIVersions, which
        // reads as an empty list: every real server serves the core group.
        return Err(Fallback::Classic);
    }
    let mut apis = Apis::default();
    from_aggregated(core, &mut apis);
    match ask(limit, member.list_api_groups_aggregated()).await {
        Ok(groups) => from_aggregated(groups, &mut apis),
        Err(e) => apis.failed.push(("/apis".into(), e.to_string())),
    }
    Ok(apis)
}

/// Pure: adds an aggregated discovery answer to `apis`; `Stale` versions fail.
fn from_aggregated(list: APIGroupDiscoveryList, apis: &mut Apis) {
    for group in list.items {
        let name = group.metadata.and_then(|m| m.name).unwrap_or_default();
        for v in group.versions {
            let Some(version) = v.version else { continue };
            let gv = group_version(&name, &version);
            if v.freshness.as_deref() == Some("Stale") {
                apis.failed
                    .push((gv, "its discovery information is stale".into()));
                continue;
            }
            let resources = v
                .resources
                .into_iter()
                .filter_map(|r| {
                    Some(ApiResourceRef {
                        name: r.resource?,
                        kind: r.response_kind?.kind?,
                    })
                })
                .collect();
            apis.enablements.push(ApiEnablement {
                group_version: gv,
                resources,
            });
        }
    }
}

/// The classic walk: `/api`, `/apis`, then each group version.
async fn classic(member: &kube::Client, limit: Duration) -> Apis {
    let mut apis = Apis::default();
    let mut gvs = Vec::new();
    match ask(limit, member.list_core_api_versions()).await {
        Ok(core) => gvs.extend(core.versions),
        Err(e) => apis.failed.push(("/api".into(), e.to_string())),
    }
    match ask(limit, member.list_api_groups()).await {
        Ok(groups) => gvs.extend(
            groups
                .groups
                .into_iter()
                .flat_map(|g| g.versions.into_iter().map(|v| v.group_version)),
        ),
        Err(e) => apis.failed.push(("/apis".into(), e.to_string())),
    }
    let answers: Vec<(String, Result<APIResourceList, Failure>)> = stream::iter(gvs)
        .map(|gv| async move {
            let answer = if gv.contains('/') {
                ask(limit, member.list_api_group_resources(&gv)).await
            } else {
                ask(limit, member.list_core_api_resources(&gv)).await
            };
            (gv, answer)
        })
        .buffer_unordered(CONCURRENT)
        .collect()
        .await;
    for (gv, answer) in answers {
        match answer {
            Ok(list) => apis.enablements.push(from_resource_list(gv, list)),
            Err(e) => apis.failed.push((gv, e.to_string())),
        }
    }
    apis
}

/// Pure: one group version's enablement from its resource list, without subresources.
fn from_resource_list(gv: String, list: APIResourceList) -> ApiEnablement {
    ApiEnablement {
        group_version: gv,
        resources: list
            .resources
            .into_iter()
            .filter(|r| !r.name.contains('/'))
            .map(|r| ApiResourceRef {
                name: r.name,
                kind: r.kind,
            })
            .collect(),
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

#[cfg(test)]
mod tests;
