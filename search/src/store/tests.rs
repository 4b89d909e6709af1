//! Store behaviour, every test body run on SQLite (a temp dir) and PostgreSQL (a fresh
//! database on `CAUSEWAY_TEST_POSTGRES`).

use serde_json::{Value, json};

use super::*;
use crate::query::Query;

/// A store of the given backend and what keeps it alive.
pub(crate) struct Fixture {
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
}

pub(crate) async fn open(backend: &str) -> Fixture {
    match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sub/index.db");
            let store = Store::open(&format!("sqlite:{}", path.display()))
                .await
                .unwrap();
            Fixture {
                store,
                _dir: Some(dir),
            }
        }
        _ => Fixture {
            store: Store::open(&testing::postgres_db().await).await.unwrap(),
            _dir: None,
        },
    }
}

/// One test body, run on each backend (`<name>::sqlite`, `<name>::postgres`).
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let f = super::open("sqlite").await;
                ($body)(f.store.clone()).await;
            }
            #[tokio::test]
            async fn postgres() {
                let f = super::open("postgres").await;
                ($body)(f.store.clone()).await;
            }
        }
    };
}

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

both!(upsert_versions_search_delete, |s: Store| async move {
    let gvr = deployments();
    let w = s
        .upsert(vec![
            record("a", "ns1", "web", "10", json!({})),
            record("b", "ns1", "web", "11", json!({})),
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
        v.into_iter().collect::<Vec<_>>(),
        vec![
            (("ns1".to_string(), "web".to_string()), "10".to_string()),
            (("ns2".to_string(), "db".to_string()), "12".to_string()),
        ]
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
});
