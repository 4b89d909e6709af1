//! The indexer against members that fail: lists a member keeps failing (500) give the
//! indexer's list permits back, so other members are indexed; forgetting a type a
//! member no longer serves and purging a type no spec covers delete every stored
//! object, by batches (and the forget under a list permit).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::*;
use crate::store::{Gvr, Record, TypeInfo};

/// How long a test waits for the indexer to reach a state.
const DEADLINE: Duration = Duration::from_secs(30);

/// A member that answers discovery from a table and every other request with one
/// error status, over plain HTTP on 127.0.0.1.
struct FailingMember {
    client: kube::Client,
    /// Discovery requests answered.
    discovered: Arc<AtomicUsize>,
    /// List requests (paged: `limit` in the query) answered with the error.
    lists: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for FailingMember {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Status of `code`, as the API server sends one.
fn status(code: u16) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("the member answers {code}"), "reason": "InternalError", "code": code,
    })
}

impl FailingMember {
    /// Serves `discovery` (path → status code and body); answers anything else `code`.
    async fn start(discovery: BTreeMap<&'static str, (u16, Value)>, code: u16) -> FailingMember {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (discovered, lists) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let discovery = Arc::new(discovery);
        let (d, l) = (discovered.clone(), lists.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (discovery, d, l) = (discovery.clone(), d.clone(), l.clone());
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (answer, counter) = match discovery.get(req.uri().path()) {
                        Some((code, body)) => (Some((*code, body.clone())), &d),
                        None => (None, &l),
                    };
                    let paged = req.uri().query().is_some_and(|q| q.contains("limit="));
                    if answer.is_some() || paged {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    let (code, body) = answer.unwrap_or_else(|| (code, status(code)));
                    let response = http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body.to_string())));
                    async move { response }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        let cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
        FailingMember {
            client: kube::Client::try_from(cfg).unwrap(),
            discovered,
            lists,
            task,
        }
    }
}

/// The core group's discovery, serving (list, watch) `resources` as `(plural, kind,
/// namespaced)`.
fn core_discovery(resources: &[(&str, &str, bool)]) -> BTreeMap<&'static str, (u16, Value)> {
    let resources: Vec<Value> = resources
        .iter()
        .map(|(plural, kind, namespaced)| {
            json!({
                "name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
                "verbs": ["get", "list", "watch"],
            })
        })
        .collect();
    let list = json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
        "resources": resources,
    });
    BTreeMap::from([("/api/v1", (200, list))])
}

/// A kubesim member and an admin client of it.
async fn kubesim_member(name: &str) -> (kubesim::Server, kube::Client) {
    let server = kubesim::Server::start(kubesim::Config::new(name))
        .await
        .expect("kubesim starts");
    let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    (server, client)
}

fn member(client: &kube::Client) -> Member {
    Member {
        client: client.clone(),
        fingerprint: "1".into(),
    }
}

fn gvr(group: &str, version: &str, resource: &str) -> Gvr {
    Gvr {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
    }
}

/// An SQLite store in a temp dir.
async fn store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db").display().to_string())
        .await
        .unwrap();
    (store, dir)
}

/// Stores `n` objects of `cluster`'s type `gvr` (in namespace `default`), by batches.
async fn fill(store: &Store, cluster: &str, gvr: &Gvr, kind: &str, n: usize) {
    store
        .set_type(&TypeInfo {
            gvr: gvr.clone(),
            kind: kind.into(),
            namespaced: true,
        })
        .await
        .unwrap();
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            cluster: cluster.into(),
            gvr: gvr.clone(),
            namespace: "default".into(),
            name: format!("o-{i:05}"),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            owner_uid: None,
            created_at: None,
            labels: BTreeMap::new(),
            object: "{}".into(),
        })
        .collect();
    for chunk in records.chunks(synchro::BATCH) {
        store.upsert(chunk.to_vec()).await.unwrap();
    }
    assert_eq!(store.versions(cluster, gvr).await.unwrap().len(), n);
}

