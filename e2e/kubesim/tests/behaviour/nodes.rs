//! Simulated nodes: topology labels, capacity and providerID; Ready and NotReady
//! (through `Server::set_node_ready` or a client's status patch) and what it does to
//! placement and workload readiness; nodeSelector.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use serde_json::json;

use crate::helpers::*;
use crate::workloads::*;

fn ready_condition(n: Node) -> k8s_openapi::api::core::v1::NodeCondition {
    let conds = n.status.and_then(|s| s.conditions).unwrap_or_default();
    conds
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition")
}

#[tokio::test]
async fn a_not_ready_node_drops_readiness_and_takes_no_pods_until_ready_again() {
    let env = sim(2, "1").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let nodes: Api<Node> = Api::all(env.client.clone());
    create(&deps, "web", 2, template("web", "1", json!({}))).await;
    ready_replicas(&deps, "web", 2).await;

    env.server.set_node_ready("sim-node-1", false).unwrap();
    let n = nodes.get("sim-node-1").await.unwrap();
    let ready = ready_condition(n);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("KubeletNotReady"))
    );
    let d = ready_replicas(&deps, "web", 1).await;
    assert_eq!(available(&d).0, "False");
    let on_bad = eventually("the pod on the NotReady node not Ready", || async {
        let v = pods_of(&pods, "web-").await;
        v.into_iter().find(|p| {
            node_of(p) == Some("sim-node-1")
                && condition(p, "Ready").is_some_and(|c| c.status == "False")
        })
    })
    .await;
    assert_eq!(
        phase(&on_bad),
        "Running",
        "the pod still runs; it is just not Ready"
    );

    // scaling down removes the pod that is not ready first
    scale(&deps, "web", 1).await;
    eventually("the pod on the NotReady node deleted", || async {
        let v = pods_of(&pods, "web-").await;
        (v.len() == 1 && node_of(&v[0]) == Some("sim-node-0")).then_some(())
    })
    .await;

    // a new pod would fit only on the NotReady node: it stays Pending, saying why
    create(&deps, "extra", 1, template("extra", "1", json!({}))).await;
    let p = eventually("extra pending", || async {
        pods_of(&pods, "extra-")
            .await
            .into_iter()
            .find(|p| condition(p, "PodScheduled").is_some_and(|c| c.status == "False"))
    })
    .await;
    assert_eq!(
        condition(&p, "PodScheduled").unwrap().message.as_deref(),
        Some("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were not ready.")
    );
    assert_eq!(
        env.server.set_node_ready("nope", true).unwrap_err().code,
        404,
        "an unknown node is a clear 404"
    );

    // Ready again (through the API, as a kubelet or kubectl would post it): the pending pod is placed
    let since = ready.last_transition_time.clone();
    env.server.set_node_ready("sim-node-1", true).unwrap();
    let n = nodes.get("sim-node-1").await.unwrap();
    let again = ready_condition(n);
    assert_eq!(again.reason.as_deref(), Some("KubeletReady"));
    assert!(again.last_transition_time >= since);
    ready_replicas(&deps, "extra", 1).await;
    let placed = pods_of(&pods, "extra-").await;
    assert_eq!(node_of(&placed[0]), Some("sim-node-1"));
}

#[tokio::test]
async fn node_status_patched_by_a_client_is_respected() {
    let env = sim(1, "4").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let nodes: Api<Node> = Api::all(env.client.clone());
    create(&deps, "web", 2, template("web", "", json!({}))).await;
    ready_replicas(&deps, "web", 2).await;
    // with real kubectl, as a user (or a kubelet) posts node status
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, env.server.kubeconfig()).unwrap();
    let not_ready = r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"down"}]}}"#;
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kc)
        .args([
            "patch",
            "node",
            "sim-node-0",
            "--subresource=status",
            "-p",
            not_ready,
        ])
        .output();
    let out = within("kubectl patch", out)
        .await
        .unwrap_or_else(|e| panic!("run {kubectl} (install kubectl or set KUBECTL): {e}"));
    assert!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `kubectl get pods -o wide` shows where each pod runs
    let wide = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "pods", "-o", "wide", "--no-headers"])
        .output();
    let wide = within("kubectl get pods", wide).await.unwrap();
    let text = String::from_utf8_lossy(&wide.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("sim-node-0")).count(),
        2,
        "{text}"
    );
    ready_replicas(&deps, "web", 0).await;
    // the simulation never rewrites node status
    let n = nodes.get("sim-node-0").await.unwrap();
    let c = ready_condition(n);
    assert_eq!(
        (c.status.as_str(), c.message.as_deref()),
        ("False", Some("down"))
    );
}

