//! DELETE and deletecollection: options from the query and the body, then deletion as
//! the state layer does it ([`crate::state::deletion`]).

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::convert;
use crate::state::deletion::{DeleteOptions, delete_locked};
use crate::state::registry::ResourceType;
use crate::state::selectors::LabelSelector;
use crate::verbs::admit::dry_run;
use crate::verbs::output::{client_value, output};
use crate::verbs::request::Req;

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
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let opts = delete_options(r)?;
    let mut st = state.lock();
    let (code, v) = delete_locked(&mut st, rt, ns, name, &opts)?;
    Ok((code, output(rt, &v, r)))
}

/// DELETE a collection (selectors apply).
pub fn delete_collection(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: Option<&str>,
    r: &Req,
) -> ApiResult<(u16, Bytes)> {
    let opts = delete_options(r)?;
    let ls = LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?;
    let fs = convert::field_selector(rt, r.q("fieldSelector").unwrap_or(""))?;
    let mut st = state.lock();
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
