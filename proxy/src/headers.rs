//! Request and response header rewriting: hop-by-hop headers (RFC 9110 §7.6.1)
//! stripped, `X-Forwarded-For/-Proto/-Host` and `X-Request-Id` added, Host kept.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::clock::rand_u64;

static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
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

/// Removes hop-by-hop headers, including those named in `Connection`. With `upgrade`,
/// `Connection: upgrade` and `Upgrade` are kept (they are the point of the request).
pub fn strip_hop_by_hop(h: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !(upgrade && n == header::UPGRADE))
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
    if upgrade {
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        h.remove(header::UPGRADE);
    }
}

/// Adds the forwarding headers; `host` is the client's Host (or :authority).
pub fn add_forwarded(h: &mut HeaderMap, client: IpAddr, https: bool, host: Option<&HeaderValue>) {
    let ip = client.to_string();
    let xff = match h.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.is_empty() => format!("{prev}, {ip}"),
        _ => ip,
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        h.insert(X_FORWARDED_FOR.clone(), v);
    }
    h.insert(
        X_FORWARDED_PROTO.clone(),
        HeaderValue::from_static(if https { "https" } else { "http" }),
    );
    if let Some(host) = host {
        h.insert(X_FORWARDED_HOST.clone(), host.clone());
        if !h.contains_key(header::HOST) {
            h.insert(header::HOST, host.clone());
        }
    }
    if !h.contains_key(&X_REQUEST_ID) {
        let id = format!("{:016x}{:016x}", rand_u64(), rand_u64());
        if let Ok(v) = HeaderValue::from_str(&id) {
            h.insert(X_REQUEST_ID.clone(), v);
        }
    }
}

/// The value of cookie `name` in the `Cookie` headers.
pub fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
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
        add_forwarded(&mut h, "10.0.0.1".parse().unwrap(), true, host.as_ref());
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
    fn cookies() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; user=bob; z=2"),
        );
        assert_eq!(cookie(&h, "user"), Some("bob"));
        assert_eq!(cookie(&h, "nope"), None);
    }
}
