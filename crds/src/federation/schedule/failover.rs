//! Cluster failover (federation.md §8 J.58–J.62), opted into by a policy's
//! `failover.cluster`. Without it (J.58) a NotReady or Unknown member only gets the
//! registry's NoSchedule taints and keeps what it runs. With it, a member whose `Ready`
//! condition has not been True for longer than the workload tolerates is left out of
//! the placement, so its replicas go to the others (the binding's Work for it is then
//! purged as `purgeMode` says, by the hub).
//!
//! How long is tolerated is Kubernetes' NoExecute `tolerationSeconds`, against the
//! taint the registry puts on such a member (`cluster.causeway.io/not-ready` for
//! False, `…/unreachable` for Unknown) taken with effect NoExecute: the shortest
//! `tolerationSeconds` of the `clusterTolerations` that tolerate it; forever when one
//! of them has none; 300 s when none tolerates it (as Karmada's default tolerations).
//! The clock starts at the earlier of the condition's `lastTransitionTime` and the
//! time the registry first tainted the member (the taint's `timeAdded`, kept while
//! Ready moves between False and Unknown).

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::taints::tolerates;
use crate::federation::cluster::{Cluster, conditions, taints};

/// Tolerated when no cluster toleration says otherwise (Karmada's default).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// `cluster`'s Ready condition, if it has one.
fn ready_condition(cluster: &Cluster) -> Option<&Condition> {
    cluster
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY)
}

/// Whether `cluster`'s Ready condition is True.
pub fn ready(cluster: &Cluster) -> bool {
    ready_condition(cluster).is_some_and(|c| c.status == "True")
}

/// Whether `taint` is one the registry's monitor keeps in step with Ready (its
/// NoSchedule `not-ready` or `unreachable`).
pub fn follows_ready(taint: &Taint) -> bool {
    taint.effect == "NoSchedule"
        && (taint.key == taints::NOT_READY || taint.key == taints::UNREACHABLE)
}

/// Since when `cluster` has not been Ready (None while it is, or has no Ready
/// condition yet): the earlier of the condition's `lastTransitionTime` and the time the
/// registry first tainted it (its taint keeps its `timeAdded` when Ready moves between
/// False and Unknown, which moves the condition's time). Failover and stale endpoints
/// (EPS-7) count from it; it does not move later when the taint arrives a round after
/// the condition.
pub fn not_ready_since(cluster: &Cluster) -> Option<Timestamp> {
    let ready = ready_condition(cluster)?;
    if ready.status == "True" {
        return None;
    }
    cluster
        .spec
        .taints
        .iter()
        .filter(|t| follows_ready(t))
        .filter_map(|t| t.time_added.as_ref().map(|t| t.0))
        .chain([ready.last_transition_time.0])
        .min()
}

/// When `cluster` fails over under `tolerations`: `Some((since, deadline))` while its
/// Ready condition is not True (since it changed, and the moment the workload leaves),
/// `None` while it is Ready or the failure is tolerated forever.
pub fn failing(cluster: &Cluster, tolerations: &[Toleration]) -> Option<(Timestamp, Timestamp)> {
    let ready = ready_condition(cluster)?;
    if ready.status == "True" {
        return None;
    }
    let key = if ready.status == "Unknown" {
        taints::UNREACHABLE
    } else {
        taints::NOT_READY
    };
    let taint = Taint {
        key: key.into(),
        effect: "NoExecute".into(),
        ..Taint::default()
    };
    let matching: Vec<&Toleration> = tolerations
        .iter()
        .filter(|t| tolerates(t, &taint))
        .collect();
    // Kubernetes' `getMinTolerationTime`: the least of the matching tolerations'
    // seconds (0 or less: at once); forever only when none of them sets seconds
    let seconds = if matching.is_empty() {
        DEFAULT_TOLERATION_SECONDS
    } else {
        matching
            .iter()
            .filter_map(|t| t.toleration_seconds)
            .min()?
            .max(0)
    };
    let since = not_ready_since(cluster)?;
    // a toleration too long to add is one that never ends
    let deadline = since.checked_add(SignedDuration::from_secs(seconds)).ok()?;
    Some((since, deadline))
}

/// Whether `cluster` has failed for longer than `tolerations` allow at `now`: the
/// deadline it passed, if it did.
pub fn past_deadline(
    cluster: &Cluster,
    tolerations: &[Toleration],
    now: Timestamp,
) -> Option<Timestamp> {
    let (_, deadline) = failing(cluster, tolerations)?;
    (now >= deadline).then_some(deadline)
}

/// Why a failed-over cluster is left out, for the binding's scheduling reasons.
pub fn reason(cluster: &Cluster, since: Timestamp, deadline: Timestamp) -> String {
    let status = cluster
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY))
        .map(|c| c.status.clone())
        .unwrap_or_default();
    let tolerated = deadline.duration_since(since).as_secs();
    format!(
        "Ready has been {status} since {since}, longer than the {tolerated}s tolerated: failover.cluster moved the workload away"
    )
}
