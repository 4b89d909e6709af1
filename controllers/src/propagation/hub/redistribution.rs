//! Make-before-break replica moves, the hub's half (federation.md §9.2 ★): the Works
//! about to be written are given the replica counts
//! `causeway_crds::federation::redistribution::plan` keeps, and the Work of a cluster
//! the binding no longer schedules stays, with the replicas it keeps, until the others
//! make up for them.
//!
//! Left to failover, not held here: clusters the binding's failover moved the
//! workload away from (their copies go as `purgeMode` says), clusters leaving the
//! fleet (the unjoin's) and Works being deleted. A cluster no longer scheduled that is
//! not Ready keeps its Work as it is (nothing can be written to it, and its replicas
//! count as unavailable) until it is Ready again or failover takes it. With
//! `causeway.io/retain-replicas` the members' own counts win, and nothing is guarded.

use std::sync::Arc;

use causeway_crds::federation::binding::BindingSpec;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::interpreter::{DEFAULT_REPLICAS, Interpretation};
use causeway_crds::federation::redistribution::{self as guard, Copy, Plan};
use causeway_crds::federation::work::Work;
use causeway_crds::names::cluster_of_execution_namespace;
use causeway_crds::well_known::labels;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::Value;

use super::failover;
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
    Some(crate::clusters::status::is_ready(c))
}

