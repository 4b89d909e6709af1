//! Ordered rollouts: a PropagationPolicy's `rollout.waves` make a new template
//! generation reach its clusters wave by wave. A wave's clusters get the new generation
//! only once every cluster of the waves before it runs that generation, applied and
//! healthy; the clusters of later waves keep what they run. A bad change so stops at
//! the first wave (the canary), and the condition says which cluster holds it and why.
//!
//! Pure: [`plan`] decides from the scheduled clusters, their labels and what each
//! member reports ([`settled_at`] reads a Work's status); [`held_work`] is what a held
//! cluster's Work becomes. The binding controller (`controllers/src/propagation/hub.rs`)
//! writes the result.
//!
//! What the waves order is the template's generation (`metadata.generation`, carried
//! to the members as `causeway.io/template-generation`). A held cluster keeps its
//! manifests but follows the binding's replica division at once (`spec.replicas`), so a
//! failover or a rescale is never held behind a rollout; OverridePolicy edits and
//! policy settings reach every cluster that the rollout releases.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::federation::selection::labels;
use crate::federation::work::{ManifestStatus, ResourceHealth, Work};
use crate::federation::{health, interpreter};
use crate::well_known::annotations;

/// An ordered rollout of template changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// The waves, in order. A cluster belongs to the first wave that names it or whose
    /// labelSelector matches it; scheduled clusters that no wave selects form a last
    /// wave of their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<RolloutWave>,

    /// How long a wave may take before the rollout is reported stuck: the binding's
    /// `RolledOut` condition turns to reason ProgressDeadlineExceeded and a Warning
    /// `RolloutStuck` Event on the template names the wave and what it waits for.
    /// Nothing is rolled back and the wave keeps waiting; a new template generation
    /// starts over. Unset: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i64>,
}

/// How far the rollout of a generation has got, and since when (a binding's
/// `status.rollout`): what the progress deadline is measured from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveProgress {
    /// The template generation being rolled out.
    pub generation: i64,
    /// The furthest wave it has reached, by its place in `spec.rollout.waves` (from 1;
    /// the clusters no wave selects: one past the last).
    pub wave: i64,
    /// When the rollout of that generation reached that wave.
    pub started_at: Time,
    /// Every wave has run the generation: a cluster that falls back later is not a
    /// stuck rollout, and no deadline applies to it any more.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub completed: bool,
}

/// Pure: how far the rollout of `progress`'s generation has got, from `prev`. The
/// clock starts when a generation reaches a wave further than before; a wave before
/// it that falls back (a canary Pod that blips) keeps it, and so does anything after
/// every wave has run the generation. None without an order.
pub fn wave_progress(
    progress: &Progress,
    prev: Option<&WaveProgress>,
    now: &Time,
) -> Option<WaveProgress> {
    let (generation, place, completed) = match progress {
        Progress::Unordered { .. } => return None,
        Progress::Complete { generation, .. } => (*generation, i64::MAX, true),
        Progress::Waiting {
            generation, place, ..
        } => (
            *generation,
            i64::try_from(*place).unwrap_or(i64::MAX),
            false,
        ),
    };
    let same = prev.filter(|p| p.generation == generation);
    match same {
        Some(p) if p.completed || (!completed && place <= p.wave) => Some(p.clone()),
        Some(p) if completed => Some(WaveProgress {
            completed: true,
            ..p.clone()
        }),
        _ => Some(WaveProgress {
            generation,
            wave: if completed { 0 } else { place },
            started_at: now.clone(),
            completed,
        }),
    }
}

/// When the wave `w` passes `rollout`'s progress deadline (None: no deadline, or the
/// rollout has completed).
pub fn deadline(rollout: &Rollout, w: &WaveProgress) -> Option<Timestamp> {
    if w.completed {
        return None;
    }
    progress_deadline(&w.started_at, rollout.progress_deadline_seconds)
}

/// `secs` (a `progressDeadlineSeconds`, at least 1, or no deadline) after `since`.
pub fn progress_deadline(since: &Time, secs: Option<i64>) -> Option<Timestamp> {
    let secs = secs.filter(|s| *s >= 1)?;
    since.0.checked_add(SignedDuration::from_secs(secs)).ok()
}