/// Polls `check` until it returns true (every 20 ms, at most [`DEADLINE`]).
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    crate::store::testing::eventually(what, DEADLINE, check).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// Member `a` serves four types whose every list answers 500 (as a CRD whose
/// conversion webhook is broken does), for good. Its four synchros would each hold one
/// of the [`synchro::LISTS`] permits while they retry; a failed list gives its permit
/// back while it waits out its backoff, so `b`, added after, is indexed.
async fn lists_a_member_keeps_failing_do_not_hold_back_the_others() {
    let a = FailingMember::start(
        core_discovery(&[
            ("configmaps", "ConfigMap", true),
            ("services", "Service", true),
            ("secrets", "Secret", true),
            ("namespaces", "Namespace", false),
        ]),
        500,
    )
    .await;
    let (_b_server, b) = kubesim_member("b").await;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "in-b", "namespace": "default"}}))
            .unwrap();
    Api::<ConfigMap>::namespaced(b.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let (store, _dir) = store().await;
    let resources = parse_all(&[
        "v1/configmaps",
        "v1/services",
        "v1/secrets:metadata",
        "v1/namespaces",
    ])
    .unwrap();
    assert_eq!(resources.len(), synchro::LISTS);
    let registered: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    let (tx, rx) = watch::channel(Fleet {
        ready: BTreeMap::from([("a".to_string(), member(&a.client))]),
        registered: registered.clone(),
    });
    let metrics = IndexerMetrics::default();
    let stop = CancellationToken::new();
    let indexer = tokio::spawn(run(
        store.clone(),
        resources,
        rx,
        metrics.clone(),
        Positions::default(),
        stop.clone(),
    ));
    eventually("a's four types are listed, and fail", || async {
        a.lists.load(Ordering::SeqCst) >= synchro::LISTS
    })
    .await;
    // past the first backoff: a permit held through it would be held for good
    tokio::time::sleep(Duration::from_secs(1)).await;
    tx.send(Fleet {
        ready: BTreeMap::from([
            ("a".to_string(), member(&a.client)),
            ("b".to_string(), member(&b)),
        ]),
        registered,
    })
    .unwrap();
    let configmaps = gvr("", "v1", "configmaps");
    eventually(
        "b's ConfigMap indexed while a's lists keep failing",
        || async {
            store
                .versions("b", &configmaps)
                .await
                .is_ok_and(|v| v.get("default", "in-b").is_some())
        },
    )
    .await;
    let namespaces = gvr("", "v1", "namespaces");
    eventually("b's namespaces indexed too", || async {
        store
            .versions("b", &namespaces)
            .await
            .is_ok_and(|v| v.get("", "default").is_some())
    })
    .await;
    // a's lists failed again meanwhile (retried, not given up), and stored nothing
    assert!(a.lists.load(Ordering::SeqCst) > synchro::LISTS);
    assert!(store.versions("a", &configmaps).await.unwrap().is_empty());
    stop.cancel();
    tokio::time::timeout(DEADLINE, indexer)
        .await
        .expect("the indexer stops")
        .unwrap();
    // every permit given back (the listing gauge follows them)
    assert_eq!(metrics.listing.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A type the member stops serving is forgotten: every stored object of it goes, more
/// than two batches of them, and nothing of another type; the stored versions are read
/// only under one of the indexer's list permits.
async fn a_type_the_member_no_longer_serves_is_forgotten_under_a_list_permit() {
    let widgets = gvr("example.com", "v1", "widgets");
    let configmaps = gvr("", "v1", "configmaps");
    let many = 2 * synchro::BATCH + 100;
    let (store, _dir) = store().await;
    fill(&store, "a", &widgets, "Widget", many).await;
    fill(&store, "a", &configmaps, "ConfigMap", 3).await;
    let a = FailingMember::start(
        BTreeMap::from([("/apis/example.com/v1", (404, status(404)))]),
        500,
    )
    .await;
    let lists = Arc::new(Semaphore::new(synchro::LISTS));
    let held = lists
        .clone()
        .acquire_many_owned(synchro::LISTS as u32)
        .await
        .unwrap();
    let metrics = IndexerMetrics::default();
    let stop = CancellationToken::new();
    let synchro = Synchro {
        cluster: "a".into(),
        spec: parse_all(&["example.com/v1/widgets"]).unwrap().remove(0),
        client: a.client.clone(),
        store: store.clone(),
        metrics: metrics.clone(),
        health: Health::new(metrics.clone()),
        lists: lists.clone(),
        positions: Positions::default(),
        stop: stop.clone(),
    };
    let task = tokio::spawn(synchro.run());
    // "not served" twice, a retry (1 s) apart: the forget waits for a permit
    eventually(
        "the member says twice it does not serve the type",
        || async { a.discovered.load(Ordering::SeqCst) >= 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        store.versions("a", &widgets).await.unwrap().len(),
        many,
        "nothing is forgotten without a list permit"
    );
    drop(held);
    eventually("every widget forgotten", || async {
        store
            .versions("a", &widgets)
            .await
            .is_ok_and(|v| v.is_empty())
    })
    .await;
    assert_eq!(metrics.deleted.get(), many as u64);
    assert_eq!(store.versions("a", &configmaps).await.unwrap().len(), 3);
    stop.cancel();
    tokio::time::timeout(DEADLINE, task)
        .await
        .expect("the synchro stops")
        .unwrap();
    assert_eq!(lists.available_permits(), synchro::LISTS);
}

#[tokio::test]
/// The keys of stored versions come by chunks of at most a batch, each key once.
async fn stored_keys_come_by_batches() {
    let widgets = gvr("example.com", "v1", "widgets");
    let many = 2 * synchro::BATCH + 100;
    let (store, _dir) = store().await;
    fill(&store, "a", &widgets, "Widget", many).await;
    let stored = store.versions("a", &widgets).await.unwrap();
    let chunks: Vec<Vec<crate::store::Key>> = synchro::key_chunks("a", &widgets, &stored).collect();
    let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
    assert_eq!(sizes, [synchro::BATCH, synchro::BATCH, 100]);
    let names: BTreeSet<&str> = chunks.iter().flatten().map(|k| k.name.as_str()).collect();
    assert_eq!(names.len(), many);
    assert!(
        chunks
            .iter()
            .flatten()
            .all(|k| k.cluster == "a" && k.gvr == widgets && k.namespace == "default")
    );
    let empty = store.versions("a", &gvr("", "v1", "pods")).await.unwrap();
    assert_eq!(synchro::key_chunks("a", &widgets, &empty).count(), 0);
}

#[tokio::test]
/// At start, the objects of a type no spec covers for a registered member any more are
/// purged, more than two batches of them (each batch its own delete), and nothing of
/// the covered types, nor of the type in a member it is still indexed from.
async fn a_type_no_spec_covers_is_purged_by_batches() {
    let widgets = gvr("example.com", "v1", "widgets");
    let configmaps = gvr("", "v1", "configmaps");
    let many = 2 * synchro::BATCH + 100;
    let (store, _dir) = store().await;
    fill(&store, "a", &widgets, "Widget", many).await;
    fill(&store, "a", &configmaps, "ConfigMap", 3).await;
    fill(&store, "b", &widgets, "Widget", 2).await;
    let registered: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    // widgets are indexed from b only
    let resources = parse_all(&["v1/configmaps", "example.com/v1/widgets@b"]).unwrap();
    let metrics = IndexerMetrics::default();
    let clusters = Purge::scan(&registered, &resources, &store, &metrics)
        .await
        .unwrap();
    assert_eq!(clusters, ["a", "b"]);
    assert!(store.versions("a", &widgets).await.unwrap().is_empty());
    assert_eq!(metrics.purged.get(), many as u64);
    assert_eq!(store.versions("a", &configmaps).await.unwrap().len(), 3);
    // b's widgets are still indexed
    assert_eq!(store.versions("b", &widgets).await.unwrap().len(), 2);
}
