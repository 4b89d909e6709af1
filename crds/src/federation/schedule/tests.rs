//! Table tests: one fixed fleet of clusters, one placement per row, and the full
//! outcome (chosen, or the reason shown to users) for every cluster.

use super::*;

/// The fleet every table row schedules over.
const FLEET: &str = r#"
- metadata: {name: a, labels: {env: prod, tier: web}}
  spec: {syncMode: Push, provider: aws, region: us-east, zones: [us-east-1a]}
- metadata: {name: b, labels: {env: dev}}
  spec: {syncMode: Push, provider: gcp, zone: eu-west-1b}
  status: {region: eu-west}
- metadata: {name: c, labels: {env: prod, gpu: "true"}}
  spec: {syncMode: Pull, provider: aws, region: us-east}
  status: {region: us-west, zones: [us-west-1a, us-west-1b]}
- metadata: {name: d}
  spec:
    syncMode: Push
    taints: [{key: cluster.causeway.io/not-ready, effect: NoSchedule}]
- metadata: {name: e, labels: {env: prod}, deletionTimestamp: "2025-01-01T00:00:00Z"}
  spec: {syncMode: Push, region: us-east}
- metadata: {name: f, labels: {env: prod}}
  spec:
    syncMode: Push
    region: us-east
    taints:
    - {key: dedicated, value: ml, effect: NoExecute}
    - {key: soft, effect: PreferNoSchedule}
"#;

fn fleet() -> Vec<Cluster> {
    serde_saphyr::from_str(FLEET).unwrap()
}

fn placement(yaml: &str) -> Placement {
    if yaml.trim().is_empty() {
        return Placement::default();
    }
    serde_saphyr::from_str(yaml).unwrap()
}

/// Every cluster's outcome: "chosen" or its reason, in name order.
fn outcome(placement: &Placement, clusters: &[Cluster]) -> Vec<(String, String)> {
    outcome_for(placement, clusters, &Workload::default())
}

/// [`outcome`] for a given workload.
fn outcome_for(
    placement: &Placement,
    clusters: &[Cluster],
    workload: &Workload,
) -> Vec<(String, String)> {
    let d = schedule(placement, clusters, workload).unwrap();
    let chosen = d
        .chosen
        .iter()
        .map(|t| (t.cluster.clone(), "chosen".into()));
    let rejected = d.rejected.iter().map(|(c, r)| (c.clone(), r.to_string()));
    let mut all: Vec<(String, String)> = chosen.chain(rejected).collect();
    all.sort();
    all
}

fn expect(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(c, r)| (c.to_string(), r.to_string()))
        .collect()
}

const REMOVED: (&str, &str) = ("e", "being removed");
const NOT_READY: (&str, &str) = (
    "d",
    "taint cluster.causeway.io/not-ready:NoSchedule not tolerated",
);
const DEDICATED: (&str, &str) = ("f", "taint dedicated=ml:NoExecute not tolerated");

/// One cluster's expected outcome: its name and "chosen" or its reason.
type Outcome = (&'static str, &'static str);

/// A table row: the case, the placement YAML and every cluster's outcome.
type Row = (&'static str, &'static str, Vec<Outcome>);

fn run_table(table: &[Row]) {
    for (case, yaml, want) in table {
        assert_eq!(outcome(&placement(yaml), &fleet()), expect(want), "{case}");
    }
}

/// B.9: the kubefed precedence table, each row as Causeway resolves it (see the
/// module docs for where it follows Karmada instead).
#[test]
fn precedence_table() {
    let all_untainted = vec![
        ("a", "chosen"),
        ("b", "chosen"),
        ("c", "chosen"),
        NOT_READY,
        REMOVED,
        DEDICATED,
    ];
    run_table(&[
        (
            "placement {} selects every cluster",
            "",
            all_untainted.clone(),
        ),
        (
            "clusterAffinity {} selects every cluster",
            "clusterAffinity: {}",
            all_untainted.clone(),
        ),
        (
            "clusterNames [] is ignored",
            "clusterAffinity: {clusterNames: []}",
            all_untainted.clone(),
        ),
        (
            "labelSelector {} selects every cluster",
            "clusterAffinity: {labelSelector: {}}",
            all_untainted,
        ),
        (
            "labelSelector with labels selects the matching clusters",
            "clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}",
            vec![
                ("a", "chosen"),
                ("b", "not matched by labelSelector env=prod"),
                ("c", "chosen"),
                ("d", "not matched by labelSelector env=prod"),
                REMOVED,
                DEDICATED,
            ],
        ),
        (
            "clusterNames and labelSelector must both hold",
            "clusterAffinity: {clusterNames: [a, b], labelSelector: {matchLabels: {env: prod}}}",
            vec![
                ("a", "chosen"),
                ("b", "not matched by labelSelector env=prod"),
                ("c", "not in clusterNames [a, b]"),
                ("d", "not in clusterNames [a, b]"),
                REMOVED,
                ("f", "not in clusterNames [a, b]"),
            ],
        ),
    ]);
}

