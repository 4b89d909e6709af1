//! The binding controller's pure status step: the Works of a binding → its
//! `aggregatedStatus`, `FullyApplied`, and the hub template's `.status` (§8 H.52–53).
//!
//! A cluster counts as applied only when its Work's `Applied` condition is True for
//! the Work's current generation: a condition the applier wrote for older manifests
//! says nothing about the ones the hub just rendered. Nor when its Cluster is not
//! Ready (E.38): nothing rewrites the Work's status of a member that stopped
//! reporting (a Pull member whose agent died leaves its lease to expire), so its last
//! report is not shown as current: not applied (ClusterNotReady), health Unknown, and
//! its counts are left out of the template's `.status`.

use std::collections::BTreeMap;
use std::sync::Arc;

use causeway_crds::federation::aggregate;
use causeway_crds::federation::binding::{
    AggregatedStatusItem, BindingSpec, BindingStatus, conditions,
};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::work::{self, ManifestStatus, ResourceHealth, Work};
use causeway_crds::well_known::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use serde_json::Value;

use crate::clusters::status::is_ready;

/// What the binding's status should be (see the module docs):
/// - `conditions`: the previous ones (the detector's `Scheduled` among them) with
///   `FullyApplied` set from the clusters' results, its `lastTransitionTime` kept while
///   its status does not change;
/// - `aggregatedStatus`: one item per scheduled cluster, in `spec.clusters` order;
/// - `schedulingReasons`: the previous ones (the detector's).
///
/// `failed` are the clusters whose overrides failed in this round (their Work, if any,
/// holds older manifests).
pub fn binding_status(
    spec: &BindingSpec,
    works: &[Arc<Work>],
    clusters: &[Arc<Cluster>],
    failed: &[(String, String)],
    previous: Option<&BindingStatus>,
    now: &Time,
) -> BindingStatus {
    let items: Vec<AggregatedStatusItem> = spec
        .clusters
        .iter()
        .map(|t| item(&t.name, work_of(works, &t.name), clusters, failed))
        .collect();
    let not_applied: Vec<String> = items
        .iter()
        .filter(|i| !i.applied)
        .map(|i| match &i.applied_message {
            Some(why) => format!("{} ({why})", i.cluster_name),
            None => i.cluster_name.clone(),
        })
        .collect();
    let (status, reason, message) = if items.is_empty() {
        (
            "False",
            conditions::REASON_FULLY_APPLIED_FAILED,
            "scheduled to no cluster".to_string(),
        )
    } else if not_applied.is_empty() {
        (
            "True",
            conditions::REASON_FULLY_APPLIED_SUCCESS,
            format!("applied in every scheduled cluster ({})", items.len()),
        )
    } else {
        (
            "False",
            conditions::REASON_FULLY_APPLIED_FAILED,
            format!(
                "not applied in {} of {} cluster(s): {}",
                not_applied.len(),
                items.len(),
                not_applied.join("; ")
            ),
        )
    };
    let prev_conditions = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let fully = Condition {
        type_: conditions::FULLY_APPLIED.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: None,
        last_transition_time: crate::condition::since(
            prev_conditions,
            conditions::FULLY_APPLIED,
            status,
            now,
        ),
    };
    let mut conds: Vec<Condition> = prev_conditions.to_vec();
    match conds
        .iter_mut()
        .find(|c| c.type_ == conditions::FULLY_APPLIED)
    {
        Some(c) => *c = fully,
        None => conds.push(fully),
    }
    BindingStatus {
        conditions: conds,
        aggregated_status: items,
        scheduling_reasons: previous
            .map(|p| p.scheduling_reasons.clone())
            .unwrap_or_default(),
        rollout: previous.and_then(|p| p.rollout.clone()),
        redistribution: previous.and_then(|p| p.redistribution.clone()),
        last_scheduled_time: previous.and_then(|p| p.last_scheduled_time.clone()),
    }
}

