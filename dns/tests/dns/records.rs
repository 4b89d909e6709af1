//! Golden record sets for the conformance fixtures: a ClusterSetIP service with
//! tcp/42 + udp/42, a Deployment-like headless service (no hostnames), a
//! StatefulSet-like one (hostnames, two clusters), and dual-stack services.

use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::support::{Env, Reply, ask_tcp, ask_udp, render};

const Z: &str = "clusterset.local.";

async fn fixtures(env: &Env) {
    let p42 = json!([{"name": "tcp", "protocol": "TCP", "port": 42}, {"name": "udp", "protocol": "UDP", "port": 42}]);
    env.import("hello", "ClusterSetIP", &["10.42.0.10"], p42.clone())
        .await;
    env.slice(
        "hello",
        "c1",
        "IPv4",
        &[("10.9.0.1", None, Some(true))],
        p42.clone(),
    )
    .await;
    let tcp42 = json!([{"name": "tcp", "protocol": "TCP", "port": 42}]);
    env.import("dep", "Headless", &[], tcp42.clone()).await;
    env.slice(
        "dep",
        "c1",
        "IPv4",
        &[
            ("10.1.0.1", None, Some(true)),
            ("10.1.0.2", None, None),
            ("10.1.0.3", None, Some(false)),
        ],
        tcp42.clone(),
    )
    .await;
    env.import("sts", "Headless", &[], tcp42.clone()).await;
    env.slice(
        "sts",
        "c1",
        "IPv4",
        &[
            ("10.2.0.1", Some("web-0"), Some(true)),
            ("10.2.0.2", Some("web-1"), Some(true)),
        ],
        tcp42.clone(),
    )
    .await;
    env.slice(
        "sts",
        "c2",
        "IPv4",
        &[("10.3.0.1", Some("web-0"), Some(true))],
        tcp42.clone(),
    )
    .await;
    let http = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    env.import(
        "dual",
        "ClusterSetIP",
        &["10.42.0.20", "fd00::20"],
        http.clone(),
    )
    .await;
    env.import("dualh", "Headless", &[], http.clone()).await;
    env.slice(
        "dualh",
        "c1",
        "IPv4",
        &[("10.4.0.1", Some("db-0"), Some(true))],
        http.clone(),
    )
    .await;
    env.slice(
        "dualh",
        "c1",
        "IPv6",
        &[("fd00::4:1", Some("db-0"), Some(true))],
        http.clone(),
    )
    .await;
    // Everything is visible once the last object is.
    env.until(
        "fixtures",
        &format!("dualh.demo.svc.{Z}"),
        RecordType::AAAA,
        |r| !r.answers.is_empty(),
    )
    .await;
    env.until(
        "fixtures",
        &format!("sts.demo.svc.{Z}"),
        RecordType::A,
        |r| r.answers.len() == 3,
    )
    .await;
}

/// (name relative to the zone, type, rcode, answers).
fn golden() -> Vec<(String, RecordType, u16, Vec<String>)> {
    use RecordType::{A, AAAA, NS, SOA, SRV, TXT};
    let f = |n: &str| {
        if n.is_empty() {
            Z.to_string()
        } else {
            format!("{n}.{Z}")
        }
    };
    let srv = |port: u16, target: &str| format!("SRV {port} {target}.{Z}");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        (f("hello.demo.svc"), A, 0, s(&["A 10.42.0.10"])),
        (f("HeLLo.DEMO.svc"), A, 0, s(&["A 10.42.0.10"])),
        (f("hello.demo.svc"), AAAA, 0, s(&[])),
        (f("hello.demo.svc"), SRV, 0, vec![srv(42, "hello.demo.svc")]),
        (
            f("_tcp._tcp.hello.demo.svc"),
            SRV,
            0,
            vec![srv(42, "hello.demo.svc")],
        ),
        (
            f("_udp._udp.hello.demo.svc"),
            SRV,
            0,
            vec![srv(42, "hello.demo.svc")],
        ),
        (f("_http._tcp.hello.demo.svc"), SRV, 3, s(&[])),
        (f("_tcp.hello.demo.svc"), SRV, 0, s(&[])),
        (f("c1.hello.demo.svc"), A, 3, s(&[])),
        (f("dep.demo.svc"), A, 0, s(&["A 10.1.0.1", "A 10.1.0.2"])),
        (
            f("dep.demo.svc"),
            SRV,
            0,
            vec![
                srv(42, "10-1-0-1.c1.dep.demo.svc"),
                srv(42, "10-1-0-2.c1.dep.demo.svc"),
            ],
        ),
        (
            f("_tcp._tcp.dep.demo.svc"),
            SRV,
            0,
            vec![
                srv(42, "10-1-0-1.c1.dep.demo.svc"),
                srv(42, "10-1-0-2.c1.dep.demo.svc"),
            ],
        ),
        (f("10-1-0-1.c1.dep.demo.svc"), A, 0, s(&["A 10.1.0.1"])),
        (f("10-1-0-2.c1.dep.demo.svc"), A, 0, s(&["A 10.1.0.2"])),
        (f("10-1-0-3.c1.dep.demo.svc"), A, 3, s(&[])),
        // Empty non-terminals above per-endpoint names: NODATA (RFC 8020).
        (f("c1.dep.demo.svc"), A, 0, s(&[])),
        (f("c1.dep.demo.svc"), SRV, 0, s(&[])),
        (f("c9.dep.demo.svc"), A, 3, s(&[])),
        (
            f("sts.demo.svc"),
            A,
            0,
            s(&["A 10.2.0.1", "A 10.2.0.2", "A 10.3.0.1"]),
        ),
        (f("web-0.c1.sts.demo.svc"), A, 0, s(&["A 10.2.0.1"])),
        (f("web-1.c1.sts.demo.svc"), A, 0, s(&["A 10.2.0.2"])),
        (f("web-0.c2.sts.demo.svc"), A, 0, s(&["A 10.3.0.1"])),
        (f("web-1.c2.sts.demo.svc"), A, 3, s(&[])),
        (f("web-0.c1.sts.demo.svc"), AAAA, 0, s(&[])),
        (
            f("sts.demo.svc"),
            SRV,
            0,
            vec![
                srv(42, "web-0.c1.sts.demo.svc"),
                srv(42, "web-0.c2.sts.demo.svc"),
                srv(42, "web-1.c1.sts.demo.svc"),
            ],
        ),
        (f("c2.sts.demo.svc"), A, 0, s(&[])),
        (f("C1.sts.demo.svc"), AAAA, 0, s(&[])),
        (f("dual.demo.svc"), A, 0, s(&["A 10.42.0.20"])),
        (f("dual.demo.svc"), AAAA, 0, s(&["AAAA fd00::20"])),
        (
            f("_http._tcp.dual.demo.svc"),
            SRV,
            0,
            vec![srv(80, "dual.demo.svc")],
        ),
        (f("dualh.demo.svc"), A, 0, s(&["A 10.4.0.1"])),
        (f("dualh.demo.svc"), AAAA, 0, s(&["AAAA fd00::4:1"])),
        (f("db-0.c1.dualh.demo.svc"), A, 0, s(&["A 10.4.0.1"])),
        (f("db-0.c1.dualh.demo.svc"), AAAA, 0, s(&["AAAA fd00::4:1"])),
        (f("dns-version"), TXT, 0, s(&["TXT 1.0.0"])),
        (f(""), NS, 0, s(&["NS ns.dns.clusterset.local."])),
        (f(""), SOA, 0, s(&["SOA ns.dns.clusterset.local."])),
        (f("demo.svc"), A, 0, s(&[])),
        (f("svc"), A, 0, s(&[])),
        (f("nope.demo.svc"), A, 3, s(&[])),
        (f("hello.other.svc"), A, 3, s(&[])),
        ("example.com.".to_string(), A, 5, s(&[])),
    ]
}

