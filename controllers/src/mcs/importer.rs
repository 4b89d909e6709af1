//! Importer (one per member): hub ServiceImports and MCS EndpointSlices → in every
//! member namespace that exists: the ServiceImport (same ns/name, `ips` from the
//! derived Service), the derived Service, and one EndpointSlice per source slice
//! carrying only the ports that source cluster may serve. The slices of a source
//! cluster that stayed not Ready past the stale-endpoints TTL are left out until it is
//! Ready again, and the ServiceImport says which of its clusters are stale
//! ([`super::stale`], EPS-7). Ports a mesh route captures (the hub ServiceImport's mesh
//! annotations, GW-4) leave the source slices for a waypoint slice per IP family that
//! sends them to the causeway-proxies' mesh ports ([`waypoint`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_crds::exported_service::ExportedService;
use causeway_crds::mcs::conditions::service_import as im_cond;
use causeway_crds::mcs::merge::exports_port;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::mcs::{ServiceImportStatus, ServiceImportType, values};
use causeway_crds::names::{derived_service_name, member_slice_name};
use causeway_crds::well_known::{annotations, labels};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::stale::{ExpiryTimer, Staleness};
use super::{service_keys, source_cluster};
use crate::metrics::Metrics;
use crate::watch::service_key;
use crate::watch::{ByService, by_service};
use causeway_runtime::apply::{self, Failures, Outcome};
use causeway_runtime::reflect::{Dirty, Wake};
use causeway_runtime::reflect::{Managed, cache, cache_keeping};

/// What one member should hold.
#[derive(Debug, Default)]
pub struct Desired {
    /// Member ServiceImports (spec + metadata), with their status.
    pub imports: Vec<(ServiceImport, ServiceImportStatus)>,
    /// Derived Services.
    pub services: Vec<Service>,
    /// MCS EndpointSlices.
    pub slices: Vec<EndpointSlice>,
    /// Hub ServiceImports this member does not import because their namespace does
    /// not exist here (namespace sameness, NS-2), to be told on the hub object.
    pub not_imported: Vec<ObjectReference>,
}

/// Pure: whether the derived Service `actual` must be deleted and created again to
/// become `desired`: what the API server never lets an update change differs — headless
/// or not (a ServiceImport that changed type), or the primary IP family asked for.
pub fn needs_recreate(actual: &Service, desired: &Service) -> bool {
    let headless =
        |s: &Service| s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    let primary = |s: &Service| {
        s.spec
            .as_ref()
            .and_then(|s| s.ip_families.as_ref())
            .and_then(|f| f.first().cloned())
    };
    headless(actual) != headless(desired)
        || primary(desired).is_some_and(|want| primary(actual).is_some_and(|have| have != want))
}

/// The Event a hub ServiceImport gets when `cluster` does not import it because its
/// namespace `ns` does not exist there.
pub fn not_imported_event(cluster: &str, ns: &str, name: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "NamespaceMissing".into(),
        note: Some(format!(
            "cluster {cluster} does not import {ns}/{name}: namespace {ns} does not exist there (namespace sameness: a multi-cluster service is imported only by clusters that have its namespace); create namespace {ns} in {cluster} to import it"
        )),
        action: "Import".into(),
        secondary: None,
    }
}

fn managed_labels(svc: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SERVICE_NAME.to_string(), svc.to_string()),
        (
            labels::MANAGED.to_string(),
            labels::MANAGED_VALUE.to_string(),
        ),
    ])
}

/// Pure: the derived Service's ports for an import's `ports`, each with every field
/// kube-apiserver defaults on a ClusterIP Service port already set as it would set it
/// (`protocol` TCP, `targetPort` the port; a `name` that is empty is left out, as the
/// API server stores none), so that a derived Service that holds them is seen as
/// applied, and one that holds more (an `appProtocol` the import no longer has) is not.
pub fn derived_ports(ports: &[causeway_crds::mcs::ServicePort]) -> Vec<ServicePort> {
    ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            protocol: Some(p.protocol_or_default().to_string()),
            app_protocol: p.app_protocol.clone(),
            port: p.port,
            target_port: Some(IntOrString::Int(p.port)),
            ..Default::default()
        })
        .collect()
}

