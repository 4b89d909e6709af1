//! Admission webhooks' `matchConditions` (Kubernetes 1.28+, KEP-3716): CEL expressions
//! over `object`, `oldObject` (null for a CREATE, the object for a DELETE) and
//! `request` (the AdmissionReview request) that decide whether a webhook is called at
//! all. A configuration whose expressions do not compile is refused (422, naming each);
//! a webhook is skipped when any of its conditions is false; when none is false but
//! one fails to evaluate (or is not a bool), the error goes by the webhook's
//! `failurePolicy`, as kube-apiserver's matcher does, before any webhook is called.
//! JSON integers are CEL `int`s, as there. Not as there: the `authorizer` variable is
//! not provided, and CEL is `cel` (cel-rust), which checks no types ahead of running,
//! so an expression kube-apiserver refuses at creation for its type (`1 + 1`, an
//! undeclared variable) is accepted here and fails when evaluated.

use causeway_crds::cel::{Cel, Context};
use serde_json::Value;

use crate::error::{ApiError, ApiResult, Cause, invalid_field, required_field};
use crate::state::registry::ResourceType;

/// kube's limit on conditions per webhook.
const MAX_CONDITIONS: usize = 64;

fn conditions(hook: &Value) -> &[Value] {
    hook.get("matchConditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Refuses a ValidatingWebhookConfiguration (or Mutating one) whose matchConditions
/// lack a name or an expression, repeat a name, are too many, or do not compile.
pub fn validate(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if rt.group != "admissionregistration.k8s.io"
        || !matches!(
            rt.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        )
    {
        return Ok(());
    }
    let mut causes: Vec<Cause> = Vec::new();
    let hooks = obj.get("webhooks").and_then(Value::as_array);
    for (i, hook) in hooks.into_iter().flatten().enumerate() {
        let conds = conditions(hook);
        let base = format!("webhooks[{i}].matchConditions");
        if conds.len() > MAX_CONDITIONS {
            causes.push(Cause {
                reason: "FieldValueTooMany".into(),
                message: format!(
                    "Too many: {}: must have at most {MAX_CONDITIONS} items",
                    conds.len()
                ),
                field: base.clone(),
            });
        }
        let mut names: Vec<&str> = Vec::new();
        for (j, c) in conds.iter().enumerate() {
            let name = text(c, "name");
            if name.is_empty() {
                causes.push(required_field(&format!("{base}[{j}].name")));
            } else if names.contains(&name) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate".into(),
                    message: format!("Duplicate value: {:?}", name),
                    field: format!("{base}[{j}].name"),
                });
            }
            names.push(name);
            let expression = text(c, "expression");
            let field = format!("{base}[{j}].expression");
            if expression.trim().is_empty() {
                causes.push(required_field(&field));
            } else if let Err(e) = causeway_crds::cel::compile(expression) {
                causes.push(invalid_field(
                    &field,
                    format!("Invalid value: {expression:?}: compilation failed: {e}"),
                ));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid(
        &rt.kind,
        "admissionregistration.k8s.io",
        name,
        causes,
    ))
}

fn cel(v: Option<&Value>) -> Result<Cel, String> {
    causeway_crds::cel::value(v)
}

/// Whether webhook `hook` is to be called for the AdmissionReview `request`: true
/// without conditions; false when one is false; else the first error (a condition
/// that could not be evaluated, or is not a bool).
pub fn matches(hook: &Value, request: &Value) -> Result<bool, String> {
    let conds = conditions(hook);
    if conds.is_empty() {
        return Ok(true);
    }
    let mut ctx = Context::default();
    ctx.add_variable_from_value("object", cel(request.get("object"))?);
    ctx.add_variable_from_value("oldObject", cel(request.get("oldObject"))?);
    // kube-apiserver's `request` leaves the objects out (they are `object` and
    // `oldObject`), so they are not converted twice
    let fields: serde_json::Map<String, Value> = request
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "object" && *k != "oldObject")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ctx.add_variable_from_value("request", cel(Some(&Value::Object(fields)))?);
    let mut error = None;
    for c in conds {
        let name = text(c, "name");
        match causeway_crds::cel::boolean(text(c, "expression"), &ctx) {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => {
                error.get_or_insert(format!("matchCondition {name:?} failed: {e}"));
            }
        }
    }
    match error {
        Some(e) => Err(format!("failed to evaluate match conditions: {e}")),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The expression deploy/webhook/policies-admission.yaml ships.
    const SPEC_CHANGES: &str = "request.operation == 'CREATE' || !has(object.spec) || \
                                !has(oldObject.spec) || object.spec != oldObject.spec";

    fn hook(conds: Value) -> Value {
        json!({"name": "h", "matchConditions": conds})
    }

    #[test]
    fn conditions_decide_whether_a_webhook_is_called() {
        let h = hook(json!([{"name": "spec", "expression": SPEC_CHANGES}]));
        let req = |op: &str, old: Value, new: Value| json!({"operation": op, "object": new, "oldObject": old});
        let a = json!({"metadata": {"name": "p", "labels": {"x": "1"}}, "spec": {"n": 1}});
        let mut relabelled = a.clone();
        relabelled["metadata"]["labels"]["x"] = json!("2");
        let mut changed = a.clone();
        changed["spec"]["n"] = json!(2);
        let cases = [
            ("a create", req("CREATE", Value::Null, a.clone()), Ok(true)),
            ("a spec change", req("UPDATE", a.clone(), changed), Ok(true)),
            (
                "a label change",
                req("UPDATE", a.clone(), relabelled),
                Ok(false),
            ),
            ("no spec", req("UPDATE", json!({}), json!({})), Ok(true)),
        ];
        for (what, r, want) in cases {
            assert_eq!(matches(&h, &r), want, "{what}");
        }
        assert_eq!(matches(&hook(json!([])), &json!({})), Ok(true));
        // one false wins over an error; an error alone is the answer
        let both = hook(json!([
            {"name": "broken", "expression": "object.missing.deeper == 1"},
            {"name": "no", "expression": "false"},
        ]));
        assert_eq!(
            matches(&both, &req("CREATE", Value::Null, json!({}))),
            Ok(false)
        );
        let broken = hook(json!([{"name": "broken", "expression": "object.missing.deeper == 1"}]));
        let e = matches(&broken, &req("CREATE", Value::Null, json!({}))).unwrap_err();
        assert!(e.contains("matchCondition \"broken\" failed"), "{e}");
        // numbers are ints, as kube-apiserver's CEL has them
        let replicas = hook(
            json!([{"name": "r", "expression": "object.spec.replicas + 1 > 3 && object.spec.replicas % 2 == 1 && object.spec.ratio < 1.0"}]),
        );
        let obj = json!({"spec": {"replicas": 3, "ratio": 0.5}});
        assert_eq!(
            matches(&replicas, &req("CREATE", Value::Null, obj)),
            Ok(true)
        );
        // the objects are `object` and `oldObject`, not fields of `request`
        let in_request = hook(json!([{"name": "r", "expression": "has(request.object)"}]));
        assert_eq!(
            matches(
                &in_request,
                &req("CREATE", Value::Null, json!({"spec": {}}))
            ),
            Ok(false)
        );
        let not_bool = hook(json!([{"name": "n", "expression": "1 + 1"}]));
        let e = matches(&not_bool, &json!({})).unwrap_err();
        assert!(e.contains("not a bool"), "{e}");
    }
}
