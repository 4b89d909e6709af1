//! The binding controller's pure step: a binding, its template and the override
//! policies → one `Work` per scheduled cluster (federation.md §8 D, E).
//!
//! For each cluster of `spec.clusters` whose Cluster exists:
//! 1. the template without what the server set ([`manifest_of`]), with `spec.replicas`
//!    the cluster's share when the template has replicas and the binding divides them;
//! 2. the overrides that apply to it there (`override_apply`), with their provenance
//!    (annotation [`annotations::PROVENANCE`] on the Work); a failing override fails
//!    that cluster only (`failed`: it gets no Work, so the one it has stays as it is and
//!    nothing un-overridden is pushed);
//! 3. the labels `failover.application.statePreservation` (or `failover.cluster`'s)
//!    preserved from a failed copy, for a cluster that did not run the template when it
//!    failed over; then annotation
//!    [`annotations::TEMPLATE_GENERATION`], added last so no override can hide which
//!    template generation a member runs (H.53);
//! 4. the per-cluster settings: `suspendDispatching` (E.39), `preserveResourcesOnDeletion`
//!    (G.46, per cluster through [`annotations::PRESERVE_ON_CLUSTERS`]; a dependency's
//!    also where a workload that needs it keeps its copy, the binding's
//!    `preserveResourcesOnClusters`, F.43) and
//!    `conflictResolution` (F.41, the template's [`annotations::CONFLICT_RESOLUTION`]
//!    over the binding's). Every setting is written, `false` included, so a Work that
//!    was suspended is resumed by the next apply.
//!
//! Nothing is rendered while an OverridePolicy named in `dependentOverrides` is missing
//! (`blocked`, D.32): pushing the template without the overrides it waits for is what
//! the user asked to avoid.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use causeway_crds::federation::ConflictResolution;
use causeway_crds::federation::binding::BindingSpec;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::interpreter::Interpreters;
use causeway_crds::federation::override_apply::{Provenance, applicable_policies, apply};
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use causeway_crds::federation::prune::prune_allocated;
use causeway_crds::federation::work::{Manifest, Work, WorkSpec, WorkloadTemplate};
use causeway_crds::names;
use causeway_crds::well_known::{annotations, finalizers, labels};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::{Map, Value};

/// Metadata fields the API server or controllers set: never part of a manifest.
pub const SERVER_METADATA: [&str; 10] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// The annotation `kubectl apply` keeps the last applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What [`render`] reads.
#[derive(Clone, Copy, Debug)]
pub struct RenderInput<'a> {
    /// Namespace of the ResourceBinding; `None` for a ClusterResourceBinding.
    pub binding_namespace: Option<&'a str>,
    /// Name of the binding.
    pub binding_name: &'a str,
    /// The binding's spec (the scheduling result and the policy's settings).
    pub spec: &'a BindingSpec,
    /// The resource template, as the hub has it.
    pub template: &'a Value,
    /// Every OverridePolicy on the hub.
    pub overrides: &'a [Arc<OverridePolicy>],
    /// Every ClusterOverridePolicy on the hub.
    pub cluster_overrides: &'a [Arc<ClusterOverridePolicy>],
    /// Every Cluster on the hub.
    pub clusters: &'a [Arc<Cluster>],
    /// The hub's ResourceInterpreters, resolved: where the template's kind keeps its
    /// replica count, and the health rule each Work carries.
    pub interpreters: &'a Interpreters,
}

/// Why a binding renders nothing (its Works stay as they are), for a Warning Event.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    /// The Event's reason: [`DEPENDENT_OVERRIDES_MISSING`] or [`INTERPRETER_INVALID`].
    pub reason: &'static str,
    /// What is missing or wrong, and what to do.
    pub message: String,
}

/// `dependentOverrides` names an override policy that does not exist (D.32).
pub const DEPENDENT_OVERRIDES_MISSING: &str = "DependentOverridesMissing";
/// The template's kind has ResourceInterpreters, none of them valid: rendering with
/// Causeway's defaults instead would undo the division (every cluster would get the
/// whole replica count), so nothing is rendered until one is fixed or all are deleted.
pub const INTERPRETER_INVALID: &str = "InterpreterInvalid";

/// What [`render`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    /// One Work per scheduled cluster that exists and whose overrides applied.
    pub works: Vec<Work>,
    /// Clusters whose overrides failed (reason ApplyOverridesFailed), with the message.
    pub failed: Vec<(String, String)>,
    /// Why nothing was rendered, if so: the Works stay as they are.
    pub blocked: Option<Blocked>,
    /// Problems with the template's annotations, for a Warning Event.
    pub warnings: Vec<String>,
    /// Where two override policies write the same path, per cluster (§9.5 ★), for a
    /// Normal Event; `causeway explain` shows them from the Work's annotation.
    pub overlaps: Vec<(String, String)>,
}

