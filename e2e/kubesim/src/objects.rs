//! The object verbs: get, list, create, update, patch (four types), delete,
//! deletecollection, with kube-apiserver's metadata, concurrency and status rules.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::api::Req;
use crate::error::{ApiError, ApiResult, required_field};
use crate::server::Inner;
use crate::state::cluster::State;
use crate::state::convert;
use crate::state::crd;
use crate::state::deletion::{DeleteOptions, delete_locked, finalizers, store_update};
use crate::state::kinds;
use crate::state::meta::{name_suffix, new_uid, now_rfc3339, spec_changed, validate_metadata};
use crate::state::patch;
use crate::state::registry::ResourceType;
use crate::state::selectors::LabelSelector;
use crate::state::ssa::fields::{Scope, Shape};
use crate::state::ssa::{self, ApplyRequest};
use crate::state::stored::{StoredObj, meta_str};
use crate::state::table;

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
fn client_value(rt: &ResourceType, v: &Value) -> Value {
    let mut v = convert::from_storage(rt, v).into_owned();
    v["apiVersion"] = json!(rt.api_version());
    v
}

/// `PartialObjectMetadata` of an object.
pub fn partial(v: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v.get("metadata").cloned().unwrap_or(json!({}))})
}

fn output(rt: &ResourceType, v: &Value, r: &Req) -> Bytes {
    if r.metadata_only && !r.table {
        return Bytes::from(serde_json::to_vec(&partial(v)).unwrap_or_default());
    }
    if r.table {
        let rv = meta_str(v, "resourceVersion").to_string();
        Bytes::from(serde_json::to_vec(&table::table(rt, &[v], &rv, None)).unwrap_or_default())
    } else {
        render_value(rt, v)
    }
}

fn shape(rt: &ResourceType) -> Shape<'_> {
    match &rt.schema {
        Some(s) => Shape::Schema(s),
        None => Shape::Builtin,
    }
}

fn scope(rt: &ResourceType, sub: &str) -> Scope {
    if sub == "status" {
        Scope::StatusOnly
    } else if rt.status_subresource {
        Scope::MainNoStatus
    } else {
        Scope::All
    }
}

fn storage_api_version(rt: &ResourceType) -> String {
    crate::state::registry::api_version(&rt.group, &rt.storage_version)
}

/// GET one object.
pub fn get(
    inner: &Inner,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let st = inner.state.lock();
    let obj = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    if r.table || r.metadata_only {
        return Ok((200, output(rt, &obj.value, r)));
    }
    Ok((200, render(rt, &obj)))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    start: String,
}