/// Sets the binding's `RolledOut` condition from where its rollout stands (`None`: the
/// binding has no rollout, and the condition goes), and `status.rollout`, the wave
/// waited on since when; past the rollout's `progressDeadlineSeconds` the condition's
/// reason is ProgressDeadlineExceeded. Returns the wave's deadline, if it has one.
pub fn with_rollout(
    st: &mut BindingStatus,
    progress: Option<&causeway_crds::federation::rollout::Progress>,
    spec: Option<&causeway_crds::federation::rollout::Rollout>,
    now: &Time,
) -> Option<k8s_openapi::jiff::Timestamp> {
    use causeway_crds::federation::rollout::{self, Progress};
    // the wave waited on, and since when: what the progress deadline is measured from
    let wave = progress.and_then(|p| rollout::wave_progress(p, st.rollout.as_ref(), now));
    let due = wave
        .as_ref()
        .zip(spec)
        .and_then(|(w, r)| rollout::deadline(r, w));
    let overdue = due.filter(|d| now.0 >= *d);
    st.rollout = wave;
    let c = progress.map(|progress| {
        let (status, reason) = match progress {
            Progress::Complete { .. } => ("True", conditions::REASON_ROLLOUT_COMPLETE),
            Progress::Waiting { .. } if overdue.is_some() => {
                ("False", conditions::REASON_PROGRESS_DEADLINE_EXCEEDED)
            }
            Progress::Waiting { .. } => ("False", conditions::REASON_WAVE_IN_PROGRESS),
            Progress::Unordered { .. } => ("Unknown", conditions::REASON_NO_GENERATION),
        };
        let message = match (overdue, spec.and_then(|r| r.progress_deadline_seconds)) {
            (Some(at), Some(secs)) => format!(
                "the progress deadline ({secs}s) passed at {at}: {}; nothing is rolled back: fix what the wave waits for, or apply the previous template",
                progress.message()
            ),
            _ => progress.message(),
        };
        (status, reason, message, progress.generation())
    });
    set_condition(st, conditions::ROLLED_OUT, c, now);
    due
}

/// Sets `RolledOut=False` with the reason the hub renders nothing (`reason`, `message`:
/// dependent overrides missing, a broken ResourceInterpreter) when the template's
/// `generation` is not the one the condition was last about; a generation already
/// rolled out keeps its condition (its clusters run it).
pub fn rollout_blocked(
    st: &mut BindingStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let about = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::ROLLED_OUT)
        .and_then(|c| c.observed_generation);
    if about.is_some() && about == generation {
        return;
    }
    let message = format!(
        "template generation {} is not rolled out: {message}; the clusters keep what they run",
        generation.unwrap_or_default()
    );
    set_condition(
        st,
        conditions::ROLLED_OUT,
        Some(("False", reason, message, generation)),
        now,
    );
}