/// One wave of a rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutWave {
    /// A name shown in conditions and Events (default: `wave-<n>`, from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Clusters of this wave, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,

    /// Clusters of this wave, by their Cluster object's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The template has no `metadata.generation` (a ConfigMap, a Secret, a Service...):
    /// nothing to order by, so every cluster gets each change at once.
    Unordered {
        /// `ConfigMap demo/settings`.
        template: String,
    },
    /// Every wave runs the generation (or there is no rollout).
    Complete {
        /// The generation every scheduled cluster runs.
        generation: i64,
        /// Waves with scheduled clusters.
        waves: usize,
    },
    /// A wave is not done: the waves after it are held.
    Waiting {
        /// The generation being rolled out.
        generation: i64,
        /// The wave's number, from 1.
        wave: usize,
        /// Its place in `spec.rollout.waves`, from 1 (the clusters no wave selects:
        /// one past the last); unlike `wave`, the same whichever waves are empty.
        place: usize,
        /// Waves with scheduled clusters.
        waves: usize,
        /// The wave's name.
        name: String,
        /// The wave's clusters that are not done yet, with why.
        pending: Vec<(String, String)>,
        /// Clusters of later waves, which keep what they run.
        held: Vec<String>,
    },
}

impl Progress {
    /// The template generation it is about, if any.
    pub fn generation(&self) -> Option<i64> {
        match self {
            Progress::Unordered { .. } => None,
            Progress::Complete { generation, .. } | Progress::Waiting { generation, .. } => {
                Some(*generation)
            }
        }
    }

    /// A sentence for a condition or an Event.
    pub fn message(&self) -> String {
        match self {
            Progress::Unordered { template } => format!(
                "{template} has no metadata.generation (its kind keeps none), so spec.rollout cannot order its changes: every cluster gets them at once"
            ),
            Progress::Complete { generation, waves } => format!(
                "every wave ({waves}) runs template generation {generation}, applied and healthy"
            ),
            Progress::Waiting {
                generation,
                wave,
                waves,
                name,
                pending,
                held,
                ..
            } => {
                let pending: Vec<String> = pending
                    .iter()
                    .map(|(c, why)| format!("{c}: {why}"))
                    .collect();
                let held = if held.is_empty() {
                    String::new()
                } else {
                    format!("; held at what they run until then: {}", held.join(", "))
                };
                format!(
                    "wave {wave} of {waves} ({name}) is rolling out template generation {generation}, waiting for {}{held}",
                    pending.join("; ")
                )
            }
        }
    }
}

/// What [`plan`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Clusters that get what the binding renders now.
    pub released: BTreeSet<String>,
    /// Clusters that keep what they run ([`held_work`]).
    pub held: BTreeSet<String>,
    /// Where the rollout stands.
    pub progress: Progress,
    /// The waves ([`waves`]; none without a rollout).
    pub waves: Vec<(String, Vec<String>)>,
    /// The configured waves that select none of the scheduled clusters (a canary
    /// removed from the placement, a selector no cluster matches), each said with what
    /// that means: the generations skip it.
    pub skipped: Vec<String>,
}

