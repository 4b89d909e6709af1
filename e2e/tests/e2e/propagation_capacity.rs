//! A division by available replicas (`dynamicWeight: AvailableReplicas`, federation.md
//! §8 C) end to end: the members' nodes run Pods, their Cluster status counts what is
//! free, and the hub divides a Deployment by how many of its replicas (what one
//! replica requests, the binding's `replicaRequirements`) each member still holds.

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: demo
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: web
        resources: {requests: {cpu: "1", memory: 256Mi}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: demo
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity: {clusterNames: [east, west]}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference: {dynamicWeight: AvailableReplicas}
"#;

/// East's node (8 CPU) already runs 6 CPU of its own Pods; west's is empty. Ten
/// replicas of 1 CPU go 2 to east and 8 to west, and every replica runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_divided_by_the_room_members_have_left() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let filler = env.file(
        "filler.yaml",
        &WEB.split("---")
            .next()
            .unwrap()
            .replace("name: web\n  namespace", "name: filler\n  namespace")
            .replace("replicas: 10", "replicas: 6")
            .replace("app: web", "app: filler"),
    );
    env.ok_in("east", &["apply", "-f", &filler]).await;
    eventually("east's Cluster counts 6 CPU allocated", WAIT, || async {
        let c = get(&env, "hub", &["cluster", "east"]).await?;
        (c.pointer("/status/resourceSummary/allocated/cpu")? == "6").then_some(())
    })
    .await;

    env.ok(&["apply", "-f", &env.file("web.yaml", WEB)]).await;
    let rb = eventually(
        "the binding divides 2 to east and 8 to west",
        WAIT,
        || async {
            let rb = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"]).await?;
            let clusters: Vec<(String, i64)> = rb
                .pointer("/spec/clusters")?
                .as_array()?
                .iter()
                .map(|c| {
                    let name = c["name"].as_str().unwrap_or_default().to_string();
                    (name, c["replicas"].as_i64().unwrap_or(0))
                })
                .collect();
            (clusters == [("east".to_string(), 2), ("west".to_string(), 8)]).then_some(rb)
        },
    )
    .await;
    assert_eq!(
        rb.pointer("/spec/replicaRequirements/resourceRequest"),
        Some(&serde_json::json!({"cpu": "1", "memory": "256Mi"})),
        "the binding says what one replica requests"
    );
    for (cluster, want) in [("east", 2), ("west", 8)] {
        eventually(
            &format!("{want} replicas of web ready in {cluster}"),
            WAIT,
            || async {
                let d = get(&env, cluster, &["deployment", "web", "-n", "demo"]).await?;
                let ready = d.pointer("/status/readyReplicas").and_then(Value::as_i64);
                (ready == Some(want)).then_some(())
            },
        )
        .await;
    }

    // C.23: a reschedule asked for with the README's kubectl patch is carried out once
    // (status.lastScheduledTime), the request stays as set, and the binding's spec is
    // not written again and again (its generation settles); the division from today's
    // room (the running replicas freed) is the same 2 / 8
    let at = "2026-01-02T03:04:05Z";
    env.ok(&[
        "patch",
        "resourcebinding",
        "web-deployment",
        "-n",
        "demo",
        "--type",
        "merge",
        "-p",
        &format!("{{\"spec\":{{\"rescheduleTriggeredAt\":\"{at}\"}}}}"),
    ])
    .await;
    let rb = eventually("the reschedule carried out", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"]).await?;
        rb.pointer("/status/lastScheduledTime")?;
        Some(rb)
    })
    .await;
    assert_eq!(
        rb.pointer("/spec/rescheduleTriggeredAt"),
        Some(&serde_json::json!(at))
    );
    let generation = |rb: &Value| rb.pointer("/metadata/generation").and_then(Value::as_i64);
    let before = generation(&rb);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let after = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        generation(&after),
        before,
        "the spec is written again and again"
    );
    let clusters: Vec<(String, i64)> = after["spec"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["replicas"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(clusters, [("east".to_string(), 2), ("west".to_string(), 8)]);
}
