//! The `causeway-dns` binary itself: its flags and its log output.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hickory_proto::rr::RecordType;

use crate::support::{DEADLINE, Env, ask_tcp, ask_udp, eventually, install_crds, render};

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
    /// Starts `causeway-dns --kubeconfig <sim> --listen 127.0.0.1:0 <args>` (no
    /// `--listen` of its own when `args` has one) and waits for its startup line;
    /// returns it with everything logged so far.
    async fn start(env: &Env, test: &str, args: &[&str]) -> (Bin, String) {
        let kubeconfig = temp_file(test, "kubeconfig");
        std::fs::write(&kubeconfig, env.sim.kubeconfig()).unwrap();
        let (out, err) = (temp_file(test, "stdout"), temp_file(test, "stderr"));
        let child = Command::new(BIN)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--log", "info"])
            .args(
                (!args.iter().any(|a| a.starts_with("--listen")))
                    .then_some(["--listen", "127.0.0.1:0"])
                    .into_iter()
                    .flatten(),
            )
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

/// Whether this host has IPv6 loopback (some CI containers have none).
fn has_ipv6_loopback() -> bool {
    std::net::UdpSocket::bind("[::1]:0").is_ok() && std::net::TcpListener::bind("[::1]:0").is_ok()
}

/// `--listen [::]:PORT`, as deploy/dns/deployment.yaml runs it, answers IPv4 and IPv6
/// clients alike, over UDP and TCP.
#[tokio::test]
async fn listening_on_the_ipv6_wildcard_answers_ipv4_and_ipv6_clients() {
    if !has_ipv6_loopback() {
        // Straight to the process's stderr: shown even though the test harness
        // captures eprintln! of passing tests.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!! SKIPPED listening_on_the_ipv6_wildcard_answers_ipv4_and_ipv6_clients: \
             this host has no IPv6 loopback (::1), so the dual-stack listener is NOT tested \
             here !!!!!\n"
        );
        return;
    }
    let env = Env::bare().await;
    install_crds(&env.client).await;
    let (_bin, logs) = Bin::start(&env, "dualstack", &["--listen", "[::]:0"]).await;
    let udp = udp_addr(&logs);
    assert!(udp.ip().is_unspecified() && udp.is_ipv6(), "{logs}");
    let name = "dns-version.clusterset.local.";
    for server in [
        SocketAddr::from(([127, 0, 0, 1], udp.port())),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, udp.port())),
    ] {
        eventually("the binary answers", || async {
            ask_udp(server, name, RecordType::TXT, None).await.rcode == 0
        })
        .await;
        let r = ask_udp(server, name, RecordType::TXT, None).await;
        assert_eq!(r.answers, ["TXT 1.0.0"], "UDP via {server}");
        let r = ask_tcp(server, name, RecordType::TXT).await;
        assert_eq!(r.answers, ["TXT 1.0.0"], "TCP via {server}");
    }
}

/// The shipped manifest listens on the dual-stack wildcard (DNS and metrics, which
/// the probes use) and asks for a ClusterIP of each family the cluster has, so
/// IPv6-only and IPv6-primary clusters reach it.
#[test]
fn the_deployment_listens_dual_stack() {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/dns/deployment.yaml"
    ))
    .unwrap();
    let docs: Vec<&str> = yaml.split("\n---\n").collect();
    let doc = |kind: &str| {
        docs.iter()
            .find(|d| d.lines().any(|l| l.trim() == format!("kind: {kind}")))
            .unwrap_or_else(|| panic!("a {kind} in deployment.yaml"))
    };
    // The container's args: the `- --flag=value` items (comments are not args).
    let args: Vec<&str> = doc("Deployment")
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("- --"))
        .collect();
    let flag = |name: &str| {
        let found: Vec<&str> = args
            .iter()
            .filter_map(|a| a.strip_prefix(name)?.strip_prefix('='))
            .collect();
        assert_eq!(found.len(), 1, "one --{name} in {args:?}");
        found[0].parse::<SocketAddr>().unwrap()
    };
    for name in ["listen", "metrics"] {
        let addr = flag(name);
        assert!(
            addr.is_ipv6() && addr.ip().is_unspecified(),
            "--{name}={addr}: [::] serves both families"
        );
    }
    assert_eq!(flag("listen").port(), 5353);
    let policy: Vec<&str> = doc("Service")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ipFamilyPolicy:"))
        .map(str::trim)
        .collect();
    assert_eq!(policy, ["PreferDualStack"]);
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
