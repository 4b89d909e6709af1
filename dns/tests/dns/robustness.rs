//! Hostile and awkward clients: random packets, idle and slow TCP clients, answers
//! bigger than the client allows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hickory_proto::rr::RecordType;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::support::{DEADLINE, Env, ask_tcp, ask_udp, decode, query, tcp_raw, udp_raw};

/// xorshift64*: a seeded generator, so a failure is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Half pure noise, half valid queries with bytes flipped or cut.
fn hostile_packet(rng: &mut Rng) -> Vec<u8> {
    if rng.below(2) == 0 {
        let len = rng.below(600);
        (0..len).map(|_| rng.next() as u8).collect()
    } else {
        let types = [
            RecordType::A,
            RecordType::AAAA,
            RecordType::SRV,
            RecordType::TXT,
            RecordType::ANY,
        ];
        let mut p = query(
            "hello.demo.svc.clusterset.local.",
            types[rng.below(types.len())],
            Some(1232),
        );
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(p.len());
            p[at] = rng.next() as u8;
        }
        let cut = rng.below(p.len() + 1);
        p.truncate(p.len() - cut / 4);
        p
    }
}

#[tokio::test]
async fn ten_thousand_random_packets_then_still_answers() {
    let env = Env::start().await;
    env.import(
        "hello",
        "ClusterSetIP",
        &["10.42.0.10"],
        json!([{"name": "tcp", "protocol": "TCP", "port": 42}]),
    )
    .await;
    let name = "hello.demo.svc.clusterset.local.";
    env.until("import", name, RecordType::A, |r| {
        r.answers == ["A 10.42.0.10"]
    })
    .await;
    let addr = env.dns().udp;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rng = Rng(0x5EED_CAFE_F00D_0001);
    let mut buf = vec![0u8; 65535];
    for i in 0..10_000 {
        let p = hostile_packet(&mut rng);
        let _ = sock.send_to(&p, addr).await;
        // Drain what came back so far; every answer must fit the classic limit
        // or the EDNS size the (mutated) query may still carry.
        while let Ok((n, _)) = sock.try_recv_from(&mut buf) {
            assert!(n <= 1232, "answer of {n} bytes to a hostile packet");
            assert!(n >= 12);
        }
        if i % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let r = ask_udp(addr, name, RecordType::A, None).await;
    assert_eq!(r.answers, ["A 10.42.0.10"]);
    // The same over TCP, framed garbage included.
    for _ in 0..50 {
        let p = hostile_packet(&mut rng);
        let fut = async {
            let mut s = TcpStream::connect(env.dns().tcp).await.unwrap();
            let mut framed = (p.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&p);
            s.write_all(&framed).await.unwrap();
            let mut resp = Vec::new();
            let _ =
                tokio::time::timeout(Duration::from_millis(500), s.read_to_end(&mut resp)).await;
        };
        tokio::time::timeout(DEADLINE, fut).await.unwrap();
    }
    let r = ask_tcp(env.dns().tcp, name, RecordType::A).await;
    assert_eq!(r.answers, ["A 10.42.0.10"]);
}

async fn closed_within_deadline(mut s: TcpStream) {
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(DEADLINE, s.read(&mut b))
        .await
        .expect("the server closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "no data, just EOF");
}

#[tokio::test]
async fn idle_and_slow_tcp_clients_are_closed() {
    let env = Env::start_with(|c| c.tcp_idle_timeout = Duration::from_millis(300)).await;
    let tcp = env.dns().tcp;
    // Idle: connects and says nothing.
    closed_within_deadline(TcpStream::connect(tcp).await.unwrap()).await;
    // Slow: half a length prefix, then nothing.
    let mut s = TcpStream::connect(tcp).await.unwrap();
    s.write_all(&[0]).await.unwrap();
    closed_within_deadline(s).await;
    // Slow: a length, half the message.
    let mut s = TcpStream::connect(tcp).await.unwrap();
    let q = query("dns-version.clusterset.local.", RecordType::TXT, None);
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&q[..5]).await.unwrap();
    closed_within_deadline(s).await;
    // A well-behaved client gets two answers on one connection, then idles out.
    let mut s = TcpStream::connect(tcp).await.unwrap();
    for _ in 0..2 {
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        s.write_all(&framed).await.unwrap();
        let len = s.read_u16().await.unwrap() as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.unwrap();
        assert_eq!(decode(&resp).answers, ["TXT 1.0.0"]);
    }
    closed_within_deadline(s).await;
    // The server still answers.
    assert_eq!(
        ask_tcp(tcp, "dns-version.clusterset.local.", RecordType::TXT)
            .await
            .answers,
        ["TXT 1.0.0"]
    );
}

#[tokio::test]
async fn answers_never_exceed_the_client_size_and_tcp_has_them_all() {
    let env = Env::start().await;
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    env.import("big", "Headless", &[], ports.clone()).await;
    let ips: Vec<String> = (1..=120)
        .map(|i| format!("10.7.{}.{}", i / 200, i % 200 + 1))
        .collect();
    let eps: Vec<(&str, Option<&str>, Option<bool>)> = ips
        .iter()
        .map(|ip| (ip.as_str(), None, Some(true)))
        .collect();
    env.slice("big", "c1", "IPv4", &eps, ports).await;
    let name = "big.demo.svc.clusterset.local.";
    env.until("big", name, RecordType::A, |r| {
        r.tc || r.answers.len() == 120
    })
    .await;
    let udp = env.dns().udp;
    let r = decode(&tcp_raw(env.dns().tcp, &query(name, RecordType::A, None)).await);
    assert!(!r.tc);
    assert_eq!(r.answers.len(), 120);
    let all_a = r.answers;
    let r = ask_tcp(env.dns().tcp, name, RecordType::SRV).await;
    assert_eq!(r.answers.len(), 120);
    let all_srv = r.answers;
    // Over UDP: TC, with as many whole records as fit the client's size (musl before
    // 1.2.4 does not retry over TCP and needs addresses in the truncated answer).
    for (edns, limit) in [
        (None, 512),
        (Some(512), 512),
        (Some(1232), 1232),
        (Some(4096), 1232),
    ] {
        for (qt, all) in [(RecordType::A, &all_a), (RecordType::SRV, &all_srv)] {
            let raw = udp_raw(udp, &query(name, qt, edns)).await;
            assert!(raw.len() <= limit, "{edns:?} {qt}: {} > {limit}", raw.len());
            let r = decode(&raw);
            assert!(r.tc, "{edns:?} {qt}: 120 records do not fit, TC expected");
            assert!(!r.answers.is_empty(), "{edns:?} {qt}: TC with no records");
            assert!(r.answers.len() < 120, "{edns:?} {qt}");
            assert!(
                r.answers.iter().all(|a| all.contains(a)),
                "{edns:?} {qt}: {:?}",
                r.answers
            );
            assert_eq!(r.msg.edns.is_some(), edns.is_some(), "{edns:?} {qt}: OPT");
        }
    }
    // A small answer still fits without EDNS.
    let r = ask_udp(
        udp,
        "10-7-0-2.c1.big.demo.svc.clusterset.local.",
        RecordType::A,
        None,
    )
    .await;
    assert_eq!(r.answers, ["A 10.7.0.2"]);
}

/// A TCP connection to the server from the given loopback source address.
async fn connect_from(src: &str, server: std::net::SocketAddr) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.bind(format!("{src}:0").parse().unwrap()).unwrap();
    tokio::time::timeout(DEADLINE, sock.connect(server))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// One query on an open connection: the answer, or None when the server closed it.
async fn query_on(s: &mut TcpStream) -> Option<Vec<u8>> {
    let q = query("dns-version.clusterset.local.", RecordType::TXT, None);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    let fut = async {
        s.write_all(&framed).await.ok()?;
        let len = s.read_u16().await.ok()? as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.ok()?;
        Some(resp)
    };
    tokio::time::timeout(DEADLINE, fut)
        .await
        .expect("an answer or a close in time")
}

/// A connection from `src` that gets an answer (retried while a slot frees up).
async fn held_connection(src: &str, server: std::net::SocketAddr) -> TcpStream {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut s = connect_from(src, server).await;
        if query_on(&mut s).await.is_some() {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{src}: never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Half a length prefix on each connection: a query begun, so none of them is idle
/// (given the server time to read it).
async fn begin_queries(conns: &mut [&mut TcpStream]) {
    for s in conns.iter_mut() {
        s.write_all(&[0]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Over the per-client or the total limit, a new connection makes room by closing the
/// connection idle between queries the longest (the same client's first, RFC 7766
/// §6.2.3); it is closed at accept only when no connection is idle.
#[tokio::test]
async fn one_client_cannot_take_every_tcp_connection() {
    let env = Env::start_with(|c| {
        c.max_tcp_connections = 8;
        c.max_tcp_connections_per_client = 5;
        // Begun queries stay begun for the whole test.
        c.tcp_query_timeout = Duration::from_secs(15);
    })
    .await;
    let tcp = env.dns().tcp;
    // 127.0.0.1 holds five connections (each answered once, then idle).
    let mut mine = Vec::new();
    for _ in 0..5 {
        mine.push(held_connection("127.0.0.1", tcp).await);
    }
    // A sixth from the same address is answered: its oldest idle one makes room.
    let mut sixth = connect_from("127.0.0.1", tcp).await;
    assert!(
        query_on(&mut sixth).await.is_some(),
        "per-client limit: room made"
    );
    closed_within_deadline(mine.remove(0)).await;
    // With every one of its connections in the middle of a query, one more from
    // 127.0.0.1 is closed at once...
    let mut busy: Vec<&mut TcpStream> = mine.iter_mut().chain([&mut sixth]).collect();
    begin_queries(&mut busy).await;
    let mut seventh = connect_from("127.0.0.1", tcp).await;
    assert!(
        query_on(&mut seventh).await.is_none(),
        "per-client limit, none idle"
    );
    // ...while another client is still answered.
    let mut other = connect_from("127.0.0.2", tcp).await;
    let r = decode(&query_on(&mut other).await.expect("127.0.0.2 answered"));
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    // The total limit: two more clients fill the server (five busy, three idle); a
    // ninth connection closes the one idle the longest (127.0.0.2's).
    let mut third = held_connection("127.0.0.3", tcp).await;
    let mut fourth = held_connection("127.0.0.4", tcp).await;
    let mut ninth = connect_from("127.0.0.5", tcp).await;
    assert!(
        query_on(&mut ninth).await.is_some(),
        "total limit: room made"
    );
    closed_within_deadline(other).await;
    assert!(query_on(&mut third).await.is_some(), "127.0.0.3 kept");
    // Every connection in the middle of a query: the client holding the most
    // (127.0.0.1, five) gives up its oldest to a new client...
    begin_queries(&mut [&mut third, &mut fourth, &mut ninth]).await;
    let mut late = connect_from("127.0.0.6", tcp).await;
    assert!(
        query_on(&mut late).await.is_some(),
        "total limit, none idle: room made by the client holding the most"
    );
    closed_within_deadline(mine.remove(0)).await;
    // ...but not to a client holding as many (127.0.0.1 itself): closed at once.
    begin_queries(&mut [&mut late]).await;
    let mut again = connect_from("127.0.0.1", tcp).await;
    assert!(
        query_on(&mut again).await.is_none(),
        "total limit, none idle, no client holding two more"
    );
    // Places come back when connections close.
    drop((mine, sixth));
    let mut last = held_connection("127.0.0.7", tcp).await;
    assert!(query_on(&mut last).await.is_some());
    let metrics = env.dns().metrics_handle().encode();
    assert!(
        metrics.contains("causeway_dns_tcp_refused_total 2")
            && metrics.contains("causeway_dns_tcp_evicted_total 3"),
        "refusals and closings to make room counted: {metrics}"
    );
}

/// CoreDNS forwards each query in flight on its own TCP connection, from one pod IP:
/// 40 lookups at once of a headless name too large for UDP without EDNS all get
/// their answer with the default limits.
#[tokio::test]
async fn forty_concurrent_tcp_queries_from_one_address_are_all_answered() {
    let env = Env::start().await;
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    env.import("h", "Headless", &[], ports.clone()).await;
    let ips: Vec<String> = (1..=40).map(|i| format!("10.9.0.{i}")).collect();
    let eps: Vec<(&str, Option<&str>, Option<bool>)> = ips
        .iter()
        .map(|ip| (ip.as_str(), None, Some(true)))
        .collect();
    env.slice("h", "c1", "IPv4", &eps, ports).await;
    let name = "h.demo.svc.clusterset.local.";
    env.until("40 endpoints", name, RecordType::A, |r| {
        r.answers.len() == 40
    })
    .await;
    let tcp = env.dns().tcp;
    let q = query(name, RecordType::A, None);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    // Every connection stays open until all 40 are answered.
    let all_answered = std::sync::Arc::new(tokio::sync::Barrier::new(40));
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let (framed, all_answered) = (framed.clone(), all_answered.clone());
            tokio::spawn(async move {
                let mut s = connect_from("127.0.0.2", tcp).await;
                let fut = async {
                    s.write_all(&framed).await.ok()?;
                    let len = s.read_u16().await.ok()? as usize;
                    let mut resp = vec![0u8; len];
                    s.read_exact(&mut resp).await.ok()?;
                    Some(resp)
                };
                let resp = tokio::time::timeout(DEADLINE, fut).await.ok().flatten();
                all_answered.wait().await;
                resp
            })
        })
        .collect();
    let mut answered = 0;
    for t in tasks {
        let resp = tokio::time::timeout(DEADLINE, t)
            .await
            .expect("every query ends in time")
            .unwrap();
        if let Some(resp) = resp {
            let r = decode(&resp);
            assert_eq!((r.rcode, r.answers.len()), (0, 40), "{r:?}");
            answered += 1;
        }
    }
    assert_eq!(answered, 40, "connections closed without an answer");
}

/// A table full of idle connections (answered, or never used) still lets a new
/// connection in: an idle one is closed for it, long before the idle timeout.
#[tokio::test]
async fn a_full_table_of_idle_connections_still_lets_a_new_one_get_its_answer() {
    let env = Env::start_with(|c| {
        c.max_tcp_connections = 12;
        c.max_tcp_connections_per_client = 4;
        c.tcp_idle_timeout = Duration::from_secs(30);
        c.tcp_query_timeout = Duration::from_millis(300);
    })
    .await;
    let tcp = env.dns().tcp;
    let srcs = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    // Answered once, then idle.
    let mut held = Vec::new();
    for src in srcs {
        for _ in 0..4 {
            held.push(held_connection(src, tcp).await);
        }
    }
    let mut new = connect_from("127.0.0.9", tcp).await;
    assert!(
        query_on(&mut new).await.is_some(),
        "answered at the total limit"
    );
    drop((held, new));
    // (the server sees them closed)
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Never used: each has had the query timeout to begin a query, then counts as idle.
    let mut silent = Vec::new();
    for src in srcs {
        for _ in 0..4 {
            silent.push(connect_from(src, tcp).await);
        }
    }
    let started = tokio::time::Instant::now();
    let mut new = held_connection("127.0.0.9", tcp).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "let in by closing a silent connection, not by the 30 s idle timeout"
    );
    assert!(query_on(&mut new).await.is_some());
    drop(silent);
    let metrics = env.dns().metrics_handle().encode();
    assert!(
        metrics.contains("causeway_dns_tcp_evicted_total 2"),
        "one idle connection closed for each new one: {metrics}"
    );
}

#[tokio::test]
async fn half_sent_tcp_queries_are_closed_fast_while_idle_clients_wait() {
    let env = Env::start_with(|c| {
        c.tcp_idle_timeout = Duration::from_secs(10);
        c.tcp_query_timeout = Duration::from_millis(200);
    })
    .await;
    let tcp = env.dns().tcp;
    let q = query("dns-version.clusterset.local.", RecordType::TXT, None);
    let half_length = |mut s: Vec<u8>| {
        s.truncate(1);
        s
    };
    let half_message = |mut s: Vec<u8>| {
        s.truncate(2 + 5);
        s
    };
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    for (what, cut) in [
        ("half a length", half_length(framed.clone())),
        ("half a query", half_message(framed.clone())),
    ] {
        let mut s = TcpStream::connect(tcp).await.unwrap();
        let started = tokio::time::Instant::now();
        s.write_all(&cut).await.unwrap();
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut b))
            .await
            .unwrap_or_else(|_| panic!("{what}: still open after 3 s (idle timeout is 10 s)"))
            .unwrap_or(0);
        assert_eq!(n, 0, "{what}: closed without an answer");
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "{what}: not before the timeout"
        );
    }
    // A silent client between queries is not cut by the short query timeout.
    let mut s = TcpStream::connect(tcp).await.unwrap();
    assert!(query_on(&mut s).await.is_some());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        query_on(&mut s).await.is_some(),
        "idle for 600 ms: still open"
    );
}

