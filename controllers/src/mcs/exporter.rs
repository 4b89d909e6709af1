//! Exporter (one per member): ServiceExport + Service + EndpointSlices in the member →
//! `ExportedService <svc>.<cluster>` and MCS-labelled EndpointSlices on the hub, and the
//! ServiceExport's `Valid` / `Ready` / `Conflict` conditions back in the member.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use causeway_crds::exported_service::{ExportedService, ExportedServicePort, ExportedServiceSpec};
use causeway_crds::mcs::conditions::service_export as cond;
use causeway_crds::mcs::v1beta1::ServiceExport;
use causeway_crds::names::{exported_service_name, hub_slice_name};
use causeway_crds::well_known::{annotations, labels};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::service_keys;
use crate::metrics::Metrics;
use crate::watch::{ByService, by_service};
use crate::watch::{by_own_name, key, own_key, service_key};
use causeway_runtime::apply::{self, Failures};
use causeway_runtime::reflect::cache;
use causeway_runtime::reflect::{Dirty, Wake};

/// What one member exports, computed from its caches.
#[derive(Debug, Default)]
pub struct Desired {
    /// Hub ExportedServices.
    pub exported: Vec<ExportedService>,
    /// Hub EndpointSlices.
    pub slices: Vec<EndpointSlice>,
    /// ServiceExport conditions by (namespace, name).
    pub conditions: BTreeMap<(String, String), Vec<Condition>>,
}

pub(crate) fn labels_for(svc: &str, cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SERVICE_NAME.to_string(), svc.to_string()),
        (labels::SOURCE_CLUSTER.to_string(), cluster.to_string()),
        (
            labels::MANAGED.to_string(),
            labels::MANAGED_VALUE.to_string(),
        ),
    ])
}

/// A condition of a ServiceExport, computed for its `generation` (its
/// `metadata.generation`, the condition's `observedGeneration`).
fn condition(
    type_: &str,
    ok: Option<bool>,
    reason: &str,
    message: String,
    (previous, generation): (&[Condition], Option<i64>),
    now: &Time,
) -> Condition {
    let status = match ok {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: crate::condition::since(previous, type_, status, now),
        observed_generation: generation,
    }
}

/// The conditions of an export that is not exported: `Valid=False` and `Ready=False`,
/// each with (reason, message).
fn not_exported(
    valid: (&str, String),
    ready: (&str, &str),
    previous: (&[Condition], Option<i64>),
    now: &Time,
) -> Vec<Condition> {
    vec![
        condition(cond::VALID, Some(false), valid.0, valid.1, previous, now),
        condition(
            cond::READY,
            Some(false),
            ready.0,
            ready.1.into(),
            previous,
            now,
        ),
    ]
}

/// `Ready=False` reason of the exports of a cluster that left the clusterset.
pub const NOT_IN_CLUSTER_SET: &str = "NotInClusterSet";

/// Pure: an export's conditions once its cluster left the clusterset: `Valid` as it
/// was, `Ready=False` (nothing is exported from here any more) for the export's
/// `generation`, and no `Conflict` (there is nothing left to conflict with).
pub fn left_conditions(
    previous: &[Condition],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ == cond::VALID)
        .cloned()
        .collect();
    out.push(condition(
        cond::READY,
        Some(false),
        NOT_IN_CLUSTER_SET,
        "this cluster left the clusterset: nothing is exported from it (join it again to export)"
            .into(),
        (previous, generation),
        now,
    ));
    out
}

