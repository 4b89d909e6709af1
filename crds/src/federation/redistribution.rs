//! Make-before-break replica moves (federation.md §9.2 ★, karmada#3272, #6735).
//!
//! When the division of a workload's replicas changes (weights edited, a cluster
//! added to or taken out of the placement, a migration from one cluster to another),
//! Karmada writes every cluster's new share at once: the clusters that lose replicas
//! delete them at once, while the ones that gain them are still pulling images or
//! waiting for room, so the workload runs below its replica count, or at zero in a
//! migration. Causeway instead lets a cluster give up a replica only when the others
//! run enough available replicas to make up for it: at every moment, the available
//! replicas of all the clusters stay at least the total the division asks for, less
//! the policy's `redistribution.maxUnavailable` (0 by default). The clusters that gain
//! replicas get them at once (the surge).
//!
//! A cluster is held only for what the others lack: no more replicas are kept than
//! the clusters that do not lose any run fewer available than their shares. A plain
//! scale-down, or one whose own cluster cannot run what it keeps, is never held.
//!
//! A replica the member reports as not available costs nothing to remove: a
//! Deployment's (or ReplicaSet's) scale-down deletes unavailable Pods first, so those
//! go at once when the member is not in the middle of a rollout. A StatefulSet removes
//! its highest ordinals whatever their state, so for it only available replicas count.
//!
//! What is not known counts against the move: a cluster that is not Ready, or has not
//! reported (or reported a foreign object, or a status older than its spec), adds no
//! available replica; a member's report counts at most the replicas its Work asks for
//! now (a report from before a scale-down would count Pods that are going).
//!
//! Pure: [`plan`] decides from each cluster's share, the replicas its Work asks for
//! and what it reports ([`observe`]). The binding controller
//! (`controllers/src/propagation/hub.rs`) writes the result and the binding's
//! `Redistributed` condition.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::federation::interpreter::{self, Interpretation};
use crate::federation::work::Work;

/// How replicas move between clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Redistribution {
    /// How many replicas may be unavailable, across all clusters, while replicas move
    /// between them: a count (`1`) or a percentage (`"25%"`, rounded down) of the
    /// replicas the clusters should run in total. Default 0: a cluster gives up an
    /// available replica only once the others run one more. `"100%"` moves them at
    /// once, as Karmada does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// Seconds a hold may go without a replica moving (a held cluster giving one up,
    /// or one more available in the others) before it is reported stuck: the
    /// binding's `Redistributed` condition turns to `ProgressDeadlineExceeded` and a
    /// Warning `RedistributionStuck` Event says what it waits for. Nothing is forced:
    /// the held replicas stay. At least 1; unset: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i64>,
}

/// Where a hold stands (the binding's `status.redistribution`): what the progress
/// deadline is measured from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldProgress {
    /// The shares the hold moves replicas to, by cluster: other shares (the placement
    /// or the replica count edited) make another hold, with a clock of its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, i64>,
    /// The fewest replicas held above the shares, in total, since the hold began.
    pub held: i64,
    /// The most available replicas counted over all clusters since the hold began.
    pub available: i64,
    /// When a replica last moved: the hold began, a held cluster gave one up, or the
    /// clusters ran one more available than ever before in the hold.
    pub since: Time,
}

/// Pure: where the hold `plan` makes stands, from `prev`: `None` when nothing is held.
/// The clock starts again only when a replica moves further than before (fewer held
/// than ever in this hold, or more available): a count that falls back and returns is
/// no progress. A hold towards other shares than `prev`'s is a new one.
pub fn hold_progress(plan: &Plan, prev: Option<&HoldProgress>, now: &Time) -> Option<HoldProgress> {
    let held = plan.held_total();
    if held <= 0 {
        return None;
    }
    match prev.filter(|p| p.shares == plan.shares) {
        Some(p) if held >= p.held && plan.available <= p.available => Some(p.clone()),
        Some(p) => Some(HoldProgress {
            shares: plan.shares.clone(),
            held: held.min(p.held),
            available: plan.available.max(p.available),
            since: now.clone(),
        }),
        None => Some(HoldProgress {
            shares: plan.shares.clone(),
            held,
            available: plan.available,
            since: now.clone(),
        }),
    }
}

