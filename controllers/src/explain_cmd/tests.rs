use std::collections::BTreeMap;

use causeway_crds::federation::binding::{
    AggregatedStatusItem, BindingSpec, BindingStatus, SchedulingReason, TargetCluster,
};
use causeway_crds::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use causeway_crds::federation::work::{
    Manifest, ManifestStatus, ResourceHealth, ResourceIdentifier, Work, WorkSpec, WorkStatus,
    WorkloadTemplate,
};
use causeway_crds::well_known::annotations;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::diff::{diff, leaves, provenance_of};
use super::target::{Kind, Target, resolve};
use super::*;

#[test]
fn targets_parse_as_kind_slash_name() {
    let ok = |k: &str, n: &str| {
        Ok(Target {
            kind: k.into(),
            name: n.into(),
        })
    };
    let cases = [
        ("deployment/shop", ok("deployment", "shop")),
        ("deployments.apps/shop", ok("deployments.apps", "shop")),
    ];
    for (arg, want) in cases {
        assert_eq!(Target::parse(arg), want, "{arg}");
    }
    for bad in ["shop", "deployment/", "/shop", "a/b/c", ""] {
        let e = Target::parse(bad).unwrap_err();
        assert!(e.contains("is not <kind>/<name>"), "{bad}: {e}");
    }
}

fn kind(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
    Kind::new(group, version, kind, plural, namespaced)
}

#[test]
fn kinds_resolve_like_kubectl() {
    let served = [
        kind("events.k8s.io", "v1", "Event", "events", true),
        kind("", "v1", "Event", "events", true),
        kind("apps", "v1", "Deployment", "deployments", true),
        kind(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
        ),
        kind("", "v1", "ConfigMap", "configmaps", true),
    ];
    let cases = [
        ("deployment", Some(("apps", "Deployment"))),
        ("Deployment", Some(("apps", "Deployment"))),
        ("deployments", Some(("apps", "Deployment"))),
        ("deployments.apps", Some(("apps", "Deployment"))),
        ("deployment.apps", Some(("apps", "Deployment"))),
        ("deployments.v1.apps", Some(("apps", "Deployment"))),
        ("configmaps.v1", Some(("", "ConfigMap"))),
        // kube-apiserver's short names, as kubectl takes them
        ("deploy", Some(("apps", "Deployment"))),
        ("cm", Some(("", "ConfigMap"))),
        ("ev", Some(("", "Event"))),
        ("sts", None),
        (
            "clusterrole",
            Some(("rbac.authorization.k8s.io", "ClusterRole")),
        ),
        // served by two groups: the core group's, unless the group is named
        ("events", Some(("", "Event"))),
        ("events.events.k8s.io", Some(("events.k8s.io", "Event"))),
        ("deployments.batch", None),
        ("widgets", None),
    ];
    for (query, want) in cases {
        let got = resolve(query, &served);
        match want {
            Some((group, k)) => {
                let got = got.unwrap_or_else(|e| panic!("{query}: {e}"));
                assert_eq!(
                    (got.resource.group.as_str(), got.resource.kind.as_str()),
                    (group, k),
                    "{query}"
                );
            }
            None => {
                let e = got.unwrap_err();
                assert!(
                    e.contains(&format!("no resource type {query:?}"))
                        && e.contains("kubectl api-resources"),
                    "{query}: {e}"
                );
            }
        }
    }
    assert!(!resolve("clusterroles", &served).unwrap().namespaced);
}

#[test]
fn the_diff_lists_each_changed_leaf_and_skips_what_the_server_set() {
    let t = json!({
        "metadata": {"name": "shop", "uid": "u1", "resourceVersion": "7", "generation": 2,
            "managedFields": [{}], "finalizers": ["causeway.io/propagation"], "labels": {"app": "shop"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
        "status": {"readyReplicas": 3},
    });
    let m = json!({
        "metadata": {"name": "shop", "labels": {"app": "shop", "tier": "web"}, "annotations": {"a": "1"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "mirror/nginx:1"}, {"name": "side", "image": "envoy"}]}}},
    });
    let got: Vec<(String, Option<Value>, Option<Value>)> = diff(&t, &m, &BTreeMap::new(), None)
        .into_iter()
        .map(|c| (c.pointer, c.template, c.member))
        .collect();
    let want = vec![
        ("/metadata/annotations/a", None, Some(json!("1"))),
        ("/metadata/labels/tier", None, Some(json!("web"))),
        ("/spec/replicas", Some(json!(3)), None),
        (
            "/spec/template/spec/containers/0/image",
            Some(json!("nginx:1")),
            Some(json!("mirror/nginx:1")),
        ),
        (
            "/spec/template/spec/containers/1/image",
            None,
            Some(json!("envoy")),
        ),
        (
            "/spec/template/spec/containers/1/name",
            None,
            Some(json!("side")),
        ),
    ];
    let want: Vec<_> = want
        .into_iter()
        .map(|(p, a, b)| (p.to_string(), a, b))
        .collect();
    assert_eq!(got, want);
    assert!(diff(&t, &t, &BTreeMap::new(), None).is_empty());
    // leaves alone compares everything
    assert_eq!(leaves(&t, &t), vec![]);
}

