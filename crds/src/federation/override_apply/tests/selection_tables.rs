//! D.28 (order across policies), D.31 (target clusters) and D.26's admission checks.

use serde_json::{Value, json};

use super::{ClusterOverridePolicy, OverridePolicy, deployment};
use crate::federation::cluster::{Cluster, ClusterSpec};
use crate::federation::override_apply::{applicable_policies, apply, validate};
use crate::federation::overrides::OverrideSpec;

fn policy<T: serde::de::DeserializeOwned>(
    kind: &str,
    ns: Option<&str>,
    name: &str,
    spec: Value,
) -> T {
    let mut meta = json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    serde_json::from_value(
        json!({"apiVersion": "causeway.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}),
    )
    .expect("test policy parses")
}

/// A spec with `selectors` and one rule setting label `winner` to `name`.
fn setter(name: &str, selectors: Value, target: Option<Value>) -> Value {
    let mut rule = json!({"overriders": {"labelsOverrider": [{"operator": "add", "value": {"winner": name}}]}});
    if let Some(t) = target {
        rule["targetCluster"] = t;
    }
    json!({"resourceSelectors": selectors, "overrideRules": [rule]})
}

fn cluster(name: &str, labels: &[(&str, &str)], region: Option<&str>) -> Cluster {
    let mut c = Cluster::new(
        name,
        ClusterSpec {
            region: region.map(Into::into),
            ..ClusterSpec::default()
        },
    );
    c.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    c
}

fn order(cps: &[ClusterOverridePolicy], ops: &[OverridePolicy], c: &Cluster) -> Vec<String> {
    applicable_policies(&deployment(), c, cps, ops)
        .iter()
        .map(|(r, _)| r.to_string())
        .collect()
}

#[test]
fn order_across_policies_d28() {
    let all = json!([]);
    let kind = json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]);
    let label = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"app": "web"}}}]);
    let named = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
    let other = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}]);
    let cps: Vec<ClusterOverridePolicy> = vec![
        policy(
            "ClusterOverridePolicy",
            None,
            "c-name",
            setter("c-name", named.clone(), None),
        ),
        policy(
            "ClusterOverridePolicy",
            None,
            "c-all",
            setter("c-all", all.clone(), None),
        ),
        policy(
            "ClusterOverridePolicy",
            None,
            "c-label",
            setter("c-label", label.clone(), None),
        ),
        policy(
            "ClusterOverridePolicy",
            None,
            "c-other",
            setter("c-other", other.clone(), None),
        ),
    ];
    let ops: Vec<OverridePolicy> = vec![
        policy(
            "OverridePolicy",
            Some("prod"),
            "z-name",
            setter("z-name", named, None),
        ),
        policy(
            "OverridePolicy",
            Some("prod"),
            "b-kind",
            setter("b-kind", kind.clone(), None),
        ),
        policy(
            "OverridePolicy",
            Some("prod"),
            "a-kind",
            setter("a-kind", kind, None),
        ),
        policy(
            "OverridePolicy",
            Some("prod"),
            "m-label",
            setter("m-label", label, None),
        ),
        policy(
            "OverridePolicy",
            Some("dev"),
            "elsewhere",
            setter("elsewhere", all, None),
        ),
    ];
    let c = cluster("m1", &[], None);
    assert_eq!(
        order(&cps, &ops, &c),
        [
            "ClusterOverridePolicy c-all rule 0",
            "ClusterOverridePolicy c-label rule 0",
            "ClusterOverridePolicy c-name rule 0",
            "OverridePolicy prod/a-kind rule 0",
            "OverridePolicy prod/b-kind rule 0",
            "OverridePolicy prod/m-label rule 0",
            "OverridePolicy prod/z-name rule 0",
        ]
    );
    // The name-selected namespaced policy is applied last, so it wins the path.
    let rules = applicable_policies(&deployment(), &c, &cps, &ops);
    let (out, prov) = apply(&deployment(), &rules).unwrap();
    assert_eq!(
        out.pointer("/metadata/labels/winner"),
        Some(&json!("z-name"))
    );
    assert_eq!(
        prov.get("/metadata/labels/winner")
            .unwrap()
            .rule
            .to_string(),
        "OverridePolicy prod/z-name rule 0"
    );
    // A cluster-scoped template gets only the cluster policies.
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}});
    let names: Vec<String> = applicable_policies(&ns, &c, &cps, &ops)
        .iter()
        .map(|(r, _)| r.to_string())
        .collect();
    assert_eq!(names, ["ClusterOverridePolicy c-all rule 0"]);
    ns["metadata"]["namespace"] = json!("");
    assert_eq!(applicable_policies(&ns, &c, &cps, &ops).len(), 1);
}

