//! The indexer against members that fail: lists a member keeps failing (500), refuses
//! (403), never answers, or whose continue tokens keep expiring give the indexer's
//! list permits back, so other members are indexed; a watch that goes silent is
//! dropped and opened again, one that keeps failing or is ahead of the member relists;
//! forgetting a type a member no longer serves (only once it has not served it for a
//! while) and purging a type no spec covers delete every stored object, by batches
//! (and the forget under a list permit). Members that misbehave are fakes on
//! 127.0.0.1, most tests on paused time.

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
use tokio::time::Instant;

use super::*;
use crate::store::{Gvr, Record, TypeInfo};

/// How long a test waits for the indexer to reach a state.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long a test on paused time waits for the indexer to reach a state.
const LONG: Duration = Duration::from_secs(900);

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
    let client = server.client().await;
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

/// Polls `check` until it returns true (every 20 ms, at most `deadline`).
async fn within<F, Fut>(what: &str, deadline: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    crate::store::testing::eventually(what, deadline, check).await
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

#[tokio::test(start_paused = true)]
/// A type the member stops serving is forgotten once its discovery has said so for
/// [`synchro::FORGET_AFTER`]: every stored object of it goes, more than two batches of
/// them, and nothing of another type; the stored versions are read only under one of
/// the indexer's list permits.
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
    let started = Instant::now();
    let task = tokio::spawn(synchro.run());
    // "not served" at 0, 1, 3, 7, 15, 31 and 63 s (backoff): the last is past
    // FORGET_AFTER, and the forget waits for a permit
    within(
        "the member says for a minute it does not serve the type",
        LONG,
        || async { a.discovered.load(Ordering::SeqCst) >= 7 },
    )
    .await;
    assert!(Instant::now() - started >= synchro::FORGET_AFTER);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        store.versions("a", &widgets).await.unwrap().len(),
        many,
        "nothing is forgotten without a list permit"
    );
    drop(held);
    within("every widget forgotten", LONG, || async {
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
    let (clusters, done) = Purge::scan(&registered, &resources, &store, &metrics, &|| false)
        .await
        .unwrap();
    assert_eq!(clusters, ["a", "b"]);
    assert!(done);
    assert!(store.versions("a", &widgets).await.unwrap().is_empty());
    assert_eq!(metrics.purged.get(), many as u64);
    assert_eq!(store.versions("a", &configmaps).await.unwrap().len(), 3);
    // b's widgets are still indexed
    assert_eq!(store.versions("b", &widgets).await.unwrap().len(), 2);
}

/// What a [`Fake`] member answers a request.
enum Reply {
    /// This status, and this JSON body.
    Json(u16, Value),
    /// 200 and these watch events (a JSON line each), then nothing, the response never
    /// ending (a watch on a connection that died silently).
    Events(Vec<Value>),
    /// Nothing at all (a list on a connection that died silently).
    Hang,
}

/// A request to a [`Fake`] member: its path and query parameters.
#[derive(Clone, Debug)]
struct Call {
    path: String,
    query: BTreeMap<String, String>,
}

impl Call {
    fn watch(&self) -> bool {
        self.query.get("watch").is_some_and(|w| w == "true")
    }

    /// A list's first call (one object: [`listwatch`]'s probe before its Init).
    fn probe(&self) -> bool {
        !self.watch() && self.query.get("limit").is_some_and(|l| l == "1")
    }

    /// A page of a list (not the probe), the first or (`continued`) a later one.
    fn page(&self, continued: bool) -> bool {
        !self.watch()
            && self.query.get("limit").is_some_and(|l| l != "1")
            && self.query.contains_key("continue") == continued
    }
}

type Answer = dyn Fn(&Call) -> Reply + Send + Sync;

/// A member over plain HTTP on 127.0.0.1 answering each request with `answer`, and
/// recording it.
struct Fake {
    client: kube::Client,
    calls: Arc<parking_lot::Mutex<Vec<Call>>>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    /// A fake whose client does not retry 429, 503 and 504 itself (kube's
    /// `default_retry`): tests see what the member answers.
    async fn start(answer: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> Fake {
        Fake::start_with(false, answer).await
    }

    async fn start_with(
        retry: bool,
        answer: impl Fn(&Call) -> Reply + Send + Sync + 'static,
    ) -> Fake {
        use futures::StreamExt;
        use http_body_util::BodyExt;
        type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let answer: Arc<Answer> = Arc::new(answer);
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (answer, recorded) = (answer.clone(), recorded.clone());
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let call = Call {
                        path: req.uri().path().to_string(),
                        query: form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                            .into_owned()
                            .collect(),
                    };
                    recorded.lock().push(call.clone());
                    let reply = answer(&call);
                    async move {
                        let (code, body): (u16, Body) = match reply {
                            Reply::Json(code, v) => {
                                (code, Full::new(Bytes::from(v.to_string())).boxed())
                            }
                            Reply::Events(events) => {
                                let lines = events.into_iter().map(|e| {
                                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                        Bytes::from(format!("{e}\n")),
                                    ))
                                });
                                let stream =
                                    futures::stream::iter(lines).chain(futures::stream::pending());
                                (200, BodyExt::boxed(http_body_util::StreamBody::new(stream)))
                            }
                            Reply::Hang => futures::future::pending().await,
                        };
                        http::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(body)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        let mut cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
        cfg.default_retry = retry;
        Fake {
            client: kube::Client::try_from(cfg).unwrap(),
            calls,
            task,
        }
    }

    /// The requests that `what` matches.
    fn count(&self, what: impl Fn(&Call) -> bool) -> usize {
        self.calls.lock().iter().filter(|c| what(c)).count()
    }
}

/// A ConfigMap in namespace `default` (as a list item: no type fields).
fn configmap(name: &str, rv: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}})
}

