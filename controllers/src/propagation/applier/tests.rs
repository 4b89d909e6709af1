use causeway_crds::federation::ConflictResolution;
use causeway_crds::federation::work::{Manifest, ResourceHealth, Work, WorkSpec, conditions};
use causeway_crds::well_known::{annotations, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::plan::*;
use super::report::*;
use causeway_crds::federation::interpreter::DEFAULT_REPLICAS;

const W: &str = "causeway-es-east/web-deployment";

fn work(manifests: Vec<Value>) -> Work {
    let mut w = Work::new(
        "web-deployment",
        WorkSpec {
            workload: causeway_crds::federation::work::WorkloadTemplate {
                manifests: manifests.into_iter().map(Manifest).collect(),
            },
            ..Default::default()
        },
    );
    w.metadata.namespace = Some("causeway-es-east".into());
    w.metadata.generation = Some(4);
    w
}

fn deploy(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "demo", "annotations": {annotations::TEMPLATE_GENERATION: "7"}},
           "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn served() -> Result<Served, String> {
    Ok(Served {
        plural: "deployments".into(),
        namespaced: true,
    })
}

fn seen(found: Option<Value>) -> Observed {
    Observed {
        served: served(),
        found: Ok(found),
    }
}

/// The member copy of `manifest` as the applier last wrote it, plus server fields.
fn applied(manifest: &Value) -> Value {
    let mut o = body(manifest, W, None, DEFAULT_REPLICAS);
    o["metadata"]["uid"] = json!("u1");
    o["metadata"]["generation"] = json!(3);
    o["metadata"]["labels"]["team"] = json!("member-added");
    o["spec"]["progressDeadlineSeconds"] = json!(600);
    o["status"] = json!({"observedGeneration": 3, "updatedReplicas": 2, "availableReplicas": 2});
    o
}

fn unmanaged(manifest: &Value, managed: Option<&str>) -> Value {
    let mut o = manifest.clone();
    if let Some(v) = managed {
        o["metadata"]["labels"] = json!({labels::MANAGED: v});
    }
    o
}

fn run(w: &Work, ready: bool, found: Vec<Option<Value>>, leftovers: &[Value]) -> Plan {
    let observed: Vec<Observed> = found.into_iter().map(seen).collect();
    plan(&Input {
        cluster: "east",
        work: w,
        ready,
        manifests: &observed,
        leftovers,
    })
}

fn reason(p: &Plan, i: usize) -> Option<&str> {
    p.results[i].as_ref().err().map(|e| e.reason.as_str())
}

/// A manifest whose metadata or its maps are not objects (a non-conforming hub could
/// store one) gets them as objects, rather than a panic.
#[test]
fn a_malformed_manifest_metadata_does_not_panic() {
    for m in [
        json!({"kind": "ConfigMap", "metadata": {"name": "x", "labels": "x", "annotations": [1]}}),
        json!({"kind": "ConfigMap", "metadata": "x"}),
        json!({"kind": "ConfigMap"}),
    ] {
        let b = body(&m, W, None, DEFAULT_REPLICAS);
        assert_eq!(b["metadata"]["labels"][labels::MANAGED], "true", "{m}");
        assert_eq!(b["metadata"]["annotations"][annotations::WORK], W, "{m}");
    }
    assert_eq!(body(&json!("x"), W, None, DEFAULT_REPLICAS), json!("x"));
}

#[test]
fn the_body_is_labelled_annotated_and_hashed() {
    let m = deploy(2);
    let b = body(&m, W, None, DEFAULT_REPLICAS);
    assert_eq!(b["metadata"]["labels"][labels::MANAGED], "true");
    assert_eq!(b["metadata"]["annotations"][annotations::WORK], W);
    assert_eq!(
        b["metadata"]["annotations"][annotations::APPLIED_HASH],
        manifest_hash(&m)
    );
    assert_eq!(b["spec"]["replicas"], 2);
    // the hash ignores key order and follows every change
    let reordered: Value = serde_json::from_str(
        r#"{"spec": {"template": {"spec": {"containers": [{"image": "nginx", "name": "c"}]}}, "replicas": 2},
            "metadata": {"annotations": {"causeway.io/template-generation": "7"}, "namespace": "demo", "name": "web"},
            "kind": "Deployment", "apiVersion": "apps/v1"}"#,
    )
    .unwrap();
    assert_eq!(manifest_hash(&reordered), manifest_hash(&m));
    assert_ne!(manifest_hash(&deploy(3)), manifest_hash(&m));
    // server-set metadata and status never go into an apply
    let mut m2 = m.clone();
    m2["metadata"]["resourceVersion"] = json!("9");
    m2["metadata"]["uid"] = json!("hub-uid");
    m2["status"] = json!({"replicas": 1});
    let b2 = body(&m2, W, None, DEFAULT_REPLICAS);
    assert!(b2["metadata"].get("resourceVersion").is_none());
    assert!(b2["metadata"].get("uid").is_none());
    assert!(b2.get("status").is_none());
}