/// `rendered` (the Works to write) with the replicas the guard keeps, plus the kept
/// Works of clusters no longer scheduled; `failed_over` are the clusters failover
/// keeps itself; `template` is the template as a manifest, `interpretation` its kind's
/// interpreter in force, if any.
#[allow(clippy::too_many_arguments)]
pub(super) fn guard_works(
    spec: &BindingSpec,
    template: &Value,
    interpretation: Option<&Interpretation>,
    clusters: &[Arc<Cluster>],
    rendered: Vec<Work>,
    actual: &[Arc<Work>],
    failed_over: &[String],
    now: Timestamp,
) -> (Vec<Work>, Outcome) {
    let r = &spec.resource;
    let group = causeway_crds::federation::group_of(&r.api_version);
    let retained = labels::retains_replicas(template);
    // with retain-replicas the members' own count (an HPA's) wins: nothing to guard
    if !guard::guards(group, &r.kind, interpretation) || retained {
        return (rendered, Outcome::Unguarded);
    }
    let (kind, name) = (r.kind.as_str(), r.name.as_str());
    // read with the interpretation the guard decided by, not one an older Work carries
    let available = interpretation.and_then(|i| i.available_path.as_deref());
    let live = |cluster: &str| {
        work_of(actual, cluster).filter(|w| w.metadata.deletion_timestamp.is_none())
    };
    let copy_of = |cluster: &str, share: i64| {
        let work = live(cluster);
        let observed = match ready(clusters, cluster) {
            Some(true) => work.and_then(|w| guard::observe(w, kind, name, available)),
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
    // scheduled clusters with nothing rendered this round (their overrides failed, or
    // an ordered rollout has not reached them yet) still count with their share
    let at = interpretation
        .and_then(|i| i.replicas_path.as_deref())
        .unwrap_or(DEFAULT_REPLICAS);
    let template_replicas = template.pointer(at).and_then(Value::as_i64);
    for t in &spec.clusters {
        if copies.iter().any(|c| c.cluster == t.name) {
            continue;
        }
        if let Some(share) = t.replicas.map(i64::from).or(template_replicas) {
            copies.push(copy_of(&t.name, share));
        }
    }
    // clusters no longer scheduled whose copy the guard may keep: not those failover
    // moved the workload away from (their copies go as purgeMode says); one that is
    // not Ready keeps its copy as it is until it is Ready again (nothing can be written
    // to it meanwhile) or failover takes it
    let mut works = Vec::new();
    let mut dropped: Vec<&Arc<Work>> = Vec::new();
    for w in actual {
        let Some(c) = cluster_of(w) else { continue };
        if w.metadata.deletion_timestamp.is_some()
            || spec.clusters.iter().any(|t| t.name == c)
            || failed_over.iter().any(|f| f == c)
            || spec.evictions.iter().any(|e| e.cluster == c)
        {
            continue;
        }
        match ready(clusters, c) {
            Some(true) => dropped.push(w),
            Some(false) if failover::failed_over_at(spec, clusters, c, now).is_none() => {
                works.push(kept_work(w));
            }
            _ => {}
        }
    }
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
    works.extend(rendered.into_iter().map(|w| {
        match cluster_of(&w).and_then(|c| plan.replicas.get(c)) {
            Some(n) if guard::replicas_of(&w, kind, name).is_some_and(|s| s != *n) => {
                guard::with_replicas(w, kind, name, *n)
            }
            _ => w,
        }
    }));
    for w in dropped {
        // none kept: it gives up all it ran, and its Work goes
        if let Some(n) = cluster_of(w).and_then(|c| plan.replicas.get(c)) {
            works.push(guard::with_replicas(kept_work(w), kind, name, *n));
        }
    }
    (works, Outcome::Planned(plan))
}

/// The Work `w` as the hub writes it again: its name, labels, annotations, finalizers
/// and spec.
fn kept_work(w: &Work) -> Work {
    Work {
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
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::cluster;
    use super::*;
    use causeway_crds::federation::binding::TargetCluster;
    use causeway_crds::federation::work::{
        Manifest, ManifestStatus, ResourceIdentifier, WorkSpec, WorkStatus, WorkloadTemplate,
    };
    use causeway_crds::names::execution_namespace;
    use serde_json::json;

    const SINCE: &str = "2026-01-01T00:00:00Z";

    fn now() -> Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn template() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo"}, "spec": {"replicas": 4}})
    }

    /// `cluster`'s Work asking for `replicas`, its member reporting `available`.
    fn work(cluster: &str, replicas: i64, available: Option<i64>) -> Work {
        let mut m = template();
        m["spec"]["replicas"] = json!(replicas);
        let mut w = Work::new(
            "demo.web-deployment",
            WorkSpec {
                workload: WorkloadTemplate {
                    manifests: vec![Manifest(m)],
                },
                ..WorkSpec::default()
            },
        );
        w.metadata.namespace = Some(execution_namespace(cluster));
        w.metadata.labels = Some([(labels::CLUSTER.to_string(), cluster.to_string())].into());
        w.metadata.finalizers = Some(vec!["causeway.io/work".into()]);
        w.status = available.map(|a| WorkStatus {
            manifest_statuses: vec![ManifestStatus {
                identifier: ResourceIdentifier {
                    kind: "Deployment".into(),
                    name: "web".into(),
                    ..Default::default()
                },
                status: Some(json!({"replicas": replicas, "updatedReplicas": replicas,
                    "availableReplicas": a})),
                applied: Some(true),
                ..Default::default()
            }],
            ..Default::default()
        });
        w
    }

    fn spec(clusters: &[(&str, i32)]) -> BindingSpec {
        let mut s: BindingSpec = serde_json::from_value(json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo",
                "name": "web"}}))
        .unwrap();
        s.clusters = clusters
            .iter()
            .map(|(c, n)| TargetCluster {
                name: c.to_string(),
                replicas: Some(*n),
            })
            .collect();
        s
    }

    /// The replicas each written Work asks for, by cluster.
    fn written(works: &[Work]) -> Vec<(String, i64)> {
        written_of(works, "Deployment")
    }

    /// The replicas each written Work's `kind` web asks for, by cluster.
    fn written_of(works: &[Work], kind: &str) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = works
            .iter()
            .map(|w| {
                let c = cluster_of(w).unwrap().to_string();
                (c, guard::replicas_of(w, kind, "web").unwrap())
            })
            .collect();
        v.sort();
        v
    }

    fn pairs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
        v.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    fn ready(names: &[&str]) -> Vec<Arc<Cluster>> {
        names.iter().map(|n| cluster(n, "True", SINCE)).collect()
    }

    #[test]
    fn a_dropped_cluster_keeps_its_work_until_the_others_run_the_replicas() {
        let actual = [
            Arc::new(work("east", 4, Some(4))),
            Arc::new(work("west", 4, Some(1))),
        ];
        let (works, outcome) = guard_works(
            &spec(&[("west", 4)]),
            &template(),
            None,
            &ready(&["east", "west"]),
            vec![work("west", 4, None)],
            &actual,
            &[],
            now(),
        );
        assert_eq!(written(&works), pairs(&[("east", 3), ("west", 4)]));
        let kept = works
            .iter()
            .find(|w| cluster_of(w) == Some("east"))
            .unwrap();
        assert_eq!(kept.metadata.labels, actual[0].metadata.labels);
        assert_eq!(kept.metadata.finalizers, actual[0].metadata.finalizers);
        assert!(kept.status.is_none() && kept.metadata.resource_version.is_none());
        let Outcome::Planned(plan) = outcome else {
            panic!("not planned")
        };
        assert_eq!(plan.held.len(), 1);
    }

    #[test]
    fn a_scheduled_cluster_with_nothing_rendered_still_counts() {
        // west's overrides failed: no Work rendered for it, but its share counts, so
        // east (no longer scheduled) is not released on a floor of zero
        let actual = [Arc::new(work("east", 4, Some(4)))];
        let (works, _) = guard_works(
            &spec(&[("west", 4)]),
            &template(),
            None,
            &ready(&["east", "west"]),
            vec![],
            &actual,
            &[],
            now(),
        );
        assert_eq!(written(&works), pairs(&[("east", 4)]));
    }

    /// `w` as the Work of a Gadget (example.com/v1) keeping its count at
    /// `/spec/workers/count` and its available count at `/status/readyWorkers`, with
    /// that interpretation carried.
    fn gadget(w: Work, i: &Interpretation) -> Work {
        let mut w = w;
        let m = &mut w.spec.workload.manifests[0].0;
        let n = m["spec"]["replicas"].clone();
        m["apiVersion"] = json!("example.com/v1");
        m["kind"] = json!("Gadget");
        m["spec"] = json!({"workers": {"count": n}});
        w.spec.interpretations = vec![i.clone()];
        if let Some(st) = w.status.as_mut() {
            let s = &mut st.manifest_statuses[0];
            s.identifier.kind = "Gadget".into();
            let a = s.status.as_ref().unwrap()["availableReplicas"].clone();
            s.status = Some(json!({"readyWorkers": a}));
        }
        w
    }

    #[test]
    fn a_custom_kind_moves_as_its_interpreter_counts() {
        let i = Interpretation {
            group: "example.com".into(),
            kind: "Gadget".into(),
            interpreter: "gadgets".into(),
            replicas_path: Some("/spec/workers/count".into()),
            available_path: Some("/status/readyWorkers".into()),
            ..Interpretation::default()
        };
        // what Works carry: no available count (the hub's guard alone reads it)
        let carried = Interpretation {
            available_path: None,
            ..i.clone()
        };
        let mut s = spec(&[("west", 4)]);
        s.resource.api_version = "example.com/v1".into();
        s.resource.kind = "Gadget".into();
        let t = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"workers": {"count": 4}}});
        let actual = [
            Arc::new(gadget(work("east", 4, Some(4)), &carried)),
            Arc::new(gadget(work("west", 4, Some(1)), &carried)),
        ];
        let run = |interpretation: Option<&Interpretation>| {
            let rendered = vec![gadget(work("west", 4, None), &carried)];
            let clusters = ready(&["east", "west"]);
            guard_works(
                &s,
                &t,
                interpretation,
                &clusters,
                rendered,
                &actual,
                &[],
                now(),
            )
        };
        // east keeps the 3 west does not run yet, written at the interpreter's path
        let (works, outcome) = run(Some(&i));
        assert_eq!(
            written_of(&works, "Gadget"),
            pairs(&[("east", 3), ("west", 4)])
        );
        let east = works
            .iter()
            .find(|w| cluster_of(w) == Some("east"))
            .unwrap();
        let m = &east.spec.workload.manifests[0].0;
        assert_eq!(m["spec"], json!({"workers": {"count": 3}}), "{m}");
        assert!(matches!(outcome, Outcome::Planned(p) if p.held.len() == 1));
        // an interpreter without an available count: the move is not guarded
        let uncounted = Interpretation {
            available_path: None,
            ..i.clone()
        };
        let (works, outcome) = run(Some(&uncounted));
        assert_eq!(written_of(&works, "Gadget"), pairs(&[("west", 4)]));
        assert!(matches!(outcome, Outcome::Unguarded));
        // a scheduled cluster with nothing rendered counts with the template's count,
        // read at the interpreter's path (Duplicated: no per-cluster count)
        let mut duplicated = s.clone();
        duplicated.clusters[0].replicas = None;
        let (works, _) = guard_works(
            &duplicated,
            &t,
            Some(&i),
            &ready(&["east", "west"]),
            vec![],
            &actual[..1],
            &[],
            now(),
        );
        assert_eq!(written_of(&works, "Gadget"), pairs(&[("east", 4)]));
    }

    #[test]
    fn what_the_guard_leaves_alone() {
        let actual = [
            Arc::new(work("east", 4, Some(4))),
            Arc::new(work("west", 4, Some(0))),
        ];
        let rendered = || vec![work("west", 4, None)];
        let run =
            |spec: &BindingSpec, template: &Value, clusters: &[Arc<Cluster>], kept: &[String]| {
                let (works, outcome) = guard_works(
                    spec,
                    template,
                    None,
                    clusters,
                    rendered(),
                    &actual,
                    kept,
                    now(),
                );
                (written(&works), outcome)
            };
        let only_west = pairs(&[("west", 4)]);
        // a kind without available replicas
        let mut s = spec(&[("west", 4)]);
        s.resource.kind = "DaemonSet".into();
        let (w, o) = run(&s, &template(), &ready(&["east", "west"]), &[]);
        assert_eq!(
            (w, matches!(o, Outcome::Unguarded)),
            (only_west.clone(), true)
        );
        // retain-replicas: the members' counts (an HPA's) win
        let mut t = template();
        t["metadata"]["labels"] = json!({labels::RETAIN_REPLICAS: "true"});
        let (w, o) = run(&spec(&[("west", 4)]), &t, &ready(&["east", "west"]), &[]);
        assert_eq!(
            (w, matches!(o, Outcome::Unguarded)),
            (only_west.clone(), true)
        );
        // a copy failover keeps or evicted is failover's
        let (w, _) = run(
            &spec(&[("west", 4)]),
            &template(),
            &ready(&["east", "west"]),
            &["east".to_string()],
        );
        assert_eq!(w, only_west);
        let mut s = spec(&[("west", 4)]);
        s.evictions = vec![
            serde_json::from_value(json!({"cluster": "east",
            "reason": "r", "evictedAt": SINCE}))
            .unwrap(),
        ];
        let (w, _) = run(&s, &template(), &ready(&["east", "west"]), &[]);
        assert_eq!(w, only_west);
        // not Ready, no failover: kept as it is until Ready again
        let clusters = [
            cluster("east", "False", SINCE),
            cluster("west", "True", SINCE),
        ];
        let (w, _) = run(&spec(&[("west", 4)]), &template(), &clusters, &[]);
        assert_eq!(w, pairs(&[("east", 4), ("west", 4)]));
        // not Ready past failover's toleration: failover's to purge
        let mut s = spec(&[("west", 4)]);
        s.failover =
            Some(serde_json::from_value(json!({"cluster": {"purgeMode": "Directly"}})).unwrap());
        let (w, _) = run(&s, &template(), &clusters, &[]);
        assert_eq!(w, only_west);
        // a bad maxUnavailable: written at once, and said
        let mut s = spec(&[("west", 4)]);
        s.redistribution = Some(serde_json::from_value(json!({"maxUnavailable": "lots"})).unwrap());
        let (w, o) = run(&s, &template(), &ready(&["east", "west"]), &[]);
        assert_eq!(w, only_west);
        assert!(matches!(o, Outcome::Invalid(e) if e.contains("\"lots\"")));
    }
}
