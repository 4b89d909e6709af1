//! HTTP/1.1 with upstreams on plain pooled sockets ([`Raw`]), shared by the proxy's
//! own HTTP/1.1 engine ([`crate::h1`]) and the hyper path's HTTP/2 clients
//! ([`crate::forward`]): the request goes out as bytes on a connection taken from
//! the endpoint's pool (or a new one), the response head is parsed with httparse and
//! its framing found (RFC 9112 §6.3); what is made of the head is the caller's
//! ([`Sink`]: the client's HTTP/1.1 head as bytes, or an `http` header map for an
//! HTTP/2 stream). No task, channel or buffer lives between requests: an idle
//! upstream connection is a socket in its endpoint's pool.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::chunked::Chunked;
use super::{Error, Raw, Settings, connect_raw};
use crate::clock::now_nanos;
use crate::endpoint::Endpoint;
use crate::headers;
use crate::metrics::Metrics;

/// Most headers in a request or response head (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// Read buffer growth step.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// Least free space a read is given.
const MIN_READ: usize = 1024;
/// What an HTTP/2 client's request reads its response head (and the start of its
/// body) into first: a head of up to about this size costs no more (500 streams in
/// flight hold 500 of these).
pub(crate) const HEAD_BUFFER: usize = 4096;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;

/// Whether `name` is `of` (ASCII case-insensitive).
pub(crate) fn is_token(name: &[u8], of: &str) -> bool {
    name.eq_ignore_ascii_case(of.as_bytes())
}

pub(crate) fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

/// Whether `name` is a hop-by-hop header (RFC 9110 section 7.6.1; the list is
/// [`headers::HOP_BY_HOP`] and `Upgrade`), `Transfer-Encoding` aside when `keep_te`:
/// a response body goes on as the upstream framed it (the engine forwards no request
/// that has one).
pub(crate) fn hop_by_hop(name: &[u8], keep_te: bool) -> bool {
    // Most names cannot be one (lengths 2, 7, 10, 16 to 19): no comparisons for them.
    if !matches!(name.len(), 2 | 7 | 10 | 16..=19) {
        return false;
    }
    headers::HOP_BY_HOP
        .iter()
        .map(HeaderName::as_str)
        .chain(["upgrade"])
        .any(|h| is_token(name, h) && !(keep_te && h == "transfer-encoding"))
}

/// How an upstream response's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body.
    Empty,
    /// This many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the upstream closes.
    Close,
}

/// A parsed upstream response head (what the [`Sink`] made of it is written already).
#[derive(Debug)]
pub(crate) struct RespHead {
    /// Length of the head in the upstream buffer.
    pub(crate) len: usize,
    pub(crate) status: u16,
    pub(crate) framing: Framing,
    /// The upstream connection can carry another request after this response.
    pub(crate) reusable: bool,
}

/// What is made of an upstream response head: its status line and its end-to-end
/// headers (hop-by-hop ones and those `Connection` names are left out; a
/// `Transfer-Encoding` stays, the body being passed on as framed).
pub(crate) trait Sink {
    /// The status line (called first).
    fn status(&mut self, code: u16, reason: &[u8]);
    /// One header, in order.
    fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error>;
    /// The head is complete: `date` whether it had a `Date`, and how its body ends.
    fn end(&mut self, date: bool, framing: Framing);
}

/// Parses an upstream response head, given to `sink`. `Ok(None)`: more bytes needed.
/// Interim (1xx) responses are `Ok(Some)` with status below 200 and nothing given to
/// `sink`: the caller skips them.
pub(crate) fn parse_response(
    buf: &[u8],
    head_request: bool,
    sink: &mut impl Sink,
) -> Result<Option<RespHead>, Error> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(Error::Malformed("response head too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::Malformed("more than 100 response headers"));
        }
        Err(_) => return Err(Error::Malformed("unparsable response head")),
    };
    let status = resp.code.unwrap_or(0);
    if status == 101 {
        return Err(Error::Malformed(
            "101 Switching Protocols to a request that did not ask for it",
        ));
    }
    if status < 200 {
        return Ok(Some(RespHead {
            len,
            status,
            framing: Framing::Empty,
            reusable: false,
        }));
    }
    let mut keep_alive = resp.version == Some(1);
    let mut chunked = None;
    let mut length: Option<u64> = None;
    let mut named: Vec<&[u8]> = Vec::new();
    let mut date = false;
    for h in resp.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        if is_token(name, "connection") {
            for t in value.split(|&b| b == b',').map(trim) {
                if is_token(t, "close") {
                    keep_alive = false;
                } else if !t.is_empty()
                    && !is_token(t, "keep-alive")
                    // The body goes on as framed: its framing headers stay.
                    && !is_token(t, "content-length")
                    && !is_token(t, "transfer-encoding")
                {
                    named.push(t);
                }
            }
        } else if is_token(name, "transfer-encoding") {
            // The last coding decides: chunked, or the body runs to the close.
            let last = value.rsplit(|&b| b == b',').next().map(trim);
            chunked = Some(last.is_some_and(|c| is_token(c, "chunked")));
        } else if is_token(name, "content-length") {
            let v = trim(value);
            let n = std::str::from_utf8(v)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(Error::Malformed("invalid Content-Length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(Error::Malformed("conflicting Content-Length"));
            }
            length = Some(n);
        } else if is_token(name, "date") {
            date = true;
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    sink.status(status, resp.reason.unwrap_or("").as_bytes());
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if hop_by_hop(name, true)
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
            // A Transfer-Encoding overrides Content-Length (which must then go).
            || (chunked.is_some() && is_token(name, "content-length"))
        {
            continue;
        }
        sink.header(name, h.value)?;
    }
    sink.end(date, framing);
    Ok(Some(RespHead {
        len,
        status,
        framing,
        reusable: keep_alive && framing != Framing::Close,
    }))
}

