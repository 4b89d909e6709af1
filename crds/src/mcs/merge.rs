//! The aggregator's merge: all exports of one namespace/name → one ServiceImport
//! and one conflict verdict (KEP-1645 "Constraints and Conflict Resolution").
//!
//! Pure: no I/O, no clients, no clocks. [`merge`] takes every cluster's
//! [`ExportedServiceSpec`] for one service and returns the [`Merged`] import, or
//! `None` when there is nothing to import. The result depends only on the *set*
//! of exports, never on their order in the input.
//!
//! # Precedence (CR-2, CR-9)
//!
//! Exports are ranked by the member ServiceExport's `creationTimestamp`, oldest
//! first; an export without a known timestamp ranks after every export with one.
//! Equal timestamps (they have 1-second granularity) are broken by cluster id, in
//! lexical (byte) order. The first export is the *winner*. If the input holds
//! several exports with the same cluster id (a caller bug), only the oldest is
//! used; if they also tie on time, the one whose spec serialises first as JSON.
//!
//! # Global properties (CR-1)
//!
//! Each property is compared across exports after applying the Kubernetes
//! defaults, so an unset value and its default never conflict:
//!
//! | property | compared as | result | reason when exports differ |
//! |---|---|---|---|
//! | ports | set of (name, protocol, port, appProtocol); `""` name = unnamed, unset protocol = `TCP`; targetPort is per cluster and not compared | union, see below | `PortConflict` |
//! | type | `headless` → `Headless`, anything else (ClusterIP, NodePort, LoadBalancer) → `ClusterSetIP` (EXP-9) | winner's | `TypeConflict` |
//! | sessionAffinity | unset = `None` | winner's | `SessionAffinityConflict` |
//! | sessionAffinityConfig | deep equality; a config without `clientIP` = unset | winner's | `SessionAffinityConfigConflict` |
//! | exportedLabels / exportedAnnotations | name/value sets | winner's | `LabelsConflict` / `AnnotationsConflict` |
//! | internalTrafficPolicy | unset = `Cluster` | winner's | `InternalTrafficPolicyConflict` |
//! | trafficDistribution | unset ≠ any value | winner's | `TrafficDistributionConflict` |
//! | ipFamilies | set of known families, see below | see below | `IPFamilyConflict` |
//!
//! # Ports (CR-4, CR-5, CR-6)
//!
//! Ports are merged in precedence order, each export's ports in its Service's
//! order. A port joins the port of the same *name* if its definition is
//! identical; a different definition under a taken name, or a new name on a taken
//! (protocol, port), clashes and is left out for that cluster (it is listed in
//! [`Merged::excluded_ports`]). Otherwise it is a new port of the union. So the
//! oldest export's ports always survive, and `PortConflict` is raised whenever
//! the exports' port sets differ, even when the union merged cleanly. A cluster
//! serves a port of the union only if its Service has exactly that port
//! ([`Merged::port_clusters`]); `appProtocol` is part of "exactly" because an L7
//! proxy speaks it to the backends. The resulting ports are sorted by name
//! (unnamed first), then protocol, port and appProtocol.
//!
//! # IP families (IMP-5, IMP-7, IMP-8, EXP-11)
//!
//! An export's families are its `ipFamilies` restricted to `IPv4`/`IPv6`, without
//! duplicates, in order; if none remain, the families of its `clusterIPs`; if
//! still none, they are *unknown*. The import uses the families of the
//! highest-precedence export whose families are known (normally the winner), so
//! a later export never changes them (CR-3, IMP-4); when no export's families
//! are known it uses `["IPv4"]`. `ipFamilies` is therefore never empty, for
//! ClusterSetIP and Headless alike. `IPFamilyConflict` is raised when two exports
//! with known families have different family *sets*; order (the primary family)
//! and unknown families never conflict.
//!
//! # The verdict (EXP-7, EXP-8)
//!
//! One [`Conflict`] for the whole service, to be set on every export. Its reasons
//! follow [`CONFLICT_REASONS`] order, and its message has one sentence per
//! contested field naming the value used, the cluster it comes from and how many
//! clusters disagree, e.g. `Conflicting type. Using "ClusterSetIP" from oldest
//! service export in "cluster-1". 1/2 clusters disagree.`

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::exported_service::ExportedServiceSpec;
use crate::mcs::conditions::service_export::reason::{self, CONFLICT_REASONS};
use crate::mcs::v1beta1::ServiceImportSpec;
use crate::mcs::{ClusterStatus, ServiceImportType, ServicePort, values};

