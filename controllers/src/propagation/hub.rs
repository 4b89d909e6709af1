//! The hub's propagation loop (issue 14), on the common controller shape: watches
//! (policies, override policies, clusters, bindings, Works, and the templates of every
//! kind a policy selects, [`super::kinds`]) → the pure steps ([`super::detector`],
//! [`super::render`], [`super::status`]) → the shared applier.
//!
//! One round:
//!
//! 1. the detector's bindings are applied (and bindings of gone templates deleted);
//!    each claimed template holds the `causeway.io/propagation` finalizer;
//! 2. every binding whose key is dirty (all of them in a full round) is rendered into
//!    one Work per scheduled cluster, unless it is frozen (PolicyRemoved) or blocked
//!    (missing dependentOverrides) or settling (an override policy whose values its
//!    copies hold went a moment ago: D.32 ★, `hub/settle.rs`); Works of clusters no
//!    longer scheduled are deleted
//!    (G.51; the member's applier removes the copies), except where the overrides
//!    failed (that cluster keeps what it has, ApplyOverridesFailed);
//! 3. its status is aggregated from the Works (H.52) and the template's `.status`
//!    from the members' (H.53);
//! 4. a template being deleted has its Works deleted; once a live list confirms none is
//!    left (each Work goes only when its applier removed or orphaned the member copy,
//!    G.45–46), its binding is deleted and its finalizer released.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::binding::{
    BindingSnapshot, BindingSpec, BindingStatus, ClusterResourceBinding, ResourceBinding,
    conditions,
};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::interpreter::{self, Interpreters, ResourceInterpreter};
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use causeway_crds::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use causeway_crds::federation::rollout;
use causeway_crds::federation::work::Work;
use causeway_crds::names::{self, execution_namespace};
use causeway_crds::well_known::{finalizers, labels};
use causeway_runtime::apply::{self, Failures, Memo, StatusMemo};
use causeway_runtime::events::Notes;
use causeway_runtime::reflect::{Cache, Dirty, Key, Managed, Reflector, Wake, cache};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Secret, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::watcher;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::kinds::{Kinds, kind_of, template_key};
use super::render::{self, RenderInput, render};
use super::{detector, status};
use crate::mcs::HubCaches;
use crate::metrics::Metrics;
use causeway_crds::federation::selection::{BindingNameTaken, SelectionError};

/// The key of a Work: its binding's `(namespace, name)` ("" for a
/// ClusterResourceBinding).
fn work_key(w: &Work) -> Option<Key> {
    let l = w.metadata.labels.as_ref()?;
    Some((
        l.get(labels::BINDING_NAMESPACE)
            .cloned()
            .unwrap_or_default(),
        names::named_by(&w.metadata, labels::BINDING_NAME)?,
    ))
}

/// A revision's change marks its binding: of the same namespace and name, or a
/// ClusterResourceBinding's (kept in causeway-system, labelled so).
fn revision_key(r: &ControllerRevision) -> Option<Key> {
    let name = names::named_by(&r.metadata, labels::BINDING_NAME)?;
    if r.labels().contains_key(labels::CLUSTER_BINDING) {
        return Some((String::new(), name));
    }
    Some((r.namespace().unwrap_or_default(), name))
}

/// Namespaces and their Works wake a round under a key no binding has: every round
/// makes the namespace Works (`hub/namespaces.rs`).
fn namespace_key<K: kube::Resource>(o: &K) -> Option<Key> {
    Some((
        "".into(),
        format!("{}.namespace", o.meta().name.as_deref()?),
    ))
}

fn binding_key(b: &ResourceBinding) -> Option<Key> {
    Some(crate::watch::key(b))
}

fn cluster_binding_key(b: &ClusterResourceBinding) -> Option<Key> {
    Some((String::new(), b.name_any()))
}

/// The Event reason when a ResourceInterpreter's status sums cannot be written to the
/// template's status.
const STATUS_NOT_AGGREGATED: &str = "StatusNotAggregated";

/// The Event reason on a template not propagated because its binding's name is another
/// API group's template's of the same kind name and name.
const BINDING_NAME_TAKEN: &str = "BindingNameTaken";

/// The templates by what a binding's `spec.resource` names: API group, kind, namespace
/// and name. Kinds of one name in several groups (Gateway API's and Istio's `Gateway`,
/// core and Knative `Service`) are told apart; one object served at several versions
/// of its group is one entry, the version the binding names first.
struct Templates<'a>(HashMap<(&'a str, &'a str, String, String), Vec<&'a Arc<DynamicObject>>>);

impl<'a> Templates<'a> {
    fn new(templates: &'a [Arc<DynamicObject>]) -> Self {
        let mut index: HashMap<_, Vec<_>> = HashMap::new();
        for t in templates {
            let Some(types) = t.types.as_ref() else {
                continue;
            };
            let group = causeway_crds::federation::binding::api_group(&types.api_version);
            let key = (
                group,
                types.kind.as_str(),
                t.namespace().unwrap_or_default(),
                t.name_any(),
            );
            index.entry(key).or_default().push(t);
        }
        Templates(index)
    }

    /// The template `r` references.
    fn of(
        &self,
        r: &causeway_crds::federation::binding::ResourceReference,
    ) -> Option<&'a Arc<DynamicObject>> {
        let group = causeway_crds::federation::binding::api_group(&r.api_version);
        let key = (
            group,
            r.kind.as_str(),
            r.namespace.clone().unwrap_or_default(),
            r.name.clone(),
        );
        let found = self.0.get(&key)?;
        let exact = found.iter().find(|t| {
            t.types
                .as_ref()
                .is_some_and(|ty| ty.api_version == r.api_version)
        });
        exact.or(found.first()).copied()
    }
}

struct Caches {
    pps: Cache<PropagationPolicy>,
    cpps: Cache<ClusterPropagationPolicy>,
    ops: Cache<OverridePolicy>,
    cops: Cache<ClusterOverridePolicy>,
    /// How to read kinds Causeway has no rule for (`causeway.io` ResourceInterpreters).
    interpreters: Cache<ResourceInterpreter>,
    rbs: Cache<ResourceBinding>,
    crbs: Cache<ClusterResourceBinding>,
    works: Cache<Work>,
    clusters: Cache<Cluster>,
    /// The template revisions of ordered rollouts (`hub/revisions.rs`).
    revisions: Cache<ControllerRevision>,
    /// The hub's Namespaces, and the Works that create them in members
    /// (`hub/namespaces.rs`).
    namespaces: Cache<Namespace>,
    namespace_works: Cache<Work>,
}

