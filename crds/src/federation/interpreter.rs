//! `ResourceInterpreter` (cluster-scoped): how Causeway reads a kind it has no rule
//! for, an operator's custom resource say: where its replica count is (so a Divided
//! placement divides it, and replica moves and rollouts follow it), and when it is
//! healthy (so a rollout wave waits for it and application failover sees it fail).
//! Karmada's ResourceInterpreterCustomization does this with Lua scripts; here a
//! JSON pointer and CEL expressions, the language Kubernetes itself uses for
//! validation rules and admission conditions.
//!
//! ```yaml
//! apiVersion: causeway.io/v1alpha1
//! kind: ResourceInterpreter
//! metadata: {name: gadgets}
//! spec:
//!   target: {apiVersion: example.com/v1, kind: Gadget}
//!   replicas: {path: /spec/size}
//!   health:
//!     healthy: "object.status.phase == 'Running' && object.status.readySize == object.spec.size"
//!     unhealthy: "object.status.phase == 'Failed'"
//! ```
//!
//! The hub resolves the interpreters ([`resolve`]): one per kind (group and kind; the
//! oldest valid one wins, a later one for the same kind is `Valid=False`). Each Work
//! carries the [`Interpretation`] of its manifests' kinds, so the member's applier (the
//! hub for a Push member, the agent of a Pull member, which cannot read the hub's
//! interpreters) judges health by the same rule the hub rendered with, and every reader
//! of a Work's replica counts finds them where the rule says ([`replicas_pointer`]).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::work::{ResourceHealth, Work};
use super::{PolicyStatus, group_of};
use crate::cel;

/// Where a kind keeps its replica count when it has no interpreter.
pub const DEFAULT_REPLICAS: &str = "/spec/replicas";

/// ResourceInterpreter spec.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ResourceInterpreter",
    plural = "resourceinterpreters",
    status = "PolicyStatus",
    shortname = "ri",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ResourceInterpreter tells Causeway where a kind keeps its replica count and when an object of it is healthy (CEL), for kinds it has no rule for, such as an operator's custom resources.",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.target.kind"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInterpreterSpec {
    /// The kind interpreted. Every version of it is: the rules read the object as the
    /// member serves it at the template's version.
    pub target: Target,

    /// Where the kind keeps its replica count. Unset: `spec.replicas`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicasRule>,

    /// When an object of the kind is healthy in a member. Unset: Causeway's own rule
    /// (kstatus's `Ready` and `Stalled` conditions for custom resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthRule>,

    /// Where the kind's pod specs are, so `propagateDeps` takes the ConfigMaps,
    /// Secrets, ServiceAccount and PVCs they name along. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<DependenciesRule>,

    /// What of the members' statuses the hub template's `.status` gets. Unset: the
    /// hub leaves the template's status alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusRule>,
}

/// Where a kind's pod specs are.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependenciesRule {
    /// JSON pointers under `/spec` to each PodSpec (the `spec` of a pod template),
    /// e.g. `/spec/workers/template/spec`. A pointer the object lacks names nothing.
    pub pod_specs: Vec<String>,
}

/// The hub template's `.status`, from the members' (the template's kind needs the
/// status subresource).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusRule {
    /// Integer fields of `.status` summed over the scheduled clusters (a member that
    /// lacks one counts 0), e.g. `readyWorkers`; the status schema must declare them
    /// as integers. Nothing else of the template's status is written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sum: Vec<String>,
}

/// The kind a ResourceInterpreter is for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// `group/version` (or `v1` for the core group), as in the template.
    pub api_version: String,
    /// The kind, as in the template.
    pub kind: String,
}

/// Where the replica count is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicasRule {
    /// JSON pointer (RFC 6901) to the integer replica count under `/spec`, e.g.
    /// `/spec/size` or `/spec/workers/replicas`. A Divided placement writes each
    /// cluster's share there.
    pub path: String,

    /// JSON pointer to the count of available (ready, serving) replicas under
    /// `/status`, e.g. `/status/readyWorkers`. With it, replicas move between clusters
    /// make-before-break as a Deployment's do (`spec.redistribution` of the policy): a
    /// cluster gives up replicas only as the others report them available. Unset:
    /// they move at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<String>,
}

