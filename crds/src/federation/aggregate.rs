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
/// What a copy that is leaving counts for (see [`template_status`]): every replica it
/// runs, none of them updated (nor, for a StatefulSet, current).
const DEPLOYMENT_LEAVING: &[&str] = &[
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
];
const STATEFUL_SET_LEAVING: &[&str] = &["replicas", "readyReplicas", "availableReplicas"];
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

/// The template's `.status` from its members' statuses, or `None` for kinds without an
/// aggregation rule (their hub status is left alone).
///
/// - `template_generation`: the template's `metadata.generation`;
/// - `previous`: the template's current `.status`;
/// - `members`: the status each member reported for the template's manifest;
/// - `expected`: how many clusters the template is scheduled to;
/// - `leaving`: the statuses of copies that still run in clusters the template is
///   moving away from (make-before-break holds them, a graceful eviction keeps them).
///
/// A leaving Deployment's or StatefulSet's replicas count in `replicas`,
/// `readyReplicas`, `availableReplicas` (and a Deployment's `unavailableReplicas`), but
/// never as updated: the move then reads as a Deployment's own rolling update does, and
/// `kubectl rollout status` on the hub waits while "old replicas are pending
/// termination". Leaving DaemonSets and Jobs count nothing (they have no replica count
/// to move).
pub fn template_status(
    kind: &str,
    template_generation: i64,
    previous: Option<&Value>,
    members: &[&ManifestStatus],
    expected: usize,
    leaving: &[&ManifestStatus],
) -> Option<Value> {
    let (counters, leaving_counters) = match kind {
        "Deployment" => (DEPLOYMENT, DEPLOYMENT_LEAVING),
        "StatefulSet" => (STATEFUL_SET, STATEFUL_SET_LEAVING),
        "DaemonSet" => (DAEMON_SET, &[][..]),
        "Job" => return Some(job_status(previous, members, expected)),
        _ => return None,
    };
    let mut status = sums(counters, members);
    for (counter, extra) in sums(leaving_counters, leaving) {
        let base = status.get(&counter).and_then(Value::as_i64).unwrap_or(0);
        let extra = extra.as_i64().unwrap_or(0);
        status.insert(counter, Value::from(base + extra));
    }
    let current = members.len() == expected
        && members
            .iter()
            .all(|m| observed(m) && m.template_generation == Some(template_generation));
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

/// Each counter summed over the members (a missing or non-numeric one counts 0).
fn sums(counters: &[&str], members: &[&ManifestStatus]) -> Map<String, Value> {
    counters
        .iter()
        .map(|c| {
            let total: i64 = members
                .iter()
                .filter_map(|m| m.status.as_ref()?.get(*c)?.as_i64())
                .sum();
            (c.to_string(), Value::from(total))
        })
        .collect()
}

/// A Job's status: counts summed; `startTime` the earliest; `Complete` (and the latest
/// `completionTime`) only when every scheduled cluster's Job completed; `Failed` when
/// any did. A finished Job's status is final, as in Kubernetes.
fn job_status(previous: Option<&Value>, members: &[&ManifestStatus], expected: usize) -> Value {
    if let Some(p) = previous.filter(|p| finished(p).is_some()) {
        return p.clone();
    }
    let mut status = sums(JOB, members);
    let statuses: Vec<&Value> = members.iter().filter_map(|m| m.status.as_ref()).collect();
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
