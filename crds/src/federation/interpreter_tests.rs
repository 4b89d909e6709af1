use super::*;
use crate::federation::work::{Manifest, WorkSpec, WorkloadTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

fn interpreter(name: &str, age: i64, spec: Value) -> ResourceInterpreter {
    let mut r = ResourceInterpreter::new(name, serde_json::from_value(spec).unwrap());
    r.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + age).unwrap(),
    ));
    r
}

fn gadgets(name: &str, age: i64) -> ResourceInterpreter {
    interpreter(
        name,
        age,
        json!({
            "target": {"apiVersion": "example.com/v1", "kind": "Gadget"},
            "replicas": {"path": "/spec/size"},
            "health": {
                "healthy": "object.status.phase == 'Running' && object.status.readySize == object.spec.size",
                "unhealthy": "object.status.phase == 'Failed'"
            }
        }),
    )
}

/// [`gadgets`]'s rules for another target.
fn targeting(name: &str, api_version: &str, kind: &str) -> ResourceInterpreter {
    let mut r = gadgets(name, 0);
    r.spec.target = Target {
        api_version: api_version.into(),
        kind: kind.into(),
    };
    r
}

#[test]
fn bad_interpreters_are_refused_with_what_to_write() {
    let cases = [
        (
            json!({"target": {"apiVersion": "", "kind": "Gadget"}, "replicas": {"path": "/spec/size"}}),
            vec!["spec.target.apiVersion: Required value"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": ""}, "replicas": {"path": "/spec/size"}}),
            vec!["spec.target.kind: Required value"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}}),
            vec!["spec: Required value: set replicas, health, dependencies or status"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "spec.size"}}),
            vec![
                "spec.replicas.path: Invalid value: \"spec.size\": must be a JSON pointer under /spec",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "/status/size"}}),
            vec!["must be a JSON pointer under /spec, e.g. /spec/size"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "/spec//size"}}),
            vec!["no empty segments"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "/spec/size", "available": "/spec/ready"}}),
            vec![
                "spec.replicas.available: Invalid value: \"/spec/ready\": must be a JSON pointer under /status, e.g. /status/readyReplicas",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "/spec/size", "available": "/status/"}}),
            vec![
                "spec.replicas.available: Invalid value: \"/status/\": a JSON pointer has no empty segments",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "replicas": {"path": "/spec/a~2b"}}),
            vec!["'~' must be written ~0"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "health": {"healthy": "object.status.phase =="}}),
            vec![
                "spec.health.healthy: Invalid value: \"object.status.phase ==\": compilation failed",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "health": {"healthy": " ", "unhealthy": "((("}}),
            vec![
                "spec.health.healthy: Required value",
                "spec.health.unhealthy: Invalid value",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "health": {"healthy": "self.status.ready"}}),
            vec![
                "spec.health.healthy: Invalid value: \"self.status.ready\": compilation failed: undeclared reference to 'self' (the variables are object)",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "health": {"healthy": "timestamp(object.status.at) > timestamp('2030-01-01T00:00:00Z')"}}),
            vec!["timestamp() is not available"],
        ),
    ];
    let builtin = "Causeway has its own rules for this kind";
    let cases = cases.into_iter().chain([
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"},
                "status": {"sum": ["readyWorkers", "", "status.x", "observedGeneration", "readyWorkers"]}}),
            vec![
                "spec.status.sum[1]: Invalid value: \"\": a field of .status, by its name",
                "spec.status.sum[2]: Invalid value: \"status.x\"",
                "spec.status.sum[3]: Invalid value: \"observedGeneration\": a generation is no count to sum",
                "spec.status.sum[4]: Duplicate value: \"readyWorkers\"",
            ],
        ),
        (
            json!({"target": {"apiVersion": "example.com/v1", "kind": "Gadget"}, "status": {}}),
            vec!["spec.status.sum: Required value"],
        ),
        (
            json!({"target": {"apiVersion": "apps/v1", "kind": "Deployment"}, "replicas": {"path": "/spec/size"}}),
            vec![builtin],
        ),
        (
            json!({"target": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}, "replicas": {"path": "/spec/size"}}),
            vec![builtin],
        ),
        (
            json!({"target": {"apiVersion": "v1", "kind": "Widget"}, "replicas": {"path": "/spec/size"}}),
            vec!["a custom kind's apiVersion is <group>/<version>"],
        ),
        (
            json!({"target": {"apiVersion": "example.com/", "kind": "Widget"}, "replicas": {"path": "/spec/size"}}),
            vec!["write <group>/<version>"],
        ),
        (
            json!({"target": {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice"}, "replicas": {"path": "/spec/size"}}),
            vec![builtin],
        ),
        // a Gateway API kind is a CRD under k8s.io: interpretable
        (
            json!({"target": {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway"}, "health": {"healthy": "true"}}),
            vec![],
        ),
    ]);
    for (spec, want) in cases {
        let spec: ResourceInterpreterSpec = serde_json::from_value(spec.clone()).unwrap();
        let got = problems(&spec);
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(&want) {
            assert!(g.contains(w), "{g:?} should contain {w:?}");
        }
    }
    assert!(problems(&gadgets("g", 0).spec).is_empty());
    assert!(
        problems(
            &serde_json::from_value(
                json!({"target": {"apiVersion": "example.com/v1", "kind": "Widget"},
                "replicas": {"path": "/spec/a~1b/replicas"}})
            )
            .unwrap()
        )
        .is_empty()
    );
}

#[test]
fn one_interpreter_per_kind_the_oldest_wins() {
    let (old, new) = (gadgets("gadgets", 0), gadgets("gadgets-2", 10));
    let mut bad = gadgets("broken", -10);
    bad.spec.replicas = Some(ReplicasRule {
        path: "size".into(),
        available: None,
    });
    let other_version = {
        let mut r = gadgets("gadgets-v2", 20);
        r.spec.target.api_version = "example.com/v2".into();
        r
    };
    let (resolved, verdicts) = resolve(&[&new, &bad, &old, &other_version]);
    // a valid one is in force for the kind: it is not broken
    assert_eq!(resolved.broken("example.com/v1", "Gadget"), None);
    // a kind whose only interpreter is invalid is not read with the defaults
    let (alone, _) = resolve(&[&bad]);
    assert!(alone.of("example.com/v1", "Gadget").is_none());
    let why = alone.broken("example.com/v1", "Gadget").unwrap();
    assert!(
        why.starts_with("ResourceInterpreter broken is invalid: spec.replicas.path"),
        "{why}"
    );
    assert_eq!(alone.broken("other.com/v1", "Gadget"), None);
    // only a custom kind whose replica count an invalid interpreter places is broken:
    // one without a replica path, or one that names no custom kind, breaks nothing
    let mut no_path = gadgets("health-only", 0);
    no_path.spec.replicas = None;
    no_path.spec.health.as_mut().unwrap().healthy = "object.status.ready ==".into();
    let deployment = targeting("deployment", "apps/v1", "Deployment");
    let configmap = targeting("configmap", "", "ConfigMap");
    let no_version = targeting("knative", "serving.knative.dev", "Service");
    let crd = targeting(
        "crds",
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    );
    let (none, refused) = resolve(&[&no_path, &deployment, &configmap, &no_version, &crd]);
    assert!(refused.values().all(Option::is_some), "{refused:?}");
    for (av, kind) in [
        ("example.com/v1", "Gadget"),
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ] {
        assert_eq!(none.broken(av, kind), None, "{av} {kind}");
    }
    assert_eq!(verdicts["gadgets"], None);
    assert!(
        verdicts["broken"]
            .as_deref()
            .unwrap()
            .contains("spec.replicas.path")
    );
    let refused = verdicts["gadgets-2"].as_deref().unwrap();
    assert!(
        refused.contains("ResourceInterpreter gadgets already interprets Gadget"),
        "{refused}"
    );
    // a group's kind is one kind, whatever the version
    assert!(
        verdicts["gadgets-v2"]
            .as_deref()
            .unwrap()
            .contains("already interprets")
    );
    assert_eq!(
        resolved.of("example.com/v9", "Gadget").unwrap().interpreter,
        "gadgets"
    );
    assert_eq!(
        resolved.replicas_pointer("example.com/v1", "Gadget"),
        "/spec/size"
    );
    assert_eq!(
        resolved.replicas_pointer("apps/v1", "Deployment"),
        DEFAULT_REPLICAS
    );
    assert!(resolved.of("other.com/v1", "Gadget").is_none());
    assert!(resolved.status_sums("example.com/v1", "Gadget").is_empty());
    let mut summing = gadgets("summing", 0);
    summing.spec.status = Some(StatusRule {
        sum: vec!["readyWorkers".into()],
    });
    let (with_sums, _) = resolve(&[&summing]);
    assert_eq!(
        with_sums.status_sums("example.com/v2", "Gadget"),
        ["readyWorkers"]
    );
    // the hub's alone: not in what the Works carry
    let g = json!({"apiVersion": "example.com/v1", "kind": "Gadget"});
    let carried = with_sums.for_manifests([&g]);
    assert_eq!(carried[0].interpreter, "summing");
    assert_eq!(serde_json::to_value(&carried[0]).unwrap().get("sum"), None);
    // a Work carries each kind's interpretation once
    let g = json!({"apiVersion": "example.com/v1", "kind": "Gadget"});
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
    let carried = resolved.for_manifests([&g, &d, &g]);
    assert_eq!(carried.len(), 1);
    assert_eq!(carried[0].replicas_path.as_deref(), Some("/spec/size"));
    assert_eq!(carried[0].available_path, None);
    // the available count goes with the Works (the guard reads their statuses)
    let mut counted = gadgets("counted", 0);
    counted.spec.replicas.as_mut().unwrap().available = Some("/status/readySize".into());
    let (with_available, verdicts) = resolve(&[&counted]);
    assert_eq!(verdicts["counted"], None);
    let carried = with_available.for_manifests([&g]);
    assert_eq!(
        carried[0].available_path.as_deref(),
        Some("/status/readySize")
    );
}

fn work_of(interpretations: Vec<Interpretation>) -> Work {
    Work::new(
        "w",
        WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![Manifest(
                    json!({"apiVersion": "example.com/v1", "kind": "Gadget"}),
                )],
            },
            interpretations,
            ..WorkSpec::default()
        },
    )
}

#[test]
fn health_follows_the_rules_cel() {
    let (resolved, _) = resolve(&[&gadgets("gadgets", 0)]);
    let i = resolved.of("example.com/v1", "Gadget").unwrap().clone();
    let without_unhealthy = Interpretation {
        unhealthy: None,
        ..i.clone()
    };
    let gadget = |status: Value| json!({"apiVersion": "example.com/v1", "kind": "Gadget", "spec": {"size": 3}, "status": status});
    use ResourceHealth::*;
    let cases = [
        (
            "running, all ready",
            gadget(json!({"phase": "Running", "readySize": 3})),
            Healthy,
            Healthy,
            None,
        ),
        (
            "running, some ready",
            gadget(json!({"phase": "Running", "readySize": 1})),
            Unknown,
            Unhealthy,
            None,
        ),
        (
            "failed",
            gadget(json!({"phase": "Failed", "readySize": 0})),
            Unhealthy,
            Unhealthy,
            None,
        ),
        (
            "no status yet",
            json!({"apiVersion": "example.com/v1", "kind": "Gadget", "spec": {"size": 3}}),
            Unknown,
            Unknown,
            None,
        ),
        (
            "a status without the fields",
            gadget(json!({"phase": "Running"})),
            Unknown,
            Unknown,
            Some("ResourceInterpreter gadgets: health.healthy: "),
        ),
    ];
    for (what, obj, with, without, why) in cases {
        let (h, msg) = health(&i, &obj).unwrap();
        assert_eq!(h, with, "{what}");
        assert_eq!(
            health(&without_unhealthy, &obj).unwrap().0,
            without,
            "{what}"
        );
        match why {
            Some(w) => assert!(
                msg.as_deref().is_some_and(|m| m.starts_with(w)),
                "{what}: {msg:?}"
            ),
            None => assert_eq!(msg, None, "{what}"),
        }
    }
    // the rule judges only a status of what the object now asks for
    let mut stale = gadget(json!({"phase": "Running", "readySize": 3, "observedGeneration": 1}));
    stale["metadata"] = json!({"generation": 2});
    assert_eq!(health(&i, &stale), Some((Unknown, None)));
    stale["status"]["observedGeneration"] = json!(2);
    assert_eq!(health(&i, &stale), Some((Healthy, None)));
    // healthy wins over an unhealthy rule that cannot be read; a failed object may
    // lack what healthy reads
    let failure_message = Interpretation {
        healthy: Some("object.status.ready".into()),
        unhealthy: Some("object.status.failureMessage != ''".into()),
        ..i.clone()
    };
    assert_eq!(
        health(&failure_message, &gadget(json!({"ready": true}))),
        Some((Healthy, None))
    );
    assert_eq!(
        health(
            &failure_message,
            &gadget(json!({"failureMessage": "disk full"}))
        ),
        Some((Unhealthy, None))
    );
    let (h, msg) = health(&failure_message, &gadget(json!({"ready": false}))).unwrap();
    assert_eq!(h, Unknown);
    assert!(msg.unwrap().contains("health.unhealthy: "));
    // a rule that reads a status without has(): false is not healthy (Unhealthy
    // without an unhealthy rule), but an object with no status is never judged
    let guarded = Interpretation {
        healthy: Some("has(object.status) && object.status.ready".into()),
        unhealthy: None,
        ..i.clone()
    };
    assert_eq!(
        health(&guarded, &json!({"spec": {}})),
        Some((Unknown, None))
    );
    assert_eq!(
        health(&guarded, &json!({"spec": {}, "status": null})),
        Some((Unknown, None))
    );
    // a kind without a status: healthy once it exists, if the rule says so
    let exists = Interpretation {
        healthy: Some("true".into()),
        unhealthy: None,
        ..i.clone()
    };
    assert_eq!(health(&exists, &json!({"spec": {}})), Some((Healthy, None)));
    let not_bool = Interpretation {
        healthy: Some("object.spec.size".into()),
        unhealthy: None,
        ..i.clone()
    };
    let (h, msg) = health(&not_bool, &gadget(json!({}))).unwrap();
    assert_eq!(h, Unknown);
    assert!(msg.unwrap().contains("not a bool"));
    // no health rule: Causeway's own
    let replicas_only = Interpretation {
        healthy: None,
        unhealthy: None,
        ..i.clone()
    };
    assert_eq!(health(&replicas_only, &gadget(json!({}))), None);
    let ready = gadget(json!({"conditions": [{"type": "Ready", "status": "True"}]}));
    assert_eq!(
        health_in(&work_of(vec![replicas_only.clone()]), &ready),
        (Healthy, None)
    );
    assert!(!judges(
        &work_of(vec![replicas_only]),
        "example.com",
        "Gadget"
    ));
    // the Work's rule is the one used
    let w = work_of(vec![i]);
    assert!(judges(&w, "example.com", "Gadget"));
    assert_eq!(health_in(&w, &ready).0, Unknown);
    assert_eq!(
        replicas_pointer(
            &w,
            &json!({"apiVersion": "example.com/v2", "kind": "Gadget"})
        ),
        "/spec/size"
    );
    assert_eq!(
        replicas_pointer(&w, &json!({"apiVersion": "apps/v1", "kind": "Gadget"})),
        DEFAULT_REPLICAS
    );
}
