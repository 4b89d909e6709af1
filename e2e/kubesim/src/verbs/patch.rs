//! PATCH: JSON patch, merge patch, strategic merge patch and server-side apply.

use std::sync::Arc;

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
use crate::state::stored::{StoredObj, meta_str};
use crate::state::{convert, ssa};
use crate::verbs::admit::{check_type, scope, shape};
use crate::verbs::create::create_locked;
use crate::verbs::output::client_value;
use crate::verbs::request::Req;
use crate::verbs::update::{finish_update, merge_for_update};

/// The 409 of a PATCH whose object changed while its webhooks decided (the HTTP layer
/// admits it again on the new version first, a few times).
pub const ADMISSION_RACE: &str = "the object changed while admission webhooks were deciding on this patch; please apply your changes to the latest version and try again";

/// What a PATCH writes: the stored object and its new state, or (an apply that
/// creates) a new object.
enum Outcome {
    Update {
        cur: Arc<StoredObj>,
        new: Value,
        manager: Option<String>,
    },
    Create(Value),
}

/// PATCH: json-patch, merge-patch, strategic-merge-patch, apply.
pub fn patch(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let mut st = state.lock();
    let out = outcome(&st, rt, ns, name, sub, r)?;
    if let Some(admitted) = &r.admitted {
        let now = match &out {
            Outcome::Update { cur, .. } => {
                Some(meta_str(&cur.value, "resourceVersion").to_string())
            }
            Outcome::Create(_) => None,
        };
        if now != *admitted {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                ADMISSION_RACE,
            ));
        }
    }
    match out {
        Outcome::Update { cur, new, manager } => {
            finish_update(&mut st, rt, &cur, new, sub, r, manager.as_deref())
        }
        Outcome::Create(obj) => create_locked(&mut st, rt, obj, r, Some(())),
    }
}

/// What validating webhooks are asked about a PATCH, as kube-apiserver's patch
/// handler admits it: an UPDATE of the stored object to the patched one, or the CREATE
/// an apply turns into; (operation, old object, new object). The PATCH itself then
/// runs as usual (and meets any change made meanwhile).
pub fn preview(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &Req,
) -> ApiResult<(&'static str, Option<Value>, Value)> {
    let st = state.lock();
    Ok(match outcome(&st, rt, ns, name, sub, r)? {
        Outcome::Update { cur, new, .. } => ("UPDATE", Some(cur.value.clone()), new),
        Outcome::Create(obj) => ("CREATE", None, obj),
    })
}

fn outcome(
    st: &State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &Req,
) -> ApiResult<Outcome> {
    let ct = r.content_type.as_str();
    if ct == "application/apply-patch+yaml" {
        return apply(st, rt, ns, name, sub, r);
    }
    let mut allowed = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    if rt.crd.is_none() {
        allowed.push("application/strategic-merge-patch+json");
    }
    if !allowed.contains(&ct) {
        return Err(ApiError::unsupported_media(ct, &allowed));
    }
    let p: Value = serde_json::from_slice(&r.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let base = client_value(rt, &cur.value);
    let patched = match ct {
        "application/json-patch+json" => json_patch(&base, &p)?,
        "application/merge-patch+json" => merge_patch(&base, &p)?,
        _ => strategic_merge_patch(&base, &p)?,
    };
    let Some(mut patched) = patched.is_object().then_some(patched) else {
        return Err(ApiError::bad_request("the patch removed the whole object"));
    };
    // as kube-apiserver's patch handler checks the patched object: its namespace, then
    // its name (`checkName`), against the request's
    namespace_matches_request(rt, &mut patched, ns)?;
    let patched_name = meta_str(&patched, "name");
    if patched_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({patched_name}) does not match the name on the URL ({name})"
        )));
    }
    let cur_rv = meta_str(&cur.value, "resourceVersion");
    let new_rv = meta_str(&patched, "resourceVersion");
    if !new_rv.is_empty() && new_rv != cur_rv {
        return Err(ApiError::modified(&rt.group, &rt.plural, name));
    }
    check_type(rt, &patched)?;
    uid_unchanged(rt, &cur.value, &patched)?;
    let new = merge_for_update(rt, &cur.value, patched, sub);
    Ok(Outcome::Update {
        cur,
        new,
        manager: Some(r.manager()),
    })
}

