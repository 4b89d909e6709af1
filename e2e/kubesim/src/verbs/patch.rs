//! PATCH: JSON patch, merge patch, strategic merge patch and server-side apply.

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Attributes, authorize};
use crate::state::cluster::State;
use crate::state::meta::now_rfc3339;
use crate::state::patch::{json_patch, merge_patch, strategic_merge_patch};
use crate::state::registry::ResourceType;
use crate::state::ssa::ApplyRequest;
use crate::state::ssa::fields::Scope;
use crate::state::stored::meta_str;
use crate::state::{convert, ssa};
use crate::verbs::admit::{check_namespace, check_type, scope, shape};
use crate::verbs::create::create_locked;
use crate::verbs::output::client_value;
use crate::verbs::request::Req;
use crate::verbs::update::{finish_update, merge_for_update};

/// PATCH: json-patch, merge-patch, strategic-merge-patch, apply.
pub fn patch(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let ct = r.content_type.clone();
    if ct == "application/apply-patch+yaml" {
        return apply(state, rt, ns, name, sub, r);
    }
    let mut allowed = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    if rt.crd.is_none() {
        allowed.push("application/strategic-merge-patch+json");
    }
    if !allowed.contains(&ct.as_str()) {
        return Err(ApiError::unsupported_media(&ct, &allowed));
    }
    let p: Value = serde_json::from_slice(&r.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut st = state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let base = client_value(rt, &cur.value);
    let patched = match ct.as_str() {
        "application/json-patch+json" => json_patch(&base, &p)?,
        "application/merge-patch+json" => merge_patch(&base, &p)?,
        _ => strategic_merge_patch(&base, &p)?,
    };
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patch removed the whole object"));
    }
    let cur_rv = meta_str(&cur.value, "resourceVersion");
    let new_rv = meta_str(&patched, "resourceVersion");
    if !new_rv.is_empty() && new_rv != cur_rv {
        return Err(ApiError::conflict(
            &rt.group,
            &rt.plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    if meta_str(&patched, "name") != name {
        return Err(ApiError::bad_request(format!(
            "the patch may not change the object's name ({name})"
        )));
    }
    check_type(rt, &patched)?;
    let new = merge_for_update(rt, &cur.value, patched, sub);
    let manager = r.manager();
    finish_update(&mut st, rt, &cur, new, sub, r, Some(&manager))
}

fn apply(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let manager = match r.q("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => {
            return Err(ApiError::bad_request(
                "PATCH: fieldManager is required for apply requests",
            ));
        }
    };
    let mut applied = r.decode()?;
    check_type(rt, &applied)?;
    if meta_str(&applied, "name") != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(&applied, "name")
        )));
    }
    check_namespace(rt, &mut applied, ns)?;
    let now = now_rfc3339();
    let av = rt.api_version();
    let req = ApplyRequest {
        manager: &manager,
        api_version: &av,
        force: r.flag("force"),
        now: &now,
        subresource: if sub == "status" { "status" } else { "" },
        scope: scope(rt, sub),
    };
    let mut st = state.lock();
    let conflict =
        |c: Vec<(String, String)>| ApiError::apply_conflict(&rt.group, &rt.plural, name, &c);
    match st.store.get(&rt.group_resource(), ns, name) {
        None => {
            if !sub.is_empty() {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
            }
            // an apply that creates needs create permission too (kube-apiserver's patch
            // handler authorizes the create it turns into)
            let create = Attributes {
                verb: "create",
                group: &rt.group,
                resource: &rt.plural,
                subresource: "",
                namespace: ns,
                name,
                path: "",
            };
            if !authorize(&st.store, &r.user, &create) {
                return Err(ApiError::forbidden(&r.user.name, &create));
            }
            let mut base = json!({"apiVersion": av, "kind": rt.kind, "metadata": {"name": name}});
            if rt.namespaced {
                base["metadata"]["namespace"] = json!(ns);
            }
            let req = ApplyRequest {
                scope: Scope::All,
                ..req
            };
            let obj = ssa::apply(&base, &applied, shape(rt), &req).map_err(conflict)?;
            create_locked(&mut st, rt, obj, r, Some(()))
        }
        Some(cur) => {
            let shown = convert::from_storage(rt, &cur.value);
            let new = ssa::apply(&shown, &applied, shape(rt), &req).map_err(conflict)?;
            finish_update(&mut st, rt, &cur, new, sub, r, None)
        }
    }
}