#[tokio::test]
async fn zero_tcp_limits_or_timeouts_are_refused_at_start() {
    let env = Env::bare().await;
    type Tweak = fn(&mut causeway_dns::Config);
    let cases: [(&str, Tweak); 5] = [
        ("limits", |c| c.max_tcp_connections = 0),
        ("limits", |c| c.max_tcp_connections_per_client = 0),
        ("timeouts", |c| c.tcp_idle_timeout = Duration::ZERO),
        ("timeouts", |c| c.tcp_query_timeout = Duration::ZERO),
        ("max_concurrent_forwards", |c| c.max_concurrent_forwards = 0),
    ];
    for (want, tweak) in cases {
        let mut cfg = causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        tweak(&mut cfg);
        let err = match causeway_dns::start(env.client.clone(), cfg).await {
            Ok(running) => {
                running.shutdown().await;
                panic!("started with a zero {want} setting");
            }
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("invalid setting") && err.contains(want),
            "{err}"
        );
    }
}

/// A bare SRV answer larger than a TCP message (250 ready endpoints in clusters with
/// UUID ids, three named ports: 750 records of ~96 bytes) comes back over TCP as the
/// records that fit, without TC (RFC 7766); over UDP it is still TC.
#[tokio::test]
async fn tcp_answers_over_64k_are_the_records_that_fit_without_tc() {
    let env = Env::start().await;
    let ports = json!([
        {"name": "http", "protocol": "TCP", "port": 80},
        {"name": "https", "protocol": "TCP", "port": 443},
        {"name": "metrics", "protocol": "TCP", "port": 9090},
    ]);
    env.import("huge", "Headless", &[], ports.clone()).await;
    for c in 0..5 {
        let cluster = format!("7c9e6679-7425-40de-944b-e07fc1f90ae{c}");
        let ips: Vec<String> = (1..=50).map(|i| format!("10.8.{c}.{i}")).collect();
        let eps: Vec<(&str, Option<&str>, Option<bool>)> = ips
            .iter()
            .map(|ip| (ip.as_str(), None, Some(true)))
            .collect();
        env.slice("huge", &cluster, "IPv4", &eps, ports.clone())
            .await;
    }
    let name = "huge.demo.svc.clusterset.local.";
    let tcp = env.dns().tcp;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let r = ask_tcp(tcp, name, RecordType::A).await;
        if r.answers.len() == 250 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of 250",
            r.answers.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let raw = tcp_raw(tcp, &query(name, RecordType::SRV, None)).await;
    assert!(raw.len() <= 65535);
    let r = decode(&raw);
    assert!(!r.tc, "no TC over TCP");
    assert_eq!(r.rcode, 0);
    assert!(
        r.answers.len() > 600 && r.answers.len() < 750,
        "{} records in {} bytes",
        r.answers.len(),
        raw.len()
    );
    assert!(
        r.answers
            .iter()
            .all(|a| a.contains(".7c9e6679-7425-40de-944b-e07fc1f90ae")),
        "{:?}",
        &r.answers[..3]
    );
    let raw = udp_raw(env.dns().udp, &query(name, RecordType::SRV, Some(1232))).await;
    assert!(raw.len() <= 1232);
    let r = decode(&raw);
    assert!(r.tc && !r.answers.is_empty(), "{r:?}");
}

