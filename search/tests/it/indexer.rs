//! The indexer against kubesim members, on SQLite and on PostgreSQL: objects of several
//! kinds in two members reach the store and follow updates and deletes; managedFields
//! and ConfigMap contents are not stored; members that leave are purged, members that
//! are only not Ready are kept; a new client relists without writes; a type a member
//! does not serve is retried until it is, and its objects go once it is served no
//! more; the default types let owner search walk
//! Pod → ReplicaSet → Deployment; where the store is in each member's type (the
//! positions cross-cluster watches start from, K.73) follows what is written and the
//! member's bookmarks. Restarts (K.71) and storage outages (K.72) are in
//! [`consistency`].

mod consistency;
mod support;

use std::collections::BTreeMap;

use causeway_search::indexer::{self, Fleet};
use causeway_search::query::Query;
use causeway_search::store::{Scope, Store};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;
use tokio::sync::watch;

use support::{
    Backend, Indexer, cluster, cluster_with, configmaps, database, eventually, fleet, gvr, specs,
    stored,
};

both!(objects_of_two_members_follow_their_changes);
async fn objects_of_two_members_follow_their_changes(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let store = Store::open(&spec).await.unwrap();
    let (a, b) = (cluster("a").await, cluster("b").await);
    for c in [&a, &b] {
        c.apply_configmap(
            "settings",
            json!({"app": "web"}),
            json!({"password": "hunter2"}),
        )
        .await;
    }
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    });
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        a.client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    deployments
        .patch(
            "web",
            &PatchParams::apply("test"),
            &Patch::Apply(&deployment),
        )
        .await
        .unwrap();
    let (_tx, rx) = watch::channel(fleet(&[("a", &a), ("b", &b)], &["a", "b"]));
    let resources = specs(&[
        "apps/v1/deployments",
        "v1/configmaps:metadata",
        "v1/namespaces",
    ]);
    let indexer = Indexer::start(&store, resources, rx);
    eventually(
        "both members' objects of the three types are stored",
        || async { indexer.metric("search_indexer_synced") == 6.0 },
    )
    .await;

    let cms = stored(&store, &configmaps(), None).await;
    for c in ["a", "b"] {
        let cm = &cms[&format!("{c}/default/settings")];
        assert_eq!(cm["metadata"]["labels"]["app"], "web", "{cm}");
        assert_eq!(cm["kind"], "ConfigMap", "{cm}");
        assert!(cm.get("data").is_none(), "names only: {cm}");
        assert!(cm["metadata"].get("managedFields").is_none(), "{cm}");
    }
    let live = a.configmaps().get("settings").await.unwrap();
    assert!(
        live.metadata.managed_fields.is_some(),
        "the member has managedFields"
    );
    let deps = stored(&store, &gvr("apps", "v1", "deployments"), None).await;
    let web = &deps["a/default/web"];
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(web["apiVersion"], "apps/v1");
    assert!(web["metadata"].get("managedFields").is_none(), "{web}");
    assert!(!deps.contains_key("b/default/web"));
    let nss = stored(&store, &gvr("", "v1", "namespaces"), Some("b")).await;
    assert!(nss.contains_key("b//kube-system"), "{:?}", nss.keys());
    let types = store.types().await.unwrap();
    let kinds: BTreeMap<&str, (&str, bool)> = types
        .iter()
        .map(|t| (t.gvr.resource.as_str(), (t.kind.as_str(), t.namespaced)))
        .collect();
    assert_eq!(kinds["deployments"], ("Deployment", true));
    assert_eq!(kinds["configmaps"], ("ConfigMap", true));
    assert_eq!(kinds["namespaces"], ("Namespace", false));

    // updates and deletes follow
    let mut changed = deployment.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    deployments
        .patch("web", &PatchParams::apply("test"), &Patch::Apply(&changed))
        .await
        .unwrap();
    b.delete_configmap("settings").await;
    a.apply_configmap("added", json!({"app": "api"}), json!({}))
        .await;
    eventually(
        "the update, the delete and the new object are stored",
        || async {
            let deps = stored(&store, &gvr("apps", "v1", "deployments"), Some("a")).await;
            let cms = stored(&store, &configmaps(), None).await;
            deps["a/default/web"]["spec"]["template"]["spec"]["containers"][0]["image"]
                == "nginx:1.28"
                && !cms.contains_key("b/default/settings")
                && cms.contains_key("a/default/added")
                && cms.contains_key("a/default/settings")
                && indexer.metric("search_indexer_objects_deleted_total") == 1.0
        },
    )
    .await;
    assert_eq!(indexer.metric("search_indexer_synchros"), 6.0);
    indexer.stop().await;
}

