//! Server-side apply: field ownership, conflicts between managers, force, and
//! removal of fields a manager stops applying.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

fn applied(data: Value) -> Patch<Value> {
    Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data}),
    )
}

/// The `data` keys each manager owns, from managedFields.
fn owners(c: &ConfigMap) -> Vec<(String, String, Vec<String>)> {
    let mut out: Vec<(String, String, Vec<String>)> = c
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            let fields = m.fields_v1.map(|f| f.0).unwrap_or(Value::Null);
            let mut keys: Vec<String> = fields
                .get("f:data")
                .and_then(Value::as_object)
                .map(|o| {
                    o.keys()
                        .filter_map(|k| k.strip_prefix("f:").map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            keys.sort();
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
                keys,
            )
        })
        .collect();
    out.sort();
    out
}

fn data(c: &ConfigMap) -> Vec<(String, String)> {
    c.data.clone().unwrap_or_default().into_iter().collect()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn conflicting_managers_get_409_until_they_force() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");
    api.patch("shared", &alice, &applied(json!({"a": "1", "mine": "x"})))
        .await
        .unwrap();

    let e = api
        .patch("shared", &bob, &applied(json!({"a": "2"})))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("alice") && status.message.contains(".data.a"),
        "{}",
        status.message
    );
    let c = api.get("shared").await.unwrap();
    assert_eq!(
        data(&c),
        kv(&[("a", "1"), ("mine", "x")]),
        "a conflict changes nothing"
    );

    // applying the same value is not a conflict: ownership is shared
    let c = api
        .patch("shared", &bob, &applied(json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(
        owners(&c),
        vec![
            (
                "alice".to_string(),
                "Apply".to_string(),
                vec!["a".to_string(), "mine".to_string()]
            ),
            ("bob".into(), "Apply".into(), vec!["a".into()]),
        ]
    );

    let c = api
        .patch("shared", &bob.clone().force(), &applied(json!({"a": "2"})))
        .await
        .unwrap();
    assert_eq!(data(&c), kv(&[("a", "2"), ("mine", "x")]));
    assert_eq!(
        owners(&c),
        vec![
            (
                "alice".to_string(),
                "Apply".to_string(),
                vec!["mine".to_string()]
            ),
            ("bob".into(), "Apply".into(), vec!["a".into()]),
        ],
        "force moves ownership of .data.a to bob"
    );
    // now alice conflicts with bob
    let e = api
        .patch("shared", &alice, &applied(json!({"a": "3", "mine": "x"})))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
}

#[tokio::test]
async fn fields_a_manager_stops_applying_are_removed() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let alice = PatchParams::apply("alice");
    let bob = PatchParams::apply("bob");
    api.patch(
        "shared",
        &alice,
        &applied(json!({"keep": "1", "drop": "1", "co": "1"})),
    )
    .await
    .unwrap();
    // bob co-owns "co"
    api.patch("shared", &bob, &applied(json!({"co": "1"})))
        .await
        .unwrap();

    let c = api
        .patch("shared", &alice, &applied(json!({"keep": "1"})))
        .await
        .unwrap();
    assert_eq!(
        data(&c),
        kv(&[("co", "1"), ("keep", "1")]),
        "alice's dropped field goes, the co-owned one stays"
    );
    assert_eq!(
        owners(&c),
        vec![
            (
                "alice".to_string(),
                "Apply".to_string(),
                vec!["keep".to_string()]
            ),
            ("bob".into(), "Apply".into(), vec!["co".into()]),
        ]
    );
    let c = api
        .patch("shared", &bob, &applied(json!({})))
        .await
        .unwrap();
    assert_eq!(data(&c), kv(&[("keep", "1")]));
}

#[tokio::test]
async fn an_update_takes_ownership_from_an_applier() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.patch(
        "shared",
        &PatchParams::apply("alice"),
        &applied(json!({"a": "1"})),
    )
    .await
    .unwrap();
    let mut c = api.get("shared").await.unwrap();
    c.data = Some([("a".to_string(), "edited".to_string())].into());
    let pp = PostParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    let c = api.replace("shared", &pp, &c).await.unwrap();
    assert_eq!(
        owners(&c),
        vec![(
            "editor".to_string(),
            "Update".to_string(),
            vec!["a".to_string()]
        )],
        "alice lost her only field, and with it her managedFields entry"
    );
    // alice applying her old value now conflicts with the editor
    let e = api
        .patch(
            "shared",
            &PatchParams::apply("alice"),
            &applied(json!({"a": "1"})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
}

fn applied_deployment(containers: Value) -> Patch<Value> {
    Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}},
        },
    }))
}

fn container_names(d: &k8s_openapi::api::apps::v1::Deployment) -> Vec<(String, Option<String>)> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone()))
        .collect()
}

