//! What kube-controller-manager would do for the API's sake: owner-reference garbage
//! collection (background, foreground, orphan), namespace termination, each namespace's
//! `default` ServiceAccount and `kube-root-ca.crt` ConfigMap, ClusterRole
//! aggregation ([`crate::state::rbac::aggregate`]), ResourceQuota status
//! ([`crate::state::quota::reconcile`]), and optional
//! workload simulation ([`crate::state::sim`]).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::deletion::{DeleteOptions, delete_locked, finalizers, store_update};
use crate::state::registry::{GroupResource, gr};
use crate::state::stored::StoredObj;

/// One pass of the controllers; true when it changed something (so another pass may
/// find more work). Full scans run only when a change can have given them work.
pub fn pass(st: &mut State, simulate_workloads: bool) -> bool {
    let mut changed = false;
    if st.store.take_gc_hint() {
        changed |= gc(st);
        changed |= namespaces(st);
    }
    if st.store.take_namespace_hint() {
        changed |= namespace_defaults(st);
    }
    if st.store.take_rbac_hint() {
        changed |= crate::state::rbac::aggregate(st);
    }
    if st.store.take_workload_hint() && simulate_workloads {
        changed |= crate::state::sim::pass(st);
    }
    let quota_namespaces = st.store.take_quota_namespaces();
    if !quota_namespaces.is_empty() {
        changed |= crate::state::quota::reconcile(st, &quota_namespaces);
    }
    changed
}

/// Writes back an object the controllers changed (see [`store_update`]).
fn put_back(st: &mut State, gr: &GroupResource, v: Value) {
    match st.registry.by_group_resource(gr) {
        Some(rt) => {
            store_update(st, &rt, v);
        }
        None => {
            st.store.put(gr, v);
        }
    }
}

fn remove_finalizer(st: &mut State, gr: &GroupResource, o: &StoredObj, f: &str) {
    let mut v = o.value.clone();
    let rest: Vec<String> = finalizers(&v).into_iter().filter(|x| x != f).collect();
    v["metadata"]["finalizers"] = json!(rest);
    if rest.is_empty()
        && let Some(m) = v["metadata"].as_object_mut()
    {
        m.remove("finalizers");
    }
    put_back(st, gr, v);
}

/// Deletes an object as a controller does (`propagation`: Background, Foreground).
pub(crate) fn delete(
    st: &mut State,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    propagation: &str,
) -> bool {
    let Some(rt) = st.registry.by_group_resource(gr) else {
        return st.store.delete(gr, ns, name).is_some();
    };
    let opts = DeleteOptions {
        propagation: propagation.to_string(),
        ..Default::default()
    };
    delete_locked(st, &rt, ns, name, &opts).is_ok()
}

/// Owner references. Returns true when something changed.
fn gc(st: &mut State) -> bool {
    let mut changed = false;
    let all: Vec<(GroupResource, Arc<StoredObj>)> = st
        .store
        .resources()
        .into_iter()
        .flat_map(|g| {
            st.store
                .list(&g, None)
                .into_iter()
                .map(move |o| (g.clone(), o))
        })
        .collect();
    // dependents by owner uid
    let mut dependents: std::collections::HashMap<String, Vec<(GroupResource, Arc<StoredObj>)>> =
        Default::default();
    for (g, o) in &all {
        for r in o
            .value
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(uid) = r.get("uid").and_then(Value::as_str) {
                dependents
                    .entry(uid.to_string())
                    .or_default()
                    .push((g.clone(), o.clone()));
            }
        }
    }
    for (g, o) in &all {
        let deleting = o.value.pointer("/metadata/deletionTimestamp").is_some();
        let fins = finalizers(&o.value);
        let uid = o
            .value
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if deleting && fins.iter().any(|f| f == "orphan") {
            for (dg, d) in dependents.get(&uid).cloned().unwrap_or_default() {
                if let Some(cur) = st.store.get(&dg, d.namespace(), d.name()) {
                    let mut v = cur.value.clone();
                    if let Some(refs) = v
                        .pointer_mut("/metadata/ownerReferences")
                        .and_then(Value::as_array_mut)
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                        if refs.is_empty() {
                            v["metadata"]
                                .as_object_mut()
                                .map(|m| m.remove("ownerReferences"));
                        }
                    }
                    put_back(st, &dg, v);
                }
            }
            if let Some(cur) = st.store.get(g, o.namespace(), o.name()) {
                remove_finalizer(st, g, &cur, "orphan");
            }
            changed = true;
        } else if deleting && fins.iter().any(|f| f == "foregroundDeletion") {
            let deps = dependents.get(&uid).cloned().unwrap_or_default();
            let live: Vec<_> = deps
                .iter()
                .filter(|(dg, d)| st.store.get(dg, d.namespace(), d.name()).is_some())
                .cloned()
                .collect();
            if live.is_empty() {
                if let Some(cur) = st.store.get(g, o.namespace(), o.name()) {
                    remove_finalizer(st, g, &cur, "foregroundDeletion");
                }
                changed = true;
            } else {
                for (dg, d) in live {
                    if d.value.pointer("/metadata/deletionTimestamp").is_none() {
                        changed |= delete(st, &dg, d.namespace(), d.name(), "Foreground");
                    }
                }
            }
        }
    }
    // dependents whose owners are all gone (as they are now: orphaning above may
    // have removed owner references since `all` was read)
    for (g, o) in &all {
        let Some(o) = st.store.get(g, o.namespace(), o.name()) else {
            continue;
        };
        let refs: Vec<String> = o
            .value
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
            .collect();
        if refs.is_empty() || o.value.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if refs.iter().all(|u| st.store.by_uid(u).is_none()) {
            changed |= delete(st, g, o.namespace(), o.name(), "Background");
        }
    }
    changed
}