both!(members_that_leave_are_purged_and_not_ready_ones_kept);
async fn members_that_leave_are_purged_and_not_ready_ones_kept(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let (a, b) = (cluster("a").await, cluster("b").await);
    for c in [&a, &b] {
        c.apply_configmap("settings", json!({}), json!({})).await;
    }
    b.apply_configmap("stays", json!({}), json!({})).await;
    let (tx, rx) = watch::channel(fleet(&[("a", &a), ("b", &b)], &["a", "b"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx.clone());
    eventually("both members are stored", || async {
        indexer.metric("search_indexer_synced") == 2.0
    })
    .await;

    // b is registered but not Ready: not watched, its objects kept as they were
    tx.send_replace(fleet(&[("a", &a)], &["a", "b"]));
    eventually("b's watch stops", || async {
        indexer.metric("search_indexer_synchros") == 1.0
    })
    .await;
    b.delete_configmap("settings").await;
    a.apply_configmap("later", json!({}), json!({})).await;
    eventually("a is still indexed", || async {
        stored(&store, &configmaps(), Some("a"))
            .await
            .contains_key("a/default/later")
    })
    .await;
    let kept = stored(&store, &configmaps(), Some("b")).await;
    assert!(kept.contains_key("b/default/settings"), "{:?}", kept.keys());

    // Ready again: relisted, the delete it missed is applied
    tx.send_replace(fleet(&[("a", &a), ("b", &b)], &["a", "b"]));
    eventually("b's delete is caught up", || async {
        !stored(&store, &configmaps(), Some("b"))
            .await
            .contains_key("b/default/settings")
    })
    .await;

    assert!(
        stored(&store, &configmaps(), Some("b"))
            .await
            .contains_key("b/default/stays")
    );

    // b leaves the fleet: purged
    tx.send_replace(fleet(&[("a", &a)], &["a"]));
    eventually("b is purged", || async {
        store.clusters().await.unwrap() == ["a"]
            && indexer.metric("search_indexer_objects_purged_total") >= 1.0
    })
    .await;
    assert_eq!(indexer.metric("search_indexer_synchros"), 1.0);
    indexer.stop().await;

    // a cluster the store holds that is not registered at start is purged too
    let (_tx, rx) = watch::channel(Fleet::default());
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx);
    eventually("a, no longer registered, is purged at start", || async {
        store.clusters().await.unwrap().is_empty()
    })
    .await;
    indexer.stop().await;
}

both!(a_member_that_gets_a_new_client_is_relisted_without_writes);
async fn a_member_that_gets_a_new_client_is_relisted_without_writes(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    a.apply_configmap("settings", json!({}), json!({})).await;
    let (tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx);
    eventually("a is stored", || async {
        indexer.metric("search_indexer_synced") == 1.0
    })
    .await;
    let writes = store.writes();
    let unchanged = indexer.metric("search_indexer_objects_unchanged_total");
    let mut next = fleet(&[("a", &a)], &["a"]);
    next.ready.get_mut("a").unwrap().fingerprint = "rotated".into();
    tx.send_replace(next);
    eventually("the new watch listed every object again", || async {
        indexer.metric("search_indexer_synced") == 1.0
            && indexer.metric("search_indexer_objects_unchanged_total") > unchanged
    })
    .await;
    assert_eq!(
        store.writes(),
        writes,
        "a relist of unchanged objects writes nothing"
    );
    indexer.stop().await;
}

/// Polls `check` until it returns true, for longer than [`eventually`]: a type is
/// forgotten a minute after its member first says it does not serve it.
async fn slowly<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    causeway_search::store::testing::eventually(what, std::time::Duration::from_secs(150), check)
        .await
}