#[test]
fn retain_replicas_keeps_the_members_count_once_the_object_exists() {
    let mut m = deploy(2);
    m["metadata"]["labels"] = json!({labels::RETAIN_REPLICAS: "true"});
    assert_eq!(
        body(&m, W, None, DEFAULT_REPLICAS)["spec"]["replicas"],
        2,
        "set on create"
    );
    // the member's count is applied back (left out, server-side apply would remove the
    // field Causeway owns since the create)
    let scaled = json!({"metadata": {"resourceVersion": "41"}, "spec": {"replicas": 9}});
    let kept = body(&m, W, Some(&scaled), DEFAULT_REPLICAS);
    assert_eq!(kept["spec"]["replicas"], 9, "kept on update");
    // copied from what was read, so applied only if the object is still as read
    assert_eq!(kept["metadata"]["resourceVersion"], "41");
    // without retain-replicas no resourceVersion goes with the apply
    let plain = body(&deploy(2), W, Some(&scaled), DEFAULT_REPLICAS);
    assert!(plain["metadata"].get("resourceVersion").is_none());
    // none in the member: none applied
    assert!(
        body(&m, W, Some(&json!({"spec": {}})), DEFAULT_REPLICAS)["spec"]
            .get("replicas")
            .is_none()
    );
    // a kind whose interpreter keeps its count elsewhere: that one is the member's
    let mut gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "demo", "labels": {labels::RETAIN_REPLICAS: "true"}},
        "spec": {"replicas": 1, "workers": {"count": 3, "size": "m"}}});
    let theirs = json!({"spec": {"replicas": 7, "workers": {"count": 5}}});
    let b = body(&gadget, W, Some(&theirs), "/spec/workers/count");
    assert_eq!(
        b["spec"],
        json!({"replicas": 1, "workers": {"count": 5, "size": "m"}})
    );
    assert_eq!(
        body(&gadget, W, None, "/spec/workers/count")["spec"]["workers"]["count"],
        3
    );
    gadget["spec"] = json!({"a/b": {"n": 2}});
    let theirs = json!({"spec": {"a/b": {"n": 4}}});
    assert_eq!(
        body(&gadget, W, Some(&theirs), "/spec/a~1b/n")["spec"],
        json!({"a/b": {"n": 4}})
    );
    // an HPA scaled the member copy: nothing to write
    let mut member = applied(&m);
    member["spec"]["replicas"] = json!(9);
    let p = run(&work(vec![m]), true, vec![Some(member)], &[]);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.results, vec![Ok(())]);
    // the Gadget's operator scaled its workers in the member: kept, by the path its
    // Work's interpretation gives
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "demo", "labels": {labels::RETAIN_REPLICAS: "true"}},
        "spec": {"workers": {"count": 3}}});
    let mut w = work(vec![gadget.clone()]);
    w.spec.interpretations = vec![causeway_crds::federation::interpreter::Interpretation {
        group: "example.com".into(),
        kind: "Gadget".into(),
        interpreter: "gadgets".into(),
        replicas_path: Some("/spec/workers/count".into()),
        ..Default::default()
    }];
    let mut member = body(&gadget, W, None, DEFAULT_REPLICAS);
    member["spec"]["workers"]["count"] = json!(9);
    let p = run(&w, true, vec![Some(member)], &[]);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn applies_only_what_the_member_lacks() {
    let m = deploy(2);
    let w = work(vec![m.clone()]);
    // absent: created
    let p = run(&w, true, vec![None], &[]);
    assert_eq!(
        p.actions,
        vec![Action::Apply {
            ordinal: 0,
            body: body(&m, W, None, DEFAULT_REPLICAS),
            exists: false,
            dry_run_first: false,
            recreate: false,
            retained: None,
            adopt: false,
        }]
    );
    // present and containing it (member-added fields ignored): zero writes
    let p = run(&w, true, vec![Some(applied(&m))], &[]);
    assert!(p.actions.is_empty());
    assert_eq!(p.results, vec![Ok(())]);
    // a hand edit of a field Causeway set: reverted, no dry run (the manifest is unchanged)
    let mut edited = applied(&m);
    edited["spec"]["replicas"] = json!(5);
    let p = run(&w, true, vec![Some(edited)], &[]);
    assert!(matches!(
        &p.actions[..],
        [Action::Apply {
            exists: true,
            dry_run_first: false,
            adopt: false,
            ..
        }]
    ));
    // the manifest changed: dry run first; recreate only when the manifest allows it
    let mut changed = deploy(3);
    changed["metadata"]["annotations"][annotations::RECREATE_ON_IMMUTABLE] = json!("true");
    let p = run(&work(vec![changed]), true, vec![Some(applied(&m))], &[]);
    assert!(matches!(
        &p.actions[..],
        [Action::Apply {
            exists: true,
            dry_run_first: true,
            recreate: true,
            retained: None,
            ..
        }]
    ));
    // the member's count retained: the apply says where, so a stale read is read again
    let mut retain = deploy(2);
    retain["metadata"]["labels"] = json!({labels::RETAIN_REPLICAS: "true"});
    let mut scaled = applied(&m);
    scaled["spec"]["replicas"] = json!(7);
    let p = run(&work(vec![retain]), true, vec![Some(scaled)], &[]);
    match &p.actions[..] {
        [Action::Apply { body, retained, .. }] => {
            assert_eq!(retained.as_deref(), Some(DEFAULT_REPLICAS));
            assert_eq!(body["spec"]["replicas"], 7);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn conflicts_and_the_managed_label() {
    let m = deploy(2);
    let abort = work(vec![m.clone()]);
    let mut over = abort.clone();
    over.spec.conflict_resolution = Some(ConflictResolution::Overwrite);
    let mut over_annotated = m.clone();
    over_annotated["metadata"]["annotations"][annotations::CONFLICT_RESOLUTION] =
        json!("overwrite");
    let mut other_work = applied(&m);
    other_work["metadata"]["annotations"][annotations::WORK] = json!("causeway-es-east/other");
    // an invalid annotation is ignored for the Work's (the policy's) value, as the hub
    // rendered it (F.41), whichever way that goes
    let mut badly_annotated = m.clone();
    badly_annotated["metadata"]["annotations"][annotations::CONFLICT_RESOLUTION] =
        json!("yes please");
    let mut over_badly = work(vec![badly_annotated.clone()]);
    over_badly.spec.conflict_resolution = Some(ConflictResolution::Overwrite);
    let mut abort_annotated = m.clone();
    abort_annotated["metadata"]["annotations"][annotations::CONFLICT_RESOLUTION] = json!("Abort");
    let mut over_but_abort = work(vec![abort_annotated.clone()]);
    over_but_abort.spec.conflict_resolution = Some(ConflictResolution::Overwrite);
    let cases: Vec<(&str, Work, Value, Option<&str>)> = vec![
        (
            "unmanaged, Overwrite, invalid annotation",
            over_badly,
            unmanaged(&badly_annotated, None),
            None,
        ),
        (
            "unmanaged, Abort, invalid annotation",
            work(vec![badly_annotated.clone()]),
            unmanaged(&badly_annotated, None),
            Some(conditions::REASON_CONFLICT),
        ),
        (
            "unmanaged, Overwrite, annotated abort",
            over_but_abort,
            unmanaged(&abort_annotated, None),
            Some(conditions::REASON_CONFLICT),
        ),
        (
            "unmanaged, Abort",
            abort.clone(),
            unmanaged(&m, None),
            Some(conditions::REASON_CONFLICT),
        ),
        (
            "unmanaged, Overwrite",
            over.clone(),
            unmanaged(&m, None),
            None,
        ),
        (
            "unmanaged, annotated overwrite",
            work(vec![over_annotated.clone()]),
            unmanaged(&over_annotated, None),
            None,
        ),
        (
            "managed=false, Abort",
            abort.clone(),
            unmanaged(&m, Some("false")),
            Some(conditions::REASON_MANAGED_LABEL_FALSE),
        ),
        (
            "managed=false, Overwrite",
            over.clone(),
            unmanaged(&m, Some("false")),
            Some(conditions::REASON_MANAGED_LABEL_FALSE),
        ),
        (
            "another Work's",
            abort.clone(),
            other_work.clone(),
            Some(conditions::REASON_CONFLICT),
        ),
        ("another Work's, Overwrite", over.clone(), other_work, None),
    ];
    for (what, w, member, want) in cases {
        let p = run(&w, true, vec![Some(member)], &[]);
        assert_eq!(reason(&p, 0), want, "{what}");
        assert_eq!(
            p.actions.is_empty(),
            want.is_some(),
            "{what}: {:?}",
            p.actions
        );
        // what is taken over is handed over to Causeway alone once applied
        assert!(
            p.actions
                .iter()
                .all(|a| matches!(a, Action::Apply { adopt: true, .. })),
            "{what}: {:?}",
            p.actions
        );
    }
    let p = run(&abort, true, vec![Some(unmanaged(&m, None))], &[]);
    assert_eq!(
        p.results[0].as_ref().unwrap_err().message,
        "Deployment demo/web already exists in cluster east and is not managed by Causeway; set conflictResolution: Overwrite on the policy or annotate the template causeway.io/conflict-resolution=overwrite to adopt it"
    );
}

/// A namespace the hub made (labelled auto-namespace at creation) is any Work's to take
/// over; the hub's namespace Work creates a missing one and keeps those it made, and
/// leaves any other namespace as it is: the member's own, or another Work's.
#[test]
fn namespaces_made_by_the_hub_change_hands_without_conflict() {
    let ns = |auto: bool| {
        let mut v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
        if auto {
            v["metadata"]["labels"] = json!({labels::AUTO_NAMESPACE: "shop"});
        }
        v
    };
    let made = work(vec![ns(true)]);
    let policy = work(vec![ns(false)]);
    let deployment = work(vec![deploy(1)]);
    let mut by_made = body(
        &ns(true),
        "causeway-es-east/shop.namespace",
        None,
        DEFAULT_REPLICAS,
    );
    by_made["metadata"]["uid"] = json!("u1");
    let mut orphaned = by_made.clone();
    orphaned["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(labels::MANAGED);
    let mut by_policy = body(
        &ns(false),
        "causeway-es-east/shop-namespace",
        None,
        DEFAULT_REPLICAS,
    );
    by_policy["metadata"]["uid"] = json!("u2");
    let mut cm = deploy(1);
    cm["metadata"]["labels"] = json!({labels::AUTO_NAMESPACE: "shop"});
    /// What, the Work, the member object, the manifest's reason, whether it is applied.
    type Case<'a> = (&'a str, &'a Work, Option<Value>, Option<&'a str>, bool);
    let cases: Vec<Case> = vec![
        ("the hub's, none there", &made, None, None, true),
        (
            "the hub's, one it left",
            &made,
            Some(orphaned.clone()),
            None,
            true,
        ),
        (
            "the hub's, the member's own",
            &made,
            Some(ns(false)),
            None,
            false,
        ),
        (
            "the hub's, another Work's",
            &made,
            Some(by_policy),
            None,
            false,
        ),
        (
            "the hub's, the member's own labelled managed=false",
            &made,
            Some(unmanaged(&ns(false), Some("false"))),
            None,
            false,
        ),
        (
            "a policy's, one the hub made",
            &policy,
            Some(by_made),
            None,
            true,
        ),
        (
            "a policy's, one the hub left",
            &policy,
            Some(orphaned),
            None,
            true,
        ),
        (
            "a policy's, the member's own",
            &policy,
            Some(ns(false)),
            Some(conditions::REASON_CONFLICT),
            false,
        ),
        // only a Namespace changes hands so
        (
            "a Deployment labelled auto-namespace",
            &deployment,
            Some(cm),
            Some(conditions::REASON_CONFLICT),
            false,
        ),
    ];
    for (what, w, member, want, applies) in cases {
        let p = run(w, true, vec![member], &[]);
        assert_eq!(reason(&p, 0), want, "{what}");
        assert_eq!(!p.actions.is_empty(), applies, "{what}: {:?}", p.actions);
    }
}

#[test]
fn not_ready_suspended_unserved_and_leftovers() {
    let m = deploy(2);
    let w = work(vec![m.clone()]);
    let gone = applied(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "demo"}}),
    );
    // not Ready: nothing written, not even leftovers
    let p = run(&w, false, vec![None], std::slice::from_ref(&gone));
    assert!(p.actions.is_empty());
    assert_eq!(reason(&p, 0), Some(conditions::REASON_CLUSTER_NOT_READY));
    // suspended: nothing written; in sync is still applied, a difference is reported
    let mut s = w.clone();
    s.spec.suspend_dispatching = Some(true);
    let p = run(
        &s,
        true,
        vec![Some(applied(&m))],
        std::slice::from_ref(&gone),
    );
    assert!(p.actions.is_empty());
    assert_eq!(p.results, vec![Ok(())]);
    let p = run(&s, true, vec![None], &[]);
    assert_eq!(reason(&p, 0), Some(conditions::REASON_SUSPEND_DISPATCHING));
    // a kind the member does not serve
    let observed = [Observed {
        served: Err("cluster east does not serve Deployment in apps/v1".into()),
        found: Ok(None),
    }];
    let p = plan(&Input {
        cluster: "east",
        work: &w,
        ready: true,
        manifests: &observed,
        leftovers: &[],
    });
    assert_eq!(reason(&p, 0), Some(conditions::REASON_APPLIED_FAILED));
    // a manifest removed from the Work: its object is deleted, unless already leaving
    let p = run(
        &w,
        true,
        vec![Some(applied(&m))],
        std::slice::from_ref(&gone),
    );
    assert_eq!(p.actions, vec![Action::Delete(ObjRef::of(&gone), None)]);
    let mut leaving = gone.clone();
    leaving["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(
        run(&w, true, vec![Some(applied(&m))], &[leaving])
            .actions
            .is_empty()
    );
}