/// Gives every ServiceExport of a member that left the clusterset the
/// [`left_conditions`] (the exporter no longer runs for it, so nothing else would);
/// returns how many it rewrote. One it cannot update does not stop the others: the
/// error names how many failed, and the first failure.
pub async fn mark_left(member: &kube::Client) -> anyhow::Result<usize> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut n = 0;
    let exports = Api::<ServiceExport>::all(member.clone())
        .list(&Default::default())
        .await?;
    let total = exports.items.len();
    let mut failed: Vec<String> = Vec::new();
    for ex in exports.items {
        let ns = ex.namespace().unwrap_or_default();
        let previous = ex
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let status = json!({"conditions": left_conditions(previous, ex.metadata.generation, &now)});
        let actual = ex.status.as_ref().map(|s| json!(s));
        let out = apply::ensure_status(
            &Api::<ServiceExport>::namespaced(member.clone(), &ns),
            &ex.name_any(),
            "multicluster.x-k8s.io/v1beta1",
            "ServiceExport",
            &status,
            actual.as_ref(),
        )
        .await;
        match out {
            Ok(apply::Outcome::Written) => n += 1,
            Ok(_) => {}
            Err(e) => failed.push(format!("{ns}/{}: {e}", ex.name_any())),
        }
    }
    match failed.first() {
        None => Ok(n),
        Some(first) => anyhow::bail!(
            "{} of {total} ServiceExports could not be marked no longer exported (first: {first})",
            failed.len()
        ),
    }
}

/// Pure: the `observedGeneration` of `verdict`, a condition the aggregator computed on
/// the hub object `on_hub` and the exporter copies to the ServiceExport (`Conflict`, a
/// `Valid=False` only the hub can tell). The aggregator's verdict is for the hub
/// object's `metadata.generation`; when that hub object holds `want` (what the export
/// is exported as now, compared as the exporter's applier compares it, but for an
/// `exportCreationTimestamp` the relay moved later), the verdict is for the
/// ServiceExport's `generation`. Else it is still about an earlier export: the
/// generation the export's condition of that type was last set for, if any.
pub fn verdict_generation(
    on_hub: Option<&Arc<ExportedService>>,
    want: &ExportedServiceSpec,
    verdict: &Condition,
    previous: &[Condition],
    generation: Option<i64>,
) -> Option<i64> {
    // the hub object holds `want` as the applier sees it (nothing to write: it holds
    // what `want` sets, and nothing more under `spec`), but for
    // `exportCreationTimestamp`: the relay publishes a Pull member's export with it
    // clamped up to its Cluster's registration (`relay::trusted_creation`), which the
    // exporter does not know, so the hub object of an export created before its
    // cluster registered never holds the export's own time, and a verdict compared
    // with it would never be for the export as it is now. Only a hub time earlier than
    // the export's still tells: neither the exporter nor the relay ever writes one, so
    // it is an earlier export's of the same name (the ServiceExport was recreated), and
    // the verdict, which ranks exports by that time, is about that one.
    let holds = |h: &ExportedService| {
        let earlier = match (
            &h.spec.export_creation_timestamp,
            &want.export_creation_timestamp,
        ) {
            (Some(have), Some(want)) => have.0 < want.0,
            _ => false,
        };
        let (mut have, mut want) = (json!(h.spec), json!(want));
        for spec in [&mut have, &mut want] {
            if let Some(o) = spec.as_object_mut() {
                o.remove("exportCreationTimestamp");
            }
        }
        !earlier && apply::contains(&have, &want) && apply::contains(&want, &have)
    };
    let current = on_hub.is_some_and(|h| {
        h.metadata.generation.is_some()
            && verdict.observed_generation == h.metadata.generation
            && holds(h)
    });
    if current {
        generation
    } else {
        previous
            .iter()
            .find(|c| c.type_ == verdict.type_)
            .and_then(|c| c.observed_generation)
    }
}

