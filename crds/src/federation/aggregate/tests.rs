//! Table tests for the template status aggregation (federation.md §8 H.53).

use serde_json::{Value, json};

use super::*;

/// A member that runs template generation `tg`, with object generation `g` and `status`.
fn member(g: i64, tg: i64, status: Value) -> ManifestStatus {
    ManifestStatus {
        status: Some(status),
        generation: Some(g),
        template_generation: Some(tg),
        ..Default::default()
    }
}

fn deploy(observed: i64, n: i64) -> Value {
    json!({"observedGeneration": observed, "replicas": n, "readyReplicas": n,
        "updatedReplicas": n, "availableReplicas": n - 1, "unavailableReplicas": 1})
}

/// The group of the built-in `kind`.
fn group(kind: &str) -> &'static str {
    if kind == "Job" { "batch" } else { "apps" }
}

/// Each member's report, scheduled and not moving.
fn scheduled(members: &[ManifestStatus]) -> Vec<Reported<'_>> {
    members
        .iter()
        .map(|status| Reported {
            status,
            scheduled: true,
            share: None,
        })
        .collect()
}

fn run(
    kind: &str,
    tg: i64,
    previous: Option<Value>,
    members: &[ManifestStatus],
    expected: usize,
) -> Option<Value> {
    let refs = scheduled(members);
    template_status(
        group(kind),
        kind,
        &[],
        tg,
        previous.as_ref(),
        &refs,
        expected,
    )
}

#[test]
fn deployment_counts_are_summed() {
    let got = run(
        "Deployment",
        3,
        None,
        &[member(5, 3, deploy(5, 2)), member(1, 3, deploy(1, 3))],
        2,
    );
    assert_eq!(
        got,
        Some(
            json!({"observedGeneration": 3, "replicas": 5, "readyReplicas": 5,
            "updatedReplicas": 5, "availableReplicas": 3, "unavailableReplicas": 2})
        )
    );
}

#[test]
fn observed_generation_waits_for_every_member() {
    let previous = Some(json!({"observedGeneration": 2, "replicas": 9}));
    let ok = || member(4, 3, deploy(4, 1));
    let cases: [(&str, Vec<ManifestStatus>, usize, Option<i64>); 7] = [
        ("all current", vec![ok(), ok()], 2, Some(3)),
        ("a cluster has not reported", vec![ok()], 2, Some(2)),
        (
            "a member's controller has not observed its generation",
            vec![ok(), member(5, 3, deploy(4, 1))],
            2,
            Some(2),
        ),
        (
            "a member runs an older template",
            vec![ok(), member(4, 2, deploy(4, 1))],
            2,
            Some(2),
        ),
        (
            "a member without a status",
            vec![
                ok(),
                ManifestStatus {
                    status: None,
                    ..member(4, 3, json!({}))
                },
            ],
            2,
            Some(2),
        ),
        (
            "a member whose generation is unknown",
            vec![
                ok(),
                ManifestStatus {
                    generation: None,
                    ..ok()
                },
            ],
            2,
            Some(2),
        ),
        ("no cluster scheduled", vec![], 0, Some(3)),
    ];
    for (what, members, expected, want) in cases {
        let got = run("Deployment", 3, previous.clone(), &members, expected).unwrap();
        assert_eq!(
            got.get("observedGeneration").and_then(Value::as_i64),
            want,
            "{what}"
        );
    }
    // no previous status: the field stays unset until the members catch up
    let got = run("Deployment", 3, None, &[ok()], 2).unwrap();
    assert_eq!(got.get("observedGeneration"), None);
}

#[test]
fn zeros_are_written_so_stale_counts_go() {
    let got = run(
        "Deployment",
        1,
        None,
        &[member(1, 1, json!({"observedGeneration": 1}))],
        1,
    )
    .unwrap();
    assert_eq!(got["readyReplicas"], 0);
    assert_eq!(got["unavailableReplicas"], 0);
}

