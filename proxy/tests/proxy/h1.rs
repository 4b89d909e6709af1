//! The HTTP/1.1 engine on the wire: raw client bytes in, raw upstream bytes out and
//! back. What the upstream receives (request line and header case kept, hop-by-hop
//! headers gone, forwarding headers added), response framing (chunked passed on as
//! sent, close-delimited, 1xx skipped, 204 and HEAD without a body), pipelining,
//! a request sent a byte at a time, a broken upstream body, and connections that
//! switch to hyper mid-way (chunked upload, HTTP/1.0).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::*;

/// An upstream on raw sockets that answers by path:
/// - `/chunked`: a chunked body with an extension and a trailer;
/// - `/close`: a body delimited by closing the connection;
/// - `/interim`: a 103 Early Hints, then 200;
/// - `/nocontent`: 204;
/// - `/badchunk`: a chunked body with an invalid chunk size (`/badchunk-late`: sent
///   50 ms after the first chunk);
/// - `/hop`: hop-by-hop response headers;
/// - `/slow`: answers after 3 s, unless the proxy closes the connection first;
/// - `/delay`: the echo, after 300 ms;
/// - anything else: 200 with the request exactly as received (head and body).
///
/// Request bodies framed by Content-Length or chunked are read.
struct Scripted {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    /// `/slow` requests whose connection the proxy closed before the answer.
    abandoned: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where the request at the start of `buf` ends, if it is all there.
fn request_end(buf: &[u8]) -> Option<usize> {
    let head = find(buf, b"\r\n\r\n")? + 4;
    let lower = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    if lower.contains("transfer-encoding: chunked") {
        return find(&buf[head..], b"0\r\n\r\n").map(|e| head + e + 5);
    }
    let len: usize = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (buf.len() >= head + len).then_some(head + len)
}

impl Scripted {
    async fn start(ip: [u8; 4]) -> anyhow::Result<Scripted> {
        let l = TcpListener::bind(SocketAddr::new(IpAddr::from(ip), POD_PORT)).await?;
        let addr = l.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let abandoned = Arc::new(AtomicU64::new(0));
        let n = accepted.clone();
        let gone = abandoned.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::Relaxed);
                let gone = gone.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                        while let Some(end) = request_end(&buf) {
                            let req: Vec<u8> = buf.drain(..end).collect();
                            let line = String::from_utf8_lossy(&req);
                            let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                            let resp: Vec<u8> = match path.as_str() {
                                "/chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\n".to_vec(),
                                "/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec(),
                                "/interim" => b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                                "/nocontent" => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
                                "/badchunk" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n".to_vec(),
                                "/hop" => b"HTTP/1.1 200 OK\r\nconnection: x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\nx-kept: 1\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                                _ => {
                                    let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", req.len()).into_bytes();
                                    r.extend_from_slice(&req);
                                    r
                                }
                            };
                            if path == "/delay" {
                                tokio::time::sleep(Duration::from_millis(300)).await;
                            }
                            if path == "/slow" {
                                let mut one = [0u8; 1];
                                tokio::select! {
                                    () = tokio::time::sleep(Duration::from_secs(3)) => {}
                                    r = s.read(&mut one) => {
                                        if matches!(r, Ok(0) | Err(_)) {
                                            gone.fetch_add(1, Ordering::Relaxed);
                                        }
                                        return;
                                    }
                                }
                            }
                            if path == "/badchunk-late" {
                                let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
                                let _ = s.write_all(head).await;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                let _ = s.write_all(b"zz\r\n").await;
                                return;
                            }
                            if s.write_all(&resp).await.is_err() {
                                return;
                            }
                            if path == "/close" || path == "/badchunk" {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Ok(Scripted {
            addr,
            accepted,
            abandoned,
            task,
        })
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `bytes` on a new connection and reads until the proxy closes it.
async fn raw(proxy: SocketAddr, bytes: &[u8]) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(bytes).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .context("the proxy did not close the connection")??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A scripted upstream on `ip` behind Service `svc`, routed from `host` by an MCI.
async fn site(hub: &Hub, ip: [u8; 4], svc: &str, host: &str) -> anyhow::Result<Scripted> {
    let up = Scripted::start(ip).await?;
    hub.import(svc).await?;
    hub.export(svc, "east", &[(up.addr, true)]).await?;
    hub.mci(
        svc,
        json!({"rules": [rule(Some(host), "/", "Prefix", svc)]}),
        json!({}),
    )
    .await?;
    Ok(up)
}

/// Waits until the proxy routes `host` to a live upstream.
async fn routed(p: &causeway_proxy::Running, host: &str) -> anyhow::Result<()> {
    let c = client();
    eventually("routes", Duration::from_secs(10), || async {
        get(&c, p.http, host, "/", &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

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
    assert!(!out.contains("103"), "{out}");
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
