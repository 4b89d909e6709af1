//! The work applier (one per member; federation.md §8 E, F, G, H.54): the Works of the
//! member's execution namespace `causeway-es-<cluster>` on the hub → server-side apply
//! (field manager `causeway`) into the member, and each Work's status back on the hub.
//! It runs for Push members in the hub controller and for a Pull member in its agent
//! ([`crate::member`]).
//!
//! On the common controller shape: watches (the Works, the member's Cluster for
//! readiness, and the member objects of every kind the Works name, [`members`]) → the
//! pure [`plan::plan`] per dirty Work → the writes ([`write`], each bounded by the
//! call limit) → [`report::status`] applied with the status applier when it changed →
//! `Failures` and `Wake::after_round`. An unchanged Work makes no member write: a
//! manifest is applied only when the member copy lacks it (E.33/34).
//!
//! A Work being deleted (it holds `causeway.io/work-applier`) has its member objects
//! deleted (Background) or, with preserveResourcesOnDeletion, orphaned; the finalizer
//! goes once a live read finds none of Causeway's left (G).

pub mod leave;
pub mod members;
pub mod plan;
pub mod report;
pub mod write;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::work::{Work, conditions};
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::finalizers;
use causeway_runtime::apply::{self, Failures};
use causeway_runtime::reflect::{Cache, Dirty, Key, Wake, cache};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::members::{Index, Members, group_of};
use self::plan::{Action, Input, NotApplied, ObjRef, Observed};
use self::report::Outcome;
use crate::mcs::HubCaches;
use crate::metrics::Metrics;

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "work-applier";

fn work_key(w: &Work) -> Option<Key> {
    Some(crate::watch::key(w))
}

/// Everything one applier works with.
pub struct Applier {
    /// The member cluster's name (its Cluster object on the hub).
    pub cluster: String,
    /// The member's API server.
    pub member: kube::Client,
    /// The hub (Works and their status in the execution namespace).
    pub hub: kube::Client,
    /// The limit of every member and hub call.
    pub limit: Duration,
}

