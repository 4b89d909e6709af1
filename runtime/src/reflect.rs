//! Watched caches: a kube-runtime reflector per resource, shared by any number of
//! reconcile loops, each woken through its own [`Wake`] with what changed ([`Dirty`]:
//! the keys of the changed objects, or "everything"). A loop then recomputes its
//! desired state from the caches (level-based), so a missed or merged event loses
//! nothing.

use std::collections::{HashMap, HashSet};
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
use tokio::time::Instant;
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

    /// The round in parts of at most `n` keys each, so that a loop builds and writes
    /// its desired state a part at a time and holds one part's objects, not a whole
    /// round's (partial rounds of every key cover what a full round covers, for loops
    /// whose objects all have a key). A full round is split over `keys` (the keys of
    /// every cached object), a partial one over its own keys (during a convergence,
    /// rounds of hundreds of changed keys are the rule); a round with no key is one
    /// empty part.
    pub fn parts(&self, keys: impl IntoIterator<Item = Key>, n: usize) -> Vec<Dirty> {
        let mut keys: Vec<Key> = match self.full {
            true => keys
                .into_iter()
                .collect::<HashSet<_>>()
                .into_iter()
                .collect(),
            false => self.keys.iter().cloned().collect(),
        };
        keys.sort();
        let mut parts: Vec<Dirty> = keys
            .chunks(n.max(1))
            .map(|c| Dirty {
                full: false,
                keys: c.iter().cloned().collect(),
            })
            .collect();
        if parts.is_empty() {
            parts.push(Dirty::default());
        }
        parts
    }
}

/// A count a loop reports (e.g. the services it exports) kept right across partial
/// rounds: each part replaces what its own keys counted, and a full round starts from
/// nothing, so the total is what a full round would count.
#[derive(Debug, Default)]
pub struct PartCount(HashMap<Key, usize>);

impl PartCount {
    /// Starts a round: a full one counts every key again.
    pub fn round(&mut self, dirty: &Dirty) {
        if dirty.full {
            self.0.clear();
        }
    }

    /// What `part`'s keys count now: one for each of `counted` (the keys of what the
    /// part wants), replacing what they counted before.
    pub fn set(&mut self, part: &Dirty, counted: impl IntoIterator<Item = Key>) {
        // the part's keys only: a part is a few keys of a map of every key
        for k in &part.keys {
            self.0.remove(k);
        }
        for k in counted {
            *self.0.entry(k).or_default() += 1;
        }
    }

    /// The count over every key.
    pub fn total(&self) -> usize {
        self.0.values().sum()
    }
}

/// Per-key exponential backoff after failed writes (what kube-runtime's controller
/// does per object): a key whose write failed is retried after `base`, then twice as
/// long each time up to `max`, and forgotten once a round covers it without a failure.
/// A change to a key's objects still wakes its loop at once.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    /// Failing keys: consecutive failures, and when the next retry is due (None once
    /// it has been handed out).
    failing: HashMap<Key, (u32, Option<Instant>)>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(300))
    }
}

impl Backoff {
    /// Retries after `base`, doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failing: HashMap::new(),
        }
    }

    /// The delay before retry number `failures` (1 for the first failure).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(30));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// Records a round: the `failed` keys wait longer; the keys the round covered
    /// (every key in a full one) that did not fail are forgotten.
    pub fn record(&mut self, round: &Dirty, failed: &HashSet<Key>, now: Instant) {
        self.failing
            .retain(|k, _| failed.contains(k) || !(round.full || round.keys.contains(k)));
        for k in failed {
            let n = self.failing.get(k).map_or(0, |f| f.0) + 1;
            let due = now + self.delay(n);
            self.failing.insert(k.clone(), (n, Some(due)));
        }
    }

    /// When the next retry is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.failing.values().filter_map(|f| f.1).min()
    }

    /// The keys whose retry is due at `now` (each handed out once per failure).
    pub fn take_due(&mut self, now: Instant) -> Vec<Key> {
        let mut out = Vec::new();
        for (k, f) in &mut self.failing {
            if f.1.is_some_and(|d| d <= now) {
                f.1 = None;
                out.push(k.clone());
            }
        }
        out
    }

    /// How many keys are failing.
    pub fn failing(&self) -> usize {
        self.failing.len()
    }
}

