//! Unit tests of the HTTP/1.1 engine's parsing and framing.

use proptest::prelude::*;

use super::*;
use crate::upstream::chunked::Part;

fn classify(req: &str) -> Parse {
    parse_request(req.as_bytes(), &mut ReqHead::default())
}

#[test]
fn requests_the_engine_serves_and_those_it_hands_to_hyper() {
    use Parse::*;
    let cases: &[(&str, Parse)] = &[
        ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", Fast),
        ("GET /x?y=1 HTTP/1.1\r\nhost: a\r\nX-A: 1\r\n\r\n", Fast),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 65536\r\n\r\n",
            Fast,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Fast,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-y\r\n\r\n",
            Fast,
        ),
        ("GET / HTTP/1.1\r\nHost: a\r\n", Partial),
        ("GET / HTT", Partial),
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Slow),
        ("GET / HTTP/1.0\r\nHost: a\r\n\r\n", Slow),
        ("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", Slow),
        ("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", Slow),
        ("GET / HTTP/1.1\r\n\r\n", Slow),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Slow),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            Slow,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            Slow,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
            Slow,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 65537\r\n\r\n",
            Slow,
        ),
        (
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
            Slow,
        ),
        (
            "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
            Slow,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            Slow,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n",
            Slow,
        ),
        ("GET / HTTP/1.1\r\nHost : a\r\n\r\n", Slow),
        ("CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", Slow),
        // Connection may not name what the rewrite must keep.
        (
            "POST / HTTP/1.1\r\nHost: a\r\nConnection: close, Content-Length\r\nContent-Length: 1\r\n\r\n",
            Slow,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: host\r\n\r\n",
            Slow,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: x-request-id\r\n\r\n",
            Slow,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: transfer-encoding\r\n\r\n",
            Slow,
        ),
        ("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", Slow),
    ];
    for (req, want) in cases {
        assert_eq!(&classify(req), want, "{req:?}");
    }
    let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
    assert_eq!(
        classify(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")),
        Slow
    );
}

#[test]
fn the_upstream_request_is_rewritten() {
    // Field lines are copied as sent (X-Tight's missing space, X-Wide's tab).
    let raw = b"POST /p?q HTTP/1.1\r\nHost: h\r\nConnection: x-drop, close\r\nX-Drop: 1\r\n\
                TE: trailers\r\nX-Forwarded-For: 1.1.1.1\r\nX-Request-Id: abc\r\n\
                X-Tight:1\r\nX-Wide:\t2\r\nCookie: a=1\r\nContent-Length: 3\r\n\r\nxyz";
    let mut head = ReqHead::default();
    assert_eq!(parse_request(raw, &mut head), Parse::Fast);
    assert!(head.close);
    let conn = Conn::new("10.1.2.3:5555".parse().unwrap(), true);
    let mut out = Vec::new();
    write_request(raw, &head, &conn, None, false, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /p?q HTTP/1.1\r\nHost: h\r\nX-Request-Id: abc\r\nX-Tight:1\r\nX-Wide:\t2\r\n\
         Cookie: a=1\r\n\
         Content-Length: 3\r\nx-forwarded-for: 1.1.1.1, 10.1.2.3\r\n\
         x-forwarded-proto: https\r\nx-forwarded-host: h\r\n\r\nxyz"
    );
}

/// (status, framing, reusable) of a parsed response head, or the error.
type Framed = Result<Option<(u16, Framing, bool)>, String>;

fn framing(resp: &str, head_request: bool) -> Framed {
    let mut out = Vec::new();
    parse_response(resp.as_bytes(), head_request, false, &mut out)
        .map(|h| h.map(|h| (h.status, h.framing, h.reusable)))
        .map_err(|e| e.to_string())
}

