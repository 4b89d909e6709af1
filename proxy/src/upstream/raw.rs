//! HTTP/1.1 with upstreams on plain pooled sockets ([`Raw`]), shared by the proxy's
//! own HTTP/1.1 engine ([`crate::h1`]) and the hyper path's HTTP/2 clients
//! ([`crate::forward`]): the request goes out as bytes on a connection taken from
//! the endpoint's pool (or a new one), the response head is parsed with httparse and
//! its framing found (RFC 9112 §6.3); what is made of the head is the caller's
//! ([`Sink`]: the client's HTTP/1.1 head as bytes, or an `http` header map for an
//! HTTP/2 stream). No task, channel or buffer lives between requests: an idle
//! upstream connection is a socket in its endpoint's pool.

use std::mem::MaybeUninit;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Error, Raw, Settings, connect_raw};
use crate::endpoint::Endpoint;
use crate::headers;
use crate::metrics::Metrics;

/// Most headers in a request or response head (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
mod body;

pub use body::BoxError;
pub(crate) use body::RawBody;

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
/// Whether `name` is one of [`headers::CLIENT_FORWARDING`] (one comparison at most
/// per header, by length first: this runs for every header of every request).
fn client_forwarding(name: &[u8]) -> bool {
    let [ff, fp, fh, f, real, port, prefix] = headers::CLIENT_FORWARDING;
    match name.len() {
        9 => is_token(name, f) || is_token(name, real),
        15 => is_token(name, ff),
        16 => is_token(name, fh) || is_token(name, port),
        17 => is_token(name, fp),
        18 => is_token(name, prefix),
        _ => false,
    }
}

#[cfg(test)]
#[test]
fn client_forwarding_is_the_list() {
    for name in headers::CLIENT_FORWARDING {
        assert!(client_forwarding(name.as_bytes()), "{name}");
        assert!(
            client_forwarding(name.to_ascii_uppercase().as_bytes()),
            "{name}"
        );
    }
    for other in [
        "x-forwarded",
        "forwarded-for",
        "x-request-id",
        "user-agent",
        "host",
    ] {
        assert!(!client_forwarding(other.as_bytes()), "{other}");
    }
}

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
    // At most two comparisons per name, chosen by its length (the list's: a test
    // checks they agree).
    match name.len() {
        2 => is_token(name, "te"),
        7 => is_token(name, "upgrade"),
        10 => is_token(name, "connection") || is_token(name, "keep-alive"),
        16 => is_token(name, "proxy-connection"),
        17 => !keep_te && is_token(name, "transfer-encoding"),
        18 => is_token(name, "proxy-authenticate"),
        19 => is_token(name, "proxy-authorization"),
        _ => false,
    }
}

/// A `Content-Length` value: one or more ASCII digits, at most `u64::MAX`.
pub(crate) fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The field line of header `name` with `value` in `buf`, from the name's first byte to
/// the value's last (the colon and the whitespace httparse allowed between them kept),
/// when both are slices of `buf` in that order (httparse's are) and the value is not
/// empty: one copy where the name, a separator and the value were three.
pub(crate) fn field_line<'b>(buf: &'b [u8], name: &[u8], value: &[u8]) -> Option<&'b [u8]> {
    let base = buf.as_ptr() as usize;
    let start = (name.as_ptr() as usize).checked_sub(base)?;
    let end = (value.as_ptr() as usize).checked_sub(base)? + value.len();
    // The name ends before the value starts (a colon at least between them).
    (!value.is_empty() && start + name.len() < end - value.len())
        .then(|| buf.get(start..end))
        .flatten()
}

