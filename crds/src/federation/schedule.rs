//! Choosing member clusters for a resource template (issue 14 item 2): a pure
//! function from a [`Placement`], the registered [`Cluster`]s and the [`Workload`]'s
//! replica count to a [`Decision`]: the chosen clusters with their replicas, and for
//! every other cluster the [`Reason`] it was not chosen (★ explainable scheduling).
//!
//! # Which clusters a placement selects (federation.md §8 B.9–10)
//!
//! A cluster is chosen when all of these hold, checked in this order; the first
//! that fails is its reason:
//!
//! 1. it is not being deleted (`metadata.deletionTimestamp` unset): "being removed";
//! 2. it is not in `exclude`: "excluded by name";
//! 3. `clusterNames` is empty or names it: "not in clusterNames [a, b]";
//! 4. `labelSelector` is unset or matches the Cluster object's labels (matchLabels
//!    and the operators In, NotIn, Exists, DoesNotExist; `{}` matches every
//!    cluster): "not matched by labelSelector env=prod";
//! 5. every `fieldSelector` requirement holds (keys `provider`, `region`, `zone`,
//!    operators In and NotIn, against the Cluster's effective `status` value, else
//!    its `spec` value): "region eu-west not in [us-east]". A cluster whose value is
//!    unknown fails In and passes NotIn, except that, as in Karmada, `zone` In wants
//!    every zone of the cluster in the list and a cluster with no known zone fails it;
//! 6. every NoSchedule (for a cluster the workload is not on yet) and NoExecute taint
//!    is tolerated by `clusterTolerations`
//!    (Kubernetes' matching: key, operator Equal or Exists, value, effect; an empty
//!    effect or, with Exists, an empty key matches all): "taint
//!    cluster.causeway.io/not-ready:NoSchedule not tolerated". PreferNoSchedule never
//!    keeps a cluster out; with `failover.cluster` (on the [`Workload`]), a cluster
//!    not Ready for longer than tolerated is left out ([`failover`]) — checked before
//!    the taints, whose NoSchedule would otherwise be the reason shown — and so is a
//!    cluster application failover moved the workload away from ([`app_failover`],
//!    given as [`Workload::evicted`]);
//! 7. `spreadConstraints` keep it ([`spread`]: the chosen clusters span between
//!    `minGroups` and `maxGroups` regions, zones or providers and number within the
//!    `cluster` constraint), e.g. "region us-west is not among the 2 region(s) chosen".
//!
//! kubefed's precedence table (§2.2) and Karmada disagree on two rows; the API is
//! Karmada's, so Causeway follows Karmada and writes the rule down:
//!
//! | placement | kubefed | Causeway (Karmada) |
//! |---|---|---|
//! | `{}` (no clusterAffinity) | no clusters | every cluster: the API documents "Unset: every cluster" |
//! | `clusterNames: []` | no clusters | ignored: an empty list cannot be told from an unset one here; to choose no cluster, use a selector that matches none |
//! | `labelSelector: {}` | every cluster | every cluster |
//! | `labelSelector` with labels | clusters whose labels match | the same |
//! | `clusterNames` and `labelSelector` | names win, selector ignored | both must hold (B.10) |
//!
//! With `clusterAffinities` (ordered groups) the first group that chooses at least
//! one cluster is used and named in [`Decision::affinity_name`]; when none does, the
//! reasons are those of the first group.
//!
//! # Replicas (§8 C.17–18)
//!
//! Duplicated (also when `replicaScheduling` is unset): every chosen cluster gets the
//! workload's replicas; a non-workload (`replicas` None, or 0) goes to every chosen
//! cluster with none (or 0).
//!
//! Divided with `replicaDivisionPreference: Weighted` (or unset) divides the replicas
//! with [`divide`](crate::federation::divide) (§8 C.19–23): by `staticWeightList`
//! (a cluster's weight is the largest of the entries whose `targetCluster` matches
//! it; a chosen cluster no entry matches gets nothing, "matched by no
//! staticWeightList entry"; when no entry matches any chosen cluster, all weigh 1 as
//! in Karmada), by `dynamicWeight: AvailableReplicas` (each cluster's
//! [`available_replicas`](crate::federation::divide::available_replicas) for
//! [`Workload::request`], Steady from [`Workload::previous`] unless
//! [`Workload::fresh`]), or equally without `weightPreference`. A static division is
//! recomputed each time (it is house-monotone, so a scale-up moves nothing). A chosen
//! cluster that gets no replica is not chosen ("given none of the N replicas").
//! `Aggregated`, and the spread constraints [`spread`] does not implement
//! (`spreadByLabel`, two fields), are refused with [`PlacementError::Unsupported`], so
//! they are never silently ignored (overflow tiers, C.24, have no API field yet).
//!
//! The result depends only on the set of clusters, not their order: chosen clusters
//! are sorted by name and reasons are kept in a sorted map.

