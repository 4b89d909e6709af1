//! Record-set tests of the pure index (answers decoded through `answer::respond`).

use super::*;
use crate::answer::tests::{ask, cfg};
use hickory_proto::rr::RecordType;
use proptest::prelude::*;

fn port(name: Option<&str>, proto: &str, port: u16) -> PortInput {
    PortInput {
        name: name.map(str::to_string),
        protocol: proto.into(),
        port,
    }
}

fn ep(ip: &str, host: Option<&str>, ready: bool) -> EndpointInput {
    EndpointInput {
        addresses: vec![ip.parse().unwrap()],
        hostname: host.map(str::to_string),
        ready,
    }
}

fn headless(name: &str) -> ImportInput {
    ImportInput {
        namespace: "ns".into(),
        name: name.into(),
        kind: ServiceKind::Headless,
        ips: vec![],
        ports: vec![port(Some("tcp"), "TCP", 42)],
    }
}

fn slice(svc: &str, cluster: &str, eps: Vec<EndpointInput>) -> SliceInput {
    SliceInput {
        namespace: "ns".into(),
        service: svc.into(),
        cluster: cluster.into(),
        endpoints: eps,
        ports: vec![port(Some("tcp"), "TCP", 42), port(Some("udp"), "UDP", 42)],
    }
}

#[test]
fn clusterset_ip_bare_srv_dedups_by_target_and_port() {
    let imp = ImportInput {
        namespace: "ns".into(),
        name: "hello".into(),
        kind: ServiceKind::ClusterSetIp,
        ips: vec!["10.42.0.1".parse().unwrap(), "fd00::42".parse().unwrap()],
        ports: vec![
            port(Some("tcp"), "TCP", 42),
            port(Some("udp"), "UDP", 42),
            port(None, "TCP", 8080),
        ],
    };
    let zone = Zone::build(&cfg(), 1, [&imp], []).unwrap();
    let svc = "hello.ns.svc.clusterset.local.";
    let table: &[(&str, RecordType, u16, &[&str])] = &[
        (svc, RecordType::A, 0, &["A 10.42.0.1"]),
        (svc, RecordType::AAAA, 0, &["AAAA fd00::42"]),
        (
            svc,
            RecordType::SRV,
            0,
            &[
                "SRV 0 50 42 hello.ns.svc.clusterset.local.",
                "SRV 0 50 8080 hello.ns.svc.clusterset.local.",
            ],
        ),
        (
            "_tcp._tcp.hello.ns.svc.clusterset.local.",
            RecordType::SRV,
            0,
            &["SRV 0 50 42 hello.ns.svc.clusterset.local."],
        ),
        (
            "_udp._udp.hello.ns.svc.clusterset.local.",
            RecordType::SRV,
            0,
            &["SRV 0 50 42 hello.ns.svc.clusterset.local."],
        ),
        (
            "_tcp._udp.hello.ns.svc.clusterset.local.",
            RecordType::SRV,
            3,
            &[],
        ),
        (
            "_tcp.hello.ns.svc.clusterset.local.",
            RecordType::SRV,
            0,
            &[],
        ),
        ("ns.svc.clusterset.local.", RecordType::A, 0, &[]),
        ("svc.clusterset.local.", RecordType::A, 0, &[]),
        (
            "dns-version.clusterset.local.",
            RecordType::TXT,
            0,
            &["TXT 1.0.0"],
        ),
        (
            "clusterset.local.",
            RecordType::NS,
            0,
            &["NS ns.dns.clusterset.local."],
        ),
        (
            "clusterset.local.",
            RecordType::SOA,
            0,
            &["SOA ns.dns.clusterset.local. hostmaster.clusterset.local."],
        ),
        ("other.svc.clusterset.local.", RecordType::A, 3, &[]),
    ];
    for (name, qt, rcode, want) in table {
        let r = ask(&zone, name, *qt);
        assert_eq!(r.rcode, *rcode, "{name} {qt}");
        assert_eq!(r.answers, *want, "{name} {qt}");
        assert_eq!(r.soa, want.is_empty(), "{name} {qt} SOA in authority");
    }
}

