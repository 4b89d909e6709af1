//! Simulated nodes: the ones a new cluster starts with (capacity, region and zone
//! labels, providerID, a pod range), what the scheduler reads from any Node, and the
//! Ready knob a test turns to play a failed kubelet.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::meta::{new_uid, now_rfc3339};
use crate::state::quantity::parse_non_negative;
use crate::state::registry::gr;
use crate::state::sim::schedule::{NodeFacts, Resources};

/// What each simulated node offers, as Kubernetes quantities (`cpu: "8"`, `memory: "32Gi"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCapacity {
    /// CPU, e.g. `8` or `3500m`.
    pub cpu: String,
    /// Memory, e.g. `32Gi`.
    pub memory: String,
    /// Pod slots.
    pub pods: u32,
}

impl Default for NodeCapacity {
    fn default() -> Self {
        NodeCapacity {
            cpu: "8".into(),
            memory: "32Gi".into(),
            pods: 110,
        }
    }
}

/// The nodes a cluster starts with.
#[derive(Debug, Clone, Copy)]
pub struct NodeSet<'a> {
    /// Cluster name (node names are `<cluster>-node-<i>`).
    pub cluster: &'a str,
    /// How many.
    pub count: usize,
    /// Capacity of each.
    pub capacity: &'a NodeCapacity,
    /// `topology.kubernetes.io/region`.
    pub region: &'a str,
    /// `topology.kubernetes.io/zone`, round-robin.
    pub zones: &'a [String],
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: &'a str,
}

/// The most nodes one cluster may start with (each gets a /24 from 10.244.0.0 up to 10.255.255.0).
pub const MAX_NODES: usize = 12 * 256;

impl NodeSet<'_> {
    /// Checks the settings; the error says which one is wrong and how.
    pub fn validate(&self) -> Result<(), String> {
        if self.count > MAX_NODES {
            return Err(format!(
                "nodes: at most {MAX_NODES} per cluster, got {}",
                self.count
            ));
        }
        parse_non_negative("node cpu", &self.capacity.cpu)?;
        parse_non_negative("node memory", &self.capacity.memory)?;
        if self.zones.is_empty() {
            return Err("zones: give at least one zone (e.g. east-a)".into());
        }
        for (what, v) in std::iter::once(("region", self.region))
            .chain(self.zones.iter().map(|z| ("zone", z.as_str())))
        {
            let errs = k8s_validation::label_value(v);
            if v.is_empty() || !errs.is_empty() {
                return Err(format!(
                    "{what} \"{v}\" is not a valid label value: {}",
                    if v.is_empty() {
                        "it must not be empty".to_string()
                    } else {
                        errs.join("; ")
                    }
                ));
            }
        }
        Ok(())
    }

    /// The `i`-th node object.
    pub fn node(&self, i: usize, now: &str) -> Value {
        let name = format!("{}-node-{i}", self.cluster);
        let zone = &self.zones[i % self.zones.len()];
        let cap = json!({"cpu": self.capacity.cpu, "memory": self.capacity.memory, "pods": self.capacity.pods.to_string(), "ephemeral-storage": "100Gi"});
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": new_uid(), "creationTimestamp": now, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/region": self.region, "topology.kubernetes.io/zone": zone}},
            "spec": {"providerID": format!("kubesim://{}/{name}", self.cluster), "podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)]},
            "status": {"conditions": [ready_condition(true, now, now)],
                "addresses": [{"type": "InternalIP", "address": node_ip(i)}, {"type": "Hostname", "address": name}],
                "capacity": cap, "allocatable": cap,
                "nodeInfo": {"kubeletVersion": self.kubelet_version, "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "kubesim://1"}}})
    }
}

/// The pod range of the `i`-th node: a /24 inside 10.244.0.0/12.
fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 244 + i / 256, i % 256)
}

/// The InternalIP of the `i`-th node.
fn node_ip(i: usize) -> String {
    format!("172.18.{}.{}", i / 250, 2 + i % 250)
}

