//! Label selectors (=, ==, !=, in, notin, exists, !exists) and field selectors.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::helpers::*;

async fn names(api: &Api<ConfigMap>, lp: &ListParams) -> Vec<String> {
    let mut v: Vec<String> = api
        .list(lp)
        .await
        .unwrap_or_else(|e| panic!("list {lp:?}: {e}"))
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn label_selectors_select_what_kube_apiserver_selects() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    for (n, labels) in [
        ("web-prod", json!({"app": "web", "env": "prod"})),
        ("web-dev", json!({"app": "web", "env": "dev"})),
        (
            "db-prod",
            json!({"app": "db", "env": "prod", "tier": "data"}),
        ),
        ("bare", json!({})),
    ] {
        api.create(&pp, &cm(n, labels, json!({}))).await.unwrap();
    }
    let cases: &[(&str, &[&str])] = &[
        ("app=web", &["web-dev", "web-prod"]),
        ("app==web", &["web-dev", "web-prod"]),
        ("app!=web", &["bare", "db-prod"]),
        ("env in (prod,staging)", &["db-prod", "web-prod"]),
        ("env notin (prod)", &["bare", "web-dev"]),
        ("tier", &["db-prod"]),
        ("!tier", &["bare", "web-dev", "web-prod"]),
        ("app=web,env=prod", &["web-prod"]),
        ("app in (web,db),!tier", &["web-dev", "web-prod"]),
        ("app=nothing", &[]),
    ];
    for (sel, want) in cases {
        assert_eq!(
            names(&api, &ListParams::default().labels(sel)).await,
            *want,
            "labelSelector {sel}"
        );
    }
    let e = api
        .list(&ListParams::default().labels("a b=c"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400, "a malformed selector is a bad request");
}

#[tokio::test]
async fn field_selectors_on_name_and_namespace() {
    let env = start().await;
    let client = env.client.clone();
    namespace(&client, "other").await;
    let pp = PostParams::default();
    for ns in ["default", "other"] {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for n in ["a", "b"] {
            api.create(&pp, &cm(n, json!({}), json!({}))).await.unwrap();
        }
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    let keys = |lp: ListParams| {
        let all = all.clone();
        async move {
            let mut v: Vec<String> = all
                .list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|c| {
                    format!(
                        "{}/{}",
                        c.metadata.namespace.unwrap(),
                        c.metadata.name.unwrap()
                    )
                })
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(
        keys(ListParams::default().fields("metadata.name=a")).await,
        vec!["default/a", "other/a"]
    );
    assert_eq!(
        keys(ListParams::default().fields("metadata.namespace=other")).await,
        vec!["other/a", "other/b"]
    );
    assert_eq!(
        keys(ListParams::default().fields("metadata.namespace!=other,metadata.name!=a")).await,
        vec!["default/b"]
    );
    assert_eq!(
        keys(
            ListParams::default()
                .fields("metadata.name=b")
                .labels("missing")
        )
        .await,
        Vec::<String>::new()
    );
    let ns_api: Api<ConfigMap> = Api::namespaced(client.clone(), "other");
    assert_eq!(
        names(&ns_api, &ListParams::default().fields("metadata.name==b")).await,
        vec!["b"]
    );
}

#[tokio::test]
async fn watches_apply_selectors_and_report_objects_leaving_them() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let rv = env.server.resource_version().to_string();
    let mut s = api
        .watch(
            &WatchParams::default()
                .labels("app=web")
                .disable_bookmarks()
                .timeout(10),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let pp = PostParams::default();
    api.create(&pp, &cm("other", json!({"app": "db"}), json!({})))
        .await
        .unwrap();
    api.create(&pp, &cm("web", json!({"app": "web"}), json!({})))
        .await
        .unwrap();
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "api"}}})),
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let ev = within("watch events", s.next()).await.unwrap().unwrap();
        seen.push(match ev {
            WatchEvent::Added(c) => format!("ADDED {}", c.metadata.name.unwrap()),
            WatchEvent::Modified(c) => format!("MODIFIED {}", c.metadata.name.unwrap()),
            WatchEvent::Deleted(c) => format!("DELETED {}", c.metadata.name.unwrap()),
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(
        seen,
        vec!["ADDED web", "DELETED web"],
        "leaving the selector is a DELETED event"
    );
}
