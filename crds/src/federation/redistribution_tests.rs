use super::*;
use crate::federation::work::{
    Manifest, ManifestStatus, ResourceIdentifier, WorkSpec, WorkStatus, WorkloadTemplate,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `cluster` with `share`, a Work asking for `current`, and `(available, free)` reported.
fn copy(cluster: &str, share: i64, current: Option<i64>, observed: Option<(i64, i64)>) -> Copy {
    Copy {
        cluster: cluster.into(),
        share,
        current,
        observed: observed.map(|(available, free)| Observed { available, free }),
    }
}

fn kept(plan: &Plan) -> Vec<(&str, i64)> {
    plan.replicas
        .iter()
        .map(|(c, n)| (c.as_str(), *n))
        .collect()
}

#[test]
fn replicas_move_only_as_fast_as_the_others_make_up_for_them() {
    // (what, copies, maxUnavailable, replicas written, held clusters)
    type Row = (
        &'static str,
        Vec<Copy>,
        i64,
        Vec<(&'static str, i64)>,
        Vec<&'static str>,
    );
    let table: Vec<Row> = vec![
        (
            "a migration from east to west waits for west",
            vec![
                copy("east", 0, Some(4), Some((4, 0))),
                copy("west", 4, Some(4), Some((0, 0))),
            ],
            0,
            vec![("east", 4), ("west", 4)],
            vec!["east"],
        ),
        (
            "half of west available: east gives up half",
            vec![
                copy("east", 0, Some(4), Some((4, 0))),
                copy("west", 4, Some(4), Some((2, 0))),
            ],
            0,
            vec![("east", 2), ("west", 4)],
            vec!["east"],
        ),
        (
            "west all available: east goes",
            vec![
                copy("east", 0, Some(4), Some((4, 0))),
                copy("west", 4, Some(4), Some((4, 0))),
            ],
            0,
            vec![("west", 4)],
            vec![],
        ),
        (
            "a new share is written at once (the surge) while east holds",
            vec![
                copy("east", 2, Some(4), Some((4, 0))),
                copy("west", 2, None, None),
            ],
            0,
            vec![("east", 4), ("west", 2)],
            vec!["east"],
        ),
        (
            "maxUnavailable lets that many go before the others make up",
            vec![
                copy("east", 2, Some(4), Some((4, 0))),
                copy("west", 2, Some(2), Some((0, 0))),
            ],
            1,
            vec![("east", 3), ("west", 2)],
            vec!["east"],
        ),
        (
            "a plain scale-down is not held",
            vec![
                copy("east", 2, Some(3), Some((3, 0))),
                copy("west", 2, Some(3), Some((3, 0))),
            ],
            0,
            vec![("east", 2), ("west", 2)],
            vec![],
        ),
        (
            "unavailable replicas go at once (free)",
            vec![
                copy("east", 2, Some(4), Some((2, 2))),
                copy("west", 2, Some(2), Some((0, 0))),
            ],
            0,
            vec![("east", 2), ("west", 2)],
            vec![],
        ),
        (
            "a cluster that has not reported counts no available replica",
            vec![
                copy("east", 0, Some(4), Some((4, 0))),
                copy("west", 4, Some(4), None),
            ],
            0,
            vec![("east", 4), ("west", 4)],
            vec!["east"],
        ),
        (
            "a report counts at most what the Work asks for",
            vec![
                copy("east", 2, Some(3), Some((4, 0))),
                copy("west", 2, Some(2), Some((1, 0))),
            ],
            0,
            vec![("east", 3), ("west", 2)],
            vec!["east"],
        ),
        (
            "clusters no longer scheduled give up first, then by name",
            vec![
                copy("a", 1, Some(2), Some((2, 0))),
                copy("b", 0, Some(1), Some((1, 0))),
                copy("c", 3, Some(3), Some((3, 0))),
                copy("d", 1, Some(1), Some((1, 0))),
            ],
            0,
            // total 5, available 7: two may go; b first, then one of a
            vec![("a", 1), ("c", 3), ("d", 1)],
            vec![],
        ),
        (
            "one may go: b's",
            vec![
                copy("a", 1, Some(2), Some((2, 0))),
                copy("b", 0, Some(1), Some((1, 0))),
                copy("c", 3, Some(3), Some((2, 0))),
                copy("d", 1, Some(1), Some((1, 0))),
            ],
            0,
            vec![("a", 2), ("c", 3), ("d", 1)],
            vec!["a"],
        ),
        (
            "a StatefulSet scale-down its own cluster cannot run is not held",
            vec![copy("east", 3, Some(5), Some((2, 0)))],
            0,
            vec![("east", 3)],
            vec![],
        ),
        (
            "a cluster short of its unchanged share is made up for",
            vec![
                copy("east", 2, Some(4), Some((4, 0))),
                copy("west", 2, Some(2), Some((1, 0))),
            ],
            0,
            vec![("east", 3), ("west", 2)],
            vec!["east"],
        ),
        (
            "100% moves at once, as Karmada does",
            vec![
                copy("east", 0, Some(4), Some((4, 0))),
                copy("west", 4, Some(4), Some((0, 0))),
            ],
            4,
            vec![("west", 4)],
            vec![],
        ),
    ];
    for (what, copies, max, replicas, held) in table {
        let p = plan(&copies, max);
        assert_eq!(kept(&p), replicas, "{what}");
        let h: Vec<&str> = p.held.iter().map(|h| h.cluster.as_str()).collect();
        assert_eq!(h, held, "{what}");
    }
}

#[test]
fn the_message_says_what_is_held_and_until_when() {
    let p = plan(
        &[
            copy("east", 0, Some(4), Some((4, 0))),
            copy("north", 1, Some(2), Some((2, 0))),
            copy("west", 3, Some(3), Some((1, 0))),
        ],
        0,
    );
    assert_eq!(
        p.message(),
        "east keeps 1 (no longer scheduled there), north keeps 2 (its share is 1) while \
         west has 1 of its 3 available; spec.redistribution.maxUnavailable lets 0 of the 4 \
         replicas be unavailable"
    );
    assert!(holds(&p.message(), "east") && holds(&p.message(), "north"));
    assert!(!holds(&p.message(), "west") && !holds(&p.message(), "st"));
    let done = plan(&[copy("west", 3, Some(3), Some((3, 0)))], 0);
    assert_eq!(
        done.message(),
        "every cluster runs its share of the 3 replicas"
    );
    assert!(done.short.is_empty());
}

#[test]
fn a_hold_is_stuck_only_while_no_replica_moves() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |secs: i64| Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap());
    // east (no longer scheduled) keeps `east`, west has `west` of its 4 available
    let held = |east: i64, west: i64| {
        plan(
            &[
                copy("east", 0, Some(east), Some((east, 0))),
                copy("west", 4, Some(4), Some((west, 0))),
            ],
            0,
        )
    };
    let start = hold_progress(&held(4, 0), None, &at(100)).unwrap();
    assert_eq!(
        (start.held, start.available, &start.since),
        (4, 4, &at(100))
    );
    let cases = [
        // nothing moved: the clock stays
        (held(4, 0), Some(at(100))),
        // one more available in west, east gives one up: it moved
        (held(3, 1), Some(at(200))),
        // nothing held: no hold, no clock
        (held(0, 4), None),
    ];
    for (plan, since) in cases {
        let got = hold_progress(&plan, Some(&start), &at(200));
        assert_eq!(got.map(|h| h.since), since, "{plan:?}");
    }
    // a count that falls back and returns is no progress: the best is remembered
    let moved = hold_progress(&held(3, 1), Some(&start), &at(200)).unwrap();
    let fell = plan(
        &[
            copy("east", 0, Some(3), Some((2, 0))),
            copy("west", 4, Some(4), Some((1, 0))),
        ],
        0,
    );
    let fell = hold_progress(&fell, Some(&moved), &at(300)).unwrap();
    assert_eq!(fell, moved);
    let back = hold_progress(&held(3, 1), Some(&fell), &at(400)).unwrap();
    assert_eq!(back.since, at(200));
    // more available than ever, with as many held: it moved
    let more = plan(
        &[
            copy("east", 0, Some(3), Some((3, 0))),
            copy("west", 4, Some(4), Some((2, 0))),
        ],
        0,
    );
    assert_eq!((more.held_total(), more.available), (2, 5));
    let more = hold_progress(&more, Some(&back), &at(500)).unwrap();
    assert_eq!((more.held, more.available, &more.since), (2, 5, &at(500)));
    // a hold towards other shares (the placement edited: north instead of west) is a
    // new one, with its own clock and records, even with more held than before
    let north = plan(
        &[
            copy("east", 0, Some(3), Some((3, 0))),
            copy("west", 0, Some(4), Some((4, 0))),
            copy("north", 4, None, None),
        ],
        0,
    );
    let new = hold_progress(&north, Some(&more), &at(600)).unwrap();
    assert_eq!(new.since, at(600));
    assert_eq!(new.shares, [("north".to_string(), 4)].into());
    assert_eq!((new.held, new.available), (north.held_total(), 7));

    // the deadline: from the last move, only with progressDeadlineSeconds of 1 or more
    let spec = |secs: Option<i64>| Redistribution {
        max_unavailable: None,
        progress_deadline_seconds: secs,
    };
    assert_eq!(deadline(Some(&spec(Some(60))), &moved), Some(at(260).0));
    assert_eq!(deadline(Some(&spec(None)), &moved), None);
    assert_eq!(deadline(Some(&spec(Some(0))), &moved), None);
    assert_eq!(deadline(None, &moved), None);
}

