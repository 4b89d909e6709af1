//! The dry run's verdicts, one binding per case.

use super::*;
use serde_json::json;

fn cluster(name: &str) -> Cluster {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    )
    .unwrap()
}

fn binding(extra: serde_json::Value, clusters: &[(&str, i32)]) -> BindingSpec {
    let mut spec = json!({
        "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "api", "uid": "u1"},
        "replicas": 6,
        "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}},
        "clusters": clusters.iter().map(|(c, r)| json!({"name": c, "replicas": r})).collect::<Vec<_>>(),
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(spec).unwrap()
}

#[test]
fn what_failing_a_cluster_would_do() {
    let fleet = vec![cluster("east"), cluster("west"), cluster("north")];
    let spread = [("east", 2), ("west", 2), ("north", 2)];
    let opted = binding(json!({"failover": {"cluster": {}}}), &spread);
    let not_opted = binding(json!({}), &spread);
    let forever = binding(
        json!({"failover": {"cluster": {"purgeMode": "Directly"}},
               "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"},
                             "clusterTolerations": [{"key": "cluster.causeway.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]}}),
        &spread,
    );
    let only_east = binding(
        json!({"failover": {"cluster": {}},
               "placement": {"clusterAffinity": {"clusterNames": ["east"]}}}),
        &[("east", 6)],
    );
    let elsewhere = binding(json!({"failover": {"cluster": {}}}), &[("west", 6)]);
    let bindings = vec![
        ("demo/a-opted".to_string(), &opted),
        ("demo/b-not-opted".to_string(), &not_opted),
        ("demo/c-forever".to_string(), &forever),
        ("demo/d-only-east".to_string(), &only_east),
        ("demo/e-elsewhere".to_string(), &elsewhere),
    ];
    let east = BTreeSet::from(["east".to_string()]);
    let rows = plan(
        &bindings,
        &fleet,
        &east,
        "2026-06-01T00:00:00Z".parse().unwrap(),
    );
    let got: Vec<(&str, String, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.binding.as_str(),
                placement_text(&r.after),
                r.verdict.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "demo/a-opted",
                "north:3 west:3".to_string(),
                "moves away from east (east after 300s), its copy purged once the others run it healthy (at most 600 s later)"
            ),
            (
                "demo/b-not-opted",
                "east:2 north:2 west:2".to_string(),
                "stays: the policy has no failover.cluster (a NotReady member keeps what it runs)"
            ),
            (
                "demo/c-forever",
                "east:2 north:2 west:2".to_string(),
                "stays on east: tolerated forever, or no other cluster fits"
            ),
            (
                "demo/d-only-east",
                "east:6".to_string(),
                "stays on east: tolerated forever, or no other cluster fits"
            ),
        ],
        "a binding not on east is not listed"
    );
    // the table
    let t = text(&rows[..1], &east);
    assert_eq!(
        t,
        "BINDING        NOW                     IF east FAILS    WHAT HAPPENS\n\
         demo/a-opted   east:2 north:2 west:2   north:3 west:3   moves away from east (east after 300s), its copy purged once the others run it healthy (at most 600 s later)\n"
    );
    assert_eq!(text(&[], &east), "no workload is scheduled on east\n");
}
