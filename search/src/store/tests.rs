//! Store behaviour, every test body run on SQLite (a temp dir) and PostgreSQL (a fresh
//! database on `CAUSEWAY_TEST_POSTGRES`).

use serde_json::{Value, json};

use super::*;
use crate::query::Query;

mod drive;
mod errors;
mod query;
mod selectors;
mod speed;

/// A store of the given backend, its spec, and what keeps it alive.
pub(crate) struct Fixture {
    pub store: Store,
    pub spec: String,
    _dir: Option<tempfile::TempDir>,
}

pub(crate) async fn open(backend: &str) -> Fixture {
    let (spec, dir) = match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sub/index.db");
            (format!("sqlite:{}", path.display()), Some(dir))
        }
        _ => (testing::postgres_db().await, None),
    };
    Fixture {
        // several files: every store test also checks that the files' pages merge
        store: Store::open_with(&spec, 3).await.unwrap(),
        spec,
        _dir: dir,
    }
}

/// One test body (`|store, spec| async move {…}`), run on each backend
/// (`<name>::sqlite`, `<name>::postgres`).
macro_rules! both {
    ($(#[$m:meta])* $name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            $(#[$m])*
            async fn sqlite() {
                let f = $crate::store::tests::open("sqlite").await;
                ($body)(f.store.clone(), f.spec.clone()).await;
            }
            #[tokio::test]
            $(#[$m])*
            async fn postgres() {
                let f = $crate::store::tests::open("postgres").await;
                ($body)(f.store.clone(), f.spec.clone()).await;
            }
        }
    };
}
pub(crate) use both;

pub(crate) fn deployments() -> Gvr {
    Gvr {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
    }
}

/// An object's JSON.
pub(crate) fn object(ns: &str, name: &str, rv: &str, extra: Value) -> Value {
    let mut o = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}"),
            "resourceVersion": rv, "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {"replicas": 1}
    });
    merge(&mut o, extra);
    o
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A Deployment record.
pub(crate) fn record(cluster: &str, ns: &str, name: &str, rv: &str, extra: Value) -> Record {
    Record::from_object(cluster, &deployments(), &object(ns, name, rv, extra), false).unwrap()
}