/// Pure: the hub objects and export conditions of one member.
pub fn desired(
    cluster: &str,
    exports: &[Arc<ServiceExport>],
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    hub: &[Arc<ExportedService>],
    now: &Time,
) -> Desired {
    let mut out = Desired::default();
    let services = crate::watch::by_key(services);
    let slices = crate::watch::by_label(slices, labels::KUBERNETES_SERVICE_NAME);
    let hub = crate::watch::by_key(hub);
    let svc_by = |ns: &str, n: &str| services.get(&(ns.to_string(), n.to_string())).copied();
    for ex in exports {
        let (ns, name) = (ex.namespace().unwrap_or_default(), ex.name_any());
        let prev = ex
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        if ex.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // what the exporter decides itself is for the export as it is now
        let generation = ex.metadata.generation;
        let mine = (prev.as_slice(), generation);
        if let Some(why) = super::reserved_namespace(&ns) {
            let conds = not_exported(
                (super::RESERVED_NAMESPACE, why),
                (
                    cond::reason::FAILED,
                    "nothing is exported from this namespace",
                ),
                mine,
                now,
            );
            out.conditions.insert((ns, name), conds);
            continue;
        }
        let hub_name = exported_service_name(&name, cluster);
        let name_errors = k8s_validation::dns1035_label(&name);
        if !name_errors.is_empty() {
            // no Service can ever have this name: say so, rather than "create it"
            let why = format!(
                "{name:?} is not a valid Service name ({}), so no Service can match this ServiceExport: a ServiceExport exports the Service of the same name in its namespace; delete it and create one named after the Service",
                name_errors.join("; ")
            );
            let conds = not_exported(
                (cond::reason::NO_SERVICE, why),
                (
                    cond::reason::FAILED,
                    "the ServiceExport's name cannot be a Service's name",
                ),
                mine,
                now,
            );
            out.conditions.insert((ns, name), conds);
            continue;
        }
        let Some(svc) = svc_by(&ns, &name) else {
            let why =
                format!("Service {ns}/{name} not found: create it or delete this ServiceExport");
            let conds = not_exported(
                (cond::reason::NO_SERVICE, why),
                (cond::reason::PENDING, "waiting for the Service"),
                mine,
                now,
            );
            out.conditions.insert((ns, name), conds);
            continue;
        };
        let spec = svc.spec.clone().unwrap_or_default();
        let type_ = spec.type_.clone().unwrap_or_else(|| "ClusterIP".into());
        if type_ == "ExternalName" {
            let conds = not_exported(
                (
                    cond::reason::INVALID_SERVICE_TYPE,
                    "ExternalName Services cannot be exported".into(),
                ),
                (cond::reason::FAILED, "the Service is not exportable"),
                mine,
                now,
            );
            out.conditions.insert((ns, name), conds);
            continue;
        }
        let on_hub = hub.get(&(ns.clone(), hub_name.clone())).copied();
        // the aggregator's verdict on what only the hub checks (exported metadata)
        let hub_invalid = on_hub
            .and_then(|h| h.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == cond::VALID))
            .filter(|c| c.status == "False");
        let headless = spec.cluster_ip.as_deref() == Some("None");
        let exported = ExportedService {
            metadata: ObjectMeta {
                name: Some(hub_name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(labels_for(&name, cluster)),
                ..Default::default()
            },
            spec: ExportedServiceSpec {
                cluster: cluster.to_string(),
                service: name.clone(),
                service_type: Some(type_),
                headless,
                ports: spec
                    .ports
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| ExportedServicePort {
                        name: p.name.filter(|n| !n.is_empty()),
                        protocol: Some(p.protocol.unwrap_or_else(|| "TCP".into())),
                        app_protocol: p.app_protocol,
                        port: p.port,
                        target_port: p.target_port,
                    })
                    .collect(),
                session_affinity: Some(
                    spec.session_affinity
                        .clone()
                        .unwrap_or_else(|| "None".into()),
                ),
                session_affinity_config: spec.session_affinity_config.clone(),
                internal_traffic_policy: spec.internal_traffic_policy.clone(),
                traffic_distribution: spec.traffic_distribution.clone(),
                ip_families: spec.ip_families.clone().unwrap_or_default(),
                cluster_ips: if headless {
                    vec![]
                } else {
                    spec.cluster_ips.clone().unwrap_or_default()
                },
                exported_labels: ex.spec.exported_labels.clone(),
                exported_annotations: ex.spec.exported_annotations.clone(),
                export_creation_timestamp: ex.metadata.creation_timestamp.clone(),
            },
            status: None,
        };
        let no_slices = Vec::new();
        for s in slices
            .get(&(ns.clone(), name.clone()))
            .unwrap_or(&no_slices)
            .iter()
            .filter(|s| {
                s.labels()
                    .get(labels::ENDPOINTSLICE_MANAGED_BY)
                    .map(String::as_str)
                    != Some(labels::ENDPOINTSLICE_MANAGED_BY_VALUE)
            })
        {
            let mut l = labels_for(&name, cluster);
            l.insert(
                labels::ENDPOINTSLICE_MANAGED_BY.into(),
                labels::ENDPOINTSLICE_MANAGED_BY_VALUE.into(),
            );
            out.slices.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(hub_slice_name(&s.name_any(), cluster)),
                    namespace: Some(ns.clone()),
                    labels: Some(l),
                    ..Default::default()
                },
                address_type: s.address_type.clone(),
                endpoints: s.endpoints.clone(),
                ports: s.ports.clone(),
            });
        }
        // the hub's verdict (`Valid=False` on what only the hub checks, `Conflict`)
        // is for the export as it is now only once the hub holds what is exported now
        let copied = |c: &Condition| {
            (
                prev.as_slice(),
                verdict_generation(on_hub, &exported.spec, c, &prev, generation),
            )
        };
        let mut conds = vec![match hub_invalid {
            Some(c) => condition(
                cond::VALID,
                Some(false),
                &c.reason,
                c.message.clone(),
                copied(c),
                now,
            ),
            None => condition(
                cond::VALID,
                Some(true),
                cond::reason::VALID,
                "the Service is exportable".into(),
                mine,
                now,
            ),
        }];
        conds.push(match on_hub {
            Some(_) => condition(
                cond::READY,
                Some(true),
                cond::reason::EXPORTED,
                "exported to the clusterset".into(),
                mine,
                now,
            ),
            None => condition(
                cond::READY,
                None,
                cond::reason::PENDING,
                "exporting".into(),
                mine,
                now,
            ),
        });
        if let Some(c) = on_hub
            .and_then(|h| h.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == cond::CONFLICT))
        {
            conds.push(condition(
                cond::CONFLICT,
                Some(c.status == "True"),
                &c.reason,
                c.message.clone(),
                copied(c),
                now,
            ));
        }
        out.exported.push(exported);
        out.conditions.insert((ns, name), conds);
    }
    out
}