/// When the hold `p` is overdue by `spec`'s `progressDeadlineSeconds` (none: no
/// deadline).
pub fn deadline(spec: Option<&Redistribution>, p: &HoldProgress) -> Option<Timestamp> {
    crate::federation::rollout::progress_deadline(&p.since, spec?.progress_deadline_seconds)
}

/// The kinds the guard applies to: those whose status counts available replicas (the
/// built-in workloads, and a custom kind whose interpreter says where its replica count
/// and its available count are).
pub fn guards(group: &str, kind: &str, interpretation: Option<&Interpretation>) -> bool {
    match interpretation {
        Some(i) => i.replicas_path.is_some() && i.available_path.is_some(),
        None => group == "apps" && matches!(kind, "Deployment" | "ReplicaSet" | "StatefulSet"),
    }
}

/// `maxUnavailable` of `total` replicas, or what is wrong with it.
pub fn max_unavailable(spec: Option<&Redistribution>, total: i64) -> Result<i64, String> {
    let Some(value) = spec.and_then(|s| s.max_unavailable.as_ref()) else {
        return Ok(0);
    };
    match value {
        IntOrString::Int(n) if *n >= 0 => Ok(i64::from(*n)),
        IntOrString::Int(n) => Err(format!(
            "maxUnavailable is {n}: give a count of 0 or more, or a percentage such as \"25%\""
        )),
        IntOrString::String(s) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u32>().ok())
                .filter(|p| *p <= 100)
                .ok_or_else(|| {
                    format!(
                        "maxUnavailable is {s:?}: give a count (1) or a percentage from \
                         \"0%\" to \"100%\""
                    )
                })?;
            Ok(total.max(0) * i64::from(pct) / 100)
        }
    }
}

/// What a member reports of its copy, as the guard counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Available replicas, at most those the Work asks for.
    pub available: i64,
    /// Replicas that can go without lowering the available count: the unavailable
    /// ones of a Deployment or ReplicaSet whose replicas all run the current template
    /// and number what the Work asks for; 0 otherwise.
    pub free: i64,
}

/// One cluster's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    /// The cluster.
    pub cluster: String,
    /// The replicas the division gives it now: 0 when it is no longer scheduled.
    pub share: i64,
    /// The replicas its Work asks for now, if it has a Work.
    pub current: Option<i64>,
    /// What it reports; `None` when not known (no report, the cluster is not Ready).
    pub observed: Option<Observed>,
}

/// A cluster kept above its share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The cluster.
    pub cluster: String,
    /// The replicas it keeps.
    pub keeps: i64,
    /// Its share (0: no longer scheduled).
    pub share: i64,
}

/// A cluster that runs fewer available replicas than its share, which the held
/// replicas stand in for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Short {
    /// The cluster.
    pub cluster: String,
    /// Its available replicas (0 when not known).
    pub available: i64,
    /// Its share.
    pub share: i64,
}

/// What [`plan`] decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The replicas to write for each cluster (its share, or more while it is held;
    /// a cluster no longer scheduled is listed only while it keeps some).
    pub replicas: BTreeMap<String, i64>,
    /// The clusters kept above their share, by name.
    pub held: Vec<Held>,
    /// The clusters not losing replicas that run fewer available than their share,
    /// by name (listed while something is held).
    pub short: Vec<Short>,
    /// The available replicas counted, over all clusters.
    pub available: i64,
    /// The fewest available replicas a move may leave: the total of the shares less
    /// maxUnavailable.
    pub floor: i64,
    /// The total of the shares.
    pub total: i64,
    /// Each scheduled cluster's share, by name.
    pub shares: BTreeMap<String, i64>,
}

/// The message's prefix naming a held cluster (`east keeps `).
pub fn held_prefix(cluster: &str) -> String {
    format!("{cluster} keeps ")
}