/// B.10: labelSelector AND fieldSelector AND clusterNames AND NOT exclude.
#[test]
fn affinity_table() {
    run_table(&[
        (
            "exclude beats clusterNames",
            "clusterAffinity: {clusterNames: [b, a], exclude: [a]}",
            vec![
                ("a", "excluded by name"),
                ("b", "chosen"),
                ("c", "not in clusterNames [a, b]"),
                ("d", "not in clusterNames [a, b]"),
                REMOVED,
                ("f", "not in clusterNames [a, b]"),
            ],
        ),
        (
            "every unmet label requirement is named, in kubectl syntax",
            r#"clusterAffinity:
                 labelSelector:
                   matchLabels: {env: prod}
                   matchExpressions:
                   - {key: tier, operator: In, values: [web, api]}
                   - {key: gpu, operator: DoesNotExist}"#,
            vec![
                ("a", "chosen"),
                (
                    "b",
                    "not matched by labelSelector env=prod,tier in (web,api)",
                ),
                ("c", "not matched by labelSelector tier in (web,api),!gpu"),
                (
                    "d",
                    "not matched by labelSelector env=prod,tier in (web,api)",
                ),
                REMOVED,
                ("f", "not matched by labelSelector tier in (web,api)"),
            ],
        ),
        (
            "NotIn and Exists",
            r#"clusterAffinity:
                 labelSelector:
                   matchExpressions:
                   - {key: env, operator: NotIn, values: [dev]}
                   - {key: env, operator: Exists}"#,
            vec![
                ("a", "chosen"),
                ("b", "not matched by labelSelector env notin (dev)"),
                ("c", "chosen"),
                ("d", "not matched by labelSelector env"),
                REMOVED,
                DEDICATED,
            ],
        ),
        (
            "region In reads status.region before spec.region",
            r#"clusterAffinity:
                 fieldSelector:
                   matchExpressions: [{key: region, operator: In, values: [us-east]}]"#,
            vec![
                ("a", "chosen"),
                ("b", "region eu-west not in [us-east]"),
                ("c", "region us-west not in [us-east]"),
                ("d", "region unknown, not in [us-east]"),
                REMOVED,
                DEDICATED,
            ],
        ),
        (
            "provider NotIn passes clusters with no provider",
            r#"clusterAffinity:
                 fieldSelector:
                   matchExpressions: [{key: provider, operator: NotIn, values: [aws]}]"#,
            vec![
                ("a", "provider aws in excluded [aws]"),
                ("b", "chosen"),
                ("c", "provider aws in excluded [aws]"),
                NOT_READY,
                REMOVED,
                DEDICATED,
            ],
        ),
        (
            "zone In wants every zone of the cluster listed (spec.zone counts)",
            r#"clusterAffinity:
                 fieldSelector:
                   matchExpressions:
                   - {key: zone, operator: In, values: [us-west-1a, eu-west-1b, us-east-1a]}"#,
            vec![
                ("a", "chosen"),
                ("b", "chosen"),
                (
                    "c",
                    "zones [us-west-1a, us-west-1b] not all in [eu-west-1b, us-east-1a, us-west-1a]",
                ),
                (
                    "d",
                    "zone unknown, not in [eu-west-1b, us-east-1a, us-west-1a]",
                ),
                REMOVED,
                (
                    "f",
                    "zone unknown, not in [eu-west-1b, us-east-1a, us-west-1a]",
                ),
            ],
        ),
        (
            "zone NotIn refuses a cluster with any listed zone",
            r#"clusterAffinity:
                 fieldSelector:
                   matchExpressions: [{key: zone, operator: NotIn, values: [us-west-1b]}]"#,
            vec![
                ("a", "chosen"),
                ("b", "chosen"),
                (
                    "c",
                    "zones [us-west-1a, us-west-1b] meet excluded [us-west-1b]",
                ),
                NOT_READY,
                REMOVED,
                DEDICATED,
            ],
        ),
        (
            "all four fields ANDed",
            r#"clusterAffinity:
                 clusterNames: [a, c, f]
                 exclude: [f]
                 labelSelector: {matchLabels: {env: prod}}
                 fieldSelector:
                   matchExpressions: [{key: provider, operator: In, values: [aws]}]"#,
            vec![
                ("a", "chosen"),
                ("b", "not in clusterNames [a, c, f]"),
                ("c", "chosen"),
                ("d", "not in clusterNames [a, c, f]"),
                REMOVED,
                ("f", "excluded by name"),
            ],
        ),
    ]);
}

/// B.12: NoSchedule and NoExecute taints repel unless tolerated.
#[test]
fn toleration_table() {
    let names = "clusterAffinity: {clusterNames: [a, d, f]}\n";
    let rest = [
        ("b", "not in clusterNames [a, d, f]"),
        ("c", "not in clusterNames [a, d, f]"),
        REMOVED,
    ];
    let rows: [(&str, &str, [Outcome; 3]); 7] = [
        (
            "no tolerations",
            "",
            [("a", "chosen"), NOT_READY, DEDICATED],
        ),
        (
            "Exists on the key tolerates any value and effect",
            "clusterTolerations: [{key: dedicated, operator: Exists}]",
            [("a", "chosen"), NOT_READY, ("f", "chosen")],
        ),
        (
            "Equal needs the value",
            "clusterTolerations: [{key: dedicated, value: gpu, effect: NoExecute}]",
            [("a", "chosen"), NOT_READY, DEDICATED],
        ),
        (
            "Equal with the value and effect",
            "clusterTolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoExecute}]",
            [("a", "chosen"), NOT_READY, ("f", "chosen")],
        ),
        (
            "the effect must match",
            "clusterTolerations: [{key: dedicated, value: ml, effect: NoSchedule}]",
            [("a", "chosen"), NOT_READY, DEDICATED],
        ),
        (
            "an empty key with Exists tolerates every taint",
            "clusterTolerations: [{operator: Exists}]",
            [("a", "chosen"), ("d", "chosen"), ("f", "chosen")],
        ),
        (
            "tolerating the not-ready taint",
            "clusterTolerations: [{key: cluster.causeway.io/not-ready, operator: Exists, effect: NoSchedule}]",
            [("a", "chosen"), ("d", "chosen"), DEDICATED],
        ),
    ];
    for (case, tolerations, want) in rows {
        let mut want = want.to_vec();
        want.extend(rest);
        want.sort();
        let p = placement(&format!("{names}{tolerations}"));
        assert_eq!(outcome(&p, &fleet()), expect(&want), "{case}");
    }
}

