//! Pod priority as kube-apiserver gives it: PriorityClasses (validation, the built-in
//! `system-*` classes, one global default) and the Priority admission plugin on Pods,
//! direct and from workload controllers.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn class(name: &str, value: i64, global: bool) -> PriorityClass {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "value": value, "globalDefault": global}),
    )
    .unwrap()
}

fn pod(name: &str, spec_extra: serde_json::Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "nginx"}]});
    for (k, v) in spec_extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn priority_classes_are_validated_and_resolved_into_pods() {
    let env = start().await;
    let classes: Api<PriorityClass> = Api::all(env.client.clone());
    let pp = PostParams::default();

    // the built-in classes
    let node_critical = classes.get("system-node-critical").await.unwrap();
    assert_eq!(node_critical.value, 2_000_001_000);
    assert_eq!(
        classes.get("system-cluster-critical").await.unwrap().value,
        2_000_000_000
    );

    let e = classes
        .delete("system-node-critical", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e), message(&e)),
        (
            403,
            "priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted".to_string()
        )
    );

    // a user's class, defaulted; its value and policy may not change
    let high = classes
        .create(&pp, &class("high", 1000, false))
        .await
        .unwrap();
    assert_eq!(
        high.preemption_policy.as_deref(),
        Some("PreemptLowerPriority")
    );
    let e = classes
        .patch(
            "high",
            &PatchParams::default(),
            &Patch::Merge(json!({"value": 2000})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422);
    assert!(
        message(&e).contains("value: Forbidden: may not be changed in an update."),
        "{}",
        message(&e)
    );
    classes
        .patch(
            "high",
            &PatchParams::default(),
            &Patch::Merge(json!({"description": "for the shop"})),
        )
        .await
        .expect("the description may change");

    // what may not be created
    for (bad, what) in [
        (
            class("too-high", 2_000_000_000, false),
            "maximum allowed value of a user defined priority is 1000000000",
        ),
        (
            class("system-mine", 10, false),
            "priority class names with 'system-' prefix are reserved for system use only",
        ),
    ] {
        let e = classes.create(&pp, &bad).await.unwrap_err();
        assert_eq!(code(&e), 422, "{what}");
        assert!(message(&e).contains(what), "{}", message(&e));
    }
    let mut never = class("never", 1, false);
    never.preemption_policy = Some("Sometimes".into());
    let e = classes.create(&pp, &never).await.unwrap_err();
    assert!(
        message(&e).contains("Unsupported value: \"Sometimes\""),
        "{}",
        message(&e)
    );

    // one global default at most
    classes.create(&pp, &class("base", 5, true)).await.unwrap();
    let e = classes
        .create(&pp, &class("other-base", 6, true))
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e), message(&e)),
        (
            403,
            "priorityclasses.scheduling.k8s.io \"other-base\" is forbidden: PriorityClass base is already marked as default. Only one default can exist".to_string()
        )
    );

    // Pods: the class's value, the global default, or a refusal
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let p = pods
        .create(&pp, &pod("a", json!({"priorityClassName": "high"})))
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority, spec.preemption_policy.as_deref()),
        (Some(1000), Some("PreemptLowerPriority"))
    );
    let p = pods.create(&pp, &pod("b", json!({}))).await.unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority_class_name.as_deref(), spec.priority),
        (Some("base"), Some(5))
    );
    let e = pods
        .create(&pp, &pod("c", json!({"priorityClassName": "nope"})))
        .await
        .unwrap_err();
    assert_eq!(
        (code(&e), message(&e)),
        (
            403,
            "pods \"c\" is forbidden: no PriorityClass with name nope was found".to_string()
        )
    );
    let e = pods
        .create(
            &pp,
            &pod("d", json!({"priorityClassName": "high", "priority": 7})),
        )
        .await
        .unwrap_err();
    assert!(
        message(&e).contains("the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000"),
        "{}",
        message(&e)
    );
}

/// A Deployment whose class is not there yet gets no Pods (the ReplicaSet's creates are
/// refused), and gets them, with the class's priority, once the class exists.
#[tokio::test]
async fn a_workloads_pods_wait_for_their_priority_class() {
    let env = crate::workloads::sim(1, "4").await;
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"priorityClassName": "shop", "containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let lp = ListParams::default().labels("app=web");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(
        pods.list(&lp).await.unwrap().items.is_empty(),
        "no Pod without its class"
    );
    Api::<PriorityClass>::all(env.client.clone())
        .create(&PostParams::default(), &class("shop", 300, false))
        .await
        .unwrap();
    let items = eventually("the Deployment's two Pods", || async {
        let items = pods.list(&lp).await.ok()?.items;
        (items.len() == 2).then_some(items)
    })
    .await;
    for p in items {
        assert_eq!(p.spec.unwrap().priority, Some(300));
    }
}
