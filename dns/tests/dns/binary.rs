//! The `causeway-dns` binary itself: its flags and its log output.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{DEADLINE, Env};

const BIN: &str = env!("CARGO_BIN_EXE_causeway-dns");

/// A file under the system temp dir, unique to this test process and `what`.
fn temp_file(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("causeway-dns-test-{}-{what}", std::process::id()))
}

/// Kills the child (by its own handle) when dropped, so a failing test leaves no process.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn logs_to_a_file_carry_no_colour_codes() {
    let env = Env::bare().await;
    let kubeconfig = temp_file("kubeconfig");
    std::fs::write(&kubeconfig, env.sim.kubeconfig()).unwrap();
    let (out_path, err_path) = (temp_file("stdout"), temp_file("stderr"));
    let child = Command::new(BIN)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--listen", "127.0.0.1:0", "--log", "info"])
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("the binary starts");
    let mut child = Reaped(child);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let logs = loop {
        let logs = std::fs::read_to_string(&out_path).unwrap_or_default()
            + &std::fs::read_to_string(&err_path).unwrap_or_default();
        if logs.contains("causeway-dns listening") {
            break logs;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("causeway-dns exited with {status}: {logs}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no startup log line: {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(child);
    for f in [&kubeconfig, &out_path, &err_path] {
        let _ = std::fs::remove_file(f);
    }
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI escape codes in a log file: {logs:?}"
    );
    assert!(
        logs.contains(" INFO ") && logs.contains("zone=clusterset.local"),
        "plain text fields: {logs:?}"
    );
}