#[test]
fn each_change_names_its_source() {
    let t = json!({"metadata": {"name": "shop", "labels": {"app": "shop"}},
        "spec": {"replicas": 4, "template": {"spec": {"containers": [{"image": "nginx:1", "args": ["a"]}]}}}});
    let m = json!({"metadata": {"name": "shop", "labels": {"app": "shop", "causeway.io/managed": "true", "env": "prod"},
            "annotations": {"causeway.io/template-generation": "2"}},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"image": "mirror/nginx:1", "args": ["b", "c"]}]}}}});
    let prov: BTreeMap<String, String> = [
        // a pointer, the form the renderer writes
        (
            "/spec/template/spec/containers/0/image",
            "OverridePolicy demo/shop rule 0 imageOverrider",
        ),
        // an override of a whole list: its items are attributed to it
        (
            "/spec/template/spec/containers/0/args",
            "ClusterOverridePolicy all rule 1 argsOverrider",
        ),
        // a display path is understood too
        (
            "metadata.labels.env",
            "OverridePolicy demo/shop rule 1 labelsOverrider",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let got: Vec<(String, String)> = diff(&t, &m, &prov, Some("/spec/replicas"))
        .into_iter()
        .map(|c| (c.path, c.source))
        .collect();
    let want = [
        (
            "metadata.annotations[\"causeway.io/template-generation\"]",
            "added by Causeway: the template generation it was rendered from",
        ),
        (
            "metadata.labels[\"causeway.io/managed\"]",
            "added by Causeway",
        ),
        (
            "metadata.labels.env",
            "set by OverridePolicy demo/shop rule 1 labelsOverrider",
        ),
        (
            "spec.replicas",
            "set by Causeway: this cluster's share of the replicas (binding spec.clusters)",
        ),
        (
            "spec.template.spec.containers[0].args[0]",
            "set by ClusterOverridePolicy all rule 1 argsOverrider",
        ),
        (
            "spec.template.spec.containers[0].args[1]",
            "set by ClusterOverridePolicy all rule 1 argsOverrider",
        ),
        (
            "spec.template.spec.containers[0].image",
            "set by OverridePolicy demo/shop rule 0 imageOverrider",
        ),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(got, want);
    // replicas not divided and no override: Causeway cannot say more than that
    let undivided = diff(&t, &m, &BTreeMap::new(), None);
    let replicas = undivided
        .iter()
        .find(|c| c.pointer == "/spec/replicas")
        .unwrap();
    assert_eq!(
        replicas.source,
        "changed by Causeway (no override recorded)"
    );
    // a kind whose interpreter keeps the count elsewhere: the share is labelled there,
    // and spec.replicas is not this cluster's share
    let mut gt = t.clone();
    let mut gm = m.clone();
    gt["spec"]["workers"] = json!({"count": 9});
    gm["spec"]["workers"] = json!({"count": 3});
    let got = diff(&gt, &gm, &BTreeMap::new(), Some("/spec/workers/count"));
    let source = |p: &str| {
        got.iter()
            .find(|c| c.pointer == p)
            .map(|c| c.source.clone())
    };
    assert_eq!(
        source("/spec/workers/count").as_deref(),
        Some("set by Causeway: this cluster's share of the replicas (binding spec.clusters)")
    );
    assert_eq!(
        source("/spec/replicas").as_deref(),
        Some("changed by Causeway (no override recorded)")
    );
}

#[test]
fn provenance_annotation_per_manifest_ordinal() {
    let a = r#"{"0": {"/spec/x": "OverridePolicy demo/a rule 0 plaintext"}, "1": {"/spec/y": {"rule": 2}}}"#;
    let p0 = provenance_of(Some(a), 0).unwrap();
    assert_eq!(
        p0.get("/spec/x").map(String::as_str),
        Some("OverridePolicy demo/a rule 0 plaintext")
    );
    let p1 = provenance_of(Some(a), 1).unwrap();
    assert_eq!(p1.get("/spec/y").map(String::as_str), Some(r#"{"rule":2}"#));
    assert!(provenance_of(Some(a), 2).unwrap().is_empty());
    assert!(provenance_of(None, 0).unwrap().is_empty());
    let e = provenance_of(Some("not json"), 0).unwrap_err();
    assert!(e.contains(annotations::PROVENANCE), "{e}");
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: None,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ),
    }
}

fn work(cluster: &str, manifest: Value, prov: Option<&str>, status: Option<WorkStatus>) -> Work {
    let mut w = Work::new(
        "demo.shop-deployment",
        WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![
                    Manifest(json!({"kind": "ConfigMap", "metadata": {"name": "other"}})),
                    Manifest(manifest),
                ],
            },
            ..WorkSpec::default()
        },
    );
    w.metadata.namespace = Some(format!("causeway-es-{cluster}"));
    if let Some(p) = prov {
        w.metadata.annotations =
            Some([(annotations::PROVENANCE.to_string(), p.to_string())].into());
    }
    w.status = status;
    w
}

