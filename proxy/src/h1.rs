//! The HTTP/1.1 engine: plain requests are parsed (httparse), routed, forwarded and
//! answered on the connection's own task, with the upstream socket read and written
//! directly, no per-request task, channel or header map.
//!
//! hyper serves a request that takes any less common path, and with it the rest of
//! its connection (the bytes read so far are replayed to it, see [`Rewind`]):
//! - not HTTP/1.1, or a request target that is not origin-form (`/path`);
//! - not exactly one `Host`, a `Transfer-Encoding` (chunked uploads), more than one
//!   `Content-Length` or one above [`MAX_REPLAY`], `Expect`, `Upgrade` (WebSocket);
//! - more than [`MAX_HEADERS`] headers, a head hyper would reject (hyper answers 400 or
//!   431), and the HTTP/2 preface (h2c prior knowledge);
//! - a request the proxy answers itself before choosing an endpoint: no route (404),
//!   an unresolved backend (503), an HTTP→HTTPS redirect (308).
//!
//! What stays here is the request-smuggling-free subset: a body, if any, is framed by
//! one `Content-Length` and read whole before anything goes upstream. Upstream
//! responses are framed per RFC 9112 §6.3 (no body for HEAD, 1xx, 204 and 304;
//! chunked, checked chunk by chunk and passed on as sent; `Content-Length`; or until
//! the upstream closes, when the client connection closes too). An upstream connection
//! goes back to its endpoint's pool only after a response that ended exactly where its
//! framing said.
//!
//! Everything the hyper path does around a request happens here the same way: the
//! circuit, the retry budget, retries on another endpoint (after a refused connect for
//! any method, after any failure for idempotent ones), outlier ejection, the
//! forwarding headers, timeouts, and the same metrics and error answers.

use std::io;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::annotations::HashOn;
use crate::balance::maglev::hash_bytes;
use crate::clock::now_nanos;
use crate::endpoint::Endpoint;
use crate::forward::{Conn, MAX_REPLAY, Proxy};
use crate::headers::cookie_in;
use crate::matching::normalize_host;
use crate::server::Limits;
use crate::table::{Backend, Target};
use crate::upstream::{self, Raw};

/// Most headers in a request or response head (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;
/// Largest trailer section of a chunked response.
const MAX_TRAILERS: usize = 64 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 16 * 1024;

/// How a connection left the engine.
#[derive(Debug)]
pub enum End {
    /// Closed (by the client, after an error, on shutdown, or after an idle period).
    Closed,
    /// hyper serves the rest of it, starting with the bytes in the buffer.
    Handoff,
}

/// Request headers the proxy does not forward (hop-by-hop, RFC 9110 §7.6.1), or
/// replaces.
const DROP_REQUEST: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
];

/// Response headers the proxy does not forward (hop-by-hop; `Transfer-Encoding` is
/// kept: the body goes on as the upstream framed it).
const DROP_RESPONSE: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// A parsed request head, as offsets into the connection's buffer.
#[derive(Debug, Default)]
struct ReqHead {
    /// Length of the head.
    len: usize,
    method: Range<usize>,
    /// The request target (origin-form, query included).
    target: Range<usize>,
    /// (name, value) of every header, in order.
    headers: Vec<(Range<usize>, Range<usize>)>,
    /// The value of `Host`.
    host: Range<usize>,
    /// The body's length.
    body: usize,
    /// The client asked to close after this response (`Connection: close`).
    close: bool,
    /// Header names listed in `Connection` (hop-by-hop too).
    named: Vec<Range<usize>>,
    has_request_id: bool,
}

/// What a request head is, for the engine.
#[derive(Debug, PartialEq, Eq)]
enum Parse {
    /// More bytes needed.
    Partial,
    /// A request the engine serves.
    Fast,
    /// hyper serves it (and the rest of the connection).
    Slow,
}