/// `kubectl get --sort-by` on a field no column shows asks for Table rows that carry
/// the whole object (`includeObject=Object`); with metadata only it fails ("couldn't
/// find any field with path").
#[tokio::test]
async fn kubectl_sorts_by_a_field_no_column_shows() {
    let env = sim(3, "4").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    create(&deps, "web", 6, template("web", "", json!({}))).await;
    ready_replicas(&deps, "web", 6).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, env.server.kubeconfig()).unwrap();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "pods", "--no-headers", "-o", "wide"])
        .args(["--sort-by", ".spec.nodeName"])
        .output();
    let out = within("kubectl get --sort-by", out)
        .await
        .unwrap_or_else(|e| panic!("run {kubectl} (install kubectl or set KUBECTL): {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nodes: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("sim-node-")))
        .collect();
    assert_eq!(nodes.len(), 6, "{text}");
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(nodes, sorted, "{text}");
    assert!(
        nodes.first() != nodes.last(),
        "spread over the nodes: {text}"
    );
}

#[tokio::test]
async fn node_selector_picks_the_zone() {
    let env = sim(4, "8").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let t = template(
        "z2",
        "",
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "z2"}}),
    );
    create(&deps, "z2", 4, t).await;
    ready_replicas(&deps, "z2", 4).await;
    let on: std::collections::BTreeSet<String> = pods_of(&pods, "z2-")
        .await
        .iter()
        .map(|p| node_of(p).unwrap().to_string())
        .collect();
    // zones go round-robin: nodes 1 and 3 are in z2; spreading uses both
    assert_eq!(
        on,
        ["sim-node-1".to_string(), "sim-node-3".to_string()].into()
    );
    let t = template("gpu", "", json!({"nodeSelector": {"gpu": "yes"}}));
    create(&deps, "gpu", 1, t).await;
    let p = eventually("gpu pending", || async {
        pods_of(&pods, "gpu-")
            .await
            .into_iter()
            .find(|p| condition(p, "PodScheduled").is_some())
    })
    .await;
    assert_eq!(
        condition(&p, "PodScheduled").unwrap().message.as_deref(),
        Some("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.")
    );
}

#[tokio::test]
async fn nodes_carry_topology_capacity_and_provider_id() {
    let env = sim(3, "3500m").await;
    let nodes: Api<Node> = Api::all(env.client.clone());
    let n = nodes.get("sim-node-2").await.unwrap();
    let labels = n.metadata.labels.unwrap();
    assert_eq!(
        (
            labels["topology.kubernetes.io/region"].as_str(),
            labels["topology.kubernetes.io/zone"].as_str(),
            labels["kubernetes.io/hostname"].as_str()
        ),
        ("eu", "z1", "sim-node-2")
    );
    assert_eq!(
        n.spec.unwrap().provider_id.as_deref(),
        Some("kubesim://sim/sim-node-2")
    );
    let alloc = n.status.unwrap().allocatable.unwrap();
    assert_eq!(
        (
            alloc["cpu"].0.as_str(),
            alloc["memory"].0.as_str(),
            alloc["pods"].0.as_str()
        ),
        ("3500m", "32Gi", "110")
    );
    let mut cfg = kubesim::Config::new("bad");
    cfg.node_capacity.memory = "lots".into();
    let e = kubesim::Server::start(cfg)
        .await
        .err()
        .expect("a bad quantity is refused");
    assert!(
        e.to_string().contains("node memory: quantity \"lots\""),
        "{e}"
    );
}