/// A list at `rv`, with `items`, continued by `next`.
fn list_of(rv: &str, items: Vec<Value>, next: Option<&str>) -> Value {
    json!({
        "kind": "List", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv, "continue": next.unwrap_or("")},
        "items": items,
    })
}

/// The answer of a member serving `discovery` and, for every type, a list of `items`
/// at resourceVersion 10 and a watch that stays silent.
fn serving(
    discovery: BTreeMap<&'static str, (u16, Value)>,
    items: Vec<Value>,
) -> impl Fn(&Call) -> Reply + Send + Sync + 'static {
    move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if call.watch() {
            Reply::Events(Vec::new())
        } else {
            Reply::Json(200, list_of("10", items.clone(), None))
        }
    }
}

fn synchro_of(
    cluster: &str,
    spec: &str,
    client: &kube::Client,
    store: &Store,
    metrics: &IndexerMetrics,
    lists: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Synchro {
    Synchro {
        cluster: cluster.into(),
        spec: parse_all(&[spec]).unwrap().remove(0),
        client: client.clone(),
        store: store.clone(),
        metrics: metrics.clone(),
        health: Health::new(metrics.clone()),
        lists: lists.clone(),
        positions: Positions::default(),
        stop: stop.clone(),
    }
}

fn labels(cluster: &str, resource: &str) -> TypeLabels {
    TypeLabels {
        cluster: cluster.into(),
        resource: resource.into(),
    }
}

/// The four types of [`lists_a_member_keeps_failing_do_not_hold_back_the_others`].
const FOUR: [&str; 4] = [
    "v1/configmaps",
    "v1/services",
    "v1/secrets:metadata",
    "v1/namespaces",
];

fn four_types() -> BTreeMap<&'static str, (u16, Value)> {
    core_discovery(&[
        ("configmaps", "ConfigMap", true),
        ("services", "Service", true),
        ("secrets", "Secret", true),
        ("namespaces", "Namespace", false),
    ])
}

