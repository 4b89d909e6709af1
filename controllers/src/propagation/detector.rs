//! The detector's pure step (federation.md §8 B.14–16): which bindings should exist
//! for the resource templates on the hub, given the policies, the member clusters and
//! the bindings that exist now.
//!
//! For every template that is not being deleted:
//!
//! 1. the valid policies ([`validate_policy`]; an invalid one is listed in
//!    [`Desired::invalid_policies`] so the loop can report it on the policy) compete
//!    for it with [`claim`], the current claim read from the labels of its existing
//!    binding, so claims stick. An invalid policy makes no new claim, but keeps what
//!    it holds: a binding whose labels name it is kept as it is, frozen
//!    (`Scheduled=False`, PolicyInvalid, with what is wrong), and no other policy
//!    takes its template until it is fixed;
//! 2. a claimed template gets a binding named [`binding_name`] (`<name>-<kind>`: of two
//!    templates of one kind name and name in two API groups, the one the existing
//!    binding references has it, else the first; the other is reported in
//!    [`Desired::invalid_templates`], `BindingNameTaken`): a ResourceBinding in
//!    the template's namespace, or a ClusterResourceBinding for a cluster-scoped
//!    template; labels name the claiming policy ([`PolicyId::labels`]); the spec
//!    references the template (uid and resourceVersion included), carries its
//!    `spec.replicas` when it has one and copies the policy's placement,
//!    conflictResolution and propagateDeps;
//! 3. the placement is scheduled over the current clusters
//!    (`causeway_crds::federation::schedule`, through [`failover::place`]: failed-over
//!    clusters and those application failover moves the workload away from —
//!    `app_failover`, read from the bindings' Works and recorded in `spec.evictions` —
//!    are left out unless that leaves nothing, moves are rate limited, and a
//!    disruption of most of the fleet holds cluster failover), so a
//!    cluster that joins later is picked up the next time (B.16): `spec.clusters`
//!    and `status.schedulingReasons` come from the [`Decision`], with `Scheduled=True`;
//!    `Scheduled=False` with reason NoClusterFit when no cluster fits, or with reason
//!    SchedulerError and the [`PlacementError`]'s message when scheduling fails (the
//!    clusters of the existing binding are kept then, so a bad edit of the policy
//!    does not tear the workload down).
//!
//! Existing bindings whose template is gone are listed for deletion. The binding of a
//! template that no policy claims any more is kept, frozen (`Scheduled=False`,
//! PolicyRemoved): deleting a policy never removes workloads from members (G.47), and
//! a policy deleted together with its overrides never re-renders (D.32; the hub holds
//! the render a moment when the overrides go first, `hub/settle.rs`). A template being deleted produces no binding and its binding is neither
//! rewritten nor deleted here (deletion semantics belong to a later step).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::binding::{
    BindingSpec, BindingStatus, ClusterResourceBinding, ClusterResourceBindingSpec,
    ReplicaRequirements, ResourceBinding, ResourceBindingSpec, ResourceReference, TargetCluster,
    api_group, binding_name, conditions,
};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::interpreter::Interpreters;
use causeway_crds::federation::propagation::{
    ClusterPropagationPolicy, PropagationPolicy, PropagationSpec,
};
use causeway_crds::federation::schedule::failover::past_deadline;
use causeway_crds::federation::schedule::{Decision, PlacementError, Workload, app_failover};
use causeway_crds::federation::selection::{
    BindingNameTaken, PolicyId, PolicyRef, SelectionError, TemplateMeta, claim, validate_policy,
};
use causeway_crds::federation::state_preservation;
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::annotations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use kube::core::DynamicObject;

mod attach;
pub mod evictions;
pub mod failover;
mod lazy;
#[cfg(test)]
mod tests;

