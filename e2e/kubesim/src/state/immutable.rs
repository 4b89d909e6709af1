//! Fields kube-apiserver's update validation refuses to change, with its 422 wording:
//! workload selectors, the StatefulSet spec outside its mutable fields, a Job's
//! selector, completions, completionMode and template, immutable ConfigMaps and
//! Secrets (and a Secret's type), a PersistentVolumeClaim's spec outside
//! `resources.requests`, and a Pod's spec outside the fields [`crate::state::pod_update`]
//! lists. Service clusterIPs are checked where they are allocated
//! ([`crate::state::kinds`]).
//!
//! Every write path (PUT, the three PATCH types and server-side apply) reaches this
//! through [`crate::state::kinds::on_update`], dry runs included.
//!
//! Values are compared as apimachinery's semantic equality does (absent, null, empty
//! lists and maps, empty strings and equal numbers are equal), after the defaults
//! kube-apiserver would have filled in. Bad values print as JSON, as
//! `field.Error.ErrorBody` does for non-scalar values.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult, Cause, forbidden_field, invalid_field};
use crate::state::quantity::parse_milli;
use crate::state::registry::ResourceType;
use crate::state::ssa::fields::values_equal;

/// apimachinery's `FieldImmutableErrorMsg`.
const IMMUTABLE: &str = "field is immutable";
/// The ConfigMap and Secret refusal once `immutable: true` is set.
const IMMUTABLE_SET: &str = "field is immutable when `immutable` is set";
/// The StatefulSet spec fields an update may change (kube-apiserver 1.34).
const STS_MUTABLE: [&str; 7] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];
const STS_FORBIDDEN: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";
const PVC_FORBIDDEN: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// Refuses an update of `old` to `new` that changes a field kube-apiserver keeps.
pub fn check(rt: &ResourceType, old: &Value, new: &Value) -> ApiResult<()> {
    let causes = causes(&rt.group, &rt.plural, old, new);
    if causes.is_empty() {
        return Ok(());
    }
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Err(ApiError::invalid(&rt.kind, &rt.group, name, causes))
}

/// The field errors of an update of a `group`/`plural` object, in kube-apiserver's order.
pub fn causes(group: &str, plural: &str, old: &Value, new: &Value) -> Vec<Cause> {
    match (group, plural) {
        ("apps", "deployments" | "replicasets" | "daemonsets") => {
            immutable(old, new, "/spec/selector", "spec.selector", selector_json)
        }
        ("apps", "statefulsets") => statefulset(old, new),
        ("batch", "jobs") => job(old, new),
        ("", "configmaps") => immutable_data(old, new, &["data", "binaryData"]),
        ("", "secrets") => {
            let mut c = immutable_data(old, new, &["data"]);
            let ty = |o: &Value| {
                o.get("type")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                    .unwrap_or("Opaque")
                    .to_string()
            };
            if ty(old) != ty(new) {
                c.push(invalid_field(
                    "type",
                    format!("Invalid value: {:?}: {IMMUTABLE}", ty(new)),
                ));
            }
            c
        }
        ("", "persistentvolumeclaims") => pvc(old, new),
        ("", "pods") => crate::state::pod_update::causes(old, new),
        _ => Vec::new(),
    }
}

/// `ValidateImmutableField` for the value at `pointer`.
fn immutable(
    old: &Value,
    new: &Value,
    pointer: &str,
    field: &str,
    show: fn(Option<&Value>) -> String,
) -> Vec<Cause> {
    let (o, n) = (old.pointer(pointer), new.pointer(pointer));
    if same(o, n) {
        return Vec::new();
    }
    vec![invalid_field(
        field,
        format!("Invalid value: {}: {IMMUTABLE}", show(n)),
    )]
}

