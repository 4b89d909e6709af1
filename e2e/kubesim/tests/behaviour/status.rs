//! The status subresource and metadata.generation.

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn custom_resource_status_subresource_splits_writes() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let pp = PostParams::default();
    let mut w = widget("w", json!({"size": 1}));
    w.data["status"] = json!({"ready": true});
    let created = api.create(&pp, &w).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "create ignores status: {}",
        created.data
    );

    // main resource: spec changes, status is ignored
    let mut w = api.get("w").await.unwrap();
    w.data["spec"]["size"] = json!(2);
    w.data["status"] = json!({"ready": true});
    let out = api.replace("w", &pp, &w).await.unwrap();
    assert_eq!(out.data["spec"]["size"], 2);
    assert!(out.data.get("status").is_none(), "{}", out.data);

    // /status: status changes, spec is ignored
    let out = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 99}, "status": {"ready": true, "observed": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["status"], json!({"ready": true, "observed": 2}));
    assert_eq!(out.data["spec"]["size"], 2);

    let mut w = api.get_status("w").await.unwrap();
    w.data["spec"]["size"] = json!(50);
    w.data["status"]["ready"] = json!(false);
    let out = api.replace_status("w", &pp, &w).await.unwrap();
    assert_eq!(out.data["status"]["ready"], false);
    assert_eq!(out.data["spec"]["size"], 2);

    // a main-resource merge patch of status is a no-op for status
    let out = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["status"]["ready"], false);
    let stored = api.get("w").await.unwrap();
    assert_eq!(
        (
            stored.data["spec"]["size"].clone(),
            stored.data["status"]["ready"].clone()
        ),
        (json!(2), json!(false))
    );
}

#[tokio::test]
async fn deployment_status_subresource_splits_writes() {
    let env = start().await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &deployment())
        .await
        .unwrap();

    let out = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"replicas": 7}, "status": {"readyReplicas": 1, "replicas": 1}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(out.spec.as_ref().unwrap().replicas, Some(1));

    let mut d = api.get("web").await.unwrap();
    d.spec.as_mut().unwrap().replicas = Some(3);
    d.status.as_mut().unwrap().ready_replicas = Some(3);
    let out = api
        .replace("web", &PostParams::default(), &d)
        .await
        .unwrap();
    assert_eq!(out.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        out.status.as_ref().unwrap().ready_replicas,
        Some(1),
        "main writes ignore status"
    );
}

fn generation(d: &Deployment) -> i64 {
    d.metadata.generation.expect("generation is set")
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_only() {
    let env = start().await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let pp = PatchParams::default();
    let d = api
        .create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    assert_eq!(generation(&d), 1);

    let d = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&d), 1, "label changes keep the generation");

    let d = api
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"observedGeneration": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&d), 1, "status changes keep the generation");

    let d = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    assert_eq!(generation(&d), 2, "a spec change bumps the generation");

    let d = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    assert_eq!(generation(&d), 2, "a no-op patch keeps the generation");

    let mut d = api.get("web").await.unwrap();
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("app:2".into());
    let d = api
        .replace("web", &PostParams::default(), &d)
        .await
        .unwrap();
    assert_eq!(generation(&d), 3);
    assert_eq!(generation(&api.get("web").await.unwrap()), 3);
}

#[tokio::test]
async fn custom_resource_generation_ignores_metadata_and_status() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let pp = PatchParams::default();
    api.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    let w = api
        .patch(
            "w",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"l": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch_status("w", &pp, &Patch::Merge(json!({"status": {"ready": true}})))
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch("w", &pp, &Patch::Merge(json!({"spec": {"size": 2}})))
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
}

/// kube-apiserver's PrepareForCreate: a built-in object's status is the server's on
/// create (a Deployment's empty, a Pod Pending with its QoS class, a Service's empty
/// load balancer), whatever the client sent; the status subresource sets it later.
#[tokio::test]
async fn built_in_objects_start_from_the_servers_status() {
    let env = start().await;
    let client = env.client.clone();
    let post = |path: &str, body: serde_json::Value| {
        let client = client.clone();
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        async move { client.request::<serde_json::Value>(req).await.unwrap() }
    };
    let mut d = serde_json::to_value(deployment()).unwrap();
    d["status"] = json!({"replicas": 3, "readyReplicas": 3});
    let out = post("/apis/apps/v1/namespaces/default/deployments", d).await;
    assert_eq!(out["status"], json!({}), "{out}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running", "podIP": "10.9.9.9"}});
    let out = post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(
        out["status"],
        json!({"phase": "Pending", "qosClass": "Guaranteed"})
    );
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    let out = post("/api/v1/namespaces/default/services", svc).await;
    assert_eq!(out["status"], json!({"loadBalancer": {}}));
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"},
        "spec": {"minAvailable": 1}, "status": {"disruptionsAllowed": 5}});
    let out = post(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        pdb,
    )
    .await;
    assert_eq!(
        out["status"],
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
    );
    // the status subresource is how status is written
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let out = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(out.status.unwrap().replicas, Some(3));
}