fn manifest_status(applied: bool, reason: Option<&str>, health: ResourceHealth) -> WorkStatus {
    WorkStatus {
        manifest_statuses: vec![ManifestStatus {
            identifier: ResourceIdentifier {
                ordinal: 1,
                kind: "Deployment".into(),
                name: "shop".into(),
                ..ResourceIdentifier::default()
            },
            applied: Some(applied),
            reason: reason.map(str::to_string),
            message: reason.map(|_| "deployment demo/shop exists in the member and is not Causeway's: set conflictResolution Overwrite to take it over".to_string()),
            health: Some(health),
            ..ManifestStatus::default()
        }],
        ..WorkStatus::default()
    }
}

#[test]
fn report_per_cluster_with_reasons_diff_and_status() {
    let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "demo", "uid": "u"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
    let mut east = template.clone();
    east["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("mirror.us.example.com/nginx:1.27");
    east["metadata"]["annotations"] = json!({"causeway.io/template-generation": "1"});
    east.as_object_mut().unwrap().remove("status");
    let mut west = template.clone();
    west["metadata"]["annotations"] = json!({"causeway.io/template-generation": "1"});
    let prov = r#"{"1": {"/spec/template/spec/containers/0/image": "OverridePolicy demo/shop rule 0 imageOverrider"}}"#;
    let works = [
        work(
            "east",
            east,
            Some(prov),
            Some(manifest_status(true, None, ResourceHealth::Healthy)),
        ),
        work(
            "west",
            west,
            None,
            Some(manifest_status(
                false,
                Some("ResourceConflict"),
                ResourceHealth::Unknown,
            )),
        ),
    ];
    let spec = BindingSpec {
        clusters: vec![
            TargetCluster {
                name: "east".into(),
                replicas: Some(3),
            },
            TargetCluster {
                name: "west".into(),
                replicas: Some(3),
            },
            TargetCluster {
                name: "south".into(),
                replicas: Some(3),
            },
            TargetCluster {
                name: "central".into(),
                replicas: Some(3),
            },
        ],
        ..BindingSpec::default()
    };
    let status = BindingStatus {
        conditions: vec![
            condition("Scheduled", "True", "Success", "scheduled to 3 cluster(s)"),
            condition(
                "FullyApplied",
                "False",
                "NotAllApplied",
                "west: ResourceConflict",
            ),
        ],
        scheduling_reasons: vec![SchedulingReason {
            cluster: "north".into(),
            reason: "region eu-north not in [us-east us-west]".into(),
        }],
        aggregated_status: vec![
            AggregatedStatusItem {
                cluster_name: "east".into(),
                applied: true,
                ..Default::default()
            },
            // the hub's verdict for a cluster whose overrides failed: it has no Work
            AggregatedStatusItem {
                cluster_name: "central".into(),
                applied: false,
                applied_message: Some("ApplyOverridesFailed: OverridePolicy demo/shop rule 1, plaintext[0]: cannot remove /spec/x: it does not exist in the manifest; fix the path, or use add to create it".into()),
                ..Default::default()
            },
        ],
        rollout: None,
        redistribution: None,
        last_scheduled_time: None,
    };
    let labels: BTreeMap<String, String> = [
        ("causeway.io/policy-name".to_string(), "shop".to_string()),
        (
            "causeway.io/policy-namespace".to_string(),
            "demo".to_string(),
        ),
    ]
    .into();
    let clusters = ["central", "east", "north", "south", "west"].map(String::from);
    let report = explain(&Inputs {
        template: &template,
        describe: "Deployment demo/shop".into(),
        binding_ref: "ResourceBinding demo/shop-deployment".into(),
        binding_labels: &labels,
        spec: &spec,
        status: Some(&status),
        works: &works,
        clusters: &clusters,
    });
    let out = text(&report);
    let want = r#"Deployment demo/shop
  binding: ResourceBinding demo/shop-deployment, claimed by PropagationPolicy demo/shop
  Scheduled: True (Success): scheduled to 3 cluster(s)
  FullyApplied: False (NotAllApplied): west: ResourceConflict

central: chosen, 3 replica(s)
  note: the binding says it is not applied: ApplyOverridesFailed: OverridePolicy demo/shop rule 1, plaintext[0]: cannot remove /spec/x: it does not exist in the manifest; fix the path, or use add to create it

east: chosen, 3 replica(s)
  work: causeway-es-east/demo.shop-deployment
  metadata.annotations["causeway.io/template-generation"]: <none> → "1"  (added by Causeway: the template generation it was rendered from)
  spec.template.spec.containers[0].image: "nginx:1.27" → "mirror.us.example.com/nginx:1.27"  (set by OverridePolicy demo/shop rule 0 imageOverrider)
  applied: yes, health: Healthy

north: not chosen: region eu-north not in [us-east us-west]

south: chosen, 3 replica(s)
  note: no Work yet: the hub has not rendered the template for this cluster (is `causeway controller` running? see the binding's conditions)

west: chosen, 3 replica(s)
  work: causeway-es-west/demo.shop-deployment
  metadata.annotations["causeway.io/template-generation"]: <none> → "1"  (added by Causeway: the template generation it was rendered from)
  applied: no (ResourceConflict: deployment demo/shop exists in the member and is not Causeway's: set conflictResolution Overwrite to take it over), health: Unknown
"#;
    assert_eq!(out, want, "got:\n{out}");
    // --output json carries the same facts
    let j = serde_json::to_value(&report).unwrap();
    assert_eq!(
        j["clusters"][1]["changes"][1]["member"],
        json!("mirror.us.example.com/nginx:1.27")
    );
    assert_eq!(j["clusters"][2]["chosen"], json!(false));
    assert_eq!(j["clusters"][4]["appliedReason"], json!("ResourceConflict"));
    assert_eq!(j["policy"], json!("PropagationPolicy demo/shop"));
}

#[test]
fn clusters_an_ordered_rollout_holds_are_explained() {
    let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "uid": "u", "generation": 3},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.29"}]}}}});
    let at = |image: &str, generation: &str| {
        let mut m = template.clone();
        m["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        m["metadata"]["annotations"] = json!({"causeway.io/template-generation": generation});
        m.as_object_mut().unwrap().remove("status");
        m
    };
    let works = [
        work(
            "east",
            at("nginx:1.29", "3"),
            None,
            Some(manifest_status(true, None, ResourceHealth::Unhealthy)),
        ),
        work(
            "west",
            at("nginx:1.27", "1"),
            None,
            Some(manifest_status(true, None, ResourceHealth::Healthy)),
        ),
    ];
    let spec = BindingSpec {
        clusters: ["east", "west", "north"]
            .map(|n| TargetCluster {
                name: n.into(),
                replicas: None,
            })
            .to_vec(),
        rollout: Some(
            serde_json::from_value(json!({"waves": [{"clusterNames": ["east"]}]})).unwrap(),
        ),
        ..BindingSpec::default()
    };
    let status = BindingStatus {
        conditions: vec![condition(
            "RolledOut",
            "False",
            "WaveInProgress",
            "wave 1 of 2 (wave-1) is rolling out template generation 3, waiting for east: Deployment web is unhealthy; held at what they run until then: north, west",
        )],
        ..Default::default()
    };
    let labels = BTreeMap::new();
    let clusters = ["east", "north", "west"].map(String::from);
    let report = explain(&Inputs {
        template: &template,
        describe: "Deployment demo/web".into(),
        binding_ref: "ResourceBinding demo/web-deployment".into(),
        binding_labels: &labels,
        spec: &spec,
        status: Some(&status),
        works: &works,
        clusters: &clusters,
    });
    let notes = |c: &str| notes_of(&report, c);
    assert!(notes("east").is_empty(), "{:?}", notes("east"));
    assert_eq!(
        notes("west"),
        vec!["held by the ordered rollout (spec.rollout) at template generation 1 (the template is at 3): the differences above are the older generation's; its wave starts once the waves before it run the new one (the binding's RolledOut condition says which cluster it waits for)".to_string()]
    );
    assert_eq!(
        notes("north"),
        vec!["no Work yet: the ordered rollout (spec.rollout) has not reached this cluster's wave; the binding's RolledOut condition says which cluster it waits for".to_string()]
    );
    assert!(text(&report).contains("RolledOut: False (WaveInProgress): wave 1 of 2"));
}

/// The inputs for Deployment demo/shop, its binding unlabelled.
fn shop<'a>(
    template: &'a Value,
    spec: &'a BindingSpec,
    status: Option<&'a BindingStatus>,
    works: &'a [Work],
    clusters: &'a [String],
) -> Inputs<'a> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    Inputs {
        template,
        describe: "Deployment demo/shop".into(),
        binding_ref: "ResourceBinding demo/shop-deployment".into(),
        binding_labels: &NO_LABELS,
        spec,
        status,
        works,
        clusters,
    }
}

