//! Where failover leaves a workload this round (federation.md §8 J.59–J.64): the
//! schedule with the failed-over clusters (`failover.cluster`) and those application
//! failover moves it away from (`failover.application`, [`app_failover`]) left out,
//! unless that would leave it nowhere new (J.61), or the eviction rate limit (J.63)
//! holds the move back for now.

use causeway_crds::federation::binding::Eviction;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::propagation::Placement;
use causeway_crds::federation::schedule::{
    Decision, PlacementError, Reason, Workload, app_failover, schedule,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::evictions::Evictions;

/// More than this share of the member clusters not Ready at once holds cluster failover.
pub(super) const DISRUPTION_THRESHOLD: f64 = 0.55;

/// Failures that began within this long of the latest one count as "at once".
pub(super) const DISRUPTION_WINDOW: SignedDuration = SignedDuration::from_mins(10);

/// Whether `c` is known not to be Ready (a Cluster not probed yet is not).
pub(super) fn down(c: &Cluster) -> bool {
    crate::clusters::status::ready_of(c).is_some_and(|r| r.status != "True")
}

/// ★ Why cluster failover holds for the whole fleet, if it does: more than
/// [`DISRUPTION_THRESHOLD`] of the clusters (two at least) stopped being Ready within
/// [`DISRUPTION_WINDOW`] of each other (and are still not Ready: one that fails later
/// on its own does not end the hold), which looks like the hub losing its network
/// rather than the members failing; moving every workload onto the few clusters it
/// still sees would only overload them. (kube-controller-manager likewise stops node
/// evictions when a whole zone goes down at once.) A member that never reported is not
/// counted, nor one that failed long before the others.
pub fn disruption(clusters: &[Cluster]) -> Option<String> {
    let live: Vec<&Cluster> = clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| {
            !crate::clusters::status::ready_of(c).is_some_and(|r| {
                r.reason == causeway_crds::federation::cluster::conditions::REASON_CLUSTER_STATUS_NEVER_UPDATED
            })
        })
        .collect();
    let since =
        |c: &Cluster| crate::clusters::status::ready_of(c).map(|r| r.last_transition_time.0);
    let mut failures: Vec<(&Cluster, Timestamp)> = live
        .iter()
        .filter(|c| down(c))
        .filter_map(|c| Some((*c, since(c)?)))
        .collect();
    failures.sort_by_key(|(_, t)| *t);
    // the most failures within one window (the latest of equal ones): a member that
    // fails on its own after the others does not end the hold while they stay down
    let mut widest = 0..0;
    let mut first = 0;
    for (last, (_, t)) in failures.iter().enumerate() {
        while t.duration_since(failures[first].1) > DISRUPTION_WINDOW {
            first += 1;
        }
        if last + 1 - first >= widest.len() {
            widest = first..last + 1;
        }
    }
    let at_once: Vec<String> = failures[widest]
        .iter()
        .map(|(c, _)| kube::ResourceExt::name_any(*c))
        .collect();
    let share = at_once.len() as f64 / live.len().max(1) as f64;
    (at_once.len() >= 2 && share > DISRUPTION_THRESHOLD).then(|| {
        let mut names = at_once.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        if at_once.len() > 5 {
            names.push_str(", …");
        }
        format!(
            "cluster failover holds: {} of {} clusters stopped being Ready at once ({names}), which looks like the hub losing its network rather than the members failing",
            at_once.len(),
            live.len(),
        )
    })
}

/// What a binding's Scheduled message (and the hub's Warning Event) ends with when
/// cluster failover would move the workload away from the clusters it is on, but no
/// other cluster fits (J.61): it stays where it is, and says so.
pub const NOWHERE_ELSE: &str = "but no other cluster fits: it stays";

/// The note for [`NOWHERE_ELSE`], the failed clusters (`from`) named.
pub fn nowhere_else(from: &[String]) -> String {
    format!(
        "failover.cluster would move it from {}, {NOWHERE_ELSE}",
        from.join(", ")
    )
}

/// The schedule after failover, and what the binding should say about it.
pub(super) struct Placed {
    /// The scheduling result.
    pub scheduled: Result<Decision, PlacementError>,
    /// The evictions the schedule honours (before `outcome` may keep clusters anyway).
    pub evictions: Vec<Eviction>,
    /// Clusters application failover would move away from but does not, with why.
    pub not_moved: Vec<(String, String)>,
    /// The clusters whose failover waits for the eviction rate limit.
    pub deferred: Option<String>,
    /// When the rate limit lets the next eviction go.
    pub next: Option<Timestamp>,
}

/// Schedules `workload` under `placement`, `verdict` being application failover's
/// (its evictions already in `workload.evicted`) and `bucket` the eviction rate limit.
/// `written` says whether this round writes the binding: one it does not write spends
/// nothing from the bucket and keeps its clusters (as it does, unwritten), with the time
/// the bucket would let it go as `next`, when a full round writes it.
pub(super) fn place(
    placement: &Placement,
    clusters: &[Cluster],
    mut workload: Workload,
    verdict: &app_failover::Verdict,
    bucket: &mut Evictions,
    written: bool,
    now: Timestamp,
) -> Placed {
    let new = &verdict.evictions[verdict.evictions.len() - verdict.new..];
    let mut not_moved = verdict.held.clone();
    let mut scheduled = schedule(placement, clusters, &workload);
    // a move that would leave the workload nowhere new does not happen (J.61)
    if let Ok(d) = &scheduled
        && new
            .iter()
            .any(|e| d.chosen.iter().any(|t| t.cluster == e.cluster))
    {
        for e in new {
            workload.evicted.remove(&e.cluster);
            not_moved.push((
                e.cluster.clone(),
                "unhealthy for longer than failover.application tolerates, but no other cluster can take it: it stays".to_string(),
            ));
        }
        scheduled = schedule(placement, clusters, &workload);
    }
    // J.63: leaving clusters the workload runs on is rate limited, for a failed cluster
    // as for an application that fails in one (a fault every cluster sees, such as a
    // registry outage, does not move every workload of the fleet at once)
    let mut deferred = None;
    let mut next = None;
    if let Ok(d) = &scheduled {
        let leaving: Vec<String> = d
            .rejected
            .iter()
            .filter(|(c, r)| {
                let moving = match r {
                    Reason::FailedOver(_) => true,
                    Reason::Evicted(_) => new.iter().any(|e| e.cluster == **c),
                    _ => false,
                };
                moving && workload.previous.contains_key(*c)
            })
            .map(|(c, _)| c.clone())
            .collect();
        let allowed = leaving.is_empty() || (written && bucket.take(leaving.len(), now));
        if !allowed {
            next = Some(bucket.next(now));
            workload.failover_at = None;
            for e in new {
                workload.evicted.remove(&e.cluster);
            }
            scheduled = schedule(placement, clusters, &workload);
            deferred = Some(leaving.join(", "));
        }
    }
    let evictions = match &scheduled {
        Ok(_) => verdict
            .evictions
            .iter()
            .filter(|e| workload.evicted.contains_key(&e.cluster))
            .cloned()
            .collect(),
        // a scheduler error keeps the clusters, and so what was recorded
        Err(_) => verdict.evictions[..verdict.evictions.len() - verdict.new].to_vec(),
    };
    Placed {
        scheduled,
        evictions,
        not_moved,
        deferred,
        next,
    }
}
