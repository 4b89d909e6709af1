use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::*;
use crate::clusters::summary::Topology;
use crate::clusters::summary::tests::member;
use causeway_crds::federation::cluster::NodeSummary;

fn slim_pod(spec: Value, phase: &str) -> SlimPod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "managedFields": [{"manager": "x"}], "annotations": {"a": "b"}},
        "spec": spec, "status": {"phase": phase},
    }))
    .unwrap()
}

fn c(cpu: &str, memory: &str) -> Value {
    json!({"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}})
}

#[test]
fn a_pod_requests_what_kube_scheduler_counts() {
    let sidecar = |cpu: &str, memory: &str| {
        let mut s = c(cpu, memory);
        s["restartPolicy"] = json!("Always");
        s
    };
    // (what, spec, phase, expected entry: bound, cpu millicores, memory bytes)
    type Case = (&'static str, Value, &'static str, Option<(bool, i64, i64)>);
    let table: Vec<Case> = vec![
        (
            "no requests",
            json!({"containers": [{"name": "c", "image": "i"}]}),
            "Pending",
            Some((false, 0, 0)),
        ),
        (
            "containers add up",
            json!({"nodeName": "n", "containers": [c("100m", "64Mi"), c("0.4", "64Mi")]}),
            "Running",
            Some((true, 500, 128 << 20)),
        ),
        (
            "a larger init container wins, per resource",
            json!({"containers": [c("500m", "1Gi")], "initContainers": [c("2", "100Mi"), c("1", "200Mi")]}),
            "Pending",
            Some((false, 2000, 1 << 30)),
        ),
        (
            "a sidecar adds to the containers and to later init containers",
            json!({"containers": [c("500m", "100Mi")],
                   "initContainers": [sidecar("200m", "50Mi"), c("600m", "10Mi")]}),
            "Pending",
            Some((false, 800, 150 << 20)),
        ),
        (
            "a limit without a request counts as the request",
            json!({"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
            "Pending",
            Some((false, 1000, 1 << 30)),
        ),
        (
            "pod-level requests replace the containers' sum; overhead is added",
            json!({"containers": [c("4", "4Gi")], "resources": {"requests": {"cpu": "1"}},
                   "overhead": {"cpu": "250m", "memory": "120Mi"}}),
            "Pending",
            Some((false, 1250, (4 << 30) + (120 << 20))),
        ),
        (
            "a quantity kube-apiserver would refuse counts as nothing",
            json!({"containers": [c("lots", "1Gi")]}),
            "Pending",
            Some((false, 0, 1 << 30)),
        ),
        (
            "a succeeded pod is not kept",
            json!({"nodeName": "n", "containers": [c("1", "1Gi")]}),
            "Succeeded",
            None,
        ),
        (
            "a failed pod is not kept",
            json!({"containers": [c("1", "1Gi")]}),
            "Failed",
            None,
        ),
    ];
    for (what, spec, phase, want) in table {
        let got = pod_entry(&slim_pod(spec, phase));
        let want = want.map(|(bound, cpu_milli, memory)| PodEntry {
            node: bound.then(|| "n".to_string()),
            finished: false,
            cpu_milli,
            memory,
        });
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn a_node_keeps_readiness_allocatable_and_topology_only() {
    let n: SlimNode = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/region": "eu-west-1",
            "topology.kubernetes.io/zone": "eu-west-1a", "kubernetes.io/hostname": "n1"}},
        "spec": {"providerID": "aws:///eu-west-1a/i-0abc"},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "True"}, {"type": "Ready", "status": "True"}],
                   "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "110", "ephemeral-storage": "100Gi"}},
    }))
    .unwrap();
    assert_eq!(
        n.metadata.labels.as_ref().map(|l| l.len()),
        Some(2),
        "only topology labels are read"
    );
    assert_eq!(
        node_entry(&n),
        Some(NodeEntry {
            name: "n1".into(),
            ready: true,
            cpu_milli: 3920,
            memory: 15 << 30,
            pods: 110,
            region: Some("eu-west-1".into()),
            zone: Some("eu-west-1a".into()),
            provider: Some("aws".into()),
        })
    );
    let bare: SlimNode = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
    assert_eq!(
        node_entry(&bare),
        Some(NodeEntry {
            name: "n2".into(),
            ..NodeEntry::default()
        })
    );
}

#[test]
fn a_relist_replaces_what_was_kept_and_changes_fold_in_place() {
    let pod = |name: &str, phase: &str| {
        let mut p = slim_pod(json!({"containers": [c("1", "1Gi")]}), phase);
        p.metadata.name = Some(name.into());
        p
    };
    let mut t: Table<PodEntry> = Table::default();
    let keys = |t: &Table<PodEntry>| {
        let mut k: Vec<String> = t.live.keys().cloned().collect();
        k.sort();
        k
    };
    use watcher::Event::*;
    for e in [
        Init,
        InitApply(pod("a", "Running")),
        InitApply(pod("b", "Running")),
        InitApply(pod("x", "Succeeded")),
    ] {
        t.apply(e, pod_entry);
    }
    assert!(
        !t.synced && t.live.is_empty(),
        "nothing counts before the list is whole"
    );
    t.apply(InitDone, pod_entry);
    assert!(t.synced);
    assert_eq!(keys(&t), ["ns/a", "ns/b"], "a finished pod is not kept");
    t.apply(Apply(pod("c", "Pending")), pod_entry);
    t.apply(Apply(pod("a", "Failed")), pod_entry);
    t.apply(Delete(pod("b", "Running")), pod_entry);
    assert_eq!(keys(&t), ["ns/c"]);
    // After a reconnect, the relist is the truth: "c" was deleted meanwhile.
    for e in [Init, InitApply(pod("d", "Running")), InitDone] {
        t.apply(e, pod_entry);
    }
    assert_eq!(keys(&t), ["ns/d"]);
}

