//! `causeway-local up --pull` and `causeway-local fault`: a Pull member with its own agent
//! next to Push members; a member cut off from a second terminal goes Unknown (Pull) or
//! NotReady (Push), is tainted, and recovers — seen with real kubectl.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::kubectl_bin;

/// What it printed after "Press Ctrl-C", line by line.
pub type Rest = std::sync::mpsc::Receiver<String>;

/// Starts `causeway-local` with `args` and `--dir dir`; returns it once it printed
/// "Press Ctrl-C", with what it printed and the rest of its output to come.
pub fn up(args: &[&str], dir: &Path, log: &std::fs::File) -> (Child, Vec<String>, Rest) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(args)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(log.try_clone().unwrap())
        .spawn()
        .expect("causeway-local starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !out.iter().any(|l: &String| l.contains("Press Ctrl-C")) {
        assert!(
            Instant::now() < deadline,
            "causeway-local did not come up in 30 s; printed {out:#?}"
        );
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            out.push(l);
        }
    }
    (child, out, rx)
}

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_pull_member_coexists_with_push_members_and_faults_show_in_kubectl() {
    let kubectl = kubectl_bin();
    let dir = tempfile::tempdir().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let (child, out, _rest) = up(
        &["up", "--pull", "west", "--pods", "0", "--log", "info"],
        dir.path(),
        log.as_file(),
    );
    let mut stop = Stop(child);
    let printed = out.join("\n");
    assert!(printed.contains("west: pull mode"), "{printed}");
    assert!(printed.contains("fault west unreachable"), "{printed}");
    let merged = dir.path().join("kubeconfig");
    let clusters = |want: &str, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = Command::new(&kubectl)
                .env("KUBECONFIG", &merged)
                .args(["--context", "hub", "get", "clusters", "--no-headers"])
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&o.stdout).into_owned();
            let rows: Vec<String> = got
                .lines()
                .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
                .collect();
            if rows.join("\n") == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: got\n{got}\nwant\n{want}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    // NAME VERSION MODE READY
    clusters(
        "east v1.33.0 Push True\nnorth v1.33.0 Push True\nwest v1.33.0 Pull True",
        "all Ready, west in pull mode",
    );
    let fault = |cluster: &str, what: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
            .args(["fault", cluster, what, "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    fault("west", "unreachable");
    fault("east", "not-ready");
    clusters(
        "east v1.33.0 Push False\nnorth v1.33.0 Push True\nwest v1.33.0 Pull Unknown",
        "west Unknown (its agent lost the hub), east not ready",
    );
    let taints = Command::new(&kubectl)
        .env("KUBECONFIG", &merged)
        .args([
            "--context",
            "hub",
            "get",
            "clusters",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.spec.taints[*].key} {end}",
        ])
        .output()
        .unwrap();
    let taints = String::from_utf8_lossy(&taints.stdout).into_owned();
    assert!(
        taints.contains("east=cluster.causeway.io/not-ready")
            && taints.contains("west=cluster.causeway.io/unreachable")
            && taints.contains("north= "),
        "{taints}"
    );
    fault("west", "ok");
    fault("east", "ok");
    clusters(
        "east v1.33.0 Push True\nnorth v1.33.0 Push True\nwest v1.33.0 Pull True",
        "recovered",
    );
    // each fault is the member's whole state: not-ready after unreachable is reachable
    // and not ready, not both
    let east_reason = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = Command::new(&kubectl)
                .env("KUBECONFIG", &merged)
                .args([
                    "--context",
                    "hub",
                    "get",
                    "cluster",
                    "east",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}",
                ])
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&o.stdout).into_owned();
            if got.trim() == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "east's Ready reason: got {got}, want {want}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    fault("east", "unreachable");
    east_reason("ClusterNotReachable");
    fault("east", "not-ready");
    east_reason("ClusterNotReady");
    // a fault for a cluster that does not exist is refused with a reason
    let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(["fault", "nowhere", "ok", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no cluster \"nowhere\""));
    // once `up` stopped (Ctrl-C), a fault says no `up` runs
    let pid = stop.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while stop.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "causeway-local did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(["fault", "east", "ok", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no running `causeway-local up`"), "{err}");
}
