//! The indexer against kubesim members, on SQLite and on PostgreSQL: objects of several
//! kinds in two members reach the store and follow updates and deletes; managedFields
//! and ConfigMap contents are not stored; a restart writes only what changed (K.71);
//! a storage outage pauses the watches and the relist after it loses no delete (K.72);
//! members that leave are purged, members that are only not Ready are kept; a type a
//! member does not serve is retried until it is.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use causeway_search::indexer::{self, Fleet, IndexerMetrics, Member, ResourceSpec};
use causeway_search::query::Query;
use causeway_search::store::{Gvr, Scope, Store, testing};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any expected state may take to appear.
const DEADLINE: Duration = Duration::from_secs(40);

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Runs a scenario on both stores.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    };
}

/// A fresh database: its store spec (and the temp dir holding an SQLite file).
async fn database(backend: Backend) -> (String, Option<tempfile::TempDir>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("sqlite:{}", dir.path().join("search.db").display());
            (spec, Some(dir))
        }
        Backend::Postgres => (testing::postgres_db().await, None),
    }
}

/// A kubesim member and an admin client of it.
struct Cluster {
    server: kubesim::Server,
    client: kube::Client,
}

async fn cluster(name: &str) -> Cluster {
    cluster_with(kubesim::Config::new(name)).await
}

async fn cluster_with(cfg: kubesim::Config) -> Cluster {
    let server = kubesim::Server::start(cfg).await.expect("kubesim starts");
    let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    Cluster { server, client }
}

impl Cluster {
    fn member(&self) -> Member {
        Member {
            client: self.client.clone(),
            fingerprint: self.server.url(),
        }
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Server-side applies a ConfigMap in `default` (so it has managedFields).
    async fn apply_configmap(&self, name: &str, labels: Value, data: Value) {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": data,
        });
        self.configmaps()
            .patch(name, &PatchParams::apply("test"), &Patch::Apply(cm))
            .await
            .unwrap();
    }

    async fn delete_configmap(&self, name: &str) {
        self.configmaps()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// `(namespace, name) → resourceVersion` of every object of a type in the member.
    async fn versions(&self, gvr: &Gvr, kind: &str) -> BTreeMap<(String, String), String> {
        let gvk = GroupVersionKind::gvk(&gvr.group, &gvr.version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &gvr.resource);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let list = api.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .map(|o| {
                let m = o.metadata;
                (
                    (m.namespace.unwrap_or_default(), m.name.unwrap_or_default()),
                    m.resource_version.unwrap_or_default(),
                )
            })
            .collect()
    }
}

fn gvr(group: &str, version: &str, resource: &str) -> Gvr {
    Gvr {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
    }
}

fn configmaps() -> Gvr {
    gvr("", "v1", "configmaps")
}

fn specs(values: &[&str]) -> Vec<ResourceSpec> {
    indexer::parse_all(values).unwrap()
}

/// A fleet: `ready` members, and the names of the registered ones.
fn fleet(ready: &[(&str, &Cluster)], registered: &[&str]) -> Fleet {
    Fleet {
        ready: ready
            .iter()
            .map(|(n, c)| (n.to_string(), c.member()))
            .collect(),
        registered: registered.iter().map(|s| s.to_string()).collect(),
    }
}

/// A running indexer and its metrics.
struct Indexer {
    registry: Registry,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Indexer {
    fn start(
        store: &Store,
        resources: Vec<ResourceSpec>,
        fleet: watch::Receiver<Fleet>,
    ) -> Indexer {
        let mut registry = Registry::default();
        let metrics = IndexerMetrics::new(&mut registry);
        let stop = CancellationToken::new();
        let task = tokio::spawn(indexer::run(
            store.clone(),
            resources,
            fleet,
            metrics,
            stop.clone(),
        ));
        Indexer {
            registry,
            stop,
            task,
        }
    }

    /// The value of a series as the registry encodes it, e.g. `search_indexer_synced`
    /// or `search_indexer_unserved{cluster="a",resource="v1/pods"}` (0 when absent).
    fn metric(&self, series: &str) -> f64 {
        self.text()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Every metric, as text.
    fn text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the indexer stops")
            .unwrap();
    }
}

/// Polls `check` until it returns true (every 20 ms, at most [`DEADLINE`]).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while start.elapsed() < DEADLINE {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not within {DEADLINE:?}: {what}");
}

