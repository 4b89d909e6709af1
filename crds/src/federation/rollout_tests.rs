use super::*;
use crate::federation::work::{
    Manifest, ManifestStatus, ResourceIdentifier, WorkSpec, WorkStatus, WorkloadTemplate,
};
use serde_json::json;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn wave(names_: &[&str], selector: Option<Value>) -> RolloutWave {
    RolloutWave {
        name: None,
        cluster_names: names(names_),
        label_selector: selector.map(|s| serde_json::from_value(s).unwrap()),
    }
}

use serde_json::Value;

fn region(c: &str) -> BTreeMap<String, String> {
    let r = if c.starts_with("eu") { "eu" } else { "us" };
    BTreeMap::from([("region".to_string(), r.to_string())])
}

#[test]
fn waves_take_names_then_selectors_then_the_rest() {
    let r = Rollout {
        waves: vec![
            wave(&["canary"], None),
            wave(
                &["canary", "us-1"],
                Some(json!({"matchLabels": {"region": "eu"}})),
            ),
            wave(&["nowhere"], None),
        ],
        progress_deadline_seconds: None,
    };
    let got = waves(
        &r,
        &names(&["us-1", "eu-1", "canary", "us-2", "eu-2"]),
        &region,
    );
    assert_eq!(
        got,
        vec![
            ("wave-1".to_string(), names(&["canary"])),
            ("wave-2".to_string(), names(&["us-1", "eu-1", "eu-2"])),
            ("the clusters no wave selects".to_string(), names(&["us-2"])),
        ]
    );
}

/// A configured wave that selects none of the scheduled clusters (its canary left the
/// placement) is said, since the generations then skip it.
#[test]
fn a_wave_that_selects_no_scheduled_cluster_is_said() {
    let mut canary = wave(&["canary"], None);
    canary.name = Some("canary".into());
    let r = Rollout {
        waves: vec![canary, wave(&["a", "b"], None)],
        progress_deadline_seconds: None,
    };
    let none = |_: &str| -> Result<(), String> { Err("not yet".into()) };
    let p = plan(
        Some(&r),
        &names(&["a", "c"]),
        &|_| BTreeMap::new(),
        3,
        &none,
    );
    assert_eq!(
        p.skipped,
        [
            "wave 1 of 2 (canary) selects none of the scheduled clusters (a, c): template generations go to the next wave without it; fix its clusterNames or labelSelector, or the placement"
        ]
    );
    assert_eq!(p.released, set(&["a"]), "the next wave goes first");
    let p = plan(
        Some(&r),
        &names(&["a", "canary"]),
        &|_| BTreeMap::new(),
        3,
        &none,
    );
    assert!(p.skipped.is_empty(), "{:?}", p.skipped);
}

#[test]
fn a_wave_is_released_once_the_ones_before_it_are_done() {
    let r = Rollout {
        waves: vec![wave(&["canary"], None), wave(&["a", "b"], None)],
        progress_deadline_seconds: None,
    };
    let scheduled = names(&["a", "b", "canary", "c"]);
    type Case = (
        &'static str,
        Vec<&'static str>,
        Vec<&'static str>,
        Vec<&'static str>,
    );
    // (case, clusters done, released, held)
    let cases: Vec<Case> = vec![
        (
            "nothing done: only the canary",
            vec![],
            vec!["canary"],
            vec!["a", "b", "c"],
        ),
        (
            "a done but not the canary: still only the canary",
            vec!["a"],
            vec!["canary"],
            vec!["a", "b", "c"],
        ),
        (
            "canary done: the second wave",
            vec!["canary"],
            vec!["canary", "a", "b"],
            vec!["c"],
        ),
        (
            "canary and a done: b holds the last wave back",
            vec!["canary", "a"],
            vec!["canary", "a", "b"],
            vec!["c"],
        ),
        (
            "two waves done: the rest",
            vec!["canary", "a", "b"],
            vec!["canary", "a", "b", "c"],
            vec![],
        ),
        (
            "all done",
            vec!["canary", "a", "b", "c"],
            vec!["canary", "a", "b", "c"],
            vec![],
        ),
    ];
    for (name, done, released, held) in cases {
        let state = |c: &str| {
            if done.contains(&c) {
                Ok(())
            } else {
                Err("runs template generation 1".to_string())
            }
        };
        let p = plan(Some(&r), &scheduled, &region, 2, &state);
        assert_eq!(p.released, set(&released), "{name}");
        assert_eq!(p.held, set(&held), "{name}");
        assert_eq!(
            matches!(p.progress, Progress::Complete { .. }),
            done.len() == 4,
            "{name}"
        );
        assert!(p.released.is_disjoint(&p.held), "{name}");
        let all: BTreeSet<String> = p.released.union(&p.held).cloned().collect();
        assert_eq!(all, set(&["a", "b", "c", "canary"]), "{name}");
    }
}

