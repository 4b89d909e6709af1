//! HTTP/2 clients in front of HTTP/1.1 backends (plain requests go out on the raw
//! upstream pool the HTTP/1.1 engine uses): what the upstream receives, response
//! framing turned into HTTP/2 data (chunked decoded and its trailers as HTTP/2
//! trailers, close-delimited, 1xx skipped, 204 and HEAD without a body), keep-alive
//! reuse across streams and engines, a large response, a streamed upload, and
//! upstreams that break (502 before the head, a reset stream after it).

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::harness::*;
use crate::scripted::*;

pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// An h2c (prior knowledge) connection to the proxy.
pub async fn h2(addr: std::net::SocketAddr) -> anyhow::Result<SendRequest<Body>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(send)
}

fn empty() -> Body {
    Empty::new().map_err(|n| match n {}).boxed_unsync()
}

pub fn full(b: &'static [u8]) -> Body {
    Full::new(Bytes::from_static(b))
        .map_err(|n| match n {})
        .boxed_unsync()
}

/// Sends `method path` with `body` on `send`: status, headers and the whole body.
async fn call(
    send: &mut SendRequest<Body>,
    method: &str,
    path: &str,
    body: Body,
) -> anyhow::Result<(u16, http::HeaderMap, Bytes)> {
    let (status, headers, body, _) = call_trailed(send, method, path, body).await?;
    Ok((status, headers, body))
}