/// A response head for an HTTP/2 client: status and header map. The body is passed on
/// as data (a chunked one decoded), so `Transfer-Encoding` goes.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
}

impl Sink for Fields {
    fn status(&mut self, code: u16, _reason: &[u8]) {
        self.status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
        self.headers.clear();
    }

    fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error> {
        if is_token(name, "transfer-encoding") {
            return Ok(());
        }
        let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) else {
            return Err(Error::Malformed("invalid response header"));
        };
        self.headers.append(n, v);
        Ok(())
    }

    fn end(&mut self, _date: bool, _framing: Framing) {}
}

/// Writes an HTTP/1.1 request for an upstream: request line, `headers` (end-to-end
/// ones only: the caller has removed the hop-by-hop ones and added the forwarding
/// ones), a `Content-Length` for `body` when the headers have none and the method
/// takes one, and `body`.
pub(crate) fn write_request(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (n, v) in headers {
        out.extend_from_slice(n.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = matches!(
        *method,
        Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS | Method::TRACE
    );
    if !headers.contains_key(http::header::CONTENT_LENGTH) && (!body.is_empty() || !bodiless) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Sends `req` to `ep` on a pooled connection (or a new one) and reads the response
/// head (into `ubuf`, from its start, in the space the caller reserved, grown by
/// [`READ_CHUNK`] when less than 1 KiB is left), given to `sink`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn exchange(
    ep: &Arc<Endpoint>,
    req: &[u8],
    idem: bool,
    head_request: bool,
    settings: Settings,
    metrics: &Metrics,
    ubuf: &mut BytesMut,
    sink: &mut impl Sink,
) -> Result<(Raw, RespHead), Error> {
    'conn: loop {
        let (mut c, reused) = match ep.pool.checkout_raw(now_nanos()) {
            Some(c) => (c, true),
            None => (
                Box::pin(connect_raw(ep.addr, settings.connect_timeout, metrics)).await?,
                false,
            ),
        };
        ubuf.clear();
        if let Err(e) = c.stream.write_all(req).await {
            // A pooled connection the upstream had closed: nothing was processed.
            if reused {
                continue;
            }
            return Err(Error::Io(e));
        }
        loop {
            // The caller sized the buffer for the head: it grows when nearly full.
            if ubuf.capacity() - ubuf.len() < MIN_READ {
                ubuf.reserve(READ_CHUNK);
            }
            match c.stream.read_buf(ubuf).await {
                Ok(0) | Err(_) if reused && ubuf.is_empty() && idem => {
                    // The upstream closed an idle connection as the request went out
                    // (its keep-alive timeout): an idempotent request goes again.
                    continue 'conn;
                }
                Ok(0) => return Err(Error::Closed),
                Err(e) => return Err(Error::Io(e)),
                Ok(_) => {}
            }
            while let Some(head) = parse_response(ubuf, head_request, sink)? {
                if head.status >= 200 {
                    return Ok((c, head));
                }
                // 1xx interim responses (103 Early Hints...) are not passed on.
                ubuf.advance(head.len);
            }
        }
    }
}

/// Errors of a response body on its way to the client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An upstream response body read from its [`Raw`] connection for an HTTP/2 client:
/// data frames as they arrive (a chunked body decoded; its trailers are dropped), one
/// read at a time (hyper polls for the next frame when the stream has room for it, so
/// the memory held is one read buffer). The connection goes back to the endpoint's
/// pool once the body has ended exactly where its framing said; dropped before that,
/// it closes.
pub(crate) struct RawBody {
    /// None once the body ended.
    conn: Option<Raw>,
    buf: BytesMut,
    /// Data taken from the buffer on creation, not yet given out.
    first: Bytes,
    framing: Framing,
    /// What is left of a `Content-Length` body.
    left: u64,
    chunked: Chunked,
    /// The upstream keeps the connection open after this response.
    reusable: bool,
    ep: Arc<Endpoint>,
    settings: Settings,
}

impl RawBody {
    /// The body of the response whose `head` came on `conn`; `buf` holds what was read
    /// after the head. What it holds is framed here: a body already broken (an invalid
    /// chunk) is an error before anything reaches the client.
    pub(crate) fn new(
        conn: Raw,
        buf: BytesMut,
        head: &RespHead,
        ep: Arc<Endpoint>,
        settings: Settings,
    ) -> Result<Self, &'static str> {
        let mut body = RawBody {
            conn: Some(conn),
            buf,
            first: Bytes::new(),
            framing: head.framing,
            left: match head.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunked: Chunked::default(),
            reusable: head.reusable,
            ep,
            settings,
        };
        if matches!(head.framing, Framing::Empty | Framing::Length(0)) {
            body.ended(body.buf.is_empty());
        } else if !body.buf.is_empty() {
            body.first = body.take().map_err(|e| match e {
                Error::Malformed(why) => why,
                _ => "invalid response body",
            })?;
        }
        Ok(body)
    }

    /// The body ended; `clean`: exactly where its framing said (nothing after it).
    fn ended(&mut self, clean: bool) {
        if let Some(conn) = self.conn.take()
            && clean
            && self.reusable
        {
            self.ep.pool.put_raw(conn, self.settings);
        }
        self.buf = BytesMut::new();
    }

    /// The next data from what is buffered (empty when it held none).
    fn take(&mut self) -> Result<Bytes, Error> {
        match self.framing {
            Framing::Empty => Ok(Bytes::new()),
            Framing::Length(_) => {
                let n = self.left.min(self.buf.len() as u64);
                self.left -= n;
                let data = self.buf.split_to(n as usize).freeze();
                if self.left == 0 {
                    self.ended(self.buf.is_empty());
                }
                Ok(data)
            }
            Framing::Chunked => {
                let mut data = BytesMut::new();
                let buf = &self.buf;
                let end = self
                    .chunked
                    .decode(buf, |r| data.extend_from_slice(&buf[r]))
                    .map_err(Error::Malformed)?;
                match end {
                    Some(n) => {
                        let clean = n == self.buf.len();
                        self.ended(clean);
                    }
                    None => self.buf.clear(),
                }
                Ok(data.freeze())
            }
            Framing::Close => Ok(self.buf.split().freeze()),
        }
    }
}