fn check(transport: &str, name: &str, qt: RecordType, rcode: u16, want: &[String], r: &Reply) {
    let ctx = format!("{transport} {name} {qt}");
    assert_eq!(r.rcode, rcode, "{ctx}: {r:?}");
    assert_eq!(r.answers, want, "{ctx}");
    assert!(!r.tc, "{ctx}: truncated");
    let in_zone = rcode != 5;
    assert_eq!(r.aa, in_zone, "{ctx}: AA");
    // RFC 2308: negative answers (NXDOMAIN and NODATA) carry the zone's SOA.
    assert_eq!(r.soa, in_zone && want.is_empty(), "{ctx}: SOA in authority");
    // The question is echoed as asked; answers are owned by that name.
    assert_eq!(r.msg.queries[0].name().to_string(), name, "{ctx}: question");
    for a in &r.msg.answers {
        assert_eq!(a.name.to_string(), name, "{ctx}: owner");
        let ttl = if qt == RecordType::TXT { 28800 } else { 5 };
        assert_eq!(a.ttl, ttl, "{ctx}: TTL");
    }
}

#[tokio::test]
async fn golden_record_sets_over_udp_and_tcp() {
    let env = Env::start().await;
    fixtures(&env).await;
    for (name, qt, rcode, want) in golden() {
        let r = env.udp(&name, qt).await;
        check("udp", &name, qt, rcode, &want, &r);
        let r = env.tcp(&name, qt).await;
        check("tcp", &name, qt, rcode, &want, &r);
    }
}

/// The apex NS target has an address (by default the listen address) and the NS
/// answer carries it as glue, so the zone can be delegated to this server.
#[tokio::test]
async fn apex_ns_target_has_an_address_and_glue() {
    let env = Env::start().await;
    let dns = env.dns();
    let ns = format!("ns.dns.{Z}");
    for transport in ["udp", "tcp"] {
        let ask = |name: String, qt| async move {
            match transport {
                "udp" => ask_udp(dns.udp, &name, qt, Some(1232)).await,
                _ => ask_tcp(dns.tcp, &name, qt).await,
            }
        };
        let r = ask(Z.to_string(), RecordType::NS).await;
        assert_eq!(r.answers, [format!("NS {ns}")], "{transport}");
        let glue: Vec<String> = r
            .msg
            .additionals
            .iter()
            .map(|a| format!("{} {}", a.name, render(&a.data)))
            .collect();
        assert_eq!(glue, [format!("{ns} A 127.0.0.1")], "{transport} glue");
        let r = ask(ns.clone(), RecordType::A).await;
        assert_eq!(
            (r.rcode, r.answers.clone()),
            (0, vec!["A 127.0.0.1".to_string()])
        );
        let r = ask(ns.clone(), RecordType::AAAA).await;
        assert_eq!(
            (r.rcode, r.answers.len(), r.soa),
            (0, 0, true),
            "{transport}"
        );
    }
}
