//! `--forward`: names outside the zone are relayed to the upstream.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::support::{DEADLINE, Env, Reply, ask_tcp, ask_udp, decode, eventually, query};

#[tokio::test]
async fn out_of_zone_names_are_forwarded_over_udp_and_tcp() {
    // The upstream: a second causeway-dns serving another zone.
    let mut upstream = Env::start_with(|c| c.zone = "upstream.test".into()).await;
    let up = upstream.dns().udp;
    let main = causeway_dns::start(
        upstream.client.clone(),
        causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            forward: Some(up),
            ..causeway_dns::Config::default()
        },
    )
    .await
    .unwrap();
    eventually("main synced", || async { main.ready() }).await;
    let name = "dns-version.upstream.test.";
    let r = ask_udp(main.udp, name, RecordType::TXT, None).await;
    assert_eq!(
        (r.rcode, r.answers.clone()),
        (0, vec!["TXT 1.0.0".to_string()]),
        "{r:?}"
    );
    let r = ask_tcp(main.tcp, name, RecordType::TXT).await;
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    let r = ask_udp(main.udp, "nope.upstream.test.", RecordType::A, Some(1232)).await;
    assert_eq!(r.rcode, 3);
    // Its own zone is still answered locally.
    let r = ask_udp(
        main.udp,
        "dns-version.clusterset.local.",
        RecordType::TXT,
        None,
    )
    .await;
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    let udp = main.udp;
    main.shutdown().await;
    // The UDP workers are gone and the socket closed: the port can be bound again.
    std::net::UdpSocket::bind(udp).expect("UDP port free after shutdown");
    if let Some(d) = upstream.dns.take() {
        d.shutdown().await;
    }
}

/// An upstream that never answers: a UDP socket that reads nothing and a TCP listener
/// that accepts and stays silent, on one port. Dropping it closes both.
struct SilentUpstream {
    addr: SocketAddr,
    _udp: std::net::UdpSocket,
    accepter: tokio::task::JoinHandle<()>,
}

impl SilentUpstream {
    async fn start() -> SilentUpstream {
        for _ in 0..20 {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let addr = udp.local_addr().unwrap();
            let Ok(tcp) = TcpListener::bind(addr).await else {
                continue;
            };
            let accepter = tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((s, _)) = tcp.accept().await {
                    held.push(s);
                }
            });
            return SilentUpstream {
                addr,
                _udp: udp,
                accepter,
            };
        }
        panic!("no free port for the silent upstream");
    }
}

impl Drop for SilentUpstream {
    fn drop(&mut self) {
        self.accepter.abort();
    }
}

/// One query over UDP, no retry: the decoded answer and how long it took.
async fn udp_once(server: SocketAddr, pkt: &[u8], wait: Duration) -> Option<(Reply, Duration)> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    sock.send_to(pkt, server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(wait, sock.recv_from(&mut buf))
        .await
        .ok()?
        .unwrap();
    Some((decode(&buf[..n]), started.elapsed()))
}