fn range(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

fn is_token(name: &[u8], of: &str) -> bool {
    name.eq_ignore_ascii_case(of.as_bytes())
}

fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

/// Parses the request head at the start of `buf` into `head`.
fn parse_request(buf: &[u8], head: &mut ReqHead) -> Parse {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parse::Partial,
        // hyper answers what it rejects (400, 431), and takes the HTTP/2 preface.
        Err(_) => return Parse::Slow,
    };
    let (Some(method), Some(path), Some(1)) = (req.method, req.path, req.version) else {
        return Parse::Slow;
    };
    if !path.starts_with('/') {
        return Parse::Slow;
    }
    head.len = len;
    head.method = range(buf, method.as_bytes());
    head.target = range(buf, path.as_bytes());
    head.headers.clear();
    head.named.clear();
    head.close = false;
    head.has_request_id = false;
    head.body = 0;
    let (mut hosts, mut lengths) = (0, 0);
    for h in req.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        match name.len() {
            4 if is_token(name, "host") => {
                hosts += 1;
                head.host = range(buf, value);
            }
            6 if is_token(name, "expect") => return Parse::Slow,
            7 if is_token(name, "upgrade") => return Parse::Slow,
            10 if is_token(name, "connection") => {
                for t in value.split(|&b| b == b',').map(trim) {
                    if is_token(t, "close") {
                        head.close = true;
                    } else if is_token(t, "upgrade") {
                        return Parse::Slow;
                    } else if !t.is_empty() && !is_token(t, "keep-alive") {
                        head.named.push(range(buf, t));
                    }
                }
            }
            12 if is_token(name, "x-request-id") => head.has_request_id = true,
            14 if is_token(name, "content-length") => {
                lengths += 1;
                let v = trim(value);
                if v.is_empty() || v.len() > 8 || !v.iter().all(u8::is_ascii_digit) {
                    return Parse::Slow;
                }
                head.body = v.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0'));
            }
            17 if is_token(name, "transfer-encoding") => return Parse::Slow,
            _ => {}
        }
        head.headers.push((range(buf, name), range(buf, value)));
    }
    if hosts != 1 || lengths > 1 || head.body as u64 > MAX_REPLAY {
        return Parse::Slow;
    }
    Parse::Fast
}

fn idempotent(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"PUT" | b"DELETE" | b"TRACE"
    )
}