#[test]
fn headless_deployment_and_statefulset() {
    let deploy = slice(
        "dep",
        "c1",
        vec![
            ep("10.0.0.1", None, true),
            ep("10.0.0.2", None, true),
            ep("10.0.0.3", None, false),
        ],
    );
    let sts = slice(
        "sts",
        "c1",
        vec![
            ep("10.0.1.1", Some("sts-0"), true),
            ep("10.0.1.2", Some("sts-1"), true),
        ],
    );
    let sts2 = slice("sts", "c2", vec![ep("10.0.1.1", Some("sts-0"), true)]);
    let zone = Zone::build(
        &cfg(),
        1,
        [&headless("dep"), &headless("sts")],
        [&deploy, &sts, &sts2],
    )
    .unwrap();
    let z = ".clusterset.local.";
    let q = |n: &str, t| ask(&zone, &format!("{n}{z}"), t);
    assert_eq!(
        q("dep.ns.svc", RecordType::A).answers,
        ["A 10.0.0.1", "A 10.0.0.2"]
    );
    assert_eq!(
        q("10-0-0-1.c1.dep.ns.svc", RecordType::A).answers,
        ["A 10.0.0.1"]
    );
    assert_eq!(
        q("10-0-0-3.c1.dep.ns.svc", RecordType::A).rcode,
        3,
        "not ready: no name"
    );
    assert_eq!(
        q("dep.ns.svc", RecordType::SRV).answers,
        [
            "SRV 0 50 42 10-0-0-1.c1.dep.ns.svc.clusterset.local.",
            "SRV 0 50 42 10-0-0-2.c1.dep.ns.svc.clusterset.local."
        ]
    );
    assert_eq!(q("_udp._udp.dep.ns.svc", RecordType::SRV).answers.len(), 2);
    // StatefulSet: deduplicated A across clusters, per-cluster hostnames.
    assert_eq!(
        q("sts.ns.svc", RecordType::A).answers,
        ["A 10.0.1.1", "A 10.0.1.2"]
    );
    assert_eq!(
        q("sts-0.c2.sts.ns.svc", RecordType::A).answers,
        ["A 10.0.1.1"]
    );
    assert_eq!(
        q("sts-1.c1.sts.ns.svc", RecordType::A).answers,
        ["A 10.0.1.2"]
    );
    assert_eq!(q("sts.ns.svc", RecordType::SRV).answers.len(), 3);
    // The cluster-level name holds no records (the form is reserved), but names exist
    // below it: an empty non-terminal, NODATA with the SOA (RFC 8020), not NXDOMAIN.
    for (n, t) in [
        ("c1.sts.ns.svc", RecordType::A),
        ("c2.sts.ns.svc", RecordType::AAAA),
        ("c1.dep.ns.svc", RecordType::SRV),
        ("c1.dep.ns.svc", RecordType::ANY),
    ] {
        let r = q(n, t);
        assert_eq!((r.rcode, r.answers.len(), r.soa), (0, 0, true), "{n} {t}");
    }
    assert_eq!(
        q("c3.sts.ns.svc", RecordType::A).rcode,
        3,
        "no such cluster"
    );
}

/// Every ancestor of every name in the zone, down to the apex, exists (RFC 1034
/// §4.3.2, RFC 8020): a lookup finds it, and a query gets NOERROR, never NXDOMAIN.
fn assert_no_missing_ancestors(zone: &Zone) {
    let names = zone
        .statics
        .keys()
        .chain(zone.services.values().flat_map(|s| s.nodes.keys()));
    let mut checked = 0;
    for wire in names {
        let mut cur: &[u8] = wire;
        while cur.len() > zone.apex().len() {
            let dotted = name::to_dotted(cur);
            assert!(
                matches!(zone.lookup(cur), Lookup::Found(_)),
                "{dotted} (an ancestor of {}) is missing",
                name::to_dotted(wire)
            );
            assert_eq!(ask(zone, &dotted, RecordType::A).rcode, 0, "{dotted}");
            checked += 1;
            cur = name::parent(cur).unwrap();
        }
    }
    assert!(checked > 10, "only {checked} names checked");
}

