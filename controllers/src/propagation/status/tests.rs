//! Table tests of the binding status: Works and Clusters → aggregatedStatus and
//! FullyApplied (H.52), and the template status through the Works (H.53).

use super::*;
use causeway_crds::federation::binding::{SchedulingReason, TargetCluster};
use serde::de::DeserializeOwned;
use serde_json::json;

fn obj<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture parses"))
}

fn t(s: i64) -> Time {
    Time(jiff::Timestamp::from_second(s).unwrap())
}

fn cluster(name: &str, ready: &str) -> Arc<Cluster> {
    obj(
        json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    )
}

fn spec(clusters: &[&str]) -> BindingSpec {
    BindingSpec {
        resource: causeway_crds::federation::binding::ResourceReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            ..Default::default()
        },
        clusters: clusters
            .iter()
            .map(|n| TargetCluster {
                name: n.to_string(),
                replicas: None,
            })
            .collect(),
        ..BindingSpec::default()
    }
}

/// The Work of `cluster` at `generation`, with an Applied condition
/// (`status`, observed generation, message) and manifest statuses (health, status).
fn work(
    cluster: &str,
    generation: i64,
    applied: Option<(&str, i64, &str)>,
    manifests: &[ManifestFixture],
) -> Arc<Work> {
    let conditions: Vec<Value> = applied
        .into_iter()
        .map(|(s, observed, m)| {
            json!({"type": "Applied", "status": s, "observedGeneration": observed,
                "reason": if s == "True" { "AppliedSuccessful" } else { "AppliedFailed" },
                "message": m, "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    let statuses: Vec<Value> = manifests
        .iter()
        .enumerate()
        .map(|(i, (h, s))| {
            json!({"identifier": {"ordinal": i, "version": "v1", "kind": "Deployment", "name": "web"},
                "health": h, "status": s, "applied": true, "generation": 1, "templateGeneration": 1})
        })
        .collect();
    obj(json!({
        "metadata": {"name": "demo.web-deployment", "namespace": format!("causeway-es-{cluster}"),
            "generation": generation, "labels": {labels::CLUSTER: cluster}},
        "spec": {},
        "status": {"conditions": conditions, "manifestStatuses": statuses},
    }))
}

/// A manifest status fixture: health and status.
type ManifestFixture = (Option<&'static str>, Value);

/// A case of a cluster not applied: what, its Work, its Cluster, the override
/// failures, the message expected.
type NotApplied<'a> = (
    &'static str,
    Option<Arc<Work>>,
    Option<&'a Arc<Cluster>>,
    &'a [(String, String)],
    &'static str,
);

fn healthy() -> (Option<&'static str>, Value) {
    (
        Some("Healthy"),
        json!({"observedGeneration": 1, "readyReplicas": 2}),
    )
}

fn fully(st: &BindingStatus) -> &Condition {
    st.conditions
        .iter()
        .find(|c| c.type_ == conditions::FULLY_APPLIED)
        .expect("FullyApplied")
}

#[test]
fn applied_everywhere_is_fully_applied() {
    let works = [
        work("east", 2, Some(("True", 2, "")), &[healthy()]),
        work(
            "west",
            2,
            Some(("True", 3, "applied 1 manifest")),
            &[healthy()],
        ),
    ];
    let clusters = [cluster("east", "True"), cluster("west", "True")];
    let st = binding_status(
        &spec(&["east", "west"]),
        &works,
        &clusters,
        &[],
        None,
        &t(5),
    );
    let c = fully(&st);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "FullyAppliedSuccess")
    );
    assert_eq!(c.last_transition_time, t(5));
    assert_eq!(
        st.aggregated_status,
        [
            AggregatedStatusItem {
                cluster_name: "east".into(),
                status: Some(json!({"observedGeneration": 1, "readyReplicas": 2})),
                applied: true,
                applied_message: None,
                health: Some(ResourceHealth::Healthy),
            },
            AggregatedStatusItem {
                cluster_name: "west".into(),
                status: Some(json!({"observedGeneration": 1, "readyReplicas": 2})),
                applied: true,
                applied_message: Some("applied 1 manifest".into()),
                health: Some(ResourceHealth::Healthy),
            },
        ]
    );
}

#[test]
fn each_reason_a_cluster_is_not_applied() {
    let ready = cluster("c", "True");
    let not_ready = cluster("c", "False");
    let failed = [(
        "c".to_string(),
        "OverridePolicy demo/x rule 0, plaintext[0]: bad".to_string(),
    )];
    let cases: [NotApplied; 7] = [
        (
            "the applier failed",
            Some(work(
                "c",
                2,
                Some(("False", 2, "Deployment demo/web: ResourceConflict: exists")),
                &[],
            )),
            Some(&ready),
            &[],
            "Deployment demo/web: ResourceConflict: exists",
        ),
        (
            "applied, but an older generation of the Work",
            Some(work("c", 3, Some(("True", 2, "done")), &[])),
            Some(&ready),
            &[],
            "waiting for the work applier to apply generation 3 of the Work",
        ),
        (
            "no Work yet",
            None,
            Some(&ready),
            &[],
            "waiting for the work applier",
        ),
        (
            "no Applied condition yet",
            Some(work("c", 1, None, &[])),
            Some(&ready),
            &[],
            "waiting for the work applier",
        ),
        (
            "the cluster is not Ready",
            Some(work("c", 1, None, &[])),
            Some(&not_ready),
            &[],
            "cluster c is not Ready (ClusterNotReady)",
        ),
        (
            "the Cluster is gone",
            None,
            None,
            &[],
            "cluster c is not registered (no Cluster object)",
        ),
        (
            "the overrides failed (the Work holds older manifests)",
            Some(work("c", 1, Some(("True", 1, "")), &[])),
            Some(&ready),
            &failed,
            "ApplyOverridesFailed: OverridePolicy demo/x rule 0, plaintext[0]: bad",
        ),
    ];
    for (what, w, c, failed, want) in cases {
        let works: Vec<Arc<Work>> = w.into_iter().collect();
        let clusters: Vec<Arc<Cluster>> = c.cloned().into_iter().collect();
        let st = binding_status(&spec(&["c"]), &works, &clusters, failed, None, &t(5));
        let item = &st.aggregated_status[0];
        assert!(!item.applied, "{what}");
        assert_eq!(item.applied_message.as_deref(), Some(want), "{what}");
        let c = fully(&st);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "FullyAppliedFailed"),
            "{what}"
        );
        assert_eq!(
            c.message,
            format!("not applied in 1 of 1 cluster(s): c ({want})"),
            "{what}"
        );
    }
}