/// Runs the indexer over member `a` (its four types), then adds member `b` (serving
/// ConfigMap `in-b`), and waits until `b`'s ConfigMap is indexed while `a` goes on
/// failing; `a_failing` says when `a`'s failures have taken every list permit. Then
/// counts `a`'s calls that `asked` matches over the next two minutes.
async fn b_is_indexed_while_a_fails(
    a: &Fake,
    a_failing: impl Fn(&Fake) -> bool,
    asked: impl Fn(&Call) -> bool,
) -> usize {
    let b = Fake::start(serving(
        core_discovery(&[("configmaps", "ConfigMap", true)]),
        vec![configmap("in-b", "5")],
    ))
    .await;
    let (store, _dir) = store().await;
    let registered: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
    let (tx, rx) = watch::channel(Fleet {
        ready: BTreeMap::from([("a".to_string(), member(&a.client))]),
        registered: registered.clone(),
    });
    let metrics = IndexerMetrics::default();
    let stop = CancellationToken::new();
    let indexer = tokio::spawn(run(
        store.clone(),
        parse_all(&FOUR).unwrap(),
        rx,
        metrics.clone(),
        Positions::default(),
        stop.clone(),
    ));
    within("a's four lists are failing", LONG, || async {
        a_failing(a)
    })
    .await;
    tx.send(Fleet {
        ready: BTreeMap::from([
            ("a".to_string(), member(&a.client)),
            ("b".to_string(), member(&b.client)),
        ]),
        registered,
    })
    .unwrap();
    let configmaps = gvr("", "v1", "configmaps");
    within("b's ConfigMap indexed while a fails", LONG, || async {
        store
            .versions("b", &configmaps)
            .await
            .is_ok_and(|v| v.get("default", "in-b").is_some())
    })
    .await;
    let before = a.count(&asked);
    tokio::time::sleep(Duration::from_secs(120)).await;
    let asked = a.count(&asked) - before;
    stop.cancel();
    tokio::time::timeout(DEADLINE, indexer)
        .await
        .expect("the indexer stops")
        .unwrap();
    assert_eq!(metrics.listing.get(), 0);
    asked
}

#[tokio::test(start_paused = true)]
/// A watch whose member sends its headers and then nothing, for good (a connection
/// that died silently: kube's client has no read timeout), is dropped once it has been
/// silent past its timeoutSeconds and a margin, and opened again: what the next watch
/// brings is indexed.
async fn a_silent_watch_is_dropped_and_opened_again() {
    let discovery = core_discovery(&[("configmaps", "ConfigMap", true)]);
    let watches = Arc::new(AtomicUsize::new(0));
    let w = watches.clone();
    let a = Fake::start(move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if call.watch() {
            // the first watch goes silent, the next brings an object
            if w.fetch_add(1, Ordering::SeqCst) == 0 {
                Reply::Events(Vec::new())
            } else {
                let late = json!({"type": "ADDED", "object": {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "late", "namespace": "default", "resourceVersion": "11"},
                }});
                Reply::Events(vec![late])
            }
        } else {
            Reply::Json(200, list_of("10", vec![configmap("early", "5")], None))
        }
    })
    .await;
    let (store, _dir) = store().await;
    let metrics = IndexerMetrics::default();
    let lists = Arc::new(Semaphore::new(synchro::LISTS));
    let stop = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(
        synchro_of(
            "a",
            "v1/configmaps",
            &a.client,
            &store,
            &metrics,
            &lists,
            &stop,
        )
        .run(),
    );
    let configmaps = gvr("", "v1", "configmaps");
    within("the listed ConfigMap indexed", LONG, || async {
        store
            .versions("a", &configmaps)
            .await
            .is_ok_and(|v| v.get("default", "early").is_some())
    })
    .await;
    within("the watched ConfigMap indexed", LONG, || async {
        store
            .versions("a", &configmaps)
            .await
            .is_ok_and(|v| v.get("default", "late").is_some())
    })
    .await;
    let waited = Instant::now() - started;
    assert!(
        waited >= Duration::from_secs(290) && waited < Duration::from_secs(400),
        "{waited:?}"
    );
    // opened again from where it was: no relist
    assert_eq!(a.count(|c| c.page(false)), 1);
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
/// A member whose list pages never answer (after the list's first call did) does not
/// hold the indexer's list permits: each page fails after a minute, gives its permit
/// back and waits out a backoff; `b`, added after `a`'s four types took the four
/// permits, is indexed.
async fn list_pages_that_never_answer_give_their_permits_back() {
    let discovery = four_types();
    let a = Fake::start(move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if call.probe() {
            Reply::Json(200, list_of("10", Vec::new(), Some("more")))
        } else {
            Reply::Hang
        }
    })
    .await;
    let failing = |a: &Fake| a.count(|c| c.page(false)) >= synchro::LISTS;
    let asked = b_is_indexed_while_a_fails(&a, failing, |c| c.page(false)).await;
    // a's pages are asked again (after their timeout and a backoff)
    assert!(
        (synchro::LISTS..=3 * synchro::LISTS).contains(&asked),
        "{asked} pages in 2 min"
    );
}