/// Writes the upstream request: request line, the client's headers minus hop-by-hop
/// ones, the forwarding headers, and the body.
fn write_request(buf: &[u8], head: &ReqHead, conn: &Conn, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&buf[head.method.clone()]);
    out.push(b' ');
    out.extend_from_slice(&buf[head.target.clone()]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff: Vec<&[u8]> = Vec::new();
    for (n, v) in &head.headers {
        let name = &buf[n.clone()];
        if DROP_REQUEST.iter().any(|d| is_token(name, d)) {
            if is_token(name, "x-forwarded-for") && !trim(&buf[v.clone()]).is_empty() {
                xff.push(&buf[v.clone()]);
            }
            continue;
        }
        if head
            .named
            .iter()
            .any(|c| name.eq_ignore_ascii_case(&buf[c.clone()]))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(&buf[v.clone()]);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    for prev in xff {
        out.extend_from_slice(prev);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(conn.remote_ip.as_bytes());
    out.extend_from_slice(if conn.https {
        b"\r\nx-forwarded-proto: https\r\nx-forwarded-host: "
    } else {
        b"\r\nx-forwarded-proto: http\r\nx-forwarded-host: "
    });
    out.extend_from_slice(&buf[head.host.clone()]);
    out.extend_from_slice(b"\r\n");
    if !head.has_request_id {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(crate::headers::request_id().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&buf[head.len..head.len + head.body]);
}

/// How an upstream response's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body.
    Empty,
    /// This many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the upstream closes.
    Close,
}

/// A parsed upstream response head (the client's head is written already).
#[derive(Debug)]
struct RespHead {
    /// Length of the head in the upstream buffer.
    len: usize,
    status: u16,
    framing: Framing,
    /// The upstream connection can carry another request after this response.
    reusable: bool,
}

/// Parses an upstream response head and writes the client's head into `out`.
/// `Ok(None)`: more bytes needed. Interim (1xx) responses are `Ok(Some)` with status
/// below 200: the caller skips them.
fn parse_response(
    buf: &[u8],
    head_request: bool,
    close_client: bool,
    out: &mut Vec<u8>,
) -> Result<Option<RespHead>, upstream::Error> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_RESPONSE_HEAD => {
            return Err(upstream::Error::Malformed("response head too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(upstream::Error::Malformed("more than 100 response headers"));
        }
        Err(_) => return Err(upstream::Error::Malformed("unparsable response head")),
    };
    let status = resp.code.unwrap_or(0);
    if status == 101 {
        return Err(upstream::Error::Malformed(
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
                } else if !t.is_empty() && !is_token(t, "keep-alive") {
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
                .ok_or(upstream::Error::Malformed("invalid Content-Length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(upstream::Error::Malformed("conflicting Content-Length"));
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
    let close = close_client || framing == Framing::Close;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&buf[9.min(buf.len())..12.min(buf.len())]);
    out.push(b' ');
    out.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if DROP_RESPONSE.iter().any(|d| is_token(name, d))
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
            // A Transfer-Encoding overrides Content-Length (which must then go).
            || (chunked.is_some() && is_token(name, "content-length"))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    if !date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(Some(RespHead {
        len,
        status,
        framing,
        reusable: keep_alive && framing != Framing::Close,
    }))
}

/// Where a chunked body stands (RFC 9112 §7.1), fed the bytes as they pass through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// In the hex chunk size.
    #[default]
    Size,
    /// In chunk extensions (or whitespace) after the size.
    Ext,
    /// After the size line's CR.
    SizeLf,
    /// In chunk data.
    Data,
    /// After chunk data: CR.
    DataCr,
    /// After chunk data: LF.
    DataLf,
    /// At the start of a trailer line (or of the final CRLF).
    Trailer,
    /// In a trailer line.
    TrailerLine,
    /// After a trailer line's CR.
    TrailerLf,
    /// After the final CR.
    EndLf,
}

/// A chunked-body checker: finds where the body ends, rejects bad framing.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    /// Size of the current chunk (while in `Size`), or what is left of its data.
    size: u64,
    digits: u8,
    trailers: usize,
}

impl Chunked {
    /// Feeds the next bytes of the body: `Ok(Some(n))` when the body ends after `n` of
    /// them, `Ok(None)` when it goes on.
    pub fn feed(&mut self, data: &[u8]) -> Result<Option<usize>, &'static str> {
        use ChunkState::*;
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits == 15 {
                            return Err("chunk size too large");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    None if self.digits == 0 => return Err("invalid chunk size"),
                    None => match b {
                        b';' | b' ' | b'\t' => self.state = Ext,
                        b'\r' => self.state = SizeLf,
                        _ => return Err("invalid chunk size"),
                    },
                },
                Ext => match b {
                    b'\r' => self.state = SizeLf,
                    b'\t' | 0x20..=0x7e | 0x80..=0xff => {}
                    _ => return Err("invalid chunk extension"),
                },
                SizeLf => {
                    if b != b'\n' {
                        return Err("chunk size line not ended by CRLF");
                    }
                    self.state = if self.size == 0 { Trailer } else { Data };
                }
                Data => {
                    let take = self.size.min((data.len() - i) as u64);
                    self.size -= take;
                    i += take as usize;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr | EndLf | TrailerLf | DataLf => {
                    let want = if self.state == DataCr { b'\r' } else { b'\n' };
                    if b != want {
                        return Err("chunk not ended by CRLF");
                    }
                    match self.state {
                        DataCr => self.state = DataLf,
                        DataLf => {
                            self.state = Size;
                            self.digits = 0;
                        }
                        TrailerLf => self.state = Trailer,
                        _ => return Ok(Some(i + 1)),
                    }
                }
                Trailer | TrailerLine => {
                    self.trailers += 1;
                    if self.trailers > MAX_TRAILERS {
                        return Err("trailers too large");
                    }
                    match b {
                        b'\r' if self.state == Trailer => self.state = EndLf,
                        b'\r' => self.state = TrailerLf,
                        b'\n' => return Err("trailer line not ended by CRLF"),
                        _ => self.state = TrailerLine,
                    }
                }
            }
            i += 1;
        }
        Ok(None)
    }
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

/// Sends the client its response head (in `out`) and the body, as the upstream frames
/// it. `ubuf` holds what was read after the head. Returns whether the upstream
/// connection ended the response exactly where its framing said (it can be reused).
async fn relay<T: AsyncWrite + Unpin>(
    io: &mut T,
    up: &mut Raw,
    ubuf: &mut BytesMut,
    out: &mut Vec<u8>,
    framing: Framing,
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
    write(io, out).await?;
    while !done {
        ubuf.clear();
        ubuf.reserve(READ_CHUNK);
        match up.stream.read_buf(ubuf).await {
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
                write(io, &ubuf[..n]).await?;
            }
        }
    }
    Ok(clean && framing != Framing::Close)
}

/// Sends `req` to `ep` on a pooled connection (or a new one) and reads the response
/// head, which it writes for the client into `out`.
#[allow(clippy::too_many_arguments)]
async fn exchange(
    ep: &Arc<Endpoint>,
    req: &[u8],
    idem: bool,
    head_request: bool,
    close_client: bool,
    settings: upstream::Settings,
    proxy: &Proxy,
    ubuf: &mut BytesMut,
    out: &mut Vec<u8>,
) -> Result<(Raw, RespHead), upstream::Error> {
    'conn: loop {
        let (mut c, reused) = match ep.pool.checkout_raw(now_nanos()) {
            Some(c) => (c, true),
            None => (
                Box::pin(upstream::connect_raw(
                    ep.addr,
                    settings.connect_timeout,
                    &proxy.metrics,
                ))
                .await?,
                false,
            ),
        };
        ubuf.clear();
        if let Err(e) = c.stream.write_all(req).await {
            // A pooled connection the upstream had closed: nothing was processed.
            if reused {
                continue;
            }
            return Err(upstream::Error::Io(e));
        }
        loop {
            ubuf.reserve(READ_CHUNK);
            match c.stream.read_buf(ubuf).await {
                Ok(0) | Err(_) if reused && ubuf.is_empty() && idem => {
                    // The upstream closed an idle connection as the request went out
                    // (its keep-alive timeout): an idempotent request goes again.
                    continue 'conn;
                }
                Ok(0) => return Err(upstream::Error::Closed),
                Err(e) => return Err(upstream::Error::Io(e)),
                Ok(_) => {}
            }
            while let Some(head) = parse_response(ubuf, head_request, close_client, out)? {
                if head.status >= 200 {
                    return Ok((c, head));
                }
                // 1xx interim responses (103 Early Hints...) are not passed on.
                ubuf.advance(head.len);
            }
        }
    }
}

/// Renders a response the proxy makes itself.
fn error_response(
    proxy: &Proxy,
    out: &mut Vec<u8>,
    status: StatusCode,
    reason: &'static str,
    msg: String,
    close: bool,
) {
    let body = proxy.note(status, reason, &msg);
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\ndate: ");
    out.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
    if close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body.as_bytes());
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
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut req: Vec<u8> = Vec::with_capacity(4096);
    let mut ubuf = BytesMut::new();
    loop {
        if stop.is_cancelled() {
            return End::Closed;
        }
        // The head, within the header-read timeout (which also bounds keep-alive idle).
        let deadline = Instant::now() + limits.header_read_timeout;
        loop {
            if !buf.is_empty() {
                match parse_request(buf, &mut head) {
                    Parse::Fast => break,
                    Parse::Slow => return End::Handoff,
                    // hyper answers 431.
                    Parse::Partial if buf.len() >= limits.max_header_bytes => {
                        return End::Handoff;
                    }
                    Parse::Partial => {}
                }
            }
            buf.reserve(READ_CHUNK.min(limits.max_header_bytes.max(4096)));
            tokio::select! {
                r = tokio::time::timeout_at(deadline, io.read_buf(buf)) => match r {
                    Ok(Ok(0)) | Ok(Err(_)) => return End::Closed,
                    Ok(Ok(_)) => {}
                    Err(_) => {
                        tracing::debug!(remote = %conn.remote, "no request head within the header-read timeout");
                        return End::Closed;
                    }
                },
                () = stop.cancelled() => return End::Closed,
            }
        }
        match serve_one(
            io, buf, &head, proxy, conn, &mut out, &mut req, &mut ubuf, stop,
        )
        .await
        {
            Ok(Served::KeepAlive) => {}
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

/// Serves the request whose head is parsed in `head`.
#[allow(clippy::too_many_arguments)]
async fn serve_one<T>(
    io: &mut T,
    buf: &mut BytesMut,
    head: &ReqHead,
    proxy: &Proxy,
    conn: &Conn,
    out: &mut Vec<u8>,
    reqbuf: &mut Vec<u8>,
    ubuf: &mut BytesMut,
    stop: &CancellationToken,
) -> Result<Served, Handoff>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let table = proxy.table.load_full();
    let b: Arc<Backend> = {
        let host = std::str::from_utf8(&buf[head.host.clone()]).map_err(|_| Handoff)?;
        let target = &buf[head.target.clone()];
        let path = target.split(|&c| c == b'?').next().unwrap_or(target);
        let path = std::str::from_utf8(path).map_err(|_| Handoff)?;
        let route = table.route(&normalize_host(host), path).ok_or(Handoff)?;
        if route.ssl_redirect && !conn.https {
            return Err(Handoff);
        }
        match &route.target {
            Target::Backend(b) => b.clone(),
            Target::Unavailable(_) => return Err(Handoff),
        }
    };
    let limits = &b.tuning.limits;
    // The body, before taking a circuit slot and within the request timeout: a client
    // that announces a body and stalls holds neither.
    let total = head.len + head.body;
    if buf.len() < total {
        let deadline = Instant::now() + limits.request_timeout;
        while buf.len() < total {
            buf.reserve(total - buf.len());
            match tokio::time::timeout_at(deadline, io.read_buf(buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Ok(Served::Close),
                Ok(Ok(_)) => {}
                Err(_) => {
                    let msg = format!(
                        "the request body did not arrive within {:?}",
                        limits.request_timeout
                    );
                    error_response(
                        proxy,
                        out,
                        StatusCode::REQUEST_TIMEOUT,
                        "client_body_timeout",
                        msg,
                        true,
                    );
                    let _ = write(io, out).await;
                    return Ok(Served::Close);
                }
            }
        }
    }
    let method = &buf[head.method.clone()];
    let idem = idempotent(method);
    let head_request = method == b"HEAD";
    let key = match &b.tuning.hash_on {
        Some(HashOn::Header(h)) => head
            .headers
            .iter()
            .find(|(n, _)| buf[n.clone()].eq_ignore_ascii_case(h.as_str().as_bytes()))
            .map(|(_, v)| hash_bytes(&buf[v.clone()])),
        Some(HashOn::Cookie(c)) => cookie_in(
            head.headers
                .iter()
                .filter(|(n, _)| is_token(&buf[n.clone()], "cookie"))
                .map(|(_, v)| &buf[v.clone()]),
            c,
        )
        .map(|v| hash_bytes(v.as_bytes())),
        None => None,
    };
    write_request(buf, head, conn, reqbuf);
    let req: &[u8] = reqbuf;
    buf.advance(total);
    let close_client = head.close;
    let permit = match b
        .circuit
        .acquire(
            limits.max_requests,
            limits.max_pending_requests,
            limits.max_connections,
            limits.request_timeout,
        )
        .await
    {
        Ok(p) => p,
        Err(open) => {
            let msg = format!("circuit open for backend {} of {}: {open}", b.name, b.mci);
            return answer(
                io,
                proxy,
                out,
                StatusCode::SERVICE_UNAVAILABLE,
                "circuit_open",
                msg,
                close_client,
            )
            .await;
        }
    };
    let settings = upstream::Settings {
        connect_timeout: limits.connect_timeout,
        idle_timeout: limits.idle_timeout,
        max_idle: limits.max_connections as usize,
    };
    let attempts = 1 + limits.retries;
    proxy.budget.deposit();
    let mut tried: Vec<usize> = Vec::new();
    let mut last = None;
    for attempt in 0..attempts {
        if attempt > 0 {
            if !proxy.budget.withdraw() {
                proxy.metrics.retries_exhausted.inc();
                break;
            }
            b.metrics.retries.inc();
        }
        let now = now_nanos();
        let Some(ep) = b.balancer.pick(now, key, &tried) else {
            let msg = format!("no ready endpoints for backend {} of {}", b.name, b.mci);
            return answer(
                io,
                proxy,
                out,
                StatusCode::SERVICE_UNAVAILABLE,
                "no_endpoints",
                msg,
                close_client,
            )
            .await;
        };
        let mut inflight = ep.start_at(now);
        let close = close_client || stop.is_cancelled();
        let res = tokio::time::timeout(
            limits.request_timeout,
            exchange(
                &ep,
                req,
                idem,
                head_request,
                close,
                settings,
                proxy,
                ubuf,
                out,
            ),
        )
        .await;
        match res {
            Err(_) => {
                proxy.failure(&b, &ep);
                if let Some(c) = b.metrics.cluster(&ep.cluster) {
                    c.count(504);
                }
                let msg = format!(
                    "upstream {} in cluster {} did not answer within {:?}",
                    ep.addr, ep.cluster, limits.request_timeout
                );
                return answer(
                    io,
                    proxy,
                    out,
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    msg,
                    close_client,
                )
                .await;
            }
            Ok(Err(e)) => {
                proxy.failure(&b, &ep);
                if let Some(c) = b.metrics.cluster(&ep.cluster) {
                    c.count(502);
                }
                let connect = e.is_connect();
                let msg = format!("upstream {} in cluster {} failed: {e}", ep.addr, ep.cluster);
                tracing::debug!(backend = %b.name, attempt, connect, "{msg}");
                last = Some(msg);
                tried.push(Arc::as_ptr(&ep) as usize);
                if connect || idem {
                    continue;
                }
                break;
            }
            Ok(Ok((mut up, resp))) => {
                let rtt = inflight.responded();
                b.metrics.latency.observe(rtt as f64 / 1e9);
                if resp.status >= 500 {
                    proxy.failure(&b, &ep);
                } else {
                    ep.record_success();
                }
                if let Some(c) = b.metrics.cluster(&ep.cluster) {
                    c.count(resp.status);
                }
                ubuf.advance(resp.len);
                let r = relay(io, &mut up, ubuf, out, resp.framing).await;
                drop(inflight);
                if let Err(Broken::Invalid(why)) = r {
                    proxy.failure(&b, &ep);
                    let msg = format!(
                        "upstream {} in cluster {} failed: invalid response body: {why}",
                        ep.addr, ep.cluster
                    );
                    return answer(
                        io,
                        proxy,
                        out,
                        StatusCode::BAD_GATEWAY,
                        "upstream_failed",
                        msg,
                        close_client,
                    )
                    .await;
                }
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
    let msg = last.unwrap_or_else(|| "upstream failed".into());
    answer(
        io,
        proxy,
        out,
        StatusCode::BAD_GATEWAY,
        "upstream_failed",
        msg,
        close_client,
    )
    .await
}

/// Answers with a response the proxy makes itself.
#[allow(clippy::too_many_arguments)]
async fn answer<T: AsyncWrite + Unpin>(
    io: &mut T,
    proxy: &Proxy,
    out: &mut Vec<u8>,
    status: StatusCode,
    reason: &'static str,
    msg: String,
    close: bool,
) -> Result<Served, Handoff> {
    error_response(proxy, out, status, reason, msg, close);
    Ok(match write(io, out).await {
        Ok(()) if !close => Served::KeepAlive,
        _ => Served::Close,
    })
}

/// An IO whose first reads return bytes already read from it (the engine's buffer,
/// handed to hyper).
pub struct Rewind<T> {
    pre: Bytes,
    io: T,
}

impl<T> Rewind<T> {
    /// Reads return `pre` first, then `io`'s bytes.
    pub fn new(io: T, pre: Bytes) -> Self {
        Rewind { pre, io }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pre.is_empty() {
            let n = this.pre.len().min(buf.remaining());
            buf.put_slice(&this.pre.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "h1_tests.rs"]
mod tests;
