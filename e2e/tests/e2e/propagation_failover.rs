//! Cluster failover (federation.md §8 J.59–J.62) with real kubectl: a Deployment
//! divided over east, west and north, with `failover.cluster` and a 2 s NoExecute
//! toleration of `cluster.causeway.io/not-ready`. East goes NotReady: two seconds
//! later its replicas move to west and north, the binding says why east is left out,
//! and east's Work goes once west and north run the template healthy (purgeMode
//! Gracefully). East Ready again takes its share back.

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};
use crate::support::Env;

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

/// Each member's replicas of Deployment api (None: not there).
async fn replicas(env: &Env) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for c in ["east", "west", "north"] {
        let d = get(env, c, &["deployment", "api", "-n", "demo"]).await;
        out.push(d.and_then(|d| d.pointer("/spec/replicas").and_then(Value::as_i64)));
    }
    out
}

/// Whether east's execution namespace holds the binding's Work, not being deleted (a
/// Work the hub deleted stays until east's applier, once east is back, has removed the
/// copies it made).
async fn east_has_a_work(env: &Env) -> bool {
    let works = get(env, "hub", &["works", "-n", "causeway-es-east"]).await;
    works
        .and_then(|w| w["items"].as_array().cloned())
        .is_some_and(|items| {
            items.iter().any(|w| {
                w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("api")
                    && w["metadata"]["deletionTimestamp"].is_null()
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cluster_hands_its_replicas_over_and_takes_them_back() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let f = env.file("api.yaml", APP);
    env.ok(&["apply", "-f", &f]).await;
    eventually("2 replicas in each member", WAIT, || async {
        (replicas(&env).await == vec![Some(2), Some(2), Some(2)]).then_some(())
    })
    .await;

    // east NotReady: after the 2 s tolerated, west and north run all 6
    env.cs.member("east").unwrap().faults().set_not_ready(true);
    eventually("west and north run 3 each", WAIT, || async {
        let r = replicas(&env).await;
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
        (!east_has_a_work(&env).await).then_some(())
    })
    .await;

    // J.62: east Ready again takes its share back
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    eventually("2 replicas in each member again", WAIT, || async {
        let r = replicas(&env).await;
        (r[1] == Some(2) && r[2] == Some(2) && east_has_a_work(&env).await).then_some(())
    })
    .await;
}
