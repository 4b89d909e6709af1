//! EPS-7, stale endpoints with a TTL: a control-plane outage is not a data-plane
//! outage. While a member's Cluster is not Ready (its `Ready` condition is False or
//! Unknown), the importers and the proxy keep serving its last known endpoints, and
//! the ServiceImports and MultiClusterIngresses it serves say so (`EndpointsStale`).
//! Once it has been not Ready for `--stale-endpoints-ttl` its endpoints are withdrawn
//! everywhere (filtered, not deleted: a reachable Push member's exporter would write
//! them back), until it is Ready again. The `Ready` condition is flap-damped by the
//! cluster status controller; nothing is damped again here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::schedule::failover::not_ready_since;
use causeway_crds::mcs::conditions::service_import::{ENDPOINTS_STALE, reason};
use causeway_runtime::reflect::Wake;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

/// One cluster that is not Ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// When it stopped being Ready (see [`not_ready_since`]).
    pub since: jiff::Timestamp,
    /// When its endpoints are (or were) withdrawn: `since` + the TTL.
    pub expires: jiff::Timestamp,
}

/// Which clusters are stale at `now`, and which of them are past the TTL.
#[derive(Clone, Debug, Default)]
pub struct Staleness {
    clusters: BTreeMap<String, Stale>,
    now: jiff::Timestamp,
}

impl Staleness {
    /// The stale clusters among `clusters` (by cluster id), with `ttl`, at `now`. A
    /// Cluster is stale while its `Ready` condition exists and is not True, since it
    /// first stopped being Ready: the registry's not-ready/unreachable taint keeps its
    /// `timeAdded` when Ready moves between False and Unknown (which resets the
    /// condition's `lastTransitionTime`), so such a move does not restart the TTL.
    /// One without a Ready condition yet is not stale.
    pub fn new(clusters: &[Arc<Cluster>], ttl: Duration, now: jiff::Timestamp) -> Self {
        let clusters = clusters
            .iter()
            .filter_map(|c| {
                let since = not_ready_since(c)?;
                let expires = since.checked_add(ttl).unwrap_or(jiff::Timestamp::MAX);
                let id = c
                    .cluster_id()
                    .map(String::from)
                    .unwrap_or_else(|| c.name_any());
                Some((id, Stale { since, expires }))
            })
            .collect();
        Staleness { clusters, now }
    }

    /// Whether `cluster`'s endpoints are withdrawn: not Ready for the whole TTL.
    pub fn withdrawn(&self, cluster: &str) -> bool {
        self.clusters
            .get(cluster)
            .is_some_and(|s| s.expires <= self.now)
    }

    /// `cluster`'s staleness, if it is not Ready.
    pub fn get(&self, cluster: &str) -> Option<&Stale> {
        self.clusters.get(cluster)
    }

    /// How long until the next stale cluster reaches the TTL (None: none will): the
    /// loops wake up then, as no watch event marks that moment.
    pub fn next_expiry(&self) -> Option<Duration> {
        self.clusters
            .values()
            .filter(|s| s.expires > self.now)
            .map(|s| s.expires.duration_since(self.now).unsigned_abs())
            .min()
    }

    /// The `EndpointsStale` condition of an object served by `serving` clusters: True
    /// while any of them is stale (reason `EndpointsWithdrawn` once one is past the TTL,
    /// else `ClusterNotReady`), False once they are all Ready again, and absent for an
    /// object that never had it. `prev` are the object's current conditions.
    pub fn condition<'a>(
        &self,
        serving: impl IntoIterator<Item = &'a str>,
        prev: &[Condition],
    ) -> Option<Condition> {
        let serving: BTreeSet<&str> = serving.into_iter().collect();
        let mut withdrawn = false;
        let parts: Vec<String> = serving
            .iter()
            .filter_map(|c| Some((c, self.clusters.get(*c)?)))
            .map(|(c, s)| {
                if s.expires <= self.now {
                    withdrawn = true;
                    format!(
                        "cluster {c} is not Ready since {}: its endpoints are withdrawn since {} until it is Ready again",
                        s.since, s.expires
                    )
                } else {
                    format!(
                        "cluster {c} is not Ready since {}: its last known endpoints are served until {}, then withdrawn",
                        s.since, s.expires
                    )
                }
            })
            .collect();
        let (status, why, message) = match (parts.is_empty(), withdrawn) {
            (true, _) => {
                prev.iter().find(|c| c.type_ == ENDPOINTS_STALE)?;
                (
                    "False",
                    reason::CLUSTERS_READY,
                    "every cluster serving it is Ready".to_string(),
                )
            }
            (false, true) => ("True", reason::ENDPOINTS_WITHDRAWN, parts.join("; ")),
            (false, false) => ("True", reason::CLUSTER_NOT_READY, parts.join("; ")),
        };
        Some(Condition {
            type_: ENDPOINTS_STALE.into(),
            status: status.into(),
            reason: why.into(),
            message,
            last_transition_time: crate::condition::since(
                prev,
                ENDPOINTS_STALE,
                status,
                &Time(self.now),
            ),
            observed_generation: None,
        })
    }
}

/// Wakes a loop for a full round when the next stale cluster reaches the TTL.
#[derive(Default)]
pub struct ExpiryTimer {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ExpiryTimer {
    /// Replaces the pending wake-up with one `after` from now (none for None).
    pub fn set(&mut self, wake: &Arc<Wake>, after: Option<Duration>) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.task = after.map(|d| {
            let wake = wake.clone();
            tokio::spawn(async move {
                // a little late rather than early: the round must see the expiry
                tokio::time::sleep(d + Duration::from_millis(10)).await;
                wake.mark_full();
            })
        });
    }
}

impl Drop for ExpiryTimer {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