/// Writes one field line and its CRLF: `line` whole when there is one ([`field_line`]),
/// else the name, `: ` and the value.
#[inline]
pub(crate) fn put_field(out: &mut Vec<u8>, name: &[u8], value: &[u8], line: Option<&[u8]>) {
    if let Some(line) = line {
        out.extend_from_slice(line);
    } else {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
    }
    out.extend_from_slice(b"\r\n");
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
    /// The status line (called first), and how many headers the upstream sent.
    fn status(&mut self, code: u16, reason: &[u8], headers: usize);
    /// One header, in order; `line` is its field line as sent (name, colon,
    /// whitespace, value: [`field_line`]) when there is one to copy whole.
    fn header(&mut self, name: &[u8], value: &[u8], line: Option<&[u8]>) -> Result<(), Error>;
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
    // (httparse takes any three digits; RFC 9110 §15: 100–599)
    if !(100..=599).contains(&status) {
        return Err(Error::Malformed("a status code outside 100-599"));
    }
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
            let n = decimal(trim(value)).ok_or(Error::Malformed("invalid Content-Length"))?;
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
    sink.status(
        status,
        resp.reason.unwrap_or("").as_bytes(),
        resp.headers.len(),
    );
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if hop_by_hop(name, true)
            || named.iter().any(|n| name.eq_ignore_ascii_case(n))
            // A Transfer-Encoding overrides Content-Length (which must then go).
            || (chunked.is_some() && is_token(name, "content-length"))
        {
            continue;
        }
        sink.header(name, h.value, field_line(buf, name, h.value))?;
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
    fn status(&mut self, code: u16, _reason: &[u8], headers: usize) {
        self.status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
        self.headers.clear();
        // Room for them all at once (hyper adds none to a response that has its
        // length and date).
        self.headers.reserve(headers);
    }

    // Inlined into the response path (it is also called for trailers, and LLVM
    // then made it a call: about 200 more instructions per HTTP/2 request).
    #[inline(always)]
    fn header(&mut self, name: &[u8], value: &[u8], _line: Option<&[u8]>) -> Result<(), Error> {
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

/// Whether a chunked response's trailer field `name` goes on to an HTTP/2 client: not a
/// hop-by-hop one (an HTTP/2 peer resets a stream whose trailers carry one), nor one
/// that framing, routing, authentication or the response's content handling needs
/// before the body (RFC 9110 §6.5.1; hyper's HTTP/1.1 writer leaves out the same list).
pub(crate) fn trailer_passed(name: &[u8]) -> bool {
    const NOT_IN_TRAILERS: [&str; 11] = [
        "authorization",
        "cache-control",
        "content-encoding",
        "content-length",
        "content-range",
        "content-type",
        "host",
        "max-forwards",
        "set-cookie",
        "trailer",
        "upgrade",
    ];
    !hop_by_hop(name, false) && !NOT_IN_TRAILERS.iter().any(|n| is_token(name, n))
}

/// Leaves in `trailers` (from an HTTP/1.1 upstream, as hyper's client decoded them) the
/// fields [`trailer_passed`] lets through.
pub(crate) fn keep_passed_trailers(trailers: &mut HeaderMap) {
    if trailers
        .keys()
        .all(|n| trailer_passed(n.as_str().as_bytes()))
    {
        return;
    }
    let mut name = None;
    for (n, v) in std::mem::take(trailers) {
        // The map's iterator names a field once, before its first value.
        if n.is_some() {
            name = n;
        }
        if let Some(n) = name
            .as_ref()
            .filter(|n| trailer_passed(n.as_str().as_bytes()))
        {
            trailers.append(n.clone(), v);
        }
    }
}

/// Parses a chunked response's trailer section (as [`Part::Trailers`] gave it: its
/// field lines and the empty line after them) into the trailers an HTTP/2 client gets
/// ([`trailer_passed`]); empty when there were none.
///
/// [`Part::Trailers`]: super::chunked::Part::Trailers
pub(crate) fn parse_trailers(section: &[u8]) -> Result<HeaderMap, Error> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let fields = match httparse::parse_headers(section, &mut slots) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        Ok(httparse::Status::Partial) => return Err(Error::Malformed("incomplete trailers")),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::Malformed("more than 100 trailer fields"));
        }
        Err(_) => return Err(Error::Malformed("unparsable trailers")),
    };
    let mut out = Fields::default();
    for f in fields.iter().filter(|f| trailer_passed(f.name.as_bytes())) {
        out.header(f.name.as_bytes(), f.value, None)?;
    }
    Ok(out.headers)
}

/// What the proxy changes in a request it forwards, besides dropping hop-by-hop
/// headers.
pub(crate) struct Rewrite<'a> {
    /// Write the forwarding headers (false: `headers` has them already, as the hyper
    /// path set them, and then no header is replaced).
    pub(crate) forwarded: bool,
    /// The client's address: the last X-Forwarded-For element.
    pub(crate) client_ip: &'a [u8],
    /// The client came over TLS (X-Forwarded-Proto).
    pub(crate) https: bool,
    /// The client's host (Host, or the target's authority): X-Forwarded-Host.
    pub(crate) host: Option<&'a [u8]>,
    /// `host` came in the request target (HTTP/2's `:authority`): it is sent as Host,
    /// instead of any Host header.
    pub(crate) host_from_target: bool,
    /// Keep headers with `_` in their names.
    pub(crate) underscores: bool,
    /// An HTTP/2 client's request: its Cookie headers are joined into one (RFC 9113
    /// §8.2.3: an HTTP/1.1 server may read only the first), and a body without a
    /// `Content-Length` (or a method that takes one) gets one.
    pub(crate) h2: bool,
}

