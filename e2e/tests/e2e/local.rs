//! `causeway-local up`: comes up, kubectl works against every context, Ctrl-C stops it cleanly.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::kubectl_bin;

#[test]
fn causeway_local_up_serves_every_context_and_stops_on_sigint() {
    let kubectl = kubectl_bin();
    let dir = tempfile::tempdir().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let (mut child, out, rx) =
        crate::local_pull::up(&["up", "--log", "info"], dir.path(), log.as_file());
    let printed = out.join("\n");
    for step in [
        "[1/9]",
        "[2/9]",
        "[3/9]",
        "[4/9]",
        "[5/9]",
        "[6/9]",
        "[7/9]",
        "[8/9]",
        "[9/9]",
        "curl -s http://127.0.0.1:",
        "dig @127.0.0.1 -p ",
        "kubectl --context hub get crds",
        "examples/mcs-demo/east.yaml",
    ] {
        assert!(
            printed.contains(step),
            "progress line {step:?} missing:\n{printed}"
        );
    }
    let merged = dir.path().join("kubeconfig");
    assert!(printed.contains(&merged.display().to_string()), "{printed}");
    let run = |args: &[&str]| {
        let o = Command::new(&kubectl)
            .env("KUBECONFIG", &merged)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let contexts = run(&["config", "get-contexts", "-o", "name"]);
    let mut ctx: Vec<&str> = contexts.lines().collect();
    ctx.sort();
    assert_eq!(ctx, vec!["east", "hub", "north", "search", "west"]);
    let mut uids = Vec::new();
    for c in ["hub", "east", "west", "north"] {
        let ns = run(&[
            "--context",
            c,
            "get",
            "ns",
            "kube-system",
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        uids.push(ns);
        let crds = run(&["--context", c, "get", "crds", "-o", "name"]);
        assert!(
            crds.contains("serviceimports.multicluster.x-k8s.io"),
            "{c}: {crds}"
        );
        // each per-cluster kubeconfig works on its own too
        let own = dir.path().join(format!("{c}.kubeconfig"));
        let o = Command::new(&kubectl)
            .env("KUBECONFIG", &own)
            .args([
                "get",
                "svc",
                "kubernetes",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ])
            .output()
            .unwrap();
        assert!(o.status.success());
        let ip = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(ip.starts_with("10.9"), "{c}: clusterIP {ip}");
    }
    uids.sort();
    uids.dedup();
    assert_eq!(uids.len(), 4, "each cluster has its own kube-system uid");
    // the README's MCS demo: export from east and west, imported in north
    let repo = crate::support::repo();
    for c in ["east", "west"] {
        let file = repo.join(format!("examples/mcs-demo/{c}.yaml"));
        run(&["--context", c, "apply", "-f", file.to_str().unwrap()]);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = Command::new(&kubectl)
            .env("KUBECONFIG", &merged)
            .args([
                "--context",
                "north",
                "get",
                "serviceimport",
                "demo",
                "-n",
                "demo",
                "-o",
                "jsonpath={.spec.type} {.status.clusters[*].cluster} {.spec.ips[0]}",
            ])
            .output()
            .unwrap();
        let got = String::from_utf8_lossy(&o.stdout).into_owned();
        if got.starts_with("ClusterSetIP east west 10.") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "demo not imported in north within 20 s: {got:?} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // the printed search line: after the federation demo, the shop Pods of every
    // member in one kubectl query through the search server (SQLite)
    let fed = repo.join("examples/federation-demo");
    run(&["--context", "hub", "apply", "-f", fed.to_str().unwrap()]);
    let line = printed
        .lines()
        .find(|l| l.contains("kubectl --context search get pods"))
        .expect("search line")
        .trim()
        .to_string();
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let out = run(&words);
        let clusters: std::collections::BTreeSet<&str> = out
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        if out.starts_with("CLUSTER") && clusters.len() == 3 {
            assert!(out.contains("shop-"), "{out}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "`{line}` did not list the shop Pods of east, west and north within 45 s:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let slices = run(&[
        "--context",
        "north",
        "get",
        "endpointslices",
        "-n",
        "demo",
        "-l",
        "multicluster.kubernetes.io/service-name=demo",
        "-o",
        "name",
    ]);
    // the controller's metrics over a real socket
    let line = printed
        .lines()
        .find(|l| l.contains("metrics, healthz, readyz at http://"))
        .expect("metrics line");
    let addr = line
        .split("http://")
        .nth(1)
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let get = |path: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    assert!(get("/readyz").starts_with("HTTP/1.1 200"));
    let metrics = get("/metrics");
    for name in [
        "causeway_mcs_exports",
        "causeway_mcs_imports",
        "causeway_mcs_conflicts",
        "causeway_reconcile_duration_seconds",
        "causeway_mcs_endpoint_propagation_seconds_count",
        "causeway_members 3",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    assert_eq!(
        slices.lines().count(),
        2,
        "one MCS slice per source cluster: {slices}"
    );
    // the gauges follow what the members hold, also after changes handled in partial
    // rounds (the MCS demo was applied after the first full round); causeway-local's
    // controller runs without election, so it leads
    let objects = |ctx: &str, kind: &str| {
        run(&["--context", ctx, "get", kind, "-A", "-o", "name"])
            .lines()
            .count()
    };
    let want = [
        format!(
            "causeway_mcs_exports{{cluster=\"east\"}} {}",
            objects("east", "serviceexports")
        ),
        format!(
            "causeway_mcs_exports{{cluster=\"west\"}} {}",
            objects("west", "serviceexports")
        ),
        format!(
            "causeway_mcs_imports{{cluster=\"north\"}} {}",
            objects("north", "serviceimports")
        ),
        "causeway_leader 1".to_string(),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let metrics = get("/metrics");
        let missing: Vec<&String> = want
            .iter()
            .filter(|w| !metrics.lines().any(|l| l == w.as_str()))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing:?} not in /metrics within 20 s:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The printed dig line resolves the demo Service through that member's causeway-dns.
    let dig = printed
        .lines()
        .find(|l| l.contains("dig @"))
        .expect("dig line");
    let words: Vec<&str> = dig.split_whitespace().collect();
    let server = words[1].trim_start_matches('@');
    let port = words[words.iter().position(|w| *w == "-p").unwrap() + 1];
    let name = *words.last().unwrap();
    assert_eq!(name, "web.demo.svc.clusterset.local");
    let dns: std::net::SocketAddr = format!("{server}:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (rcode, answers) = query_a(dns, name);
        if rcode == 0 && answers >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not resolvable via {dns} within 30 s (rcode {rcode}, {answers} answers)"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The printed curl reaches the demo backends of all three clusters through causeway-proxy.
    let curl = printed
        .lines()
        .find(|l| l.contains("curl -s http://127.0.0.1:") && !l.contains("metrics"))
        .expect("curl line");
    let proxy = curl
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "curl through {proxy} did not reach east, west and north within 30 s: {seen:?}"
        );
        if let Some(body) = http_get(&proxy, "/").filter(|r| r.starts_with("HTTP/1.1 200")) {
            if let Some(cluster) = body.lines().last().and_then(|l| l.split('/').next()) {
                seen.insert(cluster.to_string());
            }
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["east", "north", "west"]
    );
    // Ctrl-C: clean shutdown
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "causeway-local did not stop within 10 s of SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}");
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(rest.iter().any(|l| l == "stopped"), "{rest:?}");
    let o = Command::new(&kubectl)
        .env("KUBECONFIG", &merged)
        .args(["--context", "hub", "get", "ns", "--request-timeout=2s"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the servers are down after shutdown");
    // the log went to a file: no colour codes in it
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert!(log.contains("INFO"), "causeway-local logged: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a log file: {log:?}"
    );
}

#[test]
fn causeway_local_rejects_bad_flags_with_a_clear_message() {
    let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(["up", "--members", "East_1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("East_1") && err.contains("DNS-1123"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(["up", "--members", "hub"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("unique"));
    // refused before any cluster starts: a name the search server's context has, a
    // pull member that is not a member, and dual-stack addresses the service proxy
    // cannot give
    for (args, says) in [
        (&["up", "--members", "east,search"][..], "search server"),
        (
            &["up", "--members", "east", "--pull", "west"][..],
            "--pull west",
        ),
        (
            &["up", "--dual-stack", "--service-proxy"][..],
            "--service-proxy",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("starting"),
            "{args:?} refused before anything starts"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_causeway-local"))
        .args(["up", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--dir",
        "--hub",
        "--members",
        "--dual-stack",
        "--base-port",
        "--no-simulate-workloads",
        "--pods",
        "--dns-base-port",
        "--proxy-http",
        "--proxy-https",
        "--data-dir",
        "--metrics",
        "--log",
    ] {
        assert!(help.contains(flag), "--help documents {flag}");
    }
}

/// One A query over UDP, as `dig` sends it; returns (rcode, answer count).
fn query_a(server: std::net::SocketAddr, name: &str) -> (u8, u16) {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send_to(&q, server).unwrap();
    let mut buf = [0u8; 1500];
    match sock.recv(&mut buf) {
        Ok(n) if n >= 12 && buf[..2] == [0x12, 0x34] => {
            (buf[3] & 0x0f, u16::from_be_bytes([buf[6], buf[7]]))
        }
        _ => (255, 0),
    }
}

/// One HTTP/1.1 GET with `Connection: close`; the whole response, or None.
fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: demo.local\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
