//! The `binding` subresource of Pods (`POST .../pods/{name}/binding`, core/v1 Binding):
//! how a scheduler assigns a Pod to a node, since an update may not change
//! `spec.nodeName` ([`crate::state::pod_update`]). As kube-apiserver's `BindingREST`:
//! the Binding is validated (`target.kind` Node or empty, `target.name` required), a Pod
//! that is being deleted, already has a node or still has scheduling gates gets 409, and otherwise it gets the node,
//! the Binding's annotations and `PodScheduled=True`, through an update (watch events,
//! resourceVersion), answered with a 201 Status.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause, invalid_field, required_field};
use crate::state::cluster::State;
use crate::state::registry::ResourceType;
use crate::state::stored::meta_str;
use crate::verbs::output::client_value;
use crate::verbs::request::Req;
use crate::verbs::update::finish_update;

/// Binds Pod `ns/name` to the node the request's Binding names.
pub fn create(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let binding = r.decode()?;
    let given = meta_str(&binding, "name");
    if given != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let kind = binding
        .pointer("/target/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut causes: Vec<Cause> = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        causes.push(invalid_field(
            "target.kind",
            format!("Unsupported value: {kind:?}: supported values: \"Node\", \"<empty>\""),
        ));
    }
    if node.is_empty() {
        causes.push(required_field("target.name"));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("Binding", "", name, causes));
    }
    let mut st = state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let refuse = |why: String| ApiError::conflict("", "pods/binding", name, &why);
    if cur.value.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(refuse(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    let assigned = cur
        .value
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !assigned.is_empty() {
        return Err(refuse(format!(
            "pod {name} is already assigned to node {assigned:?}"
        )));
    }
    if cur
        .value
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty())
    {
        return Err(refuse(format!(
            "pod {name} has non-empty .spec.schedulingGates"
        )));
    }
    let mut pod = client_value(rt, &cur.value);
    pod["spec"]["nodeName"] = json!(node);
    if let Some(a) = binding
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for (k, v) in a {
            pod["metadata"]["annotations"][k] = v.clone();
        }
    }
    scheduled(&mut pod);
    let manager = r.manager();
    finish_update(&mut st, rt, &cur, pod, "binding", r, Some(&manager))?;
    Ok((
        201,
        Bytes::from(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
                .to_string(),
        ),
    ))
}

/// Sets `PodScheduled=True` (a new transition time only when it was not True).
fn scheduled(pod: &mut Value) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conds) = pod["status"]["conditions"].as_array_mut() else {
        return;
    };
    match conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(c) => {
            if c.get("status").and_then(Value::as_str) != Some("True") {
                *c = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
            }
        }
        None => conds.push(
            json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
        ),
    }
}
