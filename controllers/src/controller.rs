//! `causeway controller` (hub, push mode): follows the member registry and runs the
//! aggregator and the MultiClusterIngress controller on the hub, plus an exporter, an
//! importer and a health probe per reachable member.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use k8s_openapi::api::core::v1::Secret;
use tokio_util::sync::CancellationToken;

use crate::clusters::join::client_for;
use crate::clusters::options::Timing;
use crate::clusters::registry::{MemberSpec, members};
use crate::mcs::aggregator;
use crate::metrics::Metrics;
use causeway_runtime::reflect::Wake;

struct Running {
    spec: MemberSpec,
    stop: CancellationToken,
    /// Ends once every worker of the member has ended.
    task: tokio::task::JoinHandle<()>,
}

/// Settings of the hub controllers.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Probing, flap damping, lease grace periods, stale endpoint TTL.
    pub timing: Timing,
    /// Export and place the backend Services of MultiClusterIngresses
    /// (`--export-mci-backends`, MCI-11; see [`crate::mci::backend_exports`]).
    pub export_mci_backends: bool,
}

/// Runs every hub-side controller until `stop`, with default [`Options`].
pub async fn run(
    hub: kube::Client,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    run_with(hub, metrics, Options::default(), stop).await
}

/// Runs every hub-side controller until `stop`.
pub async fn run_with(
    hub: kube::Client,
    metrics: Arc<Metrics>,
    opts: Options,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let caches = Arc::new(crate::mcs::HubCaches::start(&hub, &stop));
    tokio::spawn(aggregator::run(
        hub.clone(),
        caches.clone(),
        metrics.clone(),
        opts.timing.stale_endpoints_ttl,
        stop.child_token(),
    ));
    tokio::spawn(crate::mcs::relay::run(
        hub.clone(),
        caches.clone(),
        metrics.clone(),
        stop.child_token(),
    ));
    tokio::spawn(crate::mci::run(
        hub.clone(),
        caches.clone(),
        metrics.clone(),
        opts.timing.stale_endpoints_ttl,
        stop.child_token(),
    ));
    tokio::spawn(crate::gateway::run(
        hub.clone(),
        caches.clone(),
        metrics.clone(),
        stop.child_token(),
    ));
    tokio::spawn(crate::propagation::hub::run(
        hub.clone(),
        caches.clone(),
        metrics.clone(),
        stop.child_token(),
    ));
    tokio::spawn(crate::clusters::monitor::run(
        hub.clone(),
        caches.clone(),
        opts.timing.clone(),
        stop.child_token(),
    ));
    if opts.export_mci_backends {
        tokio::spawn(crate::mci::backend_exports::run(
            hub.clone(),
            stop.child_token(),
        ));
    }
    tokio::spawn(crate::clusters::membership::name_the_clusterset(
        hub.clone(),
        stop.child_token(),
    ));
    let wake = Wake::new();
    let (clusters, secrets) = crate::clusters::registry::caches(&hub, wake.clone(), &stop).await?;
    metrics.set_ready(true);
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut finalizing = std::collections::BTreeSet::new();
    // the hub's execution namespaces (labelled with their cluster): one deleted by
    // hand wakes a round, which makes it again
    let execution_namespaces = causeway_runtime::reflect::cache(
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(hub.clone()),
        kube::runtime::watcher::Config::default()
            .labels(causeway_crds::well_known::labels::CLUSTER),
        wake.clone(),
        stop.clone(),
        "hub execution namespaces",
        None,
    );
    // the first rounds make the namespaces of Clusters that joined while no controller
    // ran: wait (bounded) for the list, as for the Clusters
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        execution_namespaces.wait_until_ready(),
    )
    .await;
    // workers being stopped, by member: a leaving member's cleanup waits for them
    let mut stopping: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
    // what was last said about members the hub cannot use, so it is said once
    let mut told = crate::clusters::registry::Told::default();
    loop {
        let cl: Vec<Cluster> = clusters
            .state()
            .iter()
            .map(|c| c.as_ref().clone())
            .collect();
        let se: Vec<Secret> = secrets.state().iter().map(|s| s.as_ref().clone()).collect();
        let (want, unusable) = members(&cl, &se);
        // members gone or with new credentials: stop their workers; a leaving member's
        // cleanup waits for them (`stopping`)
        let outdated: Vec<String> = running
            .iter()
            .filter(|(name, r)| {
                want.get(*name)
                    .is_none_or(|m| m.fingerprint != r.spec.fingerprint)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in outdated {
            let Some(r) = running.remove(&name) else {
                continue;
            };
            r.stop.cancel();
            if want.contains_key(&name) {
                tracing::info!(cluster = %name, "restarting member workers with new credentials");
            } else {
                tracing::info!(cluster = %name, "member removed: stopping its workers");
            }
            stopping.insert(name, r.task);
        }
        stopping.retain(|_, t| !t.is_finished());
        if execution_namespaces.is_ready() {
            let existing: std::collections::BTreeSet<String> = execution_namespaces
                .state()
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            crate::clusters::finalize::ensure_execution_namespaces(
                &hub,
                &clusters.state(),
                &existing,
            )
            .await;
        }
        crate::clusters::finalize::round(
            &hub,
            &clusters.state(),
            &se,
            &mut finalizing,
            &mut stopping,
        )
        .await;
        for u in told.news(&unusable) {
            tracing::warn!(cluster = %u.name, reason = %u.reason, "cluster not usable");
        }
        // every round, not once: a post refused (409: its stopping status worker wrote
        // last) or lost to a slow hub would leave a stale Ready=True; decided on the
        // cached Cluster, so one that already stands costs no request
        for u in &unusable {
            if let Some(c) = cl
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&u.name))
            {
                crate::clusters::status::post_not_ready_on(&hub, c, &u.reason).await;
            }
        }
        for (name, m) in &want {
            if running.contains_key(name) {
                continue;
            }
            let token = stop.child_token();
            let task = start_member(
                m.clone(),
                hub.clone(),
                caches.clone(),
                metrics.clone(),
                opts.timing.clone(),
                token.clone(),
            );
            running.insert(
                name.clone(),
                Running {
                    spec: m.clone(),
                    stop: token,
                    task,
                },
            );
        }
        metrics.set_members(running.len() as i64);
        if wake
            .next_round(&stop, Duration::from_secs(30), Duration::from_millis(5))
            .await
            .is_none()
        {
            return Ok(());
        }
    }
}