use std::collections::BTreeMap;
use std::fmt;

use k8s_validation::FieldError;
use thiserror::Error;

use super::ClusterAffinity;
use super::binding::{SchedulingReason, TargetCluster};
use super::cluster::Cluster;
use super::divide::DivideError;
use super::propagation::{Placement, ReplicaDivisionPreference, ReplicaSchedulingType};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

mod affinity;
pub mod app_failover;
mod divided;
pub mod failover;
mod spread;
mod taints;

pub use affinity::{
    affinity_matches, affinity_rejects, unmet_label_requirements, validate_affinity,
};
pub use taints::{
    Tolerated, next_taint_deadline, tolerated_until, tolerates, validate_tolerations,
};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// What is being scheduled, as far as the scheduler cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// The template's `spec.replicas`; `None` for a non-workload (a ConfigMap, a
    /// Service...), which goes to every chosen cluster without a replica count.
    pub replicas: Option<i32>,
    /// The template's `metadata.uid`: breaks ties when dividing replicas, so
    /// remainders spread over clusters across workloads.
    pub uid: String,
    /// What one replica requests (a pod's `resources.requests`), for dynamic weights.
    pub request: BTreeMap<String, Quantity>,
    /// The binding's current assignment (`spec.clusters`: cluster → replicas), kept
    /// by a Steady dynamic division.
    pub previous: BTreeMap<String, i32>,
    /// Recompute a dynamic division from scratch
    /// ([`is_fresh`](crate::federation::divide::is_fresh) of the binding's
    /// `rescheduleTriggeredAt` and `lastScheduledTime`).
    pub fresh: bool,
    /// Now, when the policy opts into cluster failover (`failover.cluster`): clusters
    /// that have not been Ready for longer than tolerated are left out
    /// ([`failover`]).
    pub failover_at: Option<k8s_openapi::jiff::Timestamp>,
    /// Clusters application failover moved the workload away from, with why
    /// ([`app_failover`]): left out like a failed-over cluster.
    pub evicted: BTreeMap<String, String>,
    /// Now, for NoExecute taints tolerated for `tolerationSeconds`
    /// ([`taints::tolerated_until`]); `None`: tolerated while a toleration matches.
    pub now: Option<k8s_openapi::jiff::Timestamp>,
}

/// One chosen cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The Cluster object's name.
    pub cluster: String,
    /// The replicas this cluster runs; `None` for a non-workload.
    pub replicas: Option<i32>,
}

/// Why a cluster was not chosen. [`fmt::Display`] gives the sentence users read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The Cluster is being deleted.
    BeingRemoved,
    /// The cluster is listed in `exclude`.
    Excluded,
    /// `clusterNames` (given here sorted) does not list the cluster.
    NotInClusterNames(Vec<String>),
    /// The label selector's requirements the cluster's labels do not meet.
    LabelSelector(Vec<String>),
    /// The field selector requirement the cluster fails, e.g.
    /// `region eu-west not in [us-east]`.
    FieldSelector(String),
    /// A NoSchedule or NoExecute taint no toleration tolerates, as `key=value:Effect`.
    Taint(String),
    /// Divided by `staticWeightList`, and no entry matches the cluster.
    NoWeight,
    /// Divided, and the division gave the cluster none of this many replicas.
    NoReplicas(i32),
    /// Left out by `spreadConstraints`, with why.
    Spread(String),
    /// Failed over: not Ready for longer than tolerated (`failover.cluster`).
    FailedOver(String),
    /// The workload was unhealthy here for longer than tolerated
    /// (`failover.application`).
    Evicted(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::BeingRemoved => f.write_str("being removed"),
            Reason::Excluded => f.write_str("excluded by name"),
            Reason::NotInClusterNames(names) => {
                write!(f, "not in clusterNames [{}]", names.join(", "))
            }
            Reason::LabelSelector(unmet) => {
                write!(f, "not matched by labelSelector {}", unmet.join(","))
            }
            Reason::FieldSelector(why) => f.write_str(why),
            Reason::Taint(taint) => write!(f, "taint {taint} not tolerated"),
            Reason::NoWeight => f.write_str("matched by no staticWeightList entry"),
            Reason::NoReplicas(n) => write!(f, "given none of the {n} replicas"),
            Reason::Spread(why) | Reason::FailedOver(why) | Reason::Evicted(why) => {
                f.write_str(why)
            }
        }
    }
}

