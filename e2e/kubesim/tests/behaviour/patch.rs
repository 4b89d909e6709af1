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

/// kube-apiserver's patch handler checks the patched object against the request: a
/// namespace that is not the URL's is a 400 (`EnsureObjectNamespaceMatchesRequestNamespace`),
/// a name that is not the URL's a 400 (`checkName`), and a uid that is not the stored
/// object's is refused (immutable on a patch or an apply, a failed precondition on a
/// PUT, a conflict on an apply that would create).
#[tokio::test]
async fn patches_and_puts_may_not_move_rename_or_swap_the_uid() {
    let env = start().await;
    namespace(&env.client, "other").await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let created = api
        .create(
            &PostParams::default(),
            &cm("c", json!({}), json!({"a": "1"})),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let pp = PatchParams::default();

    let e = api
        .patch(
            "c",
            &pp,
            &Patch::Merge(json!({"metadata": {"namespace": "other"}, "data": {"a": "2"}})),
        )
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (400, "BadRequest"));
    assert_eq!(
        message(&e),
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    let others: Api<ConfigMap> = Api::namespaced(env.client.clone(), "other");
    assert!(
        is_gone(&others, "c").await,
        "nothing stored in the other namespace"
    );
    assert_eq!(api.get("c").await.unwrap(), created, "nor changed here");

    let e = api
        .patch("c", &pp, &Patch::Merge(json!({"metadata": {"name": "d"}})))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400);
    assert_eq!(
        message(&e),
        "the name of the object (d) does not match the name on the URL (c)"
    );

    // PATCH: the uid is immutable
    let e = api
        .patch(
            "c",
            &pp,
            &Patch::Merge(json!({"metadata": {"uid": "someone-else"}, "data": {"a": "2"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e),
        [(
            "FieldValueInvalid".to_string(),
            "metadata.uid".to_string(),
            "Invalid value: \"someone-else\": field is immutable".to_string()
        )]
    );
    assert_eq!(
        message(&e),
        "ConfigMap \"c\" is invalid: metadata.uid: Invalid value: \"someone-else\": field is immutable"
    );
    // apply too; and an apply that would create may not name a uid
    let applied = |name: &str| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "uid": "someone-else"}, "data": {"a": "2"}}))
    };
    let e = api
        .patch("c", &PatchParams::apply("m"), &applied("c"))
        .await
        .unwrap_err();
    assert_eq!(causes(&e)[0].1, "metadata.uid");
    let e = api
        .patch("new", &PatchParams::apply("m"), &applied("new"))
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (409, "Conflict"));
    assert_eq!(
        message(&e),
        "Operation cannot be fulfilled on configmaps \"new\": uid mismatch: the provided object specified uid someone-else, and no existing object was found"
    );

    // PUT: the uid is a precondition, checked before the resourceVersion
    let mut other = cm("c", json!({}), json!({"a": "3"}));
    other.metadata.uid = Some("someone-else".into());
    other.metadata.resource_version = Some("1".into());
    let e = api
        .replace("c", &PostParams::default(), &other)
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (409, "Conflict"));
    assert_eq!(
        message(&e),
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": StorageError: invalid object, Code: 4, Key: /registry/configmaps/default/c, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: someone-else, UID in object meta: {uid}"
        )
    );
    assert_eq!(api.get("c").await.unwrap(), created, "nothing changed");
    // the right uid is fine
    let mut same = cm("c", json!({}), json!({"a": "3"}));
    same.metadata.uid = Some(uid);
    api.replace("c", &PostParams::default(), &same)
        .await
        .unwrap();
}

/// Strategic merge patch keys lists by the `patchMergeKey` tags of k8s.io/api: a
/// Service's ports by `port` alone, a container's by `containerPort` alone (a port
/// with another protocol merges into the one with that number); a Node's taints have
/// no patch strategy and are replaced. Server-side apply keys by the list-map keys
/// (port and protocol) and treats taints as atomic.
#[tokio::test]
async fn strategic_merge_patch_follows_the_patch_merge_keys() {
    use k8s_openapi::api::core::v1::{Node, Service};
    let env = start().await;
    let pp = PatchParams::default();

    let svcs: Api<Service> = Api::namespaced(env.client.clone(), "default");
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "s"},
            "spec": {"ports": [{"name": "a", "port": 80, "protocol": "TCP"}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let out = svcs
        .patch(
            "s",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"ports": [{"name": "b", "port": 80, "protocol": "UDP"}]}}),
            ),
        )
        .await
        .unwrap();
    let ports: Vec<(Option<String>, i32, Option<String>)> = out
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.name, p.port, p.protocol))
        .collect();
    assert_eq!(
        ports,
        [(Some("b".to_string()), 80, Some("UDP".to_string()))],
        "merged by port"
    );

    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let mut d = deployment();
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .ports = Some(vec![
        serde_json::from_value(json!({"name": "tcp", "containerPort": 53, "protocol": "TCP"}))
            .unwrap(),
    ]);
    deploys.create(&PostParams::default(), &d).await.unwrap();
    let out = deploys
        .patch(
            "web",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "ports": [{"name": "udp", "containerPort": 53, "protocol": "UDP"}]},
            ]}}}})),
        )
        .await
        .unwrap();
    let ports: Vec<(Option<String>, i32, Option<String>)> =
        out.spec.unwrap().template.spec.unwrap().containers[0]
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.container_port, p.protocol))
            .collect();
    assert_eq!(
        ports,
        [(Some("udp".to_string()), 53, Some("UDP".to_string()))],
        "merged by containerPort"
    );

    let nodes: Api<Node> = Api::all(env.client.clone());
    let taint = |k: &str| json!({"key": k, "effect": "NoSchedule"});
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "n"}, "spec": {"taints": [taint("a"), taint("b")]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let keys = |n: Node| -> Vec<String> {
        n.spec
            .unwrap()
            .taints
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.key)
            .collect()
    };
    let out = nodes
        .patch(
            "n",
            &pp,
            &Patch::Strategic(json!({"spec": {"taints": [taint("c")]}})),
        )
        .await
        .unwrap();
    assert_eq!(keys(out), ["c"], "taints are replaced");
    // server-side apply: taints are atomic, so a second manager's list conflicts
    let apply = |k: &str| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "spec": {"taints": [taint(k)]}}),
        )
    };
    nodes
        .patch("n", &PatchParams::apply("one").force(), &apply("c"))
        .await
        .unwrap();
    let e = nodes
        .patch("n", &PatchParams::apply("two"), &apply("d"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409, "{e}");
    assert!(message(&e).contains(".spec.taints"), "{}", message(&e));
}