/// A NoExecute taint tolerated for `tolerationSeconds` is tolerated that long from its
/// `timeAdded`, then the cluster is left out (Kubernetes' taint manager: the least of
/// the matching tolerations' seconds); without a `timeAdded`, or with no `now`, as
/// long as the toleration matches; the scheduler is told when to look again.
#[test]
fn no_execute_taints_are_tolerated_for_their_seconds() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    let at = |s: i64| Timestamp::from_second(s).unwrap();
    let mut fleet = fleet();
    fleet[5].spec.taints[0].time_added = Some(Time(at(1000)));
    let p = placement(
        "clusterAffinity: {clusterNames: [a, f]}\nclusterTolerations: [{key: dedicated, operator: Exists, effect: NoExecute, tolerationSeconds: 60}, {key: dedicated, operator: Exists}]",
    );
    let chosen_at = |fleet: &[Cluster], now: Option<i64>| {
        let w = Workload {
            now: now.map(at),
            ..Workload::default()
        };
        let d = schedule(&p, fleet, &w).unwrap();
        d.target_clusters()
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(chosen_at(&fleet, Some(1030)), ["a", "f"], "within the 60 s");
    assert_eq!(chosen_at(&fleet, Some(1060)), ["a"], "60 s after timeAdded");
    assert_eq!(chosen_at(&fleet, None), ["a", "f"], "no clock: tolerated");
    assert_eq!(
        next_taint_deadline(&fleet[5].spec.taints, &p.cluster_tolerations, at(1030)),
        Some(at(1060))
    );
    assert_eq!(
        next_taint_deadline(&fleet[5].spec.taints, &p.cluster_tolerations, at(1060)),
        None
    );
    // no timeAdded to count from: tolerated while it matches
    fleet[5].spec.taints[0].time_added = None;
    assert_eq!(chosen_at(&fleet, Some(99_999)), ["a", "f"]);
    // 0 seconds: not tolerated at all
    let zero = placement(
        "clusterAffinity: {clusterNames: [a, f]}\nclusterTolerations: [{key: dedicated, operator: Exists, effect: NoExecute, tolerationSeconds: 0}]",
    );
    let d = schedule(&zero, &fleet, &Workload::default()).unwrap();
    assert_eq!(d.target_clusters().len(), 1);
}

/// C.17–18: Duplicated, also when replicaScheduling is unset; non-workloads get none.
#[test]
fn duplicated_replicas() {
    let names = "clusterAffinity: {clusterNames: [a, b]}\n";
    let table = [
        ("unset replicaScheduling", "", Some(3)),
        (
            "Duplicated",
            "replicaScheduling: {replicaSchedulingType: Duplicated}",
            Some(3),
        ),
        ("a non-workload", "", None),
        (
            "a non-workload under Divided",
            "replicaScheduling: {replicaSchedulingType: Divided}",
            None,
        ),
        (
            "zero replicas under Divided",
            "replicaScheduling: {replicaSchedulingType: Divided}",
            Some(0),
        ),
    ];
    for (case, yaml, replicas) in table {
        let p = placement(&format!("{names}{yaml}"));
        let d = schedule(
            &p,
            &fleet(),
            &Workload {
                replicas,
                ..Default::default()
            },
        )
        .unwrap();
        let want: Vec<Target> = ["a", "b"]
            .map(|c| Target {
                cluster: c.into(),
                replicas,
            })
            .to_vec();
        assert_eq!(d.chosen, want, "{case}");
    }
}

/// replicaScheduling without replicaSchedulingType divides (Karmada's CRD defaults it
/// to Divided): a weight preference is never silently ignored with every cluster
/// running the full count.
#[test]
fn replica_scheduling_without_a_type_divides() {
    let p = placement(
        "clusterAffinity: {clusterNames: [a, b]}\nreplicaScheduling: {replicaDivisionPreference: Weighted, weightPreference: {staticWeightList: [{targetCluster: {clusterNames: [a]}, weight: 1}, {targetCluster: {clusterNames: [b]}, weight: 2}]}}",
    );
    let d = schedule(
        &p,
        &fleet(),
        &Workload {
            replicas: Some(9),
            ..Default::default()
        },
    )
    .unwrap();
    let got: Vec<(&str, Option<i32>)> = d
        .chosen
        .iter()
        .map(|t| (t.cluster.as_str(), t.replicas))
        .collect();
    assert_eq!(got, [("a", Some(3)), ("b", Some(6))]);
}