#[tokio::test]
async fn list_items_a_manager_stops_applying_are_removed_whole() {
    let env = start().await;
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), "default");
    let pp = PatchParams::apply("deployer");
    api.patch(
        "web",
        &pp,
        &applied_deployment(
            json!([{"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "sidecar:1"}]),
        ),
    )
    .await
    .unwrap();
    // another manager adds its own container
    api.patch(
        "web",
        &PatchParams::apply("injector"),
        &applied_deployment(json!([{"name": "proxy", "image": "proxy:1"}])),
    )
    .await
    .unwrap();

    let d = api
        .patch(
            "web",
            &pp,
            &applied_deployment(json!([{"name": "app", "image": "app:2"}])),
        )
        .await
        .unwrap();
    assert_eq!(
        container_names(&d),
        vec![
            ("app".to_string(), Some("app:2".to_string())),
            ("proxy".into(), Some("proxy:1".into())),
        ],
        "the dropped sidecar is removed entirely, the injector's container stays"
    );
    assert_eq!(
        container_names(&api.get("web").await.unwrap()),
        container_names(&d)
    );
}

/// A Deployment as the propagation applier applies it: labels, annotations, spec fields
/// and container ports (a map-list keyed by containerPort and protocol).
fn applied_web(labels: Value, annotations: Value, spec: Value, ports: Value) -> Patch<Value> {
    let mut s = json!({
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "app:1", "ports": ports}]}},
    });
    if let (Some(m), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        m.extend(extra.clone());
    }
    Patch::Apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels, "annotations": annotations},
        "spec": s,
    }))
}

#[tokio::test]
async fn fields_released_by_an_applier_go_unless_another_manager_owns_them() {
    let env = start().await;
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), "default");
    let causeway = PatchParams::apply("causeway");
    api.patch(
        "web",
        &causeway,
        &applied_web(
            json!({"mine": "1", "shared": "1", "kept": "1"}),
            json!({"note": "x", "kept": "1"}),
            json!({"replicas": 2, "minReadySeconds": 5, "revisionHistoryLimit": 3}),
            json!([{"containerPort": 80}, {"containerPort": 9090}]),
        ),
    )
    .await
    .unwrap();
    // another manager co-owns the "shared" label, minReadySeconds and port 9090
    api.patch(
        "web",
        &PatchParams::apply("other"),
        &applied_web(
            json!({"shared": "1"}),
            json!({}),
            json!({"minReadySeconds": 5}),
            json!([{"containerPort": 9090}]),
        ),
    )
    .await
    .unwrap();

    let d = api
        .patch(
            "web",
            &causeway,
            &applied_web(
                json!({"kept": "1"}),
                json!({"kept": "1"}),
                json!({"replicas": 2}),
                json!([{"containerPort": 80}]),
            ),
        )
        .await
        .unwrap();
    let keys = |m: Option<std::collections::BTreeMap<String, String>>| -> Vec<String> {
        m.unwrap_or_default().into_keys().collect()
    };
    assert_eq!(
        keys(d.metadata.labels.clone()),
        ["kept", "shared"],
        "the label causeway alone owned goes, the co-owned one stays"
    );
    assert_eq!(keys(d.metadata.annotations.clone()), ["kept"]);
    let spec = d.spec.clone().unwrap();
    assert_eq!(
        (
            spec.replicas,
            spec.min_ready_seconds,
            spec.revision_history_limit
        ),
        (Some(2), Some(5), Some(10)),
        "revisionHistoryLimit (causeway's alone) goes, back to its default, as kube-apiserver defaults it; minReadySeconds (shared) stays"
    );
    let ports: Vec<i32> = spec.template.spec.unwrap().containers[0]
        .ports
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [80, 9090], "the co-owned port item stays");
    assert_eq!(api.get("web").await.unwrap(), d, "as stored");
}

/// An apply that carries `metadata.resourceVersion` is refused (409) unless the object
/// is still at that version, as kube-apiserver does: the precondition of a writer that
/// copies a field it read. An apply that creates ignores it; a POST with one is refused.
#[tokio::test]
async fn an_apply_with_a_stale_resource_version_is_refused_and_a_post_with_one() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let alice = PatchParams::apply("alice").force();
    let with_rv = |rv: Option<&str>, a: &str| {
        let mut body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pinned"},
            "data": {"a": a},
        });
        if let Some(rv) = rv {
            body["metadata"]["resourceVersion"] = json!(rv);
        }
        Patch::Apply(body)
    };
    let first = api
        .patch("pinned", &alice, &with_rv(None, "1"))
        .await
        .unwrap();
    let read = first.metadata.resource_version.clone().unwrap();
    let second = api
        .patch("pinned", &alice, &with_rv(Some(&read), "2"))
        .await
        .unwrap();
    assert_eq!(data(&second), kv(&[("a", "2")]));
    let e = api
        .patch("pinned", &alice, &with_rv(Some(&read), "3"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
    let now = api.get("pinned").await.unwrap();
    assert_eq!(
        data(&now),
        kv(&[("a", "2")]),
        "the refused apply changed nothing"
    );
    // an apply that creates ignores a resourceVersion (kube-apiserver's create-on-update
    // path); a create (POST) with one is refused by its storage
    api.delete("pinned", &Default::default()).await.unwrap();
    let made = api
        .patch("pinned", &alice, &with_rv(Some(&read), "4"))
        .await
        .unwrap();
    assert_eq!(data(&made), kv(&[("a", "4")]));
    api.delete("pinned", &Default::default()).await.unwrap();
    let mut posted: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "resourceVersion": "7"}, "data": {"a": "5"}
    }))
    .unwrap();
    // (a dry run does not reach the storage that refuses it)
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &posted).await.unwrap();
    let e = api.create(&Default::default(), &posted).await.unwrap_err();
    assert_eq!(code(&e), 500);
    assert!(
        e.to_string()
            .contains("resourceVersion should not be set on objects to be created"),
        "{e}"
    );
    posted.metadata.resource_version = None;
    api.create(&Default::default(), &posted).await.unwrap();
}

