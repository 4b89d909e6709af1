//! Aggregator (hub): all `ExportedService`s of one namespace/name → the hub
//! `ServiceImport` (merged per the conflict rules) and each export's verdict
//! (`Conflict` condition, `excludedPorts`). Exports and hub slices of clusters that
//! are no longer registered are withdrawn here. Clusters that stayed not Ready past
//! the stale-endpoints TTL are left out of `status.clusters`, and the ServiceImport
//! says which of its clusters are stale ([`super::stale`], EPS-7).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_crds::exported_service::{ExportedService, ExportedServiceSpec};
use causeway_crds::mcs::conditions::{service_export as ex_cond, service_import as im_cond};
use causeway_crds::mcs::merge::{Merged, merge_specs, to_service_import_spec};
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::mcs::{ServiceImportStatus, ServicePort, values};
use causeway_crds::well_known::labels;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_validation::{self as validation, FieldError};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::source_cluster;
use super::stale::{ExpiryTimer, Staleness};
use crate::metrics::Metrics;
use crate::watch::{ByService, service_key};
use causeway_runtime::apply::{self, Failures, Outcome};
use causeway_runtime::reflect::{Dirty, Wake};

/// The hub ServiceImport of a merge, and the verdict for each export.
#[derive(Debug)]
pub struct Aggregate {
    /// Hub ServiceImport (ips empty).
    pub import: ServiceImport,
    /// The merge.
    pub merged: Merged,
    /// Status for each ExportedService by name: (its `Conflict` and `Valid`
    /// conditions, excluded ports).
    pub exports: BTreeMap<String, (Vec<Condition>, Vec<ServicePort>)>,
}

/// Pure: the `exportedLabels` / `exportedAnnotations` entries no API server accepts
/// on a ServiceImport (kube-apiserver's key and value rules), and the keys only
/// Causeway sets.
pub fn invalid_exported_metadata(spec: &ExportedServiceSpec) -> Vec<FieldError> {
    let mut errs = validation::labels("spec.exportedLabels", &spec.exported_labels);
    errs.extend(validation::annotations(
        "spec.exportedAnnotations",
        &spec.exported_annotations,
    ));
    // the mesh annotations say where members send a clusterset IP's traffic: only the
    // Gateway API controller writes them (GW-4)
    for k in spec.exported_annotations.keys().filter(|k| reserved(k)) {
        errs.push(FieldError {
            field: "spec.exportedAnnotations".into(),
            value: k.clone(),
            message: "reserved: causeway's Gateway API controller sets it for mesh routes; remove it from the ServiceExport".into(),
        });
    }
    // the keys the MCS watches key a ServiceImport on: a hub or member import labelled
    // with them would count as another service's (or namespace's), or drop out of the
    // watches, and flap
    for k in spec.exported_labels.keys().filter(|k| reserved_label(k)) {
        errs.push(FieldError {
            field: "spec.exportedLabels".into(),
            value: k.clone(),
            message: format!(
                "reserved: Causeway and the MCS API set the {MULTICLUSTER_PREFIX}*, {CAUSEWAY_PREFIX}* and {} labels themselves; remove it from the ServiceExport",
                labels::KUBERNETES_SERVICE_NAME
            ),
        });
    }
    errs
}

/// The prefix of the MCS API's own label keys.
const MULTICLUSTER_PREFIX: &str = "multicluster.kubernetes.io/";
/// The prefix of Causeway's own label keys.
const CAUSEWAY_PREFIX: &str = "causeway.io/";

/// Whether `key` is a label only Causeway sets: the MCS API's (`service-name`,
/// `source-cluster`), Kubernetes' `kubernetes.io/service-name`, and Causeway's own
/// (`causeway.io/managed`, `causeway.io/origin-namespace`, ...), which the MCS watches
/// key and select objects on ([`crate::watch::service_key`]).
fn reserved_label(key: &str) -> bool {
    key.starts_with(MULTICLUSTER_PREFIX)
        || key.starts_with(CAUSEWAY_PREFIX)
        || key == labels::KUBERNETES_SERVICE_NAME
}

/// Whether `key` is an annotation only Causeway sets on a hub ServiceImport.
fn reserved(key: &str) -> bool {
    use causeway_crds::gateway::mesh::{MESH_ADDRESSES, MESH_PORTS};
    key == MESH_PORTS || key == MESH_ADDRESSES
}

