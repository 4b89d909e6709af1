//! Pods as kube-scheduler and the kubelets would leave them: a new or Pending Pod is
//! placed on a node (see [`crate::state::sim::schedule`]) or stays Pending with the
//! scheduler's `Unschedulable` message; a placed Pod is Running, with an IP from its
//! node's pod range, and Ready while its node is (a Job's Pod Succeeds at once). A Pod
//! bound to a node that no longer exists is deleted, as the pod GC does.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::meta::{name_suffix, new_uid, now_rfc3339};
use crate::state::quantity::parse_milli;
use crate::state::registry::gr;
use crate::state::sim::nodes::facts;
use crate::state::sim::schedule::{NON_ZERO_DEFAULT, NodeFacts, PodNeeds, Resources, schedule};
use crate::state::sim::{Writes, conditions, controller_ref, owner_ref, string_map, terminating};
use crate::state::stored::StoredObj;

/// A new Pod from `template`, controlled by `owner`, with extra labels; named
/// `<prefix><5 random chars>` when `name` ends with `-` and is free, else `name`.
pub(crate) fn new_pod(
    st: &State,
    owner: &Value,
    template: &Value,
    name: &str,
    labels: &[(&str, String)],
) -> Value {
    let ns = owner["metadata"]["namespace"].as_str().unwrap_or("default");
    let name = if name.ends_with('-') {
        let pods = gr("", "pods");
        let mut n = format!("{name}{}", name_suffix());
        for _ in 0..8 {
            if st.store.get(&pods, ns, &n).is_none() {
                break;
            }
            n = format!("{name}{}", name_suffix());
        }
        n
    } else {
        name.to_string()
    };
    let mut meta = json!({"name": name, "namespace": ns, "uid": new_uid(), "creationTimestamp": now_rfc3339(),
        "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({})),
        "ownerReferences": [owner_ref(owner)]});
    for (k, v) in labels {
        meta["labels"][*k] = json!(v);
    }
    if let Some(a) = template.pointer("/metadata/annotations") {
        meta["annotations"] = a.clone();
    }
    let spec = template.get("spec").cloned().unwrap_or(json!({}));
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Pending"}});
    crate::state::defaults::pod(&mut pod);
    pod
}

