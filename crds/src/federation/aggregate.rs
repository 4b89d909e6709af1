//! The hub template's `.status` aggregated from its members' (federation.md §8 H.53).
//!
//! Pure: [`template_status`] turns the statuses the work appliers reported (one
//! [`ManifestStatus`] per member that reported) into the template's `.status`, for the
//! kinds Karmada aggregates by summing (its `aggregatestatus.go`): Deployment,
//! StatefulSet, DaemonSet and Job. Every counter is written, zeros included, so that a
//! merge of the result over the previous status leaves no stale count behind.
//!
//! `observedGeneration` (Deployment, StatefulSet, DaemonSet) is the template's
//! generation only when every scheduled cluster reported, and each member has observed
//! its own generation and runs the current template generation; otherwise it stays
//! what it was. GitOps tools (Argo CD) read a workload as progressing until
//! `observedGeneration` reaches `metadata.generation`, so it must never run ahead of
//! the members (Karmada sets it unconditionally, which reports a rollout as done
//! before any member has seen it).

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::work::ManifestStatus;

const DEPLOYMENT: &[&str] = &[
    "replicas",
    "readyReplicas",
    "updatedReplicas",
    "availableReplicas",
    "unavailableReplicas",
];
const STATEFUL_SET: &[&str] = &[
    "replicas",
    "readyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "availableReplicas",
];
/// The counters that count a cluster's replicas only up to its share while it keeps
/// more during a move (see [`Reported::share`]): a Deployment's updated replicas (so
/// `replicas > updatedReplicas` until the move ends, which `kubectl rollout status`
/// and Argo CD read as old replicas pending termination), and a StatefulSet's ready,
/// current, updated and available replicas (`kubectl rollout status` for a StatefulSet
/// waits on `readyReplicas` alone).
const DEPLOYMENT_NEW: &[&str] = &["updatedReplicas"];
const STATEFUL_SET_NEW: &[&str] = &[
    "readyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "availableReplicas",
];
const DAEMON_SET: &[&str] = &[
    "currentNumberScheduled",
    "numberMisscheduled",
    "desiredNumberScheduled",
    "numberReady",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
];
const JOB: &[&str] = &["active", "succeeded", "failed"];

/// What one member reported for the template's manifest, and its place in the move.
#[derive(Clone, Copy, Debug)]
pub struct Reported<'a> {
    /// The member's report.
    pub status: &'a ManifestStatus,
    /// Whether the template is scheduled to that cluster.
    pub scheduled: bool,
    /// `Some(share)` while the cluster keeps more replicas than its share (0: it is no
    /// longer scheduled) because the workload is moving away from it (make-before-break
    /// holds it, a graceful eviction keeps it): what it runs beyond its share are old
    /// replicas, still serving.
    pub share: Option<i64>,
}

/// The template's `.status` from its members' statuses, or `None` for kinds without an
/// aggregation rule (their hub status is left alone).
///
/// - `group`, `kind`: the template's;
/// - `interpreted`: for a kind without a rule of its own, the `.status` fields its
///   ResourceInterpreter sums (`spec.status.sum`), over the scheduled clusters (those
///   fields only);
/// - `template_generation`: the template's `metadata.generation`;
/// - `previous`: the template's current `.status`;
/// - `members`: what each member reported;
/// - `expected`: how many clusters the template is scheduled to.
///
/// A Deployment's or StatefulSet's replicas beyond a moving cluster's share count in
/// `replicas` (and a Deployment's ready, available and unavailable replicas), never as
/// updated: the move reads as a Deployment's own rolling update does, and `kubectl
/// rollout status` on the hub waits for it. DaemonSets and Jobs count the scheduled
/// clusters only (they have no replicas to move).
pub fn template_status(
    group: &str,
    kind: &str,
    interpreted: &[String],
    template_generation: i64,
    previous: Option<&Value>,
    members: &[Reported],
    expected: usize,
) -> Option<Value> {
    let scheduled: Vec<Reported> = members.iter().filter(|m| m.scheduled).copied().collect();
    // by group and kind: a custom kind named Job is not a Job
    let mut status = match (group, kind) {
        ("apps", "Deployment") => sums(DEPLOYMENT, DEPLOYMENT_NEW, members),
        ("apps", "StatefulSet") => sums(STATEFUL_SET, STATEFUL_SET_NEW, members),
        ("apps", "DaemonSet") => sums(DAEMON_SET, &[], &scheduled),
        ("batch", "Job") => return Some(job_status(previous, &scheduled, expected)),
        // only the fields named: a custom kind's status schema may declare no
        // observedGeneration, and a server-side apply of an undeclared field fails
        _ if !interpreted.is_empty() => {
            let fields: Vec<&str> = interpreted.iter().map(String::as_str).collect();
            return Some(Value::Object(sums(&fields, &[], &scheduled)));
        }
        _ => return None,
    };
    let current = scheduled.len() == expected
        && scheduled.iter().all(|m| {
            observed(m.status) && m.status.template_generation == Some(template_generation)
        });
    let generation = if current {
        Some(Value::from(template_generation))
    } else {
        previous.and_then(|p| p.get("observedGeneration")).cloned()
    };
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), g);
    }
    Some(Value::Object(status))
}

