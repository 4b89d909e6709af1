//! The `kubesim` binary: writes a working kubeconfig, and with `--data-dir` brings its
//! objects back after a restart (same uid, resourceVersion, ClusterIP; CRDs served again).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Service};
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

/// Starts the binary and waits for its kubeconfig to answer.
async fn start(
    kubeconfig: &std::path::Path,
    data_dir: &std::path::Path,
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
    let (first, c) = start(&kc, &data).await;
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

    let (_second, c) = start(&kc, &data).await;
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
