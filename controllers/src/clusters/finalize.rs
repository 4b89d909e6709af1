//! Leaving the clusterset (A.6, ★ `unjoin --preserve`): every Cluster carries the
//! `causeway.io/cluster-controller` finalizer, so its deletion waits for the hub
//! controller to clean up: what the importer wrote into a Push member is withdrawn
//! (unless the Cluster is annotated `causeway.io/preserve-on-unjoin: "true"`, which
//! `causeway unjoin --preserve` sets), and the execution namespace and Lease of the
//! member are deleted; the finalizer goes once the namespace is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode, conditions};
use causeway_crds::names::{cluster_lease_name, execution_namespace};
use causeway_crds::well_known::{FIELD_MANAGER, SYSTEM_NAMESPACE, annotations, finalizers, labels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::join::client_for;
use super::registry::member_spec;
use causeway_runtime::apply;

/// Pure: whether the member's imports stay in place when it leaves.
pub fn preserves(c: &Cluster) -> bool {
    c.annotations()
        .get(annotations::PRESERVE_ON_UNJOIN)
        .is_some_and(|v| v == "true")
}

/// Pure: the execution namespaces to make: those of the Clusters not being deleted
/// that are not among the hub's `existing` namespaces (one being deleted is among them:
/// it is made again once it is gone, its deletion waking a round).
pub fn missing_execution_namespaces(
    clusters: &[Arc<Cluster>],
    existing: &BTreeSet<String>,
) -> Vec<(String, String)> {
    clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| (c.name_any(), execution_namespace(&c.name_any())))
        .filter(|(_, ns)| !existing.contains(ns))
        .collect()
}

/// Makes sure every Cluster not being deleted has its execution namespace
/// `causeway-es-<cluster>` on the hub (where its Works go), whether it joined, registered
/// or was created by hand: those [`missing_execution_namespaces`] from the hub's
/// `existing` namespaces (level-based: one deleted by hand is made again).
pub async fn ensure_execution_namespaces(
    hub: &kube::Client,
    clusters: &[Arc<Cluster>],
    existing: &BTreeSet<String>,
) {
    let api: Api<Namespace> = Api::all(hub.clone());
    for (name, ns) in missing_execution_namespaces(clusters, existing) {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {labels::CLUSTER: name}}});
        let pp = PatchParams::apply(FIELD_MANAGER);
        match super::within(
            super::CALL_TIMEOUT,
            api.patch(&ns, &pp, &Patch::Apply(&body)),
        )
        .await
        {
            Ok(_) => tracing::info!(cluster = %name, namespace = %ns, "execution namespace made"),
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot create the execution namespace; retrying")
            }
        }
    }
}

/// One round: adds the finalizer where it is missing and starts the cleanup of
/// Clusters being deleted (once each; `finalizing` remembers them; a cleanup retries
/// until the finalizer is gone). The cleanup of a Push member first waits for its
/// workers (`stopping`), so none of them writes after its imports are withdrawn.
pub async fn round(
    hub: &kube::Client,
    clusters: &[Arc<Cluster>],
    secrets: &[Secret],
    finalizing: &mut BTreeSet<String>,
    stopping: &mut BTreeMap<String, tokio::task::JoinHandle<()>>,
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
        if held && finalizing.insert(name.clone()) {
            let spec = member_spec(c, secrets).ok();
            let workers = stopping.remove(&name);
            tokio::spawn(cleanup(hub.clone(), c.as_ref().clone(), spec, workers));
        }
    }
}

