//! Watched caches: a kube-runtime reflector per resource, and one `Notify` that wakes
//! the owning reconcile loop on any change. The loop then recomputes its whole desired
//! state from the caches (level-based), so a missed or merged event loses nothing.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A cache several reconcile loops read; each subscriber is woken on every change.
pub struct Shared<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The objects.
    pub store: Store<K>,
    subscribers: Arc<parking_lot::Mutex<Vec<Arc<Notify>>>>,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// One loop's view of a cache.
#[derive(Clone)]
pub struct Cache<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    ready: tokio::sync::watch::Receiver<bool>,
}

impl<K: Resource + Clone + 'static> Cache<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// A snapshot of the cached objects.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// Waits for the initial list. Many loops may wait at once (kube's
    /// `Store::wait_until_ready` wakes only one of several concurrent waiters).
    pub async fn wait_until_ready(&self) -> Result<(), ()> {
        let mut rx = self.ready.clone();
        rx.wait_for(|r| *r).await.map(|_| ()).map_err(|_| ())
    }
}

impl<K> Shared<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Starts a reflector for `api` (managedFields dropped: nothing here reads them).
    pub fn start(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
    ) -> Self {
        let (reader, writer) = reflector::store();
        let subscribers: Arc<parking_lot::Mutex<Vec<Arc<Notify>>>> = Default::default();
        let subs = subscribers.clone();
        let stream = reflector::reflector(
            writer,
            watcher(api, cfg).modify(|o| {
                o.meta_mut().managed_fields = None;
            }),
        )
        .default_backoff();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let r = reader.clone();
        tokio::spawn(async move {
            if r.wait_until_ready().await.is_ok() {
                let _ = ready_tx.send(true);
            }
        });
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    ev = stream.next() => match ev {
                        Some(Ok(_)) => {
                            let mut subs = subs.lock();
                            subs.retain(|n| Arc::strong_count(n) > 1); // loops that ended
                            subs.iter().for_each(|n| n.notify_one());
                        }
                        Some(Err(e)) => tracing::warn!(cache = what, error = %e, "watch failed; retrying with backoff"),
                        None => break,
                    },
                    _ = stop.cancelled() => break,
                }
            }
        });
        Shared {
            store: reader,
            subscribers,
            ready,
        }
    }

    /// Wakes `notify` on every later change (and once now).
    pub fn subscribe(&self, notify: Arc<Notify>) -> Cache<K> {
        notify.notify_one();
        self.subscribers.lock().push(notify);
        Cache {
            store: self.store.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// Starts a reflector for `api`; every applied or deleted object wakes `notify`.
pub fn cache<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    stop: CancellationToken,
    what: &'static str,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    Shared::start(api, cfg, stop, what).subscribe(notify)
}

/// Waits for a wake-up, then lets a burst of events settle for `debounce`.
pub async fn next_round(
    notify: &Notify,
    stop: &CancellationToken,
    resync: Duration,
    debounce: Duration,
) -> bool {
    tokio::select! {
        _ = notify.notified() => {}
        _ = tokio::time::sleep(resync) => {}
        _ = stop.cancelled() => return false,
    }
    tokio::time::sleep(debounce).await;
    !stop.is_cancelled()
}

/// `(namespace, name)` of an object.
pub fn key<K: kube::ResourceExt>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

/// Cached objects by `(namespace, name)`, for O(1) lookups in a reconcile round.
pub fn by_key<K: kube::ResourceExt>(
    items: &[std::sync::Arc<K>],
) -> std::collections::HashMap<(String, String), &std::sync::Arc<K>> {
    items.iter().map(|o| (key(o.as_ref()), o)).collect()
}

/// Cached objects grouped by `(namespace, value of label)`; objects without the label are left out.
pub fn by_label<'a, K: kube::ResourceExt>(
    items: &'a [std::sync::Arc<K>],
    label: &str,
) -> std::collections::HashMap<(String, String), Vec<&'a std::sync::Arc<K>>> {
    let mut m: std::collections::HashMap<(String, String), Vec<&'a std::sync::Arc<K>>> =
        std::collections::HashMap::new();
    for o in items {
        if let Some(v) = o.labels().get(label) {
            m.entry((o.namespace().unwrap_or_default(), v.clone()))
                .or_default()
                .push(o);
        }
    }
    m
}