/// One query over TCP: the decoded answer and how long it took.
async fn tcp_once(server: SocketAddr, pkt: &[u8], wait: Duration) -> Option<(Reply, Duration)> {
    let started = Instant::now();
    let fut = async {
        let mut s = TcpStream::connect(server).await.unwrap();
        let mut framed = (pkt.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(pkt);
        s.write_all(&framed).await.unwrap();
        let len = s.read_u16().await.ok()? as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.ok()?;
        Some(resp)
    };
    let raw = tokio::time::timeout(wait, fut).await.ok()??;
    Some((decode(&raw), started.elapsed()))
}

#[tokio::test]
async fn an_upstream_that_does_not_answer_gives_servfail_over_udp_and_tcp() {
    let upstream = SilentUpstream::start().await;
    let env = Env::start_with(|c| {
        c.forward = Some(upstream.addr);
        c.forward_timeout = Duration::from_millis(200);
    })
    .await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    for edns in [None, Some(1232)] {
        let pkt = query("Silent.Example.", RecordType::AAAA, edns);
        let (r, took) = udp_once(udp, &pkt, Duration::from_secs(1))
            .await
            .expect("UDP: an answer within 1 s");
        assert_eq!(r.rcode, 2, "UDP {edns:?}: SERVFAIL, took {took:?}: {r:?}");
        assert_eq!(r.msg.metadata.id, 0x1234);
        assert_eq!(r.msg.queries[0].name().to_string(), "Silent.Example.");
        assert_eq!(r.msg.queries[0].query_type(), RecordType::AAAA);
        assert_eq!(r.msg.edns.is_some(), edns.is_some());
        let (r, took) = tcp_once(tcp, &pkt, Duration::from_secs(1))
            .await
            .expect("TCP: an answer within 1 s");
        assert_eq!(r.rcode, 2, "TCP {edns:?}: SERVFAIL, took {took:?}: {r:?}");
        assert_eq!(r.msg.queries[0].name().to_string(), "Silent.Example.");
    }
    let text = env.dns().metrics_handle().encode();
    assert!(
        text.contains("causeway_dns_forward_failures_total 4"),
        "{text}"
    );
}

/// With `max_concurrent_forwards` queries waiting for a silent upstream, further
/// out-of-zone queries are REFUSED at once (UDP and TCP), the zone is still answered,
/// and once the waiting ones time out (SERVFAIL) forwarding works again.
#[tokio::test]
async fn forwards_over_the_limit_are_refused_at_once() {
    const CAP: usize = 4;
    const BURST: u16 = 24;
    let upstream = SilentUpstream::start().await;
    let env = Env::start_with(|c| {
        c.forward = Some(upstream.addr);
        c.forward_timeout = Duration::from_millis(1500);
        c.max_concurrent_forwards = CAP;
    })
    .await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    for id in 0..BURST {
        let mut m = Message::query();
        m.metadata.id = id;
        let name = Name::from_ascii(format!("q{id}.example.")).unwrap();
        m.add_query(Query::query(name, RecordType::A));
        sock.send_to(&m.to_vec().unwrap(), udp).await.unwrap();
    }
    // The excess is refused at once: read until BURST - CAP answers or 1 s.
    let mut refused = Vec::new();
    let mut buf = vec![0u8; 4096];
    while refused.len() < usize::from(BURST) - CAP {
        let got = tokio::time::timeout_at(
            (started + Duration::from_secs(1)).into(),
            sock.recv_from(&mut buf),
        )
        .await;
        let Ok(Ok((n, _))) = got else { break };
        let r = decode(&buf[..n]);
        assert_eq!(r.rcode, 5, "REFUSED over the limit: {r:?}");
        refused.push(r.msg.metadata.id);
    }
    assert_eq!(refused.len(), usize::from(BURST) - CAP, "{refused:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // While CAP forwards wait: the zone answers, TCP forwards are refused too.
    let r = ask_udp(udp, "dns-version.clusterset.local.", RecordType::TXT, None).await;
    assert_eq!(r.answers, ["TXT 1.0.0"]);
    let (r, _) = tcp_once(
        tcp,
        &query("t.example.", RecordType::A, None),
        Duration::from_secs(1),
    )
    .await
    .expect("TCP answer");
    assert_eq!(r.rcode, 5, "{r:?}");
    let text = env.dns().metrics_handle().encode();
    let want = format!(
        "causeway_dns_forward_refused_total {}",
        usize::from(BURST) - CAP + 1
    );
    assert!(text.contains(&want), "{want} missing in:\n{text}");
    // The CAP waiting ones end in SERVFAIL, and free their slots.
    let mut failed = Vec::new();
    while failed.len() < CAP {
        let got = tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf)).await;
        let (n, _) = got.expect("SERVFAIL after the timeout").unwrap();
        let r = decode(&buf[..n]);
        assert_eq!(r.rcode, 2, "{r:?}");
        failed.push(r.msg.metadata.id);
    }
    assert!(failed.iter().all(|id| !refused.contains(id)));
    let pkt = query("again.example.", RecordType::A, None);
    let (r, took) = udp_once(udp, &pkt, Duration::from_secs(5))
        .await
        .expect("answer");
    assert_eq!(r.rcode, 2, "forwarded again (and timed out), took {took:?}");
    assert!(took >= Duration::from_millis(1000), "{took:?}: not refused");
}