#[test]
fn max_unavailable_is_a_count_or_a_percentage() {
    let spec = |v: IntOrString| Redistribution {
        max_unavailable: Some(v),
        ..Redistribution::default()
    };
    assert_eq!(max_unavailable(None, 10), Ok(0));
    assert_eq!(max_unavailable(Some(&spec(IntOrString::Int(2))), 10), Ok(2));
    assert_eq!(
        max_unavailable(Some(&spec(IntOrString::String("25%".into()))), 10),
        Ok(2)
    );
    assert_eq!(
        max_unavailable(Some(&spec(IntOrString::String("100%".into()))), 7),
        Ok(7)
    );
    for bad in ["25", "110%", "-1%", "a%"] {
        let e = max_unavailable(Some(&spec(IntOrString::String(bad.into()))), 10).unwrap_err();
        assert!(e.contains("give a count (1) or a percentage"), "{bad}: {e}");
    }
    let e = max_unavailable(Some(&spec(IntOrString::Int(-1))), 10).unwrap_err();
    assert!(e.contains("0 or more"), "{e}");
}

fn work(kind: &str, replicas: i64, status: Option<Value>) -> Work {
    Work {
        metadata: Default::default(),
        spec: WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![Manifest(json!({
                    "apiVersion": "apps/v1", "kind": kind,
                    "metadata": {"name": "web", "namespace": "demo"},
                    "spec": {"replicas": replicas},
                }))],
            },
            ..Default::default()
        },
        status: status.map(|s| WorkStatus {
            conditions: vec![],
            manifest_statuses: vec![ManifestStatus {
                identifier: ResourceIdentifier {
                    ordinal: 0,
                    kind: kind.into(),
                    name: "web".into(),
                    ..Default::default()
                },
                status: Some(s),
                applied: Some(true),
                ..Default::default()
            }],
        }),
    }
}

