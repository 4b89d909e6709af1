//! Finalizers hold deletion; namespace deletion empties and then removes a namespace.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

fn held(name: &str) -> ConfigMap {
    let mut c = cm(name, json!({}), json!({"k": "v"}));
    c.metadata.finalizers = Some(vec!["test.causeway.io/hold".into()]);
    c
}

#[tokio::test]
async fn finalizers_hold_an_object_until_removed() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &held("c"))
        .await
        .unwrap();

    let deleted = api.delete("c", &DeleteParams::default()).await.unwrap();
    let obj = deleted
        .left()
        .expect("a delete held by finalizers returns the object");
    assert!(obj.metadata.deletion_timestamp.is_some());

    let got = api.get("c").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(
        got.metadata.finalizers.as_deref(),
        Some(&["test.causeway.io/hold".to_string()][..])
    );
    let left = api.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        own(left.into_iter().map(|c| c.metadata.name.unwrap())),
        ["c"]
    );

    // no new finalizers while deleting
    let e = api
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["test.causeway.io/hold", "another/one"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422);
    // other updates still work while it waits
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    assert!(!is_gone(&api, "c").await);

    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        is_gone(&api, "c").await,
        "gone once the last finalizer is removed"
    );
    assert!(
        own(api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| c.metadata.name.unwrap()))
        .is_empty()
    );
}

#[tokio::test]
async fn namespace_deletion_terminates_empties_and_removes_it() {
    let env = start().await;
    let client = env.client.clone();
    namespace(&client, "doomed").await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let pp = PostParams::default();
    api.create(&pp, &cm("plain", json!({}), json!({})))
        .await
        .unwrap();
    api.create(&pp, &held("held")).await.unwrap();
    assert_eq!(
        nss.get("doomed")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Active")
    );

    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let ns = nss.get("doomed").await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_some());
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));

    let e = api
        .create(&pp, &cm("late", json!({}), json!({})))
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (403, "Forbidden"));
    // kube-apiserver's NamespaceLifecycle answer: the object named, and the cause
    let raw = client
        .request_text(
            http::Request::post("/api/v1/namespaces/doomed/configmaps")
                .header("content-type", "application/json")
                .body(
                    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}})).unwrap(),
                )
                .unwrap(),
        )
        .await;
    let status: serde_json::Value = match raw {
        Err(kube::Error::Api(s)) => serde_json::to_value(&s).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        status["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "NamespaceTerminating", "message": "namespace doomed is being terminated", "field": "metadata.namespace"})
    );

    eventually("plain deleted by the namespace controller", || async {
        is_gone(&api, "plain").await.then_some(())
    })
    .await;
    let h = api.get("held").await.unwrap();
    assert!(
        h.metadata.deletion_timestamp.is_some(),
        "held is being deleted"
    );
    assert_eq!(
        nss.get("doomed")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Terminating"),
        "the namespace waits for its finalizing content"
    );
    // a second DELETE while its content is being removed: kube-apiserver's 409
    let e = nss
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (409, "Conflict"));
    assert!(
        e.to_string()
            .contains("The system is ensuring all content is removed from this namespace"),
        "{e}"
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("namespace doomed removed", || async {
        is_gone(&nss, "doomed").await.then_some(())
    })
    .await;
    // other namespaces are untouched
    assert!(!is_gone(&nss, "default").await);
}

#[tokio::test]
async fn the_default_namespaces_cannot_be_deleted() {
    let env = start().await;
    let nss: Api<Namespace> = Api::all(env.client.clone());
    for n in ["default", "kube-system"] {
        let e = nss.delete(n, &DeleteParams::default()).await.unwrap_err();
        assert_eq!(code(&e), 403, "{n}");
    }
    let ks = nss.get("kube-system").await.unwrap();
    assert_eq!(
        ks.metadata.uid.as_deref(),
        Some(env.server.kube_system_uid().as_str())
    );
}

/// kube-apiserver's delete handler answers 200 with the object whether it is gone or
/// only marked for deletion (finalizers pending); 202 only when it is not gone and the
/// request set `orphanDependents=false` (in the body, or in the query of a delete
/// without one).
#[tokio::test]
async fn a_delete_held_by_finalizers_is_200_and_202_only_for_orphan_dependents_false() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    for n in ["held", "held-body", "held-query"] {
        api.create(&pp, &held(n)).await.unwrap();
    }
    api.create(&pp, &cm("plain", json!({}), json!({})))
        .await
        .unwrap();
    let path = |n: &str| format!("/api/v1/namespaces/default/configmaps/{n}");
    let body = |v: serde_json::Value| serde_json::to_vec(&v).unwrap();
    let ct = Some("application/json");

    let r = raw(&env.client, "DELETE", &path("held"), ct, body(json!({}))).await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["kind"], "ConfigMap", "{}", r.body);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    // deleting it again, still pending: 200 again
    let r = raw(&env.client, "DELETE", &path("held"), ct, body(json!({}))).await;
    assert_eq!(r.code, 200, "{}", r.body);
    let r = raw(
        &env.client,
        "DELETE",
        &path("held"),
        ct,
        body(json!({"propagationPolicy": "Foreground"})),
    )
    .await;
    assert_eq!(
        r.code, 200,
        "a propagation policy is not orphanDependents: {}",
        r.body
    );

    let r = raw(
        &env.client,
        "DELETE",
        &path("held-body"),
        ct,
        body(json!({"orphanDependents": false})),
    )
    .await;
    assert_eq!(r.code, 202, "{}", r.body);
    assert_eq!(r.body["kind"], "ConfigMap", "{}", r.body);
    let r = raw(
        &env.client,
        "DELETE",
        &format!("{}?orphanDependents=false", path("held-query")),
        None,
        vec![],
    )
    .await;
    assert_eq!(r.code, 202, "{}", r.body);
    assert!(!is_gone(&api, "held-query").await);

    // gone at once: 200, orphanDependents=false or not
    let r = raw(
        &env.client,
        "DELETE",
        &path("plain"),
        ct,
        body(json!({"orphanDependents": false})),
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(is_gone(&api, "plain").await);
}