/// Pure: an export's conditions once its hub write has been tried: `Ready=False/Failed`
/// with the API server's answer when it failed (EXP-6), else as desired.
pub fn with_write_failure(mut conds: Vec<Condition>, failure: Option<&str>) -> Vec<Condition> {
    if let Some(why) = failure {
        for c in conds.iter_mut().filter(|c| c.type_ == cond::READY) {
            c.status = "False".into();
            c.reason = cond::reason::FAILED.into();
            c.message = format!("exporting to the hub failed (retrying): {why}");
        }
    }
    conds
}

/// A Kubernetes Event to publish on a ServiceExport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEvent {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// Short reason, e.g. `PortConflict`.
    pub reason: String,
    /// What happened, for people.
    pub note: String,
}

/// Pure: the Events a condition change deserves (transitions only, so nothing repeats).
pub fn events_for(prev: &[Condition], next: &[Condition]) -> Vec<ExportEvent> {
    let get = |l: &[Condition], t: &str| {
        l.iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let mut out = Vec::new();
    let (p, n) = (get(prev, cond::CONFLICT), get(next, cond::CONFLICT));
    match (&p, &n) {
        (_, Some((s, r, m))) if s == "True" && p.as_ref() != n.as_ref() => out.push(ExportEvent {
            warning: true,
            reason: r.clone(),
            note: m.clone(),
        }),
        (Some((ps, _, _)), Some((s, _, _))) if ps == "True" && s == "False" => {
            out.push(ExportEvent {
                warning: false,
                reason: "ConflictResolved".into(),
                note: "all exports of this service agree again".into(),
            })
        }
        _ => {}
    }
    let (p, n) = (get(prev, cond::VALID), get(next, cond::VALID));
    if let Some((s, r, m)) = &n
        && s == "False"
        && p.as_ref() != n.as_ref()
    {
        out.push(ExportEvent {
            warning: true,
            reason: r.clone(),
            note: m.clone(),
        });
    }
    let (p, n) = (get(prev, cond::READY), get(next, cond::READY));
    if let Some((s, r, m)) = &n
        && s == "False"
        && r == cond::reason::FAILED
        && p.as_ref()
            .is_none_or(|(_, pr, _)| pr != cond::reason::FAILED)
    {
        out.push(ExportEvent {
            warning: true,
            reason: "ExportFailed".into(),
            note: m.clone(),
        });
    }
    if let Some((s, r, _)) = &n
        && s == "True"
        && p.as_ref().is_none_or(|(ps, _, _)| ps != "True")
    {
        out.push(ExportEvent {
            warning: false,
            reason: r.clone(),
            note: "the Service is exported to the clusterset".into(),
        });
    }
    out
}

/// Where the exporter writes a member's exports on the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Straight into the Services' namespaces (Push members: the hub's controller runs
    /// the exporter), creating them as needed.
    Hub,
    /// Into the outbox of the Cluster named here (Pull members: the agent runs the
    /// exporter with a hub identity that may write only its execution namespace); the
    /// hub's relay publishes them. Never creates a namespace.
    Outbox {
        /// The member's Cluster object name on the hub.
        cluster: String,
    },
}

