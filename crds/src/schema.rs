//! Hand-written schema fragments for fields schemars cannot describe the way the
//! Kubernetes API server needs them (raw JSON, embedded objects), and schema
//! transforms for the few places where serde's and the CRD's notion of
//! "required" differ.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value (object, array or scalar), kept as is by the API server.
pub(crate) fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A JSON object whose fields the API server keeps without a schema.
pub(crate) fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A complete Kubernetes object (`apiVersion`, `kind`, `metadata`, ...) embedded in
/// another object; the API server validates its `apiVersion`, `kind` and `metadata`.
pub(crate) fn embedded_resource(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Marks `field` as required and drops the `default` serde's `#[serde(default)]`
/// made schemars emit for it. Used where the wire format requires a field that the
/// Rust type still tolerates missing (so a list of objects never fails to decode).
pub(crate) fn require(schema: &mut Schema, field: &str) {
    if let Some(obj) = schema.as_object_mut() {
        if let Some(prop) = obj
            .get_mut("properties")
            .and_then(|p| p.get_mut(field))
            .and_then(|p| p.as_object_mut())
        {
            prop.remove("default");
        }
        let required = obj
            .entry("required")
            .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        if let Some(list) = required.as_array_mut()
            && !list.iter().any(|v| v == field)
        {
            list.push(field.into());
            list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
}

/// Sets extension `key: value` on the sub-schema at `path`, a dot-separated list of
/// property names where a `[]` suffix steps into the array's `items`
/// (for example `rules[].http.paths[].backend`). Missing paths are a programming
/// error and panic, so a typo cannot silently drop an annotation (the CRD
/// generator's tests exercise every call).
pub(crate) fn set_at(schema: &mut Schema, path: &str, key: &str, value: serde_json::Value) {
    let mut node = schema.as_object_mut().expect("object schema");
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, items) = match segment.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        node = node
            .get_mut("properties")
            .and_then(|p| p.get_mut(name))
            .and_then(|p| p.as_object_mut())
            .unwrap_or_else(|| panic!("schema has no property {name:?} (path {path:?})"));
        if items {
            node = node
                .get_mut("items")
                .and_then(|p| p.as_object_mut())
                .unwrap_or_else(|| panic!("schema property {name:?} has no items (path {path:?})"));
        }
    }
    node.insert(key.to_owned(), value);
}