/// LIST with selectors, resourceVersion semantics and limit/continue.
pub fn list(
    inner: &Inner,
    rt: &ResourceType,
    ns: Option<&str>,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let ls = LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?;
    let fs = convert::field_selector(rt, r.q("fieldSelector").unwrap_or(""))?;
    let limit: usize = match r.q("limit") {
        None | Some("") => 0,
        Some(l) => l.parse().map_err(|_| {
            ApiError::bad_request(format!("limit must be a non-negative integer, got \"{l}\""))
        })?,
    };
    let token = match r.q("continue") {
        None | Some("") => None,
        Some(c) => {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .map_err(|_| {
                    ApiError::bad_request("continue key is not valid: illegal base64 data")
                })?;
            Some(
                serde_json::from_slice::<ContinueToken>(&raw)
                    .map_err(|_| ApiError::bad_request("continue key is not valid"))?,
            )
        }
    };
    let st = inner.state.lock();
    let gr = rt.group_resource();
    let rv_param = r.q("resourceVersion").unwrap_or("");
    let (items, list_rv) = if let Some(t) = &token {
        let items = st.store.list_at(&gr, ns, t.rv).map_err(|e| {
            if e.code == 410 {
                ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
            } else {
                e
            }
        })?;
        (items, t.rv)
    } else if rv_param.is_empty() || rv_param == "0" {
        (st.store.list(&gr, ns), st.store.rv())
    } else {
        let rv: u64 = rv_param.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid resource version \"{rv_param}\""))
        })?;
        match r.q("resourceVersionMatch") {
            Some("Exact") => (st.store.list_at(&gr, ns, rv)?, rv),
            Some("NotOlderThan") | None | Some("") => {
                if rv > st.store.rv() {
                    return Err(ApiError::timeout(format!(
                        "Too large resource version: {rv}, current: {}",
                        st.store.rv()
                    )));
                }
                (st.store.list(&gr, ns), st.store.rv())
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
        }
    };
    drop(st);
    let start = token.as_ref().map(|t| t.start.clone());
    let mut selected: Vec<Arc<StoredObj>> = items
        .into_iter()
        .filter(|o| {
            start
                .as_ref()
                .is_none_or(|s| format!("{}/{}", o.namespace(), o.name()) > *s)
        })
        .filter(|o| ls.matches(o.value.pointer("/metadata/labels")) && fs.matches(&o.value))
        .collect();
    let mut cont = None;
    let mut remaining = 0;
    if limit > 0 && selected.len() > limit {
        remaining = selected.len() - limit;
        selected.truncate(limit);
        let last = selected
            .last()
            .map(|o| format!("{}/{}", o.namespace(), o.name()))
            .unwrap_or_default();
        let raw = serde_json::to_vec(&ContinueToken {
            rv: list_rv,
            start: last,
        })
        .unwrap_or_default();
        cont = Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw));
    }
    if r.table {
        let values: Vec<&Value> = selected.iter().map(|o| &o.value).collect();
        let t = table::table(rt, &values, &list_rv.to_string(), cont.as_deref());
        return Ok((200, Bytes::from(serde_json::to_vec(&t).unwrap_or_default())));
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(c) = &cont {
        meta["continue"] = json!(c);
        meta["remainingItemCount"] = json!(remaining);
    }
    if r.metadata_only {
        let items: Vec<Value> = selected.iter().map(|o| partial(&o.value)).collect();
        let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items});
        return Ok((
            200,
            Bytes::from(serde_json::to_vec(&list).unwrap_or_default()),
        ));
    }
    let mut out =
        Vec::with_capacity(selected.iter().map(|o| o.json.len() + 1).sum::<usize>() + 256);
    out.extend_from_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            rt.list_kind,
            rt.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, o) in selected.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&render(rt, o));
    }
    out.extend_from_slice(b"]}");
    Ok((200, Bytes::from(out)))
}

/// Checks apiVersion and kind of a body against the URL.
fn check_type(rt: &ResourceType, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    }
    let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Object 'Kind' is missing in the request body; expected kind {}",
            rt.kind
        )));
    }
    if !av.is_empty() && av != rt.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({}) for {}",
            rt.kind, rt.plural
        )));
    }
    Ok(())
}

fn check_namespace(rt: &ResourceType, obj: &mut Value, ns: &str) -> ApiResult<()> {
    let body_ns = meta_str(obj, "namespace").to_string();
    if rt.namespaced {
        if body_ns.is_empty() {
            obj["metadata"]["namespace"] = json!(ns);
        } else if body_ns != ns {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
            )));
        }
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("namespace");
    }
    Ok(())
}

fn namespace_active(st: &State, ns: &str) -> ApiResult<()> {
    let nsobj = st
        .store
        .get(&crate::state::registry::gr("", "namespaces"), "", ns)
        .ok_or_else(|| ApiError::not_found("", "namespaces", ns))?;
    if nsobj.value.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(ApiError::forbidden_msg(format!(
            "unable to create new content in namespace {ns} because it is being terminated"
        )));
    }
    Ok(())
}

/// Schema pruning, defaulting, field validation and validation for CRD objects.
fn admit_schema(rt: &ResourceType, obj: &mut Value, r: &mut Req) -> ApiResult<()> {
    let Some(schema) = &rt.schema else {
        return Ok(());
    };
    let unknown = crd::prune_and_default(obj, schema);
    if !unknown.is_empty() {
        match r.q("fieldValidation").unwrap_or("Warn") {
            "Strict" => {
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    unknown
                        .iter()
                        .map(|u| format!("unknown field \"{u}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            "Ignore" => {}
            _ => r
                .warnings
                .extend(unknown.iter().map(|u| format!("unknown field \"{u}\""))),
        }
    }
    let causes = crd::validate(obj, schema);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &rt.kind,
            &rt.group,
            meta_str(obj, "name"),
            causes,
        ));
    }
    Ok(())
}