/// B.11 (ordered groups): the first group that chooses a cluster is used.
#[test]
fn affinity_groups_fall_back_in_order() {
    let groups = r#"clusterAffinities:
      - {affinityName: primary, clusterNames: [d]}
      - {affinityName: backup, labelSelector: {matchLabels: {env: dev}}}
      - {affinityName: last, clusterNames: [a]}"#;
    let d = schedule(&placement(groups), &fleet(), &Workload::default()).unwrap();
    assert_eq!(d.affinity_name.as_deref(), Some("backup"));
    let chosen: Vec<&str> = d.chosen.iter().map(|t| t.cluster.as_str()).collect();
    assert_eq!(chosen, ["b"]);
    assert_eq!(
        d.rejected["a"].to_string(),
        "not matched by labelSelector env=dev"
    );

    let none = "clusterAffinities: [{affinityName: primary, clusterNames: [d]}, {affinityName: backup, clusterNames: [e]}]";
    let d = schedule(&placement(none), &fleet(), &Workload::default()).unwrap();
    assert!(d.chosen.is_empty());
    assert_eq!(d.affinity_name, None);
    assert_eq!(
        d.rejected["d"].to_string(),
        NOT_READY.1,
        "the first group's reasons"
    );
    assert_eq!(d.rejected["a"].to_string(), "not in clusterNames [d]");
}

/// Bad placements are refused with every offending field path and what to do.
#[test]
fn invalid_placements_name_the_field() {
    let at = "spec.placement";
    let table = [
        (
            "clusterAffinity: {fieldSelector: {matchExpressions: [{key: name, operator: In, values: [x]}]}}",
            vec![format!(
                "{at}.clusterAffinity.fieldSelector.matchExpressions[0].key: Invalid value: \"name\": supported values: \"provider\", \"region\", \"zone\""
            )],
        ),
        (
            "clusterAffinity: {fieldSelector: {matchExpressions: [{key: zone, operator: Exists}]}}",
            vec![format!(
                "{at}.clusterAffinity.fieldSelector.matchExpressions[0].operator: Invalid value: \"Exists\": supported values: \"In\", \"NotIn\""
            )],
        ),
        (
            "clusterAffinity: {fieldSelector: {matchExpressions: [{key: region, operator: In}]}}",
            vec![format!(
                "{at}.clusterAffinity.fieldSelector.matchExpressions[0].values: Invalid value: \"\": must be specified when `operator` is 'In' or 'NotIn'"
            )],
        ),
        (
            "clusterAffinity: {labelSelector: {matchExpressions: [{key: env, operator: Gt, values: ['1']}]}}",
            vec![format!(
                "{at}.clusterAffinity.labelSelector.matchExpressions[0].operator: Invalid value: \"Gt\": not a valid label selector operator: use one of In, NotIn, Exists, DoesNotExist"
            )],
        ),
        (
            "clusterTolerations: [{key: gpu, operator: Lt, value: '4'}]",
            vec![format!(
                "{at}.clusterTolerations[0].operator: Invalid value: \"Lt\": the operators Lt and Gt are not allowed in cluster tolerations; use Equal or Exists"
            )],
        ),
        (
            "clusterTolerations: [{key: gpu, operator: Gt, value: '4'}, {value: x}]",
            vec![
                format!(
                    "{at}.clusterTolerations[0].operator: Invalid value: \"Gt\": the operators Lt and Gt are not allowed in cluster tolerations; use Equal or Exists"
                ),
                format!(
                    "{at}.clusterTolerations[1].operator: Invalid value: \"\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""
                ),
            ],
        ),
        (
            "clusterTolerations: [{key: gpu, operator: Exists, value: x, effect: Sometimes}]",
            vec![
                format!(
                    "{at}.clusterTolerations[0].value: Invalid value: \"x\": value must be empty when `operator` is 'Exists'"
                ),
                format!(
                    "{at}.clusterTolerations[0].effect: Invalid value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
                ),
            ],
        ),
        (
            "clusterTolerations: [{key: gpu, operator: Exists, tolerationSeconds: 5}]",
            vec![format!(
                "{at}.clusterTolerations[0].effect: Invalid value: \"\": effect must be 'NoExecute' when `tolerationSeconds` is set"
            )],
        ),
        (
            "{clusterAffinity: {}, clusterAffinities: [{affinityName: x}, {affinityName: x}]}",
            vec![
                format!(
                    "{at}.clusterAffinities: Invalid value: \"\": clusterAffinity and clusterAffinities cannot both be set; keep one"
                ),
                format!(
                    "{at}.clusterAffinities[1].affinityName: Invalid value: \"x\": is used by an earlier group; give each group its own name"
                ),
            ],
        ),
    ];
    for (yaml, want) in table {
        match schedule(&placement(yaml), &fleet(), &Workload::default()) {
            Err(PlacementError::Invalid(errs)) => {
                let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
                assert_eq!(got, want, "{yaml}");
            }
            other => panic!("{yaml}: want Invalid, got {other:?}"),
        }
    }
}

