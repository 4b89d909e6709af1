//! Cluster failover, the hub's half (federation.md §8 J.59–J.62). The detector leaves a
//! cluster out once it has not been Ready for longer than tolerated
//! (`causeway_crds::federation::schedule::failover`); here its Work is purged as the
//! policy's `failover.cluster.purgeMode` says:
//!
//! - `Directly`: at once, as for any cluster that leaves the placement;
//! - `Gracefully` (the default): once every cluster the binding now schedules runs the
//!   template applied and healthy (`rollout::settled_at`), or [`GRACE_SECONDS`] after
//!   the cluster failed over, whichever comes first (J.60);
//! - `Never`: not while the cluster stays failed.
//!
//! A cluster that is Ready again is scheduled as any other (J.62): nothing is kept for
//! it, and a graceful purge pending for it is dropped.
//!
//! Application failover (J.64) purges the Work of a cluster in the binding's
//! `spec.evictions` the same way, as `failover.application.purgeMode` says, its grace
//! period (`gracePeriodSeconds`, 600 s by default) counted from the eviction; `Never`
//! keeps the copy until the template's next generation. The times a decision changes
//! (a failover deadline, the end of a grace period) are when the loop must run again:
//! [`next_due`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::binding::{BindingSpec, BindingStatus, conditions};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::deps::dependencies;
use causeway_crds::federation::interpreter;
use causeway_crds::federation::propagation::PurgeMode;
use causeway_crds::federation::rollout;
use causeway_crds::federation::schedule::{app_failover, failover};
use causeway_crds::federation::work::Work;
use causeway_crds::names::cluster_of_execution_namespace;
use causeway_crds::well_known::labels;
use causeway_runtime::reflect::Key;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::super::detector;

/// How long a graceful purge waits for the new clusters at most (Karmada's default).
pub(super) const GRACE_SECONDS: i64 = app_failover::DEFAULT_GRACE_PERIOD_SECONDS;

fn purge_mode(spec: &BindingSpec) -> Option<PurgeMode> {
    let cluster = spec.failover.as_ref()?.cluster.as_ref()?;
    Some(cluster.purge_mode.unwrap_or(PurgeMode::Gracefully))
}

fn cluster<'a>(clusters: &'a [Arc<Cluster>], name: &str) -> Option<&'a Cluster> {
    clusters
        .iter()
        .find(|c| c.name_any() == name)
        .map(Arc::as_ref)
}

/// When cluster failover (`failover.cluster`) moved the workload away from `name`,
/// if it did: the cluster has not been Ready for longer than the binding tolerates.
pub(super) fn failed_over_at(
    spec: &BindingSpec,
    clusters: &[Arc<Cluster>],
    name: &str,
    now: Timestamp,
) -> Option<Timestamp> {
    purge_mode(spec)?;
    failover::past_deadline(
        cluster(clusters, name)?,
        &spec.placement.cluster_tolerations,
        now,
    )
}

/// When the hub saw each binding's workload leave each failed-over cluster (J.60): a
/// graceful purge's grace period counts from the move, not from the failover deadline,
/// which the eviction rate limit (J.63) or a disruption hold may leave far behind (the
/// copy in transit would then be purged in the round its replacement is made). Carried
/// across rounds, in memory: after a hub restart the grace counts from its first round,
/// which can only purge later, never earlier.
#[derive(Debug, Default)]
pub(super) struct Moves(HashMap<Key, BTreeMap<String, Timestamp>>);

impl Moves {
    /// Records this round's bindings (`specs`, by key): each failed-over cluster outside
    /// a binding's `spec.clusters` keeps the time it was first seen so (now for one
    /// seen now); clusters back in the placement, or no longer failed over, and
    /// bindings gone are forgotten.
    pub(super) fn record<'a>(
        &mut self,
        specs: impl IntoIterator<Item = (Key, &'a BindingSpec)>,
        clusters: &[Arc<Cluster>],
        now: Timestamp,
    ) {
        let mut next = HashMap::new();
        for (key, spec) in specs {
            let had = self.0.get(&key);
            let moved: BTreeMap<String, Timestamp> = clusters
                .iter()
                .map(|c| c.name_any())
                .filter(|c| !spec.clusters.iter().any(|t| t.name == *c))
                .filter(|c| failed_over_at(spec, clusters, c, now).is_some())
                .map(|c| {
                    let at = had.and_then(|h| h.get(&c)).copied().unwrap_or(now);
                    (c, at)
                })
                .collect();
            if !moved.is_empty() {
                next.insert(key, moved);
            }
        }
        self.0 = next;
    }

