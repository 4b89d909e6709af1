//! The `kubesim` binary: writes a working kubeconfig, and with `--data-dir` brings its
//! objects back after a restart (same uid, resourceVersion, ClusterIP; CRDs served again).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::helpers::try_client_from_yaml;

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary (with `extra` flags) and waits for its kubeconfig to answer.
async fn start(
    kubeconfig: &std::path::Path,
    data_dir: &std::path::Path,
    extra: &[&str],
) -> (Running, kube::Client) {
    let _ = std::fs::remove_file(kubeconfig);
    let child = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .args([
            "--name",
            "bin",
            "--listen",
            "127.0.0.1:0",
            "--log",
            "info",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(data_dir.with_extension("log")).unwrap())
        .spawn()
        .expect("kubesim starts");
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(yaml) = std::fs::read_to_string(kubeconfig)
            && let Ok(c) = try_client_from_yaml(&yaml).await
            && c.apiserver_version().await.is_ok()
        {
            return (running, c);
        }
        assert!(
            Instant::now() < deadline,
            "kubesim did not answer on its kubeconfig within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn binary_writes_a_kubeconfig_and_data_dir_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (kc, data) = (dir.path().join("kubeconfig"), dir.path().join("data"));
    let (first, c) = start(&kc, &data, &[]).await;
    // its log went to a file: no colour codes in it
    let log = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(log.contains("INFO"), "kubesim logged: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a log file: {log:?}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let svc = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    drop(first);

    let (_second, c) = start(&kc, &data, &[]).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let back = cms
        .get("kept")
        .await
        .expect("the ConfigMap survived the restart");
    assert_eq!(back.data.unwrap()["k"], "v");
    assert_eq!(back.metadata.uid, cm.metadata.uid);
    assert_eq!(back.metadata.resource_version, cm.metadata.resource_version);
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    assert_eq!(
        svcs.get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .unwrap(),
        ip
    );
    // the restored ClusterIP stays reserved, and new writes get newer resourceVersions
    let other = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "other"}, "spec": {"ports": [{"port": 81}]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_ne!(other.spec.unwrap().cluster_ip.unwrap(), ip);
    let new_rv: u64 = other.metadata.resource_version.unwrap().parse().unwrap();
    let old_rv: u64 = cm.metadata.resource_version.unwrap().parse().unwrap();
    assert!(new_rv > old_rv, "{new_rv} > {old_rv}");
}

#[tokio::test]
async fn node_flags_shape_the_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let (kc, data) = (dir.path().join("kubeconfig"), dir.path().join("data"));
    let flags = [
        "--nodes",
        "3",
        "--node-cpu",
        "2500m",
        "--node-memory",
        "4Gi",
        "--node-pods",
        "20",
        "--region",
        "eu-west",
        "--zones",
        "eu-west-a,eu-west-b",
    ];
    let (_running, c) = start(&kc, &data, &flags).await;
    let nodes: Vec<Node> = Api::<Node>::all(c)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let got: Vec<(String, String, String, String)> = nodes
        .iter()
        .map(|n| {
            let l = n.metadata.labels.clone().unwrap();
            let a = n.status.clone().unwrap().allocatable.unwrap();
            (
                n.metadata.name.clone().unwrap(),
                format!(
                    "{}/{}",
                    l["topology.kubernetes.io/region"], l["topology.kubernetes.io/zone"]
                ),
                format!("{} {} {}", a["cpu"].0, a["memory"].0, a["pods"].0),
                n.spec.clone().unwrap().provider_id.unwrap(),
            )
        })
        .collect();
    let want = |i: usize, zone: &str| {
        (
            format!("bin-node-{i}"),
            format!("eu-west/{zone}"),
            "2500m 4Gi 20".to_string(),
            format!("kubesim://bin/bin-node-{i}"),
        )
    };
    assert_eq!(
        got,
        vec![
            want(0, "eu-west-a"),
            want(1, "eu-west-b"),
            want(2, "eu-west-a")
        ]
    );
}

#[test]
fn bad_node_flags_are_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    for (flags, want) in [
        (
            vec!["--node-cpu", "lots"],
            "invalid value 'lots' for '--node-cpu",
        ),
        (
            vec!["--node-memory=-1Gi"],
            "quantity \"-1Gi\" must not be negative",
        ),
        (vec!["--node-pods", "many"], "'--node-pods"),
        (
            vec!["--zones", "a,not a zone"],
            "zone \"not a zone\" is not a valid label value",
        ),
        (
            vec!["--region=eu_"],
            "region \"eu_\" is not a valid label value",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_kubesim"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kc)
            .args(&flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{flags:?} must fail");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_kubesim"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--nodes",
        "--node-cpu",
        "--node-memory",
        "--node-pods",
        "--region",
        "--zones",
        "--simulate-workloads",
    ] {
        assert!(help.contains(flag), "--help documents {flag}");
    }
}