mod failover;
#[cfg(test)]
mod fixtures;
mod namespaces;
pub(crate) mod policies;
mod redistribution;
mod removal;
mod revisions;
mod settle;

/// What the loop remembers between rounds: the appliers' memos, and the Events
/// already told (so each is told once per distinct message).
struct Memos {
    rbs: Memo<ResourceBinding>,
    crbs: Memo<ClusterResourceBinding>,
    works: Memo<Work>,
    /// The namespace Works' spec is the hub's alone: a label the hub Namespace drops
    /// goes from the Work too (`hub/namespaces.rs`).
    namespace_works: Memo<Work>,
    status: StatusMemo,
    told: HashMap<(Key, &'static str), String>,
    /// The next time failover changes a binding (set by each round).
    due: Option<k8s_openapi::jiff::Timestamp>,
    /// The eviction rate limit's bucket (J.63).
    evictions: detector::evictions::Evictions,
    /// The bindings whose copies hold values of an override policy that went, and
    /// since when (D.32 ★, `hub/settle.rs`).
    settling: settle::Settling,
    /// When each binding's workload left its failed-over clusters (J.60: a graceful
    /// purge's grace counts from the move).
    moves: failover::Moves,
}

impl Default for Memos {
    fn default() -> Self {
        Memos {
            // a binding's spec is the detector's alone: what it no longer sets (a
            // policy setting removed, a failover record gone) is removed; so is an
            // annotation it no longer sets (the caches keep which are the hub's)
            rbs: Memo::owning(&["spec"]),
            crbs: Memo::owning(&["spec"]),
            // a Work's spec is the hub's alone too: what a render stops setting (the
            // rule of a ResourceInterpreter deleted) is removed
            works: Memo::owning(&["spec"]),
            namespace_works: Memo::owning(&["spec"]),
            status: StatusMemo::default(),
            told: HashMap::new(),
            due: None,
            evictions: Default::default(),
            settling: Default::default(),
            moves: Default::default(),
        }
    }
}

/// Runs the hub's propagation loop until `stop`.
pub async fn run(
    hub: kube::Client,
    hub_caches: Arc<HubCaches>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let all = watcher::Config::default;
    let c = Caches {
        // when each policy was last written: a Lazy policy leaves alone the templates
        // that were there before
        pps: Reflector::start_keeping(
            Api::all(hub.clone()),
            all(),
            stop.clone(),
            "hub propagation policies",
            None,
            Managed::LatestWrite,
        )
        .subscribe(wake.clone()),
        cpps: Reflector::start_keeping(
            Api::all(hub.clone()),
            all(),
            stop.clone(),
            "hub cluster propagation policies",
            None,
            Managed::LatestWrite,
        )
        .subscribe(wake.clone()),
        ops: cache(
            Api::all(hub.clone()),
            all(),
            wake.clone(),
            stop.clone(),
            "hub override policies",
            None,
        ),
        cops: cache(
            Api::all(hub.clone()),
            all(),
            wake.clone(),
            stop.clone(),
            "hub cluster override policies",
            None,
        ),
        interpreters: cache(
            Api::all(hub.clone()),
            all(),
            wake.clone(),
            stop.clone(),
            "hub resource interpreters",
            None,
        ),
        rbs: Reflector::start_keeping(
            Api::all(hub.clone()),
            all(),
            stop.clone(),
            "hub resource bindings",
            Some(binding_key),
            Managed::OwnMetadata,
        )
        .subscribe(wake.clone()),
        crbs: Reflector::start_keeping(
            Api::all(hub.clone()),
            all(),
            stop.clone(),
            "hub cluster resource bindings",
            Some(cluster_binding_key),
            Managed::OwnMetadata,
        )
        .subscribe(wake.clone()),
        works: cache(
            Api::all(hub.clone()),
            all().labels(labels::BINDING_NAME),
            wake.clone(),
            stop.clone(),
            "hub works",
            Some(work_key),
        ),
        clusters: hub_caches.clusters.subscribe(wake.clone()),
        revisions: cache(
            Api::all(hub.clone()),
            all().labels(labels::BINDING_NAME),
            wake.clone(),
            stop.clone(),
            "hub template revisions",
            Some(revision_key),
        ),
        // a Namespace's change is handled in the next round, whatever its keys
        namespaces: cache(
            Api::all(hub.clone()),
            all(),
            wake.clone(),
            stop.clone(),
            "hub namespaces",
            Some(namespace_key::<Namespace>),
        ),
        namespace_works: cache(
            Api::all(hub.clone()),
            all().labels(labels::AUTO_NAMESPACE),
            wake.clone(),
            stop.clone(),
            "hub namespace works",
            Some(namespace_key::<Work>),
        ),
    };
    let ready = async {
        c.pps.wait_until_ready().await?;
        c.cpps.wait_until_ready().await?;
        c.ops.wait_until_ready().await?;
        c.cops.wait_until_ready().await?;
        c.interpreters.wait_until_ready().await?;
        c.rbs.wait_until_ready().await?;
        c.crbs.wait_until_ready().await?;
        c.works.wait_until_ready().await?;
        c.namespaces.wait_until_ready().await?;
        c.namespace_works.wait_until_ready().await?;
        // not the revisions: without them (a hub that refuses the watch) a new cluster
        // in a held wave only waits for its wave, as before; nothing else depends on them
        c.clusters.wait_until_ready().await
    };
    if tokio::select! { r = ready => r.is_err(), _ = stop.cancelled() => true } {
        return;
    }
    tracing::info!("propagation controller running");
    let notes = Notes::new(
        hub.clone(),
        Reporter {
            controller: "causeway-propagation".into(),
            instance: None,
        },
    );
    let mut kinds = Kinds::new(hub.clone(), wake.clone(), stop.clone());
    let mut memos = Memos::default();
    let mut dirty = Dirty::full();
    loop {
        let started = Instant::now();
        let failures = round(&hub, &c, &mut kinds, &mut memos, &notes, &dirty).await;
        metrics.observe_reconcile("propagation", "hub", started.elapsed(), failures.count);
        if let Some(due) = memos.due {
            let wait = due.duration_since(jiff::Timestamp::now());
            let wait = std::time::Duration::try_from(wait).unwrap_or_default();
            wake.full_round_at(Instant::now() + wait + std::time::Duration::from_millis(50));
        }
        dirty = match wake.after_round(&dirty, &failures.keys, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// Whether the binding `key` is handled in a round that covers `dirty`: in a full
/// round, when it changed, and, for a dependency's binding, when one of its requirers
/// did: the ones it should have (`required_by`) as well as the ones it has (`had`), so
/// that a requirer that stops needing it is dropped in that requirer's round.
fn in_round(
    dirty: &Dirty,
    key: &Key,
    required_by: &[BindingSnapshot],
    had: Option<&[BindingSnapshot]>,
) -> bool {
    dirty.full
        || dirty.keys.contains(key)
        || required_by
            .iter()
            .chain(had.into_iter().flatten())
            .any(|r| {
                dirty
                    .keys
                    .contains(&(r.namespace.clone().unwrap_or_default(), r.name.clone()))
            })
}

/// The kinds the policies select, plus the dependency kinds when a policy or a
/// binding (one that keeps a Lazy policy's earlier spec) propagates dependencies.
fn wanted_kinds(
    pps: &[Arc<PropagationPolicy>],
    cpps: &[Arc<ClusterPropagationPolicy>],
    bindings: impl IntoIterator<Item = Option<bool>>,
) -> BTreeSet<(String, String)> {
    let specs = pps
        .iter()
        .map(|p| &*p.spec)
        .chain(cpps.iter().map(|p| &*p.spec));
    let mut wanted = BTreeSet::new();
    let mut deps = bindings.into_iter().any(|d| d == Some(true));
    for spec in specs {
        deps |= spec.propagate_deps == Some(true);
        for s in &spec.resource_selectors {
            wanted.insert((s.api_version.clone(), s.kind.clone()));
        }
    }
    if deps {
        wanted.insert(kind_of::<ConfigMap>());
        wanted.insert(kind_of::<Secret>());
        wanted.insert(kind_of::<ServiceAccount>());
        wanted.insert(kind_of::<PersistentVolumeClaim>());
    }
    wanted
}

/// What the members refused, one "cluster <c>: <reason>: <message>" per Work whose
/// current generation is not applied for a reason other than the cluster not being
/// Ready (said on the binding) or not having been tried yet.
fn refused_by_members(works: &[Arc<Work>]) -> Vec<String> {
    use causeway_crds::federation::work::conditions as wc;
    let mut out = Vec::new();
    for w in works {
        let Some(applied) = w
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == wc::APPLIED))
        else {
            continue;
        };
        let current = applied.observed_generation == w.metadata.generation;
        if applied.status == "False" && current && applied.reason != wc::REASON_CLUSTER_NOT_READY {
            let cluster = w.labels().get(labels::CLUSTER).cloned().unwrap_or_default();
            out.push(format!(
                "cluster {cluster}: {}: {}",
                applied.reason, applied.message
            ));
        }
    }
    out.sort();
    out
}

/// One binding, namespaced or not, as the round sees it.
struct View<'a> {
    key: Key,
    namespace: Option<&'a str>,
    name: &'a str,
    /// The binding's uid, once it exists.
    uid: Option<&'a str>,
    spec: &'a BindingSpec,
    status: Option<&'a BindingStatus>,
}

impl View<'_> {
    fn frozen(&self) -> bool {
        self.status.is_some_and(BindingStatus::policy_removed)
    }
}

