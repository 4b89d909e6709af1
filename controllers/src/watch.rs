//! MCS keys over the shared reflectors ([`causeway_runtime::reflect`]): a change wakes
//! the loops for the service it belongs to, and lookups by key or label for a round.

use std::sync::Arc;

use causeway_runtime::reflect::{self, Cache, Dirty, Reflector, Wake};
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// `(namespace, service)`: the unit the MCS loops reconcile.
pub type ServiceKey = reflect::Key;

/// Keeps the objects of the services a round must look at.
pub trait ByService {
    /// Every object in a full round, else those of the dirty services.
    fn filter<K: kube::ResourceExt>(&self, items: Vec<Arc<K>>) -> Vec<Arc<K>>;
}

impl ByService for Dirty {
    fn filter<K: kube::ResourceExt>(&self, items: Vec<Arc<K>>) -> Vec<Arc<K>> {
        self.filter_by(items, service_key::<K>)
    }
}

/// A reflector whose changes mark their service dirty (`per_service`), or ask for a
/// full round.
pub fn shared<K>(
    api: Api<K>,
    cfg: watcher::Config,
    stop: CancellationToken,
    what: &'static str,
    per_service: bool,
) -> Reflector<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    Reflector::start(
        api,
        cfg,
        stop,
        what,
        per_service.then_some(service_key::<K>),
    )
}

/// [`shared`] read by one loop, woken through `wake`.
pub fn cache<K>(
    api: Api<K>,
    cfg: watcher::Config,
    wake: Arc<Wake>,
    stop: CancellationToken,
    what: &'static str,
    per_service: bool,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    shared(api, cfg, stop, what, per_service).subscribe(wake)
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