/// A reconcile loop's wake-up: a Notify plus what changed, and the backoff of the
/// keys whose writes failed.
#[derive(Default)]
pub struct Wake {
    notify: Notify,
    dirty: parking_lot::Mutex<Dirty>,
    backoff: parking_lot::Mutex<Backoff>,
    /// A full round asked for at this time ([`Wake::full_round_at`]).
    at: parking_lot::Mutex<Option<Instant>>,
}

impl Wake {
    /// A wake-up whose first round is a full one.
    pub fn new() -> Arc<Self> {
        Self::with_backoff(Backoff::default())
    }

    /// [`Wake::new`] with a backoff of its own (tests use short ones).
    pub fn with_backoff(backoff: Backoff) -> Arc<Self> {
        let w = Wake {
            backoff: parking_lot::Mutex::new(backoff),
            ..Wake::default()
        };
        w.dirty.lock().full = true;
        w.notify.notify_one();
        Arc::new(w)
    }

    fn mark(&self, key: Option<Key>) {
        self.mark_quietly(key);
        self.notify.notify_one();
    }

    fn mark_quietly(&self, key: Option<Key>) {
        let mut d = self.dirty.lock();
        match key {
            Some(k) if !d.full => {
                d.keys.insert(k);
            }
            Some(_) => {}
            None => d.full = true,
        }
    }

    /// Asks for a full round.
    pub fn mark_full(&self) {
        self.mark(None);
    }

    /// Asks for a full round at `when` (the earliest of the times asked for wins), for
    /// what changes with time rather than with an object: a deadline passing.
    pub fn full_round_at(&self, when: Instant) {
        let mut at = self.at.lock();
        if at.is_none_or(|t| when < t) {
            *at = Some(when);
        }
    }

    /// Ends a reconcile round that covered `round` and whose writes failed for the
    /// `failed` keys: those are retried with per-key backoff (not at once, so a
    /// persistent refusal does not loop hot), the others are forgotten. Then waits for
    /// the next change or due retry (full resync every 60 s). None once `stop` is
    /// cancelled.
    pub async fn after_round(
        &self,
        round: &Dirty,
        failed: &HashSet<Key>,
        stop: &CancellationToken,
    ) -> Option<Dirty> {
        self.record_failures(round, failed);
        self.next_round(stop, Duration::from_secs(60), Duration::from_millis(2))
            .await
    }

    /// The bookkeeping half of [`Wake::after_round`], for loops with their own resync:
    /// the `failed` keys of a round that covered `round` wait for their backoff.
    pub fn record_failures(&self, round: &Dirty, failed: &HashSet<Key>) {
        self.backoff.lock().record(round, failed, Instant::now());
    }