/// On a wildcard address, forwarded answers (and SERVFAIL for a silent upstream) leave
/// from the address the query was sent to, like the zone's own: a client connected to
/// 127.0.0.2 gets them.
#[tokio::test]
async fn forwarded_answers_on_a_wildcard_address_come_from_the_address_queried() {
    let mut upstream = Env::start_with(|c| c.zone = "upstream.test".into()).await;
    let silent = SilentUpstream::start().await;
    for listen in ["0.0.0.0:0", "[::]:0"] {
        for (to, want) in [(upstream.dns().udp, 0), (silent.addr, 2)] {
            let main = causeway_dns::start(
                upstream.client.clone(),
                causeway_dns::Config {
                    listen: listen.parse().unwrap(),
                    forward: Some(to),
                    forward_timeout: Duration::from_millis(200),
                    nameservers: vec!["127.0.0.1".parse().unwrap()],
                    ..causeway_dns::Config::default()
                },
            )
            .await
            .unwrap();
            eventually("main synced", || async { main.ready() }).await;
            let server = SocketAddr::from(([127, 0, 0, 2], main.udp.port()));
            let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            sock.connect(server).await.unwrap();
            let pkt = query("dns-version.upstream.test.", RecordType::TXT, None);
            let mut buf = vec![0u8; 4096];
            let mut got = None;
            for _ in 0..5 {
                sock.send(&pkt).await.unwrap();
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf)).await
                {
                    got = Some(decode(&buf[..n]));
                    break;
                }
            }
            let r = got.unwrap_or_else(|| panic!("{listen} via {to}: no answer from {server}"));
            assert_eq!(r.rcode, want, "{listen} via {to}: {r:?}");
            if want == 0 {
                assert_eq!(r.answers, ["TXT 1.0.0"]);
            }
            main.shutdown().await;
        }
    }
    if let Some(d) = upstream.dns.take() {
        d.shutdown().await;
    }
}

/// An upstream that answers every query, over UDP and TCP on one port, with
/// `reply(query)`, and keeps the queries it was sent. Dropping it stops it.
struct FakeUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl FakeUpstream {
    async fn start(reply: fn(&[u8]) -> Vec<u8>) -> FakeUpstream {
        FakeUpstream::start_many(move |q| vec![reply(q)]).await
    }

