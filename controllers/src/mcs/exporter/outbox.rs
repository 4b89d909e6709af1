//! A Pull member's outbox: the hub namespace its agent may write (its execution
//! namespace `causeway-es-<cluster>`), where the exporter puts the ExportedServices
//! and EndpointSlices that a Push member's exporter writes straight into the Services'
//! namespaces. The hub's relay ([`crate::mcs::relay`]) publishes them from there.
//!
//! An object in hub form (`<namespace>/<name>`) has, in the outbox, the name
//! [`outbox_name`]`(namespace, name)`, the labels [`labels::ORIGIN_NAMESPACE`] and
//! [`labels::OUTBOX`], and the annotation [`annotations::ORIGIN_NAME`]; the two
//! functions here map one form to the other.

use causeway_crds::names::{execution_namespace, outbox_name};
use causeway_crds::well_known::{annotations, labels};
use kube::{Resource, ResourceExt};

/// The label selector of the objects in `cluster`'s outbox.
pub fn selector(cluster: &str) -> String {
    format!("{}={cluster}", labels::OUTBOX)
}

/// Pure: `o` (in hub form) as it is written into the outbox of Cluster `cluster`.
pub fn to_outbox<K: Resource>(mut o: K, cluster: &str) -> K {
    let ns = o.meta().namespace.clone().unwrap_or_default();
    let name = o.meta().name.clone().unwrap_or_default();
    let md = o.meta_mut();
    md.name = Some(outbox_name(&ns, &name));
    md.namespace = Some(execution_namespace(cluster));
    let l = md.labels.get_or_insert_default();
    l.insert(labels::ORIGIN_NAMESPACE.into(), ns);
    l.insert(labels::OUTBOX.into(), cluster.into());
    md.annotations
        .get_or_insert_default()
        .insert(annotations::ORIGIN_NAME.into(), name);
    o
}

/// Pure: an outbox object in hub form (its origin namespace and name, without the
/// outbox's labels and annotation); `None` when it lacks the origin namespace or name.
pub fn from_outbox<K: Resource + Clone>(o: &K) -> Option<K> {
    let ns = o.labels().get(labels::ORIGIN_NAMESPACE)?.clone();
    let name = o.annotations().get(annotations::ORIGIN_NAME)?.clone();
    let mut o = o.clone();
    let md = o.meta_mut();
    md.namespace = Some(ns);
    md.name = Some(name);
    if let Some(l) = md.labels.as_mut() {
        l.remove(labels::ORIGIN_NAMESPACE);
        l.remove(labels::OUTBOX);
    }
    if let Some(a) = md.annotations.as_mut() {
        a.remove(annotations::ORIGIN_NAME);
        if a.is_empty() {
            md.annotations = None;
        }
    }
    Some(o)
}

/// Pure: what the exporter writes into the outbox of Cluster `cluster` for `want`
/// (in hub form); the conditions stay as they are.
pub(super) fn place(want: super::Desired, cluster: &str) -> super::Desired {
    super::Desired {
        exported: want
            .exported
            .into_iter()
            .map(|e| to_outbox(e, cluster))
            .collect(),
        slices: want
            .slices
            .into_iter()
            .map(|s| to_outbox(s, cluster))
            .collect(),
        conditions: want.conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn objects_go_into_the_outbox_and_come_back_the_same() {
        let hub = slice(json!({
            "metadata": {"name": "web-abc.east", "namespace": "demo",
                "labels": {labels::SERVICE_NAME: "web"},
                "annotations": {annotations::EXPORTED_AT: "1"}},
            "addressType": "IPv4", "endpoints": []
        }));
        let out = to_outbox(hub.clone(), "east");
        assert_eq!(out.metadata.namespace.as_deref(), Some("causeway-es-east"));
        assert_eq!(out.name_any(), "demo.web-abc.east");
        assert_eq!(out.labels()[labels::ORIGIN_NAMESPACE], "demo");
        assert_eq!(out.labels()[labels::OUTBOX], "east");
        assert_eq!(out.labels()[labels::SERVICE_NAME], "web");
        assert_eq!(out.annotations()[annotations::ORIGIN_NAME], "web-abc.east");
        assert_eq!(from_outbox(&out), Some(hub));
        // what is not an outbox object has no hub form
        let bare = slice(
            json!({"metadata": {"name": "x", "namespace": "causeway-es-east"},
            "addressType": "IPv4", "endpoints": []}),
        );
        assert_eq!(from_outbox(&bare), None);
        assert_eq!(selector("east"), "causeway.io/outbox=east");
    }
}