async fn cleanup(
    hub: kube::Client,
    c: Cluster,
    spec: Option<super::registry::MemberSpec>,
    workers: Option<tokio::task::JoinHandle<()>>,
) {
    let name = c.name_any();
    let clusters: Api<Cluster> = Api::all(hub.clone());
    if let Some(w) = workers
        && tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .is_err()
    {
        tracing::warn!(cluster = %name, "the member's workers did not stop within 30 s");
    }
    match c.spec.sync_mode {
        ClusterSyncMode::Push => {
            // a member that does not answer is not cleaned up (as Karmada's execution
            // controller skips a cluster that is not Ready as it leaves): each of its
            // calls would wait out its limit, minutes for a few dozen objects, before
            // the Cluster could go; its copies stay and the hub says so
            let spec = match spec {
                Some(spec) if !answers(&spec).await => {
                    let note = "the member does not answer: what Causeway imported and propagated there stays in place; delete the objects labelled causeway.io/managed=true there by hand";
                    tracing::warn!(cluster = %name, "{note}");
                    cleanup_failed_event(&hub, &c, note).await;
                    None
                }
                Some(spec) => {
                    leave_member(&hub, &c, &spec, preserves(&c)).await;
                    Some(spec)
                }
                None => {
                    tracing::warn!(cluster = %name, "member left without usable credentials: what Causeway imported and propagated stays in place; delete objects labelled causeway.io/managed=true there by hand");
                    None
                }
            };
            // (leaving may take a while)
            if replaced(&clusters, &c).await {
                return;
            }
            if let Some(spec) = &spec {
                end_membership(spec).await;
            }
            match (preserves(&c), spec) {
                (true, _) => {
                    tracing::info!(cluster = %name, "member left with --preserve: its imports stay in place")
                }
                (false, Some(spec)) => withdraw(spec).await,
                (false, None) => {}
            }
        }
        // the agent withdraws (or keeps) the imports itself and says so on its Lease
        ClusterSyncMode::Pull => wait_for_agent(&hub, &c).await,
    }
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    let es = execution_namespace(&name);
    let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let mut delay = Duration::from_millis(200);
    loop {
        if replaced(&clusters, &c).await {
            return;
        }
        // Works still held (no credentials, an agent that is gone, one written late):
        // released on every pass, their copies stay in the member
        if let Err(e) =
            crate::propagation::applier::leave::release(&name, &hub, super::CALL_TIMEOUT).await
        {
            tracing::warn!(cluster = %name, error = %format!("{e:#}"), "cannot release the member's Works; retrying");
        }
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
    if replaced(&clusters, &c).await {
        return;
    }
    if let Some(sref) = &c.spec.secret_ref {
        // the member's credentials go with it (unjoin may have given up waiting): the
        // Secret `causeway join` wrote for it, never one a person pointed it at
        let secrets: Api<Secret> = Api::namespaced(hub.clone(), &sref.namespace);
        match secrets.get_opt(&sref.name).await {
            Ok(Some(s)) if s.labels().get(labels::CLUSTER) == Some(&name) => {
                if let Err(e) = apply::remove(&secrets, &sref.name).await {
                    tracing::warn!(cluster = %name, error = %e, "cannot delete the member's credentials Secret");
                }
            }
            Ok(Some(_)) => tracing::info!(
                cluster = %name,
                secret = %format!("{}/{}", sref.namespace, sref.name),
                "the credentials Secret is kept: it is not labelled causeway.io/cluster={name}, so Causeway did not write it"
            ),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot read the member's credentials Secret; it is left in place")
            }
        }
    }
    let api = clusters;
    let mut delay = Duration::from_millis(200);
    loop {
        match api.get_opt(&name).await {
            // (another Cluster of the name: [`replaced`])
            Ok(Some(current)) if current.metadata.uid != c.metadata.uid => return,
            Ok(Some(current)) => {
                match apply::remove_finalizer(&api, &current, finalizers::CLUSTER).await {
                    Ok(_) => {
                        tracing::info!(cluster = %name, "member removed from the clusterset");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %name, error = %e, "cannot remove the cluster finalizer; retrying")
                    }
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster; retrying")
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Whether another Cluster of `c`'s name exists: the member was joined again under it
/// while this cleanup ran (its finalizer removed by hand), and what the cleanup would
/// delete next (the execution namespace and its Works, the Lease, the credentials, the
/// finalizer) is the new one's. The cleanup stops; a Cluster that is simply gone is
/// still cleaned up after.
async fn replaced(clusters: &Api<Cluster>, c: &Cluster) -> bool {
    match clusters.get_opt(&c.name_any()).await {
        Ok(Some(now)) if now.metadata.uid != c.metadata.uid => {
            tracing::warn!(cluster = %c.name_any(), "the Cluster was made again while the cleanup of the one deleted ran: its cleanup stops, and leaves the new one's objects alone");
            true
        }
        _ => false,
    }
}

/// The annotation a Pull member's agent puts on its Lease once it has withdrawn (or,
/// with `--preserve`, kept) what it imported and stopped its workers.
pub const AGENT_LEFT: &str = "causeway.io/agent-left";

/// How long a leaving Pull member's cleanup waits for its agent.
const AGENT_WAIT: Duration = Duration::from_secs(60);

/// Waits until the agent of leaving Pull member `c` says it is done, or it cannot say
/// (its Ready condition is Unknown, the hub's verdict on a silent lease, or was never
/// set: an agent that is gone cannot clean up; Karmada strips the finalizers then too),
/// or [`AGENT_WAIT`] passed. An agent that posts Ready=False (its member's API server
/// failing its checks) still renews its lease and still cleans up: it is waited for, as
/// is one that restarts meanwhile (a new agent that finds its Cluster waiting for it
/// cleans up before anything else). Not confirmed, it is told as a Warning Event
/// `MemberCleanupFailed` on the Cluster.
async fn wait_for_agent(hub: &kube::Client, c: &Cluster) {
    let name = c.name_any();
    if super::status::ready_of(c).is_none_or(|r| r.status == "Unknown") {
        let note = "the Pull member left while its agent was silent, so it could not clean up: what the hub propagated and imported there, and its clusterset.k8s.io ClusterProperty, stay in the member; delete objects labelled causeway.io/managed=true there by hand";
        tracing::warn!(cluster = %name, "{note}");
        cleanup_failed_event(hub, c, note).await;
        return;
    }
    let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let deadline = tokio::time::Instant::now() + AGENT_WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Ok(Some(l))) = tokio::time::timeout(
            super::CALL_TIMEOUT,
            leases.get_opt(&cluster_lease_name(&name)),
        )
        .await
            && l.annotations().contains_key(AGENT_LEFT)
        {
            tracing::info!(cluster = %name, "the Pull member's agent cleaned up and stopped");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let note = "the Pull member's agent did not confirm its cleanup within 60 s, so the member was removed anyway: what the hub propagated and imported there, and its clusterset.k8s.io ClusterProperty, may stay in the member; delete objects labelled causeway.io/managed=true there by hand";
    tracing::warn!(cluster = %name, "{note}");
    cleanup_failed_event(hub, c, note).await;
}

/// Tells `note` as a Warning Event `MemberCleanupFailed` on Cluster `c`: `kubectl get
/// events` shows it once the Cluster is gone. Best effort.
async fn cleanup_failed_event(hub: &kube::Client, c: &Cluster, note: &str) {
    let recorder = kube::runtime::events::Recorder::new(
        hub.clone(),
        kube::runtime::events::Reporter {
            controller: "causeway-cluster-controller".into(),
            instance: None,
        },
    );
    let ev = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: "MemberCleanupFailed".into(),
        note: Some(note.to_string()),
        action: "Leave".into(),
        secondary: None,
    };
    if let Err(e) = recorder
        .publish(&ev, &kube::Resource::object_ref(c, &()))
        .await
    {
        tracing::debug!(cluster = %c.name_any(), error = %e, "cannot publish the cleanup Event");
    }
}

/// Deletes (or, leaving with `--preserve`, orphans) the propagated copies in a Push
/// member that left, with the credentials it had, and releases its Works (G.48–49).
async fn leave_member(
    hub: &kube::Client,
    c: &Cluster,
    m: &super::registry::MemberSpec,
    preserve: bool,
) {
    let result = async {
        let client = client_for(&m.access).await?;
        tokio::time::timeout(
            Duration::from_secs(300),
            crate::propagation::applier::leave::leave(
                &m.name,
                hub,
                &client,
                preserve,
                super::CALL_TIMEOUT,
            ),
        )
        .await
        .map_err(|_| anyhow::anyhow!("the member did not finish within 5 min"))?
    }
    .await;
    match result {
        Ok(n) if preserve => {
            tracing::info!(cluster = %m.name, objects = n, "propagated objects left in the removed member, no longer managed")
        }
        Ok(n) => {
            tracing::info!(cluster = %m.name, objects = n, "propagated objects deleted from the removed member")
        }
        Err(e) => {
            let note = format!(
                "could not remove the propagated objects of the member that left ({e:#}); delete the objects labelled causeway.io/managed=true there by hand"
            );
            tracing::warn!(cluster = %m.name, "{note}");
            // told on the Cluster too: `kubectl get events` shows it once it is gone
            cleanup_failed_event(hub, c, &note).await;
        }
    }
}

/// Whether the member answers its readiness probe at all (any answer: a member whose
/// `/readyz` fails may still take its cleanup).
async fn answers(m: &super::registry::MemberSpec) -> bool {
    match client_for(&m.access).await {
        Ok(client) => {
            super::health::probe(&client).await.1 != conditions::REASON_CLUSTER_NOT_REACHABLE
        }
        Err(_) => false,
    }
}

/// Deletes the `clusterset.k8s.io` ClusterProperty of a Push member that left (CID-4),
/// with the credentials it had (best effort: they may already be revoked).
async fn end_membership(m: &super::registry::MemberSpec) {
    let result = async {
        let client = client_for(&m.access).await?;
        super::membership::leave(&client).await
    }
    .await;
    match result {
        Ok(true) => {
            tracing::info!(cluster = %m.name, "the member's clusterset.k8s.io ClusterProperty deleted")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(cluster = %m.name, error = %format!("{e:#}"), "could not delete the removed member's clusterset.k8s.io ClusterProperty; delete it there by hand")
        }
    }
}

/// Removes what the importer wrote into a member that left the clusterset, with the
/// credentials it had (best effort: they may already be revoked).
pub async fn withdraw(m: super::registry::MemberSpec) {
    let result = async {
        let client = client_for(&m.access).await?;
        tokio::time::timeout(Duration::from_secs(30), crate::mcs::leave(&client))
            .await
            .map_err(|_| anyhow::anyhow!("the member did not answer within 30 s"))?
    }
    .await;
    match result {
        Ok(n) => {
            tracing::info!(cluster = %m.name, objects = n, "imports withdrawn from the removed member")
        }
        Err(e) => {
            tracing::warn!(cluster = %m.name, error = %format!("{e:#}"), "could not finish Multi-Cluster Services for a removed member (see the error); delete objects labelled causeway.io/managed=true there by hand")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cluster(name: &str, deleting: bool) -> Arc<Cluster> {
        let mut c = Cluster::new(name, Default::default());
        if deleting {
            c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        Arc::new(c)
    }

    /// A.6: a member joined again under its name while the old one's cleanup ran (its
    /// finalizer removed by hand): the old cleanup leaves the new Cluster's execution
    /// namespace, Lease and finalizer alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cleanup_leaves_a_cluster_made_again_under_its_name_alone() {
        use kube::api::{DeleteParams, PostParams};
        let server = kubesim::Server::start(kubesim::Config::new("hub"))
            .await
            .unwrap();
        let hub = server.client().await;
        causeway_runtime::crds::install(
            &hub,
            &causeway_crds::crdgen::all_crds(),
            "test",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        let api: Api<Cluster> = Api::all(hub.clone());
        let mut east = Cluster::new("east", Default::default());
        east.metadata.finalizers = Some(vec![finalizers::CLUSTER.into()]);
        api.create(&PostParams::default(), &east).await.unwrap();
        api.delete("east", &DeleteParams::default()).await.unwrap();
        let old = api.get("east").await.unwrap();
        assert!(old.metadata.deletion_timestamp.is_some());
        apply::remove_finalizer(&api, &old, finalizers::CLUSTER)
            .await
            .unwrap();
        // joined again: a new Cluster, its execution namespace and Lease
        let new = api.create(&PostParams::default(), &east).await.unwrap();
        assert_ne!(new.metadata.uid, old.metadata.uid);
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        for ns in [SYSTEM_NAMESPACE, &execution_namespace("east")] {
            let mut n = Namespace::default();
            n.metadata.name = Some(ns.to_string());
            namespaces.create(&PostParams::default(), &n).await.unwrap();
        }
        let leases: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
        let mut lease = Lease::default();
        lease.metadata.name = Some(cluster_lease_name("east"));
        leases.create(&PostParams::default(), &lease).await.unwrap();
        // the old cluster's cleanup (a Push member without usable credentials)
        tokio::time::timeout(
            Duration::from_secs(20),
            cleanup(hub.clone(), old, None, None),
        )
        .await
        .unwrap();
        let ns = namespaces.get(&execution_namespace("east")).await.unwrap();
        assert!(ns.metadata.deletion_timestamp.is_none(), "{ns:?}");
        assert!(
            leases
                .get_opt(&cluster_lease_name("east"))
                .await
                .unwrap()
                .is_some()
        );
        let now = api.get("east").await.unwrap();
        assert_eq!(now.metadata.uid, new.metadata.uid);
        assert!(now.finalizers().iter().any(|f| f == finalizers::CLUSTER));
    }

    /// Level-based: what the hub lacks now is made, whatever was made before (an
    /// execution namespace deleted by hand comes back); a Cluster being deleted gets none.
    #[test]
    fn the_execution_namespaces_the_hub_lacks_are_made() {
        let clusters = [
            cluster("east", false),
            cluster("west", false),
            cluster("gone", true),
        ];
        let existing: BTreeSet<String> = ["causeway-es-east".to_string()].into();
        assert_eq!(
            missing_execution_namespaces(&clusters, &existing),
            vec![("west".to_string(), "causeway-es-west".to_string())]
        );
        assert_eq!(
            missing_execution_namespaces(&clusters, &BTreeSet::new()),
            vec![
                ("east".to_string(), "causeway-es-east".to_string()),
                ("west".to_string(), "causeway-es-west".to_string())
            ],
            "east's, deleted by hand, is made again"
        );
    }
}