#[test]
fn the_message_names_the_wave_and_what_it_waits_for() {
    let r = Rollout {
        waves: vec![RolloutWave {
            name: Some("canary".into()),
            cluster_names: names(&["c0"]),
            label_selector: None,
        }],
        progress_deadline_seconds: None,
    };
    let state = |c: &str| match c {
        "c0" => Err("Deployment web is unhealthy".to_string()),
        _ => Ok(()),
    };
    let p = plan(Some(&r), &names(&["c0", "c1", "c2"]), &region, 3, &state);
    assert_eq!(
        p.progress.message(),
        "wave 1 of 2 (canary) is rolling out template generation 3, waiting for c0: Deployment web is unhealthy; held at what they run until then: c1, c2"
    );
}

#[test]
fn without_waves_every_cluster_is_released() {
    let never = |_: &str| Err("x".to_string());
    for r in [None, Some(Rollout::default())] {
        let p = plan(r.as_ref(), &names(&["a", "b"]), &region, 1, &never);
        assert_eq!(p.released, set(&["a", "b"]));
        assert!(p.held.is_empty());
    }
}

fn work(replicas: i64, image: &str, status: Option<Vec<ManifestStatus>>) -> Work {
    let mut w = Work::new(
        "web",
        WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![Manifest(json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "demo"},
                    "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}
                }))],
            },
            suspend_dispatching: Some(false),
            ..Default::default()
        },
    );
    w.status = status.map(|m| WorkStatus {
        manifest_statuses: m,
        ..Default::default()
    });
    w
}

fn reported(
    applied: bool,
    tg: Option<i64>,
    health: Option<ResourceHealth>,
    status: bool,
) -> ManifestStatus {
    ManifestStatus {
        identifier: ResourceIdentifier {
            group: "apps".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            version: "v1".into(),
            ..Default::default()
        },
        status: status.then(|| json!({"replicas": 2})),
        health,
        applied: Some(applied),
        reason: (!applied).then(|| "AppliedFailed".to_string()),
        message: None,
        generation: Some(1),
        template_generation: tg,
    }
}

/// A custom resource (no health rule: Unknown) applied at generation 5.
fn widget(status: bool) -> ManifestStatus {
    let mut m = reported(true, Some(5), Some(ResourceHealth::Unknown), status);
    m.identifier.group = "example.com".into();
    m.identifier.kind = "Widget".into();
    m
}

