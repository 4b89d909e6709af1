//! The HTTP/1.1 engine on the wire: raw client bytes in, raw upstream bytes out and
//! back. What the upstream receives (request line and header case kept, hop-by-hop
//! headers gone, forwarding headers added), response framing (chunked passed on as
//! sent, close-delimited, 1xx skipped, 204 and HEAD without a body), pipelining,
//! a request sent a byte at a time, a broken upstream body, and connections that
//! switch to hyper mid-way (chunked upload, HTTP/1.0).

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;
use crate::scripted::*;

const CLOSE: &str = "GET /last HTTP/1.1\r\nHost: h1.test\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http1_engine_on_the_wire() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let up = site(&hub, [127, 0, 13, 1], "wire", "h1.test").await?;
    let p = proxy(&hub, None).await?;
    routed(&p, "h1.test").await?;

    // What the upstream receives; two pipelined requests in one write.
    let out = raw(
        p.http,
        format!(
            "GET /echo?q=1 HTTP/1.1\r\nHost: h1.test\r\nX-Mixed-Case: v\r\n\
             Connection: keep-alive, x-hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\n\
             TE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n\
             X-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\n\
             Proxy-Authorization: Basic eA==\r\n\r\n{CLOSE}"
        )
        .as_bytes(),
    )
    .await?;
    assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 2, "{out}");
    for want in [
        "GET /echo?q=1 HTTP/1.1\r\n",
        "Host: h1.test\r\n",
        "X-Mixed-Case: v\r\n",
        "x-forwarded-for: 10.0.0.1, 10.0.0.2, 127.0.0.1\r\n",
        "x-forwarded-proto: http\r\n",
        "x-forwarded-host: h1.test\r\n",
        "x-request-id: ",
        // No Date from the upstream: the proxy adds one (RFC 9110 section 6.6.1).
        "date: ",
        // The last request asked to close: so does its response.
        "connection: close\r\n",
    ] {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
    for gone in [
        "X-Hop",
        "Keep-Alive",
        "TE:",
        "Proxy-Authorization",
        "https",
        "evil",
        "keep-alive",
    ] {
        assert!(!out.contains(gone), "{gone:?} reached the upstream: {out}");
    }

    // A small body goes up with its request.
    let out = raw(
        p.http,
        format!("POST /echo HTTP/1.1\r\nHost: h1.test\r\nContent-Length: 5\r\n\r\nhello{CLOSE}")
            .as_bytes(),
    )
    .await?;
    assert!(out.contains("Content-Length: 5\r\n"), "{out}");
    assert!(out.contains("\r\n\r\nhello"), "{out}");
    assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 2, "{out}");

    // Chunked passes on as sent (extension and trailer too), and its end is found:
    // the next request on the connection is answered.
    let out = raw(
        p.http,
        format!("GET /chunked HTTP/1.1\r\nHost: h1.test\r\n\r\n{CLOSE}").as_bytes(),
    )
    .await?;
    assert!(
        out.contains("transfer-encoding: chunked\r\n")
            && out.contains("\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\nHTTP/1.1 200 OK"),
        "{out}"
    );

    // 1xx are not passed on; 204 and HEAD have no body; the next request follows.
    let out = raw(
        p.http,
        format!(
            "GET /interim HTTP/1.1\r\nHost: h1.test\r\n\r\n\
             GET /nocontent HTTP/1.1\r\nHost: h1.test\r\n\r\n\
             HEAD /echo HTTP/1.1\r\nHost: h1.test\r\n\r\n{CLOSE}"
        )
        .as_bytes(),
    )
    .await?;
    // (a status line: the echoed random x-request-id may hold the digits 103)
    assert!(!out.contains("HTTP/1.1 103"), "{out}");
    assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 3, "{out}");
    assert_eq!(count(&out, "HTTP/1.1 204 No Content\r\n"), 1, "{out}");
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(
        out.contains("\r\n\r\nokHTTP/1.1 204 No Content\r\n"),
        "{out}"
    );
    // HEAD: the upstream's Content-Length (of the echo it would send), no body.
    let head_resp = &out[out.find("HTTP/1.1 204").unwrap()..];
    let after_head = head_resp.split("\r\n\r\n").nth(2).unwrap_or("");
    assert!(after_head.starts_with("HTTP/1.1 200 OK"), "{out}");

    // Hop-by-hop response headers go, the rest stays.
    let out = raw(
        p.http,
        b"GET /hop HTTP/1.1\r\nHost: h1.test\r\nConnection: close\r\n\r\n",
    )
    .await?;
    assert!(out.contains("x-kept: 1\r\n"), "{out}");
    assert!(
        !out.contains("x-hop") && !out.contains("timeout=5"),
        "{out}"
    );

    // A close-delimited body: the client connection closes after it, whatever the
    // client asked.
    let out = raw(
        p.http,
        format!("GET /close HTTP/1.1\r\nHost: h1.test\r\n\r\n{CLOSE}").as_bytes(),
    )
    .await?;
    assert!(out.contains("connection: close\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nuntil close"), "{out}");

    // A request a byte at a time.
    let mut s = TcpStream::connect(p.http).await?;
    for b in b"GET /echo HTTP/1.1\r\nHost: h1.test\r\nConnection: close\r\n\r\n" {
        s.write_all(&[*b]).await?;
        s.flush().await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await??;
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 200 OK\r\n") && got.contains("GET /echo HTTP/1.1\r\n"),
        "{got}"
    );

    // A broken chunked body: seen before anything reached the client, 502; seen
    // later, the client gets the head and then a closed connection (its response is
    // incomplete). The upstream connection is not reused.
    let before = up.accepted();
    let out = raw(
        p.http,
        b"POST /badchunk HTTP/1.1\r\nHost: h1.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await?;
    assert!(out.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{out}");
    assert!(
        out.contains("invalid response body: invalid chunk size"),
        "{out}"
    );
    let out = raw(
        p.http,
        format!("GET /badchunk-late HTTP/1.1\r\nHost: h1.test\r\n\r\n{CLOSE}").as_bytes(),
    )
    .await?;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\n5\r\nhello\r\n"), "{out}");
    let out = raw(p.http, CLOSE.as_bytes()).await?;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(up.accepted() > before, "the broken connection was reused");

    // Kept-alive upstream connections are reused across client connections.
    let before = up.accepted();
    for _ in 0..5 {
        let out = raw(p.http, CLOSE.as_bytes()).await?;
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    }
    assert_eq!(
        up.accepted(),
        before,
        "a pooled upstream connection was not reused"
    );

    // No route: 404 from the engine, and the connection goes on (with a body to skip,
    // hyper answers, the same way).
    for req in [
        "GET /x HTTP/1.1\r\nHost: nope.test\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: nope.test\r\nContent-Length: 3\r\n\r\nabc",
    ] {
        let out = raw(p.http, format!("{req}{CLOSE}").as_bytes()).await?;
        assert!(out.starts_with("HTTP/1.1 404 Not Found\r\n"), "{out}");
        assert!(
            out.contains(
                "no MultiClusterIngress rule matches host \"nope.test\" and path \"/x\"\n"
            ),
            "{out}"
        );
        assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 1, "{out}");
    }

    // A client that goes away while its request is upstream takes the upstream
    // exchange with it: the proxy closes that connection at once, instead of holding
    // it (and a circuit slot) until the answer or the request timeout.
    let mut s = TcpStream::connect(p.http).await?;
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: h1.test\r\n\r\n")
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(s);
    eventually(
        "the upstream exchange is dropped",
        Duration::from_secs(2),
        || async { up.abandoned.load(Ordering::Relaxed) == 1 },
    )
    .await?;

    // Mid-connection hand-over to hyper: a chunked upload, then the rest.
    let out = raw(
        p.http,
        format!(
            "GET /echo HTTP/1.1\r\nHost: h1.test\r\n\r\n\
             POST /echo HTTP/1.1\r\nHost: h1.test\r\nTransfer-Encoding: chunked\r\n\r\n\
             3\r\nabc\r\n0\r\n\r\n{CLOSE}"
        )
        .as_bytes(),
    )
    .await?;
    assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 3, "{out}");
    assert!(out.contains("3\r\nabc\r\n0\r\n\r\n"), "{out}");

    // HTTP/1.0 goes to hyper too.
    let out = raw(p.http, b"GET /echo HTTP/1.0\r\nHost: h1.test\r\n\r\n").await?;
    assert!(out.starts_with("HTTP/1.0 200 OK\r\n"), "{out}");

    // Both Content-Length and Transfer-Encoding (a smuggling attempt) go to hyper:
    // chunked wins, the Content-Length is not forwarded, and the connection closes
    // after the response, so the bytes after the chunked body are never a request.
    let out = raw(
        p.http,
        format!(
            "POST /echo HTTP/1.1\r\nHost: h1.test\r\nContent-Length: 4\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{CLOSE}"
        )
        .as_bytes(),
    )
    .await?;
    assert_eq!(count(&out, "HTTP/1.1 200 OK\r\n"), 1, "{out}");
    assert!(
        out.contains("transfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
        "{out}"
    );
    assert!(
        !out.to_ascii_lowercase().contains("content-length: 4"),
        "{out}"
    );
    assert!(!out.contains("GET /last"), "{out}");
    p.shutdown().await;
    Ok(())
}