/// What the detector should make true.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// The ResourceBindings that should exist (namespaced templates), sorted by
    /// namespace and name.
    pub bindings: Vec<ResourceBinding>,
    /// The ClusterResourceBindings that should exist (cluster-scoped templates),
    /// sorted by name.
    pub cluster_bindings: Vec<ClusterResourceBinding>,
    /// ResourceBindings to delete, as (namespace, name): their template is gone or
    /// no longer claimed.
    pub delete_bindings: Vec<(String, String)>,
    /// ClusterResourceBindings to delete, by name.
    pub delete_cluster_bindings: Vec<String>,
    /// Policies that break the selection rules and so claim nothing, with what is
    /// wrong, for the loop to report on each policy.
    pub invalid_policies: Vec<(PolicyId, SelectionError)>,
    /// Templates that cannot be propagated (no apiVersion, kind or name; their binding
    /// name another API group's template of that kind name and name has), with why.
    pub invalid_templates: Vec<SelectionError>,
    /// The next time a decision changes by itself: a failover the eviction rate limit
    /// held back may go ahead, or an application's toleration of being unhealthy in a
    /// cluster ends.
    pub next_due: Option<k8s_openapi::jiff::Timestamp>,
}

impl Desired {
    fn due(&mut self, at: k8s_openapi::jiff::Timestamp) {
        self.next_due = Some(self.next_due.map_or(at, |n| n.min(at)));
    }

    /// A binding to make: a ResourceBinding when `metadata` has a namespace, else a
    /// ClusterResourceBinding.
    fn push(&mut self, metadata: ObjectMeta, spec: BindingSpec, status: BindingStatus) {
        match metadata.namespace {
            Some(_) => self.bindings.push(ResourceBinding {
                metadata,
                spec: ResourceBindingSpec(spec),
                status: Some(status),
            }),
            None => self.cluster_bindings.push(ClusterResourceBinding {
                metadata,
                spec: ClusterResourceBindingSpec(spec),
                status: Some(status),
            }),
        }
    }
}

