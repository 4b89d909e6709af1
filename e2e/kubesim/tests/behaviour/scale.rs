//! The scale subresource (autoscaling/v1 Scale): Deployments and custom resources whose
//! CRD declares one; discovery lists it, and kinds without it answer 404.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn deployments_scale_through_the_subresource() {
    let env = start().await;
    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "template": {"metadata": {"labels": {"app": "web", "tier": "a"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    let s = deploys.get_scale("web").await.unwrap();
    assert_eq!(s.spec.as_ref().and_then(|s| s.replicas), Some(1));
    assert_eq!(
        s.status.as_ref().and_then(|s| s.selector.as_deref()),
        Some("app=web,tier in (a,b)")
    );
    // a merge patch of the Scale sets the Deployment's replicas (a spec change: its
    // generation moves on)
    let s = deploys
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(s.spec.and_then(|s| s.replicas), Some(4));
    let d = deploys.get("web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(4));
    assert_eq!(d.metadata.generation, Some(2));
    // PUT with a stale resourceVersion is a conflict; a negative count is invalid
    let put = |rv: &str, n: i64| {
        serde_json::from_value::<Scale>(json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": rv},
            "spec": {"replicas": n}}))
        .unwrap()
    };
    let e = deploys
        .replace_scale("web", &PostParams::default(), &put("1", 2))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409, "{e:?}");
    let e = deploys
        .replace_scale("web", &PostParams::default(), &put("", -1))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422);
    assert_eq!(
        message(&e),
        "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
    );
    let rv = d.metadata.resource_version.unwrap();
    let s = deploys
        .replace_scale("web", &PostParams::default(), &put(&rv, 0))
        .await
        .unwrap();
    assert_eq!(s.spec.and_then(|s| s.replicas), Some(0));
    // a kind without the subresource
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let e = cms.get_scale("x").await.unwrap_err();
    assert_eq!(code(&e), 404);
    // discovery names it, with the Scale kind
    let list = raw(&env.client, "GET", "/apis/apps/v1", None, vec![]).await;
    let scale = list.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "deployments/scale")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&scale["group"], &scale["version"], &scale["kind"]),
        (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
    );
}

#[tokio::test]
async fn a_crd_scale_subresource_reads_and_writes_its_paths() {
    let env = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "pools.test.causeway.io"},
        "spec": {"group": "test.causeway.io", "scope": "Namespaced",
            "names": {"plural": "pools", "singular": "pool", "kind": "Pool"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size",
                    "statusReplicasPath": ".status.ready", "labelSelectorPath": ".status.selector"}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "integer"}, "selector": {"type": "string"}}}}}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("test.causeway.io", "v1", "Pool"),
        "pools",
    );
    let pools: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), "default", &ar);
    let pool = eventually("the pools type served", || async {
        let mut p = DynamicObject::new("p", &ar);
        p.data = json!({"spec": {"size": 2}});
        pools.create(&PostParams::default(), &p).await.ok()
    })
    .await;
    let mut with_status = pool.clone();
    with_status.data["status"] = json!({"ready": 1, "selector": "pool=p"});
    pools
        .replace_status("p", &PostParams::default(), &with_status)
        .await
        .unwrap();
    let s = pools.get_scale("p").await.unwrap();
    assert_eq!(s.spec.and_then(|s| s.replicas), Some(2));
    let st = s.status.unwrap();
    assert_eq!((st.replicas, st.selector.as_deref()), (1, Some("pool=p")));
    pools
        .patch_scale(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(pools.get("p").await.unwrap().data["spec"]["size"], 5);
}
