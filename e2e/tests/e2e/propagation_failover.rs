//! Cluster failover (federation.md §8 J.59–J.62) with real kubectl: a Deployment
//! divided over east, west and north, with `failover.cluster` and a 2 s NoExecute
//! toleration of `cluster.causeway.io/not-ready`. East goes NotReady: two seconds
//! later its replicas move to west and north, the binding says why east is left out,
//! and east's Work goes once west and north run the template healthy (purgeMode
//! Gracefully). East Ready again takes its share back.

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get, has_work, replicas};

const APP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: demo}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: nginx:1.27
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  placement:
    clusterTolerations:
    - {key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
    replicaScheduling: {replicaSchedulingType: Divided}
  failover:
    cluster: {purgeMode: Gracefully}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cluster_hands_its_replicas_over_and_takes_them_back() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let f = env.file("api.yaml", APP);
    env.ok(&["apply", "-f", &f]).await;
    eventually("2 replicas in each member", WAIT, || async {
        (replicas(&env, "api").await == vec![Some(2), Some(2), Some(2)]).then_some(())
    })
    .await;

    // the dry run says what failing east would do, and changes nothing
    let plan = crate::propagation_cli::ok(&env, &["failover", "plan", "--cluster", "east"]).await;
    assert!(
        plan.contains("demo/api-deployment")
            && plan.contains("east:2 north:2 west:2   north:3 west:3")
            && plan.contains("moves away from east (east after 2s), its copy purged once the others run it healthy"),
        "{plan}"
    );
    let json = crate::propagation_cli::ok(
        &env,
        &["failover", "plan", "--cluster", "east", "-o", "json"],
    )
    .await;
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(rows[0]["after"], serde_json::json!({"north": 3, "west": 3}));
    let bad =
        crate::propagation_cli::fails(&env, &["failover", "plan", "--cluster", "south"]).await;
    assert!(bad.contains("no Cluster \"south\" on the hub"), "{bad}");
    assert_eq!(replicas(&env, "api").await, vec![Some(2), Some(2), Some(2)]);

    // east NotReady: after the 2 s tolerated, west and north run all 6
    env.cs.member("east").unwrap().faults().set_not_ready(true);
    eventually("west and north run 3 each", WAIT, || async {
        let r = replicas(&env, "api").await;
        (r[1] == Some(3) && r[2] == Some(3)).then_some(())
    })
    .await;
    let rb = get(&env, "hub", &["rb", "api-deployment", "-n", "demo"])
        .await
        .unwrap();
    let reasons = rb.pointer("/status/schedulingReasons").unwrap().to_string();
    assert!(
        reasons.contains("east")
            && reasons.contains("Ready has been False since")
            && reasons
                .contains("longer than the 2s tolerated: failover.cluster moved the workload away"),
        "{reasons}"
    );
    // purged gracefully: once west and north run it healthy, east's Work goes
    eventually("east's Work purged", WAIT, || async {
        (!has_work(&env, "east", "api").await).then_some(())
    })
    .await;

    // J.62: east Ready again takes its share back
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    eventually("2 replicas in each member again", WAIT, || async {
        let r = replicas(&env, "api").await;
        (r[1] == Some(2) && r[2] == Some(2) && has_work(&env, "east", "api").await).then_some(())
    })
    .await;
}

const PRIMARY_BACKUP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: job, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: job}}
  template:
    metadata: {labels: {app: job}}
    spec:
      containers:
      - name: job
        image: flink:1.20
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: job, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: job}]
  placement:
    clusterAffinities:
    - {affinityName: primary, clusterNames: [east]}
    - {affinityName: backup, clusterNames: [west]}
    clusterTolerations:
    - {key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
  failover:
    cluster:
      purgeMode: Directly
      statePreservation:
        rules:
        - {aliasLabelName: example.com/ready-before, jsonPath: "{.readyReplicas}"}
"#;

/// `failover.cluster.statePreservation`: east (the primary) fails, the job moves to
/// west (the backup, which never ran it), and west's copy is labelled with what east's
/// copy reported last; the binding records it while east stays failed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clusters_state_labels_the_copy_that_takes_over() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&["apply", "-f", &env.file("job.yaml", PRIMARY_BACKUP)])
        .await;
    let ready_in = |c: &'static str| {
        let env = &env;
        async move {
            let d = get(env, c, &["deployment", "job", "-n", "demo"]).await?;
            d.pointer("/status/readyReplicas")?.as_i64()
        }
    };
    eventually("east runs the job, ready", WAIT, || async {
        (ready_in("east").await == Some(2)).then_some(())
    })
    .await;

    // the dry run says what west's copy would carry
    let plan = eventually("the dry run says what state moves", WAIT, || async {
        let plan =
            crate::propagation_cli::ok(&env, &["failover", "plan", "--cluster", "east"]).await;
        plan.contains("west's copy labelled by statePreservation (from east: kept example.com/ready-before=2)")
            .then_some(plan)
    })
    .await;
    assert!(plan.contains("east:2   west:2"), "{plan}");

    env.cs.member("east").unwrap().faults().set_not_ready(true);
    let label = eventually("west's copy carries east's state", WAIT, || async {
        let d = get(&env, "west", &["deployment", "job", "-n", "demo"]).await?;
        d.pointer("/metadata/labels/example.com~1ready-before")
            .and_then(|v| v.as_str())
            .map(String::from)
    })
    .await;
    assert_eq!(label, "2");
    let rb = get(&env, "hub", &["rb", "job-deployment", "-n", "demo"])
        .await
        .unwrap();
    let record = rb.pointer("/spec/clusterFailovers/0").unwrap();
    assert_eq!(record["cluster"], "east");
    assert_eq!(
        record["reason"],
        "failed over: statePreservation kept example.com/ready-before=2"
    );
    assert_eq!(
        record["clustersBeforeFailover"],
        serde_json::json!(["east"])
    );

    // east Ready again: the job goes back to the primary, and the record goes
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    eventually("the record goes once east is Ready", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "job-deployment", "-n", "demo"]).await?;
        // the field goes (server-side apply leaves no empty list behind)
        rb.pointer("/spec/clusterFailovers").is_none().then_some(())
    })
    .await;
}