#[test]
fn what_a_member_reports_is_read_as_kubernetes_writes_it() {
    let observed = |kind: &str, replicas: i64, status: Value| {
        observe(&work(kind, replicas, Some(status)), kind, "web", None)
    };
    let o = |available, free| Some(Observed { available, free });
    // settled Deployment: its unavailable replicas are free
    assert_eq!(
        observed(
            "Deployment",
            4,
            json!({"replicas": 4, "updatedReplicas": 4, "availableReplicas": 1})
        ),
        o(1, 3)
    );
    // zero counts left out, as Kubernetes does
    assert_eq!(
        observed(
            "Deployment",
            2,
            json!({"replicas": 2, "updatedReplicas": 2})
        ),
        o(0, 2)
    );
    // mid-rollout (two ReplicaSets): nothing is free
    assert_eq!(
        observed(
            "Deployment",
            4,
            json!({"replicas": 5, "updatedReplicas": 2, "availableReplicas": 3})
        ),
        o(3, 0)
    );
    // a report of a count the Work no longer asks for: capped, nothing free
    assert_eq!(
        observed(
            "Deployment",
            2,
            json!({"replicas": 4, "updatedReplicas": 4, "availableReplicas": 4})
        ),
        o(2, 0)
    );
    // a StatefulSet removes its highest ordinals, available or not
    assert_eq!(
        observed(
            "StatefulSet",
            3,
            json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 1})
        ),
        o(1, 0)
    );
    // a ReplicaSet has no updatedReplicas
    assert_eq!(
        observed(
            "ReplicaSet",
            3,
            json!({"replicas": 3, "availableReplicas": 2})
        ),
        o(2, 1)
    );
    // nothing reported yet
    assert_eq!(
        observe(&work("Deployment", 3, None), "Deployment", "web", None),
        None
    );
    // not applied (a conflict reports the foreign object's status): not counted
    let mut w = work(
        "Deployment",
        3,
        Some(json!({"replicas": 3, "availableReplicas": 3})),
    );
    w.status.as_mut().unwrap().manifest_statuses[0].applied = Some(false);
    assert_eq!(observe(&w, "Deployment", "web", None), None);
    // a status older than the object's spec: not counted
    let mut w = work(
        "Deployment",
        3,
        Some(json!({"observedGeneration": 4, "replicas": 3, "availableReplicas": 3})),
    );
    w.status.as_mut().unwrap().manifest_statuses[0].generation = Some(5);
    assert_eq!(observe(&w, "Deployment", "web", None), None);
    w.status.as_mut().unwrap().manifest_statuses[0].generation = Some(4);
    assert_eq!(observe(&w, "Deployment", "web", None), o(3, 0));
    // another object's name
    assert_eq!(
        observe(
            &work("Deployment", 3, Some(json!({"availableReplicas": 3}))),
            "Deployment",
            "api",
            None
        ),
        None
    );
}