#[test]
fn errors_say_what_to_do() {
    let w = Workload::default();
    let bad = placement("clusterTolerations: [{key: gpu, operator: Lt, value: '4'}]");
    assert_eq!(
        schedule(&bad, &fleet(), &w).unwrap_err().to_string(),
        "invalid placement: spec.placement.clusterTolerations[0].operator: Invalid value: \"Lt\": \
         the operators Lt and Gt are not allowed in cluster tolerations; use Equal or Exists; \
         fix these fields of the policy"
    );
    let negative = schedule(
        &Placement::default(),
        &fleet(),
        &Workload {
            replicas: Some(-1),
            ..Default::default()
        },
    );
    assert_eq!(
        negative.unwrap_err().to_string(),
        "invalid placement: spec.replicas: Invalid value: \"-1\": must be greater than or equal to 0; fix these fields of the policy"
    );
    let aggregated = placement(
        "replicaScheduling: {replicaSchedulingType: Divided, replicaDivisionPreference: Aggregated}",
    );
    let two = Workload {
        replicas: Some(2),
        ..Default::default()
    };
    assert_eq!(
        schedule(&aggregated, &fleet(), &two)
            .unwrap_err()
            .to_string(),
        "spec.placement.replicaScheduling.replicaDivisionPreference: Aggregated is not supported yet; \
         use Weighted (with dynamicWeight: AvailableReplicas to follow capacity)"
    );
    let by_label = placement("spreadConstraints: [{spreadByLabel: team, maxGroups: 2}]");
    assert_eq!(
        schedule(&by_label, &fleet(), &w).unwrap_err().to_string(),
        "spec.placement.spreadConstraints[0].spreadByLabel: spreading by a cluster label is not supported yet; \
         spread by a field (region, zone or provider), or select the clusters with a labelSelector"
    );
    let two = placement(
        "spreadConstraints: [{spreadByField: cluster}, {spreadByField: region}, {spreadByField: zone}]",
    );
    assert_eq!(
        schedule(&two, &fleet(), &w).unwrap_err().to_string(),
        "spec.placement.spreadConstraints: spreading by two fields at once is not supported yet; \
         keep one of region, zone and provider (with the cluster constraint)"
    );

    let mut clusters = fleet();
    clusters.push(clusters[0].clone());
    assert_eq!(
        schedule(&Placement::default(), &clusters, &w)
            .unwrap_err()
            .to_string(),
        "the Cluster \"a\" is given twice; pass each Cluster once"
    );
    clusters[6].metadata.name = None;
    assert_eq!(
        schedule(&Placement::default(), &clusters, &w).unwrap_err(),
        PlacementError::UnnamedCluster(6)
    );
}

#[test]
fn no_clusters_is_an_empty_decision() {
    let d = schedule(&Placement::default(), &[], &Workload::default()).unwrap();
    assert_eq!(d, Decision::default());
}

/// `affinity_matches` is public for other callers (override targets) that may hold
/// an affinity that never went through validation: such requirements match nothing.
#[test]
fn unvalidated_field_requirements_match_nothing() {
    let a = &fleet()[0];
    let table = [
        (
            "fieldSelector: {matchExpressions: [{key: region, operator: In, values: [us-east]}]}",
            true,
        ),
        (
            "fieldSelector: {matchExpressions: [{key: name, operator: In, values: [a]}]}",
            false,
        ),
        (
            "fieldSelector: {matchExpressions: [{key: region, operator: Exists}]}",
            false,
        ),
        (
            "labelSelector: {matchExpressions: [{key: env, operator: In}]}",
            false,
        ),
    ];
    for (yaml, want) in table {
        let affinity: ClusterAffinity = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(affinity_matches(&affinity, a), want, "{yaml}");
    }
    let odd: ClusterAffinity = serde_saphyr::from_str(
        "fieldSelector: {matchExpressions: [{key: name, operator: In, values: [a]}]}",
    )
    .unwrap();
    assert_eq!(
        affinity_rejects(&odd, a).unwrap().to_string(),
        "fieldSelector key name is not supported"
    );
}