/// The Works of a binding (see the module docs).
pub fn render(input: &RenderInput) -> Rendered {
    let template = input.template;
    let namespace = text(template, "/metadata/namespace");
    let kind = (
        text(template, "/apiVersion").unwrap_or_default(),
        text(template, "/kind").unwrap_or_default(),
    );
    let blocked = match input.interpreters.broken(kind.0, kind.1) {
        Some(why) => Some(Blocked {
            reason: INTERPRETER_INVALID,
            message: format!(
                "{why}; nothing is rendered for {} until it is fixed (or every interpreter of the kind is deleted): the members keep what they run",
                kind.1
            ),
        }),
        None => missing_dependent_overrides(input, namespace).map(|message| Blocked {
            reason: DEPENDENT_OVERRIDES_MISSING,
            message,
        }),
    };
    if blocked.is_some() {
        return Rendered {
            blocked,
            ..Rendered::default()
        };
    }
    let mut out = Rendered::default();
    let conflict = conflict_resolution(input, &mut out.warnings);
    let preserved = preserved_clusters(template);
    let base = manifest_of(template);
    // where the kind keeps its replica count: `spec.replicas`, or its interpreter's path
    let replicas_at = input.interpreters.replicas_pointer(kind.0, kind.1);
    let generation = template
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    // the policies that can apply to this template, cloned once for override_apply
    let cluster_policies: Vec<ClusterOverridePolicy> = input
        .cluster_overrides
        .iter()
        .map(|p| (**p).clone())
        .collect();
    let policies: Vec<OverridePolicy> = input
        .overrides
        .iter()
        .filter(|p| namespace.is_some() && p.namespace().as_deref() == namespace)
        .map(|p| (**p).clone())
        .collect();
    for target in &input.spec.clusters {
        let Some(cluster) = input.clusters.iter().find(|c| c.name_any() == target.name) else {
            continue;
        };
        let mut manifest = base.clone();
        if let (Some(n), Some(replicas)) = (target.replicas, manifest.pointer_mut(replicas_at)) {
            *replicas = Value::from(n);
        }
        let rules = applicable_policies(&manifest, cluster, &cluster_policies, &policies);
        let (mut manifest, provenance) = match apply(&manifest, &rules) {
            Ok(done) => done,
            Err(e) => {
                out.failed.push((target.name.clone(), e.to_string()));
                continue;
            }
        };
        // statePreservation: a cluster that did not run the template when application
        // failover moved it away gets what was read from the failed copy, as labels
        for (k, v) in preserved_labels(input.spec, &target.name) {
            set_meta(&mut manifest, "labels", &k, &v);
        }
        set_meta(
            &mut manifest,
            "annotations",
            annotations::TEMPLATE_GENERATION,
            &generation.to_string(),
        );
        let settings = Settings {
            suspend: suspended(input.spec, &target.name),
            preserve: input.spec.preserve_resources_on_deletion == Some(true)
                || preserved.contains(target.name.as_str())
                || input
                    .spec
                    .preserve_resources_on_clusters
                    .contains(&target.name),
            conflict,
        };
        out.overlaps.extend(
            provenance
                .overlaps()
                .iter()
                .map(|o| (target.name.clone(), o.to_string())),
        );
        out.works
            .push(work(input, &target.name, manifest, &provenance, settings));
    }
    out
}

/// The labels statePreservation gives `cluster`'s copy: those of every recorded move
/// (cluster failovers, then application failover's evictions) that `cluster` was not
/// part of (later records win).
fn preserved_labels(spec: &BindingSpec, cluster: &str) -> BTreeMap<String, String> {
    let failovers = spec
        .cluster_failovers
        .iter()
        .map(|f| (&f.clusters_before_failover, &f.preserved_label_state));
    let evictions = spec
        .evictions
        .iter()
        .map(|e| (&e.clusters_before_failover, &e.preserved_label_state));
    failovers
        .chain(evictions)
        .filter(|(before, _)| !before.iter().any(|c| c == cluster))
        .flat_map(|(_, labels)| labels.clone())
        .collect()
}

/// The per-cluster settings of a Work.
#[derive(Clone, Copy)]
struct Settings {
    suspend: bool,
    preserve: bool,
    conflict: ConflictResolution,
}