/// E.38: a cluster that is not Ready (a Pull member whose agent stopped renewing its
/// lease: Unknown; a failing probe: False) or no longer registered reports nothing
/// fresh, and nothing rewrites its Work's status: its last report (applied, Healthy) is
/// not shown as current. It is not applied (ClusterNotReady), its health is Unknown and
/// FullyApplied is False; the other clusters are as they report.
#[test]
fn a_cluster_not_ready_is_not_shown_as_applied_from_its_last_report() {
    let works = [
        work("east", 1, Some(("True", 1, "")), &[healthy()]),
        work("west", 1, Some(("True", 1, "")), &[healthy()]),
    ];
    for ready in ["Unknown", "False", "gone"] {
        let mut clusters = vec![cluster("west", "True")];
        if ready != "gone" {
            clusters.push(cluster("east", ready));
        }
        let st = binding_status(
            &spec(&["east", "west"]),
            &works,
            &clusters,
            &[],
            None,
            &t(5),
        );
        let east = &st.aggregated_status[0];
        assert!(!east.applied, "{ready}");
        assert_eq!(east.health, Some(ResourceHealth::Unknown), "{ready}");
        let want = if ready == "gone" {
            "cluster east is not registered (no Cluster object)"
        } else {
            "cluster east is not Ready (ClusterNotReady)"
        };
        assert_eq!(east.applied_message.as_deref(), Some(want), "{ready}");
        let west = &st.aggregated_status[1];
        assert!(west.applied, "{ready}");
        assert_eq!(west.health, Some(ResourceHealth::Healthy), "{ready}");
        let c = fully(&st);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "FullyAppliedFailed"),
            "{ready}"
        );
        assert_eq!(
            c.message,
            format!("not applied in 1 of 2 cluster(s): east ({want})"),
            "{ready}"
        );
    }
}

