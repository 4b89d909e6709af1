//! Label selectors (=, ==, !=, in, notin, exists, !exists) and field selectors.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::helpers::*;

/// The names a list returns, sorted, without the namespace's kube-root-ca.crt.
async fn names(api: &Api<ConfigMap>, lp: &ListParams) -> Vec<String> {
    let mut v: Vec<String> = own(api
        .list(lp)
        .await
        .unwrap_or_else(|e| panic!("list {lp:?}: {e}"))
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap()));
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
            let mut v: Vec<String> = own(all.list(&lp).await.unwrap().items.into_iter().map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.unwrap(),
                    c.metadata.name.unwrap()
                )
            }));
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

/// Each type takes only its own field labels, as kube-apiserver's field label conversions
/// say; any other label is a 400 on list, watch and deletecollection, with
/// kube-apiserver's message. A label the object lacks reads as kube-apiserver formats
/// the zero value (`false`, `0`, the default type).
#[tokio::test]
async fn field_selectors_take_only_the_types_own_labels() {
    let env = start().await;
    let c = env.client.clone();
    let pp = PostParams::default();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pod = |name: &str, spec: serde_json::Value| -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "nginx"}]);
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    pods.create(&pp, &pod("on-n1", json!({"nodeName": "n1"})))
        .await
        .unwrap();
    pods.create(&pp, &pod("host", json!({"hostNetwork": true})))
        .await
        .unwrap();
    let pod_names = |sel: &'static str| {
        let pods = pods.clone();
        async move {
            let mut v: Vec<String> = pods
                .list(&ListParams::default().fields(sel))
                .await
                .unwrap_or_else(|e| panic!("fieldSelector {sel}: {e}"))
                .items
                .into_iter()
                .map(|p| p.metadata.name.unwrap())
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(pod_names("spec.nodeName=n1").await, ["on-n1"]);
    // old clients' name for spec.nodeName
    assert_eq!(pod_names("spec.host=n1").await, ["on-n1"]);
    // unset reads as false, and as what kube-apiserver defaults
    assert_eq!(pod_names("spec.hostNetwork=false").await, ["on-n1"]);
    assert_eq!(
        pod_names("spec.restartPolicy=Always,spec.schedulerName=default-scheduler,spec.serviceAccountName=default").await,
        ["host", "on-n1"]
    );
    assert_eq!(pod_names("spec.hostNetwork=true").await, ["host"]);
    // accepted, and always empty
    assert_eq!(pod_names("status.podIPs=").await, ["host", "on-n1"]);
    assert!(pod_names("status.podIPs=10.0.0.1").await.is_empty());

    let e = pods
        .list(&ListParams::default().fields("spec.containers=c"))
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e)), (400, "BadRequest".to_string()));
    assert_eq!(message(&e), "field label not supported: spec.containers");
    let e = pods
        .watch(&WatchParams::default().fields("status.hostIP=1.2.3.4"), "0")
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(message(&e), "field label not supported: status.hostIP");
    let e = pods
        .delete_collection(
            &Default::default(),
            &ListParams::default().fields("spec.image=nginx"),
        )
        .await
        .unwrap_err();
    assert_eq!(message(&e), "field label not supported: spec.image");
    assert_eq!(pod_names("").await.len(), 2, "nothing was deleted");

    // a type with no labels of its own: name and namespace only
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let e = cms
        .list(&ListParams::default().fields("data.x=1"))
        .await
        .unwrap_err();
    assert_eq!(
        message(&e),
        r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#
    );
    // and custom resources alike
    let widgets = install_widgets(&c, "default").await;
    let e = widgets
        .list(&ListParams::default().fields("spec.color=red"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400);
    assert_eq!(message(&e), "field label not supported: spec.color");

    // Nodes: spec.unschedulable (unset reads as false); no metadata.namespace
    let nodes: Api<Node> = Api::all(c.clone());
    for (name, spec) in [
        ("cordoned", json!({"unschedulable": true})),
        ("open", json!({})),
    ] {
        let n: Node =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        nodes.create(&pp, &n).await.unwrap();
    }
    let open: Vec<String> = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert!(
        open.contains(&"open".to_string()) && !open.contains(&"cordoned".to_string()),
        "{open:?}"
    );
    let e = nodes
        .list(&ListParams::default().fields("metadata.namespace="))
        .await
        .unwrap_err();
    assert_eq!(message(&e), "field label not supported: metadata.namespace");

    // Secrets: type, Opaque when created without one
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "plain"}})).unwrap();
    secrets.create(&pp, &s).await.unwrap();
    let opaque = secrets
        .list(&ListParams::default().fields("type=Opaque,metadata.name=plain"))
        .await
        .unwrap();
    assert_eq!(opaque.items.len(), 1);
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
