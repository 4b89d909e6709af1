//! What a member's status reports besides health (federation.md §1.1 "Status", §8 A.8):
//! the APIs it serves ([`discover`], with the `CompleteAPIEnablements` condition), its
//! node and resource summaries and its topology ([`Usage`], folded by the pure
//! [`summarize`]).
//!
//! Karmada keeps full node and pod informers for the summaries, which OOM-killed its
//! controller on a 100k-pod member (karmada#1858). [`Usage`] instead watches Nodes and
//! Pods through slim types that deserialize only the fields the sums need, folds each
//! object into a [`NodeEntry`] or [`PodEntry`] of a few words and drops it; finished
//! pods are not kept at all.
//!
//! Nothing here writes: the cluster status controller (`super::status`) posts the
//! results. Discovery costs a request per group version on old servers, so it is a
//! separate call the caller makes less often than it probes health.

mod discover;
pub use causeway_crds::quantity;
mod usage;

use std::collections::{BTreeMap, BTreeSet};

use causeway_crds::federation::cluster::{
    ClusterSpec, ClusterStatus, NodeSummary, ResourceSummary,
};

pub use discover::{Apis, DISCOVERY_TIMEOUT, discover};
pub use usage::Usage;

/// Node label naming the node's region.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Node label naming the node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// One node, as the summaries need it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeEntry {
    /// Its name (pods name it in `spec.nodeName`).
    pub name: String,
    /// Its `Ready` condition is True.
    pub ready: bool,
    /// Allocatable CPU, millicores.
    pub cpu_milli: i64,
    /// Allocatable memory, bytes.
    pub memory: i64,
    /// Allocatable pods.
    pub pods: i64,
    /// The `topology.kubernetes.io/region` label.
    pub region: Option<String>,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// The scheme of `spec.providerID` (`aws` for `aws:///us-east-1a/i-0abc`).
    pub provider: Option<String>,
}

/// One pod, as the summaries need it: where it stands and what it requests (its
/// effective requests, as kube-scheduler counts them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodEntry {
    /// The node it is bound to (`spec.nodeName`), if any.
    pub node: Option<String>,
    /// Its phase is Succeeded or Failed: it holds nothing any more.
    pub finished: bool,
    /// Requested CPU, millicores.
    pub cpu_milli: i64,
    /// Requested memory, bytes.
    pub memory: i64,
}

/// Where a member runs: spec overrides, else what its nodes agree on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// `status.region`.
    pub region: Option<String>,
    /// `status.zones`, sorted.
    pub zones: Vec<String>,
    /// `status.provider`.
    pub provider: Option<String>,
}

/// A member's node and resource summaries and topology.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// `status.nodeSummary`.
    pub nodes: NodeSummary,
    /// `status.resourceSummary`.
    pub resources: ResourceSummary,
    /// `status.region`, `status.zones`, `status.provider`.
    pub topology: Topology,
}

impl Summary {
    /// Copies the summary into the fields of `status` it owns.
    pub fn fill(&self, status: &mut ClusterStatus) {
        status.node_summary = Some(self.nodes.clone());
        status.resource_summary = Some(self.resources.clone());
        status.region = self.topology.region.clone();
        status.zones = self.topology.zones.clone();
        status.provider = self.topology.provider.clone();
    }
}

/// Sums of CPU (millicores), memory (bytes) and pods.
#[derive(Clone, Copy, Default)]
struct Sums {
    cpu_milli: i128,
    memory: i128,
    pods: i128,
}

impl Sums {
    fn add(&mut self, cpu_milli: i64, memory: i64, pods: i64) {
        self.cpu_milli += i128::from(cpu_milli);
        self.memory += i128::from(memory);
        self.pods += i128::from(pods);
    }

    fn list(self) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
        BTreeMap::from([
            ("cpu".to_string(), quantity::cpu(self.cpu_milli)),
            ("memory".to_string(), quantity::bytes(self.memory)),
            ("pods".to_string(), quantity::count(self.pods)),
        ])
    }
}

/// Pure: the summaries of a member with these nodes and pods, and its topology given
/// its `spec`.
///
/// - `nodeSummary`: every node counts in `totalNum`, Ready ones in `readyNum`.
/// - `allocatable`: cpu, memory and pods of Ready nodes only.
/// - `allocated`: requests of unfinished pods bound to a Ready node, and their number
///   (the same nodes as `allocatable`: pods left on a NotReady node would otherwise
///   take from what the Ready ones have free).
/// - `allocating`: the same for pods not bound yet.
/// - topology: see [`topology`].
pub fn summarize<'a>(
    nodes: impl IntoIterator<Item = &'a NodeEntry>,
    pods: impl IntoIterator<Item = &'a PodEntry>,
    spec: &ClusterSpec,
) -> Summary {
    let nodes: Vec<&NodeEntry> = nodes.into_iter().collect();
    let mut allocatable = Sums::default();
    for n in nodes.iter().filter(|n| n.ready) {
        allocatable.add(n.cpu_milli, n.memory, n.pods);
    }
    let ready: std::collections::HashSet<&str> = nodes
        .iter()
        .filter(|n| n.ready)
        .map(|n| n.name.as_str())
        .collect();
    let (mut allocated, mut allocating) = (Sums::default(), Sums::default());
    for p in pods.into_iter().filter(|p| !p.finished) {
        let sums = match p.node.as_deref() {
            None => &mut allocating,
            Some(n) if ready.contains(n) => &mut allocated,
            Some(_) => continue,
        };
        sums.add(p.cpu_milli, p.memory, 1);
    }
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    Summary {
        nodes: NodeSummary {
            total_num: count(nodes.len()),
            ready_num: count(nodes.iter().filter(|n| n.ready).count()),
        },
        resources: ResourceSummary {
            allocatable: allocatable.list(),
            allocating: allocating.list(),
            allocated: allocated.list(),
        },
        topology: topology(&nodes, spec),
    }
}

/// Pure: where the member runs.
///
/// - region: `spec.region`, else the region label when every node that has one agrees;
/// - zones: `spec.zones`, else `[spec.zone]`, else the distinct zone labels, sorted;
/// - provider: `spec.provider`, else the `spec.providerID` scheme when every node that
///   has one agrees.
pub fn topology(nodes: &[&NodeEntry], spec: &ClusterSpec) -> Topology {
    let set = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let zones = if !spec.zones.is_empty() {
        let mut z = spec.zones.clone();
        z.sort();
        z.dedup();
        z
    } else if let Some(zone) = set(&spec.zone) {
        vec![zone]
    } else {
        let z: BTreeSet<&String> = nodes.iter().filter_map(|n| n.zone.as_ref()).collect();
        z.into_iter().cloned().collect()
    };
    Topology {
        region: set(&spec.region).or_else(|| agreed(nodes.iter().map(|n| &n.region))),
        zones,
        provider: set(&spec.provider).or_else(|| agreed(nodes.iter().map(|n| &n.provider))),
    }
}

/// The one value all the `Some`s share, if they share one.
fn agreed<'a>(values: impl Iterator<Item = &'a Option<String>>) -> Option<String> {
    let distinct: BTreeSet<&String> = values.flatten().collect();
    match distinct.len() {
        1 => distinct.into_iter().next().cloned(),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests;