#[test]
fn statefulset_and_daemonset_sum_their_counters() {
    let sts = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "currentReplicas": 2,
        "updatedReplicas": 1, "availableReplicas": 2, "currentRevision": "r1"});
    let got = run(
        "StatefulSet",
        7,
        None,
        &[member(1, 7, sts.clone()), member(1, 7, sts)],
        2,
    );
    assert_eq!(
        got,
        Some(
            json!({"observedGeneration": 7, "replicas": 4, "readyReplicas": 4, "currentReplicas": 4,
            "updatedReplicas": 2, "availableReplicas": 4})
        )
    );
    let ds = |n: i64| {
        json!({"observedGeneration": 2, "currentNumberScheduled": n, "numberMisscheduled": 0,
            "desiredNumberScheduled": n, "numberReady": n, "updatedNumberScheduled": n,
            "numberAvailable": n, "numberUnavailable": 1})
    };
    let got = run(
        "DaemonSet",
        4,
        None,
        &[member(2, 4, ds(3)), member(2, 4, ds(5))],
        2,
    );
    assert_eq!(
        got,
        Some(
            json!({"observedGeneration": 4, "currentNumberScheduled": 8, "numberMisscheduled": 0,
            "desiredNumberScheduled": 8, "numberReady": 8, "updatedNumberScheduled": 8,
            "numberAvailable": 8, "numberUnavailable": 2})
        )
    );
}

#[test]
fn other_kinds_are_left_alone() {
    for kind in ["Service", "ConfigMap", "Pod", "CronJob", "ReplicaSet"] {
        assert_eq!(
            run(kind, 1, None, &[member(1, 1, json!({"replicas": 1}))], 1),
            None,
            "{kind}"
        );
    }
}

fn job(
    active: i64,
    succeeded: i64,
    failed: i64,
    start: &str,
    finished: Option<(&str, &str)>,
) -> Value {
    let mut s =
        json!({"active": active, "succeeded": succeeded, "failed": failed, "startTime": start});
    if let Some((type_, at)) = finished {
        s["conditions"] = json!([{"type": type_, "status": "True", "lastTransitionTime": at,
            "reason": if type_ == "Failed" { "BackoffLimitExceeded" } else { "" },
            "message": if type_ == "Failed" { "Job has reached the specified backoff limit" } else { "" }}]);
        if type_ == "Complete" {
            s["completionTime"] = json!(at);
        }
    }
    s
}

const T1: &str = "2026-01-01T00:00:01Z";
const T2: &str = "2026-01-01T00:00:02Z";
const T3: &str = "2026-01-01T00:00:03Z";
const T4: &str = "2026-01-01T00:00:04Z";

#[test]
fn job_counts_start_time_and_running() {
    let got = run(
        "Job",
        1,
        None,
        &[
            member(1, 1, job(1, 2, 0, T2, None)),
            member(1, 1, job(2, 0, 1, T1, None)),
        ],
        2,
    );
    assert_eq!(
        got,
        Some(json!({"active": 3, "succeeded": 2, "failed": 1, "startTime": T1}))
    );
}

#[test]
fn job_completes_only_when_every_cluster_completed() {
    let done_a = member(1, 1, job(0, 1, 0, T1, Some(("Complete", T3))));
    let done_b = member(1, 1, job(0, 1, 0, T2, Some(("Complete", T4))));
    let running = member(1, 1, job(1, 0, 0, T2, None));
    let got = run("Job", 1, None, &[done_a.clone(), done_b.clone()], 2).unwrap();
    assert_eq!(got["completionTime"], T4, "the latest completion");
    assert_eq!(got["startTime"], T1, "the earliest start");
    assert_eq!(got["conditions"][0]["type"], "Complete");
    assert_eq!(got["conditions"][0]["lastTransitionTime"], T4);
    for (what, members, expected) in [
        ("one still running", vec![done_a.clone(), running], 2),
        ("a cluster has not reported", vec![done_a.clone()], 2),
    ] {
        let got = run("Job", 1, None, &members, expected).unwrap();
        assert_eq!(got.get("conditions"), None, "{what}");
        assert_eq!(got.get("completionTime"), None, "{what}");
    }
}

