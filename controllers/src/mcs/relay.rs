//! Relay (hub): publishes what the agents of Pull members put into their outboxes.
//!
//! A Pull member's agent runs the exporter with a hub identity that may write only its
//! execution namespace `causeway-es-<cluster>` ([`super::exporter::Target::Outbox`]).
//! The relay writes each outbox object of a registered Pull cluster as the real hub
//! object (origin namespace and name, labelled `causeway.io/relayed-from=<cluster>`),
//! creating the namespace if needed, and deletes relayed objects whose outbox object
//! is gone or whose cluster left. The cluster's identity comes from the namespace the
//! object was found in, never from the object: the ExportedService's `spec.cluster`
//! and every `source-cluster` label are forced to that Cluster's id, its
//! `exportCreationTimestamp` is never older than the Cluster's registration
//! ([`trusted_creation`]: the oldest export wins a conflict), and a relayed
//! object carries only the labels the exporter sets, never the agent's others. Nothing
//! is published in Causeway's namespaces or in Kubernetes' own (`kube-*`), from which
//! the agent's exporter does not export either ([`super::reserved_namespace`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use causeway_crds::exported_service::ExportedService;
use causeway_crds::federation::cluster::{Cluster, ClusterSyncMode};
use causeway_crds::names::{cluster_of_execution_namespace, exported_service_name, hub_slice_name};
use causeway_crds::well_known::{annotations, labels};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::exporter::outbox::from_outbox;
use crate::metrics::Metrics;
use crate::watch::{ByService, ServiceKey, by_service, key, service_key};
use causeway_runtime::apply::{self, Failures};
use causeway_runtime::reflect::{Dirty, Wake, cache};

/// An outbox object the relay will not publish, and why (told as a Warning Event on it).
#[derive(Debug, Clone, PartialEq)]
pub struct Ignored {
    /// The outbox object.
    pub object: ObjectReference,
    /// Short reason, e.g. `OutboxMismatch`.
    pub reason: &'static str,
    /// What is wrong and what to do, for people.
    pub note: String,
}

/// What the relay wants on the hub.
#[derive(Debug, Default)]
pub struct Desired {
    /// Relayed ExportedServices.
    pub exported: Vec<ExportedService>,
    /// Relayed EndpointSlices.
    pub slices: Vec<EndpointSlice>,
    /// The hub namespaces they need, each with a service for failure reports.
    pub namespaces: BTreeMap<String, ServiceKey>,
    /// Outbox objects left out.
    pub ignored: Vec<Ignored>,
}

/// The registered (not deleting) Pull clusters: name → cluster id.
pub fn pull_clusters(clusters: &[Arc<Cluster>]) -> BTreeMap<String, String> {
    clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| c.spec.sync_mode == ClusterSyncMode::Pull)
        .filter_map(|c| Some((c.name_any(), c.cluster_id()?.to_string())))
        .collect()
}

/// The registration time (the hub Cluster object's `creationTimestamp`) of each
/// registered Pull cluster, by name.
fn registered_at(clusters: &[Arc<Cluster>]) -> BTreeMap<String, Time> {
    clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| c.spec.sync_mode == ClusterSyncMode::Pull)
        .filter_map(|c| Some((c.name_any(), c.metadata.creation_timestamp.clone()?)))
        .collect()
}

/// Pure: the `exportCreationTimestamp` a relayed export may carry, given what the
/// agent claims (`claimed`) and when its Cluster registered (`registered`). On a
/// conflict the oldest export wins (CR-2), so an agent claiming a time long past would
/// set the type, ports and labels of every member's import of any service it exports:
/// no export is older than its Cluster's registration, as far as the hub knows. A
/// claim before it is clamped to it; a later one is kept as it is; none stays none
/// (it ranks after every known time). Without a registration time (the API server
/// always sets one) a claim cannot be checked, and is dropped.
pub fn trusted_creation(claimed: Option<&Time>, registered: Option<&Time>) -> Option<Time> {
    let claimed = claimed?;
    let registered = registered?;
    Some(if claimed.0 < registered.0 {
        registered.clone()
    } else {
        claimed.clone()
    })
}

