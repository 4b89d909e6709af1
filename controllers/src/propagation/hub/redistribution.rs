//! Make-before-break replica moves, the hub's half (federation.md §9.2 ★): the Works
//! about to be written are given the replica counts
//! `causeway_crds::federation::redistribution::plan` keeps, and the Work of a cluster
//! the binding no longer schedules stays, with the replicas it keeps, until the others
//! make up for them.
//!
//! Left to failover, not held here: clusters the binding's failover moved the
//! workload away from (their copies go as `purgeMode` says), clusters that are not
//! Ready (nothing is written to them; their replicas count as unavailable), clusters
//! leaving the fleet (the unjoin's) and Works being deleted.

use std::sync::Arc;

use causeway_crds::federation::binding::BindingSpec;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::redistribution::{self as guard, Copy, Plan};
use causeway_crds::federation::work::Work;
use causeway_crds::names::cluster_of_execution_namespace;
use kube::ResourceExt;
use kube::api::ObjectMeta;

use crate::propagation::status::work_of;

/// What the guard made of the Works to write.
pub(super) enum Outcome {
    /// The template's kind has no available-replica count: nothing guarded.
    Unguarded,
    /// The plan (the Works already follow it).
    Planned(Plan),
    /// The policy's `maxUnavailable` is unusable (the policy's `Valid` condition says
    /// so too); the Works were written as rendered.
    Invalid(String),
}

fn cluster_of(w: &Work) -> Option<&str> {
    w.metadata
        .namespace
        .as_deref()
        .and_then(cluster_of_execution_namespace)
}

fn ready(clusters: &[Arc<Cluster>], name: &str) -> Option<bool> {
    let c = clusters.iter().find(|c| c.name_any() == name)?;
    if c.metadata.deletion_timestamp.is_some() {
        return None; // leaving: the unjoin's
    }
    Some(crate::clusters::status::ready_of(c).is_some_and(|r| r.status == "True"))
}

/// `rendered` (the Works to write) with the replicas the guard keeps, plus the kept
/// Works of clusters no longer scheduled; `failed_over` are the clusters failover
/// keeps or purges itself.
pub(super) fn guard_works(
    spec: &BindingSpec,
    clusters: &[Arc<Cluster>],
    rendered: Vec<Work>,
    actual: &[Arc<Work>],
    failed_over: &[String],
) -> (Vec<Work>, Outcome) {
    let r = &spec.resource;
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if !guard::guards(group, &r.kind) {
        return (rendered, Outcome::Unguarded);
    }
    let (kind, name) = (r.kind.as_str(), r.name.as_str());
    let copy_of = |cluster: &str, share: i64| {
        let work = work_of(actual, cluster).filter(|w| w.metadata.deletion_timestamp.is_none());
        let observed = match ready(clusters, cluster) {
            Some(true) => work.and_then(|w| guard::observe(w, kind, name)),
            _ => None,
        };
        Copy {
            cluster: cluster.to_string(),
            share,
            current: work.and_then(|w| guard::replicas_of(w, kind, name)),
            observed,
        }
    };
    let mut copies: Vec<Copy> = rendered
        .iter()
        .filter_map(|w| {
            let share = guard::replicas_of(w, kind, name)?;
            Some(copy_of(cluster_of(w)?, share))
        })
        .collect();
    // clusters no longer scheduled whose copy the guard may keep
    let dropped: Vec<&Arc<Work>> = actual
        .iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
        .filter(|w| {
            cluster_of(w).is_some_and(|c| {
                !spec.clusters.iter().any(|t| t.name == c)
                    && !failed_over.iter().any(|f| f == c)
                    && !spec.evictions.iter().any(|e| e.cluster == c)
                    && ready(clusters, c) == Some(true)
            })
        })
        .collect();
    copies.extend(
        dropped
            .iter()
            .filter_map(|w| Some(copy_of(cluster_of(w)?, 0))),
    );
    let total = copies.iter().map(|c| c.share).sum();
    let max = match guard::max_unavailable(spec.redistribution.as_ref(), total) {
        Ok(max) => max,
        Err(e) => return (rendered, Outcome::Invalid(e)),
    };
    let plan = guard::plan(&copies, max);
    let mut works: Vec<Work> = rendered
        .into_iter()
        .map(
            |w| match cluster_of(&w).and_then(|c| plan.replicas.get(c)) {
                Some(n) if guard::replicas_of(&w, kind, name).is_some_and(|s| s != *n) => {
                    guard::with_replicas(w, kind, name, *n)
                }
                _ => w,
            },
        )
        .collect();
    for w in dropped {
        let Some(n) = cluster_of(w).and_then(|c| plan.replicas.get(c)).copied() else {
            continue; // gives up all it ran: its Work goes
        };
        let kept = Work {
            metadata: ObjectMeta {
                name: w.metadata.name.clone(),
                namespace: w.metadata.namespace.clone(),
                labels: w.metadata.labels.clone(),
                annotations: w.metadata.annotations.clone(),
                finalizers: w.metadata.finalizers.clone(),
                ..ObjectMeta::default()
            },
            spec: w.spec.clone(),
            status: None,
        };
        works.push(guard::with_replicas(kept, kind, name, n));
    }
    (works, Outcome::Planned(plan))
}