#[tokio::test(start_paused = true)]
/// A list whose continue token has expired (410 on its second page) every time it gets
/// there starts again at once the first time, then after a growing backoff, giving its
/// permit back meanwhile: `b`, added after `a`'s four types took the four permits, is
/// indexed, and `a`'s lists do not go round in a tight loop.
async fn lists_whose_continue_token_keeps_expiring_give_their_permits_back() {
    let discovery = four_types();
    let gone = AtomicUsize::new(0);
    let a = Fake::start(move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if call.page(true) {
            // (a list going round in a tight loop keeps paused time from moving: past
            // a bound the member stops answering, and the test fails instead of
            // spinning)
            if gone.fetch_add(1, Ordering::SeqCst) < 1_000 {
                Reply::Json(410, status(410))
            } else {
                Reply::Hang
            }
        } else {
            Reply::Json(200, list_of("10", vec![configmap("x", "5")], Some("more")))
        }
    })
    .await;
    let failing = |a: &Fake| a.count(|c| c.page(true)) >= 2 * synchro::LISTS;
    let asked = b_is_indexed_while_a_fails(&a, failing, |c| c.page(true)).await;
    // each type at most every 30 s once its backoff has grown
    assert!(
        (1..=15 * synchro::LISTS).contains(&asked),
        "{asked} lists in 2 min"
    );
}

/// A Status of 504 `ResourceVersionTooLarge`, as kube-apiserver answers a watch from a
/// resourceVersion it has not reached (its etcd restored from an older backup).
fn too_large() -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Timeout: Too large resource version: 20, current: 10",
        "reason": "Timeout", "code": 504,
        "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1},
    })
}

#[tokio::test(start_paused = true)]
/// A watch from a resourceVersion the member has not reached (504
/// `ResourceVersionTooLarge`: its etcd restored from an older backup) relists at once,
/// as client-go does: resuming once the member got there would skip what happened
/// since its restore point. The list's ConfigMap, changed meanwhile, is indexed again.
/// kube's client retries a 504 itself (`default_retry`, on in the members' clients)
/// for longer than a watch may take to open: then the relist comes as for a watch that
/// keeps failing, within a few minutes.
async fn a_watch_ahead_of_the_member_relists() {
    for (retry, deadline) in [(false, DEADLINE), (true, Duration::from_secs(300))] {
        let discovery = core_discovery(&[("configmaps", "ConfigMap", true)]);
        let lists = Arc::new(AtomicUsize::new(0));
        let l = lists.clone();
        let a = Fake::start_with(retry, move |call| {
            if let Some((code, body)) = discovery.get(call.path.as_str()) {
                Reply::Json(*code, body.clone())
            } else if call.watch() {
                Reply::Json(504, too_large())
            } else {
                // each full list sees a newer version of the ConfigMap
                let n = if call.page(false) {
                    l.fetch_add(1, Ordering::SeqCst) + 1
                } else {
                    l.load(Ordering::SeqCst)
                };
                let items = vec![configmap("c", &n.to_string())];
                Reply::Json(200, list_of("10", items, None))
            }
        })
        .await;
        let (store, _dir) = store().await;
        let metrics = IndexerMetrics::default();
        let permits = Arc::new(Semaphore::new(synchro::LISTS));
        let stop = CancellationToken::new();
        let synchro = synchro_of(
            "a",
            "v1/configmaps",
            &a.client,
            &store,
            &metrics,
            &permits,
            &stop,
        );
        let task = tokio::spawn(synchro.run());
        let configmaps = gvr("", "v1", "configmaps");
        within("relisted after the watch was ahead", deadline, || async {
            store
                .versions("a", &configmaps)
                .await
                .is_ok_and(|v| v.get("default", "c").is_some_and(|rv| rv != "1"))
        })
        .await;
        assert!(lists.load(Ordering::SeqCst) >= 2);
        stop.cancel();
        tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
    }
}