#[test]
fn settled_means_applied_at_the_generation_and_healthy() {
    use ResourceHealth::*;
    let cases: Vec<(&str, Option<Work>, Result<(), String>)> = vec![
        ("no Work", None, Err("no Work yet".into())),
        (
            "no status",
            Some(work(2, "v2", None)),
            Err("the member has not reported yet".into()),
        ),
        (
            "healthy at the generation",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(5), Some(Healthy), true)]),
            )),
            Ok(()),
        ),
        (
            "another generation (a template recreated while members kept their copies)",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(6), Some(Healthy), true)]),
            )),
            Err("Deployment web runs template generation 6".into()),
        ),
        (
            "an older generation",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(4), Some(Healthy), true)]),
            )),
            Err("Deployment web runs template generation 4".into()),
        ),
        (
            "not applied",
            Some(work(
                2,
                "v2",
                Some(vec![reported(false, Some(5), Some(Healthy), true)]),
            )),
            Err("Deployment web is not applied yet AppliedFailed".into()),
        ),
        (
            "unhealthy",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(5), Some(Unhealthy), true)]),
            )),
            Err("Deployment web is unhealthy".into()),
        ),
        (
            "healthy by its rule, but an updated replica not available",
            Some(work(
                2,
                "v2",
                Some(vec![{
                    let mut m = reported(true, Some(5), Some(Healthy), true);
                    m.status =
                        Some(json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}));
                    m
                }]),
            )),
            Err("Deployment web has 1 of 2 updated replicas available".into()),
        ),
        (
            "a status from before the member applied a new division",
            Some(work(
                3,
                "v2",
                Some(vec![{
                    let mut m = reported(true, Some(5), Some(Healthy), true);
                    m.status =
                        Some(json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}));
                    m
                }]),
            )),
            Err("Deployment web has 2 of the 3 replicas it should run updated".into()),
        ),
        (
            "with retain-replicas, the member's own count (an HPA scaled 3 to 7)",
            Some({
                let mut w = work(
                    3,
                    "v2",
                    Some(vec![{
                        let mut m = reported(true, Some(5), Some(Healthy), true);
                        m.status = Some(
                            json!({"replicas": 7, "updatedReplicas": 7, "availableReplicas": 7}),
                        );
                        m
                    }]),
                );
                w.spec.workload.manifests[0].0["metadata"]["labels"] =
                    json!({"causeway.io/retain-replicas": "true"});
                w
            }),
            Ok(()),
        ),
        (
            "replicas of the older template still there",
            Some(work(
                2,
                "v2",
                Some(vec![{
                    let mut m = reported(true, Some(5), Some(Healthy), true);
                    m.status =
                        Some(json!({"replicas": 3, "updatedReplicas": 2, "availableReplicas": 3}));
                    m
                }]),
            )),
            Err("Deployment web still runs 1 replica(s) of an older template".into()),
        ),
        (
            "a kind with no health rule, with or without a status",
            Some(work(2, "v2", Some(vec![widget(true), widget(false)]))),
            Ok(()),
        ),
        (
            "a Deployment with no status yet",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(5), Some(Unknown), false)]),
            )),
            Err("Deployment web has not reported its health yet".into()),
        ),
        (
            "an object no manifest names any more, whose removal failed, is left out",
            Some(work(
                2,
                "v2",
                Some(vec![reported(true, Some(5), Some(Healthy), true), {
                    let mut m = reported(false, None, None, false);
                    m.identifier.ordinal = -1;
                    m
                }]),
            )),
            Ok(()),
        ),
        (
            "only such an object: not reported",
            Some(work(
                2,
                "v2",
                Some(vec![{
                    let mut m = reported(false, None, None, false);
                    m.identifier.ordinal = -1;
                    m
                }]),
            )),
            Err("the member has not reported yet".into()),
        ),
    ];
    for (name, w, want) in cases {
        assert_eq!(settled_at(w.as_ref(), 5), want, "{name}");
    }
}

#[test]
fn a_held_cluster_keeps_its_manifests_but_follows_the_division() {
    let prov = |p: &str| {
        Some(std::collections::BTreeMap::from([(
            crate::well_known::annotations::PROVENANCE.to_string(),
            p.to_string(),
        )]))
    };
    let mut rendered = work(5, "v2", None);
    rendered.spec.suspend_dispatching = Some(true);
    rendered.metadata.annotations = prov("new overrides");
    let mut actual = work(2, "v1", None);
    actual.metadata.annotations = prov("old overrides");
    let held = held_work(&rendered, &actual);
    assert_eq!(held.metadata.annotations, prov("old overrides"));
    // the overlaps found when its manifests were rendered stay with them too (and new
    // ones do not come with the new render)
    let overlaps = crate::well_known::annotations::OVERRIDE_OVERLAPS;
    let mut old = actual.clone();
    old.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(overlaps.into(), "[\"old\"]".into());
    let mut new = rendered.clone();
    new.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(overlaps.into(), "[\"new\"]".into());
    assert_eq!(
        held_work(&new, &old).metadata.annotations.unwrap()[overlaps],
        "[\"old\"]"
    );
    assert!(
        !held_work(&new, &actual)
            .metadata
            .annotations
            .unwrap()
            .contains_key(overlaps)
    );
    let m = &held.spec.workload.manifests[0].0;
    assert_eq!(m.pointer("/spec/replicas"), Some(&json!(5)));
    assert_eq!(
        m.pointer("/spec/template/spec/containers/0/image"),
        Some(&json!("v1"))
    );
    assert_eq!(held.spec.suspend_dispatching, Some(true));
}

