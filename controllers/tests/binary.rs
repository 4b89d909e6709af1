//! The `causeway` binary as an operator runs it: `causeway controller` against a hub,
//! with its log going to a file.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while !text.contains("serving /metrics") {
        assert!(
            Instant::now() < deadline,
            "no 'serving /metrics' line within 30 s; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text.clear();
        std::fs::File::open(&log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
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
