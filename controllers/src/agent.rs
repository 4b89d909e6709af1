//! `causeway agent`: runs inside a Pull member and makes only outbound connections to
//! the hub. It runs the member's workers ([`crate::member::spawn_workers`]: cluster
//! status, MCS exporter into its execution namespace, MCS importer) and renews the
//! cluster's Lease, which the hub's monitor watches. It stops when its Cluster is
//! removed from the hub.

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode};
use causeway_crds::names::cluster_lease_name;
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use crate::clusters::options::Timing;
use crate::metrics::Metrics;

/// Checks that `name` is a Pull Cluster on the hub describing this very member, and
/// returns its cluster id. Errors that may pass (the hub or the member not answering)
/// are retried until `stop`; what needs a person (no such Cluster, a Push Cluster, one
/// being deleted, another cluster's identity) is an error at once.
pub async fn check_registration(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
    stop: &CancellationToken,
) -> anyhow::Result<String> {
    let mut delay = Duration::from_millis(500);
    loop {
        match try_registration(hub, member, name).await {
            Ok(Ok(id)) => return Ok(id),
            Ok(Err(fatal)) => return Err(fatal),
            Err(passing) => {
                tracing::warn!(cluster = %name, error = %format!("{passing:#}"), "cannot check the registration yet; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => bail!("stopped before the registration could be checked"),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// One try: `Err` for what may pass, `Ok(Err)` for what needs a person.
async fn try_registration(
    hub: &kube::Client,
    member: &kube::Client,
    name: &str,
) -> anyhow::Result<anyhow::Result<String>> {
    let cluster = crate::clusters::within(
        crate::clusters::CALL_TIMEOUT,
        Api::<Cluster>::all(hub.clone()).get_opt(name),
    )
    .await
    .map_err(|e| anyhow::anyhow!("reading Cluster {name} from the hub: {e}"))?;
    let Some(cluster) = cluster else {
        return Ok(Err(anyhow::anyhow!(
            "no Cluster \"{name}\" on the hub: register the member first with `causeway register {name}`"
        )));
    };
    if cluster.spec.sync_mode != ClusterSyncMode::Pull {
        return Ok(Err(anyhow::anyhow!(
            "Cluster \"{name}\" is a Push member: the hub controller runs its workers, no agent is needed (re-register it with `causeway register` for pull mode)"
        )));
    }
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Err(anyhow::anyhow!(
            "Cluster \"{name}\" is being removed from the hub: this agent has nothing to do (remove its Deployment)"
        )));
    }
    if let Some(want) = &cluster.spec.kube_system_uid {
        let have = crate::clusters::join::kube_system_uid(member).await?;
        if &have != want {
            return Ok(Err(anyhow::anyhow!(
                "this agent runs in another cluster than the one registered as \"{name}\" (kube-system uid {have}, registered {want}); check --kubeconfig/--cluster"
            )));
        }
    }
    Ok(Ok(cluster
        .cluster_id()
        .map(String::from)
        .unwrap_or_else(|| name.to_string())))
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
    let id = check_registration(&hub, &member, &name, &stop).await?;
    let identity = causeway_runtime::leader::default_identity();
    let work = stop.child_token();
    tokio::spawn(crate::clusters::lease::run(
        hub.clone(),
        name.clone(),
        identity,
        timing.lease_duration(),
        work.clone(),
    ));
    let caches = Arc::new(crate::mcs::HubCaches::start(&hub, &work));
    let workers = crate::member::spawn_workers(
        crate::member::Member {
            name: name.clone(),
            id: id.clone(),
            client: member.clone(),
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
    let clusters: Api<Cluster> = Api::all(hub.clone());
    // since when the hub has refused this agent's identity without a break
    let mut refused_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(timing.status_interval.max(Duration::from_secs(1))) => {}
            _ = stop.cancelled() => return Ok(()),
        }
        let seen =
            tokio::time::timeout(crate::clusters::CALL_TIMEOUT, clusters.get_opt(&name)).await;
        if !matches!(&seen, Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403) {
            refused_since = None;
        }
        let leaving = match &seen {
            Ok(Ok(Some(c))) if c.metadata.deletion_timestamp.is_none() => continue,
            Ok(Ok(Some(c))) => Some(crate::clusters::finalize::preserves(c)),
            Ok(Ok(None)) => None,
            // its identity revoked: it has been unregistered, once the refusal has lasted
            // a lease (a binding deleted and applied again, or a token rotated, refuses
            // for a moment; leaving on one refusal would drop the member's membership)
            Ok(Err(kube::Error::Api(s))) if s.code == 401 || s.code == 403 => {
                let since = *refused_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() < timing.lease_duration() {
                    tracing::warn!(cluster = %name, code = s.code, error = %s.message, "the hub refuses this agent's identity: if the cluster was unregistered, the agent stops once this has lasted a lease; otherwise restore the agent's ServiceAccount, token or RBAC on the hub");
                    continue;
                }
                None
            }
            Ok(Err(e)) => {
                tracing::debug!(cluster = %name, error = %e, "cannot read the Cluster from the hub");
                continue;
            }
            Err(_) => {
                tracing::debug!(cluster = %name, "the hub did not answer in time");
                continue;
            }
        };
        // stop every worker first, so none writes after the withdrawal
        work.cancel();
        for w in workers {
            let _ = tokio::time::timeout(Duration::from_secs(30), w).await;
        }
        if let Some(preserve) = leaving {
            let left = crate::propagation::applier::leave::leave(
                &name,
                &hub,
                &member,
                preserve,
                crate::clusters::CALL_TIMEOUT,
            )
            .await;
            match left {
                Ok(n) => {
                    tracing::info!(cluster = %name, objects = n, preserve, "left the clusterset: propagated objects deleted (or, preserved, no longer managed)")
                }
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not remove the propagated objects; delete objects labelled causeway.io/managed=true by hand")
                }
            }
        }
        match leaving {
            Some(false) => match crate::mcs::leave(&member).await {
                Ok(n) => {
                    tracing::info!(cluster = %name, objects = n, "left the clusterset: imports withdrawn, exports no longer Ready")
                }
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not finish with Multi-Cluster Services: delete objects labelled causeway.io/managed=true by hand, and the Ready condition of ServiceExports")
                }
            },
            Some(true) => {
                tracing::info!(cluster = %name, "left the clusterset with --preserve: imports stay in place")
            }
            None => {
                tracing::info!(cluster = %name, "the Cluster is gone from the hub, or the hub has refused this agent's identity for a lease: agent stopping")
            }
        }
        // gone from the hub one way or another (removed, or the Cluster or this agent's
        // identity deleted): the member is in the clusterset no more
        match crate::clusters::membership::leave(&member).await {
            Ok(true) => {
                tracing::info!(cluster = %name, "left the clusterset: clusterset.k8s.io ClusterProperty deleted")
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(cluster = %name, error = %format!("{e:#}"), "left the clusterset, but could not delete the clusterset.k8s.io ClusterProperty; delete it by hand")
            }
        }
        if leaving.is_some() {
            // tell the hub, which holds the Cluster's finalizer until then
            let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
            let patch = serde_json::json!({"metadata": {"annotations": {crate::clusters::finalize::AGENT_LEFT: "true"}}});
            let (lease, pp, merge) = (
                cluster_lease_name(&name),
                PatchParams::default(),
                Patch::Merge(&patch),
            );
            if let Err(e) = crate::clusters::within(
                crate::clusters::CALL_TIMEOUT,
                leases.patch(&lease, &pp, &merge),
            )
            .await
            {
                tracing::warn!(cluster = %name, error = %e, "cannot tell the hub the agent is done");
            }
        }
        return Ok(());
    }
}
