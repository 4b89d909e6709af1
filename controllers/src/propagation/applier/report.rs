//! The Work's status from what each manifest came to (federation.md §8 H.54): one
//! manifest status per manifest (identifier, the member object's `.status`, health,
//! applied/reason/message, generation, template generation) and the conditions
//! Applied, Available, Dispatching and Degraded. Pure.

use causeway_crds::federation::interpreter;
use causeway_crds::federation::work::{
    ManifestStatus, ResourceHealth, ResourceIdentifier, WorkStatus, conditions,
};
use causeway_crds::well_known::annotations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::plan::{Input, NotApplied, ObjRef, Served, annotation};

/// Dispatching=True.
pub const REASON_DISPATCHING: &str = "Dispatching";

/// What a manifest's write came to.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The plan's result, or the failed write's.
    pub result: Result<(), NotApplied>,
    /// The member object after the round (the apply's answer, or as found).
    pub object: Option<Value>,
}

/// The ordinal of a manifest status that is no manifest's: an object of this Work that
/// no manifest names any more and whose removal failed. It stays in the status, so
/// that its kind stays watched (after a restart too) and its removal is tried again
/// until it is gone.
pub const REMOVAL_ORDINAL: i32 = -1;

fn identifier(ordinal: usize, m: &Value, served: &Result<Served, String>) -> ResourceIdentifier {
    let plural = served
        .as_ref()
        .map(|s| s.plural.clone())
        .unwrap_or_default();
    identify(
        i32::try_from(ordinal).unwrap_or(i32::MAX),
        ObjRef::of(m),
        plural,
    )
}

fn identify(ordinal: i32, r: ObjRef, resource: String) -> ResourceIdentifier {
    let (group, version) = match r.api_version.rsplit_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), r.api_version.clone()),
    };
    ResourceIdentifier {
        ordinal,
        group,
        version,
        kind: r.kind,
        resource,
        namespace: r.namespace,
        name: r.name,
    }
}

fn condition(
    prev: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: crate::condition::since(prev, type_, status, now),
    }
}