async fn round(
    hub: &kube::Client,
    c: &Caches,
    kinds: &mut Kinds,
    memos: &mut Memos,
    notes: &Notes,
    dirty: &Dirty,
) -> Failures {
    let mut failures = Failures::new("propagation", "hub");
    let (pps, cpps) = (c.pps.state(), c.cpps.state());
    let (rbs, crbs) = (c.rbs.state(), c.crbs.state());
    // the kinds policies select, and those of existing bindings (a policy deleted, a
    // restart: their templates must still be seen, or they would look gone)
    let deps = rbs.iter().map(|b| b.spec.propagate_deps);
    let mut wanted = wanted_kinds(
        &pps,
        &cpps,
        deps.chain(crbs.iter().map(|b| b.spec.propagate_deps)),
    );
    let bound_kinds = rbs.iter().map(|b| &b.spec.resource);
    for r in bound_kinds.chain(crbs.iter().map(|b| &b.spec.resource)) {
        wanted.insert((r.api_version.clone(), r.kind.clone()));
    }
    kinds.ensure(&wanted).await;
    for (kind, why) in &kinds.unknown {
        tracing::warn!(api_version = %kind.0, kind = %kind.1, reason = %why, "a policy selects a kind the hub does not serve");
    }
    let templates = kinds.templates();
    let clusters = c.clusters.state();
    let now = Time(jiff::Timestamp::now());
    let mut works: HashMap<Key, Vec<Arc<Work>>> = HashMap::new();
    for w in c.works.state() {
        if let Some(k) = work_key(&w) {
            works.entry(k).or_default().push(w);
        }
    }
    let all_interpreters = c.interpreters.state();
    let (interpreters, interpreter_verdicts) = interpreter::resolve(
        &all_interpreters
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>(),
    );
    let want = detector::desired(
        &templates,
        &pps,
        &cpps,
        &clusters,
        &rbs,
        &crbs,
        &works,
        &now,
        &mut memos.evictions,
        // a binding the round handles through a requirer only keeps its clusters: the
        // next full round moves it
        &|ns, name| dirty.full || dirty.keys.contains(&(ns.to_string(), name.to_string())),
        &interpreters,
        // (a kind not listed yet: its templates are not missing, only not seen)
        &|r| kinds.synced(&r.api_version, &r.kind),
    );
    let specs: Vec<(Key, &causeway_crds::federation::binding::BindingSpec)> = want
        .bindings
        .iter()
        .map(|b| (crate::watch::key(b), &b.spec.0))
        .chain(
            want.cluster_bindings
                .iter()
                .map(|b| ((String::new(), b.name_any()), &b.spec.0)),
        )
        .collect();
    // J.60: when each workload left its failed-over clusters, for the graceful purge
    memos.moves.record(specs.iter().cloned(), &clusters, now.0);
    memos.due = specs
        .iter()
        .filter_map(|(key, spec)| failover::next_due(spec, memos.moves.of(key), &clusters, now.0))
        .chain(want.next_due)
        .min();
    let invalid: std::collections::BTreeMap<_, _> = want
        .invalid_policies
        .iter()
        .map(|(id, e)| (id.clone(), e.to_string()))
        .collect();
    let by_resource = Templates::new(&templates);
    let actual_rb = crate::watch::by_key(&rbs);
    let actual_crb: HashMap<String, &Arc<ClusterResourceBinding>> =
        crbs.iter().map(|b| (b.name_any(), b)).collect();
    let (ops, cops) = (c.ops.state(), c.cops.state());
    // indexed by binding: each binding looks its own up, every round
    let mut revisions: HashMap<Key, Vec<Arc<ControllerRevision>>> = HashMap::new();
    for r in c.revisions.state() {
        if let Some(key) = revision_key(&r) {
            revisions.entry(key).or_default().push(r);
        }
    }
    let overrides_present = settle::present(&ops, &cops);
    let mut ctx = Ctx {
        hub,
        kinds,
        memos,
        notes,
        failures: &mut failures,
        clusters: &clusters,
        ops: &ops,
        cops: &cops,
        overrides_present: &overrides_present,
        now: &now,
        works: &works,
        revisions: &revisions,
        interpreters: &interpreters,
    };
    ctx.policy_statuses(&pps, &cpps, &invalid).await;
    ctx.override_statuses().await;
    ctx.interpreter_statuses(&all_interpreters, &interpreter_verdicts)
        .await;
    // the namespaces first, so a member has them when the templates' Works arrive
    let (leaving, members): (Vec<&Arc<Cluster>>, Vec<&Arc<Cluster>>) = clusters
        .iter()
        .partition(|c| c.metadata.deletion_timestamp.is_some());
    let names = |cs: Vec<&Arc<Cluster>>| cs.iter().map(|c| c.name_any()).collect::<BTreeSet<_>>();
    let (leaving, members) = (names(leaving), names(members));
    let ns_works = namespaces::desired(
        &want.bindings,
        &want.cluster_bindings,
        &c.namespaces.state(),
        &members,
    );
    // (a kind discovery says is not served has no templates to wait for; one whose
    // discovery call failed may have, as may one not listed yet)
    let listed = wanted
        .iter()
        .filter(|k| !ctx.kinds.unknown.contains_key(*k) || ctx.kinds.unanswered.contains(*k))
        .all(|(av, kind)| ctx.kinds.synced(av, kind));
    ctx.namespaces(&ns_works, &c.namespace_works.state(), &leaving, listed)
        .await;
    let mut bound: BTreeSet<Key> = BTreeSet::new();
    for b in &want.bindings {
        let key = crate::watch::key(b);
        bound.insert(key.clone());
        let had = actual_rb.get(&key).map(|a| a.spec.required_by.as_slice());
        if !in_round(dirty, &key, &b.spec.required_by, had) {
            continue;
        }
        let actual = actual_rb.get(&key).map(|a| a.as_ref());
        let api = Api::<ResourceBinding>::namespaced(hub.clone(), &key.0);
        let r = ctx.memos.rbs.ensure(&api, b, actual).await;
        ctx.failures.check(key.clone(), r);
        let view = View {
            key: key.clone(),
            namespace: b.metadata.namespace.as_deref(),
            name: b.metadata.name.as_deref().unwrap_or_default(),
            uid: actual.and_then(|a| a.metadata.uid.as_deref()),
            spec: &b.spec,
            status: b.status.as_ref(),
        };
        let rv = actual.and_then(|a| a.resource_version());
        let actual_status = actual.and_then(|a| a.status.as_ref());
        ctx.sync(
            &view,
            by_resource.of(&b.spec.resource),
            works.get(&key),
            rv,
            actual_status,
        )
        .await;
    }
    for b in &want.cluster_bindings {
        let key = (String::new(), b.name_any());
        bound.insert(key.clone());
        if !dirty.full && !dirty.keys.contains(&key) {
            continue;
        }
        let actual = actual_crb.get(&key.1).map(|a| a.as_ref());
        let api = Api::<ClusterResourceBinding>::all(hub.clone());
        let r = ctx.memos.crbs.ensure(&api, b, actual).await;
        ctx.failures.check(key.clone(), r);
        let view = View {
            key: key.clone(),
            namespace: None,
            name: &key.1,
            uid: actual.and_then(|a| a.metadata.uid.as_deref()),
            spec: &b.spec,
            status: b.status.as_ref(),
        };
        let rv = actual.and_then(|a| a.resource_version());
        let actual_status = actual.and_then(|a| a.status.as_ref());
        ctx.sync(
            &view,
            by_resource.of(&b.spec.resource),
            works.get(&key),
            rv,
            actual_status,
        )
        .await;
    }
    ctx.memos.settling.retain(&bound);
    // bindings whose template is gone: their Works, then themselves; only when the
    // template's kind is watched and listed (else "missing" means "not seen yet")
    let seen = |r: &causeway_crds::federation::binding::ResourceReference| {
        ctx.kinds.synced(&r.api_version, &r.kind)
    };
    let gone_rb = want
        .delete_bindings
        .iter()
        .filter(|k| actual_rb.get(*k).is_some_and(|b| seen(&b.spec.resource)))
        .cloned();
    let gone_crb = want
        .delete_cluster_bindings
        .iter()
        .filter(|n| actual_crb.get(*n).is_some_and(|b| seen(&b.spec.resource)))
        .map(|n| (String::new(), n.clone()));
    let gone: Vec<Key> = gone_rb.chain(gone_crb).collect();
    for key in gone {
        ctx.withdraw(&key, works.get(&key), None).await;
    }
    // templates whose binding another of one kind name and name in another API group
    // has: said on the template (each once per message)
    let mut taken_keys: BTreeSet<Key> = BTreeSet::new();
    for e in &want.invalid_templates {
        let SelectionError::BindingNameTaken(taken) = e else {
            continue;
        };
        let BindingNameTaken {
            api_version,
            kind,
            namespace,
            name,
            binding,
            ..
        } = taken.as_ref();
        let reference = causeway_crds::federation::binding::ResourceReference {
            api_version: api_version.clone(),
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            ..Default::default()
        };
        if let Some(t) = by_resource.of(&reference) {
            // (keyed apart from the binding's own Events)
            let key = (
                namespace.clone().unwrap_or_default(),
                format!("{binding} {api_version}"),
            );
            let note = e.to_string();
            ctx.tell_key(&key, t, EventType::Warning, BINDING_NAME_TAKEN, &note)
                .await;
            taken_keys.insert(key);
        }
    }
    // templates being deleted, and templates that hold the finalizer but no binding
    let binding_of = |key: &Key| match key.0.as_str() {
        "" => actual_crb.get(&key.1).map(|b| &b.spec.resource),
        _ => actual_rb.get(key).map(|b| &b.spec.resource),
    };
    for t in &templates {
        let Some(key) = template_key(t) else { continue };
        let held = t.finalizers().iter().any(|f| f == finalizers::PROPAGATION);
        if !held {
            continue;
        }
        // the binding of this name is another API group's template's: this one holds
        // nothing (the other's Works are not withdrawn for it)
        let types = t.types.as_ref();
        let (api_version, kind) = types.map_or(("", ""), |t| (&*t.api_version, &*t.kind));
        let ns = t.namespace();
        if binding_of(&key).is_some_and(|r| !r.is(api_version, kind, ns.as_deref(), &t.name_any()))
        {
            ctx.release(&key, t).await;
            continue;
        }
        if t.metadata.deletion_timestamp.is_some() {
            if dirty.full || dirty.keys.contains(&key) {
                ctx.withdraw(&key, works.get(&key), Some(t)).await;
            }
        } else if !bound.contains(&key) {
            ctx.release(&key, t).await;
        }
    }
    // the Events told of bindings and templates that are gone are forgotten (a
    // template made again later is told again)
    let templates_present: BTreeSet<Key> =
        templates.iter().filter_map(|t| template_key(t)).collect();
    ctx.memos.told.retain(|(key, _), _| {
        bound.contains(key) || taken_keys.contains(key) || templates_present.contains(key)
    });
    failures
}