/// StatefulSets: only the mutable fields may change; anything else is one Forbidden on `spec`.
fn statefulset(old: &Value, new: &Value) -> Vec<Cause> {
    let rest = |o: &Value| {
        let mut spec = o.get("spec").cloned().unwrap_or(json!({}));
        if let Some(m) = spec.as_object_mut() {
            for k in STS_MUTABLE {
                m.remove(k);
            }
            m.entry("podManagementPolicy")
                .or_insert_with(|| json!("OrderedReady"));
        }
        spec
    };
    if same(Some(&rest(old)), Some(&rest(new))) {
        Vec::new()
    } else {
        vec![forbidden_field("spec", STS_FORBIDDEN)]
    }
}

/// Jobs: completions (elastic only for Indexed Jobs changing completions together with
/// parallelism, as with the ElasticIndexedJob gate on), selector, template (always
/// immutable here: the suspended-Job scheduling-directive exception is not modelled)
/// and completionMode.
fn job(old: &Value, new: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let (oc, nc) = (
        old.pointer("/spec/completions"),
        new.pointer("/spec/completions"),
    );
    let indexed = new.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    if !same(oc, nc) {
        if !indexed {
            c.push(invalid_field(
                "spec.completions",
                format!("Invalid value: {}: {IMMUTABLE}", scalar_json(nc)),
            ));
        } else if nc.is_some_and(|n| !n.is_null()) && !same(nc, new.pointer("/spec/parallelism")) {
            c.push(invalid_field(
                "spec.completions",
                format!(
                    "Invalid value: {}: can only be modified in tandem with spec.parallelism",
                    scalar_json(nc)
                ),
            ));
        }
    }
    c.extend(immutable(
        old,
        new,
        "/spec/selector",
        "spec.selector",
        selector_json,
    ));
    c.extend(immutable(
        old,
        new,
        "/spec/template",
        "spec.template",
        scalar_json,
    ));
    let mode = |o: &Value| {
        o.pointer("/spec/completionMode")
            .and_then(Value::as_str)
            .unwrap_or("NonIndexed")
            .to_string()
    };
    if mode(old) != mode(new) {
        c.push(invalid_field(
            "spec.completionMode",
            format!("Invalid value: {:?}: {IMMUTABLE}", mode(new)),
        ));
    }
    c
}

/// ConfigMaps and Secrets with `immutable: true`: it may not be unset and `fields` may
/// not change.
fn immutable_data(old: &Value, new: &Value, fields: &[&str]) -> Vec<Cause> {
    let on = |o: &Value| o.get("immutable").and_then(Value::as_bool) == Some(true);
    if !on(old) {
        return Vec::new();
    }
    let mut c = Vec::new();
    if !on(new) {
        c.push(forbidden_field("immutable", IMMUTABLE_SET));
    }
    for f in fields {
        if !same(old.get(*f), new.get(*f)) {
            c.push(forbidden_field(f, IMMUTABLE_SET));
        }
    }
    c
}

/// PersistentVolumeClaims: the spec may change only in `resources.requests` (which may
/// not shrink storage) and `volumeAttributesClassName`, and `volumeName` may be set once.
/// kubesim binds no claims, so the bound-claim condition on those is not modelled.
fn pvc(old: &Value, new: &Value) -> Vec<Cause> {
    let spec = |o: &Value| o.get("spec").cloned().unwrap_or(json!({}));
    let (mut os, mut ns) = (spec(old), spec(new));
    for s in [&mut os, &mut ns] {
        if let Some(m) = s.as_object_mut() {
            m.remove("volumeAttributesClassName");
            if let Some(r) = m.get_mut("resources").and_then(Value::as_object_mut) {
                r.remove("requests");
            }
        }
    }
    let unbound = os
        .get("volumeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    if unbound && let Some(v) = ns.get("volumeName").cloned() {
        os["volumeName"] = v;
    }
    let mut c = Vec::new();
    if !same(Some(&os), Some(&ns)) {
        c.push(forbidden_field("spec", PVC_FORBIDDEN));
    }
    let storage = |o: &Value| {
        o.pointer("/spec/resources/requests/storage")
            .and_then(Value::as_str)
            .and_then(|q| parse_milli(q).ok())
    };
    if let (Some(before), Some(after)) = (storage(old), storage(new))
        && after < before
    {
        c.push(forbidden_field(
            "spec.resources.requests.storage",
            "field can not be less than previous value",
        ));
    }
    c
}