/// RFC 7766 §6.2.3: a full server may close connections under pressure. A client that
/// keeps every connection busy (a query always begun, each finished within the query
/// timeout) cannot lock another client out: a new connection from a client with fewer
/// connections closes the oldest connection of the client holding the most.
#[tokio::test]
async fn a_client_keeping_every_connection_busy_cannot_lock_another_out() {
    let env = Env::start_with(|c| {
        c.max_tcp_connections = 4;
        c.max_tcp_connections_per_client = 4;
        c.tcp_query_timeout = Duration::from_millis(300);
    })
    .await;
    let tcp = env.dns().tcp;
    let q = query("dns-version.clusterset.local.", RecordType::TXT, None);
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    let stop = Arc::new(AtomicBool::new(false));
    // Each connection: a query's first byte, and every 200 ms the rest of it with the
    // first byte of the next, so it is never idle between queries.
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.1", tcp).await;
        s.write_all(&framed[..1]).await.unwrap();
        let (framed, stop) = (framed.clone(), stop.clone());
        busy.push(tokio::spawn(async move {
            let mut rest = framed[1..].to_vec();
            rest.push(framed[0]);
            let mut answered = 0u32;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let fut = async {
                    s.write_all(&rest).await.ok()?;
                    let len = s.read_u16().await.ok()? as usize;
                    let mut resp = vec![0u8; len];
                    s.read_exact(&mut resp).await.ok()?;
                    Some(resp)
                };
                match tokio::time::timeout(DEADLINE, fut).await {
                    Ok(Some(resp)) => {
                        assert_eq!(decode(&resp).answers, ["TXT 1.0.0"]);
                        answered += 1;
                    }
                    Ok(None) => return (answered, true),
                    Err(_) => panic!("neither answered nor closed"),
                }
            }
            (answered, false)
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut other = connect_from("127.0.0.2", tcp).await;
    let r = query_on(&mut other)
        .await
        .expect("127.0.0.2 answered while 127.0.0.1 keeps every connection busy");
    assert_eq!(decode(&r).answers, ["TXT 1.0.0"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut ends = Vec::new();
    for t in busy {
        ends.push(tokio::time::timeout(DEADLINE, t).await.unwrap().unwrap());
    }
    // The oldest was closed for it (after answering before); the others kept going.
    assert!(ends[0].1 && ends[0].0 >= 1, "{ends:?}");
    assert!(
        ends[1..].iter().all(|&(n, closed)| !closed && n >= 3),
        "{ends:?}"
    );
    let metrics = env.dns().metrics_handle().encode();
    assert!(
        metrics.contains("causeway_dns_tcp_evicted_total 1")
            && metrics.contains("causeway_dns_tcp_timeouts_total 0"),
        "one closed to make room, none timed out: {metrics}"
    );
}