/// When an object is healthy: CEL expressions over `object` (the member's object,
/// status included) that evaluate to a bool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// True when the object is healthy.
    pub healthy: String,

    /// True when the object has failed. Unset: an object that is not healthy is
    /// unhealthy (Karmada's rule). Set: an object neither healthy nor unhealthy is
    /// still progressing (Unknown), which never fails a cluster over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
}

/// One kind's interpretation, as a Work carries it (`spec.interpretations`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interpretation {
    /// The kind's API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The ResourceInterpreter this comes from, for messages.
    pub interpreter: String,
    /// JSON pointer to the replica count, when not `spec.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_path: Option<String>,
    /// JSON pointer (under `/status`) to the count of available replicas, when the
    /// interpreter names one: replica moves are then make-before-break. The hub's
    /// alone (its guard reads the members' reports): not written into Works.
    #[serde(skip)]
    #[schemars(skip)]
    pub available_path: Option<String>,
    /// JSON pointers to the kind's pod specs, whose ConfigMaps, Secrets,
    /// ServiceAccount and PVCs `propagateDeps` takes along.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_specs: Vec<String>,
    /// CEL: true when healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<String>,
    /// CEL: true when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy: Option<String>,
}

/// What is wrong with `spec`, one message per field, naming it and what to write.
pub fn problems(spec: &ResourceInterpreterSpec) -> Vec<String> {
    let mut out = Vec::new();
    let t = &spec.target;
    if t.api_version.trim().is_empty() {
        out.push(
            "spec.target.apiVersion: Required value: the kind's group/version, e.g. example.com/v1"
                .into(),
        );
    }
    if t.kind.trim().is_empty() {
        out.push("spec.target.kind: Required value: the kind, e.g. Gadget".into());
    }
    if let Some(why) = target_problem(t) {
        out.push(why);
    }
    if spec.replicas.is_none()
        && spec.health.is_none()
        && spec.status.is_none()
        && spec.dependencies.is_none()
    {
        out.push("spec: Required value: set replicas, health, dependencies or status; an interpreter with none changes nothing".into());
    }
    if let Some(d) = &spec.dependencies {
        if d.pod_specs.is_empty() {
            out.push("spec.dependencies.podSpecs: Required value: JSON pointers to the kind's pod specs, e.g. /spec/template/spec".into());
        }
        for (n, p) in d.pod_specs.iter().enumerate() {
            if let Some(why) = pointer_problem(p) {
                out.push(format!(
                    "spec.dependencies.podSpecs[{n}]: Invalid value: {p:?}: {why}"
                ));
            }
        }
    }
    if let Some(st) = &spec.status {
        let mut seen: Vec<&str> = Vec::new();
        for (n, field) in st.sum.iter().enumerate() {
            let at = format!("spec.status.sum[{n}]");
            if field.is_empty() || field.contains(['/', '.', '[']) {
                out.push(format!(
                    "{at}: Invalid value: {field:?}: a field of .status, by its name, e.g. readyWorkers"
                ));
            } else if field == "observedGeneration" {
                out.push(format!(
                    "{at}: Invalid value: \"observedGeneration\": a generation is no count to sum"
                ));
            } else if seen.contains(&field.as_str()) {
                out.push(format!("{at}: Duplicate value: {field:?}"));
            }
            seen.push(field);
        }
        if st.sum.is_empty() {
            out.push("spec.status.sum: Required value: the integer fields of .status to sum, e.g. [readyWorkers]".into());
        }
    }
    if let Some(r) = &spec.replicas {
        if let Some(why) = pointer_problem(&r.path) {
            out.push(format!(
                "spec.replicas.path: Invalid value: {:?}: {why}",
                r.path
            ));
        }
        if let Some(a) = &r.available
            && let Some(why) = pointer_problem_under(
                a,
                "status",
                "/status/readyReplicas",
                "/status/workers/ready",
            )
        {
            out.push(format!(
                "spec.replicas.available: Invalid value: {a:?}: {why}"
            ));
        }
    }
    if let Some(h) = &spec.health {
        let exprs = [
            ("healthy", Some(&h.healthy)),
            ("unhealthy", h.unhealthy.as_ref()),
        ];
        for (field, expr) in exprs {
            let Some(expr) = expr else { continue };
            if expr.trim().is_empty() {
                out.push(format!(
                    "spec.health.{field}: Required value: a CEL expression over `object` that is a bool"
                ));
            } else if let Err(e) = cel::check(expr, &["object"]) {
                out.push(format!(
                    "spec.health.{field}: Invalid value: {expr:?}: compilation failed: {e}"
                ));
            }
        }
    }
    out
}

