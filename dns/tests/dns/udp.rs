//! UDP serving: batched reads and writes, one SO_REUSEPORT socket per worker; many
//! concurrent clients, the answer's source address, shutdown, and per-query counts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use serde_json::json;
use tokio::net::UdpSocket;

use crate::support::{DEADLINE, Env, ask_udp, decode, eventually, http_get};

const SERVICES: usize = 5;

/// The A answer of service `s<i>`.
fn ip_of(i: usize) -> String {
    format!("10.9.0.{}", i + 1)
}

/// kubesim and causeway-dns with `workers` UDP workers on `listen`, and `SERVICES`
/// ClusterSetIP services answering.
async fn env_with(workers: usize, listen: &str) -> Env {
    let listen: SocketAddr = listen.parse().unwrap();
    let env = Env::start_with(|c| {
        c.workers = workers;
        c.listen = listen;
    })
    .await;
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    for i in 0..SERVICES {
        env.import(
            &format!("s{i}"),
            "ClusterSetIP",
            &[&ip_of(i)],
            ports.clone(),
        )
        .await;
    }
    let last = format!("s{}.demo.svc.clusterset.local.", SERVICES - 1);
    let want = format!("A {}", ip_of(SERVICES - 1));
    // On a wildcard address (0.0.0.0 or [::]), ask through IPv4 loopback.
    let mut probe = env.dns().udp;
    if probe.ip().is_unspecified() {
        probe = SocketAddr::from(([127, 0, 0, 1], probe.port()));
    }
    eventually("services imported", || async {
        ask_udp(probe, &last, RecordType::A, None).await.answers == [want.clone()]
    })
    .await;
    env
}

/// Query `id` of a client: service `s<id % SERVICES>`, A.
fn query_for(id: u16) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    let name = format!("s{}.demo.svc.clusterset.local.", usize::from(id) % SERVICES);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    m.to_vec().unwrap()
}

/// Sends queries `0..count` from `sock` in bursts, resending the unanswered ones
/// (bounded rounds: datagrams may be dropped when a burst fills a socket buffer), and
/// checks every answer: its ID, its A record, and that it came from `server`. Returns
/// how many datagrams it sent.
async fn burst_client(sock: UdpSocket, server: SocketAddr, count: u16) -> Result<u64, String> {
    let mut pending: BTreeMap<u16, Vec<u8>> = (0..count).map(|id| (id, query_for(id))).collect();
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut sent = 0;
    for _round in 0..20 {
        for pkt in pending.values() {
            sock.send_to(pkt, server).await.map_err(|e| e.to_string())?;
            sent += 1;
        }
        // Read until the round goes quiet.
        while let Ok(got) =
            tokio::time::timeout(Duration::from_millis(300), sock.recv_from(&mut buf)).await
        {
            let (n, from) = got.map_err(|e| e.to_string())?;
            if from != server {
                return Err(format!("answer from {from}, queries went to {server}"));
            }
            let r = decode(&buf[..n]);
            let id = r.msg.metadata.id;
            let want = format!("A {}", ip_of(usize::from(id) % SERVICES));
            if r.rcode != 0 || r.answers != [want.clone()] {
                return Err(format!("query {id}: want {want}, got {r:?}"));
            }
            pending.remove(&id);
            if pending.is_empty() {
                return Ok(sent);
            }
        }
        if tokio::time::Instant::now() > deadline {
            break;
        }
    }
    Err(format!(
        "{} of {count} queries never answered",
        pending.len()
    ))
}

/// Waits for every client (bounded); panics with the first failure, prefixed by
/// `what`; returns the datagrams they sent.
async fn join_clients(
    what: &str,
    clients: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
) -> u64 {
    let mut sent = 0;
    for c in clients {
        let res = tokio::time::timeout(DEADLINE * 2, c).await;
        let res = res.expect("clients finish in time").expect("client task");
        sent += res.unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    sent
}

/// Eight client sockets, 250 queries each, all in flight at once, against one worker
/// and against three SO_REUSEPORT workers: every query answered, correctly, from the
/// server's address.
#[tokio::test]
async fn concurrent_queries_from_many_sockets_are_all_answered() {
    for workers in [1, 3] {
        let env = env_with(workers, "127.0.0.1:0").await;
        let server = env.dns().udp;
        let mut clients = Vec::new();
        for _ in 0..8 {
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            clients.push(tokio::spawn(burst_client(sock, server, 250)));
        }
        join_clients(&format!("{workers} worker(s)"), clients).await;
    }
}

/// A server on 127.0.0.3 answers from 127.0.0.3, whichever worker reads the query:
/// clients with connected sockets (which take datagrams from that address only) on
/// other loopback addresses get every answer.
#[tokio::test]
async fn answers_come_from_the_address_the_query_was_sent_to() {
    let env = env_with(3, "127.0.0.3:0").await;
    let server = env.dns().udp;
    assert_eq!(server.ip().to_string(), "127.0.0.3");
    let mut clients = Vec::new();
    for src in ["127.0.0.1", "127.0.0.4", "127.0.0.5", "127.0.0.6"] {
        let sock = UdpSocket::bind(format!("{src}:0")).await.unwrap();
        sock.connect(server).await.unwrap();
        clients.push(tokio::spawn(burst_client(sock, server, 50)));
    }
    join_clients("connected clients", clients).await;
}

/// After shutdown every worker's socket is closed: the UDP and TCP port can be bound
/// again by a plain socket (no SO_REUSEPORT), which fails while any of them is open.
#[tokio::test]
async fn shutdown_stops_every_worker_and_frees_the_port() {
    let mut env = env_with(4, "127.0.0.1:0").await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    assert!(
        std::net::UdpSocket::bind(udp).is_err(),
        "the port is in use while serving"
    );
    let started = std::time::Instant::now();
    env.dns.take().unwrap().shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "shutdown took {:?}: a worker did not wake",
        started.elapsed()
    );
    std::net::UdpSocket::bind(udp).expect("UDP port free after shutdown");
    std::net::TcpListener::bind(tcp).expect("TCP port free after shutdown");
}

