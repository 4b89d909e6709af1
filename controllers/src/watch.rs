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

/// Starts a reflector for `api`; every applied or deleted object wakes `notify`.
pub fn cache<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    stop: CancellationToken,
    what: &'static str,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg)).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(_)) => notify.notify_one(),
                    Some(Err(e)) => tracing::warn!(cache = what, error = %e, "watch failed; retrying with backoff"),
                    None => break,
                },
                _ = stop.cancelled() => break,
            }
        }
    });
    reader
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