    /// When the workload of binding `key` left each failed-over cluster.
    pub(super) fn of(&self, key: &Key) -> Option<&BTreeMap<String, Timestamp>> {
        self.0.get(key)
    }
}

/// A cluster failover moved the workload away from whose Work stays for now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Kept {
    pub cluster: String,
    /// What the user should know (for an Event).
    pub note: String,
    /// Kept until the other clusters run the workload (`purgeMode: Gracefully`): a
    /// copy in transit, not one parked (`Never`).
    pub graceful: bool,
}

/// The clusters failover moved the workload away from whose Works stay for now: a
/// failed-over cluster (`failover.cluster`) or one application failover evicted
/// (`failover.application`, the binding's `spec.evictions`; its grace period counts
/// from the eviction).
///
/// A scheduled cluster whose Work the hub is about to raise (`to_write`: the Works of
/// this round; the ones it has, `works`, still ask for the share before the move) is
/// not done yet, however healthy it runs its old share: the copy in transit stays
/// until the others run the replicas it held.
pub(super) fn kept(
    spec: &BindingSpec,
    moved: Option<&BTreeMap<String, Timestamp>>,
    clusters: &[Arc<Cluster>],
    works: &[Arc<Work>],
    to_write: &[Work],
    generation: i64,
    now: Timestamp,
) -> Vec<Kept> {
    let application = spec.failover.as_ref().and_then(|f| f.application.as_ref());
    let work_of = |c: &str| crate::propagation::status::work_of(works, c);
    let next_of = |c: &str| {
        let ns = causeway_crds::names::execution_namespace(c);
        to_write
            .iter()
            .find(|w| w.metadata.namespace.as_deref() == Some(ns.as_str()))
    };
    let raised = |c: &str| match (work_of(c), next_of(c)) {
        (Some(now), Some(next)) => asks(now) < asks(next),
        _ => false,
    };
    let pending: Vec<String> = spec
        .clusters
        .iter()
        .filter(|t| raised(&t.name) || rollout::settled_at(work_of(&t.name), generation).is_err())
        .map(|t| t.name.clone())
        .collect();
    let mut out = Vec::new();
    for w in works {
        let Some(name) = w
            .metadata
            .namespace
            .as_deref()
            .and_then(cluster_of_execution_namespace)
        else {
            continue;
        };
        if spec.clusters.iter().any(|t| t.name == name) {
            continue;
        }
        let evicted = spec.evictions.iter().find(|e| e.cluster == name);
        let (mode, until, what, stays_while) = match (evicted, application) {
            (Some(e), Some(app)) => (
                app.purge_mode.unwrap_or(PurgeMode::Gracefully),
                e.evicted_at.0.checked_add(SignedDuration::from_secs(
                    app_failover::grace_period_seconds(app),
                )),
                "application failover moved the workload away from cluster",
                "until the template's next generation",
            ),
            _ => {
                let Some(mode) = purge_mode(spec) else {
                    continue;
                };
                if failed_over_at(spec, clusters, name, now).is_none() {
                    continue; // left for another reason, or Ready again: removed as usual
                }
                // the grace counts from the move ([`Moves`]), not from the deadline:
                // the move may come much later (the eviction rate limit, a disruption)
                let moved = moved.and_then(|m| m.get(name)).copied().unwrap_or(now);
                (
                    mode,
                    moved.checked_add(SignedDuration::from_secs(GRACE_SECONDS)),
                    "failed over from cluster",
                    "while it is not Ready",
                )
            }
        };
        let until = until.unwrap_or(Timestamp::MAX);
        match mode {
            PurgeMode::Directly => {}
            PurgeMode::Never => out.push(Kept {
                cluster: name.to_string(),
                note: format!("{what} {name}; its copy stays {stays_while} (purgeMode Never)"),
                graceful: false,
            }),
            PurgeMode::Gracefully if !pending.is_empty() && now < until => out.push(Kept {
                cluster: name.to_string(),
                note: format!(
                    "{what} {name}; its copy stays until {} run the template applied and healthy, or until {until} (purgeMode Gracefully)",
                    pending.join(", ")
                ),
                graceful: true,
            }),
            PurgeMode::Gracefully => {}
        }
    }
    out
}

