//! Watches through kube-runtime's watcher (list+watch and streaming lists),
//! bookmarks, and 410 Gone for compacted resourceVersions.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::helpers::*;

type Next = Result<Event<ConfigMap>, watcher::Error>;

/// The next watcher event that is not about the namespace's kube-root-ca.crt (the
/// cluster's own, there before the test's objects).
async fn next<S: Stream<Item = Next> + Unpin>(s: &mut S) -> Next {
    loop {
        let e = within("the next watcher event", s.next())
            .await
            .expect("the watcher stream does not end");
        let root_ca = matches!(&e, Ok(Event::InitApply(c) | Event::Apply(c) | Event::Delete(c)) if name(c) == ROOT_CA);
        if !root_ca {
            return e;
        }
    }
}

async fn next_ok<S: Stream<Item = Next> + Unpin>(s: &mut S) -> Event<ConfigMap> {
    next(s).await.expect("no watcher error")
}

fn name(c: &ConfigMap) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

/// Describes an event as `Kind(name)` for assertions.
fn describe(e: &Event<ConfigMap>) -> String {
    match e {
        Event::Init => "Init".into(),
        Event::InitApply(c) => format!("InitApply({})", name(c)),
        Event::InitDone => "InitDone".into(),
        Event::Apply(c) => format!("Apply({})", name(c)),
        Event::Delete(c) => format!("Delete({})", name(c)),
    }
}

async fn expect_events<S: Stream<Item = Next> + Unpin>(s: &mut S, want: &[&str]) {
    for w in want {
        let got = describe(&next_ok(s).await);
        assert_eq!(&got, w, "watcher events out of order");
    }
}

async fn check_watcher(cfg: watcher::Config) {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    api.create(&pp, &cm("before", json!({}), json!({})))
        .await
        .unwrap();
    let mut s = watch_stream(api.clone(), cfg).boxed();
    expect_events(&mut s, &["Init", "InitApply(before)", "InitDone"]).await;

    api.create(&pp, &cm("after", json!({}), json!({"v": "1"})))
        .await
        .unwrap();
    expect_events(&mut s, &["Apply(after)"]).await;

    let mut c = api.get("after").await.unwrap();
    c.data = Some([("v".to_string(), "2".to_string())].into());
    api.replace("after", &pp, &c).await.unwrap();
    match next_ok(&mut s).await {
        Event::Apply(c) => assert_eq!(c.data.unwrap()["v"], "2"),
        other => panic!("expected Apply(after), got {}", describe(&other)),
    }
    // objects of another namespace are not part of this watch
    namespace(&env.client, "other").await;
    Api::<ConfigMap>::namespaced(env.client.clone(), "other")
        .create(&pp, &cm("elsewhere", json!({}), json!({})))
        .await
        .unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    expect_events(&mut s, &["Delete(before)"]).await;
}

fn watch_stream(api: Api<ConfigMap>, cfg: watcher::Config) -> impl Stream<Item = Next> + Send {
    kube::runtime::watcher(api, cfg)
}

#[tokio::test]
async fn watcher_with_list_then_watch() {
    check_watcher(watcher::Config::default()).await;
}

#[tokio::test]
async fn watcher_with_streaming_lists() {
    check_watcher(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for n in ["a", "b"] {
        api.create(&PostParams::default(), &cm(n, json!({}), json!({})))
            .await
            .unwrap();
    }
    let current = env.server.resource_version();
    let mut s = api
        .watch(&WatchParams::streaming_lists().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    loop {
        match within("initial events", s.next()).await.unwrap().unwrap() {
            WatchEvent::Added(c) => added.push(name(&c)),
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true"),
                    "the first bookmark of a streaming list marks the initial-events end"
                );
                let rv: u64 = b.metadata.resource_version.parse().unwrap();
                assert!(rv >= current, "bookmark rv {rv} < {current}");
                break;
            }
            other => panic!("unexpected event before the initial-events end: {other:?}"),
        }
    }
    assert_eq!(own(added), vec!["a", "b"]);
}

