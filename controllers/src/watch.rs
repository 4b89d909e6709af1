//! MCS keys over the shared reflectors ([`causeway_runtime::reflect`]): a change wakes
//! the loops for the service it belongs to, and lookups by key or label for a round.

use std::sync::Arc;

#[cfg(doc)]
use causeway_runtime::reflect::Reflector;
use causeway_runtime::reflect::{self, Dirty};

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

/// For [`causeway_runtime::reflect::cache`] and [`Reflector::start`]: a change marks the
/// service of the changed object dirty (without it, every change asks for a full round).
pub fn by_service<K: kube::ResourceExt>() -> Option<reflect::KeyOf<K>> {
    Some(service_key::<K>)
}

/// The service an MCS object belongs to: the MCS or Kubernetes service-name label
/// (EndpointSlices, ExportedServices, derived Services), else its own name; in the
/// namespace the origin-namespace label names (objects in a Pull member's outbox belong
/// to the member's service), else its own.
pub fn service_key<K: kube::ResourceExt>(o: &K) -> Option<ServiceKey> {
    let l = o.labels();
    let ns = match l.get(causeway_crds::well_known::labels::ORIGIN_NAMESPACE) {
        Some(origin) => origin.clone(),
        None => o.namespace()?,
    };
    let svc = l
        .get(causeway_crds::well_known::labels::SERVICE_NAME)
        .or_else(|| l.get(causeway_crds::well_known::labels::KUBERNETES_SERVICE_NAME))
        .cloned()
        .unwrap_or_else(|| o.name_any());
    Some((ns, svc))
}

/// The service of a user's object named after its Service (a ServiceExport, the
/// Service itself): its own namespace and name, whatever labels it carries. A
/// `kubernetes.io/service-name` a user put on a ServiceExport must not move it to
/// another service's rounds (where its own service's would find no export, and
/// withdraw it from the hub).
pub fn own_key<K: kube::ResourceExt>(o: &K) -> Option<ServiceKey> {
    Some(key(o))
}

/// [`own_key`] for [`causeway_runtime::reflect::cache`].
pub fn by_own_name<K: kube::ResourceExt>() -> Option<reflect::KeyOf<K>> {
    Some(own_key::<K>)
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

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_crds::well_known::labels::{
        KUBERNETES_SERVICE_NAME, ORIGIN_NAMESPACE, SERVICE_NAME,
    };
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    fn slice(ns: Option<&str>, labels: &[(&str, &str)]) -> EndpointSlice {
        let mut s = EndpointSlice::default();
        s.metadata.name = Some("s".into());
        s.metadata.namespace = ns.map(Into::into);
        s.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s
    }

    #[test]
    fn service_key_follows_labels_and_the_origin_namespace() {
        let k = |ns: &str, n: &str| Some((ns.to_string(), n.to_string()));
        let table = [
            (slice(Some("demo"), &[]), k("demo", "s")),
            (
                slice(Some("demo"), &[(SERVICE_NAME, "web")]),
                k("demo", "web"),
            ),
            (
                slice(Some("demo"), &[(KUBERNETES_SERVICE_NAME, "api")]),
                k("demo", "api"),
            ),
            // an outbox object belongs to the member's service, not the outbox's
            (
                slice(
                    Some("causeway-es-east"),
                    &[(SERVICE_NAME, "web"), (ORIGIN_NAMESPACE, "demo")],
                ),
                k("demo", "web"),
            ),
            (slice(None, &[(SERVICE_NAME, "web")]), None),
        ];
        for (o, want) in table {
            assert_eq!(service_key(&o), want, "{:?}", o.metadata);
        }
    }
}