impl hyper::body::Body for RawBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.first.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut this.first)))));
        }
        loop {
            if !this.buf.is_empty() {
                match this.take() {
                    Ok(data) if !data.is_empty() => {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if let Err(e) = ready!(conn.stream.poll_read_ready(cx)) {
                this.conn = None;
                return Poll::Ready(Some(Err(Error::Io(e).into())));
            }
            this.buf.reserve(READ_CHUNK);
            match conn.stream.try_read_buf(&mut this.buf) {
                Ok(0) if this.framing == Framing::Close => {
                    this.ended(false);
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::Malformed(
                        "the upstream closed the connection mid-body",
                    )
                    .into())));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::Io(e).into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none() && self.buf.is_empty() && self.first.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Empty => SizeHint::with_exact(0),
            Framing::Length(_) => SizeHint::with_exact(self.left + self.first.len() as u64),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue, Method};

    use super::write_request;

    #[test]
    fn requests_from_a_header_map() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("a.test"));
        h.append("x-a", HeaderValue::from_static("1"));
        h.append("x-a", HeaderValue::from_static("2"));
        let with_length = {
            let mut h = h.clone();
            h.insert("content-length", HeaderValue::from_static("2"));
            h
        };
        let head = "host: a.test\r\nx-a: 1\r\nx-a: 2\r\n";
        for (method, headers, body, want) in [
            (
                Method::GET,
                &h,
                "",
                format!("GET /p?q HTTP/1.1\r\n{head}\r\n"),
            ),
            (
                Method::HEAD,
                &h,
                "",
                format!("HEAD /p?q HTTP/1.1\r\n{head}\r\n"),
            ),
            // A method that takes a body gets a length, even an empty one.
            (
                Method::POST,
                &h,
                "",
                format!("POST /p?q HTTP/1.1\r\n{head}content-length: 0\r\n\r\n"),
            ),
            (
                Method::GET,
                &h,
                "ab",
                format!("GET /p?q HTTP/1.1\r\n{head}content-length: 2\r\n\r\nab"),
            ),
            // The client's length stays, once.
            (
                Method::PUT,
                &with_length,
                "ab",
                format!("PUT /p?q HTTP/1.1\r\n{head}content-length: 2\r\n\r\nab"),
            ),
        ] {
            let mut out = Vec::new();
            write_request(&method, "/p?q", headers, body.as_bytes(), &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{method} {body:?}");
        }
    }
}