#[tokio::test(start_paused = true)]
/// A watch the member keeps refusing (its RBAC lost `watch`, kept `list`) leaves the
/// synced gauge down while it fails, and relists after failing for a couple of
/// minutes (a relist finds what the watch missed); it is retried with backoff, not in
/// a tight loop.
async fn a_watch_that_keeps_failing_is_not_synced_and_relists() {
    let discovery = core_discovery(&[("configmaps", "ConfigMap", true)]);
    let a = Fake::start(move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if call.watch() {
            Reply::Json(403, status(403))
        } else {
            Reply::Json(200, list_of("10", vec![configmap("c", "5")], None))
        }
    })
    .await;
    let (store, _dir) = store().await;
    let metrics = IndexerMetrics::default();
    let permits = Arc::new(Semaphore::new(synchro::LISTS));
    let stop = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(
        synchro_of(
            "a",
            "v1/configmaps",
            &a.client,
            &store,
            &metrics,
            &permits,
            &stop,
        )
        .run(),
    );
    within("listed, then the watch refused", DEADLINE, || async {
        a.count(|c| c.page(false)) == 1 && a.count(Call::watch) >= 1
    })
    .await;
    within("not synced while the watch fails", DEADLINE, || async {
        metrics.synced.get() == 0
    })
    .await;
    within("relisted", LONG, || async {
        a.count(|c| c.page(false)) >= 2
    })
    .await;
    let waited = Instant::now() - started;
    assert!(
        waited >= Duration::from_secs(120) && waited < Duration::from_secs(240),
        "{waited:?}"
    );
    let watches = a.count(Call::watch);
    assert!((3..30).contains(&watches), "{watches} watches");
    // the relist's watch fails too: down again
    within("not synced after the relist either", DEADLINE, || async {
        metrics.synced.get() == 0 && a.count(Call::watch) > watches
    })
    .await;
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
/// A list the member refuses (403: the indexer's credentials may not list the type) is
/// asked again after a backoff growing to 5 min, not every 2 s; it takes no list
/// permit (every one is held elsewhere here) and is reported per member and type until
/// the member answers, when it is indexed.
async fn a_refused_list_backs_off_and_takes_no_permit() {
    let discovery = core_discovery(&[("configmaps", "ConfigMap", true)]);
    let allowed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok = allowed.clone();
    let a = Fake::start(move |call| {
        if let Some((code, body)) = discovery.get(call.path.as_str()) {
            Reply::Json(*code, body.clone())
        } else if !ok.load(Ordering::SeqCst) {
            Reply::Json(403, status(403))
        } else if call.watch() {
            Reply::Events(Vec::new())
        } else {
            Reply::Json(200, list_of("10", vec![configmap("c", "5")], None))
        }
    })
    .await;
    let (store, _dir) = store().await;
    let metrics = IndexerMetrics::default();
    let permits = Arc::new(Semaphore::new(synchro::LISTS));
    let held = permits
        .clone()
        .acquire_many_owned(synchro::LISTS as u32)
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(
        synchro_of(
            "a",
            "v1/configmaps",
            &a.client,
            &store,
            &metrics,
            &permits,
            &stop,
        )
        .run(),
    );
    let refused = labels("a", "v1/configmaps");
    tokio::time::sleep(Duration::from_secs(600)).await;
    // at 0, 2, 6, 14, 30, 62, 126, 254 and 510 s
    let asked = a.count(|c| !c.watch() && c.path == "/api/v1/configmaps");
    assert!((5..=12).contains(&asked), "{asked} lists in 10 min");
    assert_eq!(metrics.refused.get_or_create(&refused).get(), 1);
    assert_eq!(metrics.listing.get(), 0);
    // the member lets the indexer list: indexed at the next try (at most 5 min on)
    allowed.store(true, Ordering::SeqCst);
    drop(held);
    let configmaps = gvr("", "v1", "configmaps");
    within("indexed once the member answers", LONG, || async {
        store
            .versions("a", &configmaps)
            .await
            .is_ok_and(|v| v.get("default", "c").is_some())
    })
    .await;
    assert_eq!(metrics.synced.get(), 1);
    assert_eq!(metrics.refused.get_or_create(&refused).get(), 0);
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
/// A member whose discovery says for a few seconds that it does not serve a type (an
/// API server restarting, its CRDs not loaded yet) and then serves it again: nothing
/// stored of the type is deleted (it would be, and then re-ingested, were it forgotten
/// at the second "not served").
async fn a_type_unserved_for_a_few_seconds_is_not_forgotten() {
    let widgets = gvr("example.com", "v1", "widgets");
    let (store, _dir) = store().await;
    fill(&store, "a", &widgets, "Widget", 3).await;
    let served = json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
        "resources": [{"name": "widgets", "singularName": "", "namespaced": true,
            "kind": "Widget", "verbs": ["get", "list", "watch"]}],
    });
    let back = Instant::now() + Duration::from_secs(5);
    let a = Fake::start(move |call| {
        if Instant::now() < back {
            Reply::Json(404, status(404))
        } else if call.path == "/apis/example.com/v1" {
            Reply::Json(200, served.clone())
        } else if call.watch() {
            Reply::Events(Vec::new())
        } else {
            // the stored objects, as `fill` stored them (uid too)
            let items = (0..3)
                .map(|i| {
                    let mut o = configmap(&format!("o-{i:05}"), "1");
                    o["metadata"]["uid"] = json!(format!("uid-{i}"));
                    o
                })
                .collect();
            Reply::Json(200, list_of("10", items, None))
        }
    })
    .await;
    let metrics = IndexerMetrics::default();
    let permits = Arc::new(Semaphore::new(synchro::LISTS));
    let stop = CancellationToken::new();
    let task = tokio::spawn(
        synchro_of(
            "a",
            "example.com/v1/widgets",
            &a.client,
            &store,
            &metrics,
            &permits,
            &stop,
        )
        .run(),
    );
    within("listed once served again", LONG, || async {
        metrics.synced.get() == 1
    })
    .await;
    assert!(a.count(|c| c.path == "/apis/example.com/v1") >= 3);
    assert_eq!(metrics.deleted.get(), 0);
    assert_eq!(store.versions("a", &widgets).await.unwrap().len(), 3);
    assert_eq!(metrics.unchanged.get(), 3);
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}

