//! ResourceQuotas as a cluster keeps them: status (hard and used, kept current) and the
//! ResourceQuota admission plugin's refusals, for direct creates and for the Pods of
//! workload controllers.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn pod(name: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx", "resources": resources}]}}))
    .unwrap()
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap()
}

async fn used(quotas: &Api<ResourceQuota>, name: &str, want: serde_json::Value) {
    eventually(&format!("quota {name} used {want}"), || async {
        let q = quotas.get(name).await.ok()?;
        let got = serde_json::to_value(q.status?.used?).ok()?;
        (got == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_quota_counts_what_its_namespace_uses_and_refuses_what_would_go_over() {
    let env = start().await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), "default");
    let q: ResourceQuota = serde_json::from_value(json!({"metadata": {"name": "team"}, "spec": {"hard": {
        "pods": "2", "configmaps": "3", "requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "2",
        "count/deployments.apps": "1"}}}))
    .unwrap();
    quotas.create(&pp, &q).await.unwrap();
    // the namespace's own kube-root-ca.crt counts
    used(
        &quotas,
        "team",
        json!({"configmaps": "1", "count/deployments.apps": "0", "limits.cpu": "0", "pods": "0", "requests.cpu": "0", "requests.memory": "0"}),
    )
    .await;
    let st = quotas.get("team").await.unwrap().status.unwrap();
    assert_eq!(
        serde_json::to_value(st.hard).unwrap(),
        serde_json::to_value(q.spec.unwrap().hard).unwrap()
    );

    // a quota on cpu and memory needs every container to say what it asks for
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let e = pods.create(&pp, &pod("bare", json!({}))).await.unwrap_err();
    assert_eq!(
        (code(&e), message(&e)),
        (
            403,
            "pods \"bare\" is forbidden: failed quota: team: must specify limits.cpu for: c; requests.cpu for: c; requests.memory for: c".to_string()
        )
    );
    let sized = json!({"requests": {"cpu": "600m", "memory": "512Mi"}, "limits": {"cpu": "1"}});
    pods.create(&pp, &pod("one", sized.clone())).await.unwrap();
    used(
        &quotas,
        "team",
        json!({"configmaps": "1", "count/deployments.apps": "0", "limits.cpu": "1", "pods": "1", "requests.cpu": "600m", "requests.memory": "512Mi"}),
    )
    .await;
    let e = pods.create(&pp, &pod("two", sized)).await.unwrap_err();
    assert_eq!(
        (code(&e), message(&e)),
        (
            403,
            "pods \"two\" is forbidden: exceeded quota: team, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1".to_string()
        )
    );

    // object counts
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for name in ["a", "b"] {
        cms.create(&pp, &cm(name, json!({}), json!({})))
            .await
            .unwrap();
    }
    let e = cms
        .create(&pp, &cm("c", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        message(&e),
        "configmaps \"c\" is forbidden: exceeded quota: team, requested: configmaps=1, used: configmaps=3, limited: configmaps=3"
    );
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    deployments
        .create(&pp, &deployment("web", 0))
        .await
        .unwrap();
    let e = deployments
        .create(&pp, &deployment("api", 0))
        .await
        .unwrap_err();
    assert!(
        message(&e).contains("requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1"),
        "{}",
        message(&e)
    );
    // numbers are quantities too, stored as kube writes them, and enforced
    let numeric = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "numeric"},
        "spec": {"hard": {"secrets": 0, "requests.cpu": "1000m"}}});
    let q: ResourceQuota = serde_json::from_value(numeric).unwrap();
    let made = quotas.create(&pp, &q).await.unwrap();
    assert_eq!(
        serde_json::to_value(made.spec.unwrap().hard).unwrap(),
        json!({"requests.cpu": "1", "secrets": "0"})
    );
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    let e = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), "default")
        .create(&pp, &secret)
        .await
        .unwrap_err();
    assert!(
        message(&e).contains(
            "exceeded quota: numeric, requested: secrets=1, used: secrets=0, limited: secrets=0"
        ),
        "{}",
        message(&e)
    );
    // a quantity that is none is kube's 422
    let bad: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "bad"}, "spec": {"hard": {"pods": "lots"}}}),
    )
    .unwrap();
    let e = quotas.create(&pp, &bad).await.unwrap_err();
    assert_eq!(code(&e), 422);
    assert!(
        message(&e).contains("spec.hard[pods]: Invalid value: \"lots\""),
        "{}",
        message(&e)
    );
}

