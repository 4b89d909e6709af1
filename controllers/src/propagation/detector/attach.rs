//! Dependencies (federation.md §8 I.56–57, §1.9): the ConfigMaps, Secrets,
//! ServiceAccount and PVCs a propagated workload's pod template uses follow it, when
//! its policy says `propagateDeps: true`. Each dependency gets an "attached" binding
//! (no policy labels) whose `spec.requiredBy` lists the bindings that need it and whose
//! clusters are the union of theirs, so it moves with them. When several requirers
//! disagree, the most permissive setting wins (Overwrite over Abort, preserve over
//! delete), as in Karmada.
//!
//! A dependency a policy claims itself keeps that policy's binding, clusters and
//! settings (★ configured independently, F.43), and gets its requirers' clusters added
//! (I.56: it is wherever they are; Karmada's `mergeTargetClusters`). So does one whose
//! policy was deleted (G.47: its copies stay where they are): its frozen binding keeps
//! its clusters and, while workloads need it, is rendered again as their dependency
//! (`Scheduled=True`), its policy's labels kept so the next round knows its clusters
//! are its own. One frozen because its policy is invalid is left as it is.
//!
//! Wherever a requirer keeps its member copy when deleted (its
//! `preserveResourcesOnDeletion`, or its template's
//! `causeway.io/preserve-resources-on-clusters`, G.46 ★), the dependency's copy is kept
//! too (`spec.preserveResourcesOnClusters`, which render ORs in): a kept Deployment
//! whose PVC or ConfigMap was deleted under it would not restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::ConflictResolution;
use causeway_crds::federation::binding::{
    BindingSnapshot, BindingSpec, BindingStatus, ResourceBinding, ResourceBindingSpec,
    ResourceReference, TargetCluster, api_group, binding_name, conditions,
};
use causeway_crds::federation::deps::{Dependency, dependencies};
use causeway_crds::federation::interpreter::{self, Interpreters};
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use kube::core::DynamicObject;

use super::Desired;

type Key = (String, String);

