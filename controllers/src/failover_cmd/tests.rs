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

/// [`plan`] on 1 June 2026.
fn plan_in_june(
    bindings: &[(String, &BindingSpec, bool)],
    clusters: &[Cluster],
    failing: &BTreeSet<String>,
    reported: &Reported,
) -> Vec<Row> {
    plan(
        bindings,
        clusters,
        failing,
        reported,
        "2026-06-01T00:00:00Z".parse().unwrap(),
    )
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
        ("demo/a-opted".to_string(), &opted, false),
        ("demo/b-not-opted".to_string(), &not_opted, false),
        ("demo/c-forever".to_string(), &forever, false),
        ("demo/d-only-east".to_string(), &only_east, false),
        ("demo/e-elsewhere".to_string(), &elsewhere, false),
        ("demo/f-frozen".to_string(), &opted, true),
    ];
    let east = BTreeSet::from(["east".to_string()]);
    let rows = plan_in_june(&bindings, &fleet, &east, &Reported::new());
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
            (
                "demo/f-frozen",
                "east:2 north:2 west:2".to_string(),
                "stays: the binding is frozen (no policy claims the template any more, or the one holding it is invalid: its Scheduled condition says which)"
            ),
        ],
        "a binding not on east is not listed"
    );
    // east and west failing at once: failover holds
    let both = BTreeSet::from(["east".to_string(), "west".to_string()]);
    let held = plan_in_june(&bindings[..1], &fleet, &both, &Reported::new());
    assert!(
        held[0].verdict.starts_with(
            "stays: cluster failover holds: 2 of 3 clusters stopped being Ready at once"
        ),
        "{}",
        held[0].verdict
    );
    // a Pull member fails as unreachable: its tolerations of that taint count
    let mut pull = fleet.clone();
    pull[0].spec.sync_mode = causeway_crds::federation::cluster::ClusterSyncMode::Pull;
    let unreachable = binding(
        json!({"failover": {"cluster": {}},
               "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"},
                             "clusterTolerations": [{"key": "cluster.causeway.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 900}]}}),
        &spread,
    );
    let pulled = plan_in_june(
        &[("demo/u".to_string(), &unreachable, false)],
        &pull,
        &east,
        &Reported::new(),
    );
    assert!(
        pulled[0].verdict.contains("(east after 900s)"),
        "{}",
        pulled[0].verdict
    );
    // several moving: the rate limit is said
    let t = text(&[pulled[0].clone(), pulled[0].clone()], &east);
    assert!(
        t.ends_with("(workloads leave a failed cluster one every 2 s, the eviction rate limit: the last of these 2 about 2 s after its toleration ends)\n"),
        "{t}"
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

/// With `failover.cluster.statePreservation`, the dry run says what the copies that
/// take over would be labelled with, from what the failing copy reported last.
#[test]
fn the_dry_run_says_what_state_would_be_carried() {
    let fleet = vec![cluster("east"), cluster("west"), cluster("north")];
    let rules = json!({"failover": {"cluster": {"statePreservation": {"rules": [
        {"aliasLabelName": "example.com/epoch", "jsonPath": "{.observedGeneration}"}]}}},
        "placement": {"clusterAffinities": [
            {"affinityName": "primary", "clusterNames": ["east"]},
            {"affinityName": "backup", "clusterNames": ["west"]}]}});
    let primary = binding(rules, &[("east", 6)]);
    let bindings = vec![("demo/api".to_string(), &primary, false)];
    let east = BTreeSet::from(["east".to_string()]);
    let reported = Reported::from([(
        ("demo/api".to_string(), "east".to_string()),
        json!({"observedGeneration": 7}),
    )]);
    let rows = plan_in_june(&bindings, &fleet, &east, &reported);
    assert_eq!(placement_text(&rows[0].after), "west:6");
    assert!(
        rows[0].verdict.ends_with(
            "; west's copy labelled by statePreservation (from east: kept example.com/epoch=7)"
        ),
        "{}",
        rows[0].verdict
    );
    assert_eq!(
        rows[0].preserved_labels,
        BTreeMap::from([("example.com/epoch".to_string(), "7".to_string())])
    );
    // nothing reported: said, and nothing labelled
    let rows = plan_in_june(&bindings, &fleet, &east, &Reported::new());
    assert!(
        rows[0].verdict.contains("; statePreservation labels no copy (from east: kept nothing; nothing for example.com/epoch: the failed copy reported no status)"),
        "{}",
        rows[0].verdict
    );
    assert!(rows[0].preserved_labels.is_empty());
}

/// A division by available replicas previews with what a replica requests (the
/// binding's `replicaRequirements`), as the detector will divide: a cluster with room
/// for 4 such replicas takes 1 of 6, not half because both have free pods.
#[test]
fn the_dry_run_divides_by_what_a_replica_requests() {
    let with_room = |name: &str, cpu: &str| {
        let mut c = cluster(name);
        c.status.as_mut().unwrap().resource_summary = Some(
            serde_json::from_value(
                json!({"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}}),
            )
            .unwrap(),
        );
        c
    };
    let fleet = vec![
        with_room("east", "8"),
        with_room("west", "4"),
        with_room("north", "20"),
    ];
    let spec = binding(
        json!({"failover": {"cluster": {}},
               "replicaRequirements": {"resourceRequest": {"cpu": "1", "memory": "64Mi"}},
               "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                   "replicaDivisionPreference": "Weighted",
                   "weightPreference": {"dynamicWeight": "AvailableReplicas"}}}}),
        &[("east", 2), ("west", 1), ("north", 3)],
    );
    let east = BTreeSet::from(["east".to_string()]);
    let rows = plan_in_june(
        &[("demo/api".to_string(), &spec, false)],
        &fleet,
        &east,
        &Reported::new(),
    );
    assert_eq!(
        placement_text(&rows[0].after),
        "north:5 west:1",
        "{}",
        rows[0].verdict
    );
}
