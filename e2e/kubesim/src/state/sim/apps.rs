//! The Deployment, ReplicaSet and StatefulSet controllers. A Deployment keeps one
//! ReplicaSet per pod template (`<deployment>-<pod-template-hash>`) at its replicas and
//! every older one at 0; a ReplicaSet keeps that many Pods (`<replicaset>-<5 chars>`),
//! deleting unplaced ones first; a StatefulSet keeps `<name>-<ordinal>` Pods and
//! replaces the ones made from an older template. Status counts placed, ready Pods.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::meta::{new_uid, now_rfc3339};
use crate::state::registry::gr;
use crate::state::sim::pods::{is_ready, new_pod, to_delete};
use crate::state::sim::{
    Owned, Writes, conditions, controller_uid, generation, owner_ref, spec_int, template_hash,
    terminating,
};
use crate::state::stored::StoredObj;

const HASH: &str = "pod-template-hash";

/// ReplicaSets by the uid of their controlling Deployment.
fn replicasets_by_owner(st: &State) -> HashMap<String, Vec<Arc<StoredObj>>> {
    let mut m: HashMap<String, Vec<Arc<StoredObj>>> = HashMap::new();
    for rs in st.store.list(&gr("apps", "replicasets"), None) {
        if let Some(u) = controller_uid(&rs.value) {
            m.entry(u.to_string()).or_default().push(rs);
        }
    }
    m
}

/// The template with the hash label added.
fn hashed_template(d: &Value, hash: &str) -> Value {
    let mut t = d.pointer("/spec/template").cloned().unwrap_or(json!({}));
    t["metadata"]["labels"][HASH] = json!(hash);
    t
}

/// The revision annotation of Deployments and their ReplicaSets (`kubectl rollout
/// history`, `kubectl rollout undo`).
const REVISION: &str = "deployment.kubernetes.io/revision";

/// Annotations the Deployment controller does not copy onto a ReplicaSet.
fn copied_annotation(k: &str) -> bool {
    !matches!(
        k,
        "kubectl.kubernetes.io/last-applied-configuration"
            | REVISION
            | "deployment.kubernetes.io/revision-history"
            | "deployment.kubernetes.io/desired-replicas"
            | "deployment.kubernetes.io/max-replicas"
    )
}

/// A ReplicaSet's revision (0 without one).
fn revision_of(rs: &Value) -> i64 {
    rs.pointer("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The Deployment's annotations a new or current ReplicaSet carries, with `revision`.
fn rs_annotations(d: &Value, old: Option<&Value>, revision: i64) -> Value {
    let mut a = old.cloned().unwrap_or(json!({}));
    if let Some(m) = d
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for (k, v) in m.iter().filter(|(k, _)| copied_annotation(k)) {
            a[k] = v.clone();
        }
    }
    a[REVISION] = json!(revision.to_string());
    a
}

/// Creates the current ReplicaSet of each Deployment and sets every ReplicaSet's replicas.
/// The current one carries the next revision when it is new, or becomes the newest again
/// when the template returns to it (a rollback); the Deployment carries its revision.
pub(crate) fn deployments(st: &mut State, w: &mut Writes) {
    let rs_gr = gr("apps", "replicasets");
    let by_owner = replicasets_by_owner(st);
    for d in st.store.list(&gr("apps", "deployments"), None) {
        if terminating(&d.value) {
            continue;
        }
        let hash = template_hash(d.value.pointer("/spec/template").unwrap_or(&Value::Null));
        let name = format!("{}-{hash}", d.name());
        let replicas = spec_int(&d.value, "replicas", 1);
        let owned = by_owner
            .get(d.value["metadata"]["uid"].as_str().unwrap_or(""))
            .cloned()
            .unwrap_or_default();
        let newest = owned
            .iter()
            .map(|rs| revision_of(&rs.value))
            .max()
            .unwrap_or(0);
        let current = owned.iter().find(|rs| rs.name() == name);
        let revision = match current {
            Some(rs) if revision_of(&rs.value) == newest && newest > 0 => newest,
            _ => newest + 1,
        };
        for rs in &owned {
            let is_current = rs.name() == name;
            let want = if is_current { replicas } else { 0 };
            let rescale = spec_int(&rs.value, "replicas", 1) != want && !terminating(&rs.value);
            // the current one follows the Deployment's annotations (a change-cause set
            // after the rollout started) and carries the revision
            let annotations = rs.value.pointer("/metadata/annotations");
            let relabel = is_current
                .then(|| rs_annotations(&d.value, annotations, revision))
                .filter(|a| annotations != Some(a));
            if !rescale && relabel.is_none() {
                continue;
            }
            let mut v = rs.value.clone();
            if rescale {
                v["spec"]["replicas"] = json!(want);
                v["metadata"]["generation"] = json!(generation(&v) + 1);
            }
            if let Some(a) = relabel {
                v["metadata"]["annotations"] = a;
            }
            w.put(st, &rs_gr, v);
        }
        if d.value
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(REVISION))
            .and_then(Value::as_str)
            != Some(revision.to_string().as_str())
        {
            let mut v = d.value.clone();
            v["metadata"]["annotations"][REVISION] = json!(revision.to_string());
            w.put(st, &gr("apps", "deployments"), v);
        }
        if current.is_some() || st.store.get(&rs_gr, d.namespace(), &name).is_some() {
            continue;
        }
        let mut selector = d
            .value
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or(json!({}));
        selector["matchLabels"][HASH] = json!(hash);
        let template = hashed_template(&d.value, &hash);
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": d.namespace(), "uid": new_uid(), "creationTimestamp": now_rfc3339(), "generation": 1,
                         "labels": template["metadata"]["labels"], "annotations": rs_annotations(&d.value, None, revision),
                         "ownerReferences": [owner_ref(&d.value)]},
            "spec": {"replicas": replicas, "minReadySeconds": spec_int(&d.value, "minReadySeconds", 0), "selector": selector, "template": template},
            "status": {"replicas": 0}});
        w.put(st, &rs_gr, rs);
    }
}

