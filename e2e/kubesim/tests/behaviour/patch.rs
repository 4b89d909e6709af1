//! The four patch types: JSON patch, merge patch, strategic merge patch, apply.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "1"}]},
                    {"name": "sidecar", "image": "sidecar:1"},
                ]},
            },
        },
    }))
    .unwrap()
}

/// kube's `Patch::Json` needs the `jsonpatch` feature; the wire format is simple enough.
async fn json_patch(env: &Env, name: &str, ops: serde_json::Value) -> Raw {
    raw(
        &env.client,
        "PATCH",
        &format!("/api/v1/namespaces/default/configmaps/{name}"),
        Some("application/json-patch+json"),
        serde_json::to_vec(&ops).unwrap(),
    )
    .await
}

#[tokio::test]
async fn json_patch_adds_replaces_removes_and_tests() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &cm("c", json!({"a": "1"}), json!({"x": "1", "y": "2"})),
    )
    .await
    .unwrap();
    let r = json_patch(
        &env,
        "c",
        json!([
            {"op": "test", "path": "/data/x", "value": "1"},
            {"op": "replace", "path": "/data/x", "value": "10"},
            {"op": "remove", "path": "/data/y"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        ]),
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["data"], json!({"x": "10"}));
    let got = api.get("c").await.unwrap();
    assert_eq!(
        got.data.unwrap().into_iter().collect::<Vec<_>>(),
        vec![("x".to_string(), "10".to_string())]
    );
    assert_eq!(got.metadata.labels.unwrap()["b"], "2");

    // a failing test op rejects the whole patch and changes nothing
    let r = json_patch(
        &env,
        "c",
        json!([
            {"op": "replace", "path": "/data/x", "value": "99"},
            {"op": "test", "path": "/data/x", "value": "nope"},
        ]),
    )
    .await;
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (422, Some("Invalid")),
        "{}",
        r.body
    );
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["x"], "10");
    // not a patch document at all
    let r = json_patch(&env, "c", json!({"op": "add"})).await;
    assert_eq!(r.code, 400, "{}", r.body);
}

#[tokio::test]
async fn merge_patch_merges_maps_and_null_deletes() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &cm("c", json!({"a": "1", "b": "2"}), json!({"x": "1"})),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"a": null, "c": "3"}}, "data": {"y": "2"}}),
            ),
        )
        .await
        .unwrap();
    let labels = out.metadata.labels.unwrap();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        vec![("b".to_string(), "2".to_string()), ("c".into(), "3".into())]
    );
    assert_eq!(out.data.unwrap().len(), 2);

    // a stale resourceVersion in a merge patch is a conflict
    let e = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"z": "3"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let env = start().await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    let out = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]},
                {"name": "extra", "image": "extra:1"},
            ]}}}})),
        )
        .await
        .unwrap();
    let pod = out.spec.unwrap().template.spec.unwrap();
    let summary: Vec<(String, String)> = pod
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("app".to_string(), "app:2".to_string()),
            ("sidecar".into(), "sidecar:1".into()),
            ("extra".into(), "extra:1".into()),
        ],
        "containers merge by name, the untouched sidecar stays"
    );
    let env_vars: Vec<(String, String)> = pod.containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap()))
        .collect();
    assert_eq!(
        env_vars,
        vec![
            ("A".to_string(), "1".to_string()),
            ("B".into(), "2".into()),
            ("C".into(), "3".into())
        ]
    );

    // $patch: delete removes one container by name
    let out = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"},
            ]}}}})),
        )
        .await
        .unwrap();
    let names: Vec<String> = out
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, vec!["app", "extra"]);
}

#[tokio::test]
async fn strategic_merge_patch_is_refused_for_custom_resources() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    api.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    let e = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 415);
    let out = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["spec"]["size"], 2);
}

#[tokio::test]
async fn apply_patch_creates_then_updates() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PatchParams::apply("deployer");
    let first = api
        .patch(
            "applied",
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(first.data.as_ref().unwrap()["a"], "1");
    let mf = first.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("deployer"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));

    let second = api
        .patch(
            "applied",
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "2", "b": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(second.metadata.uid, first.metadata.uid);
    let data = second.data.unwrap();
    assert_eq!((data["a"].as_str(), data["b"].as_str()), ("2", "1"));

    // apply needs a field manager
    let e = api
        .patch(
            "applied",
            &PatchParams::default(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400);
}