/// J.61: the notes of the detector's Scheduled condition (`detected`) saying cluster
/// failover would move the workload but no other cluster fits, for a Warning Event.
pub(super) fn nowhere_else_notes(detected: Option<&BindingStatus>) -> Vec<String> {
    let scheduled = detected
        .into_iter()
        .flat_map(|s| s.conditions.iter())
        .filter(|c| c.type_ == conditions::SCHEDULED);
    scheduled
        .flat_map(|c| c.message.split("; "))
        .filter(|n| n.ends_with(detector::failover::NOWHERE_ELSE))
        .map(str::to_string)
        .collect()
}

/// How many replicas a Work asks its cluster for: its manifests' counts (where each
/// kind keeps one), summed.
fn asks(work: &Work) -> i64 {
    work.spec
        .workload
        .manifests
        .iter()
        .filter_map(|m| {
            m.0.pointer(interpreter::replicas_pointer(work, &m.0))
                .and_then(serde_json::Value::as_i64)
        })
        .sum()
}

/// For the binding of a dependency (`propagateDeps`): the clusters outside its own
/// `spec.clusters` where a binding that needs it still has a Work (not being deleted)
/// whose manifests use it, such as a failed-over or evicted cluster's kept copy. The
/// dependency stays there as long as that copy does: a kept Deployment whose
/// ConfigMap, Secret or PVC was deleted under it would not restart.
pub(super) fn kept_for_requirers(
    spec: &BindingSpec,
    works: &HashMap<(String, String), Vec<Arc<Work>>>,
) -> Vec<String> {
    let mut out = BTreeSet::new();
    for r in &spec.required_by {
        let key = (r.namespace.clone().unwrap_or_default(), r.name.clone());
        for w in works.get(&key).into_iter().flatten() {
            if w.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(cluster) = w.labels().get(labels::CLUSTER) else {
                continue;
            };
            let uses = w.spec.workload.manifests.iter().any(|m| {
                dependencies(&m.0, interpreter::pod_specs(w, &m.0))
                    .iter()
                    .any(|d| d.kind == spec.resource.kind && d.name == spec.resource.name)
            });
            if uses && !spec.clusters.iter().any(|t| t.name == *cluster) {
                out.insert(cluster.clone());
            }
        }
    }
    out.into_iter().collect()
}