/// Creates and deletes Pods so each ReplicaSet has its replicas.
pub(crate) fn replicasets(
    st: &mut State,
    owned: &Owned,
    new_pods: &mut Vec<Value>,
    w: &mut Writes,
) {
    let pods_gr = gr("", "pods");
    for rs in st.store.list(&gr("apps", "replicasets"), None) {
        if terminating(&rs.value) {
            continue;
        }
        let want = spec_int(&rs.value, "replicas", 1).max(0) as usize;
        let pods = owned.of(&rs.value);
        let template = rs
            .value
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        for _ in pods.len()..want {
            new_pods.push(new_pod(
                st,
                &rs.value,
                &template,
                &format!("{}-", rs.name()),
                &[],
            ));
        }
        for p in to_delete(pods, pods.len().saturating_sub(want)) {
            w.delete(st, &pods_gr, p.namespace(), p.name());
        }
    }
}

/// Creates `<name>-<ordinal>` Pods, deletes ordinals past replicas and Pods of an older template.
pub(crate) fn statefulsets(
    st: &mut State,
    owned: &Owned,
    new_pods: &mut Vec<Value>,
    w: &mut Writes,
) {
    let pods_gr = gr("", "pods");
    for s in st.store.list(&gr("apps", "statefulsets"), None) {
        if terminating(&s.value) {
            continue;
        }
        let revision = revision(&s.value);
        let want = spec_int(&s.value, "replicas", 1).max(0);
        let pods = owned.of(&s.value);
        for p in pods {
            let ordinal = p
                .name()
                .strip_prefix(&format!("{}-", s.name()))
                .and_then(|o| o.parse::<i64>().ok());
            let current = p
                .value
                .pointer("/metadata/labels/controller-revision-hash")
                .and_then(Value::as_str)
                == Some(revision.as_str());
            if ordinal.is_none_or(|o| o >= want) || !current {
                w.delete(st, &pods_gr, p.namespace(), p.name());
            }
        }
        let template = s
            .value
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        for i in 0..want {
            let name = format!("{}-{i}", s.name());
            if st.store.get(&pods_gr, s.namespace(), &name).is_some() {
                continue;
            }
            let labels = [
                ("controller-revision-hash", revision.clone()),
                ("statefulset.kubernetes.io/pod-name", name.clone()),
                ("apps.kubernetes.io/pod-index", i.to_string()),
            ];
            let mut p = new_pod(st, &s.value, &template, &name, &labels);
            p["spec"]["hostname"] = json!(name);
            if let Some(svc) = s
                .value
                .pointer("/spec/serviceName")
                .and_then(Value::as_str)
                .filter(|x| !x.is_empty())
            {
                p["spec"]["subdomain"] = json!(svc);
            }
            new_pods.push(p);
        }
    }
}

/// `<name>-<template hash>`: a StatefulSet's (or DaemonSet's) revision.
pub(crate) fn revision(o: &Value) -> String {
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    format!(
        "{name}-{}",
        template_hash(o.pointer("/spec/template").unwrap_or(&Value::Null))
    )
}