/// Parses a query string as the API would.
pub(crate) fn query(qs: &str) -> Query {
    let params: Vec<(String, String)> = form_urlencoded::parse(qs.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    Query::parse(&params, None).unwrap()
}

pub(crate) fn names(p: &Page) -> Vec<String> {
    p.items
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            let c = m["annotations"][crate::CLUSTER_ANNOTATION]
                .as_str()
                .unwrap_or("?");
            format!(
                "{c}/{}/{}",
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

both!(
    upsert_versions_search_delete,
    |s: Store, _spec| async move {
        let gvr = deployments();
        let w = s
            .upsert(vec![
                record("a", "ns1", "web", "10", json!({})),
                record(
                    "b",
                    "ns1",
                    "web",
                    "11",
                    json!({"metadata": {"labels": {"app": "web"}}}),
                ),
                record("a", "ns2", "db", "12", json!({})),
            ])
            .await
            .unwrap();
        assert_eq!(
            w,
            Written {
                written: 3,
                unchanged: 0
            }
        );
        let v = s.versions("a", &gvr).await.unwrap();
        assert_eq!(
            v.iter().collect::<Vec<_>>(),
            [("ns1", "web", "10"), ("ns2", "db", "12")]
        );
        let page = s.search(&gvr, &query(""), &Scope::default()).await.unwrap();
        assert_eq!(names(&page), ["a/ns1/web", "a/ns2/db", "b/ns1/web"]);
        let first = &page.items[0];
        assert!(first["metadata"].get("managedFields").is_none(), "{first}");
        assert_eq!(first["spec"]["replicas"], 1);
        let gone = s
            .delete(vec![Key {
                cluster: "a".into(),
                gvr: gvr.clone(),
                namespace: "ns1".into(),
                name: "web".into(),
            }])
            .await
            .unwrap();
        assert_eq!(gone, 1);
        let page = s.search(&gvr, &query(""), &Scope::default()).await.unwrap();
        assert_eq!(names(&page), ["a/ns2/db", "b/ns1/web"]);
        assert_eq!(s.clusters().await.unwrap(), ["a", "b"]);
        assert_eq!(s.namespaces(&gvr, &[]).await.unwrap(), ["ns1", "ns2"]);
        assert_eq!(s.namespaces(&gvr, &["a".into()]).await.unwrap(), ["ns2"]);
        s.ping().await.unwrap();
        // several keys at once (one of them not stored), and their labels with them
        let writes = s.writes();
        let many = vec![
            key("a", "ns2", "db"),
            key("b", "ns1", "web"),
            key("c", "x", "y"),
        ];
        assert_eq!(s.delete(many).await.unwrap(), 2);
        assert_eq!(s.writes(), writes + 2);
        assert!(all(&s, "").await.is_empty());
        let left = s.sum(sql::Stmt {
            sql: "SELECT COUNT(*) FROM labels".into(),
            params: vec![],
        });
        assert_eq!(left.await.unwrap(), 0);
    }
);

pub(crate) fn key(cluster: &str, ns: &str, name: &str) -> Key {
    Key {
        cluster: cluster.into(),
        gvr: deployments(),
        namespace: ns.into(),
        name: name.into(),
    }
}

/// The requirements of a query's label selector (none without one).
pub(crate) fn label_requirements(q: &Query) -> Vec<k8s_validation::selector::Requirement> {
    q.label_selector
        .as_deref()
        .map(|l| k8s_validation::selector::parse(l).unwrap())
        .unwrap_or_default()
}

/// The plan of a query's first page (EXPLAIN QUERY PLAN on SQLite, EXPLAIN on
/// PostgreSQL), undriven, one line per step.
pub(crate) async fn plan(s: &Store, qs: &str) -> String {
    let q = query(qs);
    let labels = label_requirements(&q);
    let fields = q
        .field_selector
        .as_deref()
        .map(|f| fields::parse(f).unwrap())
        .unwrap_or_default();
    let gvr = deployments();
    let scope = Scope::default();
    let search = Search {
        gvr: &gvr,
        q: &q,
        scope: &scope,
        labels: &labels,
        fields: &fields,
        owners: None,
        drive: None,
    };
    let stmt = sql::search_page(s.dialect(), &search).unwrap();
    let explain = match s.backend() {
        "sqlite" => "EXPLAIN QUERY PLAN ",
        _ => "EXPLAIN ",
    };
    let rows = s
        .rows(Stmt {
            sql: format!("{explain}{}", stmt.sql),
            params: stmt.params,
        })
        .await
        .unwrap();
    rows.into_iter()
        .map(|r| r.into_iter().map(Cell::text).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n    ")
}

pub(crate) async fn all(s: &Store, qs: &str) -> Vec<String> {
    names(
        &s.search(&deployments(), &query(qs), &Scope::default())
            .await
            .unwrap(),
    )
}

both!(
    unchanged_resource_versions_are_not_written,
    |s: Store, _spec| async move {
        let labels = json!({"metadata": {"labels": {"app": "web"}}});
        let first = s
            .upsert(vec![record("a", "ns", "web", "5", labels.clone())])
            .await
            .unwrap();
        assert_eq!(
            first,
            Written {
                written: 1,
                unchanged: 0
            }
        );
        let before = s.writes();
        // the same resourceVersion, even with other content: no write
        let changed_labels = json!({"metadata": {"labels": {"app": "db"}}});
        let again = s
            .upsert(vec![record("a", "ns", "web", "5", changed_labels.clone())])
            .await
            .unwrap();
        assert_eq!(
            again,
            Written {
                written: 0,
                unchanged: 1
            }
        );
        assert_eq!(s.writes(), before);
        assert_eq!(all(&s, "labelSelector=app%3Dweb").await, ["a/ns/web"]);
        // a new resourceVersion: updated, labels replaced
        let newer = s
            .upsert(vec![record("a", "ns", "web", "6", changed_labels)])
            .await
            .unwrap();
        assert_eq!(
            newer,
            Written {
                written: 1,
                unchanged: 0
            }
        );
        assert_eq!(s.writes(), before + 1);
        assert!(all(&s, "labelSelector=app%3Dweb").await.is_empty());
        assert_eq!(all(&s, "labelSelector=app%3Ddb").await, ["a/ns/web"]);
        assert_eq!(
            s.versions("a", &deployments())
                .await
                .unwrap()
                .iter()
                .map(|(_, _, rv)| rv.to_string())
                .collect::<Vec<_>>(),
            ["6"]
        );
        // deleting what is not stored writes nothing
        assert_eq!(s.delete(vec![key("a", "ns", "nothing")]).await.unwrap(), 0);
        assert_eq!(s.writes(), before + 1);
    }
);

both!(
    /// A member re-created under its name counts resourceVersions from 1 again: an
    /// object of the new member at the resourceVersion stored for the old one's (another
    /// uid) is another object, and is written whole (uid, owner, creation, labels, body).
    another_uid_at_the_same_resource_version_is_written,
    |s: Store, _spec| async move {
        let old = json!({"metadata": {"uid": "old", "labels": {"app": "web"},
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "ownerReferences": [{"uid": "old-owner", "controller": true}]}});
        s.upsert(vec![record("a", "ns", "web", "5", old)])
            .await
            .unwrap();
        let before = s.writes();
        let new = json!({"metadata": {"uid": "new", "labels": {"app": "db"},
            "creationTimestamp": "2025-06-01T00:00:00Z",
            "ownerReferences": [{"uid": "new-owner", "controller": true}]},
            "spec": {"replicas": 3}});
        let w = s
            .upsert(vec![record("a", "ns", "web", "5", new.clone())])
            .await
            .unwrap();
        assert_eq!(
            w,
            Written {
                written: 1,
                unchanged: 0
            }
        );
        assert_eq!(s.writes(), before + 1);
        assert!(all(&s, "labelSelector=app%3Dweb").await.is_empty());
        assert_eq!(all(&s, "labelSelector=app%3Ddb").await, ["a/ns/web"]);
        let page = s
            .search(&deployments(), &query(""), &Scope::default())
            .await
            .unwrap();
        let m = &page.items[0]["metadata"];
        assert_eq!(m["uid"], "new");
        assert_eq!(m["creationTimestamp"], "2025-06-01T00:00:00Z");
        assert_eq!(page.items[0]["spec"]["replicas"], 3);
        let new_record = record("a", "ns", "web", "5", new);
        // every column from the new object (summed over the store's files)
        let mut b = sql::Builder::new(s.dialect());
        let (u, o, c) = (
            b.text("new"),
            b.text("new-owner"),
            b.int(new_record.created_at.unwrap()),
        );
        let stmt = b.finish(format!(
            "SELECT COUNT(*) FROM resources WHERE uid = {u} AND owner_uid = {o} AND created_at = {c}"
        ));
        assert_eq!(s.sum(stmt).await.unwrap(), 1);
        // the same object again: unchanged
        let w = s
            .upsert(vec![new_record])
            .await
            .unwrap();
        assert_eq!(w.unchanged, 1);
        assert_eq!(s.writes(), before + 1);
    }
);

both!(purge_removes_one_cluster, |s: Store, _spec| async move {
    let labels = json!({"metadata": {"labels": {"app": "web"}}});
    s.upsert(vec![
        record("a", "ns", "web", "1", labels.clone()),
        record("a", "ns", "db", "2", labels.clone()),
        record("b", "ns", "web", "3", labels),
    ])
    .await
    .unwrap();
    assert_eq!(s.purge_cluster("a").await.unwrap(), 2);
    assert_eq!(all(&s, "").await, ["b/ns/web"]);
    assert_eq!(all(&s, "labelSelector=app").await, ["b/ns/web"]);
    assert_eq!(s.clusters().await.unwrap(), ["b"]);
    assert_eq!(s.purge_cluster("a").await.unwrap(), 0);
});

both!(
    reopening_keeps_data_and_migrates_once,
    |s: Store, spec: String| async move {
        s.upsert(vec![record("a", "ns", "web", "1", json!({}))])
            .await
            .unwrap();
        let t = TypeInfo {
            gvr: deployments(),
            kind: "Deployment".into(),
            namespaced: true,
        };
        s.set_type(&t).await.unwrap();
        for _ in 0..2 {
            let again = Store::open(&spec).await.unwrap();
            assert_eq!(all(&again, "").await, ["a/ns/web"]);
            assert_eq!(again.types().await.unwrap(), std::slice::from_ref(&t));
            let v = again
                .rows(sql::Stmt {
                    sql: "SELECT COUNT(*), MAX(version) FROM schema_version".into(),
                    params: vec![],
                })
                .await
                .unwrap();
            let n = schema::migrations(again.dialect()).len() as i64;
            assert_eq!(v[0].iter().map(sql::Cell::int).collect::<Vec<_>>(), [n, n]);
        }
    }
);

both!(
    types_are_recorded_and_updated,
    |s: Store, _spec| async move {
        let mut t = TypeInfo {
            gvr: deployments(),
            kind: "Deployment".into(),
            namespaced: true,
        };
        let node = TypeInfo {
            gvr: Gvr {
                group: "".into(),
                version: "v1".into(),
                resource: "nodes".into(),
            },
            kind: "Node".into(),
            namespaced: false,
        };
        s.set_type(&t).await.unwrap();
        s.set_type(&node).await.unwrap();
        t.kind = "Deploy".into();
        s.set_type(&t).await.unwrap();
        assert_eq!(s.types().await.unwrap(), [node, t]);
    }
);

#[tokio::test]
async fn an_unreachable_postgres_is_unavailable() {
    // a port nothing listens on
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let err = Store::open(&format!("postgres://causeway@127.0.0.1:{port}/x"))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn a_locked_sqlite_database_is_unavailable_not_a_hang() {
    let f = open("sqlite").await;
    let path = f.spec.strip_prefix("sqlite:").unwrap();
    let blocker = rusqlite::Connection::open(path).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = std::time::Instant::now();
    let err = f
        .store
        .upsert(vec![record("a", "ns", "web", "1", json!({}))])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // the indexer's health check sees the outage too (reads alone still work)
    let err = f.store.ping().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    blocker.execute_batch("ROLLBACK").unwrap();
    f.store.ping().await.unwrap();
    f.store
        .upsert(vec![record("a", "ns", "web", "1", json!({}))])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_locked_postgres_table_is_unavailable_not_a_hang() {
    let f = open("postgres").await;
    let (blocker, conn) = tokio_postgres::connect(&f.spec, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    blocker
        .batch_execute("BEGIN; LOCK TABLE resources IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        f.store
            .upsert(vec![record("a", "ns", "web", "1", json!({}))]),
    )
    .await
    .expect("a write under a held lock fails, it does not hang")
    .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    // the server's words, not tokio-postgres' bare "db error"
    assert!(
        err.to_string()
            .ends_with("PostgreSQL: canceling statement due to lock timeout (SQLSTATE 55P03)"),
        "{err}"
    );
    blocker.batch_execute("ROLLBACK").await.unwrap();
    f.store
        .upsert(vec![record("a", "ns", "web", "1", json!({}))])
        .await
        .unwrap();
}

#[test]
fn records_from_objects() {
    let gvr = deployments();
    let obj = object(
        "ns",
        "web",
        "7",
        json!({"metadata": {"labels": {"app": "web"}, "ownerReferences": [
            {"uid": "first"}, {"uid": "ctrl", "controller": true}]}}),
    );
    let r = Record::from_object("a", &gvr, &obj, false).unwrap();
    assert_eq!(r.owner_uid.as_deref(), Some("ctrl"));
    assert_eq!(r.created_at, Some(1_704_067_200_000));
    assert_eq!(r.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        (r.uid.as_str(), r.resource_version.as_str()),
        ("uid-ns-web", "7")
    );
    let stored: Value = serde_json::from_str(&r.object).unwrap();
    assert!(stored["metadata"].get("managedFields").is_none());
    assert_eq!(stored["spec"]["replicas"], 1);

    let meta = Record::from_object("a", &gvr, &obj, true).unwrap();
    let stored: Value = serde_json::from_str(&meta.object).unwrap();
    let mut keys: Vec<&String> = stored.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["apiVersion", "kind", "metadata"]);

    let one_owner = object(
        "ns",
        "x",
        "1",
        json!({"metadata": {"ownerReferences": [{"uid": "only"}]}}),
    );
    let r = Record::from_object("a", &gvr, &one_owner, false).unwrap();
    assert_eq!(r.owner_uid.as_deref(), Some("only"));
    assert_eq!(r.namespace, "ns");
    assert!(Record::from_object("a", &gvr, &json!({"metadata": {}}), false).is_none());
    assert!(Record::from_object("a", &gvr, &json!({"kind": "X"}), false).is_none());
}

#[tokio::test]
async fn dropped_postgres_connections_are_reopened() {
    let url = testing::postgres_db().await;
    let s = Store::open(&url).await.unwrap();
    s.upsert(vec![record("a", "ns", "web", "1", json!({}))])
        .await
        .unwrap();
    let db = url.rsplit('/').next().unwrap().to_string();
    let admin = Store::open(&url).await.unwrap();
    let killed = admin
        .rows(sql::Stmt {
            sql: "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()".into(),
            params: vec![sql::Param::Text(db)],
        })
        .await
        .unwrap();
    assert!(killed[0][0].int() >= 1, "no connection was dropped");
    // each connection fails (Unavailable) at most once, then is reopened
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut failures = 0;
    let mut ok = 0;
    while ok < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "the store did not recover"
        );
        match s
            .search(&deployments(), &query(""), &Scope::default())
            .await
        {
            Ok(p) => {
                assert_eq!(names(&p), ["a/ns/web"]);
                ok += 1;
            }
            Err(StoreError::Unavailable(_)) => failures += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        failures <= 3,
        "{failures} failures for 3 reader connections"
    );
    let w = s
        .upsert(vec![record("a", "ns", "web", "2", json!({}))])
        .await;
    let w = match w {
        Err(StoreError::Unavailable(_)) => {
            s.upsert(vec![record("a", "ns", "web", "2", json!({}))])
                .await
        }
        other => other,
    };
    assert_eq!(w.unwrap().written, 1);
}

#[tokio::test]
async fn a_keyword_value_connection_string_is_refused_not_made_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::env::current_dir().unwrap();
    let spec = "host=db dbname=search password=x";
    let e = crate::store::Store::open(spec)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("postgres://USER"), "{e}");
    assert!(!cwd.join(spec).exists());
    // a path with a space is still a SQLite file
    let path = dir.path().join("my index.db").display().to_string();
    assert!(crate::store::Store::open(&path).await.is_ok());
}

#[tokio::test]
async fn a_sqlite_read_past_its_deadline_is_stopped_with_a_clear_error() {
    let f = open("sqlite").await;
    let records: Vec<Record> = (0..3000)
        .map(|i| {
            record(
                "a",
                "ns",
                &format!("web-{i}"),
                "1",
                json!({"status": {"phase": "Running"}}),
            )
        })
        .collect();
    f.store.upsert(records).await.unwrap();
    f.store.set_read_deadline(std::time::Duration::ZERO);
    let q = query("fieldSelector=status.phase%3DRunning");
    let e = f
        .store
        .search(&deployments(), &q, &Scope::default())
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Query(_)), "{e}");
    assert!(e.to_string().contains("ran longer than"), "{e}");
    f.store.set_read_deadline(sqlite::READ_DEADLINE);
    let page = f
        .store
        .search(&deployments(), &q, &Scope::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 3000);
}

#[test]
fn statistics_are_refreshed_as_the_table_doubles_and_again_after_a_failure() {
    let mut st = Stats::default();
    // (rows written, refresh due with the rows since the last one)
    let steps = [
        (4_999, None),
        (1, Some(5_000)),
        (4_999, None),
        (1, Some(5_000)),
        (9_999, None),
        (1, Some(10_000)),
        (15_000, None),
    ];
    for (i, (rows, due)) in steps.into_iter().enumerate() {
        assert_eq!(st.wrote(rows), due, "step {i}");
    }
    // 35,000 written before; at 20,000 more the refresh is due, and if it fails the
    // next write asks again, with every row since the last refresh that ran
    assert_eq!(st.wrote(5_000), Some(20_000));
    st.not_refreshed(20_000);
    assert_eq!(
        st,
        Stats {
            since: 20_000,
            before: 20_000
        }
    );
    assert_eq!(st.wrote(1), Some(20_001));
    assert_eq!(
        st,
        Stats {
            since: 0,
            before: 40_001
        }
    );
}

both!(
    an_update_replaces_the_objects_labels,
    |s: Store, _spec| async move {
        let labelled = |app: &str| json!({"metadata": {"labels": {"app": app, "tier": "web"}}});
        s.upsert(vec![record("a", "ns", "shop", "1", labelled("old"))])
            .await
            .unwrap();
        s.upsert(vec![record("a", "ns", "shop", "2", labelled("new"))])
            .await
            .unwrap();
        assert!(all(&s, "labelSelector=app%3Dold").await.is_empty());
        assert_eq!(all(&s, "labelSelector=app%3Dnew").await, ["a/ns/shop"]);
        assert_eq!(all(&s, "labelSelector=tier%3Dweb").await, ["a/ns/shop"]);
    }
);

both!(
    of_several_records_with_one_key_the_last_is_stored,
    |s: Store, _spec| async move {
        let gvr = deployments();
        let app = |v: &str| json!({"metadata": {"labels": {"app": v}}});
        // out of order, with a repeat: the last of each key, once
        let w = s
            .upsert(vec![
                record("a", "ns", "web", "1", app("first")),
                record("a", "ns", "api", "1", json!({})),
                record("a", "ns", "web", "2", app("second")),
            ])
            .await
            .unwrap();
        assert_eq!((w.written, w.unchanged), (2, 0));
        let v = s.versions("a", &gvr).await.unwrap();
        assert_eq!(v.get("ns", "web"), Some("2"));
        assert_eq!(all(&s, "labelSelector=app=second").await, ["a/ns/web"]);
        assert!(all(&s, "labelSelector=app=first").await.is_empty());
        // in key order without repeats (the indexer's batches), written as given
        let sorted: Vec<Record> = ["x", "y", "z"]
            .iter()
            .map(|n| record("a", "ns", n, "1", json!({})))
            .collect();
        let w = s.upsert(sorted).await.unwrap();
        assert_eq!((w.written, w.unchanged), (3, 0));
        assert_eq!(all(&s, "").await.len(), 5);
    }
);

both!(
    concurrent_batches_are_all_written_once,
    |s: Store, _spec| async move {
        // eight writers at once (on SQLite they share transactions: group commit), two
        // of them writing one object with other labels at the same time
        let writers = (0..8).map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let mut batch: Vec<Record> = (0..40)
                    .map(|i| {
                        record(
                            &format!("c{w}"),
                            "ns",
                            &format!("web-{i:02}"),
                            "5",
                            json!({}),
                        )
                    })
                    .collect();
                if w < 2 {
                    let labels =
                        json!({"metadata": {"labels": {"writer": format!("w{w}"), "both": "yes"}}});
                    batch.push(record(
                        "shared",
                        "ns",
                        "shared-obj",
                        &format!("{}", 7 + w),
                        labels,
                    ));
                }
                s.upsert(batch).await.unwrap()
            })
        });
        let mut written = 0;
        for w in futures::future::join_all(writers).await {
            written += w.unwrap().written;
        }
        assert_eq!(written, 8 * 40 + 2);
        assert_eq!(all(&s, "").await.len(), 8 * 40 + 1);
        assert_eq!(
            all(&s, "fuzzy-name=shared-ob").await,
            ["shared/ns/shared-obj"]
        );
        let shared = all(&s, "labelSelector=both%3Dyes").await;
        assert_eq!(shared, ["shared/ns/shared-obj"]);
        // the labels are those of the last write, and only those
        let rv = &s.versions("shared", &deployments()).await.unwrap();
        let last = rv.iter().next().unwrap().2.to_string();
        let writer = if last == "7" { "w0" } else { "w1" };
        assert_eq!(
            all(&s, &format!("labelSelector=writer%3D{writer}")).await,
            shared
        );
        assert!(
            all(&s, "labelSelector=writer%20notin%20(w0,w1)")
                .await
                .len()
                == 8 * 40
        );
        let labels = s.sum(sql::Stmt {
            sql: "SELECT COUNT(*) FROM labels".into(),
            params: vec![],
        });
        // every record's own labels (`object` gives each one) plus the shared one's two
        let per_record = record("x", "ns", "x", "1", json!({})).labels.len() as i64;
        assert_eq!(labels.await.unwrap(), 8 * 40 * per_record + 2 + per_record);
    }
);