/// The decision converts into the binding's `spec.clusters` and
/// `status.schedulingReasons` as users see them.
#[test]
fn decision_fills_the_binding() {
    let p = placement("clusterAffinity: {clusterNames: [a, d]}");
    let d = schedule(
        &p,
        &fleet(),
        &Workload {
            replicas: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    let clusters = serde_json::to_value(d.target_clusters()).unwrap();
    assert_eq!(clusters, serde_json::json!([{"name": "a", "replicas": 2}]));
    let reasons = serde_json::to_value(d.scheduling_reasons()).unwrap();
    let not_named = "not in clusterNames [a, d]";
    assert_eq!(
        reasons,
        serde_json::json!([
            {"cluster": "b", "reason": not_named},
            {"cluster": "c", "reason": not_named},
            {"cluster": "d", "reason": NOT_READY.1},
            {"cluster": "e", "reason": "being removed"},
            {"cluster": "f", "reason": not_named},
        ])
    );
}

/// B.13: spread constraints' validation, as Karmada's webhook has it.
#[test]
fn invalid_spread_constraints_name_the_field() {
    let at = "spec.placement.spreadConstraints";
    let table = [
        (
            "spreadConstraints: [{spreadByField: region, spreadByLabel: team}, {spreadByField: cluster}]",
            vec![format!(
                "{at}[0].spreadByLabel: Invalid value: \"team\": spreadByLabel and spreadByField cannot both be set; keep one"
            )],
        ),
        (
            "spreadConstraints: [{spreadByField: cluster}, {spreadByField: cluster}]",
            vec![format!(
                "{at}[1].spreadByField: Invalid value: \"cluster\": is constrained by an earlier entry; give each field once"
            )],
        ),
        (
            "spreadConstraints: [{spreadByField: cluster, minGroups: 3, maxGroups: 2}]",
            vec![format!(
                "{at}[0].maxGroups: Invalid value: \"2\": must be greater than or equal to minGroups"
            )],
        ),
        (
            "spreadConstraints: [{spreadByField: region, maxGroups: 2}]",
            vec![format!(
                "{at}: Invalid value: \"\": a spreadByField other than cluster needs a spreadByField: cluster constraint too (how many clusters in all)"
            )],
        ),
        (
            "spreadConstraints: [{maxGroups: 2}, {spreadByField: cluster}]",
            vec![format!(
                "{at}[0]: Invalid value: \"\": give spreadByField (cluster, region, zone or provider) or spreadByLabel"
            )],
        ),
    ];
    for (yaml, want) in table {
        match schedule(&placement(yaml), &fleet(), &Workload::default()) {
            Err(PlacementError::Invalid(errs)) => {
                let got: Vec<String> = errs.iter().map(ToString::to_string).collect();
                assert_eq!(got, want, "{yaml}");
            }
            other => panic!("{yaml}: want Invalid, got {other:?}"),
        }
    }
}

/// Six clusters over three regions (two each), for spreading.
const REGIONS: &str = r#"
- metadata: {name: e1}
  spec: {syncMode: Push, provider: aws, region: us-east}
- metadata: {name: e2}
  spec: {syncMode: Push, provider: aws, region: us-east}
- metadata: {name: w1}
  spec: {syncMode: Push, provider: gcp, region: us-west}
- metadata: {name: w2}
  spec: {syncMode: Push, provider: gcp, region: us-west}
- metadata: {name: n1}
  spec: {syncMode: Push, provider: gcp, region: eu-north}
- metadata: {name: x}
  spec: {syncMode: Push}
"#;

/// B.13: the chosen clusters span between minGroups and maxGroups regions and number
/// within the cluster constraint; every cluster left out says why.
#[test]
fn spread_constraints_table() {
    let fleet: Vec<Cluster> = serde_saphyr::from_str(REGIONS).unwrap();
    let row = |yaml: &str, previous: &[&str]| {
        let w = Workload {
            previous: previous.iter().map(|c| (c.to_string(), 1)).collect(),
            ..Workload::default()
        };
        outcome_for(&placement(yaml), &fleet, &w)
    };
    let no_region = "no region known, and spreadConstraints group clusters by region";
    // region min = max = 2: exactly two regions (the two with most clusters), every
    // cluster of them
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, minGroups: 2, maxGroups: 2}, {spreadByField: cluster}]",
            &[]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "chosen"),
            (
                "n1",
                "region eu-north is not among the 2 region(s) chosen (spreadConstraints)"
            ),
            ("w1", "chosen"),
            ("w2", "chosen"),
            ("x", no_region),
        ])
    );
    // ... and at most 3 clusters: both regions keep one, taken in turn
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, minGroups: 2, maxGroups: 2}, {spreadByField: cluster, maxGroups: 3}]",
            &[]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "chosen"),
            (
                "n1",
                "region eu-north is not among the 2 region(s) chosen (spreadConstraints)"
            ),
            ("w1", "chosen"),
            ("w2", "spreadConstraints allow at most 3 cluster(s)"),
            ("x", no_region),
        ])
    );
    // stable: where the workload runs is kept (eu-north and w2 already run it)
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, minGroups: 2, maxGroups: 2}, {spreadByField: cluster, maxGroups: 2}]",
            &["n1", "w2"]
        ),
        expect(&[
            (
                "e1",
                "region us-east is not among the 2 region(s) chosen (spreadConstraints)"
            ),
            (
                "e2",
                "region us-east is not among the 2 region(s) chosen (spreadConstraints)"
            ),
            ("n1", "chosen"),
            ("w1", "spreadConstraints allow at most 2 cluster(s)"),
            ("w2", "chosen"),
            ("x", no_region),
        ])
    );
    // more regions wanted than fit: nothing, and the binding says NoClusterFit with why
    let need = "spreadConstraints need at least 4 regions, and only 3 (eu-north, us-east, us-west) have a cluster that fits";
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, minGroups: 4}, {spreadByField: cluster}]",
            &[]
        ),
        expect(&[
            ("e1", need),
            ("e2", need),
            ("n1", need),
            ("w1", need),
            ("w2", need),
            ("x", no_region)
        ])
    );
    // two regions but at most one cluster: cannot hold
    let cannot = "spreadConstraints want 2 regions but at most 1 cluster(s): raise the cluster constraint's maxGroups";
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, minGroups: 2, maxGroups: 2}, {spreadByField: cluster, maxGroups: 1}]",
            &[]
        ),
        expect(&[
            ("e1", cannot),
            ("e2", cannot),
            ("n1", cannot),
            ("w1", cannot),
            ("w2", cannot),
            ("x", no_region)
        ])
    );
    // at least one region (the default), at most 2 clusters: two regions, one each
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region}, {spreadByField: cluster, maxGroups: 2}]",
            &[]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "spreadConstraints allow at most 2 cluster(s)"),
            (
                "n1",
                "region eu-north is not among the 2 region(s) chosen (spreadConstraints)"
            ),
            ("w1", "chosen"),
            ("w2", "spreadConstraints allow at most 2 cluster(s)"),
            ("x", no_region),
        ])
    );
    // one region and two clusters, the workload on n1 (alone in eu-north): a region
    // with two clusters is taken instead of failing the minimum
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, maxGroups: 1}, {spreadByField: cluster, minGroups: 2}]",
            &["n1"]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "chosen"),
            (
                "n1",
                "region eu-north is not among the 1 region(s) chosen (spreadConstraints)"
            ),
            (
                "w1",
                "region us-west is not among the 1 region(s) chosen (spreadConstraints)"
            ),
            (
                "w2",
                "region us-west is not among the 1 region(s) chosen (spreadConstraints)"
            ),
            ("x", no_region),
        ])
    );
    // maxGroups 0 is unset (Karmada)
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: region, maxGroups: 0}, {spreadByField: cluster, maxGroups: 0}]",
            &[]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "chosen"),
            ("n1", "chosen"),
            ("w1", "chosen"),
            ("w2", "chosen"),
            ("x", no_region)
        ])
    );
    // the cluster constraint alone: at most 2 clusters, by name
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: cluster, maxGroups: 2}]",
            &[]
        ),
        expect(&[
            ("e1", "chosen"),
            ("e2", "chosen"),
            (
                "n1",
                "cluster n1 is not among the 2 cluster(s) chosen (spreadConstraints maxGroups 2)"
            ),
            (
                "w1",
                "cluster w1 is not among the 2 cluster(s) chosen (spreadConstraints maxGroups 2)"
            ),
            (
                "w2",
                "cluster w2 is not among the 2 cluster(s) chosen (spreadConstraints maxGroups 2)"
            ),
            (
                "x",
                "cluster x is not among the 2 cluster(s) chosen (spreadConstraints maxGroups 2)"
            ),
        ])
    );
    // at least 7 clusters: only 6 fit
    let few = "spreadConstraints need at least 7 cluster(s), and only 6 fit";
    assert_eq!(
        row(
            "spreadConstraints: [{spreadByField: cluster, minGroups: 7}]",
            &[]
        ),
        expect(&[
            ("e1", few),
            ("e2", few),
            ("n1", few),
            ("w1", few),
            ("w2", few),
            ("x", few)
        ])
    );
}