/// Whether a `Redistributed=False` message ([`Plan::message`]) holds `cluster`.
pub fn holds(message: &str, cluster: &str) -> bool {
    let prefix = held_prefix(cluster);
    message.starts_with(&prefix) || message.contains(&format!(", {prefix}"))
}

impl Plan {
    /// The replicas held above the shares, in total.
    pub fn held_total(&self) -> i64 {
        self.held.iter().map(|h| h.keeps - h.share.max(0)).sum()
    }

    /// The binding condition's message.
    pub fn message(&self) -> String {
        if self.held.is_empty() {
            return format!(
                "every cluster runs its share of the {} replicas",
                self.total
            );
        }
        let held: Vec<String> = self
            .held
            .iter()
            .map(|h| match h.share {
                0 => format!(
                    "{}{} (no longer scheduled there)",
                    held_prefix(&h.cluster),
                    h.keeps
                ),
                s => format!("{}{} (its share is {s})", held_prefix(&h.cluster), h.keeps),
            })
            .collect();
        let short: Vec<String> = self
            .short
            .iter()
            .map(|s| {
                format!(
                    "{} has {} of its {} available",
                    s.cluster, s.available, s.share
                )
            })
            .collect();
        format!(
            "{} while {}; spec.redistribution.maxUnavailable lets {} of the {} replicas be \
             unavailable",
            held.join(", "),
            short.join(", "),
            self.total - self.floor,
            self.total
        )
    }
}

/// How many replicas each cluster keeps: see the module documentation. A cluster
/// gaining replicas (or without a Work yet) gets its share. The clusters losing
/// replicas give up, first, those that are not available (free); then the others,
/// except those that keep the available total at the floor, and no more than the
/// other clusters lack of their shares (holding more would not make up for anything:
/// a plain scale-down is never held). Clusters no longer scheduled give up first (so
/// a migration finishes), then by name.
pub fn plan(copies: &[Copy], max_unavailable: i64) -> Plan {
    let total: i64 = copies.iter().map(|c| c.share.max(0)).sum();
    let floor = (total - max_unavailable.max(0)).max(0);
    let available_of = |c: &Copy| {
        c.observed
            .map_or(0, |o| o.available.clamp(0, c.current.unwrap_or(0).max(0)))
    };
    let available: i64 = copies.iter().map(available_of).sum();
    let loses = |c: &Copy| c.current.is_some_and(|n| n > c.share.max(0));
    let mut losing: Vec<&Copy> = copies.iter().filter(|c| loses(c)).collect();
    losing.sort_by(|a, b| (a.share > 0, &a.cluster).cmp(&(b.share > 0, &b.cluster)));
    // the free and the costly reductions each losing cluster wants
    let wants: Vec<(i64, i64)> = losing
        .iter()
        .map(|c| {
            let surplus = c.current.unwrap_or(0) - c.share.max(0);
            let free = c.observed.map_or(0, |o| o.free).clamp(0, surplus);
            (free, surplus - free)
        })
        .collect();
    let costly: i64 = wants.iter().map(|(_, n)| n).sum();
    let mut short: Vec<Short> = copies
        .iter()
        .filter(|c| !loses(c) && c.share > 0 && available_of(c) < c.share)
        .map(|c| Short {
            cluster: c.cluster.clone(),
            available: available_of(c),
            share: c.share,
        })
        .collect();
    let lacking: i64 = short.iter().map(|s| s.share - s.available).sum();
    let allowed = (available - floor).max(0);
    let held_total = (costly - allowed).clamp(0, costly.min(lacking));
    let mut budget = costly - held_total;
    let mut out = Plan {
        available,
        floor,
        total,
        ..Plan::default()
    };
    for c in copies {
        if c.share > 0 {
            out.replicas.insert(c.cluster.clone(), c.share);
            out.shares.insert(c.cluster.clone(), c.share);
        }
    }
    for (c, (free, wanted)) in losing.into_iter().zip(wants) {
        let share = c.share.max(0);
        let given = wanted.min(budget);
        budget -= given;
        let keeps = c.current.unwrap_or(0) - free - given;
        if keeps > 0 || share > 0 {
            out.replicas.insert(c.cluster.clone(), keeps);
        }
        if keeps > share {
            out.held.push(Held {
                cluster: c.cluster.clone(),
                keeps,
                share,
            });
        }
    }
    out.held.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    if !out.held.is_empty() {
        short.sort_by(|a, b| a.cluster.cmp(&b.cluster));
        out.short = short;
    }
    out
}

