//! The `causeway` binary as an operator runs it: `causeway controller` against a hub,
//! with its log going to a file.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Waits for `needle` in the log file at `log` (30 s at most); returns the log.
fn wait_for_log(log: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while !text.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} line within 30 s; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text.clear();
        std::fs::File::open(log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
    text
}

/// One plain HTTP GET; the status line.
fn status(addr: &str, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

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
        let kc = kube::config::Kubeconfig::from_yaml(&hub.kubeconfig()).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
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
    let addr = text
        .split("addr=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the admin address in the log")
        .to_string();
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
