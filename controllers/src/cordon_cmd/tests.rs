use super::*;
use crate::failover_cmd::placement_text;
use serde_json::json;

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        ..Taint::default()
    }
}

fn at200() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(200).unwrap(),
    )
}

#[test]
fn cordon_drain_and_uncordon_touch_only_their_own_taint() {
    let key = cluster_taints::UNSCHEDULABLE;
    let registry = taint(cluster_taints::NOT_READY, "NoSchedule");
    let user = taint("team.example.com/gpu", "NoSchedule");
    let base = vec![registry.clone(), user.clone()];
    let cordoned = taints_for(&base, Action::Cordon, &at200());
    assert_eq!(
        cordoned,
        [registry.clone(), user.clone(), taint(key, "NoSchedule")]
    );
    // idempotent
    assert_eq!(taints_for(&cordoned, Action::Cordon, &at200()), cordoned);
    // a cordoned cluster drained keeps its NoSchedule taint (and when it was added)
    let mut timed = cordoned.clone();
    timed[2].time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
    ));
    let drained = taints_for(&timed, Action::Drain, &at200());
    assert_eq!(drained[..3], timed[..]);
    // the NoExecute taint is dated: placements' tolerationSeconds count from it
    let mut no_execute = taint(key, "NoExecute");
    no_execute.time_added = Some(at200());
    assert_eq!(drained[3], no_execute);
    // draining again keeps its date
    let later = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(900).unwrap(),
    );
    assert_eq!(taints_for(&drained, Action::Drain, &later), drained);
    // a NoExecute drain taint written undated is dated when drained again
    let mut undated = drained.clone();
    undated[3].time_added = None;
    let redrained = taints_for(&undated, Action::Drain, &later);
    assert_eq!(redrained[3].time_added, Some(later.clone()));
    // a drained cluster cordoned again loses only the NoExecute taint
    assert_eq!(taints_for(&drained, Action::Cordon, &at200()), timed);
    assert_eq!(taints_for(&drained, Action::Uncordon, &at200()), base);
    assert_eq!(taints_for(&base, Action::Uncordon, &at200()), base);
}

fn cluster(name: &str) -> Cluster {
    cluster_ready(name, "True")
}

fn cluster_ready(name: &str, ready: &str) -> Cluster {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "ClusterReady",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    )
    .unwrap()
}

fn binding(clusters: &[(&str, i32)], placement: serde_json::Value) -> BindingSpec {
    serde_json::from_value(json!({
        "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo",
            "name": "web", "uid": "u1"},
        "replicas": clusters.iter().map(|(_, n)| n).sum::<i32>(),
        "clusters": clusters.iter().map(|(c, n)| json!({"name": c, "replicas": n})).collect::<Vec<_>>(),
        "placement": placement,
    }))
    .unwrap()
}

#[test]
fn a_drain_says_where_each_workload_goes_and_which_would_have_nowhere() {
    let clusters = [cluster("east"), cluster("west")];
    let divided = json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}});
    let web = binding(&[("east", 2), ("west", 2)], divided.clone());
    let pinned = binding(
        &[("east", 1)],
        json!({"clusterAffinity": {"clusterNames": ["east"]}}),
    );
    let tolerant = binding(
        &[("east", 1)],
        json!({"clusterAffinity": {"clusterNames": ["east"]}, "clusterTolerations": [
            {"key": cluster_taints::UNSCHEDULABLE, "operator": "Exists"}]}),
    );
    let elsewhere = binding(&[("west", 4)], divided);
    let mut dependency = binding(&[("east", 0)], json!({}));
    dependency.required_by =
        vec![serde_json::from_value(json!({"namespace": "demo", "name": "x"})).unwrap()];
    let bindings = vec![
        ("demo/web-deployment".to_string(), &web, false),
        ("demo/pinned-deployment".to_string(), &pinned, false),
        ("demo/tolerant-deployment".to_string(), &tolerant, false),
        ("demo/frozen-deployment".to_string(), &pinned, true),
        ("demo/elsewhere-deployment".to_string(), &elsewhere, false),
        ("demo/config-configmap".to_string(), &dependency, false),
    ];
    let rows = plan(&bindings, &clusters, "east");
    let got: Vec<(&str, String, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.binding.as_str(),
                placement_text(&r.after),
                r.verdict.split(':').next().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("demo/frozen-deployment", "east:1".to_string(), "stays"),
            ("demo/pinned-deployment", "-".to_string(), "NO CLUSTER LEFT"),
            ("demo/tolerant-deployment", "east:1".to_string(), "stays"),
            (
                "demo/web-deployment",
                "west:4".to_string(),
                "moves away from east"
            ),
        ],
        "{rows:?}"
    );
    let table = text(&rows, "east");
    assert!(
        table.contains("ONCE east IS DRAINED") && table.contains("NO CLUSTER LEFT"),
        "{table}"
    );
    assert_eq!(plan(&bindings, &clusters, "north"), []);
    assert_eq!(text(&[], "north"), "no workload is scheduled on north\n");
}