#[tokio::test]
/// A member that left is purged by batches of at most [`crate::store::PURGE_BATCH`]
/// objects, each its own transaction (one delete of a large member would pass the
/// store's statement timeout, and be rolled back every time), and the purge gives way
/// between two batches to a fleet change or a stop, going on at its next run.
async fn a_member_that_left_is_purged_by_batches_and_gives_way() {
    let configmaps = gvr("", "v1", "configmaps");
    let many = crate::store::PURGE_BATCH + 10;
    let (store, _dir) = store().await;
    fill(&store, "gone", &configmaps, "ConfigMap", many).await;
    fill(&store, "kept", &configmaps, "ConfigMap", 3).await;
    let registered: BTreeSet<String> = ["kept".to_string()].into();
    let resources = parse_all(&["v1/configmaps"]).unwrap();
    let metrics = IndexerMetrics::default();
    let mut running = BTreeMap::new();
    let mut purge = Purge::default();
    // interrupted after its first batch: the rest is kept for the next run
    purge
        .run(
            &registered,
            &resources,
            &mut running,
            &store,
            &metrics,
            &|| metrics.purged.get() > 0,
        )
        .await;
    assert_eq!(metrics.purged.get(), crate::store::PURGE_BATCH as u64);
    assert!(purge.pending());
    assert_eq!(store.versions("gone", &configmaps).await.unwrap().len(), 10);
    purge
        .run(
            &registered,
            &resources,
            &mut running,
            &store,
            &metrics,
            &|| false,
        )
        .await;
    assert!(!purge.pending());
    assert_eq!(metrics.purged.get(), many as u64);
    assert!(
        store
            .versions("gone", &configmaps)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.versions("kept", &configmaps).await.unwrap().len(), 3);
    assert_eq!(store.clusters().await.unwrap(), ["kept"]);
}