#[test]
fn deletion_deletes_only_causeways_objects_then_releases() {
    let m = deploy(2);
    let mut w = work(vec![m.clone(), deploy(1)]);
    w.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let ours = applied(&m);
    let theirs = unmanaged(&m, None);
    let mut leaving = ours.clone();
    leaving["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    // ours deleted, theirs never; not released while anything of ours is there
    let p = run(
        &w,
        true,
        vec![Some(ours.clone()), Some(theirs.clone())],
        &[],
    );
    assert!(p.deleting);
    assert_eq!(p.actions, vec![Action::Delete(ObjRef::of(&ours), Some(0))]);
    assert!(!p.release);
    // terminating: waiting
    let p = run(&w, true, vec![Some(leaving), None], &[]);
    assert!(p.actions.is_empty());
    assert_eq!(reason(&p, 0), Some(conditions::REASON_WAITING_FOR_REMOVAL));
    assert!(!p.release);
    // all gone (or never ours): released
    let p = run(&w, true, vec![None, Some(theirs)], &[]);
    assert!(p.actions.is_empty() && p.release);
    // not Ready: nothing written, nothing released
    let p = run(&w, false, vec![Some(ours.clone()), None], &[]);
    assert!(p.actions.is_empty() && !p.release);
    // preserveResourcesOnDeletion: orphaned and released at once
    w.spec.preserve_resources_on_deletion = Some(true);
    let p = run(
        &w,
        true,
        vec![Some(ours.clone()), None],
        std::slice::from_ref(&ours),
    );
    assert_eq!(
        p.actions,
        vec![
            Action::Orphan(ObjRef::of(&ours), Some(0)),
            Action::Orphan(ObjRef::of(&ours), None)
        ]
    );
    assert!(p.release);
    // ... but one that could not be read is not orphaned yet: kept until it is (G.46)
    let unread = vec![
        Observed {
            served: served(),
            found: Err(NotApplied::new(
                conditions::REASON_DELETION_TIMED_OUT,
                "reading it timed out",
            )),
        },
        seen(None),
    ];
    let p = plan(&Input {
        cluster: "east",
        work: &w,
        ready: true,
        manifests: &unread,
        leftovers: &[],
    });
    assert_eq!(reason(&p, 0), Some(conditions::REASON_DELETION_TIMED_OUT));
    assert!(!p.release);
}

/// Degraded is True while an object is Unhealthy, and keeps the time it became so
/// while it stays so (application failover times it).
#[test]
fn degraded_says_since_when_an_object_is_unhealthy() {
    let d = deploy(2);
    let mut w = work(vec![d.clone()]);
    let observed = vec![seen(None)];
    let mut crashing = applied(&d);
    crashing["status"]["availableReplicas"] = json!(0);
    let outcome = |object: Value| {
        vec![Outcome {
            result: Ok(()),
            object: Some(object),
        }]
    };
    let degraded = |st: &causeway_crds::federation::work::WorkStatus| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::DEGRADED)
            .unwrap()
            .clone();
        (c.status, c.reason, c.message, c.last_transition_time)
    };
    fn input<'a>(w: &'a Work, observed: &'a [Observed]) -> Input<'a> {
        Input {
            cluster: "east",
            work: w,
            ready: true,
            manifests: observed,
            leftovers: &[],
        }
    }
    let t1 = Time(jiff::Timestamp::from_second(100).unwrap());
    let t2 = Time(jiff::Timestamp::from_second(400).unwrap());
    let st = status(&input(&w, &observed), &outcome(crashing.clone()), &[], &t1);
    assert_eq!(
        degraded(&st),
        (
            "True".to_string(),
            conditions::REASON_RESOURCES_UNHEALTHY.to_string(),
            "unhealthy in cluster east: manifest 0 (Deployment demo/web)".to_string(),
            t1.clone()
        )
    );
    w.status = Some(st);
    // still crashing later: the time it became unhealthy stays
    let st = status(&input(&w, &observed), &outcome(crashing), &[], &t2);
    assert_eq!(degraded(&st).3, t1);
    w.status = Some(st);
    // a new replica count alone (a new Work generation, the same template) keeps it
    let mut next = w.clone();
    next.metadata.generation = Some(w.metadata.generation.unwrap_or(0) + 1);
    let mut still = applied(&deploy(3));
    still["status"]["availableReplicas"] = json!(0);
    let st_next = status(&input(&next, &observed), &outcome(still.clone()), &[], &t2);
    assert_eq!(degraded(&st_next).3, t1);
    // a new template generation starts the clock again
    let mut newer = still.clone();
    newer["metadata"]["annotations"][annotations::TEMPLATE_GENERATION] = json!("8");
    let st_next = status(&input(&next, &observed), &outcome(newer.clone()), &[], &t2);
    assert_eq!(degraded(&st_next).3, t2);
    // also when its first apply failed (the member still ran the old template) and a
    // later one, at the same Work generation, lands
    let t3 = Time(jiff::Timestamp::from_second(700).unwrap());
    let failed = status(&input(&next, &observed), &outcome(still), &[], &t2);
    assert_eq!(degraded(&failed).3, t1, "still the old template");
    next.status = Some(failed);
    let landed = status(&input(&next, &observed), &outcome(newer), &[], &t3);
    assert_eq!(degraded(&landed).3, t3);
    // available again: False from then on
    let st = status(&input(&w, &observed), &outcome(applied(&d)), &[], &t2);
    assert_eq!((degraded(&st).0.as_str(), degraded(&st).3), ("False", t2));
}