mod message;
mod ports;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// One cluster's export of the service: the input of [`merge`].
#[derive(Clone, Copy, Debug)]
pub struct Export<'a> {
    /// The exporting cluster's id.
    pub cluster: &'a str,
    /// The member ServiceExport's `creationTimestamp` (or, as a fallback, when the
    /// export was first observed). `None` ranks after every known time.
    pub created: Option<&'a Time>,
    /// The exported Service's properties.
    pub spec: &'a ExportedServiceSpec,
}

impl<'a> Export<'a> {
    /// An export with an explicit cluster id and creation time.
    pub fn new(cluster: &'a str, created: Option<&'a Time>, spec: &'a ExportedServiceSpec) -> Self {
        Self {
            cluster,
            created,
            spec,
        }
    }

    /// The export described by an ExportedService spec alone: cluster id from
    /// `spec.cluster`, creation time from `spec.exportCreationTimestamp`.
    pub fn from_spec(spec: &'a ExportedServiceSpec) -> Self {
        Self::new(&spec.cluster, spec.export_creation_timestamp.as_ref(), spec)
    }
}

/// The merged view of all exports of one service: the ServiceImport's spec,
/// metadata and status, the per-port routing sets and the conflict verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    /// `spec.type` (CR-7: the winner's).
    pub import_type: ServiceImportType,
    /// `spec.ports`: the union, sorted by name (unnamed first), protocol, port,
    /// appProtocol. Names are unique, and so are (protocol, port) pairs. The
    /// protocol is always set (`TCP` when the Service left it unset).
    pub ports: Vec<ServicePort>,
    /// For each entry of [`Self::ports`], at the same index: the clusters allowed
    /// to serve it (CR-6, DP-4), sorted by cluster id.
    pub port_clusters: Vec<PortClusters>,
    /// Per cluster id: the ports of its export left out of the ServiceImport
    /// because they clash with a higher-precedence port (ExportedService
    /// `status.excludedPorts`). Clusters without such ports are absent.
    pub excluded_ports: BTreeMap<String, Vec<ServicePort>>,
    /// `spec.sessionAffinity` (the winner's).
    pub session_affinity: Option<String>,
    /// `spec.sessionAffinityConfig` (the winner's).
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `spec.internalTrafficPolicy` (the winner's).
    pub internal_traffic_policy: Option<String>,
    /// `spec.trafficDistribution` (the winner's).
    pub traffic_distribution: Option<String>,
    /// `spec.ipFamilies`: never empty, at most 2, no duplicates (module docs).
    pub ip_families: Vec<String>,
    /// ServiceImport `metadata.labels`: the winner's exportedLabels.
    pub labels: BTreeMap<String, String>,
    /// ServiceImport `metadata.annotations`: the winner's exportedAnnotations.
    pub annotations: BTreeMap<String, String>,
    /// `status.clusters`: every exporting cluster id, sorted, no duplicates.
    pub clusters: Vec<String>,
    /// The cluster whose export won precedence.
    pub winner: String,
    /// The verdict to set on every export; `None` when all exports agree.
    pub conflict: Option<Conflict>,
}

