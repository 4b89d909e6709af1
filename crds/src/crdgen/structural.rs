//! Checks that CRD schemas are structural and use the Kubernetes list/map
//! extensions correctly, i.e. that a real kube-apiserver accepts them and does
//! not silently prune data.
//!
//! The rules follow the apiextensions "structural schema" definition:
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema>.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value};

const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const PRESERVE_UNKNOWN: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED_RESOURCE: &str = "x-kubernetes-embedded-resource";
const LIST_TYPE: &str = "x-kubernetes-list-type";
const LIST_MAP_KEYS: &str = "x-kubernetes-list-map-keys";
const MAP_TYPE: &str = "x-kubernetes-map-type";

/// Every violation of the structural-schema rules in `crd`, as
/// `"<crd>/<version>: <json path>: <problem>"` messages. Empty means the CRD is fine.
pub fn violations(crd: &CustomResourceDefinition) -> Vec<String> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut out = definition_problems(crd)
        .into_iter()
        .map(|p| format!("{name}: {p}"))
        .collect::<Vec<_>>();
    for version in &crd.spec.versions {
        let prefix = format!("{name}/{}", version.name);
        let Some(schema) = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
        else {
            out.push(format!("{prefix}: no openAPIV3Schema"));
            continue;
        };
        let value = match serde_json::to_value(schema) {
            Ok(v) => v,
            Err(e) => {
                out.push(format!("{prefix}: schema does not serialize: {e}"));
                continue;
            }
        };
        let mut problems = Vec::new();
        check_root(&value, &mut problems);
        check_node(&value, "", &mut problems);
        out.extend(problems.into_iter().map(|p| format!("{prefix}: {p}")));
    }
    out
}

/// Problems outside the schemas: names, versions, printer columns.
fn definition_problems(crd: &CustomResourceDefinition) -> Vec<String> {
    let mut out = Vec::new();
    let names = &crd.spec.names;
    let expected_name = format!("{}.{}", names.plural, crd.spec.group);
    if crd.metadata.name.as_deref() != Some(expected_name.as_str()) {
        out.push(format!("metadata.name must be {expected_name}"));
    }
    let is_label = |s: &str| k8s_validation::is_dns1123_label(s);
    for (what, value) in [
        ("plural", Some(&names.plural)),
        ("singular", names.singular.as_ref()),
    ] {
        if value.is_some_and(|v| !is_label(v)) {
            out.push(format!(
                "names.{what} {value:?} is not a lower-case DNS label"
            ));
        }
    }
    for short in names
        .short_names
        .iter()
        .flatten()
        .chain(names.categories.iter().flatten())
    {
        if !is_label(short) {
            out.push(format!(
                "short name or category {short:?} is not a lower-case DNS label"
            ));
        }
    }
    if !matches!(crd.spec.scope.as_str(), "Namespaced" | "Cluster") {
        out.push(format!(
            "scope {:?} must be Namespaced or Cluster",
            crd.spec.scope
        ));
    }
    let storage = crd.spec.versions.iter().filter(|v| v.storage).count();
    if storage != 1 {
        out.push(format!(
            "exactly one version must be the storage version, found {storage}"
        ));
    }
    for version in &crd.spec.versions {
        for column in version.additional_printer_columns.iter().flatten() {
            if !matches!(
                column.type_.as_str(),
                "integer" | "number" | "string" | "boolean" | "date"
            ) {
                out.push(format!(
                    "{}: printer column {} has invalid type {}",
                    version.name, column.name, column.type_
                ));
            }
            if !column.json_path.starts_with('.') {
                out.push(format!(
                    "{}: printer column {} jsonPath must start with '.'",
                    version.name, column.name
                ));
            }
        }
    }
    out
}

/// Whether `value` has the JSON type `ty` names.
fn matches_type(value: &Value, ty: Option<&str>) -> bool {
    match ty {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        _ => true,
    }
}