/// A ConfigMap record of `cluster` in namespace `default`, as the member's JSON.
fn configmap_record(cluster: &str, object: &Value) -> Record {
    Record::from_json(
        cluster,
        &gvr("", "v1", "configmaps"),
        ("v1", "ConfigMap"),
        &object.to_string(),
        false,
    )
    .unwrap()
}

/// The stored objects of `cluster`'s ConfigMaps whose labels match `selector`, by name.
async fn stored_configmaps(
    store: &Store,
    cluster: &str,
    selector: &str,
) -> BTreeMap<String, Value> {
    let params = [
        ("clusters".to_string(), cluster.to_string()),
        ("labelSelector".to_string(), selector.to_string()),
    ];
    let q = crate::query::Query::parse(&params, None).unwrap();
    let page = store
        .search(&gvr("", "v1", "configmaps"), &q, &Default::default())
        .await
        .unwrap();
    page.items
        .into_iter()
        .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), o))
        .collect()
}

#[tokio::test]
/// A member re-created under its name counts resourceVersions from 1 again: a listed
/// object at the resourceVersion stored for the departed member's object of its name,
/// with another uid, is another object, and the relist writes it whole; only what has
/// the stored uid and resourceVersion both is skipped (K.71).
async fn a_relist_writes_an_object_with_another_uid_at_the_stored_version() {
    let item = |name: &str, uid: &str, rv: &str, generation: &str| {
        json!({"metadata": {"name": name, "namespace": "default", "uid": uid,
            "resourceVersion": rv, "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"generation": generation}}, "data": {"k": generation}})
    };
    let (store, _dir) = store().await;
    store
        .upsert(vec![
            configmap_record("a", &item("kept", "u-kept", "5", "old")),
            configmap_record("a", &item("recreated", "u-old", "7", "old")),
        ])
        .await
        .unwrap();
    let a = Fake::start(serving(
        core_discovery(&[("configmaps", "ConfigMap", true)]),
        vec![
            item("kept", "u-kept", "5", "old"),
            item("recreated", "u-new", "7", "new"),
        ],
    ))
    .await;
    let metrics = IndexerMetrics::default();
    let permits = Arc::new(Semaphore::new(synchro::LISTS));
    let stop = CancellationToken::new();
    let task = tokio::spawn(
        synchro_of(
            "a",
            "v1/configmaps",
            &a.client,
            &store,
            &metrics,
            &permits,
            &stop,
        )
        .run(),
    );
    eventually("listed", || async { metrics.synced.get() == 1 }).await;
    assert_eq!(metrics.unchanged.get(), 1);
    assert_eq!(metrics.written.get(), 1);
    assert_eq!(metrics.deleted.get(), 0);
    let new = stored_configmaps(&store, "a", "generation=new").await;
    assert_eq!(new.len(), 1, "{new:?}");
    assert_eq!(new["recreated"]["metadata"]["uid"], "u-new");
    let old = stored_configmaps(&store, "a", "generation=old").await;
    assert_eq!(old.keys().collect::<Vec<_>>(), ["kept"]);
    stop.cancel();
    tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap();
}

#[tokio::test]
/// A member that left, and whose name is registered again (a new Cluster of the name,
/// maybe another physical cluster, not Ready yet) before its purge is done, is still
/// purged whole: what is stored under the name is the departed member's.
async fn a_purge_is_not_cancelled_by_a_new_registration_of_the_name() {
    let configmaps = gvr("", "v1", "configmaps");
    let many = crate::store::PURGE_BATCH + 10;
    let (store, _dir) = store().await;
    fill(&store, "east", &configmaps, "ConfigMap", many).await;
    fill(&store, "kept", &configmaps, "ConfigMap", 3).await;
    let resources = parse_all(&["v1/configmaps"]).unwrap();
    let metrics = IndexerMetrics::default();
    let mut running = BTreeMap::new();
    let mut purge = Purge::default();
    // east left the fleet; its purge gives way after its first batch
    purge.clusters.insert("east".to_string());
    let without: BTreeSet<String> = ["kept".to_string()].into();
    purge
        .run(
            &without,
            &resources,
            &mut running,
            &store,
            &metrics,
            &|| metrics.purged.get() > 0,
        )
        .await;
    assert_eq!(metrics.purged.get(), crate::store::PURGE_BATCH as u64);
    assert!(purge.pending());
    // a new east is registered
    let with: BTreeSet<String> = ["east".to_string(), "kept".to_string()].into();
    purge
        .run(&with, &resources, &mut running, &store, &metrics, &|| false)
        .await;
    assert!(!purge.pending());
    assert_eq!(metrics.purged.get(), many as u64);
    assert!(
        store
            .versions("east", &configmaps)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.versions("kept", &configmaps).await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A member that left is registered again, Ready (another cluster under its name),
/// while its purge is under way: the purge goes on to the end, and then the new
/// member's synchros start: the store holds the new member's objects only.
async fn a_member_registered_again_during_its_purge_is_purged_then_indexed() {
    let configmaps = gvr("", "v1", "configmaps");
    let many = 3 * crate::store::PURGE_BATCH;
    let (store, _dir) = store().await;
    fill(&store, "east", &configmaps, "ConfigMap", many).await;
    let (_server, client) = kubesim_member("east-again").await;
    let east: BTreeSet<String> = ["east".to_string()].into();
    let (tx, rx) = watch::channel(Fleet {
        ready: BTreeMap::new(),
        registered: east.clone(),
    });
    let metrics = IndexerMetrics::default();
    let stop = CancellationToken::new();
    let indexer = tokio::spawn(run(
        store.clone(),
        parse_all(&["v1/configmaps"]).unwrap(),
        rx,
        metrics.clone(),
        Positions::default(),
        stop.clone(),
    ));
    // east is deleted: its purge starts
    tx.send_replace(Fleet::default());
    eventually("the purge started", || async { metrics.purged.get() > 0 }).await;
    tx.send_replace(Fleet {
        ready: BTreeMap::from([("east".to_string(), member(&client))]),
        registered: east,
    });
    eventually("the new east indexed, none of the old east", || async {
        store.versions("east", &configmaps).await.is_ok_and(|v| {
            let names: Vec<&str> = v.iter().map(|(_, name, _)| name).collect();
            !names.is_empty() && names.iter().all(|n| *n == "kube-root-ca.crt")
        })
    })
    .await;
    assert_eq!(metrics.purged.get(), many as u64);
    assert_eq!(metrics.synced.get(), 1);
    stop.cancel();
    tokio::time::timeout(DEADLINE, indexer)
        .await
        .expect("the indexer stops")
        .unwrap();
}

#[tokio::test]
/// The start-up purge of a type no spec covers gives way, between two of its batches,
/// to a fleet change or a stop (a large dropped type would hold the fleet loop), and
/// goes on at the next run.
async fn the_purge_of_a_type_no_spec_covers_gives_way() {
    let widgets = gvr("example.com", "v1", "widgets");
    let configmaps = gvr("", "v1", "configmaps");
    let many = 2 * synchro::BATCH + 100;
    let (store, _dir) = store().await;
    fill(&store, "a", &widgets, "Widget", many).await;
    fill(&store, "a", &configmaps, "ConfigMap", 3).await;
    let registered: BTreeSet<String> = ["a".to_string()].into();
    let resources = parse_all(&["v1/configmaps"]).unwrap();
    let metrics = IndexerMetrics::default();
    let mut running = BTreeMap::new();
    let mut purge = Purge::default();
    purge
        .run(
            &registered,
            &resources,
            &mut running,
            &store,
            &metrics,
            &|| metrics.purged.get() > 0,
        )
        .await;
    assert_eq!(metrics.purged.get(), synchro::BATCH as u64);
    assert!(purge.pending());
    assert_eq!(
        store.versions("a", &widgets).await.unwrap().len(),
        many - synchro::BATCH
    );
    purge
        .run(
            &registered,
            &resources,
            &mut running,
            &store,
            &metrics,
            &|| false,
        )
        .await;
    assert!(!purge.pending());
    assert_eq!(metrics.purged.get(), many as u64);
    assert!(store.versions("a", &widgets).await.unwrap().is_empty());
    assert_eq!(store.versions("a", &configmaps).await.unwrap().len(), 3);
    assert_eq!(store.clusters().await.unwrap(), ["a"]);
}