/// Sets the binding's `Redistributed` condition from the replica guard's outcome
/// (`None`: the template's kind is not guarded, and the condition goes), and
/// `status.redistribution`, since when a hold has not moved; past `spec`'s
/// `progressDeadlineSeconds` the condition says the hold is stuck. Returns the hold's
/// deadline, if it has one.
pub fn with_redistribution(
    st: &mut BindingStatus,
    outcome: Option<Result<&causeway_crds::federation::redistribution::Plan, &str>>,
    spec: Option<&causeway_crds::federation::redistribution::Redistribution>,
    now: &Time,
) -> Option<k8s_openapi::jiff::Timestamp> {
    use causeway_crds::federation::redistribution as guard;
    let hold = match outcome {
        Some(Ok(plan)) => guard::hold_progress(plan, st.redistribution.as_ref(), now),
        _ => None,
    };
    let due = hold.as_ref().and_then(|h| guard::deadline(spec, h));
    let overdue = due.filter(|d| now.0 >= *d);
    st.redistribution = hold;
    let c = outcome.map(|o| match o {
        Ok(plan) if plan.held.is_empty() => (
            "True",
            conditions::REASON_SHARES_APPLIED,
            plan.message(),
            None,
        ),
        Ok(plan) => match (overdue, spec.and_then(|r| r.progress_deadline_seconds)) {
            (Some(at), Some(secs)) => (
                "False",
                conditions::REASON_PROGRESS_DEADLINE_EXCEEDED,
                // the plan's message first: `redistribution::holds` reads its start
                format!(
                    "{}; the progress deadline ({secs}s without a replica moving) passed at \
                     {at}: nothing is forced, the held replicas stay until the clusters short \
                     of their share run them (give those clusters room), or raise \
                     spec.redistribution.maxUnavailable",
                    plan.message()
                ),
                None,
            ),
            _ => (
                "False",
                conditions::REASON_HOLDING_REPLICAS,
                plan.message(),
                None,
            ),
        },
        Err(e) => (
            "False",
            conditions::REASON_INVALID_MAX_UNAVAILABLE,
            format!("{e}; the shares were written at once"),
            None,
        ),
    });
    set_condition(st, conditions::REDISTRIBUTED, c, now);
    due
}

/// Sets (or with `None` removes) the condition `type_` from `(status, reason, message,
/// observedGeneration)`, its transition time kept while its status stays.
fn set_condition(
    st: &mut BindingStatus,
    type_: &str,
    c: Option<(&str, &str, String, Option<i64>)>,
    now: &Time,
) {
    let Some((status, reason, message, observed_generation)) = c else {
        st.conditions.retain(|c| c.type_ != type_);
        return;
    };
    let c = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation,
        last_transition_time: crate::condition::since(&st.conditions, type_, status, now),
    };
    match st.conditions.iter_mut().find(|x| x.type_ == type_) {
        Some(x) => *x = c,
        None => st.conditions.push(c),
    }
}

/// The hub template's `.status` from its Works (the first manifest of each), or `None`
/// for kinds without an aggregation rule; see [`aggregate::template_status`].
///
/// `moving` are the clusters the workload is moving away from, with their share (0: no
/// longer scheduled). A cluster counts only while its Cluster is Ready (a failed
/// cluster's last report says nothing about what still runs there: a scheduled one
/// left out also keeps `observedGeneration` where it was, E.38); a cluster no longer
/// scheduled only while it is one of those and its Work is not being deleted.
pub fn template_status(
    interpreted: &[String],
    template_generation: i64,
    previous: Option<&Value>,
    spec: &BindingSpec,
    works: &[Arc<Work>],
    moving: &BTreeMap<String, i64>,
    clusters: &[Arc<Cluster>],
) -> Option<Value> {
    let members: Vec<aggregate::Reported> = works
        .iter()
        .filter_map(|w| {
            let cluster = w.labels().get(labels::CLUSTER)?;
            let scheduled = spec.clusters.iter().any(|t| &t.name == cluster);
            let share = moving.get(cluster).copied();
            let ready = clusters
                .iter()
                .any(|c| &c.name_any() == cluster && is_ready(c));
            let counted = ready
                && (scheduled || (share.is_some() && w.metadata.deletion_timestamp.is_none()));
            Some(aggregate::Reported {
                status: first_manifest(w).filter(|_| counted)?,
                scheduled,
                share,
            })
        })
        .collect();
    let r = &spec.resource;
    aggregate::template_status(
        causeway_crds::federation::group_of(&r.api_version),
        &r.kind,
        interpreted,
        template_generation,
        previous,
        &members,
        spec.clusters.len(),
    )
}

/// The Work of `cluster` among the binding's Works.
/// The Work of `cluster` among a binding's Works (by its cluster label).
pub(crate) fn work_of<'a>(works: &'a [Arc<Work>], cluster: &str) -> Option<&'a Work> {
    works
        .iter()
        .map(AsRef::as_ref)
        .find(|w| w.labels().get(labels::CLUSTER).map(String::as_str) == Some(cluster))
}