/// As [`call`], with the response's trailers (empty when it had none).
async fn call_trailed(
    send: &mut SendRequest<Body>,
    method: &str,
    path: &str,
    body: Body,
) -> anyhow::Result<(u16, http::HeaderMap, Bytes, http::HeaderMap)> {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://h2.test{path}"))
        .body(body)?;
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .context("no answer within 10 s")??;
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .context("no body within 10 s")??;
    let trailers = body.trailers().cloned().unwrap_or_default();
    Ok((
        parts.status.as_u16(),
        parts.headers,
        body.to_bytes(),
        trailers,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_on_http1_backends() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let up = site(&hub, [127, 0, 16, 1], "h2wire", "h2.test").await?;
    let p = proxy(&hub, None).await?;
    routed(&p, "h2.test").await?;
    let mut send = h2(p.http).await?;

    // What the upstream receives: an HTTP/1.1 request with Host and the forwarding
    // headers, no length for a GET; several streams, then an HTTP/1.1 request, on one
    // warm connection. (It is counted from the second stream on: the HTTP/1.1 engine
    // puts its connection back in the pool after the client has its response, so the
    // first stream may come before it.)
    call(&mut send, "GET", "/echo", empty()).await?;
    let before = up.accepted();
    for _ in 0..3 {
        let (status, _, body) = call(&mut send, "GET", "/echo?q=1", empty()).await?;
        let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
        assert_eq!(status, 200, "{seen}");
        assert!(seen.starts_with("get /echo?q=1 http/1.1\r\n"), "{seen}");
        for h in [
            "host: h2.test\r\n",
            "x-forwarded-for: 127.0.0.1\r\n",
            "x-forwarded-proto: http\r\n",
            "x-forwarded-host: h2.test\r\n",
            "x-request-id: ",
        ] {
            assert!(seen.contains(h), "{h} in {seen}");
        }
        assert!(!seen.contains("content-length"), "{seen}");
    }
    let r = get(&client(), p.http, "h2.test", "/", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(
        up.accepted(),
        before,
        "a new upstream connection per request"
    );

    // Streams in flight at once each take a connection; all are answered.
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let mut s = send.clone();
            tokio::spawn(async move { call(&mut s, "GET", "/delay", empty()).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await??.0, 200);
    }

    // A body at hand goes with its length.
    let (_, _, body) = call(&mut send, "POST", "/echo", full(b"hello")).await?;
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert!(seen.contains("content-length: 5\r\n"), "{seen}");
    assert!(seen.ends_with("\r\n\r\nhello"), "{seen}");

    // A streamed upload (no length, larger than the proxy buffers) arrives whole.
    let chunks =
        (0..10).map(|i| Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![b'a' + i; 10_000]))));
    let upload = StreamBody::new(futures::stream::iter(chunks)).boxed_unsync();
    let (status, _, body) = call(&mut send, "POST", "/echo", upload).await?;
    assert_eq!(status, 200);
    let seen = String::from_utf8_lossy(&body).to_ascii_lowercase();
    assert!(
        seen.contains("transfer-encoding: chunked\r\n"),
        "{seen:.300}"
    );
    for letter in b'a'..=b'j' {
        let n = body.iter().filter(|&&b| b == letter).count();
        assert!(n >= 10_000, "{} of {}", n, letter as char);
    }

    // Response framing, as HTTP/2 data.
    let (status, h, body, t) = call_trailed(&mut send, "GET", "/chunked", empty()).await?;
    assert_eq!((status, &body[..]), (200, &b"hello world"[..]));
    assert!(!h.contains_key("transfer-encoding"), "{h:?}");
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t["x-trailer"], "t");
    let (status, _, body) = call(&mut send, "GET", "/interim", empty()).await?;
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    let (status, _, body) = call(&mut send, "GET", "/nocontent", empty()).await?;
    assert_eq!((status, body.len()), (204, 0));
    let (status, h, body) = call(&mut send, "HEAD", "/echo", empty()).await?;
    assert_eq!((status, body.len()), (200, 0));
    assert!(h.contains_key("content-length"), "{h:?}");
    let (_, h, body) = call(&mut send, "GET", "/hop", empty()).await?;
    assert_eq!(&body[..], b"ok");
    assert!(
        h.contains_key("x-kept") && !h.contains_key("x-hop"),
        "{h:?}"
    );
    assert!(!h.contains_key("keep-alive"), "{h:?}");
    let (_, _, body) = call(&mut send, "GET", "/close", empty()).await?;
    assert_eq!(&body[..], b"until close");
    let (_, h, body) = call(&mut send, "GET", "/big", empty()).await?;
    assert_eq!(body.len(), BIG);
    assert!(body.iter().all(|&b| b == b'x'));
    assert_eq!(h["content-length"], BIG.to_string().as_str());
    // A head larger than the first read's buffer.
    let (status, h, body) = call(&mut send, "GET", "/bighead", empty()).await?;
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    assert_eq!(h["x-big"].len(), 10_000);

    // Trailers go on as HTTP/2 trailers, end-to-end ones only; a stream with none
    // ends with its data.
    for _ in 0..2 {
        let (status, h, body, t) = call_trailed(&mut send, "GET", "/trailers", empty()).await?;
        assert_eq!((status, &body[..]), (200, &b"hello world"[..]));
        // The announcement is end-to-end too (RFC 9110 §6.6.2).
        assert_eq!(h["trailer"], "x-checksum", "{h:?}");
        assert_eq!(t["x-checksum"], "abc");
        let other: Vec<_> = t.get_all("x-other").iter().collect();
        assert_eq!(other, ["1", "2"], "{t:?}");
        assert_eq!(t.len(), 3, "only the end-to-end trailers: {t:?}");
    }
    let (_, _, _, t) = call_trailed(&mut send, "GET", "/echo", empty()).await?;
    assert!(t.is_empty(), "{t:?}");
    // Trailers that come after the head, as the stream reads the body.
    let (status, _, body, t) = call_trailed(&mut send, "GET", "/trailers-late", empty()).await?;
    assert_eq!((status, &body[..]), (200, &b"hello"[..]));
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t["x-checksum"], "abc");
    // The same on hyper's client (a streamed upload goes there).
    let chunks = (0..2).map(|_| Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"up"))));
    let upload = StreamBody::new(futures::stream::iter(chunks)).boxed_unsync();
    let (status, _, body, t) = call_trailed(&mut send, "POST", "/trailers", upload).await?;
    assert_eq!((status, &body[..]), (200, &b"hello world"[..]));
    assert_eq!(t["x-checksum"], "abc");
    assert_eq!(t.len(), 3, "only the end-to-end trailers: {t:?}");

    // Upstreams that break: before the head (or with a body already invalid) the
    // stream gets a 502; after it, the stream is reset.
    for (method, path, why) in [
        ("POST", "/drop", "closed before the response head"),
        (
            "POST",
            "/badchunk",
            "invalid response body: invalid chunk size",
        ),
        (
            "GET",
            "/badtrailer",
            "invalid response body: unparsable trailers",
        ),
    ] {
        let (status, _, body) = call(&mut send, method, path, empty()).await?;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 502, "{path}: {text}");
        assert!(text.contains(why), "{path}: {text}");
    }
    let late = call(&mut send, "GET", "/badtrailer-late", empty()).await;
    assert!(
        late.is_err(),
        "trailers broken after the head reset the stream: {late:?}"
    );
    let short = call(&mut send, "GET", "/short", empty()).await;
    assert!(short.is_err(), "a body cut short ends cleanly: {short:?}");

    // The connection (and the pool) serve on.
    let (status, _, _) = call(&mut send, "GET", "/echo", empty()).await?;
    assert_eq!(status, 200);
    p.shutdown().await;
    Ok(())
}
