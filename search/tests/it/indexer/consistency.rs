//! Restart consistency (K.71) and storage outages (K.72), on both stores.

use std::time::Duration;

use causeway_search::store::{Store, testing};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::watch;

use super::support::{
    Backend, Indexer, SearchApi, cluster, configmaps, database, eventually, fleet, gvr, identities,
    in_sync, specs, stored, stored_identities,
};

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

both!(a_member_recreated_under_its_name_is_stored_whole);
async fn a_member_recreated_under_its_name_is_stored_whole(backend: Backend) {
    // a member deleted and another cluster registered under its name: both etcds count
    // revisions from 1, so objects of the new one come at the resourceVersions stored
    // for the old one's (namespaces, ConfigMaps made alike); they are other objects,
    // with other uids, and the relist must write them
    let (spec, _dir) = database(backend).await;
    let old = cluster("east").await;
    old.apply_configmap("app", json!({"generation": "old"}), json!({}))
        .await;
    let (tx, rx) = watch::channel(fleet(&[("east", &old)], &["east"]));
    let store = Store::open(&spec).await.unwrap();
    let namespaces = gvr("", "v1", "namespaces");
    let indexer = Indexer::start(&store, specs(&["v1/configmaps", "v1/namespaces"]), rx);
    eventually("the old member is stored", || async {
        indexer.metric("search_indexer_synced") == 2.0
            && stored_identities(&store, &configmaps(), "east").await
                == identities(&old, &configmaps(), "ConfigMap").await
    })
    .await;

    let new = cluster("east-2").await;
    new.apply_configmap("app", json!({"generation": "new"}), json!({}))
        .await;
    let app = ("default".to_string(), "app".to_string());
    let (was, is) = (
        identities(&old, &configmaps(), "ConfigMap").await,
        identities(&new, &configmaps(), "ConfigMap").await,
    );
    assert_eq!(was[&app].0, is[&app].0, "the two members' versions collide");
    assert_ne!(was[&app].1, is[&app].1);
    let default = ("".to_string(), "default".to_string());
    let (was, is) = (
        identities(&old, &namespaces, "Namespace").await,
        identities(&new, &namespaces, "Namespace").await,
    );
    assert_eq!(was[&default].0, is[&default].0);
    assert_ne!(was[&default].1, is[&default].1);

    tx.send_replace(fleet(&[("east", &new)], &["east"]));
    for (gvr, kind) in [(configmaps(), "ConfigMap"), (namespaces, "Namespace")] {
        eventually(&format!("the new member's {kind}s stored"), || async {
            stored_identities(&store, &gvr, "east").await == identities(&new, &gvr, kind).await
        })
        .await;
    }
    let cms = stored(&store, &configmaps(), Some("east")).await;
    assert_eq!(
        cms["east/default/app"]["metadata"]["labels"]["generation"],
        "new"
    );
    indexer.stop().await;
}

/// A storage outage, held from the test: SQLite locked by another connection's
/// exclusive transaction; PostgreSQL refusing connections to the database (the store's
/// are cut).
enum Outage {
    /// Every file of the store locked.
    Sqlite(Vec<rusqlite::Connection>),
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
            let files = causeway_search::store::sqlite_files(path);
            assert!(!files.is_empty(), "no store at {path}");
            let locks = files
                .iter()
                .map(|f| {
                    let c = rusqlite::Connection::open(f).unwrap();
                    c.busy_timeout(Duration::from_secs(10)).unwrap();
                    c.execute_batch("BEGIN EXCLUSIVE").unwrap();
                    c
                })
                .collect();
            return Outage::Sqlite(locks);
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
            Outage::Sqlite(locks) => {
                for c in locks {
                    c.execute_batch("ROLLBACK").unwrap();
                }
            }
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

both!(a_type_made_names_only_loses_its_stored_contents);
async fn a_type_made_names_only_loses_its_stored_contents(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    // the first ConfigMap has no contents at all: the switch must not be judged on it
    a.apply_configmap("a-empty", json!({}), json!({})).await;
    a.apply_configmap("creds", json!({}), json!({"password": "hunter2"}))
        .await;
    // what a client-side `kubectl apply` leaves: the whole object in an annotation
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied", "namespace": "default"},
        "data": {"token": "s3cr3t-in-annotation"}});
    let mut with_last_applied = applied.clone();
    with_last_applied["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()});
    a.configmaps()
        .create(
            &PostParams::default(),
            &serde_json::from_value::<ConfigMap>(with_last_applied).unwrap(),
        )
        .await
        .unwrap();
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let whole = Indexer::start(&store, specs(&["v1/configmaps"]), rx.clone());
    eventually("the whole ConfigMap is stored", || async {
        whole.metric("search_indexer_synced") == 1.0
    })
    .await;
    let cms = stored(&store, &configmaps(), Some("a")).await;
    assert_eq!(cms["a/default/creds"]["data"]["password"], "hunter2");
    whole.stop().await;

    // same objects, same resourceVersions: only the switch can drop the data
    let names = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx.clone());
    eventually("the relist stored names only", || async {
        names.metric("search_indexer_synced") == 1.0
    })
    .await;
    let cms = stored(&store, &configmaps(), Some("a")).await;
    let creds = &cms["a/default/creds"];
    assert!(creds.get("data").is_none(), "{creds}");
    let applied = &cms["a/default/applied"];
    assert!(applied.get("data").is_none(), "{applied}");
    assert!(
        !applied.to_string().contains("s3cr3t"),
        "names only keeps no annotation that holds the object: {applied}"
    );
    assert!(in_sync(&store, &a, "a", &configmaps(), "ConfigMap").await);
    // and neither does the API's list, nor its watch (cut from the member's events)
    let api = SearchApi::start(&store, &a, names.positions.clone()).await;
    let list = api.get("/api/v1/configmaps").await;
    assert!(list.contains("\"applied\""), "{list}");
    assert!(!list.contains("s3cr3t"), "{list}");
    assert!(!list.contains("last-applied-configuration"), "{list}");
    let events = api
        .get("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=2")
        .await;
    assert!(
        events.contains("\"applied\""),
        "the watch sent it: {events}"
    );
    assert!(!events.contains("s3cr3t"), "{events}");
    assert!(!events.contains("last-applied-configuration"), "{events}");
    drop(api);
    names.stop().await;

    // and a names-only restart of names-only records writes nothing
    let writes = store.writes();
    let again = Indexer::start(&store, specs(&["v1/configmaps:metadata"]), rx.clone());
    eventually("the relist is complete", || async {
        again.metric("search_indexer_synced") == 1.0
    })
    .await;
    assert_eq!(store.writes(), writes);
    again.stop().await;

    // and back to whole objects: the contents return though nothing changed in the member
    let back = Indexer::start(&store, specs(&["v1/configmaps"]), rx.clone());
    eventually("the relist stored whole objects again", || async {
        back.metric("search_indexer_synced") == 1.0
    })
    .await;
    let cms = stored(&store, &configmaps(), Some("a")).await;
    assert_eq!(cms["a/default/creds"]["data"]["password"], "hunter2");
    back.stop().await;
}

