//! The HTTP/1.1 engine: plain requests are parsed (httparse), routed, forwarded and
//! answered on the connection's own task, with the upstream socket read and written
//! directly, no per-request task, channel or header map.
//!
//! hyper serves a request that takes any less common path, and with it the rest of
//! its connection (the bytes read so far are replayed to it first):
//! - not HTTP/1.1, or a request target that is not origin-form (`/path`);
//! - not exactly one valid `Host` (hyper's path answers 400, [`crate::target`]), a
//!   `Transfer-Encoding` (chunked uploads), more than one
//!   `Content-Length` or one above `MAX_REPLAY` (64 KiB), `Expect`, `Upgrade` (WebSocket);
//! - more than [`MAX_HEADERS`] headers, a head hyper would reject (hyper answers 400 or
//!   431), and the HTTP/2 preface (h2c prior knowledge);
//! - an HTTP→HTTPS redirect (308), and a request with a body that gets no route (404)
//!   or an unresolved backend (503).
//!
//! The path is normalised here as on hyper's path ([`crate::target::normalize_path`]:
//! a 400 above the root, the normalised path routed and forwarded), and header names
//! with `_` are dropped unless the MCI allows them.
//!
//! What stays here is the request-smuggling-free subset: a body, if any, is framed by
//! one `Content-Length` and read whole before anything goes upstream. Upstream
//! responses are framed per RFC 9112 §6.3 (no body for HEAD, 1xx, 204 and 304;
//! chunked, checked chunk by chunk and passed on as sent; `Content-Length`; or until
//! the upstream closes, when the client connection closes too). An upstream connection
//! goes back to its endpoint's pool only after a response that ended exactly where its
//! framing said.
//!
//! Everything the hyper path does around a request happens here the same way, in the
//! phases of [`crate::pipeline`] both paths call: routing, the circuit, the retry
//! budget, retries on another endpoint (after a refused connect for any method, after
//! any failure for idempotent ones), outlier ejection, timeouts, and the same metrics
//! and error answers. This engine only moves bytes (and writes the forwarding
//! headers into them).

