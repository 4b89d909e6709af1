//! CustomResourceDefinitions: validation of the CRD itself, the resource types it
//! serves, and structural-schema pruning, defaulting and validation of custom objects.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause, invalid_field, required_field};
use crate::state::registry::{NameRule, ResourceType, ScalePaths};
use crate::state::stored::str_list;
use causeway_runtime::table::Column;

/// Validates a CRD object; returns its served resource types.
pub fn types_of(crd: &Value) -> ApiResult<Vec<ResourceType>> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let s = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = s("/spec/group");
    let plural = s("/spec/names/plural");
    let kind = s("/spec/names/kind");
    let scope = s("/spec/scope");
    let mut causes = Vec::new();
    if group.is_empty() {
        causes.push(required_field("spec.group"));
    } else if !group.contains('.') {
        causes.push(invalid_field(
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(required_field("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(required_field("spec.names.kind"));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(invalid_field(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(invalid_field(
            "spec.scope",
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(required_field("spec.versions"));
    }
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("storage") == Some(&json!(true)))
        .collect();
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(invalid_field(
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.pointer("/schema/openAPIV3Schema").is_none() {
            causes.push(required_field(&format!(
                "spec.versions[{i}].schema.openAPIV3Schema"
            )));
        } else if let Some(c) = structural_problem(
            &v["schema"]["openAPIV3Schema"],
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        ) {
            causes.push(c);
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            causes,
        ));
    }
    let storage_version = storage[0]
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let strs = |p: &str| str_list(crd.pointer(p));
    let mut out = Vec::new();
    for v in &versions {
        if v.get("served") != Some(&json!(true)) {
            continue;
        }
        let vname = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| Column {
                        name: c.get("name").and_then(Value::as_str).unwrap_or("").into(),
                        type_: c
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .into(),
                        json_path: c
                            .get("jsonPath")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        description: c
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceType {
            removed: Default::default(),
            group: group.clone(),
            version: vname,
            storage_version: storage_version.clone(),
            plural: plural.clone(),
            singular: {
                let s = s("/spec/names/singular");
                if s.is_empty() { kind.to_lowercase() } else { s }
            },
            kind: kind.clone(),
            list_kind: {
                let l = s("/spec/names/listKind");
                if l.is_empty() {
                    format!("{kind}List")
                } else {
                    l
                }
            },
            namespaced: scope == "Namespaced",
            short_names: strs("/spec/names/shortNames"),
            categories: strs("/spec/names/categories"),
            status_subresource: v.pointer("/subresources/status").is_some(),
            generation: true,
            name_rule: NameRule::Subdomain,
            columns,
            schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
            crd: Some(name.to_string()),
            stored_as: None,
            scale: v.pointer("/subresources/scale").map(|sc| {
                let path = |k: &str| sc.get(k).and_then(Value::as_str).map(String::from);
                ScalePaths {
                    spec_replicas: path("specReplicasPath").unwrap_or_default(),
                    status_replicas: path("statusReplicasPath").unwrap_or_default(),
                    label_selector: Some(path("labelSelectorPath").unwrap_or_default()),
                }
            }),
        });
    }
    Ok(out)
}

/// The first violation of the structural-schema rules, if any.
fn structural_problem(s: &Value, path: &str) -> Option<Cause> {
    let Value::Object(m) = s else {
        return Some(invalid_field(
            path,
            "Invalid value: schema must be an object",
        ));
    };
    let typed = m.contains_key("type")
        || m.get("x-kubernetes-int-or-string") == Some(&json!(true))
        || m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if !typed && path.ends_with("openAPIV3Schema") {
        // the root may omit type only when it is not an object schema; require it
        return Some(required_field(&format!("{path}.type")));
    }
    if !typed && (m.contains_key("properties") || m.contains_key("items")) {
        return Some(required_field(&format!("{path}.type")));
    }
    if m.contains_key("$ref") {
        return Some(invalid_field(
            &format!("{path}.$ref"),
            "Forbidden: $ref is not allowed in structural schemas",
        ));
    }
    if m.contains_key("properties") && m.get("additionalProperties").is_some_and(|a| a.is_object())
    {
        return Some(invalid_field(
            &format!("{path}.additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive",
        ));
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (k, v) in props {
            if let Some(c) = structural_problem_child(v, &format!("{path}.properties[{k}]")) {
                return Some(c);
            }
        }
    }
    if let Some(items) = m.get("items")
        && let Some(c) = structural_problem_child(items, &format!("{path}.items"))
    {
        return Some(c);
    }
    if let Some(ap @ Value::Object(_)) = m.get("additionalProperties")
        && let Some(c) = structural_problem_child(ap, &format!("{path}.additionalProperties"))
    {
        return Some(c);
    }
    None
}

fn structural_problem_child(s: &Value, path: &str) -> Option<Cause> {
    let m = s.as_object()?;
    let typed = m.contains_key("type")
        || m.get("x-kubernetes-int-or-string") == Some(&json!(true))
        || m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if !typed {
        return Some(required_field(&format!("{path}.type")));
    }
    structural_problem(s, path)
}

fn nullable(s: &Value) -> bool {
    s.get("nullable") == Some(&json!(true)) || preserves(s)
}

fn preserves(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
}

/// Prunes unknown fields and fills defaults in place; returns the unknown field paths.
pub fn prune_and_default(obj: &mut Value, schema: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut nulls: Vec<String> = Vec::new();
    if let Value::Object(m) = obj {
        for (k, v) in m.iter_mut() {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match schema.get("properties").and_then(|p| p.get(k)) {
                Some(s) if v.is_null() && !nullable(s) => nulls.push(k.clone()),
                Some(s) => walk(v, s, k, &mut unknown),
                None if preserves(schema) => {}
                None => unknown.push(k.clone()),
            }
        }
        let top: Vec<String> = unknown
            .iter()
            .filter(|u| !u.contains('.'))
            .cloned()
            .collect();
        m.retain(|k, _| !top.contains(k) && !nulls.contains(k));
        apply_defaults(m, schema);
    }
    unknown
}

fn apply_defaults(m: &mut serde_json::Map<String, Value>, schema: &Value) {
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (k, s) in props {
            if let (None, Some(d)) = (m.get(k), s.get("default")) {
                let mut d = d.clone();
                if let Value::Object(dm) = &mut d {
                    apply_defaults(dm, s);
                }
                m.insert(k.clone(), d);
            }
        }
    }
}

fn walk(v: &mut Value, s: &Value, path: &str, unknown: &mut Vec<String>) {
    if s.get("x-kubernetes-embedded-resource") == Some(&json!(true)) && preserves(s) {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                let mut drop = Vec::new();
                for (k, cv) in m.iter_mut() {
                    let embedded_meta = s.get("x-kubernetes-embedded-resource")
                        == Some(&json!(true))
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                    match props.get(k) {
                        // a null where the schema does not allow one is pruned (then
                        // defaulted), as apiextensions' PruneNonNullableNullsWithoutDefaults
                        Some(cs) if cv.is_null() && !nullable(cs) => drop.push(k.clone()),
                        Some(cs) => walk(cv, cs, &format!("{path}.{k}"), unknown),
                        None if preserves(s) || embedded_meta => {}
                        None => {
                            unknown.push(format!("{path}.{k}"));
                            drop.push(k.clone());
                        }
                    }
                }
                m.retain(|k, _| !drop.contains(k));
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, cv) in m.iter_mut() {
                    walk(cv, ap, &format!("{path}.{k}"), unknown);
                }
            }
            apply_defaults(m, s);
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter_mut().enumerate() {
                    walk(it, is, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

/// Validates an object against a schema (types, required, enum, bounds).
pub fn validate(obj: &Value, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(v) = obj.get(k) {
                check(v, s, k, &mut causes);
            }
        }
    }
    required(obj, schema, "", &mut causes);
    causes
}

fn required(v: &Value, s: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(req) = s.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if matches!(r, "apiVersion" | "kind" | "metadata") && path.is_empty() {
                continue;
            }
            if v.get(r).is_none() {
                let p = if path.is_empty() {
                    r.to_string()
                } else {
                    format!("{path}.{r}")
                };
                causes.push(required_field(&p));
            }
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(v: &Value, s: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        if s.get("nullable") != Some(&json!(true)) && !preserves(s) {
            // kube-apiserver drops nulls of non-nullable fields when pruning; accept.
        }
        return;
    }
    let int_or_string = s.get("x-kubernetes-int-or-string") == Some(&json!(true));
    if let Some(t) = s.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        let ok = got == t
            || (t == "number" && got == "integer")
            || (int_or_string && (got == "integer" || got == "string"));
        if !ok {
            causes.push(invalid_field(
                path,
                format!("Invalid value: \"{got}\": {path} in body must be of type {t}: \"{got}\""),
            ));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed = e
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: {v}: supported values: {allowed}"),
            field: path.into(),
        });
    }
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    if let (Some(n), Some(min)) = (v.as_f64(), num("minimum"))
        && n < min
    {
        causes.push(invalid_field(
            path,
            format!("Invalid value: {v}: {path} in body should be greater than or equal to {min}"),
        ));
    }
    if let (Some(n), Some(max)) = (v.as_f64(), num("maximum"))
        && n > max
    {
        causes.push(invalid_field(
            path,
            format!("Invalid value: {v}: {path} in body should be less than or equal to {max}"),
        ));
    }
    if let (Some(st), Some(max)) = (v.as_str(), num("maxLength"))
        && st.chars().count() as f64 > max
    {
        causes.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {max} bytes"),
            field: path.into(),
        });
    }
    if let (Some(st), Some(min)) = (v.as_str(), num("minLength"))
        && (st.chars().count() as f64) < min
    {
        causes.push(invalid_field(
            path,
            format!("Invalid value: \"{st}\": {path} in body should be at least {min} chars long"),
        ));
    }
    match v {
        Value::Array(items) => {
            if let Some(max) = num("maxItems")
                && items.len() as f64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                    field: path.into(),
                });
            }
            if let Some(min) = num("minItems")
                && (items.len() as f64) < min
            {
                causes.push(invalid_field(
                    path,
                    format!(
                        "Invalid value: {}: {path} in body should have at least {min} items",
                        items.len()
                    ),
                ));
            }
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter().enumerate() {
                    check(it, is, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, cv) in m {
                    if let Some(cs) = props.get(k) {
                        check(cv, cs, &format!("{path}.{k}"), causes);
                    }
                }
            } else if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, cv) in m {
                    check(cv, ap, &format!("{path}.{k}"), causes);
                }
            }
            required(v, s, path, causes);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "required": ["type"], "properties": {
                    "type": {"type": "string", "enum": ["ClusterSetIP", "Headless"]},
                    "sessionAffinity": {"type": "string", "default": "None"},
                    "ips": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "port": {"x-kubernetes-int-or-string": true}
                }},
                "status": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
            }
        })
    }

    #[test]
    fn prunes_unknown_and_defaults() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"}, "junk": 1, "spec": {"type": "Headless", "bogus": true, "extra": {"anything": [1]}}});
        let unknown = prune_and_default(&mut o, &schema());
        assert_eq!(unknown, vec!["junk".to_string(), "spec.bogus".to_string()]);
        assert_eq!(
            o["spec"],
            json!({"type": "Headless", "extra": {"anything": [1]}, "sessionAffinity": "None"})
        );
        assert!(o.get("junk").is_none());
    }

    #[test]
    fn validation_table() {
        let cases = [
            (json!({"spec": {"type": "Headless"}}), 0),
            (json!({"spec": {}}), 1),
            (json!({"spec": {"type": "Nope"}}), 1),
            (
                json!({"spec": {"type": "Headless", "ips": ["a", "b", "c"]}}),
                1,
            ),
            (json!({"spec": {"type": "Headless", "port": "http"}}), 0),
            (json!({"spec": {"type": "Headless", "port": 80}}), 0),
            (json!({"spec": {"type": 7}}), 1),
            (
                json!({"spec": {"type": "Headless"}, "status": {"n": -1}}),
                1,
            ),
        ];
        for (o, n) in cases {
            assert_eq!(validate(&o, &schema()).len(), n, "{o}");
        }
    }

    #[test]
    fn crd_validation() {
        let good = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"}, "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema()}, "subresources": {"status": {}}}]}});
        let types = types_of(&good).unwrap();
        assert_eq!(types.len(), 1);
        assert!(types[0].status_subresource);
        let mut bad = good.clone();
        bad["metadata"]["name"] = json!("wrong.example.com");
        bad["spec"]["versions"][0]["storage"] = json!(false);
        let e = types_of(&bad).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(e.causes.len(), 2);
        let mut untyped = good.clone();
        untyped["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
            json!({"properties": {}});
        assert_eq!(types_of(&untyped).unwrap_err().code, 422);
    }
}