/// The scheduling result: every cluster given is either chosen or rejected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The chosen clusters, sorted by name. Empty: nothing fits (Scheduled=False).
    pub chosen: Vec<Target>,
    /// Why each other cluster was not chosen, by cluster name.
    pub rejected: BTreeMap<String, Reason>,
    /// With `clusterAffinities`: the group in use.
    pub affinity_name: Option<String>,
    /// J.61: the chosen clusters cluster failover would have moved the workload away
    /// from (not Ready for longer than tolerated) but kept, no other cluster fitting;
    /// sorted. Empty when failover left nothing where it is.
    pub failover_stays: Vec<String>,
}

impl Decision {
    /// Clusters fit, but not as the spread constraints want: none chosen, some left out
    /// for the spread (the detector then keeps the clusters the binding had).
    pub fn unmet_spread(&self) -> bool {
        self.chosen.is_empty()
            && self
                .rejected
                .values()
                .any(|r| matches!(r, Reason::Spread(_)))
    }

    /// Each chosen cluster's share (`None`: the whole workload, not divided), by name.
    pub fn shares(&self) -> std::collections::BTreeMap<String, Option<i32>> {
        self.chosen
            .iter()
            .map(|t| (t.cluster.clone(), t.replicas))
            .collect()
    }

    /// The chosen clusters as a binding's `spec.clusters`.
    pub fn target_clusters(&self) -> Vec<TargetCluster> {
        let chosen = self.chosen.iter();
        chosen
            .map(|t| TargetCluster {
                name: t.cluster.clone(),
                replicas: t.replicas,
            })
            .collect()
    }

    /// The reasons as a binding's `status.schedulingReasons`, sorted by cluster.
    pub fn scheduling_reasons(&self) -> Vec<SchedulingReason> {
        let rejected = self.rejected.iter();
        rejected
            .map(|(cluster, reason)| SchedulingReason {
                cluster: cluster.clone(),
                reason: reason.to_string(),
            })
            .collect()
    }
}

/// Why no decision could be made. Each message names what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlacementError {
    /// The placement (or the workload) has invalid fields.
    #[error("invalid placement: {}; fix these fields of the policy", join(.0))]
    Invalid(Vec<FieldError>),
    /// A placement feature the scheduler does not implement yet.
    #[error("{field}: {what} is not supported yet; {instead}")]
    Unsupported {
        /// The field path.
        field: String,
        /// What was asked for.
        what: String,
        /// What to use instead.
        instead: String,
    },
    /// A Cluster without `metadata.name`.
    #[error(
        "the Cluster at index {0} has no metadata.name; pass Cluster objects as the API server returns them"
    )]
    UnnamedCluster(usize),
    /// Two Clusters with the same name.
    #[error("the Cluster {0:?} is given twice; pass each Cluster once")]
    DuplicateCluster(String),
    /// The replicas cannot be divided (no capacity, an unreadable quantity...).
    #[error("cannot divide the replicas: {0}")]
    Division(#[from] DivideError),
}

fn join(errs: &[FieldError]) -> String {
    let parts: Vec<String> = errs.iter().map(ToString::to_string).collect();
    parts.join("; ")
}

/// Chooses the clusters for `workload` under `placement` (see the module docs for
/// the rules). Errors when the placement is invalid or asks for what is not
/// implemented, or when `clusters` has an unnamed or repeated Cluster.
pub fn schedule(
    placement: &Placement,
    clusters: &[Cluster],
    workload: &Workload,
) -> Result<Decision, PlacementError> {
    let mut decision = schedule_once(placement, clusters, workload)?;
    // J.61 ★: failover that would leave the workload nowhere keeps it where it is: first
    // on the failed clusters, then (still nowhere) on those application failover moved
    // it away from
    let mut stay = workload.clone();
    if decision.chosen.is_empty() && stay.failover_at.is_some() {
        stay.failover_at = None;
        let failed: Vec<String> = decision
            .rejected
            .iter()
            .filter(|(_, r)| matches!(r, Reason::FailedOver(_)))
            .map(|(c, _)| c.clone())
            .collect();
        decision = schedule_once(placement, clusters, &stay)?;
        // said, not silent: the binding would otherwise look scheduled as usual
        decision.failover_stays = decision
            .chosen
            .iter()
            .filter(|t| failed.contains(&t.cluster))
            .map(|t| t.cluster.clone())
            .collect();
    }
    if decision.chosen.is_empty() && !stay.evicted.is_empty() {
        stay.evicted.clear();
        decision = schedule_once(placement, clusters, &stay)?;
    }
    Ok(decision)
}