    /// Answers every query with the messages of `replies(query)`, in order: each its
    /// own datagram over UDP, one after the other on the connection over TCP.
    async fn start_many(
        replies: impl Fn(&[u8]) -> Vec<Vec<u8>> + Copy + Send + 'static,
    ) -> FakeUpstream {
        for _ in 0..20 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let addr = udp.local_addr().unwrap();
            let Ok(tcp) = TcpListener::bind(addr).await else {
                continue;
            };
            let seen = Arc::new(Mutex::new(Vec::new()));
            let udp_seen = seen.clone();
            let on_udp = tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok((n, from)) = udp.recv_from(&mut buf).await {
                    udp_seen.lock().unwrap().push(buf[..n].to_vec());
                    for r in replies(&buf[..n]) {
                        let _ = udp.send_to(&r, from).await;
                    }
                }
            });
            let tcp_seen = seen.clone();
            let on_tcp = tokio::spawn(async move {
                while let Ok((mut s, _)) = tcp.accept().await {
                    let seen = tcp_seen.clone();
                    tokio::spawn(async move {
                        let Ok(len) = s.read_u16().await else {
                            return;
                        };
                        let mut q = vec![0u8; usize::from(len)];
                        if s.read_exact(&mut q).await.is_err() {
                            return;
                        }
                        seen.lock().unwrap().push(q.clone());
                        let mut framed = Vec::new();
                        for r in replies(&q) {
                            framed.extend_from_slice(&(r.len() as u16).to_be_bytes());
                            framed.extend_from_slice(&r);
                        }
                        let _ = s.write_all(&framed).await;
                    });
                }
            });
            return FakeUpstream {
                addr,
                seen,
                tasks: vec![on_udp, on_tcp],
            };
        }
        panic!("no free port for the fake upstream");
    }

    /// The question types of the queries it was sent.
    fn seen_types(&self) -> Vec<RecordType> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|q| Message::from_vec(q).unwrap().queries[0].query_type())
            .collect()
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A response to `q` with ID `id`: its question, `records` A records (owner: the
/// question name) and, when `opt`, an OPT record (payload 4096, DO set).
fn upstream_answer(q: &[u8], id: [u8; 2], records: u8, opt: bool) -> Vec<u8> {
    let mut end = 12;
    while q[end] != 0 {
        end += 1 + usize::from(q[end]);
    }
    end += 1 + 4;
    let mut r = Vec::with_capacity(end + 16 * usize::from(records) + 11);
    r.extend_from_slice(&id);
    r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, records, 0, 0, 0, u8::from(opt)]);
    r.extend_from_slice(&q[12..end]);
    for i in 0..records {
        r.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, i]);
    }
    if opt {
        r.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 0, 0, 0x80, 0, 0, 0]);
    }
    r
}

/// A query as [`query`] makes it, with the DO bit set when `dnssec_ok`.
fn query_with_do(name: &str, qtype: RecordType, edns: Option<u16>, dnssec_ok: bool) -> Vec<u8> {
    let mut m = Message::from_vec(&query(name, qtype, edns)).unwrap();
    if let Some(e) = m.edns.as_mut() {
        e.set_dnssec_ok(dnssec_ok);
    }
    m.to_vec().unwrap()
}

/// An upstream answer larger than the client takes over UDP comes back truncated:
/// TC, the question, and an OPT when the client's query had one (RFC 6891 §7), with
/// this server's payload size and the query's DO bit. Over TCP it is relayed whole.
#[tokio::test]
async fn forwarded_answers_too_big_for_the_client_are_truncated_with_opt() {
    // 80 A records: 1280 bytes of answers, more than 1232.
    let upstream = FakeUpstream::start(|q| upstream_answer(q, [q[0], q[1]], 80, true)).await;
    let env = Env::start_with(|c| c.forward = Some(upstream.addr)).await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    let name = "Big.Example.";
    for (edns, dnssec_ok, limit) in [
        (None, false, 512),
        (Some(512), false, 512),
        (Some(1232), true, 1232),
        (Some(4096), false, 1232),
    ] {
        let ctx = format!("{edns:?} DO={dnssec_ok}");
        let pkt = query_with_do(name, RecordType::A, edns, dnssec_ok);
        let raw = crate::support::udp_raw(udp, &pkt).await;
        assert!(raw.len() <= limit, "{ctx}: {} > {limit}", raw.len());
        let r = decode(&raw);
        assert!(r.tc && r.answers.is_empty() && r.rcode == 0, "{ctx}: {r:?}");
        assert_eq!(r.msg.metadata.id, 0x1234);
        assert_eq!(r.msg.queries[0].name().to_string(), name, "{ctx}");
        assert_eq!(
            u16::from_be_bytes([raw[10], raw[11]]),
            u16::from(edns.is_some()),
            "{ctx}: ARCOUNT"
        );
        match (&r.msg.edns, edns) {
            (Some(e), Some(_)) => {
                assert_eq!(e.max_payload(), 1232, "{ctx}: this server's payload size");
                assert_eq!(e.flags().dnssec_ok, dnssec_ok, "{ctx}: DO");
            }
            (None, None) => {}
            (got, _) => panic!("{ctx}: OPT {got:?}"),
        }
        let (r, _) = tcp_once(tcp, &pkt, Duration::from_secs(2))
            .await
            .expect("TCP answer");
        assert!(!r.tc, "{ctx}");
        assert_eq!(r.answers.len(), 80, "{ctx}: relayed whole over TCP");
    }
}