both!(a_type_no_longer_indexed_is_purged_at_start);
async fn a_type_no_longer_indexed_is_purged_at_start(backend: Backend) {
    // the configuration drops a type (or a member from a type's @clusters): its objects
    // must not stay searchable, the others stay as they are
    let (spec, _dir) = database(backend).await;
    let a = cluster("a").await;
    a.apply_configmap("settings", json!({}), json!({"k": "v"}))
        .await;
    let (_tx, rx) = watch::channel(fleet(&[("a", &a)], &["a"]));
    let store = Store::open(&spec).await.unwrap();
    let namespaces = gvr("", "v1", "namespaces");
    let both = Indexer::start(
        &store,
        specs(&["v1/configmaps", "v1/namespaces"]),
        rx.clone(),
    );
    eventually("both types stored", || async {
        both.metric("search_indexer_synced") == 2.0
    })
    .await;
    both.stop().await;
    assert!(!stored(&store, &namespaces, Some("a")).await.is_empty());
    let cms = stored(&store, &configmaps(), Some("a")).await.len();
    assert!(cms >= 1);

    let one = Indexer::start(&store, specs(&["v1/configmaps"]), rx.clone());
    eventually("namespaces purged, configmaps kept", || async {
        one.metric("search_indexer_synced") == 1.0
            && stored(&store, &namespaces, Some("a")).await.is_empty()
    })
    .await;
    assert_eq!(stored(&store, &configmaps(), Some("a")).await.len(), cms);
    assert!(one.metric("search_indexer_objects_purged_total") >= 1.0);
    one.stop().await;
}

/// Polls the indexer until `synced` synchros have complete lists (bounded: 60 s),
/// returning the most lists it saw compared with the store at once.
async fn most_lists_at_once(indexer: &Indexer, synced: f64) -> f64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut most: f64 = 0.0;
    while indexer.metric("search_indexer_synced") < synced {
        most = most.max(indexer.metric("search_indexer_listing"));
        assert!(
            std::time::Instant::now() < deadline,
            "{synced} synchros not synced within 60 s: {}",
            indexer.text()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    most
}

both!(lists_are_compared_at_most_four_at_once);
async fn lists_are_compared_at_most_four_at_once(backend: Backend) {
    let (spec, _dir) = database(backend).await;
    let (a, b) = (cluster("a").await, cluster("b").await);
    for m in [&a, &b] {
        for i in 0..150 {
            m.apply_configmap(&format!("cm-{i}"), json!({}), json!({}))
                .await;
        }
    }
    // 2 members × 5 types = 10 synchros, more than the 4 permits
    let resources = specs(&[
        "v1/configmaps:metadata",
        "v1/namespaces",
        "v1/serviceaccounts",
        "v1/services",
        "v1/secrets:metadata",
    ]);
    let (_tx, rx) = watch::channel(fleet(&[("a", &a), ("b", &b)], &["a", "b"]));
    let store = Store::open(&spec).await.unwrap();
    let first = Indexer::start(&store, resources.clone(), rx.clone());
    let most = most_lists_at_once(&first, 10.0).await;
    assert!((1.0..=4.0).contains(&most), "lists at once: {most}");
    assert!(in_sync(&store, &a, "a", &configmaps(), "ConfigMap").await);
    assert!(in_sync(&store, &b, "b", &configmaps(), "ConfigMap").await);
    first.stop().await;

    // a restart compares every list again, four at a time, and writes nothing
    let store = Store::open(&spec).await.unwrap();
    let second = Indexer::start(&store, resources, rx);
    let most = most_lists_at_once(&second, 10.0).await;
    assert!(most <= 4.0, "lists at once: {most}");
    assert_eq!(
        second.metric("search_indexer_listing"),
        0.0,
        "permits given back"
    );
    assert_eq!(store.writes(), 0);
    second.stop().await;
}
