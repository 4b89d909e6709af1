//! The applier's member writes, each bounded in time: server-side apply (with a dry
//! run first when the manifest changed, and delete-and-recreate when an immutable
//! change is allowed), delete, orphan. Failures come back as the manifest's reason and
//! message (federation.md §8 E.36, E.37).

use std::time::Duration;

use causeway_crds::federation::work::conditions;
use causeway_crds::names::{execution_namespace, namespace_work_name};
use causeway_crds::well_known::{FIELD_MANAGER, annotations, labels};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::members::to_json;
use super::plan::{self, NotApplied, ObjRef};

pub use crate::clusters::{CallError, call};

/// The manifest's reason for a failed call: `timed_out` when it timed out. A namespace
/// missing in the member is said as such, with what to do.
fn failed(e: &CallError, timed_out: &str, what: String, cluster: &str) -> NotApplied {
    let reason = match e {
        CallError::TimedOut(_) => timed_out,
        CallError::Kube(_) => conditions::REASON_APPLIED_FAILED,
    };
    if let Some(ns) = missing_namespace(e) {
        return NotApplied::new(
            reason,
            format!(
                "{what} in cluster {cluster}: its namespace {ns:?} does not exist there; the hub creates a template's namespace in the members it goes to, with the Work {}/{} (whose status says how that went), unless the hub's Namespace {ns} is labelled {}=true (or the hub has none): remove that label, create the namespace in the member, or propagate it from the hub (a ClusterPropagationPolicy selecting the Namespace {ns})",
                execution_namespace(cluster),
                namespace_work_name(ns),
                labels::SKIP_AUTO_PROPAGATION
            ),
        );
    }
    NotApplied::new(reason, format!("{what} in cluster {cluster}: {e}"))
}

/// The namespace a 404 says is missing, if that is what it says.
fn missing_namespace(e: &CallError) -> Option<&str> {
    match e {
        CallError::Kube(kube::Error::Api(s)) if s.code == 404 => {
            let d = s.details.as_ref()?;
            (d.kind == "namespaces" && !d.name.is_empty()).then_some(d.name.as_str())
        }
        _ => None,
    }
}

/// A 422 refusal of an immutable change.
fn immutable(e: &CallError) -> Option<&str> {
    match e {
        CallError::Kube(kube::Error::Api(s))
            if s.code == 422
                && (s.message.contains("immutable") || s.message.contains("Forbidden")) =>
        {
            Some(&s.message)
        }
        _ => None,
    }
}

/// One apply.
pub struct Apply<'a> {
    /// The object's API.
    pub api: &'a Api<DynamicObject>,
    /// Which object.
    pub obj: &'a ObjRef,
    /// The body.
    pub body: &'a Value,
    /// It exists in the member.
    pub exists: bool,
    /// Try with dryRun=All first.
    pub dry_run_first: bool,
    /// Delete and recreate when the change is immutable.
    pub recreate: bool,
    /// Where `body` carries the member's own count, read at the resourceVersion it
    /// carries (`causeway.io/retain-replicas`).
    pub retained: Option<&'a str>,
    /// The object is taken over from another tool: once applied, the other managers'
    /// ownership of it is dropped ([`hand_over`]).
    pub adopt: bool,
    /// The member cluster.
    pub cluster: &'a str,
    /// Per call.
    pub limit: Duration,
}

/// Server-side applies; the member object as the server answered. A body that carries
/// the member's own count (`retained`) carries the resourceVersion it was read at: a
/// 409 then means the object changed since that read (an autoscaler, a status write),
/// so the count is read again and the apply made again, a few times at most.
pub async fn apply(a: Apply<'_>) -> Result<Value, NotApplied> {
    let mut body = std::borrow::Cow::Borrowed(a.body);
    let mut rereads = 0;
    loop {
        let (why, stale) = match attempt(&a, &body).await {
            Ok(v) if a.adopt => return Ok(hand_over(&a, v).await),
            Ok(v) => return Ok(v),
            Err(failure) => failure,
        };
        let Some(at) = a.retained.filter(|_| stale && rereads < REREADS) else {
            return Err(why);
        };
        rereads += 1;
        let Ok(Some(o)) = call(a.limit, a.api.get_opt(&a.obj.name)).await else {
            // gone (the plan creates it with the template's count) or unreadable: the
            // next round decides
            return Err(why);
        };
        let fresh = to_json(&o, &a.obj.api_version, &a.obj.kind);
        // only the object this Work applies, still in place: one being deleted, one a
        // person took out of Causeway's hands (`causeway.io/managed=false`) or another
        // Work's is for the next round's plan to judge
        let work = plan::annotation(a.body, annotations::WORK).unwrap_or_default();
        if plan::terminating(&fresh) || !plan::belongs_to(&fresh, work) {
            return Err(why);
        }
        let mut b = a.body.clone();
        plan::retain_from(&mut b, &fresh, at);
        body = std::borrow::Cow::Owned(b);
    }
}

