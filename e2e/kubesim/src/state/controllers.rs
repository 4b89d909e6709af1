//! What kube-controller-manager would do for the API's sake: owner-reference garbage
//! collection (background, foreground, orphan), namespace termination, ClusterRole
//! aggregation ([`crate::state::rbac::aggregate`]), and optional
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
    if st.store.take_rbac_hint() {
        changed |= crate::state::rbac::aggregate(st);
    }
    if st.store.take_workload_hint() && simulate_workloads {
        changed |= crate::state::sim::pass(st);
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