fn check_root(root: &Value, out: &mut Vec<String>) {
    if root.get("type").and_then(Value::as_str) != Some("object") {
        out.push("<root>: the root must have type: object".into());
    }
    if let Some(metadata) = root.pointer("/properties/metadata") {
        if metadata.get("type").and_then(Value::as_str) != Some("object") {
            out.push(".metadata: must have type: object".into());
        }
        if let Some(props) = metadata.get("properties").and_then(Value::as_object) {
            for key in props.keys() {
                if key != "name" && key != "generateName" {
                    out.push(format!(
                        ".metadata.{key}: only name and generateName may be specified"
                    ));
                }
            }
        }
    }
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

fn flag(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get(key).and_then(Value::as_bool) == Some(true)
}

fn is_scalar_type(t: Option<&str>) -> bool {
    matches!(t, Some("string" | "integer" | "number" | "boolean"))
}

/// Checks one schema node (a property, an additionalProperties schema, array
/// items, or the root) and recurses into its children.
fn check_node(node: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let Some(obj) = node.as_object() else {
        out.push(format!("{at}: schema must be an object, found {node}"));
        return;
    };
    let ty = str_field(obj, "type");
    let int_or_string = flag(obj, INT_OR_STRING);
    let preserve = flag(obj, PRESERVE_UNKNOWN);

    for forbidden in [
        "$ref",
        "$schema",
        "id",
        "definitions",
        "$defs",
        "patternProperties",
        "dependencies",
        "additionalItems",
        "uniqueItems",
    ] {
        if obj.contains_key(forbidden) {
            out.push(format!(
                "{at}: `{forbidden}` is not allowed in a CRD schema"
            ));
        }
    }
    if obj.get("type").is_some_and(|t| !t.is_string()) {
        out.push(format!("{at}: type must be a single string"));
    }
    match (ty, int_or_string, preserve) {
        (Some(_), true, _) => out.push(format!(
            "{at}: {INT_OR_STRING} must not be combined with type"
        )),
        (None, false, false) => out.push(format!(
            "{at}: every node needs a type (or {INT_OR_STRING} / {PRESERVE_UNKNOWN})"
        )),
        _ => {}
    }

    check_junctors(obj, at, int_or_string, out);

    let props = obj.get("properties").and_then(Value::as_object);
    let additional = obj.get("additionalProperties");
    if props.is_some() && additional.is_some() {
        out.push(format!(
            "{at}: properties and additionalProperties are mutually exclusive"
        ));
    }
    if additional.is_some_and(|a| a.is_boolean()) {
        out.push(format!(
            "{at}: additionalProperties must be a schema, not a boolean"
        ));
    }
    if ty == Some("object") && props.is_none() && additional.is_none() && !preserve {
        out.push(format!(
            "{at}: object without properties, additionalProperties or {PRESERVE_UNKNOWN}: its content would be pruned"
        ));
    }
    if (props.is_some() || additional.is_some()) && ty.is_some() && ty != Some("object") {
        out.push(format!(
            "{at}: properties on a node of type {}",
            ty.unwrap_or_default()
        ));
    }
    if flag(obj, EMBEDDED_RESOURCE) && (ty != Some("object") || !(preserve || props.is_some())) {
        out.push(format!(
            "{at}: {EMBEDDED_RESOURCE} needs type: object and properties or {PRESERVE_UNKNOWN}"
        ));
    }
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !props.is_some_and(|p| p.contains_key(r)) && !preserve {
                out.push(format!(
                    "{at}: required field {r:?} is not among the properties"
                ));
            }
        }
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array)
        && let Some(bad) = values.iter().find(|v| !matches_type(v, ty))
    {
        out.push(format!(
            "{at}: enum value {bad} does not match type {}",
            ty.unwrap_or("?")
        ));
    }
    if let Some(default) = obj.get("default") {
        if !matches_type(default, ty) {
            out.push(format!(
                "{at}: default {default} does not match type {}",
                ty.unwrap_or("?")
            ));
        }
        if let (Some(d), Some(required)) = (
            default.as_object(),
            obj.get("required").and_then(Value::as_array),
        ) {
            for r in required.iter().filter_map(Value::as_str) {
                if !d.contains_key(r) {
                    out.push(format!(
                        "{at}: default {default} lacks required field {r:?}"
                    ));
                }
            }
        }
    }

    check_list_and_map_types(obj, at, ty, out);

    if let Some(props) = props {
        for (key, child) in props {
            check_node(child, &format!("{path}.{key}"), out);
        }
    }
    if let Some(child) = additional.filter(|a| a.is_object()) {
        check_node(child, &format!("{path}.*"), out);
    }
    match (ty, obj.get("items")) {
        (Some("array"), None) => out.push(format!("{at}: array without items")),
        (_, Some(items)) if items.is_array() => {
            out.push(format!("{at}: items must be a single schema, not a list"));
        }
        (_, Some(items)) => check_node(items, &format!("{path}[]"), out),
        _ => {}
    }
}