/// The next time after `now` that failover changes what `spec` should be: a scheduled
/// cluster's failover deadline, or the end of a graceful purge (of a failed-over
/// cluster, counted from the move, `moved`; or of one application failover evicted).
pub(super) fn next_due(
    spec: &BindingSpec,
    moved: Option<&BTreeMap<String, Timestamp>>,
    clusters: &[Arc<Cluster>],
    now: Timestamp,
) -> Option<Timestamp> {
    let deadlines = clusters
        .iter()
        .filter(|_| purge_mode(spec).is_some())
        .filter_map(|c| failover::failing(c, &spec.placement.cluster_tolerations))
        .map(|(_, deadline)| Some(deadline));
    let purges = moved
        .into_iter()
        .flat_map(|m| m.values())
        .filter(|_| purge_mode(spec).is_some())
        .map(|at| {
            at.checked_add(SignedDuration::from_secs(GRACE_SECONDS))
                .ok()
        });
    let failing = deadlines.chain(purges);
    let application = spec.failover.as_ref().and_then(|f| f.application.as_ref());
    let graces = application.into_iter().flat_map(|app| {
        let grace = SignedDuration::from_secs(app_failover::grace_period_seconds(app));
        spec.evictions
            .iter()
            .map(move |e| e.evicted_at.0.checked_add(grace).ok())
    });
    failing.chain(graces).flatten().filter(|t| *t > now).min()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::cluster;
    use super::*;
    use causeway_crds::federation::binding::TargetCluster;
    use causeway_crds::federation::work::{
        ManifestStatus, ResourceHealth, ResourceIdentifier, WorkSpec, WorkStatus,
    };
    use causeway_crds::names::execution_namespace;
    use serde_json::json;

    fn work(cluster: &str, healthy: bool) -> Arc<Work> {
        let mut w = Work::new("demo.api-deployment", WorkSpec::default());
        w.metadata.namespace = Some(execution_namespace(cluster));
        w.metadata.labels = Some(
            [(
                causeway_crds::well_known::labels::CLUSTER.to_string(),
                cluster.to_string(),
            )]
            .into(),
        );
        w.status = Some(WorkStatus {
            manifest_statuses: vec![ManifestStatus {
                identifier: ResourceIdentifier {
                    group: "apps".into(),
                    kind: "Deployment".into(),
                    name: "api".into(),
                    version: "v1".into(),
                    ..Default::default()
                },
                status: Some(json!({})),
                health: Some(if healthy {
                    ResourceHealth::Healthy
                } else {
                    ResourceHealth::Unhealthy
                }),
                applied: Some(true),
                template_generation: Some(1),
                ..Default::default()
            }],
            ..Default::default()
        });
        Arc::new(w)
    }

    fn spec(mode: Option<&str>, clusters: &[&str]) -> BindingSpec {
        let mut s: BindingSpec = serde_json::from_value(json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
            "placement": {"clusterTolerations": [{"key": "cluster.causeway.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]},
        }))
        .unwrap();
        if let Some(mode) = mode {
            s.failover =
                Some(serde_json::from_value(json!({"cluster": {"purgeMode": mode}})).unwrap());
        }
        s.clusters = clusters
            .iter()
            .map(|c| TargetCluster {
                name: c.to_string(),
                replicas: Some(3),
            })
            .collect();
        s
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The workload left `cluster` at `when` ([`Moves`]).
    fn moved_at(cluster: &str, when: &str) -> BTreeMap<String, Timestamp> {
        BTreeMap::from([(cluster.to_string(), at(when))])
    }

    /// J.60: Gracefully keeps the failed cluster's Work until the others are healthy or
    /// the grace period ends; Directly never; Never always; a cluster Ready again or
    /// left for another reason is removed as usual.
    #[test]
    fn a_failed_clusters_work_is_purged_as_the_policy_says() {
        let clusters = vec![
            cluster("east", "False", "2026-01-01T00:00:00Z"),
            cluster("west", "True", "2026-01-01T00:00:00Z"),
            cluster("north", "True", "2026-01-01T00:00:00Z"),
        ];
        // moved at the failover deadline (10 s after east stopped being Ready)
        let moves = moved_at("east", "2026-01-01T00:00:10Z");
        let kept_names = |spec: &BindingSpec, works: &[Arc<Work>], now: &str| -> Vec<String> {
            kept(spec, Some(&moves), &clusters, works, &[], 1, at(now))
                .into_iter()
                .map(|k| k.cluster)
                .collect()
        };
        let east = work("east", true);
        let pending = [east.clone(), work("west", false), work("north", true)];
        let healthy = [east.clone(), work("west", true), work("north", true)];
        let moved = spec(Some("Gracefully"), &["west", "north"]);
        // west not healthy yet: kept, and the note says why and until when
        let notes = kept(
            &moved,
            Some(&moves),
            &clusters,
            &pending,
            &[],
            1,
            at("2026-01-01T00:01:00Z"),
        );
        assert_eq!(
            notes,
            vec![Kept {
                cluster: "east".to_string(),
                note: "failed over from cluster east; its copy stays until west run the template applied and healthy, or until 2026-01-01T00:10:10Z (purgeMode Gracefully)".to_string(),
                graceful: true,
            }]
        );
        // the grace period is over: purged
        assert!(kept_names(&moved, &pending, "2026-01-01T00:10:10Z").is_empty());
        // both healthy: purged
        assert!(kept_names(&moved, &healthy, "2026-01-01T00:01:00Z").is_empty());
        // Directly: purged at once; Never: kept even when the others are healthy
        assert!(
            kept_names(
                &spec(Some("Directly"), &["west", "north"]),
                &pending,
                "2026-01-01T00:01:00Z"
            )
            .is_empty()
        );
        assert_eq!(
            kept_names(
                &spec(Some("Never"), &["west", "north"]),
                &healthy,
                "2026-01-01T01:00:00Z"
            ),
            vec!["east".to_string()]
        );
        // no failover, or before the deadline (left for another reason): removed as usual
        assert!(
            kept_names(
                &spec(None, &["west", "north"]),
                &pending,
                "2026-01-01T00:01:00Z"
            )
            .is_empty()
        );
        assert!(kept_names(&moved, &pending, "2026-01-01T00:00:05Z").is_empty());
        // Ready again (J.62): nothing kept for it
        let back = vec![
            cluster("east", "True", "2026-01-01T00:02:00Z"),
            clusters[1].clone(),
            clusters[2].clone(),
        ];
        assert!(
            kept(
                &moved,
                Some(&moves),
                &back,
                &pending,
                &[],
                1,
                at("2026-01-01T00:03:00Z")
            )
            .is_empty()
        );
    }

    /// karmada#3736: in the round the move is decided, the others' Works still ask for
    /// their old share and report it healthy; the failed cluster's copy stays until
    /// the raised Works run, not only until the old ones look done.
    #[test]
    fn a_copy_in_transit_waits_for_the_raised_shares() {
        let clusters = vec![
            cluster("east", "False", "2026-01-01T00:00:00Z"),
            cluster("west", "True", "2026-01-01T00:00:00Z"),
        ];
        let asking = |cluster: &str, replicas: i64| {
            let mut w = (*work(cluster, true)).clone();
            w.spec.workload.manifests = vec![causeway_crds::federation::work::Manifest(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "demo"},
                "spec": {"replicas": replicas}}))];
            w
        };
        let moved = spec(Some("Gracefully"), &["west"]);
        let works = [Arc::new(asking("east", 3)), Arc::new(asking("west", 3))];
        let now = at("2026-01-01T00:01:00Z");
        let held = kept(
            &moved,
            None,
            &clusters,
            &works,
            &[asking("west", 6)],
            1,
            now,
        );
        assert_eq!(
            held.iter().map(|k| k.cluster.as_str()).collect::<Vec<_>>(),
            ["east"],
            "west still runs 3 of its 6"
        );
        // the same share as before (nothing raised): the old Work's health decides
        assert!(
            kept(
                &moved,
                None,
                &clusters,
                &works,
                &[asking("west", 3)],
                1,
                now
            )
            .is_empty()
        );
    }

    /// J.64: the Work of a cluster application failover evicted is purged as
    /// `failover.application` says, its grace period counted from the eviction.
    #[test]
    fn an_evicted_clusters_work_is_purged_as_the_policy_says() {
        use causeway_crds::federation::binding::Eviction;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let clusters = vec![
            cluster("east", "True", "2026-01-01T00:00:00Z"),
            cluster("west", "True", "2026-01-01T00:00:00Z"),
        ];
        let evicted = |mode: &str, grace: i32| {
            let mut s = spec(None, &["west"]);
            s.failover = Some(
                serde_json::from_value(
                    json!({"application": {"purgeMode": mode, "gracePeriodSeconds": grace}}),
                )
                .unwrap(),
            );
            s.evictions = vec![Eviction {
                cluster: "east".into(),
                reason: "unhealthy".into(),
                evicted_at: Time(at("2026-01-01T00:05:00Z")),
                template_generation: Some(1),
                preserved_label_state: Default::default(),
                clusters_before_failover: Vec::new(),
            }];
            s
        };
        let east = work("east", false);
        let pending = [east.clone(), work("west", false)];
        let healthy = [east.clone(), work("west", true)];
        let names = |s: &BindingSpec, works: &[Arc<Work>], now: &str| -> Vec<String> {
            kept(s, None, &clusters, works, &[], 1, at(now))
                .into_iter()
                .map(|k| k.cluster)
                .collect()
        };
        let graceful = evicted("Gracefully", 60);
        assert_eq!(
            kept(&graceful, None, &clusters, &pending, &[], 1, at("2026-01-01T00:05:30Z")),
            vec![Kept {
                cluster: "east".to_string(),
                note: "application failover moved the workload away from cluster east; its copy stays until west run the template applied and healthy, or until 2026-01-01T00:06:00Z (purgeMode Gracefully)".to_string(),
                graceful: true,
            }]
        );
        assert!(names(&graceful, &pending, "2026-01-01T00:06:00Z").is_empty());
        assert!(names(&graceful, &healthy, "2026-01-01T00:05:30Z").is_empty());
        assert!(names(&evicted("Directly", 60), &pending, "2026-01-01T00:05:30Z").is_empty());
        assert_eq!(
            kept(&evicted("Never", 60), None, &clusters, &healthy, &[], 1, at("2026-01-02T00:00:00Z")),
            vec![Kept {
                cluster: "east".to_string(),
                note: "application failover moved the workload away from cluster east; its copy stays until the template's next generation (purgeMode Never)".to_string(),
                graceful: false,
            }]
        );
        // the loop runs again when the grace period ends
        assert_eq!(
            next_due(&graceful, None, &clusters, at("2026-01-01T00:05:30Z")),
            Some(at("2026-01-01T00:06:00Z"))
        );
        assert_eq!(
            next_due(&graceful, None, &clusters, at("2026-01-01T00:06:00Z")),
            None
        );
    }

    /// A dependency stays in a cluster while a workload that needs it keeps a copy
    /// there (failed over or evicted, purge pending), and goes once that copy does.
    #[test]
    fn a_dependency_stays_while_a_kept_copy_needs_it() {
        use causeway_crds::federation::binding::BindingSnapshot;
        use causeway_crds::federation::work::Manifest;
        let mut dep = spec(None, &["west"]);
        dep.resource.api_version = "v1".into();
        dep.resource.kind = "ConfigMap".into();
        dep.resource.name = "api-config".into();
        dep.required_by = vec![BindingSnapshot {
            namespace: Some("demo".into()),
            name: "api-deployment".into(),
            clusters: Vec::new(),
        }];
        // the requirer's copy in `cluster`, mounting ConfigMap `config`
        let mounting = |cluster: &str, config: &str| {
            let mut w = (*work(cluster, true)).clone();
            w.spec.workload.manifests = vec![Manifest(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "demo"},
                "spec": {"template": {"spec": {"containers": [{"name": "api", "image": "x"}],
                    "volumes": [{"name": "c", "configMap": {"name": config}}]}}}
            }))];
            w
        };
        let key = ("demo".to_string(), "api-deployment".to_string());
        let mut works = HashMap::from([(
            key.clone(),
            vec![
                Arc::new(mounting("east", "api-config")),
                Arc::new(mounting("north", "other-config")),
                Arc::new(mounting("west", "api-config")),
            ],
        )]);
        // north's copy does not use it: not kept there
        assert_eq!(kept_for_requirers(&dep, &works), vec!["east".to_string()]);
        // east's copy is being deleted: the dependency goes too
        let mut leaving = mounting("east", "api-config");
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at("2026-01-01T00:00:00Z")),
        );
        works.insert(
            key,
            vec![Arc::new(leaving), Arc::new(mounting("west", "api-config"))],
        );
        assert!(kept_for_requirers(&dep, &works).is_empty());
        // not a dependency: nothing
        assert!(kept_for_requirers(&spec(None, &["west"]), &works).is_empty());
    }

    #[test]
    fn the_loop_runs_again_when_a_deadline_passes() {
        let clusters = vec![
            cluster("east", "False", "2026-01-01T00:00:00Z"),
            cluster("west", "True", "2026-01-01T00:00:00Z"),
        ];
        let s = spec(Some("Gracefully"), &["east", "west"]);
        let moves = moved_at("east", "2026-01-01T00:00:10Z");
        // first the failover deadline (10 s), then the end of the grace period (the
        // workload moved at the deadline)
        assert_eq!(
            next_due(&s, Some(&moves), &clusters, at("2026-01-01T00:00:01Z")),
            Some(at("2026-01-01T00:00:10Z"))
        );
        assert_eq!(
            next_due(&s, Some(&moves), &clusters, at("2026-01-01T00:00:10Z")),
            Some(at("2026-01-01T00:10:10Z"))
        );
        assert_eq!(
            next_due(&s, Some(&moves), &clusters, at("2026-01-01T00:10:10Z")),
            None
        );
        assert_eq!(
            next_due(
                &spec(None, &["east"]),
                Some(&moves),
                &clusters,
                at("2026-01-01T00:00:01Z")
            ),
            None
        );
    }

    /// J.60: the grace period of a graceful purge counts from when the workload moved,
    /// not from the failover deadline. The eviction rate limit or a disruption hold may
    /// move it long after the deadline: the failed cluster's copy then stays until the
    /// new clusters run the workload, or 600 s after the move; before, it was purged
    /// in the round its replacement was made.
    #[test]
    fn a_late_move_still_gets_its_whole_grace_period() {
        let clusters = vec![
            cluster("east", "False", "2026-01-01T00:00:00Z"),
            cluster("west", "True", "2026-01-01T00:00:00Z"),
        ];
        let moved = spec(Some("Gracefully"), &["west"]);
        let key = ("demo".to_string(), "api-deployment".to_string());
        let mut moves = Moves::default();
        // the deadline (00:00:10) passes, the rate limit keeps east in the placement
        let waiting = spec(Some("Gracefully"), &["east", "west"]);
        moves.record(
            [(key.clone(), &waiting)],
            &clusters,
            at("2026-01-01T00:20:00Z"),
        );
        assert_eq!(moves.of(&key), None, "not moved yet");
        // the move, half an hour after the deadline; the rounds after keep its time
        moves.record(
            [(key.clone(), &moved)],
            &clusters,
            at("2026-01-01T00:30:00Z"),
        );
        moves.record(
            [(key.clone(), &moved)],
            &clusters,
            at("2026-01-01T00:31:00Z"),
        );
        assert_eq!(
            moves.of(&key),
            Some(&moved_at("east", "2026-01-01T00:30:00Z"))
        );
        let pending = [work("east", true), work("west", false)];
        let names = |now: &str| -> Vec<String> {
            kept(&moved, moves.of(&key), &clusters, &pending, &[], 1, at(now))
                .into_iter()
                .map(|k| k.cluster)
                .collect()
        };
        // the round of the move, and after: west does not run it yet, east's copy stays
        assert_eq!(names("2026-01-01T00:30:00Z"), ["east"]);
        assert_eq!(names("2026-01-01T00:39:59Z"), ["east"]);
        // 600 s after the move: purged
        assert!(names("2026-01-01T00:40:00Z").is_empty());
        // and the loop runs again then
        assert_eq!(
            next_due(
                &moved,
                moves.of(&key),
                &clusters,
                at("2026-01-01T00:31:00Z")
            ),
            Some(at("2026-01-01T00:40:00Z"))
        );
        // east Ready again (J.62), or the binding gone: forgotten
        let back = vec![
            cluster("east", "True", "2026-01-01T00:45:00Z"),
            clusters[1].clone(),
        ];
        moves.record([(key.clone(), &moved)], &back, at("2026-01-01T00:45:00Z"));
        assert_eq!(moves.of(&key), None);
        moves.record(
            [(key.clone(), &moved)],
            &clusters,
            at("2026-01-01T00:50:00Z"),
        );
        moves.record([], &clusters, at("2026-01-01T00:51:00Z"));
        assert_eq!(moves.of(&key), None);
    }

    /// J.61: the notes of the detector's Scheduled message a Warning Event repeats.
    #[test]
    fn nowhere_else_is_told() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        let status = |message: &str| BindingStatus {
            conditions: vec![Condition {
                type_: conditions::SCHEDULED.to_string(),
                status: "True".into(),
                reason: "Scheduled".into(),
                message: message.into(),
                last_transition_time: Time(at("2026-01-01T00:00:00Z")),
                observed_generation: None,
            }],
            ..Default::default()
        };
        let note = detector::failover::nowhere_else(&["east".to_string()]);
        let s = status(&format!("scheduled to 1 cluster(s); {note}"));
        assert_eq!(nowhere_else_notes(Some(&s)), [note]);
        assert!(nowhere_else_notes(Some(&status("scheduled to 1 cluster(s)"))).is_empty());
        assert!(nowhere_else_notes(None).is_empty());
    }
}
