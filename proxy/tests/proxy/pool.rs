//! Upstream keep-alive pool: connections are reused, an upstream that closes idle
//! connections (as nginx's `keepalive_timeout` does) costs no client error, and the
//! proxy closes connections idle past the MCI's idle timeout.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::harness::*;

/// A minimal HTTP/1.1 server on raw sockets: answers every request `200 ok` with
/// keep-alive, and closes a connection that stays idle for `idle` (None: never).
/// With `gate: Some(n)`, answers are held until `n` requests are waiting (a reusable
/// barrier), so a burst of `n` requests needs `n` connections at once. With `early`,
/// it answers as soon as it has the head and reads the body afterwards (as servers
/// that refuse an upload do).
struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start(
        ip: [u8; 4],
        idle: Option<Duration>,
        gate: Option<usize>,
        early: bool,
    ) -> anyhow::Result<Upstream> {
        let l = TcpListener::bind(SocketAddr::new(IpAddr::from(ip), POD_PORT)).await?;
        let addr = l.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let n = accepted.clone();
        let gate = gate.map(|n| Arc::new(tokio::sync::Barrier::new(n)));
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::Relaxed);
                let gate = gate.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let read = s.read(&mut chunk);
                        let got = match idle {
                            // Idle before the next request's first byte: close.
                            Some(t) if buf.is_empty() => {
                                match tokio::time::timeout(t, read).await {
                                    Ok(r) => r,
                                    Err(_) => return,
                                }
                            }
                            _ => read.await,
                        };
                        match got {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                        // A request is its head plus a Content-Length body.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if early && len > 0 {
                                // Answer now; the body is read (and dropped) after.
                                let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nearly";
                                if s.write_all(resp).await.is_err() {
                                    return;
                                }
                                let mut left = (end + 4 + len).saturating_sub(buf.len());
                                buf.clear();
                                while left > 0 {
                                    match s.read(&mut chunk).await {
                                        Ok(0) | Err(_) => return,
                                        Ok(k) => left = left.saturating_sub(k),
                                    }
                                }
                                continue;
                            }
                            if buf.len() < end + 4 + len {
                                break;
                            }
                            buf.drain(..end + 4 + len);
                            if let Some(g) = &gate {
                                g.wait().await;
                            }
                            let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if s.write_all(resp).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Ok(Upstream {
            addr,
            accepted,
            task,
        })
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_reuse_upstream_idle_closes_and_idle_timeout() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    // Closes connections idle for 100 ms; the other never does.
    let closer = Upstream::start(
        [127, 0, 12, 1],
        Some(Duration::from_millis(100)),
        None,
        false,
    )
    .await?;
    let keeper = Upstream::start([127, 0, 12, 2], None, None, false).await?;
    for (svc, up) in [("closer", &closer), ("keeper", &keeper)] {
        hub.import(svc).await?;
        hub.export(svc, "east", &[(up.addr, true)]).await?;
    }
    hub.mci(
        "closer",
        json!({"rules": [rule(Some("c.test"), "/", "Prefix", "closer")]}),
        json!({}),
    )
    .await?;
    hub.mci(
        "keeper",
        json!({"rules": [rule(Some("k.test"), "/", "Prefix", "keeper")]}),
        json!({"causeway.io/idle-timeout": "300ms"}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let admin = p.metrics.unwrap();
    let c = client();
    answers(&c, p.http, ("c.test", "/"), 200, Duration::from_secs(10)).await?;

    // Back-to-back requests share one upstream connection.
    let before = closer.accepted();
    for i in 0..50 {
        let r = get(&c, p.http, "c.test", &format!("/{i}"), &[]).await?;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    }
    assert!(
        closer.accepted() <= before + 1,
        "50 sequential requests opened {} upstream connections",
        closer.accepted() - before
    );

    // The upstream closes the pooled connection while it idles. The next request must
    // not fail, and must not count as an upstream failure (no retry, no ejection):
    // the proxy notices the close, or resends an unwritten request on a fresh
    // connection. POST, which is never retried elsewhere, shows it. Pauses on both
    // sides of the upstream's 100 ms, but not within a few ms of it: a request written
    // in the same instant as the upstream closes can fail on any proxy (RFC 9112
    // 9.3.1 forbids resending a POST that may have reached the server).
    for pause in [150, 80, 120, 60, 250, 110, 90] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        for _ in 0..3 {
            let body = bytes::Bytes::from_static(b"payload");
            let r = send(&c, http::Method::POST, p.http, "c.test", "/", &[], body).await?;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, "ok"),
                "after a {pause} ms pause"
            );
        }
    }
    assert!(closer.accepted() >= before + 3, "the upstream never closed");
    let m = get(&c, admin, "x", "/metrics", &[]).await?.body;
    for l in m.lines().filter(|l| {
        l.starts_with("causeway_proxy_retries_total") || l.starts_with("causeway_proxy_ejections")
    }) {
        assert!(
            l.ends_with(" 0"),
            "stale pooled connections counted as failures: {l}"
        );
    }

    // The proxy closes connections idle past the MCI's idle-timeout (300 ms).
    let r = get(&c, p.http, "k.test", "/", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(keeper.accepted(), 1);
    let closed = eventually(
        "idle upstream connections closed",
        Duration::from_secs(5),
        || {
            let c = c.clone();
            async move {
                // The closer's connection was closed by its upstream; all must be gone.
                metric(&c, admin, "causeway_proxy_upstream_connections")
                    .await
                    .is_ok_and(|open| open == 0.0)
            }
        },
    )
    .await;
    if let Err(e) = closed {
        let open = metric(&c, admin, "causeway_proxy_upstream_connections").await?;
        anyhow::bail!("{e}: {open} still open");
    }
    let r = get(&c, p.http, "k.test", "/", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(
        keeper.accepted(),
        2,
        "a fresh connection after the idle close"
    );
    Ok(())
}

/// An h2 client multiplexes hundreds of streams, so the proxy needs as many upstream
/// connections at once. The pool keeps all of them for the next burst (up to the
/// backend's max-connections) instead of closing and reopening the surplus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_streams_keeps_its_upstream_connections() -> anyhow::Result<()> {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    const CONNS: usize = 3;
    const STREAMS: usize = 100;
    const BURST: usize = CONNS * STREAMS;
    let hub = Hub::start().await?;
    let up = Upstream::start([127, 0, 12, 3], None, Some(BURST), false).await?;
    hub.import("burst").await?;
    hub.export("burst", "east", &[(up.addr, true)]).await?;
    hub.mci(
        "burst",
        json!({"rules": [rule(Some("b.test"), "/", "Prefix", "burst")]}),
        json!({}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let admin = p.metrics.unwrap();
    let c = client();
    let mut h2 = Vec::new();
    for _ in 0..CONNS {
        let tcp = tokio::net::TcpStream::connect(p.http).await?;
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        h2.push(send);
    }
    // Every request waits at the upstream's gate, so no probe request: wait until the
    // route table holds the endpoint.
    eventually("route", Duration::from_secs(10), || async {
        metric(&c, admin, "causeway_proxy_table_endpoints")
            .await
            .is_ok_and(|n| n == 1.0)
    })
    .await?;

    for round in 0..2 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..BURST {
            let mut send = h2[i % CONNS].clone();
            tasks.spawn(async move {
                let req = http::Request::get(format!("http://b.test/{i}"))
                    .body(Empty::<bytes::Bytes>::new())?;
                let resp = send.send_request(req).await?;
                let status = resp.status();
                let body = resp.into_body().collect().await?.to_bytes();
                anyhow::Ok((status, body))
            });
        }
        let all = tokio::time::timeout(Duration::from_secs(30), tasks.join_all())
            .await
            .map_err(|_| anyhow::anyhow!("burst {round} did not finish in 30 s"))?;
        for r in all {
            let (status, body) = r?;
            assert_eq!(
                (status.as_u16(), &body[..]),
                (200, &b"ok"[..]),
                "burst {round}"
            );
        }
        assert_eq!(
            up.accepted(),
            BURST as u64,
            "after burst {round}: the second burst must reuse the first burst's connections"
        );
    }
    assert_eq!(
        metric(&c, admin, "causeway_proxy_upstream_connections").await?,
        BURST as f64
    );
    Ok(())
}

/// An upstream may answer an upload before it has read it. The connection is busy until
/// the upload ends, so it must not go back to the pool when the response ends: the
/// next request would wait on it behind a client that may never finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_still_receiving_an_upload_is_not_reused() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let up = Upstream::start([127, 0, 12, 4], None, None, true).await?;
    hub.import("early").await?;
    hub.export("early", "east", &[(up.addr, true)]).await?;
    hub.mci(
        "early",
        json!({"rules": [rule(Some("e.test"), "/", "Prefix", "early")]}),
        json!({"causeway.io/request-timeout": "1s"}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    answers(&c, p.http, ("e.test", "/"), 200, Duration::from_secs(10)).await?;

    // A streamed upload (over the 64 KiB buffered for retries) that stops half way.
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"PUT /upload HTTP/1.1\r\nHost: e.test\r\nContent-Length: 200000\r\n\r\n")
        .await?;
    s.write_all(&[b'x'; 100_000]).await?;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    let txt = String::from_utf8_lossy(&buf[..n]);
    assert!(
        txt.starts_with("HTTP/1.1 200") && txt.ends_with("early"),
        "{txt}"
    );

    // The early answer's connection is still receiving the upload: the next request
    // gets a connection of its own, at once.
    let t0 = std::time::Instant::now();
    let r = get(&c, p.http, "e.test", "/", &[]).await?;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"), "{}", r.body);
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "the request waited {:?} for a busy connection",
        t0.elapsed()
    );
    drop(s);
    Ok(())
}
