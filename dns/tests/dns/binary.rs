//! The `causeway-dns` binary itself: its flags and its log output.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hickory_proto::rr::RecordType;

use crate::support::{DEADLINE, Env, ask_udp, eventually, install_crds, render};

const BIN: &str = env!("CARGO_BIN_EXE_causeway-dns");

/// A file under the system temp dir, unique to this test process, test and `what`.
fn temp_file(test: &str, what: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "causeway-dns-test-{}-{test}-{what}",
        std::process::id()
    ))
}

/// The binary running against kubesim with stdout and stderr in files; killed (by
/// its own handle) and its files removed when dropped.
struct Bin {
    child: Child,
    files: Vec<PathBuf>,
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Bin {
    /// Starts `causeway-dns --kubeconfig <sim> --listen 127.0.0.1:0 <args>` and waits
    /// for its startup line; returns it with everything logged so far.
    async fn start(env: &Env, test: &str, args: &[&str]) -> (Bin, String) {
        let kubeconfig = temp_file(test, "kubeconfig");
        std::fs::write(&kubeconfig, env.sim.kubeconfig()).unwrap();
        let (out, err) = (temp_file(test, "stdout"), temp_file(test, "stderr"));
        let child = Command::new(BIN)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--listen", "127.0.0.1:0", "--log", "info"])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .expect("the binary starts");
        let mut bin = Bin {
            child,
            files: vec![kubeconfig, out.clone(), err.clone()],
        };
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let logs = std::fs::read_to_string(&out).unwrap_or_default()
                + &std::fs::read_to_string(&err).unwrap_or_default();
            if logs.contains("causeway-dns listening") {
                return (bin, logs);
            }
            if let Ok(Some(status)) = bin.child.try_wait() {
                panic!("causeway-dns exited with {status}: {logs}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no startup log line: {logs:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The UDP address from the startup line (`udp=127.0.0.1:PORT`).
fn udp_addr(logs: &str) -> SocketAddr {
    let at = logs.find("udp=").expect("udp= in the startup line") + 4;
    let end = logs[at..].find(' ').map_or(logs.len(), |e| at + e);
    logs[at..end].parse().expect("an address after udp=")
}

#[tokio::test]
async fn logs_to_a_file_carry_no_colour_codes() {
    let env = Env::bare().await;
    let (_bin, logs) = Bin::start(&env, "colour", &[]).await;
    assert!(
        !logs.contains('\u{1b}'),
        "ANSI escape codes in a log file: {logs:?}"
    );
    assert!(
        logs.contains(" INFO ") && logs.contains("zone=clusterset.local"),
        "plain text fields: {logs:?}"
    );
}

#[tokio::test]
async fn ns_address_flag_sets_the_nameserver_addresses_and_glue() {
    let env = Env::bare().await;
    install_crds(&env.client).await;
    let args = ["--ns-address", "10.96.0.53", "--ns-address=fd00::53"];
    let (_bin, logs) = Bin::start(&env, "nsaddr", &args).await;
    let udp = udp_addr(&logs);
    let apex = "clusterset.local.";
    eventually("the binary syncs", || async {
        ask_udp(udp, apex, RecordType::NS, None).await.rcode == 0
    })
    .await;
    let r = ask_udp(udp, apex, RecordType::NS, None).await;
    let mut glue: Vec<String> = r.msg.additionals.iter().map(|a| render(&a.data)).collect();
    glue.sort();
    assert_eq!(glue, ["A 10.96.0.53", "AAAA fd00::53"]);
    let ns = "ns.dns.clusterset.local.";
    let r = ask_udp(udp, ns, RecordType::AAAA, None).await;
    assert_eq!(r.answers, ["AAAA fd00::53"]);
}

#[test]
fn help_explains_every_flag() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--ns-address <IP>",
        "--tcp-idle-timeout",
        "--tcp-query-timeout-ms",
        "--tcp-max-connections ",
        "--tcp-max-connections-per-client",
        "--max-concurrent-forwards",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    let out = Command::new(BIN)
        .args(["--ns-address", "not-an-ip"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ns-address"), "{err}");
    let out = Command::new(BIN)
        .args(["--max-concurrent-forwards", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-concurrent-forwards"), "{err}");
}