/// Runs the applier of `a.cluster` until `stop`.
pub async fn run(
    a: Applier,
    caches: Arc<HubCaches>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let es = execution_namespace(&a.cluster);
    let works = cache(
        Api::<Work>::namespaced(a.hub.clone(), &es),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "works of the execution namespace",
        Some(work_key),
    );
    let clusters = caches.clusters.subscribe(wake.clone());
    let mut members = Members::new(
        &a.cluster,
        a.member.clone(),
        wake.clone(),
        stop.clone(),
        a.limit,
    );
    if works.wait_until_ready().await.is_err() || clusters.wait_until_ready().await.is_err() {
        return;
    }
    let mut dirty = Dirty::full();
    loop {
        let started = Instant::now();
        let failures = round(&a, &works, &clusters, &mut members, &dirty).await;
        metrics.observe_reconcile(CONTROLLER, &a.cluster, started.elapsed(), failures.count);
        dirty = match wake.after_round(&dirty, &failures.keys, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// The `(apiVersion, kind)`s a Work names: its manifests', and those its status still
/// reports (a manifest since removed whose object must go).
fn kinds_of(w: &Work) -> impl Iterator<Item = (String, String)> + '_ {
    let named = w
        .spec
        .workload
        .manifests
        .iter()
        .filter_map(|m| Some((m.api_version()?.to_string(), m.kind()?.to_string())));
    let reported = w.status.iter().flat_map(|s| &s.manifest_statuses).map(|m| {
        let id = &m.identifier;
        let av = if id.group.is_empty() {
            id.version.clone()
        } else {
            format!("{}/{}", id.group, id.version)
        };
        (av, id.kind.clone())
    });
    named.chain(reported)
}

fn creates_namespace(w: &Work) -> bool {
    let m = &w.spec.workload.manifests;
    w.metadata.deletion_timestamp.is_none()
        && m.iter()
            .any(|m| m.api_version() == Some("v1") && m.kind() == Some("Namespace"))
}

fn is_ready(clusters: &Cache<Cluster>, name: &str) -> bool {
    clusters
        .state()
        .iter()
        .any(|c| c.name_any() == name && crate::clusters::status::is_ready(c))
}

async fn round(
    a: &Applier,
    works: &Cache<Work>,
    clusters: &Cache<Cluster>,
    members: &mut Members,
    dirty: &Dirty,
) -> Failures {
    let mut failures = Failures::new(CONTROLLER, &a.cluster);
    let all = works.state();
    let ready = is_ready(clusters, &a.cluster);
    if ready {
        let wanted: BTreeSet<(String, String)> = all.iter().flat_map(|w| kinds_of(w)).collect();
        members.ensure(&wanted).await;
    }
    let index = members.index();
    let mut due = dirty.filter_by(all, work_key);
    // Works that create namespaces first: the others' objects may live in them
    due.sort_by_key(|w| !creates_namespace(w));
    for w in due {
        reconcile(a, &w, ready, members, &index, &mut failures).await;
    }
    failures
}

/// What the member has for each manifest: the cached object, else (and always while
/// the Work is being deleted, to confirm what is gone) a live read.
async fn observe(
    a: &Applier,
    w: &Work,
    ready: bool,
    members: &Members,
    index: &Index,
) -> Vec<Observed> {
    let deleting = w.metadata.deletion_timestamp.is_some();
    let mut out = Vec::new();
    for m in &w.spec.workload.manifests {
        let r = ObjRef::of(&m.0);
        let served = members.served(&r.api_version, &r.kind);
        let found = match (&served, members.api(&r.api_version, &r.kind, &r.namespace)) {
            _ if !ready => Ok(None),
            (Ok(_), Some(api)) => match index.get(&r.api_version, &r.kind, &r.namespace, &r.name) {
                Some(o) if !deleting => Ok(Some(o)),
                _ => {
                    let timed_out = if deleting {
                        conditions::REASON_DELETION_TIMED_OUT
                    } else {
                        conditions::REASON_CREATION_TIMED_OUT
                    };
                    write::get(&api, &r, &a.cluster, a.limit, timed_out).await
                }
            },
            // a deletion is finished only when the member says the object is gone: a
            // discovery that did not answer says nothing of it (G.45)
            (Err(why), _) if deleting && members.unanswered(&r.api_version, &r.kind) => {
                Err(NotApplied::new(
                    conditions::REASON_APPLIED_FAILED,
                    format!(
                        "cannot tell whether {r} is gone from cluster {}: {why}; the Work is kept until the member answers",
                        a.cluster
                    ),
                ))
            }
            _ => Ok(None),
        };
        out.push(Observed { served, found });
    }
    out
}

/// `w` with each manifest's namespace where the member keeps the object: "default"
/// for a namespaced kind that names none (as kubectl and the API server place it), none
/// for a cluster-scoped kind (the API server drops it). Planned as written, the object
/// the member holds would not be the one the manifest names: taken for a leftover of
/// its own Work, it would be deleted and created again every round.
fn placed<'w>(w: &'w Work, members: &Members) -> std::borrow::Cow<'w, Work> {
    let place = |m: &serde_json::Value| -> Option<Option<&'static str>> {
        let r = ObjRef::of(m);
        let served = members.served(&r.api_version, &r.kind).ok()?;
        match (served.namespaced, r.namespace.is_empty()) {
            (true, true) => Some(Some("default")),
            (false, false) => Some(None),
            _ => None,
        }
    };
    let manifests = &w.spec.workload.manifests;
    if !manifests.iter().any(|m| place(&m.0).is_some()) {
        return std::borrow::Cow::Borrowed(w);
    }
    let mut out = w.clone();
    for m in out.spec.workload.manifests.iter_mut() {
        let Some(ns) = place(&m.0) else { continue };
        if let Some(md) =
            m.0.get_mut("metadata")
                .and_then(serde_json::Value::as_object_mut)
        {
            match ns {
                Some(ns) => md.insert("namespace".into(), ns.into()),
                None => md.remove("namespace"),
            };
        }
    }
    std::borrow::Cow::Owned(out)
}