/// The waves of `scheduled` clusters (empty waves dropped), with their names.
pub fn waves(
    rollout: &Rollout,
    scheduled: &[String],
    labels_of: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Vec<(String, Vec<String>)> {
    placed_waves(rollout, scheduled, labels_of)
        .into_iter()
        .map(|(_, name, clusters)| (name, clusters))
        .collect()
}

/// [`waves`], each with its place in `spec.rollout.waves` (from 1; the clusters no
/// wave selects: one past the last).
fn placed_waves(
    rollout: &Rollout,
    scheduled: &[String],
    labels_of: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Vec<(usize, String, Vec<String>)> {
    let mut left: Vec<&String> = scheduled.iter().collect();
    let mut out = Vec::new();
    for (i, w) in rollout.waves.iter().enumerate() {
        let (mine, rest): (Vec<&String>, Vec<&String>) = left.into_iter().partition(|c| {
            w.cluster_names.iter().any(|n| n == *c)
                || w.label_selector
                    .as_ref()
                    .is_some_and(|s| labels::matches(s, &labels_of(c)))
        });
        left = rest;
        if !mine.is_empty() {
            let name = w.name.clone().unwrap_or_else(|| format!("wave-{}", i + 1));
            out.push((i + 1, name, mine.into_iter().cloned().collect()));
        }
    }
    if !left.is_empty() {
        out.push((
            rollout.waves.len() + 1,
            "the clusters no wave selects".to_string(),
            left.into_iter().cloned().collect(),
        ));
    }
    out
}

/// Which clusters get the current render of template `generation`. `state` says
/// whether a cluster runs that generation applied and healthy (`Err`: why not).
pub fn plan(
    rollout: Option<&Rollout>,
    scheduled: &[String],
    labels_of: &dyn Fn(&str) -> BTreeMap<String, String>,
    generation: i64,
    state: &dyn Fn(&str) -> Result<(), String>,
) -> Plan {
    let all = || scheduled.iter().cloned().collect::<BTreeSet<String>>();
    let Some(rollout) = rollout.filter(|r| !r.waves.is_empty()) else {
        return Plan {
            released: all(),
            held: BTreeSet::new(),
            progress: Progress::Complete {
                generation,
                waves: 1,
            },
            waves: Vec::new(),
            skipped: Vec::new(),
        };
    };
    let placed = placed_waves(rollout, scheduled, labels_of);
    let configured = rollout.waves.len();
    let skipped: Vec<String> = rollout
        .waves
        .iter()
        .enumerate()
        .filter(|(i, _)| !placed.iter().any(|(place, _, _)| *place == i + 1))
        .map(|(i, w)| {
            let name = w.name.clone().unwrap_or_else(|| format!("wave-{}", i + 1));
            format!(
                "wave {} of {configured} ({name}) selects none of the scheduled clusters ({}): template generations go to the next wave without it; fix its clusterNames or labelSelector, or the placement",
                i + 1,
                scheduled.join(", ")
            )
        })
        .collect();
    let waves: Vec<(String, Vec<String>)> = placed
        .iter()
        .map(|(_, name, clusters)| (name.clone(), clusters.clone()))
        .collect();
    let mut released = BTreeSet::new();
    for (i, (place, name, clusters)) in placed.iter().enumerate() {
        released.extend(clusters.iter().cloned());
        let pending: Vec<(String, String)> = clusters
            .iter()
            .filter_map(|c| state(c).err().map(|why| (c.clone(), why)))
            .collect();
        if !pending.is_empty() {
            let held: BTreeSet<String> = waves[i + 1..]
                .iter()
                .flat_map(|(_, cs)| cs.iter().cloned())
                .collect();
            return Plan {
                released,
                progress: Progress::Waiting {
                    generation,
                    wave: i + 1,
                    place: *place,
                    waves: waves.len(),
                    name: name.clone(),
                    pending,
                    held: held.iter().cloned().collect(),
                },
                held,
                waves,
                skipped,
            };
        }
    }
    Plan {
        released: all(),
        held: BTreeSet::new(),
        progress: Progress::Complete {
            generation,
            waves: waves.len(),
        },
        waves,
        skipped,
    }
}

/// Whether `work` (one cluster's) runs template `generation`, every manifest applied
/// and healthy; `Err` says why not. A workload must also have finished its own rollout,
/// as `kubectl rollout status` waits for: no replicas left of an older template
/// (`status.replicas` = `updatedReplicas`), every updated one available, and the replica
/// count the Work asks for (a status from before the member applied a new division is
/// not enough). A kind with no health rule (its health stays Unknown) counts once
/// applied, unless its status has a `Ready` condition: then once it is Ready. A kind
/// whose ResourceInterpreter has a health rule waits for Healthy.
pub fn settled_at(work: Option<&Work>, generation: i64) -> Result<(), String> {
    let Some(work) = work else {
        return Err("no Work yet".into());
    };
    // (an object no manifest names any more, whose removal failed, is not one the
    // rollout waits for: the Work's Applied condition says so)
    let statuses: Vec<_> = ManifestStatus::of_manifests(
        work.status
            .as_ref()
            .map(|s| s.manifest_statuses.as_slice())
            .unwrap_or_default(),
    )
    .collect();
    if statuses.is_empty() {
        return Err("the member has not reported yet".into());
    }
    for s in statuses {
        let what = format!("{} {}", s.identifier.kind, s.identifier.name);
        if s.applied != Some(true) {
            let why = s.message.as_deref().or(s.reason.as_deref()).unwrap_or("");
            return Err(format!("{what} is not applied yet {why}").trim_end().into());
        }
        match s.template_generation {
            Some(g) if g == generation => {}
            Some(g) => return Err(format!("{what} runs template generation {g}")),
            None => return Err(format!("{what} has not reported its template generation")),
        }
        if let Some(st) = &s.status
            && let Some(updated) = st.get("updatedReplicas").and_then(|v| v.as_i64())
        {
            let count = |k: &str| st.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
            let (total, available) = (count("replicas"), count("availableReplicas"));
            // the status must be of the replicas this Work asks for (a status from
            // before the member applied a new division is not); with retain-replicas
            // the member's own count (an HPA's) is what runs, whatever the Work says
            let wanted = usize::try_from(s.identifier.ordinal)
                .ok()
                .and_then(|i| work.spec.workload.manifests.get(i))
                .filter(|m| !crate::well_known::labels::retains_replicas(&m.0))
                .and_then(|m| m.0.pointer(interpreter::replicas_pointer(work, &m.0)))
                .and_then(|v| v.as_i64());
            if let Some(wanted) = wanted
                && updated != wanted
            {
                return Err(format!(
                    "{what} has {updated} of the {wanted} replicas it should run updated"
                ));
            }
            if total > updated {
                return Err(format!(
                    "{what} still runs {} replica(s) of an older template",
                    total.saturating_sub(updated)
                ));
            }
            if available < updated {
                return Err(format!(
                    "{what} has {available} of {updated} updated replicas available"
                ));
            }
        }
        match s.health {
            Some(ResourceHealth::Healthy) => {}
            Some(ResourceHealth::Unhealthy) => return Err(format!("{what} is unhealthy")),
            _ if health::reports_readiness(s.status.as_ref()) => {
                return Err(format!("{what} is not Ready yet"));
            }
            _ if !health::judged(&s.identifier.group, &s.identifier.kind)
                && !interpreter::judges(work, &s.identifier.group, &s.identifier.kind) => {}
            _ => return Err(format!("{what} has not reported its health yet")),
        }
    }
    Ok(())
}

/// The Work a held cluster gets: the settings of what the binding renders now
/// (`rendered`), the manifests it runs (`actual`), and each manifest's `spec.replicas`
/// from the render (the binding's division, which a rollout never holds back).
pub fn held_work(rendered: &Work, actual: &Work) -> Work {
    let mut w = rendered.clone();
    let mut manifests = actual.spec.workload.manifests.clone();
    for m in &mut manifests {
        let same = rendered.spec.workload.manifests.iter().find(|r| {
            r.kind() == m.kind() && r.name() == m.name() && r.namespace() == m.namespace()
        });
        let Some(same) = same else { continue };
        // where the kind keeps its count (`spec.replicas`, or its interpreter's path)
        let at = interpreter::replicas_pointer(rendered, &same.0);
        if let (Some(r), Some(held)) = (same.0.pointer(at), m.0.pointer_mut(at)) {
            *held = r.clone();
        }
    }
    w.spec.workload.manifests = manifests;
    // the overrides' provenance (and overlaps) of the manifests it keeps, not of the
    // new render's
    let mine = w.metadata.annotations.get_or_insert_with(Default::default);
    for key in annotations::OF_MANIFESTS {
        match actual
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
        {
            Some(v) => {
                mine.insert(key.to_string(), v.clone());
            }
            None => {
                mine.remove(key);
            }
        }
    }
    w
}

/// The template generation a Work asks its cluster to run: its first manifest's
/// `causeway.io/template-generation`.
pub fn generation_of(work: &Work) -> Option<i64> {
    work.spec
        .workload
        .manifests
        .first()?
        .0
        .pointer("/metadata/annotations")?
        .get(annotations::TEMPLATE_GENERATION)?
        .as_str()?
        .parse()
        .ok()
}

/// The generation a held cluster that has no copy yet starts from (one that joined the
/// placement while its wave waits, or that failover moved replicas to): what its wave
/// runs, that is the newest generation the other clusters of its wave run (a wave gets
/// each generation all at once); when none of them has a copy, the oldest one any held
/// cluster runs, which has been through every wave that runs a copy. `None` when no held
/// cluster has a copy (a first delivery: there is nothing older to run). `waves` are
/// [`waves`]' result.
pub fn held_generation<'w>(
    waves: &[(String, Vec<String>)],
    held: &BTreeSet<String>,
    cluster: &str,
    work_of: &dyn Fn(&str) -> Option<&'w Work>,
) -> Option<i64> {
    let generation = |c: &String| work_of(c).and_then(generation_of);
    let own = waves
        .iter()
        .find(|(_, cs)| cs.iter().any(|c| c == cluster))
        .and_then(|(_, cs)| {
            cs.iter()
                .filter(|c| *c != cluster && held.contains(*c))
                .filter_map(generation)
                .max()
        });
    own.or_else(|| held.iter().filter_map(generation).min())
}

/// What a revision keeps of a template: everything but its status and what the API
/// server sets (its identity, resourceVersion, managedFields...), its generation kept,
/// so that rendering it gives that generation's manifests.
pub fn revision_data(template: &serde_json::Value) -> serde_json::Value {
    let mut t = template.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("status");
    }
    if let Some(md) = t
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        md.retain(|k, _| {
            matches!(
                k.as_str(),
                "name" | "namespace" | "labels" | "annotations" | "generation"
            )
        });
        // kubectl's copy of the whole object, which rendering drops anyway
        if let Some(a) = md
            .get_mut("annotations")
            .and_then(serde_json::Value::as_object_mut)
        {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    t
}

#[cfg(test)]
#[path = "rollout_tests.rs"]
mod tests;