/// Reads again after a 409 at most this often (the object's controller may write its
/// status between a read and the write; client-go's `RetryOnConflict` tries 5 times).
const REREADS: usize = 4;

/// After an object another tool made is taken over and applied (`applied`, as the
/// member answered): drops the other managers' ownership of its main resource, so that
/// Causeway's apply alone owns what it sets. A forced apply moves only the fields whose
/// values it changes; those it sets to the value they had stay owned by their maker
/// too, and server-side apply removes a field only when no manager owns it: a label or
/// an environment variable the template later loses would stay in the member for good
/// (Karmada, which writes the whole object, removes it: E.35). The other managers'
/// entries for subresources (status, scale) stay. A write that keeps failing leaves
/// the ownership shared, with a warning: the object was applied all the same.
async fn hand_over(a: &Apply<'_>, applied: Value) -> Value {
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let name = a.obj.name.as_str();
    for _ in 0..=REREADS {
        // read again: what the apply answered is trimmed of its managed fields
        let current = match call(a.limit, a.api.get_opt(name)).await {
            Ok(Some(o)) => o,
            Ok(None) => return applied,
            Err(e) => {
                tracing::warn!(cluster = %a.cluster, object = %a.obj, error = %e, "taking over an object: could not read its managed fields; fields the template loses may stay in the member");
                return applied;
            }
        };
        let raw = serde_json::to_value(&current).unwrap_or_default();
        let Some(kept) = plan::others_dropped(&raw) else {
            return to_json(&current, &a.obj.api_version, &a.obj.kind);
        };
        // at the resourceVersion read: managed fields written meanwhile are not lost
        let rv = raw.pointer("/metadata/resourceVersion").cloned();
        let patch = json!({"metadata": {"managedFields": kept, "resourceVersion": rv}});
        match call(a.limit, a.api.patch(name, &pp, &Patch::Merge(&patch))).await {
            Ok(o) => return to_json(&o, &a.obj.api_version, &a.obj.kind),
            Err(CallError::Kube(kube::Error::Api(s))) if s.code == 409 => {}
            Err(e) => {
                tracing::warn!(cluster = %a.cluster, object = %a.obj, error = %e, "taking over an object: could not drop its other managers' ownership; fields the template loses may stay in the member");
                return applied;
            }
        }
    }
    tracing::warn!(cluster = %a.cluster, object = %a.obj, "taking over an object: its managed fields kept changing; fields the template loses may stay in the member");
    applied
}

/// One apply of `body` (after its dry run when asked); a failure says whether it was a
/// 409 (with a forced apply, the resourceVersion precondition).
async fn attempt(a: &Apply<'_>, body: &Value) -> Result<Value, (NotApplied, bool)> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let name = a.obj.name.as_str();
    let mut exists = a.exists;
    if a.dry_run_first {
        let dry = call(
            a.limit,
            a.api
                .patch(name, &pp.clone().dry_run(), &Patch::Apply(body)),
        )
        .await;
        match dry {
            Ok(_) => {}
            Err(e) => match immutable(&e) {
                Some(msg) if !a.recreate => {
                    return Err((
                        NotApplied::new(
                            conditions::REASON_IMMUTABLE_FIELD,
                            format!(
                                "{} in cluster {}: the change touches an immutable field and was not applied ({msg}); revert it, or annotate the template {}=true to let Causeway delete and recreate the object",
                                a.obj,
                                a.cluster,
                                annotations::RECREATE_ON_IMMUTABLE
                            ),
                        ),
                        false,
                    ));
                }
                Some(_) => {
                    delete(a.api, a.obj, a.cluster, a.limit)
                        .await
                        .map_err(|e| (e, false))?;
                    wait_gone(a.api, a.obj, a.cluster, a.limit)
                        .await
                        .map_err(|e| (e, false))?;
                    exists = false;
                }
                None => {
                    let timed_out = conditions::REASON_UPDATE_TIMED_OUT;
                    let stale = conflict(&e, body);
                    return Err((
                        failed(&e, timed_out, format!("applying {}", a.obj), a.cluster),
                        stale,
                    ));
                }
            },
        }
    }
    // (recreated: an apply that creates ignores the resourceVersion of a count retained
    // from the object that was deleted, as kube-apiserver does)
    match call(a.limit, a.api.patch(name, &pp, &Patch::Apply(body))).await {
        Ok(o) => Ok(to_json(&o, &a.obj.api_version, &a.obj.kind)),
        Err(e) => {
            let timed_out = if exists {
                conditions::REASON_UPDATE_TIMED_OUT
            } else {
                conditions::REASON_CREATION_TIMED_OUT
            };
            let verb = if exists { "updating" } else { "creating" };
            let stale = conflict(&e, body);
            Err((
                failed(&e, timed_out, format!("{verb} {}", a.obj), a.cluster),
                stale,
            ))
        }
    }
}