async fn reconcile(
    a: &Applier,
    w: &Work,
    ready: bool,
    members: &Members,
    index: &Index,
    failures: &mut Failures,
) {
    let w = &*placed(w, members);
    let key = crate::watch::key(w);
    let wref = plan::work_ref(w);
    let observed = observe(a, w, ready, members, index).await;
    let named: BTreeSet<(String, String, String, String)> = w
        .spec
        .workload
        .manifests
        .iter()
        .map(|m| {
            let r = ObjRef::of(&m.0);
            (
                group_of(&r.api_version).to_string(),
                r.kind,
                r.namespace,
                r.name,
            )
        })
        .collect();
    let leftovers: Vec<serde_json::Value> = index
        .of_work(&wref)
        .into_iter()
        .filter(|o| plan::belongs_to(o, &wref))
        .filter(|o| {
            let r = ObjRef::of(o);
            !named.contains(&(
                group_of(&r.api_version).to_string(),
                r.kind,
                r.namespace,
                r.name,
            ))
        })
        .collect();
    let input = Input {
        cluster: &a.cluster,
        work: w,
        ready,
        manifests: &observed,
        leftovers: &leftovers,
    };
    let p = plan::plan(&input);
    let mut outcomes: Vec<Outcome> = p
        .results
        .iter()
        .zip(&observed)
        .map(|(r, o)| Outcome {
            result: r.clone(),
            object: o.found.as_ref().ok().cloned().flatten(),
        })
        .collect();
    for o in &observed {
        if let Err(e) = &o.found {
            failures.failed(key.clone(), &e.message);
        }
    }
    let mut ok = true;
    let mut removals: Vec<(ObjRef, plan::NotApplied)> = Vec::new();
    for action in &p.actions {
        let (ordinal, r) = execute(a, members, action).await;
        match r {
            Ok(Some(obj)) => {
                if let Some(i) = ordinal {
                    outcomes[i].object = Some(obj);
                }
            }
            Ok(None) => {}
            Err(e) => {
                ok = false;
                // an immutable change waits for the template to change; others retry
                if e.reason != conditions::REASON_IMMUTABLE_FIELD {
                    failures.failed(key.clone(), &e.message);
                }
                match (ordinal, action) {
                    (Some(i), _) => outcomes[i].result = Err(e),
                    (None, Action::Delete(r, _) | Action::Orphan(r, _)) => {
                        tracing::warn!(cluster = %a.cluster, work = %wref, error = %e.message, "removing a member object no manifest names failed");
                        removals.push((r.clone(), e));
                    }
                    (None, Action::Apply { .. }) => {}
                }
            }
        }
    }
    let hub: Api<Work> = Api::namespaced(a.hub.clone(), &key.0);
    if p.deleting && p.release {
        if ok {
            let r = crate::clusters::within(
                a.limit,
                apply::remove_finalizer(&hub, w, finalizers::WORK),
            )
            .await;
            if let Err(e) = r {
                failures.failed(key, &e);
            }
        }
        return;
    }
    let status = report::status(&input, &outcomes, &removals, &Time(jiff::Timestamp::now()));
    let Ok(value) = serde_json::to_value(&status) else {
        return;
    };
    let actual = w.status.as_ref().and_then(|s| serde_json::to_value(s).ok());
    let r = crate::clusters::within(
        a.limit,
        apply::ensure_status(
            &hub,
            &key.1,
            "causeway.io/v1alpha1",
            "Work",
            &value,
            actual.as_ref(),
        ),
    )
    .await;
    if let Err(e) = r {
        failures.failed(key, &e);
    }
}

/// Runs one action; the member object after it when it is a manifest's apply.
async fn execute(
    a: &Applier,
    members: &Members,
    action: &Action,
) -> (Option<usize>, Result<Option<serde_json::Value>, NotApplied>) {
    let (ordinal, obj) = match action {
        Action::Apply { ordinal, body, .. } => (Some(*ordinal), ObjRef::of(body)),
        Action::Delete(r, o) | Action::Orphan(r, o) => (*o, r.clone()),
    };
    let Some(api) = members.api(&obj.api_version, &obj.kind, &obj.namespace) else {
        let e = members
            .served(&obj.api_version, &obj.kind)
            .err()
            .unwrap_or_default();
        return (
            ordinal,
            Err(NotApplied::new(conditions::REASON_APPLIED_FAILED, e)),
        );
    };
    let r = match action {
        Action::Apply {
            body,
            exists,
            dry_run_first,
            recreate,
            retained,
            adopt,
            ..
        } => write::apply(write::Apply {
            api: &api,
            obj: &obj,
            body,
            exists: *exists,
            dry_run_first: *dry_run_first,
            recreate: *recreate,
            retained: retained.as_deref(),
            adopt: *adopt,
            cluster: &a.cluster,
            limit: a.limit,
        })
        .await
        .map(Some),
        Action::Delete(..) => write::delete(&api, &obj, &a.cluster, a.limit)
            .await
            .map(|_| None),
        Action::Orphan(..) => write::orphan(&api, &obj, &a.cluster, a.limit)
            .await
            .map(|_| None),
    };
    (ordinal, r)
}