fn dry_run(r: &Req) -> bool {
    r.q("dryRun") == Some("All")
}

fn update_req<'a>(
    rt: &'a ResourceType,
    manager: &'a str,
    now: &'a str,
    av: &'a str,
    sub: &'a str,
) -> ApplyRequest<'a> {
    ApplyRequest {
        manager,
        api_version: av,
        force: false,
        now,
        subresource: if sub == "status" { "status" } else { "" },
        scope: scope(rt, sub),
    }
}

/// POST: create.
pub fn create(inner: &Inner, rt: &ResourceType, ns: &str, r: &mut Req) -> ApiResult<(u16, Bytes)> {
    let mut obj = r.decode()?;
    check_type(rt, &obj)?;
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    check_namespace(rt, &mut obj, ns)?;
    let mut st = inner.state.lock();
    create_locked(&mut st, rt, obj, r, None)
}

fn create_locked(
    st: &mut State,
    rt: &ResourceType,
    mut obj: Value,
    r: &mut Req,
    applied: Option<()>,
) -> ApiResult<(u16, Bytes)> {
    let mut name = meta_str(&obj, "name").to_string();
    if name.is_empty() {
        let gen_name = meta_str(&obj, "generateName").to_string();
        if gen_name.is_empty() {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                "",
                vec![required_field("metadata.name")],
            ));
        }
        name = format!("{gen_name}{}", name_suffix());
        obj["metadata"]["name"] = json!(name);
    }
    let causes = validate_metadata(rt.name_rule, &obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&rt.kind, &rt.group, &name, causes));
    }
    let ns = meta_str(&obj, "namespace").to_string();
    if rt.namespaced {
        namespace_active(st, &ns)?;
    }
    let gr = rt.group_resource();
    if st.store.get(&gr, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
    }
    let now = now_rfc3339();
    {
        let md = obj["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        md.insert("uid".into(), json!(new_uid()));
        md.insert("creationTimestamp".into(), json!(now));
        md.remove("resourceVersion");
        md.remove("deletionTimestamp");
        md.remove("deletionGracePeriodSeconds");
        md.remove("selfLink");
        if applied.is_none() {
            md.remove("managedFields");
        }
        if rt.generation {
            md.insert("generation".into(), json!(1));
        } else {
            md.remove("generation");
        }
    }
    obj["apiVersion"] = json!(storage_api_version(rt));
    if rt.status_subresource
        && rt.crd.is_some()
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    admit_schema(rt, &mut obj, r)?;
    kinds::on_create(st, rt, &mut obj)?;
    if applied.is_none() {
        let manager = r.manager();
        let av = rt.api_version();
        let req = update_req(rt, &manager, &now, &av, "");
        ssa::record_update(&json!({}), &mut obj, shape(rt), &req);
    }
    let obj = convert::to_storage(rt, obj);
    if dry_run(r) {
        kinds::on_removed(st, rt, &obj);
        return Ok((201, output(rt, &obj, r)));
    }
    let e = st.store.put(&gr, obj);
    Ok((201, output(rt, &e.obj.value, r)))
}