#[test]
fn rules_target_clusters_d31() {
    let prod = json!({"labelSelector": {"matchLabels": {"env": "prod"}}});
    let spec = json!({"overrideRules": [
        {"targetCluster": prod, "overriders": {"labelsOverrider": [{"operator": "add", "value": {"env": "prod"}}]}},
        {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"every": "one"}}]}},
        {"targetCluster": {"clusterNames": ["m2"]}, "overriders": {}},
    ]});
    let ops: Vec<OverridePolicy> = vec![policy("OverridePolicy", Some("prod"), "p", spec)];
    let m1 = cluster("m1", &[("env", "prod")], None);
    assert_eq!(
        order(&[], &ops, &m1),
        [
            "OverridePolicy prod/p rule 0",
            "OverridePolicy prod/p rule 1"
        ]
    );
    // The same cluster after its label changes: re-evaluated, rule 0 no longer applies.
    let m1_dev = cluster("m1", &[("env", "dev")], None);
    assert_eq!(order(&[], &ops, &m1_dev), ["OverridePolicy prod/p rule 1"]);
    let m2 = cluster("m2", &[], None);
    assert_eq!(
        order(&[], &ops, &m2),
        [
            "OverridePolicy prod/p rule 1",
            "OverridePolicy prod/p rule 2"
        ]
    );
}

#[test]
fn validation_d26() {
    let spec = |o: Value| -> OverrideSpec {
        serde_json::from_value(json!({"overrideRules": [{"overriders": o}]})).expect("spec parses")
    };
    let at = "spec.overrideRules[0].overriders";
    // (overriders, errors)
    let table = [
        (
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace", "value": 1}]}),
            vec![],
        ),
        (
            json!({"plaintext": [{"path": "/metadata/namespace", "operator": "replace", "value": "x"}]}),
            vec![format!(
                "{at}.plaintext[0].path: Invalid value: \"/metadata/namespace\": /metadata/namespace may not be overridden because it changes /metadata/namespace, which Causeway takes from the template; override another field"
            )],
        ),
        (
            json!({"plaintext": [{"path": "/metadata/generateName", "operator": "add", "value": "x"}]}),
            vec![format!(
                "{at}.plaintext[0].path: Invalid value: \"/metadata/generateName\": /metadata/generateName may not be overridden because it changes /metadata/generateName, which Causeway takes from the template; override another field"
            )],
        ),
        (
            json!({"plaintext": [{"path": "/a", "operator": "remove"}, {"path": "/a", "operator": "add", "value": 1}]}),
            vec![format!(
                "{at}.plaintext[1].path: Invalid value: \"/a\": Duplicate value: a path may be patched once per rule; merge the operations"
            )],
        ),
        (
            json!({"plaintext": [{"path": "/a", "operator": "remove", "value": 1}, {"path": "/b", "operator": "add"}]}),
            vec![
                format!(
                    "{at}.plaintext[0].value: Invalid value: \"\": must not be set when operator is remove"
                ),
                format!(
                    "{at}.plaintext[1].value: Invalid value: \"\": Required value: add and replace need a value"
                ),
            ],
        ),
        (
            json!({"imageOverrider": [{"component": "Repository", "operator": "remove"}, {"component": "Tag", "operator": "replace"}]}),
            vec![
                format!(
                    "{at}.imageOverrider[0].operator: Invalid value: \"remove\": the Repository of an image cannot be removed; use replace"
                ),
                format!(
                    "{at}.imageOverrider[1].value: Invalid value: \"\": Required value: add and replace need a value"
                ),
            ],
        ),
        (
            json!({"commandOverrider": [{"containerName": "", "operator": "replace"}]}),
            vec![
                format!(
                    "{at}.commandOverrider[0].containerName: Invalid value: \"\": Required value: name the container to change"
                ),
                format!(
                    "{at}.commandOverrider[0].operator: Invalid value: \"replace\": Unsupported value: supported values: \"add\", \"remove\""
                ),
            ],
        ),
        (
            json!({"fieldOverrider": [{"fieldPath": "/data/x"}]}),
            vec![format!(
                "{at}.fieldOverrider[0]: Invalid value: \"\": Required value: set json or yaml operations"
            )],
        ),
        (
            json!({"fieldOverrider": [{"fieldPath": "data", "yaml": [{"subPath": "x", "operator": "remove"}]}]}),
            vec![
                format!(
                    "{at}.fieldOverrider[0].fieldPath: Invalid value: \"data\": path \"data\" is not a JSON pointer: it does not start with '/'; write it like /spec/replicas (RFC 6901)"
                ),
                format!(
                    "{at}.fieldOverrider[0].yaml[0].subPath: Invalid value: \"x\": path \"x\" is not a JSON pointer: it does not start with '/'; write it like /spec/replicas (RFC 6901)"
                ),
            ],
        ),
        (
            json!({"labelsOverrider": [{"operator": "add", "value": {"bad key!": "v"}}]}),
            vec![format!(
                "{at}.labelsOverrider[0].value: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            )],
        ),
    ];
    for (o, want) in table {
        let got: Vec<String> = validate(&spec(o.clone()))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, want, "{o}");
    }
    // A cluster listed twice, and an invalid target selector, are rejected.
    let s: OverrideSpec = serde_json::from_value(json!({"overrideRules": [{"targetCluster": {
        "clusterNames": ["m1", "m1"],
        "fieldSelector": {"matchExpressions": [{"key": "color", "operator": "In", "values": ["x"]}]}},
        "overriders": {}}]})).unwrap();
    let got: Vec<String> = validate(&s).iter().map(ToString::to_string).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].starts_with(
            "spec.overrideRules[0].targetCluster.fieldSelector.matchExpressions[0].key: "
        ),
        "{got:?}"
    );
    assert_eq!(
        got[1],
        "spec.overrideRules[0].targetCluster.clusterNames: Invalid value: \"m1\": Duplicate value: list each cluster once"
    );
}