/// Whether the member object's controller has observed its latest spec.
fn observed(m: &ManifestStatus) -> bool {
    let seen = m
        .status
        .as_ref()
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    matches!((seen, m.generation), (Some(seen), Some(g)) if seen >= g)
}

/// Each counter summed over the members (a missing or non-numeric one counts 0); the
/// `new` counters count a moving cluster's replicas up to its share only.
fn sums(counters: &[&str], new: &[&str], members: &[Reported]) -> Map<String, Value> {
    counters
        .iter()
        .map(|c| {
            let total: i64 = members
                .iter()
                .filter_map(|m| {
                    let n = m.status.status.as_ref()?.get(*c)?.as_i64()?;
                    Some(match m.share {
                        Some(share) if new.contains(c) => n.min(share),
                        _ => n,
                    })
                })
                // members report these: a wild count saturates rather than wraps
                .fold(0i64, i64::saturating_add)
                .clamp(0, i64::from(i32::MAX));
            (c.to_string(), Value::from(total))
        })
        .collect()
}

/// A Job's status: counts summed; `startTime` the earliest; `Complete` (and the latest
/// `completionTime`) only when every scheduled cluster's Job completed; `Failed` when
/// any did. A finished Job's status is final, as in Kubernetes.
fn job_status(previous: Option<&Value>, members: &[Reported], expected: usize) -> Value {
    if let Some(p) = previous.filter(|p| finished(p).is_some()) {
        return p.clone();
    }
    let mut status = sums(JOB, &[], members);
    let statuses: Vec<&Value> = members
        .iter()
        .filter_map(|m| m.status.status.as_ref())
        .collect();
    if let Some(start) = earliest(statuses.iter().filter_map(|s| s.get("startTime"))) {
        status.insert("startTime".into(), start);
    }
    let failed: Vec<&Value> = statuses
        .iter()
        .filter_map(|s| finished(s).filter(|(t, _)| *t == "Failed").map(|(_, c)| c))
        .collect();
    let complete: Vec<&Value> = statuses
        .iter()
        .filter_map(|s| {
            finished(s)
                .filter(|(t, _)| *t == "Complete")
                .map(|(_, c)| c)
        })
        .collect();
    let mut conditions = Vec::new();
    if let Some(first) = failed.first() {
        let why = [first.get("reason"), first.get("message")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let message = format!(
            "the Job failed in {} of {expected} member cluster(s){}",
            failed.len(),
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        );
        let at = earliest(failed.iter().filter_map(|c| c.get("lastTransitionTime")));
        conditions.push(condition("Failed", "JobFailed", &message, at));
    }
    if expected > 0 && complete.len() == expected && members.len() == expected {
        let message = format!("the Job completed in all {expected} member cluster(s)");
        let at = latest(complete.iter().filter_map(|c| c.get("lastTransitionTime")));
        conditions.push(condition("Complete", "Completed", &message, at));
        if let Some(done) = latest(statuses.iter().filter_map(|s| s.get("completionTime"))) {
            status.insert("completionTime".into(), done);
        }
    }
    if !conditions.is_empty() {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    Value::Object(status)
}

/// A Job condition; its times are the members' (no clock here).
fn condition(type_: &str, reason: &str, message: &str, at: Option<Value>) -> Value {
    let mut c = json!({"type": type_, "status": "True", "reason": reason, "message": message});
    if let Some(at) = at {
        c["lastProbeTime"] = at.clone();
        c["lastTransitionTime"] = at;
    }
    c
}

/// The True `Complete` or `Failed` condition of a Job status, with its type.
fn finished(status: &Value) -> Option<(&str, &Value)> {
    status.get("conditions")?.as_array()?.iter().find_map(|c| {
        let t = c.get("type")?.as_str()?;
        let on = c.get("status")?.as_str()? == "True";
        (on && (t == "Complete" || t == "Failed")).then_some((t, c))
    })
}

/// The earliest of the times that parse (RFC 3339).
fn earliest<'a>(times: impl Iterator<Item = &'a Value>) -> Option<Value> {
    parsed(times)
        .min_by_key(|(t, _)| *t)
        .map(|(_, v)| v.clone())
}

/// The latest of the times that parse (RFC 3339).
fn latest<'a>(times: impl Iterator<Item = &'a Value>) -> Option<Value> {
    parsed(times)
        .max_by_key(|(t, _)| *t)
        .map(|(_, v)| v.clone())
}

fn parsed<'a>(
    times: impl Iterator<Item = &'a Value>,
) -> impl Iterator<Item = (Timestamp, &'a Value)> {
    times.filter_map(|v| Some((v.as_str()?.parse::<Timestamp>().ok()?, v)))
}

#[cfg(test)]
mod tests;