/// PUT: update (main resource, `/status`, or a namespace's `/finalize`).
pub fn update(
    inner: &Inner,
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
    let mut st = inner.state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let body_rv = meta_str(&body, "resourceVersion");
    if !body_rv.is_empty() && body_rv != meta_str(&cur.value, "resourceVersion") {
        return Err(ApiError::conflict(
            &rt.group,
            &rt.plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let new = merge_for_update(rt, &cur.value, body, sub);
    let manager = r.manager();
    finish_update(&mut st, rt, &cur, new, sub, r, Some(&manager))
}

/// The object an update writes: server-owned metadata and (per subresource) status or spec kept.
fn merge_for_update(rt: &ResourceType, old: &Value, body: Value, sub: &str) -> Value {
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
                "managedFields",
            ] {
                match old["metadata"].get(k) {
                    Some(v)
                        if !(k == "managedFields"
                            && new["metadata"]
                                .get(k)
                                .is_some_and(|m| m.as_array().is_some_and(|a| a.is_empty()))) =>
                    {
                        new["metadata"][k] = v.clone();
                    }
                    Some(_) => {}
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut()
                            && k != "managedFields"
                        {
                            m.remove(k);
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

fn finish_update(
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
    if sub != "status" {
        admit_schema(rt, &mut new, r)?;
    }
    kinds::on_update(st, rt, old, &mut new)?;
    let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
    if deleting {
        let before = finalizers(old);
        if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                meta_str(old, "name"),
                vec![crate::error::invalid_field(
                    "metadata.finalizers",
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                    ),
                )],
            ));
        }
    }
    if rt.generation && spec_changed(old, &new, rt.status_subresource) {
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

/// PATCH: json-patch, merge-patch, strategic-merge-patch, apply.
pub fn patch(
    inner: &Inner,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    sub: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let ct = r.content_type.clone();
    if ct == "application/apply-patch+yaml" {
        return apply(inner, rt, ns, name, sub, r);
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
    let mut st = inner.state.lock();
    let cur = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    let base = client_value(rt, &cur.value);
    let patched = match ct.as_str() {
        "application/json-patch+json" => patch::json_patch(&base, &p)?,
        "application/merge-patch+json" => patch::merge_patch(&base, &p)?,
        _ => patch::strategic_merge_patch(&base, &p)?,
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
    inner: &Inner,
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
    let mut st = inner.state.lock();
    let conflict =
        |c: Vec<(String, String)>| ApiError::apply_conflict(&rt.group, &rt.plural, name, &c);
    match st.store.get(&rt.group_resource(), ns, name) {
        None => {
            if !sub.is_empty() {
                return Err(ApiError::not_found(&rt.group, &rt.plural, name));
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

fn delete_options(r: &Req) -> ApiResult<DeleteOptions> {
    let mut o = DeleteOptions {
        propagation: r.q("propagationPolicy").unwrap_or("").to_string(),
        dry_run: dry_run(r),
        ..Default::default()
    };
    if !r.body.is_empty() {
        let b = r.decode()?;
        if let Some(p) = b.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = p.to_string();
        }
        if b.get("orphanDependents") == Some(&json!(true)) && o.propagation.is_empty() {
            o.propagation = "Orphan".into();
        }
        o.uid = b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from);
        o.rv = b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
        if b.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.contains(&json!("All")))
        {
            o.dry_run = true;
        }
    }
    if !matches!(
        o.propagation.as_str(),
        "" | "Background" | "Foreground" | "Orphan"
    ) {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{}\": supported values: \"Background\", \"Foreground\", \"Orphan\"",
            o.propagation
        )));
    }
    Ok(o)
}

/// DELETE one object.
pub fn delete(
    inner: &Inner,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let opts = delete_options(r)?;
    let mut st = inner.state.lock();
    let (code, v) = delete_locked(&mut st, rt, ns, name, &opts)?;
    Ok((code, output(rt, &v, r)))
}

/// DELETE a collection (selectors apply).
pub fn delete_collection(
    inner: &Inner,
    rt: &ResourceType,
    ns: Option<&str>,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let opts = delete_options(r)?;
    let ls = LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?;
    let fs = convert::field_selector(rt, r.q("fieldSelector").unwrap_or(""))?;
    let mut st = inner.state.lock();
    let targets: Vec<(String, String)> = st
        .store
        .list(&rt.group_resource(), ns)
        .into_iter()
        .filter(|o| ls.matches(o.value.pointer("/metadata/labels")) && fs.matches(&o.value))
        .map(|o| (o.namespace().to_string(), o.name().to_string()))
        .collect();
    let mut items = Vec::new();
    for (ons, name) in targets {
        if let Ok((_, v)) = delete_locked(&mut st, rt, &ons, &name, &opts) {
            items.push(client_value(rt, &v));
        }
    }
    let rv = st.store.rv().to_string();
    let list = json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": {"resourceVersion": rv}, "items": items});
    Ok((
        200,
        Bytes::from(serde_json::to_vec(&list).unwrap_or_default()),
    ))
}
