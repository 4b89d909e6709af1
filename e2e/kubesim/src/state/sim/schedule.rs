//! The scheduler's decision as a pure function: which nodes a pod fits on (Ready,
//! schedulable, labels matching its nodeSelector, room for its requests plus one pod
//! slot) and which of those is least allocated; or kube-scheduler's message saying
//! why none is.

use std::collections::BTreeMap;

/// Amounts the scheduler adds up: cpu in millicores, memory in bytes, pod slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub milli_cpu: i128,
    /// Bytes.
    pub memory: i128,
    /// Pod slots.
    pub pods: i128,
}

impl std::ops::Add for Resources {
    type Output = Resources;
    fn add(self, o: Resources) -> Resources {
        Resources {
            milli_cpu: self.milli_cpu + o.milli_cpu,
            memory: self.memory + o.memory,
            pods: self.pods + o.pods,
        }
    }
}

/// What kube-scheduler assumes a container without requests uses, for scoring only
/// (so such pods still spread): 100m cpu, 200Mi memory.
pub const NON_ZERO_DEFAULT: Resources = Resources {
    milli_cpu: 100,
    memory: 200 * 1024 * 1024,
    pods: 1,
};

/// One node as the scheduler sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Name.
    pub name: String,
    /// Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable`.
    pub allocatable: Resources,
    /// Sum of the requests of the pods placed on it (one slot each).
    pub requested: Resources,
    /// Same, with [`NON_ZERO_DEFAULT`] for what a pod leaves unset (scoring).
    pub scored: Resources,
}

/// What a pod asks of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodNeeds {
    /// Requests, with `pods: 1`.
    pub requests: Resources,
    /// Requests for scoring (unset parts at [`NON_ZERO_DEFAULT`]).
    pub scored: Resources,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Node names a required node affinity on `metadata.name` allows (DaemonSet pods).
    pub node_names: Option<Vec<String>>,
}

const NOT_READY: &str = "node(s) were not ready";
const UNSCHEDULABLE: &str = "node(s) were unschedulable";
const SELECTOR: &str = "node(s) didn't match Pod's node affinity/selector";

/// Why `pod` does not fit `node`; empty when it fits. The first failing check wins,
/// in kube-scheduler's filter order; resource shortfalls are all reported.
pub fn misfits(pod: &PodNeeds, node: &NodeFacts) -> Vec<&'static str> {
    if node.unschedulable {
        return vec![UNSCHEDULABLE];
    }
    if !node.ready {
        return vec![NOT_READY];
    }
    let name_ok = pod
        .node_names
        .as_ref()
        .is_none_or(|names| names.iter().any(|n| n == &node.name));
    let labels_ok = pod
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    if !name_ok || !labels_ok {
        return vec![SELECTOR];
    }
    let (have, used, want) = (node.allocatable, node.requested, pod.requests);
    let mut out = Vec::new();
    if used.pods + want.pods > have.pods {
        out.push("Too many pods");
    }
    if want.milli_cpu > 0 && used.milli_cpu + want.milli_cpu > have.milli_cpu {
        out.push("Insufficient cpu");
    }
    if want.memory > 0 && used.memory + want.memory > have.memory {
        out.push("Insufficient memory");
    }
    out
}

/// kube-scheduler's LeastAllocated score (0..=100, higher is emptier) after placing `pod`.
fn score(pod: &PodNeeds, node: &NodeFacts) -> i128 {
    let part = |alloc: i128, used: i128| {
        if alloc <= 0 || used > alloc {
            0
        } else {
            (alloc - used) * 100 / alloc
        }
    };
    let after = node.scored + pod.scored;
    (part(node.allocatable.milli_cpu, after.milli_cpu)
        + part(node.allocatable.memory, after.memory))
        / 2
}

