//! The four patch types: JSON patch, JSON merge patch, strategic merge patch
//! (merge keys of the built-in kinds), and the list semantics server-side apply shares.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// How a list field merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced as a whole.
    Atomic,
    /// A map keyed by these item fields.
    Map(Vec<String>),
    /// A set of scalars.
    Set,
}

/// How server-side apply merges a built-in list field, by field name (as the
/// `+listType` / `+listMapKey` tags of k8s.io/api say; a port list by what its items
/// hold). Node taints are `+listType=atomic`.
pub fn builtin_list_kind(field: &str, items: &[Value]) -> ListKind {
    let key = |k: &str| ListKind::Map(vec![k.to_string()]);
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => key("name"),
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                ListKind::Map(vec!["containerPort".into(), "protocol".into()])
            } else {
                ListKind::Map(vec!["port".into(), "protocol".into()])
            }
        }
        "volumeMounts" => key("mountPath"),
        "volumeDevices" => key("devicePath"),
        "conditions" | "addresses" => key("type"),
        "hostAliases" => key("ip"),
        "ownerReferences" => key("uid"),
        "topologySpreadConstraints" => {
            ListKind::Map(vec!["topologyKey".into(), "whenUnsatisfiable".into()])
        }
        "finalizers" => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// How a strategic merge patch merges a built-in list field: by the `patchStrategy` and
/// `patchMergeKey` struct tags of k8s.io/api, which name one key (never `protocol`),
/// given the field (`parent`) whose object or list items hold it. A list without a
/// patch strategy is replaced.
pub fn smp_list_kind(parent: &str, field: &str) -> ListKind {
    let key = |k: &str| ListKind::Map(vec![k.to_string()]);
    let container = matches!(
        parent,
        "containers" | "initContainers" | "ephemeralContainers"
    );
    match field {
        // PodSpec
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "resourceClaims" => {
            key("name")
        }
        "imagePullSecrets" if parent == "spec" => key("name"),
        "hostAliases" => key("ip"),
        "topologySpreadConstraints" => key("topologyKey"),
        // Container
        "env" => key("name"),
        "volumeMounts" => key("mountPath"),
        "volumeDevices" => key("devicePath"),
        "ports" if container => key("containerPort"),
        // ServiceSpec
        "ports" if parent == "spec" => key("port"),
        // the status of pods, nodes, namespaces, workloads...
        "conditions" => key("type"),
        // NodeStatus
        "addresses" if parent == "status" => key("type"),
        // ObjectMeta
        "ownerReferences" => key("uid"),
        "finalizers" if parent == "metadata" => ListKind::Set,
        // NodeSpec.taints, ServiceAccount.imagePullSecrets, NamespaceSpec.finalizers,
        // Endpoints' ports and addresses and every other list: no patch strategy
        _ => ListKind::Atomic,
    }
}

/// Applies an RFC 6902 JSON patch, all or nothing. As in kube-apiserver (evanphx/json-patch),
/// a `test` for `null` passes when the key is missing from an existing object: clients
/// rely on it to add a list only if there is none yet (kube-runtime's finalizer helper
/// tests `/metadata/finalizers` for `null` before adding it).
pub fn json_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    let p: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
    let mut out = target.clone();
    for op in p.0 {
        if let json_patch::PatchOperation::Test(t) = &op
            && t.value.is_null()
            && missing_from_existing_parent(&out, t.path.as_str())
        {
            continue;
        }
        json_patch::patch(&mut out, &json_patch::Patch(vec![op])).map_err(|e| {
            ApiError::invalid_patch(format!(
                "the server rejected our request due to an error in our request: {e}"
            ))
        })?;
    }
    Ok(out)
}

/// Whether `pointer` names a key absent from an object that does exist.
fn missing_from_existing_parent(doc: &Value, pointer: &str) -> bool {
    let Some((parent, _)) = pointer.rsplit_once('/') else {
        return false;
    };
    doc.pointer(pointer).is_none() && doc.pointer(parent).is_some_and(Value::is_object)
}

/// Applies an RFC 7386 JSON merge patch.
pub fn merge_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    if !patch.is_object() {
        return Err(ApiError::bad_request("a merge patch must be a JSON object"));
    }
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    Ok(out)
}

/// Applies a strategic merge patch using the built-in merge keys.
pub fn strategic_merge_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    let (Value::Object(t), Value::Object(p)) = (target, patch) else {
        return Err(ApiError::bad_request(
            "a strategic merge patch must be a JSON object",
        ));
    };
    Ok(smp_map(t.clone(), p, "")
        .map(Value::Object)
        .unwrap_or(Value::Null))
}