/// Pure: the member's imported objects.
#[allow(clippy::too_many_arguments)]
pub fn desired(
    hub_imports: &[Arc<ServiceImport>],
    hub_slices: &[Arc<EndpointSlice>],
    exported: &[Arc<ExportedService>],
    stale: &Staleness,
    namespaces: &[Arc<Namespace>],
    member_services: &[Arc<Service>],
    member_imports: &[Arc<ServiceImport>],
    now: &Time,
) -> Desired {
    let live_ns: BTreeSet<String> = namespaces
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.name_any())
        .collect();
    let services_by_key = crate::watch::by_key(member_services);
    let imports_by_key = crate::watch::by_key(member_imports);
    let slices_by_service = crate::watch::by_label(hub_slices, labels::SERVICE_NAME);
    // each service's exports by cluster, grouped once per pass
    let mut exports_of: std::collections::HashMap<
        (String, String),
        BTreeMap<&str, &Arc<ExportedService>>,
    > = std::collections::HashMap::new();
    for e in exported {
        exports_of
            .entry((e.namespace().unwrap_or_default(), e.spec.service.clone()))
            .or_default()
            .insert(e.spec.cluster.as_str(), e);
    }
    let mut out = Desired::default();
    for si in hub_imports {
        let ns = si.namespace().unwrap_or_default();
        if !live_ns.contains(&ns) {
            // NS-2: only where the namespace exists
            out.not_imported.push(si.object_ref(&()));
            continue;
        }
        let name = si.name_any();
        let derived = derived_service_name(&ns, &name);
        let headless = si.spec.type_ == ServiceImportType::Headless;
        let families = si.spec.ip_families.clone();
        let svc = Service {
            metadata: ObjectMeta {
                name: Some(derived.clone()),
                namespace: Some(ns.clone()),
                labels: Some(managed_labels(&name)),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".into()),
                cluster_ip: headless.then(|| "None".to_string()),
                // one family: ask for exactly it (a cluster without it refuses, IMP-7);
                // two: PreferDualStack lets a single-stack cluster import with what it has
                ip_families: (families.len() == 1).then(|| families.clone()),
                ip_family_policy: Some(
                    if families.len() > 1 {
                        "PreferDualStack"
                    } else {
                        "SingleStack"
                    }
                    .into(),
                ),
                ports: Some(derived_ports(&si.spec.ports)),
                session_affinity: si.spec.session_affinity.clone(),
                session_affinity_config: si.spec.session_affinity_config.clone(),
                // IMP-10: kube-proxy honours these for clusterset traffic only if the
                // derived Service carries them
                internal_traffic_policy: si.spec.internal_traffic_policy.clone(),
                traffic_distribution: si.spec.traffic_distribution.clone(),
                ..Default::default()
            }),
            status: None,
        };
        let actual_svc = services_by_key.get(&(ns.clone(), derived.clone())).copied();
        let (ips, fams) = match actual_svc.and_then(|s| s.spec.as_ref()) {
            Some(spec) if !headless => (
                // (a Service still headless from before it is recreated has none)
                spec.cluster_ips
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|ip| ip != "None")
                    .collect(),
                spec.ip_families.clone().unwrap_or_else(|| families.clone()),
            ),
            Some(spec) => (
                vec![],
                spec.ip_families
                    .clone()
                    .filter(|f| !f.is_empty())
                    .unwrap_or_else(|| families.clone()),
            ),
            None => (vec![], families.clone()),
        };
        let ready = headless || !ips.is_empty();
        let mut import = ServiceImport {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: si.metadata.labels.clone(),
                annotations: Some({
                    let mut a = si.metadata.annotations.clone().unwrap_or_default();
                    a.insert(annotations::DERIVED_SERVICE.into(), derived.clone());
                    a
                }),
                ..Default::default()
            },
            spec: si.spec.clone(),
            status: None,
        };
        import.spec.ips = if headless { vec![] } else { ips };
        // the mesh waypoint's slices go with the derived Service's families
        let waypoint_families = fams.clone();
        import.spec.ip_families = fams;
        let prev = imports_by_key
            .get(&(ns.clone(), name.clone()))
            .and_then(|i| i.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let (status, reason, message) = if ready {
            ("True", im_cond::reason::READY, "imported")
        } else {
            (
                "False",
                im_cond::reason::PENDING,
                "waiting for the derived Service's cluster IPs",
            )
        };
        let last = crate::condition::since(&prev, im_cond::READY, status, now);
        let none = Vec::new();
        let all_slices_of = slices_by_service
            .get(&(ns.clone(), name.clone()))
            .unwrap_or(&none);
        let hub_clusters = si
            .status
            .as_ref()
            .map(|s| s.clusters.clone())
            .unwrap_or_default();
        // EPS-7: every cluster serving it (also those the hub import already left out)
        let serving: BTreeSet<&str> = hub_clusters
            .iter()
            .map(|c| c.cluster.as_str())
            .chain(all_slices_of.iter().map(|s| source_cluster(s)))
            .collect();
        let mut conditions = vec![Condition {
            type_: im_cond::READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: last,
            observed_generation: None,
        }];
        conditions.extend(stale.condition(serving, &prev));
        // a hub slice counts only while its cluster's export is on the hub: one left
        // behind (a refused delete, a refused export) never serves, not even headless
        // DNS, which reads the slices' addresses whatever their ports
        let exports = exports_of.get(&(ns.clone(), name.clone()));
        let hub_slices_of: Vec<&Arc<EndpointSlice>> = all_slices_of
            .iter()
            .copied()
            .filter(|s| !stale.withdrawn(source_cluster(s)))
            .filter(|s| exports.is_some_and(|es| es.contains_key(source_cluster(s))))
            .collect();
        let st = ServiceImportStatus {
            // one member slice per hub slice (IMP-13)
            endpoint_slice_objects: Some(
                if hub_slices_of.is_empty() {
                    values::ENDPOINT_SLICE_OBJECTS_ABSENT
                } else {
                    values::ENDPOINT_SLICE_OBJECTS_PRESENT
                }
                .into(),
            ),
            clusters: hub_clusters
                .into_iter()
                .filter(|c| !stale.withdrawn(&c.cluster))
                .collect(),
            conditions,
        };
        out.imports.push((import, st));
        out.services.push(svc);
        // slices: one per hub slice, with the ports of the import its source cluster
        // serves: its export has exactly that port (while another export has it, a port
        // of that name that is another one never gets the import's traffic, even
        // before the aggregator's verdict lists it in excludedPorts: CR-3), and the
        // verdict does not exclude it
        // the import's ports some export has exactly; a port none has is one the
        // exports changed and the hub import has not caught up with yet: meanwhile it
        // goes by name, as the import's own ports do, rather than to no cluster
        // GW-4: ports a mesh route captures go to the causeway-proxies' mesh ports
        let (captured, waypoints) = waypoint(si, &derived, &waypoint_families);
        // a family with no waypoint (no proxy address of it) keeps its direct endpoints
        let waypointed: BTreeSet<String> =
            waypoints.iter().map(|w| w.address_type.clone()).collect();
        let owned: BTreeSet<&Option<String>> = si
            .spec
            .ports
            .iter()
            .filter(|p| exports.is_some_and(|es| es.values().any(|e| exports_port(&e.spec, p))))
            .map(|p| &p.name)
            .collect();
        for hs in hub_slices_of {
            let src = source_cluster(hs).to_string();
            let export = exports.and_then(|es| es.get(src.as_str())).copied();
            let excluded: BTreeSet<String> = export
                .and_then(|e| e.status.as_ref())
                .map(|s| {
                    s.excluded_ports
                        .iter()
                        .map(|p| p.name.clone().unwrap_or_default())
                        .collect()
                })
                .unwrap_or_default();
            let served: BTreeSet<String> = si
                .spec
                .ports
                .iter()
                .filter(|p| {
                    export.is_some_and(|e| {
                        exports_port(&e.spec, p)
                            || (!owned.contains(&p.name) && exports_name(&e.spec, &p.name))
                    })
                })
                .map(|p| p.name.clone().unwrap_or_default())
                .filter(|n| !excluded.contains(n))
                .collect();
            let redirected = waypointed.contains(&hs.address_type);
            let ports: Vec<_> = hs
                .ports
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| served.contains(p.name.as_deref().unwrap_or_default()))
                .filter(|p| {
                    !(redirected && captured.contains(p.name.as_deref().unwrap_or_default()))
                })
                .collect();
            let mut l = managed_labels(&name);
            l.insert(labels::SOURCE_CLUSTER.into(), src);
            l.insert(
                labels::ENDPOINTSLICE_MANAGED_BY.into(),
                labels::ENDPOINTSLICE_MANAGED_BY_VALUE.into(),
            );
            l.insert(labels::KUBERNETES_SERVICE_NAME.into(), derived.clone());
            out.slices.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(member_slice_name(&derived, &hs.name_any())),
                    namespace: Some(ns.clone()),
                    labels: Some(l),
                    annotations: hs.annotations().get(annotations::EXPORTED_AT).map(|v| {
                        BTreeMap::from([(annotations::EXPORTED_AT.to_string(), v.clone())])
                    }),
                    ..Default::default()
                },
                address_type: hs.address_type.clone(),
                endpoints: hs.endpoints.clone(),
                ports: Some(ports),
            });
        }
        out.slices.extend(waypoints);
    }
    out
}

