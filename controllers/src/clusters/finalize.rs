//! Leaving the clusterset (A.6, ★ `unjoin --preserve`): every Cluster carries the
//! `causeway.io/cluster-controller` finalizer, so its deletion waits for the hub
//! controller to clean up: what the importer wrote into a Push member is withdrawn
//! (unless the Cluster is annotated `causeway.io/preserve-on-unjoin: "true"`, which
//! `causeway unjoin --preserve` sets), and the execution namespace and Lease of the
//! member are deleted; the finalizer goes once the namespace is gone.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode};
use causeway_crds::names::{cluster_lease_name, execution_namespace};
use causeway_crds::well_known::{SYSTEM_NAMESPACE, annotations, finalizers};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::Api;

use super::join::client_for;
use super::registry::member_spec;
use causeway_runtime::apply;

/// Pure: whether the member's imports stay in place when it leaves.
pub fn preserves(c: &Cluster) -> bool {
    c.annotations()
        .get(annotations::PRESERVE_ON_UNJOIN)
        .is_some_and(|v| v == "true")
}

/// One round: adds the finalizer where it is missing and starts the cleanup of
/// Clusters being deleted (once each; `finalizing` remembers them).
pub async fn round(
    hub: &kube::Client,
    clusters: &[Arc<Cluster>],
    secrets: &[Secret],
    finalizing: &mut BTreeSet<String>,
) {
    let api: Api<Cluster> = Api::all(hub.clone());
    finalizing.retain(|n| clusters.iter().any(|c| c.name_any() == *n));
    for c in clusters {
        let name = c.name_any();
        let held = c.finalizers().iter().any(|f| f == finalizers::CLUSTER);
        if c.metadata.deletion_timestamp.is_none() {
            if !held
                && let Err(e) = apply::add_finalizer(&api, c.as_ref(), finalizers::CLUSTER).await
            {
                tracing::debug!(cluster = %name, error = %e, "cannot add the cluster finalizer; retrying");
            }
            continue;
        }
        if held && finalizing.insert(name) {
            let spec = member_spec(c, secrets).ok();
            tokio::spawn(cleanup(hub.clone(), c.as_ref().clone(), spec));
        }
    }
}

async fn cleanup(hub: kube::Client, c: Cluster, spec: Option<super::registry::MemberSpec>) {
    let name = c.name_any();
    if c.spec.sync_mode == ClusterSyncMode::Push {
        match (preserves(&c), spec) {
            (true, _) => {
                tracing::info!(cluster = %name, "member left with --preserve: its imports stay in place")
            }
            (false, Some(spec)) => withdraw(spec).await,
            (false, None) => {
                tracing::warn!(cluster = %name, "member left without usable credentials: its imports stay in place; delete objects labelled causeway.io/managed=true there by hand")
            }
        }
    }
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let es = execution_namespace(&name);
    let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let mut delay = Duration::from_millis(200);
    loop {
        let gone = async {
            apply::remove(&leases, &cluster_lease_name(&name)).await?;
            apply::remove(&namespaces, &es).await?;
            Ok::<bool, apply::ApplyError>(namespaces.get_opt(&es).await.ok().flatten().is_none())
        }
        .await;
        match gone {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cleaning up the member's hub objects; retrying")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
    let api: Api<Cluster> = Api::all(hub);
    match api.get_opt(&name).await {
        Ok(Some(current)) => {
            if let Err(e) = apply::remove_finalizer(&api, &current, finalizers::CLUSTER).await {
                tracing::warn!(cluster = %name, error = %e, "cannot remove the cluster finalizer; the next round retries");
            } else {
                tracing::info!(cluster = %name, "member removed from the clusterset");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster"),
    }
}

/// Removes what the importer wrote into a member that left the clusterset, with the
/// credentials it had (best effort: they may already be revoked).
pub async fn withdraw(m: super::registry::MemberSpec) {
    let result = async {
        let client = client_for(&m.access).await?;
        tokio::time::timeout(
            Duration::from_secs(30),
            crate::mcs::importer::withdraw_all(&client),
        )
        .await
        .map_err(|_| anyhow::anyhow!("the member did not answer within 30 s"))?
    }
    .await;
    match result {
        Ok(n) => {
            tracing::info!(cluster = %m.name, objects = n, "imports withdrawn from the removed member")
        }
        Err(e) => {
            tracing::warn!(cluster = %m.name, error = %format!("{e:#}"), "could not withdraw the imports of a removed member; delete objects labelled causeway.io/managed=true there by hand")
        }
    }
}
