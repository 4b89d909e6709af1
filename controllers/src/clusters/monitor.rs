//! The hub's cluster monitor (A.4, A.5), for every member whatever its mode:
//! - Pull members: when neither the agent's Lease renewal nor the Cluster's `Ready`
//!   condition changed for the monitor grace period (the startup grace period before
//!   the agent ever posted), `Ready` becomes `Unknown` (`ClusterStatusUnknown`, or
//!   `ClusterStatusNeverUpdated`). A renewed lease alone keeps the cluster from going
//!   Unknown. Push members are probed by the hub itself, so their Ready is never aged.
//! - Every member: the `Ready` condition maps to NoSchedule taints — False (or no
//!   condition yet) → `not-ready`, Unknown → `unreachable`, True → neither; other
//!   taints are left alone.
//!
//! Pure parts: [`Freshness::verdict`] and [`desired_taints`]; [`run`] is the loop.

use std::collections::HashMap;
use std::time::Duration;

use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode, conditions, taints};
use causeway_crds::names::cluster_lease_name;
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::options::Timing;
use super::status::ready_of;
use causeway_runtime::reflect::{Wake, cache};

/// Field manager of the `Ready=Unknown` the monitor posts.
pub const MANAGER: &str = "causeway-cluster-monitor";

/// What the monitor last saw of one Pull member, and when that last changed (the
/// hub's own clock: members' clocks are never compared with it).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    renew: Option<String>,
    ready: Option<(String, String, String)>,
    changed_at: jiff::Timestamp,
}

/// Per-member freshness of Pull members' reports.
#[derive(Debug, Default)]
pub struct Freshness {
    seen: HashMap<String, Seen>,
}

impl Freshness {
    /// Pure but for the memory of what was seen: the `Ready=Unknown` condition to post
    /// for `cluster`, if its agent has gone silent for too long.
    pub fn verdict(
        &mut self,
        cluster: &Cluster,
        lease: Option<&Lease>,
        now: jiff::Timestamp,
        timing: &Timing,
    ) -> Option<Condition> {
        if cluster.spec.sync_mode != ClusterSyncMode::Pull {
            return None;
        }
        let ready = ready_of(cluster);
        let renew = lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.to_string());
        let ready_key = ready.map(|c| {
            (
                c.status.clone(),
                c.reason.clone(),
                c.last_transition_time.0.to_string(),
            )
        });
        let created = cluster
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(now);
        let name = cluster.name_any();
        // first sight: a lease or condition already there counts as a report now (as in
        // Karmada); with neither, the clock runs from the Cluster's creation
        let first = if renew.is_some() || ready_key.is_some() {
            now
        } else {
            created
        };
        let entry = self.seen.entry(name.clone()).or_insert_with(|| Seen {
            renew: renew.clone(),
            ready: ready_key.clone(),
            changed_at: first,
        });
        if entry.renew != renew || entry.ready != ready_key {
            entry.renew = renew;
            entry.ready = ready_key;
            entry.changed_at = now;
        }
        let never_posted = ready.is_none_or(|c| {
            c.status == "Unknown" && c.reason == conditions::REASON_CLUSTER_STATUS_NEVER_UPDATED
        });
        let grace = if never_posted {
            timing.startup_grace_period
        } else {
            timing.monitor_grace_period
        };
        // (a creation time ahead of this clock, a skew between the API server's and
        // ours, is no silence at all)
        let silent_for = match now.duration_since(entry.changed_at) {
            d if d.is_negative() => std::time::Duration::ZERO,
            d => d.unsigned_abs(),
        };
        if silent_for < grace || ready.is_some_and(|c| c.status == "Unknown") {
            return None;
        }
        let since = Time(entry.changed_at);
        let (reason, message) = if never_posted {
            (
                conditions::REASON_CLUSTER_STATUS_NEVER_UPDATED,
                format!(
                    "the causeway agent of {name} never posted a status (registered at {}); check that `causeway agent --cluster {name}` runs in the member and can reach the hub",
                    since.0
                ),
            )
        } else {
            // what the agent said last, when it said the member was failing (an agent
            // whose member's API server stopped answering posts that, then steps down)
            let last = ready
                .filter(|c| c.status == "False")
                .map(|c| format!("; its last report: {} ({})", c.reason, c.message))
                .unwrap_or_default();
            (
                conditions::REASON_CLUSTER_STATUS_UNKNOWN,
                format!(
                    "the causeway agent of {name} stopped posting status: no lease renewal or status change since {} (grace period {} s); the member is unreachable from the hub or its agent is down{last}",
                    since.0,
                    grace.as_secs()
                ),
            )
        };
        Some(Condition {
            type_: conditions::READY.into(),
            status: "Unknown".into(),
            reason: reason.into(),
            message,
            observed_generation: cluster.metadata.generation,
            last_transition_time: Time(now),
        })
    }

    /// Forgets members that are no longer registered.
    pub fn retain(&mut self, names: &std::collections::BTreeSet<String>) {
        self.seen.retain(|n, _| names.contains(n));
    }
}