#[test]
fn a_work_left_for_a_cluster_not_chosen_and_an_unknown_cluster_are_noted() {
    let template = json!({"kind": "Deployment", "metadata": {"name": "shop"}});
    let works = [work("gone", template.clone(), None, None)];
    let spec = BindingSpec::default();
    let report = explain(&shop(&template, &spec, None, &works, &[]));
    let out = text(&report);
    assert!(out.contains("claimed by no policy"), "{out}");
    assert!(
        out.contains(
            "gone: not chosen: not in the binding's scheduling result (no reason recorded)"
        ),
        "{out}"
    );
    assert!(
        out.contains("note: there is no Cluster of this name on the hub"),
        "{out}"
    );
    assert!(out.contains("note: its Work is still there"), "{out}");
    assert!(out.contains("no differences from the template"), "{out}");
    assert!(
        out.contains("note: the member has not reported on its Work yet"),
        "{out}"
    );
}

#[test]
fn copies_kept_above_their_share_while_others_start_theirs_are_noted() {
    let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop"}, "spec": {"replicas": 4}});
    let with = |n: i64| {
        let mut m = template.clone();
        m["spec"]["replicas"] = json!(n);
        m
    };
    let works = [
        work("east", with(4), None, None),
        work("west", with(3), None, None),
        work("north", with(1), None, None),
    ];
    let mut spec: BindingSpec = serde_json::from_value(json!({"resource": {
        "apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "shop"}}))
    .unwrap();
    spec.clusters = vec![
        TargetCluster {
            name: "west".into(),
            replicas: Some(2),
        },
        TargetCluster {
            name: "north".into(),
            replicas: Some(2),
        },
    ];
    let status: BindingStatus = serde_json::from_value(json!({"conditions": [{
        "type": "Redistributed", "status": "False", "reason": "HoldingReplicas",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "message": "east keeps 4 (no longer scheduled there), west keeps 3 (its share is 2) \
                    while north has 0 of its 2 available; spec.redistribution.maxUnavailable \
                    lets 0 of the 4 replicas be unavailable"}]}))
    .unwrap();
    let report = explain(&shop(
        &template,
        &spec,
        Some(&status),
        &works,
        &["east".into(), "west".into(), "north".into()],
    ));
    let notes = |c: &str| notes_of(&report, c);
    let held = |runs: i64, more: i64| {
        format!(
            "keeps {runs} replica(s), {more} more than its share, until the other clusters run \
             them available (make-before-break, spec.redistribution); the binding's \
             Redistributed condition says what it waits for"
        )
    };
    // east is no longer chosen: its whole copy is kept, not "being removed"
    assert!(notes("east").contains(&held(4, 4)), "{:?}", notes("east"));
    assert!(!notes("east").iter().any(|n| n.contains("being removed")));
    assert!(notes("west").contains(&held(3, 1)), "{:?}", notes("west"));
    // past the hold's progress deadline, the condition's message says so after the
    // plan's: the held copies are still noted
    let mut stuck = status.clone();
    stuck.conditions[0].reason = "ProgressDeadlineExceeded".into();
    stuck.conditions[0].message += "; the progress deadline (60s without a replica moving) \
        passed at 2026-01-01T00:01:00Z: nothing is forced";
    let stuck_report = explain(&shop(
        &template,
        &spec,
        Some(&stuck),
        &works,
        &["east".into(), "west".into(), "north".into()],
    ));
    assert!(notes_of(&stuck_report, "east").contains(&held(4, 4)));
    assert!(notes_of(&stuck_report, "west").contains(&held(3, 1)));
    // north runs less than its share (it is starting): nothing held
    assert!(
        !notes("north")
            .iter()
            .any(|n| n.contains("more than its share"))
    );
    // without the guard's word (a failover-kept copy, an override raising replicas),
    // no such note
    let report = explain(&shop(
        &template,
        &spec,
        None,
        &works,
        &["east".into(), "west".into(), "north".into()],
    ));
    assert!(
        report
            .clusters
            .iter()
            .all(|c| !c.notes.iter().any(|n| n.contains("more than its share")))
    );

    // a custom kind whose interpreter keeps its count at /spec/workers/count: read there
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "shop"}, "spec": {"workers": {"count": 4}}});
    let counted = |cluster: &str, n: i64| {
        let mut m = gadget.clone();
        m["spec"]["workers"]["count"] = json!(n);
        let mut w = work(cluster, m, None, None);
        w.spec.interpretations = vec![causeway_crds::federation::interpreter::Interpretation {
            group: "example.com".into(),
            kind: "Gadget".into(),
            interpreter: "gadgets".into(),
            replicas_path: Some("/spec/workers/count".into()),
            available_path: Some("/status/readyWorkers".into()),
            ..Default::default()
        }];
        w
    };
    let works = [counted("east", 4), counted("west", 3), counted("north", 1)];
    let report = explain(&shop(
        &gadget,
        &spec,
        Some(&status),
        &works,
        &["east".into(), "west".into(), "north".into()],
    ));
    let notes = |c: &str| notes_of(&report, c);
    assert!(notes("east").contains(&held(4, 4)), "{:?}", notes("east"));
    assert!(!notes("east").iter().any(|n| n.contains("being removed")));
    assert!(notes("west").contains(&held(3, 1)), "{:?}", notes("west"));
}

/// The notes of cluster `c` in `report`.
fn notes_of(report: &Report, c: &str) -> Vec<String> {
    report
        .clusters
        .iter()
        .find(|r| r.name == c)
        .unwrap()
        .notes
        .clone()
}

fn pp(ns: &str, name: &str, selector: Value) -> PropagationPolicy {
    let mut p: PropagationPolicy = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceSelectors": [selector]},
    }))
    .unwrap();
    p.metadata.namespace = Some(ns.into());
    p
}