    /// Waits for a change, a due retry (see [`Wake::after_round`]) or `resync` (which
    /// forces a full round), lets a burst settle for `debounce`, and returns what
    /// changed; None once `stop` is cancelled.
    pub async fn next_round(
        &self,
        stop: &CancellationToken,
        resync: Duration,
        debounce: Duration,
    ) -> Option<Dirty> {
        let due = self.backoff.lock().next_due();
        let retry = async {
            match due {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let at = *self.at.lock();
        let timer = async {
            match at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.notify.notified() => {}
            _ = timer => {
                *self.at.lock() = None;
                self.mark_quietly(None);
            }
            _ = retry => {
                for k in self.backoff.lock().take_due(Instant::now()) {
                    self.mark_quietly(Some(k));
                }
            }
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

/// Completes each object as it arrives (before it is cached and keyed).
type Filler<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

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

    /// Whether the initial list has arrived (the cache holds every object).
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
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
        Self::spawn(api, cfg, stop, what, key_of, None, Managed::Drop)
    }

    /// A reflector whose changes ask for a full round only when the changed object
    /// passes `relevant` (e.g. only TLS Secrets matter to a loop that reads Secrets).
    pub fn start_filtered(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        relevant: fn(&K) -> bool,
    ) -> Self {
        Self::spawn(api, cfg, stop, what, None, Some(relevant), Managed::Drop)
    }

    fn spawn(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        key_of: Option<KeyOf<K>>,
        relevant: Option<fn(&K) -> bool>,
        managed: Managed,
    ) -> Self {
        let (reader, writer) = reflector::store();
        Self::spawn_with(
            reader, writer, api, cfg, stop, what, key_of, relevant, None, managed,
        )
    }

    /// [`Reflector::start`], keeping of each object's `managedFields` what `managed` says
    /// (`start` keeps none).
    pub fn start_keeping(
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        key_of: Option<KeyOf<K>>,
        managed: Managed,
    ) -> Self {
        Self::spawn(api, cfg, stop, what, key_of, None, managed)
    }
}

/// What a reflector keeps of `managedFields` ([`Reflector::start_keeping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Managed {
    /// Nothing: nothing here reads them, and they are most of a small object's size.
    Drop,
    /// When the object itself (not a subresource) was last written, by the API
    /// server's clock: one entry with that `time` and nothing else.
    LatestWrite,
    /// The labels and annotations Causeway's own applies hold, as one entry, so that
    /// the shared applier removes one a desired object no longer sets
    /// ([`crate::apply::owned_metadata`], [`crate::apply::ensure_owning`]).
    OwnMetadata,
}

/// `managedFields` reduced to one entry with the time of the latest write of the object
/// itself (entries of a subresource, such as `status`, left out); none when no entry
/// has a time.
fn latest_write(
    fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>> {
    let latest = causeway_crds::federation::selection::last_written(&fields?)?.clone();
    Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
            time: Some(latest),
            ..Default::default()
        },
    ])
}