/// The status of the Work's first manifest (ordinal 0).
fn first_manifest(w: &Work) -> Option<&ManifestStatus> {
    let statuses = &w.status.as_ref()?.manifest_statuses;
    statuses
        .iter()
        .find(|m| m.identifier.ordinal == 0)
        .or(statuses.first())
}

/// The aggregated status of one scheduled cluster.
fn item(
    cluster: &str,
    work: Option<&Work>,
    clusters: &[Arc<Cluster>],
    failed: &[(String, String)],
) -> AggregatedStatusItem {
    let applied_condition = work.and_then(|w| {
        let c = w
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == work::conditions::APPLIED)?;
        Some((w, c))
    });
    let current = applied_condition.is_some_and(|(w, c)| {
        c.status == "True"
            && w.metadata
                .generation
                .is_none_or(|g| c.observed_generation.is_some_and(|o| o >= g))
    });
    let override_failure = failed.iter().find(|(c, _)| c == cluster).map(|(_, m)| m);
    let ready = clusters
        .iter()
        .find(|c| c.name_any() == cluster)
        .map(|c| is_ready(c));
    // E.38: a member that is not Ready reports nothing fresh; its Work's status is its
    // last report, not what it runs now
    let applied = current && override_failure.is_none() && ready == Some(true);
    let message = match (override_failure, ready) {
        (Some(why), _) => Some(format!(
            "{}: {why}",
            work::conditions::REASON_APPLY_OVERRIDES_FAILED
        )),
        _ if applied => applied_condition
            .map(|(_, c)| c.message.clone())
            .filter(|m| !m.is_empty()),
        (None, None) => Some(format!(
            "cluster {cluster} is not registered (no Cluster object)"
        )),
        (None, Some(false)) => Some(format!(
            "cluster {cluster} is not Ready ({})",
            work::conditions::REASON_CLUSTER_NOT_READY
        )),
        (None, Some(true)) => Some(match applied_condition {
            Some((_, c)) if c.status != "True" && !c.message.is_empty() => c.message.clone(),
            Some((_, c)) if c.status != "True" => {
                format!(
                    "the Work's Applied condition is {} ({})",
                    c.status, c.reason
                )
            }
            Some((w, _)) => format!(
                "waiting for the work applier to apply generation {} of the Work",
                w.metadata.generation.unwrap_or_default()
            ),
            None => "waiting for the work applier".to_string(),
        }),
    };
    let statuses = work
        .and_then(|w| w.status.as_ref())
        .map(|s| s.manifest_statuses.as_slice())
        .unwrap_or_default();
    AggregatedStatusItem {
        cluster_name: cluster.to_string(),
        status: work.and_then(first_manifest).and_then(|m| m.status.clone()),
        applied,
        applied_message: message,
        health: match ready {
            Some(true) => health(statuses),
            _ => Some(ResourceHealth::Unknown),
        },
    }
}

/// Health of the member objects: Unhealthy if any is, else Unknown if any is (or has
/// no health yet), else Healthy; `None` before anything was reported.
fn health(statuses: &[ManifestStatus]) -> Option<ResourceHealth> {
    // (an object no manifest names any more, whose removal failed, is no part of it)
    let each = || {
        ManifestStatus::of_manifests(statuses).map(|m| m.health.unwrap_or(ResourceHealth::Unknown))
    };
    if each().next().is_none() {
        None
    } else if each().any(|h| h == ResourceHealth::Unhealthy) {
        Some(ResourceHealth::Unhealthy)
    } else if each().any(|h| h == ResourceHealth::Unknown) {
        Some(ResourceHealth::Unknown)
    } else {
        Some(ResourceHealth::Healthy)
    }
}

#[cfg(test)]
mod tests;