/// The ConfigMap kube-controller-manager's root CA publisher keeps in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// What kube-controller-manager keeps in every namespace that is not being deleted: the
/// `default` ServiceAccount (serviceaccount controller, recreated when deleted) and the
/// `kube-root-ca.crt` ConfigMap holding the cluster's CA (root-ca-cert-publisher,
/// recreated when deleted and its data put back when changed).
pub(crate) fn namespace_defaults(st: &mut State) -> bool {
    let active: Vec<String> = st
        .store
        .list(&gr("", "namespaces"), None)
        .iter()
        .filter(|n| n.value.pointer("/metadata/deletionTimestamp").is_none())
        .map(|n| n.name().to_string())
        .collect();
    let (sa, cm) = (gr("", "serviceaccounts"), gr("", "configmaps"));
    let now = crate::state::meta::now_rfc3339();
    let mut changed = false;
    for ns in active {
        if st.store.get(&sa, &ns, "default").is_none() {
            st.store.put(
                &sa,
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns,
                       "uid": crate::state::meta::new_uid(), "creationTimestamp": now}}),
            );
            changed = true;
        }
        let Some(ca) = st.root_ca.clone() else {
            continue;
        };
        let data = json!({"ca.crt": ca});
        match st.store.get(&cm, &ns, ROOT_CA_CONFIGMAP) {
            Some(o) if o.value.get("data") == Some(&data) => {}
            Some(o) => {
                let mut v = o.value.clone();
                v["data"] = data;
                put_back(st, &cm, v);
                changed = true;
            }
            None => {
                st.store.put(
                    &cm,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": ns,
                           "uid": crate::state::meta::new_uid(), "creationTimestamp": now,
                           "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                           "data": data}),
                );
                changed = true;
            }
        }
    }
    changed
}

/// Terminating namespaces: delete their content, then the namespace.
fn namespaces(st: &mut State) -> bool {
    let ns_gr = gr("", "namespaces");
    let terminating: Vec<Arc<StoredObj>> = st
        .store
        .list(&ns_gr, None)
        .into_iter()
        .filter(|n| n.value.pointer("/metadata/deletionTimestamp").is_some())
        .collect();
    let mut changed = false;
    for n in terminating {
        let name = n.name().to_string();
        let mut remaining = 0;
        for g in st.store.resources() {
            if g == ns_gr {
                continue;
            }
            for o in st.store.list(&g, Some(&name)) {
                remaining += 1;
                if o.value.pointer("/metadata/deletionTimestamp").is_none() {
                    changed |= delete(st, &g, &name, o.name(), "Background");
                }
            }
        }
        if remaining == 0 {
            let mut v = n.value.clone();
            v["spec"]["finalizers"] = json!([]);
            if finalizers(&v).is_empty() {
                st.store.delete(&ns_gr, "", &name);
            } else {
                put_back(st, &ns_gr, v);
            }
            changed = true;
        }
    }
    changed
}