/// Starts the workers of a Push member; the handle ends when they all have. While no
/// client can be built for it (a bad CA, say), its Cluster says so and it is retried.
fn start_member(
    m: MemberSpec,
    hub: kube::Client,
    caches: Arc<crate::mcs::HubCaches>,
    metrics: Arc<Metrics>,
    timing: Timing,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = loop {
            match client_for(&m.access).await {
                Ok(c) => break c,
                Err(e) => {
                    let why = format!("cannot build a client for the member: {e:#}");
                    tracing::warn!(cluster = %m.name, error = %why, "member not reachable; retrying");
                    crate::clusters::status::post_not_ready(&hub, &m.name, &why).await;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(timing.status_interval) => {}
                _ = stop.cancelled() => return,
            }
        };
        tracing::info!(cluster = %m.name, id = %m.id, server = %m.access.server, "member workers starting");
        let member = crate::member::Member {
            name: m.name.clone(),
            id: m.id.clone(),
            client,
            pull: false,
        };
        let opts = crate::member::WorkerOptions { timing };
        for w in crate::member::spawn_workers(member, hub, caches, metrics, &opts, stop) {
            let _ = w.await;
        }
    })
}

/// Runs `work` under leader election when `elector` is given (else at once): only the
/// leader works, /readyz and `causeway_leader` follow the election, and a replica that
/// lost the Lease exits (non-zero) to restart as a standby.
pub async fn run_elected<F, Fut>(
    elector: Option<causeway_runtime::leader::Elector>,
    metrics: &Arc<Metrics>,
    stop: &tokio_util::sync::CancellationToken,
    work: F,
) -> anyhow::Result<()>
where
    F: FnOnce(tokio_util::sync::CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let Some(elector) = elector else {
        metrics.set_unelected();
        return work(stop.clone()).await;
    };
    let mut status = elector.status();
    let m = metrics.clone();
    let follow = tokio::spawn(async move {
        loop {
            m.set_leader(&status.borrow_and_update());
            if status.changed().await.is_err() {
                return;
            }
        }
    });
    let ended = elector.run(stop, work).await;
    follow.abort();
    ended
}