#[test]
fn the_message_names_every_cluster_not_applied() {
    let works = [work("a", 1, Some(("True", 1, "")), &[])];
    let clusters = ["a", "b", "c"].map(|n| cluster(n, "True"));
    let st = binding_status(&spec(&["a", "b", "c"]), &works, &clusters, &[], None, &t(5));
    assert_eq!(
        fully(&st).message,
        "not applied in 2 of 3 cluster(s): b (waiting for the work applier); c (waiting for the work applier)"
    );
    let st = binding_status(&spec(&[]), &[], &clusters, &[], None, &t(5));
    assert_eq!(fully(&st).status, "False");
    assert_eq!(fully(&st).message, "scheduled to no cluster");
}

#[test]
fn health_is_the_worst_of_the_manifests() {
    let h = |s: Option<&'static str>| (s, json!({}));
    let cases: [(&[ManifestFixture], Option<ResourceHealth>); 5] = [
        (&[], None),
        (
            &[h(Some("Healthy")), h(Some("Healthy"))],
            Some(ResourceHealth::Healthy),
        ),
        (
            &[h(Some("Healthy")), h(Some("Unknown"))],
            Some(ResourceHealth::Unknown),
        ),
        (
            &[h(Some("Healthy")), h(None)],
            Some(ResourceHealth::Unknown),
        ),
        (
            &[h(Some("Unknown")), h(Some("Unhealthy"))],
            Some(ResourceHealth::Unhealthy),
        ),
    ];
    for (manifests, want) in cases {
        let works = [work("a", 1, Some(("True", 1, "")), manifests)];
        let st = binding_status(
            &spec(&["a"]),
            &works,
            &[cluster("a", "True")],
            &[],
            None,
            &t(5),
        );
        assert_eq!(st.aggregated_status[0].health, want, "{manifests:?}");
    }
}

#[test]
fn scheduled_and_reasons_are_kept_and_the_transition_time_only_moves_on_change() {
    let scheduled = Condition {
        type_: conditions::SCHEDULED.into(),
        status: "True".into(),
        reason: conditions::REASON_SUCCESS.into(),
        message: "scheduled".into(),
        observed_generation: None,
        last_transition_time: t(1),
    };
    let previous = BindingStatus {
        conditions: vec![scheduled.clone()],
        aggregated_status: Vec::new(),
        scheduling_reasons: vec![SchedulingReason {
            cluster: "west".into(),
            reason: "not in clusterNames [east]".into(),
        }],
        rollout: None,
        redistribution: None,
        last_scheduled_time: Some(t(5)),
    };
    let clusters = [cluster("east", "True")];
    let pending = binding_status(
        &spec(&["east"]),
        &[],
        &clusters,
        &[],
        Some(&previous),
        &t(10),
    );
    assert_eq!(pending.conditions[0], scheduled);
    assert_eq!(pending.scheduling_reasons, previous.scheduling_reasons);
    // what the detector recorded of a reschedule stays (C.23)
    assert_eq!(pending.last_scheduled_time, Some(t(5)));
    assert_eq!(fully(&pending).last_transition_time, t(10));
    // still not applied later: the time stays
    let later = binding_status(
        &spec(&["east"]),
        &[],
        &clusters,
        &[],
        Some(&pending),
        &t(20),
    );
    assert_eq!(fully(&later).last_transition_time, t(10));
    assert_eq!(later.conditions.len(), 2);
    // applied: it moves
    let works = [work("east", 1, Some(("True", 1, "")), &[])];
    let done = binding_status(
        &spec(&["east"]),
        &works,
        &clusters,
        &[],
        Some(&later),
        &t(30),
    );
    assert_eq!(fully(&done).status, "True");
    assert_eq!(fully(&done).last_transition_time, t(30));
}

