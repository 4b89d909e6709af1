//! When each Cluster on the hub was first seen `Ready=True`, then (after that) `Ready=Unknown`
//! from the monitor and tainted `unreachable`: one hub watch, stamped on arrival.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::bail;
use causeway_controllers::clusters::status::ready_of;
use causeway_crds::federation::cluster::{Cluster, conditions, taints};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

/// First sightings for one Cluster.
#[derive(Debug, Default, Clone, Copy)]
pub struct Mark {
    /// `Ready=True`.
    pub ready: Option<Instant>,
    /// `Ready=Unknown` (`ClusterStatusUnknown`) after it was Ready.
    pub unknown: Option<Instant>,
    /// The `unreachable` taint after it was Ready.
    pub tainted: Option<Instant>,
}

impl Mark {
    fn see(&mut self, c: &Cluster, at: Instant) {
        let ready = ready_of(c);
        if ready.is_some_and(|r| r.status == "True") {
            self.ready.get_or_insert(at);
        }
        if self.ready.is_none() {
            return;
        }
        if ready.is_some_and(|r| {
            r.status == "Unknown" && r.reason == conditions::REASON_CLUSTER_STATUS_UNKNOWN
        }) {
            self.unknown.get_or_insert(at);
        }
        if c.spec.taints.iter().any(|t| t.key == taints::UNREACHABLE) {
            self.tainted.get_or_insert(at);
        }
    }
}

/// The hub watch and what it saw.
#[derive(Clone)]
pub struct Marks(Arc<Mutex<HashMap<String, Mark>>>);

impl Marks {
    /// Watches the hub's Clusters until `stop`.
    pub fn watch(hub: kube::Client, stop: CancellationToken) -> Marks {
        let marks = Marks(Default::default());
        let seen = marks.0.clone();
        tokio::spawn(async move {
            let events = watcher(Api::<Cluster>::all(hub), watcher::Config::default())
                .default_backoff()
                .applied_objects();
            let mut events = std::pin::pin!(events);
            loop {
                let c = tokio::select! {
                    c = events.next() => c,
                    _ = stop.cancelled() => return,
                };
                match c {
                    Some(Ok(c)) => seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(c.name_any())
                        .or_default()
                        .see(&c, Instant::now()),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "hub Cluster watch failed; retrying")
                    }
                    None => return,
                }
            }
        });
        marks
    }

    /// What was seen of `name` so far.
    pub fn get(&self, name: &str) -> Mark {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied()
            .unwrap_or_default()
    }

    /// Waits until `pick` gives an instant for every one of `names` and returns them in
    /// that order; fails after `limit`, naming the clusters still missing.
    pub async fn wait_all(
        &self,
        names: &[String],
        pick: fn(&Mark) -> Option<Instant>,
        what: &str,
        limit: Duration,
    ) -> anyhow::Result<Vec<Instant>> {
        let deadline = Instant::now() + limit;
        loop {
            let got: Vec<Option<Instant>> = names.iter().map(|n| pick(&self.get(n))).collect();
            if got.iter().all(Option::is_some) {
                return Ok(got.into_iter().flatten().collect());
            }
            if Instant::now() > deadline {
                let missing: Vec<&str> = names
                    .iter()
                    .zip(&got)
                    .filter(|(_, g)| g.is_none())
                    .map(|(n, _)| n.as_str())
                    .collect();
                bail!(
                    "{} of {} clusters not {what} within {} s: {}",
                    missing.len(),
                    names.len(),
                    limit.as_secs(),
                    missing.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
