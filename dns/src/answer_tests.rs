//! Query → response tests on an in-memory zone, decoded with hickory-proto.

use super::*;
use crate::index::{EndpointInput, ImportInput, PortInput, ServiceKind, SliceInput, ZoneConfig};
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use proptest::prelude::*;

pub(crate) const SETTINGS: Settings = Settings {
    forward: false,
    max_udp_payload: 1232,
};

pub(crate) fn cfg() -> ZoneConfig {
    ZoneConfig {
        zone: "clusterset.local".into(),
        ttl: 5,
        nameservers: vec![],
    }
}

/// A query packet for `name`/`qtype`, with EDNS when `edns` is Some(payload).
pub(crate) fn query(name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0x4242;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(p) = edns {
        let mut e = Edns::new();
        e.set_max_payload(p);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

/// A decoded answer: rcode, the answers as text (sorted), whether the SOA is in the
/// authority section, TC.
#[derive(Debug)]
pub(crate) struct Reply {
    pub rcode: u16,
    pub answers: Vec<String>,
    pub soa: bool,
    pub tc: bool,
    pub aa: bool,
    pub msg: Message,
}

/// Like [`query`] with EDNS (payload `payload`) and the DO bit set.
fn query_do(name: &str, qtype: RecordType, payload: u16) -> Vec<u8> {
    let mut m = Message::from_vec(&query(name, qtype, Some(payload))).unwrap();
    m.edns.as_mut().unwrap().set_dnssec_ok(true);
    m.to_vec().unwrap()
}

/// The ARCOUNT of a response.
fn arcount(out: &[u8]) -> u16 {
    u16::from_be_bytes([out[10], out[11]])
}

pub(crate) fn render(data: &RData) -> String {
    match data {
        RData::A(a) => format!("A {}", a.0),
        RData::AAAA(a) => format!("AAAA {}", a.0),
        RData::SRV(s) => format!("SRV {} {} {} {}", s.priority, s.weight, s.port, s.target),
        RData::TXT(t) => format!("TXT {t}"),
        RData::NS(n) => format!("NS {}", n.0),
        RData::SOA(s) => format!("SOA {} {}", s.mname, s.rname),
        other => format!("{other:?}"),
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Reply {
    let msg = Message::from_vec(bytes).expect("response decodes");
    let mut answers: Vec<String> = msg.answers.iter().map(|r| render(&r.data)).collect();
    answers.sort();
    Reply {
        rcode: u16::from(msg.metadata.response_code),
        soa: msg
            .authorities
            .iter()
            .any(|r| r.record_type() == RecordType::SOA),
        tc: msg.metadata.truncation,
        aa: msg.metadata.authoritative,
        answers,
        msg,
    }
}

pub(crate) fn ask(zone: &Zone, name: &str, qtype: RecordType) -> Reply {
    let mut out = Vec::new();
    let pkt = query(name, qtype, Some(4096));
    match respond(zone, &SETTINGS, &pkt, Transport::Udp, &mut out) {
        Outcome::Reply { .. } => decode(&out),
        other => panic!("{name} {qtype}: {other:?}"),
    }
}

fn web_zone() -> Zone {
    let imp = ImportInput {
        namespace: "ns".into(),
        name: "web".into(),
        kind: ServiceKind::ClusterSetIp,
        ips: vec!["10.1.0.1".parse().unwrap()],
        ports: vec![PortInput {
            name: Some("http".into()),
            protocol: "TCP".into(),
            port: 80,
        }],
    };
    Zone::build(&cfg(), 7, [&imp], []).unwrap()
}

#[test]
fn echoes_the_question_as_asked_and_points_answers_at_it() {
    let zone = web_zone();
    let r = ask(&zone, "WeB.Ns.SVC.clusterset.LOCAL.", RecordType::A);
    assert_eq!(r.rcode, 0);
    assert_eq!(r.answers, ["A 10.1.0.1"]);
    assert!(r.aa);
    assert_eq!(
        r.msg.queries[0].name().to_string(),
        "WeB.Ns.SVC.clusterset.LOCAL."
    );
    assert_eq!(
        r.msg.answers[0].name.to_string(),
        "WeB.Ns.SVC.clusterset.LOCAL."
    );
    assert_eq!(r.msg.metadata.id, 0x4242);
    assert!(r.msg.metadata.recursion_desired);
    assert!(!r.msg.metadata.recursion_available);
    assert_eq!(r.msg.edns.as_ref().unwrap().max_payload(), 1232);
}

#[test]
fn negative_answers_carry_the_soa() {
    let zone = web_zone();
    let nx = ask(&zone, "nope.ns.svc.clusterset.local.", RecordType::A);
    assert_eq!((nx.rcode, nx.soa, nx.answers.len()), (3, true, 0));
    let nodata = ask(&zone, "web.ns.svc.clusterset.local.", RecordType::TXT);
    assert_eq!(
        (nodata.rcode, nodata.soa, nodata.answers.len()),
        (0, true, 0)
    );
    let soa = &nodata.msg.authorities[0];
    assert_eq!(soa.name.to_string(), "clusterset.local.");
    assert_eq!(soa.ttl, 5);
}

/// The additional section as text with owner names, OPT left out.
fn additionals(r: &Reply) -> Vec<String> {
    let mut v: Vec<String> = r
        .msg
        .additionals
        .iter()
        .map(|a| format!("{} {}", a.name, render(&a.data)))
        .collect();
    v.sort();
    v
}

#[test]
fn apex_ns_answer_carries_the_nameserver_addresses_as_glue() {
    let c = ZoneConfig {
        nameservers: vec!["10.96.0.53".parse().unwrap(), "fd00::53".parse().unwrap()],
        ..cfg()
    };
    let zone = Zone::build(&c, 1, [], []).unwrap();
    let glue = [
        "ns.dns.clusterset.local. A 10.96.0.53",
        "ns.dns.clusterset.local. AAAA fd00::53",
    ];
    for name in ["clusterset.local.", "ClusterSet.LOCAL."] {
        let r = ask(&zone, name, RecordType::NS);
        assert_eq!(r.answers, ["NS ns.dns.clusterset.local."], "{name}");
        assert_eq!(additionals(&r), glue, "{name}");
        assert!(r.msg.edns.is_some(), "OPT still there");
    }
    // Without EDNS too.
    let mut out = Vec::new();
    let pkt = query("clusterset.local.", RecordType::NS, None);
    respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
    let r = decode(&out);
    assert_eq!(additionals(&r), glue);
    assert!(r.msg.edns.is_none());
    // The addresses themselves; no glue on other answers.
    let a = ask(&zone, "ns.dns.clusterset.local.", RecordType::A);
    assert_eq!(a.answers, ["A 10.96.0.53"]);
    assert!(additionals(&a).is_empty());
    let soa = ask(&zone, "clusterset.local.", RecordType::SOA);
    assert!(additionals(&soa).is_empty());
    // Glue that does not fit is left out, never truncating the NS answer (RFC 2181 §9).
    let many = ZoneConfig {
        nameservers: (1..=40u16)
            .map(|i| std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i).into())
            .collect(),
        ..cfg()
    };
    let zone = Zone::build(&many, 1, [], []).unwrap();
    respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
    assert!(out.len() <= CLASSIC_UDP_LIMIT);
    let r = decode(&out);
    assert!(!r.tc);
    assert_eq!(r.answers, ["NS ns.dns.clusterset.local."]);
    assert!(additionals(&r).is_empty());
    respond(&zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
    assert_eq!(decode(&out).msg.additionals.len(), 40);
}

#[test]
fn refuses_other_zones_and_fails_before_sync() {
    let zone = web_zone();
    assert_eq!(ask(&zone, "example.com.", RecordType::A).rcode, 5);
    assert_eq!(ask(&zone, "local.", RecordType::A).rcode, 5);
    let unsynced = Zone::unsynced(&cfg()).unwrap();
    assert_eq!(
        ask(&unsynced, "web.ns.svc.clusterset.local.", RecordType::A).rcode,
        2
    );
    assert_eq!(ask(&unsynced, "example.com.", RecordType::A).rcode, 5);
    let mut out = Vec::new();
    let fwd = Settings {
        forward: true,
        ..SETTINGS
    };
    let pkt = query("example.com.", RecordType::A, None);
    assert_eq!(
        respond(&zone, &fwd, &pkt, Transport::Udp, &mut out),
        Outcome::Forward { limit: 512 }
    );
}

#[test]
fn refuses_zone_transfers_and_other_classes() {
    let zone = web_zone();
    assert_eq!(ask(&zone, "clusterset.local.", RecordType::AXFR).rcode, 5);
    let mut pkt = query("web.ns.svc.clusterset.local.", RecordType::A, None);
    let n = pkt.len();
    pkt[n - 1] = 3; // class CH
    let mut out = Vec::new();
    respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
    assert_eq!(decode(&out).rcode, 5);
}

#[test]
fn truncates_to_the_client_limit_and_not_over_tcp() {
    let ips = (0..100u8)
        .map(|i| std::net::IpAddr::from([10, 2, 0, i]))
        .collect::<Vec<_>>();
    let imp = ImportInput {
        namespace: "ns".into(),
        name: "big".into(),
        kind: ServiceKind::ClusterSetIp,
        ips,
        ports: vec![],
    };
    let zone = Zone::build(&cfg(), 1, [&imp], []).unwrap();
    let name = "big.ns.svc.clusterset.local.";
    let mut out = Vec::new();
    for (edns, limit) in [
        (None, 512),
        (Some(600), 600),
        (Some(100), 512),
        (Some(65000), 1232),
    ] {
        let pkt = query(name, RecordType::A, edns);
        respond(&zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
        let r = decode(&out);
        assert!(!r.tc);
        assert_eq!(r.answers.len(), 100);
        let all = r.answers;
        // Over UDP: TC, and as many whole records as fit (a resolver that cannot
        // retry over TCP, musl before 1.2.4, still gets addresses), never more.
        let outcome = respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
        assert!(
            matches!(
                outcome,
                Outcome::Reply {
                    rcode: 0,
                    truncated: true,
                    ..
                }
            ),
            "{edns:?}: {outcome:?}"
        );
        assert!(out.len() <= limit, "{edns:?}: {} > {limit}", out.len());
        assert!(out.len() + 16 > limit, "{edns:?}: room for one more A");
        let r = decode(&out);
        assert!(r.tc, "{edns:?}");
        assert!(!r.answers.is_empty(), "{edns:?}: TC with no records");
        assert!(r.answers.iter().all(|a| all.contains(a)), "{edns:?}");
        assert_eq!(r.msg.edns.is_some(), edns.is_some(), "{edns:?}: OPT");
        // Another query ID starts elsewhere: repeated queries reach other records.
        let mut other = pkt.clone();
        other[..2].copy_from_slice(&50u16.to_be_bytes());
        respond(&zone, &SETTINGS, &other, Transport::Udp, &mut out);
        let rotated = decode(&out);
        assert!(rotated.tc && out.len() <= limit);
        assert_ne!(rotated.answers, r.answers, "{edns:?}: the same subset");
    }
    // 100 A records = 1600 bytes of answers plus the question: fits 4096 only.
    let big = Settings {
        max_udp_payload: 4096,
        ..SETTINGS
    };
    respond(
        &zone,
        &big,
        &query(name, RecordType::A, Some(4096)),
        Transport::Udp,
        &mut out,
    );
    assert_eq!(decode(&out).answers.len(), 100);
}

/// A headless service whose bare SRV answer is larger than a TCP message can carry:
/// 250 ready endpoints in five clusters with UUID ids, three named ports (750 SRV
/// records of about 96 bytes).
pub(crate) fn huge_headless_zone() -> Zone {
    let ports: Vec<PortInput> = [("http", 80), ("https", 443), ("metrics", 9090)]
        .into_iter()
        .map(|(n, p)| PortInput {
            name: Some(n.into()),
            protocol: "TCP".into(),
            port: p,
        })
        .collect();
    let imp = ImportInput {
        namespace: "ns".into(),
        name: "huge".into(),
        kind: ServiceKind::Headless,
        ips: vec![],
        ports: ports.clone(),
    };
    let slices: Vec<SliceInput> = (0..5u8)
        .map(|c| SliceInput {
            namespace: "ns".into(),
            service: "huge".into(),
            cluster: format!("7c9e6679-7425-40de-944b-e07fc1f90ae{c}"),
            endpoints: (0..50u8)
                .map(|i| EndpointInput {
                    addresses: vec![std::net::IpAddr::from([10, 3, c, i])],
                    hostname: None,
                    ready: true,
                })
                .collect(),
            ports: ports.clone(),
        })
        .collect();
    Zone::build(&cfg(), 1, [&imp], &slices).unwrap()
}

#[test]
fn tcp_answers_over_64k_are_a_subset_never_tc() {
    let zone = huge_headless_zone();
    let name = "huge.ns.svc.clusterset.local.";
    let Lookup::Found(node) = zone.lookup(&crate::name::to_wire(name).unwrap()) else {
        panic!("{name} missing");
    };
    let all = node.get(rtype::SRV).unwrap();
    assert_eq!(all.count, 750);
    assert!(all.wire.len() > 65535, "the fixture must not fit");
    let mut out = Vec::new();
    for edns in [None, Some(4096)] {
        let pkt = query(name, RecordType::SRV, edns);
        let outcome = respond(&zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
        assert!(
            matches!(
                outcome,
                Outcome::Reply {
                    rcode: 0,
                    truncated: false,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert!(out.len() <= 65535, "{} bytes", out.len());
        let r = decode(&out);
        assert!(!r.tc, "TC over TCP");
        assert_eq!(r.rcode, 0);
        // The largest subset: one more record would not fit.
        let n = r.answers.len();
        assert!(n > 600 && n < 750, "{n} records");
        assert!(
            out.len() + 96 > 65535,
            "{} bytes with {n} records",
            out.len()
        );
        assert_eq!(r.msg.edns.is_some(), edns.is_some());
    }
    // ANY goes the same way; A (250 records) fits whole.
    let pkt = query(name, RecordType::ANY, None);
    respond(&zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
    let r = decode(&out);
    assert!(!r.tc && !r.answers.is_empty() && out.len() <= 65535);
    let pkt = query(name, RecordType::A, None);
    respond(&zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
    assert_eq!(decode(&out).answers.len(), 250);
    // UDP: TC with the records that fit the client's limit.
    for (edns, limit) in [(None, 512), (Some(4096), 1232)] {
        let pkt = query(name, RecordType::SRV, edns);
        respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
        assert!(out.len() <= limit, "{} > {limit}", out.len());
        let r = decode(&out);
        assert!(r.tc && !r.answers.is_empty(), "{edns:?}: {r:?}");
    }
}

/// The answers to `pkt` with its ID set to `id`, over TCP, checked well-formed.
fn tcp_subset(zone: &Zone, pkt: &[u8], id: u16) -> Vec<String> {
    let mut pkt = pkt.to_vec();
    pkt[..2].copy_from_slice(&id.to_be_bytes());
    let mut out = Vec::new();
    let outcome = respond(zone, &SETTINGS, &pkt, Transport::Tcp, &mut out);
    assert!(
        matches!(
            outcome,
            Outcome::Reply {
                rcode: 0,
                truncated: false,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert!(out.len() <= 65535, "{} bytes", out.len());
    assert!(
        out.len() + 96 > 65535,
        "room for one more: {} bytes",
        out.len()
    );
    let r = decode(&out);
    assert_eq!(r.msg.metadata.id, id);
    assert!(!r.tc && r.rcode == 0);
    assert_eq!(
        usize::from(u16::from_be_bytes([out[6], out[7]])),
        r.answers.len()
    );
    assert!(r.msg.edns.is_some(), "OPT last, counted in ARCOUNT");
    let mut unique = r.answers.clone();
    unique.dedup();
    assert_eq!(unique.len(), r.answers.len(), "a record twice");
    r.answers
}

#[test]
fn tcp_answers_over_64k_rotate_with_the_query_id() {
    let zone = huge_headless_zone();
    let name = "huge.ns.svc.clusterset.local.";
    let Lookup::Found(node) = zone.lookup(&crate::name::to_wire(name).unwrap()) else {
        panic!("{name} missing");
    };
    let all = node.get(rtype::SRV).unwrap();
    // The last record in the sorted order, decoded on its own.
    let mut at = 0;
    for _ in 1..all.count {
        at = rr_end(&all.wire, at).unwrap();
    }
    // the set's record ends are where its records end
    let mut walked = Vec::new();
    let mut from = 0;
    while let Some(end) = rr_end(&all.wire, from) {
        walked.push(end as u32);
        from = end;
    }
    assert_eq!(&walked[..], &all.ends[..]);
    let pkt = query(name, RecordType::SRV, Some(4096));
    let mut alone = pkt.clone();
    alone.truncate(pkt.len() - 11); // no OPT
    alone[2] |= 0x80;
    alone[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    alone.extend_from_slice(&all.wire[at..]);
    let last = decode(&alone).answers;
    assert_eq!(last.len(), 1);
    let last = &last[0];

    let first = tcp_subset(&zone, &pkt, 0);
    assert!(!first.contains(last), "ID 0 starts at the first record");
    let rotated = tcp_subset(&zone, &pkt, 700);
    assert_ne!(first, rotated, "the same subset for different IDs");
    assert!(
        rotated.contains(last),
        "the records that sort last are never sent"
    );
    // The ID wraps modulo the count: 750 + 700 starts where 700 does.
    assert_eq!(tcp_subset(&zone, &pkt, 1450), rotated);
    // Starting at the last record wraps around to the first ones.
    let wrapped = tcp_subset(&zone, &pkt, 749);
    assert!(wrapped.contains(last));
    assert!(wrapped.iter().all(|a| a == last || first.contains(a)));
    // Starting where ID 0 stopped sends the rest.
    let rest = tcp_subset(&zone, &pkt, first.len() as u16);
    let mut union: Vec<&String> = first.iter().chain(&rest).collect();
    union.sort();
    union.dedup();
    assert_eq!(union.len(), 750, "two rotations cover every record");
}

#[test]
fn forward_errors_echo_the_question_and_opt() {
    let mut out = Vec::new();
    for (edns, rc) in [(None, rcode::SERVFAIL), (Some(1232), rcode::REFUSED)] {
        let pkt = query("Example.COM.", RecordType::AAAA, edns);
        assert!(forward_error(&pkt, &SETTINGS, rc, &mut out));
        let r = decode(&out);
        assert_eq!(r.rcode, u16::from(rc));
        assert_eq!(r.msg.metadata.id, 0x4242);
        assert!(r.msg.metadata.recursion_desired && !r.aa && !r.tc);
        assert_eq!(r.msg.queries[0].name().to_string(), "Example.COM.");
        assert_eq!(r.msg.queries[0].query_type(), RecordType::AAAA);
        assert_eq!(r.msg.edns.is_some(), edns.is_some());
    }
    assert!(!forward_error(
        &[0; 5],
        &SETTINGS,
        rcode::SERVFAIL,
        &mut out
    ));
}

#[test]
fn malformed_packets_get_formerr_or_nothing() {
    let zone = web_zone();
    let good = query("web.ns.svc.clusterset.local.", RecordType::A, Some(1232));
    let mut out = Vec::new();
    // Too short: dropped.
    assert_eq!(
        respond(&zone, &SETTINGS, &good[..5], Transport::Udp, &mut out),
        Outcome::Drop
    );
    // A response: dropped.
    let mut resp = good.clone();
    resp[2] |= 0x80;
    assert_eq!(
        respond(&zone, &SETTINGS, &resp, Transport::Udp, &mut out),
        Outcome::Drop
    );
    // Cut in the question, or in the OPT record: FORMERR.
    for cut in [14, good.len() - 3] {
        respond(&zone, &SETTINGS, &good[..cut], Transport::Udp, &mut out);
        assert_eq!(decode(&out).rcode, 1, "cut at {cut}");
    }
    // Two questions: FORMERR.
    let mut two = good.clone();
    two[5] = 2;
    respond(&zone, &SETTINGS, &two, Transport::Udp, &mut out);
    assert_eq!(decode(&out).rcode, 1);
    // Compression pointer in the question: FORMERR.
    let mut ptr = good[..12].to_vec();
    ptr.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1]);
    ptr[11] = 0;
    respond(&zone, &SETTINGS, &ptr, Transport::Udp, &mut out);
    assert_eq!(decode(&out).rcode, 1);
    // Opcode UPDATE: NOTIMP.
    let mut upd = good.clone();
    upd[2] = (upd[2] & 0x87) | (5 << 3);
    respond(&zone, &SETTINGS, &upd, Transport::Udp, &mut out);
    assert_eq!(out[3] & 0x0F, 4);

    // RFC 6891 §7: a query with a valid OPT gets one back, in NOTIMP and FORMERR
    // replies too; with the DO bit copied (RFC 3225 §3).
    let edns_of = |out: &[u8]| {
        assert_eq!(arcount(out), 1, "ARCOUNT counts the OPT");
        let e = Message::from_vec(out)
            .unwrap()
            .edns
            .expect("OPT in the reply");
        (e.max_payload(), e.version(), e.flags().dnssec_ok)
    };
    // NOTIFY (4) and UPDATE (5), with DO and without.
    for opcode in [4u8, 5] {
        for (pkt, dnssec_ok) in [
            (good.clone(), false),
            (
                query_do("web.ns.svc.clusterset.local.", RecordType::A, 1232),
                true,
            ),
        ] {
            let mut p = pkt;
            p[2] = (p[2] & 0x87) | (opcode << 3);
            let outcome = respond(&zone, &SETTINGS, &p, Transport::Udp, &mut out);
            assert!(
                matches!(outcome, Outcome::Reply { rcode: 4, .. }),
                "{outcome:?}"
            );
            assert_eq!(out[3] & 0x0F, 4, "opcode {opcode}: NOTIMP");
            assert_eq!(out[2] & 0xF8, 0x80 | (opcode << 3), "QR and the opcode");
            assert_eq!(out[..2], p[..2], "ID");
            assert_eq!(edns_of(&out), (1232, 0, dnssec_ok), "opcode {opcode}");
        }
    }
    // No question (the RFC 7873 §5.4 cookie probe: QDCOUNT 0, OPT with a COOKIE
    // option): FORMERR with OPT.
    let mut probe = vec![0x51, 0x52, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 1];
    probe.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 0, 0, 0x80, 0, 0, 12]);
    probe.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    respond(&zone, &SETTINGS, &probe, Transport::Udp, &mut out);
    assert_eq!(decode(&out).rcode, 1);
    assert_eq!(out[..2], [0x51, 0x52]);
    assert_eq!(edns_of(&out), (1232, 0, true));
    // Two questions, then OPT: FORMERR with OPT.
    let mut m = Message::from_vec(&good).unwrap();
    m.add_query(Query::query(
        Name::from_ascii("db.ns.svc.clusterset.local.").unwrap(),
        RecordType::AAAA,
    ));
    respond(
        &zone,
        &SETTINGS,
        &m.to_vec().unwrap(),
        Transport::Udp,
        &mut out,
    );
    assert_eq!(out[3] & 0x0F, 1);
    assert_eq!(edns_of(&out), (1232, 0, false));
    // A compression pointer in the question, then OPT: FORMERR with OPT.
    let mut ptr_opt = ptr.clone();
    ptr_opt[11] = 1;
    ptr_opt.extend_from_slice(&good[good.len() - 11..]);
    respond(&zone, &SETTINGS, &ptr_opt, Transport::Udp, &mut out);
    assert_eq!(decode(&out).rcode, 1);
    assert_eq!(edns_of(&out), (1232, 0, false));
    // When no OPT can be read, the header alone: OPT cut short, a second OPT, OPT in
    // the answer section, QDCOUNT 0 with records that run past the end.
    let mut two_opts = good.clone();
    two_opts[11] = 2;
    two_opts.extend_from_slice(&good[good.len() - 11..]);
    let mut opt_in_answer = good.clone();
    opt_in_answer[6..12].copy_from_slice(&[0, 1, 0, 0, 0, 0]);
    let mut past_end = probe.clone();
    past_end[11] = 2;
    for (what, pkt) in [
        ("cut OPT", good[..good.len() - 3].to_vec()),
        ("cut question", good[..14].to_vec()),
        ("two OPTs", two_opts),
        ("OPT in the answer section", opt_in_answer),
        ("records past the end", past_end),
    ] {
        respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out);
        assert_eq!(out.len(), 12, "{what}: header only");
        assert_eq!((out[3] & 0x0F, arcount(&out)), (1, 0), "{what}");
    }
}

#[test]
fn do_bit_is_echoed() {
    let zone = web_zone();
    let big = {
        let imp = ImportInput {
            namespace: "ns".into(),
            name: "big".into(),
            kind: ServiceKind::ClusterSetIp,
            ips: (0..100u8)
                .map(|i| std::net::IpAddr::from([10, 2, 0, i]))
                .collect(),
            ports: vec![],
        };
        Zone::build(&cfg(), 1, [&imp], []).unwrap()
    };
    let mut badvers = Message::from_vec(&query_do(
        "web.ns.svc.clusterset.local.",
        RecordType::A,
        1232,
    ))
    .unwrap();
    badvers.edns.as_mut().unwrap().set_version(1);
    let badvers = badvers.to_vec().unwrap();
    let mut out = Vec::new();
    for (what, z, name, qtype, rc) in [
        (
            "answer",
            &zone,
            "web.ns.svc.clusterset.local.",
            RecordType::A,
            0,
        ),
        (
            "NODATA",
            &zone,
            "web.ns.svc.clusterset.local.",
            RecordType::TXT,
            0,
        ),
        (
            "NXDOMAIN",
            &zone,
            "nope.ns.svc.clusterset.local.",
            RecordType::A,
            3,
        ),
        ("REFUSED", &zone, "example.com.", RecordType::A, 5),
        (
            "qtype OPT",
            &zone,
            "web.ns.svc.clusterset.local.",
            RecordType::OPT,
            1,
        ),
        (
            "truncated",
            &big,
            "big.ns.svc.clusterset.local.",
            RecordType::A,
            0,
        ),
    ] {
        for dnssec_ok in [true, false] {
            let pkt = if dnssec_ok {
                query_do(name, qtype, 512)
            } else {
                query(name, qtype, Some(512))
            };
            respond(z, &SETTINGS, &pkt, Transport::Udp, &mut out);
            let r = decode(&out);
            assert_eq!(r.rcode, rc, "{what}");
            let e = r.msg.edns.as_ref().expect("OPT");
            assert_eq!(e.flags().dnssec_ok, dnssec_ok, "{what}: DO");
            assert_eq!(e.flags().z, 0, "{what}: the other flags are zero");
            assert_eq!(e.max_payload(), 1232, "{what}");
        }
    }
    respond(&zone, &SETTINGS, &badvers, Transport::Udp, &mut out);
    let r = decode(&out);
    assert_eq!(r.rcode, 16);
    assert!(
        r.msg.edns.as_ref().unwrap().flags().dnssec_ok,
        "BADVERS: DO"
    );
    // The forward error replies too.
    let pkt = query_do("example.com.", RecordType::A, 1232);
    assert!(forward_error(&pkt, &SETTINGS, rcode::SERVFAIL, &mut out));
    assert!(decode(&out).msg.edns.unwrap().flags().dnssec_ok);
}

#[test]
fn unknown_edns_version_gets_badvers() {
    let zone = web_zone();
    let mut m = Message::query();
    m.add_query(Query::query(
        Name::from_ascii("web.ns.svc.clusterset.local.").unwrap(),
        RecordType::A,
    ));
    let mut e = Edns::new();
    e.set_version(1);
    m.set_edns(e);
    let mut out = Vec::new();
    respond(
        &zone,
        &SETTINGS,
        &m.to_vec().unwrap(),
        Transport::Udp,
        &mut out,
    );
    let r = decode(&out);
    assert_eq!(r.rcode, 16);
    assert!(r.answers.is_empty());
}

#[test]
fn truncate_foreign_keeps_header_and_question() {
    let zone = web_zone();
    let name = "web.ns.svc.clusterset.local.";
    let mut out = Vec::new();
    let plain = query(name, RecordType::A, None);
    respond(&zone, &SETTINGS, &plain, Transport::Udp, &mut out);
    let mut small = Vec::new();
    assert!(truncate_foreign(&out, &plain, &SETTINGS, &mut small));
    let r = decode(&small);
    assert!(r.tc && r.answers.is_empty());
    assert_eq!(r.msg.queries[0].name().to_string(), name);
    assert!(r.msg.edns.is_none() && arcount(&small) == 0, "no OPT asked");
    assert!(!truncate_foreign(&out[..7], &plain, &SETTINGS, &mut small));

    // The client's query had OPT: the truncated reply has one (RFC 6891 §7), with
    // this server's payload size and the query's DO bit, whether the upstream's OPT
    // was read whole or cut off.
    let upstream = Settings {
        max_udp_payload: 4096,
        ..SETTINGS
    };
    let ours = Settings {
        max_udp_payload: 1400,
        ..SETTINGS
    };
    for dnssec_ok in [false, true] {
        let pkt = if dnssec_ok {
            query_do(name, RecordType::A, 4096)
        } else {
            query(name, RecordType::A, Some(4096))
        };
        respond(&zone, &upstream, &pkt, Transport::Udp, &mut out);
        for resp in [&out[..], &out[..out.len() - 5]] {
            assert!(truncate_foreign(resp, &pkt, &ours, &mut small));
            let r = decode(&small);
            assert!(r.tc && r.answers.is_empty() && r.rcode == 0);
            assert_eq!(arcount(&small), 1);
            let e = r.msg.edns.expect("OPT kept");
            assert_eq!(e.max_payload(), 1400);
            assert_eq!(e.flags().dnssec_ok, dnssec_ok);
        }
    }
    // The upstream's extended rcode (BADVERS = 16: 1 in OPT, 0 in the header).
    let mut m = Message::from_vec(&query(name, RecordType::A, Some(1232))).unwrap();
    m.edns.as_mut().unwrap().set_version(1);
    let v1 = m.to_vec().unwrap();
    respond(&zone, &upstream, &v1, Transport::Udp, &mut out);
    assert!(truncate_foreign(&out, &v1, &ours, &mut small));
    let r = decode(&small);
    assert_eq!(r.rcode, 16);
    assert!(r.tc);
}

proptest! {
    /// The window of records an answer too large for the client carries: whole
    /// records, from record `start` (0 when there is none) on, wrapping to the first;
    /// within the budget; as many as fit, and none twice.
    #[test]
    fn fitting_windows_take_whole_records_as_many_as_fit(
        sizes in proptest::collection::vec(12u32..300, 0..200),
        start in any::<u16>(),
        budget in 0usize..20_000,
    ) {
        let ends: Vec<u32> = sizes.iter().scan(0, |at, s| { *at += s; Some(*at) }).collect();
        let (count, head, tail) = fitting_window(&ends, start, budget);
        let is_boundary = |b: usize| b == 0 || ends.contains(&(b as u32));
        prop_assert!(is_boundary(head.start) && is_boundary(head.end) && is_boundary(tail.end));
        prop_assert!(head.len() + tail.len() <= budget);
        prop_assert!(tail.end <= head.start, "a record twice");
        let records = |r: &std::ops::Range<usize>| ends.iter().filter(|&&e| (e as usize) > r.start && (e as usize) <= r.end).count();
        prop_assert_eq!(count as usize, records(&head) + records(&tail));
        let s = if (start as usize) < ends.len() { start as usize } else { 0 };
        prop_assert_eq!(head.start, if s == 0 { 0 } else { ends[s - 1] as usize });
        // maximal: the next record (after the head, else after the tail) does not fit
        let next = if head.end < ends.last().map_or(0, |e| *e as usize) {
            ends.iter().find(|&&e| e as usize > head.end).map(|e| *e as usize - head.end)
        } else {
            ends.iter().find(|&&e| e as usize > tail.end && (e as usize) <= head.start).map(|e| *e as usize - tail.end)
        };
        if let Some(size) = next {
            prop_assert!(head.len() + tail.len() + size > budget, "one more fits: {count} records, next {size}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_packets_never_panic_and_fit(pkt in proptest::collection::vec(any::<u8>(), 0..600), tcp in any::<bool>()) {
        let zone = web_zone();
        let mut out = Vec::new();
        let t = if tcp { Transport::Tcp } else { Transport::Udp };
        match respond(&zone, &SETTINGS, &pkt, t, &mut out) {
            Outcome::Reply { .. } => { let max = if tcp { 65535 } else { 1232 }; prop_assert!(out.len() <= max) },
            Outcome::Drop | Outcome::Forward { .. } => {}
        }
    }

    #[test]
    fn mutated_queries_never_panic(flips in proptest::collection::vec((0usize..80, any::<u8>()), 1..6), cut in 0usize..80) {
        let zone = web_zone();
        let mut pkt = query("web.ns.svc.clusterset.local.", RecordType::SRV, Some(1232));
        for (at, v) in flips {
            if let Some(b) = pkt.get_mut(at) { *b = v; }
        }
        pkt.truncate(pkt.len().saturating_sub(cut % 8));
        let mut out = Vec::new();
        if let Outcome::Reply { .. } = respond(&zone, &SETTINGS, &pkt, Transport::Udp, &mut out) {
            prop_assert!(out.len() >= 12);
        }
    }
}
