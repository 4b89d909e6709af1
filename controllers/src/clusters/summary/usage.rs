//! [`Usage`]: a member's Nodes and Pods watched through slim types and folded into
//! [`NodeEntry`]/[`PodEntry`] maps, so memory is a few words per pod, never a pod object.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

use causeway_crds::federation::cluster::ClusterSpec;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::quantity::{self, Unit};
use super::{NodeEntry, PodEntry, REGION_LABEL, Summary, ZONE_LABEL, summarize};

/// A member's Nodes and Pods, folded as they change. Cheap to clone and to ask.
#[derive(Clone)]
pub struct Usage {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    nodes: Table<NodeEntry>,
    pods: Table<PodEntry>,
}

/// Entries by `namespace/name`, and the ones of a relist in progress.
struct Table<E> {
    live: HashMap<String, E>,
    relist: Option<HashMap<String, E>>,
    synced: bool,
}

impl<E> Default for Table<E> {
    fn default() -> Self {
        Table {
            live: HashMap::new(),
            relist: None,
            synced: false,
        }
    }
}

impl<E> Table<E> {
    /// Folds one watch event; `entry` is `None` for objects not worth keeping.
    fn apply<K: kube::Resource>(&mut self, event: watcher::Event<K>, entry: fn(&K) -> Option<E>) {
        let key = |o: &K| {
            let m = o.meta();
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or_default(),
                m.name.as_deref().unwrap_or_default()
            )
        };
        match event {
            watcher::Event::Init => self.relist = Some(HashMap::new()),
            watcher::Event::InitApply(o) => {
                if let (Some(relist), Some(e)) = (self.relist.as_mut(), entry(&o)) {
                    relist.insert(key(&o), e);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.live = relist;
                }
                self.synced = true;
            }
            watcher::Event::Apply(o) => match entry(&o) {
                Some(e) => {
                    self.live.insert(key(&o), e);
                }
                None => {
                    self.live.remove(&key(&o));
                }
            },
            watcher::Event::Delete(o) => {
                self.live.remove(&key(&o));
            }
        }
    }
}

impl Usage {
    /// Starts watching `member`'s Nodes and Pods until `stop`.
    pub fn start(member: kube::Client, stop: CancellationToken) -> Usage {
        let state = Arc::new(Mutex::new(State::default()));
        tokio::spawn(follow(
            Api::<SlimNode>::all(member.clone()),
            "member nodes",
            state.clone(),
            |s, e| s.nodes.apply(e, node_entry),
            stop.clone(),
        ));
        tokio::spawn(follow(
            Api::<SlimPod>::all(member),
            "member pods",
            state.clone(),
            |s, e| s.pods.apply(e, pod_entry),
            stop,
        ));
        Usage { state }
    }

    /// The summaries and topology now (`spec` overrides the topology), or `None` until
    /// both Nodes and Pods have been listed once.
    pub fn summary(&self, spec: &ClusterSpec) -> Option<Summary> {
        let s = self.state.lock();
        (s.nodes.synced && s.pods.synced)
            .then(|| summarize(s.nodes.live.values(), s.pods.live.values(), spec))
    }
}

/// Runs one watch, folding its events into `state`, until `stop`.
async fn follow<K>(
    api: Api<K>,
    what: &'static str,
    state: Arc<Mutex<State>>,
    fold: fn(&mut State, watcher::Event<K>),
    stop: CancellationToken,
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let events = watcher(api, watcher::Config::default()).default_backoff();
    let mut events = std::pin::pin!(events);
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            _ = stop.cancelled() => return,
        };
        match event {
            Some(Ok(e)) => fold(&mut state.lock(), e),
            Some(Err(e)) => {
                tracing::warn!(watch = what, error = %e, "watch failed; retrying with backoff")
            }
            None => return,
        }
    }
}

/// Implements `kube::Resource` for a slim core/v1 type.
macro_rules! core_v1 {
    ($t:ty, $kind:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// The metadata a watch needs (name, namespace, resourceVersion, uid) and, for Nodes,
/// the topology labels; managedFields, annotations and the rest are skipped unread.
fn slim_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        uid: Option<String>,
        #[serde(default)]
        labels: TopologyLabels,
    }
    #[derive(Default, Deserialize)]
    struct TopologyLabels {
        #[serde(rename = "topology.kubernetes.io/region")]
        region: Option<String>,
        #[serde(rename = "topology.kubernetes.io/zone")]
        zone: Option<String>,
    }
    let m = Meta::deserialize(d)?;
    let labels: BTreeMap<String, String> =
        [(REGION_LABEL, m.labels.region), (ZONE_LABEL, m.labels.zone)]
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_string(), v?)))
            .collect();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        uid: m.uid,
        labels: (!labels.is_empty()).then_some(labels),
        ..ObjectMeta::default()
    })
}

