//! `schedule` with Divided replicas: the division reaches the decision, and every
//! chosen cluster left without replicas gets a reason.

use super::super::*;

const FLEET: &str = r#"
- metadata: {name: a, labels: {env: prod}}
  spec: {syncMode: Push}
  status:
    resourceSummary:
      allocatable: {cpu: "6", pods: "110"}
- metadata: {name: b, labels: {env: prod}}
  spec: {syncMode: Push}
  status:
    resourceSummary:
      allocatable: {cpu: "12", pods: "110"}
- metadata: {name: c, labels: {env: dev}}
  spec: {syncMode: Push}
  status:
    resourceSummary:
      allocatable: {cpu: "20", pods: "110"}
      allocated: {cpu: "2"}
- metadata: {name: d}
  spec: {syncMode: Push}
"#;

fn run(
    placement: &str,
    replicas: i32,
    workload: Workload,
) -> Result<Vec<(String, String)>, PlacementError> {
    let clusters: Vec<Cluster> = serde_saphyr::from_str(FLEET).unwrap();
    let placement: Placement = serde_saphyr::from_str(placement).unwrap();
    let workload = Workload {
        replicas: Some(replicas),
        uid: "uid-1".into(),
        ..workload
    };
    let d = schedule(&placement, &clusters, &workload)?;
    let mut out: Vec<(String, String)> = d
        .chosen
        .iter()
        .map(|t| (t.cluster.clone(), t.replicas.unwrap().to_string()))
        .collect();
    out.extend(d.rejected.iter().map(|(c, r)| (c.clone(), r.to_string())));
    out.sort();
    Ok(out)
}

fn rows(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(c, o)| (c.to_string(), o.to_string()))
        .collect()
}

#[test]
fn static_weights_divide_and_unmatched_clusters_get_a_reason() {
    let p = "
clusterAffinity: {clusterNames: [a, b, c]}
replicaScheduling:
  replicaSchedulingType: Divided
  replicaDivisionPreference: Weighted
  weightPreference:
    staticWeightList:
    - {targetCluster: {clusterNames: [a]}, weight: 1}
    - {targetCluster: {clusterNames: [b]}, weight: 2}
    - {targetCluster: {labelSelector: {matchLabels: {env: prod}}}, weight: 1}
";
    // a: max(1, 1) = 1, b: max(2, 1) = 2, c: no entry.
    assert_eq!(
        run(p, 9, Workload::default()).unwrap(),
        rows(&[
            ("a", "3"),
            ("b", "6"),
            ("c", "matched by no staticWeightList entry"),
            ("d", "not in clusterNames [a, b, c]"),
        ])
    );
}

#[test]
fn equal_weights_without_a_preference_and_zero_counts_are_not_chosen() {
    let p = "
clusterAffinity: {clusterNames: [a, b, c]}
replicaScheduling: {replicaSchedulingType: Divided}
";
    assert_eq!(
        run(p, 6, Workload::default()).unwrap(),
        rows(&[
            ("a", "2"),
            ("b", "2"),
            ("c", "2"),
            ("d", "not in clusterNames [a, b, c]")
        ])
    );
    let one = run(p, 1, Workload::default()).unwrap();
    let chosen = one.iter().filter(|(_, o)| o == "1").count();
    let none = one
        .iter()
        .filter(|(_, o)| o == "given none of the 1 replicas")
        .count();
    assert_eq!((chosen, none), (1, 2), "{one:?}");
}

#[test]
fn dynamic_weights_use_each_clusters_summary() {
    let p = "
clusterAffinity: {clusterNames: [a, b, c, d]}
replicaScheduling:
  replicaSchedulingType: Divided
  weightPreference: {dynamicWeight: AvailableReplicas}
";
    let request = BTreeMap::from([("cpu".to_string(), Quantity("1".into()))]);
    let w = Workload {
        request: request.clone(),
        ..Default::default()
    };
    // available 6 / 12 / 18 / 0 (d has no summary)
    assert_eq!(
        run(p, 12, w).unwrap(),
        rows(&[
            ("a", "2"),
            ("b", "4"),
            ("c", "6"),
            ("d", "given none of the 12 replicas")
        ])
    );
    // Steady: scaling 12 → 15 keeps 2/4/6 and adds 3.
    let previous = BTreeMap::from([("a".into(), 2), ("b".into(), 4), ("c".into(), 6)]);
    let steady = Workload {
        request: request.clone(),
        previous: previous.clone(),
        ..Default::default()
    };
    let got = run(p, 15, steady).unwrap();
    let count = |c: &str| {
        got.iter()
            .find(|(n, _)| n == c)
            .unwrap()
            .1
            .parse::<i32>()
            .unwrap()
    };
    assert!(
        count("a") >= 2 && count("b") >= 4 && count("c") >= 6,
        "{got:?}"
    );
    assert_eq!(count("a") + count("b") + count("c"), 15);
    // Too little room is an error that says what to do.
    let err = run(
        p,
        40,
        Workload {
            request,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot divide the replicas: the chosen clusters can hold 36 more replicas but 40 are \
         to be placed; add capacity or clusters, or lower spec.replicas"
    );
}

/// B.11 with dynamic weights: a primary group without the capacity (d has no summary:
/// no room) gives way to the backup group, as in Karmada; with no group able to take
/// them, the capacity error is said.
#[test]
fn a_group_without_capacity_gives_way_to_the_next() {
    let request = BTreeMap::from([("cpu".to_string(), Quantity("1".into()))]);
    let w = || Workload {
        request: request.clone(),
        ..Default::default()
    };
    let groups = |primary: &str, backup: &str| {
        format!(
            "
clusterAffinities:
- {{affinityName: primary, clusterNames: [{primary}]}}
- {{affinityName: backup, clusterNames: [{backup}]}}
replicaScheduling:
  replicaSchedulingType: Divided
  weightPreference: {{dynamicWeight: AvailableReplicas}}
"
        )
    };
    let clusters: Vec<Cluster> = serde_saphyr::from_str(FLEET).unwrap();
    let placement: Placement = serde_saphyr::from_str(&groups("d", "b")).unwrap();
    let d = schedule(
        &placement,
        &clusters,
        &Workload {
            replicas: Some(3),
            ..w()
        },
    )
    .unwrap();
    assert_eq!(d.affinity_name.as_deref(), Some("backup"));
    assert_eq!(
        d.chosen
            .iter()
            .map(|t| (t.cluster.as_str(), t.replicas))
            .collect::<Vec<_>>(),
        [("b", Some(3))]
    );
    // neither group has room: the error, not an empty placement
    let placement: Placement = serde_saphyr::from_str(&groups("d", "d")).unwrap();
    let e = schedule(
        &placement,
        &clusters,
        &Workload {
            replicas: Some(3),
            ..w()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PlacementError::Division(DivideError::NotEnoughCapacity { .. })
        ),
        "{e:?}"
    );
}
