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

/// kube-apiserver's Job storage (`REST.Delete`, `REST.DeleteCollection`): the warning
/// for a batch/v1 Job delete that leaves the propagation to the type's default, which
/// orphans the Job's pods.
pub const JOB_ORPHAN_WARNING: &str = "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning";

/// A query flag as Go's `Convert_Slice_string_To_Pointer_bool` reads it: "0" and
/// "false" (any case) are false, any other value true.
fn query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// The delete options, and whether the request set `orphanDependents` (and to what).
fn delete_options(rt: &ResourceType, r: &Req) -> ApiResult<(DeleteOptions, Option<bool>)> {
    let mut o = DeleteOptions {
        propagation: r.q("propagationPolicy").unwrap_or("").to_string(),
        dry_run: dry_run(r),
        ..Default::default()
    };
    // as kube-apiserver's delete handler: the options come from the body when there is
    // one, else from the query
    let mut orphan_dependents = if r.body.is_empty() {
        r.q("orphanDependents").map(query_bool)
    } else {
        None
    };
    if !r.body.is_empty() {
        let b = r.decode()?;
        if let Some(p) = b.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = p.to_string();
        }
        orphan_dependents = b.get("orphanDependents").and_then(Value::as_bool);
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
    if orphan_dependents == Some(true) && o.propagation.is_empty() {
        o.propagation = "Orphan".into();
    }
    // batch/v1 Jobs orphan their pods unless told otherwise (the Job strategy's
    // `DefaultGarbageCollectionPolicy`, kept for backwards compatibility)
    o.orphan_by_default = rt.group == "batch"
        && rt.version == "v1"
        && rt.plural == "jobs"
        && o.propagation.is_empty()
        && orphan_dependents.is_none();
    if !matches!(
        o.propagation.as_str(),
        "" | "Background" | "Foreground" | "Orphan"
    ) {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{}\": supported values: \"Background\", \"Foreground\", \"Orphan\"",
            o.propagation
        )));
    }
    Ok((o, orphan_dependents))
}

/// DELETE one object. 200 with the object, gone or only marked for deletion; 202 only
/// for one not yet gone whose request set `orphanDependents=false`, as kube-apiserver's
/// delete handler answers (kept for old clients).
pub fn delete(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let (opts, orphan_dependents) = delete_options(rt, r)?;
    let result = delete_locked(&mut state.lock(), rt, ns, name, &opts);
    // warned before the store deletes: a failed delete carries the warning too
    let (deleted, v) = match result {
        Ok(done) if opts.orphan_by_default => {
            r.warnings.push(JOB_ORPHAN_WARNING.into());
            done
        }
        Ok(done) => done,
        Err(mut e) => {
            if opts.orphan_by_default {
                e.warnings.push(JOB_ORPHAN_WARNING.into());
            }
            return Err(e);
        }
    };
    let code = if !deleted && orphan_dependents == Some(false) {
        202
    } else {
        200
    };
    Ok((code, output(rt, &v, r)))
}

/// DELETE a collection (selectors apply).
pub fn delete_collection(
    state: &Mutex<State>,
    rt: &ResourceType,
    ns: Option<&str>,
    r: &mut Req,
) -> ApiResult<(u16, Bytes)> {
    let (opts, _) = delete_options(rt, r)?;
    if opts.orphan_by_default {
        r.warnings.push(JOB_ORPHAN_WARNING.into());
    }
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
