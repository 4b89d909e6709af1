//! The `scale` subresource (autoscaling/v1 Scale) of Deployments, ReplicaSets,
//! StatefulSets and of custom resources whose CRD declares one (`kubectl scale`,
//! HorizontalPodAutoscalers). GET reads the Scale off the object; PUT and PATCH set the
//! object's replicas through an update of the object (its validation, generation and
//! watch events), and answer the Scale after it, as kube-apiserver does.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, invalid_field};
use crate::state::cluster::State;
use crate::state::patch::{json_patch, merge_patch};
use crate::state::registry::{ResourceType, ScalePaths};
use crate::state::selectors::LabelSelector;
use crate::state::stored::{json_pointer, meta_str};
use crate::verbs::output::client_value;
use crate::verbs::request::Req;
use crate::verbs::update::{finish_update, merge_for_update};

/// The paths of the built-in kinds that serve `scale`.
pub fn builtin(group: &str, plural: &str) -> Option<ScalePaths> {
    matches!(
        (group, plural),
        ("apps", "deployments" | "replicasets" | "statefulsets")
    )
    .then(|| ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    })
}

/// The Scale of `obj`.
fn scale_of(paths: &ScalePaths, obj: &Value) -> Value {
    let int = |p: &str| obj.pointer(&json_pointer(p)).and_then(Value::as_i64);
    let selector = match &paths.label_selector {
        Some(p) => obj
            .pointer(&json_pointer(p))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        None => LabelSelector::from_json(obj.pointer("/spec/selector"))
            .map(|sel| k8s_validation::selector::display(&sel.0))
            .unwrap_or_default(),
    };
    let meta = &obj["metadata"];
    let mut m = json!({});
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k) {
            m[k] = v.clone();
        }
    }
    let mut status = json!({"replicas": int(&paths.status_replicas).unwrap_or(0)});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": int(&paths.spec_replicas).unwrap_or(0)},
        "status": status,
    })
}

fn paths(rt: &ResourceType) -> ApiResult<&ScalePaths> {
    rt.scale
        .as_ref()
        .ok_or_else(|| ApiError::not_found(&rt.group, &format!("{}/scale", rt.plural), ""))
}

/// GET …/scale.
pub fn get(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
) -> ApiResult<(u16, Bytes)> {
    let paths = paths(rt)?;
    let st = state.lock();
    let obj = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let scale = scale_of(paths, &client_value(rt, &obj.value));
    Ok((200, Bytes::from(scale.to_string())))
}

/// PUT or PATCH …/scale: the object's replicas set to the new Scale's.
pub fn write(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    patch: bool,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let paths = paths(rt)?;
    let body = if patch {
        const ALLOWED: &[&str] = &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ];
        if !ALLOWED.contains(&r.content_type.as_str()) {
            return Err(ApiError::unsupported_media(&r.content_type, ALLOWED));
        }
        Some(
            serde_json::from_slice::<Value>(&r.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
        )
    } else {
        None
    };
    let mut st = state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let served = client_value(rt, &cur.value);
    let old = scale_of(paths, &served);
    let new = match (&body, r.content_type.as_str()) {
        (None, _) => r.decode()?,
        (Some(p), "application/json-patch+json") => json_patch(&old, p)?,
        // a Scale has no list a strategic merge would treat otherwise
        (Some(p), _) => merge_patch(&old, p)?,
    };
    let given = meta_str(&new, "name");
    if !given.is_empty() && given != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    let rv = meta_str(&new, "resourceVersion");
    if !rv.is_empty() && rv != meta_str(&cur.value, "resourceVersion") {
        return Err(ApiError::modified(&rt.group, &rt.plural, name));
    }
    let replicas = match new.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) if n >= 0 => n,
            _ => {
                return Err(ApiError::invalid(
                    "Scale",
                    "autoscaling",
                    name,
                    vec![invalid_field(
                        "spec.replicas",
                        format!("Invalid value: {v}: must be greater than or equal to 0"),
                    )],
                ));
            }
        },
    };
    let mut obj = served;
    set(&mut obj, &paths.spec_replicas, json!(replicas));
    let obj = merge_for_update(rt, &cur.value, obj, "");
    let manager = r.manager();
    finish_update(&mut st, rt, &cur, obj, "", r, Some(&manager))?;
    let after = st
        .store
        .get(&rt.group_resource(), ns, name)
        .map(|o| client_value(rt, &o.value))
        .unwrap_or_default();
    // a dry run leaves the object as it was: its Scale is the one it would have
    let mut scale = scale_of(paths, &after);
    scale["spec"]["replicas"] = json!(replicas);
    Ok((200, Bytes::from(scale.to_string())))
}

/// Sets the value at a `.a.b` path, making the objects on the way.
fn set(obj: &mut Value, path: &str, v: Value) {
    let mut cur = obj;
    let segs: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i + 1 == segs.len() {
            cur[*seg] = v;
            return;
        }
        cur = &mut cur[*seg];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_makes_the_path() {
        let mut v = json!({"spec": {"x": 1}});
        set(&mut v, ".spec.replicas", json!(3));
        set(&mut v, ".status.deep.n", json!(2));
        assert_eq!(
            v,
            json!({"spec": {"x": 1, "replicas": 3}, "status": {"deep": {"n": 2}}})
        );
    }
}