/// Writes an HTTP/1.1 request for an upstream: the request line, the client's
/// `headers` (name, value) minus hop-by-hop ones, those `named` by its `Connection`,
/// those with `_` in their names unless allowed, and the forwarding headers it
/// replaces; a `Host` (empty when the request has no authority: RFC 9112 §3.2);
/// then (unless `headers` has them already) `X-Forwarded-For` (the client's
/// list, then the client), `-Proto`, `-Host`, an `X-Request-Id` when it had none;
/// then `body`. When `headers` are slices of `src` (the HTTP/1.1 engine's buffer), a
/// kept field line is copied whole ([`field_line`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_request<'h>(
    method: &[u8],
    target: &[u8],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    src: Option<&[u8]>,
    named: impl Fn(&[u8]) -> bool,
    rw: &Rewrite<'_>,
    body: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(method);
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff: Vec<&[u8]> = Vec::new();
    let mut cookies: Vec<&[u8]> = Vec::new();
    let (mut id, mut length, mut host) = (false, false, false);
    for (name, value) in headers {
        if !rw.underscores && headers::underscored(name) {
            continue;
        }
        if hop_by_hop(name, false) || (rw.forwarded && client_forwarding(name)) {
            if is_token(name, "x-forwarded-for") && !trim(value).is_empty() {
                xff.push(value);
            }
            continue;
        }
        if named(name) {
            continue;
        }
        match name.len() {
            4 if is_token(name, "host") => {
                if rw.host_from_target {
                    continue;
                }
                host = true;
            }
            6 if rw.h2 && is_token(name, "cookie") => {
                cookies.push(value);
                continue;
            }
            12 if is_token(name, "x-request-id") => id = true,
            14 if is_token(name, "content-length") => length = true,
            _ => {}
        }
        put_field(
            out,
            name,
            value,
            src.and_then(|b| field_line(b, name, value)),
        );
    }
    if let Some((first, rest)) = cookies.split_first() {
        out.extend_from_slice(b"cookie: ");
        out.extend_from_slice(first);
        for c in rest {
            out.extend_from_slice(b"; ");
            out.extend_from_slice(c);
        }
        out.extend_from_slice(b"\r\n");
    }
    match rw.host.filter(|_| rw.host_from_target) {
        Some(h) => {
            out.extend_from_slice(b"host: ");
            out.extend_from_slice(h);
            out.extend_from_slice(b"\r\n");
        }
        // No authority (an HTTP/2 request without `:authority` or Host): HTTP/1.1
        // needs a Host all the same, empty then (RFC 9112 §3.2).
        None if !host => out.extend_from_slice(b"host: \r\n"),
        None => {}
    }
    if rw.forwarded {
        out.extend_from_slice(b"x-forwarded-for: ");
        for prev in xff {
            out.extend_from_slice(prev);
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(rw.client_ip);
        out.extend_from_slice(if rw.https {
            b"\r\nx-forwarded-proto: https\r\n"
        } else {
            b"\r\nx-forwarded-proto: http\r\n"
        });
        if let Some(host) = rw.host {
            out.extend_from_slice(b"x-forwarded-host: ");
            out.extend_from_slice(host);
            out.extend_from_slice(b"\r\n");
        }
    }
    if rw.forwarded && !id {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(&headers::request_id_hex());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = matches!(method, b"GET" | b"HEAD" | b"DELETE" | b"OPTIONS" | b"TRACE");
    if rw.h2 && !length && (!body.is_empty() || !bodiless) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// Sends `req` to `ep` on a pooled connection (or a new one; `now` is
/// [`crate::clock::now_nanos`], read by the caller) and reads the response head (into
/// `ubuf`, from its start, in the space the caller reserved, grown by [`READ_CHUNK`]
/// when less than 1 KiB is left), given to `sink`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn exchange(
    ep: &Arc<Endpoint>,
    now: u64,
    req: &[u8],
    idem: bool,
    head_request: bool,
    settings: Settings,
    metrics: &Metrics,
    ubuf: &mut BytesMut,
    sink: &mut impl Sink,
) -> Result<(Raw, RespHead), Error> {
    'conn: loop {
        let (mut c, reused) = match ep.pool.checkout_raw(now) {
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

#[cfg(test)]
#[path = "raw/tests.rs"]
mod tests;