/// The clusters that serve one port of the ServiceImport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortClusters {
    /// The port, as in [`Merged::ports`].
    pub port: ServicePort,
    /// The clusters whose Service has exactly this port, sorted by cluster id.
    pub clusters: Vec<PortCluster>,
}

/// One cluster serving a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortCluster {
    /// The cluster id.
    pub cluster: String,
    /// That cluster's targetPort for the port; the port number itself when the
    /// Service leaves it unset (or sets 0 or "").
    pub target_port: IntOrString,
}

/// The conflict verdict of a merge (`Conflict=True` on every export).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The contested fields' reasons, in [`CONFLICT_REASONS`] order, never empty.
    pub reasons: Vec<&'static str>,
    /// One sentence per contested field, in the order of `reasons`, then a note
    /// when a creation-time tie decided the winner.
    pub message: String,
}

impl Conflict {
    /// The condition reason: the reasons joined with commas (EXP-7).
    pub fn reason(&self) -> String {
        self.reasons.join(",")
    }
}

/// Whether the export `spec` may serve `port` of a ServiceImport: its Service has
/// exactly that port (name, protocol, port and appProtocol, normalised), the rule of
/// [`Merged::port_clusters`]. It needs no verdict: an importer that checks it never
/// sends a port's traffic to a cluster whose port of that name is another one, even
/// before the aggregator has listed that port in the export's `excludedPorts` (CR-3).
pub fn exports_port(spec: &ExportedServiceSpec, port: &ServicePort) -> bool {
    ports::has(spec, port)
}

impl Merged {
    /// The clusters allowed to serve `port` (matched by name, protocol and port),
    /// or an empty slice when the ServiceImport has no such port.
    pub fn clusters_for_port(&self, port: &ServicePort) -> &[PortCluster] {
        let protocol = port.protocol_or_default();
        self.port_clusters
            .iter()
            .find(|pc| {
                pc.port.name == port.name
                    && pc.port.protocol_or_default() == protocol
                    && pc.port.port == port.port
            })
            .map_or(&[], |pc| &pc.clusters)
    }

    /// `status.clusters` of the ServiceImport.
    pub fn cluster_statuses(&self) -> Vec<ClusterStatus> {
        self.clusters
            .iter()
            .map(|cluster| ClusterStatus {
                cluster: cluster.clone(),
            })
            .collect()
    }
}

/// The ServiceImport spec of a merge. `ips` is left empty: importers fill it in
/// (and keep it empty for Headless imports).
pub fn to_service_import_spec(merged: &Merged) -> ServiceImportSpec {
    ServiceImportSpec {
        ports: merged.ports.clone(),
        ips: Vec::new(),
        type_: merged.import_type,
        session_affinity: merged.session_affinity.clone(),
        session_affinity_config: merged.session_affinity_config.clone(),
        ip_families: merged.ip_families.clone(),
        internal_traffic_policy: merged.internal_traffic_policy.clone(),
        traffic_distribution: merged.traffic_distribution.clone(),
    }
}

/// [`merge`] over ExportedService specs, each read with [`Export::from_spec`].
pub fn merge_specs<'a>(specs: impl IntoIterator<Item = &'a ExportedServiceSpec>) -> Option<Merged> {
    let exports: Vec<Export<'a>> = specs.into_iter().map(Export::from_spec).collect();
    merge(&exports)
}

