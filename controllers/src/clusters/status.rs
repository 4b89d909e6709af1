//! The cluster status controller (A.1–A.3, A.8): one per member, run by the hub for Push
//! members and by the agent inside a Pull member. Every status interval it probes the
//! member, damps the verdict ([`Damper`]), and posts the Cluster's status: the `Ready`
//! condition, the Kubernetes version, and what [`super::summary`] gathers. It writes
//! only when something changed, under its own field manager, so the hub's lease
//! monitor (which may post `Ready=Unknown` for a silent Pull member) never erases it.

use causeway_crds::federation::cluster::{ApiEnablement, Cluster, ClusterStatus, conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::health::{Damper, condition, probe, ready_condition};
use super::options::Timing;
use super::summary::{DISCOVERY_TIMEOUT, Summary, Usage, discover};
use causeway_runtime::apply;

/// Field manager of the status this controller posts.
pub const MANAGER: &str = "causeway-cluster-status";

/// How many status rounds pass between two reads of the member's version and APIs
/// (5 minutes at the default 10 s interval; discovery costs a request per group).
const DISCOVER_EVERY: u32 = 30;
/// Status rounds between two discoveries while the last one found nothing.
const REDISCOVER_EVERY: u32 = 3;

/// Pure: the status body to post from the damped Ready condition and what else is known:
/// the member's version, its APIs with their `CompleteAPIEnablements` condition, and its
/// node/resource summaries and topology. What this worker does not know (yet) — a new
/// worker before its first discovery, a member it cannot reach, node and pod caches not
/// synced — is carried over from the `current` status: the apply under [`MANAGER`]
/// removes every field it no longer sends, and the region, zones, APIs and summaries
/// that placements read must not vanish when the hub restarts during an outage.
pub fn status_body(
    ready: &Condition,
    version: Option<&str>,
    apis: Option<&(Vec<ApiEnablement>, Condition)>,
    summary: Option<&Summary>,
    current: Option<&Cluster>,
) -> Value {
    let cur = current.and_then(|c| c.status.clone()).unwrap_or_default();
    let mut st = ClusterStatus {
        kubernetes_version: version.map(String::from).or(cur.kubernetes_version),
        conditions: vec![ready.clone()],
        ..Default::default()
    };
    match apis {
        // a discovery that found nothing failed (every API server serves v1): its
        // condition says why, the APIs last found stay
        Some((enablements, complete)) if enablements.is_empty() => {
            let mut complete = complete.clone();
            if !cur.api_enablements.is_empty() {
                complete
                    .message
                    .push_str("; the APIs found before are kept");
            }
            st.api_enablements = cur.api_enablements;
            st.conditions.push(complete);
        }
        Some((enablements, complete)) => {
            st.api_enablements = enablements.clone();
            st.conditions.push(complete.clone());
        }
        None => {
            st.api_enablements = cur.api_enablements;
            st.conditions.extend(
                cur.conditions
                    .into_iter()
                    .filter(|c| c.type_ == conditions::COMPLETE_API_ENABLEMENTS),
            );
        }
    }
    match summary {
        Some(s) => s.fill(&mut st),
        None => {
            // the spec's topology first, as a known summary has it (a region set while
            // the member is out of reach counts at once), else the last one seen
            let spec = current.map(|c| super::summary::topology(&[], &c.spec));
            let spec = spec.unwrap_or_default();
            st.node_summary = cur.node_summary;
            st.resource_summary = cur.resource_summary;
            st.region = spec.region.or(cur.region);
            st.zones = if spec.zones.is_empty() {
                cur.zones
            } else {
                spec.zones
            };
            st.provider = spec.provider.or(cur.provider);
        }
    }
    serde_json::to_value(st).unwrap_or(Value::Null)
}

/// Posts `Ready=False` (`ClusterNotReachable`) with `why` for a member the hub cannot
/// use at all (no credentials, no client), so its Cluster does not keep a stale `True`
/// — and gets the not-ready taint and its endpoints the stale TTL. Best effort (the
/// controller posts it again every round while the member is unusable; one that
/// already stands is not written again).
pub async fn post_not_ready(hub: &kube::Client, name: &str, why: &str) {
    let api: Api<Cluster> = Api::all(hub.clone());
    match super::within(super::CALL_TIMEOUT, api.get_opt(name)).await {
        Ok(Some(current)) => post_not_ready_on(hub, &current, why).await,
        Ok(None) => {}
        Err(e) => {
            tracing::debug!(cluster = %name, error = %e, "cannot read the Cluster to post Ready=False");
        }
    }
}

/// [`post_not_ready`] on `current` as a cache holds it: nothing is sent when its status
/// already says so; a stale copy is refused (409) and the next round posts again.
pub async fn post_not_ready_on(hub: &kube::Client, current: &Cluster, why: &str) {
    let api: Api<Cluster> = Api::all(hub.clone());
    let name = current.metadata.name.as_deref().unwrap_or_default();
    let verdict = (
        "False",
        conditions::REASON_CLUSTER_NOT_REACHABLE,
        format!("the hub cannot use this member: {why}"),
    );
    let ready = ready_condition(verdict, Some(current), &Time(jiff::Timestamp::now()));
    let body = status_body(&ready, None, None, None, Some(current));
    if let Err(e) = post_status(&api, MANAGER, current, &body, &[]).await {
        tracing::debug!(cluster = %name, error = %e, "cannot post Ready=False");
    }
}

/// The status fields the status loop sets from the member's nodes: one the nodes no
/// longer say (their region label removed) goes from the status too.
pub const FROM_THE_NODES: &[&str] = &["region", "zones", "provider"];

/// Posts `body` as the status of Cluster `current` under field `manager`, unless the
/// status already holds it (and, at the fields `owned`, nothing `body` leaves out);
/// refused (409) if the Cluster changed since `current` was read, so a decision made
/// on a stale read never lands; bounded in time.
pub async fn post_status(
    api: &Api<Cluster>,
    manager: &str,
    current: &Cluster,
    body: &Value,
    owned: &[&str],
) -> Result<apply::Outcome, String> {
    let live = current
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    if apply::holds_owning(&live, body, owned) {
        return Ok(apply::Outcome::Unchanged);
    }
    let name = current.metadata.name.as_deref().unwrap_or_default();
    let write = apply::apply_status_as(
        api,
        manager,
        name,
        "causeway.io/v1alpha1",
        "Cluster",
        body,
        current.metadata.resource_version.as_deref(),
    );
    super::within(super::CALL_TIMEOUT, write).await
}

/// The Ready condition a Cluster carries now.
pub fn ready_of(c: &Cluster) -> Option<&Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY)
}