/// An object no manifest names any more whose removal failed gets a status of its own
/// (ordinal -1, not applied, saying why), and makes the Work not Applied; the manifests'
/// count and the Work's health leave it out.
#[test]
fn a_failed_removal_is_reported_until_it_is_done() {
    let ok = deploy(2);
    let w = work(vec![ok.clone()]);
    let observed: Vec<Observed> = vec![seen(None)];
    let input = Input {
        cluster: "east",
        work: &w,
        ready: true,
        manifests: &observed,
        leftovers: &[],
    };
    let now = Time(jiff::Timestamp::from_second(100).unwrap());
    let outcomes = vec![Outcome {
        result: Ok(()),
        object: Some(applied(&ok)),
    }];
    let gone = ObjRef::of(&json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "old", "namespace": "demo"}}));
    let refused = NotApplied::new(
        conditions::REASON_DELETION_TIMED_OUT,
        "deleting v1/Secret demo/old: denied by a webhook",
    );
    let st = status(&input, &outcomes, &[(gone, refused)], &now);
    assert_eq!(st.manifest_statuses.len(), 2);
    let r = &st.manifest_statuses[1];
    assert!(!r.is_manifest());
    assert_eq!(
        (
            r.identifier.ordinal,
            r.identifier.kind.as_str(),
            r.identifier.name.as_str()
        ),
        (-1, "Secret", "old")
    );
    assert_eq!(r.applied, Some(false));
    assert!(
        r.message
            .as_deref()
            .is_some_and(|m| m.contains("no manifest names it any more")
                && m.contains("denied by a webhook")),
        "{:?}",
        r.message
    );
    let applied_c = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::APPLIED)
        .unwrap();
    assert_eq!(applied_c.status, "False");
    assert!(
        applied_c
            .message
            .contains("which no manifest names any more"),
        "{}",
        applied_c.message
    );
    let available = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::AVAILABLE)
        .unwrap();
    assert_eq!(
        (available.status.as_str(), available.message.as_str()),
        ("True", "all 1 manifests are healthy in cluster east")
    );
    // done: gone from the status
    let st = status(&input, &outcomes, &[], &now);
    assert!(st.manifest_statuses.iter().all(|m| m.is_manifest()));
}

