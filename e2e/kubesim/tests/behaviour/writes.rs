//! Dry-run patches (every patch type and server-side apply) store nothing, bump no
//! resourceVersion and send no watch event, yet answer with the object or the error a
//! real write would get; and `Server::write_requests` counts the writes that are not
//! dry runs.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use crate::helpers::*;

fn applied(name: &str, data: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}),
    )
}

#[tokio::test]
async fn dry_run_patches_and_applies_store_nothing_and_send_no_event() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let cur = api
        .patch(
            "c",
            &PatchParams::apply("causeway"),
            &applied("c", json!({"a": "1"})),
        )
        .await
        .unwrap();
    // the cluster's own start-up writes (other namespaces' ServiceAccounts and root CA
    // ConfigMaps) done, so the counter moves only for the test's writes
    let rv = env.quiet().await;
    let dry = PatchParams::default().dry_run();
    let patches = [
        ("merge", Patch::Merge(json!({"data": {"a": "2"}}))),
        ("strategic", Patch::Strategic(json!({"data": {"a": "2"}}))),
        (
            "json",
            Patch::Json(
                serde_json::from_value(json!([{"op": "replace", "path": "/data/a", "value": "2"}]))
                    .unwrap(),
            ),
        ),
        ("apply", applied("c", json!({"a": "2"}))),
    ];
    for (what, p) in patches {
        let pp = if what == "apply" {
            PatchParams::apply("causeway").dry_run()
        } else {
            dry.clone()
        };
        let out = api.patch("c", &pp, &p).await.unwrap();
        assert_eq!(
            out.data.unwrap()["a"],
            "2",
            "{what}: answers with the patched object"
        );
        assert_eq!(api.get("c").await.unwrap(), cur, "{what}: nothing stored");
        assert_eq!(
            env.server.resource_version(),
            rv,
            "{what}: no resourceVersion bump"
        );
    }
    // an apply that would create stores nothing either
    let out = api
        .patch(
            "new",
            &PatchParams::apply("causeway").dry_run(),
            &applied("new", json!({"x": "1"})),
        )
        .await
        .unwrap();
    assert_eq!(out.data.unwrap()["x"], "1");
    assert!(
        is_gone(&api, "new").await,
        "a dry-run apply creates nothing"
    );
    // errors are still returned
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"immutable": true})),
    )
    .await
    .unwrap();
    let e = api
        .patch(
            "c",
            &PatchParams::apply("causeway").dry_run(),
            &applied("c", json!({"a": "3"})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e)[0].1,
        "data",
        "immutability is checked on a dry run"
    );

    // the only events after `rv` are the real write's
    let events = events_since(&api, &rv.to_string(), "watch from before the dry runs").await;
    let modified: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Modified(c) => {
                format!("{}:{:?}", c.metadata.name.as_deref().unwrap(), c.immutable)
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(modified, ["c:Some(true)"]);
}

#[tokio::test]
async fn write_requests_count_writes_that_are_not_dry_runs() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let start = env.server.write_requests();
    let count = || env.server.write_requests() - start;

    // reads are not writes
    api.list(&ListParams::default()).await.unwrap();
    let _ = api.get("missing").await;
    let mut w = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    while within("a short watch", w.next()).await.is_some() {}
    assert_eq!(count(), 0);

    // dry runs are not writes
    let dry_post = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry_post, &cm("c", json!({}), json!({})))
        .await
        .unwrap();
    api.patch(
        "c",
        &PatchParams::apply("causeway").dry_run(),
        &applied("c", json!({})),
    )
    .await
    .unwrap();
    let dry_delete = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("c", &dry_delete).await.unwrap_err();
    assert_eq!(count(), 0);

    // create, apply, update, patch, delete, deletecollection are; refused ones too
    api.create(&PostParams::default(), &cm("c", json!({}), json!({})))
        .await
        .unwrap();
    api.patch(
        "c",
        &PatchParams::apply("causeway"),
        &applied("c", json!({"a": "1"})),
    )
    .await
    .unwrap();
    let cur = api.get("c").await.unwrap();
    api.replace("c", &PostParams::default(), &cur)
        .await
        .unwrap();
    api.patch("missing", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    api.delete("c", &DeleteParams::default()).await.unwrap();
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    assert_eq!(count(), 6);

    let metrics = raw(&env.client, "GET", "/metrics", None, vec![]).await;
    let text = metrics.body.as_str().expect("metrics are text");
    assert!(
        text.contains(&format!(
            "kubesim_write_requests_total {}",
            env.server.write_requests()
        )),
        "{text}"
    );
}

