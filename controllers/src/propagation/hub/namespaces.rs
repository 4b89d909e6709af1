//! The namespaces members need. A namespaced template propagated to a member needs its
//! namespace there; without it every apply fails. For each (cluster, namespace) a
//! namespaced binding schedules, the hub makes one Work, `causeway-es-<cluster>/<ns>.namespace`,
//! that creates the namespace if the member lacks it, with the hub Namespace's labels and
//! annotations (Pod Security labels, say), and keeps them as the hub's change. A
//! namespace the member had, or another Work manages, is left as it is (applier/plan.rs).
//!
//! Karmada's namespace sync copies every hub namespace to every member, and deletes
//! the members' with the hub's. Here a namespace goes only where something is
//! propagated into it, and is never deleted by Causeway: the Work keeps its objects on
//! deletion (preserveResourcesOnDeletion), so withdrawing the last workload, a cluster
//! leaving or the hub namespace going leaves the member's namespace, and whatever else
//! it holds, where it is (the applier only unmarks it).
//!
//! Left out: the reserved namespaces and `default` (every cluster has them), a hub
//! Namespace labelled `causeway.io/skip-auto-propagation=true`, one being deleted, one
//! the hub does not have, a cluster that is leaving (its Works are the unjoin's), and a
//! cluster a policy propagates the Namespace itself to (that binding's Work manages it;
//! any Work may take over a namespace made here, plan.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::binding::{ClusterResourceBinding, ResourceBinding};
use causeway_crds::federation::selection::is_reserved_namespace;
use causeway_crds::federation::work::{Manifest, Work, WorkSpec, WorkloadTemplate};
use causeway_crds::names::{execution_namespace, namespace_work_name};
use causeway_crds::well_known::{CAUSEWAY_GROUP, finalizers, labels};
use causeway_runtime::apply;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use super::Ctx;
use crate::propagation::render::{LAST_APPLIED, suspended};

/// The label the API server sets on every Namespace (its own name): never copied.
const METADATA_NAME: &str = "kubernetes.io/metadata.name";

/// Whether the hub's Namespace `ns` is to be created in members: not reserved, not
/// opted out, not being deleted.
fn propagates(ns: &Namespace) -> bool {
    let name = ns.name_any();
    !(is_reserved_namespace(&name)
        || name == "default"
        || ns.metadata.deletion_timestamp.is_some()
        || ns
            .labels()
            .get(labels::SKIP_AUTO_PROPAGATION)
            .map(String::as_str)
            == Some("true"))
}

/// The hub Namespace's labels or annotations that go to the members: not the API
/// server's own, not kubectl's last-applied copy, not Causeway's.
fn copied(map: &BTreeMap<String, String>) -> serde_json::Map<String, Value> {
    map.iter()
        .filter(|(k, _)| {
            let ours = k.split_once('/').is_some_and(|(p, _)| p == CAUSEWAY_GROUP);
            !ours && *k != METADATA_NAME && *k != LAST_APPLIED
        })
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect()
}

/// The Work that creates the hub's Namespace `ns` in `cluster`.
pub(super) fn work(cluster: &str, ns: &Namespace) -> Work {
    let name = ns.name_any();
    let mut member_labels = copied(ns.labels());
    member_labels.insert(labels::AUTO_NAMESPACE.into(), Value::from(name.as_str()));
    let manifest = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": member_labels,
            "annotations": copied(ns.annotations()),
        },
    });
    let mut w = Work::new(
        &namespace_work_name(&name),
        WorkSpec {
            workload: WorkloadTemplate {
                manifests: vec![Manifest(manifest)],
            },
            suspend_dispatching: None,
            preserve_resources_on_deletion: Some(true),
            conflict_resolution: None,
            interpretations: Vec::new(),
        },
    );
    w.metadata = ObjectMeta {
        name: w.metadata.name,
        namespace: Some(execution_namespace(cluster)),
        labels: Some(BTreeMap::from([
            (labels::AUTO_NAMESPACE.to_string(), name),
            (labels::CLUSTER.to_string(), cluster.to_string()),
        ])),
        finalizers: Some(vec![finalizers::WORK.to_string()]),
        ..ObjectMeta::default()
    };
    w
}