#[test]
fn status_reports_each_manifest_and_the_conditions() {
    let ok = deploy(2);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "demo"}});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "demo"}});
    let w = work(vec![ok.clone(), cm.clone(), job.clone()]);
    let observed: Vec<Observed> = vec![seen(None), seen(None), seen(None)];
    let input = Input {
        cluster: "east",
        work: &w,
        ready: true,
        manifests: &observed,
        leftovers: &[],
    };
    let now = Time(jiff::Timestamp::from_second(100).unwrap());
    let immutable = NotApplied::new(
        conditions::REASON_IMMUTABLE_FIELD,
        "spec.completions: field is immutable",
    );
    let timed_out = NotApplied::new(
        conditions::REASON_CREATION_TIMED_OUT,
        "no answer within 10000 ms",
    );
    let outcomes = vec![
        Outcome {
            result: Ok(()),
            object: Some(applied(&ok)),
        },
        Outcome {
            result: Err(immutable),
            object: Some(applied(&cm)),
        },
        Outcome {
            result: Err(timed_out),
            object: None,
        },
    ];
    let st = status(&input, &outcomes, &[], &now);
    let m0 = &st.manifest_statuses[0];
    assert_eq!(m0.identifier.group, "apps");
    assert_eq!(m0.identifier.resource, "deployments");
    assert_eq!(
        (m0.applied, m0.generation, m0.template_generation),
        (Some(true), Some(3), Some(7))
    );
    assert_eq!(m0.health, Some(ResourceHealth::Healthy));
    assert_eq!(
        m0.status,
        Some(json!({"observedGeneration": 3, "updatedReplicas": 2, "availableReplicas": 2}))
    );
    assert_eq!(
        st.manifest_statuses[1].reason.as_deref(),
        Some(conditions::REASON_IMMUTABLE_FIELD)
    );
    assert_eq!(
        st.manifest_statuses[2].health,
        Some(ResourceHealth::Unknown)
    );
    let applied_c = &st.conditions[0];
    assert_eq!(
        (applied_c.status.as_str(), applied_c.reason.as_str()),
        ("False", conditions::REASON_IMMUTABLE_FIELD)
    );
    assert_eq!(applied_c.observed_generation, Some(4));
    assert!(
        applied_c
            .message
            .contains("manifest 1 (ConfigMap demo/cfg)"),
        "{}",
        applied_c.message
    );
    assert!(
        applied_c
            .message
            .contains("manifest 2 (Job demo/j): no answer"),
        "{}",
        applied_c.message
    );
    assert_eq!(st.conditions[1].status, "False");
    assert_eq!(st.conditions[2].reason, REASON_DISPATCHING);
    // the Job's health is unknown, not unhealthy: not degraded
    assert_eq!(st.conditions[3].status, "False");
    // all applied and healthy: True, and the transition time stays put
    let mut w2 = work(vec![ok.clone(), cm.clone()]);
    let observed = vec![seen(None), seen(None)];
    let good = vec![
        Outcome {
            result: Ok(()),
            object: Some(applied(&ok)),
        },
        Outcome {
            result: Ok(()),
            object: Some(applied(&cm)),
        },
    ];
    let input = Input {
        cluster: "east",
        work: &w2,
        ready: true,
        manifests: &observed,
        leftovers: &[],
    };
    let st = status(&input, &good, &[], &now);
    assert_eq!(
        st.conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (
                conditions::APPLIED,
                "True",
                conditions::REASON_APPLIED_SUCCESSFUL
            ),
            (
                conditions::AVAILABLE,
                "True",
                conditions::REASON_RESOURCES_AVAILABLE
            ),
            (conditions::DISPATCHING, "True", REASON_DISPATCHING),
            (
                conditions::DEGRADED,
                "False",
                conditions::REASON_NO_RESOURCES_UNHEALTHY
            ),
        ]
    );
    w2.status = Some(st.clone());
    w2.spec.suspend_dispatching = Some(true);
    let later = Time(jiff::Timestamp::from_second(200).unwrap());
    let input = Input {
        cluster: "east",
        work: &w2,
        ready: true,
        manifests: &observed,
        leftovers: &[],
    };
    let st2 = status(&input, &good, &[], &later);
    assert_eq!(st2.conditions[0].last_transition_time, now);
    assert_eq!(
        (
            st2.conditions[2].status.as_str(),
            st2.conditions[2].reason.as_str(),
            &st2.conditions[2].last_transition_time
        ),
        ("False", conditions::REASON_SUSPEND_DISPATCHING, &later)
    );
}