/// The built-in API groups whose names have a dot (a CRD's group always has one).
const BUILT_IN_GROUPS: &[&str] = &[
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// A target that is not a custom kind: Causeway's own rules (and the make-before-break
/// guard, `retain-replicas`, status aggregation, which read `spec.replicas`) stay in
/// charge of the built-in kinds.
fn target_problem(t: &Target) -> Option<String> {
    if t.api_version.trim().is_empty() || t.kind.trim().is_empty() {
        return None;
    }
    let Some((group, version)) = t.api_version.split_once('/') else {
        return Some(format!(
            "spec.target.apiVersion: Invalid value: {:?}: a custom kind's apiVersion is <group>/<version>, e.g. example.com/v1; Causeway has its own rules for the core kinds",
            t.api_version
        ));
    };
    if version.is_empty() || version.contains('/') {
        return Some(format!(
            "spec.target.apiVersion: Invalid value: {:?}: write <group>/<version>, e.g. example.com/v1",
            t.api_version
        ));
    }
    // a CRD's group has a dot; the built-in ones without (apps, batch, policy, ...),
    // those with one, and the kinds Causeway judges itself are not interpreted
    if !group.contains('.')
        || BUILT_IN_GROUPS.contains(&group)
        || super::health::judged(group, &t.kind)
    {
        return Some(format!(
            "spec.target: Invalid value: \"{} {}\": Causeway has its own rules for this kind; an interpreter is for kinds it has none for, such as custom resources",
            t.api_version, t.kind
        ));
    }
    None
}

/// What is wrong with a JSON pointer under `/spec`, if anything.
fn pointer_problem(path: &str) -> Option<String> {
    pointer_problem_under(path, "spec", "/spec/size", "/spec/workers/replicas")
}

/// What is wrong with a JSON pointer under `/<root>` (`example` and `nested` are ones),
/// if anything.
fn pointer_problem_under(path: &str, root: &str, example: &str, nested: &str) -> Option<String> {
    let Some(rest) = path.strip_prefix(&format!("/{root}/")) else {
        return Some(format!(
            "must be a JSON pointer under /{root}, e.g. {example}"
        ));
    };
    if rest.split('/').any(str::is_empty) {
        return Some(format!(
            "a JSON pointer has no empty segments, e.g. {nested}"
        ));
    }
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some("'~' must be written ~0, and '/' inside a key ~1 (RFC 6901)".into());
        }
    }
    None
}

/// An interpreter's key: its kind's (group, kind), any version.
fn kind_key(api_version: &str, kind: &str) -> (String, String) {
    (group_of(api_version).to_string(), kind.to_string())
}

/// The hub's interpreters, resolved: one per kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Interpreters {
    by_kind: BTreeMap<(String, String), Interpretation>,
    /// The `.status` fields summed into the hub template, by kind (the hub's alone:
    /// not carried in the Works).
    sums: BTreeMap<(String, String), Vec<String>>,
    /// Custom kinds whose interpreters are all invalid, one of them with a replica
    /// path, with the oldest such one's problem.
    broken: BTreeMap<(String, String), String>,
}

/// [`resolve`]'s verdict on each interpreter: `None` when in force, else why not.
pub type Verdicts = BTreeMap<String, Option<String>>;

