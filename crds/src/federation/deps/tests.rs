//! Table tests for dependency discovery (federation.md §8 I.56).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// `(kind, name)` of each dependency, in order.
fn found(template: &Value) -> Vec<(String, String)> {
    dependencies(template, &[])
        .into_iter()
        .map(|d| (d.kind, d.name))
        .collect()
}

/// A table case: what it shows, the pod spec, and the `(kind, name)` expected.
type Case = (&'static str, Value, &'static [(&'static str, &'static str)]);

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, n)| (k.to_string(), n.to_string()))
        .collect()
}

/// A template of `kind` whose pod spec is `pod`, in namespace `demo`.
fn workload(kind: &str, pod: Value) -> Value {
    let spec = match kind {
        "Pod" => pod,
        "CronJob" => json!({"jobTemplate": {"spec": {"template": {"spec": pod}}}}),
        _ => json!({"template": {"spec": pod}}),
    };
    let api_version = match kind {
        "Pod" => "v1",
        "Job" | "CronJob" => "batch/v1",
        _ => "apps/v1",
    };
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": "w", "namespace": "demo"},
        "spec": spec,
    })
}

#[test]
fn every_workload_kind_reads_its_pod_template() {
    let pod = json!({"serviceAccountName": "sa"});
    for kind in [
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "CronJob",
        "Pod",
    ] {
        assert_eq!(
            dependencies(&workload(kind, pod.clone()), &[]),
            vec![Dependency {
                api_version: "v1".into(),
                kind: "ServiceAccount".into(),
                namespace: "demo".into(),
                name: "sa".into(),
            }],
            "{kind}"
        );
    }
}

#[test]
fn other_kinds_have_no_dependencies() {
    let pod =
        json!({"serviceAccountName": "sa", "volumes": [{"name": "v", "configMap": {"name": "c"}}]});
    for kind in ["Service", "ConfigMap", "Ingress", "ReplicationController"] {
        assert_eq!(found(&workload(kind, pod.clone())), [], "{kind}");
    }
    assert_eq!(
        found(&json!({"spec": {"template": {"spec": pod}}})),
        [],
        "no kind"
    );
}

#[test]
fn a_custom_kinds_pod_specs_are_read_where_its_interpreter_says() {
    let pod = |cm: &str| json!({"volumes": [{"name": "v", "configMap": {"name": cm}}]});
    let gadget = json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "demo"},
        "spec": {"leader": {"pod": pod("leader-config")},
                 "workers": {"template": {"spec": pod("worker-config")}}},
    });
    let at = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let names = |deps: Vec<Dependency>| deps.into_iter().map(|d| d.name).collect::<Vec<_>>();
    assert_eq!(dependencies(&gadget, &[]), []);
    assert_eq!(
        names(dependencies(
            &gadget,
            &at(&[
                "/spec/leader/pod",
                "/spec/workers/template/spec",
                "/spec/missing"
            ])
        )),
        ["leader-config", "worker-config"]
    );
    // a built-in kind keeps its own pod spec, whatever is passed
    let mut d = gadget.clone();
    d["apiVersion"] = json!("apps/v1");
    d["kind"] = json!("Deployment");
    d["spec"]["template"] = json!({"spec": pod("own")});
    assert_eq!(names(dependencies(&d, &at(&["/spec/leader/pod"]))), ["own"]);
    // a custom kind named like a built-in one is read where its interpreter says
    d["apiVersion"] = json!("example.com/v1");
    assert_eq!(
        names(dependencies(&d, &at(&["/spec/leader/pod"]))),
        ["leader-config"]
    );
}

#[test]
fn each_kind_of_reference_is_found() {
    let cases: [Case; 12] = [
        (
            "configMap volume",
            json!({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}),
            &[("ConfigMap", "c")],
        ),
        (
            "secret volume",
            json!({"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}),
            &[("Secret", "s")],
        ),
        (
            "projected volume sources",
            json!({"volumes": [{"name": "v", "projected": {"sources": [
                {"configMap": {"name": "pc"}}, {"secret": {"name": "ps"}},
                {"serviceAccountToken": {"path": "token"}}, {"downwardAPI": {"items": []}},
            ]}}]}),
            &[("ConfigMap", "pc"), ("Secret", "ps")],
        ),
        (
            "persistentVolumeClaim volume",
            json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "p"}}]}),
            &[("PersistentVolumeClaim", "p")],
        ),
        (
            "env valueFrom",
            json!({"containers": [{"name": "a", "env": [
                {"name": "X", "value": "literal"},
                {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "ec", "key": "k"}}},
                {"name": "Z", "valueFrom": {"secretKeyRef": {"name": "es", "key": "k"}}},
                {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ]}]}),
            &[("ConfigMap", "ec"), ("Secret", "es")],
        ),
        (
            "envFrom",
            json!({"containers": [{"name": "a", "envFrom": [
                {"configMapRef": {"name": "fc"}}, {"secretRef": {"name": "fs"}, "prefix": "P_"},
            ]}]}),
            &[("ConfigMap", "fc"), ("Secret", "fs")],
        ),
        (
            "initContainers",
            json!({"initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "ic"}}]}]}),
            &[("ConfigMap", "ic")],
        ),
        (
            "ephemeralContainers",
            json!({"ephemeralContainers": [{"name": "e", "env": [
                {"name": "Z", "valueFrom": {"secretKeyRef": {"name": "xs", "key": "k"}}}]}]}),
            &[("Secret", "xs")],
        ),
        (
            "imagePullSecrets",
            json!({"imagePullSecrets": [{"name": "pull"}]}),
            &[("Secret", "pull")],
        ),
        (
            "deprecated serviceAccount",
            json!({"serviceAccount": "old"}),
            &[("ServiceAccount", "old")],
        ),
        (
            "serviceAccountName wins over serviceAccount",
            json!({"serviceAccountName": "new", "serviceAccount": "old"}),
            &[("ServiceAccount", "new")],
        ),
        (
            "the default ServiceAccount is not a dependency",
            json!({"serviceAccountName": "default", "serviceAccount": "other"}),
            &[],
        ),
    ];
    for (what, pod, want) in cases {
        assert_eq!(found(&workload("Deployment", pod)), pairs(want), "{what}");
    }
}

