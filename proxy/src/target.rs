//! What a request is routed by, checked the same way on both request paths:
//!
//! - its host: exactly one `Host` with a valid value in HTTP/1.1 (RFC 9112 §3.2: a
//!   missing one, several, or an invalid value is a 400; HTTP/1.0 may omit it), and an
//!   absolute-form target's authority replaces it (RFC 9112 §3.2.2);
//! - its path: dot-segments (`.`, `..`, also percent-encoded as `%2e`) are removed
//!   (RFC 3986 §5.2.4) before matching, and the request goes upstream with the path it
//!   was matched by; a path that climbs above the root is a 400 (as nginx answers).
//!   An encoded slash (`%2F`, also `%5C`, a backslash) stays as it is, inside its
//!   segment: it is not a separator to the route table. A segment in which an encoded
//!   slash or a raw backslash sets off a dot-segment (`..%2F`, `a%2F..%2Fb`, `..\b`),
//!   or that is a dot-segment up to a `;` path parameter (`..;`, `%2e%2e;x`: Tomcat,
//!   Jetty and Spring drop the parameter), is a 400, as a backend that reads it so would
//!   resolve that `..` after the route was chosen;
//! - asterisk-form (`*`) only with `OPTIONS`.
//!
//! The HTTP/1.1 engine serves requests whose head is valid by these rules and hands
//! the others to hyper, whose path answers them (one implementation of each 400), apart
//! from the path, which both normalise: the engine without allocating when the path has
//! no segment that starts with `.` and no `%` (one scan).

use std::borrow::Cow;

use http::header::{self, HeaderValue};
use http::{Method, Request, Version};

/// Why a request is refused with 400.
pub type Bad = &'static str;

/// Bytes of a valid Host value: `uri-host [":" port]` (RFC 9110 §7.2, RFC 3986 §3.2.2:
/// reg-name characters, percent-encodings, IP literals in brackets). No `@` (userinfo),
/// `/`, `?`, `#`, whitespace or controls.
const HOST_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let extra = b"-._~!$&'()*+,;=:[]%";
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric();
        i += 1;
    }
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
};

/// Whether `v` is a valid Host field value (empty is valid: a target without authority).
pub fn valid_host(v: &[u8]) -> bool {
    v.iter().all(|&b| HOST_BYTES[b as usize])
}

/// What a request that hyper parsed is routed by.
#[derive(Debug)]
pub struct Routing {
    /// The request's host as sent (`Host`, or the target's authority), for `Host` and
    /// `X-Forwarded-Host` upstream.
    pub host: Option<HeaderValue>,
    /// The host came from the target (absolute-form, or HTTP/2's `:authority`): it
    /// replaces `Host` upstream.
    pub from_target: bool,
    /// The path to match and forward, when it differs from the target's.
    pub path: Option<String>,
}

/// Checks a request's host and target (hyper's path); `Err` is the 400's reason.
pub fn check<B>(req: &Request<B>) -> Result<Routing, Bad> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host header");
    }
    let h1 = req.version() <= Version::HTTP_11;
    if first.is_none() && req.version() == Version::HTTP_11 {
        return Err("no Host header");
    }
    if first.is_some_and(|h| !valid_host(h.as_bytes())) {
        return Err("invalid Host header");
    }
    let uri = req.uri();
    let (host, from_target) = match uri.authority() {
        Some(a) => {
            if h1 && !matches!(uri.scheme_str(), Some("http" | "https") | None) {
                return Err("the request target's scheme is not http or https");
            }
            if !valid_host(a.as_str().as_bytes()) {
                return Err("invalid authority in the request target");
            }
            (HeaderValue::from_str(a.as_str()).ok(), true)
        }
        None => (first.cloned(), false),
    };
    let path = uri.path();
    if path == "*" {
        if req.method() != Method::OPTIONS {
            return Err("an asterisk-form target (*) is only for OPTIONS");
        }
        return Ok(Routing {
            host,
            from_target,
            path: None,
        });
    }
    let path = match normalize_path(path)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(p) => Some(p),
    };
    Ok(Routing {
        host,
        from_target,
        path,
    })
}