impl<K> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    #[allow(clippy::too_many_arguments)]
    fn spawn_with(
        reader: Store<K>,
        writer: reflector::store::Writer<K>,
        api: Api<K>,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        key_of: Option<KeyOf<K>>,
        relevant: Option<fn(&K) -> bool>,
        fill: Option<Filler<K>>,
        managed: Managed,
    ) -> Self {
        let subscribers: Arc<parking_lot::Mutex<Vec<Arc<Wake>>>> = Default::default();
        let subs = subscribers.clone();
        let stream = reflector::reflector(
            writer,
            watcher(api, cfg).modify(move |o| {
                let fields = o.meta_mut().managed_fields.take();
                o.meta_mut().managed_fields = match managed {
                    Managed::Drop => None,
                    Managed::LatestWrite => latest_write(fields),
                    Managed::OwnMetadata => crate::apply::owned_metadata(fields),
                };
                if let Some(fill) = &fill {
                    fill(o);
                }
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
                        Some(Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)))
                            if relevant.is_some_and(|r| !r(&o)) => {}
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

impl Reflector<kube::api::DynamicObject> {
    /// Starts a reflector of objects of any kind (`api` made with
    /// `Api::all_with`/`namespaced_with` for `resource`); see [`Reflector::start`].
    pub fn start_dynamic(
        api: Api<kube::api::DynamicObject>,
        resource: kube::api::ApiResource,
        cfg: watcher::Config,
        stop: CancellationToken,
        what: &'static str,
        key_of: Option<KeyOf<kube::api::DynamicObject>>,
    ) -> Self {
        let writer = reflector::store::Writer::new(resource.clone());
        let reader = writer.as_reader();
        // list items come without apiVersion and kind (kube-apiserver sends them only
        // on the list); every cached object gets them, so keys and consumers see them
        let fill: Filler<kube::api::DynamicObject> = Arc::new(move |o| {
            if o.types.is_none() {
                o.types = Some(kube::api::TypeMeta {
                    api_version: resource.api_version.clone(),
                    kind: resource.kind.clone(),
                });
            }
        });
        Self::spawn_with(
            reader,
            writer,
            api,
            cfg,
            stop,
            what,
            key_of,
            None,
            Some(fill),
            Managed::Drop,
        )
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
    cache_keeping(api, cfg, wake, stop, what, key_of, Managed::Drop)
}

/// [`cache`] keeping what `managed` says of `managedFields` (e.g.
/// [`Managed::OwnMetadata`], for a loop whose desired objects may stop setting a label
/// or annotation).
pub fn cache_keeping<K>(
    api: Api<K>,
    cfg: watcher::Config,
    wake: Arc<Wake>,
    stop: CancellationToken,
    what: &'static str,
    key_of: Option<KeyOf<K>>,
    managed: Managed,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    Reflector::start_keeping(api, cfg, stop, what, key_of, managed).subscribe(wake)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_latest_write_of_the_object_itself_is_kept() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
        let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let entry = |manager: &str, time: i64, subresource: Option<&str>| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            time: Some(at(time)),
            subresource: subresource.map(String::from),
            fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                serde_json::json!({"f:spec": {}}),
            )),
            ..ManagedFieldsEntry::default()
        };
        let kept = latest_write(Some(vec![
            entry("kubectl", 40, None),
            entry("causeway", 90, Some("status")),
            entry("gitops", 60, Some("")),
        ]))
        .unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].time, Some(at(60)));
        assert_eq!(
            (kept[0].manager.as_ref(), kept[0].fields_v1.as_ref()),
            (None, None)
        );
        assert_eq!(
            latest_write(Some(vec![entry("causeway", 90, Some("status"))])),
            None
        );
        assert_eq!(latest_write(None), None);
    }

    fn k(ns: &str, n: &str) -> Key {
        (ns.into(), n.into())
    }

    /// A partial round changes only its keys' share of the count; a full round counts
    /// from nothing (what disappeared is no longer counted).
    #[test]
    fn a_part_count_is_what_a_full_round_would_count() {
        let mut c = PartCount::default();
        let full = Dirty::full();
        c.round(&full);
        for part in full.parts([k("a", "x"), k("a", "y"), k("b", "z")], 2) {
            let counted: Vec<Key> = part.keys.iter().cloned().collect();
            c.set(&part, counted);
        }
        assert_eq!(c.total(), 3);
        // y no longer counts, x now counts twice (two objects of one service)
        let partial = Dirty {
            full: false,
            keys: HashSet::from([k("a", "x"), k("a", "y")]),
        };
        c.round(&partial);
        for part in partial.parts([], 10) {
            c.set(&part, [k("a", "x"), k("a", "x")]);
        }
        assert_eq!(c.total(), 3, "z once, x twice");
        // a full round over nothing: nothing counts
        c.round(&full);
        for part in full.parts([], 10) {
            c.set(&part, []);
        }
        assert_eq!(c.total(), 0);
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

    #[test]
    fn a_round_splits_into_parts_of_at_most_n_keys() {
        let keys = [k("a", "x"), k("a", "y"), k("b", "x"), k("a", "x")];
        let some = Dirty {
            full: false,
            keys: HashSet::from([k("a", "y")]),
        };
        let covered = |parts: &[Dirty]| -> Vec<Vec<Key>> {
            parts
                .iter()
                .map(|p| {
                    assert!(!p.full);
                    let mut v: Vec<Key> = p.keys.iter().cloned().collect();
                    v.sort();
                    v
                })
                .collect()
        };
        let table: Vec<(Dirty, usize, Vec<Vec<Key>>)> = vec![
            // every key once, in parts of at most n
            (
                Dirty::full(),
                2,
                vec![vec![k("a", "x"), k("a", "y")], vec![k("b", "x")]],
            ),
            (
                Dirty::full(),
                10,
                vec![vec![k("a", "x"), k("a", "y"), k("b", "x")]],
            ),
            // n = 0 is taken as 1
            (
                Dirty::full(),
                0,
                vec![vec![k("a", "x")], vec![k("a", "y")], vec![k("b", "x")]],
            ),
            // a partial round is split over its own keys, not the cached ones
            (some, 1, vec![vec![k("a", "y")]]),
            (
                Dirty {
                    full: false,
                    keys: HashSet::from([k("b", "x"), k("a", "y"), k("a", "x")]),
                },
                2,
                vec![vec![k("a", "x"), k("a", "y")], vec![k("b", "x")]],
            ),
        ];
        for (round, n, want) in table {
            assert_eq!(covered(&round.parts(keys.clone(), n)), want, "n={n}");
        }
        // a full round over no objects still runs once
        assert_eq!(
            covered(&Dirty::full().parts(Vec::new(), 5)),
            vec![Vec::<Key>::new()]
        );
    }

    #[test]
    fn backoff_doubles_per_key_up_to_the_max_and_forgets_on_success() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<u128> = (1..=6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));

        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let t0 = Instant::now();
        let partial = |keys: &[Key]| Dirty {
            full: false,
            keys: keys.iter().cloned().collect(),
        };
        // "a" fails twice in a row, "b" once
        b.record(
            &partial(&[k("n", "a"), k("n", "b")]),
            &HashSet::from([k("n", "a"), k("n", "b")]),
            t0,
        );
        b.record(&partial(&[k("n", "a")]), &HashSet::from([k("n", "a")]), t0);
        assert_eq!(b.failing(), 2);
        assert_eq!(b.next_due(), Some(t0 + Duration::from_millis(100)));
        assert_eq!(
            b.take_due(t0 + Duration::from_millis(150)),
            vec![k("n", "b")]
        );
        assert!(
            b.take_due(t0 + Duration::from_millis(150)).is_empty(),
            "handed out once"
        );
        assert_eq!(
            b.take_due(t0 + Duration::from_millis(200)),
            vec![k("n", "a")]
        );
        // a round that does not cover "b" keeps it; one that covers it without a
        // failure forgets it; a full round forgets every key that did not fail
        b.record(&partial(&[k("n", "a")]), &HashSet::new(), t0);
        assert_eq!(b.failing(), 1);
        b.record(&Dirty::full(), &HashSet::new(), t0);
        assert_eq!(b.failing(), 0);
        assert_eq!(b.next_due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_key_comes_back_after_its_backoff_not_at_once() {
        let stop = CancellationToken::new();
        let w = Wake::with_backoff(Backoff::new(Duration::from_secs(1), Duration::from_secs(8)));
        let first = w
            .next_round(&stop, Duration::from_secs(600), Duration::ZERO)
            .await
            .unwrap();
        let failed = HashSet::from([k("ns", "svc")]);
        let start = Instant::now();
        let mut waits = Vec::new();
        let mut round = first;
        for _ in 0..4 {
            let next = w.after_round(&round, &failed, &stop).await.unwrap();
            waits.push((Instant::now() - start).as_millis() / 1000);
            assert!(!next.full);
            assert_eq!(next.keys, failed);
            round = next;
        }
        // retried after 1, then 2, 4, 8 s: never in a hot loop
        assert_eq!(waits, [1, 3, 7, 15]);
        // a success forgets it: nothing is due any more (until the 60 s resync)
        let idle = tokio::time::timeout(
            Duration::from_secs(50),
            w.after_round(&round, &HashSet::new(), &stop),
        )
        .await;
        assert!(idle.is_err(), "no retry after a success");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_round_comes_at_the_earliest_time_asked_for() {
        let stop = CancellationToken::new();
        let w = Wake::new();
        w.next_round(&stop, Duration::from_secs(600), Duration::ZERO)
            .await
            .unwrap();
        let start = Instant::now();
        w.full_round_at(start + Duration::from_secs(9));
        w.full_round_at(start + Duration::from_secs(5));
        w.full_round_at(start + Duration::from_secs(7));
        let round = w
            .next_round(&stop, Duration::from_secs(600), Duration::ZERO)
            .await
            .unwrap();
        assert!(round.full);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        // asked for once: the next round waits for the resync
        let round = w
            .next_round(&stop, Duration::from_secs(600), Duration::ZERO)
            .await
            .unwrap();
        assert!(round.full);
        assert_eq!(start.elapsed(), Duration::from_secs(605));
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