fn schedule_once(
    placement: &Placement,
    clusters: &[Cluster],
    workload: &Workload,
) -> Result<Decision, PlacementError> {
    validate(placement, workload)?;
    let mut named = BTreeMap::new();
    for (i, cluster) in clusters.iter().enumerate() {
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            return Err(PlacementError::UnnamedCluster(i));
        }
        if named.insert(name, cluster).is_some() {
            return Err(PlacementError::DuplicateCluster(name.to_string()));
        }
    }
    let every = ClusterAffinity::default();
    let terms: Vec<(Option<&str>, &ClusterAffinity)> = if placement.cluster_affinities.is_empty() {
        vec![(None, placement.cluster_affinity.as_ref().unwrap_or(&every))]
    } else {
        let terms = placement.cluster_affinities.iter();
        terms
            .map(|t| (Some(t.affinity_name.as_str()), &t.affinity))
            .collect()
    };
    let (mut first, mut failed) = (None, None);
    for (affinity_name, affinity) in terms {
        let mut decision = Decision::default();
        for (&name, cluster) in &named {
            let placed = workload.previous.contains_key(name);
            match rejects(placement, affinity, cluster, placed, workload) {
                Some(reason) => {
                    decision.rejected.insert(name.to_string(), reason);
                }
                None => decision.chosen.push(Target {
                    cluster: name.to_string(),
                    replicas: workload.replicas,
                }),
            }
        }
        spread::apply(
            &mut decision,
            &placement.spread_constraints,
            &named,
            workload,
        );
        // nothing chosen under this affinity: nothing to divide, try the next one
        if let Some(replicas) = divided(placement, workload).filter(|_| !decision.chosen.is_empty())
        {
            let preferences = placement.replica_scheduling.as_ref();
            let preferences = preferences.and_then(|r| r.weight_preference.as_ref());
            // as Karmada, a group that cannot take the replicas (too little capacity)
            // gives way to the next one; the first such error is said if none can
            match divided::divide(&mut decision, &named, preferences, workload, replicas) {
                Err(e @ DivideError::NotEnoughCapacity { .. }) => {
                    failed.get_or_insert(e);
                    continue;
                }
                r => r?,
            }
        }
        if !decision.chosen.is_empty() {
            decision.affinity_name = affinity_name.map(str::to_string);
            return Ok(decision);
        }
        first.get_or_insert(decision);
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(first.unwrap_or_default()),
    }
}

/// Why `cluster` is not chosen under one affinity; `None` when it is. A cluster the
/// workload is already `placed` on keeps it despite NoSchedule taints (Kubernetes'
/// semantics: NoSchedule keeps new work out, only NoExecute evicts), so a member that
/// goes not-ready is tainted but loses nothing (J.58).
fn rejects(
    placement: &Placement,
    affinity: &ClusterAffinity,
    cluster: &Cluster,
    placed: bool,
    workload: &Workload,
) -> Option<Reason> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Some(Reason::BeingRemoved);
    }
    // a failed-over cluster says so, before the NoSchedule taint it also has (which,
    // once the workload has left, would be the first reason found)
    affinity_rejects(affinity, cluster)
        .or_else(|| {
            let name = cluster.metadata.name.as_deref()?;
            workload.evicted.get(name).cloned().map(Reason::Evicted)
        })
        .or_else(|| {
            let now = workload.failover_at?;
            let (since, deadline) = failover::failing(cluster, &placement.cluster_tolerations)?;
            (now >= deadline)
                .then(|| Reason::FailedOver(failover::reason(cluster, since, deadline)))
        })
        .or_else(|| {
            // the registry's not-ready and unreachable taints follow Ready a moment
            // later: a cluster Ready again is scheduled as before at once (J.62), not
            // once the monitor lifts them (meanwhile the copy failover kept there
            // would be purged, and made again)
            let ready = failover::ready(cluster);
            let taints: Vec<_> = cluster
                .spec
                .taints
                .iter()
                .filter(|t| !(ready && failover::follows_ready(t)))
                .cloned()
                .collect();
            taints::untolerated_taint(
                &taints,
                &placement.cluster_tolerations,
                placed,
                workload.now,
            )
            .map(Reason::Taint)
        })
}