/// Adds the attached bindings of the dependencies of `out.bindings` that ask for them,
/// keeping their keys in `keep`. A requirer whose kind is not `seen` (listed) yet is
/// not in `out.bindings`: what its existing binding required stays required.
#[allow(clippy::too_many_arguments)]
pub(super) fn attach(
    out: &mut Desired,
    templates: &[Arc<DynamicObject>],
    existing: &BTreeMap<Key, &ResourceBinding>,
    works: &HashMap<(String, String), Vec<Arc<Work>>>,
    keep: &mut BTreeSet<Key>,
    now: &Time,
    interpreters: &Interpreters,
    seen: &dyn Fn(&ResourceReference) -> bool,
) {
    // by API group, kind, namespace and name (a kind name may be in several groups)
    let index: HashMap<(&str, &str, String, String), &Arc<DynamicObject>> = templates
        .iter()
        .filter_map(|t| {
            let types = t.types.as_ref()?;
            let group = api_group(&types.api_version);
            Some((
                (group, types.kind.as_str(), t.namespace()?, t.name_any()),
                t,
            ))
        })
        .collect();
    // a policy's binding (one a Lazy policy left pending is not: it propagates
    // nothing, and if it is required, it becomes a dependency's binding and follows
    // its requirers)
    let policys = |b: &&ResourceBinding| !super::pending(&b.metadata);
    // frozen because the policy holding it is invalid: still that policy's, kept as it is
    let alone: BTreeSet<Key> = out
        .bindings
        .iter()
        .filter(policys)
        .filter(|b| policy_invalid(b))
        .map(crate::watch::key)
        .collect();
    // placed by a policy of its own, or frozen since its policy went: keeps its clusters
    // and settings, and gets its requirers' clusters added
    let owned: BTreeSet<Key> = out
        .bindings
        .iter()
        .filter(policys)
        .filter(|b| !policy_invalid(b))
        .map(crate::watch::key)
        .collect();
    let mut attached: BTreeMap<Key, ResourceBinding> = BTreeMap::new();
    for b in &out.bindings {
        let spec = &b.spec;
        // a frozen requirer (its policy deleted) keeps its clusters, and so its
        // dependencies keep theirs
        if spec.propagate_deps != Some(true) {
            continue;
        }
        let Some(ns) = spec.resource.namespace.clone() else {
            continue;
        };
        let Some(owner) = index.get(&(
            api_group(&spec.resource.api_version),
            spec.resource.kind.as_str(),
            ns.clone(),
            spec.resource.name.clone(),
        )) else {
            continue;
        };
        let Ok(value) = serde_json::to_value(owner.as_ref()) else {
            continue;
        };
        let work = works.get(&crate::watch::key(b));
        // where the requirer keeps its copies when deleted (G.46 ★)
        let annotated = crate::propagation::render::preserved_clusters(&value);
        let everywhere = spec.preserve_resources_on_deletion == Some(true);
        for (dep, clusters) in needed(&value, spec, work, interpreters) {
            // a dependency not on the hub (yet) is picked up once it is created (I.57)
            let at = (api_group(&dep.api_version), dep.kind.as_str());
            let Some(t) = index.get(&(at.0, at.1, ns.clone(), dep.name.clone())) else {
                continue;
            };
            if t.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = (ns.clone(), binding_name(&dep.kind, &dep.name));
            if alone.contains(&key) {
                continue;
            }
            let entry = attached
                .entry(key.clone())
                .or_insert_with(|| fresh(&key, &dep.api_version, &dep.kind, t));
            let e = &mut entry.spec.0;
            e.preserve_resources_on_clusters.extend(
                clusters
                    .iter()
                    .filter(|c| everywhere || annotated.contains(c.name.as_str()))
                    .map(|c| c.name.clone()),
            );
            e.required_by.push(BindingSnapshot {
                namespace: Some(ns.clone()),
                name: b.name_any(),
                clusters,
            });
            if spec.conflict_resolution == Some(ConflictResolution::Overwrite) {
                e.conflict_resolution = Some(ConflictResolution::Overwrite);
            }
            if spec.preserve_resources_on_deletion == Some(true) {
                e.preserve_resources_on_deletion = Some(true);
            }
        }
    }
    // a requirer whose kind is not listed yet (a restart, discovery failing, its list
    // refused) is in no round's bindings: its dependencies stay where its existing
    // binding asked for them until its kind is seen (else the ConfigMaps, Secrets and
    // PVCs it mounts would be withdrawn from every member meanwhile)
    for (key, dep) in existing {
        let d = &dep.spec.0;
        if alone.contains(key) {
            continue;
        }
        for r in &d.required_by {
            let requirer = (r.namespace.clone().unwrap_or_default(), r.name.clone());
            let unseen = existing
                .get(&requirer)
                .is_some_and(|b| !seen(&b.spec.0.resource));
            let template = index.get(&(
                api_group(&d.resource.api_version),
                d.resource.kind.as_str(),
                key.0.clone(),
                d.resource.name.clone(),
            ));
            // (a dependency being deleted goes, as in the loop above)
            let (true, Some(t)) = (unseen, template) else {
                continue;
            };
            if t.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let e = &mut attached
                .entry(key.clone())
                .or_insert_with(|| fresh(key, &d.resource.api_version, &d.resource.kind, t))
                .spec
                .0;
            if !e
                .required_by
                .iter()
                .any(|x| x.namespace == r.namespace && x.name == r.name)
            {
                e.required_by.push(r.clone());
            }
            // (where it was kept for any requirer, of the clusters this one is in)
            e.preserve_resources_on_clusters.extend(
                d.preserve_resources_on_clusters
                    .iter()
                    .filter(|c| r.clusters.iter().any(|t| t.name == **c))
                    .cloned(),
            );
            if d.conflict_resolution == Some(ConflictResolution::Overwrite) {
                e.conflict_resolution = Some(ConflictResolution::Overwrite);
            }
            if d.preserve_resources_on_deletion == Some(true) {
                e.preserve_resources_on_deletion = Some(true);
            }
        }
    }
    // a binding a Lazy policy left pending that becomes a dependency's keeps its mark,
    // so the policy goes on leaving it alone (it stays a dependency) until the template
    // changes
    for b in &out.bindings {
        if let Some(a) = attached.get_mut(&crate::watch::key(b))
            && super::pending(&b.metadata)
        {
            a.metadata.annotations = b.metadata.annotations.clone();
        }
    }
    out.bindings.retain(|b| {
        let key = crate::watch::key(b);
        owned.contains(&key) || !attached.contains_key(&key)
    });
    // a policy's binding no longer required (a frozen one kept what it had) lists no
    // requirer
    for b in out.bindings.iter_mut() {
        let key = crate::watch::key(b);
        if owned.contains(&key) && !attached.contains_key(&key) {
            b.spec.0.required_by.clear();
            b.spec.0.preserve_resources_on_clusters.clear();
        }
    }
    for (key, mut b) in attached {
        let spec = &mut b.spec.0;
        spec.required_by.sort_by(|a, b| a.name.cmp(&b.name));
        spec.preserve_resources_on_clusters.sort();
        spec.preserve_resources_on_clusters.dedup();
        if owned.contains(&key) {
            if let Some(own) = out
                .bindings
                .iter_mut()
                .find(|o| crate::watch::key(&**o) == key)
            {
                let previous = existing.get(&key).and_then(|e| e.status.as_ref());
                merge(own, b.spec.0, previous, now);
            }
            continue;
        }
        let names: BTreeSet<String> = spec
            .required_by
            .iter()
            .flat_map(|r| r.clusters.iter().map(|c| c.name.clone()))
            .collect();
        spec.clusters = names
            .into_iter()
            .map(|name| TargetCluster {
                name,
                replicas: None,
            })
            .collect();
        // the user's reschedule request stays as set (the spec is Causeway's whole)
        spec.reschedule_triggered_at = existing
            .get(&key)
            .and_then(|e| e.spec.0.reschedule_triggered_at.clone());
        let requirers: Vec<&str> = spec.required_by.iter().map(|r| r.name.as_str()).collect();
        let previous = existing
            .get(&key)
            .and_then(|e| e.status.as_ref())
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        b.status = Some(BindingStatus {
            conditions: vec![Condition {
                type_: conditions::SCHEDULED.into(),
                status: "True".into(),
                reason: conditions::REASON_SUCCESS.into(),
                message: format!(
                    "a dependency of {}: goes where they go",
                    requirers.join(", ")
                ),
                observed_generation: None,
                last_transition_time: crate::condition::since(
                    previous,
                    conditions::SCHEDULED,
                    "True",
                    now,
                ),
            }],
            ..BindingStatus::default()
        });
        keep.insert(key);
        out.bindings.push(b);
    }
}