fn ready_condition(ready: bool, heartbeat: &str, transition: &str) -> Value {
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "kubesim: the node was marked NotReady",
        )
    };
    json!({"type": "Ready", "status": status, "reason": reason, "message": message, "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition})
}

/// Marks node `name` Ready or NotReady (the Ready condition's status, reason and,
/// when it changes, lastTransitionTime), as a kubelet would post it.
pub fn set_ready(st: &mut State, name: &str, ready: bool) -> ApiResult<()> {
    let g = gr("", "nodes");
    let cur = st
        .store
        .get(&g, "", name)
        .ok_or_else(|| ApiError::not_found("", "nodes", name))?;
    let now = now_rfc3339();
    let mut v = cur.value.clone();
    let conds = v["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::with_capacity(conds.len() + 1);
    let mut found = false;
    for c in conds {
        if c.get("type").and_then(Value::as_str) == Some("Ready") {
            found = true;
            let was = c.get("status").and_then(Value::as_str) == Some("True");
            let since = match c.get("lastTransitionTime").and_then(Value::as_str) {
                Some(t) if was == ready => t.to_string(),
                _ => now.clone(),
            };
            out.push(ready_condition(ready, &now, &since));
        } else {
            out.push(c);
        }
    }
    if !found {
        out.push(ready_condition(ready, &now, &now));
    }
    v["status"]["conditions"] = Value::Array(out);
    st.store.put(&g, v);
    Ok(())
}

/// True when the node's Ready condition is True.
pub fn is_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// A node as the scheduler sees it (nothing placed on it yet). Unparsable
/// allocatable amounts count as zero.
pub fn facts(node: &Value) -> NodeFacts {
    let alloc = |k: &str| {
        node.pointer(&format!("/status/allocatable/{k}"))
            .and_then(|q| match q {
                Value::String(s) => crate::state::quantity::parse_milli(s).ok(),
                Value::Number(n) => n.as_i64().map(|n| n as i128 * 1000),
                _ => None,
            })
            .unwrap_or(0)
    };
    let labels = crate::state::sim::string_map(node.pointer("/metadata/labels"));
    NodeFacts {
        name: node["metadata"]["name"].as_str().unwrap_or("").to_string(),
        ready: is_ready(node),
        unschedulable: node
            .pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        labels,
        allocatable: Resources {
            milli_cpu: alloc("cpu"),
            memory: (alloc("memory") + 999) / 1000,
            pods: alloc("pods") / 1000,
        },
        requested: Resources::default(),
        scored: Resources::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set<'a>(cap: &'a NodeCapacity, region: &'a str, zones: &'a [String]) -> NodeSet<'a> {
        NodeSet {
            cluster: "east",
            count: 3,
            capacity: cap,
            region,
            zones,
            kubelet_version: "v1.33.0",
        }
    }

    #[test]
    fn nodes_take_zones_round_robin_and_read_back_as_facts() {
        let cap = NodeCapacity {
            cpu: "2".into(),
            memory: "4Gi".into(),
            pods: 10,
        };
        let zones = vec!["z1".to_string(), "z2".to_string()];
        let s = set(&cap, "eu", &zones);
        let zone_of =
            |i| s.node(i, "t")["metadata"]["labels"]["topology.kubernetes.io/zone"].clone();
        assert_eq!(
            (zone_of(0), zone_of(1), zone_of(2)),
            (json!("z1"), json!("z2"), json!("z1"))
        );
        let n = s.node(1, "t");
        assert_eq!(n["spec"]["providerID"], "kubesim://east/east-node-1");
        assert_eq!(
            n["metadata"]["labels"]["topology.kubernetes.io/region"],
            "eu"
        );
        let f = facts(&n);
        assert!(f.ready && !f.unschedulable);
        assert_eq!(
            f.allocatable,
            Resources {
                milli_cpu: 2000,
                memory: 4 << 30,
                pods: 10
            }
        );
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let zones = vec!["a".to_string()];
        let bad_cpu = NodeCapacity {
            cpu: "lots".into(),
            ..Default::default()
        };
        let ok = NodeCapacity::default();
        let none: Vec<String> = vec![];
        let bad_zone = vec!["not a zone".to_string()];
        for (s, want) in [
            (set(&bad_cpu, "r", &zones), "node cpu: quantity \"lots\""),
            (set(&ok, "r", &none), "at least one zone"),
            (set(&ok, "", &zones), "region \"\""),
            (
                set(&ok, "r", &bad_zone),
                "zone \"not a zone\" is not a valid label value",
            ),
        ] {
            let e = s.validate().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(set(&ok, "local", &zones).validate().is_ok());
    }
}