/// Pure: the Work's status from what each manifest came to, and the objects no manifest
/// names any more whose removal failed (`removals`, each with [`REMOVAL_ORDINAL`]).
pub fn status(
    input: &Input,
    outcomes: &[Outcome],
    removals: &[(ObjRef, NotApplied)],
    now: &Time,
) -> WorkStatus {
    let work = input.work;
    let prev = work
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);
    let generation = work.metadata.generation;
    let mut manifest_statuses = Vec::new();
    let mut failing = Vec::new();
    let mut unhealthy = Vec::new();
    let mut degraded = Vec::new();
    for (i, ((m, seen), out)) in work
        .spec
        .workload
        .manifests
        .iter()
        .zip(input.manifests)
        .zip(outcomes)
        .enumerate()
    {
        let id = identifier(i, &m.0, &seen.served);
        let obj = out.object.as_ref();
        // by the health rule the Work carries for the kind (a ResourceInterpreter's),
        // else by Causeway's own; with why the rule could not tell
        let (h, why) = obj.map_or((ResourceHealth::Unknown, None), |o| {
            interpreter::health_in(work, o)
        });
        let what = format!("manifest {i} ({})", ObjRef::of(&m.0));
        if let Err(e) = &out.result {
            failing.push((what.clone(), e.clone()));
        }
        if out.result.is_err() || h != ResourceHealth::Healthy {
            match why {
                Some(why) => unhealthy.push(format!("{what}: {h:?} ({why})")),
                None => unhealthy.push(format!("{what}: {h:?}")),
            }
        }
        if h == ResourceHealth::Unhealthy {
            degraded.push(what.clone());
        }
        // a cluster that is not Ready cannot be read: what its copy reported last
        // stays (as Karmada's Work status does), for failover's statePreservation; its
        // health is Unknown and it is not applied
        let last = (!input.ready && obj.is_none())
            .then(|| {
                work.status.as_ref()?.manifest_statuses.iter().find(|s| {
                    let (a, b) = (&s.identifier, &id);
                    // the same object (the manifests may have changed meanwhile)
                    usize::try_from(a.ordinal).ok() == Some(i)
                        && (&a.group, &a.kind, &a.namespace, &a.name)
                            == (&b.group, &b.kind, &b.namespace, &b.name)
                })
            })
            .flatten();
        manifest_statuses.push(ManifestStatus {
            identifier: id,
            status: obj
                .and_then(|o| o.get("status"))
                .cloned()
                .or_else(|| last.and_then(|l| l.status.clone())),
            health: Some(h),
            applied: Some(out.result.is_ok()),
            reason: out.result.as_ref().err().map(|e| e.reason.clone()),
            message: out.result.as_ref().err().map(|e| e.message.clone()),
            generation: obj
                .and_then(|o| o.pointer("/metadata/generation"))
                .and_then(Value::as_i64)
                .or_else(|| last.and_then(|l| l.generation)),
            template_generation: obj
                .and_then(|o| annotation(o, annotations::TEMPLATE_GENERATION))
                .and_then(|g| g.parse().ok())
                .or_else(|| last.and_then(|l| l.template_generation)),
        });
    }
    let n = manifest_statuses.len();
    for (r, e) in removals {
        failing.push((format!("{r}, which no manifest names any more"), e.clone()));
        manifest_statuses.push(ManifestStatus {
            identifier: identify(REMOVAL_ORDINAL, r.clone(), String::new()),
            applied: Some(false),
            reason: Some(e.reason.clone()),
            message: Some(format!(
                "no manifest names it any more, and removing it failed: {}; tried again every round",
                e.message
            )),
            ..ManifestStatus::default()
        });
    }
    let applied = match failing.first() {
        None => condition(
            prev,
            conditions::APPLIED,
            true,
            conditions::REASON_APPLIED_SUCCESSFUL,
            format!("all {n} manifests are applied to cluster {}", input.cluster),
            generation,
            now,
        ),
        Some((_, first)) => condition(
            prev,
            conditions::APPLIED,
            false,
            &first.reason,
            failing
                .iter()
                .map(|(what, e)| format!("{what}: {}", e.message))
                .collect::<Vec<_>>()
                .join("; "),
            generation,
            now,
        ),
    };
    let available = if unhealthy.is_empty() {
        condition(
            prev,
            conditions::AVAILABLE,
            true,
            conditions::REASON_RESOURCES_AVAILABLE,
            format!("all {n} manifests are healthy in cluster {}", input.cluster),
            generation,
            now,
        )
    } else {
        condition(
            prev,
            conditions::AVAILABLE,
            false,
            conditions::REASON_RESOURCES_UNAVAILABLE,
            format!(
                "not healthy in cluster {}: {}",
                input.cluster,
                unhealthy.join("; ")
            ),
            generation,
            now,
        )
    };
    let dispatching = if work.spec.suspend_dispatching == Some(true) {
        condition(
            prev,
            conditions::DISPATCHING,
            false,
            conditions::REASON_SUSPEND_DISPATCHING,
            "dispatching is suspended: the member keeps what it has and reports its status".into(),
            generation,
            now,
        )
    } else {
        condition(
            prev,
            conditions::DISPATCHING,
            true,
            REASON_DISPATCHING,
            format!("manifests are dispatched to cluster {}", input.cluster),
            generation,
            now,
        )
    };
    // what application failover times: how long some object has been Unhealthy (not
    // merely unknown or still being applied) under the template the member runs — a new
    // template generation starts the clock again, so a rollout gets the whole
    // toleration; a new replica count alone (a division, a make-before-break step)
    // does not, or replica moves could put failover off for ever
    let mut degraded = if degraded.is_empty() {
        condition(
            prev,
            conditions::DEGRADED,
            false,
            conditions::REASON_NO_RESOURCES_UNHEALTHY,
            format!("no manifest is unhealthy in cluster {}", input.cluster),
            generation,
            now,
        )
    } else {
        condition(
            prev,
            conditions::DEGRADED,
            true,
            conditions::REASON_RESOURCES_UNHEALTHY,
            format!(
                "unhealthy in cluster {}: {}",
                input.cluster,
                degraded.join("; ")
            ),
            generation,
            now,
        )
    };
    let same_generation = prev
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED)
        .is_some_and(|c| c.observed_generation == generation);
    let runs = |s: &[ManifestStatus]| {
        ManifestStatus::of_manifests(s)
            .map(|m| m.template_generation)
            .collect::<Vec<_>>()
    };
    let running = runs(&manifest_statuses);
    // compared with the last report, not only at a new Work generation: a new
    // template whose first apply failed restarts the clock when a later one lands
    let new_template = if running.iter().all(Option::is_none) {
        !same_generation
    } else {
        work.status
            .as_ref()
            .is_none_or(|s| runs(&s.manifest_statuses) != running)
    };
    if degraded.status == "True" && new_template {
        degraded.last_transition_time = now.clone();
    }
    WorkStatus {
        conditions: vec![applied, available, dispatching, degraded],
        manifest_statuses,
    }
}