/// What a requirer needs where: the template's dependencies in every cluster it is
/// scheduled to, and, in each scheduled cluster, those of the manifest its Work holds
/// there (what the member runs: an ordered rollout's held older generation, or an
/// override naming another ConfigMap), so a ConfigMap an older generation mounts stays
/// while that generation runs. Those of a copy kept outside the scheduled clusters are
/// needed too (with no cluster of their own).
fn needed(
    template: &serde_json::Value,
    spec: &BindingSpec,
    works: Option<&Vec<Arc<Work>>>,
    interpreters: &Interpreters,
) -> Vec<(Dependency, Vec<TargetCluster>)> {
    let pod_specs = interpreters.pod_specs(&spec.resource.api_version, &spec.resource.kind);
    let mut out: BTreeMap<Dependency, Vec<TargetCluster>> = dependencies(template, pod_specs)
        .into_iter()
        .map(|d| (d, spec.clusters.clone()))
        .collect();
    for work in works.into_iter().flatten() {
        if work.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(cluster) = work.labels().get(labels::CLUSTER) else {
            continue;
        };
        let manifest = work.spec.workload.manifests.iter().find(|m| {
            m.kind() == Some(spec.resource.kind.as_str())
                && m.name() == Some(spec.resource.name.as_str())
        });
        // a copy kept outside the scheduled clusters (failover, make-before-break)
        // keeps the dependency alive, and the hub keeps it there while that copy
        // uses it (`hub::failover::kept_for_requirers`)
        let target = spec.clusters.iter().find(|t| t.name == *cluster);
        let deps = manifest.map(|m| dependencies(&m.0, interpreter::pod_specs(work, &m.0)));
        for dep in deps.unwrap_or_default() {
            let clusters = out.entry(dep).or_default();
            if let Some(t) = target
                && !clusters.iter().any(|c| c.name == t.name)
            {
                clusters.push(t.clone());
            }
        }
    }
    out.into_iter()
        .map(|(d, mut clusters)| {
            clusters.sort_by(|a, b| a.name.cmp(&b.name));
            (d, clusters)
        })
        .collect()
}

