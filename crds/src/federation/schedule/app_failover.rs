//! Application failover (federation.md §8 J.64), opted into by a policy's
//! `failover.application`: a template whose objects stay Unhealthy in a cluster for
//! longer than `decisionConditions.tolerationSeconds` (300 s by default) is moved away
//! from that cluster, and the binding records it ([`Eviction`] in `spec.evictions`) so
//! the cluster stays out of the placement until the template's next generation — the
//! workload does not bounce back to where it just failed, and a new version (the
//! likely fix) is tried there again. The member copy is then purged as `purgeMode`
//! says, by the hub.
//!
//! "Unhealthy" is the Work's `Degraded` condition: True while some object is
//! Unhealthy (a Deployment without its replicas available, a failed Job...), and its
//! `lastTransitionTime` is when that began under the template generation the member
//! runs, so the clock survives restarts and starts again with a new template (a
//! replica count alone, as a division or a make-before-break step changes it, keeps
//! it). Only
//! a report of the template's current generation counts; unknown health (no rule for
//! the kind, no status yet) never does.
//!
//! ★ Two guards Karmada lacks:
//! - a template that runs healthy (applied, at its current generation) in none of the
//!   other clusters it is scheduled to is not moved: the fault is likely the
//!   application's (a bad image, a bad config, a canary wave of a bad version), and
//!   moving it would only pile it onto fewer clusters ([`Verdict::held`] says so);
//! - a move that would leave the template nowhere does not happen (the detector
//!   schedules without the new evictions then, as J.61 for cluster failover).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::federation::binding::{Eviction, TargetCluster};
use crate::federation::propagation::ApplicationFailoverBehavior;
use crate::federation::work::{ManifestStatus, Work, conditions};
use crate::federation::{rollout, state_preservation};

/// How long an application may stay unhealthy when the policy does not say (Karmada's
/// default).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// How long a graceful purge waits for the replacement when the policy does not say
/// (Karmada's default).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 600;

/// What application failover makes of a binding this round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// The evictions the binding keeps (still the template's generation) followed by
    /// the new ones, before scheduling says whether the new ones can be honoured.
    pub evictions: Vec<Eviction>,
    /// How many of `evictions` are new this round (the last ones).
    pub new: usize,
    /// Clusters past their toleration that are not moved, with why.
    pub held: Vec<(String, String)>,
    /// When a cluster that is unhealthy now reaches the end of its toleration.
    pub next_due: Option<Timestamp>,
}

/// Since when a cluster's Work reports its objects unhealthy at template
/// `generation`: a report of the Work's current generation whose objects all run that
/// template generation; `None` while healthy, unknown, not reported, or still running
/// another generation.
pub fn unhealthy_since(work: &Work, generation: Option<i64>) -> Option<Timestamp> {
    let c = degraded(work)?;
    let statuses = &work.status.as_ref()?.manifest_statuses;
    let mut manifests = ManifestStatus::of_manifests(statuses).peekable();
    let current = generation.is_none_or(|g| {
        manifests.peek().is_some() && manifests.all(|m| m.template_generation == Some(g))
    });
    (c.status == "True" && current).then_some(c.last_transition_time.0)
}

/// The Work's Degraded condition, if it reports on the Work's current generation.
fn degraded(work: &Work) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let c = work
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DEGRADED)?;
    let current = work
        .metadata
        .generation
        .is_none_or(|g| c.observed_generation.is_some_and(|o| o >= g));
    current.then_some(c)
}

/// The toleration of `behavior`, in seconds (never negative).
pub fn toleration_seconds(behavior: &ApplicationFailoverBehavior) -> i64 {
    behavior
        .decision_conditions
        .toleration_seconds
        .map_or(DEFAULT_TOLERATION_SECONDS, i64::from)
        .max(0)
}

/// The grace period of a graceful purge under `behavior`, in seconds.
pub fn grace_period_seconds(behavior: &ApplicationFailoverBehavior) -> i64 {
    behavior
        .grace_period_seconds
        .map_or(DEFAULT_GRACE_PERIOD_SECONDS, i64::from)
        .max(0)
}