/// An upstream reply whose ID is not the query's is never relayed: over TCP the client
/// gets SERVFAIL at once (the connection carried only its query), over UDP the reply
/// is ignored and the wait ends in SERVFAIL.
#[tokio::test]
async fn upstream_replies_with_another_id_are_not_relayed() {
    let upstream = FakeUpstream::start(|q| upstream_answer(q, [!q[0], !q[1]], 1, false)).await;
    let mut env = Env::start_with(|c| {
        c.forward = Some(upstream.addr);
        c.forward_timeout = Duration::from_millis(300);
    })
    .await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    let pkt = query("Stranger.Example.", RecordType::A, Some(1232));
    let (r, took) = tcp_once(tcp, &pkt, Duration::from_secs(2))
        .await
        .expect("TCP: an answer");
    assert_eq!(
        (r.msg.metadata.id, r.rcode),
        (0x1234, 2),
        "TCP: SERVFAIL, not the other ID's answer: {r:?}"
    );
    assert!(r.answers.is_empty());
    assert!(
        took < Duration::from_millis(300),
        "TCP: at once, took {took:?}"
    );
    let (r, _) = udp_once(udp, &pkt, Duration::from_secs(2))
        .await
        .expect("UDP: an answer");
    assert_eq!((r.msg.metadata.id, r.rcode), (0x1234, 2), "UDP: {r:?}");
    // An upstream that answers with the query's ID is relayed over both.
    if let Some(d) = env.dns.take() {
        d.shutdown().await;
    }
    let good = FakeUpstream::start(|q| upstream_answer(q, [q[0], q[1]], 1, false)).await;
    let env = Env::start_with(|c| c.forward = Some(good.addr)).await;
    let (r, _) = tcp_once(env.dns().tcp, &pkt, Duration::from_secs(2))
        .await
        .expect("TCP answer");
    assert_eq!(
        (r.rcode, r.answers.clone()),
        (0, vec!["A 192.0.2.0".into()])
    );
    let r = ask_udp(env.dns().udp, "Stranger.Example.", RecordType::A, None).await;
    assert_eq!(r.answers, ["A 192.0.2.0"]);
}

/// One length-prefixed message from `s`.
async fn read_framed(s: &mut TcpStream) -> Vec<u8> {
    let fut = async {
        let len = s.read_u16().await.unwrap() as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.unwrap();
        resp
    };
    tokio::time::timeout(crate::support::DEADLINE, fut)
        .await
        .expect("a TCP answer in time")
}