/// anyOf / oneOf / allOf / not may only carry value validations; the only
/// typed form allowed is the int-or-string pattern `anyOf: [{type: integer}, {type: string}]`.
fn check_junctors(obj: &Map<String, Value>, at: &str, int_or_string: bool, out: &mut Vec<String>) {
    for junctor in ["anyOf", "oneOf", "allOf", "not"] {
        let Some(value) = obj.get(junctor) else {
            continue;
        };
        let branches: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        let int_or_string_pattern = int_or_string
            && junctor == "anyOf"
            && branches.len() == 2
            && branches.iter().all(|b| {
                b.as_object().is_some_and(|o| {
                    o.len() == 1 && matches!(str_field(o, "type"), Some("integer" | "string"))
                })
            });
        if int_or_string_pattern {
            continue;
        }
        for branch in branches {
            let Some(b) = branch.as_object() else {
                continue;
            };
            for key in [
                "type",
                "additionalProperties",
                "nullable",
                "default",
                "description",
                PRESERVE_UNKNOWN,
            ] {
                if b.contains_key(key) {
                    out.push(format!("{at}: `{key}` inside {junctor} is not structural"));
                }
            }
        }
    }
}

/// x-kubernetes-list-type / -list-map-keys / -map-type rules.
fn check_list_and_map_types(
    obj: &Map<String, Value>,
    at: &str,
    ty: Option<&str>,
    out: &mut Vec<String>,
) {
    let list_type = str_field(obj, LIST_TYPE);
    let map_keys = obj.get(LIST_MAP_KEYS).and_then(Value::as_array);
    if list_type.is_some() && ty != Some("array") {
        out.push(format!("{at}: {LIST_TYPE} on a node that is not an array"));
    }
    if let Some(map_type) = str_field(obj, MAP_TYPE) {
        if ty != Some("object") {
            out.push(format!("{at}: {MAP_TYPE} on a node that is not an object"));
        }
        if !matches!(map_type, "atomic" | "granular") {
            out.push(format!("{at}: {MAP_TYPE} must be atomic or granular"));
        }
    }
    if map_keys.is_some() && list_type != Some("map") {
        out.push(format!("{at}: {LIST_MAP_KEYS} requires {LIST_TYPE}: map"));
    }
    let items = obj.get("items").and_then(Value::as_object);
    match list_type {
        None | Some("atomic") => {}
        Some("set") => {
            if !is_scalar_type(items.and_then(|i| str_field(i, "type"))) {
                out.push(format!("{at}: {LIST_TYPE}: set needs scalar items"));
            }
        }
        Some("map") => {
            let Some(items) = items.filter(|i| str_field(i, "type") == Some("object")) else {
                out.push(format!("{at}: {LIST_TYPE}: map needs items of type object"));
                return;
            };
            let keys: Vec<&str> = map_keys
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if keys.is_empty() {
                out.push(format!("{at}: {LIST_TYPE}: map needs {LIST_MAP_KEYS}"));
            }
            let required: Vec<&str> = items
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for key in keys {
                let prop = items
                    .get("properties")
                    .and_then(|p| p.get(key))
                    .and_then(Value::as_object);
                match prop {
                    None => out.push(format!(
                        "{at}: list-map key {key:?} is not a property of the items"
                    )),
                    Some(p) => {
                        if !is_scalar_type(str_field(p, "type")) {
                            out.push(format!("{at}: list-map key {key:?} must be a scalar"));
                        }
                        if !required.contains(&key) && !p.contains_key("default") {
                            out.push(format!(
                                "{at}: list-map key {key:?} must be required or have a default"
                            ));
                        }
                        if flag(p, "nullable") {
                            out.push(format!("{at}: list-map key {key:?} must not be nullable"));
                        }
                    }
                }
            }
        }
        Some(other) => out.push(format!("{at}: unknown {LIST_TYPE} {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(schema: Value) -> Vec<String> {
        let mut out = Vec::new();
        check_root(&schema, &mut out);
        check_node(&schema, "", &mut out);
        out
    }

    #[test]
    fn accepts_a_structural_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "raw": {"x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "conditions": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"],
                    "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
                },
            },
        });
        assert_eq!(problems(schema), Vec::<String>::new());
    }

    #[test]
    fn rejects_the_usual_mistakes() {
        let schema = json!({
            "type": "object",
            "properties": {
                "untyped": {"description": "no type"},
                "ref": {"$ref": "#/definitions/x", "type": "object", "properties": {}},
                "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
                "oneof": {"type": "object", "properties": {"a": {"type": "string"}}, "oneOf": [{"type": "object"}]},
                "empty": {"type": "object"},
                "list": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
            },
        });
        let found = problems(schema).join("\n");
        for needle in [
            ".untyped: every node needs a type",
            ".ref: `$ref`",
            ".both: properties and additionalProperties",
            ".oneof: `type` inside oneOf",
            ".empty: object without properties",
            ".list: list-map key \"name\" must be required",
        ] {
            assert!(found.contains(needle), "missing {needle:?} in:\n{found}");
        }
    }
}