/// What the name of the IPv4 waypoint slice of a derived Service is made from
/// ([`member_slice_name`]); no hub slice has this name (theirs hold the cluster after
/// a '.').
pub const WAYPOINT_IPV4: &str = "mesh-ipv4";
/// What the name of the IPv6 waypoint slice is made from.
pub const WAYPOINT_IPV6: &str = "mesh-ipv6";

/// GW-4: the ports of `si` that mesh routes capture (by name), and the slices of the
/// derived Service `derived` that send them to the causeway-proxies serving them, as
/// the hub ServiceImport's mesh annotations say (`causeway_crds::gateway::mesh`): one
/// per family of `families` (the derived Service's; none: IPv4) the proxies have an
/// address of, since kube-proxy reads only the slices of a Service's own families and
/// sends each family's clusterset IP to the slices of that family. The captured ports
/// leave only the source slices of a family that has a waypoint here.
///
/// Each family's slice has a name of its own ([`WAYPOINT_IPV4`], [`WAYPOINT_IPV6`]): a
/// slice's `addressType` never changes, so a name must never go from one family to
/// the other. Neither is the single waypoint slice's name of before (`mesh`, of the
/// derived Service's first family, so IPv6 for an IPv6-first import): that slice is no
/// longer desired and goes once the new ones are written, where applying an IPv4 slice
/// under its name would be refused (422) every round.
fn waypoint(
    si: &ServiceImport,
    derived: &str,
    families: &[String],
) -> (BTreeSet<String>, Vec<EndpointSlice>) {
    use causeway_crds::gateway::mesh::{addresses_of, ports_of};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    let mesh = ports_of(si);
    // only TCP ports are captured (a UDP port of the same number keeps its pods)
    let ports: Vec<EndpointPort> = si
        .spec
        .ports
        .iter()
        .filter(|p| p.protocol_or_default() == "TCP")
        .filter_map(|p| {
            Some(EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(i32::from(*mesh.get(&p.port)?)),
                protocol: Some("TCP".into()),
                app_protocol: None,
            })
        })
        .collect();
    if ports.is_empty() {
        return (BTreeSet::new(), vec![]);
    }
    let addresses = addresses_of(si);
    let ipv4 = ["IPv4".to_string()];
    let families = if families.is_empty() {
        &ipv4[..]
    } else {
        families
    };
    let mut seen = BTreeSet::new();
    let slices: Vec<EndpointSlice> = families
        .iter()
        .filter(|f| seen.insert(f.as_str()))
        .filter_map(|family| {
            let ipv6 = match family.as_str() {
                "IPv4" => false,
                "IPv6" => true,
                _ => return None,
            };
            // the proxies' addresses of this family
            let endpoints: Vec<Endpoint> = addresses
                .iter()
                .filter(|a| a.is_ipv6() == ipv6)
                .map(|a| Endpoint {
                    addresses: vec![a.to_string()],
                    conditions: Some(EndpointConditions {
                        ready: Some(true),
                        serving: Some(true),
                        terminating: Some(false),
                    }),
                    ..Default::default()
                })
                .collect();
            if endpoints.is_empty() {
                return None;
            }
            let mut l = managed_labels(&si.name_any());
            l.insert(
                labels::ENDPOINTSLICE_MANAGED_BY.into(),
                labels::ENDPOINTSLICE_MANAGED_BY_VALUE.into(),
            );
            l.insert(labels::KUBERNETES_SERVICE_NAME.into(), derived.to_string());
            Some(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(member_slice_name(
                        derived,
                        if ipv6 { WAYPOINT_IPV6 } else { WAYPOINT_IPV4 },
                    )),
                    namespace: si.namespace(),
                    labels: Some(l),
                    ..Default::default()
                },
                address_type: family.clone(),
                endpoints,
                ports: Some(ports.clone()),
            })
        })
        .collect();
    if slices.is_empty() {
        return (BTreeSet::new(), vec![]);
    }
    let captured = ports.iter().filter_map(|p| p.name.clone()).collect();
    (captured, slices)
}

