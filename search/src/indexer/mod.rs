//! The indexer: for every Ready member and every configured resource type
//! ([`ResourceSpec`]) that applies to it, one synchro streams the member's objects into
//! the [`Store`] (see `synchro.rs` for restart consistency, K.71, and storage outages,
//! K.72). The fleet comes from the registry as a [`Fleet`] on a watch channel:
//!
//! - a member that becomes Ready (or whose client changes: a new fingerprint) gets its
//!   synchros (again);
//! - a member that stops being Ready loses its synchros, but its objects stay in the
//!   store while it is registered (the last known state is still worth finding);
//! - a member that is no longer registered is purged from the store, and so is every
//!   cluster the store holds that is not registered when the indexer starts. A purge is
//!   not cancelled by a new registration of the name (a Cluster deleted and created
//!   again may be another physical cluster: what is stored under the name is the
//!   departed one's); the name's synchros start once it is done.

mod health;
pub(crate) mod listwatch;
mod metrics;
mod spec;
mod synchro;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use metrics::{IndexerMetrics, TypeLabels};
pub use spec::{ResourceSpec, SpecError, default_resources, parse_all};

use crate::positions::Positions;
use crate::store::Store;
use health::Health;
use synchro::Synchro;

/// How often a purge that failed (store unavailable) is tried again.
const PURGE_RETRY: Duration = Duration::from_secs(2);

/// A member the indexer may read.
#[derive(Clone)]
pub struct Member {
    /// A client of the member.
    pub client: kube::Client,
    /// Changes whenever `client` does (e.g. new credentials or endpoint): the member's
    /// synchros restart with the new client.
    pub fingerprint: String,
}

/// The members as the registry knows them.
#[derive(Clone, Default)]
pub struct Fleet {
    /// Members that are Ready, by name: indexed (if they are also registered).
    pub ready: BTreeMap<String, Member>,
    /// Every registered member, Ready or not: their objects are kept. A member that
    /// leaves this set is purged from the store (whole, even if its name comes back
    /// meanwhile).
    pub registered: BTreeSet<String>,
}

/// A running synchro.
struct Running {
    fingerprint: String,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Indexes the fleet into `store` until `stop`: one synchro per Ready member and
/// resource spec that applies to it, restarted when the member's fingerprint changes,
/// stopped when it is no longer Ready; members no longer registered are purged (and a
/// name registered again gets its synchros once its purge is done).
///
/// The channel's first value must already be the registry's complete view: clusters
/// the store holds that it does not register are purged at once (the store is a
/// cache, so a wrong purge costs a relist, not data — but a relist of the whole fleet).
/// `resources` should come from [`parse_all`] (no type twice for one member).
/// `positions` shows the API where the store is in every member's types (K.73).
pub async fn run(
    store: Store,
    resources: Vec<ResourceSpec>,
    mut fleet: watch::Receiver<Fleet>,
    metrics: IndexerMetrics,
    positions: Positions,
    stop: CancellationToken,
) {
    let health = Health::new(metrics.clone());
    let pinger = tokio::spawn(
        health
            .clone()
            .watch_store(store.clone(), stop.child_token()),
    );
    let lists = Arc::new(Semaphore::new(synchro::LISTS));
    let mut running: BTreeMap<(String, usize), Running> = BTreeMap::new();
    let mut purge = Purge::default();
    let mut registered = BTreeSet::new();
    let mut fleet_open = true;
    let shared = || Shared {
        metrics: &metrics,
        health: &health,
        lists: &lists,
        positions: &positions,
    };
    loop {
        let now = fleet.borrow_and_update().clone();
        purge
            .clusters
            .extend(registered.difference(&now.registered).cloned());
        registered = now.registered.clone();
        positions.set_registered(&registered);
        let purging = purge.clusters.clone();
        reconcile(
            &mut running,
            &now,
            &purging,
            &resources,
            &store,
            shared(),
            &stop,
        )
        .await;
        // a purge gives way (between two of its batches) to a fleet change or a stop
        let interrupted = || stop.is_cancelled() || fleet.has_changed().unwrap_or(false);
        purge
            .run(
                &registered,
                &resources,
                &mut running,
                &store,
                &metrics,
                &interrupted,
            )
            .await;
        // a member registered again while it was purged gets its synchros now that the
        // purge is done (after a fleet change, the next round does it)
        if purge.clusters != purging && !interrupted() {
            let purging = purge.clusters.clone();
            reconcile(
                &mut running,
                &now,
                &purging,
                &resources,
                &store,
                shared(),
                &stop,
            )
            .await;
        }
        tokio::select! {
            r = fleet.changed(), if fleet_open => fleet_open = r.is_ok(),
            _ = tokio::time::sleep(PURGE_RETRY), if purge.pending() => {}
            _ = stop.cancelled() => break,
        }
    }
    for (_, r) in std::mem::take(&mut running) {
        r.stop.cancel();
        let _ = r.task.await;
    }
    let _ = pinger.await;
}

/// What every synchro shares.
struct Shared<'a> {
    metrics: &'a IndexerMetrics,
    health: &'a Health,
    lists: &'a Arc<Semaphore>,
    positions: &'a Positions,
}

