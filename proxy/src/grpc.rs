//! gRPC on the hyper path ([`crate::forward`]): a request is gRPC when its content type
//! is `application/grpc` (or `application/grpc+<codec>`). For such a request:
//!
//! - the answers the proxy makes itself (no route, no endpoints, upstream failed,
//!   timeouts, circuit open, bad requests) are gRPC answers: HTTP 200, trailers-only,
//!   with `grpc-status` and `grpc-message` ([`answer`]); gRPC clients read no HTTP
//!   status text;
//! - `grpc-timeout` is the call's deadline ([`timeout`], at most [`MAX_DEADLINE`]): it
//!   replaces the route's request timeout for the wait for the response head (a wait
//!   past the request timeout is not held against the endpoint: gRPC servers hold a
//!   stream's head until its first message), and the read timeout
//!   while the response streams (a quiet watch with a long deadline is not cut); each
//!   attempt carries what is left of it upstream ([`encode_timeout`]). A deadline that
//!   passes before the response head is `DEADLINE_EXCEEDED` from the proxy, and one that
//!   passes while the response streams ends it: with `DEADLINE_EXCEEDED` trailers for
//!   an HTTP/2 client ([`Ending`]), as an error (the connection aborted) for an HTTP/1.1
//!   one, whose trailers hyper may not send;
//! - a response that fails once started (the upstream gone mid-stream, the read
//!   timeout) ends for an HTTP/2 client with gRPC trailers too, `UNAVAILABLE` or
//!   `DEADLINE_EXCEEDED`, not a stream reset gRPC clients read as `INTERNAL`
//!   ([`Ending`]); for an HTTP/1.1 client the connection is aborted, never ended as if
//!   the response were whole;
//! - a trailers-only answer counts, for the endpoint's health, as the HTTP status its
//!   `grpc-status` stands for ([`health_status`]): a pod failing every call at once is
//!   ejected, not favoured by the balancer for its speed;
//! - the request body is recorded as it streams upstream, up to
//!   [`MAX_REPLAY`](crate::pipeline::MAX_REPLAY) ([`Upload`]). With
//!   `causeway.io/grpc-retry-on`, when the upstream answers trailers-only with one of
//!   the listed codes and the client's body has ended (a unary or server-streaming
//!   call: at once, or within [`FINISH_WAIT`]), the call goes to another endpoint with
//!   the recorded body; so does a call whose HTTP/2 stream the upstream did not process
//!   (`REFUSED_STREAM`, above a `GOAWAY`), annotation or not. A body larger than that,
//!   with trailers, or still coming (client streaming, bidi: the client waits for
//!   answers) is never replayed: the client gets the upstream's answer.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

use crate::upstream::ReadTimedOut;
use crate::upstream::raw::BoxError;

/// `grpc-status` codes the proxy answers with.
pub mod code {
    /// The deadline passed.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// Too many requests for the backend's limits.
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// No route for the method.
    pub const UNIMPLEMENTED: u32 = 12;
    /// A bad request.
    pub const INTERNAL: u32 = 13;
    /// No endpoint could take the call.
    pub const UNAVAILABLE: u32 = 14;
}

/// How long a call to retry waits for the rest of its request body (the upstream may
/// answer before it has all arrived).
pub const FINISH_WAIT: Duration = Duration::from_millis(100);

/// Whether a request with these headers is a gRPC call (`application/grpc`,
/// `application/grpc+proto`...; not gRPC-Web, which is another protocol).
pub fn is_grpc(h: &HeaderMap) -> bool {
    h.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16
            && v[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(v.get(16), None | Some(b'+' | b';'))
    })
}

/// Whether the client sent `TE: trailers` (a hop-by-hop header, which HTTP/2 backends
/// may need to see again).
pub fn wants_trailers(h: &HeaderMap) -> bool {
    h.get_all(http::header::TE).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
    })
}

/// The longest deadline a call gets ([`timeout`] caps `grpc-timeout` at it): a client
/// cannot lift the proxy's bounds on the wait for the response head and on a silent
/// stream (which its deadline replaces) by asking for `99999999H`.
pub const MAX_DEADLINE: Duration = Duration::from_secs(3600);