#[test]
fn a_works_replicas_are_read_and_replaced() {
    let w = work("Deployment", 4, None);
    assert_eq!(replicas_of(&w, "Deployment", "web"), Some(4));
    let w = with_replicas(w, "Deployment", "web", 2);
    assert_eq!(replicas_of(&w, "Deployment", "web"), Some(2));
    // another name is left alone
    let w = with_replicas(w, "Deployment", "api", 7);
    assert_eq!(replicas_of(&w, "Deployment", "web"), Some(2));
    assert!(guards("apps", "Deployment", None) && guards("apps", "StatefulSet", None));
    assert!(!guards("apps", "DaemonSet", None) && !guards("", "Deployment", None));
}

/// A Gadget Work asking for `workers` at `/spec/workers/count`, its member reporting
/// `status`, carrying an interpretation with `available` as its available count.
fn gadget_work(workers: i64, available: Option<&str>, status: Option<Value>) -> Work {
    let mut w = work("Gadget", 0, status);
    w.spec.workload.manifests[0] = Manifest(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "web", "namespace": "demo"},
        "spec": {"replicas": 1, "workers": {"count": workers}},
    }));
    w.spec.interpretations = vec![Interpretation {
        group: "example.com".into(),
        kind: "Gadget".into(),
        interpreter: "gadgets".into(),
        replicas_path: Some("/spec/workers/count".into()),
        available_path: available.map(String::from),
        ..Default::default()
    }];
    w
}

