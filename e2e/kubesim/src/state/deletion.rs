//! Deletion as kube-apiserver's registry store does it: preconditions, propagation
//! finalizers (`orphan`, `foregroundDeletion`), `deletionTimestamp` while finalizers
//! remain, and removal for good once the last one is gone. The API's DELETE verbs and
//! the in-process controllers both delete through here.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::kinds;
use crate::state::meta::now_rfc3339;
use crate::state::registry::ResourceType;
use crate::state::stored::{meta_str, str_list};

/// `metadata.finalizers`.
pub fn finalizers(v: &Value) -> Vec<String> {
    str_list(v.pointer("/metadata/finalizers"))
}

/// Stores an update. An object being deleted whose last finalizer is gone is removed for
/// good here (and what it held released): the one place this rule lives, for API writes
/// and the in-process controllers alike. Namespaces are left to namespace termination.
/// Returns the object as last stored. As kube-apiserver's registry store does
/// (`errEmptiedFinalizers`), the update that empties the finalizers is not stored:
/// watchers see one DELETED event, of the object as it was (its finalizers listed),
/// never a state "being deleted, no finalizers left".
pub fn store_update(st: &mut State, rt: &ResourceType, new: Value) -> Value {
    let gr = rt.group_resource();
    let is_namespace = rt.plural == "namespaces" && rt.group.is_empty();
    if new.pointer("/metadata/deletionTimestamp").is_some()
        && finalizers(&new).is_empty()
        && !is_namespace
    {
        let (ns, name) = (
            meta_str(&new, "namespace").to_string(),
            meta_str(&new, "name").to_string(),
        );
        return match st.store.delete(&gr, &ns, &name) {
            Some(e) => {
                kinds::on_removed(st, rt, &e.obj.value);
                e.obj.value.clone()
            }
            None => st.store.put(&gr, new).obj.value.clone(),
        };
    }
    st.store.put(&gr, new).obj.value.clone()
}

/// Delete options from the body and the query.
#[derive(Debug, Default)]
pub struct DeleteOptions {
    /// Background, Foreground or Orphan.
    pub propagation: String,
    /// The type's default is to orphan dependents (batch/v1 Jobs' `DefaultGarbageCollectionPolicy`):
    /// with no `propagation` given, the `orphan` finalizer is added, unless the object
    /// already holds `foregroundDeletion` (its own finalizers outrank the default).
    pub orphan_by_default: bool,
    /// Precondition uid.
    pub uid: Option<String>,
    /// Precondition resourceVersion.
    pub rv: Option<String>,
    /// Dry run.
    pub dry_run: bool,
}

/// Deletes (or starts deleting) an object; shared with GC and the namespace controller.
/// Returns whether the object is gone (false: only marked for deletion, finalizers or
/// namespace termination pending; kube-apiserver's `wasDeleted`) and the object.
pub fn delete_locked(
    st: &mut State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<(bool, Value)> {
    let gr = rt.group_resource();
    let cur = st
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    if rt.group == "scheduling.k8s.io"
        && rt.plural == "priorityclasses"
        && crate::state::priority::SYSTEM_CLASSES
            .iter()
            .any(|(n, _, _)| *n == name)
    {
        // kube-apiserver's PriorityClass storage
        return Err(ApiError::forbidden_because(
            &rt.group,
            &rt.plural,
            name,
            "this is a system priority class and cannot be deleted",
        ));
    }
    let uid = meta_str(&cur.value, "uid");
    if let Some(want) = &opts.uid
        && want != uid
    {
        return Err(ApiError::conflict(
            &rt.group,
            &rt.plural,
            name,
            &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
        ));
    }
    if let Some(want) = &opts.rv {
        let have = meta_str(&cur.value, "resourceVersion");
        if want != have {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {have}"
                ),
            ));
        }
    }
    let mut v = cur.value.clone();
    let mut fins = finalizers(&v);
    match opts.propagation.as_str() {
        "Orphan" if !fins.contains(&"orphan".to_string()) => fins.push("orphan".into()),
        "Foreground" if !fins.contains(&"foregroundDeletion".to_string()) => {
            fins.push("foregroundDeletion".into())
        }
        "" if opts.orphan_by_default
            && !fins
                .iter()
                .any(|f| f == "orphan" || f == "foregroundDeletion") =>
        {
            fins.push("orphan".into())
        }
        _ => {}
    }
    let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
    if is_namespace {
        if matches!(name, "default" | "kube-system" | "kube-public") {
            return Err(ApiError::forbidden_msg(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if v.pointer("/metadata/deletionTimestamp").is_none() {
            v["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            v["status"]["phase"] = json!("Terminating");
            if !opts.dry_run {
                let e = st.store.put(&gr, v);
                return Ok((false, e.obj.value.clone()));
            }
            return Ok((false, v));
        }
        // kube-apiserver's namespace storage: a second DELETE while the namespace
        // controller still holds `spec.finalizers` (its content is being removed) is a
        // 409, not another 200
        if v.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty())
        {
            return Err(ApiError::conflict(
                "",
                "namespaces",
                name,
                "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
            ));
        }
        return Ok((false, v));
    }
    if !fins.is_empty() {
        let had = finalizers(&cur.value);
        if v.pointer("/metadata/deletionTimestamp").is_some() && had == fins {
            return Ok((false, v));
        }
        if v.pointer("/metadata/deletionTimestamp").is_none() {
            v["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if rt.generation {
                let g = v
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                v["metadata"]["generation"] = json!(g + 1);
            }
        }
        v["metadata"]["finalizers"] = json!(fins);
        if opts.dry_run {
            return Ok((false, v));
        }
        let e = st.store.put(&gr, v);
        return Ok((false, e.obj.value.clone()));
    }
    if opts.dry_run {
        return Ok((true, v));
    }
    let e = st
        .store
        .delete(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
    kinds::on_removed(st, rt, &e.obj.value);
    Ok((true, e.obj.value.clone()))
}
