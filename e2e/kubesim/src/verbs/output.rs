//! How the verbs answer: an object at the version the client asked for, as
//! `PartialObjectMetadata` for metadata-only clients, or as a Table.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::state::convert;
use crate::state::registry::ResourceType;
use crate::state::stored::{StoredObj, meta_str};
use crate::verbs::request::Req;
use causeway_runtime::table;

/// The object at the version the client asked for.
pub fn render(rt: &ResourceType, obj: &StoredObj) -> Bytes {
    if rt.version == rt.storage_version && rt.stored_as.is_none() {
        obj.json.clone()
    } else {
        render_value(rt, &obj.value)
    }
}

/// A value at the client's version.
pub fn render_value(rt: &ResourceType, v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(&client_value(rt, v)).unwrap_or_default())
}

/// A stored value as the client's resource and version show it.
pub fn client_value(rt: &ResourceType, v: &Value) -> Value {
    let mut v = convert::from_storage(rt, v).into_owned();
    v["apiVersion"] = json!(rt.api_version());
    v
}

/// `PartialObjectMetadata` of an object.
pub fn partial(v: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v.get("metadata").cloned().unwrap_or(json!({}))})
}

/// An object as the request asked to see it: PartialObjectMetadata, a one-row Table,
/// or the object at the client's version.
pub fn output(rt: &ResourceType, v: &Value, r: &Req) -> Bytes {
    if r.metadata_only && r.table.is_none() {
        return Bytes::from(serde_json::to_vec(&partial(v)).unwrap_or_default());
    }
    if let Some(include) = r.table {
        let rv = meta_str(v, "resourceVersion").to_string();
        Bytes::from(
            serde_json::to_vec(&table::table(&[], &rt.columns, &[v], &rv, None, include))
                .unwrap_or_default(),
        )
    } else {
        render_value(rt, v)
    }
}
