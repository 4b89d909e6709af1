//! `metadata.managedFields`: FieldsV1 encoding of field sets and the entries of each
//! manager.

use serde_json::{Map, Value, json};

use crate::state::ssa::fields::{FieldSet, Path, Pe};

/// FieldsV1 JSON of a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for pe in path {
            node = node
                .entry(pe.encode())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("fieldsV1 nodes are objects");
        }
        node.insert(".".into(), json!({}));
    }
    fn tidy(m: &mut Map<String, Value>) {
        for (_, v) in m.iter_mut() {
            if let Value::Object(c) = v {
                tidy(c);
                if c.len() == 1 && c.contains_key(".") {
                    c.clear();
                }
            }
        }
    }
    tidy(&mut root);
    Value::Object(root)
}

/// Parses FieldsV1 JSON into a set (unknown keys ignored).
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(m: &Map<String, Value>, prefix: &Path, out: &mut FieldSet) {
        for (k, sub) in m {
            let Some(pe) = Pe::decode(k) else { continue };
            let mut p = prefix.clone();
            p.push(pe);
            if let Value::Object(sm) = sub {
                if sm.is_empty() || sm.contains_key(".") {
                    out.insert(p.clone());
                }
                walk(sm, &p, out);
            }
        }
    }
    let mut out = FieldSet::new();
    if let Value::Object(m) = v {
        walk(m, &Vec::new(), &mut out);
    }
    out
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Managed {
    /// Manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion the manager used.
    pub api_version: String,
    /// Time of the last change.
    pub time: String,
    /// `status` or empty.
    pub subresource: String,
    /// Owned fields.
    pub fields: FieldSet,
}

/// Reads `metadata.managedFields`.
pub fn read_managed(obj: &Value) -> Vec<Managed> {
    let s = |e: &Value, k: &str| {
        e.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| Managed {
                    manager: s(e, "manager"),
                    operation: s(e, "operation"),
                    api_version: s(e, "apiVersion"),
                    time: s(e, "time"),
                    subresource: s(e, "subresource"),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `metadata.managedFields` (entries with no fields are dropped).
pub fn write_managed(obj: &mut Value, entries: &[Managed]) {
    let arr: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut m = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            // an entry no write has stamped (an apply that changed nothing) has no time
            if !e.time.is_empty() {
                m["time"] = json!(e.time);
            }
            if !e.subresource.is_empty() {
                m["subresource"] = json!(e.subresource);
            }
            m
        })
        .collect();
    if arr.is_empty() {
        if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("managedFields");
        }
    } else if let Some(md) = obj
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    {
        md.insert("managedFields".into(), Value::Array(arr));
    }
}