/// Value of the metric line starting with `key ` in a /metrics text (0 when absent).
fn metric(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Every UDP query is counted, by type and response code, and in the latency
/// histogram, with two workers reading in batches: the /metrics deltas equal what the
/// clients sent, as soon as they hold their answers.
#[tokio::test]
async fn metrics_count_every_udp_query() {
    let env = env_with(2, "127.0.0.1:0").await;
    let (server, admin) = (env.dns().udp, env.dns().metrics.unwrap());
    let keys = [
        r#"causeway_dns_queries_total{qtype="A",rcode="NOERROR"}"#,
        "causeway_dns_query_duration_seconds_count",
        "causeway_dns_dropped_total",
    ];
    let before = http_get(admin, "/metrics").await.1;
    let mut clients = Vec::new();
    for _ in 0..4 {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        clients.push(tokio::spawn(burst_client(sock, server, 100)));
    }
    let sent = join_clients("clients", clients).await;
    let answered = 4 * 100;
    // Three packets that are not queries (shorter than a header): dropped, counted.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..3 {
        sock.send_to(&[1, 2, 3], server).unwrap();
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let after = loop {
        let text = http_get(admin, "/metrics").await.1;
        if metric(&text, keys[2]) >= metric(&before, keys[2]) + 3
            || tokio::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let delta = |k: &str| metric(&after, k) - metric(&before, k);
    // Every answered query is counted; a resent one (its first datagram lost in a
    // full buffer, or answered late) at most once per datagram sent. Usually both
    // bounds are equal.
    let a = delta(keys[0]);
    assert!(
        (answered..=sent).contains(&a),
        "{a} A/NOERROR counted for {answered} answered, {sent} sent"
    );
    assert_eq!(delta(keys[1]), a, "one latency observation per query");
    assert_eq!(
        delta(keys[2]),
        3,
        "the three non-queries counted as dropped"
    );
}

/// On a wildcard address (0.0.0.0, and [::] for IPv4 clients through the dual-stack
/// socket), each answer leaves from the address its query was sent to (IP_PKTINFO,
/// IPV6_RECVPKTINFO): clients with sockets connected to 127.0.0.2, which take
/// datagrams from that address only, get every answer, from one worker or several.
#[tokio::test]
async fn on_a_wildcard_address_answers_come_from_the_address_queried() {
    // A routed IPv6 address of this host, if it has one: asked from ::1, the route's
    // source would be ::1.
    let v6 = causeway_dns::default_nameservers(std::net::Ipv6Addr::UNSPECIFIED.into())
        .into_iter()
        .find(|ip| ip.is_ipv6() && !ip.is_loopback());
    for (listen, workers) in [("0.0.0.0:0", 1), ("0.0.0.0:0", 3), ("[::]:0", 2)] {
        let env = env_with(workers, listen).await;
        let port = env.dns().udp.port();
        let mut clients = Vec::new();
        let mut pairs = vec![
            ("127.0.0.1", "127.0.0.2".to_string()),
            ("127.0.0.1", "127.0.0.1".to_string()),
            ("127.0.0.3", "127.0.0.2".to_string()),
        ];
        if let (true, Some(ip)) = (listen.starts_with('['), v6) {
            pairs.push(("[::1]", format!("[{ip}]")));
        }
        for (src, dst) in pairs {
            let server: SocketAddr = format!("{dst}:{port}").parse().unwrap();
            let sock = UdpSocket::bind(format!("{src}:0")).await.unwrap();
            sock.connect(server).await.unwrap();
            clients.push(tokio::spawn(burst_client(sock, server, 40)));
        }
        join_clients(&format!("{listen}, {workers} worker(s)"), clients).await;
    }
}

/// A datagram longer than the 4096 bytes read is cut by the kernel (MSG_TRUNC in the
/// message's flags): it is answered FORMERR, not from its first 4096 bytes, by every
/// worker; one of exactly 4096 bytes is read whole and answered.
#[tokio::test]
async fn datagrams_over_4096_bytes_are_answered_formerr() {
    for workers in [1, 2] {
        let env = env_with(workers, "127.0.0.1:0").await;
        let udp = env.dns().udp;
        // A question, then zeros (ignored after ARCOUNT 0 when read whole).
        let q = crate::support::query("s0.demo.svc.clusterset.local.", RecordType::A, None);
        for (size, want) in [(5000, 1), (4097, 1), (4096, 0), (5000, 1)] {
            let mut pkt = q.clone();
            pkt.resize(size, 0);
            let r = decode(&crate::support::udp_raw(udp, &pkt).await);
            assert_eq!(
                (r.msg.metadata.id, r.rcode),
                (0x1234, want),
                "{workers} workers, {size} bytes: {r:?}"
            );
            let answers: &[String] = if want == 0 { &[ip_of(0)] } else { &[] };
            let answers: Vec<String> = answers.iter().map(|a| format!("A {a}")).collect();
            assert_eq!(r.answers, answers, "{workers} workers, {size} bytes");
        }
    }
}