both!(a_type_the_member_does_not_serve_is_retried_until_it_does);
async fn a_type_the_member_does_not_serve_is_retried_until_it_does(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(
        &store,
        specs(&["example.com/v1/widgets", "v1/namespaces"]),
        rx,
    );
    let unserved = r#"search_indexer_unserved{cluster="a",resource="example.com/v1/widgets"}"#;
    eventually("the unserved type is reported", || async {
        indexer.metric(unserved) == 1.0 && indexer.metric("search_indexer_synced") == 1.0
    })
    .await;

    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(a.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"));
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"},
        "spec": {"size": 3},
    }))
    .unwrap();
    let widgets: Api<DynamicObject> = Api::namespaced_with(a.client.clone(), "default", &ar);
    eventually("the widget can be created", || async {
        widgets
            .create(&PostParams::default(), &widget)
            .await
            .is_ok()
    })
    .await;
    let wgvr = gvr("example.com", "v1", "widgets");
    eventually("the widget is indexed once the type is served", || async {
        stored(&store, &wgvr, None)
            .await
            .contains_key("a/default/w1")
    })
    .await;
    assert_eq!(indexer.metric(unserved), 0.0);
    let types = store.types().await.unwrap();
    assert!(
        types
            .iter()
            .any(|t| t.gvr == wgvr && t.kind == "Widget" && t.namespaced)
    );
    // the CRD deleted: its objects sent no DELETE the indexer could see, yet they go
    // from the store once the member no longer serves the type
    Api::<CustomResourceDefinition>::all(a.client.clone())
        .delete("widgets.example.com", &Default::default())
        .await
        .unwrap();
    // (once the member has said so for a minute: a restarting API server says so of
    // its CRD groups for a while)
    slowly("the widget gone with its type", || async {
        stored(&store, &wgvr, None).await.is_empty() && indexer.metric(unserved) == 1.0
    })
    .await;
    indexer.stop().await;

    // the same while no indexer runs: no event is seen, and the next indexer finds the
    // type not served and removes what the store holds of it
    let crds = Api::<CustomResourceDefinition>::all(a.client.clone());
    eventually("the CRD created again", || async {
        crds.create(&PostParams::default(), &crd).await.is_ok()
    })
    .await;
    eventually("the widget created again", || async {
        widgets
            .create(&PostParams::default(), &widget)
            .await
            .is_ok()
    })
    .await;
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let indexer = Indexer::start(&store, specs(&["example.com/v1/widgets"]), rx);
    eventually("the widget indexed again", || async {
        stored(&store, &wgvr, None)
            .await
            .contains_key("a/default/w1")
    })
    .await;
    indexer.stop().await;
    crds.delete("widgets.example.com", &Default::default())
        .await
        .unwrap();
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let indexer = Indexer::start(&store, specs(&["example.com/v1/widgets"]), rx);
    slowly(
        "the widget gone once the restarted indexer finds the type gone",
        || async { stored(&store, &wgvr, None).await.is_empty() },
    )
    .await;
    indexer.stop().await;
}