/// kube-apiserver's Deployment strategy bumps the generation when the annotations change
/// (they are copied to the ReplicaSets); its status writes do not, and no other apps
/// kind's strategy does (StatefulSet, DaemonSet, ReplicaSet: the spec only).
#[tokio::test]
async fn deployment_annotation_changes_bump_the_generation_other_workloads_do_not() {
    use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
    let env = start().await;
    let pp = PatchParams::default();
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    let annotate = |v: &str| Patch::Merge(json!({"metadata": {"annotations": {"note": v}}}));
    let d = api.patch("web", &pp, &annotate("1")).await.unwrap();
    assert_eq!(
        generation(&d),
        2,
        "an annotation change bumps the generation"
    );
    let d = api.patch("web", &pp, &annotate("1")).await.unwrap();
    assert_eq!(generation(&d), 2, "the same annotations keep it");
    let d = api.patch_status("web", &pp, &annotate("2")).await.unwrap();
    assert_eq!(generation(&d), 2, "a status write keeps it");

    let selector = json!({"matchLabels": {"app": "w"}});
    let template = json!({"metadata": {"labels": {"app": "w"}},
        "spec": {"containers": [{"name": "c", "image": "c:1"}]}});
    let spec = json!({"selector": selector, "template": template});
    let sts: Api<StatefulSet> = Api::namespaced(env.client.clone(), "default");
    let mut s = spec.clone();
    s["serviceName"] = json!("w");
    sts.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": s})).unwrap(),
    )
    .await
    .unwrap();
    let s = sts.patch("s", &pp, &annotate("1")).await.unwrap();
    assert_eq!(s.metadata.generation, Some(1), "StatefulSet");
    let dss: Api<DaemonSet> = Api::namespaced(env.client.clone(), "default");
    dss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "ds"}, "spec": spec})).unwrap(),
    )
    .await
    .unwrap();
    let ds = dss.patch("ds", &pp, &annotate("1")).await.unwrap();
    assert_eq!(ds.metadata.generation, Some(1), "DaemonSet");
    let rss: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "default");
    let mut r = spec.clone();
    r["replicas"] = json!(0);
    rss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "rs"}, "spec": r})).unwrap(),
    )
    .await
    .unwrap();
    let rs = rss.patch("rs", &pp, &annotate("1")).await.unwrap();
    assert_eq!(rs.metadata.generation, Some(1), "ReplicaSet");
}

/// Kinds whose kube-apiserver strategy sets no generation keep none, before and after a
/// spec change: ResourceQuota, LimitRange and ConfigMap (a Deployment has one).
#[tokio::test]
async fn kinds_without_a_generation_keep_none() {
    use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, ResourceQuota};
    let env = start().await;
    let post = PostParams::default();
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), "default");
    let q = quotas
        .create(
            &post,
            &serde_json::from_value(
                json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10"}}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(q.metadata.generation, None);
    let q = quotas
        .patch(
            "q",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "20"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        q.metadata.generation, None,
        "not after a spec change either"
    );
    let limits: Api<LimitRange> = Api::namespaced(env.client.clone(), "default");
    let l = limits
        .create(
            &post,
            &serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"limits": [
                {"type": "Container", "default": {"cpu": "100m"}}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, None);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let c = cms
        .create(
            &post,
            &serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(c.metadata.generation, None);
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let d = deployments.create(&post, &deployment()).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
}

/// The status subresource serves get, update and patch only (kube-apiserver routes no
/// other method there): any other is a 405 Status, and none deletes, creates or watches
/// the object. A GET of it with `?watch` is a get; no `/watch/` path leads to it.
#[tokio::test]
async fn the_status_subresource_serves_get_update_and_patch_only() {
    let env = start().await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    let status = "/apis/apps/v1/namespaces/default/deployments/web/status";
    for (method, body) in [
        ("DELETE", vec![]),
        ("DELETE", b"{}".to_vec()),
        ("POST", serde_json::to_vec(&deployment()).unwrap()),
    ] {
        let r = raw(&env.client, method, status, Some("application/json"), body).await;
        assert_eq!(r.code, 405, "{method}: {}", r.body);
        assert_eq!(
            (r.body["kind"].as_str(), r.body["reason"].as_str()),
            (Some("Status"), Some("MethodNotAllowed")),
            "{method}: {}",
            r.body
        );
    }
    let d = api.get("web").await.expect("the deployment is still there");
    assert!(d.metadata.deletion_timestamp.is_none());

    let r = raw(
        &env.client,
        "GET",
        &format!("{status}?watch=true&timeoutSeconds=1"),
        None,
        vec![],
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(
        r.body["kind"], "Deployment",
        "a get, not a watch: {}",
        r.body
    );
    let r = raw(
        &env.client,
        "GET",
        "/apis/apps/v1/watch/namespaces/default/deployments/web/status?timeoutSeconds=1",
        None,
        vec![],
    )
    .await;
    assert_eq!(r.code, 404, "{}", r.body);
    api.get_status("web").await.expect("get status");
}
