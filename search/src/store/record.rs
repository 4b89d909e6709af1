//! From a member's object to a [`Record`], and from a stored object back to a result.

use serde_json::{Map, Value};

use super::{Gvr, Key, Record};
use crate::CLUSTER_ANNOTATION;

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
        let meta = obj.get("metadata")?;
        let s = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default();
        let name = s("name");
        if name.is_empty() {
            return None;
        }
        let mut object = match (metadata_only, obj.as_object()) {
            (true, Some(o)) => Value::Object(
                o.iter()
                    .filter(|(k, _)| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            _ => obj.clone(),
        };
        if let Some(m) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
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
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        Some(Record {
            cluster: cluster.to_string(),
            gvr: gvr.clone(),
            namespace: s("namespace").to_string(),
            name: name.to_string(),
            uid: s("uid").to_string(),
            resource_version: s("resourceVersion").to_string(),
            owner_uid: owner
                .and_then(|o| o.get("uid"))
                .and_then(Value::as_str)
                .map(String::from),
            created_at: s("creationTimestamp")
                .parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond()),
            labels,
            object: object.to_string(),
        })
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
        self.resource_version.parse().unwrap_or(0)
    }
}

/// A stored object (JSON text) as a result: annotated with its cluster.
pub(crate) fn annotated(object: &str, cluster: &str) -> Value {
    let mut v: Value = serde_json::from_str(object).unwrap_or(Value::Null);
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
    v
}
