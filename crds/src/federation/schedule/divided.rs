//! `replicaSchedulingType: Divided` (§8 C.19–23): the chosen clusters' weights, from
//! `weightPreference`, and the division itself (crate::federation::divide).

use std::collections::BTreeMap;

use super::super::cluster::Cluster;
use super::super::divide::{self, DivideError};
use super::super::propagation::{ClusterPreferences, DynamicWeightFactor};
use super::{Decision, Reason, Workload, affinity_matches};

#[cfg(test)]
mod tests;

/// Divides `workload`'s replicas over `decision`'s chosen clusters by `preferences`
/// (unset: equal weights). A chosen cluster that gets no replica is rejected with
/// the reason. `clusters` holds every chosen cluster by name.
pub(super) fn divide(
    decision: &mut Decision,
    clusters: &BTreeMap<&str, &Cluster>,
    preferences: Option<&ClusterPreferences>,
    workload: &Workload,
    replicas: i32,
) -> Result<(), DivideError> {
    let chosen = || decision.chosen.iter().map(|t| t.cluster.as_str());
    let dynamic = preferences.and_then(|p| p.dynamic_weight);
    let statics = preferences
        .map(|p| p.static_weight_list.as_slice())
        .unwrap_or_default();
    let counts = if dynamic == Some(DynamicWeightFactor::AvailableReplicas) {
        let mut available = BTreeMap::new();
        for name in chosen() {
            let summary = clusters[name]
                .status
                .as_ref()
                .and_then(|s| s.resource_summary.as_ref());
            available.insert(
                name.to_string(),
                divide::available_replicas(summary, &workload.request)?,
            );
        }
        divide::divide_by_available(
            replicas,
            &available,
            &workload.previous,
            workload.fresh,
            &workload.uid,
        )?
    } else {
        // Karmada's rule: a cluster's weight is the largest of the entries that
        // match it; when no entry matches any chosen cluster, all weigh 1.
        let mut weights: BTreeMap<String, u64> = chosen()
            .map(|name| {
                let matching = statics
                    .iter()
                    .filter(|s| affinity_matches(&s.target_cluster, clusters[name]));
                let weight = matching
                    .map(|s| s.weight.max(0).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                (name.to_string(), weight)
            })
            .collect();
        if weights.values().all(|&w| w == 0) {
            weights.values_mut().for_each(|w| *w = 1);
        }
        let unweighted: Vec<String> = weights
            .iter()
            .filter(|(_, w)| **w == 0)
            .map(|(c, _)| c.clone())
            .collect();
        for cluster in unweighted {
            weights.remove(&cluster);
            decision.rejected.insert(cluster, Reason::NoWeight);
        }
        divide::webster(replicas, &weights, &workload.uid)?
    };
    let targets = std::mem::take(&mut decision.chosen);
    for mut target in targets {
        match counts.get(&target.cluster).copied() {
            Some(n) if n > 0 => {
                target.replicas = Some(n);
                decision.chosen.push(target);
            }
            Some(_) => {
                decision
                    .rejected
                    .insert(target.cluster, Reason::NoReplicas(replicas));
            }
            // Already rejected for having no weight.
            None => {}
        }
    }
    Ok(())
}
