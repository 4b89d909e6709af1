use http::HeaderMap;

use super::*;

fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(*n, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn hash_key_reads_the_header_or_cookie_the_backend_hashes_on() {
    let h = map(&[
        ("x-user", "alice"),
        ("cookie", "a=1; session=s1"),
        ("cookie", "b=2"),
    ]);
    let on_header = HashOn::Header(HeaderName::from_static("x-user"));
    assert_eq!(hash_key(Some(&on_header), &h), Some(hash_bytes(b"alice")));
    let on_cookie = HashOn::Cookie("session".into());
    assert_eq!(hash_key(Some(&on_cookie), &h), Some(hash_bytes(b"s1")));
    let on_b = HashOn::Cookie("b".into());
    assert_eq!(hash_key(Some(&on_b), &h), Some(hash_bytes(b"2")));
    // Not hashed, or nothing to hash: no key (the balancer's own choice).
    assert_eq!(hash_key(None, &h), None);
    let missing = HashOn::Header(HeaderName::from_static("x-tenant"));
    assert_eq!(hash_key(Some(&missing), &h), None);
    assert_eq!(hash_key(Some(&HashOn::Cookie("nope".into())), &h), None);
}

#[test]
fn only_idempotent_methods_are_retried_after_any_failure() {
    for m in ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"] {
        assert!(idempotent(m.as_bytes()), "{m}");
    }
    for m in ["POST", "PATCH", "CONNECT", "get", ""] {
        assert!(!idempotent(m.as_bytes()), "{m}");
    }
}