/// The call's `grpc-timeout` (`<1–8 digits><H|M|S|m|u|n>`), at most [`MAX_DEADLINE`];
/// None when absent or malformed (then the route's timeout alone applies).
pub fn timeout(h: &HeaderMap) -> Option<Duration> {
    let v = h.get("grpc-timeout")?.as_bytes();
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let t = match unit {
        b'H' => Duration::from_secs(n.saturating_mul(3600)),
        b'M' => Duration::from_secs(n.saturating_mul(60)),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    };
    Some(t.min(MAX_DEADLINE))
}

/// The `grpc-timeout` header.
pub const TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// `left` as a `grpc-timeout` value: whole milliseconds (rounded down: the upstream's
/// deadline is not later than the proxy's), microseconds under a millisecond,
/// nanoseconds under a microsecond; a coarser unit when the milliseconds take more
/// than the 8 digits the gRPC spec allows.
pub fn encode_timeout(left: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let (n, unit) = if left < Duration::from_micros(1) {
        (left.as_nanos(), 'n')
    } else if left < Duration::from_millis(1) {
        (left.as_micros(), 'u')
    } else if left.as_millis() <= MAX {
        (left.as_millis(), 'm')
    } else if u128::from(left.as_secs()) <= MAX {
        (u128::from(left.as_secs()), 'S')
    } else if u128::from(left.as_secs() / 60) <= MAX {
        (u128::from(left.as_secs() / 60), 'M')
    } else {
        (u128::from(left.as_secs() / 3600).min(MAX), 'H')
    };
    HeaderValue::try_from(format!("{n}{unit}")).unwrap_or(HeaderValue::from_static("0n"))
}

/// The status a response head from the upstream counts as for the endpoint's health
/// (outlier ejection, per-cluster counts): for a trailers-only gRPC answer, the HTTP
/// status its `grpc-status` stands for, as Envoy maps them (`UNAVAILABLE` 503;
/// `INTERNAL`, `UNKNOWN`, `DATA_LOSS` 500; `DEADLINE_EXCEEDED` 504); any other code is
/// the application's answer (a success). `DEADLINE_EXCEEDED` to a call that carried a
/// `grpc-timeout` (`deadline`) is the client's budget running out, not the pod failing:
/// the pod's copy of the deadline, rounded down, fires before the proxy's.
pub fn health_status(status: StatusCode, code: Option<u32>, deadline: bool) -> u16 {
    match code {
        Some(code::UNAVAILABLE) => 503,
        Some(code::INTERNAL | 2 | 15) => 500,
        Some(code::DEADLINE_EXCEEDED) if !deadline => 504,
        _ => status.as_u16(),
    }
}

/// The `grpc-status` of a response head (a trailers-only answer), if any.
pub fn status(h: &HeaderMap) -> Option<u32> {
    std::str::from_utf8(h.get("grpc-status")?.as_bytes())
        .ok()?
        .parse()
        .ok()
}

/// Whether `code` is in the retry set `on` (bit `n` for code `n`).
pub fn retried(on: u32, code: u32) -> bool {
    code != 0 && code < 32 && on & (1 << code) != 0
}

/// The gRPC code for an answer the proxy makes with `status` (the gRPC spec's HTTP to
/// gRPC mapping, timeouts as `DEADLINE_EXCEEDED`).
pub fn code_for(status: StatusCode) -> u32 {
    match status.as_u16() {
        404 => code::UNIMPLEMENTED,
        408 | 504 => code::DEADLINE_EXCEEDED,
        429 => code::RESOURCE_EXHAUSTED,
        401 => 16,
        403 => 7,
        502 | 503 => code::UNAVAILABLE,
        _ => code::INTERNAL,
    }
}

/// An answer the proxy made itself (carried in the response's extensions, so the
/// gRPC form can replace it).
#[derive(Clone, Debug)]
pub struct Made(pub String);

/// `resp`, or its gRPC form when the proxy made it: 200, trailers-only, the code for
/// its status and its message.
pub fn answer<B: Default>(resp: Response<B>) -> Response<B> {
    match resp.extensions().get::<Made>() {
        None => resp,
        Some(Made(msg)) => trailers_only(code_for(resp.status()), msg),
    }
}