fn apply(
    st: &State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &Req,
) -> ApiResult<Outcome> {
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
    namespace_matches_request(rt, &mut applied, ns)?;
    let now = now_rfc3339();
    let av = rt.api_version();
    // an applied configuration is converted to the schema's types first: a field the
    // CRD's schema does not declare fails the apply (kube-apiserver answers 500 with
    // this message, kubernetes/kubernetes#139253), where a create or update prunes it
    if let Some(schema) = &rt.schema {
        let mut typed = applied.clone();
        if let Some(field) = crate::state::crd::prune_and_default(&mut typed, schema).first() {
            return Err(ApiError::internal(format!(
                "failed to create typed patch object ({ns}/{name}; {av}, Kind={}): .{field}: field not declared in schema",
                rt.kind
            )));
        }
    }
    let req = ApplyRequest {
        manager: &manager,
        api_version: &av,
        force: r.flag("force"),
        now: &now,
        subresource: if sub == "status" { "status" } else { "" },
        scope: scope(rt, sub),
    };
    let conflict =
        |c: Vec<(String, String)>| ApiError::apply_conflict(&rt.group, &rt.plural, name, &c);
    match st.store.get(&rt.group_resource(), ns, name) {
        None => {
            if !sub.is_empty() {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
            }
            let uid = meta_str(&applied, "uid");
            if !uid.is_empty() {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    &format!(
                        "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                    ),
                ));
            }
            // (a resourceVersion in an apply that creates is ignored, as kube-apiserver's
            // create-on-update path ignores it: `create_locked` drops it)
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
            Ok(Outcome::Create(obj))
        }
        Some(cur) => {
            // a resourceVersion in the applied configuration is a precondition
            let wanted = meta_str(&applied, "resourceVersion");
            if !wanted.is_empty() && wanted != meta_str(&cur.value, "resourceVersion") {
                return Err(ApiError::modified(&rt.group, &rt.plural, name));
            }
            uid_unchanged(rt, &cur.value, &applied)?;
            let shown = convert::from_storage(rt, &cur.value);
            let new =
                ssa::apply_to_existing(&shown, &applied, shape(rt), &req).map_err(conflict)?;
            Ok(Outcome::Update {
                cur,
                new,
                manager: None,
            })
        }
    }
}

/// kube-apiserver's `EnsureObjectNamespaceMatchesRequestNamespace`, which its patch
/// handler runs on the patched object: no namespace takes the request's, a
/// cluster-scoped object's is cleared, another one is a 400.
fn namespace_matches_request(rt: &ResourceType, obj: &mut Value, ns: &str) -> ApiResult<()> {
    let want = if rt.namespaced { ns } else { "" };
    let have = meta_str(obj, "namespace").to_string();
    if have == want {
        return Ok(());
    }
    if have.is_empty() {
        // (no metadata object: the name check that follows refuses it)
        if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("namespace".into(), json!(want));
        }
        return Ok(());
    }
    if want.is_empty() {
        if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("namespace");
        }
        return Ok(());
    }
    Err(ApiError::bad_request(
        "the namespace of the provided object does not match the namespace sent on the request",
    ))
}

/// A patch may not change `metadata.uid` (none keeps the stored one): kube-apiserver's
/// update validation (`ValidateObjectMetaUpdate`) refuses it as immutable.
fn uid_unchanged(rt: &ResourceType, cur: &Value, patched: &Value) -> ApiResult<()> {
    let (old, new) = (meta_str(cur, "uid"), meta_str(patched, "uid"));
    if new.is_empty() || new == old {
        return Ok(());
    }
    Err(ApiError::invalid(
        &rt.kind,
        &rt.group,
        meta_str(cur, "name"),
        vec![crate::error::invalid_field(
            "metadata.uid",
            format!("Invalid value: {new:?}: field is immutable"),
        )],
    ))
}
