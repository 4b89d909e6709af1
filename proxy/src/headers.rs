//! Request and response header rewriting: hop-by-hop headers (RFC 9110 §7.6.1)
//! stripped, `X-Forwarded-For/-Proto/-Host` and `X-Request-Id` added, Host kept.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::clock::rand_u64;

/// Hop-by-hop headers (RFC 9110 section 7.6.1) besides `Upgrade`, and the proxy
/// authentication ones (meant for a proxy). Not `Trailer`: it is end-to-end, and
/// hyper's HTTP/1.1 writer sends only the trailers it announces.
pub(crate) static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
];

/// `X-Forwarded-For`.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Request-Id`.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Whether the request asks for a protocol upgrade (HTTP/1.1 `Connection: upgrade`).
pub fn is_upgrade(h: &HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
        && h.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// Whether every protocol the request's `Upgrade` lists (`name[/version]`) is in
/// `allowed` (lowercase names).
pub fn upgrade_allowed(h: &HeaderMap, allowed: &[String]) -> bool {
    let mut any = false;
    for v in h.get_all(header::UPGRADE) {
        let Ok(s) = v.to_str() else { return false };
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let name = p.split('/').next().unwrap_or(p).trim();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
                return false;
            }
            any = true;
        }
    }
    any
}

/// Whether a request header name has an underscore: such headers are dropped unless
/// the MCI allows them (`causeway.io/underscores-in-headers`, as nginx's
/// `underscores_in_headers`): `X_Forwarded_For` or `Transfer_Encoding` may reach an
/// application that reads `_` as `-` (CGI-style environments) as the header it
/// resembles.
#[inline]
pub fn underscored(name: &[u8]) -> bool {
    name.contains(&b'_')
}

/// Removes the headers whose names have an underscore; allocates only when there are.
pub fn strip_underscored(h: &mut HeaderMap) {
    if !h.keys().any(|k| underscored(k.as_str().as_bytes())) {
        return;
    }
    let names: Vec<HeaderName> = h
        .keys()
        .filter(|k| underscored(k.as_str().as_bytes()))
        .cloned()
        .collect();
    for n in names {
        h.remove(n);
    }
}

/// Removes hop-by-hop headers, including those named in `Connection`. With `upgrade`,
/// `Connection: upgrade` and `Upgrade` are kept (they are the point of the request).
///
/// This runs twice per proxied request, so it scans the (few) header names once and
/// hashes only for the headers it really removes.
pub fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
    // Headers named by `Connection` other than the ones removed below anyway; this
    // allocates only when there are such names (rare).
    let mut named: Vec<HeaderName> = Vec::new();
    for v in h.get_all(header::CONNECTION) {
        let Ok(s) = v.to_str() else { continue };
        for t in s.split(',').map(str::trim) {
            let standard = t.is_empty()
                || t.eq_ignore_ascii_case("close")
                || t.eq_ignore_ascii_case("upgrade")
                || HOP_BY_HOP
                    .iter()
                    .any(|n| t.eq_ignore_ascii_case(n.as_str()));
            if !standard && let Ok(n) = HeaderName::from_bytes(t.as_bytes()) {
                named.push(n);
            }
        }
    }
    for n in named {
        h.remove(n);
    }
    // Which of the fixed hop-by-hop headers are present (bit i: HOP_BY_HOP[i]; bit 7:
    // Upgrade).
    let mut present = 0u16;
    for k in h.keys() {
        // Cheap length filter first: most names cannot be hop-by-hop.
        if !matches!(k.as_str().len(), 2 | 7 | 10 | 16..=19) {
            continue;
        }
        if let Some(i) = HOP_BY_HOP.iter().position(|n| n == k) {
            present |= 1 << i;
        } else if k == header::UPGRADE {
            present |= 1 << HOP_BY_HOP.len();
        }
    }
    for (i, n) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            h.remove(n);
        }
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else if present & (1 << HOP_BY_HOP.len()) != 0 {
        h.remove(header::UPGRADE);
    }
}

/// The client's address as an `X-Forwarded-For` element, rendered once per
/// downstream connection.
pub fn client_ip_value(ip: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&ip.to_string()).expect("an IP address is a valid header value")
}

/// The forwarding headers a client may send that the proxy does not pass on: the
/// first three it replaces with its own (X-Forwarded-For appended to), the others it
/// drops, so a backend that trusts one (Spring's `Forwarded` filter, an app moved from
/// ingress-nginx reading `X-Real-IP`) never takes a client's word for its address,
/// scheme or host (RFC 7239 §8.1).
pub(crate) const CLIENT_FORWARDING: [&str; 7] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "x-real-ip",
    "x-forwarded-port",
    "x-forwarded-prefix",
];

/// The [`CLIENT_FORWARDING`] headers the proxy drops rather than sets, parsed once
/// (a name given as `&str` is parsed and hashed again at each lookup).
static DROPPED_FORWARDING: [HeaderName; 4] = [
    HeaderName::from_static(CLIENT_FORWARDING[3]),
    HeaderName::from_static(CLIENT_FORWARDING[4]),
    HeaderName::from_static(CLIENT_FORWARDING[5]),
    HeaderName::from_static(CLIENT_FORWARDING[6]),
];