#[tokio::test]
async fn bookmarks_arrive_and_carry_the_latest_resource_version() {
    let mut cfg = kubesim::Config::new("t");
    cfg.bookmark_interval = Duration::from_millis(100);
    let env = start_with(cfg).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let start_rv = env.server.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &start_rv)
        .await
        .unwrap()
        .boxed();
    // a write to another resource moves the global resourceVersion
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    let sec = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap(),
        )
        .await
        .unwrap();
    let written: u64 = sec.metadata.resource_version.unwrap().parse().unwrap();
    loop {
        match within("a bookmark", s.next()).await.unwrap().unwrap() {
            WatchEvent::Bookmark(b) => {
                assert_eq!(b.types.kind, "ConfigMap");
                let rv: u64 = b.metadata.resource_version.parse().unwrap();
                if rv >= written {
                    break;
                }
            }
            other => panic!("only bookmarks expected, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn watch_without_bookmarks_gets_none() {
    let mut cfg = kubesim::Config::new("t");
    cfg.bookmark_interval = Duration::from_millis(50);
    let env = start_with(cfg).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let rv = env.server.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    // the server ends the watch after timeoutSeconds; nothing may come before that
    let got = within("the watch to time out", s.next()).await;
    assert!(got.is_none(), "unexpected event: {got:?}");
}

/// A small history, a watcher whose watch restarts every second, and writes elsewhere
/// that push its resourceVersion out of the window.
fn compacting_config() -> kubesim::Config {
    let mut cfg = kubesim::Config::new("t");
    cfg.history_limit = 5;
    cfg.bookmark_interval = Duration::from_millis(100);
    cfg
}

async fn churn_elsewhere(client: &kube::Client, n: usize) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..n {
        api.create(
            &PostParams::default(),
            &cm(&format!("churn-{i}"), json!({}), json!({})),
        )
        .await
        .unwrap();
    }
}

/// Open watch streams, from the server's `/metrics`.
async fn open_watches(client: &kube::Client) -> u64 {
    let r = raw(client, "GET", "/metrics", None, vec![]).await;
    let text = r.body.as_str().expect("metrics are text").to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("apiserver_registered_watchers "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the watchers gauge")
}

/// Polls a watcher in a task (as a controller would), forwarding its events.
fn drive(
    api: Api<ConfigMap>,
    cfg: watcher::Config,
) -> (
    futures::channel::mpsc::UnboundedReceiver<Next>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let task = tokio::spawn(async move {
        let mut s = watch_stream(api, cfg).boxed();
        while let Some(e) = s.next().await {
            if tx.unbounded_send(e).is_err() {
                return;
            }
        }
    });
    (rx, task)
}

/// Starts a driven watcher on `watched`, waits until its watch is open, then writes
/// more events elsewhere than the history keeps, and waits for the watch to restart.
async fn watcher_through_compaction(
    env: &Env,
    cfg: watcher::Config,
) -> (
    Api<ConfigMap>,
    futures::channel::mpsc::UnboundedReceiver<Next>,
    tokio::task::JoinHandle<()>,
    String,
) {
    let client = env.client.clone();
    namespace(&client, "watched").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "watched");
    api.create(&PostParams::default(), &cm("first", json!({}), json!({})))
        .await
        .unwrap();
    let listed_at = env.server.resource_version().to_string();
    let (mut rx, task) = drive(api.clone(), cfg.timeout(1));
    expect_events(&mut rx, &["Init", "InitApply(first)", "InitDone"]).await;
    eventually("the watcher's watch is open", || async {
        (open_watches(&client).await == 1).then_some(())
    })
    .await;
    churn_elsewhere(&client, 20).await;
    (api, rx, task, listed_at)
}

#[tokio::test]
async fn too_old_resource_version_is_410_and_the_watcher_relists() {
    let env = start_with(compacting_config()).await;
    let (api, mut rx, task, old_rv) =
        watcher_through_compaction(&env, watcher::Config::default().disable_bookmarks()).await;

    // a raw watch from the compacted version answers an ERROR event with 410
    let mut raw = api
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed();
    match within("the 410 event", raw.next()).await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    // and so does a list at that exact version
    let e = api
        .list(
            &kube::api::ListParams::default()
                .at(&old_rv)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 410);

    // without bookmarks, the watcher's restarted watch resumes from its old version,
    // gets 410, and relists
    match next(&mut rx).await {
        Err(watcher::Error::WatchError(e)) => assert_eq!(e.code, 410),
        other => panic!(
            "expected the watcher to report 410, got {:?}",
            other.map(|e| describe(&e))
        ),
    }
    expect_events(&mut rx, &["Init", "InitApply(first)", "InitDone"]).await;
    api.create(&PostParams::default(), &cm("later", json!({}), json!({})))
        .await
        .unwrap();
    expect_events(&mut rx, &["Apply(later)"]).await;
    task.abort();
}

#[tokio::test]
async fn bookmarks_keep_a_watcher_from_relisting_after_compaction() {
    let env = start_with(compacting_config()).await;
    let (api, mut rx, task, _) = watcher_through_compaction(&env, watcher::Config::default()).await;
    // past the watch's 1 s timeout: the watcher resumed from a bookmark's version
    tokio::time::sleep(Duration::from_millis(1200)).await;
    api.create(&PostParams::default(), &cm("later", json!({}), json!({})))
        .await
        .unwrap();
    expect_events(&mut rx, &["Apply(later)"]).await;
    task.abort();
}

/// Removing the last finalizer of an object being deleted removes it: watchers see one
/// DELETED event, of the object as it was (its finalizer listed), and no MODIFIED event
/// of a state "being deleted, no finalizers left" (kube-apiserver's registry store
/// aborts that update, `errEmptiedFinalizers`, and deletes).
#[tokio::test]
async fn removing_the_last_finalizer_is_one_deleted_event() {
    use kube::api::{Patch, PatchParams};
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let rv = env.server.resource_version().to_string();
    let mut s = api
        .watch(&WatchParams::default().disable_bookmarks().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let mut events = Vec::new();
    while let Some(e) = within("the watch to end", s.next()).await {
        events.push(e.unwrap());
    }
    match events.as_slice() {
        [WatchEvent::Deleted(c)] => {
            assert_eq!(name(c), "held");
            assert_eq!(
                c.metadata.finalizers.as_deref(),
                Some(&["example.com/hold".to_string()][..])
            );
        }
        other => panic!("one DELETED event expected, got {other:?}"),
    }
}
