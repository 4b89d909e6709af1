//! What kube-scheduler, kube-controller-manager's workload controllers and kubelets
//! would do, for a cluster without any of them (as kwok does): simulated nodes with
//! capacity and topology ([`nodes`]), workload controllers that make Pods ([`apps`],
//! [`batch`]), the scheduler and kubelet that place Pods and report them Running and
//! Ready while their node is ([`pods`], the pure rule in [`schedule`]), and the
//! workloads' status counted from their placed, ready Pods.
//!
//! One [`pass`] runs when a workload, Pod or Node changed (the store's workload hint).
//! It reads each kind once (a per-kind list, never every object) and writes only what
//! differs, so a pass after a quiet one writes nothing.

pub mod nodes;
pub mod pods;
pub mod schedule;

mod apps;
mod batch;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::state::cluster::State;
use crate::state::registry::{GroupResource, gr};
use crate::state::stored::StoredObj;

/// One simulation pass; true when it wrote something.
pub fn pass(st: &mut State) -> bool {
    let mut w = Writes::default();
    // controllers: what Pods (and ReplicaSets) should exist
    apps::deployments(st, &mut w);
    let owned = Owned::load(st);
    let mut new_pods = Vec::new();
    apps::replicasets(st, &owned, &mut new_pods, &mut w);
    apps::statefulsets(st, &owned, &mut new_pods, &mut w);
    batch::daemonsets(st, &owned, &mut new_pods, &mut w);
    batch::jobs(st, &owned, &mut new_pods, &mut w);
    // scheduler and kubelets
    pods::run(st, new_pods, &mut w);
    // status, from the Pods as they are now
    let owned = Owned::load(st);
    apps::status(st, &owned, &mut w);
    batch::status(st, &owned, &mut w);
    w.changed
}

/// Counts writes, and carries what this pass's Pod creates were refused for.
#[derive(Default)]
pub(crate) struct Writes {
    changed: bool,
    /// Why admission refused a new Pod, by the uid of its controller (a ReplicaSet's
    /// `ReplicaFailure` condition, and its Deployment's, as kube-controller-manager
    /// writes them).
    pub(crate) refused: HashMap<String, String>,
}

impl Writes {
    /// Stores `v` (a create or an update).
    fn put(&mut self, st: &mut State, g: &GroupResource, v: Value) {
        st.store.put(g, v);
        self.changed = true;
    }

    /// Deletes an object as a controller does (background propagation).
    fn delete(&mut self, st: &mut State, g: &GroupResource, ns: &str, name: &str) {
        self.changed |= crate::state::controllers::delete(st, g, ns, name, "Background");
    }

    /// Writes `status` when it differs from the object's.
    fn status(&mut self, st: &mut State, g: &GroupResource, o: &StoredObj, status: Value) {
        if o.value.get("status") != Some(&status) {
            let mut v = o.value.clone();
            v["status"] = status;
            self.put(st, g, v);
        }
    }
}

/// Pods by the uid of their controller (owner reference with `controller: true`),
/// without the ones being deleted.
pub(crate) struct Owned(HashMap<String, Vec<Arc<StoredObj>>>);

impl Owned {
    fn load(st: &State) -> Owned {
        let mut m: HashMap<String, Vec<Arc<StoredObj>>> = HashMap::new();
        for p in st.store.list(&gr("", "pods"), None) {
            if terminating(&p.value) {
                continue;
            }
            if let Some(uid) = controller_uid(&p.value) {
                m.entry(uid.to_string()).or_default().push(p);
            }
        }
        Owned(m)
    }