/// A workload's Pods stop at the quota and the rest appear once it is raised; a scoped
/// quota counts only the Pods in its scope.
#[tokio::test]
async fn workload_pods_stop_at_the_quota() {
    let env = crate::workloads::sim(2, "8").await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), "default");
    let q: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "2"}}}),
    )
    .unwrap();
    quotas.create(&pp, &q).await.unwrap();
    let scoped: ResourceQuota = serde_json::from_value(json!({"metadata": {"name": "guaranteed"},
        "spec": {"hard": {"pods": "10"}, "scopes": ["NotBestEffort"]}}))
    .unwrap();
    quotas.create(&pp, &scoped).await.unwrap();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&pp, &deployment("web", 3))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let lp = ListParams::default().labels("app=web");
    eventually("two Pods", || async {
        (pods.list(&lp).await.ok()?.items.len() == 2).then_some(())
    })
    .await;
    used(&quotas, "pods", json!({"pods": "2"})).await;
    // BestEffort Pods are not in the NotBestEffort quota's scope
    used(&quotas, "guaranteed", json!({"pods": "0"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert_eq!(
        pods.list(&lp).await.unwrap().items.len(),
        2,
        "held at the quota"
    );
    // and says why, as kube-controller-manager does: the ReplicaSet's and the
    // Deployment's ReplicaFailure (FailedCreate) carry the quota's refusal
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let failure = |conds: Option<Vec<serde_json::Value>>| {
        conds
            .unwrap_or_default()
            .into_iter()
            .find(|c| c["type"] == "ReplicaFailure")
    };
    let c = eventually("the Deployment's ReplicaFailure", || async {
        let d = deployments.get("web").await.ok()?;
        failure(
            serde_json::to_value(d.status?.conditions?)
                .ok()?
                .as_array()
                .cloned(),
        )
    })
    .await;
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("FailedCreate"))
    );
    let m = c["message"].as_str().unwrap_or_default();
    assert!(m.contains("is forbidden: exceeded quota: pods"), "{m}");
    let rss: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(env.client.clone(), "default");
    let rs = rss.list(&lp).await.unwrap().items.remove(0);
    let c = failure(
        serde_json::to_value(rs.status.unwrap().conditions)
            .unwrap()
            .as_array()
            .cloned(),
    )
    .expect("the ReplicaSet's ReplicaFailure");
    assert_eq!(c["reason"], "FailedCreate");
    quotas
        .patch(
            "pods",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "3"}}})),
        )
        .await
        .unwrap();
    eventually("the third Pod", || async {
        (pods.list(&lp).await.ok()?.items.len() == 3).then_some(())
    })
    .await;
    used(&quotas, "pods", json!({"pods": "3"})).await;
    eventually("ReplicaFailure gone once the Pods are made", || async {
        let d = deployments.get("web").await.ok()?;
        let conds = serde_json::to_value(d.status?.conditions?).ok()?;
        failure(conds.as_array().cloned()).is_none().then_some(())
    })
    .await;
}

/// LimitRanger before ResourceQuota, as in kube-apiserver: a quota on `requests.cpu`
/// refuses a Pod without requests, unless the namespace's LimitRange gives containers a
/// default; the defaults are written into the Pods (a workload's too), a Pod outside the
/// LimitRange's bounds is refused with its wording, and the LimitRange shows its
/// defaulted items.
#[tokio::test]
async fn a_limit_range_defaults_what_the_quota_needs_and_bounds_containers() {
    use k8s_openapi::api::core::v1::LimitRange;
    let env = crate::workloads::sim(2, "8").await;
    let pp = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), "default");
    let q: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "cpu"}, "spec": {"hard": {"requests.cpu": "2"}}}),
    )
    .unwrap();
    quotas.create(&pp, &q).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let err = pods
        .create(&pp, &pod("bare", json!({})))
        .await
        .expect_err("no request for the quota");
    assert_eq!(code(&err), 403, "{}", message(&err));
    assert!(
        message(&err).contains("must specify requests.cpu"),
        "{}",
        message(&err)
    );

    let lr: LimitRange = serde_json::from_value(json!({"metadata": {"name": "limits"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}, "defaultRequest": {"cpu": "250m"}}]}}))
    .unwrap();
    let lrs: Api<LimitRange> = Api::namespaced(env.client.clone(), "default");
    let created = lrs.create(&pp, &lr).await.unwrap();
    let item = serde_json::to_value(&created.spec.unwrap().limits[0]).unwrap();
    assert_eq!(
        item["default"],
        json!({"cpu": "1"}),
        "default limit from max"
    );
    assert_eq!(item["defaultRequest"], json!({"cpu": "250m"}));

    let made = pods.create(&pp, &pod("bare", json!({}))).await.unwrap();
    let res = serde_json::to_value(&made.spec.unwrap().containers[0].resources).unwrap();
    assert_eq!(
        res,
        json!({"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}})
    );
    let err = pods
        .create(&pp, &pod("big", json!({"limits": {"cpu": "2"}})))
        .await
        .expect_err("over the max");
    assert_eq!(code(&err), 403);
    assert_eq!(
        message(&err),
        "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
    );
    // a workload's Pods get the defaults and fit the quota: 2 cpu / 250m = 8, 1 is taken
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&pp, &deployment("web", 3))
        .await
        .unwrap();
    let lp = ListParams::default().labels("app=web");
    eventually("three defaulted Pods", || async {
        let items = pods.list(&lp).await.ok()?.items;
        (items.len() == 3
            && items.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.containers[0].resources.as_ref())
                    .and_then(|r| r.requests.as_ref())
                    .is_some_and(|r| r["cpu"].0 == "250m")
            }))
        .then_some(())
    })
    .await;
    used(&quotas, "cpu", json!({"requests.cpu": "1"})).await;
}
