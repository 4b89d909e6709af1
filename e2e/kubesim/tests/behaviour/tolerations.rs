//! The DefaultTolerationSeconds admission plugin: every Pod, created directly or by a
//! workload controller, tolerates its node being not-ready or unreachable for 300 s
//! unless it says otherwise.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn default(taint: &str) -> Toleration {
    serde_json::from_value(
        json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
    )
    .unwrap()
}

#[tokio::test]
async fn pods_tolerate_an_unready_node_for_five_minutes_by_default() {
    let env = crate::workloads::sim(1, "4").await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let (not_ready, unreachable) = (
        default("node.kubernetes.io/not-ready"),
        default("node.kubernetes.io/unreachable"),
    );

    // a Pod without tolerations gets both
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
    .unwrap();
    let p = pods.create(&pp, &p).await.unwrap();
    let got = p.spec.clone().unwrap().tolerations.unwrap();
    assert_eq!(got, vec![not_ready.clone(), unreachable.clone()]);

    // one with its own, shorter, not-ready toleration keeps it and gets the other
    let own = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 30});
    let q: Pod = serde_json::from_value(json!({"metadata": {"name": "quick"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], "tolerations": [own]}}))
    .unwrap();
    let q = pods.create(&pp, &q).await.unwrap();
    let got = q.spec.unwrap().tolerations.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].toleration_seconds, Some(30));
    assert_eq!(got[1], unreachable);

    // an update that leaves them out finds them added again (the plugin runs on
    // updates too)
    let mut bare = p;
    bare.spec.as_mut().unwrap().tolerations = None;
    let updated = pods.replace("plain", &pp, &bare).await.unwrap();
    assert_eq!(
        updated.spec.unwrap().tolerations.unwrap(),
        vec![not_ready.clone(), unreachable.clone()]
    );

    // a Deployment's Pods, created by the simulated ReplicaSet controller
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&pp, &d)
        .await
        .unwrap();
    let lp = ListParams::default().labels("app=web");
    let items = eventually("the Deployment's two Pods", || async {
        let items = pods.list(&lp).await.ok()?.items;
        (items.len() == 2).then_some(items)
    })
    .await;
    for p in items {
        assert_eq!(
            p.spec.unwrap().tolerations.unwrap(),
            vec![not_ready.clone(), unreachable.clone()]
        );
    }
}