/// A trailers-only gRPC answer.
pub fn trailers_only<B: Default>(code: u32, msg: &str) -> Response<B> {
    let mut r = Response::new(B::default());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(code));
    if let Ok(v) = HeaderValue::from_bytes(&encode_message(msg)) {
        h.insert("grpc-message", v);
    }
    r
}

/// `grpc-message` is percent-encoded: bytes outside printable ASCII, and `%`.
fn encode_message(msg: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len());
    for &b in msg.trim_end().as_bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// A client's request body on its way upstream; for a call that may be retried,
/// recorded up to a limit as it goes ([`Upload::recorded`]).
pub struct Upload(Source);

enum Source {
    Plain(Incoming),
    Recorded(Arc<Mutex<Record>>),
}

struct Record {
    /// The client's body (None: taken by [`Recording::finish`]).
    inner: Option<Incoming>,
    /// The chunks sent so far, shared with the frames that carried them (no copy).
    data: Vec<Bytes>,
    /// Their length.
    len: u64,
    limit: u64,
    /// The body ended with everything recorded.
    complete: bool,
    /// Larger than the limit, or with trailers: cannot be replayed.
    overflow: bool,
}

impl Record {
    fn note(&mut self, f: &Frame<Bytes>, ended: bool) {
        match f.data_ref() {
            Some(d) if !self.overflow && self.len + d.len() as u64 <= self.limit => {
                self.len += d.len() as u64;
                self.data.push(d.clone());
            }
            _ => self.clear(),
        }
        self.complete = ended;
    }

    /// Recording stops: the body cannot be replayed.
    fn clear(&mut self) {
        self.overflow = true;
        self.data = Vec::new();
        self.len = 0;
    }

    /// The body recorded, in one piece.
    fn whole(&self) -> Bytes {
        match self.data.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            more => {
                let mut b = BytesMut::with_capacity(self.len as usize);
                for c in more {
                    b.extend_from_slice(c);
                }
                b.freeze()
            }
        }
    }
}

/// The copy of a recorded [`Upload`].
pub struct Recording(Arc<Mutex<Record>>);

impl Upload {
    /// The client's body, passed on as it comes.
    pub fn new(inner: Incoming) -> Self {
        Upload(Source::Plain(inner))
    }

    /// The client's body, recorded up to `limit` bytes as it goes upstream.
    pub fn recorded(inner: Incoming, limit: u64) -> (Self, Recording) {
        let r = Arc::new(Mutex::new(Record {
            complete: inner.is_end_stream(),
            inner: Some(inner),
            data: Vec::new(),
            len: 0,
            limit,
            overflow: false,
        }));
        (Upload(Source::Recorded(r.clone())), Recording(r))
    }
}

impl Recording {
    /// No attempt will follow: recording stops and what it holds is freed (the upload
    /// itself goes on).
    pub fn discard(&self) {
        self.0.lock().clear();
    }

    /// The whole body, to send again: what went upstream, and what is left of it if it
    /// arrives within `within` (taken from the upload, which then ends). None when it
    /// is larger than the limit, has trailers, or is still coming (a client that waits
    /// for answers): such a call is not replayed.
    pub async fn finish(&self, within: Duration) -> Option<Bytes> {
        let mut inner = {
            let mut r = self.0.lock();
            if r.overflow {
                return None;
            }
            if r.complete {
                return Some(r.whole());
            }
            r.inner.take()?
        };
        let until = Instant::now() + within;
        while !inner.is_end_stream() {
            match tokio::time::timeout_at(until, inner.frame()).await {
                Ok(Some(Ok(f))) => self.0.lock().note(&f, inner.is_end_stream()),
                Ok(None) => break,
                Ok(Some(Err(_))) | Err(_) => return None,
            }
        }
        let r = self.0.lock();
        (!r.overflow).then(|| r.whole())
    }
}