/// A cluster that is not Ready cannot be read: its Work keeps what the copy reported
/// last (status, generations), not applied, health Unknown; a manifest that is not the
/// same object any more gets nothing of the old one's.
#[test]
fn a_not_ready_cluster_keeps_its_copys_last_status() {
    let d = deploy(2);
    let mut w = work(vec![d.clone()]);
    let observed = vec![seen(None)];
    let now = Time(jiff::Timestamp::from_second(100).unwrap());
    fn input<'a>(w: &'a Work, ready: bool, observed: &'a [Observed]) -> Input<'a> {
        Input {
            cluster: "east",
            work: w,
            ready,
            manifests: observed,
            leftovers: &[],
        }
    }
    let reported = status(
        &input(&w, true, &observed),
        &[Outcome {
            result: Ok(()),
            object: Some(applied(&d)),
        }],
        &[],
        &now,
    );
    w.status = Some(reported.clone());
    let gone = Outcome {
        result: Err(NotApplied::new(
            conditions::REASON_CLUSTER_NOT_READY,
            "cluster east is not Ready",
        )),
        object: None,
    };
    let st = status(
        &input(&w, false, &observed),
        std::slice::from_ref(&gone),
        &[],
        &now,
    );
    let (was, is) = (&reported.manifest_statuses[0], &st.manifest_statuses[0]);
    assert_eq!(is.status, was.status);
    assert_eq!(is.status.as_ref().unwrap()["availableReplicas"], 2);
    assert_eq!(
        (is.generation, is.template_generation),
        (was.generation, was.template_generation)
    );
    assert_eq!(is.applied, Some(false));
    assert_eq!(is.health, Some(ResourceHealth::Unknown));
    // another object at that place: not the old one's status
    let mut other = deploy(2);
    other["metadata"]["name"] = json!("api");
    let w2 = Work {
        spec: work(vec![other]).spec,
        ..w.clone()
    };
    let st = status(&input(&w2, false, &observed), &[gone], &[], &now);
    assert_eq!(st.manifest_statuses[0].status, None);
}