/// A held cluster with no copy starts from what its wave runs; alone in its wave, from
/// the oldest generation a held cluster runs; with no held copy, from nothing.
#[test]
fn a_held_cluster_without_a_copy_starts_from_what_its_wave_runs() {
    let at = |g: Option<&str>| {
        let mut w = work(2, "nginx:1.27", None);
        if let Some(g) = g {
            w.spec.workload.manifests[0].0["metadata"]["annotations"] =
                json!({annotations::TEMPLATE_GENERATION: g});
        }
        w
    };
    // a generation 2 reached west and failed there; the rest still run 1; generation 3
    // waits at the canary
    let works: BTreeMap<&str, Work> = [
        ("west", at(Some("2"))),
        ("north", at(Some("1"))),
        ("south", at(Some("not a number"))),
        ("east", at(None)),
    ]
    .into();
    let work_of = |c: &str| works.get(c);
    assert_eq!(generation_of(&works["west"]), Some(2));
    assert_eq!(generation_of(&works["east"]), None);
    let waves = |v: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        v.iter().map(|(n, cs)| (n.to_string(), names(cs))).collect()
    };
    let three = waves(&[
        ("canary", &["canary"]),
        ("wave-2", &["west", "new-west"]),
        ("rest", &["north", "new-north"]),
        ("last", &["new-last"]),
    ]);
    let held = set(&["west", "new-west", "north", "new-north", "new-last"]);
    let cases = [
        ("in west's wave", "new-west", Some(2)),
        ("in north's wave", "new-north", Some(1)),
        ("alone in its wave: the oldest held", "new-last", Some(1)),
    ];
    for (what, cluster, want) in cases {
        assert_eq!(
            held_generation(&three, &held, cluster, &work_of),
            want,
            "{what}"
        );
    }
    let only_new = set(&["new-last", "east", "south"]);
    assert_eq!(
        held_generation(&three, &only_new, "new-last", &work_of),
        None,
        "no held copy"
    );
}

#[test]
fn revisions_keep_the_template_but_its_status() {
    let t = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "generation": 4, "uid": "u",
            "resourceVersion": "9", "labels": {"app": "web"}, "managedFields": [],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"}},
        "spec": {"replicas": 3}, "status": {"replicas": 3}});
    assert_eq!(
        revision_data(&t),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "generation": 4, "labels": {"app": "web"},
                "annotations": {"a": "b"}},
            "spec": {"replicas": 3}})
    );
}

/// A wave's place in `spec.rollout.waves` is its own whichever waves are empty: the
/// progress clock follows it, not its number among the waves with clusters.
#[test]
fn a_waves_place_does_not_move_when_waves_before_it_are_empty() {
    let r = Rollout {
        waves: vec![wave(&["canary"], None), wave(&["a", "b"], None)],
        progress_deadline_seconds: Some(60),
    };
    let none = |_: &str| BTreeMap::new();
    let pending = |_: &str| Err("not yet".to_string());
    let without_canary = plan(Some(&r), &["a".into(), "b".into()], &none, 2, &pending);
    let Progress::Waiting { wave, place, .. } = without_canary.progress else {
        panic!("waiting")
    };
    assert_eq!((wave, place), (1, 2));
    let with_canary = plan(Some(&r), &["a".into(), "canary".into()], &none, 2, &pending);
    let Progress::Waiting { wave, place, .. } = &with_canary.progress else {
        panic!("waiting")
    };
    assert_eq!((*wave, *place), (1, 1));
    // the canary joining behind a wave that has waited long is a wave that falls
    // back: the clock of the furthest wave stays, and is not given to the canary anew
    let t = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
    let far = wave_progress(&without_canary.progress, None, &t(0)).unwrap();
    let now = wave_progress(&with_canary.progress, Some(&far), &t(100)).unwrap();
    assert_eq!((now.wave, now.started_at), (2, t(0)));
    // the clusters no wave selects come one past the last
    let rest = plan(Some(&r), &["z".into()], &none, 2, &pending);
    assert!(matches!(rest.progress, Progress::Waiting { place: 3, .. }));
}