/// The replicas `work`'s manifest of `kind` `name` asks for (where the interpretation
/// the Work carries for its kind says, else at `spec.replicas`).
pub fn replicas_of(work: &Work, kind: &str, name: &str) -> Option<i64> {
    let m = work
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| m.kind() == Some(kind) && m.name() == Some(name))?;
    m.0.pointer(interpreter::replicas_pointer(work, &m.0))?
        .as_i64()
}

/// `work` with its manifest of `kind` `name` asking for `replicas` (when it has a
/// replica count).
pub fn with_replicas(mut work: Work, kind: &str, name: &str, replicas: i64) -> Work {
    let pointers: Vec<String> = work
        .spec
        .workload
        .manifests
        .iter()
        .map(|m| interpreter::replicas_pointer(&work, &m.0).to_string())
        .collect();
    for (m, pointer) in work.spec.workload.manifests.iter_mut().zip(pointers) {
        if m.kind() == Some(kind)
            && m.name() == Some(name)
            && let Some(count) = m.0.pointer_mut(&pointer)
            && count.is_i64()
        {
            *count = replicas.into();
        }
    }
    work
}

/// What the member reports of `work`'s manifest of `kind` `name`; `None` when nothing
/// that counts is reported: no status yet, the manifest not applied (a conflict
/// reports the foreign object's status), or a status older than the object's spec
/// (`observedGeneration`). Kubernetes leaves zero counts out of a status.
///
/// `available`: where a custom kind's status counts its available replicas (its
/// interpreter's `replicas.available`, as the guard decided with it); as for a
/// StatefulSet, none of its unavailable replicas counts as free (how it scales down is
/// not known). `None`: a built-in workload's `availableReplicas`.
pub fn observe(work: &Work, kind: &str, name: &str, available: Option<&str>) -> Option<Observed> {
    let current = replicas_of(work, kind, name)?;
    let at = work
        .spec
        .workload
        .manifests
        .iter()
        .position(|m| m.kind() == Some(kind) && m.name() == Some(name))?;
    let reported = work
        .status
        .as_ref()?
        .manifest_statuses
        .iter()
        .find(|s| usize::try_from(s.identifier.ordinal).ok() == Some(at))?;
    // what the member runs is this Work's object (not a foreign one it refused to
    // take over), and its status is of the object's latest spec
    if reported.applied != Some(true) {
        return None;
    }
    let status = reported.status.as_ref()?;
    if let (Some(object), Some(observed)) = (
        reported.generation,
        status.get("observedGeneration").and_then(|v| v.as_i64()),
    ) && observed < object
    {
        return None;
    }
    if let Some(path) = available {
        let available = status
            .pointer(path.strip_prefix("/status").unwrap_or(path))
            .and_then(|v| v.as_i64())
            .unwrap_or(0);
        return Some(Observed {
            available: available.clamp(0, current.max(0)),
            free: 0,
        });
    }
    let count = |k: &str| status.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
    let available = count("availableReplicas").clamp(0, current.max(0));
    let (replicas, updated) = (count("replicas"), count("updatedReplicas"));
    let unavailable_first = matches!(kind, "Deployment" | "ReplicaSet");
    let settled = replicas == current && (kind == "ReplicaSet" || updated == replicas);
    let free = if unavailable_first && settled {
        current - available
    } else {
        0
    };
    Some(Observed { available, free })
}

#[cfg(test)]
#[path = "redistribution_tests.rs"]
mod tests;
