//! The engine's byte-level HTTP/1.1: request heads it serves (and those it leaves to
//! hyper), the rewritten upstream request, and the client's response head made of the
//! upstream's. Writing upstream requests and parsing upstream responses (their framing,
//! RFC 9112 section 6.3) are [`crate::upstream::raw`]'s, shared with HTTP/2 clients.

use std::mem::MaybeUninit;
use std::ops::Range;

use crate::pipeline::{Conn, MAX_REPLAY};
use crate::target;
use crate::upstream;
#[cfg(test)]
use crate::upstream::raw::RespHead;
pub(super) use crate::upstream::raw::is_token;
use crate::upstream::raw::{self, Framing, Rewrite, Sink, trim};

/// The HTTP/2 connection preface. hyper-util's auto builder reads up to its length to
/// choose between HTTP/1.1 and HTTP/2.
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub use crate::upstream::raw::MAX_HEADERS;

/// Request headers `Connection` may not name on the engine: dropping them would
/// change the request's framing (a body sent without its length is a second request
/// to the upstream), lose its Host, or its id.
const KEPT: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "host",
    "x-request-id",
];

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

/// Writes the upstream request ([`raw::write_request`]): request line (with `target`
/// instead of the client's when the path was normalised), the client's headers minus
/// hop-by-hop ones (and those with `_` in their names unless `underscores`), the
/// forwarding headers, and the body.
pub(super) fn write_request(
    buf: &[u8],
    head: &ReqHead,
    conn: &Conn,
    target: Option<&str>,
    underscores: bool,
    out: &mut Vec<u8>,
) {
    let rw = Rewrite {
        forwarded: true,
        client_ip: conn.remote_ip.as_bytes(),
        https: conn.https,
        host: Some(&buf[head.host.clone()]),
        host_from_target: false,
        underscores,
        h2: false,
    };
    raw::write_request(
        &buf[head.method.clone()],
        target.map_or(&buf[head.target.clone()], str::as_bytes),
        head.headers
            .iter()
            .map(|(n, v)| (&buf[n.clone()], &buf[v.clone()])),
        Some(buf),
        |name| {
            head.named
                .iter()
                .any(|c| name.eq_ignore_ascii_case(&buf[c.clone()]))
        },
        &rw,
        &buf[head.len..head.len + head.body],
        out,
    );
}

/// The client's HTTP/1.1 response head, made of the upstream's (its headers as they
/// came, a `Date` when it had none, `Connection: close` when the client connection
/// closes after it).
pub(super) struct ClientHead<'a> {
    pub(super) out: &'a mut Vec<u8>,
    /// The client connection closes after this response.
    pub(super) close: bool,
}

/// The three digits of a status code (httparse reads exactly three).
fn status_digits(code: u16) -> [u8; 3] {
    let d = |n: u16| b'0' + (n % 10) as u8;
    [d(code / 100), d(code / 10), d(code)]
}

impl Sink for ClientHead<'_> {
    fn status(&mut self, code: u16, reason: &[u8], _headers: usize) {
        self.out.clear();
        self.out.extend_from_slice(b"HTTP/1.1 ");
        // (httparse skips empty lines before the status line: the code is not at a
        // fixed offset.)
        self.out.extend_from_slice(&status_digits(code));
        self.out.push(b' ');
        self.out.extend_from_slice(reason);
        self.out.extend_from_slice(b"\r\n");
    }

    fn header(
        &mut self,
        name: &[u8],
        value: &[u8],
        line: Option<&[u8]>,
    ) -> Result<(), upstream::Error> {
        raw::put_field(self.out, name, value, line);
        Ok(())
    }

    fn end(&mut self, date: bool, framing: Framing) {
        if !date {
            self.out.extend_from_slice(b"date: ");
            self.out.extend_from_slice(
                httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes(),
            );
            self.out.extend_from_slice(b"\r\n");
        }
        if self.close || framing == Framing::Close {
            self.out.extend_from_slice(b"connection: close\r\n");
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Parses an upstream response head and writes the client's head into `out`
/// ([`crate::upstream::raw::parse_response`] with a [`ClientHead`]).
#[cfg(test)]
pub(super) fn parse_response(
    buf: &[u8],
    head_request: bool,
    close_client: bool,
    out: &mut Vec<u8>,
) -> Result<Option<RespHead>, upstream::Error> {
    let mut sink = ClientHead {
        out,
        close: close_client,
    };
    crate::upstream::raw::parse_response(buf, head_request, &mut sink)
}