#[tokio::test]
async fn a_dry_run_service_update_allocates_nothing() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let svc = |name: &str, spec: serde_json::Value| -> Service {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    api.create(
        &PostParams::default(),
        &svc("a", json!({"ports": [{"port": 80}]})),
    )
    .await
    .unwrap();
    let node_port =
        json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
    let out = api
        .patch(
            "a",
            &PatchParams::default().dry_run(),
            &Patch::Merge(node_port),
        )
        .await
        .unwrap();
    assert_eq!(out.spec.unwrap().ports.unwrap()[0].node_port, Some(30080));
    // the dry run held nothing: another Service can take the port
    api.create(
        &PostParams::default(),
        &svc(
            "b",
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
        ),
    )
    .await
    .expect("nodePort 30080 is free after a dry run");
}

/// `dryRun` takes only `All` (kube-apiserver's `ValidateDryRun` of the write's options):
/// any other value is a 422 naming the options kind, and nothing is written.
#[tokio::test]
async fn dry_run_values_other_than_all_are_refused() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let cur = api
        .create(
            &PostParams::default(),
            &cm("c", json!({}), json!({"a": "1"})),
        )
        .await
        .unwrap();
    let base = "/api/v1/namespaces/default/configmaps";
    let body = |name: &str, a: &str| {
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"a": a}}))
        .unwrap()
    };
    let cases = [
        (
            "POST",
            format!("{base}?dryRun=true"),
            "application/json",
            body("new", "1"),
            "CreateOptions",
            "\"true\"",
        ),
        (
            "PUT",
            format!("{base}/c?dryRun=server"),
            "application/json",
            body("c", "2"),
            "UpdateOptions",
            "\"server\"",
        ),
        (
            "PATCH",
            format!("{base}/c?dryRun=All&dryRun=yes"),
            "application/merge-patch+json",
            br#"{"data": {"a": "2"}}"#.to_vec(),
            "PatchOptions",
            "\"All\", \"yes\"",
        ),
        (
            "DELETE",
            format!("{base}/c?dryRun=1"),
            "application/json",
            vec![],
            "DeleteOptions",
            "\"1\"",
        ),
        (
            "DELETE",
            format!("{base}/c"),
            "application/json",
            br#"{"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["Some"]}"#.to_vec(),
            "DeleteOptions",
            "\"Some\"",
        ),
    ];
    for (method, path, ct, body, kind, values) in cases {
        let r = raw(&env.client, method, &path, Some(ct), body).await;
        assert_eq!(
            (r.code, r.body["reason"].as_str()),
            (422, Some("Invalid")),
            "{method} {path}: {}",
            r.body
        );
        assert_eq!(
            r.body["message"],
            format!(
                "{kind}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{{{values}}}: supported values: \"All\""
            ),
            "{method} {path}"
        );
        assert_eq!(
            r.body["details"],
            json!({"group": "meta.k8s.io", "kind": kind, "causes": [{
                "reason": "FieldValueNotSupported",
                "message": format!("Unsupported value: []string{{{values}}}: supported values: \"All\""),
                "field": "dryRun",
            }]}),
            "{method} {path}"
        );
    }
    assert_eq!(api.get("c").await.unwrap(), cur, "nothing written");
    assert!(is_gone(&api, "new").await, "nothing created");
    // `All` is still a dry run
    let r = raw(
        &env.client,
        "PATCH",
        &format!("{base}/c?dryRun=All"),
        Some("application/merge-patch+json"),
        br#"{"data": {"a": "2"}}"#.to_vec(),
    )
    .await;
    assert_eq!((r.code, &r.body["data"]["a"]), (200, &json!("2")));
    assert_eq!(api.get("c").await.unwrap(), cur);
}
