//! The `causeway` binary as an operator runs it: `causeway controller` against a hub,
//! with its log going to a file.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{admin_addr, status, wait_for_log};

#[test]
fn controller_logs_to_a_file_without_colour_codes() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt
        .block_on(kubesim::Server::start(kubesim::Config::new("hub")))
        .expect("hub starts");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("hub.kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig()).unwrap();
    let log = dir.path().join("controller.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["controller", "--metrics", "127.0.0.1:0", "--hub-kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("causeway starts");
    let text = wait_for_log(&log, "serving /metrics");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escape codes in a log file:\n{text:?}"
    );
}

#[test]
fn the_default_metrics_port_stays_clear_of_prometheus() {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["controller", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("[default: 127.0.0.1:8479]"),
        "--metrics default in:\n{help}"
    );
}

#[test]
fn hub_context_without_hub_kubeconfig_picks_that_context_of_kubeconfig() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hub = rt
        .block_on(kubesim::Server::start(kubesim::Config::new("hub")))
        .expect("hub starts");
    rt.block_on(async {
        let client = hub.client().await;
        causeway_runtime::crds::install(
            &client,
            &causeway_crds::crdgen::all_crds(),
            "test",
            Duration::from_secs(10),
        )
        .await
        .expect("CRDs installed");
    });
    let dir = tempfile::tempdir().unwrap();
    // the current context points nowhere; only --hub-context reaches the hub
    let kubeconfig = dir.path().join("config");
    let entry = |name: &str, server: String| kubesim::kubeconfig::Entry {
        name: name.into(),
        server,
        ca_pem: hub.ca_pem().map(String::from),
        token: hub.admin_token().into(),
    };
    std::fs::write(
        &kubeconfig,
        kubesim::kubeconfig::multi(&[
            entry("nowhere", "https://127.0.0.1:1".into()),
            entry("hub", hub.url()),
        ]),
    )
    .unwrap();
    let log = dir.path().join("controller.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "controller",
            "--metrics",
            "127.0.0.1:0",
            "--hub-context",
            "hub",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("CAUSEWAY_HUB_KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("causeway starts");
    let text = wait_for_log(&log, "serving /metrics");
    let addr = admin_addr(&text);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !status(&addr, "/readyz").contains("200") {
        assert!(
            Instant::now() < deadline,
            "not ready within 20 s (the hub context was not used?); log:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn the_webhook_deployment_uses_only_flags_causeway_webhook_has() {
    let help = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["webhook", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let deployment = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/webhook/deployment.yaml"
    ))
    .unwrap();
    let flags: Vec<&str> = deployment
        .split_whitespace()
        .filter(|w| w.starts_with("--") && !w.starts_with("---"))
        .map(|w| w.split('=').next().unwrap())
        .collect();
    assert!(flags.len() >= 4, "{flags:?}");
    for flag in flags {
        assert!(
            help.contains(flag),
            "{flag} is not a flag of causeway webhook"
        );
    }
    for flag in [
        "--mcs-writer",
        "--mcs-admin-group",
        "--protected-export-namespaces",
        "--protected-exporters-group",
    ] {
        assert!(help.contains(flag), "{flag} in:\n{help}");
    }
}