/// Pure (A.5): the Cluster's taints for its `Ready` condition, or None when they are
/// already right. Taints other than the two managed ones are kept as they are; a
/// managed taint that stays keeps its `timeAdded`, and one that replaces the other (Ready
/// moving between False and Unknown) takes the other's: failover counts from when the
/// member stopped being Ready, not from its last change of failure.
pub fn desired_taints(
    current: &[Taint],
    ready: Option<&Condition>,
    now: &Time,
) -> Option<Vec<Taint>> {
    let (want, drop): (&[&str], &[&str]) = match ready.map(|c| c.status.as_str()) {
        Some("True") => (&[], &[taints::NOT_READY, taints::UNREACHABLE]),
        Some("Unknown") => (&[taints::UNREACHABLE], &[taints::NOT_READY]),
        _ => (&[taints::NOT_READY], &[taints::UNREACHABLE]),
    };
    let is_ours = |t: &Taint, key: &str| t.key == key && t.effect == "NoSchedule";
    let since = current
        .iter()
        .filter(|t| drop.iter().any(|k| is_ours(t, k)))
        .filter_map(|t| t.time_added.clone())
        .min_by_key(|t| t.0)
        .unwrap_or_else(|| now.clone());
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| !drop.iter().any(|k| is_ours(t, k)))
        .cloned()
        .collect();
    for key in want {
        if !out.iter().any(|t| is_ours(t, key)) {
            out.push(Taint {
                key: key.to_string(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: Some(since.clone()),
            });
        }
    }
    (out != current).then_some(out)
}

/// Runs the monitor until `stop`.
pub async fn run(
    hub: kube::Client,
    caches: std::sync::Arc<crate::mcs::HubCaches>,
    timing: Timing,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let clusters = caches.clusters.subscribe(wake.clone());
    let leases = cache(
        Api::<Lease>::namespaced(hub.clone(), SYSTEM_NAMESPACE),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "monitor cluster leases",
        None,
    );
    if clusters.wait_until_ready().await.is_err() || leases.wait_until_ready().await.is_err() {
        return;
    }
    tracing::info!("cluster monitor running");
    let api: Api<Cluster> = Api::all(hub.clone());
    let mut fresh = Freshness::default();
    loop {
        let leases_now: HashMap<String, std::sync::Arc<Lease>> = leases
            .state()
            .into_iter()
            .map(|l| (l.name_any(), l))
            .collect();
        let all = clusters.state();
        // silence is judged as of the leases just read: writes for earlier clusters in
        // this round may take a while, during which later clusters' agents renew
        let steady = super::steady_now();
        fresh.retain(&all.iter().map(|c| c.name_any()).collect());
        for c in all
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            let name = c.name_any();
            // the clock per cluster: writes for earlier clusters may have taken a while
            let now = jiff::Timestamp::now();
            let lease = leases_now.get(&cluster_lease_name(&name));
            if c.spec.sync_mode == ClusterSyncMode::Pull && lease.is_none() {
                // the agent may only renew its Lease: put it back if someone deleted it
                recreate_lease(&hub, &name).await;
            }
            if let Some(mut unknown) = fresh.verdict(c, lease.map(|l| l.as_ref()), steady, &timing)
            {
                // silence is measured on the steady clock; the API gets wall time
                unknown.last_transition_time = Time(now);
                let body = json!({ "conditions": [unknown] });
                // refused (409) if the agent posted since this round's read
                match super::status::post_status(&api, MANAGER, c, &body, &[]).await {
                    Ok(_) => {
                        tracing::warn!(cluster = %name, reason = %unknown.reason, "cluster status unknown");
                        // the taints follow next round, from the object as written
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(cluster = %name, error = %e, "Ready=Unknown not posted (the agent posted meanwhile, or the hub is slow); next round decides again")
                    }
                }
            }
            if let Some(taints) = desired_taints(&c.spec.taints, ready_of(c), &Time(now)) {
                // optimistic concurrency: a user's taint edit in between makes this fail
                // and the next round recomputes from what they wrote
                let patch = json!({
                    "metadata": {"resourceVersion": c.resource_version()},
                    "spec": {"taints": taints},
                });
                let (pp, merge) = (PatchParams::default(), Patch::Merge(&patch));
                let write = api.patch(&name, &pp, &merge);
                match super::call(super::CALL_TIMEOUT, write).await {
                    Ok(_) => {
                        tracing::info!(cluster = %name, taints = ?taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), "cluster taints updated")
                    }
                    Err(super::CallError::Kube(kube::Error::Api(s))) if s.code == 409 => {
                        tracing::debug!(cluster = %name, "taint update lost a race; retrying")
                    }
                    // refused or unanswered: the scheduler keeps placing on a cluster
                    // whose taints say nothing of its readiness, so it is said
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "cannot update the cluster's taints (the scheduler does not see its readiness until they are); retrying")
                    }
                }
            }
        }
        if wake
            .next_round(&stop, timing.monitor_interval, Duration::from_millis(5))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// Creates the Lease of Pull member `name` again (as `causeway register` made it).
async fn recreate_lease(hub: &kube::Client, name: &str) {
    let api: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let body = super::register::lease_object(name);
    let (lease, pp, apply) = (
        cluster_lease_name(name),
        PatchParams::apply(MANAGER),
        Patch::Apply(&body),
    );
    let write = api.patch(&lease, &pp, &apply);
    match super::within(super::CALL_TIMEOUT, write).await {
        Ok(_) => {
            tracing::warn!(cluster = %name, "the cluster's Lease was missing: created it again")
        }
        Err(e) => tracing::warn!(cluster = %name, error = %e, "cannot create the cluster's Lease"),
    }
}

#[cfg(test)]
mod tests;