#[test]
fn upstream_response_framing() {
    use Framing::*;
    let ok = |s, f, r| Ok(Some((s, f, r)));
    let cases: &[(&str, bool, Framed)] = &[
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            false,
            ok(200, Length(5), true),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            false,
            ok(200, Length(5), true),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            ok(200, Chunked, true),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n",
            false,
            ok(200, Chunked, true),
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            false,
            ok(200, Close, false),
        ),
        ("HTTP/1.1 200 OK\r\n\r\n", false, ok(200, Close, false)),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
            false,
            ok(200, Length(5), false),
        ),
        (
            "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n",
            false,
            ok(200, Length(5), false),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            true,
            ok(200, Empty, true),
        ),
        (
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false,
            ok(204, Empty, true),
        ),
        (
            "HTTP/1.1 304 Not Modified\r\n\r\n",
            false,
            ok(304, Empty, true),
        ),
        (
            "HTTP/1.1 103 Early Hints\r\n\r\n",
            false,
            ok(103, Empty, false),
        ),
        ("HTTP/1.1 200 OK\r\nContent-Le", false, Ok(None)),
        (
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            false,
            Err(
                "invalid response: 101 Switching Protocols to a request that did not ask for it"
                    .into(),
            ),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            false,
            Err("invalid response: conflicting Content-Length".into()),
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            false,
            Err("invalid response: invalid Content-Length".into()),
        ),
        (
            "HTTP/1.1 2x0 OK\r\n\r\n",
            false,
            Err("invalid response: unparsable response head".into()),
        ),
    ];
    for (resp, head, want) in cases {
        assert_eq!(&framing(resp, *head), want, "{resp:?}");
    }
}

#[test]
fn the_client_response_head() {
    let mut out = Vec::new();
    let resp = b"HTTP/1.0 404 Gone Away\r\nConnection: x-a\r\nX-A: 1\r\nKeep-Alive: t=1\r\n\
                 Transfer-Encoding: chunked\r\nContent-Length: 7\r\nDate: d\r\nX-B: 2\r\n\r\n";
    let h = parse_response(resp, false, true, &mut out)
        .unwrap()
        .unwrap();
    assert_eq!(h.len, resp.len());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 404 Gone Away\r\nTransfer-Encoding: chunked\r\nDate: d\r\nX-B: 2\r\n\
         connection: close\r\n\r\n"
    );
}

#[test]
fn the_client_head_copies_field_lines_as_sent() {
    // Each kept field line is copied whole (one copy, the upstream's spacing kept);
    // an empty value is written as name and separator.
    let mut out = Vec::new();
    let resp = b"HTTP/1.1 200 OK\r\nX-Tight:1\r\nX-Wide: \t two words\r\nX-Empty:\r\n\
                 Content-Length: 0\r\nDate: d\r\n\r\n";
    parse_response(resp, false, false, &mut out)
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nX-Tight:1\r\nX-Wide: \t two words\r\nX-Empty: \r\n\
         Content-Length: 0\r\nDate: d\r\n\r\n"
    );
}

#[test]
fn the_client_head_keeps_status_and_framing() {
    // httparse skips empty lines before the status line.
    let mut out = Vec::new();
    let resp = b"\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    let h = parse_response(resp, false, false, &mut out)
        .unwrap()
        .unwrap();
    assert_eq!((h.status, h.len), (200, resp.len()));
    assert!(
        out.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    // A Connection header naming a framing header does not remove it: the body goes
    // on as framed.
    for (resp, kept) in [
        (
            &b"HTTP/1.1 200 OK\r\nConnection: content-length, x-a\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n"[..],
            "Content-Length: 2\r\n",
        ),
        (
            &b"HTTP/1.1 200 OK\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            "Transfer-Encoding: chunked\r\n",
        ),
    ] {
        let mut out = Vec::new();
        parse_response(resp, false, false, &mut out).unwrap().unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(kept) && !out.contains("X-A"), "{out}");
    }
}

