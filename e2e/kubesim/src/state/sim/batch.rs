//! The DaemonSet and Job controllers. A DaemonSet keeps one Pod on every Ready node
//! its nodeSelector matches (pinned there by a required node affinity on the node's
//! name, as kube-controller-manager does); a Job keeps `parallelism` Pods until
//! `completions` of them have Succeeded, then is Complete.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::meta::now_rfc3339;
use crate::state::registry::gr;
use crate::state::sim::apps::revision;
use crate::state::sim::nodes::facts;
use crate::state::sim::pods::{finished, is_ready, needs, new_pod, node_name, to_delete};
use crate::state::sim::{Owned, Writes, conditions, generation, spec_int, string_map, terminating};

/// Names of the nodes a DaemonSet's nodeSelector matches, and of those the Ready ones.
fn daemon_nodes(st: &State, ds: &Value) -> (Vec<String>, Vec<String>) {
    let selector = string_map(ds.pointer("/spec/template/spec/nodeSelector"));
    let (mut matching, mut ready) = (Vec::new(), Vec::new());
    for n in st.store.list(&gr("", "nodes"), None) {
        let f = facts(&n.value);
        if selector.iter().all(|(k, v)| f.labels.get(k) == Some(v)) {
            if f.ready {
                ready.push(f.name.clone());
            }
            matching.push(f.name);
        }
    }
    (matching, ready)
}

/// The node a DaemonSet Pod is for: where it runs, else where its affinity pins it.
fn daemon_pod_node(p: &Value) -> Option<String> {
    node_name(p)
        .map(String::from)
        .or_else(|| needs(p).node_names.and_then(|n| n.into_iter().next()))
}

/// Creates a Pod for each eligible node without one; deletes Pods of nodes no longer
/// matched (or gone) and Pods of an older template.
pub(crate) fn daemonsets(st: &mut State, owned: &Owned, new_pods: &mut Vec<Value>, w: &mut Writes) {
    let pods_gr = gr("", "pods");
    for ds in st.store.list(&gr("apps", "daemonsets"), None) {
        if terminating(&ds.value) {
            continue;
        }
        // a NotReady node keeps its Pod while it exists and matches
        let (matching, eligible) = daemon_nodes(st, &ds.value);
        let revision = revision(&ds.value);
        let mut covered: Vec<String> = Vec::new();
        for p in owned.of(&ds.value) {
            let current = p
                .value
                .pointer("/metadata/labels/controller-revision-hash")
                .and_then(Value::as_str)
                == Some(revision.as_str());
            match daemon_pod_node(&p.value) {
                Some(n) if current && matching.contains(&n) => covered.push(n),
                _ => w.delete(st, &pods_gr, p.namespace(), p.name()),
            }
        }
        let template = ds
            .value
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        for node in eligible.iter().filter(|n| !covered.contains(n)) {
            let generation = generation(&ds.value).to_string();
            let labels = [
                ("controller-revision-hash", revision.clone()),
                ("pod-template-generation", generation),
            ];
            let mut p = new_pod(
                st,
                &ds.value,
                &template,
                &format!("{}-", ds.name()),
                &labels,
            );
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]});
            new_pods.push(p);
        }
    }
}

/// How many Pods a Job wants running now: 0 when suspended or done.
fn job_wants(job: &Value, succeeded: i64) -> i64 {
    let parallelism = spec_int(job, "parallelism", 1).max(0);
    if job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        return 0;
    }
    match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => parallelism.min((c - succeeded).max(0)),
        None if succeeded > 0 => 0,
        None => parallelism,
    }
}