/// Pure: the namespace Works wanted, from the bindings the detector wants, the hub's
/// Namespaces and the `members` (registered, not leaving): not for clusters a binding
/// still names that are gone, nor where its dispatching is suspended.
pub(super) fn desired(
    bindings: &[ResourceBinding],
    cluster_bindings: &[ClusterResourceBinding],
    hub: &[Arc<Namespace>],
    members: &BTreeSet<String>,
) -> Vec<Work> {
    // (cluster, namespace) pairs a policy propagates the Namespace itself to
    let explicit: BTreeSet<(&str, &str)> = cluster_bindings
        .iter()
        .filter(|b| b.spec.resource.api_version == "v1" && b.spec.resource.kind == "Namespace")
        .flat_map(|b| {
            b.spec
                .clusters
                .iter()
                .map(|c| (c.name.as_str(), b.spec.resource.name.as_str()))
        })
        .collect();
    let by_name: HashMap<String, &Arc<Namespace>> = hub.iter().map(|n| (n.name_any(), n)).collect();
    let mut wanted: BTreeSet<(&str, &str)> = BTreeSet::new();
    for b in bindings {
        let Some(ns) = b.spec.resource.namespace.as_deref() else {
            continue;
        };
        for c in &b.spec.clusters {
            let pair = (c.name.as_str(), ns);
            if members.contains(&c.name)
                && !explicit.contains(&pair)
                && !suspended(&b.spec, &c.name)
            {
                wanted.insert(pair);
            }
        }
    }
    wanted
        .into_iter()
        .filter_map(|(cluster, ns)| {
            let hub_ns = by_name.get(ns).filter(|n| propagates(n))?;
            Some(work(cluster, hub_ns))
        })
        .collect()
}

/// A Work's (namespace, name).
/// Pure: the namespace Works to delete, of `actual`, when `want` are wanted: those not
/// wanted, not already being deleted, and not a `leaving` cluster's (the unjoin's to
/// handle); none unless every template kind is `listed` (a kind not listed yet has no
/// bindings in `want`, so its namespaces are not unwanted).
fn unwanted(
    want: &[Work],
    actual: &[Arc<Work>],
    leaving: &BTreeSet<String>,
    listed: bool,
) -> Vec<(String, String)> {
    if !listed {
        return Vec::new();
    }
    let kept: BTreeSet<(String, String)> = want.iter().map(crate::watch::key).collect();
    actual
        .iter()
        .filter(|w| {
            let cluster = w.labels().get(labels::CLUSTER).cloned().unwrap_or_default();
            !kept.contains(&crate::watch::key(w.as_ref()))
                && w.metadata.deletion_timestamp.is_none()
                && !leaving.contains(&cluster)
        })
        .map(|w| crate::watch::key(w.as_ref()))
        .collect()
}