/// Pure: the ServiceImport's labels and annotations: the merge's, less what an API
/// server would refuse (reported on the export instead, so the import is still written).
fn valid_metadata(merged: &Merged) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let labels = merged
        .labels
        .iter()
        .filter(|(k, v)| {
            validation::qualified_name(k).is_empty()
                && validation::label_value(v).is_empty()
                && !reserved_label(k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut annotations: BTreeMap<String, String> = merged
        .annotations
        .iter()
        .filter(|(k, _)| validation::qualified_name(&k.to_lowercase()).is_empty())
        .filter(|(k, _)| !reserved(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !validation::annotations("", &annotations).is_empty() {
        annotations.clear(); // too large together: none rather than an arbitrary part
    }
    (labels, annotations)
}

/// What clusters that left the registry leave behind on the hub, to delete.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Withdrawals {
    /// ExportedServices `(namespace, name, service)` of unregistered clusters.
    pub exports: Vec<(String, String, String)>,
    /// Causeway's hub EndpointSlices `(namespace, name, service)` of unregistered clusters.
    pub slices: Vec<(String, String, String)>,
}

/// Pure: the exports and hub slices of clusters that are not (or no longer) registered.
pub fn withdrawals(
    exports: &[Arc<ExportedService>],
    hub_slices: &[Arc<EndpointSlice>],
    registered: &BTreeSet<String>,
) -> Withdrawals {
    Withdrawals {
        exports: exports
            .iter()
            .filter(|e| !registered.contains(&e.spec.cluster))
            .map(|e| {
                (
                    e.namespace().unwrap_or_default(),
                    e.name_any(),
                    e.spec.service.clone(),
                )
            })
            .collect(),
        slices: hub_slices
            .iter()
            .filter(|s| {
                let l = s.labels();
                l.get(labels::MANAGED).map(String::as_str) == Some(labels::MANAGED_VALUE)
                    && !registered.contains(source_cluster(s))
            })
            .map(|s| {
                (
                    s.namespace().unwrap_or_default(),
                    s.name_any(),
                    s.labels()
                        .get(labels::SERVICE_NAME)
                        .cloned()
                        .unwrap_or_default(),
                )
            })
            .collect(),
    }
}

/// Pure: merge every namespace/name group of exports from registered clusters; the
/// clusters `stale` says are withdrawn stay in the merge (the import keeps its shape
/// while they are away) but not in `status.clusters`.
pub fn desired(
    exports: &[Arc<ExportedService>],
    registered: &BTreeSet<String>,
    stale: &Staleness,
    hub_imports: &[Arc<ServiceImport>],
    hub_slices: &[Arc<EndpointSlice>],
    now: &Time,
) -> Vec<Aggregate> {
    let slices_by_service = crate::watch::by_label(hub_slices, labels::SERVICE_NAME);
    let mut groups: BTreeMap<(String, String), Vec<&Arc<ExportedService>>> = BTreeMap::new();
    for e in exports {
        if !registered.contains(&e.spec.cluster) || e.metadata.deletion_timestamp.is_some() {
            continue;
        }
        groups
            .entry((e.namespace().unwrap_or_default(), e.spec.service.clone()))
            .or_default()
            .push(e);
    }
    let imports_by_key = crate::watch::by_key(hub_imports);
    let mut out = Vec::new();
    for ((ns, svc), group) in groups {
        let Some(merged) = merge_specs(group.iter().map(|e| &e.spec)) else {
            continue;
        };
        let prev_import = imports_by_key.get(&(ns.clone(), svc.clone())).copied();
        let prev_conds = prev_import
            .and_then(|i| i.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let (mut l, annotations) = valid_metadata(&merged);
        l.insert(labels::MANAGED.into(), labels::MANAGED_VALUE.into());
        let mut import = ServiceImport {
            metadata: ObjectMeta {
                name: Some(svc.clone()),
                namespace: Some(ns.clone()),
                labels: Some(l),
                annotations: (!annotations.is_empty()).then_some(annotations),
                ..Default::default()
            },
            spec: to_service_import_spec(&merged),
            status: None,
        };
        let has_slices = slices_by_service
            .get(&(ns.clone(), svc.clone()))
            .is_some_and(|l| l.iter().any(|s| !stale.withdrawn(source_cluster(s))));
        let mut conditions = vec![Condition {
            type_: im_cond::READY.into(),
            status: "True".into(),
            reason: im_cond::reason::READY.into(),
            message: format!("merged from {} exporting cluster(s)", merged.clusters.len()),
            last_transition_time: crate::condition::since(&prev_conds, im_cond::READY, "True", now),
            observed_generation: None,
        }];
        conditions.extend(stale.condition(merged.clusters.iter().map(String::as_str), &prev_conds));
        import.status = Some(ServiceImportStatus {
            endpoint_slice_objects: Some(
                if has_slices {
                    values::ENDPOINT_SLICE_OBJECTS_PRESENT
                } else {
                    values::ENDPOINT_SLICE_OBJECTS_ABSENT
                }
                .into(),
            ),
            clusters: merged
                .cluster_statuses()
                .into_iter()
                .filter(|c| !stale.withdrawn(&c.cluster))
                .collect(),
            conditions,
        });
        let mut verdicts = BTreeMap::new();
        for e in &group {
            let prev = e
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let (status, reason, message) = match &merged.conflict {
                Some(c) => ("True", c.reason(), c.message.clone()),
                None => (
                    "False",
                    ex_cond::reason::NO_CONFLICTS.to_string(),
                    "all exports agree".to_string(),
                ),
            };
            let cond = Condition {
                type_: ex_cond::CONFLICT.into(),
                status: status.into(),
                reason,
                message,
                last_transition_time: crate::condition::since(
                    &prev,
                    ex_cond::CONFLICT,
                    status,
                    now,
                ),
                observed_generation: e.metadata.generation,
            };
            let excluded = merged
                .excluded_ports
                .get(&e.spec.cluster)
                .cloned()
                .unwrap_or_default();
            let invalid = invalid_exported_metadata(&e.spec);
            let (status, reason, message) = if invalid.is_empty() {
                (
                    "True",
                    ex_cond::reason::VALID,
                    "exported labels and annotations are valid".to_string(),
                )
            } else {
                (
                    "False",
                    ex_cond::reason::INVALID_EXPORTED_METADATA,
                    format!(
                        "the service is exported without what the ServiceImport cannot carry: {}; fix or remove it in the ServiceExport",
                        invalid
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ),
                )
            };
            let valid = Condition {
                type_: ex_cond::VALID.into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time: crate::condition::since(&prev, ex_cond::VALID, status, now),
                observed_generation: e.metadata.generation,
            };
            verdicts.insert(e.name_any(), (vec![cond, valid], excluded));
        }
        out.push(Aggregate {
            import,
            merged,
            exports: verdicts,
        });
    }
    out
}

/// Runs the aggregator until `stop`; endpoints of clusters not Ready for `stale_ttl`
/// are withdrawn from the ServiceImports.
pub async fn run(
    hub: kube::Client,
    caches: Arc<super::HubCaches>,
    metrics: Arc<Metrics>,
    stale_ttl: Duration,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let exports = caches.exported.subscribe(wake.clone());
    let imports = caches.imports.subscribe(wake.clone());
    let clusters = caches.clusters.subscribe(wake.clone());
    let slices = caches.slices.subscribe(wake.clone());
    if exports.wait_until_ready().await.is_err()
        || imports.wait_until_ready().await.is_err()
        || clusters.wait_until_ready().await.is_err()
        || slices.wait_until_ready().await.is_err()
    {
        return;
    }
    tracing::info!("aggregator running");
    let mut memo = Memos::default();
    let mut conflicted: std::collections::HashSet<crate::watch::ServiceKey> = Default::default();
    let mut dirty = Dirty::full();
    let mut expiry = ExpiryTimer::default();
    loop {
        let started = Instant::now();
        let clusters_now = clusters.state();
        let registered: BTreeSet<String> = clusters_now
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| {
                c.cluster_id()
                    .map(String::from)
                    .unwrap_or_else(|| c.name_any())
            })
            .collect();
        let now = Time(jiff::Timestamp::now());
        let stale = Staleness::new(&clusters_now, stale_ttl, now.0);
        expiry.set(&wake, stale.next_expiry());
        // only the services that changed, unless this is a full round
        let (exports_now, imports_now, slices_now) = (
            dirty.filter(exports.state()),
            dirty.filter(imports.state()),
            dirty.filter(slices.state()),
        );
        let verdicts = desired(
            &exports_now,
            &registered,
            &stale,
            &imports_now,
            &slices_now,
            &now,
        );
        if dirty.full {
            conflicted.clear();
        } else {
            conflicted.retain(|k| !dirty.keys.contains(k));
        }
        conflicted.extend(
            verdicts
                .iter()
                .filter(|v| v.merged.conflict.is_some())
                .map(|v| crate::watch::key(&v.import)),
        );
        metrics.set_conflicts(conflicted.len() as i64);
        let gone = withdrawals(&exports_now, &slices_now, &registered);
        let failures = write(
            &mut memo,
            &hub,
            &verdicts,
            &gone,
            &exports_now,
            &imports_now,
        )
        .await;
        metrics.observe_reconcile("aggregator", "hub", started.elapsed(), failures.count);
        dirty = match wake.after_round(&dirty, &failures.keys, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// Memos of what the aggregator found already applied.
struct Memos {
    imports: apply::Memo<ServiceImport>,
    import_status: apply::StatusMemo,
    export_status: apply::StatusMemo,
}

impl Default for Memos {
    /// The ServiceImport's spec is the aggregator's alone: what the merge stops
    /// setting (a port, a label, trafficDistribution) goes from the hub.
    fn default() -> Self {
        Memos {
            imports: apply::Memo::owning(&["spec"]),
            import_status: Default::default(),
            export_status: Default::default(),
        }
    }
}

async fn write(
    memo: &mut Memos,
    hub: &kube::Client,
    verdicts: &[Aggregate],
    gone: &Withdrawals,
    exports: &[Arc<ExportedService>],
    imports: &[Arc<ServiceImport>],
) -> Failures {
    let imports_by_key = crate::watch::by_key(imports);
    let exports_by_key = crate::watch::by_key(exports);
    let mut failures = Failures::new("aggregator", "hub");
    let mut keep = BTreeSet::new();
    for v in verdicts {
        let ns = v.import.namespace().unwrap_or_default();
        let name = v.import.name_any();
        keep.insert((ns.clone(), name.clone()));
        let api: Api<ServiceImport> = Api::namespaced(hub.clone(), &ns);
        let actual = imports_by_key.get(&(ns.clone(), name.clone())).copied();
        let key = (ns.clone(), name.clone());
        failures.check(
            key.clone(),
            memo.imports
                .ensure(&api, &v.import, actual.map(|a| a.as_ref()))
                .await,
        );
        let status = json!(v.import.status);
        failures.check(
            key.clone(),
            memo.import_status
                .ensure(
                    &api,
                    &ns,
                    &name,
                    "multicluster.x-k8s.io/v1beta1",
                    "ServiceImport",
                    &status,
                    actual.and_then(|a| a.resource_version()),
                    || actual.and_then(|a| a.status.as_ref()).map(|s| json!(s)),
                )
                .await,
        );
        let eapi: Api<ExportedService> = Api::namespaced(hub.clone(), &ns);
        for (ename, (conds, excluded)) in &v.exports {
            let actual = exports_by_key.get(&(ns.clone(), ename.clone())).copied();
            let status = json!({"conditions": conds, "excludedPorts": excluded});
            failures.check(
                key.clone(),
                memo.export_status
                    .ensure(&eapi, &ns, ename, "causeway.io/v1alpha1", "ExportedService", &status, actual.and_then(|a| a.resource_version()), || {
                        actual
                            .and_then(|e| e.status.as_ref())
                            .map(|s| json!({"conditions": s.conditions, "excludedPorts": s.excluded_ports}))
                    })
                    .await,
            );
        }
    }
    for (k, e) in apply::remove_all_but(
        |ns| Api::<ServiceImport>::namespaced(hub.clone(), ns),
        imports,
        &keep,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    // withdraw what clusters that left the registry exported
    for (ns, name, service) in &gone.exports {
        failures.check(
            (ns.clone(), service.clone()),
            apply::remove(&Api::<ExportedService>::namespaced(hub.clone(), ns), name)
                .await
                .map(|_| Outcome::Written),
        );
    }
    for (ns, name, service) in &gone.slices {
        failures.check(
            (ns.clone(), service.clone()),
            apply::remove(&Api::<EndpointSlice>::namespaced(hub.clone(), ns), name)
                .await
                .map(|_| Outcome::Written),
        );
    }
    failures
}

#[cfg(test)]
mod tests;