/// Patches a map; `parent` is the field that holds it (a list's, for a list item).
fn smp_map(
    mut target: Map<String, Value>,
    patch: &Map<String, Value>,
    parent: &str,
) -> Option<Map<String, Value>> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return None,
        Some("replace") => {
            let mut p = patch.clone();
            p.remove("$patch");
            return Some(strip_directives(p));
        }
        _ => {}
    }
    let retain: Option<Vec<String>> = patch.get("$retainKeys").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    });
    for (k, v) in patch {
        if k.starts_with('$') {
            if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
                && let (Some(Value::Array(list)), Value::Array(del)) = (target.get_mut(field), v)
            {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(pm) => {
                let base = match target.remove(k) {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                if let Some(m) = smp_map(base, pm, k) {
                    target.insert(k.clone(), Value::Object(m));
                }
            }
            Value::Array(items) => {
                let kind = smp_list_kind(parent, k);
                let merged = match (kind, target.remove(k)) {
                    (ListKind::Map(keys), Some(Value::Array(base))) => {
                        smp_list(base, items, &keys, k)
                    }
                    (ListKind::Set, Some(Value::Array(mut base))) => {
                        for i in items {
                            if !base.contains(i) {
                                base.push(i.clone());
                            }
                        }
                        base
                    }
                    (ListKind::Map(_), _) => items
                        .iter()
                        .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                        .map(|i| match i {
                            Value::Object(m) => Value::Object(strip_directives(m.clone())),
                            other => other.clone(),
                        })
                        .collect(),
                    _ => items.clone(),
                };
                target.insert(k.clone(), Value::Array(merged));
            }
            scalar => {
                target.insert(k.clone(), scalar.clone());
            }
        }
    }
    if let Some(keep) = retain {
        target.retain(|k, _| keep.contains(k));
    }
    Some(target)
}

fn strip_directives(mut m: Map<String, Value>) -> Map<String, Value> {
    m.retain(|k, _| !k.starts_with('$'));
    m
}

/// True when a list item carries the same values for every key field.
pub fn same_key(a: &Value, b: &Value, keys: &[String]) -> bool {
    keys.iter().all(|k| {
        let (x, y) = (a.get(k), b.get(k));
        // protocol defaults to TCP in built-in port lists
        if k == "protocol" {
            let d = Value::String("TCP".into());
            x.unwrap_or(&d) == y.unwrap_or(&d)
        } else {
            x == y
        }
    })
}

fn smp_list(mut base: Vec<Value>, patch: &[Value], keys: &[String], field: &str) -> Vec<Value> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return patch
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .cloned()
            .collect();
    }
    for item in patch {
        let pos = base.iter().position(|b| same_key(b, item, keys));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, item) {
            (Some(i), _) if delete => {
                base.remove(i);
            }
            (None, _) if delete => {}
            (Some(i), Value::Object(pm)) => {
                if let Value::Object(bm) = base[i].take() {
                    base[i] = smp_map(bm, pm, field)
                        .map(Value::Object)
                        .unwrap_or(Value::Null);
                }
            }
            (None, Value::Object(pm)) => base.push(Value::Object(strip_directives(pm.clone()))),
            (_, other) => base.push(other.clone()),
        }
    }
    base.retain(|v| !v.is_null());
    base
}

impl ApiError {
    /// 422 for a patch that cannot be applied (kube-apiserver answers `Invalid`).
    pub fn invalid_patch(message: String) -> Self {
        let mut e = ApiError::bad_request(message);
        e.code = 422;
        e.reason = "Invalid";
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn smp_merges_containers_by_name_and_keeps_others() {
        let base = json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}});
        let patch = json!({"spec": {"containers": [{"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}});
        let out = strategic_merge_patch(&base, &patch).unwrap();
        assert_eq!(
            out,
            json!({"spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}, {"name": "c", "image": "c:1"}]}})
        );
    }

    #[test]
    fn smp_directives() {
        let base = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]}, "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
        let patch = json!({
            "metadata": {"labels": {"a": null}, "finalizers": ["y"], "$deleteFromPrimitiveList/finalizers": ["x"]},
            "spec": {"ports": [{"port": 443, "$patch": "delete"}], "$setElementOrder/ports": [{"port": 80}]}
        });
        let out = strategic_merge_patch(&base, &patch).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2"}, "finalizers": ["y"]}, "spec": {"ports": [{"port": 80, "name": "http"}]}})
        );
        let replace = json!({"spec": {"$patch": "replace", "x": 1}});
        assert_eq!(
            strategic_merge_patch(&base, &replace).unwrap()["spec"],
            json!({"x": 1})
        );
    }

    #[test]
    fn merge_and_json_patch() {
        let base = json!({"a": {"b": 1, "c": [1, 2]}});
        assert_eq!(
            merge_patch(&base, &json!({"a": {"b": null, "c": [3]}})).unwrap(),
            json!({"a": {"c": [3]}})
        );
        let p =
            json!([{"op": "add", "path": "/a/d", "value": true}, {"op": "remove", "path": "/a/b"}]);
        assert_eq!(
            json_patch(&base, &p).unwrap(),
            json!({"a": {"c": [1, 2], "d": true}})
        );
        let bad = json!([{"op": "remove", "path": "/nope"}]);
        assert_eq!(json_patch(&base, &bad).unwrap_err().code, 422);
        // test-for-null passes on a missing key of an existing object (evanphx/json-patch)
        let add_if_none = json!([{"op": "test", "path": "/a/f", "value": null}, {"op": "add", "path": "/a/f", "value": ["x"]}]);
        assert_eq!(
            json_patch(&base, &add_if_none).unwrap()["a"]["f"],
            json!(["x"])
        );
        // but not when the key is there, nor below a missing object; all or nothing
        let there = json!([{"op": "test", "path": "/a/b", "value": null}, {"op": "add", "path": "/z", "value": 1}]);
        assert_eq!(json_patch(&base, &there).unwrap_err().code, 422);
        let deep = json!([{"op": "test", "path": "/x/y", "value": null}]);
        assert_eq!(json_patch(&base, &deep).unwrap_err().code, 422);
        assert_eq!(json_patch(&base, &json!({"op": 1})).unwrap_err().code, 400);
    }
}