/// Makes `own`, the binding of a dependency a policy places (or placed: frozen since
/// it went), go where its requirers go too: `needs`' requirers and their clusters are
/// added to its own clusters, which it keeps with its settings (F.43 ★), and it keeps
/// its copies where they keep theirs. Frozen because its policy went, it is rendered
/// again (`Scheduled=True`), as their dependency; its policy's labels stay, saying
/// its clusters are its own (G.47: its copies stay where they are).
fn merge(
    own: &mut ResourceBinding,
    needs: BindingSpec,
    previous: Option<&BindingStatus>,
    now: &Time,
) {
    let frozen = policy_removed(own);
    let spec = &mut own.spec.0;
    let mut added = false;
    for r in &needs.required_by {
        for c in &r.clusters {
            if !spec.clusters.iter().any(|t| t.name == c.name) {
                spec.clusters.push(TargetCluster {
                    name: c.name.clone(),
                    replicas: None,
                });
                added = true;
            }
        }
    }
    if added {
        spec.clusters.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let requirers: Vec<&str> = needs.required_by.iter().map(|r| r.name.as_str()).collect();
    let requirers = requirers.join(", ");
    spec.required_by = needs.required_by;
    spec.preserve_resources_on_clusters = needs.preserve_resources_on_clusters;
    let status = own.status.get_or_insert_with(BindingStatus::default);
    let Some(scheduled) = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == conditions::SCHEDULED)
    else {
        return;
    };
    if frozen {
        *scheduled = Condition {
            type_: conditions::SCHEDULED.into(),
            status: "True".into(),
            reason: conditions::REASON_SUCCESS.into(),
            message: format!(
                "a dependency of {requirers}: goes where they go; no policy claims it any more, so it also stays on the clusters it had (its copies there are kept)"
            ),
            observed_generation: None,
            last_transition_time: crate::condition::since(
                previous
                    .map(|p| p.conditions.as_slice())
                    .unwrap_or_default(),
                conditions::SCHEDULED,
                "True",
                now,
            ),
        };
    } else {
        scheduled.message = format!(
            "{}; a dependency of {requirers} too: also goes where they go",
            scheduled.message
        );
    }
}

/// Frozen because no policy claims its template any more (not because the policy
/// holding it is invalid: that one still holds it).
fn policy_removed(b: &ResourceBinding) -> bool {
    b.status
        .as_ref()
        .is_some_and(|s| s.policy_removed() && !s.policy_invalid())
}

/// Frozen because the policy holding it is invalid.
fn policy_invalid(b: &ResourceBinding) -> bool {
    b.status.as_ref().is_some_and(BindingStatus::policy_invalid)
}

fn fresh(key: &Key, api_version: &str, kind: &str, t: &DynamicObject) -> ResourceBinding {
    ResourceBinding {
        metadata: ObjectMeta {
            name: Some(key.1.clone()),
            namespace: Some(key.0.clone()),
            ..ObjectMeta::default()
        },
        spec: ResourceBindingSpec(BindingSpec {
            resource: ResourceReference {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                namespace: Some(key.0.clone()),
                name: t.name_any(),
                uid: t.uid(),
                resource_version: None,
            },
            ..BindingSpec::default()
        }),
        status: None,
    }
}