impl Body for Upload {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match &mut self.get_mut().0 {
            Source::Plain(inner) => Pin::new(inner).poll_frame(cx),
            Source::Recorded(r) => {
                let mut r = r.lock();
                let Some(inner) = r.inner.as_mut() else {
                    return Poll::Ready(None);
                };
                let f = Pin::new(&mut *inner).poll_frame(cx);
                let ended = inner.is_end_stream();
                match &f {
                    Poll::Ready(Some(Ok(frame))) => r.note(frame, ended),
                    Poll::Ready(None) => r.complete = !r.overflow,
                    _ => {}
                }
                f
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Source::Plain(inner) => inner.is_end_stream(),
            Source::Recorded(r) => r.lock().inner.as_ref().is_none_or(Incoming::is_end_stream),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Source::Plain(inner) => inner.size_hint(),
            Source::Recorded(r) => r
                .lock()
                .inner
                .as_ref()
                .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint),
        }
    }
}

/// A gRPC call's response body: it ends with gRPC trailers, not an error (which the
/// client would see as a stream reset, `INTERNAL`, a code clients do not retry):
///
/// - `DEADLINE_EXCEEDED` when the call's deadline passes before the body has ended,
///   whether the upstream is silent or streams as fast as the client reads (checked
///   before every frame);
/// - `DEADLINE_EXCEEDED` when the read timeout cut a silent upstream ([`ReadTimedOut`]);
/// - `UNAVAILABLE` when the upstream failed mid-response (killed, connection lost).
///
/// The upstream stream is reset as the body under it is dropped.
///
/// [`Ending::erring`] keeps only the deadline, as an error: for a client that cannot
/// receive trailers (HTTP/1.1, where hyper drops them and ends the chunked body as if
/// complete) or a response that is not gRPC, a failure must stay a failure (the
/// connection aborted), never a clean end.
pub struct Ending<B> {
    inner: Option<B>,
    /// Failures and the deadline end the body with gRPC trailers (not errors).
    trailers: bool,
    /// The call's deadline.
    deadline: Option<Instant>,
    /// Its timer, made the first time the body waits.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Ending<B> {
    /// `inner`, until `deadline` if any.
    pub fn new(inner: B, deadline: Option<Instant>) -> Self {
        Ending {
            inner: Some(inner),
            trailers: true,
            deadline,
            sleep: None,
        }
    }

    /// `inner`, failing at `deadline` (its errors passed on as they are).
    pub fn erring(inner: B, deadline: Instant) -> Self {
        Ending {
            inner: Some(inner),
            trailers: false,
            deadline: Some(deadline),
            sleep: None,
        }
    }

    /// The deadline passed: trailers, or an error.
    fn late(&mut self) -> Result<Frame<Bytes>, BoxError> {
        const LATE: &str = "deadline exceeded while the response streamed";
        if self.trailers {
            Ok(self.end(code::DEADLINE_EXCEEDED, LATE))
        } else {
            self.inner = None;
            Err(LATE.into())
        }
    }

    /// Drops the body (its upstream stream) and ends with `code` and `msg`.
    fn end(&mut self, code: u32, msg: &str) -> Frame<Bytes> {
        self.inner = None;
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from(code));
        if let Ok(v) = HeaderValue::from_bytes(&encode_message(msg)) {
            t.insert("grpc-message", v);
        }
        Frame::trailers(t)
    }
}

impl<B> Body for Ending<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        // Before the inner body: one that always has a frame ready (an upstream ahead of
        // a slow client) would otherwise never let the deadline be seen.
        if this.deadline.is_some_and(|at| Instant::now() >= at) {
            return Poll::Ready(Some(this.late()));
        }
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) if !this.trailers => {
                this.inner = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Err(e))) => {
                let frame = match e.downcast_ref::<ReadTimedOut>() {
                    Some(t) => this.end(code::DEADLINE_EXCEEDED, &t.to_string()),
                    None => this.end(
                        code::UNAVAILABLE,
                        &format!("the upstream failed mid-response: {e}"),
                    ),
                };
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Ok(f))) => {
                if f.is_trailers() {
                    // The end: nothing after it, the deadline included.
                    this.inner = None;
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(None) => {
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                let Some(at) = this.deadline else {
                    return Poll::Pending;
                };
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                Poll::Ready(Some(this.late()))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}

#[cfg(test)]
#[path = "grpc/tests.rs"]
mod tests;
