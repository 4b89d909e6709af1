//! Dividing a workload's replicas between chosen clusters
//! (`replicaScheduling.replicaSchedulingType: Divided`, federation.md §8 C.19–23).
//!
//! - [`webster`]: the Webster (Sainte-Laguë) divisor method. Each replica goes, one
//!   after the other, to the cluster with the highest `weight / (2·given + 1)`. The
//!   total is always the replica count; with fixed weights, one more replica never
//!   takes one away from any cluster (house monotonicity, C.20). A tie goes to the
//!   cluster with fewer replicas, then to the lower hash of the workload's UID with
//!   the cluster's name, so remainders spread over clusters across workloads
//!   instead of always favouring the alphabetically first (C.21, karmada#4220).
//! - [`available_replicas`]: how many more replicas a cluster can hold, from its
//!   `status.resourceSummary` and the workload's per-replica request (C.22).
//! - [`divide_by_available`]: dynamic weights (`dynamicWeight: AvailableReplicas`),
//!   Steady by default: a scale-up keeps the previous assignment and divides only
//!   the added replicas, a scale-down divides the new total by the previous
//!   assignment; Fresh (see [`is_fresh`]) recomputes everything (C.23).
//!
//! Every function is total: negative replicas, no weight, too little capacity and
//! unreadable quantities are [`DivideError`]s, and the arithmetic is exact (`u128`)
//! for any `i32` replica count and `u64` weight.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use thiserror::Error;

use super::cluster::ResourceSummary;
use crate::quantity::{self, QuantityError, Unit};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// What [`available_replicas`] returns when nothing bounds a cluster (the workload
/// requests nothing and the summary does not count pods): `i32::MAX`, more than any
/// workload can ask for.
pub const UNBOUNDED: u64 = i32::MAX as u64;

/// Why replicas could not be divided. Each message says what is wrong and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DivideError {
    /// A negative replica count.
    #[error("spec.replicas: Invalid value: {0}: must be greater than or equal to 0")]
    NegativeReplicas(i32),
    /// Every weight is 0.
    #[error(
        "cannot divide {0} replicas: every cluster's weight is 0; give at least one chosen cluster a weight of 1 or more"
    )]
    NoWeight(i32),
    /// The clusters cannot hold the replicas.
    #[error(
        "the chosen clusters can hold {available} more replicas but {wanted} are to be placed; add capacity or clusters, or lower spec.replicas"
    )]
    NotEnoughCapacity {
        /// Replicas to place.
        wanted: i64,
        /// What the clusters can hold together.
        available: u128,
    },
    /// A previous assignment with a negative count.
    #[error(
        "the previous assignment gives cluster {cluster:?} {replicas} replicas; a binding's spec.clusters[].replicas must be 0 or more"
    )]
    NegativePrevious {
        /// The cluster.
        cluster: String,
        /// Its count.
        replicas: i32,
    },
    /// A quantity in the request or in a cluster's summary that cannot be read.
    #[error("{field}: {source}")]
    Quantity {
        /// Where the quantity is, e.g. `status.resourceSummary.allocatable[cpu]`.
        field: String,
        /// What is wrong with it.
        source: QuantityError,
    },
}

/// Divides `replicas` by `weights` (cluster name → weight) with the Webster method
/// (see the module docs). Every cluster of `weights` is in the result, with 0 when
/// it gets nothing; a cluster not in `weights` is not. `uid` (the workload's
/// `metadata.uid`) breaks ties.
pub fn webster(
    replicas: i32,
    weights: &BTreeMap<String, u64>,
    uid: &str,
) -> Result<BTreeMap<String, i32>, DivideError> {
    let n = u128::try_from(replicas).map_err(|_| DivideError::NegativeReplicas(replicas))?;
    let total: u128 = weights.values().map(|&w| u128::from(w)).sum();
    if n > 0 && total == 0 {
        return Err(DivideError::NoWeight(replicas));
    }
    let k = weights.len() as u128;
    let mut seats: Vec<Seat<'_>> = weights
        .iter()
        .map(|(name, &w)| Seat {
            name,
            weight: u128::from(w),
            given: 0,
            hash: tie_hash(uid, name),
        })
        .collect();
    let mut given = 0;
    // Jump start: every seat whose priority w/(2s+1) is at least λ = W/(2n−k) is
    // among the first n (there are at most n of them), and at least n−k are, so at
    // most k seats are left to hand out one by one.
    if 2 * n > k {
        let scale = 2 * n - k;
        for seat in &mut seats {
            seat.given = (seat.weight * scale + total) / (2 * total);
            given += seat.given;
        }
    }
    while given < n {
        let best = (0..seats.len())
            .reduce(|a, b| match seats[a].cmp_priority(&seats[b]) {
                Ordering::Less => b,
                _ => a,
            })
            .ok_or(DivideError::NoWeight(replicas))?;
        seats[best].given += 1;
        given += 1;
    }
    Ok(seats
        .into_iter()
        // Each count is at most n, an i32.
        .map(|s| (s.name.clone(), i32::try_from(s.given).unwrap_or(i32::MAX)))
        .collect())
}