/// B.13 with a division: the replicas go over the clusters the constraints keep.
#[test]
fn spread_then_divide() {
    let fleet: Vec<Cluster> = serde_saphyr::from_str(REGIONS).unwrap();
    let p = placement(
        "{spreadConstraints: [{spreadByField: region, minGroups: 2, maxGroups: 2}, {spreadByField: cluster, maxGroups: 2}], replicaScheduling: {replicaSchedulingType: Divided}}",
    );
    let w = Workload {
        replicas: Some(6),
        ..Workload::default()
    };
    let d = schedule(&p, &fleet, &w).unwrap();
    let got: Vec<(String, Option<i32>)> = d
        .chosen
        .iter()
        .map(|t| (t.cluster.clone(), t.replicas))
        .collect();
    assert_eq!(
        got,
        vec![("e1".to_string(), Some(3)), ("w1".to_string(), Some(3))]
    );
}

/// J.58–J.61: cluster failover. Off, a member that is not Ready keeps the workload;
/// on, it loses it once not Ready for longer than tolerated (300 s by default, or the
/// NoExecute toleration's seconds for the registry's taint), never with a toleration
/// without seconds, and not when no other cluster is left.
#[test]
fn failover_leaves_out_clusters_not_ready_for_too_long() {
    const FLEET: &str = r#"
- metadata: {name: a}
  spec: {syncMode: Push}
  status: {conditions: [{type: Ready, status: "True", reason: ClusterReady, message: "", lastTransitionTime: "2026-01-01T00:00:00Z"}]}
- metadata: {name: b}
  spec: {syncMode: Push}
  status: {conditions: [{type: Ready, status: "False", reason: ClusterNotReady, message: "", lastTransitionTime: "2026-01-01T00:10:00Z"}]}
- metadata: {name: c}
  spec: {syncMode: Push}
  status: {conditions: [{type: Ready, status: "Unknown", reason: ClusterStatusUnknown, message: "", lastTransitionTime: "2026-01-01T00:10:00Z"}]}
"#;
    let fleet: Vec<Cluster> = serde_saphyr::from_str(FLEET).unwrap();
    let at = |secs: i64| k8s_openapi::jiff::Timestamp::from_second(1_767_226_200 + secs).unwrap();
    let row =
        |yaml: &str, failover_at: Option<k8s_openapi::jiff::Timestamp>, clusters: &[Cluster]| {
            let w = Workload {
                replicas: Some(2),
                failover_at,
                ..Workload::default()
            };
            let d = schedule(&placement(yaml), clusters, &w).unwrap();
            let mut all: Vec<(String, String)> = d
                .chosen
                .iter()
                .map(|t| (t.cluster.clone(), format!("chosen {:?}", t.replicas)))
                .chain(d.rejected.iter().map(|(c, r)| (c.clone(), r.to_string())))
                .collect();
            all.sort();
            all
        };
    let chosen = |c: &str| (c.to_string(), "chosen Some(2)".to_string());
    let gone = |c: &str, status: &str, tolerated: i64| {
        (
            c.to_string(),
            format!(
                "Ready has been {status} since 2026-01-01T00:10:00Z, longer than the {tolerated}s tolerated: failover.cluster moved the workload away"
            ),
        )
    };
    // off (J.58): everything stays
    assert_eq!(
        row("", None, &fleet),
        vec![chosen("a"), chosen("b"), chosen("c")]
    );
    // on, 10 s in: within the default 300 s
    assert_eq!(
        row("", Some(at(10)), &fleet),
        vec![chosen("a"), chosen("b"), chosen("c")]
    );
    // on, 300 s in: both go
    assert_eq!(
        row("", Some(at(300)), &fleet),
        vec![
            chosen("a"),
            gone("b", "False", 300),
            gone("c", "Unknown", 300)
        ]
    );
    // a 30 s NoExecute toleration of not-ready, none of unreachable: b goes at 30 s
    let short = "clusterTolerations: [{key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]";
    assert_eq!(
        row(short, Some(at(30)), &fleet),
        vec![chosen("a"), gone("b", "False", 30), chosen("c")]
    );
    // tolerated forever: unreachable with no seconds
    let forever = "clusterTolerations: [{key: cluster.causeway.io/unreachable, operator: Exists, effect: NoExecute}]";
    assert_eq!(
        row(forever, Some(at(3000)), &fleet),
        vec![chosen("a"), gone("b", "False", 300), chosen("c")]
    );
    // two tolerations of not-ready, one forever and one of 30 s: the least of those
    // with seconds counts (Kubernetes' getMinTolerationTime), not forever
    let both = "clusterTolerations: [{key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute}, {operator: Exists, effect: NoExecute, tolerationSeconds: 30}]";
    assert_eq!(
        row(both, Some(at(30)), &fleet),
        vec![
            chosen("a"),
            gone("b", "False", 30),
            gone("c", "Unknown", 30)
        ]
    );
    // J.61: nowhere else to go, so the failed clusters keep it
    assert_eq!(
        row("", Some(at(3000)), &fleet[1..]),
        vec![chosen("b"), chosen("c")]
    );
    // and the decision says so (the binding's Scheduled message and an Event tell the
    // user), where failover moved nothing it says nothing
    let stays = |clusters: &[Cluster], failover_at| {
        let w = Workload {
            replicas: Some(2),
            failover_at,
            ..Workload::default()
        };
        schedule(&placement(""), clusters, &w)
            .unwrap()
            .failover_stays
    };
    assert_eq!(stays(&fleet[1..], Some(at(3000))), ["b", "c"]);
    assert!(stays(&fleet, Some(at(3000))).is_empty());
    assert!(stays(&fleet[1..], Some(at(10))).is_empty());
    assert!(stays(&fleet[1..], None).is_empty());
    // J.61 with affinity groups: the backup group is used, not the failed primary (the
    // reasons are the backup group's)
    let groups = "clusterAffinities: [{affinityName: primary, clusterNames: [b]}, {affinityName: backup, clusterNames: [a]}]";
    let not_a = |c: &str| (c.to_string(), "not in clusterNames [a]".to_string());
    assert_eq!(
        row(groups, Some(at(3000)), &fleet),
        vec![chosen("a"), not_a("b"), not_a("c")]
    );
    // the same with Divided: the failed primary group has nothing to divide, the
    // backup group gets the replicas (was a scheduler error before)
    let divided = "{clusterAffinities: [{affinityName: primary, clusterNames: [b]}, {affinityName: backup, clusterNames: [a]}], replicaScheduling: {replicaSchedulingType: Divided}}";
    assert_eq!(
        row(divided, Some(at(3000)), &fleet),
        vec![chosen("a"), not_a("b"), not_a("c")]
    );
    // a toleration too long to count is one that never ends (no overflow)
    let huge = "clusterTolerations: [{key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 9223372036854775807}]";
    assert_eq!(
        row(huge, Some(at(3000)), &fleet),
        vec![chosen("a"), chosen("b"), gone("c", "Unknown", 300)]
    );
    // J.61 with application failover: a moved away from, b failed over, c gone; the
    // fallback keeps it on the failed b first, and a stays out
    let evicted = Workload {
        replicas: Some(2),
        failover_at: Some(at(3000)),
        evicted: [("a".to_string(), "unhealthy here".to_string())].into(),
        ..Workload::default()
    };
    let d = schedule(&placement(""), &fleet[..2], &evicted).unwrap();
    assert_eq!(d.target_clusters()[0].name, "b");
    assert_eq!(d.rejected["a"].to_string(), "unhealthy here");
    // and with only a left, a keeps it
    let d = schedule(&placement(""), &fleet[..1], &evicted).unwrap();
    assert_eq!(d.target_clusters()[0].name, "a");
    // the clock starts when the registry first tainted it, whatever Ready did since
    let mut tainted = fleet.clone();
    tainted[1].spec.taints = serde_json::from_value(serde_json::json!([
        {"key": "cluster.causeway.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:05:00Z"}
    ])).unwrap();
    assert_eq!(
        row("", Some(at(0)), &tainted),
        vec![chosen("a"), ("b".to_string(), "Ready has been False since 2026-01-01T00:05:00Z, longer than the 300s tolerated: failover.cluster moved the workload away".to_string()), chosen("c")]
    );
    // a taint the monitor added a round after the condition does not move the clock
    // later: it starts at the condition's time
    let mut late = tainted.clone();
    late[1].spec.taints[0].time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-01-01T00:10:01Z".parse().unwrap(),
    ));
    assert_eq!(
        crate::federation::schedule::failover::not_ready_since(&late[1]),
        Some("2026-01-01T00:10:00Z".parse().unwrap())
    );
    // b is Ready again and the monitor has not lifted its taint yet: it is scheduled
    // again at once (the copy kept there stays, and is not purged and made again); the
    // taint on a cluster not Ready still keeps new workloads out
    tainted[1].status = fleet[0].status.clone();
    assert_eq!(
        row("", Some(at(0)), &tainted[..2]),
        vec![chosen("a"), chosen("b")]
    );
    tainted[1].spec.taints[0].key = "cluster.causeway.io/unreachable".into();
    assert_eq!(
        row("", Some(at(0)), &tainted[..2]),
        vec![chosen("a"), chosen("b")]
    );
    tainted[1].spec.taints[0].key = "dedicated".into();
    assert_eq!(
        row("", Some(at(0)), &tainted[..2]),
        vec![
            chosen("a"),
            (
                "b".to_string(),
                "taint dedicated:NoSchedule not tolerated".to_string()
            )
        ]
    );
}
