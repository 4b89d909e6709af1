//! Failure handling: upstream timeout (504), circuit breaking (503), every endpoint
//! down (502), slowloris, request bodies, an upstream silent mid-body (the read
//! timeout), active health checks and graceful drain.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;
use crate::scripted::{raw, routed, site};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_circuits_bodies_and_dead_upstreams() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let a = Pod::start([127, 0, 9, 1], "a").await?;
    let dead = Pod::start([127, 0, 9, 2], "dead").await?;
    dead.kill();
    for (svc, pod) in [("web", &a), ("dead", &dead)] {
        hub.import(svc).await?;
        hub.export(svc, "east", &[(pod.addr, true)]).await?;
    }
    hub.import("mixed").await?;
    hub.export("mixed", "east", &[(dead.addr, true), (a.addr, true)])
        .await?;
    hub.mci(
        "tight",
        json!({"rules": [rule(Some("t.test"), "/", "Prefix", "web")]}),
        json!({"causeway.io/request-timeout": "300ms", "causeway.io/max-requests": "1", "causeway.io/connect-timeout": "bogus"}),
    )
    .await?;
    hub.mci("plain", json!({"rules": [rule(Some("p.test"), "/", "Prefix", "web"), rule(Some("d.test"), "/", "Prefix", "dead"), rule(Some("m.test"), "/", "Prefix", "mixed")]}), json!({}))
        .await?;
    // The same behaviours on both request paths: the HTTP/1.1 engine, and hyper's
    // (which serves HTTP/2 clients, upgrades and streamed uploads).
    for own in [true, false] {
        errors_on(&hub, own)
            .await
            .with_context(|| format!("own_http1 = {own}"))?;
    }
    Ok(())
}