#[test]
fn job_fails_when_any_cluster_failed() {
    let failed = member(1, 1, job(0, 0, 4, T1, Some(("Failed", T2))));
    let running = member(1, 1, job(1, 0, 0, T1, None));
    let got = run("Job", 1, None, &[running, failed], 2).unwrap();
    let c = &got["conditions"];
    assert_eq!(c.as_array().map(Vec::len), Some(1), "{got}");
    assert_eq!(c[0]["type"], "Failed");
    assert_eq!(c[0]["status"], "True");
    assert_eq!(c[0]["lastTransitionTime"], T2);
    assert_eq!(
        c[0]["message"],
        "the Job failed in 1 of 2 member cluster(s) (BackoffLimitExceeded: Job has reached the specified backoff limit)"
    );
}

#[test]
fn a_finished_job_status_is_final() {
    let previous = json!({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]});
    let got = run(
        "Job",
        1,
        Some(previous.clone()),
        &[member(1, 1, job(1, 0, 0, T1, None))],
        1,
    );
    assert_eq!(got, Some(previous));
    // a previous status that is not finished is recomputed
    let previous = json!({"active": 9, "conditions": [{"type": "Suspended", "status": "True"}]});
    let got = run(
        "Job",
        1,
        Some(previous),
        &[member(1, 1, job(1, 0, 0, T1, None))],
        1,
    );
    assert_eq!(
        got,
        Some(json!({"active": 1, "succeeded": 0, "failed": 0, "startTime": T1}))
    );
}

#[test]
fn malformed_member_statuses_count_as_nothing() {
    let got = run(
        "Job",
        1,
        None,
        &[member(
            1,
            1,
            json!({"active": "two", "startTime": "yesterday", "conditions": "none"}),
        )],
        1,
    );
    assert_eq!(got, Some(json!({"active": 0, "succeeded": 0, "failed": 0})));
}

/// A cluster the workload moves away from counts what it runs beyond its share as old
/// replicas: never updated, and for a StatefulSet never ready (kubectl's rollout status
/// of a StatefulSet waits on `readyReplicas` alone).
#[test]
fn replicas_beyond_a_moving_clusters_share_are_old_ones() {
    let at = |status: Value, scheduled: bool, share: Option<i64>| {
        (member(2, 1, status), scheduled, share)
    };
    let deploy = |n: i64, ready: i64| {
        json!({"observedGeneration": 2, "replicas": n, "readyReplicas": ready,
            "updatedReplicas": n, "availableReplicas": ready, "unavailableReplicas": n - ready})
    };
    let sts = |n: i64, ready: i64| {
        json!({"observedGeneration": 2, "replicas": n, "readyReplicas": ready,
            "currentReplicas": n, "updatedReplicas": n, "availableReplicas": ready})
    };
    let ds =
        |n: i64| json!({"observedGeneration": 2, "desiredNumberScheduled": n, "numberReady": n});
    let cases = [
        (
            "Deployment: east no longer scheduled keeps 4, west starts its 4",
            "Deployment",
            vec![
                at(deploy(4, 0), true, None),
                at(deploy(4, 4), false, Some(0)),
            ],
            json!({"observedGeneration": 1, "replicas": 8, "readyReplicas": 4,
                "updatedReplicas": 4, "availableReplicas": 4, "unavailableReplicas": 4}),
        ),
        (
            "Deployment: east's share is 2 and it keeps 4, west has 1 of its 2",
            "Deployment",
            vec![
                at(deploy(2, 1), true, None),
                at(deploy(4, 4), true, Some(2)),
            ],
            json!({"observedGeneration": 1, "replicas": 6, "readyReplicas": 5,
                "updatedReplicas": 4, "availableReplicas": 5, "unavailableReplicas": 1}),
        ),
        (
            "StatefulSet: east no longer scheduled keeps 4, west has 1 of its 4 ready",
            "StatefulSet",
            vec![at(sts(4, 1), true, None), at(sts(4, 4), false, Some(0))],
            json!({"observedGeneration": 1, "replicas": 8, "readyReplicas": 1,
                "currentReplicas": 4, "updatedReplicas": 4, "availableReplicas": 1}),
        ),
        (
            "StatefulSet: east's share is 2 and it keeps 4",
            "StatefulSet",
            vec![at(sts(2, 0), true, None), at(sts(4, 4), true, Some(2))],
            json!({"observedGeneration": 1, "replicas": 6, "readyReplicas": 2,
                "currentReplicas": 4, "updatedReplicas": 4, "availableReplicas": 2}),
        ),
        (
            "DaemonSet: a cluster no longer scheduled counts nothing",
            "DaemonSet",
            vec![at(ds(3), true, None), at(ds(5), false, Some(0))],
            json!({"observedGeneration": 1, "currentNumberScheduled": 0,
                "numberMisscheduled": 0, "desiredNumberScheduled": 3, "numberReady": 3,
                "updatedNumberScheduled": 0, "numberAvailable": 0, "numberUnavailable": 0}),
        ),
    ];
    for (what, members, kind, want) in cases.into_iter().map(|(w, k, m, want)| (w, m, k, want)) {
        let expected = members.iter().filter(|(_, s, _)| *s).count();
        let refs: Vec<Reported> = members
            .iter()
            .map(|(status, scheduled, share)| Reported {
                status,
                scheduled: *scheduled,
                share: *share,
            })
            .collect();
        // every scheduled member runs template generation 1 and observed its own
        assert_eq!(
            template_status(group(kind), kind, &[], 1, None, &refs, expected),
            Some(want),
            "{what}"
        );
    }
    // a Job counts its scheduled clusters only
    let (one, five) = (
        member(1, 1, json!({"active": 1})),
        member(1, 1, json!({"active": 5})),
    );
    let refs = [
        Reported {
            status: &one,
            scheduled: true,
            share: None,
        },
        Reported {
            status: &five,
            scheduled: false,
            share: Some(0),
        },
    ];
    assert_eq!(
        template_status("batch", "Job", &[], 1, None, &refs, 1).unwrap()["active"],
        1
    );
}