struct Ctx<'a> {
    hub: &'a kube::Client,
    kinds: &'a Kinds,
    memos: &'a mut Memos,
    notes: &'a Notes,
    failures: &'a mut Failures,
    clusters: &'a [Arc<Cluster>],
    ops: &'a [Arc<OverridePolicy>],
    cops: &'a [Arc<ClusterOverridePolicy>],
    /// The override policies that exist, as Works' provenance names them.
    overrides_present: &'a BTreeSet<String>,
    now: &'a Time,
    /// Every binding's Works, by binding key.
    works: &'a HashMap<Key, Vec<Arc<Work>>>,
    /// The template revisions of ordered rollouts, by binding key.
    revisions: &'a HashMap<Key, Vec<Arc<ControllerRevision>>>,
    /// The ResourceInterpreters in force.
    interpreters: &'a Interpreters,
}

impl Ctx<'_> {
    /// Renders one binding into its Works, deletes the Works of clusters it left, and
    /// writes its status and its template's.
    async fn sync(
        &mut self,
        b: &View<'_>,
        template: Option<&Arc<DynamicObject>>,
        works: Option<&Vec<Arc<Work>>>,
        rv: Option<String>,
        actual_status: Option<&BindingStatus>,
    ) {
        let Some(template) = template else { return };
        let works: &[Arc<Work>] = works.map(Vec::as_slice).unwrap_or_default();
        let t_api = self.kinds.api(
            &b.spec.resource.api_version,
            &b.spec.resource.kind,
            b.namespace,
        );
        if let Some(api) = &t_api {
            let r = apply::add_finalizer(api, template.as_ref(), finalizers::PROPAGATION).await;
            self.failures.check(b.key.clone(), r);
        }
        let mut failed = Vec::new();
        let mut blocked = None;
        let mut rollout = None;
        let mut redistributed = None;
        // the clusters the workload is moving away from, with their share (0: no
        // longer scheduled): what they run beyond it counts as old replicas (H.53)
        let mut moving: BTreeMap<String, i64> = BTreeMap::new();
        // D.32 ★: an override policy whose values the copies hold went: the render
        // waits a moment, in case the claiming policy is being deleted with it
        let settling = if b.frozen() {
            None
        } else {
            let vanished = settle::vanished(works, self.overrides_present);
            self.memos.settling.hold(&b.key, vanished, self.now.0)
        };
        if let Some(until) = settling {
            tracing::debug!(binding = %b.name, %until, "an override policy went: the render waits");
            self.memos.due = Some(self.memos.due.map_or(until, |d| d.min(until)));
        }
        if !b.frozen() && settling.is_none() {
            let manifest = serde_json::to_value(template.as_ref()).unwrap_or_default();
            let out = render(&RenderInput {
                binding_namespace: b.namespace,
                binding_name: b.name,
                spec: b.spec,
                template: &manifest,
                overrides: self.ops,
                cluster_overrides: self.cops,
                interpreters: self.interpreters,
                clusters: self.clusters,
            });
            for w in &out.warnings {
                self.tell(b, template, EventType::Warning, "InvalidAnnotation", w)
                    .await;
            }
            for reason in [
                render::DEPENDENT_OVERRIDES_MISSING,
                render::INTERPRETER_INVALID,
            ] {
                match &out.blocked {
                    Some(why) if why.reason == reason => {
                        self.tell(b, template, EventType::Warning, reason, &why.message)
                            .await
                    }
                    _ => self.forget(b, reason),
                }
            }
            for (cluster, why) in &out.failed {
                let note = format!("cluster {cluster}: {why}");
                self.tell(
                    b,
                    template,
                    EventType::Warning,
                    "ApplyOverridesFailed",
                    &note,
                )
                .await;
            }
            if out.failed.is_empty() {
                self.forget(b, "ApplyOverridesFailed");
            }
            // §9.5 ★: two override policies writing one path (the later wins)
            let overlaps: Vec<String> = out
                .overlaps
                .iter()
                .map(|(cluster, o)| format!("cluster {cluster}: {o}"))
                .collect();
            self.tell_notes(
                b,
                template,
                EventType::Normal,
                "OverridesOverlap",
                &overlaps,
            )
            .await;
            if out.blocked.is_none() {
                let (to_write, progress, skipped) = self.roll_out(b, template, out.works, works);
                self.tell_notes(
                    b,
                    template,
                    EventType::Warning,
                    "RolloutWaveEmpty",
                    &skipped,
                )
                .await;
                let generation = template.metadata.generation.unwrap_or(0);
                let kept = failover::kept(
                    b.spec,
                    self.memos.moves.of(&b.key),
                    self.clusters,
                    works,
                    &to_write,
                    generation,
                    self.now.0,
                );
                let notes: Vec<String> = kept.iter().map(|k| k.note.clone()).collect();
                self.tell_notes(b, template, EventType::Warning, "FailedOver", &notes)
                    .await;
                // J.64: where application failover moved the workload away from
                let notes: Vec<String> = b
                    .spec
                    .evictions
                    .iter()
                    .map(|e| format!("cluster {}: {}", e.cluster, e.reason))
                    .collect();
                self.tell_notes(
                    b,
                    template,
                    EventType::Warning,
                    "ApplicationFailover",
                    &notes,
                )
                .await;
                // a graceful purge's copy is in transit; one parked (Never) is not
                moving.extend(
                    kept.iter()
                        .filter(|k| k.graceful)
                        .map(|k| (k.cluster.clone(), 0)),
                );
                let mut kept: Vec<String> = kept.into_iter().map(|k| k.cluster).collect();
                // §9.2 ★: replicas leave a cluster only as the others make up for them
                let r = &b.spec.resource;
                let (to_write, guarded) = redistribution::guard_works(
                    b.spec,
                    &manifest,
                    self.interpreters.of(&r.api_version, &r.kind),
                    self.clusters,
                    to_write,
                    works,
                    &kept,
                    self.now.0,
                );
                kept.extend(failover::kept_for_requirers(b.spec, self.works));
                self.write_works(b, &to_write, &out.failed, &kept, works)
                    .await;
                self.keep_revisions(b, &manifest, works).await;
                self.tell_rollout(b, template, progress.as_ref()).await;
                if let redistribution::Outcome::Planned(plan) = &guarded {
                    moving.extend(plan.held.iter().map(|h| (h.cluster.clone(), h.share)));
                }
                rollout = Some(progress);
                redistributed = Some(guarded);
            }
            failed = out.failed;
            blocked = out.blocked;
        }
        // status: the detector's Scheduled condition and reasons, the Works' results
        // (the previous status is what the binding has, so FullyApplied's transition
        // time stays put; the detector's Scheduled condition and reasons replace theirs)
        // J.61: cluster failover found nowhere else to go (the detector's Scheduled
        // message says so): a Warning Event too, once while it lasts
        let nowhere = failover::nowhere_else_notes(b.status);
        self.tell_notes(
            b,
            template,
            EventType::Warning,
            "FailoverNowhereElse",
            &nowhere,
        )
        .await;
        let mut previous = actual_status.cloned().unwrap_or_default();
        if let Some(detected) = b.status {
            // in place, so the conditions keep the order the API server has
            for c in detected
                .conditions
                .iter()
                .filter(|c| c.type_ == conditions::SCHEDULED)
            {
                match previous.conditions.iter_mut().find(|p| p.type_ == c.type_) {
                    Some(p) => *p = c.clone(),
                    None => previous.conditions.insert(0, c.clone()),
                }
            }
            previous.scheduling_reasons = detected.scheduling_reasons.clone();
            previous.last_scheduled_time = detected.last_scheduled_time.clone();
        }
        let previous = Some(previous);
        let mut st = status::binding_status(
            b.spec,
            works,
            self.clusters,
            &failed,
            previous.as_ref(),
            self.now,
        );
        // a new generation the hub cannot render: the rollout says why it does not start
        if let Some(why) = &blocked
            && b.spec.rollout.is_some()
        {
            status::rollout_blocked(
                &mut st,
                why.reason,
                &why.message,
                template.metadata.generation,
                self.now,
            );
        }
        // only when rendered (not frozen, not blocked): else the condition stays as it was
        if let Some(progress) = &rollout {
            let spec = b.spec.rollout.as_ref();
            let deadline = status::with_rollout(&mut st, progress.as_ref(), spec, self.now);
            self.tell_stuck(b, template, progress.as_ref(), spec, deadline)
                .await;
        }
        if let Some(guarded) = &redistributed {
            let outcome = match guarded {
                redistribution::Outcome::Unguarded => None,
                redistribution::Outcome::Planned(plan) => Some(Ok(plan)),
                redistribution::Outcome::Invalid(e) => Some(Err(e.as_str())),
            };
            let spec = b.spec.redistribution.as_ref();
            let deadline = status::with_redistribution(&mut st, outcome, spec, self.now);
            self.tell_hold_stuck(b, template, st.redistribution.as_ref(), spec, deadline)
                .await;
        }
        // a Warning Event on the template for what a member refused (conflicts,
        // immutable fields, timeouts), once per distinct set of failures
        let refused = refused_by_members(works);
        self.tell_notes(b, template, EventType::Warning, "ApplyFailed", &refused)
            .await;
        let value = serde_json::to_value(&st).unwrap_or_default();
        let (kind, api_version) = match b.namespace {
            Some(_) => ("ResourceBinding", "causeway.io/v1alpha1"),
            None => ("ClusterResourceBinding", "causeway.io/v1alpha1"),
        };
        let actual = || actual_status.and_then(|s| serde_json::to_value(s).ok());
        let r = match b.namespace {
            Some(ns) => {
                let api = Api::<ResourceBinding>::namespaced(self.hub.clone(), ns);
                let ns = ns.to_string();
                self.memos
                    .status
                    .ensure(&api, &ns, b.name, api_version, kind, &value, rv, actual)
                    .await
            }
            None => {
                let api = Api::<ClusterResourceBinding>::all(self.hub.clone());
                self.memos
                    .status
                    .ensure(&api, "", b.name, api_version, kind, &value, rv, actual)
                    .await
            }
        };
        self.failures.check(b.key.clone(), r);
        // the template's .status, for the kinds with a rule (H.53)
        let generation = template.metadata.generation.unwrap_or(0);
        let previous = template.data.get("status");
        if let (Some(api), Some(st)) = (
            t_api,
            status::template_status(
                self.interpreters
                    .status_sums(&b.spec.resource.api_version, &b.spec.resource.kind),
                generation,
                previous,
                b.spec,
                works,
                &moving,
                self.clusters,
            ),
        ) {
            let ns = b.namespace.unwrap_or_default().to_string();
            let written = self
                .memos
                .status
                .ensure(
                    &api,
                    &ns,
                    &template.name_any(),
                    &b.spec.resource.api_version,
                    &b.spec.resource.kind,
                    &st,
                    template.resource_version(),
                    || previous.cloned(),
                )
                .await;
            // an interpreter's sums go to a custom kind's status, which may not take
            // them: the template says so, not only the log
            let r = &b.spec.resource;
            let sums = self.interpreters.status_sums(&r.api_version, &r.kind);
            if !sums.is_empty() {
                match &written {
                    Err(e) => {
                        let why = format!(
                            "the members' {} could not be written to the template's status ({e}); if this persists, check that its CRD has the status subresource and declares those fields as integers in its status schema",
                            sums.join(", ")
                        );
                        self.tell(b, template, EventType::Warning, STATUS_NOT_AGGREGATED, &why)
                            .await;
                    }
                    Ok(_) => self.forget(b, STATUS_NOT_AGGREGATED),
                }
            }
            self.failures.check(b.key.clone(), written);
        }
    }

    /// The ordered rollout (`spec.rollout`): the rendered Works of the clusters the
    /// rollout releases, and for the clusters it holds the generation they run,
    /// rendered with the overrides as they are now, with the binding's replica division
    /// ([`rollout::held_work`]; none when they have none).
    /// `None` when the binding has no rollout.
    fn roll_out(
        &self,
        b: &View<'_>,
        template: &DynamicObject,
        rendered: Vec<Work>,
        actual: &[Arc<Work>],
    ) -> (Vec<Work>, Option<rollout::Progress>, Vec<String>) {
        let Some(spec) = b.spec.rollout.as_ref().filter(|r| !r.waves.is_empty()) else {
            return (rendered, None, Vec::new());
        };
        let Some(generation) = template.metadata.generation else {
            let kind = &b.spec.resource.kind;
            let name = match b.namespace {
                Some(ns) => format!("{kind} {ns}/{}", template.name_any()),
                None => format!("{kind} {}", template.name_any()),
            };
            return (
                rendered,
                Some(rollout::Progress::Unordered { template: name }),
                Vec::new(),
            );
        };
        let work_of = |cluster: &str| status::work_of(actual, cluster);
        let labels_of = |cluster: &str| {
            self.clusters
                .iter()
                .find(|c| c.name_any() == cluster)
                .map(|c| c.labels().clone())
                .unwrap_or_default()
        };
        let scheduled: Vec<String> = b.spec.clusters.iter().map(|c| c.name.clone()).collect();
        let plan = rollout::plan(Some(spec), &scheduled, &labels_of, generation, &|c| {
            rollout::settled_at(work_of(c), generation)
        });
        // R.6 ★: a held cluster with no copy runs what its wave runs
        let older = self.older_copies(b, &plan.waves, &plan.held, actual);
        let works = rendered
            .into_iter()
            .filter_map(|w| {
                let cluster = w
                    .metadata
                    .namespace
                    .as_deref()
                    .and_then(|ns| {
                        ns.strip_prefix(causeway_crds::well_known::EXECUTION_NAMESPACE_PREFIX)
                    })
                    .unwrap_or_default()
                    .to_string();
                if !plan.held.contains(&cluster) {
                    return Some(w);
                }
                // its generation rendered with today's overrides; what it has when
                // that generation's revision is not kept (or its overrides fail)
                older
                    .get(&cluster)
                    .or(work_of(&cluster))
                    .map(|actual| rollout::held_work(&w, actual))
            })
            .collect();
        (works, Some(plan.progress), plan.skipped)
    }

    /// A Warning `RolloutStuck` Event on the template once per wave that passes the
    /// rollout's progress deadline; the loop runs again at a deadline still to come.
    /// Whether `deadline` has passed; until it does, the loop is woken then.
    fn overdue(&mut self, deadline: jiff::Timestamp) -> bool {
        if deadline > self.now.0 {
            self.memos.due = Some(self.memos.due.map_or(deadline, |d| d.min(deadline)));
            return false;
        }
        true
    }

    async fn tell_stuck(
        &mut self,
        b: &View<'_>,
        template: &Arc<DynamicObject>,
        progress: Option<&rollout::Progress>,
        spec: Option<&rollout::Rollout>,
        deadline: Option<jiff::Timestamp>,
    ) {
        if !deadline.is_some_and(|at| self.overdue(at)) {
            return;
        }
        let (
            Some(rollout::Progress::Waiting {
                generation,
                wave,
                waves,
                name,
                ..
            }),
            Some(secs),
        ) = (progress, spec.and_then(|r| r.progress_deadline_seconds))
        else {
            return;
        };
        let note = format!(
            "the rollout of template generation {generation} has not moved on for {secs}s: wave {wave} of {waves} ({name}) is not done, and it keeps waiting ({}: the RolledOut condition says for what)",
            get_binding(b)
        );
        self.tell(b, template, EventType::Warning, "RolloutStuck", &note)
            .await;
    }

    /// A Warning Event on the template once a make-before-break hold has gone past its
    /// progress deadline (once per stall); before it, the loop is woken at the deadline.
    async fn tell_hold_stuck(
        &mut self,
        b: &View<'_>,
        template: &Arc<DynamicObject>,
        hold: Option<&causeway_crds::federation::redistribution::HoldProgress>,
        spec: Option<&causeway_crds::federation::redistribution::Redistribution>,
        deadline: Option<jiff::Timestamp>,
    ) {
        const REASON: &str = "RedistributionStuck";
        let (Some(at), Some(hold), Some(secs)) = (
            deadline,
            hold,
            spec.and_then(|r| r.progress_deadline_seconds),
        ) else {
            return self.forget(b, REASON);
        };
        if !self.overdue(at) {
            return self.forget(b, REASON);
        }
        // the same note for the whole stall (the counts may change within it): told once
        let note = format!(
            "replicas held above their clusters' shares (make-before-break) have not moved for {secs}s, since {}: nothing is forced, they stay until the clusters short of their share run them ({}: the Redistributed condition says which)",
            hold.since.0,
            get_binding(b)
        );
        self.tell(b, template, EventType::Warning, REASON, &note)
            .await;
    }

    /// A Normal Event on the template each time a rollout moves on (a wave released, or
    /// every wave done); the binding's `RolledOut` condition says where it stands.
    async fn tell_rollout(
        &mut self,
        b: &View<'_>,
        template: &Arc<DynamicObject>,
        progress: Option<&rollout::Progress>,
    ) {
        let Some(p) = progress else { return };
        let note = match p {
            rollout::Progress::Unordered { .. } => {
                let note = p.message();
                return self
                    .tell(b, template, EventType::Warning, "RolloutUnordered", &note)
                    .await;
            }
            rollout::Progress::Complete { .. } => p.message(),
            rollout::Progress::Waiting {
                generation,
                wave,
                waves,
                name,
                ..
            } => format!("wave {wave} of {waves} ({name}) gets template generation {generation}"),
        };
        self.tell(b, template, EventType::Normal, "RolloutProgressing", &note)
            .await;
    }

    /// Applies the rendered Works and deletes those of clusters no longer scheduled
    /// (but not of clusters whose overrides failed: they keep what they have).
    async fn write_works(
        &mut self,
        b: &View<'_>,
        rendered: &[Work],
        failed: &[(String, String)],
        failed_over: &[String],
        actual: &[Arc<Work>],
    ) {
        let by_ns: HashMap<&str, &Arc<Work>> = actual
            .iter()
            .filter_map(|w| Some((w.metadata.namespace.as_deref()?, w)))
            .collect();
        let mut keep: BTreeSet<String> = BTreeSet::new();
        for w in rendered {
            let ns = w.metadata.namespace.clone().unwrap_or_default();
            keep.insert(ns.clone());
            let current = by_ns.get(ns.as_str()).map(|w| w.as_ref());
            if current.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
                continue; // being removed; a new one is made once it is gone
            }
            let api = Api::<Work>::namespaced(self.hub.clone(), &ns);
            let r = self.memos.works.ensure(&api, w, current).await;
            self.failures.check(b.key.clone(), r);
        }
        for cluster in failed.iter().map(|(c, _)| c).chain(failed_over) {
            keep.insert(execution_namespace(cluster));
        }
        // a leaving cluster's Works are the unjoin's to handle (delete or, with
        // --preserve, orphan the copies: applier::leave), not the scheduler's
        for c in self.clusters {
            if c.metadata.deletion_timestamp.is_some() {
                keep.insert(execution_namespace(&c.name_any()));
            }
        }
        for w in actual {
            let ns = w.metadata.namespace.clone().unwrap_or_default();
            if keep.contains(&ns) || w.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let api = Api::<Work>::namespaced(self.hub.clone(), &ns);
            let r = apply::remove(&api, &w.name_any())
                .await
                .map(|_| apply::Outcome::Written);
            self.failures.check(b.key.clone(), r);
        }
    }
}