/// The outbox object `o` in hub form with the identity of the cluster whose outbox
/// holds it, or why it cannot be published. `None` (silently) when its namespace is
/// not the outbox of a registered Pull cluster.
fn relayable<K: Resource<DynamicType = ()> + Clone>(
    o: &K,
    pull: &BTreeMap<String, String>,
) -> Option<Result<(K, String, String), Ignored>> {
    let ns = o.namespace().unwrap_or_default();
    let name = cluster_of_execution_namespace(&ns)?;
    let id = pull.get(name)?;
    let ignore = |reason, note: String| {
        Some(Err(Ignored {
            object: o.object_ref(&()),
            reason,
            note,
        }))
    };
    let marker = o.labels().get(labels::OUTBOX).map_or("", String::as_str);
    if marker != name {
        return ignore(
            "OutboxMismatch",
            format!(
                "{}={marker:?} but this is the outbox of Cluster {name:?} ({ns}): not published; only the agent of {name:?} writes here, and it marks what it writes with its own name",
                labels::OUTBOX
            ),
        );
    }
    let Some(hub) = from_outbox(o) else {
        return ignore(
            "OutboxIncomplete",
            format!(
                "an outbox object needs the label {} and the annotation {}: not published",
                labels::ORIGIN_NAMESPACE,
                annotations::ORIGIN_NAME
            ),
        );
    };
    let origin = hub.namespace().unwrap_or_default();
    let errors = k8s_validation::dns1123_label(&origin);
    if !errors.is_empty() {
        return ignore(
            "InvalidOriginNamespace",
            format!(
                "origin namespace {origin:?} is not a namespace name ({}): not published",
                errors.join("; ")
            ),
        );
    }
    if let Some(why) = super::reserved_namespace(&origin) {
        return ignore(
            "ReservedOriginNamespace",
            format!("origin {why}: the relay publishes nothing there"),
        );
    }
    Some(Ok((hub, name.to_string(), id.clone())))
}

/// The outbox objects of `objs` to publish, each with its hub form, Cluster name and
/// id; the ones that cannot be published go to `ignored`.
fn sort_out<'a, K: Resource<DynamicType = ()> + Clone>(
    objs: &'a [Arc<K>],
    pull: &BTreeMap<String, String>,
    ignored: &mut Vec<Ignored>,
) -> Vec<(&'a Arc<K>, K, String, String)> {
    let mut out = Vec::new();
    for o in objs {
        match relayable(o.as_ref(), pull) {
            None => {}
            Some(Err(why)) => ignored.push(why),
            Some(Ok((hub, cluster, id))) => out.push((o, hub, cluster, id)),
        }
    }
    out
}

/// The labels of a relayed object: exactly those the exporter puts on hub objects
/// (`exporter::labels_for`), every value forced, plus `relayed-from`. None of the
/// agent's labels come along: a label such as `kubernetes.io/service-name` on a hub
/// EndpointSlice would hand a hub Service's traffic to the agent's endpoints.
fn forced_labels(service: &str, cluster: &str, id: &str) -> BTreeMap<String, String> {
    let mut l = super::exporter::labels_for(service, id);
    l.insert(labels::RELAYED_FROM.into(), cluster.into());
    l
}

/// Fresh metadata for a relayed object: nothing of the outbox object's identity (uid,
/// resourceVersion, owners, finalizers) comes along, and of its annotations only the
/// one the exporter sets on hub objects (`exported-at-ms`, for propagation latency).
fn meta(ns: String, name: String, hub: &ObjectMeta, l: BTreeMap<String, String>) -> ObjectMeta {
    let exported_at = hub.annotations.as_ref().and_then(|a| {
        let (k, v) = a.get_key_value(annotations::EXPORTED_AT)?;
        Some(BTreeMap::from([(k.clone(), v.clone())]))
    });
    ObjectMeta {
        name: Some(name),
        namespace: Some(ns),
        labels: Some(l),
        annotations: exported_at,
        ..Default::default()
    }
}

