//! The `causeway-proxy` binary itself: how it sets up its process.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::harness::{Hub, eventually};

const BIN: &str = env!("CARGO_BIN_EXE_causeway-proxy");

/// A field of a `/proc/PID/...` file ("Name:  value"), as its text after the colon.
fn proc_field(pid: u32, file: &str, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// The heap has no transparent huge page from its start: the process turns THP off and
/// executes itself again before its allocator runs (mimalloc asks for huge pages for
/// its arena, and two of them, 4 MiB mostly empty, were touched before `main`).
#[tokio::test]
async fn the_process_runs_without_transparent_huge_pages() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let dir = std::env::temp_dir();
    let tag = format!("causeway-proxy-test-{}-thp", std::process::id());
    let kubeconfig = dir.join(format!("{tag}-kubeconfig"));
    let log = dir.join(format!("{tag}-log"));
    std::fs::write(&kubeconfig, hub.kubeconfig())?;
    let mut child = Command::new(BIN)
        .arg("--hub-kubeconfig")
        .arg(&kubeconfig)
        .args(["--listen-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        .args(["--no-publish", "--worker-threads", "1"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()?;
    // Serving: past the re-execution (the process keeps its id across it).
    eventually("the proxy's startup line", Duration::from_secs(20), || {
        let logs = std::fs::read_to_string(&log).unwrap_or_default();
        async move { logs.contains("causeway-proxy serving") }
    })
    .await?;
    let logs = std::fs::read_to_string(&log)?;
    let pid = child.id().expect("running");
    let thp = proc_field(pid, "status", "THP_enabled");
    let huge = proc_field(pid, "smaps_rollup", "AnonHugePages");
    child.kill().await?;
    for f in [&kubeconfig, &log] {
        let _ = std::fs::remove_file(f);
    }
    assert_eq!(thp.as_deref(), Some("0"), "THP off for the process: {logs}");
    assert_eq!(
        huge.as_deref(),
        Some("0 kB"),
        "no huge page in the heap: {logs}"
    );
    Ok(())
}