/// RFC 7766 §6.2.1.1: a query pipelined behind a forwarded one on the same TCP
/// connection is answered at once, not after the (silent) upstream's timeout; the
/// forwarded one's answer (SERVFAIL) follows.
#[tokio::test]
async fn pipelined_in_zone_queries_do_not_wait_for_a_forwarded_one() {
    let upstream = SilentUpstream::start().await;
    let env = Env::start_with(|c| {
        c.forward = Some(upstream.addr);
        c.forward_timeout = Duration::from_secs(3);
    })
    .await;
    let mut out_of_zone = query("example.com.", RecordType::A, None);
    out_of_zone[..2].copy_from_slice(&[0, 1]);
    let mut in_zone = query("dns-version.clusterset.local.", RecordType::TXT, None);
    in_zone[..2].copy_from_slice(&[0, 2]);
    let mut pipelined = Vec::new();
    for q in [&out_of_zone, &in_zone] {
        pipelined.extend_from_slice(&(q.len() as u16).to_be_bytes());
        pipelined.extend_from_slice(q);
    }
    let mut s = TcpStream::connect(env.dns().tcp).await.unwrap();
    let started = Instant::now();
    s.write_all(&pipelined).await.unwrap();
    let first = decode(&read_framed(&mut s).await);
    let took = started.elapsed();
    assert_eq!(
        (first.msg.metadata.id, first.answers.clone()),
        (2, vec!["TXT 1.0.0".to_string()]),
        "{first:?}"
    );
    assert!(
        took < Duration::from_secs(1),
        "the in-zone answer took {took:?} (forward timeout 3 s)"
    );
    let second = decode(&read_framed(&mut s).await);
    assert_eq!((second.msg.metadata.id, second.rcode), (1, 2), "{second:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "after the timeout"
    );
    // The connection still serves after both.
    s.write_all(&pipelined[2 + out_of_zone.len()..])
        .await
        .unwrap();
    let third = decode(&read_framed(&mut s).await);
    assert_eq!(third.answers, ["TXT 1.0.0"]);
}

/// A client that sends its queries and then closes its side of the connection (a
/// half-close) still gets the forwarded answers.
#[tokio::test]
async fn forwarded_tcp_answers_reach_a_client_that_closed_its_side() {
    let mut upstream = Env::start_with(|c| c.zone = "upstream.test".into()).await;
    let env = Env::start_with(|c| c.forward = Some(upstream.dns().tcp)).await;
    let mut forwarded = query("dns-version.upstream.test.", RecordType::TXT, None);
    forwarded[..2].copy_from_slice(&[0, 1]);
    let mut local = query("dns-version.clusterset.local.", RecordType::TXT, None);
    local[..2].copy_from_slice(&[0, 2]);
    let mut pipelined = Vec::new();
    for q in [&forwarded, &local] {
        pipelined.extend_from_slice(&(q.len() as u16).to_be_bytes());
        pipelined.extend_from_slice(q);
    }
    let mut s = TcpStream::connect(env.dns().tcp).await.unwrap();
    s.write_all(&pipelined).await.unwrap();
    s.shutdown().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = decode(&read_framed(&mut s).await);
        assert_eq!(r.answers, ["TXT 1.0.0"], "{r:?}");
        ids.push(r.msg.metadata.id);
    }
    ids.sort();
    assert_eq!(ids, [1, 2]);
    if let Some(d) = upstream.dns.take() {
        d.shutdown().await;
    }
}

/// Zone transfers are refused for every name, never forwarded: the upstream would see
/// a transfer asked from this server's address, and over TCP only its first message
/// would be relayed.
#[tokio::test]
async fn zone_transfers_outside_the_zone_are_refused_not_forwarded() {
    let upstream = FakeUpstream::start(|q| upstream_answer(q, [q[0], q[1]], 1, false)).await;
    let env = Env::start_with(|c| c.forward = Some(upstream.addr)).await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    for qtype in [RecordType::AXFR, RecordType::IXFR] {
        for name in ["example.com.", "Other.Zone.", "clusterset.local."] {
            let ctx = format!("{name} {qtype}");
            let pkt = query(name, qtype, None);
            let (r, _) = tcp_once(tcp, &pkt, Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("{ctx}: a TCP answer"));
            assert_eq!((r.msg.metadata.id, r.rcode), (0x1234, 5), "{ctx}: {r:?}");
            assert!(r.answers.is_empty(), "{ctx}: {r:?}");
            let (r, _) = udp_once(udp, &pkt, Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("{ctx}: a UDP answer"));
            assert_eq!((r.msg.metadata.id, r.rcode), (0x1234, 5), "{ctx}: {r:?}");
            assert!(r.answers.is_empty(), "{ctx}: {r:?}");
        }
    }
    // Other types outside the zone still go to the upstream.
    let r = ask_udp(udp, "example.com.", RecordType::A, None).await;
    assert_eq!(r.answers, ["A 192.0.2.0"]);
    let (r, _) = tcp_once(tcp, &query("example.com.", RecordType::A, None), DEADLINE)
        .await
        .expect("TCP answer");
    assert_eq!(r.answers, ["A 192.0.2.0"]);
    let seen = upstream.seen_types();
    assert!(
        !seen.is_empty() && seen.iter().all(|t| *t == RecordType::A),
        "the upstream was sent {seen:?}"
    );
}