#[test]
fn template_status_aggregates_the_first_manifest_of_each_work() {
    let deploy = |n: i64| {
        (
            Some("Healthy"),
            json!({"observedGeneration": 1, "replicas": n, "readyReplicas": n}),
        )
    };
    let works = [
        work("a", 1, Some(("True", 1, "")), &[deploy(2), deploy(100)]),
        work("b", 1, Some(("True", 1, "")), &[deploy(3)]),
        // a Work not reported yet adds nothing
        work("c", 1, None, &[]),
    ];
    let mut spec = spec(&["a", "b"]);
    let none = BTreeMap::new();
    let ready = ["a", "b", "c"].map(|c| cluster(c, "True"));
    let got = template_status(&[], 1, None, &spec, &works, &none, &ready).unwrap();
    assert_eq!(got["replicas"], 5);
    assert_eq!(got["readyReplicas"], 5);
    assert_eq!(got["observedGeneration"], 1);
    spec.resource.kind = "ConfigMap".into();
    spec.resource.api_version = "v1".into();
    assert_eq!(
        template_status(&[], 1, None, &spec, &works, &none, &ready),
        None
    );
    // an interpreted kind sums what its interpreter names
    spec.resource.kind = "Gadget".into();
    spec.resource.api_version = "example.com/v1".into();
    let got = template_status(
        &["readyReplicas".into()],
        1,
        None,
        &spec,
        &works,
        &none,
        &ready,
    );
    assert_eq!(got.unwrap()["readyReplicas"], 5);
}

/// E.38, H.53: a scheduled cluster that is not Ready (or no longer registered) keeps
/// its last report in its Work, which says nothing about what runs there now: the
/// template's counts leave it out, and observedGeneration does not move to the new
/// generation while it is out (what Argo CD's health reads as rolled out).
#[test]
fn a_cluster_not_ready_is_left_out_of_the_template_status() {
    let deploy = |n: i64, generation: i64| {
        (
            Some("Healthy"),
            json!({"observedGeneration": generation, "replicas": n, "readyReplicas": n,
                "updatedReplicas": n, "availableReplicas": n}),
        )
    };
    let spec = spec(&["east", "west"]);
    let none = BTreeMap::new();
    // what the template showed before its generation 1 was rolled out everywhere
    let previous = json!({"observedGeneration": 0, "replicas": 5, "readyReplicas": 5});
    for ready in ["True", "Unknown", "False", "gone"] {
        let mut clusters = vec![cluster("west", "True")];
        if ready != "gone" {
            clusters.push(cluster("east", ready));
        }
        // (both members report that they run template generation 1)
        let works = [
            work("east", 1, Some(("True", 1, "")), &[deploy(3, 1)]),
            work("west", 1, Some(("True", 1, "")), &[deploy(2, 1)]),
        ];
        let got =
            template_status(&[], 1, Some(&previous), &spec, &works, &none, &clusters).unwrap();
        let counted = if ready == "True" { 5 } else { 2 };
        for k in [
            "replicas",
            "readyReplicas",
            "updatedReplicas",
            "availableReplicas",
        ] {
            assert_eq!(got[k], counted, "{ready}: {k}");
        }
        // generation 1 is observed only once every scheduled cluster says so, which a
        // cluster that is not Ready does not (its report is an old one)
        let observed = if ready == "True" { 1 } else { 0 };
        assert_eq!(got["observedGeneration"], observed, "{ready}");
    }
}