/// One cluster while dividing.
struct Seat<'a> {
    name: &'a String,
    weight: u128,
    given: u128,
    hash: u64,
}

impl Seat<'_> {
    /// Which of two clusters gets the next replica (`Greater`: `self`): the higher
    /// `weight / (2·given + 1)`, then fewer replicas, then the lower tie hash, then
    /// the smaller name.
    fn cmp_priority(&self, other: &Self) -> Ordering {
        let mine = self.weight * (2 * other.given + 1);
        let theirs = other.weight * (2 * self.given + 1);
        mine.cmp(&theirs)
            .then(other.given.cmp(&self.given))
            .then(other.hash.cmp(&self.hash))
            .then(other.name.cmp(self.name))
    }
}

/// FNV-1a (64 bits) of the workload UID, a NUL and the cluster name, then
/// MurmurHash3's 64-bit finalizer: the tie-break order of clusters for one
/// workload. FNV-1a alone mixes its last bytes into the high bits poorly, so
/// between two names one won ties for 60% of workloads; the finalizer makes every
/// output bit depend on every input bit, and each name wins about half.
fn tie_hash(uid: &str, cluster: &str) -> u64 {
    let bytes = uid.bytes().chain([0]).chain(cluster.bytes());
    let mut h = bytes.fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Whether a dynamic division recomputes from scratch (Fresh) instead of keeping the
/// previous assignment (Steady): when `reschedule_triggered_at` (the binding's
/// `spec.rescheduleTriggeredAt`) is later than `last_scheduled` (its
/// `status.lastScheduledTime`), or set when the binding was never scheduled.
pub fn is_fresh(reschedule_triggered_at: Option<&Time>, last_scheduled: Option<&Time>) -> bool {
    match (reschedule_triggered_at, last_scheduled) {
        (Some(triggered), Some(last)) => triggered > last,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Divides `replicas` over the clusters of `available` (cluster name → how many
/// more replicas it can hold, see [`available_replicas`]), given the `previous`
/// assignment (cluster → replicas; clusters no longer in `available` are dropped).
///
/// - Fresh (`fresh`, or nothing assigned before): Webster by capacity, where a
///   cluster's capacity is its available replicas plus what it runs now (those are
///   freed by the recomputation).
/// - Steady scale-up: the previous assignment plus the added replicas divided by
///   available replicas. Steady scale-down: the new total divided with the previous
///   assignment as the weights, so no cluster grows.
///
/// Errors when the clusters cannot hold what is to be placed.
pub fn divide_by_available(
    replicas: i32,
    available: &BTreeMap<String, u64>,
    previous: &BTreeMap<String, i32>,
    fresh: bool,
    uid: &str,
) -> Result<BTreeMap<String, i32>, DivideError> {
    if replicas < 0 {
        return Err(DivideError::NegativeReplicas(replicas));
    }
    let mut kept = BTreeMap::new();
    for (cluster, &count) in previous {
        if count < 0 {
            return Err(DivideError::NegativePrevious {
                cluster: cluster.clone(),
                replicas: count,
            });
        }
        if available.contains_key(cluster) {
            kept.insert(cluster.clone(), count);
        }
    }
    let assigned: i64 = kept.values().map(|&c| i64::from(c)).sum();
    let wanted = i64::from(replicas);
    if fresh || assigned == 0 {
        let capacity: BTreeMap<String, u64> = available
            .iter()
            .map(|(cluster, &a)| {
                let runs = kept.get(cluster).map_or(0, |&c| c.unsigned_abs().into());
                (cluster.clone(), a.saturating_add(runs))
            })
            .collect();
        enough(wanted, &capacity)?;
        return webster(replicas, &capacity, uid);
    }
    match wanted.cmp(&assigned) {
        Ordering::Equal => Ok(available
            .keys()
            .map(|c| (c.clone(), kept.get(c).copied().unwrap_or(0)))
            .collect()),
        Ordering::Greater => {
            let extra = wanted - assigned;
            enough(extra, available)?;
            // extra ≤ replicas, an i32.
            let added = webster(i32::try_from(extra).unwrap_or(i32::MAX), available, uid)?;
            Ok(added
                .into_iter()
                .map(|(c, a)| {
                    let before = kept.get(&c).copied().unwrap_or(0);
                    (c, before.saturating_add(a))
                })
                .collect())
        }
        Ordering::Less => {
            let weights: BTreeMap<String, u64> = available
                .keys()
                .map(|c| {
                    (
                        c.clone(),
                        kept.get(c).map_or(0, |&n| n.unsigned_abs().into()),
                    )
                })
                .collect();
            webster(replicas, &weights, uid)
        }
    }
}

/// Refuses when `capacity` cannot hold `wanted`.
fn enough(wanted: i64, capacity: &BTreeMap<String, u64>) -> Result<(), DivideError> {
    let available: u128 = capacity.values().map(|&a| u128::from(a)).sum();
    if u128::try_from(wanted).unwrap_or(0) > available {
        return Err(DivideError::NotEnoughCapacity { wanted, available });
    }
    Ok(())
}

/// How many more replicas requesting `request` per replica (resource name →
/// quantity, as a pod's `resources.requests`) a cluster can hold, from its
/// `status.resourceSummary`: for each requested resource, (allocatable − allocated −
/// allocating) ÷ request, rounded down, the smallest of them; also at most the free
/// `pods` when the summary counts pods. CPU is read in millicores, everything else in
/// whole units (requests rounded up, as kube-scheduler does).
///
/// A cluster without a summary (just joined, or not reporting) can hold 0, as
/// Karmada's general estimator has it: capacity not known is not capacity without
/// bound. A workload that requests nothing is bounded only by free pods, else
/// [`UNBOUNDED`].
/// A resource the cluster does not have (no allocatable entry) leaves room for 0.
pub fn available_replicas(
    summary: Option<&ResourceSummary>,
    request: &BTreeMap<String, Quantity>,
) -> Result<u64, DivideError> {
    let mut wants = Vec::new();
    for (resource, q) in request {
        let amount = read(q, resource, &format!("request[{resource}]"))?;
        if amount > 0 {
            wants.push((resource.as_str(), amount));
        }
    }
    let Some(summary) = summary else {
        return Ok(0);
    };
    let free = |resource: &str| -> Result<Option<i64>, DivideError> {
        let at = "status.resourceSummary";
        let Some(total) = summary.allocatable.get(resource) else {
            return Ok(None);
        };
        let total = read(total, resource, &format!("{at}.allocatable[{resource}]"))?;
        let mut used = 0i64;
        for (name, map) in [
            ("allocated", &summary.allocated),
            ("allocating", &summary.allocating),
        ] {
            if let Some(q) = map.get(resource) {
                let q = read(q, resource, &format!("{at}.{name}[{resource}]"))?;
                used = used.saturating_add(q);
            }
        }
        Ok(Some(total.saturating_sub(used).max(0)))
    };
    let mut fits = UNBOUNDED;
    for (resource, amount) in wants {
        let room = free(resource)?.unwrap_or(0);
        fits = fits.min(room.unsigned_abs() / amount.unsigned_abs());
    }
    if !request.contains_key("pods")
        && let Some(pods) = free("pods")?
    {
        fits = fits.min(pods.unsigned_abs());
    }
    Ok(fits)
}

/// Pure: what one replica of `template` (a workload, as JSON) requests of CPU and
/// memory (what the members' resource summaries count), as kube-scheduler counts a pod
/// of its pod template (`spec.template.spec`): per resource, the sum of its containers'
/// `resources.requests`, at least the largest init container's, plus the pod's
/// `overhead`. Empty without a pod template. CPU in
/// millicores, the rest in whole units, as [`available_replicas`] reads them; an
/// unreadable quantity counts as none (the member's API server refuses it anyway).
pub fn pod_request(template: &serde_json::Value) -> BTreeMap<String, Quantity> {
    let Some(pod) = template.pointer("/spec/template/spec") else {
        return BTreeMap::new();
    };
    let requests = |c: &serde_json::Value| -> BTreeMap<String, i64> {
        let Some(r) = c.pointer("/resources/requests").and_then(|r| r.as_object()) else {
            return BTreeMap::new();
        };
        r.iter()
            .filter_map(|(k, v)| {
                let q = Quantity(v.as_str()?.to_string());
                Some((k.clone(), read(&q, k, k).ok()?))
            })
            .collect()
    };
    let list = |field: &str| -> Vec<BTreeMap<String, i64>> {
        pod.get(field)
            .and_then(|c| c.as_array())
            .map(|cs| cs.iter().map(requests).collect())
            .unwrap_or_default()
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for c in list("containers") {
        for (k, v) in c {
            let t = total.entry(k).or_default();
            *t = t.saturating_add(v);
        }
    }
    for c in list("initContainers") {
        for (k, v) in c {
            let t = total.entry(k).or_default();
            *t = (*t).max(v);
        }
    }
    for (k, v) in requests(&serde_json::json!({"resources": {"requests": pod.get("overhead")}})) {
        let t = total.entry(k).or_default();
        *t = t.saturating_add(v);
    }
    // only what the members' resource summaries count: a resource they do not report
    // (ephemeral-storage, a GPU) would leave room for none anywhere
    total
        .into_iter()
        .filter(|(k, v)| *v > 0 && (k == "cpu" || k == "memory"))
        .map(|(k, v)| {
            // as kube writes them: "1", "250m", "256Mi"
            let q = if k == "cpu" {
                crate::quantity::cpu(i128::from(v))
            } else {
                crate::quantity::bytes(i128::from(v))
            };
            (k, q)
        })
        .collect()
}

/// A quantity of `resource` in its unit (millicores for `cpu`), or an error naming
/// `field`.
fn read(q: &Quantity, resource: &str, field: &str) -> Result<i64, DivideError> {
    let unit = if resource == "cpu" {
        Unit::Milli
    } else {
        Unit::One
    };
    quantity::parse(&q.0, unit).map_err(|source| DivideError::Quantity {
        field: field.to_string(),
        source,
    })
}