/// Every stored object of a type (in `cluster`, if given), through the search API of
/// the store, by `(cluster, namespace, name)`.
async fn stored(store: &Store, gvr: &Gvr, cluster: Option<&str>) -> BTreeMap<String, Value> {
    let mut params = Vec::new();
    if let Some(c) = cluster {
        params.push(("clusters".to_string(), c.to_string()));
    }
    let q = Query::parse(&params, None).unwrap();
    let page = store.search(gvr, &q, &Scope::default()).await.unwrap();
    page.items
        .into_iter()
        .map(|o| {
            let m = &o["metadata"];
            let c = m["annotations"][causeway_search::CLUSTER_ANNOTATION]
                .as_str()
                .unwrap_or_default();
            let ns = m["namespace"].as_str().unwrap_or_default();
            let name = m["name"].as_str().unwrap_or_default();
            (format!("{c}/{ns}/{name}"), o.clone())
        })
        .collect()
}

/// Whether the store holds exactly the member's objects of a type, at their versions.
async fn in_sync(store: &Store, member: &Cluster, name: &str, gvr: &Gvr, kind: &str) -> bool {
    match store.versions(name, gvr).await {
        Ok(v) => v == member.versions(gvr, kind).await,
        Err(_) => false,
    }
}

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

both!(a_restart_writes_only_what_changed_meanwhile);
async fn a_restart_writes_only_what_changed_meanwhile(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    for name in ["keep", "change", "drop"] {
        a.apply_configmap(name, json!({"v": "1"}), json!({})).await;
    }
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let resources = specs(&["v1/configmaps:metadata", "v1/namespaces"]);
    let store = Store::open(&spec).await.unwrap();
    let first = Indexer::start(&store, resources.clone(), rx.clone());
    let cm = configmaps();
    eventually("the store holds the member's ConfigMaps", || {
        in_sync(&store, &a, "a", &cm, "ConfigMap")
    })
    .await;
    eventually("both lists are complete", || async {
        first.metric("search_indexer_synced") == 2.0
    })
    .await;
    first.stop().await;

    // while the indexer is down
    a.delete_configmap("drop").await;
    a.apply_configmap("change", json!({"v": "2"}), json!({}))
        .await;
    let store = Store::open(&spec).await.unwrap();
    assert_eq!(store.writes(), 0);
    let second = Indexer::start(&store, resources, rx);
    eventually("both lists are complete again", || async {
        second.metric("search_indexer_synced") == 2.0
    })
    .await;
    let cms = stored(&store, &configmaps(), Some("a")).await;
    assert!(!cms.contains_key("a/default/drop"), "deleted while down");
    assert_eq!(cms["a/default/change"]["metadata"]["labels"]["v"], "2");
    assert!(cms.contains_key("a/default/keep"));
    assert!(in_sync(&store, &a, "a", &configmaps(), "ConfigMap").await);
    // one delete, one update; every unchanged object (and namespace) unwritten
    assert_eq!(store.writes(), 2);
    assert_eq!(second.metric("search_indexer_objects_written_total"), 1.0);
    assert_eq!(second.metric("search_indexer_objects_deleted_total"), 1.0);
    let listed = a.versions(&configmaps(), "ConfigMap").await.len()
        + a.versions(&gvr("", "v1", "namespaces"), "Namespace")
            .await
            .len();
    assert_eq!(
        second.metric("search_indexer_objects_unchanged_total"),
        (listed - 1) as f64
    );
    second.stop().await;
}

/// A storage outage, held from the test: SQLite locked by another connection's
/// exclusive transaction; PostgreSQL refusing connections to the database (the store's
/// are cut).
enum Outage {
    Sqlite(rusqlite::Connection),
    Postgres {
        admin: tokio_postgres::Client,
        db: String,
    },
    /// A transaction holding `resources` in EXCLUSIVE mode: reads pass, writes wait.
    PostgresLocked(tokio_postgres::Client),
}