/// A custom resource (no health rule of its kind) counts once applied, unless its status
/// has a `Ready` condition: then only once it is Ready.
#[test]
fn a_custom_resource_with_a_ready_condition_settles_once_ready() {
    let work = |health: ResourceHealth, status: serde_json::Value| -> Work {
        serde_json::from_value(json!({
            "metadata": {"name": "demo.db-database", "namespace": "causeway-es-east", "generation": 1},
            "spec": {"workload": {"manifests": [{"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "db"}}]}},
            "status": {"manifestStatuses": [{"identifier": {"ordinal": 0, "group": "example.com", "version": "v1", "kind": "Database", "namespace": "demo", "name": "db"},
                "applied": true, "health": health, "templateGeneration": 4, "status": status}]},
        }))
        .unwrap()
    };
    let ready = |s: &str| json!({"conditions": [{"type": "Ready", "status": s}]});
    let cases = [
        (
            "Ready",
            work(ResourceHealth::Healthy, ready("True")),
            Ok(()),
        ),
        (
            "not Ready yet",
            work(ResourceHealth::Unknown, ready("False")),
            Err("Database db is not Ready yet".to_string()),
        ),
        (
            "no Ready condition",
            work(ResourceHealth::Unknown, json!({"phase": "Up"})),
            Ok(()),
        ),
    ];
    for (what, w, want) in cases {
        assert_eq!(settled_at(Some(&w), 4), want, "{what}");
    }
}

/// Kinds with a health rule wait for Healthy: a CRD until it is Established, a kind
/// whose ResourceInterpreter has a health rule until the rule says Healthy (not only
/// until applied, as a kind with no rule).
#[test]
fn a_kind_with_a_health_rule_settles_once_healthy() {
    let work = |group: &str, kind: &str, health: ResourceHealth, rule: bool| -> Work {
        let api_version = format!("{group}/v1");
        let interpretations = if rule {
            json!([{"group": group, "kind": kind, "interpreter": "gadgets", "healthy": "object.status.ready"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": "w", "namespace": "causeway-es-east", "generation": 1},
            "spec": {"workload": {"manifests": [{"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}]},
                     "interpretations": interpretations},
            "status": {"manifestStatuses": [{"identifier": {"ordinal": 0, "group": group, "version": "v1", "kind": kind, "name": "x"},
                "applied": true, "health": health, "templateGeneration": 4, "status": {}}]},
        }))
        .unwrap()
    };
    use ResourceHealth::*;
    let not_yet = |kind: &str| Err(format!("{kind} x has not reported its health yet"));
    let crd = "CustomResourceDefinition";
    let cases = [
        (
            "a CRD not Established yet",
            work("apiextensions.k8s.io", crd, Unknown, false),
            not_yet(crd),
        ),
        (
            "a CRD Established",
            work("apiextensions.k8s.io", crd, Healthy, false),
            Ok(()),
        ),
        (
            "a rule not Healthy yet",
            work("example.com", "Gadget", Unknown, true),
            not_yet("Gadget"),
        ),
        (
            "a rule Healthy",
            work("example.com", "Gadget", Healthy, true),
            Ok(()),
        ),
        (
            "no rule: once applied",
            work("example.com", "Gadget", Unknown, false),
            Ok(()),
        ),
    ];
    for (what, w, want) in cases {
        assert_eq!(settled_at(Some(&w), 4), want, "{what}");
    }
}