#[test]
fn chunked_bodies() {
    let ok: &[(&str, usize)] = &[
        ("0\r\n\r\n", 5),
        ("5\r\nhello\r\n0\r\n\r\n", 15),
        ("5;a=b\r\nhello\r\n0\r\n\r\nNEXT", 19),
        ("A\r\n0123456789\r\n0\r\nx-t: 1\r\ny: 2\r\n\r\n", 34),
        ("a \r\n0123456789\r\n0\r\n\r\n", 21),
    ];
    for (body, end) in ok {
        assert_eq!(
            Chunked::default().feed(body.as_bytes()),
            Ok(Some(*end)),
            "{body:?}"
        );
    }
    let bad: &[(&str, &str)] = &[
        ("zz\r\n", "invalid chunk size"),
        ("\r\n", "invalid chunk size"),
        ("5\nhello", "invalid chunk size"),
        ("5\rhello", "chunk size line not ended by CRLF"),
        ("5\r\nhelloX", "chunk not ended by CRLF"),
        ("1000000000000000\r\n", "chunk size too large"),
        ("0\r\nx\n", "trailer line not ended by CRLF"),
        ("1;\x01\r\n", "invalid chunk extension"),
    ];
    for (body, why) in bad {
        assert_eq!(
            Chunked::default().feed(body.as_bytes()),
            Err(*why),
            "{body:?}"
        );
    }
    assert_eq!(Chunked::default().feed(b"5\r\nhel"), Ok(None));
}

proptest! {
    /// A chunked body fed in pieces ends at the same byte as fed whole, and its data
    /// (as decoded for HTTP/2 clients) is the chunks' contents.
    #[test]
    fn chunked_in_pieces(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut body = Vec::new();
        for c in &chunks {
            body.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            body.extend_from_slice(c);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\nt: 1\r\n\r\nrest");
        let end = body.len() - 4;
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(body.len())).collect();
        at.push(0);
        at.push(body.len());
        at.sort_unstable();
        at.dedup();
        let mut c = Chunked::default();
        let mut found = None;
        let (mut data, mut trailers) = (Vec::new(), Vec::new());
        for w in at.windows(2) {
            let piece = &body[w[0]..w[1]];
            let end = c.decode(piece, |part, r| match part {
                Part::Data => data.extend_from_slice(&piece[r]),
                Part::Trailers => trailers.extend_from_slice(&piece[r]),
            });
            if let Some(n) = end.unwrap() {
                found = Some(w[0] + n);
                break;
            }
        }
        prop_assert_eq!(found, Some(end));
        prop_assert_eq!(data, chunks.concat());
        prop_assert_eq!(&trailers[..], &b"t: 1\r\n\r\n"[..]);
    }

    /// Any head the engine serves names one host and at most 64 KiB of body, and its
    /// rewrite parses again as a request with the same method, target and body.
    #[test]
    fn rewritten_requests_parse(
        method in prop::sample::select(vec!["GET", "POST", "PUT", "DELETE"]),
        path in "/[a-z0-9/?=&]{0,20}",
        headers in proptest::collection::vec(("[a-zA-Z][a-zA-Z0-9-]{0,12}", "[ -~]{0,20}"), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: h\r\n");
        for (n, v) in &headers {
            raw.push_str(&format!("{n}: {v}\r\n"));
        }
        raw.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut raw = raw.into_bytes();
        raw.extend_from_slice(&body);
        let mut head = ReqHead::default();
        if parse_request(&raw, &mut head) != Parse::Fast {
            return Ok(());
        }
        let conn = Conn::new("127.0.0.1:1".parse().unwrap(), false);
        let mut out = Vec::new();
        write_request(&raw, &head, &conn, None, false, &mut out);
        let mut again = ReqHead::default();
        prop_assert_eq!(parse_request(&out, &mut again), Parse::Fast);
        prop_assert_eq!(&out[again.method.clone()], method.as_bytes());
        prop_assert_eq!(&out[again.target.clone()], path.as_bytes());
        prop_assert_eq!(&out[again.len..again.len + again.body], &body[..]);
        prop_assert_eq!(out.len(), again.len + again.body);
    }
}
