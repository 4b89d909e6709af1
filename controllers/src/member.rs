//! The loops that run for one member cluster, listed once: the hub controller starts
//! them for each Push member it can reach; the pull-mode agent will start the same
//! list inside a Pull member. Adding a per-member controller means adding it here.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::clusters::options::Timing;
use crate::mcs::{HubCaches, exporter, importer};
use crate::metrics::Metrics;

/// One member, as its workers see it.
#[derive(Clone)]
pub struct Member {
    /// The Cluster object's name on the hub.
    pub name: String,
    /// The cluster id (the source-cluster label value).
    pub id: String,
    /// A client for the member's API server.
    pub client: kube::Client,
    /// Pull mode: the workers run in the member's agent, and its exports go to the
    /// hub through its execution namespace (the agent may write nothing else).
    pub pull: bool,
}

/// Settings of the per-member workers.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Probing and flap damping of the member's health.
    pub timing: Timing,
}

/// Spawns every per-member worker (cluster status, MCS exporter, work applier,
/// clusterset membership properties, MCS importer); they run until `stop`. The handles let a caller wait until they are all
/// gone (before it withdraws what they wrote, say).
pub fn spawn_workers(
    m: Member,
    hub: kube::Client,
    caches: Arc<HubCaches>,
    metrics: Arc<Metrics>,
    opts: &WorkerOptions,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let status = tokio::spawn(crate::clusters::status::run(
        m.name.clone(),
        m.client.clone(),
        hub.clone(),
        opts.timing.clone(),
        stop.clone(),
    ));
    let target = if m.pull {
        exporter::Target::Outbox {
            cluster: m.name.clone(),
        }
    } else {
        exporter::Target::Hub
    };
    let export = tokio::spawn(exporter::run_to(
        m.id.clone(),
        m.client.clone(),
        hub.clone(),
        caches.clone(),
        target,
        metrics.clone(),
        stop.clone(),
    ));
    let apply = tokio::spawn(crate::propagation::applier::run(
        crate::propagation::applier::Applier {
            cluster: m.name.clone(),
            member: m.client.clone(),
            hub: hub.clone(),
            limit: crate::clusters::CALL_TIMEOUT,
        },
        caches.clone(),
        metrics.clone(),
        stop.clone(),
    ));
    let membership = tokio::spawn(crate::clusters::membership::run(
        m.name.clone(),
        m.id.clone(),
        m.client.clone(),
        hub.clone(),
        m.pull,
        stop.clone(),
    ));
    let import = tokio::spawn(importer::run(
        m.id,
        m.client,
        hub,
        caches,
        metrics,
        opts.timing.stale_endpoints_ttl,
        stop,
    ));
    vec![status, export, apply, membership, import]
}