/// Runs the exporter of one member until `stop`, writing to the hub directly.
pub async fn run(
    cluster: String,
    member: kube::Client,
    hub: kube::Client,
    caches: Arc<super::HubCaches>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    run_to(cluster, member, hub, caches, Target::Hub, metrics, stop).await
}

/// Runs the exporter of member `cluster` (its cluster id, the source-cluster label)
/// until `stop`, writing to `target`. What the hub made of the exports (Ready,
/// conflicts) is read from the hub caches either way.
pub async fn run_to(
    cluster: String,
    member: kube::Client,
    hub: kube::Client,
    caches: Arc<super::HubCaches>,
    target: Target,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let all = watcher::Config::default();
    let exports = cache(
        Api::<ServiceExport>::all(member.clone()),
        all.clone(),
        wake.clone(),
        stop.clone(),
        "member serviceexports",
        by_own_name(),
    );
    // the member's own Services and slices, not the ones the importer writes there
    let services = cache(
        Api::<Service>::all(member.clone()),
        all.clone().labels(labels::NOT_DERIVED_SELECTOR),
        wake.clone(),
        stop.clone(),
        "member services",
        by_own_name(),
    );
    let slices = cache(
        Api::<EndpointSlice>::all(member.clone()),
        all.clone().labels(&format!(
            "{},{}!={}",
            labels::KUBERNETES_SERVICE_NAME,
            labels::ENDPOINTSLICE_MANAGED_BY,
            labels::ENDPOINTSLICE_MANAGED_BY_VALUE
        )),
        wake.clone(),
        stop.clone(),
        "member endpointslices",
        by_service(),
    );
    let hub_exported = caches.exported.subscribe(wake.clone());
    let hub_slices = caches.slices.subscribe(wake.clone());
    // where the exporter's own writes are read back from: the hub caches, or its outbox
    let outbox = match &target {
        Target::Hub => None,
        Target::Outbox { cluster: name } => {
            let ns = causeway_crds::names::execution_namespace(name);
            let mine = all.clone().labels(&outbox::selector(name));
            Some((
                cache(
                    Api::<ExportedService>::namespaced(hub.clone(), &ns),
                    mine.clone(),
                    wake.clone(),
                    stop.clone(),
                    "outbox exportedservices",
                    by_service(),
                ),
                cache(
                    Api::<EndpointSlice>::namespaced(hub.clone(), &ns),
                    mine,
                    wake.clone(),
                    stop.clone(),
                    "outbox endpointslices",
                    by_service(),
                ),
            ))
        }
    };
    let mine = |labels: &std::collections::BTreeMap<String, String>| {
        labels.get(labels::SOURCE_CLUSTER).map(String::as_str) == Some(cluster.as_str())
    };
    for ready in [
        exports.wait_until_ready().await.is_ok(),
        services.wait_until_ready().await.is_ok(),
        slices.wait_until_ready().await.is_ok(),
        hub_exported.wait_until_ready().await.is_ok(),
        hub_slices.wait_until_ready().await.is_ok(),
        match &outbox {
            Some((e, s)) => {
                e.wait_until_ready().await.is_ok() && s.wait_until_ready().await.is_ok()
            }
            None => true,
        },
    ] {
        if !ready {
            return;
        }
    }
    tracing::info!(cluster, "exporter running");
    let recorder = kube::runtime::events::Recorder::new(
        member.clone(),
        kube::runtime::events::Reporter {
            controller: "causeway-exporter".into(),
            instance: None,
        },
    );
    let mut hub_namespaces = BTreeSet::new();
    let mut memo = Memos::default();
    let mut dirty = Dirty::full();
    let mut exported = causeway_runtime::reflect::PartCount::default();
    loop {
        let started = Instant::now();
        let now = Time(jiff::Timestamp::now());
        exported.round(&dirty);
        // every round a part of its services at a time (see `super::ROUND_PART`)
        let keys = match dirty.full {
            true => {
                let mut all: Vec<_> = exports.state().iter().map(|o| key(o.as_ref())).collect();
                all.extend(services.state().iter().map(|o| key(o.as_ref())));
                all.extend(service_keys(&slices.state()));
                all.extend(service_keys(&hub_exported.state()));
                all.extend(service_keys(&hub_slices.state()));
                if let Some((e, s)) = &outbox {
                    all.extend(service_keys(&e.state()));
                    all.extend(service_keys(&s.state()));
                }
                all
            }
            false => vec![],
        };
        let mut failed = HashSet::new();
        let mut count = 0;
        for part in dirty.parts(keys, super::ROUND_PART) {
            let my_exported: Vec<_> = part
                .filter(hub_exported.state())
                .into_iter()
                .filter(|e| mine(e.labels()))
                .collect();
            let my_slices: Vec<_> = part
                .filter(hub_slices.state())
                .into_iter()
                .filter(|s| mine(s.labels()))
                .collect();
            let exports_now = part.filter_by(exports.state(), own_key);
            let want = desired(
                &cluster,
                &exports_now,
                &part.filter_by(services.state(), own_key),
                &part.filter(slices.state()),
                &my_exported,
                &now,
            );
            let mut failures = Failures::new("exporter", &cluster);
            let (want, actual_exported, actual_slices) = match (&target, &outbox) {
                (Target::Outbox { cluster: name }, Some((e, s))) => (
                    outbox::place(want, name),
                    part.filter(e.state()),
                    part.filter(s.state()),
                ),
                _ => {
                    let services = want.exported.iter().filter_map(service_key);
                    ensure_namespaces(&hub, services, &mut hub_namespaces, &mut failures).await;
                    (want, my_exported, my_slices)
                }
            };
            let written = write(
                &mut failures,
                &mut memo,
                &member,
                &hub,
                &want,
                &exports_now,
                &actual_exported,
                &actual_slices,
            )
            .await;
            publish_events(&recorder, &exports_now, &written).await;
            forget_failed_namespaces(&mut hub_namespaces, &failures);
            count += failures.count;
            exported.set(&part, want.exported.iter().filter_map(service_key));
            failed.extend(failures.keys);
        }
        metrics.observe_reconcile("exporter", &cluster, started.elapsed(), count);
        metrics.set_exports(&cluster, exported.total() as i64);
        dirty = match wake.after_round(&dirty, &failed, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

pub mod outbox;
pub(crate) mod write;
use write::{Memos, ensure_namespaces, forget_failed_namespaces, publish_events, write};

#[cfg(test)]
mod tests;