both!(the_default_types_let_owner_search_walk_from_pods_to_deployments);
async fn the_default_types_let_owner_search_walk_from_pods_to_deployments(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let mut cfg = kubesim::Config::new("a");
    cfg.simulate_workloads = true;
    let a = cluster_with(cfg).await;
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        a.client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    for (name, replicas) in [("web", 2), ("api", 1)] {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": name, "image": "nginx"}]},
                },
            },
        });
        deployments
            .patch(name, &PatchParams::apply("test"), &Patch::Apply(&d))
            .await
            .unwrap();
    }
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&[]), rx);
    let params: Vec<(String, String)> = [
        ("clusters", "a"),
        ("ownerName", "web"),
        ("ownerGR", "deployments.apps"),
        ("ownerSeniority", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let q = Query::parse(&params, None).unwrap();
    let pods = gvr("", "v1", "pods");
    let apps = || async {
        let page = store.search(&pods, &q, &Scope::default()).await.unwrap();
        let apps: Vec<String> = page
            .items
            .iter()
            .map(|p| {
                p["metadata"]["labels"]["app"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        apps
    };
    eventually(
        "web's two Pods are found through their ReplicaSet",
        || async { apps().await.len() == 2 },
    )
    .await;
    assert_eq!(apps().await, ["web", "web"]);
    eventually("every default type is listed", || async {
        indexer.metric("search_indexer_synced") == indexer::default_resources().len() as f64
    })
    .await;
    indexer.stop().await;
}

both!(positions_follow_what_is_stored_and_bookmarks_keep_a_quiet_type_current);
async fn positions_follow_what_is_stored_and_bookmarks_keep_a_quiet_type_current(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let store = Store::open(&spec).await.unwrap();
    let mut cfg = kubesim::Config::new("a");
    cfg.bookmark_interval = std::time::Duration::from_millis(300);
    let a = cluster_with(cfg).await;
    a.apply_configmap("one", json!({}), json!({})).await;
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let ix = Indexer::start(&store, specs(&["v1/configmaps"]), rx);
    let position = || -> u64 {
        ix.positions
            .cursor(&configmaps())
            .0
            .get("a")
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0)
    };
    let rv_of = |m: &BTreeMap<(String, String), String>, name: &str| -> u64 {
        m[&("default".to_string(), name.to_string())]
            .parse()
            .unwrap()
    };
    // after the first list: at least the list's version, and the object is stored
    let listed = a.versions(&configmaps(), "ConfigMap").await;
    eventually("a position after the first list", || async {
        position() >= rv_of(&listed, "one")
    })
    .await;
    assert!(
        stored(&store, &configmaps(), Some("a"))
            .await
            .contains_key("a/default/one")
    );
    // a change: the position passes it only once it is stored
    a.apply_configmap("two", json!({}), json!({})).await;
    let two = rv_of(&a.versions(&configmaps(), "ConfigMap").await, "two");
    eventually("the position past two", || async { position() >= two }).await;
    assert!(
        stored(&store, &configmaps(), Some("a"))
            .await
            .contains_key("a/default/two"),
        "published before it was written"
    );
    // nothing of the type changes while the member moves on (another type): the
    // bookmarks move the position, so a watch from it stays in the member's window
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(a.client.clone());
    let created = ns
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "elsewhere"}})).unwrap(),
        )
        .await
        .unwrap();
    let elsewhere: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert!(elsewhere > two);
    eventually(
        "the quiet type's position past the member's later change",
        || async { position() >= elsewhere },
    )
    .await;
    // a stopped synchro withdraws its type: no watch goes to it
    let positions = ix.positions.clone();
    ix.stop().await;
    assert!(positions.of(&configmaps()).is_empty());
}

both!(lists_a_member_refuses_do_not_hold_back_the_others);
/// A member whose credentials may not list the indexed types (403 on every list) does
/// not keep the other members from being indexed: a failing list gives its permit back
/// (one of the indexer's few concurrent list comparisons) instead of retrying in place
/// while holding it. Member `a` refuses all four types; `b`, added after, is indexed.
async fn lists_a_member_refuses_do_not_hold_back_the_others(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    a.server.add_token(
        "nobody-token",
        kubesim::User {
            name: "nobody".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let kc = kubesim::kubeconfig::single("a", &a.server.url(), a.server.ca_pem(), "nobody-token");
    let cfg = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&kc).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let refused = support::Cluster {
        server: a.server,
        client: kube::Client::try_from(cfg).unwrap(),
    };
    let b = cluster("b").await;
    b.apply_configmap("in-b", json!({}), json!({})).await;
    let (tx, rx) = watch::channel(fleet(&[("a", &refused)], &["a", "b"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(
        &store,
        specs(&[
            "v1/configmaps",
            "v1/services",
            "v1/secrets:metadata",
            "v1/namespaces",
        ]),
        rx,
    );
    // a's four lists are refused (and would hold all four permits)
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    tx.send(fleet(&[("a", &refused), ("b", &b)], &["a", "b"]))
        .unwrap();
    eventually(
        "b's ConfigMap indexed while a's lists keep failing",
        || async {
            stored(&store, &configmaps(), Some("b"))
                .await
                .contains_key("b/default/in-b")
        },
    )
    .await;
    indexer.stop().await;
}