/// The pure detector: see the module documentation. `works` are the bindings' Works
/// by binding key (`(namespace, name)`, "" for a ClusterResourceBinding), whose health
/// application failover reads. `now` stamps the `lastTransitionTime` of a `Scheduled`
/// condition whose status changes; `evictions` is the failover rate limit's bucket,
/// which the loop keeps across rounds, and `written` says which bindings (namespace, ""
/// for a ClusterResourceBinding, and name) the round writes: only those spend from it
/// (a round that handles some bindings would otherwise spend the tokens on moves it
/// does not make, and the round that writes them find the bucket empty).
#[allow(clippy::too_many_arguments)]
pub fn desired(
    templates: &[Arc<DynamicObject>],
    policies: &[Arc<PropagationPolicy>],
    cluster_policies: &[Arc<ClusterPropagationPolicy>],
    clusters: &[Arc<Cluster>],
    bindings: &[Arc<ResourceBinding>],
    cluster_bindings: &[Arc<ClusterResourceBinding>],
    works: &HashMap<(String, String), Vec<Arc<Work>>>,
    now: &Time,
    evictions: &mut evictions::Evictions,
    written: &dyn Fn(&str, &str) -> bool,
    interpreters: &Interpreters,
    seen: &dyn Fn(&ResourceReference) -> bool,
) -> Desired {
    let mut out = Desired::default();
    let all = policies
        .iter()
        .map(|p| PolicyRef::from_pp(p))
        .chain(cluster_policies.iter().map(|p| PolicyRef::from_cpp(p)));
    let mut valid = Vec::new();
    for policy in all {
        match validate_policy(&policy) {
            Ok(()) => valid.push(policy),
            Err(e) => out.invalid_policies.push((policy.id(), e)),
        }
    }
    let by_name = |name: Option<&String>, ns: Option<&String>| {
        (
            ns.cloned().unwrap_or_default(),
            name.cloned().unwrap_or_default(),
        )
    };
    let existing_rb: BTreeMap<(String, String), &ResourceBinding> = bindings
        .iter()
        .map(|b| {
            let key = by_name(b.metadata.name.as_ref(), b.metadata.namespace.as_ref());
            (key, &**b)
        })
        .collect();
    let existing_crb: BTreeMap<String, &ClusterResourceBinding> = cluster_bindings
        .iter()
        .map(|b| (b.name_any(), &**b))
        .collect();
    let clusters: Vec<Cluster> = clusters.iter().map(|c| (**c).clone()).collect();
    let disrupted = failover::disruption(&clusters);
    // a cluster that is not Ready reports no fresh Work status: application failover
    // does not judge it (nor count it as healthy)
    let ready: BTreeSet<String> = clusters
        .iter()
        .filter(|c| !failover::down(c))
        .map(|c| c.name_any())
        .collect();
    // bindings that must not be deleted: desired ones and those of templates being deleted
    let mut keep_rb = BTreeSet::new();
    let mut keep_crb = BTreeSet::new();
    let holders = holders(templates, &existing_rb, &existing_crb, seen);
    for template in templates {
        let meta = match TemplateMeta::from_object(template) {
            Ok(meta) => meta,
            Err(e) => {
                out.invalid_templates.push(e);
                continue;
            }
        };
        let name = binding_name(&meta.kind, &meta.name);
        // another template of this kind name and name, in another API group, has the
        // binding: this one is not propagated, and is reported
        if let Some((api_version, kind)) = holders.get(&(meta.namespace.clone(), name.clone()))
            && (api_group(api_version), kind.as_str())
                != (api_group(&meta.api_version), meta.kind.as_str())
        {
            out.invalid_templates
                .push(SelectionError::BindingNameTaken(Box::new(
                    BindingNameTaken {
                        api_version: meta.api_version.clone(),
                        kind: meta.kind.clone(),
                        namespace: meta.namespace.clone(),
                        name: meta.name.clone(),
                        binding: name,
                        holder: api_version.clone(),
                    },
                )));
            continue;
        }
        let existing: Option<(&ObjectMeta, &BindingSpec, Option<&BindingStatus>)> =
            match &meta.namespace {
                Some(ns) => existing_rb
                    .get(&(ns.clone(), name.clone()))
                    .map(|b| (&b.metadata, &b.spec.0, b.status.as_ref())),
                None => existing_crb
                    .get(&name)
                    .map(|b| (&b.metadata, &b.spec.0, b.status.as_ref())),
            };
        let keep = match &meta.namespace {
            Some(ns) => keep_rb.insert((ns.clone(), name.clone())),
            None => keep_crb.insert(name.clone()),
        };
        if template.metadata.deletion_timestamp.is_some() || !keep {
            continue;
        }
        let current = existing.and_then(|(m, _, _)| PolicyId::from_labels(m.labels.as_ref()?));
        // B.15: a policy that became invalid keeps what it holds (it only declines new
        // claims): its binding is frozen as it is, and no other policy takes the template
        let invalid_holder = current.as_ref().and_then(|c| {
            let found = out.invalid_policies.iter().find(|(id, _)| id == c);
            found.map(|(_, why)| why.to_string())
        });
        if let (Some(why), Some((m, spec, status))) = (invalid_holder, existing) {
            let message = format!(
                "{why}; it keeps the templates it holds: this binding is kept as it is (its clusters, and the member copies, which are no longer updated) and no other policy takes the template until the policy is fixed"
            );
            let reason = conditions::REASON_POLICY_INVALID;
            freeze(&mut out, m, spec, status, now, reason, message);
            continue;
        }
        let held = match claim(&meta, &valid, current.as_ref()) {
            Ok(Some(held)) => held,
            Ok(None) => {
                match existing {
                    // a Lazy policy's binding that never propagated anything
                    Some((m, _, _)) if pending(m) => {
                        unkeep(&meta, &name, &mut keep_rb, &mut keep_crb)
                    }
                    // a dependency's binding no policy placed: kept only if still
                    // required (attach below)
                    Some((m, spec, _)) if !spec.required_by.is_empty() && !lazy::is_policys(m) => {
                        unkeep(&meta, &name, &mut keep_rb, &mut keep_crb)
                    }
                    // G.47: the copies stay; the binding is kept, frozen (a dependency
                    // a policy placed too: attach keeps its clusters, and adds those of
                    // the workloads that still need it)
                    Some((m, spec, status)) => detach(&mut out, m, spec, status, now),
                    None => unkeep(&meta, &name, &mut keep_rb, &mut keep_crb),
                }
                continue;
            }
            Err(e) => {
                out.invalid_templates.push(e);
                unkeep(&meta, &name, &mut keep_rb, &mut keep_crb);
                continue;
            }
        };
        let Some(policy) = valid.iter().find(|p| p.id() == held.policy) else {
            continue; // claim only returns given policies
        };
        let previous_conditions = existing
            .and_then(|(_, _, status)| status)
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        // activationPreference: Lazy: the policy's changes wait for the template's (the
        // hash is recorded under a Lazy policy only: a binding without it that a policy
        // made Lazy later keeps what it has, as Karmada's does)
        let hash = lazy::is_lazy(policy.spec).then(|| lazy::template_hash(template));
        let activation = match &hash {
            None => lazy::Activation::Now,
            Some(hash) => {
                let has_works = works
                    .get(&(meta.namespace.clone().unwrap_or_default(), name.clone()))
                    .is_some_and(|w| !w.is_empty());
                let existing = existing.map(|(m, spec, _)| (m, spec));
                lazy::activation(policy, template, hash, existing, has_works)
            }
        };
        if let lazy::Activation::Pending(hash) = &activation {
            pending_binding(
                &mut out,
                &meta,
                template.metadata.uid.as_deref(),
                name,
                policy,
                hash,
                previous_conditions,
                existing.and_then(|(_, spec, _)| spec.reschedule_triggered_at.clone()),
                now,
            );
            continue;
        }
        // a pending binding's spec is no snapshot: nothing was propagated from it
        let existing_spec = existing
            .filter(|(m, _, _)| !pending(m))
            .map(|(_, spec, _)| spec);
        let effective = lazy::effective(policy.spec, &activation);
        let pspec: &PropagationSpec = &effective;
        // where the kind keeps its replica count: `spec.replicas`, or its interpreter's
        let replicas_at = interpreters.replicas_pointer(&meta.api_version, &meta.kind);
        let replicas = match interpreters.broken(&meta.api_version, &meta.kind) {
            // its interpreter is broken (nothing is rendered): the count it had, so the
            // division stays as it was until the interpreter is fixed
            Some(_) => existing_spec.and_then(|s| s.replicas),
            None => template
                .data
                .pointer(replicas_at)
                .and_then(serde_json::Value::as_i64)
                .and_then(|r| i32::try_from(r).ok()),
        };
        // J.64: clusters the application failed in for longer than tolerated
        let binding_works = works
            .get(&(meta.namespace.clone().unwrap_or_default(), name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let verdict = app_failover::decide(
            pspec.failover.as_ref().and_then(|f| f.application.as_ref()),
            existing_spec
                .map(|s| s.clusters.as_slice())
                .unwrap_or_default(),
            existing_spec
                .map(|s| s.evictions.as_slice())
                .unwrap_or_default(),
            |c| {
                ready
                    .contains(c)
                    .then(|| crate::propagation::status::work_of(binding_works, c))
                    .flatten()
            },
            template.metadata.generation,
            now.0,
        );
        if let Some(at) = verdict.next_due {
            out.due(at);
        }
        let requirements = ReplicaRequirements::of(&template.data);
        // C.23: a reschedule asked for (spec.rescheduleTriggeredAt) and not carried out
        // yet divides the replicas anew
        let last_scheduled = existing
            .and_then(|(_, _, status)| status)
            .and_then(|s| s.last_scheduled_time.as_ref());
        let fresh = causeway_crds::federation::divide::is_fresh(
            existing_spec.and_then(|s| s.reschedule_triggered_at.as_ref()),
            last_scheduled,
        );
        let workload = Workload {
            replicas,
            fresh,
            uid: template.uid().unwrap_or_default(),
            // what one replica asks for, for a division by available replicas
            request: requirements
                .as_ref()
                .map(|r| r.resource_request.clone())
                .unwrap_or_default(),
            previous: existing_spec
                .map(|s| {
                    let clusters = s.clusters.iter();
                    clusters
                        .map(|c| (c.name.clone(), c.replicas.unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default(),
            failover_at: pspec
                .failover
                .as_ref()
                .and_then(|f| f.cluster.as_ref())
                .filter(|_| disrupted.is_none())
                .map(|_| now.0),
            evicted: verdict
                .evictions
                .iter()
                .map(|e| (e.cluster.clone(), e.reason.clone()))
                .collect(),
            now: Some(now.0),
        };
        // a NoExecute taint tolerated for tolerationSeconds: the round when they end
        if let Some(at) = clusters
            .iter()
            .filter_map(|c| {
                causeway_crds::federation::schedule::next_taint_deadline(
                    &c.spec.taints,
                    &pspec.placement.cluster_tolerations,
                    now.0,
                )
            })
            .min()
        {
            out.due(at);
        }
        let placed = failover::place(
            &pspec.placement,
            &clusters,
            workload,
            &verdict,
            evictions,
            written(meta.namespace.as_deref().unwrap_or_default(), &name),
            now.0,
        );
        if let Some(at) = placed.next {
            out.due(at);
        }
        // failover.cluster.statePreservation: what the failed clusters' copies reported
        // last, recorded when they fail over and kept while they stay failed over
        let failed_over: Vec<(String, k8s_openapi::jiff::Timestamp)> = match &placed.scheduled {
            // not Ready for longer than tolerated, and not chosen (whatever the reason
            // the scheduler gives: with clusterAffinities it is the next group's)
            Ok(d) if disrupted.is_none() => clusters
                .iter()
                .filter(|c| !d.chosen.iter().any(|t| t.cluster == c.name_any()))
                .filter_map(|c| {
                    let deadline = past_deadline(c, &pspec.placement.cluster_tolerations, now.0)?;
                    Some((c.name_any(), deadline))
                })
                .collect(),
            // a scheduler error or a disruption hold keeps the clusters, and so what
            // was recorded
            _ => existing_spec
                .map(|s| {
                    let recorded = s.cluster_failovers.iter();
                    recorded
                        .map(|f| (f.cluster.clone(), f.failed_over_at.0))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let cluster_failovers = state_preservation::cluster_failovers(
            pspec
                .failover
                .as_ref()
                .and_then(|f| f.cluster.as_ref())
                .and_then(|c| c.state_preservation.as_ref())
                .map(|p| p.rules.as_slice())
                .unwrap_or_default(),
            existing_spec
                .map(|s| s.cluster_failovers.as_slice())
                .unwrap_or_default(),
            &existing_spec
                .map(|s| {
                    s.clusters
                        .iter()
                        .map(|t| t.name.clone())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
            &failed_over,
            &|c| {
                crate::propagation::status::work_of(binding_works, c)
                    .and_then(state_preservation::copy_status)
            },
        );
        // J.61: failover found nowhere else to go (said below)
        let stays = placed
            .scheduled
            .as_ref()
            .map(|d| d.failover_stays.clone())
            .unwrap_or_default();
        let (mut clusters_out, mut status) =
            outcome(placed.scheduled, existing_spec, previous_conditions, now);
        // the reschedule is carried out once a division succeeds; until then it is
        // asked for again each round
        status.last_scheduled_time = if fresh && status.scheduled() {
            Some(now.clone())
        } else {
            last_scheduled.cloned()
        };
        // clusters kept from before (a scheduler error, unmet spread constraints) run
        // the template's count now when it is not divided: a Duplicated workload
        // scaled meanwhile scales in every cluster it keeps
        if !causeway_crds::federation::schedule::divides(&pspec.placement) {
            for t in clusters_out.iter_mut().filter(|t| t.replicas.is_some()) {
                t.replicas = replicas;
            }
        }
        // what the binding records: the evictions the placement honours (an
        // unsatisfiable spread keeps the clusters it had, an evicted one included)
        let evicted: Vec<_> = placed
            .evictions
            .into_iter()
            .filter(|e| !clusters_out.iter().any(|t| t.name == e.cluster))
            .collect();
        let opted_in = pspec.failover.as_ref().is_some_and(|f| f.cluster.is_some());
        // said only where failover would otherwise move the workload now
        let affected = existing_spec.is_some_and(|s| {
            s.clusters.iter().any(|t| {
                clusters.iter().any(|c| {
                    c.name_any() == t.name
                        && past_deadline(c, &pspec.placement.cluster_tolerations, now.0).is_some()
                })
            })
        });
        if let Some(why) = disrupted.as_ref().filter(|_| opted_in && affected) {
            for c in status.conditions.iter_mut() {
                c.message = format!("{}; {why}", c.message);
            }
        }
        if !placed.not_moved.is_empty() {
            let notes: Vec<String> = placed
                .not_moved
                .iter()
                .map(|(c, why)| format!("{c}: {why}"))
                .collect();
            for c in status.conditions.iter_mut() {
                c.message = format!(
                    "{}; application failover held back: {}",
                    c.message,
                    notes.join("; ")
                );
            }
        }
        if let Some(from) = placed.deferred {
            for c in status.conditions.iter_mut() {
                c.message = format!(
                    "{}; failing over from {from} waits for the eviction rate limit ({} per second)",
                    c.message,
                    evictions::RATE
                );
            }
        }
        if !stays.is_empty() {
            for c in status.conditions.iter_mut() {
                c.message = format!("{}; {}", c.message, failover::nowhere_else(&stays));
            }
        }
        let spec = BindingSpec {
            resource: reference(&meta, template.uid()),
            replicas,
            replica_requirements: requirements,
            clusters: clusters_out,
            placement: pspec.placement.clone(),
            conflict_resolution: pspec.conflict_resolution,
            propagate_deps: pspec.propagate_deps,
            suspension: pspec.suspension.clone(),
            rollout: pspec.rollout.clone(),
            redistribution: pspec.redistribution.clone(),
            failover: pspec.failover.clone(),
            preserve_resources_on_deletion: pspec.preserve_resources_on_deletion,
            dependent_overrides: pspec.dependent_overrides.clone(),
            evictions: evicted,
            cluster_failovers,
            required_by: Vec::new(),
            preserve_resources_on_clusters: Vec::new(),
            // the user's to set (kubectl patch): carried over as it is (the spec is
            // Causeway's whole, so one left out would be written back every round)
            reschedule_triggered_at: existing_spec.and_then(|s| s.reschedule_triggered_at.clone()),
        };
        // (the snapshot differs from the policy only in what it takes from it)
        if matches!(activation, lazy::Activation::Kept(_)) && *policy.spec != *pspec {
            let id = policy.id();
            for c in status.conditions.iter_mut() {
                c.message = format!(
                    "{}; the changes of {id} since wait for the template to change (activationPreference: Lazy)",
                    c.message
                );
            }
        }
        let metadata = ObjectMeta {
            name: Some(name),
            namespace: meta.namespace.clone(),
            labels: Some(held.policy.labels()),
            annotations: activated(hash),
            ..ObjectMeta::default()
        };
        out.push(metadata, spec, status);
    }
    attach::attach(
        &mut out,
        templates,
        &existing_rb,
        works,
        &mut keep_rb,
        now,
        interpreters,
        seen,
    );
    out.delete_bindings = existing_rb
        .into_keys()
        .filter(|k| !keep_rb.contains(k))
        .collect();
    out.delete_cluster_bindings = existing_crb
        .into_keys()
        .filter(|k| !keep_crb.contains(k))
        .collect();
    let key = |m: &ObjectMeta| (m.namespace.clone(), m.name.clone());
    out.bindings.sort_by_key(|b| key(&b.metadata));
    out.cluster_bindings.sort_by_key(|b| key(&b.metadata));
    out
}

/// Which template has each binding name (namespace, `<name>-<kind>`), as its
/// (apiVersion, kind), where templates of one kind name and name in several API groups
/// would share one: the one the existing binding references (also while its kind is
/// not listed yet, so that a restart whose list of it is slow hands the name to no
/// other group), else the first.
fn holders(
    templates: &[Arc<DynamicObject>],
    existing_rb: &BTreeMap<(String, String), &ResourceBinding>,
    existing_crb: &BTreeMap<String, &ClusterResourceBinding>,
    seen: &dyn Fn(&ResourceReference) -> bool,
) -> BTreeMap<(Option<String>, String), (String, String)> {
    let mut candidates: BTreeMap<(Option<String>, String), Vec<TemplateMeta>> = BTreeMap::new();
    for t in templates {
        if let Ok(meta) = TemplateMeta::from_object(t) {
            let key = (meta.namespace.clone(), binding_name(&meta.kind, &meta.name));
            candidates.entry(key).or_default().push(meta);
        }
    }
    candidates
        .into_iter()
        .filter_map(|(key, metas)| {
            let referenced = match &key.0 {
                Some(ns) => existing_rb
                    .get(&(ns.clone(), key.1.clone()))
                    .map(|b| &b.spec.0.resource),
                None => existing_crb.get(&key.1).map(|b| &b.spec.0.resource),
            };
            let is_referenced = |m: &&TemplateMeta| {
                referenced
                    .is_some_and(|r| r.is(&m.api_version, &m.kind, m.namespace.as_deref(), &m.name))
            };
            if let Some(r) = referenced.filter(|r| !seen(r))
                && !metas.iter().any(|m| is_referenced(&m))
            {
                return Some((key, (r.api_version.clone(), r.kind.clone())));
            }
            let holder = metas.iter().find(is_referenced).or_else(|| metas.first())?;
            let holder = (holder.api_version.clone(), holder.kind.clone());
            Some((key, holder))
        })
        .collect()
}

/// Keeps the binding of a template no policy claims any more as it is, with
/// `Scheduled=False` (PolicyRemoved): nothing is re-rendered, the members keep their
/// copies (deleting a policy never deletes workloads, G.47).
fn detach(
    out: &mut Desired,
    meta: &ObjectMeta,
    spec: &BindingSpec,
    status: Option<&BindingStatus>,
    now: &Time,
) {
    let message = "no PropagationPolicy or ClusterPropagationPolicy claims the template any more: the member copies are kept as they are and no longer updated; create a policy that selects the template to resume, or delete the template to remove them";
    let reason = conditions::REASON_POLICY_REMOVED;
    freeze(out, meta, spec, status, now, reason, message.into());
}

/// Keeps a binding as it is (spec, the hub's labels and annotations), with
/// `Scheduled=False` for `reason` (PolicyRemoved, PolicyInvalid): nothing is
/// re-rendered, the members keep their copies.
fn freeze(
    out: &mut Desired,
    meta: &ObjectMeta,
    spec: &BindingSpec,
    status: Option<&BindingStatus>,
    now: &Time,
    reason: &str,
    message: String,
) {
    let previous = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let mut status = status.cloned().unwrap_or_default();
    let condition = Condition {
        type_: conditions::SCHEDULED.into(),
        status: "False".into(),
        reason: reason.into(),
        message,
        observed_generation: None,
        last_transition_time: crate::condition::since(
            previous,
            conditions::SCHEDULED,
            "False",
            now,
        ),
    };
    status
        .conditions
        .retain(|c| c.type_ != conditions::SCHEDULED);
    status.conditions.insert(0, condition);
    // only the hub's own keys: the policy's labels and the Lazy hash (a frozen binding is
    // kept as it is, and the applier removes what the hub's applies held and this
    // leaves out; others' labels are not taken over by a forced apply)
    // (a binding a Lazy policy left pending keeps its mark too: frozen under an invalid
    // policy, it is still pending once the policy is fixed)
    let kept: BTreeMap<String, String> = [
        annotations::ACTIVATED_TEMPLATE,
        annotations::ACTIVATION_PENDING,
    ]
    .into_iter()
    .filter_map(|k| Some((k.to_string(), lazy::annotation(meta, k)?.to_string())))
    .collect();
    let metadata = ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta
            .labels
            .as_ref()
            .and_then(PolicyId::from_labels)
            .map(|p| p.labels()),
        annotations: (!kept.is_empty()).then_some(kept),
        ..ObjectMeta::default()
    };
    out.push(metadata, spec.clone(), status);
}

/// The binding's annotations: under a Lazy policy, the template's content hash. Under
/// another, none: the hub's applier removes a hash a Lazy policy recorded (a stale one
/// would make a policy that turns Lazy again apply its edits at once), since the
/// bindings' caches keep which annotations are the hub's.
fn activated(hash: Option<String>) -> Option<BTreeMap<String, String>> {
    hash.map(|h| [(annotations::ACTIVATED_TEMPLATE.to_string(), h)].into())
}

/// Whether the binding is one a Lazy policy made for a template that existed before
/// it, which propagates nothing until the template changes.
fn pending(m: &ObjectMeta) -> bool {
    m.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::ACTIVATION_PENDING))
}

/// The binding of a template a Lazy policy claimed that existed before it (hash
/// `hash`): no cluster, `Scheduled=False` (ActivationPending), saying what starts it.
#[allow(clippy::too_many_arguments)]
fn pending_binding(
    out: &mut Desired,
    meta: &TemplateMeta,
    uid: Option<&str>,
    name: String,
    policy: &PolicyRef<'_>,
    hash: &str,
    previous: &[Condition],
    reschedule_triggered_at: Option<Time>,
    now: &Time,
) {
    let id = policy.id();
    let condition = Condition {
        type_: conditions::SCHEDULED.into(),
        status: "False".into(),
        reason: conditions::REASON_ACTIVATION_PENDING.into(),
        message: format!(
            "{id} has activationPreference: Lazy and the template existed before it: nothing is propagated until the template changes (any edit of its labels, annotations or spec; e.g. kubectl annotate {} {}{} causeway.io/activate=now), or until the policy is no longer Lazy",
            meta.kind.to_lowercase(),
            meta.name,
            meta.namespace
                .as_ref()
                .map(|n| format!(" -n {n}"))
                .unwrap_or_default(),
        ),
        observed_generation: None,
        last_transition_time: crate::condition::since(
            previous,
            conditions::SCHEDULED,
            "False",
            now,
        ),
    };
    let spec = BindingSpec {
        resource: reference(meta, uid.map(String::from)),
        // the user's, kept as set (the spec is Causeway's whole)
        reschedule_triggered_at,
        ..BindingSpec::default()
    };
    let metadata = ObjectMeta {
        name: Some(name),
        namespace: meta.namespace.clone(),
        labels: Some(id.labels()),
        annotations: Some(
            [(
                annotations::ACTIVATION_PENDING.to_string(),
                hash.to_string(),
            )]
            .into(),
        ),
        ..ObjectMeta::default()
    };
    let status = BindingStatus {
        conditions: vec![condition],
        ..BindingStatus::default()
    };
    out.push(metadata, spec, status);
}

/// The binding's reference to the template of `meta`, with its `uid`.
fn reference(meta: &TemplateMeta, uid: Option<String>) -> ResourceReference {
    ResourceReference {
        api_version: meta.api_version.clone(),
        kind: meta.kind.clone(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid,
        resource_version: None,
    }
}

/// Forgets that the binding of `meta` is to be kept: its template is not claimed.
fn unkeep(
    meta: &TemplateMeta,
    name: &str,
    keep_rb: &mut BTreeSet<(String, String)>,
    keep_crb: &mut BTreeSet<String>,
) {
    match &meta.namespace {
        Some(ns) => keep_rb.remove(&(ns.clone(), name.to_string())),
        None => keep_crb.remove(name),
    };
}

/// `spec.clusters` and the status of a binding from the scheduling result.
fn outcome(
    scheduled: Result<Decision, PlacementError>,
    existing: Option<&BindingSpec>,
    previous: &[Condition],
    now: &Time,
) -> (Vec<TargetCluster>, BindingStatus) {
    let (clusters, reasons, ok, reason, message) = match scheduled {
        // clusters fit, but not as the spread constraints want: the binding keeps what
        // it has (as after a scheduler error), rather than leaving every cluster
        Ok(d) if d.unmet_spread() => (
            existing.map(|s| s.clusters.clone()).unwrap_or_default(),
            d.scheduling_reasons(),
            false,
            conditions::REASON_UNSCHEDULABLE,
            "the spread constraints cannot be met (see status.schedulingReasons); the clusters chosen before are kept until they can".to_string(),
        ),
        Ok(d) if d.chosen.is_empty() => (
            Vec::new(),
            d.scheduling_reasons(),
            false,
            conditions::REASON_NO_CLUSTER_FIT,
            format!(
                "no cluster fits the placement (0/{} clusters): see status.schedulingReasons for why each was left out, then change the placement or the clusters",
                d.rejected.len()
            ),
        ),
        Ok(d) => (
            d.target_clusters(),
            d.scheduling_reasons(),
            true,
            conditions::REASON_SUCCESS,
            format!("scheduled to {} cluster(s)", d.chosen.len()),
        ),
        Err(e) => (
            existing.map(|s| s.clusters.clone()).unwrap_or_default(),
            Vec::new(),
            false,
            conditions::REASON_SCHEDULER_ERROR,
            e.to_string(),
        ),
    };
    let status = if ok { "True" } else { "False" };
    let condition = Condition {
        type_: conditions::SCHEDULED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: None,
        last_transition_time: crate::condition::since(previous, conditions::SCHEDULED, status, now),
    };
    let status = BindingStatus {
        conditions: vec![condition],
        scheduling_reasons: reasons,
        ..BindingStatus::default()
    };
    (clusters, status)
}