    /// The live Pods controlled by `owner`.
    fn of(&self, owner: &Value) -> &[Arc<StoredObj>] {
        uid(owner)
            .and_then(|u| self.0.get(u))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

fn uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

/// The uid of the object's controller, if it has one.
pub(crate) fn controller_uid(v: &Value) -> Option<&str> {
    controller_ref(v)
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
}

/// The object's owner reference with `controller: true`.
pub(crate) fn controller_ref(v: &Value) -> Option<&Value> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// True while the object has a deletionTimestamp.
pub(crate) fn terminating(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

/// A JSON object of strings (labels, a nodeSelector) as a map; other values are skipped.
pub(crate) fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// `metadata.generation` (1 when unset).
fn generation(v: &Value) -> i64 {
    v.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// An integer field of `spec`, or `default`.
fn spec_int(v: &Value, field: &str, default: i64) -> i64 {
    v.get("spec")
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

/// The owner reference a controller puts on what it makes.
fn owner_ref(owner: &Value) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

/// A short hash of a pod template (kube-controller-manager's `pod-template-hash` /
/// `controller-revision-hash` role): the same for equal templates whatever their key order.
fn template_hash(template: &Value) -> String {
    use sha2::{Digest, Sha256};
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for x in a {
                    canonical(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    canonical(template, &mut s);
    Sha256::digest(s.as_bytes())[..10]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Conditions as wanted, `(type, status, reason, message)`, keeping each one's
/// lastTransitionTime (and lastUpdateTime) from `existing` while its status is unchanged.
fn conditions(
    existing: Option<&Value>,
    wanted: &[(&str, bool, &str, String)],
    now: &str,
    with_update_time: bool,
) -> Value {
    let old = |t: &str| {
        existing
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
    };
    Value::Array(
        wanted
            .iter()
            .map(|(t, ok, reason, message)| {
                let status = if *ok { "True" } else { "False" };
                let prev = old(t);
                let field = |f: &str| {
                    prev.and_then(|c| c.get(f))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                };
                let same = prev.is_some() && field("status") == status;
                let same_all = same && field("reason") == *reason && field("message") == message;
                let keep = |f: &str, unchanged: bool| match prev.and_then(|c| c.get(f)) {
                    Some(v) if unchanged => v.clone(),
                    _ => json!(now),
                };
                let mut c = Map::new();
                c.insert("type".into(), json!(t));
                c.insert("status".into(), json!(status));
                if with_update_time {
                    c.insert("lastUpdateTime".into(), keep("lastUpdateTime", same_all));
                }
                c.insert(
                    "lastTransitionTime".into(),
                    keep("lastTransitionTime", same),
                );
                if !reason.is_empty() {
                    c.insert("reason".into(), json!(reason));
                }
                if !message.is_empty() {
                    c.insert("message".into(), json!(message));
                }
                Value::Object(c)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hash_ignores_key_order_and_sees_values() {
        let a = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {"containers": [{"name": "a", "image": "i:1"}]}});
        let b = json!({"spec": {"containers": [{"image": "i:1", "name": "a"}]}, "metadata": {"labels": {"tier": "x", "app": "web"}}});
        let c = json!({"spec": {"containers": [{"image": "i:2", "name": "a"}]}, "metadata": {"labels": {"tier": "x", "app": "web"}}});
        assert_eq!(template_hash(&a), template_hash(&b));
        assert_ne!(template_hash(&a), template_hash(&c));
        assert_eq!(template_hash(&a).len(), 10);
    }

    #[test]
    fn conditions_keep_transition_times_while_status_holds() {
        let old = json!([{"type": "Available", "status": "True", "reason": "A", "lastTransitionTime": "t0", "lastUpdateTime": "t0"}]);
        let same = conditions(
            Some(&old),
            &[("Available", true, "A", String::new())],
            "t1",
            true,
        );
        assert_eq!(same[0]["lastTransitionTime"], "t0");
        assert_eq!(same[0]["lastUpdateTime"], "t0");
        let reworded = conditions(
            Some(&old),
            &[("Available", true, "B", String::new())],
            "t1",
            true,
        );
        assert_eq!(
            (
                reworded[0]["lastTransitionTime"].clone(),
                reworded[0]["lastUpdateTime"].clone()
            ),
            (json!("t0"), json!("t1"))
        );
        let flipped = conditions(
            Some(&old),
            &[("Available", false, "A", "m".into())],
            "t1",
            false,
        );
        assert_eq!(
            flipped[0],
            json!({"type": "Available", "status": "False", "lastTransitionTime": "t1", "reason": "A", "message": "m"})
        );
    }
}
