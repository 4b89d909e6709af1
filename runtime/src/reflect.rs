//! Watched caches: a kube-runtime reflector per resource, shared by any number of
//! reconcile loops, each woken through its own [`Wake`] with what changed ([`Dirty`]:
//! the keys of the changed objects, or "everything"). A loop then recomputes its
//! desired state from the caches (level-based), so a missed or merged event loses
//! nothing.

use std::collections::HashSet;
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

/// What a loop reconciles one unit of, e.g. `(namespace, service)`.
pub type Key = (String, String);

/// The key an object's change marks dirty; None asks for a full round.
pub type KeyOf<K> = fn(&K) -> Option<Key>;

/// What changed since a loop's last round.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Recompute everything (first round, resync, a change not tied to one key).
    pub full: bool,
    /// The keys whose objects changed.
    pub keys: HashSet<Key>,
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
    pub fn filter_by<K>(&self, items: Vec<Arc<K>>, key_of: KeyOf<K>) -> Vec<Arc<K>> {
        if self.full {
            return items;
        }
        items
            .into_iter()
            .filter(|o| key_of(o.as_ref()).is_some_and(|k| self.keys.contains(&k)))
            .collect()
    }
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

    fn mark(&self, key: Option<Key>) {
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

    /// Ends a reconcile round: a round with failed writes makes the next one full;
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
pub struct Reflector<K: Resource + Clone + 'static>
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

impl<K> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// Starts a reflector for `api` (managedFields dropped: nothing here reads them).
    /// With `key_of`, a change wakes subscribers for that object's key only (a full
    /// round when it has none); without, every change asks for a full round.
    pub fn start(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        key_of: Option<KeyOf<K>>,
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
                            let key = match (&ev, key_of) {
                                (watcher::Event::Apply(o) | watcher::Event::Delete(o), Some(key_of)) => key_of(o),
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
        Reflector {
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

/// Starts a reflector for `api` read by one loop, woken through `wake` (see
/// [`Reflector::start`] for `key_of`).
pub fn cache<K>(
    api: Api<K>,
    cfg: watcher::Config,
    wake: Arc<Wake>,
    stop: CancellationToken,
    what: &'static str,
    key_of: Option<KeyOf<K>>,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    Reflector::start(api, cfg, stop, what, key_of).subscribe(wake)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(ns: &str, n: &str) -> Key {
        (ns.into(), n.into())
    }

    #[test]
    fn dirty_keeps_everything_in_a_full_round_and_only_its_keys_otherwise() {
        let items: Vec<Arc<Key>> = vec![Arc::new(k("a", "x")), Arc::new(k("a", "y"))];
        let key_of: KeyOf<Key> = |o| Some(o.clone());
        assert_eq!(Dirty::full().filter_by(items.clone(), key_of).len(), 2);
        let some = Dirty {
            full: false,
            keys: HashSet::from([k("a", "y")]),
        };
        let kept = some.filter_by(items, key_of);
        assert_eq!(kept.len(), 1);
        assert_eq!(*kept[0], k("a", "y"));
    }

    #[tokio::test]
    async fn a_wake_starts_full_then_reports_marked_keys_once() {
        let stop = CancellationToken::new();
        let w = Wake::new();
        let first = w
            .next_round(&stop, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert!(first.full);
        w.mark(Some(k("ns", "svc")));
        w.mark(Some(k("ns", "svc")));
        let second = w
            .next_round(&stop, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert!(!second.full);
        assert_eq!(second.keys, HashSet::from([k("ns", "svc")]));
        // a failed round asks for a full one
        w.mark_full();
        assert!(
            w.next_round(&stop, Duration::from_secs(60), Duration::ZERO)
                .await
                .unwrap()
                .full
        );
        stop.cancel();
        assert!(
            w.next_round(&stop, Duration::from_secs(60), Duration::ZERO)
                .await
                .is_none()
        );
    }
}
