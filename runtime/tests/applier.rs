//! The applier against a real API server (kubesim), with dynamic objects of kinds it
//! does not know at compile time: namespaced and cluster-scoped server-side apply,
//! status, pruning by owner labels, finalizers.

use std::collections::BTreeSet;
use std::time::Duration;

use causeway_runtime::apply::{self, Outcome};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::json;

async fn cluster() -> (kubesim::Server, kube::Client) {
    let server = kubesim::Server::start(kubesim::Config::new("applier"))
        .await
        .expect("kubesim starts");
    let client = server.client().await;
    (server, client)
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn object(
    ar: &ApiResource,
    ns: Option<&str>,
    name: &str,
    body: serde_json::Value,
) -> DynamicObject {
    let mut o = DynamicObject::new(name, ar).data(body);
    o.metadata.namespace = ns.map(String::from);
    o
}

#[tokio::test]
async fn dynamic_objects_are_applied_once_and_hand_edits_reverted() {
    let (_server, client) = cluster().await;
    // namespaced
    let cm = resource("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm);
    let want = object(
        &cm,
        Some("default"),
        "settings",
        json!({"data": {"mode": "fast"}}),
    );
    assert_eq!(
        apply::ensure(&api, &want, None).await.unwrap(),
        Outcome::Written
    );
    let have = api.get("settings").await.unwrap();
    assert_eq!(have.data["data"]["mode"], "fast");
    let managers: Vec<_> = have
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, ["causeway"]);
    assert_eq!(
        apply::ensure(&api, &want, Some(&have)).await.unwrap(),
        Outcome::Unchanged
    );
    api.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "slow"}})),
    )
    .await
    .unwrap();
    let edited = api.get("settings").await.unwrap();
    assert_eq!(
        apply::ensure(&api, &want, Some(&edited)).await.unwrap(),
        Outcome::Written
    );
    assert_eq!(
        api.get("settings").await.unwrap().data["data"]["mode"],
        "fast"
    );

    // cluster-scoped, of another group
    let role = resource("rbac.authorization.k8s.io", "v1", "ClusterRole");
    let roles: Api<DynamicObject> = Api::all_with(client.clone(), &role);
    let want = object(
        &role,
        None,
        "causeway-test",
        json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
    );
    assert_eq!(
        apply::ensure(&roles, &want, None).await.unwrap(),
        Outcome::Written
    );
    assert_eq!(
        roles.get("causeway-test").await.unwrap().data["rules"][0]["verbs"],
        json!(["get"])
    );
}

#[tokio::test]
async fn a_status_is_written_through_the_status_subresource() {
    let (_server, client) = cluster().await;
    let deploy = resource("apps", "v1", "Deployment");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &deploy);
    let want = object(
        &deploy,
        Some("default"),
        "web",
        json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
               "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
    );
    apply::ensure(&api, &want, None).await.unwrap();
    let status = json!({"observedGeneration": 1, "replicas": 1, "readyReplicas": 1});
    assert_eq!(
        apply::ensure_status(&api, "web", "apps/v1", "Deployment", &status, None)
            .await
            .unwrap(),
        Outcome::Written
    );
    let have = api.get("web").await.unwrap();
    assert_eq!(have.data["status"]["readyReplicas"], 1);
    assert_eq!(
        apply::ensure_status(
            &api,
            "web",
            "apps/v1",
            "Deployment",
            &status,
            Some(&have.data["status"])
        )
        .await
        .unwrap(),
        Outcome::Unchanged
    );
}

#[tokio::test]
async fn pruning_by_owner_labels_deletes_only_owned_objects_not_kept() {
    let (_server, client) = cluster().await;
    let cm = resource("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm);
    for (name, owned) in [("a", true), ("b", true), ("c", true), ("other", false)] {
        let mut o = object(&cm, Some("default"), name, json!({"data": {}}));
        if owned {
            o.metadata.labels =
                Some([("causeway.io/work-name".to_string(), "w1".to_string())].into());
        }
        apply::ensure(&api, &o, None).await.unwrap();
    }
    let keep = BTreeSet::from([("default".to_string(), "a".to_string())]);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &cm);
    let gone = apply::prune(
        &all,
        |ns| Api::namespaced_with(client.clone(), ns, &cm),
        "causeway.io/work-name=w1",
        &keep,
    )
    .await
    .unwrap();
    assert_eq!(gone, 2);
    let mut left: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| o.metadata.name.unwrap_or_default())
        .collect();
    left.sort();
    assert!(left.contains(&"a".to_string()) && left.contains(&"other".to_string()));
    assert!(
        !left.contains(&"b".to_string()) && !left.contains(&"c".to_string()),
        "{left:?}"
    );
}