async fn errors_on(hub: &Hub, own: bool) -> anyhow::Result<()> {
    let p = proxy_with(hub, None, |c| {
        c.limits.header_read_timeout = Duration::from_secs(1);
        c.limits.own_http1 = own;
    })
    .await?;
    let c = client();
    eventually("routes", Duration::from_secs(10), || async {
        get(&c, p.http, "t.test", "/", &[])
            .await
            .is_ok_and(|r| r.status == 200)
            && get(&c, p.http, "p.test", "/", &[])
                .await
                .is_ok_and(|r| r.status == 200)
    })
    .await?;
    assert!(
        p.table()
            .warnings
            .iter()
            .any(|w| w.contains("connect-timeout")),
        "{:?}",
        p.table().warnings
    );

    // 504 after the MCI's request timeout. (The routes probe's last request may hold the
    // circuit's one place a moment after its response reached the client, until the
    // proxy's connection task ends it: on a busy machine, ask again.)
    let mut r = get(&c, p.http, "t.test", "/sleep/3000", &[]).await?;
    for _ in 0..20 {
        if !(r.status == 503 && r.body.contains("already in flight")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        r = get(&c, p.http, "t.test", "/sleep/3000", &[]).await?;
    }
    assert_eq!(r.status, 504, "{}", r.body);
    assert!(r.body.contains("did not answer within 300ms"), "{}", r.body);

    // Circuit: one request in flight (max-requests 1) → the next is refused.
    let slow = {
        let (c, addr) = (c.clone(), p.http);
        tokio::spawn(async move { get(&c, addr, "t.test", "/sleep/250", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(80)).await;
    let r = get(&c, p.http, "t.test", "/", &[]).await?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("circuit open"), "{}", r.body);
    assert_eq!(slow.await??.status, 200);

    // Every endpoint refuses connections: 502 with the reason.
    let r = get(&c, p.http, "d.test", "/", &[]).await?;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body.contains("failed"), "{}", r.body);

    // Bodies: a small PUT (buffered, retryable) and a large POST (streamed).
    let small = Bytes::from_static(b"small body");
    let r = send(
        &c,
        http::Method::PUT,
        p.http,
        "p.test",
        "/echo",
        &[],
        small.clone(),
    )
    .await?;
    assert_eq!(r.body.as_bytes(), &small[..]);
    let big = Bytes::from(vec![b'x'; 300 * 1024]);
    let r = send(
        &c,
        http::Method::POST,
        p.http,
        "p.test",
        "/echo",
        &[],
        big.clone(),
    )
    .await?;
    assert_eq!(r.body.len(), big.len());

    // Slowloris: a head that never completes is closed after the header-read timeout.
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: p.test\r\n").await?;
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    let txt = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || txt.starts_with("HTTP/1.1 408"), "{txt}");
    // An idle keep-alive connection is closed after the header-read timeout as well.
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: p.test\r\n\r\n")
        .await?;
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let idle = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    assert_eq!(idle, 0, "the idle connection was not closed");

    // A connection that sends nothing, or only part of the HTTP/2 preface, is closed
    // after the header-read timeout as well: choosing the protocol has a deadline.
    for start in [&b""[..], b"PRI * HTTP/2.0\r\n"] {
        let mut s = tokio::net::TcpStream::connect(p.http).await?;
        s.write_all(start).await?;
        let closed = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "a connection that sent {:?} stayed open: {closed:?}",
            String::from_utf8_lossy(start)
        );
    }

    // HTTP/2 connections with nothing in progress are closed after the same time
    // (hyper bounds only HTTP/1.1's idle time): one that made a request and went
    // quiet, and one that only sent the preface and its SETTINGS.
    let tcp = tokio::net::TcpStream::connect(p.http).await?;
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await?;
    let conn = tokio::spawn(conn);
    let req = http::Request::get("http://p.test/").body(http_body_util::Empty::<Bytes>::new())?;
    assert_eq!(h2.send_request(req).await?.status(), 200);
    tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .map_err(|_| anyhow::anyhow!("an idle HTTP/2 connection stayed open"))???;
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await?;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "an HTTP/2 connection with no request stayed open"
    );

    // A client that announces a small body and stalls gets 408 after the request
    // timeout (300 ms), and holds no circuit slot meanwhile (t.test allows one
    // request at a time).
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"PUT /echo HTTP/1.1\r\nHost: t.test\r\nContent-Length: 100\r\n\r\npartial")
        .await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = get(&c, p.http, "t.test", "/", &[]).await?;
    assert_eq!(
        r.status, 200,
        "a stalled upload held the circuit: {}",
        r.body
    );
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    let txt = String::from_utf8_lossy(&buf[..n]);
    assert!(txt.starts_with("HTTP/1.1 408"), "{txt}");
    // A large (streamed) upload that stalls is the client's delay too: 408, not 504
    // (which would count against the upstream).
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(b"PUT /echo HTTP/1.1\r\nHost: t.test\r\nContent-Length: 100000\r\n\r\n")
        .await?;
    s.write_all(&[b'x'; 1000]).await?;
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
    let txt = String::from_utf8_lossy(&buf[..n]);
    assert!(txt.starts_with("HTTP/1.1 408"), "{txt}");

    // A POST (not idempotent) whose endpoint refuses the connection goes to another
    // one: nothing reached the first.
    for i in 0..8 {
        let body = format!("post {i}");
        let r = send(
            &c,
            http::Method::POST,
            p.http,
            "m.test",
            "/echo",
            &[],
            Bytes::from(body.clone()),
        )
        .await?;
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, body.as_str()),
            "POST {i}"
        );
    }

    // Graceful shutdown: /readyz turns 503 while an in-flight request finishes.
    let inflight = {
        let (c, addr) = (c.clone(), p.http);
        tokio::spawn(async move { get(&c, addr, "p.test", "/sleep/1500", &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let admin = p.metrics.unwrap();
    let draining = tokio::spawn(p.shutdown());
    answers(&c, admin, ("x", "/readyz"), 503, Duration::from_secs(5)).await?;
    draining.await?;
    let r = inflight.await??;
    assert_eq!((r.status, r.body.as_str()), (200, "a"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_health_checks_take_endpoints_out_and_back() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let good = Pod::start([127, 0, 10, 1], "good").await?;
    let sick = Pod::start([127, 0, 10, 2], "sick").await?;
    hub.import("web").await?;
    hub.export("web", "east", &[(good.addr, true), (sick.addr, true)])
        .await?;
    hub.mci(
        "hc",
        json!({"rules": [rule(Some("hc.test"), "/", "Prefix", "web")]}),
        json!({"causeway.io/health-check-path": "/healthz", "causeway.io/health-check-interval": "200ms", "causeway.io/load-balancer": "round-robin"}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("both serve", Duration::from_secs(10), || async {
        spread(&c, p.http, "hc.test", "/", 10)
            .await
            .is_ok_and(|s| s.len() == 2)
    })
    .await?;
    sick.health.store(503, Ordering::Relaxed);
    eventually("sick out", Duration::from_secs(10), || async {
        spread(&c, p.http, "hc.test", "/", 10)
            .await
            .is_ok_and(|s| s.get("good") == Some(&10))
    })
    .await?;
    sick.health.store(200, Ordering::Relaxed);
    eventually("sick back", Duration::from_secs(10), || async {
        spread(&c, p.http, "hc.test", "/", 10)
            .await
            .is_ok_and(|s| s.contains_key("sick"))
    })
    .await?;
    p.shutdown().await;
    Ok(())
}

/// The read timeout is between reads, not for the whole body: an upstream that
/// trickles its body more often than the timeout, for longer than it in all, is
/// forwarded whole on both engines and to an HTTP/2 client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_upstream_is_not_cut_off_by_the_read_timeout() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    // (One byte every 100 ms for 1 s; the read timeout is 300 ms.)
    let _up = site(&hub, [127, 0, 71, 2], "trickle", "trickle.test").await?;
    for (engine, own) in [("engine", true), ("hyper", false)] {
        let p = proxy_with(&hub, None, |c| {
            c.limits.own_http1 = own;
            c.defaults.read_timeout = Duration::from_millis(300);
        })
        .await?;
        routed(&p, "trickle.test").await?;
        for path in ["/trickle", "/trickle-chunked"] {
            let started = tokio::time::Instant::now();
            let req =
                format!("GET {path} HTTP/1.1\r\nHost: trickle.test\r\nConnection: close\r\n\r\n");
            let out = raw(p.http, req.as_bytes()).await?;
            let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
            assert!(head.starts_with("HTTP/1.1 200"), "[{engine}] {path}: {out}");
            let body = if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
            {
                assert!(body.ends_with("0\r\n\r\n"), "[{engine}] {path}: {out}");
                body.split("\r\n").skip(1).step_by(2).collect::<String>()
            } else {
                body.to_string()
            };
            assert_eq!(body, "x".repeat(10), "[{engine}] {path}: {out}");
            assert!(
                started.elapsed() >= Duration::from_millis(900),
                "[{engine}] {path}: not trickled ({:?})",
                started.elapsed()
            );
        }
        // HTTP/2 (the raw pool to the HTTP/1.1 backend).
        let mut send = crate::h2::h2(p.http).await?;
        for path in ["/trickle", "/trickle-chunked"] {
            let req = http::Request::get(format!("http://trickle.test{path}"))
                .body(crate::h2::full(b""))?;
            let resp = send.send_request(req).await?;
            assert_eq!(resp.status(), 200, "[{engine}] h2 {path}");
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .with_context(|| format!("[{engine}] h2 {path}: the body was cut off"))?
                .to_bytes();
            assert_eq!(&body[..], "x".repeat(10).as_bytes(), "[{engine}] h2 {path}");
        }
        p.shutdown().await;
    }
    Ok(())
}

/// An upstream that sends part of a body and goes silent: the response is cut off at
/// the read timeout (the client connection closes, an HTTP/2 stream is reset) on both
/// engines and on the HTTP/2 clients' raw pool, and the request's in-flight mark and
/// circuit slot are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_silent_mid_body_is_cut_off_at_the_read_timeout() -> anyhow::Result<()> {
    use causeway_proxy::table::Target;
    let hub = Hub::start().await?;
    // (Silent for 5 s, then it closes: far longer than the read timeout.)
    let _up = site(&hub, [127, 0, 71, 1], "stall", "stall.test").await?;
    let idle = |p: &causeway_proxy::Running| match p.table().route("stall.test", "/") {
        Some(r) => match &r.target {
            Target::Backend(b) => {
                b.circuit.active() == 0 && b.balancer.endpoints().iter().all(|e| e.pending() == 0)
            }
            _ => false,
        },
        None => false,
    };
    let within = Duration::from_secs(3);
    for (engine, own) in [("engine", true), ("hyper", false)] {
        let p = proxy_with(&hub, None, |c| {
            c.limits.own_http1 = own;
            c.defaults.read_timeout = Duration::from_millis(300);
        })
        .await?;
        routed(&p, "stall.test").await?;
        for path in ["/stall", "/stall-chunked"] {
            let started = tokio::time::Instant::now();
            let req = format!("GET {path} HTTP/1.1\r\nHost: stall.test\r\n\r\n");
            let out = raw(p.http, req.as_bytes()).await?;
            assert!(
                out.starts_with("HTTP/1.1 200") && out.contains("ok"),
                "[{engine}] {path}: {out}"
            );
            assert!(
                started.elapsed() < within,
                "[{engine}] {path}: the connection stayed open {:?}",
                started.elapsed()
            );
            eventually("in-flight back to 0", within, || async { idle(&p) }).await?;
        }
        // HTTP/2 (an HTTP/2 client's request to an HTTP/1.1 backend: the raw pool).
        let mut send = crate::h2::h2(p.http).await?;
        for path in ["/stall", "/stall-chunked"] {
            let started = tokio::time::Instant::now();
            let req = http::Request::get(format!("http://stall.test{path}"))
                .body(crate::h2::full(b""))?;
            let resp = tokio::time::timeout(within, send.send_request(req))
                .await
                .context("no head")??;
            assert_eq!(resp.status(), 200, "[{engine}] h2 {path}");
            let body =
                tokio::time::timeout(within, http_body_util::BodyExt::collect(resp.into_body()))
                    .await
                    .with_context(|| format!("[{engine}] h2 {path}: the stream stayed open"))?;
            assert!(
                body.is_err(),
                "[{engine}] h2 {path}: the body ended cleanly"
            );
            assert!(started.elapsed() < within);
            eventually("in-flight back to 0", within, || async { idle(&p) }).await?;
        }
        p.shutdown().await;
    }
    Ok(())
}

/// A client that stops reading its response (its socket buffer full) is let go after
/// the read timeout (nginx's `send_timeout`): its request's circuit slot is freed
/// (max-requests 1: the next request is served), not held for as long as the client
/// stays connected. The same for an HTTP/2 client that keeps its stream's window shut
/// (its client library answers PINGs, so the connection looks alive): the connection
/// is closed after the send timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_frees_its_circuit_slot() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = Pod::start([127, 0, 9, 5], "big").await?;
    hub.import("big").await?;
    hub.export("big", "east", &[(pod.addr, true)]).await?;
    hub.mci(
        "stuck",
        json!({"rules": [rule(Some("s.test"), "/", "Prefix", "big")]}),
        json!({"causeway.io/max-requests": "1"}),
    )
    .await?;
    let p = proxy_with(&hub, None, |c| {
        c.limits.own_http1 = true;
        c.defaults.read_timeout = Duration::from_secs(8);
        c.limits.send_timeout = Duration::from_secs(8);
    })
    .await?;
    let c = client();
    answers(&c, p.http, ("s.test", "/"), 200, Duration::from_secs(10)).await?;
    // 16 MiB asked for, none of it read. (Its request may take a moment to reach the
    // backend on a busy box, and may itself be refused while the probe before it still
    // holds the slot: then it is asked again, on a new connection.)
    let mut tries = 0;
    let stuck = loop {
        tries += 1;
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.set_recv_buffer_size(4096)?;
        let mut stuck = sock.connect(p.http).await?;
        stuck
            .write_all(b"GET /bytes/16777216 HTTP/1.1\r\nHost: s.test\r\n\r\n")
            .await?;
        match answers(&c, p.http, ("s.test", "/"), 503, Duration::from_secs(6)).await {
            Ok(()) => break stuck,
            Err(e) if tries >= 3 => return Err(e),
            Err(_) => {}
        }
    };
    answers(&c, p.http, ("s.test", "/"), 200, Duration::from_secs(20)).await?;
    drop(stuck);

    // HTTP/2: the response's head is taken, its body never read, so the client sends
    // no WINDOW_UPDATE once the stream's first window is used up
    let mut h2 = crate::h2::h2(p.http).await?;
    let req = http::Request::get("http://s.test/bytes/16777216").body(crate::h2::full(b""))?;
    let shut = h2.send_request(req).await?;
    assert_eq!(shut.status(), 200);
    let asked = std::time::Instant::now();
    answers(&c, p.http, ("s.test", "/"), 503, Duration::from_secs(6)).await?;
    answers(&c, p.http, ("s.test", "/"), 200, Duration::from_secs(20)).await?;
    // not before the send timeout (8 s from when the window shut, just after the head
    // came): the client was given its time
    assert!(
        asked.elapsed() >= Duration::from_millis(7000),
        "{:?}",
        asked.elapsed()
    );
    // its connection was closed: the rest of the body never comes
    let rest = tokio::time::timeout(
        Duration::from_secs(5),
        http_body_util::BodyExt::collect(shut.into_body()),
    )
    .await
    .context("the h2 stream stayed open")?;
    assert!(rest.is_err(), "the h2 body ended cleanly");
    p.shutdown().await;
    Ok(())
}