/// Edge cases where the engine must do what hyper's path does; each runs against both.
async fn edge_cases(p: &causeway_proxy::Running, engine: &str) -> anyhow::Result<()> {
    const LAST: &str = "GET /last HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n";
    // An answer the proxy makes itself, to HEAD: no body (the next response follows
    // the head directly).
    let out = raw(
        p.http,
        format!("HEAD /x HTTP/1.1\r\nHost: nope.test\r\n\r\n{LAST}").as_bytes(),
    )
    .await?;
    assert!(
        out.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "[{engine}] {out}"
    );
    let after = out.split_once("\r\n\r\n").map_or("", |x| x.1);
    assert!(after.starts_with("HTTP/1.1 200 OK\r\n"), "[{engine}] {out}");

    // `Connection: content-length` may not turn a body into a second upstream request
    // whose late answer another client would get.
    let smuggled = "GET /delay HTTP/1.1\r\nHost: edge.test\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";
    raw(
        p.http,
        format!(
            "POST /a HTTP/1.1\r\nHost: edge.test\r\nConnection: close, content-length\r\n\
             Content-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        )
        .as_bytes(),
    )
    .await?;
    let victim = raw(
        p.http,
        b"GET /victim HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n",
    )
    .await?;
    assert!(
        victim.contains("GET /victim HTTP/1.1\r\n"),
        "[{engine}] {victim}"
    );
    assert!(!victim.contains("6.6.6.6"), "[{engine}] {victim}");

    // Pipelined requests, then a half-close.
    let mut s = TcpStream::connect(p.http).await?;
    s.write_all(format!("GET /echo HTTP/1.1\r\nHost: edge.test\r\n\r\n{LAST}").as_bytes())
        .await?;
    s.shutdown().await?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .with_context(|| format!("[{engine}] pipelined + half-close: {got:?}"))??;
    let got = String::from_utf8_lossy(&got);
    // The first is answered. (The last is answered too when the close is seen while
    // the first is upstream; seen while the last is, it is abandoned, as a client that
    // went away: that depends on timing.)
    assert!(count(&got, "HTTP/1.1 200 OK\r\n") >= 1, "[{engine}] {got}");

    // The HTTP/2 preface after an HTTP/1.1 request is not a switch to HTTP/2.
    let mut s = TcpStream::connect(p.http).await?;
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: edge.test\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .with_context(|| format!("[{engine}] preface after HTTP/1.1"))??;
    assert!(!got.contains(&0), "[{engine}] an HTTP/2 frame: {got:?}");
    let got = String::from_utf8_lossy(&got);
    assert_eq!(count(&got, "HTTP/1.1 200 OK\r\n"), 1, "[{engine}] {got}");

    // A client's forwarding headers besides the three the proxy sets never reach the
    // backend (RFC 7239 §8.1: one that trusts `Forwarded` or `X-Real-IP` would take
    // the client's word for its address, scheme and host).
    let out = raw(
        p.http,
        b"GET /echo HTTP/1.1\r\nHost: edge.test\r\nForwarded: for=6.6.6.6;host=evil\r\n\
          X-Real-IP: 6.6.6.6\r\nX-Forwarded-Port: 1\r\nX-Forwarded-Prefix: /evil\r\n\
          Connection: close\r\n\r\n",
    )
    .await?;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "[{engine}] {out}");
    for gone in [
        "Forwarded:",
        "X-Real-IP",
        "X-Forwarded-Port",
        "X-Forwarded-Prefix",
        "6.6.6.6",
        "evil",
    ] {
        assert!(
            !out.contains(gone),
            "[{engine}] {gone:?} reached the backend: {out}"
        );
    }

    // A dot-segment hidden by a path parameter or a raw backslash is refused (a
    // backend that drops `;…` or reads `\` as `/` would climb out of the route).
    for path in ["/a/..;/echo", "/a/%2e%2e;x/echo", "/a/..\\echo"] {
        let out = raw(
            p.http,
            format!("GET {path} HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        assert!(out.starts_with("HTTP/1.1 400 "), "[{engine}] {path}: {out}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_and_hyper_agree_on_edge_cases() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let _up = site(&hub, [127, 0, 13, 2], "edge", "edge.test").await?;
    for own in [true, false] {
        let p = proxy_with(&hub, None, |c| c.limits.own_http1 = own).await?;
        routed(&p, "edge.test").await?;
        edge_cases(&p, if own { "engine" } else { "hyper" }).await?;
        p.shutdown().await;
    }
    Ok(())
}

/// `--max-header-bytes` holds for every head, also one read ahead whole with the
/// request before it: both engines answer it 431 (RFC 6585 §5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_over_the_limit_is_431_even_read_ahead_whole() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let _up = site(&hub, [127, 0, 13, 3], "limit", "limit.test").await?;
    let pad = "x".repeat(40_000);
    for own in [true, false] {
        let p = proxy_with(&hub, None, |c| {
            c.limits.own_http1 = own;
            c.limits.max_header_bytes = 8192;
        })
        .await?;
        routed(&p, "limit.test").await?;
        let out = raw(
            p.http,
            format!(
                "GET /echo HTTP/1.1\r\nHost: limit.test\r\n\r\n\
                 GET /echo HTTP/1.1\r\nHost: limit.test\r\nX-Pad: {pad}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\n"),
            "[own {own}] {out:.200}"
        );
        assert!(
            out.contains("HTTP/1.1 431 "),
            "[own {own}] {}",
            &out[out.len().saturating_sub(300)..]
        );
        assert!(
            !out.contains(&pad),
            "[own {own}] the padded request reached the backend"
        );
        p.shutdown().await;
    }
    Ok(())
}