/// Keeps each Job at the Pods it wants running.
pub(crate) fn jobs(st: &mut State, owned: &Owned, new_pods: &mut Vec<Value>, w: &mut Writes) {
    let pods_gr = gr("", "pods");
    for job in st.store.list(&gr("batch", "jobs"), None) {
        if terminating(&job.value) || job_done(&job.value) {
            continue;
        }
        let pods = owned.of(&job.value);
        let succeeded = succeeded(pods);
        let active: Vec<_> = pods
            .iter()
            .filter(|p| !finished(&p.value))
            .cloned()
            .collect();
        let want = job_wants(&job.value, succeeded) as usize;
        let uid = job.value["metadata"]["uid"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let template = job
            .value
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        for _ in active.len()..want {
            let labels = [
                ("batch.kubernetes.io/controller-uid", uid.clone()),
                ("batch.kubernetes.io/job-name", job.name().to_string()),
                ("controller-uid", uid.clone()),
                ("job-name", job.name().to_string()),
            ];
            new_pods.push(new_pod(
                st,
                &job.value,
                &template,
                &format!("{}-", job.name()),
                &labels,
            ));
        }
        for p in to_delete(&active, active.len().saturating_sub(want)) {
            w.delete(st, &pods_gr, p.namespace(), p.name());
        }
    }
}

/// How many of the Pods Succeeded.
fn succeeded(pods: &[std::sync::Arc<crate::state::stored::StoredObj>]) -> i64 {
    pods.iter()
        .filter(|p| p.value.pointer("/status/phase") == Some(&json!("Succeeded")))
        .count() as i64
}

/// True once the Job has its Complete condition.
fn job_done(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Complete" && c["status"] == "True")
}

/// Status of DaemonSets and Jobs from their Pods.
pub(crate) fn status(st: &mut State, owned: &Owned, w: &mut Writes) {
    let now = now_rfc3339();
    let ds_gr = gr("apps", "daemonsets");
    for ds in st.store.list(&ds_gr, None) {
        let (_, eligible) = daemon_nodes(st, &ds.value);
        let revision = revision(&ds.value);
        let mut on: HashMap<String, (bool, bool)> = HashMap::new();
        for p in owned.of(&ds.value) {
            if let Some(n) = node_name(&p.value) {
                let current = p
                    .value
                    .pointer("/metadata/labels/controller-revision-hash")
                    .and_then(Value::as_str)
                    == Some(revision.as_str());
                on.insert(n.to_string(), (is_ready(&p.value), current));
            }
        }
        let placed: Vec<&(bool, bool)> = eligible.iter().filter_map(|n| on.get(n)).collect();
        let desired = eligible.len() as i64;
        let ready = placed.iter().filter(|(r, _)| *r).count() as i64;
        let status = json!({"observedGeneration": generation(&ds.value), "desiredNumberScheduled": desired,
            "currentNumberScheduled": placed.len(), "updatedNumberScheduled": placed.iter().filter(|(_, c)| *c).count(),
            "numberReady": ready, "numberAvailable": ready, "numberUnavailable": desired - ready, "numberMisscheduled": 0});
        w.status(st, &ds_gr, &ds, status);
    }
    let job_gr = gr("batch", "jobs");
    for job in st.store.list(&job_gr, None) {
        if job_done(&job.value) {
            // a finished Job keeps the status it ended with
            continue;
        }
        let pods = owned.of(&job.value);
        let succeeded = succeeded(pods);
        let active = pods.iter().filter(|p| !finished(&p.value)).count() as i64;
        let ready = pods.iter().filter(|p| is_ready(&p.value)).count() as i64;
        let old = job.value.get("status");
        let kept = |f: &str| old.and_then(|s| s.get(f)).cloned();
        let mut status = json!({"active": active, "succeeded": succeeded, "failed": 0, "ready": ready, "terminating": 0,
            "uncountedTerminatedPods": {}, "startTime": kept("startTime").unwrap_or(json!(now))});
        let completions = job
            .value
            .pointer("/spec/completions")
            .and_then(Value::as_i64);
        let done = active == 0 && succeeded > 0 && completions.is_none_or(|c| succeeded >= c);
        if done {
            status["completionTime"] = kept("completionTime").unwrap_or(json!(now));
            status["conditions"] = conditions(
                old.and_then(|s| s.get("conditions")),
                &[
                    (
                        "SuccessCriteriaMet",
                        true,
                        "CompletionsReached",
                        "Reached expected number of succeeded pods".into(),
                    ),
                    (
                        "Complete",
                        true,
                        "CompletionsReached",
                        "Reached expected number of succeeded pods".into(),
                    ),
                ],
                &now,
                false,
            );
        }
        w.status(st, &job_gr, &job, status);
    }
}