/// Pure: the hub objects the relay publishes from the outboxes (`outbox_*`) of the
/// registered Pull clusters, given what is on the hub (`hub_*`, relayed or not).
pub fn desired(
    clusters: &[Arc<Cluster>],
    outbox_exported: &[Arc<ExportedService>],
    outbox_slices: &[Arc<EndpointSlice>],
    hub_exported: &[Arc<ExportedService>],
    hub_slices: &[Arc<EndpointSlice>],
) -> Desired {
    let pull = pull_clusters(clusters);
    let registered = registered_at(clusters);
    let mut out = Desired::default();
    // an object that is there and not relayed from `cluster` is never replaced
    let owner = |l: &BTreeMap<String, String>| l.get(labels::RELAYED_FROM).cloned();
    let hub_exported: HashMap<_, _> = hub_exported
        .iter()
        .map(|o| (key(o.as_ref()), owner(o.labels())))
        .collect();
    let hub_slices: HashMap<_, _> = hub_slices
        .iter()
        .map(|o| (key(o.as_ref()), owner(o.labels())))
        .collect();
    let taken = |on_hub: &HashMap<(String, String), Option<String>>,
                 at: &(String, String),
                 cluster: &str,
                 o: ObjectReference| {
        match on_hub.get(at) {
            Some(by) if by.as_deref() != Some(cluster) => Some(Ignored {
                object: o,
                reason: "HubObjectTaken",
                note: format!(
                    "{}/{} exists on the hub and was not relayed from Cluster {cluster:?}: not replaced (is another cluster registered with the same id?)",
                    at.0, at.1
                ),
            }),
            _ => None,
        }
    };
    let mut seen = BTreeSet::new();
    for (o, hub, cluster, id) in sort_out(outbox_exported, &pull, &mut out.ignored) {
        let ns = hub.namespace().unwrap_or_default();
        let service = hub.spec.service.clone();
        let name = exported_service_name(&service, &id);
        let at = (ns.clone(), name.clone());
        if let Some(why) = taken(&hub_exported, &at, &cluster, o.object_ref(&())) {
            out.ignored.push(why);
            continue;
        }
        if !seen.insert(at) {
            continue; // two outbox objects for one export: the first one counts
        }
        let l = forced_labels(&service, &cluster, &id);
        let mut spec = hub.spec.clone();
        spec.cluster = id;
        // the agent's claim of when it exported is no older than its registration
        spec.export_creation_timestamp = trusted_creation(
            spec.export_creation_timestamp.as_ref(),
            registered.get(&cluster),
        );
        out.namespaces
            .entry(ns.clone())
            .or_insert_with(|| (ns.clone(), service.clone()));
        out.exported.push(ExportedService {
            metadata: meta(ns, name, &hub.metadata, l),
            spec,
            status: None,
        });
    }
    let mut seen = BTreeSet::new();
    for (o, hub, cluster, id) in sort_out(outbox_slices, &pull, &mut out.ignored) {
        let ns = hub.namespace().unwrap_or_default();
        let Some(service) = hub.labels().get(labels::SERVICE_NAME).cloned() else {
            out.ignored.push(Ignored {
                object: o.object_ref(&()),
                reason: "OutboxIncomplete",
                note: format!(
                    "an outbox EndpointSlice needs the label {}: not published",
                    labels::SERVICE_NAME
                ),
            });
            continue;
        };
        // the exporter names hub slices <slice>.<cluster id>; any other name gets the
        // forced id appended, so no cluster can take another's slice names
        let origin = hub.name_any();
        let name = match origin.strip_suffix(&format!(".{id}")) {
            Some(_) => origin,
            None => hub_slice_name(&origin, &id),
        };
        let at = (ns.clone(), name.clone());
        if let Some(why) = taken(&hub_slices, &at, &cluster, o.object_ref(&())) {
            out.ignored.push(why);
            continue;
        }
        if !seen.insert(at) {
            continue;
        }
        let mut l = forced_labels(&service, &cluster, &id);
        // MCS slices must never look like kube-controller-manager's (EPS-4)
        l.insert(
            labels::ENDPOINTSLICE_MANAGED_BY.into(),
            labels::ENDPOINTSLICE_MANAGED_BY_VALUE.into(),
        );
        out.namespaces
            .entry(ns.clone())
            .or_insert_with(|| (ns.clone(), service));
        out.slices.push(EndpointSlice {
            metadata: meta(ns, name, &hub.metadata, l),
            address_type: hub.address_type.clone(),
            endpoints: hub.endpoints.clone(),
            ports: hub.ports.clone(),
        });
    }
    out
}