#[test]
fn a_custom_kind_is_counted_where_its_interpreter_says() {
    let i =
        |available: Option<&str>| gadget_work(0, available, None).spec.interpretations[0].clone();
    // guarded only with both a replica path and an available count
    assert!(guards(
        "example.com",
        "Gadget",
        Some(&i(Some("/status/readyWorkers")))
    ));
    assert!(!guards("example.com", "Gadget", Some(&i(None))));
    assert!(!guards("example.com", "Gadget", None));

    // the count is read and written at the interpreter's path, not spec.replicas
    let w = gadget_work(4, Some("/status/readyWorkers"), None);
    assert_eq!(replicas_of(&w, "Gadget", "web"), Some(4));
    let w = with_replicas(w, "Gadget", "web", 3);
    assert_eq!(replicas_of(&w, "Gadget", "web"), Some(3));
    let m = &w.spec.workload.manifests[0].0;
    assert_eq!(m.pointer("/spec/replicas"), Some(&json!(1)), "{m}");

    // available where it says, capped at what the Work asks for; nothing is free (how
    // the kind scales down is not known); a zero count left out is 0
    let at = Some("/status/workers/ready");
    let observed = |status: Value| {
        let w = gadget_work(3, at, Some(status));
        observe(&w, "Gadget", "web", at)
    };
    let o = |available| Some(Observed { available, free: 0 });
    assert_eq!(
        observed(json!({"workers": {"ready": 2}, "replicas": 3})),
        o(2)
    );
    assert_eq!(observed(json!({"workers": {"ready": 9}})), o(3));
    assert_eq!(observed(json!({"phase": "Running"})), o(0));
    assert_eq!(observed(json!({"availableReplicas": 3})), o(0));
    // a status of an older generation than the object's spec is not counted
    let mut w = gadget_work(
        3,
        Some("/status/workers/ready"),
        Some(json!({"observedGeneration": 1, "workers": {"ready": 3}})),
    );
    w.status.as_mut().unwrap().manifest_statuses[0].generation = Some(2);
    assert_eq!(observe(&w, "Gadget", "web", at), None);
    // nothing reported yet
    assert_eq!(
        observe(&gadget_work(3, at, None), "Gadget", "web", at),
        None
    );
}

fn copies() -> impl Strategy<Value = (Vec<Copy>, i64)> {
    let one = (
        0i64..6,
        proptest::option::of(0i64..8),
        proptest::option::of((0i64..9, 0i64..9)),
    );
    (proptest::collection::vec(one, 1..6), 0i64..4).prop_map(|(v, max)| {
        let copies = v
            .into_iter()
            .enumerate()
            .map(|(i, (share, current, observed))| {
                let observed = observed.map(|(a, f)| Observed {
                    available: a,
                    free: f,
                });
                Copy {
                    cluster: format!("m{i}"),
                    share,
                    current,
                    observed,
                }
            })
            .collect();
        (copies, max)
    })
}

proptest! {
    /// Whatever the fleet: every cluster gets at least its share and never more than
    /// it runs; available replicas are given up beyond what the floor allows only so
    /// far as holding them would exceed what the other clusters lack; the replicas held
    /// never exceed that lack; with nothing to wait for, nothing is held.
    #[test]
    fn the_floor_holds(input in copies()) {
        let (copies, max) = input;
        let p = plan(&copies, max);
        let (mut costly, mut wanted, mut held) = (0, 0, 0);
        for c in &copies {
            let current = c.current.unwrap_or(0);
            let written = p.replicas.get(&c.cluster).copied().unwrap_or(0);
            prop_assert!(written >= c.share, "{c:?}: {written}");
            prop_assert!(written <= c.share.max(current), "{c:?}: {written}");
            let surplus = current.max(c.share) - c.share;
            let free = c.observed.map_or(0, |o| o.free).clamp(0, surplus);
            costly += surplus - free - (written - c.share);
            wanted += surplus - free;
            held += written - c.share;
            if c.share == 0 && written == 0 {
                prop_assert!(!p.replicas.contains_key(&c.cluster));
            }
        }
        let lacking: i64 = p.short.iter().map(|s| s.share - s.available).sum();
        let allowed = (p.available - p.floor).max(0);
        prop_assert!(costly <= allowed.max(wanted - lacking), "{p:?}");
        if !p.held.is_empty() {
            prop_assert!(held <= lacking, "{p:?}");
        }
        prop_assert_eq!(p.floor, (p.total - max).max(0));
        if allowed >= wanted {
            prop_assert!(p.held.is_empty(), "{:?}", p.held);
        }
        // the same inputs give the same plan
        prop_assert_eq!(plan(&copies, max), p);
    }
}
