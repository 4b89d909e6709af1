//! The store's units: a stored object (its JSON encoded once, at write time) and a
//! committed change, the event that watches replay and the journal appends.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::state::registry::GroupResource;

/// A stored object with its JSON encoding computed once at write time.
#[derive(Debug)]
pub struct StoredObj {
    /// The object (apiVersion of the storage version).
    pub value: Value,
    /// `value` serialized.
    pub json: Bytes,
}

impl StoredObj {
    /// Wraps and serializes a value.
    pub fn new(value: Value) -> Arc<Self> {
        let json = Bytes::from(serde_json::to_vec(&value).expect("JSON values serialize"));
        Arc::new(StoredObj { value, json })
    }

    /// `metadata.namespace` or "".
    pub fn namespace(&self) -> &str {
        meta_str(&self.value, "namespace")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        meta_str(&self.value, "name")
    }
}

/// A string field of `metadata`, or "".
pub fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The strings of a JSON array (other items skipped); empty when it is not an array.
pub fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED
    Added,
    /// MODIFIED
    Modified,
    /// DELETED
    Deleted,
}

impl EventType {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Which resource.
    pub gr: GroupResource,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for DELETED: the last state, with the delete's RV).
    pub obj: Arc<StoredObj>,
    /// The object before the change.
    pub prev: Option<Arc<StoredObj>>,
}

/// The JSON pointer of a dotted field path (`spec.replicas` or `.spec.replicas`, as
/// CRDs write scale paths): `/spec/replicas`.
pub fn json_pointer(dotted: &str) -> String {
    format!("/{}", dotted.trim_start_matches('.').replace('.', "/"))
}