/// Runs the relay until `stop`.
pub async fn run(
    hub: kube::Client,
    caches: Arc<super::HubCaches>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let outboxes = watcher::Config::default().labels(labels::OUTBOX);
    let outbox_exported = cache(
        Api::<ExportedService>::all(hub.clone()),
        outboxes.clone(),
        wake.clone(),
        stop.clone(),
        "outbox exportedservices",
        by_service(),
    );
    let outbox_slices = cache(
        Api::<EndpointSlice>::all(hub.clone()),
        outboxes,
        wake.clone(),
        stop.clone(),
        "outbox endpointslices",
        by_service(),
    );
    let hub_exported = caches.exported.subscribe(wake.clone());
    let hub_slices = caches.slices.subscribe(wake.clone());
    let clusters = caches.clusters.subscribe(wake.clone());
    for ready in [
        outbox_exported.wait_until_ready().await.is_ok(),
        outbox_slices.wait_until_ready().await.is_ok(),
        hub_exported.wait_until_ready().await.is_ok(),
        hub_slices.wait_until_ready().await.is_ok(),
        clusters.wait_until_ready().await.is_ok(),
    ] {
        if !ready {
            return;
        }
    }
    tracing::info!("relay running");
    let recorder = kube::runtime::events::Recorder::new(
        hub.clone(),
        kube::runtime::events::Reporter {
            controller: "causeway-relay".into(),
            instance: None,
        },
    );
    let mut state = write::State::default();
    let mut dirty = Dirty::full();
    loop {
        let started = Instant::now();
        let relayed = |l: &BTreeMap<String, String>| l.contains_key(labels::RELAYED_FROM);
        let (hub_exported_now, hub_slices_now) = (
            dirty.filter(hub_exported.state()),
            dirty.filter(hub_slices.state()),
        );
        let want = desired(
            &clusters.state(),
            &dirty.filter(outbox_exported.state()),
            &dirty.filter(outbox_slices.state()),
            &hub_exported_now,
            &hub_slices_now,
        );
        let mut failures = Failures::new("relay", "");
        let outbox_exported_now = dirty.filter(outbox_exported.state());
        let mine_exported: Vec<_> = hub_exported_now
            .into_iter()
            .filter(|o| relayed(o.labels()))
            .collect();
        let mine_slices: Vec<_> = hub_slices_now
            .into_iter()
            .filter(|o| relayed(o.labels()))
            .collect();
        let refused = write::write(
            &hub,
            &mut state,
            &want,
            &mine_exported,
            &mine_slices,
            &mut failures,
        )
        .await;
        write::tell_refusals(&hub, &outbox_exported_now, &refused).await;
        write::report(&recorder, &mut state, &want.ignored, dirty.full).await;
        metrics.observe_reconcile("relay", "", started.elapsed(), failures.count);
        dirty = match wake.after_round(&dirty, &failures.keys, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

mod write;

#[cfg(test)]
mod tests;