/// A Node, as much as [`NodeEntry`] needs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SlimNode {
    #[serde(deserialize_with = "slim_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: NodeSpec,
    #[serde(default)]
    status: NodeStatus,
}
core_v1!(SlimNode, "Node", "nodes", ClusterResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSpec {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStatus {
    #[serde(default)]
    conditions: Vec<NodeCondition>,
    #[serde(default)]
    allocatable: Resources,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

/// The resources a summary counts, of a resource list.
#[derive(Clone, Debug, Default, Deserialize)]
struct Resources {
    cpu: Option<Quantity>,
    memory: Option<Quantity>,
    pods: Option<Quantity>,
}

/// A Pod, as much as [`PodEntry`] needs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SlimPod {
    #[serde(deserialize_with = "slim_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: PodSpec,
    #[serde(default)]
    status: PodStatus,
}
core_v1!(SlimPod, "Pod", "pods", NamespaceResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    init_containers: Vec<Container>,
    #[serde(default)]
    overhead: Resources,
    /// Pod-level requests (PodLevelResources): they replace the containers' sum.
    #[serde(default)]
    resources: Requirements,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    #[serde(default)]
    resources: Requirements,
    restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Requirements {
    #[serde(default)]
    requests: Resources,
    #[serde(default)]
    limits: Resources,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct PodStatus {
    phase: Option<String>,
}

/// `q` in `unit`; a value kube-apiserver would not have accepted counts as 0, with a
/// warning naming the object.
fn amount(q: Option<&Quantity>, unit: Unit, what: &str, meta: &ObjectMeta) -> i64 {
    let Some(q) = q else { return 0 };
    quantity::parse(&q.0, unit).unwrap_or_else(|e| {
        tracing::warn!(
            namespace = meta.namespace.as_deref().unwrap_or_default(),
            name = meta.name.as_deref().unwrap_or_default(),
            field = what,
            error = %e,
            "not counted in the cluster's resource summary"
        );
        0
    })
}

/// Folds a Node.
pub(super) fn node_entry(n: &SlimNode) -> Option<NodeEntry> {
    let a = &n.status.allocatable;
    let m = &n.metadata;
    let label = |k: &str| {
        m.labels
            .as_ref()
            .and_then(|l| l.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    Some(NodeEntry {
        name: m.name.clone().unwrap_or_default(),
        ready: n
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        cpu_milli: amount(a.cpu.as_ref(), Unit::Milli, "allocatable cpu", m),
        memory: amount(a.memory.as_ref(), Unit::One, "allocatable memory", m),
        pods: amount(a.pods.as_ref(), Unit::One, "allocatable pods", m),
        region: label(REGION_LABEL),
        zone: label(ZONE_LABEL),
        provider: n
            .spec
            .provider_id
            .as_deref()
            .and_then(|id| id.split_once("://"))
            .map(|(scheme, _)| scheme.to_string())
            .filter(|s| !s.is_empty()),
    })
}

/// Folds a Pod; finished pods hold nothing and are not kept.
pub(super) fn pod_entry(p: &SlimPod) -> Option<PodEntry> {
    let finished = matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed"));
    if finished {
        return None;
    }
    let (cpu_milli, memory) = effective_requests(p);
    Some(PodEntry {
        node: p.spec.node_name.clone().filter(|n| !n.is_empty()),
        finished,
        cpu_milli,
        memory,
    })
}

/// A container's (or pod's) request for one resource: its request, else its limit
/// (kube-apiserver defaults a missing request to the limit).
fn request(r: &Requirements, pick: fn(&Resources) -> Option<&Quantity>) -> Option<&Quantity> {
    pick(&r.requests).or_else(|| pick(&r.limits))
}

/// The pod's requests as kube-scheduler counts them (k8s.io/component-helpers
/// `PodRequests`): the containers' sum, or the largest init container if larger (a
/// sidecar — an init container with restartPolicy Always — runs alongside the rest, so
/// it adds to both), pod-level requests instead when set, plus the pod overhead.
fn effective_requests(p: &SlimPod) -> (i64, i64) {
    let m = &p.metadata;
    let one = |pick: fn(&Resources) -> Option<&Quantity>, unit: Unit, what: &str| -> i64 {
        let of = |r: &Requirements| amount(request(r, pick), unit, what, m);
        let mut sum: i64 = p
            .spec
            .containers
            .iter()
            .map(|c| of(&c.resources))
            .fold(0, i64::saturating_add);
        let (mut sidecars, mut init_peak) = (0i64, 0i64);
        for c in &p.spec.init_containers {
            let r = of(&c.resources);
            if c.restart_policy.as_deref() == Some("Always") {
                sum = sum.saturating_add(r);
                sidecars = sidecars.saturating_add(r);
                init_peak = init_peak.max(sidecars);
            } else {
                init_peak = init_peak.max(sidecars.saturating_add(r));
            }
        }
        let mut total = sum.max(init_peak);
        if let Some(q) = request(&p.spec.resources, pick) {
            total = amount(Some(q), unit, what, m);
        }
        total.saturating_add(amount(pick(&p.spec.overhead), unit, what, m))
    };
    (
        one(|r| r.cpu.as_ref(), Unit::Milli, "cpu request"),
        one(|r| r.memory.as_ref(), Unit::One, "memory request"),
    )
}

#[cfg(test)]
mod tests;