/// A 409 answer to a write of `body` that carried a resourceVersion: with a forced
/// apply, its precondition (the object changed since it was read).
fn conflict(e: &CallError, body: &Value) -> bool {
    body.pointer("/metadata/resourceVersion").is_some()
        && matches!(e, CallError::Kube(kube::Error::Api(s)) if s.code == 409)
}

/// Deletes (Background propagation); gone already counts as done, and so does a
/// deletion under way (a Terminating namespace's 409).
pub async fn delete(
    api: &Api<DynamicObject>,
    obj: &ObjRef,
    cluster: &str,
    limit: Duration,
) -> Result<(), NotApplied> {
    match call(limit, api.delete(&obj.name, &DeleteParams::background())).await {
        Ok(_) => Ok(()),
        Err(CallError::Kube(kube::Error::Api(s))) if causeway_runtime::apply::gone_or_going(&s) => {
            Ok(())
        }
        Err(e) => Err(failed(
            &e,
            conditions::REASON_DELETION_TIMED_OUT,
            format!("deleting {obj}"),
            cluster,
        )),
    }
}

/// Waits (up to `limit`) until a live GET finds the object gone.
async fn wait_gone(
    api: &Api<DynamicObject>,
    obj: &ObjRef,
    cluster: &str,
    limit: Duration,
) -> Result<(), NotApplied> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        match call(limit, api.get_opt(&obj.name)).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => {
                return Err(failed(
                    &e,
                    conditions::REASON_DELETION_TIMED_OUT,
                    format!("reading {obj}"),
                    cluster,
                ));
            }
        }
    }
    Err(NotApplied::new(
        conditions::REASON_WAITING_FOR_REMOVAL,
        format!(
            "{obj} in cluster {cluster} was deleted to be recreated (immutable change) and is still terminating"
        ),
    ))
}

/// Strips Causeway's label and annotations (the object stays, no longer managed).
pub async fn orphan(
    api: &Api<DynamicObject>,
    obj: &ObjRef,
    cluster: &str,
    limit: Duration,
) -> Result<(), NotApplied> {
    let patch = json!({"metadata": {
        "labels": {labels::MANAGED: null},
        "annotations": {
            annotations::WORK: null,
            annotations::APPLIED_HASH: null,
            annotations::TEMPLATE_GENERATION: null,
        },
    }});
    match call(
        limit,
        api.patch(&obj.name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(CallError::Kube(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        Err(e) => Err(failed(
            &e,
            conditions::REASON_UPDATE_TIMED_OUT,
            format!("releasing {obj}"),
            cluster,
        )),
    }
}

/// A live GET (None: gone); a timeout is reported as `timed_out` (the GET comes
/// before a create, or confirms a deletion).
pub async fn get(
    api: &Api<DynamicObject>,
    obj: &ObjRef,
    cluster: &str,
    limit: Duration,
    timed_out: &str,
) -> Result<Option<Value>, NotApplied> {
    match call(limit, api.get_opt(&obj.name)).await {
        Ok(o) => Ok(o.map(|o| to_json(&o, &obj.api_version, &obj.kind))),
        Err(e) => Err(failed(&e, timed_out, format!("reading {obj}"), cluster)),
    }
}
