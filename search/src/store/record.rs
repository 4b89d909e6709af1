//! From a member's object to a [`Record`], and from a stored object back to a result.

use serde_json::{Map, Value};

use super::{Gvr, Key, Record};
use crate::CLUSTER_ANNOTATION;

/// What the store keeps as a record's version: its resourceVersion, with this suffix
/// for names-only copies, so that a type switching between whole objects and names
/// only is a change that gets written (same resourceVersion, other form).
const NAMES_ONLY: &str = "/metadata";

/// The stored version of an object at `resource_version`, whole or names only.
pub fn stored_version(resource_version: &str, metadata_only: bool) -> String {
    if metadata_only {
        format!("{resource_version}{NAMES_ONLY}")
    } else {
        resource_version.to_string()
    }
}

/// The resourceVersion part of a stored version.
pub fn resource_version_of(stored: &str) -> &str {
    stored.strip_suffix(NAMES_ONLY).unwrap_or(stored)
}

/// Removes NUL characters from every string and key: PostgreSQL's jsonb and text refuse
/// them, and both stores must hold the same thing.
fn without_nul(v: &mut Value) {
    match v {
        Value::String(s) if s.contains('\0') => *s = s.replace('\0', ""),
        Value::Array(a) => a.iter_mut().for_each(without_nul),
        Value::Object(o) if o.keys().any(|k| k.contains('\0')) => {
            let old = std::mem::take(o);
            for (k, mut x) in old {
                without_nul(&mut x);
                o.insert(k.replace('\0', ""), x);
            }
        }
        Value::Object(o) => o.values_mut().for_each(without_nul),
        _ => {}
    }
}

impl Record {
    /// The record of an object of `gvr` in `cluster`: without `managedFields` (and with
    /// `metadata_only`, without anything but apiVersion, kind and metadata); the owner is
    /// the controller owner reference, else the first. `None` without a name.
    pub fn from_object(
        cluster: &str,
        gvr: &Gvr,
        obj: &Value,
        metadata_only: bool,
    ) -> Option<Record> {
        Record::from_value(cluster, gvr, obj.clone(), metadata_only)
    }

    /// [`Record::from_object`], taking the object (the indexer's: no copy of it is made).
    pub fn from_value(
        cluster: &str,
        gvr: &Gvr,
        mut object: Value,
        metadata_only: bool,
    ) -> Option<Record> {
        let meta = object.get("metadata")?;
        let s = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default();
        let name = s("name");
        if name.is_empty() {
            return None;
        }
        let owners = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let owner = owners
            .iter()
            .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
            .or_else(|| owners.first());
        let labels = meta
            .get("labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.replace('\0', ""), v.as_str()?.replace('\0', ""))))
                    .collect()
            })
            .unwrap_or_default();
        let mut record = Record {
            cluster: cluster.to_string(),
            gvr: gvr.clone(),
            namespace: s("namespace").to_string(),
            name: name.to_string(),
            uid: s("uid").to_string(),
            resource_version: stored_version(s("resourceVersion"), metadata_only),
            owner_uid: owner
                .and_then(|o| o.get("uid"))
                .and_then(Value::as_str)
                .map(String::from),
            created_at: s("creationTimestamp")
                .parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond()),
            labels,
            object: String::new(),
        };
        trim(&mut object, metadata_only);
        // NULs are rare: the JSON text says whether there is one (serde_json writes it
        // `\u0000`; a false alarm, the six characters in a string, only costs a walk)
        record.object = object.to_string();
        if record.object.contains("\\u0000") {
            without_nul(&mut object);
            record.object = object.to_string();
        }
        Some(record)
    }

    /// Which object this is.
    pub fn key(&self) -> Key {
        Key {
            cluster: self.cluster.clone(),
            gvr: self.gvr.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The resourceVersion as a number for ordering (0 when it is not one).
    pub(crate) fn rv_num(&self) -> i64 {
        resource_version_of(&self.resource_version)
            .parse()
            .unwrap_or(0)
    }
}

/// An object as the store keeps it: without `managedFields` (and with `metadata_only`,
/// without anything but apiVersion, kind and metadata), NUL characters dropped.
pub(crate) fn cut(object: &mut Value, metadata_only: bool) {
    trim(object, metadata_only);
    without_nul(object);
}

/// [`cut`] but for the NUL characters.
fn trim(object: &mut Value, metadata_only: bool) {
    if let (true, Some(o)) = (metadata_only, object.as_object_mut()) {
        o.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
    }
    if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

/// A stored object (JSON text) as a result: annotated with its cluster.
pub(crate) fn annotated(object: &str, cluster: &str) -> Value {
    let mut v: Value = serde_json::from_str(object).unwrap_or(Value::Null);
    annotate(&mut v, cluster);
    v
}

/// Annotates an object with its cluster.
pub(crate) fn annotate(v: &mut Value, cluster: &str) {
    if let Some(o) = v.as_object_mut() {
        let meta = o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            let ann = m
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !ann.is_object() {
                *ann = Value::Object(Map::new());
            }
            if let Some(a) = ann.as_object_mut() {
                a.insert(CLUSTER_ANNOTATION.into(), Value::String(cluster.into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gvr() -> Gvr {
        Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
        }
    }

    #[test]
    fn nul_characters_never_reach_a_store() {
        let o = json!({"metadata": {"name": "x", "resourceVersion": "7",
            "labels": {"a": "b\u{0}c"}, "annotations": {"no\u{0}te": "a\u{0}b"}},
            "data": {"k": ["\u{0}"]}});
        let r = Record::from_object("c", &gvr(), &o, false).unwrap();
        assert!(!r.object.contains("\\u0000"), "{}", r.object);
        let v: Value = serde_json::from_str(&r.object).unwrap();
        assert_eq!(v["metadata"]["annotations"]["note"], "ab");
        assert_eq!(v["data"]["k"][0], "");
        assert_eq!(r.labels["a"], "bc");
    }

    #[test]
    fn the_stored_version_carries_the_form() {
        let o = json!({"metadata": {"name": "x", "resourceVersion": "42"}, "data": {"k": "v"}});
        let whole = Record::from_object("c", &gvr(), &o, false).unwrap();
        let names = Record::from_object("c", &gvr(), &o, true).unwrap();
        assert_eq!(whole.resource_version, "42");
        assert_eq!(names.resource_version, "42/metadata");
        assert_ne!(whole.resource_version, names.resource_version);
        assert_eq!((whole.rv_num(), names.rv_num()), (42, 42));
        assert_eq!(resource_version_of(&names.resource_version), "42");
        assert_eq!(stored_version("42", true), names.resource_version);
    }
}