/// Merges all exports of one namespace/name (module docs). `None` for an empty
/// input. Never panics; the result does not depend on the input order.
pub fn merge(exports: &[Export<'_>]) -> Option<Merged> {
    let order = precedence_order(exports);
    let winner = *order.first()?;
    let props: Vec<Props<'_>> = order.iter().map(|e| Props::of(e.spec)).collect();
    let first = &props[0];
    let disagree =
        |differs: &dyn Fn(&Props<'_>) -> bool| props.iter().filter(|p| differs(p)).count();

    let mut contested = message::Contested::new(&order);
    let port_union = ports::union(&order);
    let n = disagree(&|p| p.ports != first.ports);
    contested.ports(n, &port_union.excluded);

    let n = disagree(&|p| p.import_type != first.import_type);
    contested.field(reason::TYPE_CONFLICT, "type", n, || {
        quoted(first.import_type.as_str())
    });
    let n = disagree(&|p| p.session_affinity != first.session_affinity);
    contested.field(
        reason::SESSION_AFFINITY_CONFLICT,
        "sessionAffinity",
        n,
        || quoted(first.session_affinity),
    );
    let n = disagree(&|p| p.session_affinity_config != first.session_affinity_config);
    contested.field(
        reason::SESSION_AFFINITY_CONFIG_CONFLICT,
        "sessionAffinityConfig",
        n,
        || {
            first
                .session_affinity_config
                .map_or_else(unset, message::json)
        },
    );
    let n = disagree(&|p| p.labels != first.labels);
    contested.field(reason::LABELS_CONFLICT, "exportedLabels", n, || {
        "the exportedLabels".to_owned()
    });
    let n = disagree(&|p| p.annotations != first.annotations);
    contested.field(
        reason::ANNOTATIONS_CONFLICT,
        "exportedAnnotations",
        n,
        || "the exportedAnnotations".to_owned(),
    );
    let n = disagree(&|p| p.internal_traffic_policy != first.internal_traffic_policy);
    contested.field(
        reason::INTERNAL_TRAFFIC_POLICY_CONFLICT,
        "internalTrafficPolicy",
        n,
        || quoted(first.internal_traffic_policy),
    );
    let n = disagree(&|p| p.traffic_distribution != first.traffic_distribution);
    contested.field(
        reason::TRAFFIC_DISTRIBUTION_CONFLICT,
        "trafficDistribution",
        n,
        || first.traffic_distribution.map_or_else(unset, quoted),
    );

    // IP families: the highest-precedence known families win.
    let source = props.iter().position(|p| !p.ip_families.is_empty());
    let ip_families: Vec<&'static str> = match source {
        Some(i) => props[i].ip_families.clone(),
        None => vec![values::IPV4],
    };
    let chosen_set = family_set(&ip_families);
    let n = disagree(&|p| !p.ip_families.is_empty() && family_set(&p.ip_families) != chosen_set);
    if let Some(i) = source {
        contested.ip_families(&ip_families, order[i].cluster, n);
    }

    let clusters = order.iter().map(|e| e.cluster.to_owned());
    let mut clusters: Vec<String> = clusters.collect();
    clusters.sort();

    Some(Merged {
        import_type: first.import_type,
        ports: port_union.ports,
        port_clusters: port_union.port_clusters,
        excluded_ports: port_union.excluded,
        session_affinity: non_empty(&winner.spec.session_affinity),
        session_affinity_config: first.session_affinity_config.cloned(),
        internal_traffic_policy: non_empty(&winner.spec.internal_traffic_policy),
        traffic_distribution: first.traffic_distribution.map(str::to_owned),
        ip_families: ip_families.into_iter().map(str::to_owned).collect(),
        labels: winner.spec.exported_labels.clone(),
        annotations: winner.spec.exported_annotations.clone(),
        clusters,
        winner: winner.cluster.to_owned(),
        conflict: contested.into_conflict(),
    })
}

/// The exports in precedence order, one per cluster id (module docs).
fn precedence_order<'a>(exports: &[Export<'a>]) -> Vec<Export<'a>> {
    let mut by_cluster: BTreeMap<&str, Export<'a>> = BTreeMap::new();
    for export in exports {
        match by_cluster.entry(export.cluster) {
            Entry::Vacant(slot) => {
                slot.insert(*export);
            }
            Entry::Occupied(mut slot) => {
                if same_cluster_precedes(export, slot.get()) {
                    slot.insert(*export);
                }
            }
        }
    }
    let mut order: Vec<Export<'a>> = by_cluster.into_values().collect();
    order.sort_by(|a, b| {
        time_key(a.created)
            .cmp(&time_key(b.created))
            .then_with(|| a.cluster.cmp(b.cluster))
    });
    order
}