/// Adds the forwarding headers; `client` is [`client_ip_value`] of the client's
/// address and `host` the client's Host (or :authority); without one, an empty `Host`.
pub fn add_forwarded(
    h: &mut HeaderMap,
    client: &HeaderValue,
    https: bool,
    host: Option<&HeaderValue>,
) {
    // Every incoming X-Forwarded-For line counts (a list may arrive split over
    // several), in order, then the client.
    let mut prev = h
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .map(HeaderValue::as_bytes);
    let xff = match prev.next() {
        Some(first) => {
            let mut v = Vec::with_capacity(first.len() + 2 + client.len());
            for p in std::iter::once(first).chain(prev).filter(|p| !p.is_empty()) {
                v.extend_from_slice(p);
                v.extend_from_slice(b", ");
            }
            v.extend_from_slice(client.as_bytes());
            HeaderValue::from_bytes(&v).ok()
        }
        None => Some(client.clone()),
    };
    if let Some(v) = xff {
        h.insert(X_FORWARDED_FOR.clone(), v);
    }
    for dropped in &DROPPED_FORWARDING {
        h.remove(dropped);
    }
    h.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if https { "https" } else { "http" }),
    );
    match host {
        Some(host) => {
            h.insert(X_FORWARDED_HOST.clone(), host.clone());
            if !h.contains_key(header::HOST) {
                h.insert(header::HOST, host.clone());
            }
        }
        // No authority (HTTP/1.0 without Host, HTTP/2 without `:authority` or Host):
        // the request goes upstream as HTTP/1.1, which needs a Host all the same,
        // empty then (RFC 9112 §3.2).
        None => {
            if !h.contains_key(header::HOST) {
                h.insert(header::HOST, HeaderValue::from_static(""));
            }
        }
    }
    if !h.contains_key(&X_REQUEST_ID) {
        h.insert(X_REQUEST_ID.clone(), request_id());
    }
}

/// A random 128-bit request id in lowercase hex.
pub(crate) fn request_id() -> HeaderValue {
    HeaderValue::from_bytes(&request_id_hex()).expect("hex digits are a valid header value")
}

/// A random 128-bit request id as 32 lowercase hex digits (the HTTP/1.1 engine writes
/// them straight into the request it sends).
pub(crate) fn request_id_hex() -> [u8; 32] {
    let mut buf = [0u8; 32];
    for (i, r) in [rand_u64(), rand_u64()].into_iter().enumerate() {
        buf[i * 16..i * 16 + 8].copy_from_slice(&hex8((r >> 32) as u32));
        buf[i * 16 + 8..i * 16 + 16].copy_from_slice(&hex8(r as u32));
    }
    buf
}

/// `v` as 8 lowercase hex digits, most significant first: each nibble spread into its
/// own byte, then made a digit, all eight at once (a table lookup per digit cost
/// about 120 instructions per request id).
fn hex8(v: u32) -> [u8; 8] {
    let x = u64::from(v);
    let x = ((x & 0xFFFF_0000) << 16) | (x & 0xFFFF);
    let x = ((x & 0x0000_FF00_0000_FF00) << 8) | (x & 0x0000_00FF_0000_00FF);
    let x = ((x & 0x00F0_00F0_00F0_00F0) << 4) | (x & 0x000F_000F_000F_000F);
    // 1 in each byte whose nibble is 10 or more (no byte carries into the next).
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    (x + 0x3030_3030_3030_3030 + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
}

/// Joins the `Cookie` headers of an HTTP/2 request into one, with "; " (RFC 9113
/// section 8.2.3: HTTP/2 clients may split cookies over several fields, and an HTTP/1.1
/// server may read only the first).
pub fn join_cookies(h: &mut HeaderMap) {
    let mut all = h.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (all.next(), all.next()) else {
        return;
    };
    let mut v = first.as_bytes().to_vec();
    for c in h.get_all(header::COOKIE).iter().skip(1) {
        v.extend_from_slice(b"; ");
        v.extend_from_slice(c.as_bytes());
    }
    if let Ok(v) = HeaderValue::from_bytes(&v) {
        h.insert(header::COOKIE, v);
    }
}

/// The value of cookie `name` in the `Cookie` headers.
pub fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    cookie_in(
        h.get_all(header::COOKIE).iter().map(HeaderValue::as_bytes),
        name,
    )
}