#[tokio::test]
async fn a_finalizer_holds_deletion_until_removed() {
    let (_server, client) = cluster().await;
    let cm = resource("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm);
    apply::ensure(
        &api,
        &object(&cm, Some("default"), "held", json!({"data": {}})),
        None,
    )
    .await
    .unwrap();
    let f = "causeway.io/test";
    let o = api.get("held").await.unwrap();
    assert_eq!(
        apply::add_finalizer(&api, &o, f).await.unwrap(),
        Outcome::Written
    );
    let o = api.get("held").await.unwrap();
    assert_eq!(
        apply::add_finalizer(&api, &o, f).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(o.metadata.finalizers.as_deref(), Some(&[f.to_string()][..]));
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let o = api.get("held").await.unwrap();
    assert!(
        o.metadata.deletion_timestamp.is_some(),
        "held by the finalizer"
    );
    assert_eq!(
        apply::remove_finalizer(&api, &o, f).await.unwrap(),
        Outcome::Written
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while api.get_opt("held").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not deleted after the finalizer went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // a stale view is refused, not applied over a concurrent change
    apply::ensure(
        &api,
        &object(&cm, Some("default"), "raced", json!({"data": {}})),
        None,
    )
    .await
    .unwrap();
    let stale = api.get("raced").await.unwrap();
    let fresh = api.get("raced").await.unwrap();
    apply::add_finalizer(&api, &fresh, "causeway.io/other")
        .await
        .unwrap();
    assert!(apply::add_finalizer(&api, &stale, f).await.is_err());
}

/// `set_annotations` sets and removes only the annotations it is given, writes nothing
/// when they already are so, and never creates an object that is gone.
#[tokio::test]
async fn annotations_are_set_and_removed_without_creating() {
    let (_server, client) = cluster().await;
    let cm = resource("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm);
    let mut body = object(&cm, Some("default"), "noted", json!({"data": {}}));
    body.metadata.annotations = Some([("theirs".to_string(), "keep".to_string())].into());
    apply::ensure(&api, &body, None).await.unwrap();
    let set = std::collections::BTreeMap::from([("a".to_string(), Some("1".to_string()))]);
    let o = api.get("noted").await.unwrap();
    assert_eq!(
        apply::set_annotations(&api, &o, "test", &set)
            .await
            .unwrap(),
        Outcome::Written
    );
    let o = api.get("noted").await.unwrap();
    assert_eq!(o.metadata.annotations.as_ref().unwrap()["a"], "1");
    assert_eq!(
        apply::set_annotations(&api, &o, "test", &set)
            .await
            .unwrap(),
        Outcome::Unchanged
    );
    let unset = std::collections::BTreeMap::from([("a".to_string(), None)]);
    apply::set_annotations(&api, &o, "test", &unset)
        .await
        .unwrap();
    let o = api.get("noted").await.unwrap();
    let left = o.metadata.annotations.clone().unwrap_or_default();
    assert!(!left.contains_key("a"));
    assert_eq!(left["theirs"], "keep");
    // gone: an error, not a new object
    api.delete("noted", &DeleteParams::default()).await.unwrap();
    assert!(
        apply::set_annotations(&api, &o, "test", &set)
            .await
            .is_err()
    );
    assert!(api.get_opt("noted").await.unwrap().is_none());
}

/// With a memo that owns `data`, a key the desired state stops setting is removed,
/// though the object still "contains" the new desired state; the same desired state
/// again writes nothing. Without ownership, the extra key is taken for someone else's.
#[tokio::test]
async fn a_field_an_owning_memo_stops_setting_is_removed() {
    let (_server, client) = cluster().await;
    let cm = resource("", "v1", "ConfigMap");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm);
    let first = object(
        &cm,
        Some("default"),
        "settings",
        json!({"data": {"mode": "fast", "retries": "3"}}),
    );
    let second = object(
        &cm,
        Some("default"),
        "settings",
        json!({"data": {"mode": "fast"}}),
    );
    let mut owning = apply::Memo::<DynamicObject>::owning(&["data"]);
    assert_eq!(
        owning.ensure(&api, &first, None).await.unwrap(),
        Outcome::Written
    );
    let have = api.get("settings").await.unwrap();
    let mut plain = apply::Memo::<DynamicObject>::default();
    assert_eq!(
        plain.ensure(&api, &second, Some(&have)).await.unwrap(),
        Outcome::Unchanged
    );
    assert_eq!(
        owning.ensure(&api, &second, Some(&have)).await.unwrap(),
        Outcome::Written
    );
    let have = api.get("settings").await.unwrap();
    assert_eq!(have.data["data"], json!({"mode": "fast"}));
    assert_eq!(
        owning.ensure(&api, &second, Some(&have)).await.unwrap(),
        Outcome::Unchanged
    );
}

/// A status memo keeps one entry per kind: a Service and an Ingress of one name (kinds
/// no simulated controller writes) are both remembered, neither compared with the
/// server again once found applied.
#[tokio::test]
async fn a_status_memo_remembers_two_kinds_of_one_name() {
    let (_server, client) = cluster().await;
    let kinds = [
        (
            resource("", "v1", "Service"),
            "v1",
            "Service",
            json!({"spec": {"ports": [{"port": 80}]}}),
        ),
        (
            resource("networking.k8s.io", "v1", "Ingress"),
            "networking.k8s.io/v1",
            "Ingress",
            json!({"spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
        ),
    ];
    let status = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
    let mut memo = apply::StatusMemo::default();
    let compared = std::cell::Cell::new(0);
    for round in 0..3 {
        for (ar, api_version, kind, spec) in &kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", ar);
            if round == 0 {
                apply::ensure(
                    &api,
                    &object(ar, Some("default"), "web", spec.clone()),
                    None,
                )
                .await
                .unwrap();
            }
            let have = api.get("web").await.unwrap();
            memo.ensure(
                &api,
                "default",
                "web",
                api_version,
                kind,
                &status,
                have.metadata.resource_version.clone(),
                || {
                    compared.set(compared.get() + 1);
                    have.data.get("status").cloned()
                },
            )
            .await
            .unwrap();
        }
    }
    // round 0 writes both (remembered at the version the server answered with), rounds
    // 1 and 2 ask the server neither
    assert_eq!(compared.get(), 2);
}
