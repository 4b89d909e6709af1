//! Template revisions for ordered rollouts (R.6 ★): the hub keeps each generation of a
//! rolled-out template in a ControllerRevision next to its binding
//! (`<binding>-g<generation>`, labelled with the binding's name, owned by it), as
//! Kubernetes keeps a StatefulSet's. A cluster that enters a held wave with no copy (it
//! joined the placement, or failover or a new division gave it replicas, while the
//! wave waits) gets the generation its wave runs, rendered from that revision with its
//! own overrides, instead of nothing: the replicas divided to it run meanwhile.
//!
//! Revisions are kept for the template's current generation and every generation a
//! Work of the binding still runs; the others go. A ClusterResourceBinding's (a
//! cluster-scoped template's) are kept in `causeway-system` as
//! `<binding>-cg<generation>`, labelled `causeway.io/cluster-binding`, and owned by it
//! all the same.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::rollout;
use causeway_crds::federation::work::Work;
use causeway_crds::names;
use causeway_crds::well_known::{SYSTEM_NAMESPACE, labels};
use causeway_runtime::apply;
use causeway_runtime::reflect::Key;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::{Ctx, View};
use crate::propagation::render::{RenderInput, render};
use crate::propagation::status;

/// Whether `r` is one of binding `b`'s revisions (its namespace and label, and owned by
/// this binding, not an earlier one of the same name).
fn of_binding(r: &ControllerRevision, b: &View<'_>) -> bool {
    let owned = match b.uid {
        Some(uid) => r.owner_references().iter().any(|o| o.uid == uid),
        None => true,
    };
    let cluster_binding = r.labels().contains_key(labels::CLUSTER_BINDING);
    r.namespace().as_deref() == Some(revision_namespace(b))
        && cluster_binding == b.namespace.is_none()
        && names::named_by(&r.metadata, labels::BINDING_NAME).as_deref() == Some(b.name)
        && owned
}

/// Where binding `b`'s revisions are kept: next to it, or for a ClusterResourceBinding
/// in causeway-system.
fn revision_namespace<'b>(b: &View<'b>) -> &'b str {
    b.namespace.unwrap_or(SYSTEM_NAMESPACE)
}

/// A revision's labels and annotations: its binding's name, and whether that is a
/// ClusterResourceBinding.
fn revision_labels(b: &View<'_>) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut l, mut a) = (BTreeMap::new(), BTreeMap::new());
    names::label_naming(labels::BINDING_NAME, b.name, &mut l, &mut a);
    if b.namespace.is_none() {
        l.insert(labels::CLUSTER_BINDING.to_string(), "true".to_string());
    }
    (l, a)
}

/// Binding `b`'s revisions (the round indexes them by binding key).
fn revisions_of<'r>(
    revisions: &'r HashMap<Key, Vec<Arc<ControllerRevision>>>,
    b: &View<'_>,
) -> impl Iterator<Item = &'r Arc<ControllerRevision>> {
    revisions
        .get(&b.key)
        .into_iter()
        .flatten()
        .filter(move |r| of_binding(r, b))
}

/// The revision of generation `generation` of binding `b`'s template, if kept.
fn revision<'r>(
    revisions: &'r HashMap<Key, Vec<Arc<ControllerRevision>>>,
    b: &View<'_>,
    generation: i64,
) -> Option<&'r ControllerRevision> {
    revisions_of(revisions, b)
        .find(|r| r.revision == generation)
        .map(AsRef::as_ref)
}