/// `status.phase`.
fn phase(p: &Value) -> &str {
    p.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Succeeded or Failed: holds no resources, never placed again.
pub(crate) fn finished(p: &Value) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// `spec.nodeName`.
pub(crate) fn node_name(p: &Value) -> Option<&str> {
    p.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Running with a Ready condition that is True.
pub(crate) fn is_ready(p: &Value) -> bool {
    phase(p) == "Running"
        && p.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `n` Pods to delete when scaling down: unplaced first, then not ready, then newest.
pub(crate) fn to_delete(pods: &[Arc<StoredObj>], n: usize) -> Vec<Arc<StoredObj>> {
    let mut v: Vec<Arc<StoredObj>> = pods.to_vec();
    let created = |p: &StoredObj| {
        p.value
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    v.sort_by(|a, b| {
        (
            node_name(&a.value).is_some(),
            is_ready(&a.value),
            std::cmp::Reverse(created(a)),
            std::cmp::Reverse(a.name().to_string()),
        )
            .cmp(&(
                node_name(&b.value).is_some(),
                is_ready(&b.value),
                std::cmp::Reverse(created(b)),
                std::cmp::Reverse(b.name().to_string()),
            ))
    });
    v.truncate(n);
    v
}

/// A container's `kind` (`requests` or `limits`) of `res` in millis, with its text; an
/// unset request is its limit (kube's defaulting).
pub(crate) fn container_amount(c: &Value, kind: &str, res: &str) -> Option<(i128, String)> {
    let r = c.pointer(&format!("/resources/{kind}/{res}")).or_else(|| {
        (kind == "requests")
            .then(|| c.pointer(&format!("/resources/limits/{res}")))
            .flatten()
    })?;
    let text = match r {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    parse_milli(&text).ok().map(|m| (m, text))
}

/// A Pod's `kind` of `res` in millis: its containers' sum, or its largest init
/// container's when that is more (kube's pod resource rule); with the text of the first
/// amount found (how to write the total).
pub(crate) fn pod_amount(p: &Value, kind: &str, res: &str) -> (i128, Option<String>) {
    let mut text = None;
    let mut one = |c: &Value| -> i128 {
        container_amount(c, kind, res)
            .map(|(m, t)| {
                text.get_or_insert(t);
                m
            })
            .unwrap_or(0)
    };
    let list = |k: &str| {
        p.pointer(&format!("/spec/{k}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let sum: i128 = list("containers").iter().map(&mut one).sum();
    let init = list("initContainers")
        .iter()
        .map(&mut one)
        .max()
        .unwrap_or(0);
    (sum.max(init), text)
}

/// The sum of a Pod's container requests (limits stand in for unset requests, an init
/// container counts when it asks for more), plus one pod slot; and the same for scoring.
pub fn needs(p: &Value) -> PodNeeds {
    let spec = p.get("spec").unwrap_or(&Value::Null);
    let amount = |c: &Value, res: &str| container_amount(c, "requests", res).map(|a| a.0);
    let list = |k: &str| {
        spec.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (mut req, mut scored) = (
        Resources {
            pods: 1,
            ..Default::default()
        },
        Resources {
            pods: 1,
            ..Default::default()
        },
    );
    for c in list("containers") {
        let (cpu, mem) = (
            amount(&c, "cpu"),
            amount(&c, "memory").map(|m| (m + 999) / 1000),
        );
        req.milli_cpu += cpu.unwrap_or(0);
        req.memory += mem.unwrap_or(0);
        scored.milli_cpu += cpu.unwrap_or(NON_ZERO_DEFAULT.milli_cpu);
        scored.memory += mem.unwrap_or(NON_ZERO_DEFAULT.memory);
    }
    for c in list("initContainers") {
        req.milli_cpu = req.milli_cpu.max(amount(&c, "cpu").unwrap_or(0));
        req.memory = req
            .memory
            .max(amount(&c, "memory").map(|m| (m + 999) / 1000).unwrap_or(0));
    }
    let node_selector = string_map(spec.get("nodeSelector"));
    // a DaemonSet Pod's required node affinity: matchFields metadata.name In [node]
    let node_names = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|t| t.get("matchFields").and_then(Value::as_array).cloned().unwrap_or_default())
        .find(|f| f["key"] == "metadata.name" && f["operator"] == "In")
        .map(|f| f["values"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect());
    PodNeeds {
        requests: req,
        scored,
        node_selector,
        node_names,
    }
}

/// The nodes of one pass, with what is placed on them so far.
struct Cluster {
    nodes: Vec<NodeFacts>,
    by_name: HashMap<String, usize>,
    host_ip: Vec<String>,
    pod_net: Vec<Option<u32>>,
    used_ips: Vec<HashSet<u32>>,
}

impl Cluster {
    fn load(st: &State) -> Cluster {
        let objs = st.store.list(&gr("", "nodes"), None);
        let nodes: Vec<NodeFacts> = objs.iter().map(|n| facts(&n.value)).collect();
        let by_name = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let host_ip = objs
            .iter()
            .map(|n| {
                n.value
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == "InternalIP")
                    .and_then(|a| a["address"].as_str())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        let pod_net = objs
            .iter()
            .map(|n| {
                let cidr = n.value.pointer("/spec/podCIDR").and_then(Value::as_str)?;
                let (ip, prefix) = cidr.split_once('/')?;
                (prefix == "24").then_some(())?;
                ip.parse::<Ipv4Addr>().ok().map(u32::from)
            })
            .collect();
        let used_ips = vec![HashSet::new(); nodes.len()];
        Cluster {
            nodes,
            by_name,
            host_ip,
            pod_net,
            used_ips,
        }
    }

    /// Counts a placed Pod against node `i`.
    fn hold(&mut self, i: usize, p: &Value) {
        let n = needs(p);
        let node = &mut self.nodes[i];
        node.requested = node.requested + n.requests;
        node.scored = node.scored + n.scored;
        if let Some(ip) = p
            .pointer("/status/podIP")
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
        {
            self.used_ips[i].insert(u32::from(ip));
        }
    }

    /// A free IP in node `i`'s pod range (.2 to .254).
    fn allocate_ip(&mut self, i: usize) -> Option<String> {
        let base = self.pod_net[i]?;
        let ip = (base + 2..=base + 254).find(|ip| !self.used_ips[i].contains(ip))?;
        self.used_ips[i].insert(ip);
        Some(Ipv4Addr::from(ip).to_string())
    }
}

/// Places new and Pending Pods, keeps placed Pods' status in step with their node,
/// and stores the new Pods.
pub(crate) fn run(st: &mut State, new_pods: Vec<Value>, w: &mut Writes) {
    let pods_gr = gr("", "pods");
    let mut cl = Cluster::load(st);
    let all = st.store.list(&pods_gr, None);
    let live: Vec<&Arc<StoredObj>> = all
        .iter()
        .filter(|p| !terminating(&p.value) && !finished(&p.value))
        .collect();
    let mut pending: Vec<Value> = Vec::new();
    for p in &live {
        match node_name(&p.value).map(|n| cl.by_name.get(n).copied()) {
            Some(Some(i)) => cl.hold(i, &p.value),
            Some(None) => {}
            None => pending.push(p.value.clone()),
        }
    }
    let now = now_rfc3339();
    for p in &live {
        let Some(node) = node_name(&p.value) else {
            continue;
        };
        match cl.by_name.get(node).copied() {
            None => w.delete(st, &pods_gr, p.namespace(), p.name()),
            Some(i) => {
                let status = placed(&p.value, &mut cl, i, &now);
                w.status(st, &pods_gr, p, status);
            }
        }
    }
    let pods_rt = st.registry.by_group_resource(&pods_gr);
    for mut p in pending.into_iter().chain(new_pods) {
        let is_new = p.pointer("/metadata/resourceVersion").is_none();
        // the workload controllers' creates go through admission (Priority, then
        // ResourceQuota, counting the Pods this pass already made): one refused, as for
        // a class that does not exist yet or a full quota, is tried again next pass
        if is_new
            && let Some(rt) = &pods_rt
            && let Err(e) = crate::state::kinds::admit(&st.store, rt, &mut p)
        {
            if let Some(owner) = p
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
                .and_then(|o| o.get("uid").and_then(Value::as_str))
            {
                w.refused.insert(owner.to_string(), e.message);
            }
            continue;
        }
        match schedule(&needs(&p), &cl.nodes) {
            Ok(i) => {
                p["spec"]["nodeName"] = json!(cl.nodes[i].name);
                p["status"] = placed(&p, &mut cl, i, &now);
                cl.hold(i, &p);
                w.put(st, &pods_gr, p);
            }
            Err(message) => {
                let status = json!({"phase": "Pending", "qosClass": qos_class(&p),
                    "conditions": conditions(p.pointer("/status/conditions"), &[("PodScheduled", false, "Unschedulable", message)], &now, false)});
                if is_new || p.get("status") != Some(&status) {
                    p["status"] = status;
                    w.put(st, &pods_gr, p);
                }
            }
        }
    }
}

/// The status of a Pod placed on node `i`: Running (Ready while the node is), or
/// Succeeded for a Job's Pod. Keeps its start time and IP.
fn placed(p: &Value, cl: &mut Cluster, i: usize, now: &str) -> Value {
    let old = p.get("status");
    let started = old
        .and_then(|s| s.get("startTime"))
        .and_then(Value::as_str)
        .unwrap_or(now)
        .to_string();
    let pod_ip = match old.and_then(|s| s.get("podIP")).and_then(Value::as_str) {
        Some(ip) => Some(ip.to_string()),
        None => cl.allocate_ip(i),
    };
    let job = controller_ref(p).is_some_and(|r| r["kind"] == "Job");
    let node_ready = cl.nodes[i].ready;
    let uid = p
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (phase, ready, why) = match (job, node_ready) {
        (true, _) => ("Succeeded", false, "PodCompleted"),
        (false, true) => ("Running", true, ""),
        (false, false) => ("Running", false, "NodeNotReady"),
    };
    let msg = if why == "NodeNotReady" {
        format!("node {} is not ready", cl.nodes[i].name)
    } else {
        String::new()
    };
    let containers: Vec<Value> = p
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let state = if job {
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}})
            } else {
                json!({"running": {"startedAt": started}})
            };
            json!({"name": c["name"], "image": c["image"], "imageID": "", "containerID": format!("kubesim://{uid}-{}", c["name"].as_str().unwrap_or("")),
                   "ready": ready, "started": !job, "restartCount": 0, "state": state})
        })
        .collect();
    let mut status = json!({"phase": phase, "qosClass": qos_class(p), "startTime": started,
        "hostIP": cl.host_ip[i], "hostIPs": [{"ip": cl.host_ip[i]}],
        "conditions": conditions(old.and_then(|s| s.get("conditions")), &[
            ("PodReadyToStartContainers", !job, "", String::new()),
            ("Initialized", true, "", String::new()),
            ("Ready", ready, why, msg.clone()),
            ("ContainersReady", ready, why, msg),
            ("PodScheduled", true, "", String::new()),
        ], now, false),
        "containerStatuses": containers});
    if let Some(ip) = pod_ip {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    status
}

/// Guaranteed (every container's cpu and memory limits equal its requests),
/// BestEffort (no requests or limits at all) or Burstable.
pub(crate) fn qos_class(p: &Value) -> &'static str {
    let cs: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| {
            p.pointer(&format!("/spec/{k}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .collect();
    let any = cs.iter().any(|c| {
        ["requests", "limits"].iter().any(|k| {
            c.pointer(&format!("/resources/{k}"))
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = cs.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = c.pointer(&format!("/resources/limits/{r}"));
            limit.is_some()
                && c.pointer(&format!("/resources/requests/{r}"))
                    .is_none_or(|q| Some(q) == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}