/// A copy still running where the workload moves away from counts as old replicas,
/// but only while the move keeps it (a hold, a graceful purge), its cluster is Ready
/// and its Work is not being deleted; a held cluster still scheduled counts as updated
/// up to its share.
#[test]
fn a_moving_copy_counts_while_the_move_keeps_it() {
    let deploy = |n: i64| {
        (
            Some("Healthy"),
            json!({"observedGeneration": 1, "replicas": n, "readyReplicas": n,
                "updatedReplicas": n, "availableReplicas": n, "unavailableReplicas": 0}),
        )
    };
    let applied = Some(("True", 1, ""));
    let mut deleting = (*work("north", 1, applied, &[deploy(9)])).clone();
    deleting.metadata.deletion_timestamp = Some(t(5));
    let works = [
        work("west", 1, applied, &[deploy(4)]),
        work("east", 1, applied, &[deploy(3)]),
        Arc::new(deleting),
        // not scheduled and not moving: a copy parked by purgeMode Never
        work("south", 1, applied, &[deploy(7)]),
    ];
    let spec = spec(&["west"]);
    let run = |moving: &[(&str, i64)], east_ready: &str| {
        let clusters = ["west", "north", "south"]
            .map(|c| cluster(c, "True"))
            .into_iter()
            .chain([cluster("east", east_ready)])
            .collect::<Vec<_>>();
        let moving: BTreeMap<String, i64> =
            moving.iter().map(|(c, s)| (c.to_string(), *s)).collect();
        let got = template_status(&[], 1, None, &spec, &works, &moving, &clusters).unwrap();
        let n = |k: &str| got[k].as_i64().unwrap();
        (
            n("replicas"),
            n("updatedReplicas"),
            n("availableReplicas"),
            n("readyReplicas"),
        )
    };
    assert_eq!(run(&[], "True"), (4, 4, 4, 4), "nothing moving");
    assert_eq!(run(&[("east", 0)], "True"), (7, 4, 7, 7), "east held");
    assert_eq!(run(&[("east", 0)], "False"), (4, 4, 4, 4), "east not Ready");
    assert_eq!(
        run(&[("north", 0)], "True"),
        (4, 4, 4, 4),
        "north's Work deleted"
    );
    // west is held above its share of 1
    assert_eq!(
        run(&[("west", 1)], "True"),
        (4, 1, 4, 4),
        "west held above its share"
    );
}

/// R.3, R.5: the RolledOut condition follows the rollout (its transition time only when
/// its status changes), says when the template has no generation to order by, and goes
/// when the binding no longer has a rollout.
/// A generation the hub cannot render (a broken ResourceInterpreter) makes RolledOut
/// say so; the generation already rolled out keeps its condition.
#[test]
fn a_blocked_render_says_why_the_new_generation_does_not_roll_out() {
    use causeway_crds::federation::rollout::Progress;
    let mut st = BindingStatus::default();
    let done = Progress::Complete {
        generation: 4,
        waves: 2,
    };
    with_rollout(&mut st, Some(&done), None, &t(1));
    let rolled = |st: &BindingStatus| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::ROLLED_OUT)
            .cloned()
            .unwrap();
        (c.status, c.reason, c.observed_generation, c.message)
    };
    let before = rolled(&st);
    rollout_blocked(
        &mut st,
        "InterpreterInvalid",
        "fix the rule",
        Some(4),
        &t(2),
    );
    assert_eq!(rolled(&st), before, "generation 4 ran everywhere");
    rollout_blocked(
        &mut st,
        "InterpreterInvalid",
        "fix the rule",
        Some(5),
        &t(3),
    );
    assert_eq!(
        rolled(&st),
        (
            "False".to_string(),
            "InterpreterInvalid".to_string(),
            Some(5),
            "template generation 5 is not rolled out: fix the rule; the clusters keep what they run".to_string()
        )
    );
}