#[test]
fn no_binding_says_which_policies_exist_and_whether_one_selects_it() {
    let template: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "demo", "labels": {"app": "shop"}}}))
        .unwrap();
    let other = pp(
        "demo",
        "web",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}),
    );
    let cpp: ClusterPropagationPolicy = serde_json::from_value(json!({"apiVersion": "causeway.io/v1alpha1",
        "kind": "ClusterPropagationPolicy", "metadata": {"name": "crds"},
        "spec": {"resourceSelectors": [{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}]}})).unwrap();
    let d = "Deployment demo/shop";
    let none = not_propagated(d, &template, &[], &[]);
    assert_eq!(
        none,
        "Deployment demo/shop is not propagated: there is no PropagationPolicy in its namespace and no ClusterPropagationPolicy, and none selects it; create a PropagationPolicy whose resourceSelectors match it"
    );
    let unselected = not_propagated(
        d,
        &template,
        std::slice::from_ref(&other),
        std::slice::from_ref(&cpp),
    );
    assert!(unselected.contains("the policies that could select it are: PropagationPolicy demo/web, ClusterPropagationPolicy crds, and none selects it"), "{unselected}");
    let shop = pp(
        "demo",
        "shop",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"app": "shop"}}}),
    );
    let pending = not_propagated(d, &template, &[other, shop], &[cpp]);
    assert!(pending.contains("PropagationPolicy demo/shop selects it but there is no binding; is `causeway controller` running"), "{pending}");
}

#[test]
fn kind_describes_namespaced_and_cluster_scoped_objects() {
    let ns = kind("apps", "v1", "Deployment", "deployments", true);
    let cluster = kind(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    );
    assert_eq!(ns.describe("demo", "shop"), "Deployment demo/shop");
    assert_eq!(cluster.describe("demo", "admin"), "ClusterRole admin");
}