mod answer;
mod deadline;
mod wire;

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::{HeaderName, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::headers::cookie_in;
use crate::matching::normalize_host;
use crate::pipeline::account::head_arrived;
use crate::pipeline::{
    self, Attempts, Conn, Head, Limits, Pick, Proxy, Refusal, Routed, admit, body_timeout,
    hash_key, idempotent,
};
use crate::target::normalize_path;
use crate::upstream::{self, Raw};
use crate::wake::Stop;

use answer::{To, answer, error_response};
use deadline::Deadline;
pub(crate) use wire::H2_PREFACE;
pub use wire::MAX_HEADERS;
#[cfg(test)]
use wire::parse_response;
use wire::{ClientHead, Parse, ReqHead, is_token, parse_request, write_request};

pub use crate::upstream::chunked::Chunked;
use crate::upstream::raw::{Framing, READ_CHUNK, exchange};
/// Most pipelined bytes read ahead while a request is in flight.
const MAX_READ_AHEAD: usize = 64 * 1024;

/// How a connection left the engine.
#[derive(Debug)]
pub enum End {
    /// Closed (by the client, after an error, on shutdown, or after an idle period).
    Closed,
    /// hyper serves the rest of it, starting with the bytes in the buffer.
    Handoff,
}

/// Why relaying a response body stopped early.
enum Broken {
    /// The upstream broke framing before anything reached the client (answered 502).
    Invalid(&'static str),
    /// The client went away.
    Client,
    /// The upstream failed or broke framing (the client connection is closed: its
    /// response is incomplete).
    Upstream,
}

async fn write<T: AsyncWrite + Unpin>(io: &mut T, bytes: &[u8]) -> Result<(), Broken> {
    io.write_all(bytes).await.map_err(|_| Broken::Client)?;
    io.flush().await.map_err(|_| Broken::Client)
}

/// [`write`] within `limit` (timed on `timer`, a clock read; the timer wheel is
/// touched only when it fires): a client that takes none of a response for that long
/// (it stopped reading: its socket buffer is full) is gone, and its request's upstream
/// connection and circuit slot are freed, not held for as long as it stays connected
/// (nginx's `send_timeout`).
async fn write_within<T: AsyncWrite + Unpin>(
    io: &mut T,
    bytes: &[u8],
    (timer, limit): (&mut Deadline, Duration),
) -> Result<(), Broken> {
    let mut written = std::pin::pin!(write(io, bytes));
    // the usual case, a socket that takes it all at once, reads no clock
    let first = {
        let mut once = std::task::Context::from_waker(std::task::Waker::noop());
        written.as_mut().poll(&mut once)
    };
    if let std::task::Poll::Ready(r) = first {
        return r;
    }
    timer.set(Instant::now() + limit);
    tokio::select! {
        biased;
        r = &mut written => r,
        () = timer.expired() => {
            tracing::debug!(?limit, "the client took none of its response for the read timeout");
            Err(Broken::Client)
        }
    }
}

/// Sends the client its response head (in `out`) and the body, as the upstream frames
/// it. `ubuf` holds what was read after the head. An upstream that sends nothing for
/// `read_timeout` (timed on `timer`) breaks the response. Returns whether the upstream
/// connection ended the response exactly where its framing said (it can be reused).
async fn relay<T: AsyncWrite + Unpin>(
    io: &mut T,
    up: &mut Raw,
    ubuf: &mut BytesMut,
    out: &mut Vec<u8>,
    framing: Framing,
    (timer, read_timeout): (&mut Deadline, Duration),
) -> Result<bool, Broken> {
    let mut chunked = Chunked::default();
    // How much of what is buffered belongs to this response, and whether it ended.
    let mut take = |data: &[u8], left: &mut u64| -> Result<(usize, bool), Broken> {
        match framing {
            Framing::Empty => Ok((0, true)),
            Framing::Length(_) => {
                let n = (*left).min(data.len() as u64);
                *left -= n;
                Ok((n as usize, *left == 0))
            }
            Framing::Chunked => match chunked.feed(data) {
                Ok(Some(n)) => Ok((n, true)),
                Ok(None) => Ok((data.len(), false)),
                Err(why) => Err(Broken::Invalid(why)),
            },
            Framing::Close => Ok((data.len(), false)),
        }
    };
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    // Nothing has reached the client yet: a framing error here is answered 502.
    let (n, mut done) = take(ubuf, &mut left)?;
    let mut clean = ubuf.len() == n;
    out.extend_from_slice(&ubuf[..n]);
    write_within(io, out, (timer, read_timeout)).await?;
    while !done {
        ubuf.clear();
        ubuf.reserve(READ_CHUNK);
        // (A clock read per read; the timer wheel is touched only when it fires.)
        timer.set(Instant::now() + read_timeout);
        let read = tokio::select! {
            biased;
            r = up.stream.read_buf(ubuf) => r,
            () = timer.expired() => {
                tracing::debug!(?read_timeout, "the upstream sent nothing for the read timeout mid-body");
                return Err(Broken::Upstream);
            }
        };
        match read {
            Ok(0) if framing == Framing::Close => done = true,
            Ok(0) | Err(_) => return Err(Broken::Upstream),
            Ok(_) => {
                let (n, end) = take(ubuf, &mut left).map_err(|e| {
                    if let Broken::Invalid(why) = e {
                        tracing::debug!(why, "upstream body is malformed");
                    }
                    Broken::Upstream
                })?;
                done = end;
                clean &= ubuf.len() == n;
                write_within(io, &ubuf[..n], (timer, read_timeout)).await?;
            }
        }
    }
    Ok(clean && framing != Framing::Close)
}

/// What became of one request.
enum Served {
    /// Answered; the connection can take the next request.
    KeepAlive,
    /// Answered (or not), and the connection must close.
    Close,
}

/// Serves requests on `io` until the connection closes or a request needs hyper.
/// `buf` is the connection's read buffer (on [`End::Handoff`] it holds the bytes hyper
/// must see first).
pub async fn serve<T>(
    io: &mut T,
    buf: &mut BytesMut,
    proxy: &Proxy,
    conn: &Conn,
    limits: &Limits,
    stop: &CancellationToken,
) -> End
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = ReqHead::default();
    let now = Instant::now();
    let mut bufs = Bufs {
        out: Vec::with_capacity(4096),
        req: Vec::with_capacity(4096),
        ubuf: BytesMut::new(),
        idle: Deadline::new(now + limits.header_read_timeout),
        request: Deadline::new(now),
        eof: false,
    };
    let mut served = false;
    // One registration with the token for the connection's life; then a flag read.
    let mut stop = Stop::new(stop);
    loop {
        if stop.is_cancelled() {
            return End::Closed;
        }
        // The head, within the header-read timeout (which also bounds keep-alive idle).
        bufs.idle.set(Instant::now() + limits.header_read_timeout);
        loop {
            if !buf.is_empty() {
                match parse_request(buf, &mut head) {
                    // (a whole head read ahead with an earlier one may be over the
                    // limit too: hyper answers it 431)
                    Parse::Fast if head.len <= limits.max_header_bytes => break,
                    Parse::Partial if buf.len() < limits.max_header_bytes => {}
                    // The HTTP/2 preface after HTTP/1.1 requests is not a switch to
                    // HTTP/2 (hyper's protocol choice would take it as one): close,
                    // as hyper's HTTP/1.1 server does.
                    Parse::Slow if served && buf.starts_with(&H2_PREFACE[..16]) => {
                        return End::Closed;
                    }
                    // Slow, or a head over the size limit (hyper answers 431).
                    _ => return End::Handoff,
                }
            }
            if bufs.eof {
                return End::Closed;
            }
            buf.reserve(READ_CHUNK.min(limits.max_header_bytes.max(4096)));
            tokio::select! {
                // The read first: once it is ready (the usual wake-up), the timer and
                // the token are not polled again. A client that keeps sending fills
                // the head's size limit; one that pauses meets the timer.
                biased;
                r = io.read_buf(buf) => match r {
                    Ok(0) | Err(_) => return End::Closed,
                    Ok(_) => {}
                },
                () = bufs.idle.expired() => {
                    tracing::debug!(remote = %conn.remote, "no request head within the header-read timeout");
                    // (A TLS client gets its close_notify.)
                    let _ = io.shutdown().await;
                    return End::Closed;
                }
                () = &mut stop => return End::Closed,
            }
        }
        match serve_one(io, buf, &head, proxy, conn, &mut bufs, &stop).await {
            Ok(Served::KeepAlive) => served = true,
            Ok(Served::Close) => {
                let _ = io.shutdown().await;
                return End::Closed;
            }
            Err(Handoff) => return End::Handoff,
        }
    }
}

/// The request needs hyper.
struct Handoff;

/// A connection's buffers and timers, reused by each of its requests.
struct Bufs {
    /// The client's response head (and the start of its body), or an error answer.
    out: Vec<u8>,
    /// The upstream request.
    req: Vec<u8>,
    /// Bytes read from the upstream.
    ubuf: BytesMut,
    /// The header-read timeout.
    idle: Deadline,
    /// The request timeout (and, once the response head is in, the read timeout
    /// between the body's reads).
    request: Deadline,
    /// The client has half-closed after pipelining: what is buffered is served, no
    /// more is read.
    eof: bool,
}

/// A request head parsed in the connection's buffer, as the pipeline reads it.
struct InBuf<'a> {
    buf: &'a [u8],
    head: &'a ReqHead,
}