/// `path` (origin-form, no query) with its dot-segments removed (RFC 3986 §5.2.4,
/// `%2e` counting as `.`); borrowed when there are none. `Err` when it climbs above
/// the root, or an encoded slash sets off a dot-segment (see the module docs).
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, Bad> {
    let b = path.as_bytes();
    // One scan: a dot-segment starts with `.` right after a `/`, or is encoded (`%`).
    let mut suspect = false;
    let mut prev = 0u8;
    for &c in b {
        if c == b'%' || (c == b'.' && matches!(prev, b'/' | b'\\')) {
            suspect = true;
            break;
        }
        prev = c;
    }
    if !suspect || !path.starts_with('/') {
        return Ok(Cow::Borrowed(path));
    }
    // A `%` is common (encoded spaces, UTF-8): a first pass, without allocating, finds
    // whether there is anything to remove.
    let mut any = false;
    for seg in path[1..].split('/') {
        if dots(seg).is_some() {
            any = true;
        } else if seg.contains(['%', '\\', ';']) && hides_dot_segment(seg) {
            return Err(
                "a dot-segment is hidden in the path (by an encoded slash, a backslash or a ;parameter)",
            );
        }
    }
    if !any {
        return Ok(Cow::Borrowed(path));
    }
    let mut out: Vec<&str> = Vec::new();
    let mut segments = path[1..].split('/').peekable();
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        match dots(seg) {
            Some(dots) => {
                if dots == 2 && out.pop().is_none() {
                    return Err("the path climbs above the root");
                }
                // `/a/.` and `/a/b/..` end in a slash: `/a/`.
                if last {
                    out.push("");
                }
            }
            None => out.push(seg),
        }
    }
    let mut p = String::with_capacity(path.len());
    for seg in out {
        p.push('/');
        p.push_str(seg);
    }
    if p.is_empty() {
        p.push('/');
    }
    Ok(Cow::Owned(p))
}

/// `Some(1)` for `.`, `Some(2)` for `..` (each dot may be `%2e` or `%2E`), else None.
fn dots(seg: &str) -> Option<u8> {
    let mut b = seg.as_bytes();
    let mut n = 0u8;
    while !b.is_empty() {
        if b[0] == b'.' {
            b = &b[1..];
        } else if b.len() >= 3 && b[0] == b'%' && b[1] == b'2' && b[2].eq_ignore_ascii_case(&b'e') {
            b = &b[3..];
        } else {
            return None;
        }
        n += 1;
        if n > 2 {
            return None;
        }
    }
    (n > 0).then_some(n)
}