#[test]
fn every_ancestor_of_a_name_exists() {
    let mut clusterset = headless("cs");
    clusterset.kind = ServiceKind::ClusterSetIp;
    clusterset.ips = vec!["10.42.0.1".parse().unwrap()];
    let mut v6 = slice("h", "c2", vec![ep("fd00::1", None, true)]);
    v6.ports.clear();
    let slices = [
        slice("h", "c1", vec![ep("10.0.0.1", Some("h-0"), true)]),
        v6,
        slice("h", "c3", vec![ep("10.0.0.3", None, false)]),
    ];
    let c = ZoneConfig {
        nameservers: vec!["10.96.0.53".parse().unwrap()],
        ..cfg()
    };
    let zone = Zone::build(&c, 1, [&headless("h"), &clusterset], &slices).unwrap();
    assert_no_missing_ancestors(&zone);
    // The cluster without ready endpoints has no name at all.
    assert_eq!(
        ask(&zone, "c3.h.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
}

#[test]
fn headless_without_ready_endpoints_is_nxdomain() {
    let s = slice("h", "c1", vec![ep("10.0.0.9", Some("h-0"), false)]);
    let zone = Zone::build(&cfg(), 1, [&headless("h")], [&s]).unwrap();
    assert_eq!(
        ask(&zone, "h.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
    assert_eq!(
        ask(&zone, "h-0.c1.h.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
    assert_eq!(
        ask(&zone, "ns.svc.clusterset.local.", RecordType::A).rcode,
        3,
        "nothing below"
    );
}

#[test]
fn slices_without_an_import_are_not_served() {
    let s = slice("ghost", "c1", vec![ep("10.0.0.9", None, true)]);
    let zone = Zone::build(&cfg(), 1, [], [&s]).unwrap();
    assert_eq!(
        ask(&zone, "ghost.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
}

#[test]
fn dual_stack_headless_by_hostname() {
    let mut v6 = slice("h", "c1", vec![ep("fd00::1", Some("h-0"), true)]);
    v6.ports.clear();
    let v4 = slice("h", "c1", vec![ep("10.0.0.1", Some("h-0"), true)]);
    let zone = Zone::build(&cfg(), 1, [&headless("h")], [&v4, &v6]).unwrap();
    let n = "h-0.c1.h.ns.svc.clusterset.local.";
    assert_eq!(ask(&zone, n, RecordType::A).answers, ["A 10.0.0.1"]);
    assert_eq!(ask(&zone, n, RecordType::AAAA).answers, ["AAAA fd00::1"]);
    assert_eq!(
        ask(&zone, "h.ns.svc.clusterset.local.", RecordType::AAAA).answers,
        ["AAAA fd00::1"]
    );
    // A no-hostname IPv6 endpoint gets the dashed form.
    let v6b = slice("h", "c2", vec![ep("fd00::2", None, true)]);
    let zone = Zone::build(&cfg(), 1, [&headless("h")], [&v6b]).unwrap();
    assert_eq!(
        ask(
            &zone,
            "fd00--2.c2.h.ns.svc.clusterset.local.",
            RecordType::AAAA
        )
        .answers,
        ["AAAA fd00::2"]
    );
}

#[test]
fn bad_names_are_skipped_not_fatal() {
    let bad = ImportInput {
        namespace: "ns".into(),
        name: "bad name".into(),
        kind: ServiceKind::ClusterSetIp,
        ips: vec!["10.0.0.1".parse().unwrap()],
        ports: vec![],
    };
    let s = slice("h", "c 1", vec![ep("10.0.0.1", None, true)]);
    let long_host = slice("h", "c2", vec![ep("10.0.0.2", Some(&"x".repeat(70)), true)]);
    let zone = Zone::build(&cfg(), 1, [&bad, &headless("h")], [&s, &long_host]).unwrap();
    // The slice of cluster "c 1" is skipped; the endpoint whose hostname is not a
    // label has no name and no SRV, but it is still one of the service's addresses.
    let svc = "h.ns.svc.clusterset.local.";
    assert_eq!(
        (
            ask(&zone, svc, RecordType::A).rcode,
            ask(&zone, svc, RecordType::A).answers
        ),
        (0, vec!["A 10.0.0.2".to_string()])
    );
    let srv = ask(&zone, svc, RecordType::SRV);
    assert_eq!((srv.rcode, srv.answers.len()), (0, 0), "{srv:?}");
    assert_eq!(
        ask(
            &zone,
            "10-0-0-2.c2.h.ns.svc.clusterset.local.",
            RecordType::A
        )
        .rcode,
        3
    );
    assert!(
        Zone::build(
            &ZoneConfig {
                zone: "bad..zone".into(),
                ..cfg()
            },
            1,
            [],
            []
        )
        .is_err()
    );
}

/// A slice whose cluster DNS cannot carry is left out; an endpoint whose own name DNS
/// cannot carry loses that name and its SRV only. The service and its other endpoints
/// are still served.
#[test]
fn one_bad_slice_or_endpoint_leaves_the_rest_of_the_service() {
    let good = slice("h", "c1", vec![ep("10.0.0.1", None, true)]);
    let mapped = slice("h", "c1", vec![ep("::ffff:10.0.0.3", None, true)]);
    let bad_slices = [
        slice("h", "", vec![ep("10.0.0.2", None, true)]),
        slice("h", "a.-b", vec![ep("10.0.0.2", None, true)]),
        // No hostname: the dashed IP `--ffff-10-0-0-3` is not a host label.
        mapped.clone(),
    ];
    let name = "h.ns.svc.clusterset.local.";
    for bad in &bad_slices {
        let what = format!("cluster {:?} {:?}", bad.cluster, bad.endpoints[0].addresses);
        // An endpoint whose own name cannot be encoded is still among the service's
        // addresses (DNS-8: every ready address); a slice whose cluster is not a DNS
        // label is skipped whole.
        let unnamed = bad.cluster == "c1";
        let zone = Zone::build(&cfg(), 1, [&headless("h")], [&good, bad]).unwrap();
        let r = ask(&zone, name, RecordType::A);
        assert_eq!(
            (r.rcode, r.answers.clone()),
            (0, vec!["A 10.0.0.1".into()]),
            "{what}"
        );
        assert_eq!(
            ask(&zone, name, RecordType::SRV).answers,
            ["SRV 0 50 42 10-0-0-1.c1.h.ns.svc.clusterset.local."],
            "{what}"
        );
        let aaaa: &[&str] = if unnamed {
            &["AAAA ::ffff:10.0.0.3"]
        } else {
            &[]
        };
        assert_eq!(ask(&zone, name, RecordType::AAAA).answers, aaaa, "{what}");
        assert_eq!(
            ask(&zone, "c1.h.ns.svc.clusterset.local.", RecordType::A).rcode,
            0,
            "{what}: the cluster level is still an empty non-terminal"
        );
        assert_eq!(
            ask(&zone, "10-0-0-2.h.ns.svc.clusterset.local.", RecordType::A).rcode,
            3,
            "{what}: an empty cluster does not move endpoints up a level"
        );
        assert_no_missing_ancestors(&zone);
    }
    // The same endpoint with a hostname is served, at that name.
    let mut named = mapped;
    named.endpoints[0].hostname = Some("h-3".into());
    let zone = Zone::build(&cfg(), 1, [&headless("h")], [&good, &named]).unwrap();
    assert_eq!(
        ask(&zone, "h-3.c1.h.ns.svc.clusterset.local.", RecordType::AAAA).answers,
        ["AAAA ::ffff:10.0.0.3"]
    );
}

/// A port name of 63 characters makes a 64-character `_<port>` label: that port
/// gets no SRV of its own; the service, its addresses and its other ports stay.
#[test]
fn a_port_name_dns_cannot_carry_loses_only_its_srv() {
    let long = "a".repeat(63);
    let imp = ImportInput {
        namespace: "ns".into(),
        name: "web".into(),
        kind: ServiceKind::ClusterSetIp,
        ips: vec!["10.42.0.1".parse().unwrap()],
        ports: vec![
            port(Some(&long), "TCP", 80),
            port(Some("http"), "TCP", 8080),
        ],
    };
    let zone = Zone::build(&cfg(), 1, [&imp], []).unwrap();
    let svc = "web.ns.svc.clusterset.local.";
    assert_eq!(ask(&zone, svc, RecordType::A).answers, ["A 10.42.0.1"]);
    assert_eq!(
        ask(&zone, &format!("_http._tcp.{svc}"), RecordType::SRV).answers,
        ["SRV 0 50 8080 web.ns.svc.clusterset.local."]
    );
    // The bare name still lists both ports.
    assert_eq!(ask(&zone, svc, RecordType::SRV).answers.len(), 2);
    // Headless: the same.
    let mut h = headless("h");
    h.ports = imp.ports.clone();
    let mut s = slice("h", "c1", vec![ep("10.0.0.1", None, true)]);
    s.ports = imp.ports.clone();
    let zone = Zone::build(&cfg(), 1, [&h], [&s]).unwrap();
    assert_eq!(
        ask(
            &zone,
            "_http._tcp.h.ns.svc.clusterset.local.",
            RecordType::SRV
        )
        .answers,
        ["SRV 0 50 8080 10-0-0-1.c1.h.ns.svc.clusterset.local."]
    );
    assert_eq!(
        ask(&zone, "h.ns.svc.clusterset.local.", RecordType::A).answers,
        ["A 10.0.0.1"]
    );
}

#[test]
fn nameserver_addresses_are_served() {
    let c = ZoneConfig {
        nameservers: vec!["10.96.0.53".parse().unwrap()],
        ..cfg()
    };
    let zone = Zone::build(&c, 1, [], []).unwrap();
    assert_eq!(
        ask(&zone, "ns.dns.clusterset.local.", RecordType::A).answers,
        ["A 10.96.0.53"]
    );
    assert_eq!(ask(&zone, "dns.clusterset.local.", RecordType::A).rcode, 0);
}

#[test]
fn incremental_updates_touch_one_service() {
    let mut st = ZoneState::new(cfg()).unwrap();
    let a = headless("a");
    let b = headless("b");
    let sa = slice("a", "c1", vec![ep("10.0.0.1", None, true)]);
    let sb = slice("b", "c1", vec![ep("10.0.0.2", None, true)]);
    st.set_service("ns", "a", Some(&a), &[&sa]);
    st.set_service("ns", "b", Some(&b), &[&sb]);
    let z1 = st.snapshot(1).unwrap();
    assert_eq!(
        ask(&z1, "a.ns.svc.clusterset.local.", RecordType::A).answers,
        ["A 10.0.0.1"]
    );
    // b's endpoint turns not ready: only b is rebuilt; the old snapshot is unchanged.
    let sb2 = slice("b", "c1", vec![ep("10.0.0.2", None, false)]);
    st.set_service("ns", "b", Some(&b), &[&sb2]);
    let z2 = st.snapshot(2).unwrap();
    assert_eq!(
        ask(&z2, "b.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
    assert_eq!(
        ask(&z1, "b.ns.svc.clusterset.local.", RecordType::A).answers,
        ["A 10.0.0.2"]
    );
    assert_eq!(
        ask(&z2, "a.ns.svc.clusterset.local.", RecordType::A).answers,
        ["A 10.0.0.1"]
    );
    // a deleted: the namespace is empty, so its empty non-terminal goes too.
    st.set_service("ns", "a", None, &[]);
    let z3 = st.snapshot(3).unwrap();
    assert_eq!(
        ask(&z3, "a.ns.svc.clusterset.local.", RecordType::A).rcode,
        3
    );
    assert_eq!(ask(&z3, "ns.svc.clusterset.local.", RecordType::A).rcode, 3);
    assert_eq!(ask(&z2, "ns.svc.clusterset.local.", RecordType::A).rcode, 0);
    assert_eq!(z3.serial(), 3);
}

#[test]
fn lookups_outside_the_apex_or_misaligned_are_nxdomain() {
    let zone = Zone::build(
        &cfg(),
        1,
        [&headless("a")],
        [&slice("a", "c1", vec![ep("10.0.0.1", None, true)])],
    )
    .unwrap();
    assert!(matches!(zone.lookup(b"\x00"), Lookup::NxDomain));
    assert!(matches!(zone.lookup(b"\x05local\x00"), Lookup::NxDomain));
    let mut odd = name::to_wire("a.ns.svc.clusterset.local").unwrap();
    odd[0] = 5;
    assert!(matches!(zone.lookup(&odd), Lookup::NxDomain));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The headless A set is exactly the deduplicated set of ready addresses, and each
    /// ready endpoint has its own name.
    #[test]
    fn headless_a_is_the_deduplicated_ready_set(
        eps in proptest::collection::vec((0u8..6, any::<bool>(), 0u8..3), 0..20)
    ) {
        let mut slices = Vec::new();
        for c in 0..3u8 {
            let mine: Vec<EndpointInput> = eps
                .iter()
                .filter(|(_, _, cl)| *cl == c)
                .map(|(ip, ready, _)| ep(&format!("10.9.0.{ip}"), None, *ready))
                .collect();
            slices.push(slice("p", &format!("c{c}"), mine));
        }
        let zone = Zone::build(&cfg(), 1, [&headless("p")], slices.iter()).unwrap();
        if eps.iter().any(|e| e.1) {
            assert_no_missing_ancestors(&zone);
        }
        let mut want: Vec<String> = eps.iter().filter(|e| e.1).map(|e| format!("A 10.9.0.{}", e.0)).collect();
        want.sort();
        want.dedup();
        let r = ask(&zone, "p.ns.svc.clusterset.local.", RecordType::A);
        if want.is_empty() {
            prop_assert_eq!(r.rcode, 3);
        } else {
            prop_assert_eq!(r.answers, want);
        }
        for (ip, ready, c) in &eps {
            let n = format!("10-9-0-{ip}.c{c}.p.ns.svc.clusterset.local.");
            let r = ask(&zone, &n, RecordType::A);
            let any_ready = eps.iter().any(|e| e.0 == *ip && e.2 == *c && e.1);
            prop_assert_eq!(r.rcode == 0, any_ready, "{} ready={}", n, ready);
        }
    }
}