/// The interpreters in force, and a verdict for each one by name. Of several valid
/// interpreters for one kind, the oldest (then the first by name) wins; the others are
/// refused, naming it.
pub fn resolve(all: &[&ResourceInterpreter]) -> (Interpreters, Verdicts) {
    let mut sorted: Vec<&&ResourceInterpreter> = all.iter().collect();
    let created = |r: &ResourceInterpreter| r.metadata.creation_timestamp.clone().map(|t| t.0);
    sorted.sort_by(|a, b| {
        (created(a), a.metadata.name.as_deref()).cmp(&(created(b), b.metadata.name.as_deref()))
    });
    let mut out = Interpreters::default();
    let mut verdicts = Verdicts::new();
    let mut invalid: Vec<((String, String), String)> = Vec::new();
    for r in sorted {
        let name = r.metadata.name.clone().unwrap_or_default();
        let t = &r.spec.target;
        let key = kind_key(&t.api_version, &t.kind);
        let problems = problems(&r.spec);
        if !problems.is_empty() {
            let why = problems.join("; ");
            // a custom kind whose replica count it places: the defaults would undo the
            // division (not a target that is no custom kind, which names no such kind)
            let custom = !t.api_version.trim().is_empty()
                && !t.kind.trim().is_empty()
                && target_problem(t).is_none();
            if custom && r.spec.replicas.is_some() {
                invalid.push((key, format!("ResourceInterpreter {name} is invalid: {why}")));
            }
            verdicts.insert(name, Some(why));
            continue;
        }
        if let Some(first) = out.by_kind.get(&key) {
            verdicts.insert(
                name,
                Some(format!(
                    "ResourceInterpreter {} already interprets {} ({}): only one may; delete one of them",
                    first.interpreter, key.1, t.api_version
                )),
            );
            continue;
        }
        let i = Interpretation {
            group: key.0.clone(),
            kind: key.1.clone(),
            interpreter: name.clone(),
            replicas_path: r.spec.replicas.as_ref().map(|r| r.path.clone()),
            available_path: r.spec.replicas.as_ref().and_then(|r| r.available.clone()),
            pod_specs: r
                .spec
                .dependencies
                .as_ref()
                .map(|d| d.pod_specs.clone())
                .unwrap_or_default(),
            healthy: r.spec.health.as_ref().map(|h| h.healthy.clone()),
            unhealthy: r.spec.health.as_ref().and_then(|h| h.unhealthy.clone()),
        };
        if let Some(st) = &r.spec.status {
            out.sums.insert(key.clone(), st.sum.clone());
        }
        out.by_kind.insert(key, i);
        verdicts.insert(name, None);
    }
    // a kind whose interpreters are all invalid is not read with the defaults instead
    for (key, why) in invalid {
        if !out.by_kind.contains_key(&key) && !key.1.is_empty() {
            out.broken.entry(key).or_insert(why);
        }
    }
    (out, verdicts)
}

impl Interpreters {
    /// The interpretation of the kind of `api_version`, `kind`, if one is in force.
    pub fn of(&self, api_version: &str, kind: &str) -> Option<&Interpretation> {
        self.by_kind.get(&kind_key(api_version, kind))
    }

    /// Why the kind cannot be read, when every interpreter of it is invalid and one of
    /// them places its replica count (the defaults would give every cluster the whole
    /// count). An invalid interpreter with no replica path leaves the kind to the
    /// defaults, as one that does not name a custom kind does.
    pub fn broken(&self, api_version: &str, kind: &str) -> Option<&str> {
        self.broken
            .get(&kind_key(api_version, kind))
            .map(String::as_str)
    }

    /// The `.status` fields of the kind summed into the hub template (none: the hub
    /// leaves its status alone).
    pub fn status_sums(&self, api_version: &str, kind: &str) -> &[String] {
        self.sums
            .get(&kind_key(api_version, kind))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The kind's pod specs, for its dependencies (none: Causeway's own rule).
    pub fn pod_specs(&self, api_version: &str, kind: &str) -> &[String] {
        self.of(api_version, kind)
            .map(|i| i.pod_specs.as_slice())
            .unwrap_or_default()
    }

    /// Where the kind keeps its replica count.
    pub fn replicas_pointer(&self, api_version: &str, kind: &str) -> &str {
        self.of(api_version, kind)
            .and_then(|i| i.replicas_path.as_deref())
            .unwrap_or(DEFAULT_REPLICAS)
    }

    /// The interpretations of `manifests`' kinds (each once), for their Work.
    pub fn for_manifests<'a>(
        &self,
        manifests: impl IntoIterator<Item = &'a Value>,
    ) -> Vec<Interpretation> {
        let mut out: Vec<Interpretation> = Vec::new();
        for m in manifests {
            let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
            if let Some(i) = self.of(text("apiVersion"), text("kind"))
                && !out.contains(i)
            {
                out.push(i.clone());
            }
        }
        out
    }
}

/// The interpretation `work` carries for `manifest`'s kind.
pub fn interpretation<'w>(work: &'w Work, manifest: &Value) -> Option<&'w Interpretation> {
    let text = |k: &str| manifest.get(k).and_then(Value::as_str).unwrap_or("");
    let group = group_of(text("apiVersion"));
    let kind = text("kind");
    work.spec
        .interpretations
        .iter()
        .find(|i| i.group == group && i.kind == kind)
}