impl Ctx<'_> {
    /// Applies the namespace Works wanted and deletes the [`unwanted`] ones (the
    /// applier keeps their namespaces in the members).
    pub(super) async fn namespaces(
        &mut self,
        want: &[Work],
        actual: &[Arc<Work>],
        leaving: &BTreeSet<String>,
        listed: bool,
    ) {
        let current = crate::watch::by_key(actual);
        for w in want {
            let k = crate::watch::key(w);
            let now = current.get(&k).map(|w| w.as_ref());
            if now.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
                continue; // being removed; made again once it is gone
            }
            let api = Api::<Work>::namespaced(self.hub.clone(), &k.0);
            let r = self.memos.namespace_works.ensure(&api, w, now).await;
            self.failures.check(k, r);
        }
        for k in unwanted(want, actual, leaving, listed) {
            let api = Api::<Work>::namespaced(self.hub.clone(), &k.0);
            let r = apply::remove(&api, &k.1)
                .await
                .map(|_| apply::Outcome::Written);
            self.failures.check(k, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rb(ns: &str, name: &str, clusters: &[&str]) -> ResourceBinding {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-deployment"), "namespace": ns},
            "spec": {
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": name},
                "clusters": clusters.iter().map(|c| json!({"name": c})).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    fn crb(kind: &str, name: &str, clusters: &[&str]) -> ClusterResourceBinding {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-{}", kind.to_lowercase())},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": kind, "name": name},
                "clusters": clusters.iter().map(|c| json!({"name": c})).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    fn ns(name: &str, labels: Value, extra: Value) -> Arc<Namespace> {
        let mut v = json!({"metadata": {"name": name, "labels": labels,
            "annotations": {LAST_APPLIED: "{}", "owner": "team-shop"}}});
        if let (Some(m), Some(e)) = (v["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pairs(works: &[Work]) -> Vec<(String, String)> {
        works
            .iter()
            .map(|w| (w.namespace().unwrap(), w.name_any()))
            .collect()
    }

    #[test]
    fn a_namespace_goes_where_something_is_propagated_into_it() {
        let hub = vec![
            ns(
                "shop",
                json!({METADATA_NAME: "shop", "pod-security.kubernetes.io/enforce": "restricted"}),
                json!({}),
            ),
            ns("pay", json!({}), json!({})),
            ns(
                "quiet",
                json!({labels::SKIP_AUTO_PROPAGATION: "true"}),
                json!({}),
            ),
            ns(
                "going",
                json!({}),
                json!({"deletionTimestamp": "2026-11-29T00:00:00Z"}),
            ),
            ns("default", json!({}), json!({})),
            ns("kube-system", json!({}), json!({})),
            ns("infra", json!({}), json!({})),
            ns("held", json!({}), json!({})),
        ];
        let bindings = vec![
            rb("shop", "web", &["east", "west"]),
            rb("shop", "api", &["east"]),
            rb("pay", "ledger", &["west", "leaving", "gone"]),
            rb("quiet", "x", &["east"]),
            rb("going", "x", &["east"]),
            rb("default", "x", &["east"]),
            rb("kube-system", "x", &["east"]),
            rb("nowhere", "x", &["east"]),
            rb("infra", "x", &["east", "west"]),
            // dispatching to east suspended: nothing goes there, not even the namespace
            {
                let mut b = rb("held", "x", &["east", "west"]);
                b.spec.suspension = serde_json::from_value(
                    json!({"dispatchingOnClusters": {"clusterNames": ["east"]}}),
                )
                .unwrap();
                b
            },
        ];
        // infra is propagated by a policy to west: that binding's Work manages it there
        let cluster_bindings = vec![
            crb("Namespace", "infra", &["west"]),
            crb("ClusterRole", "shop", &["west"]),
        ];
        // "leaving" is leaving, "gone" left: neither is a member
        let members = BTreeSet::from(["east".to_string(), "west".to_string()]);
        let works = desired(&bindings, &cluster_bindings, &hub, &members);
        let es = |c: &str, n: &str| (format!("causeway-es-{c}"), format!("{n}.namespace"));
        assert_eq!(
            pairs(&works),
            vec![
                es("east", "infra"),
                es("east", "shop"),
                es("west", "held"),
                es("west", "pay"),
                es("west", "shop")
            ]
        );
        let shop = &works[1];
        assert_eq!(shop.spec.preserve_resources_on_deletion, Some(true));
        assert_eq!(shop.labels()[labels::AUTO_NAMESPACE], "shop");
        assert_eq!(shop.labels()[labels::CLUSTER], "east");
        assert!(shop.labels().get(labels::BINDING_NAME).is_none());
        assert_eq!(shop.finalizers(), [finalizers::WORK]);
        assert_eq!(
            shop.spec.workload.manifests[0].0,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop",
                "labels": {"pod-security.kubernetes.io/enforce": "restricted", labels::AUTO_NAMESPACE: "shop"},
                "annotations": {"owner": "team-shop"}}})
        );
    }

    #[test]
    fn causeways_own_labels_are_not_copied() {
        let hub = vec![ns(
            "shop",
            json!({labels::MANAGED: "true", labels::AUTO_NAMESPACE: "elsewhere", "team": "shop"}),
            json!({}),
        )];
        let members = BTreeSet::from(["east".to_string()]);
        let works = desired(&[rb("shop", "web", &["east"])], &[], &hub, &members);
        assert_eq!(
            works[0].spec.workload.manifests[0].0["metadata"]["labels"],
            json!({"team": "shop", labels::AUTO_NAMESPACE: "shop"})
        );
    }

    /// Which namespace Works go: those no binding wants any more, except a leaving
    /// cluster's and one already being deleted; none while a template kind is not
    /// listed yet (its bindings are not known, so their namespaces are not unwanted).
    #[test]
    fn a_namespace_work_goes_only_when_no_binding_can_want_it() {
        let hub = vec![
            ns("shop", json!({}), json!({})),
            ns("pay", json!({}), json!({})),
        ];
        let members = BTreeSet::from(["east".to_string(), "west".to_string()]);
        let before = desired(
            &[
                rb("shop", "web", &["east", "west"]),
                rb("pay", "api", &["east"]),
            ],
            &[],
            &hub,
            &members,
        );
        assert_eq!(before.len(), 3);
        let actual: Vec<Arc<Work>> = before.iter().cloned().map(Arc::new).collect();
        // pay's binding is gone, and shop's left west
        let now = desired(&[rb("shop", "web", &["east"])], &[], &hub, &members);
        let keys = |v: Vec<(String, String)>| {
            v.into_iter()
                .map(|(ns, n)| format!("{ns}/{n}"))
                .collect::<Vec<_>>()
        };
        let none = BTreeSet::new();
        assert_eq!(
            keys(unwanted(&now, &actual, &none, true)),
            [
                "causeway-es-east/pay.namespace",
                "causeway-es-west/shop.namespace"
            ]
        );
        // a kind not listed yet: nothing goes
        assert_eq!(unwanted(&now, &actual, &none, false), []);
        // a leaving cluster's are the unjoin's
        let leaving = BTreeSet::from(["west".to_string()]);
        assert_eq!(
            keys(unwanted(&now, &actual, &leaving, true)),
            ["causeway-es-east/pay.namespace"]
        );
        // one already being deleted is not deleted again
        let mut deleting = actual.clone();
        for w in &mut deleting {
            if w.name_any() == "pay.namespace" {
                let mut d = (**w).clone();
                d.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
                *w = Arc::new(d);
            }
        }
        assert_eq!(
            keys(unwanted(&now, &deleting, &none, true)),
            ["causeway-es-west/shop.namespace"]
        );
    }
}