both!(
    clusters_written_at_once_are_all_stored,
    |s: Store, _spec| async move {
        // on PostgreSQL the clusters' batches go to different writer connections, on
        // SQLite to different files: written in parallel, each batch in order
        let clusters = ["east", "west", "north", "south", "member-1", "member-2"];
        let writes = clusters.iter().map(|c| {
            let s = s.clone();
            async move {
                for batch in 0..3 {
                    let records = (0..50)
                        .map(|i| record(c, "ns", &format!("o{batch}-{i:02}"), "1", json!({})))
                        .collect::<Vec<_>>();
                    s.upsert(records).await.unwrap();
                }
                // the last write of a cluster wins: an update, then a delete
                s.upsert(vec![record(c, "ns", "o0-00", "2", json!({}))])
                    .await
                    .unwrap();
                s.delete(vec![key(c, "ns", "o0-01")]).await.unwrap();
            }
        });
        futures::future::join_all(writes).await;
        for c in clusters {
            let stored = s.versions(c, &deployments()).await.unwrap();
            assert_eq!(stored.len(), 149, "{c}");
            let rv = stored
                .iter()
                .find(|(_, name, _)| *name == "o0-00")
                .map(|(_, _, rv)| rv.to_string());
            assert_eq!(
                rv.as_deref(),
                Some("2"),
                "{c}: the update is the last write"
            );
        }
        assert_eq!(
            all(&s, "clusters=east&names=o0-00").await,
            ["east/ns/o0-00"]
        );
        assert!(all(&s, "clusters=west&names=o0-01").await.is_empty());
    }
);
