//! GET and LIST: selectors, resourceVersion semantics (`resourceVersionMatch`), and
//! consistent pagination (limit/continue).

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::convert;
use crate::state::registry::ResourceType;
use crate::state::selectors::{FieldSelector, LabelSelector};
use crate::state::stored::StoredObj;
use crate::verbs::output::{output, partial, render};
use crate::verbs::request::Req;
use causeway_runtime::table;

/// GET one object.
pub fn get(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let st = state.lock();
    let obj = st
        .store
        .get(&rt.group_resource(), ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    if r.table.is_some() || r.metadata_only {
        return Ok((200, output(rt, &obj.value, r)));
    }
    Ok((200, render(rt, &obj)))
}

/// kube-apiserver's `ValidateListOptions` of a list or watch (with the WatchList feature
/// on): `resourceVersionMatch` only with a `resourceVersion` and without `continue`,
/// `Exact` never at "0"; on a watch, `resourceVersionMatch=NotOlderThan` and
/// `sendInitialEvents` only together; `sendInitialEvents` never on a list. A 422 for
/// `ListOptions.meta.k8s.io`. (`allowWatchBookmarks` is not required with
/// `sendInitialEvents`: upstream leaves it unchecked for old clients' sake.)
pub fn validate_list_options(r: &Req, watch: bool) -> ApiResult<()> {
    use crate::error::{forbidden_field, not_supported_field};
    const RVM: &str = "resourceVersionMatch";
    let rv = r.q("resourceVersion").unwrap_or("");
    let matched = r.q(RVM).unwrap_or("");
    let cont = r.q("continue").unwrap_or("");
    // a *bool: set by any value, "false" included
    let send_initial = r.q("sendInitialEvents").is_some();
    let mut causes = Vec::new();
    if watch {
        if send_initial && matched != "NotOlderThan" {
            causes.push(forbidden_field(
                RVM,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !matched.is_empty() {
            if !send_initial {
                causes.push(forbidden_field(
                    RVM,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if matched != "NotOlderThan" {
                causes.push(not_supported_field(RVM, matched, &["NotOlderThan"]));
            }
            if !cont.is_empty() {
                causes.push(forbidden_field(
                    RVM,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !matched.is_empty() {
            if rv.is_empty() {
                causes.push(forbidden_field(
                    RVM,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !cont.is_empty() {
                causes.push(forbidden_field(
                    RVM,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if !matches!(matched, "Exact" | "NotOlderThan") {
                causes.push(not_supported_field(
                    RVM,
                    matched,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if matched == "Exact" && rv == "0" {
                causes.push(forbidden_field(
                    RVM,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial {
            causes.push(forbidden_field(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", causes))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    start: String,
}

/// LIST with selectors, resourceVersion semantics and limit/continue.
pub fn list(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: Option<&str>,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    // as kube-apiserver's list handler: the options decoded (selector syntax), then
    // validated, then the field selector's labels converted
    let ls = LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?;
    FieldSelector::parse(r.q("fieldSelector").unwrap_or(""))?;
    let limit: usize = match r.q("limit") {
        None | Some("") => 0,
        Some(l) => l.parse().map_err(|_| {
            ApiError::bad_request(format!("limit must be a non-negative integer, got \"{l}\""))
        })?,
    };
    validate_list_options(r, false)?;
    let fs = convert::field_selector(rt, r.q("fieldSelector").unwrap_or(""))?;
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
    let st = state.lock();
    let gr = rt.group_resource();
    let rv_param = r.q("resourceVersion").unwrap_or("");
    let (items, list_rv) = if let Some(t) = &token {
        // the key the last page ended at, "namespace/name" ("/name" cluster-scoped)
        let after = t
            .start
            .split_once('/')
            .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
        let items = st.store.list_after(&gr, ns, t.rv, Some(after)).map_err(|e| {
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
        // any other `resourceVersionMatch` was refused by `validate_list_options`
        match r.q("resourceVersionMatch") {
            Some("Exact") => (st.store.list_at(&gr, ns, rv)?, rv),
            _ => {
                if rv > st.store.rv() {
                    return Err(ApiError::timeout(format!(
                        "Too large resource version: {rv}, current: {}",
                        st.store.rv()
                    )));
                }
                (st.store.list(&gr, ns), st.store.rv())
            }
        }
    };
    drop(st);
    // the first `limit` selected objects; how many objects follow them is reported
    // only for a list without selectors, as kube-apiserver does (it would have to
    // test every one of them)
    let selective = !ls.is_empty() || !fs.0.is_empty();
    let mut selected: Vec<Arc<StoredObj>> = Vec::new();
    let mut rest = None;
    for (i, o) in items.iter().enumerate() {
        if !(ls.matches(o.value.pointer("/metadata/labels")) && fs.matches(&o.value)) {
            continue;
        }
        if limit > 0 && selected.len() == limit {
            rest = Some(items.len() - i);
            break;
        }
        selected.push(o.clone());
    }
    let mut cont = None;
    if let Some(rest) = rest {
        let last = selected
            .last()
            .map(|o| format!("{}/{}", o.namespace(), o.name()))
            .unwrap_or_default();
        let raw = serde_json::to_vec(&ContinueToken {
            rv: list_rv,
            start: last,
        })
        .unwrap_or_default();
        cont = Some((
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw),
            (!selective).then_some(rest),
        ));
    }
    if let Some(include) = r.table {
        let values: Vec<&Value> = selected.iter().map(|o| &o.value).collect();
        let t = table::table(
            &[],
            &rt.columns,
            &values,
            &list_rv.to_string(),
            cont.as_ref().map(|(c, _)| c.as_str()),
            include,
        );
        return Ok((200, Bytes::from(serde_json::to_vec(&t).unwrap_or_default())));
    }
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some((c, rest)) = &cont {
        meta["continue"] = json!(c);
        if let Some(rest) = rest {
            meta["remainingItemCount"] = json!(rest);
        }
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