#[test]
fn the_rolled_out_condition_follows_the_rollout() {
    use causeway_crds::federation::rollout::Progress;
    let mut st = BindingStatus::default();
    let waiting = Progress::Waiting {
        generation: 2,
        wave: 1,
        place: 1,
        waves: 2,
        name: "canary".into(),
        pending: vec![("east".into(), "Deployment web is unhealthy".into())],
        held: vec!["west".into()],
    };
    let rolled = |st: &BindingStatus| {
        st.conditions
            .iter()
            .find(|c| c.type_ == conditions::ROLLED_OUT)
            .cloned()
    };
    with_rollout(&mut st, Some(&waiting), None, &t(1));
    let c = rolled(&st).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.observed_generation),
        ("False", conditions::REASON_WAVE_IN_PROGRESS, Some(2))
    );
    assert_eq!(
        c.message,
        "wave 1 of 2 (canary) is rolling out template generation 2, waiting for east: Deployment web is unhealthy; held at what they run until then: west"
    );
    // still waiting later: the transition time stays
    with_rollout(&mut st, Some(&waiting), None, &t(5));
    assert_eq!(rolled(&st).unwrap().last_transition_time, t(1));
    let done = Progress::Complete {
        generation: 2,
        waves: 2,
    };
    with_rollout(&mut st, Some(&done), None, &t(9));
    let c = rolled(&st).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.last_transition_time),
        ("True", conditions::REASON_ROLLOUT_COMPLETE, t(9))
    );
    let unordered = Progress::Unordered {
        template: "ConfigMap demo/settings".into(),
    };
    with_rollout(&mut st, Some(&unordered), None, &t(10));
    let c = rolled(&st).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.observed_generation),
        ("Unknown", conditions::REASON_NO_GENERATION, None)
    );
    assert_eq!(
        c.message,
        "ConfigMap demo/settings has no metadata.generation (its kind keeps none), so spec.rollout cannot order its changes: every cluster gets them at once"
    );
    with_rollout(&mut st, None, None, &t(11));
    assert_eq!(rolled(&st), None);
}

/// Past `progressDeadlineSeconds` on one wave, `RolledOut` says so (the rollout keeps
/// waiting); the clock is per wave and per generation, kept in `status.rollout`.
#[test]
fn a_wave_past_its_progress_deadline_is_reported_stuck() {
    use causeway_crds::federation::rollout::{Progress, Rollout};
    let spec = Rollout {
        waves: vec![],
        progress_deadline_seconds: Some(60),
    };
    let waiting = |generation: i64, wave: usize| Progress::Waiting {
        generation,
        wave,
        place: wave,
        waves: 2,
        name: format!("wave-{wave}"),
        pending: vec![("east".into(), "Deployment web is unhealthy".into())],
        held: vec![],
    };
    let rolled = |st: &BindingStatus| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::ROLLED_OUT)
            .unwrap();
        (c.reason.clone(), c.message.clone())
    };
    let at = |s: i64| t(s).0;
    let mut st = BindingStatus::default();
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(2, 1)), Some(&spec), &t(0)),
        Some(at(60))
    );
    assert_eq!(rolled(&st).0, conditions::REASON_WAVE_IN_PROGRESS);
    assert_eq!(
        st.rollout
            .as_ref()
            .map(|r| (r.generation, r.wave, r.started_at.clone())),
        Some((2, 1, t(0)))
    );
    // the same wave later: the clock runs on; without a deadline nothing is due
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(2, 1)), Some(&spec), &t(59)),
        Some(at(60))
    );
    assert_eq!(rolled(&st).0, conditions::REASON_WAVE_IN_PROGRESS);
    assert_eq!(
        with_rollout(&mut st.clone(), Some(&waiting(2, 1)), None, &t(59)),
        None
    );
    // past it: stuck, and what it waits for
    with_rollout(&mut st, Some(&waiting(2, 1)), Some(&spec), &t(61));
    let (reason, message) = rolled(&st);
    assert_eq!(reason, conditions::REASON_PROGRESS_DEADLINE_EXCEEDED);
    assert_eq!(
        message,
        format!(
            "the progress deadline (60s) passed at {}: wave 1 of 2 (wave-1) is rolling out template generation 2, waiting for east: Deployment web is unhealthy; nothing is rolled back: fix what the wave waits for, or apply the previous template",
            at(60)
        )
    );
    // the next wave, then a new generation: each starts the clock again
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(2, 2)), Some(&spec), &t(70)),
        Some(at(130))
    );
    assert_eq!(rolled(&st).0, conditions::REASON_WAVE_IN_PROGRESS);
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(3, 2)), Some(&spec), &t(80)),
        Some(at(140))
    );
    // an earlier wave falling back (a canary Pod that blips) keeps the clock
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(3, 1)), Some(&spec), &t(85)),
        Some(at(140))
    );
    // done: no deadline from then on, even when a cluster falls back later
    let done = Progress::Complete {
        generation: 3,
        waves: 2,
    };
    assert_eq!(
        with_rollout(&mut st, Some(&done), Some(&spec), &t(90)),
        None
    );
    assert!(st.rollout.as_ref().is_some_and(|r| r.completed));
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(3, 1)), Some(&spec), &t(500)),
        None
    );
    assert_eq!(rolled(&st).0, conditions::REASON_WAVE_IN_PROGRESS);
    // a new generation starts over
    assert_eq!(
        with_rollout(&mut st, Some(&waiting(4, 1)), Some(&spec), &t(600)),
        Some(at(660))
    );
    // without an order, nothing is kept
    let unordered = Progress::Unordered {
        template: "ConfigMap demo/x".into(),
    };
    with_rollout(&mut st, Some(&unordered), Some(&spec), &t(700));
    assert_eq!(st.rollout, None);
}