impl Head for InBuf<'_> {
    #[inline]
    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        let (_, v) = self
            .head
            .headers
            .iter()
            .find(|(n, _)| self.buf[n.clone()].eq_ignore_ascii_case(name))?;
        Some(&self.buf[v.clone()])
    }

    #[inline]
    fn cookie(&self, name: &str) -> Option<&str> {
        cookie_in(
            self.head
                .headers
                .iter()
                .filter(|(n, _)| is_token(&self.buf[n.clone()], "cookie"))
                .map(|(_, v)| &self.buf[v.clone()]),
            name,
        )
    }
}

/// Serves the request whose head is parsed in `head`.
#[allow(clippy::too_many_arguments)]
async fn serve_one<T>(
    io: &mut T,
    buf: &mut BytesMut,
    head: &ReqHead,
    proxy: &Proxy,
    conn: &Conn,
    bufs: &mut Bufs,
    stop: &Stop<'_>,
) -> Result<Served, Handoff>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let table = proxy.table.load_full();
    let head_request = &buf[head.method.clone()] == b"HEAD";
    let to = To {
        close: head.close,
        head: head_request,
    };
    // Routed, or answered here (400, 404, 503) when the request has no body to skip; a
    // redirect, or such an answer to a request with a body, is left to hyper.
    // The normalised target (path and query), when the path had dot-segments.
    let mut normalised: Option<String> = None;
    let routed = 'routed: {
        let host = std::str::from_utf8(&buf[head.host.clone()]).map_err(|_| Handoff)?;
        let target = &buf[head.target.clone()];
        let end = target
            .iter()
            .position(|&c| c == b'?')
            .unwrap_or(target.len());
        let target = std::str::from_utf8(target).map_err(|_| Handoff)?;
        let (path, query) = target.split_at(end);
        let path = match normalize_path(path) {
            Ok(p) => p,
            Err(why) => {
                let why = Refusal::new(StatusCode::BAD_REQUEST, "bad_request", why.to_string());
                break 'routed Routed::Refused(why);
            }
        };
        if let Cow::Owned(p) = &path {
            normalised = Some(format!("{p}{query}"));
        }
        pipeline::route(&table, &normalize_host(host), &path, conn)
    };
    let b = match routed {
        // HTTP/2 backends are spoken to on hyper's path.
        Routed::Backend(b) if !b.protocol.is_h2() => b,
        Routed::Backend(_) => return Err(Handoff),
        // HTTPRoute rules read the whole request: hyper's path decides them.
        Routed::Redirect | Routed::Gateway(_) => return Err(Handoff),
        Routed::Refused(_) if head.body > 0 => return Err(Handoff),
        Routed::Refused(why) => {
            buf.advance(head.len);
            // After a 400 the connection closes (as hyper's path and nginx do).
            let to = To {
                close: to.close || why.status == StatusCode::BAD_REQUEST,
                ..to
            };
            return answer(io, proxy, &mut bufs.out, why, to).await;
        }
    };
    let limits = &b.tuning.limits;
    // The body, before taking a circuit slot and within the request timeout: a client
    // that announces a body and stalls holds neither.
    let total = head.len + head.body;
    if buf.len() < total {
        bufs.request.set(Instant::now() + limits.request_timeout);
        while buf.len() < total {
            buf.reserve(total - buf.len());
            let read = tokio::select! {
                r = io.read_buf(buf) => Some(r),
                () = bufs.request.expired() => None,
            };
            match read {
                Some(Ok(0)) | Some(Err(_)) => return Ok(Served::Close),
                Some(Ok(_)) => {}
                None => {
                    let to = To { close: true, ..to };
                    error_response(
                        proxy,
                        &mut bufs.out,
                        body_timeout(limits.request_timeout),
                        to,
                    );
                    let _ = write(io, &bufs.out).await;
                    return Ok(Served::Close);
                }
            }
        }
    }
    let idem = idempotent(&buf[head.method.clone()]);
    let key = hash_key(b.tuning.hash_on.as_ref(), &InBuf { buf, head });
    let underscores = b.tuning.underscores_in_headers;
    write_request(
        buf,
        head,
        conn,
        normalised.as_deref(),
        underscores,
        &mut bufs.req,
    );
    buf.advance(total);
    let permit = match admit(&b).await {
        Ok(p) => p,
        Err(why) => return answer(io, proxy, &mut bufs.out, why, to).await,
    };
    let settings = upstream::Settings {
        connect_timeout: limits.connect_timeout,
        idle_timeout: limits.idle_timeout,
        max_idle: limits.max_connections as usize,
    };
    // The whole body is at hand: any attempt can send it.
    let mut attempts = Attempts::new(proxy, &b, key, true);
    loop {
        let Pick {
            ep,
            mut inflight,
            at,
            now,
        } = match attempts.pick() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(why) => return answer(io, proxy, &mut bufs.out, why, to).await,
        };
        let close = to.close || stop.is_cancelled();
        // Per attempt, as on the hyper path. The client is watched meanwhile: if it
        // goes away, so does the upstream exchange (the upstream connection closes,
        // as nginx and hyper do). Bytes it pipelines are kept for later.
        bufs.request.set(at + limits.request_timeout);
        let res = {
            // A whole read chunk for the head (and the start of the body).
            bufs.ubuf.clear();
            bufs.ubuf.reserve(READ_CHUNK);
            let mut sink = ClientHead {
                out: &mut bufs.out,
                close,
            };
            let ex = exchange(
                &ep,
                now,
                &bufs.req,
                idem,
                head_request,
                settings,
                &proxy.metrics,
                &mut bufs.ubuf,
                &mut sink,
            );
            tokio::pin!(ex);
            loop {
                tokio::select! {
                    biased;
                    r = &mut ex => break Some(r),
                    () = bufs.request.expired() => break None,
                    r = io.read_buf(buf), if !bufs.eof && buf.len() < MAX_READ_AHEAD => match r {
                        Ok(0) | Err(_) if buf.is_empty() => {
                            tracing::debug!(remote = %conn.remote, backend = %b.name, "client went away before the response");
                            return Ok(Served::Close);
                        }
                        // A half-close after pipelined requests: they are answered,
                        // then the connection closes (as hyper does).
                        Ok(0) | Err(_) => bufs.eof = true,
                        Ok(_) => {}
                    },
                }
            }
        };
        match res {
            None => {
                let why = proxy.timed_out(&b, &ep);
                return answer(io, proxy, &mut bufs.out, why, to).await;
            }
            Some(Err(e)) => attempts.failed(&ep, &e, idem, true),
            Some(Ok((mut up, resp))) => {
                head_arrived(&b, &mut inflight);
                bufs.ubuf.advance(resp.len);
                let r = relay(
                    io,
                    &mut up,
                    &mut bufs.ubuf,
                    &mut bufs.out,
                    resp.framing,
                    (&mut bufs.request, limits.read_timeout),
                )
                .await;
                drop(inflight);
                // Counted once: as the 502 the client got when the body was invalid
                // before anything reached it, else as the upstream's status.
                if let Err(Broken::Invalid(why)) = r {
                    let msg = proxy.failed(&b, &ep, &format!("invalid response body: {why}"));
                    let why = Refusal::new(StatusCode::BAD_GATEWAY, "upstream_failed", msg);
                    return answer(io, proxy, &mut bufs.out, why, to).await;
                }
                proxy.answered(&b, &ep, resp.status);
                drop(permit);
                return match r {
                    Ok(reusable) => {
                        if reusable && resp.reusable {
                            ep.pool.put_raw(up, settings);
                        }
                        Ok(if close || resp.framing == Framing::Close {
                            Served::Close
                        } else {
                            Served::KeepAlive
                        })
                    }
                    Err(_) => Ok(Served::Close),
                };
            }
        }
    }
    let why = attempts.exhausted();
    answer(io, proxy, &mut bufs.out, why, to).await
}

#[cfg(test)]
#[path = "h1/tests.rs"]
mod tests;