#[test]
fn the_full_example_is_sorted_and_deduplicated() {
    // I.56: a Deployment with ConfigMap c, Secret s (env and imagePullSecrets),
    // ServiceAccount sa and PVC p, each named more than once.
    let pod = json!({
        "serviceAccountName": "sa",
        "imagePullSecrets": [{"name": "s"}],
        "volumes": [
            {"name": "a", "configMap": {"name": "c"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "p"}},
            {"name": "d", "projected": {"sources": [{"configMap": {"name": "c"}}]}},
        ],
        "containers": [
            {"name": "x", "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
            {"name": "y", "envFrom": [{"configMapRef": {"name": "c"}}]},
        ],
    });
    let deps = dependencies(&workload("Deployment", pod), &[]);
    assert_eq!(
        deps.iter()
            .map(|d| (d.kind.as_str(), d.name.as_str()))
            .collect::<Vec<_>>(),
        [
            ("ConfigMap", "c"),
            ("PersistentVolumeClaim", "p"),
            ("Secret", "s"),
            ("ServiceAccount", "sa"),
        ]
    );
    assert!(
        deps.iter()
            .all(|d| d.namespace == "demo" && d.api_version == "v1")
    );
}

#[test]
fn malformed_pod_specs_give_what_can_be_read() {
    let cases: [Case; 5] = [
        ("volumes not a list", json!({"volumes": {"name": "v"}}), &[]),
        (
            "a name that is not a string",
            json!({"volumes": [{"configMap": {"name": 7}}, {"secret": {"secretName": "s"}}]}),
            &[("Secret", "s")],
        ),
        (
            "an empty name",
            json!({"imagePullSecrets": [{"name": ""}]}),
            &[],
        ),
        ("containers not a list", json!({"containers": "x"}), &[]),
        ("the pod spec a string", json!("nope"), &[]),
    ];
    for (what, pod, want) in cases {
        assert_eq!(found(&workload("Deployment", pod)), pairs(want), "{what}");
    }
    assert_eq!(found(&json!({"kind": "Deployment"})), [], "no spec");
}

/// Any JSON value up to a small depth.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        "[a-c]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_string()),
                    Just("configMap".to_string()),
                    Just("secret".to_string()),
                    Just("secretName".to_string()),
                    Just("volumes".to_string()),
                    Just("containers".to_string()),
                    Just("env".to_string()),
                    Just("envFrom".to_string()),
                    Just("valueFrom".to_string()),
                    Just("secretKeyRef".to_string()),
                    Just("serviceAccountName".to_string()),
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_pod_spec_gives_a_sorted_set_without_panicking(pod in any_json()) {
        let deps = dependencies(&workload("Deployment", pod), &[]);
        prop_assert!(deps.windows(2).all(|w| w[0] < w[1]), "{deps:?}");
        prop_assert!(deps.iter().all(|d| !d.name.is_empty()), "{deps:?}");
        prop_assert!(!deps.iter().any(|d| d.kind == "ServiceAccount" && d.name == "default"));
    }
}

/// A pod template with kube's own API-access volume (the projected token, the
/// namespace's `kube-root-ca.crt`) and the `default` ServiceAccount depends on neither:
/// every cluster has its own.
#[test]
fn what_every_cluster_publishes_itself_is_no_dependency() {
    let pod = json!({
        "serviceAccountName": "default",
        "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"configMap": {"name": "settings"}}]}}],
    });
    let deps = dependencies(&workload("Deployment", pod), &[]);
    let names: Vec<(&str, &str)> = deps
        .iter()
        .map(|d| (d.kind.as_str(), d.name.as_str()))
        .collect();
    assert_eq!(names, [("ConfigMap", "settings")]);
}
