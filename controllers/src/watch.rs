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

/// `(namespace, service)`: the unit the MCS loops reconcile.
pub type ServiceKey = (String, String);

/// What changed since a loop's last round.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Recompute everything (first round, resync, a change not tied to one service).
    pub full: bool,
    /// The services whose objects changed.
    pub keys: std::collections::HashSet<ServiceKey>,
}

impl Dirty {
    /// Everything.
    pub fn full() -> Self {
        Dirty {
            full: true,
            keys: Default::default(),
        }
    }

    /// Keeps the objects this round must look at (all of them in a full round).
    pub fn filter<K: kube::ResourceExt>(&self, items: Vec<Arc<K>>) -> Vec<Arc<K>> {
        if self.full {
            return items;
        }
        items
            .into_iter()
            .filter(|o| service_key(o.as_ref()).is_some_and(|k| self.keys.contains(&k)))
            .collect()
    }
}

/// The service an MCS object belongs to: the MCS or Kubernetes service-name label
/// (EndpointSlices, ExportedServices, derived Services), else its own name.
pub fn service_key<K: kube::ResourceExt>(o: &K) -> Option<ServiceKey> {
    let ns = o.namespace()?;
    let l = o.labels();
    let svc = l
        .get(causeway_crds::well_known::labels::SERVICE_NAME)
        .or_else(|| l.get(causeway_crds::well_known::labels::KUBERNETES_SERVICE_NAME))
        .cloned()
        .unwrap_or_else(|| o.name_any());
    Some((ns, svc))
}

/// A reconcile loop's wake-up: a Notify plus what changed.
#[derive(Default)]
pub struct Wake {
    notify: Notify,
    dirty: parking_lot::Mutex<Dirty>,
}

impl Wake {
    /// A wake-up whose first round is a full one.
    pub fn new() -> Arc<Self> {
        let w = Wake::default();
        w.dirty.lock().full = true;
        w.notify.notify_one();
        Arc::new(w)
    }

    fn mark(&self, key: Option<ServiceKey>) {
        {
            let mut d = self.dirty.lock();
            match key {
                Some(k) if !d.full => {
                    d.keys.insert(k);
                }
                Some(_) => {}
                None => d.full = true,
            }
        }
        self.notify.notify_one();
    }

    /// Asks for a full round (e.g. after errors).
    pub fn mark_full(&self) {
        self.mark(None);
    }

    /// Ends an MCS reconcile round: a round with failed writes makes the next one full;
    /// then waits for the next change (full resync every 60 s). None once `stop` is cancelled.
    pub async fn after_round(&self, errors: usize, stop: &CancellationToken) -> Option<Dirty> {
        if errors > 0 {
            self.mark_full();
        }
        self.next_round(stop, Duration::from_secs(60), Duration::from_millis(2))
            .await
    }

    /// Waits for a change (or `resync`, which forces a full round), lets a burst settle
    /// for `debounce`, and returns what changed; None once `stop` is cancelled.
    pub async fn next_round(
        &self,
        stop: &CancellationToken,
        resync: Duration,
        debounce: Duration,
    ) -> Option<Dirty> {
        tokio::select! {
            _ = self.notify.notified() => {}
            _ = tokio::time::sleep(resync) => self.mark_full(),
            _ = stop.cancelled() => return None,
        }
        tokio::time::sleep(debounce).await;
        if stop.is_cancelled() {
            return None;
        }
        Some(std::mem::take(&mut *self.dirty.lock()))
    }
}

/// A cache several reconcile loops read; each subscriber is woken on every change.
pub struct Shared<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// The objects.
    pub store: Store<K>,
    subscribers: Arc<parking_lot::Mutex<Vec<Arc<Wake>>>>,
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
    /// With `per_service`, a change wakes subscribers for that object's service only;
    /// otherwise every change asks for a full round.
    pub fn start(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        per_service: bool,
    ) -> Self {
        let (reader, writer) = reflector::store();
        let subscribers: Arc<parking_lot::Mutex<Vec<Arc<Wake>>>> = Default::default();
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
                        Some(Ok(ev)) => {
                            let key = match &ev {
                                watcher::Event::Apply(o) | watcher::Event::Delete(o) if per_service => service_key(o),
                                _ => None,
                            };
                            let mut subs = subs.lock();
                            subs.retain(|n| Arc::strong_count(n) > 1); // loops that ended
                            subs.iter().for_each(|n| n.mark(key.clone()));
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

    /// Wakes `wake` on every later change.
    pub fn subscribe(&self, wake: Arc<Wake>) -> Cache<K> {
        self.subscribers.lock().push(wake);
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
    wake: Arc<Wake>,
    stop: CancellationToken,
    what: &'static str,
    per_service: bool,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    Shared::start(api, cfg, stop, what, per_service).subscribe(wake)
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