/// Semantic equality: absent, null, empty lists, maps and strings are equal.
pub(crate) fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    values_equal(
        a.and_then(normalized).as_ref(),
        b.and_then(normalized).as_ref(),
    )
}

/// The value without empty parts; None when nothing is left.
fn normalized(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(m) => {
            let kept: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| normalized(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(a) => Some(Value::Array(
            a.iter()
                .map(|i| normalized(i).unwrap_or(Value::Null))
                .collect(),
        )),
        other => Some(other.clone()),
    }
}

/// A bad value as `ErrorBody` prints it: `null`, a number, or JSON.
fn scalar_json(v: Option<&Value>) -> String {
    v.map(Value::to_string).unwrap_or_else(|| "null".into())
}

/// A `metav1.LabelSelector` as Go's `json.Marshal` writes it: matchLabels (keys sorted)
/// then matchExpressions (key, operator, values), empty parts left out.
fn selector_json(v: Option<&Value>) -> String {
    let Some(sel) = v.filter(|s| s.is_object()) else {
        return "null".into();
    };
    let mut out = Map::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object)
        && !labels.is_empty()
    {
        let mut sorted: Vec<(&String, &Value)> = labels.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        out.insert(
            "matchLabels".into(),
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        );
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array)
        && !exprs.is_empty()
    {
        let items = exprs
            .iter()
            .map(|e| {
                let mut m = Map::new();
                for k in ["key", "operator", "values"] {
                    if let Some(v) = e.get(k).filter(|v| !v.is_null()) {
                        m.insert(k.into(), v.clone());
                    }
                }
                Value::Object(m)
            })
            .collect();
        out.insert("matchExpressions".into(), Value::Array(items));
    }
    Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (what, group, plural, old, new, the (field, message) pairs wanted)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        Value,
        Value,
        Vec<(String, String)>,
    );

    fn messages(group: &str, plural: &str, old: Value, new: Value) -> Vec<(String, String)> {
        causes(group, plural, &old, &new)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn immutable_fields_table() {
        let dep = |app: &str, replicas: i64| json!({"spec": {"replicas": replicas, "selector": {"matchLabels": {"b": "2", "app": app}}}});
        let sts = |extra: Value| {
            let mut s = json!({"spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": {"x": 1}}});
            if let (Some(m), Some(e)) = (s["spec"].as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            s
        };
        let job = |completions: Value, parallelism: i64, mode: &str, image: &str| json!({"spec": {"completions": completions, "parallelism": parallelism, "completionMode": mode, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
        let cases: Vec<Case> = vec![
            (
                "scaling a Deployment",
                "apps",
                "deployments",
                dep("web", 1),
                dep("web", 3),
                vec![],
            ),
            (
                "a Deployment's selector",
                "apps",
                "deployments",
                dep("web", 1),
                dep("api", 1),
                pairs(&[(
                    "spec.selector",
                    r#"Invalid value: {"matchLabels":{"app":"api","b":"2"}}: field is immutable"#,
                )]),
            ),
            (
                "a DaemonSet's selector removed",
                "apps",
                "daemonsets",
                dep("web", 1),
                json!({"spec": {}}),
                pairs(&[("spec.selector", "Invalid value: null: field is immutable")]),
            ),
            (
                "StatefulSet mutable fields",
                "apps",
                "statefulsets",
                sts(json!({})),
                sts(
                    json!({"replicas": 5, "template": {"x": 2}, "minReadySeconds": 3, "revisionHistoryLimit": 2, "podManagementPolicy": "OrderedReady"}),
                ),
                vec![],
            ),
            (
                "StatefulSet volumeClaimTemplates",
                "apps",
                "statefulsets",
                sts(json!({})),
                sts(json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}}]})),
                pairs(&[("spec", &format!("Forbidden: {STS_FORBIDDEN}"))]),
            ),
            (
                "Job completions",
                "batch",
                "jobs",
                job(json!(3), 1, "NonIndexed", "a"),
                job(json!(4), 1, "NonIndexed", "a"),
                pairs(&[("spec.completions", "Invalid value: 4: field is immutable")]),
            ),
            (
                "elastic Indexed Job",
                "batch",
                "jobs",
                job(json!(3), 3, "Indexed", "a"),
                job(json!(5), 5, "Indexed", "a"),
                vec![],
            ),
            (
                "Indexed Job completions alone",
                "batch",
                "jobs",
                job(json!(3), 3, "Indexed", "a"),
                job(json!(5), 3, "Indexed", "a"),
                pairs(&[(
                    "spec.completions",
                    "Invalid value: 5: can only be modified in tandem with spec.parallelism",
                )]),
            ),
            (
                "Job template",
                "batch",
                "jobs",
                job(json!(3), 1, "NonIndexed", "a"),
                job(json!(3), 2, "NonIndexed", "b"),
                pairs(&[(
                    "spec.template",
                    r#"Invalid value: {"spec":{"containers":[{"name":"c","image":"b"}]}}: field is immutable"#,
                )]),
            ),
            (
                "immutable ConfigMap",
                "",
                "configmaps",
                json!({"immutable": true, "data": {"a": "1"}}),
                json!({"data": {"a": "2"}, "binaryData": {"b": "AA=="}}),
                pairs(&[
                    (
                        "immutable",
                        "Forbidden: field is immutable when `immutable` is set",
                    ),
                    (
                        "data",
                        "Forbidden: field is immutable when `immutable` is set",
                    ),
                    (
                        "binaryData",
                        "Forbidden: field is immutable when `immutable` is set",
                    ),
                ]),
            ),
            (
                "immutable ConfigMap, labels only",
                "",
                "configmaps",
                json!({"immutable": true, "data": {"a": "1"}}),
                json!({"metadata": {"labels": {"x": "y"}}, "immutable": true, "data": {"a": "1"}}),
                vec![],
            ),
            (
                "mutable ConfigMap",
                "",
                "configmaps",
                json!({"data": {"a": "1"}}),
                json!({"data": {"a": "2"}, "immutable": true}),
                vec![],
            ),
            (
                "Secret type",
                "",
                "secrets",
                json!({"data": {}}),
                json!({"type": "kubernetes.io/tls"}),
                pairs(&[(
                    "type",
                    r#"Invalid value: "kubernetes.io/tls": field is immutable"#,
                )]),
            ),
            (
                "PVC storage grows, volumeName set once",
                "",
                "persistentvolumeclaims",
                json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
                json!({"spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv1", "resources": {"requests": {"storage": "2Gi"}}}}),
                vec![],
            ),
            (
                "PVC access modes and a smaller request",
                "",
                "persistentvolumeclaims",
                json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}),
                json!({"spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}),
                pairs(&[
                    ("spec", &format!("Forbidden: {PVC_FORBIDDEN}")),
                    (
                        "spec.resources.requests.storage",
                        "Forbidden: field can not be less than previous value",
                    ),
                ]),
            ),
            (
                "other kinds",
                "",
                "services",
                json!({"spec": {"selector": {"a": "1"}}}),
                json!({"spec": {"selector": {"a": "2"}}}),
                vec![],
            ),
        ];
        for (what, group, plural, old, new, want) in cases {
            assert_eq!(messages(group, plural, old, new), want, "{what}");
        }
    }
}