/// Sort key of a creation time: known times first, oldest first.
fn time_key(created: Option<&Time>) -> (bool, Option<&Time>) {
    (created.is_none(), created)
}

/// Between two exports of the same cluster id: does `a` take precedence over `b`?
fn same_cluster_precedes(a: &Export<'_>, b: &Export<'_>) -> bool {
    match time_key(a.created).cmp(&time_key(b.created)) {
        Ordering::Less => true,
        Ordering::Greater => false,
        Ordering::Equal => canonical_json(a.spec) < canonical_json(b.spec),
    }
}

fn canonical_json(spec: &ExportedServiceSpec) -> String {
    serde_json::to_string(spec).unwrap_or_default()
}

/// One export's global properties, with Kubernetes defaults applied.
struct Props<'a> {
    ports: std::collections::BTreeSet<ports::PortKey>,
    import_type: ServiceImportType,
    session_affinity: &'a str,
    session_affinity_config: Option<&'a SessionAffinityConfig>,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    internal_traffic_policy: &'a str,
    traffic_distribution: Option<&'a str>,
    /// Known families in order; empty when unknown.
    ip_families: Vec<&'static str>,
}

impl<'a> Props<'a> {
    fn of(spec: &'a ExportedServiceSpec) -> Self {
        Self {
            ports: spec.ports.iter().map(ports::key).collect(),
            import_type: spec.import_type(),
            session_affinity: non_empty_str(&spec.session_affinity)
                .unwrap_or(values::SESSION_AFFINITY_NONE),
            session_affinity_config: spec
                .session_affinity_config
                .as_ref()
                .filter(|c| c.client_ip.is_some()),
            labels: &spec.exported_labels,
            annotations: &spec.exported_annotations,
            internal_traffic_policy: non_empty_str(&spec.internal_traffic_policy)
                .unwrap_or(values::INTERNAL_TRAFFIC_POLICY_CLUSTER),
            traffic_distribution: non_empty_str(&spec.traffic_distribution),
            ip_families: known_families(spec),
        }
    }
}

/// The export's families: valid `ipFamilies` entries, else those of its
/// `clusterIPs`, deduplicated, in order; empty when unknown.
fn known_families(spec: &ExportedServiceSpec) -> Vec<&'static str> {
    fn add(families: &mut Vec<&'static str>, family: &'static str) {
        if !families.contains(&family) {
            families.push(family);
        }
    }
    let mut families = Vec::with_capacity(2);
    for family in &spec.ip_families {
        match family.as_str() {
            values::IPV4 => add(&mut families, values::IPV4),
            values::IPV6 => add(&mut families, values::IPV6),
            _ => {}
        }
    }
    if families.is_empty() {
        for ip in &spec.cluster_ips {
            match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => add(&mut families, values::IPV4),
                Ok(IpAddr::V6(_)) => add(&mut families, values::IPV6),
                Err(_) => {}
            }
        }
    }
    families
}

fn family_set(families: &[&'static str]) -> (bool, bool) {
    (
        families.contains(&values::IPV4),
        families.contains(&values::IPV6),
    )
}

fn non_empty_str(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

fn non_empty(value: &Option<String>) -> Option<String> {
    non_empty_str(value).map(str::to_owned)
}

fn unset() -> String {
    "(unset)".to_owned()
}

fn quoted(value: &str) -> String {
    format!("{value:?}")
}

/// The position of a reason in [`CONFLICT_REASONS`] (unknown reasons last).
fn reason_rank(reason: &str) -> usize {
    CONFLICT_REASONS
        .iter()
        .position(|r| *r == reason)
        .unwrap_or(CONFLICT_REASONS.len())
}
