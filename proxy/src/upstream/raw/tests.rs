//! The request writer's HTTP/2 side (the HTTP/1.1 side is in h1's tests).

use super::{
    Fields, Rewrite, decimal, field_line, hop_by_hop, keep_passed_trailers, parse_response,
    parse_trailers, write_request,
};
use crate::headers::HOP_BY_HOP;

/// An HTTP/2 client's request ([`Rewrite::h2`]); HTTP/1.1 ones are in h1's tests.
#[test]
fn an_http2_clients_request() {
    let rw = |host, from_target, underscores| Rewrite {
        forwarded: true,
        client_ip: b"10.0.0.9",
        https: false,
        host,
        host_from_target: from_target,
        underscores,
        h2: true,
    };
    let fwd = "x-forwarded-for: 10.0.0.9\r\nx-forwarded-proto: http\r\n";
    let xfh = "x-forwarded-host: a.test\r\n";
    let headers: &[(&str, &str)] = &[
        ("host", "ignored.test"),
        ("cookie", "a=1"),
        ("x-a", "1"),
        ("te", "trailers"),
        ("x_u", "1"),
        ("cookie", "b=2"),
        ("x-forwarded-for", "1.1.1.1"),
        ("x-forwarded-host", "evil"),
        ("x-request-id", "abc"),
    ];
    for (method, rw, body, want) in [
        (
            "GET",
            rw(Some(&b"a.test"[..]), true, false),
            "",
            format!(
                "GET /p?q HTTP/1.1\r\nx-a: 1\r\nx-request-id: abc\r\ncookie: a=1; b=2\r\n\
                 host: a.test\r\nx-forwarded-for: 1.1.1.1, 10.0.0.9\r\n\
                 x-forwarded-proto: http\r\n{xfh}\r\n"
            ),
        ),
        // The Host header stays when the target had no authority; `_` allowed.
        (
            "GET",
            rw(Some(&b"a.test"[..]), false, true),
            "",
            format!(
                "GET /p?q HTTP/1.1\r\nhost: ignored.test\r\nx-a: 1\r\nx_u: 1\r\n\
                 x-request-id: abc\r\ncookie: a=1; b=2\r\n\
                 x-forwarded-for: 1.1.1.1, 10.0.0.9\r\n\
                 x-forwarded-proto: http\r\n{xfh}\r\n"
            ),
        ),
    ] {
        let mut out = Vec::new();
        let it = headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
        write_request(
            method.as_bytes(),
            b"/p?q",
            it,
            None,
            |_| false,
            &rw,
            body.as_bytes(),
            &mut out,
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
    // Lengths: a body, or a method that takes one, gets one; a client's stays once;
    // no host at all: an empty Host (HTTP/1.1 needs one; once, when the map has it
    // already), a request id is made.
    for (method, headers, body, want) in [
        ("GET", &[][..], "", ""),
        ("GET", &[("host", "")][..], "", ""),
        ("HEAD", &[][..], "", ""),
        ("POST", &[][..], "", "content-length: 0\r\n"),
        ("GET", &[][..], "ab", "content-length: 2\r\n"),
        ("PUT", &[("content-length", "2")][..], "ab", ""),
    ] {
        let mut out = Vec::new();
        let it = headers
            .iter()
            .map(|(n, v): &(&str, &str)| (n.as_bytes(), v.as_bytes()));
        write_request(
            method.as_bytes(),
            b"/",
            it,
            None,
            |_| false,
            &rw(None, false, false),
            body.as_bytes(),
            &mut out,
        );
        let out = String::from_utf8(out).unwrap();
        let (head, rest) = out.split_once("x-request-id: ").unwrap();
        let given: String = headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .collect();
        let host = if given.contains("host") {
            ""
        } else {
            "host: \r\n"
        };
        assert_eq!(head, format!("{method} / HTTP/1.1\r\n{given}{host}{fwd}"));
        assert_eq!(
            &rest[32..],
            format!("\r\n{want}\r\n{body}"),
            "{method} {body:?}"
        );
    }
}

#[test]
fn hop_by_hop_names_are_the_lists() {
    for name in HOP_BY_HOP.iter().map(|n| n.as_str()).chain(["upgrade"]) {
        for n in [name.to_string(), name.to_ascii_uppercase()] {
            assert!(hop_by_hop(n.as_bytes(), false), "{n}");
            assert_eq!(
                hop_by_hop(n.as_bytes(), true),
                name != "transfer-encoding",
                "{n}"
            );
        }
    }
    for n in [
        "t",
        "tee",
        "content-length",
        "connections",
        "keep-alive2",
        "x-upgrade",
        // End-to-end (RFC 9110 §7.6.1 does not list it).
        "trailer",
        "",
    ] {
        assert!(!hop_by_hop(n.as_bytes(), false), "{n}");
    }
}

/// A chunked response's trailer section as an HTTP/2 client gets it: end-to-end fields
/// in order, hop-by-hop and framing ones left out; a broken section is an error.
#[test]
fn trailer_sections() {
    let ok: &[(&str, &[(&str, &str)])] = &[
        ("\r\n", &[]),
        ("x-checksum: abc\r\n\r\n", &[("x-checksum", "abc")]),
        (
            "X-A: 1\r\nx-a: 2\r\ngrpc-status: 0\r\n\r\n",
            &[("x-a", "1"), ("x-a", "2"), ("grpc-status", "0")],
        ),
        (
            "connection: close\r\nkeep-alive: 1\r\nte: trailers\r\ntrailer: x\r\n\
             transfer-encoding: chunked\r\nupgrade: h2c\r\ncontent-length: 5\r\n\
             content-type: a/b\r\nhost: h\r\nset-cookie: a=1\r\nauthorization: x\r\n\
             x-kept: 1\r\n\r\n",
            &[("x-kept", "1")],
        ),
    ];
    for (section, want) in ok {
        let got = parse_trailers(section.as_bytes()).unwrap();
        let got: Vec<_> = got
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(&got, want, "{section:?}");
    }
    let bad: &[(&str, &str)] = &[
        ("not a field\r\n\r\n", "unparsable trailers"),
        ("x: 1\r\n", "incomplete trailers"),
        ("x\x01y: 1\r\n\r\n", "unparsable trailers"),
    ];
    for (section, why) in bad {
        let err = parse_trailers(section.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid response: {why}"),
            "{section:?}"
        );
    }
    let many = "x: 1\r\n".repeat(101) + "\r\n";
    let err = parse_trailers(many.as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid response: more than 100 trailer fields"
    );
}

/// Trailers hyper's client decoded keep the same fields as a parsed section, in order.
#[test]
fn decoded_trailers() {
    let map = |fields: &[(&'static str, &'static str)]| {
        let mut m = http::HeaderMap::new();
        for (n, v) in fields {
            m.append(*n, http::HeaderValue::from_static(v));
        }
        m
    };
    for (given, want) in [
        (&[("x-a", "1")][..], &[("x-a", "1")][..]),
        (
            &[
                ("x-a", "1"),
                ("connection", "close"),
                ("x-a", "2"),
                ("content-length", "5"),
                ("grpc-status", "0"),
            ],
            &[("x-a", "1"), ("x-a", "2"), ("grpc-status", "0")],
        ),
        (&[("te", "trailers"), ("keep-alive", "1")], &[]),
    ] {
        let mut got = map(given);
        keep_passed_trailers(&mut got);
        assert_eq!(got, map(want), "{given:?}");
    }
}

#[test]
fn content_length_values() {
    let cases: [(&[u8], Option<u64>); 9] = [
        (b"0", Some(0)),
        (b"100", Some(100)),
        (b"007", Some(7)),
        (b"18446744073709551615", Some(u64::MAX)),
        (b"18446744073709551616", None),
        (b"", None),
        (b"+1", None),
        (b"1 2", None),
        (b"0x10", None),
    ];
    for (v, want) in cases {
        assert_eq!(decimal(v), want, "{:?}", String::from_utf8_lossy(v));
    }
}

#[test]
fn field_lines_in_the_buffer() {
    let buf = b"X-A: 1\r\nX-B:\r\n";
    let (a, one) = (&buf[0..3], &buf[5..6]);
    let other = b"X-A: 1".to_vec();
    /// (name, value, the line expected)
    type Case<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>);
    let cases: [Case<'_>; 5] = [
        (a, one, Some(b"X-A: 1")),
        // An empty value: no line to copy.
        (&buf[8..11], &buf[12..12], None),
        // Not in that order, or overlapping.
        (one, a, None),
        (a, &buf[2..6], None),
        // A value from another buffer.
        (a, &other[5..6], None),
    ];
    for (name, value, want) in cases {
        assert_eq!(field_line(buf, name, value), want, "{name:?} {value:?}");
    }
}

/// RFC 9110 §15: a status code is 100–599; any other three digits (httparse takes
/// them) is a malformed response, not an interim one skipped nor one passed on.
#[test]
fn status_codes_outside_100_to_599_are_malformed() {
    for (head, ok) in [
        ("HTTP/1.1 042 X\r\n\r\n", false),
        ("HTTP/1.1 000 X\r\n\r\n", false),
        ("HTTP/1.1 600 X\r\ncontent-length: 0\r\n\r\n", false),
        ("HTTP/1.1 999 X\r\ncontent-length: 0\r\n\r\n", false),
        ("HTTP/1.1 100 Continue\r\n\r\n", true),
        ("HTTP/1.1 599 X\r\ncontent-length: 0\r\n\r\n", true),
    ] {
        let got = parse_response(head.as_bytes(), false, &mut Fields::default());
        assert_eq!(got.is_ok(), ok, "{head:?}");
    }
}
