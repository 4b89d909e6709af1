//! The engine's byte-level HTTP/1.1: request heads it serves (and those it leaves to
//! hyper), the rewritten upstream request, and upstream response heads with their
//! framing (RFC 9112 section 6.3) and the client's response head.

use std::mem::MaybeUninit;
use std::ops::Range;

use http::HeaderName;

use crate::headers;
use crate::pipeline::{Conn, MAX_REPLAY};
use crate::target;
use crate::upstream;

/// The HTTP/2 connection preface. hyper-util's auto builder reads up to its length to
/// choose between HTTP/1.1 and HTTP/2.
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Most headers in a request or response head (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// Largest upstream response head.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;

/// Whether `name` is a hop-by-hop header (RFC 9110 section 7.6.1; the list is
/// [`headers::HOP_BY_HOP`] and `Upgrade`), `Transfer-Encoding` aside when `keep_te`:
/// a response body goes on as the upstream framed it (the engine forwards no request
/// that has one).
fn hop_by_hop(name: &[u8], keep_te: bool) -> bool {
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

/// Request headers `Connection` may not name on the engine: dropping them would
/// change the request's framing (a body sent without its length is a second request
/// to the upstream), lose its Host, or its id.
const KEPT: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "host",
    "x-request-id",
];

/// Request headers the proxy replaces with its own.
const REPLACED: [&str; 3] = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"];

/// A parsed request head, as offsets into the connection's buffer.
#[derive(Debug, Default)]
pub(super) struct ReqHead {
    /// Length of the head.
    pub(super) len: usize,
    pub(super) method: Range<usize>,
    /// The request target (origin-form, query included).
    pub(super) target: Range<usize>,
    /// (name, value) of every header, in order.
    pub(super) headers: Vec<(Range<usize>, Range<usize>)>,
    /// The value of `Host`.
    pub(super) host: Range<usize>,
    /// The body's length.
    pub(super) body: usize,
    /// The client asked to close after this response (`Connection: close`).
    pub(super) close: bool,
    /// Header names listed in `Connection` (hop-by-hop too).
    pub(super) named: Vec<Range<usize>>,
    pub(super) has_request_id: bool,
}

/// What a request head is, for the engine.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parse {
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

pub(super) fn is_token(name: &[u8], of: &str) -> bool {
    name.eq_ignore_ascii_case(of.as_bytes())
}

fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

/// Parses the request head at the start of `buf` into `head`.
pub(super) fn parse_request(buf: &[u8], head: &mut ReqHead) -> Parse {
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
    // CONNECT opens a tunnel (and its target is never origin-form anyway).
    if !path.starts_with('/') || method == "CONNECT" {
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
                    } else if KEPT.iter().any(|k| is_token(t, k)) {
                        // Headers the rewrite must keep (framing, Host, the request id):
                        // hyper's path strips and re-adds them.
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
    // Not exactly one valid Host: hyper's path answers 400 (crate::target).
    if hosts != 1
        || !target::valid_host(&buf[head.host.clone()])
        || lengths > 1
        || head.body as u64 > MAX_REPLAY
    {
        return Parse::Slow;
    }
    Parse::Fast
}

/// Writes the upstream request: request line (with `target` instead of the client's
/// when the path was normalised), the client's headers minus hop-by-hop ones (and
/// those with `_` in their names unless `underscores`), the forwarding headers, and
/// the body.
pub(super) fn write_request(
    buf: &[u8],
    head: &ReqHead,
    conn: &Conn,
    target: Option<&str>,
    underscores: bool,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&buf[head.method.clone()]);
    out.push(b' ');
    match target {
        Some(t) => out.extend_from_slice(t.as_bytes()),
        None => out.extend_from_slice(&buf[head.target.clone()]),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff: Vec<&[u8]> = Vec::new();
    for (n, v) in &head.headers {
        let name = &buf[n.clone()];
        if !underscores && headers::underscored(name) {
            continue;
        }
        if hop_by_hop(name, false)
            || (matches!(name.len(), 15..=17) && REPLACED.iter().any(|d| is_token(name, d)))
        {
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
        out.extend_from_slice(&crate::headers::request_id_hex());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&buf[head.len..head.len + head.body]);
}

/// How an upstream response's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
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
pub(super) struct RespHead {
    /// Length of the head in the upstream buffer.
    pub(super) len: usize,
    pub(super) status: u16,
    pub(super) framing: Framing,
    /// The upstream connection can carry another request after this response.
    pub(super) reusable: bool,
}

/// The three digits of a status code (httparse reads exactly three).
fn status_digits(code: u16) -> [u8; 3] {
    let d = |n: u16| b'0' + (n % 10) as u8;
    [d(code / 100), d(code / 10), d(code)]
}

/// Parses an upstream response head and writes the client's head into `out`.
/// `Ok(None)`: more bytes needed. Interim (1xx) responses are `Ok(Some)` with status
/// below 200: the caller skips them.
pub(super) fn parse_response(
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
    // (httparse skips empty lines before the status line: the code is not at a fixed
    // offset.)
    out.extend_from_slice(&status_digits(status));
    out.push(b' ');
    out.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if hop_by_hop(name, true)
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