/// Status of Deployments, ReplicaSets and StatefulSets from their Pods.
pub(crate) fn status(st: &mut State, owned: &Owned, w: &mut Writes) {
    let now = now_rfc3339();
    let rs_gr = gr("apps", "replicasets");
    let mut counts: HashMap<String, (i64, i64)> = HashMap::new();
    for rs in st.store.list(&rs_gr, None) {
        let pods = owned.of(&rs.value);
        let (n, ready) = (
            pods.len() as i64,
            pods.iter().filter(|p| is_ready(&p.value)).count() as i64,
        );
        counts.insert(
            rs.value["metadata"]["uid"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            (n, ready),
        );
        let mut status = json!({"observedGeneration": generation(&rs.value), "replicas": n, "fullyLabeledReplicas": n, "readyReplicas": ready, "availableReplicas": ready});
        // a Pod create admission refused: the replica set controller's FailedCreate
        if let Some(why) = w
            .refused
            .get(rs.value["metadata"]["uid"].as_str().unwrap_or(""))
        {
            status["conditions"] = conditions(
                rs.value.pointer("/status/conditions"),
                &[("ReplicaFailure", true, "FailedCreate", why.clone())],
                &now,
                false,
            );
        }
        w.status(st, &rs_gr, &rs, status);
    }
    let by_owner = replicasets_by_owner(st);
    let d_gr = gr("apps", "deployments");
    for d in st.store.list(&d_gr, None) {
        let hash = template_hash(d.value.pointer("/spec/template").unwrap_or(&Value::Null));
        let current = format!("{}-{hash}", d.name());
        let (mut replicas, mut ready, mut updated) = (0, 0, 0);
        let mut failure = None;
        for rs in by_owner
            .get(d.value["metadata"]["uid"].as_str().unwrap_or(""))
            .into_iter()
            .flatten()
        {
            let (n, r) = counts
                .get(rs.value["metadata"]["uid"].as_str().unwrap_or(""))
                .copied()
                .unwrap_or_default();
            replicas += n;
            ready += r;
            if rs.name() == current {
                updated = n;
            }
            if let Some(why) = w
                .refused
                .get(rs.value["metadata"]["uid"].as_str().unwrap_or(""))
            {
                failure = Some(why.clone());
            }
        }
        let want = spec_int(&d.value, "replicas", 1);
        let available = ready >= want;
        let done = available && updated == want && replicas == want;
        let old = d.value.pointer("/status/conditions");
        let mut wanted = vec![
            if available {
                (
                    "Available",
                    true,
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".to_string(),
                )
            } else {
                (
                    "Available",
                    false,
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.".to_string(),
                )
            },
            if done {
                (
                    "Progressing",
                    true,
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{current}\" has successfully progressed."),
                )
            } else {
                (
                    "Progressing",
                    true,
                    "ReplicaSetUpdated",
                    format!("ReplicaSet \"{current}\" is progressing."),
                )
            },
        ];
        // the deployment controller surfaces its ReplicaSets' FailedCreate
        if let Some(why) = failure {
            wanted.push(("ReplicaFailure", true, "FailedCreate", why));
        }
        let conds = conditions(old, &wanted, &now, true);
        let mut status = json!({"observedGeneration": generation(&d.value), "replicas": replicas, "updatedReplicas": updated,
            "readyReplicas": ready, "availableReplicas": ready, "conditions": conds});
        if want > ready {
            status["unavailableReplicas"] = json!(want - ready);
        }
        w.status(st, &d_gr, &d, status);
    }
    let s_gr = gr("apps", "statefulsets");
    for s in st.store.list(&s_gr, None) {
        let pods = owned.of(&s.value);
        let revision = revision(&s.value);
        let n = pods.len() as i64;
        let ready = pods.iter().filter(|p| is_ready(&p.value)).count() as i64;
        let updated = pods
            .iter()
            .filter(|p| {
                p.value
                    .pointer("/metadata/labels/controller-revision-hash")
                    .and_then(Value::as_str)
                    == Some(revision.as_str())
            })
            .count() as i64;
        let status = json!({"observedGeneration": generation(&s.value), "replicas": n, "readyReplicas": ready, "availableReplicas": ready,
            "currentReplicas": updated, "updatedReplicas": updated, "currentRevision": revision, "updateRevision": revision, "collisionCount": 0});
        w.status(st, &s_gr, &s, status);
    }
}