/// The Work for `cluster`.
fn work(
    input: &RenderInput,
    cluster: &str,
    manifest: Value,
    provenance: &Provenance,
    s: Settings,
) -> Work {
    let mut labels = BTreeMap::from([(labels::CLUSTER.to_string(), cluster.to_string())]);
    let mut notes = BTreeMap::new();
    names::label_naming(
        labels::BINDING_NAME,
        input.binding_name,
        &mut labels,
        &mut notes,
    );
    if let Some(ns) = input.binding_namespace {
        labels.insert(labels::BINDING_NAMESPACE.into(), ns.into());
    }
    let interpretations = input.interpreters.for_manifests([&manifest]);
    let mut work = Work::new(
        &names::work_name(input.binding_namespace, input.binding_name),
        WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![Manifest(manifest)],
            },
            suspend_dispatching: Some(s.suspend),
            preserve_resources_on_deletion: Some(s.preserve),
            conflict_resolution: Some(s.conflict),
            interpretations,
        },
    );
    // the overlaps' annotation is written even when empty, so that an overlap that is
    // gone leaves no stale note (a Work with more annotations counts as up to date)
    let overlaps: Vec<String> = provenance
        .overlaps()
        .iter()
        .map(|o| o.to_string())
        .collect();
    notes.insert(
        annotations::PROVENANCE.to_string(),
        provenance_json(provenance),
    );
    notes.insert(
        annotations::OVERRIDE_OVERLAPS.to_string(),
        Value::from(overlaps).to_string(),
    );
    work.metadata = ObjectMeta {
        name: work.metadata.name,
        namespace: Some(names::execution_namespace(cluster)),
        labels: Some(labels),
        annotations: Some(notes),
        finalizers: Some(vec![finalizers::WORK.to_string()]),
        ..ObjectMeta::default()
    };
    work
}

/// The Work's provenance annotation: manifest ordinal → JSON pointer → the override
/// that set it (`OverridePolicy demo/registry rule 0 (image)`).
fn provenance_json(provenance: &Provenance) -> String {
    let paths: Map<String, Value> = provenance
        .iter()
        .map(|(pointer, origin)| (pointer.to_string(), Value::from(origin.to_string())))
        .collect();
    Value::Object(Map::from_iter([("0".to_string(), Value::Object(paths))])).to_string()
}

/// The template as a manifest: without `status`, the metadata the server sets
/// ([`SERVER_METADATA`]), kubectl's [`LAST_APPLIED`] annotation, and what the hub
/// allocated for its kind ([`prune_allocated`]: a Service's cluster IPs, say).
pub fn manifest_of(template: &Value) -> Value {
    let mut m = template.clone();
    if let Some(obj) = m.as_object_mut() {
        obj.remove("status");
    }
    let kind = m
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    prune_allocated(&kind, &mut m);
    if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_METADATA {
            meta.remove(f);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(LAST_APPLIED);
        }
    }
    m
}

/// Sets `key` in the `metadata.<map>` (labels or annotations) of `manifest`, creating
/// the map if needed.
pub(crate) fn set_meta(manifest: &mut Value, map: &str, key: &str, value: &str) {
    let Some(obj) = manifest.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let a = &mut meta[map];
    if !a.is_object() {
        *a = Value::Object(Map::new());
    }
    a[key] = Value::from(value);
}

/// Why nothing may be rendered yet: the `dependentOverrides` that do not exist in
/// the template's namespace.
fn missing_dependent_overrides(input: &RenderInput, namespace: Option<&str>) -> Option<String> {
    let wanted = &input.spec.dependent_overrides;
    let missing: Vec<&str> = wanted
        .iter()
        .map(String::as_str)
        .filter(|name| {
            !input.overrides.iter().any(|p| {
                namespace.is_some()
                    && p.namespace().as_deref() == namespace
                    && p.name_any() == *name
            })
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "not rendered: the policy's dependentOverrides name OverridePolicies that do not exist in namespace {}: {}; create them (nothing is pushed to the members without them), or remove them from dependentOverrides",
        namespace.unwrap_or("(none: the template is cluster-scoped)"),
        missing.join(", ")
    ))
}

/// The template's conflict-resolution annotation when valid, else the binding's, else
/// Abort; an invalid annotation is reported in `warnings`.
fn conflict_resolution(input: &RenderInput, warnings: &mut Vec<String>) -> ConflictResolution {
    let annotated = annotation(input.template, annotations::CONFLICT_RESOLUTION);
    let from_binding = input.spec.conflict_resolution.unwrap_or_default();
    match annotated.map(|v| (v, ConflictResolution::from_annotation(v))) {
        None => from_binding,
        Some((_, Some(c))) => c,
        Some((_, None)) => {
            warnings.push(format!(
                "annotation {}={:?} is ignored: the allowed values are overwrite and abort (any case); using {:?} from the policy",
                annotations::CONFLICT_RESOLUTION,
                annotated.unwrap_or_default(),
                from_binding
            ));
            from_binding
        }
    }
}

/// The clusters named in the template's [`annotations::PRESERVE_ON_CLUSTERS`].
pub(crate) fn preserved_clusters(template: &Value) -> BTreeSet<&str> {
    annotation(template, annotations::PRESERVE_ON_CLUSTERS)
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// Whether dispatching to `cluster` is suspended.
pub(crate) fn suspended(spec: &BindingSpec, cluster: &str) -> bool {
    spec.suspension.as_ref().is_some_and(|s| {
        s.dispatching == Some(true)
            || s.dispatching_on_clusters
                .as_ref()
                .is_some_and(|c| c.cluster_names.iter().any(|n| n == cluster))
    })
}

/// The string at `pointer`.
fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// The value of annotation `key` of `v`.
fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/annotations")?.get(key)?.as_str()
}

#[cfg(test)]
mod tests;