/// Where `manifest` of `work` keeps its replica count.
pub fn replicas_pointer<'w>(work: &'w Work, manifest: &Value) -> &'w str {
    interpretation(work, manifest)
        .and_then(|i| i.replicas_path.as_deref())
        .unwrap_or(DEFAULT_REPLICAS)
}

/// Where `manifest` of `work` keeps its pod specs, for its dependencies (none: Causeway's
/// own rule).
pub fn pod_specs<'w>(work: &'w Work, manifest: &Value) -> &'w [String] {
    interpretation(work, manifest)
        .map(|i| i.pod_specs.as_slice())
        .unwrap_or_default()
}

/// Whether `work` carries a health rule for the kind `group`/`kind`.
pub fn judges(work: &Work, group: &str, kind: &str) -> bool {
    work.spec
        .interpretations
        .iter()
        .any(|i| i.group == group && i.kind == kind && i.healthy.is_some())
}

/// The health of member object `obj` by interpretation `i`'s rule, and, when the rule
/// could not tell, why (a field the expression names that the object lacks, a result
/// that is not a bool). `None` when `i` has no health rule.
///
/// Before any expression: an object whose status is of an older generation than its
/// spec (`status.observedGeneration` below `metadata.generation`, when it reports one)
/// is Unknown, with nothing to say: the rule judges only a status of what the object
/// now asks for (a rollout wave must not pass on the previous generation's status).
/// Then `healthy` true is Healthy, whatever `unhealthy` says (`healthy: "true"` makes
/// a kind without a status healthy once it exists). An object without a status yet is
/// otherwise Unknown, with nothing to say (never Unhealthy: its controller has not
/// spoken). Else `unhealthy` true is Unhealthy (a failed object may lack what `healthy`
/// reads); else, with `unhealthy` given, Unknown (still progressing), and without it
/// Unhealthy (Karmada's rule). An expression that fails makes it Unknown, unless
/// `unhealthy` is true.
pub fn health(i: &Interpretation, obj: &Value) -> Option<(ResourceHealth, Option<String>)> {
    let healthy = i.healthy.as_deref()?;
    let status = obj.get("status").filter(|s| !s.is_null());
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    let observed = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    let stale = matches!((observed, generation), (Some(o), Some(g)) if o < g);
    if stale {
        return Some((ResourceHealth::Unknown, None));
    }
    let named = |why: String| Some(format!("ResourceInterpreter {}: {why}", i.interpreter));
    let o = match cel::value(Some(obj)) {
        Ok(o) => o,
        Err(e) => return Some((ResourceHealth::Unknown, named(e))),
    };
    let mut ctx = cel::Context::default();
    ctx.add_variable_from_value("object", o);
    let eval = |field: &str, expr: &str| {
        cel::boolean(expr, &ctx).map_err(|e| format!("health.{field}: {e}"))
    };
    let ok = eval("healthy", healthy);
    if ok == Ok(true) {
        return Some((ResourceHealth::Healthy, None));
    }
    if status.is_none() {
        return Some((ResourceHealth::Unknown, None));
    }
    let failed = i.unhealthy.as_deref().map(|expr| eval("unhealthy", expr));
    Some(match (ok, failed) {
        (_, Some(Ok(true))) => (ResourceHealth::Unhealthy, None),
        (Err(e), _) | (Ok(_), Some(Err(e))) => (ResourceHealth::Unknown, named(e)),
        (Ok(_), None) => (ResourceHealth::Unhealthy, None),
        (Ok(_), Some(Ok(false))) => (ResourceHealth::Unknown, None),
    })
}

/// The health of member object `obj`, one of `work`'s manifests: by the health rule
/// the Work carries for its kind, else by Causeway's own ([`super::health::health`]);
/// with why the rule could not tell, when it could not.
pub fn health_in(work: &Work, obj: &Value) -> (ResourceHealth, Option<String>) {
    interpretation(work, obj)
        .and_then(|i| health(i, obj))
        .unwrap_or_else(|| (super::health::health(obj), None))
}

#[cfg(test)]
#[path = "interpreter_tests.rs"]
mod tests;