#[test]
fn taking_over_drops_the_other_managers_main_resource_entries() {
    use causeway_crds::well_known::FIELD_MANAGER;
    let entry = |manager: &str, sub: Option<&str>| {
        let mut e = json!({"manager": manager, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}});
        if let Some(s) = sub {
            e["subresource"] = json!(s);
        }
        e
    };
    let obj = |entries: Vec<Value>| json!({"metadata": {"name": "x", "managedFields": entries}});
    let mine = entry(FIELD_MANAGER, None);
    let cases = [
        // made by kubectl, applied by Causeway: kubectl's entry goes
        (
            vec![entry("kubectl", None), mine.clone()],
            Some(vec![mine.clone()]),
        ),
        // the members' controllers' status and scale entries stay
        (
            vec![
                entry("kubectl", None),
                mine.clone(),
                entry("kube-controller-manager", Some("status")),
                entry("hpa", Some("scale")),
            ],
            Some(vec![
                mine.clone(),
                entry("kube-controller-manager", Some("status")),
                entry("hpa", Some("scale")),
            ]),
        ),
        // Causeway's alone already, or nothing of Causeway's: no write
        (vec![mine.clone()], None),
        (vec![mine.clone(), entry("x", Some("status"))], None),
        (vec![entry("kubectl", None)], None),
        (vec![], None),
    ];
    for (entries, want) in cases {
        assert_eq!(others_dropped(&obj(entries.clone())), want, "{entries:?}");
    }
    assert_eq!(others_dropped(&json!({"metadata": {"name": "x"}})), None);
}