impl Ctx<'_> {
    /// What each held cluster runs meanwhile: the generation its copy runs, or, with
    /// no copy yet, the generation its wave runs ([`rollout::held_generation`]),
    /// rendered from its revision for that cluster with the overrides as they are now
    /// (an OverridePolicy edit reaches held clusters at once), by cluster. `roll_out` then gives it the current
    /// render's settings and replicas, as every held cluster's ([`rollout::held_work`]).
    /// Nothing for a cluster whose overrides fail there, or whose generation's revision
    /// is not kept.
    pub(super) fn older_copies(
        &self,
        b: &View<'_>,
        waves: &[(String, Vec<String>)],
        held: &BTreeSet<String>,
        actual: &[Arc<Work>],
    ) -> BTreeMap<String, Work> {
        let work_of = |c: &str| status::work_of(actual, c);
        let mut by_generation: BTreeMap<i64, Vec<&String>> = BTreeMap::new();
        for c in held {
            // the generation its copy runs; with no copy, the one its wave runs
            let g = match work_of(c) {
                Some(w) => rollout::generation_of(w),
                None => rollout::held_generation(waves, held, c, &work_of),
            };
            if let Some(g) = g {
                by_generation.entry(g).or_default().push(c);
            }
        }
        let mut out = BTreeMap::new();
        for (generation, clusters) in by_generation {
            let Some(template) =
                revision(self.revisions, b, generation).and_then(|r| r.data.as_ref())
            else {
                continue;
            };
            let mut spec = b.spec.clone();
            spec.clusters.retain(|t| clusters.contains(&&t.name));
            let rendered = render(&RenderInput {
                binding_namespace: b.namespace,
                binding_name: b.name,
                spec: &spec,
                template: &template.0,
                overrides: self.ops,
                cluster_overrides: self.cops,
                clusters: self.clusters,
                interpreters: self.interpreters,
            });
            if rendered.blocked.is_some() {
                continue;
            }
            for (cluster, why) in &rendered.failed {
                tracing::debug!(binding = %b.name, %cluster, generation, %why, "no older copy: its overrides fail");
            }
            for w in rendered.works {
                let cluster = w.labels().get(labels::CLUSTER).cloned().unwrap_or_default();
                out.insert(cluster, w);
            }
        }
        out
    }

    /// For a binding with rollout waves and a template with a generation:
    /// keeps the revision of the template's current generation (once the binding has a
    /// uid to own it) and of every generation the binding's Works run. Deletes the
    /// others, all of them once the policy has no waves.
    pub(super) async fn keep_revisions(
        &mut self,
        b: &View<'_>,
        template: &serde_json::Value,
        works: &[Arc<Work>],
    ) {
        let ns = revision_namespace(b);
        let waves = b.spec.rollout.as_ref().is_some_and(|r| !r.waves.is_empty());
        let generation = template
            .pointer("/metadata/generation")
            .and_then(serde_json::Value::as_i64)
            .filter(|_| waves);
        let api: Api<ControllerRevision> = Api::namespaced(self.hub.clone(), ns);
        if let (Some(generation), Some(uid)) = (generation, b.uid)
            && revision(self.revisions, b, generation).is_none()
        {
            let (labels, notes) = revision_labels(b);
            let r = ControllerRevision {
                metadata: kube::api::ObjectMeta {
                    name: Some(names::revision_name(
                        b.name,
                        b.namespace.is_none(),
                        generation,
                    )),
                    namespace: Some(ns.to_string()),
                    labels: Some(labels),
                    annotations: (!notes.is_empty()).then_some(notes),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "causeway.io/v1alpha1".into(),
                        kind: if b.namespace.is_some() {
                            "ResourceBinding"
                        } else {
                            "ClusterResourceBinding"
                        }
                        .into(),
                        name: b.name.to_string(),
                        uid: uid.to_string(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    }]),
                    ..Default::default()
                },
                data: Some(RawExtension(rollout::revision_data(template))),
                revision: generation,
            };
            match api.create(&PostParams::default(), &r).await {
                Ok(_) => {}
                // made in an earlier round the cache has not shown yet (revisions never change)
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => self.failures.failed(
                    b.key.clone(),
                    &format!("keeping revision {generation} of the template: {e}"),
                ),
            }
        }
        let used: BTreeSet<i64> = match generation {
            Some(g) => works
                .iter()
                .filter_map(|w| rollout::generation_of(w))
                .chain([g])
                .collect(),
            None => BTreeSet::new(),
        };
        let stale: Vec<String> = revisions_of(self.revisions, b)
            .filter(|r| !used.contains(&r.revision))
            .map(|r| r.name_any())
            .collect();
        for name in stale {
            if let Err(e) = apply::remove(&api, &name).await {
                self.failures.failed(b.key.clone(), &e);
            }
        }
    }
}