/// The kubectl command that shows binding `b`, for messages.
fn get_binding(b: &View<'_>) -> String {
    match b.namespace {
        Some(ns) => format!("kubectl get rb {} -n {ns} -o yaml", b.name),
        None => format!("kubectl get crb {} -o yaml", b.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Templates of one kind name and name in two API groups are told apart: a binding
    /// renders the template its `spec.resource` names, whichever was listed last.
    #[test]
    fn a_binding_renders_the_template_of_its_own_api_group() {
        let gateway = |api_version: &str, uid: &str| -> Arc<DynamicObject> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": api_version, "kind": "Gateway",
                    "metadata": {"name": "web", "namespace": "shop", "uid": uid},
                }))
                .unwrap(),
            )
        };
        let templates = vec![
            gateway("gateway.networking.k8s.io/v1", "k8s"),
            gateway("gateway.networking.k8s.io/v1beta1", "k8s"),
            gateway("networking.istio.io/v1", "istio"),
        ];
        let index = Templates::new(&templates);
        let reference = |api_version: &str| causeway_crds::federation::binding::ResourceReference {
            api_version: api_version.into(),
            kind: "Gateway".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
            ..Default::default()
        };
        for (api_version, want) in [
            ("networking.istio.io/v1", "networking.istio.io/v1"),
            (
                "gateway.networking.k8s.io/v1",
                "gateway.networking.k8s.io/v1",
            ),
            (
                "gateway.networking.k8s.io/v1beta1",
                "gateway.networking.k8s.io/v1beta1",
            ),
            // a version not listed: the object in another version of its group
            ("networking.istio.io/v1beta1", "networking.istio.io/v1"),
        ] {
            let t = index.of(&reference(api_version)).unwrap();
            let manifest = serde_json::to_value(t.as_ref()).unwrap();
            assert_eq!(manifest["apiVersion"], want, "{api_version}");
        }
        assert!(index.of(&reference("example.com/v1")).is_none());
        let mut other = reference("networking.istio.io/v1");
        other.namespace = Some("other".into());
        assert!(index.of(&other).is_none());
    }

    /// A dependency's binding is handled in its own rounds, in full ones, and in the
    /// rounds of its requirers: the ones it should have and the ones it has.
    #[test]
    fn a_dependency_is_handled_in_its_requirers_rounds() {
        let req = |name: &str| BindingSnapshot {
            namespace: Some("demo".into()),
            name: name.into(),
            ..Default::default()
        };
        let key = |name: &str| ("demo".to_string(), name.to_string());
        let dirty = |full: bool, names: &[&str]| Dirty {
            full,
            keys: names.iter().map(|n| key(n)).collect(),
        };
        let shared = key("shared-configmap");
        let (a, b) = (req("a-deployment"), req("b-deployment"));
        type Case = (
            &'static str,
            Dirty,
            Vec<BindingSnapshot>,
            Option<Vec<BindingSnapshot>>,
            bool,
        );
        let cases: [Case; 6] = [
            ("a full round", dirty(true, &[]), vec![], None, true),
            (
                "its own change",
                dirty(false, &["shared-configmap"]),
                vec![],
                None,
                true,
            ),
            (
                "a requirer it should have",
                dirty(false, &["a-deployment"]),
                vec![a.clone()],
                None,
                true,
            ),
            (
                "a requirer it has and should no longer have",
                dirty(false, &["a-deployment"]),
                vec![b.clone()],
                Some(vec![a.clone(), b.clone()]),
                true,
            ),
            (
                "a binding of that name in another namespace",
                Dirty {
                    full: false,
                    keys: [("elsewhere".to_string(), "a-deployment".to_string())].into(),
                },
                vec![a.clone()],
                None,
                false,
            ),
            (
                "nothing of its own",
                dirty(false, &["north"]),
                vec![b.clone()],
                Some(vec![a, b]),
                false,
            ),
        ];
        for (what, d, required_by, had, want) in cases {
            assert_eq!(
                in_round(&d, &shared, &required_by, had.as_deref()),
                want,
                "{what}"
            );
        }
    }
}