/// Members report the counts: a wild one saturates at what the API server stores
/// (int32) rather than wrapping or failing the hub's status write.
#[test]
fn wild_counts_saturate() {
    let wild = member(1, 1, json!({"observedGeneration": 1, "replicas": i64::MAX}));
    let got = run("Deployment", 1, None, &[wild.clone(), wild], 2).unwrap();
    assert_eq!(got["replicas"], i64::from(i32::MAX));
}

#[test]
fn an_interpreted_kind_sums_the_fields_its_interpreter_names() {
    let sum = ["readyWorkers".to_string(), "workers".to_string()];
    let members = [
        member(
            2,
            1,
            json!({"observedGeneration": 2, "readyWorkers": 3, "workers": 3, "phase": "Running"}),
        ),
        member(
            1,
            1,
            json!({"observedGeneration": 1, "readyWorkers": 1, "phase": "Running"}),
        ),
        member(1, 1, json!({"readyWorkers": 5})),
    ];
    let mut refs = scheduled(&members);
    // the third member is not scheduled (a kept copy): it does not count
    refs[2].scheduled = false;
    assert_eq!(
        template_status("example.com", "Gadget", &sum, 1, None, &refs, 2),
        Some(json!({"readyWorkers": 4, "workers": 3}))
    );
    // nothing named: the hub's status is left alone, as for any kind without a rule
    assert_eq!(
        template_status("example.com", "Gadget", &[], 1, None, &refs, 2),
        None
    );
}

#[test]
fn a_custom_kind_named_like_a_builtin_one_gets_no_builtin_rule() {
    let members = [member(1, 1, json!({"active": 2, "replicas": 3}))];
    let refs = scheduled(&members);
    assert_eq!(
        template_status("batch.volcano.sh", "Job", &[], 1, None, &refs, 1),
        None
    );
    assert_eq!(
        template_status("example.com", "Deployment", &[], 1, None, &refs, 1),
        None
    );
    assert!(template_status("batch", "Job", &[], 1, None, &refs, 1).is_some());
}