/// An apply that changes nothing writes nothing (kube-apiserver's field manager keeps
/// the stored object: structured-merge-diff's `Apply` returns no object, so no
/// managedFields `time` is stamped): same resourceVersion, same managedFields, no
/// watch event. An apply that changes something still writes.
#[tokio::test]
async fn an_apply_that_changes_nothing_writes_nothing() {
    use kube::api::WatchEvent;
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PatchParams::apply("alice");
    let first = api
        .patch("shared", &pp, &applied(json!({"a": "1"})))
        .await
        .unwrap();
    // managedFields times have second precision: a stamp now would differ
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let rv = env.quiet().await;
    for _ in 0..2 {
        let again = api
            .patch("shared", &pp, &applied(json!({"a": "1"})))
            .await
            .unwrap();
        assert_eq!(again, first, "the stored object, as it was");
    }
    assert_eq!(api.get("shared").await.unwrap(), first);
    assert_eq!(env.server.resource_version(), rv, "nothing written");
    let changed = api
        .patch("shared", &pp, &applied(json!({"a": "2"})))
        .await
        .unwrap();
    assert_ne!(
        changed.metadata.resource_version,
        first.metadata.resource_version
    );
    let events = events_since(&api, &rv.to_string(), "watch from before the no-op applies").await;
    let seen: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Modified(c) => format!("MODIFIED {:?}", c.data),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        seen,
        [format!(
            "MODIFIED {:?}",
            Some(std::collections::BTreeMap::from([(
                "a".to_string(),
                "2".to_string()
            )]))
        )],
        "only the apply that changed something sent an event"
    );
}

/// As kube-apiserver's field manager: managed fields a client writes (a PUT or PATCH
/// carrying a list of entries) are taken as the object's, which is how ownership is
/// handed over (a field kept only by the new owner goes when it stops applying it) or
/// stripped (`[{}]`); an empty list keeps them, so a client that does not know the
/// field cannot drop it by accident.
#[tokio::test]
async fn managed_fields_a_client_writes_replace_the_stored_ones() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    // made by one tool, then applied, value for value, by another: both own `a`
    let made = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("shared".into()),
            ..Default::default()
        },
        data: Some([("a".to_string(), "1".to_string())].into()),
        ..Default::default()
    };
    let pp = PostParams {
        field_manager: Some("maker".into()),
        ..Default::default()
    };
    api.create(&pp, &made).await.unwrap();
    let taker = PatchParams::apply("taker").force();
    let c = api
        .patch("shared", &taker, &applied(json!({"a": "1", "b": "2"})))
        .await
        .unwrap();
    let both = |a: &str| {
        vec![
            (
                "maker".to_string(),
                "Update".to_string(),
                vec![a.to_string()],
            ),
            (
                "taker".to_string(),
                "Apply".to_string(),
                vec!["a".to_string(), "b".to_string()],
            ),
        ]
    };
    assert_eq!(owners(&c), both("a"));
    // an empty list changes nothing
    let merge = |fields: Value| Patch::Merge(json!({"metadata": {"managedFields": fields}}));
    let c = api
        .patch("shared", &PatchParams::default(), &merge(json!([])))
        .await
        .unwrap();
    assert_eq!(owners(&c), both("a"));
    // the taker's entry alone: `a` is the taker's only, and goes when it stops applying it
    let mine: Vec<Value> = serde_json::to_value(c.metadata.managed_fields.clone().unwrap())
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["manager"] == "taker")
        .cloned()
        .collect();
    let c = api
        .patch("shared", &PatchParams::default(), &merge(json!(mine)))
        .await
        .unwrap();
    assert_eq!(owners(&c), both("a")[1..].to_vec());
    let c = api
        .patch("shared", &taker, &applied(json!({"b": "2"})))
        .await
        .unwrap();
    assert_eq!(data(&c), kv(&[("b", "2")]));
    // `[{}]` strips them all
    let c = api
        .patch("shared", &PatchParams::default(), &merge(json!([{}])))
        .await
        .unwrap();
    assert_eq!(owners(&c), vec![]);
}