/// Polls `usage` until its summary satisfies `ok`, for at most 10 s.
async fn until(usage: &Usage, what: &str, ok: impl Fn(&Summary) -> bool) -> Summary {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = None;
    while Instant::now() < deadline {
        last = usage.summary(&ClusterSpec::default());
        if last.as_ref().is_some_and(&ok) {
            return last.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within 10 s; last summary {last:?}");
}

fn quantities(s: &Summary, which: &str) -> (String, String, String) {
    let r = &s.resources;
    let list = match which {
        "allocatable" => &r.allocatable,
        "allocated" => &r.allocated,
        _ => &r.allocating,
    };
    let q = |k: &str| list.get(k).map(|q| q.0.clone()).unwrap_or_default();
    (q("cpu"), q("memory"), q("pods"))
}

fn t(cpu: &str, memory: &str, pods: &str) -> (String, String, String) {
    (cpu.into(), memory.into(), pods.into())
}

#[tokio::test]
async fn a_kubesim_member_is_summarised_and_followed() {
    let mut cfg = kubesim::Config::new("usage");
    cfg.nodes = 0;
    let (_server, client) = member(cfg).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    for (name, zone, cpu, memory) in [
        ("n1", "eu-west-1a", "4", "8Gi"),
        ("n2", "eu-west-1b", "2", "4Gi"),
    ] {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": zone}},
            "spec": {"providerID": format!("aws:///{zone}/{name}")},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}});
        nodes
            .create(&pp, &serde_json::from_value(node).unwrap())
            .await
            .unwrap();
    }
    for (name, node, cpu, memory) in [
        ("bound", Some("n1"), "500m", "1Gi"),
        ("also-bound", Some("n2"), "1", "512Mi"),
        ("pending", None, "250m", "128Mi"),
        ("done", Some("n1"), "2", "2Gi"),
    ] {
        let mut spec = json!({"containers": [c(cpu, memory)]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec});
        pods.create(&pp, &serde_json::from_value(pod).unwrap())
            .await
            .unwrap();
    }
    let status = |s: Value| Patch::Merge(json!({"status": s}));
    pods.patch_status(
        "done",
        &PatchParams::default(),
        &status(json!({"phase": "Succeeded"})),
    )
    .await
    .unwrap();

    let stop = CancellationToken::new();
    let _stop_on_exit = stop.clone().drop_guard();
    let usage = Usage::start(client.clone(), stop.clone());
    let s = until(&usage, "the first summary", |s| {
        s.nodes.total_num == 2
            && s.resources.allocated.get("pods").map(|q| q.0.as_str()) == Some("2")
    })
    .await;
    assert_eq!(
        s.nodes,
        NodeSummary {
            total_num: 2,
            ready_num: 2
        }
    );
    assert_eq!(quantities(&s, "allocatable"), t("6", "12Gi", "220"));
    assert_eq!(quantities(&s, "allocated"), t("1500m", "1536Mi", "2"));
    assert_eq!(quantities(&s, "allocating"), t("250m", "128Mi", "1"));
    assert_eq!(
        usage.state.lock().pods.live.len(),
        3,
        "the finished pod is not kept"
    );
    assert_eq!(
        s.topology,
        Topology {
            region: Some("eu-west-1".into()),
            zones: vec!["eu-west-1a".into(), "eu-west-1b".into()],
            provider: Some("aws".into()),
        }
    );

    // A deleted pod no longer counts.
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let s = until(&usage, "the deletion", |s| {
        quantities(s, "allocated") == t("1", "512Mi", "1")
    })
    .await;
    assert_eq!(quantities(&s, "allocating"), t("250m", "128Mi", "1"));

    // A node going NotReady leaves allocatable but still counts in total, and the
    // pods on it leave allocated (they no longer take from what the Ready nodes have).
    nodes
        .patch_status(
            "n2",
            &PatchParams::default(),
            &status(json!({"conditions": [{"type": "Ready", "status": "False"}]})),
        )
        .await
        .unwrap();
    let s = until(&usage, "the NotReady node", |s| s.nodes.ready_num == 1).await;
    assert_eq!(s.nodes.total_num, 2);
    assert_eq!(quantities(&s, "allocatable"), t("4", "8Gi", "110"));
    assert_eq!(quantities(&s, "allocated"), t("0", "0", "0"));

    // The pending pod is bound (as a scheduler binds it: the binding subresource, since
    // an update may not change spec.nodeName): it moves from allocating to allocated.
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    pods.create_subresource::<_, Value>("binding", "pending", &pp, &binding)
        .await
        .unwrap();
    let s = until(&usage, "the binding", |s| {
        quantities(s, "allocating") == t("0", "0", "0")
    })
    .await;
    assert_eq!(quantities(&s, "allocated"), t("250m", "128Mi", "1"));
}