/// `q` with its question replaced: another name (wire form), type or class.
fn with_question(q: &[u8], name: Option<&[u8]>, qtype: Option<u16>, class: Option<u16>) -> Vec<u8> {
    let mut end = 12;
    while q[end] != 0 {
        end += 1 + usize::from(q[end]);
    }
    end += 1;
    let mut out = q[..12].to_vec();
    out.extend_from_slice(name.unwrap_or(&q[12..end]));
    let t = qtype.map_or([q[end], q[end + 1]], u16::to_be_bytes);
    let c = class.map_or([q[end + 2], q[end + 3]], u16::to_be_bytes);
    out.extend_from_slice(&t);
    out.extend_from_slice(&c);
    out.extend_from_slice(&q[end + 4..]);
    out
}

/// Replies with the query's ID to other questions (another name, type, class: one
/// A record each), then the right reply, its name in another case (two A records).
fn strangers_then_the_answer(q: &[u8]) -> Vec<Vec<u8>> {
    let id = [q[0], q[1]];
    let other_name = with_question(q, Some(b"\x05other\x07example\x00"), None, None);
    let other_type = with_question(q, None, Some(28), None);
    let other_class = with_question(q, None, None, Some(3));
    let mut name = q[12..].to_vec();
    let mut end = 0;
    while name[end] != 0 {
        end += 1 + usize::from(name[end]);
    }
    name.truncate(end + 1);
    name.make_ascii_lowercase();
    let lower = with_question(q, Some(&name), None, None);
    vec![
        upstream_answer(&other_name, id, 1, false),
        upstream_answer(&other_type, id, 1, false),
        upstream_answer(&other_class, id, 1, false),
        upstream_answer(&lower, id, 2, false),
    ]
}

/// RFC 5452 §9.1: a forwarded reply is accepted only when its question is the query's
/// (name without regard to case, type, class), not on its ID alone. Over UDP the
/// others are ignored and the right one, which follows, is relayed; over TCP (one
/// query per connection) the first reply is another question's, so SERVFAIL.
#[tokio::test]
async fn upstream_replies_to_another_question_are_not_relayed() {
    let upstream = FakeUpstream::start_many(strangers_then_the_answer).await;
    let env = Env::start_with(|c| {
        c.forward = Some(upstream.addr);
        c.forward_timeout = Duration::from_secs(2);
    })
    .await;
    let (udp, tcp) = (env.dns().udp, env.dns().tcp);
    for edns in [None, Some(1232)] {
        let pkt = query("Stranger.Example.", RecordType::A, edns);
        let (r, took) = udp_once(udp, &pkt, Duration::from_secs(5))
            .await
            .expect("UDP: an answer");
        assert_eq!(
            (r.msg.metadata.id, r.rcode, r.answers.clone()),
            (0x1234, 0, vec!["A 192.0.2.0".into(), "A 192.0.2.1".into()]),
            "UDP {edns:?}: the reply to this question, not the first with its ID: {r:?}"
        );
        assert!(took < Duration::from_secs(2), "UDP: at once, took {took:?}");
        assert_eq!(r.msg.queries[0].query_type(), RecordType::A);
        let (r, _) = tcp_once(tcp, &pkt, Duration::from_secs(5))
            .await
            .expect("TCP: an answer");
        assert_eq!(
            (r.msg.metadata.id, r.rcode),
            (0x1234, 2),
            "TCP {edns:?}: SERVFAIL, not another question's answer: {r:?}"
        );
        assert!(r.answers.is_empty());
    }
}