/// The checks of a placement on its own (no workload): invalid fields and what the
/// scheduler does not implement, as scheduling would refuse them. The policies'
/// `Valid` condition and `causeway webhook`'s admission check use it.
pub fn validate_placement(placement: &Placement) -> Result<(), PlacementError> {
    // as for a workload with replicas to divide: what the division does not implement
    // is refused whatever the policy selects
    let workload = Workload {
        replicas: Some(1),
        ..Workload::default()
    };
    validate(placement, &workload)
}

/// Refuses invalid placements and what the scheduler does not implement yet.
fn validate(placement: &Placement, workload: &Workload) -> Result<(), PlacementError> {
    let at = "spec.placement";
    let mut errs = Vec::new();
    if let Some(affinity) = &placement.cluster_affinity {
        errs.extend(validate_affinity(
            affinity,
            &format!("{at}.clusterAffinity"),
        ));
        if !placement.cluster_affinities.is_empty() {
            errs.push(FieldError {
                field: format!("{at}.clusterAffinities"),
                value: String::new(),
                message: "clusterAffinity and clusterAffinities cannot both be set; keep one"
                    .into(),
            });
        }
    }
    let mut seen = Vec::new();
    for (i, term) in placement.cluster_affinities.iter().enumerate() {
        let at = format!("{at}.clusterAffinities[{i}]");
        if term.affinity_name.is_empty() {
            errs.push(FieldError {
                field: format!("{at}.affinityName"),
                value: String::new(),
                message: "must name the group".into(),
            });
        } else if seen.contains(&&term.affinity_name) {
            errs.push(FieldError {
                field: format!("{at}.affinityName"),
                value: term.affinity_name.clone(),
                message: "is used by an earlier group; give each group its own name".into(),
            });
        }
        seen.push(&term.affinity_name);
        errs.extend(validate_affinity(&term.affinity, &at));
    }
    errs.extend(validate_tolerations(
        &placement.cluster_tolerations,
        &format!("{at}.clusterTolerations"),
    ));
    errs.extend(spread::validate(
        &placement.spread_constraints,
        &format!("{at}.spreadConstraints"),
    ));
    if let Some(r) = workload.replicas.filter(|r| *r < 0) {
        errs.push(FieldError {
            field: "spec.replicas".into(),
            value: r.to_string(),
            message: "must be greater than or equal to 0".into(),
        });
    }
    if !errs.is_empty() {
        return Err(PlacementError::Invalid(errs));
    }
    if let Some(e) = spread::unsupported(
        &placement.spread_constraints,
        &format!("{at}.spreadConstraints"),
    ) {
        return Err(e);
    }
    let aggregated = placement
        .replica_scheduling
        .as_ref()
        .and_then(|r| r.replica_division_preference)
        == Some(ReplicaDivisionPreference::Aggregated);
    if aggregated && divided(placement, workload).is_some() {
        return Err(PlacementError::Unsupported {
            field: format!("{at}.replicaScheduling.replicaDivisionPreference"),
            what: "Aggregated".into(),
            instead: "use Weighted (with dynamicWeight: AvailableReplicas to follow capacity)"
                .into(),
        });
    }
    Ok(())
}

/// Whether `placement` divides replicas: replicaScheduling set, its type Divided or
/// unset (as Karmada's CRD defaults it); only a placement without replicaScheduling,
/// or Duplicated, gives every cluster the full count.
pub fn divides(placement: &Placement) -> bool {
    placement.replica_scheduling.as_ref().is_some_and(|r| {
        r.replica_scheduling_type
            .unwrap_or(ReplicaSchedulingType::Divided)
            == ReplicaSchedulingType::Divided
    })
}

/// The replicas to divide: `Some` for Divided with a positive replica count.
fn divided(placement: &Placement, workload: &Workload) -> Option<i32> {
    workload.replicas.filter(|&r| divides(placement) && r > 0)
}