#[test]
fn a_drain_predicts_what_the_detector_keeps() {
    let verdict = |rows: Vec<Row>| -> (String, String) {
        let r = &rows[0];
        (placement_text(&r.after), r.verdict.clone())
    };
    let three = [cluster("east"), cluster("west"), cluster("north")];
    // spread over 3 clusters at least: the detector keeps what it had, east included
    let spread = binding(
        &[("east", 1), ("west", 1), ("north", 1)],
        json!({"spreadConstraints": [{"spreadByField": "cluster", "minGroups": 3}],
            "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}),
    );
    let (after, v) = verdict(plan(&[("s".into(), &spread, false)], &three, "east"));
    assert_eq!(after, "east:1 north:1 west:1");
    assert!(
        v.starts_with("stays on east: its spread constraints cannot be met without it"),
        "{v}"
    );
    // evicted from west by application failover: not a destination while another is
    let mut evicted = binding(
        &[("east", 2)],
        json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}}),
    );
    evicted.evictions = vec![
        serde_json::from_value(json!({"cluster": "west",
        "reason": "unhealthy", "evictedAt": "2026-01-01T00:00:00Z"}))
        .unwrap(),
    ];
    let (after, v) = verdict(plan(&[("e".into(), &evicted, false)], &three, "east"));
    assert_eq!(
        (after.as_str(), v.as_str()),
        ("north:2", "moves away from east")
    );
    // the only other cluster is not Ready (it keeps what it has): nowhere Ready to go
    let down = [cluster("east"), cluster_ready("west", "False")];
    let both = binding(
        &[("east", 2), ("west", 2)],
        json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}}),
    );
    let (after, v) = verdict(plan(&[("d".into(), &both, false)], &down, "east"));
    assert_eq!(after, "west:4");
    assert!(
        v.starts_with("NO READY CLUSTER LEFT: only to west, not Ready"),
        "{v}"
    );
}

#[test]
fn cordoning_a_drained_cluster_says_the_drain_is_lifted() {
    let key = cluster_taints::UNSCHEDULABLE;
    let cordoned = [taint(key, "NoSchedule")];
    let drained = [taint(key, "NoSchedule"), taint(key, "NoExecute")];
    let s = said("east", Action::Cordon, Some(&drained));
    assert!(
        s.starts_with("cluster east cordoned, its drain lifted")
            && s.contains(&format!("{key}:NoExecute removed"))
            && !s.contains("what runs there stays"),
        "{s}"
    );
    let s = said("east", Action::Cordon, Some(&[]));
    assert!(s.contains("what runs there stays"), "{s}");
    assert_eq!(
        said("east", Action::Cordon, None),
        "cluster east is already cordoned: nothing to do"
    );
    // what `write` writes in each case: the drain is lifted only when there was one
    assert_eq!(taints_for(&drained, Action::Cordon, &at200()), cordoned);
    let s = said("east", Action::Uncordon, Some(&drained));
    assert!(s.starts_with("cluster east uncordoned"), "{s}");
    assert_eq!(
        said("east", Action::Uncordon, None),
        "cluster east was not cordoned: nothing to do"
    );
}

/// `causeway drain` on a cluster drained already writes nothing and says so, rather
/// than that it drained it.
#[test]
fn draining_a_drained_cluster_says_there_is_nothing_to_do() {
    let key = cluster_taints::UNSCHEDULABLE;
    let mut dated = taint(key, "NoExecute");
    dated.time_added = Some(at200());
    let drained = [taint(key, "NoSchedule"), dated];
    // what `write` sees: the taints already as a drain wants them, so nothing written
    assert_eq!(taints_for(&drained, Action::Drain, &at200()), drained);
    assert_eq!(
        said("east", Action::Drain, None),
        "cluster east is already drained: nothing to do"
    );
    let s = said("east", Action::Drain, Some(&[]));
    assert!(
        s.starts_with("cluster east drained: taints") && s.contains(&format!("{key}:NoExecute")),
        "{s}"
    );
}