/// Starts and stops synchros to match the fleet; none for the clusters `purging` (a
/// member that left and is registered again waits until what was stored of it is
/// purged).
async fn reconcile(
    running: &mut BTreeMap<(String, usize), Running>,
    fleet: &Fleet,
    purging: &BTreeSet<String>,
    resources: &[ResourceSpec],
    store: &Store,
    shared: Shared<'_>,
    stop: &CancellationToken,
) {
    let wanted = |(cluster, i): &(String, usize), fingerprint: &str| {
        fleet.ready.get(cluster).is_some_and(|m| {
            m.fingerprint == fingerprint
                && fleet.registered.contains(cluster)
                && !purging.contains(cluster)
                && resources[*i].applies_to(cluster)
        })
    };
    let stale: Vec<(String, usize)> = running
        .iter()
        .filter(|(k, r)| !wanted(k, &r.fingerprint))
        .map(|(k, _)| k.clone())
        .collect();
    for key in stale {
        if let Some(r) = running.remove(&key) {
            tracing::info!(cluster = %key.0, resource = %resources[key.1], "stopping the member's watch");
            r.stop.cancel();
            let _ = r.task.await;
        }
    }
    for (cluster, member) in &fleet.ready {
        if !fleet.registered.contains(cluster) || purging.contains(cluster) {
            continue;
        }
        for (i, spec) in resources.iter().enumerate() {
            let key = (cluster.clone(), i);
            if !spec.applies_to(cluster) || running.contains_key(&key) {
                continue;
            }
            let token = stop.child_token();
            let synchro = Synchro {
                cluster: cluster.clone(),
                spec: spec.clone(),
                client: member.client.clone(),
                store: store.clone(),
                metrics: shared.metrics.clone(),
                health: shared.health.clone(),
                lists: shared.lists.clone(),
                positions: shared.positions.clone(),
                stop: token.clone(),
            };
            running.insert(
                key,
                Running {
                    fingerprint: member.fingerprint.clone(),
                    stop: token,
                    task: tokio::spawn(synchro.run()),
                },
            );
        }
    }
}

/// The clusters to purge from the store.
#[derive(Default)]
struct Purge {
    /// Whether the store's clusters were read and the types no spec covers for a
    /// registered member purged (once, at start).
    scanned: bool,
    /// Clusters not purged yet: members that left the fleet, and the store's clusters
    /// that were not registered at start. One is purged whole even if its name is
    /// registered again meanwhile (a new Cluster of the name may be another physical
    /// cluster); its synchros wait until then.
    clusters: BTreeSet<String>,
}