/// Whether an export has a port named `name` (unset and empty are one name).
fn exports_name(
    spec: &causeway_crds::exported_service::ExportedServiceSpec,
    name: &Option<String>,
) -> bool {
    let name = name.as_deref().unwrap_or_default();
    spec.ports
        .iter()
        .any(|p| p.name.as_deref().unwrap_or_default() == name)
}

/// Runs the importer of one member until `stop`.
pub async fn run(
    cluster: String,
    member: kube::Client,
    hub: kube::Client,
    caches: Arc<super::HubCaches>,
    metrics: Arc<Metrics>,
    stale_ttl: Duration,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::MANAGED,
        labels::MANAGED_VALUE
    ));
    let hub_imports = caches.imports.subscribe(wake.clone());
    let hub_slices = caches.slices.subscribe(wake.clone());
    let exported = caches.exported.subscribe(wake.clone());
    let clusters = caches.clusters.subscribe(wake.clone());
    let namespaces = cache(
        Api::<Namespace>::all(member.clone()),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "member namespaces",
        None,
    );
    let imports = cache_keeping(
        Api::<ServiceImport>::all(member.clone()),
        managed.clone(),
        wake.clone(),
        stop.clone(),
        "member serviceimports",
        by_service(),
        Managed::OwnMetadata,
    );
    let services = cache_keeping(
        Api::<Service>::all(member.clone()),
        watcher::Config::default().labels(labels::DERIVED_SERVICE_SELECTOR),
        wake.clone(),
        stop.clone(),
        "member derived services",
        by_service(),
        Managed::OwnMetadata,
    );
    let slices = cache(
        Api::<EndpointSlice>::all(member.clone()),
        watcher::Config::default().labels(&format!(
            "{}={}",
            labels::ENDPOINTSLICE_MANAGED_BY,
            labels::ENDPOINTSLICE_MANAGED_BY_VALUE
        )),
        wake.clone(),
        stop.clone(),
        "member mcs endpointslices",
        by_service(),
    );
    if hub_imports.wait_until_ready().await.is_err()
        || hub_slices.wait_until_ready().await.is_err()
        || exported.wait_until_ready().await.is_err()
        || clusters.wait_until_ready().await.is_err()
        || namespaces.wait_until_ready().await.is_err()
        || imports.wait_until_ready().await.is_err()
        || services.wait_until_ready().await.is_err()
        || slices.wait_until_ready().await.is_err()
    {
        return;
    }
    tracing::info!(cluster, "importer running");
    let recorder = Recorder::new(
        hub,
        Reporter {
            controller: "causeway-importer".into(),
            instance: Some(cluster.clone()),
        },
    );
    // hub imports already told about (once per import while its namespace is missing)
    let mut told: HashSet<(String, String)> = HashSet::new();
    let mut memo = Memos::default();
    let mut dirty = Dirty::full();
    let mut imported = causeway_runtime::reflect::PartCount::default();
    let mut expiry = ExpiryTimer::default();
    loop {
        let started = Instant::now();
        let now = Time(jiff::Timestamp::now());
        let stale = Staleness::new(&clusters.state(), stale_ttl, now.0);
        expiry.set(&wake, stale.next_expiry());
        // only the services that changed, unless this is a full round; a part of them
        // at a time, so the round's desired slices are not all held at once
        let every_key = || {
            let mut all = service_keys(&hub_imports.state());
            all.extend(service_keys(&imports.state()));
            all.extend(service_keys(&services.state()));
            all.extend(service_keys(&slices.state()));
            all
        };
        let mut failed = HashSet::new();
        let mut count = 0;
        imported.round(&dirty);
        let keys = if dirty.full { every_key() } else { vec![] };
        for part in dirty.parts(keys, super::ROUND_PART) {
            let (member_imports, member_services, member_slices) = (
                part.filter(imports.state()),
                part.filter(services.state()),
                part.filter(slices.state()),
            );
            let want = desired(
                &part.filter(hub_imports.state()),
                &part.filter(hub_slices.state()),
                &part.filter(exported.state()),
                &stale,
                &namespaces.state(),
                &member_services,
                &member_imports,
                &now,
            );
            let failures = write(
                &mut memo,
                &cluster,
                &member,
                &want,
                &member_imports,
                &member_services,
                &member_slices,
                &metrics,
                &now,
            )
            .await;
            tell_not_imported(&recorder, &cluster, &want.not_imported, &part, &mut told).await;
            count += failures.count;
            imported.set(
                &part,
                want.imports.iter().map(|(i, _)| crate::watch::key(i)),
            );
            failed.extend(failures.keys);
        }
        metrics.observe_reconcile("importer", &cluster, started.elapsed(), count);
        metrics.set_imports(&cluster, imported.total() as i64);
        dirty = match wake.after_round(&dirty, &failed, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// Publishes a Warning Event on each hub ServiceImport this member newly does not
/// import, and forgets those it imports again (or that are gone) so a later miss is
/// told again.
async fn tell_not_imported(
    recorder: &Recorder,
    cluster: &str,
    not_imported: &[ObjectReference],
    dirty: &Dirty,
    told: &mut HashSet<(String, String)>,
) {
    let now: HashSet<(String, String)> = not_imported
        .iter()
        .map(|r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    told.retain(|k| now.contains(k) || !(dirty.full || dirty.keys.contains(k)));
    for r in not_imported {
        let key = (
            r.namespace.clone().unwrap_or_default(),
            r.name.clone().unwrap_or_default(),
        );
        if told.contains(&key) {
            continue;
        }
        let ev = not_imported_event(cluster, &key.0, &key.1);
        match recorder.publish(&ev, r).await {
            Ok(()) => {
                told.insert(key);
            }
            Err(e) => tracing::debug!(cluster, error = %e, "could not publish an Event"),
        }
    }
}

/// `Ready=False` reason of a member ServiceImport whose derived Service the member
/// refused for another reason than its IP families (a ResourceQuota, an admission
/// webhook, no cluster IP left): the reason a ServiceExport gives a failed write
/// (EXP-6).
pub const FAILED: &str = causeway_crds::mcs::conditions::service_export::reason::FAILED;

/// Why the member refused an import's derived Service, with the API server's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This cluster cannot serve the service's IP families (IMP-7).
    IpFamilies(String),
    /// Any other refusal of a write (create, update, or the delete of a recreate).
    Write(String),
}

/// Pure: whether `e`, the failed write (apply, or the delete of a recreate) of an
/// import's derived Service, is the member's refusal, and which: only an answer that
/// says no to this object (400, 403 — a ResourceQuota's "exceeded quota", an admission
/// webhook, RBAC —, 409, 422), and kube-apiserver's 500 when the service CIDR has no
/// cluster IP left ("failed to allocate a serviceIP: range is full", an InternalError
/// that does not pass by itself). A write that got no such answer (a timeout, a lost
/// connection, 429, any other 5xx, a 404 of a namespace that just went) is not one: it
/// is only retried, and the import's condition is not changed for it
/// ([`unanswered_status`]).
pub fn refusal(e: &kube::Error) -> Option<Refused> {
    match e {
        kube::Error::Api(status) => match status.code {
            422 if status.message.contains("spec.ipFamilies") => {
                Some(Refused::IpFamilies(status.message.clone()))
            }
            500 if status.message.contains("failed to allocate a serviceIP") => {
                Some(Refused::Write(status.message.clone()))
            }
            400 | 403 | 409 | 422 => Some(Refused::Write(if status.message.is_empty() {
                e.to_string()
            } else {
                status.message.clone()
            })),
            _ => None,
        },
        _ => None,
    }
}

/// Pure: the import status while the write of its derived Service gets no answer
/// ([`refusal`] says it is not one): as desired, except that a `Ready=False` a refusal
/// set (`Failed`, `IPFamilyNotSupported`) stays as it is, until a write is answered.
/// `previous` are the member import's conditions now.
pub fn unanswered_status(st: &ServiceImportStatus, previous: &[Condition]) -> ServiceImportStatus {
    let mut st = st.clone();
    let refused = previous.iter().find(|c| {
        c.type_ == im_cond::READY
            && c.status == "False"
            && (c.reason == FAILED || c.reason == im_cond::reason::IP_FAMILY_NOT_SUPPORTED)
    });
    if let Some(kept) = refused {
        for c in st
            .conditions
            .iter_mut()
            .filter(|c| c.type_ == im_cond::READY)
        {
            *c = kept.clone();
        }
    }
    st
}

/// Pure: the import status when the member refused its derived Service:
/// `Ready=False`, `IPFamilyNotSupported` (IMP-7) or [`FAILED`], with the API server's
/// message, in place of waiting for cluster IPs that will not come.
/// `previous` are the member import's conditions now.
pub fn refused_status(
    st: &ServiceImportStatus,
    why: &Refused,
    previous: &[Condition],
    now: &Time,
) -> ServiceImportStatus {
    let mut st = st.clone();
    for c in &mut st.conditions {
        if c.type_ == im_cond::READY {
            c.last_transition_time =
                crate::condition::since(previous, im_cond::READY, "False", now);
            c.status = "False".into();
            (c.reason, c.message) = match why {
                Refused::IpFamilies(m) => (
                    im_cond::reason::IP_FAMILY_NOT_SUPPORTED.into(),
                    format!("this cluster cannot serve the service's IP families: {m}"),
                ),
                Refused::Write(m) => (
                    FAILED.into(),
                    format!("this cluster refused the derived Service (retrying): {m}"),
                ),
            };
        }
    }
    st
}

mod write;
use write::{Memos, write};

/// Deletes everything the importer manages in a member (ServiceImports, derived Services,
/// MCS EndpointSlices); returns how many objects went.
pub async fn withdraw_all(member: &kube::Client) -> anyhow::Result<usize> {
    use kube::api::ListParams;
    let managed =
        ListParams::default().labels(&format!("{}={}", labels::MANAGED, labels::MANAGED_VALUE));
    let derived = ListParams::default().labels(labels::DERIVED_SERVICE_SELECTOR);
    let mut n = 0;
    for si in Api::<ServiceImport>::all(member.clone())
        .list(&managed)
        .await?
        .items
    {
        let ns = si.namespace().unwrap_or_default();
        // (gone already, e.g. collected with its owner, is as good)
        apply::remove(
            &Api::<ServiceImport>::namespaced(member.clone(), &ns),
            &si.name_any(),
        )
        .await?;
        n += 1;
    }
    for s in Api::<Service>::all(member.clone())
        .list(&derived)
        .await?
        .items
    {
        let ns = s.namespace().unwrap_or_default();
        // (gone already, e.g. collected with its owner, is as good)
        apply::remove(
            &Api::<Service>::namespaced(member.clone(), &ns),
            &s.name_any(),
        )
        .await?;
        n += 1;
    }
    let slices = ListParams::default().labels(&format!(
        "{}={}",
        labels::ENDPOINTSLICE_MANAGED_BY,
        labels::ENDPOINTSLICE_MANAGED_BY_VALUE
    ));
    for s in Api::<EndpointSlice>::all(member.clone())
        .list(&slices)
        .await?
        .items
    {
        let ns = s.namespace().unwrap_or_default();
        // (gone already, e.g. collected with its owner, is as good)
        apply::remove(
            &Api::<EndpointSlice>::namespaced(member.clone(), &ns),
            &s.name_any(),
        )
        .await?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
