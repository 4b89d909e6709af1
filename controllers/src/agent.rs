//! `causeway agent`: runs inside a Pull member and makes only outbound connections to
//! the hub. It runs the member's workers ([`crate::member::spawn_workers`]: cluster
//! status, MCS exporter into its execution namespace, MCS importer) and renews the
//! cluster's Lease, which the hub's monitor watches. It stops when its Cluster is
//! removed from the hub.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode};
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::clusters::options::Timing;
use crate::metrics::Metrics;

/// Checks that `name` is a Pull Cluster on the hub describing this very member, and
/// returns its cluster id.
pub async fn check_registration(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
) -> anyhow::Result<String> {
    let cluster = Api::<Cluster>::all(hub.clone())
        .get_opt(name)
        .await
        .with_context(|| format!("reading Cluster {name} from the hub"))?
        .with_context(|| {
            format!("no Cluster \"{name}\" on the hub: register the member first with `causeway register {name}`")
        })?;
    if cluster.spec.sync_mode != ClusterSyncMode::Pull {
        bail!(
            "Cluster \"{name}\" is a Push member: the hub controller runs its workers, no agent is needed (re-register it with `causeway register` for pull mode)"
        );
    }
    if let Some(want) = &cluster.spec.kube_system_uid {
        let have = crate::clusters::join::kube_system_uid(member).await?;
        if &have != want {
            bail!(
                "this agent runs in another cluster than the one registered as \"{name}\" (kube-system uid {have}, registered {want}); check --kubeconfig/--cluster"
            );
        }
    }
    Ok(cluster
        .cluster_id()
        .map(String::from)
        .unwrap_or_else(|| name.to_string()))
}

/// Runs the agent of Pull member `name` until `stop` or until its Cluster is removed.
pub async fn run(
    hub: kube::Client,
    member: kube::Client,
    name: String,
    timing: Timing,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let id = check_registration(&hub, &member, &name).await?;
    let identity = format!(
        "{}_{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "agent".into()),
        std::process::id()
    );
    let work = stop.child_token();
    tokio::spawn(crate::clusters::lease::run(
        hub.clone(),
        name.clone(),
        identity,
        timing.lease_duration(),
        work.clone(),
    ));
    let caches = Arc::new(crate::mcs::HubCaches::start(&hub, &work));
    crate::member::spawn_workers(
        crate::member::Member {
            name: name.clone(),
            id: id.clone(),
            client: member,
            pull: true,
        },
        hub.clone(),
        caches,
        metrics.clone(),
        &crate::member::WorkerOptions {
            timing: timing.clone(),
        },
        work.clone(),
    );
    metrics.set_members(1);
    metrics.set_ready(true);
    tracing::info!(cluster = %name, id = %id, "agent running");
    let clusters: Api<Cluster> = Api::all(hub);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(timing.status_interval.max(Duration::from_secs(1))) => {}
            _ = stop.cancelled() => return Ok(()),
        }
        match clusters.get_opt(&name).await {
            Ok(Some(c)) if c.metadata.deletion_timestamp.is_none() => {}
            Ok(_) => {
                tracing::info!(cluster = %name, "the Cluster was removed from the hub: agent stopping");
                work.cancel();
                return Ok(());
            }
            Err(e) => {
                tracing::debug!(cluster = %name, error = %e, "cannot read the Cluster from the hub")
            }
        }
    }
}