impl Purge {
    /// At start: the store's clusters, and, for the registered ones, the objects of
    /// types no resource spec covers for them any more (a type or a member dropped from
    /// the configuration must not stay searchable) deleted, by batches of the synchros'
    /// size. The deletes stop between two batches once `interrupted`: then the second
    /// value is false, and the scan is to run again (what it deleted stays deleted).
    async fn scan(
        registered: &BTreeSet<String>,
        resources: &[ResourceSpec],
        store: &Store,
        metrics: &IndexerMetrics,
        interrupted: &(dyn Fn() -> bool + Sync),
    ) -> crate::store::StoreResult<(Vec<String>, bool)> {
        let clusters = store.clusters().await?;
        let types = store.types().await?;
        for cluster in clusters.iter().filter(|c| registered.contains(*c)) {
            for t in &types {
                let covered = resources
                    .iter()
                    .any(|r| r.gvr == t.gvr && r.applies_to(cluster));
                if covered {
                    continue;
                }
                let stored = store.versions(cluster, &t.gvr).await?;
                if stored.is_empty() {
                    continue;
                }
                // by batches, each its own delete (transaction), the keys of each built
                // when it is reached: not every key of the type in one
                let mut n = 0;
                let mut chunks = synchro::key_chunks(cluster, &t.gvr, &stored).peekable();
                while let Some(chunk) = chunks.next() {
                    let deleted = store.delete(chunk).await?;
                    metrics.purged.inc_by(deleted);
                    n += deleted;
                    if chunks.peek().is_some() && interrupted() {
                        tracing::info!(%cluster, resource = ?t.gvr, objects = n, "purge of a type no longer indexed for this member paused for a fleet change; going on after it");
                        return Ok((clusters.clone(), false));
                    }
                }
                tracing::info!(%cluster, resource = ?t.gvr, objects = n, "no longer indexed for this member: its objects are purged from the search store");
            }
        }
        Ok((clusters, true))
    }

    /// Whether there is work left (to retry).
    fn pending(&self) -> bool {
        !self.scanned || !self.clusters.is_empty()
    }

    /// Purges the clusters that left the fleet (after their synchros stopped), first
    /// adding, once, the store's clusters that are not registered; keeps what failed. A
    /// cluster is purged by batches (each its own transaction, bounded), and the purge
    /// stops between two once `interrupted` (the fleet changed, or the indexer stops):
    /// what is left of it is kept for the next run.
    async fn run(
        &mut self,
        registered: &BTreeSet<String>,
        resources: &[ResourceSpec],
        running: &mut BTreeMap<(String, usize), Running>,
        store: &Store,
        metrics: &IndexerMetrics,
        interrupted: &(dyn Fn() -> bool + Sync),
    ) {
        if !self.scanned {
            match Self::scan(registered, resources, store, metrics, interrupted).await {
                Ok((stored, done)) => {
                    self.clusters
                        .extend(stored.into_iter().filter(|c| !registered.contains(c)));
                    self.scanned = done;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the store's clusters yet; retrying")
                }
            }
        }
        // (a cluster that left is purged even if its name is registered again: what is
        // stored under it is the departed member's)
        for cluster in std::mem::take(&mut self.clusters) {
            let keys: Vec<(String, usize)> = running
                .keys()
                .filter(|(c, _)| *c == cluster)
                .cloned()
                .collect();
            for key in keys {
                if let Some(r) = running.remove(&key) {
                    r.stop.cancel();
                    let _ = r.task.await;
                }
            }
            if interrupted() {
                self.clusters.insert(cluster);
                continue;
            }
            let mut n = 0;
            let purged = loop {
                match store.purge_cluster_batch(&cluster).await {
                    Ok((deleted, done)) => {
                        metrics.purged.inc_by(deleted);
                        n += deleted;
                        if done || interrupted() {
                            break Ok(done);
                        }
                    }
                    Err(e) => break Err(e),
                }
            };
            match purged {
                Ok(true) => {
                    tracing::info!(%cluster, objects = n, "member left the fleet: its objects are purged from the search store");
                }
                Ok(false) => {
                    tracing::info!(%cluster, objects = n, "purge of a member that left paused for a fleet change; going on after it");
                    self.clusters.insert(cluster);
                }
                Err(e) => {
                    tracing::warn!(%cluster, error = %e, "cannot purge a member that left; retrying");
                    self.clusters.insert(cluster);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