#[test]
fn a_hold_past_its_progress_deadline_is_reported_stuck_and_unstuck_by_a_move() {
    use causeway_crds::federation::redistribution::{Copy, Observed, Redistribution, plan};
    // east (no longer scheduled) keeps `east` while west has `west` of its 4 available
    let held = |east: i64, west: i64| {
        let copy = |cluster: &str, share, current, available| Copy {
            cluster: cluster.into(),
            share,
            current: Some(current),
            observed: Some(Observed { available, free: 0 }),
        };
        plan(&[copy("east", 0, east, east), copy("west", 4, 4, west)], 0)
    };
    let within = Redistribution {
        max_unavailable: None,
        progress_deadline_seconds: Some(60),
    };
    let redistributed = |st: &BindingStatus| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::REDISTRIBUTED)
            .unwrap();
        (
            c.reason.clone(),
            c.message.clone(),
            c.last_transition_time.clone(),
        )
    };
    let mut st = BindingStatus::default();
    let due = with_redistribution(&mut st, Some(Ok(&held(4, 0))), Some(&within), &t(1000));
    assert_eq!(due, Some(t(1060).0));
    assert_eq!(redistributed(&st).0, conditions::REASON_HOLDING_REPLICAS);
    // nothing moved for 60 s: stuck, said so, still held (the transition time stays)
    let due = with_redistribution(&mut st, Some(Ok(&held(4, 0))), Some(&within), &t(1060));
    assert_eq!(due, Some(t(1060).0));
    let (reason, message, since) = redistributed(&st);
    assert_eq!(reason, conditions::REASON_PROGRESS_DEADLINE_EXCEEDED);
    assert!(
        message.starts_with("east keeps 4 (no longer scheduled there) while west has 0 of its 4 available;")
            && message.contains("; the progress deadline (60s without a replica moving) passed at 1970-01-01T00:17:40Z: nothing is forced"),
        "{message}"
    );
    // explain still finds the held cluster in it
    assert!(causeway_crds::federation::redistribution::holds(
        &message, "east"
    ));
    // the clock is kept from one round's status to the next (binding_status)
    let carried = binding_status(&spec(&["west"]), &[], &[], &[], Some(&st), &t(1061));
    assert_eq!(carried.redistribution, st.redistribution);
    assert_eq!(st.redistribution.as_ref().unwrap().since, t(1000));
    assert_eq!(since, t(1000));
    // a replica moves: holding again, with a new deadline
    let due = with_redistribution(&mut st, Some(Ok(&held(3, 1))), Some(&within), &t(1100));
    assert_eq!(due, Some(t(1160).0));
    assert_eq!(redistributed(&st).0, conditions::REASON_HOLDING_REPLICAS);
    // no deadline without progressDeadlineSeconds
    let mut other = BindingStatus::default();
    let due = with_redistribution(&mut other, Some(Ok(&held(4, 0))), None, &t(1000));
    assert_eq!(due, None);
    assert!(other.redistribution.is_some());
    // done: True, and the hold's clock goes
    let due = with_redistribution(&mut st, Some(Ok(&held(0, 4))), Some(&within), &t(1200));
    assert_eq!(due, None);
    assert_eq!(redistributed(&st).0, conditions::REASON_SHARES_APPLIED);
    assert_eq!(st.redistribution, None);
}