/// The value of cookie `name` in these `Cookie` header values (raw bytes, as the
/// HTTP/1.1 engine sees them; values that are not text are skipped).
pub fn cookie_in<'a>(values: impl Iterator<Item = &'a [u8]>, name: &str) -> Option<&'a str> {
    values
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|s| s.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digits() {
        let cases: [(u32, &[u8; 8]); 6] = [
            (0, b"00000000"),
            (0xffff_ffff, b"ffffffff"),
            (0x0123_4567, b"01234567"),
            (0x89ab_cdef, b"89abcdef"),
            (0x9a09_a0f0, b"9a09a0f0"),
            (0xdead_beef, b"deadbeef"),
        ];
        for (v, want) in cases {
            assert_eq!(&hex8(v), want, "{v:#x}");
        }
        for _ in 0..1000 {
            let v = rand_u64() as u32;
            assert_eq!(hex8(v), *format!("{v:08x}").as_bytes(), "{v:#x}");
        }
    }

    #[test]
    fn strips_and_forwards() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::HOST, HeaderValue::from_static("foo.com"));
        h.insert(&X_FORWARDED_FOR, HeaderValue::from_static("1.2.3.4"));
        assert!(!is_upgrade(&h));
        strip_hop_by_hop(&mut h, false);
        let host = h.get(header::HOST).cloned();
        let ip = client_ip_value("10.0.0.1".parse().unwrap());
        add_forwarded(&mut h, &ip, true, host.as_ref());
        assert!(
            h.get("x-secret").is_none()
                && h.get("keep-alive").is_none()
                && h.get(header::TE).is_none()
        );
        assert_eq!(h[&X_FORWARDED_FOR], "1.2.3.4, 10.0.0.1");
        assert_eq!(h[&X_FORWARDED_PROTO], "https");
        assert_eq!(h[&X_FORWARDED_HOST], "foo.com");
        assert_eq!(h[header::HOST], "foo.com");
        assert_eq!(h[&X_REQUEST_ID].len(), 32);
        assert!(
            h[&X_REQUEST_ID]
                .as_bytes()
                .iter()
                .all(u8::is_ascii_hexdigit)
        );
        assert_ne!(h[&X_REQUEST_ID], request_id());
        // A first hop: the client's address alone; a present id is kept.
        let mut h = HeaderMap::new();
        h.insert(&X_REQUEST_ID, HeaderValue::from_static("abc"));
        add_forwarded(&mut h, &ip, false, None);
        assert_eq!(h[&X_FORWARDED_FOR], "10.0.0.1");
        assert_eq!(h[&X_FORWARDED_PROTO], "http");
        assert_eq!(h[&X_REQUEST_ID], "abc");
        // No authority: an empty Host (HTTP/1.1 needs one), no X-Forwarded-Host.
        assert_eq!(h[header::HOST], "");
        assert!(h.get(&X_FORWARDED_HOST).is_none());
        // A list split over several lines keeps every element, in order.
        let mut h = HeaderMap::new();
        h.append(
            &X_FORWARDED_FOR,
            HeaderValue::from_static("1.1.1.1, 2.2.2.2"),
        );
        h.append(&X_FORWARDED_FOR, HeaderValue::from_static(""));
        h.append(&X_FORWARDED_FOR, HeaderValue::from_static("3.3.3.3"));
        add_forwarded(&mut h, &ip, false, None);
        let all: Vec<_> = h.get_all(&X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.1"]);
    }

    #[test]
    fn responses_lose_connection_and_named_headers() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.append(
            header::CONNECTION,
            HeaderValue::from_static("X-Trace, close"),
        );
        h.insert("x-trace", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        strip_hop_by_hop(&mut h, false);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-length"]);
        // Every hop-by-hop name goes (the scan's length filter lets each through).
        for n in HOP_BY_HOP.iter().chain([&header::UPGRADE]) {
            h.insert(n, HeaderValue::from_static("x"));
        }
        strip_hop_by_hop(&mut h, false);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-length"]);
        // Nothing to strip: untouched.
        let before = h.clone();
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h, before);
    }

    #[test]
    fn upgrades_keep_their_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[header::UPGRADE], "websocket");
        assert_eq!(h[header::CONNECTION], "upgrade");
    }

    #[test]
    fn upgrade_allow_list_and_underscores() {
        let allowed = ["websocket".to_string(), "h2c".to_string()];
        let up = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::UPGRADE, HeaderValue::from_static(v));
            upgrade_allowed(&h, &allowed)
        };
        assert!(up("WebSocket") && up("h2c, websocket/13"));
        assert!(!up("foo") && !up("websocket, foo") && !up(""));
        assert!(!upgrade_allowed(&HeaderMap::new(), &allowed));
        let mut h = HeaderMap::new();
        h.insert("x_secret", HeaderValue::from_static("1"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_underscored(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn cookies() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; user=bob; z=2"),
        );
        assert_eq!(cookie(&h, "user"), Some("bob"));
        assert_eq!(cookie(&h, "nope"), None);
        // One field: untouched. Several (HTTP/2): one field, "; "-joined, in order.
        let before = h.clone();
        join_cookies(&mut h);
        assert_eq!(h, before);
        h.append(header::COOKIE, HeaderValue::from_static("b=3"));
        h.append(header::COOKIE, HeaderValue::from_static("c=4"));
        join_cookies(&mut h);
        let all: Vec<_> = h.get_all(header::COOKIE).iter().collect();
        assert_eq!(all, ["a=1; user=bob; z=2; b=3; c=4"]);
        assert_eq!(cookie(&h, "c"), Some("4"));
    }
}