/// The index of the node `pod` goes to (least allocated, ties by name), or the
/// `Unschedulable` message, e.g. `0/3 nodes are available: 1 node(s) were not ready, 2 Insufficient cpu.`
pub fn schedule(pod: &PodNeeds, nodes: &[NodeFacts]) -> Result<usize, String> {
    let mut best: Option<(usize, i128)> = None;
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let why = misfits(pod, n);
        if why.is_empty() {
            let s = score(pod, n);
            let better = match best {
                None => true,
                Some((b, bs)) => s > bs || (s == bs && n.name < nodes[b].name),
            };
            if better {
                best = Some((i, s));
            }
        }
        for r in why {
            *reasons.entry(r).or_default() += 1;
        }
    }
    if let Some((i, _)) = best {
        return Ok(i);
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    Err(if parts.is_empty() {
        "0/0 nodes are available: no nodes available to schedule pods.".to_string()
    } else {
        format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            parts.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i128 = 1 << 30;

    fn res(milli_cpu: i128, memory: i128, pods: i128) -> Resources {
        Resources {
            milli_cpu,
            memory,
            pods,
        }
    }

    fn node(name: &str, cpu: i128, used_cpu: i128) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            ready: true,
            labels: [("zone".to_string(), format!("z-{name}"))].into(),
            allocatable: res(cpu, 4 * GI, 3),
            requested: res(used_cpu, 0, 0),
            scored: res(used_cpu, 0, 0),
            ..Default::default()
        }
    }

    fn pod(cpu: i128) -> PodNeeds {
        PodNeeds {
            requests: res(cpu, 0, 1),
            scored: res(cpu.max(100), 200 << 20, 1),
            ..Default::default()
        }
    }

    #[test]
    fn fit_table() {
        let full_slots = NodeFacts {
            requested: res(0, 0, 3),
            ..node("a", 2000, 0)
        };
        let not_ready = NodeFacts {
            ready: false,
            ..node("a", 2000, 0)
        };
        let cordoned = NodeFacts {
            unschedulable: true,
            ready: false,
            ..node("a", 2000, 0)
        };
        let mem_pod = PodNeeds {
            requests: res(1000, 5 * GI, 1),
            ..pod(1000)
        };
        let selecting = |k: &str, v: &str| PodNeeds {
            node_selector: [(k.to_string(), v.to_string())].into(),
            ..pod(0)
        };
        let pinned = |n: &str| PodNeeds {
            node_names: Some(vec![n.to_string()]),
            ..pod(0)
        };
        let cases: Vec<(&str, PodNeeds, NodeFacts, Vec<&str>)> = vec![
            ("fits exactly", pod(2000), node("a", 2000, 0), vec![]),
            (
                "no requests fit a full node",
                pod(0),
                node("a", 2000, 2000),
                vec![],
            ),
            (
                "cpu short",
                pod(1001),
                node("a", 2000, 1000),
                vec!["Insufficient cpu"],
            ),
            ("slots", pod(0), full_slots, vec!["Too many pods"]),
            (
                "cpu and memory",
                mem_pod,
                node("a", 500, 0),
                vec!["Insufficient cpu", "Insufficient memory"],
            ),
            ("not ready", pod(0), not_ready, vec![NOT_READY]),
            ("cordoned first", pod(0), cordoned, vec![UNSCHEDULABLE]),
            (
                "selector matches",
                selecting("zone", "z-a"),
                node("a", 1, 0),
                vec![],
            ),
            (
                "selector differs",
                selecting("zone", "z-b"),
                node("a", 1, 0),
                vec![SELECTOR],
            ),
            (
                "label missing",
                selecting("gpu", "yes"),
                node("a", 1, 0),
                vec![SELECTOR],
            ),
            ("pinned here", pinned("a"), node("a", 1, 0), vec![]),
            (
                "pinned elsewhere",
                pinned("b"),
                node("a", 1, 0),
                vec![SELECTOR],
            ),
        ];
        for (what, p, n, want) in cases {
            assert_eq!(misfits(&p, &n), want, "{what}");
        }
    }

    #[test]
    fn schedule_table() {
        let two = || vec![node("a", 2000, 0), node("b", 2000, 0)];
        type Case = (
            &'static str,
            PodNeeds,
            Vec<NodeFacts>,
            Result<&'static str, &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("tie goes to the first name", pod(1000), two(), Ok("a")),
            (
                "least allocated wins",
                pod(500),
                vec![node("a", 2000, 1000), node("b", 2000, 500)],
                Ok("b"),
            ),
            (
                "bigger node is emptier",
                pod(1000),
                vec![node("a", 2000, 0), node("b", 8000, 0)],
                Ok("b"),
            ),
            (
                "only the one with room",
                pod(1500),
                vec![node("a", 2000, 1000), node("b", 2000, 0)],
                Ok("b"),
            ),
            (
                "counts reasons, sorted",
                pod(1000),
                vec![
                    node("a", 2000, 2000),
                    node("b", 2000, 1500),
                    NodeFacts {
                        ready: false,
                        ..node("c", 2000, 0)
                    },
                ],
                Err("0/3 nodes are available: 1 node(s) were not ready, 2 Insufficient cpu."),
            ),
            (
                "no nodes",
                pod(0),
                vec![],
                Err("0/0 nodes are available: no nodes available to schedule pods."),
            ),
        ];
        for (what, p, nodes, want) in cases {
            let got = schedule(&p, &nodes).map(|i| nodes[i].name.as_str());
            assert_eq!(got, want.map_err(String::from), "{what}");
        }
    }
}
