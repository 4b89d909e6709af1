//! Table tests for the per-request half of HTTPRoutes: path replacement, redirect
//! Locations, header edits.

use super::*;

fn rule(kind: PathKind, path: &str, action: Action) -> Rule {
    Rule {
        route: "ns/r".into(),
        path_kind: kind,
        path: crate::matching::rule_path(kind, path),
        method: None,
        headers: Vec::new(),
        query: Vec::new(),
        listener_port: 80,
        action: Arc::new(action),
    }
}

/// ReplacePrefixMatch as the spec's table says (the trailing slash is ignored).
#[test]
fn prefix_replacement_table() {
    let cases = [
        ("/foo", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo", "/foo/bar", "/xyz/", "/xyz/bar"),
        ("/foo/", "/foo/bar", "/xyz", "/xyz/bar"),
        ("/foo", "/foo", "/xyz", "/xyz"),
        ("/foo", "/foo/", "/xyz", "/xyz/"),
        ("/foo", "/foo/bar", "/", "/bar"),
        ("/foo", "/foo", "/", "/"),
        ("/", "/foo", "/xyz", "/xyz/foo"),
        ("/prefix/one", "/prefix/one/two", "/one", "/one/two"),
    ];
    for (prefix, path, replace, want) in cases {
        let r = rule(PathKind::Prefix, prefix, Action::default());
        assert_eq!(
            r.modify_path(&PathModifier::Prefix(replace.into()), path),
            want,
            "{prefix} {path} {replace}"
        );
    }
    let r = rule(PathKind::Prefix, "/foo", Action::default());
    assert_eq!(
        r.modify_path(&PathModifier::Full("/one".into()), "/foo/bar"),
        "/one"
    );
}

#[test]
fn redirect_locations() {
    let headers = HeaderMap::new();
    let get = Method::GET;
    let req = |https: bool| Request {
        method: &get,
        host: "a.com",
        path: "/foo/bar",
        query: Some("x=1"),
        headers: &headers,
        https,
    };
    let rd = |scheme: Option<&str>,
              host: Option<&str>,
              port: Option<u16>,
              path: Option<PathModifier>| Redirect {
        scheme: scheme.map(Into::into),
        hostname: host.map(Into::into),
        path,
        port,
        status: StatusCode::FOUND,
    };
    let cases = [
        (
            rd(None, None, None, None),
            false,
            "http://a.com/foo/bar?x=1",
        ),
        (
            rd(Some("https"), None, None, None),
            false,
            "https://a.com/foo/bar?x=1",
        ),
        (
            rd(None, Some("b.org"), None, None),
            false,
            "http://b.org/foo/bar?x=1",
        ),
        (
            rd(None, None, Some(8443), None),
            false,
            "http://a.com:8443/foo/bar?x=1",
        ),
        (
            rd(Some("https"), None, Some(443), None),
            false,
            "https://a.com/foo/bar?x=1",
        ),
        (
            rd(Some("http"), None, None, None),
            true,
            "http://a.com/foo/bar?x=1",
        ),
        // Over TLS, neither scheme nor port: https on the port it arrived on (443:
        // left out), not the HTTP listener's 80.
        (
            rd(None, None, None, None),
            true,
            "https://a.com/foo/bar?x=1",
        ),
        (
            rd(None, None, Some(8443), None),
            true,
            "https://a.com:8443/foo/bar?x=1",
        ),
        (
            rd(Some("http"), None, Some(80), None),
            true,
            "http://a.com/foo/bar?x=1",
        ),
        (
            rd(None, None, None, Some(PathModifier::Prefix("/new".into()))),
            false,
            "http://a.com/new/bar?x=1",
        ),
        (
            rd(None, None, None, Some(PathModifier::Full("/full".into()))),
            false,
            "http://a.com/full?x=1",
        ),
    ];
    for (r, https, want) in cases {
        let ru = rule(PathKind::Prefix, "/foo", Action::default());
        assert_eq!(
            ru.redirect(&r, &req(https)).to_str().unwrap(),
            want,
            "{r:?} https={https}"
        );
    }
    // Without a scheme or port, the listener's port is kept unless well known.
    let mut ru = rule(PathKind::Prefix, "/", Action::default());
    ru.listener_port = 8080;
    assert_eq!(
        ru.redirect(&rd(None, None, None, None), &req(false))
            .to_str()
            .unwrap(),
        "http://a.com:8080/foo/bar?x=1"
    );
    // A request over TLS goes to https on its well-known port, never to https on the
    // HTTP listener's port
    assert_eq!(
        ru.redirect(&rd(None, None, None, None), &req(true))
            .to_str()
            .unwrap(),
        "https://a.com/foo/bar?x=1"
    );
}

/// An IPv6 literal request host (kept without its brackets by `normalize_host`) gets
/// them back in the Location: `http://[2001:db8::1]/x`, not `http://2001:db8::1/x`.
#[test]
fn redirect_location_brackets_an_ipv6_host() {
    let headers = HeaderMap::new();
    let get = Method::GET;
    let req = |host: &'static str| Request {
        method: &get,
        host,
        path: "/x",
        query: None,
        headers: &headers,
        https: false,
    };
    let rd = |port: Option<u16>| Redirect {
        scheme: None,
        hostname: None,
        path: None,
        port,
        status: StatusCode::FOUND,
    };
    let ru = rule(PathKind::Prefix, "/", Action::default());
    let loc = |host, port| {
        ru.redirect(&rd(port), &req(host))
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(loc("2001:db8::1", None), "http://[2001:db8::1]/x");
    assert_eq!(loc("::1", Some(8080)), "http://[::1]:8080/x");
    assert_eq!(loc("10.0.0.1", Some(8080)), "http://10.0.0.1:8080/x");
    assert_eq!(loc("a.com", None), "http://a.com/x");
}

#[test]
fn header_edits_and_rewrites() {
    let n = |s: &'static str| HeaderName::from_static(s);
    let v = |s: &'static str| HeaderValue::from_static(s);
    let action = Action {
        request_headers: Some(HeaderEdit {
            set: vec![(n("x-set"), v("new"))],
            add: vec![(n("x-add"), v("two"))],
            remove: vec![n("x-gone")],
        }),
        rewrite: Some(Rewrite {
            hostname: Some(v("backend.internal")),
            path: Some(PathModifier::Prefix("/v2".into())),
        }),
        ..Action::default()
    };
    let r = rule(PathKind::Prefix, "/v1", action);
    let mut h = HeaderMap::new();
    h.insert("x-set", v("old"));
    h.insert("x-add", v("one"));
    h.insert("x-gone", v("1"));
    h.insert(header::HOST, v("a.com"));
    let pq = r.edit_request(&mut h, "/v1/items", Some("q=1"));
    assert_eq!(pq.as_deref(), Some("/v2/items?q=1"));
    assert_eq!(h.get_all("x-set").iter().collect::<Vec<_>>(), [v("new")]);
    assert_eq!(
        h.get_all("x-add").iter().collect::<Vec<_>>(),
        [v("one"), v("two")]
    );
    assert!(!h.contains_key("x-gone"));
    assert_eq!(h[header::HOST], "backend.internal");
    // No rewrite: the path is kept (None).
    let r = rule(PathKind::Prefix, "/", Action::default());
    assert_eq!(r.edit_request(&mut h, "/x", None), None);
}