/// Whether a segment hides a dot-segment a backend may see: split at its encoded
/// slashes or backslashes (`%2F`, `%5C`) and raw backslashes, a piece that is `.` or
/// `..` up to its first `;` (a path parameter), where the segment was split or has a
/// parameter (a plain `..` is the caller's to remove).
fn hides_dot_segment(seg: &str) -> bool {
    let is_dots = |piece: &str| dots(piece.split(';').next().unwrap_or(piece)).is_some();
    let b = seg.as_bytes();
    let (mut start, mut i, mut split) = (0, 0, false);
    while i < b.len() {
        let sep = if b[i] == b'\\' {
            1
        } else if i + 2 < b.len()
            && b[i] == b'%'
            && ((b[i + 1] == b'2' && b[i + 2].eq_ignore_ascii_case(&b'f'))
                || (b[i + 1] == b'5' && b[i + 2].eq_ignore_ascii_case(&b'c')))
        {
            3
        } else {
            0
        };
        if sep == 0 {
            i += 1;
            continue;
        }
        if is_dots(&seg[start..i]) {
            return true;
        }
        (start, i, split) = (i + sep, i + sep, true);
    }
    let last = &seg[start..];
    (split || last.contains(';')) && is_dots(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dot_segments() {
        for (path, want) in [
            ("/", "/"),
            ("/a/b", "/a/b"),
            ("/a/./b", "/a/b"),
            ("/a/../b", "/b"),
            ("/a/%2e%2E/b", "/b"),
            ("/a/.%2e/b/", "/b/"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a/..", "/"),
            ("/.", "/"),
            ("/a//../b", "/a/b"),
            ("/a/.b/..c/...", "/a/.b/..c/..."),
            ("/a/%2e%2e%2e", "/a/%2e%2e%2e"),
            ("/a%2Fb/c", "/a%2Fb/c"),
            ("/index.html", "/index.html"),
        ] {
            assert_eq!(normalize_path(path).as_deref(), Ok(want), "{path}");
        }
        // Nothing to do: no allocation.
        for path in ["/a/b.c/%41", "/a%20b/.c/%2e%2e%2e", "/a/x%2Fb"] {
            assert!(
                matches!(normalize_path(path), Ok(Cow::Borrowed(_))),
                "{path}"
            );
        }
        for path in [
            "/..",
            "/a/../..",
            "/%2e%2e",
            "/a/..%2f",
            "/a/b%2F..%2Fc",
            "/a/%2e%5Cb",
            // a path parameter or a raw backslash around a dot-segment (Tomcat, Jetty
            // and Spring drop `;…`; IIS reads `\` as `/`)
            "/a/..;/b",
            "/a/%2e%2e;/b",
            "/a/..;jsessionid=x/b",
            "/a/.;/b",
            "/a/..\\b",
            "/a/x\\..\\b",
            "/a/x\\..",
        ] {
            assert!(normalize_path(path).is_err(), "{path}");
        }
        // a parameter or a backslash elsewhere is kept as it is
        for path in [
            "/a/b;v=1/c",
            "/a/b;../c",
            "/a\\b/c",
            "/a/.b;x/c",
            "/a/...;x",
        ] {
            assert_eq!(normalize_path(path).as_deref(), Ok(path), "{path}");
        }
        // An encoded slash or backslash alone is kept.
        assert_eq!(
            normalize_path("/a/x%5Cb/c%2f").as_deref(),
            Ok("/a/x%5Cb/c%2f")
        );
    }

    #[test]
    fn hosts() {
        for ok in [
            "a.example",
            "a.example:8080",
            "[::1]:80",
            "",
            "xn--bcher-kva.example",
        ] {
            assert!(valid_host(ok.as_bytes()), "{ok}");
        }
        for bad in ["a b", "a/b", "user@a", "a?b", "a#b", "a\tb", "a\\b"] {
            assert!(!valid_host(bad.as_bytes()), "{bad}");
        }
    }

    fn req(version: Version, method: &str, uri: &str, hosts: &[&str]) -> Request<()> {
        let mut b = Request::builder().version(version).method(method).uri(uri);
        for h in hosts {
            b = b.header(header::HOST, *h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn hosts_and_targets() {
        const HTTP_10: Version = Version::HTTP_10;
        const HTTP_11: Version = Version::HTTP_11;
        const HTTP_2: Version = Version::HTTP_2;
        let r = check(&req(HTTP_11, "GET", "/a/../b", &["a.test"])).unwrap();
        assert_eq!(
            (r.host.unwrap().to_str().unwrap(), r.path.as_deref()),
            ("a.test", Some("/b"))
        );
        let r = check(&req(HTTP_11, "GET", "http://b.test:81/x", &["a.test"])).unwrap();
        assert_eq!(
            (r.host.unwrap().to_str().unwrap(), r.from_target),
            ("b.test:81", true)
        );
        assert!(
            check(&req(HTTP_10, "GET", "/", &[]))
                .unwrap()
                .host
                .is_none()
        );
        assert!(check(&req(HTTP_2, "GET", "https://a.test/", &[])).is_ok());
        assert!(check(&req(HTTP_11, "OPTIONS", "*", &["a.test"])).is_ok());
        for bad in [
            req(HTTP_11, "GET", "/", &[]),
            req(HTTP_11, "GET", "/", &["a.test", "a.test"]),
            req(HTTP_10, "GET", "/", &["a.test", "b.test"]),
            req(HTTP_11, "GET", "/", &["a.test/x"]),
            req(HTTP_11, "GET", "ftp://a.test/", &["a.test"]),
            req(HTTP_11, "GET", "http://u@a.test/", &["a.test"]),
            req(HTTP_11, "GET", "*", &["a.test"]),
            req(HTTP_11, "GET", "/..", &["a.test"]),
        ] {
            assert!(check(&bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Normalising is idempotent, and what comes out has no dot-segment.
        #[test]
        fn normalising_is_idempotent(segs in proptest::collection::vec("(\\.|\\.\\.|%2[eE]|a|b\\.|%2[fF]|%41|){0,3}", 0..8), slash in any::<bool>()) {
            let mut path = String::new();
            for s in &segs {
                path.push('/');
                path.push_str(s);
            }
            if slash || path.is_empty() {
                path.push('/');
            }
            if let Ok(once) = normalize_path(&path) {
                let twice = normalize_path(&once).expect("a normalised path normalises");
                prop_assert_eq!(&twice, &once);
                prop_assert!(once.starts_with('/'));
                for seg in once.split('/') {
                    prop_assert!(dots(seg).is_none(), "{} -> {}", path, once);
                    prop_assert!(!hides_dot_segment(seg), "{} -> {}", path, once);
                }
            }
        }
    }
}