/// Which clusters application failover moves the template away from: `behavior` is
/// the policy's `failover.application` (`None`: nothing is evicted, and earlier
/// evictions are forgotten), `scheduled` the binding's clusters, `recorded` its
/// evictions, `work_of` the binding's Work in a cluster and `generation` the
/// template's `metadata.generation`.
pub fn decide<'a>(
    behavior: Option<&ApplicationFailoverBehavior>,
    scheduled: &[TargetCluster],
    recorded: &[Eviction],
    work_of: impl Fn(&str) -> Option<&'a Work>,
    generation: Option<i64>,
    now: Timestamp,
) -> Verdict {
    let mut out = Verdict::default();
    let Some(behavior) = behavior else {
        return out;
    };
    // a later generation is tried again where an earlier one failed
    out.evictions = recorded
        .iter()
        .filter(|e| e.template_generation == generation)
        .cloned()
        .collect();
    let tolerated = toleration_seconds(behavior);
    let sick: Vec<(&str, Option<Timestamp>)> = scheduled
        .iter()
        .filter(|t| !out.evictions.iter().any(|e| e.cluster == t.name))
        .map(|t| {
            let since = work_of(&t.name).and_then(|w| unhealthy_since(w, generation));
            (t.name.as_str(), since)
        })
        .collect();
    // healthy somewhere else: running this template generation, applied and healthy
    // (not merely "not unhealthy": a copy refused by a quota, or one a rollout holds at
    // an older generation, proves nothing about this one)
    let healthy = |name: &str| match generation {
        Some(g) => rollout::settled_at(work_of(name), g).is_ok(),
        None => work_of(name)
            .and_then(degraded)
            .is_some_and(|c| c.status == "False"),
    };
    let mut due = Vec::new();
    for (name, since) in &sick {
        let Some(since) = since else { continue };
        let Ok(deadline) = since.checked_add(SignedDuration::from_secs(tolerated)) else {
            continue; // a toleration too long to add never ends
        };
        if now < deadline {
            out.next_due = Some(out.next_due.map_or(deadline, |d| d.min(deadline)));
            continue;
        }
        due.push((*name, *since));
    }
    if due.is_empty() {
        return out;
    }
    let elsewhere = scheduled
        .iter()
        .any(|t| !due.iter().any(|(n, _)| *n == t.name) && healthy(&t.name));
    if scheduled.len() > 1 && !elsewhere {
        for (name, _) in due {
            let others: Vec<&str> = scheduled
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| *n != name)
                .collect();
            out.held.push((
                name.to_string(),
                format!(
                    "healthy in none of the other clusters it is scheduled to ({}): the fault looks like the application's (or those clusters are not Ready), so failover.application does not move it; fix the template",
                    others.join(", ")
                ),
            ));
        }
        return out;
    }
    let rules = behavior
        .state_preservation
        .as_ref()
        .map(|p| p.rules.as_slice())
        .unwrap_or_default();
    let before: Vec<String> = scheduled.iter().map(|t| t.name.clone()).collect();
    for (name, since) in due {
        let mut reason = format!(
            "unhealthy since {since}, longer than the {tolerated}s failover.application tolerates: moved away until the template's next generation"
        );
        let (preserved, problems) = if rules.is_empty() {
            Default::default()
        } else {
            let status = work_of(name).and_then(state_preservation::copy_status);
            state_preservation::preserve(rules, status)
        };
        if !problems.is_empty() {
            reason = format!(
                "{reason}; statePreservation kept nothing for {}",
                problems.join("; ")
            );
        }
        out.evictions.push(Eviction {
            cluster: name.to_string(),
            reason,
            // when the move is made (after any wait for the rate limit, or for a hub
            // that was down): a graceful purge's grace period counts from it, not from
            // the deadline, which may be long past
            evicted_at: Time(now),
            template_generation: generation,
            preserved_label_state: preserved,
            clusters_before_failover: if rules.is_empty() {
                Vec::new()
            } else {
                before.clone()
            },
        });
        out.new += 1;
    }
    out
}

#[cfg(test)]
#[path = "app_failover_tests.rs"]
mod tests;
