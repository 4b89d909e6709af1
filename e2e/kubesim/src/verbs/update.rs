//! PUT: update of the main resource, `/status`, or a namespace's `/finalize`, with
//! optimistic concurrency, server-owned metadata kept and generation maintained.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, invalid_field};
use crate::state::cluster::State;
use crate::state::deletion::{finalizers, store_update};
use crate::state::meta::{annotations_changed, now_rfc3339, spec_changed, validate_metadata};
use crate::state::registry::ResourceType;
use crate::state::stored::{StoredObj, meta_str};
use crate::state::{convert, kinds, ssa};
use crate::verbs::admit::{
    admit_schema, admit_status_schema, check_namespace, check_type, dry_run, shape,
    storage_api_version, update_req,
};
use crate::verbs::output::output;
use crate::verbs::request::Req;

/// PUT: update (main resource, `/status`, or a namespace's `/finalize`).
pub fn update(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let mut body = r.decode()?;
    check_type(rt, &body)?;
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    let body_name = meta_str(&body, "name");
    if body_name.is_empty() {
        body["metadata"]["name"] = json!(name);
    } else if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    check_namespace(rt, &mut body, ns)?;
    let mut st = state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    // as kube-apiserver's store: the body's uid is a precondition, checked before the
    // resourceVersion is
    let body_uid = meta_str(&body, "uid");
    let cur_uid = meta_str(&cur.value, "uid");
    if !body_uid.is_empty() && body_uid != cur_uid {
        return Err(ApiError::uid_precondition(rt, ns, name, body_uid, cur_uid));
    }
    let body_rv = meta_str(&body, "resourceVersion");
    if body_rv.is_empty() && !allows_unconditional_update(rt) {
        return Err(ApiError::resource_version_required(rt, name));
    }
    if !body_rv.is_empty() && body_rv != meta_str(&cur.value, "resourceVersion") {
        return Err(ApiError::modified(&rt.group, &rt.plural, name));
    }
    let new = merge_for_update(rt, &cur.value, body, sub);
    let manager = r.manager();
    finish_update(&mut st, rt, &cur, new, sub, r, Some(&manager))
}

/// Whether a PUT without `metadata.resourceVersion` overwrites whatever is stored (the
/// strategy's `AllowUnconditionalUpdate`): not for custom resources nor for
/// CustomResourceDefinitions (main resource and `/status`), whose strategies refuse it.
fn allows_unconditional_update(rt: &ResourceType) -> bool {
    let crd = rt.group == "apiextensions.k8s.io" && rt.plural == "customresourcedefinitions";
    rt.crd.is_none() && !crd
}

/// The object an update writes: server-owned metadata and (per subresource) status or spec kept.
pub fn merge_for_update(rt: &ResourceType, old: &Value, body: Value, sub: &str) -> Value {
    match sub {
        "status" => {
            let mut new = old.clone();
            match body.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            new
        }
        "finalize" => {
            let mut new = old.clone();
            new["spec"]["finalizers"] = body
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            new
        }
        _ => {
            let mut new = body;
            for k in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match old["metadata"].get(k) {
                    Some(v) => new["metadata"][k] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(k);
                        }
                    }
                }
            }
            // as kube-apiserver's field manager: a list of entries in the body is taken
            // as the object's managed fields (how a client hands ownership over, or
            // strips it: `[{}]`); an empty or absent one keeps the stored list, so a
            // client that does not know the field cannot drop it
            let given = new
                .pointer("/metadata/managedFields")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_object));
            if !given {
                match old["metadata"].get("managedFields") {
                    Some(v) => new["metadata"]["managedFields"] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove("managedFields");
                        }
                    }
                }
            }
            if rt.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            new
        }
    }
}

/// Validates, admits and stores an update of `cur` to `new` (shared by PUT, PATCH and
/// apply); `record_as` records the write's field ownership for that manager. A dry run,
/// or an update refused after a Service's addresses were allocated, leaves the
/// allocations as they were.
pub fn finish_update(
    st: &mut State,
    rt: &ResourceType,
    cur: &StoredObj,
    new: Value,
    sub: &str,
    r: &mut Req,
    record_as: Option<&str>,
) -> ApiResult<(u16, Bytes)> {
    let before = (rt.group.is_empty() && rt.plural == "services").then(|| st.ipam.clone());
    let out = admit_and_store(st, rt, cur, new, sub, r, record_as);
    if let Some(before) = before
        && (out.is_err() || dry_run(r))
    {
        st.ipam = before;
    }
    out
}

fn admit_and_store(
    st: &mut State,
    rt: &ResourceType,
    cur: &StoredObj,
    mut new: Value,
    sub: &str,
    r: &mut Req,
    record_as: Option<&str>,
) -> ApiResult<(u16, Bytes)> {
    let old_shown = convert::from_storage(rt, &cur.value);
    let old: &Value = &old_shown;
    new["apiVersion"] = json!(storage_api_version(rt));
    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    let causes = validate_metadata(rt.name_rule, &new);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &rt.kind,
            &rt.group,
            meta_str(old, "name"),
            causes,
        ));
    }
    if sub == "status" {
        admit_status_schema(rt, &mut new, r)?;
    } else {
        admit_schema(rt, &mut new, r)?;
    }
    if sub.is_empty() {
        kinds::admit_update(rt, &mut new);
    }
    kinds::on_update(st, rt, old, &mut new, sub)?;
    crate::state::rbac::no_escalation(&st.store, rt, &new, Some(old), &r.user)?;
    let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
    if deleting {
        let before = finalizers(old);
        if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                meta_str(old, "name"),
                vec![invalid_field(
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                    ),
                )],
            ));
        }
    }
    if rt.generation
        && (spec_changed(old, &new, rt.status_subresource)
            || (deployment_annotations_bump(rt, sub) && annotations_changed(old, &new)))
    {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        new["metadata"]["generation"] = json!(g + 1);
    }
    let now = now_rfc3339();
    if let Some(manager) = record_as {
        let av = rt.api_version();
        let req = update_req(rt, manager, &now, &av, sub);
        ssa::record_update(old, &mut new, shape(rt), &req);
    }
    if new == *old {
        return Ok((200, output(rt, &cur.value, r)));
    }
    let new = convert::to_storage(rt, new);
    if dry_run(r) {
        return Ok((200, output(rt, &new, r)));
    }
    let stored = store_update(st, rt, new);
    Ok((200, output(rt, &stored, r)))
}

/// kube-apiserver's Deployment strategy (and no other kind's) also bumps `generation`
/// when the annotations change on an update of the Deployment itself: they are copied
/// to its ReplicaSets. Its status strategy keeps the stored annotations.
fn deployment_annotations_bump(rt: &ResourceType, sub: &str) -> bool {
    rt.group == "apps" && rt.plural == "deployments" && sub.is_empty()
}