/// Whether a Cluster is Ready (its Ready condition True); one never probed is not.
pub fn is_ready(c: &Cluster) -> bool {
    ready_of(c).is_some_and(|r| r.status == "True")
}

/// Posts the status of Cluster `name` (on `hub`) for the `member` it describes, every
/// status interval, until `stop`.
pub async fn run(
    name: String,
    member: kube::Client,
    hub: kube::Client,
    timing: Timing,
    stop: CancellationToken,
) {
    let api: Api<Cluster> = Api::all(hub);
    let mut damper = Damper::default();
    let mut version: Option<String> = None;
    let mut apis: Option<super::summary::Apis> = None;
    let usage = Usage::start(member.clone(), stop.clone());
    let mut round: u32 = 0;
    loop {
        let verdict = tokio::select! {
            v = probe(&member) => v,
            _ = stop.cancelled() => return,
        };
        let reachable = verdict.0 == "True";
        // discovered again every DISCOVER_EVERY rounds, and sooner (every
        // REDISCOVER_EVERY) after one that found nothing (it failed: an overloaded API
        // server's /api timing out), whose timeout delays that round's status post
        // (the version likewise while it is not known)
        let due = round.is_multiple_of(DISCOVER_EVERY)
            || (round.is_multiple_of(REDISCOVER_EVERY)
                && (version.is_none() || apis.as_ref().is_some_and(|a| a.enablements.is_empty())));
        if reachable && (apis.is_none() || due) {
            if let Ok(v) = super::within(super::CALL_TIMEOUT, member.apiserver_version()).await {
                version = Some(v.git_version);
            }
            apis = Some(discover(&member, DISCOVERY_TIMEOUT).await);
        }
        round = round.wrapping_add(1);
        match super::within(super::CALL_TIMEOUT, api.get_opt(&name)).await {
            Ok(Some(current)) => {
                let now = jiff::Timestamp::now();
                let observed = ready_condition(verdict, Some(&current), &Time(now));
                let ready =
                    damper.adjust(ready_of(&current), observed, super::steady_now(), &timing);
                let complete = apis.as_ref().map(|a| {
                    (
                        a.enablements.clone(),
                        condition(
                            conditions::COMPLETE_API_ENABLEMENTS,
                            a.verdict(),
                            Some(&current),
                            &Time(now),
                        ),
                    )
                });
                let summary = usage.summary(&current.spec);
                let body = status_body(
                    &ready,
                    version.as_deref(),
                    complete.as_ref(),
                    summary.as_ref(),
                    Some(&current),
                );
                let before = ready_of(&current).map(|c| c.status.clone());
                // refused (409) if the monitor wrote in between: the next round decides
                // again from what it wrote
                let owned = if summary.is_some() {
                    FROM_THE_NODES
                } else {
                    &[]
                };
                match post_status(&api, MANAGER, &current, &body, owned).await {
                    Ok(apply::Outcome::Written)
                        if before.as_deref() != Some(ready.status.as_str()) =>
                    {
                        tracing::info!(cluster = %name, status = %ready.status, reason = %ready.reason, "cluster readiness changed");
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "cannot post the cluster's status; retrying")
                    }
                }
            }
            Ok(None) => {
                tracing::debug!(cluster = %name, "the Cluster is gone; its workers stop soon")
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster from the hub; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(timing.status_interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests;