impl Outage {
    async fn start(spec: &str) -> Outage {
        if let Some(path) = spec.strip_prefix("sqlite:") {
            let c = rusqlite::Connection::open(path).unwrap();
            c.busy_timeout(Duration::from_secs(10)).unwrap();
            c.execute_batch("BEGIN EXCLUSIVE").unwrap();
            return Outage::Sqlite(c);
        }
        let base = std::env::var(testing::POSTGRES_ENV).unwrap();
        let (admin, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let db = spec.rsplit('/').next().unwrap().split('?').next().unwrap();
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {db} ALLOW_CONNECTIONS false;
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = '{db}' AND pid <> pg_backend_pid();"
            ))
            .await
            .unwrap();
        Outage::Postgres {
            admin,
            db: db.to_string(),
        }
    }

    /// Writes blocked, reads still served.
    async fn writes_locked(spec: &str) -> Outage {
        if spec.starts_with("sqlite:") {
            // WAL: an exclusive transaction blocks writers, not readers
            return Outage::start(spec).await;
        }
        let (c, conn) = tokio_postgres::connect(spec, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c.batch_execute("BEGIN; LOCK TABLE resources IN EXCLUSIVE MODE")
            .await
            .unwrap();
        Outage::PostgresLocked(c)
    }

    async fn end(self) {
        match self {
            Outage::Sqlite(c) => c.execute_batch("ROLLBACK").unwrap(),
            Outage::PostgresLocked(c) => c.batch_execute("ROLLBACK").await.unwrap(),
            Outage::Postgres { admin, db } => admin
                .batch_execute(&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"))
                .await
                .unwrap(),
        }
    }
}

both!(a_storage_outage_pauses_the_watches_and_loses_no_delete);
async fn a_storage_outage_pauses_the_watches_and_loses_no_delete(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    for name in ["keep", "change", "doomed"] {
        a.apply_configmap(name, json!({"v": "1"}), json!({})).await;
    }
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx);
    eventually("the list is stored", || async {
        indexer.metric("search_indexer_synced") == 1.0
    })
    .await;

    let outage = Outage::start(&spec).await;
    a.apply_configmap("trigger", json!({}), json!({})).await;
    eventually("the failed write is seen as an outage", || async {
        indexer.metric("search_indexer_store_outages_total") >= 1.0
    })
    .await;
    eventually("the watch stops reading during the outage", || async {
        indexer.metric("search_indexer_synchros") == 0.0
    })
    .await;
    // changes the indexer cannot see now
    a.delete_configmap("doomed").await;
    a.apply_configmap("change", json!({"v": "2"}), json!({}))
        .await;
    a.apply_configmap("born", json!({}), json!({})).await;
    for _ in 0..20 {
        a.apply_configmap("trigger", json!({"n": "x"}), json!({}))
            .await;
        a.apply_configmap("trigger", json!({"n": "y"}), json!({}))
            .await;
    }
    assert!(indexer.metric("search_indexer_backlog") <= 500.0);
    outage.end().await;

    let cm = configmaps();
    eventually("the store converges after the outage", || {
        in_sync(&store, &a, "a", &cm, "ConfigMap")
    })
    .await;
    let cms = stored(&store, &configmaps(), Some("a")).await;
    assert!(!cms.contains_key("a/default/doomed"), "no lost delete");
    assert_eq!(cms["a/default/change"]["metadata"]["labels"]["v"], "2");
    assert!(cms.contains_key("a/default/born"));
    assert_eq!(indexer.metric("search_indexer_store_up"), 1.0);
    eventually("the watch runs again", || async {
        indexer.metric("search_indexer_synchros") == 1.0
            && indexer.metric("search_indexer_synced") == 1.0
    })
    .await;
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
    indexer.stop().await;
}

both!(a_relist_of_unchanged_objects_needs_no_write);
async fn a_relist_of_unchanged_objects_needs_no_write(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    for name in ["one", "two"] {
        a.apply_configmap(name, json!({}), json!({})).await;
    }
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let resources = specs(&["v1/configmaps:metadata"]);
    let first = Indexer::start(&store, resources.clone(), rx.clone());
    eventually("the list is stored", || async {
        first.metric("search_indexer_synced") == 1.0
    })
    .await;
    first.stop().await;

    // with writes blocked, a relist that finds nothing new completes all the same
    let lock = Outage::writes_locked(&spec).await;
    let second = Indexer::start(&store, resources, rx);
    eventually("the relist completes without writing", || async {
        second.metric("search_indexer_synced") == 1.0
    })
    .await;
    let listed = a.versions(&configmaps(), "ConfigMap").await.len();
    assert_eq!(
        second.metric("search_indexer_objects_unchanged_total"),
        listed as f64
    );
    assert_eq!(second.metric("search_indexer_store_outages_total"), 0.0);
    lock.end().await;
    second.stop().await;
}

both!(a_list_of_many_pages_is_stored_whole);
async fn a_list_of_many_pages_is_stored_whole(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    let api = a.configmaps();
    for i in 0..1234 {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("cm-{i:04}"), "labels": {"i": i.to_string()}},
            "data": {"k": "v"},
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let indexer = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx);
    eventually("the list is stored", || async {
        indexer.metric("search_indexer_synced") == 1.0
    })
    .await;
    assert!(in_sync(&store, &a, "a", &configmaps(), "ConfigMap").await);
    let listed = a.versions(&configmaps(), "ConfigMap").await.len();
    assert!(listed >= 1234);
    assert_eq!(store.writes(), listed as u64);
    assert_eq!(
        indexer.metric("search_indexer_objects_written_total"),
        listed as f64
    );
    assert_eq!(indexer.metric("search_indexer_backlog"), 0.0);
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
