//! Table tests for the HTTPRoute front end of the route table (`table/gateway.rs`):
//! attachment, hostnames, the spec's match precedence, weights, backend kinds and
//! ReferenceGrants, and HTTPRoutes next to MultiClusterIngresses.

use std::collections::BTreeMap as Map;

use causeway_crds::gateway::CONTROLLER_NAME;
use http::{HeaderMap, Method};
use serde_json::{Value, json};

use super::super::tests::{addrs, backend, ep, export, import, mci, services, slice, table};
use super::*;
use crate::gateway::{Decided, Request, decide};

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).unwrap())
}

/// Class `causeway` (ours), `other` (not), and Gateway `infra/gw` with an HTTP listener
/// for any host and one for `*.wild.com`, both open to all namespaces.
fn gateway_snapshot() -> Snapshot {
    let mut s = services();
    s.gateway_classes = vec![
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "causeway"}, "spec": {"controllerName": CONTROLLER_NAME}}),
        ),
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "other"}, "spec": {"controllerName": "example.com/x"}}),
        ),
    ];
    let all = json!({"namespaces": {"from": "All"}});
    s.gateways = vec![
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra"},
            "spec": {"gatewayClassName": "causeway", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all},
                {"name": "wild", "port": 8080, "protocol": "HTTP", "hostname": "*.wild.com", "allowedRoutes": all},
            ]}}),
        ),
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "theirs", "namespace": "infra"},
            "spec": {"gatewayClassName": "other", "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": all}]}}),
        ),
    ];
    s
}

fn route(name: &str, created: &str, spec: Value) -> Arc<HTTPRoute> {
    obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created}, "spec": spec}),
    )
}

fn parent() -> Value {
    json!([{"name": "gw", "namespace": "infra", "sectionName": "http"}])
}

/// A backendRef to Service `name` (not exported: identifies the rule in [`pick`]).
fn to(name: &str) -> Value {
    json!([{"name": name, "port": 80}])
}

/// What a request gets: the backend's name (`svc:port`), the name of the unexported
/// Service it was sent to, `redirect <status> <location>`, or the refusal's status.
fn pick(
    t: &RouteTable,
    method: &str,
    host: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> String {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let Some(r) = t.route(host, path) else {
        return "404".into();
    };
    let Target::Gateway(rules) = &r.target else {
        return format!("not a gateway route: {:?}", r.mci);
    };
    let mut h = HeaderMap::new();
    for (n, v) in headers {
        h.append(
            http::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let req = Request {
        method: &method,
        host,
        path,
        query,
        headers: &h,
        https: false,
    };
    match decide(rules, &req) {
        Decided::Forward(b, _) => b.name.to_string(),
        Decided::Redirect(s, l) => format!("redirect {} {}", s.as_u16(), l.to_str().unwrap()),
        Decided::SslRedirect => "ssl-redirect".to_string(),
        Decided::Refused(why) if why.status == 500 => {
            // "no ServiceImport ns/<name> (...)": the rule's Service.
            let m = why.msg;
            m.split("ServiceImport ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .map_or(m.clone(), |n| n.rsplit('/').next().unwrap().to_string())
        }
        Decided::Refused(why) => why.status.as_u16().to_string(),
    }
}

#[test]
fn attached_routes_are_served_and_others_are_not() {
    let mut s = gateway_snapshot();
    s.http_routes = vec![
        route(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": parent(), "hostnames": ["a.com"],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
        ),
        // Another controller's Gateway, and a listener that does not exist.
        route(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": [{"name": "theirs", "namespace": "infra"}],
            "hostnames": ["b.com"], "rules": [{"backendRefs": to("x")}]}),
        ),
        route(
            "c",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "nope"}],
            "hostnames": ["c.com"], "rules": [{"backendRefs": to("x")}]}),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(t.http_routes, vec!["ns/a"]);
    assert_eq!(pick(&t, "GET", "a.com", "/anything", &[]), "web:80");
    assert_eq!(pick(&t, "GET", "b.com", "/", &[]), "404");
    assert_eq!(pick(&t, "GET", "c.com", "/", &[]), "404");
    // The route's backend is the MCI path's: the same endpoints.
    let Target::Gateway(rules) = &t.route("a.com", "/").unwrap().target else {
        panic!("not a gateway route");
    };
    let Target::Backend(b) = &rules.rules[0].action.backends[0].1 else {
        panic!("unresolved");
    };
    assert_eq!(b.balancer.endpoints().len(), 4);
    assert_eq!(&*b.mci, "httproute:ns/a");
}

/// The spec's precedence: hostname, exact path, longest prefix, method, most headers,
/// most query parameters, oldest route, ns/name, rule order.
#[test]
fn match_precedence_table() {
    let mut s = gateway_snapshot();
    let p = parent();
    s.http_routes = vec![
        route(
            "old",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["a.com"], "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": to("root-old")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}], "backendRefs": to("api")},
                {"matches": [{"path": {"type": "Exact", "value": "/api"}}], "backendRefs": to("api-exact")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "method": "POST"}], "backendRefs": to("api-post")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "headers": [{"name": "version", "value": "2"}]}], "backendRefs": to("api-v2")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "headers": [{"name": "version", "value": "2"}, {"name": "Color", "value": "blue"}]}], "backendRefs": to("api-v2-blue")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}, "queryParams": [{"name": "animal", "value": "whale"}]}], "backendRefs": to("api-whale")},
                {"matches": [{"path": {"value": "/api/v1/"}}], "backendRefs": to("api-v1")},
            ]}),
        ),
        // Newer: loses every tie with "old"; "/" ties.
        route(
            "new",
            "2026-02-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["a.com"], "rules": [
                {"backendRefs": to("root-new")},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/new"}}], "backendRefs": to("new")},
            ]}),
        ),
        // Same age as "new", alphabetically first: wins the tie.
        route(
            "aaa",
            "2026-02-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["a.com"], "rules": [
                {"matches": [{"path": {"value": "/new"}}], "backendRefs": to("new-aaa")},
            ]}),
        ),
    ];
    let (t, _) = table(&s);
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        ("GET", "/", &[], "root-old"),
        ("GET", "/other", &[], "root-old"),
        ("GET", "/api", &[], "api-exact"),
        ("GET", "/api/", &[], "api"),
        ("GET", "/apix", &[], "root-old"),
        ("GET", "/api/x", &[], "api"),
        ("POST", "/api/x", &[], "api-post"),
        // Method beats headers.
        ("POST", "/api/x", &[("version", "2")], "api-post"),
        ("GET", "/api/x", &[("version", "2")], "api-v2"),
        ("GET", "/api/x", &[("version", "3")], "api"),
        // Header names are case-insensitive, values exact.
        (
            "GET",
            "/api/x",
            &[("VERSION", "2"), ("color", "blue")],
            "api-v2-blue",
        ),
        (
            "GET",
            "/api/x",
            &[("version", "2"), ("color", "Blue")],
            "api-v2",
        ),
        // Headers beat query parameters.
        ("GET", "/api/x?animal=whale", &[("version", "2")], "api-v2"),
        ("GET", "/api/x?animal=whale", &[], "api-whale"),
        (
            "GET",
            "/api/x?animal=whale&animal=dolphin",
            &[],
            "api-whale",
        ),
        ("GET", "/api/x?animal=dolphin", &[], "api"),
        // Longest prefix beats everything below it.
        (
            "POST",
            "/api/v1/x?animal=whale",
            &[("version", "2")],
            "api-v1",
        ),
        ("GET", "/new/1", &[], "new-aaa"),
    ];
    for (method, target, headers, want) in cases {
        assert_eq!(
            pick(&t, method, "a.com", target, headers),
            *want,
            "{method} {target} {headers:?}"
        );
    }
}

/// An exact hostname beats wildcards (longest suffix first), which beat the routes
/// without hostnames; a request none of a hostname's rules match falls through to the
/// less specific ones. Listener hostnames intersect the route's.
#[test]
fn hostname_precedence_and_intersection() {
    let mut s = gateway_snapshot();
    let p = parent();
    s.http_routes = vec![
        route(
            "exact",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["foo.example.com"],
            "rules": [{"matches": [{"path": {"value": "/exact"}}], "backendRefs": to("exact")}]}),
        ),
        route(
            "wild",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["*.example.com"],
            "rules": [{"backendRefs": to("wild")}]}),
        ),
        route(
            "wilder",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": p, "hostnames": ["*.b.example.com"],
            "rules": [{"matches": [{"path": {"value": "/b"}}], "backendRefs": to("wilder")}]}),
        ),
        route(
            "any",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": p,
            "rules": [{"matches": [{"path": {"value": "/any"}}], "backendRefs": to("any")}]}),
        ),
        // Through the `*.wild.com` listener: only the hostnames under it.
        route(
            "listener",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "wild"}],
            "hostnames": ["a.wild.com", "other.org"], "rules": [{"backendRefs": to("listener")}]}),
        ),
        route(
            "listener-any",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "wild"}],
            "rules": [{"matches": [{"path": {"value": "/la"}}], "backendRefs": to("listener-any")}]}),
        ),
    ];
    let (t, _) = table(&s);
    let cases = [
        ("foo.example.com", "/exact/1", "exact"),
        ("foo.example.com", "/else", "wild"),
        ("foo.example.com", "/any", "wild"),
        ("x.y.example.com", "/", "wild"),
        ("x.b.example.com", "/b", "wilder"),
        ("x.b.example.com", "/c", "wild"),
        ("example.com", "/", "404"),
        ("example.com", "/any/1", "any"),
        ("a.wild.com", "/", "listener"),
        ("other.org", "/", "404"),
        ("z.wild.com", "/la", "listener-any"),
        ("z.wild.com", "/", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(pick(&t, "GET", host, path, &[]), want, "{host} {path}");
    }
}

/// A request is matched to one listener of a Gateway, the most specific whose hostname
/// matches it (exact, then the longest wildcard, then none: GatewaySpec.listeners),
/// and only that listener's routes apply: no falling through to a less specific
/// listener's routes.
#[test]
fn a_request_gets_the_routes_of_its_most_specific_listener() {
    let mut s = gateway_snapshot();
    let all = json!({"namespaces": {"from": "All"}});
    s.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "ex", "namespace": "infra"},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "api", "port": 80, "protocol": "HTTP", "hostname": "api.ex.com", "allowedRoutes": all},
            {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.ex.com", "allowedRoutes": all},
            {"name": "any", "port": 80, "protocol": "HTTP", "allowedRoutes": all},
        ]}}),
    ));
    let on =
        |listener: &str| json!([{"name": "ex", "namespace": "infra", "sectionName": listener}]);
    s.http_routes = vec![
        route(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("api"),
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}], "backendRefs": to("a")}]}),
        ),
        route(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("wild"), "rules": [{"backendRefs": to("b")}]}),
        ),
        // Names api.ex.com itself, but through the listener for any host.
        route(
            "c",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("any"), "hostnames": ["api.ex.com", "x.ex.com", "other.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/c"}}], "backendRefs": to("c")}]}),
        ),
    ];
    let (t, _) = table(&s);
    let cases = [
        ("api.ex.com", "/v1/x", "a"),
        ("api.ex.com", "/v2", "404"),
        ("api.ex.com", "/c", "404"),
        ("foo.ex.com", "/v2", "b"),
        ("x.ex.com", "/c", "b"),
        ("other.com", "/c", "c"),
        ("other.com", "/v1", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(pick(&t, "GET", host, path, &[]), want, "{host} {path}");
    }
}

/// The most specific listener is chosen per port: a listener on another port is no
/// rival (the proxy serves every route on its own ports, so both ports' routes apply).
#[test]
fn the_most_specific_listener_is_chosen_per_port() {
    let mut s = gateway_snapshot();
    let all = json!({"namespaces": {"from": "All"}});
    s.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "ex", "namespace": "infra"},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.ex.com", "allowedRoutes": all},
            {"name": "https", "port": 443, "protocol": "HTTP", "hostname": "app.ex.com", "allowedRoutes": all},
        ]}}),
    ));
    let on =
        |listener: &str| json!([{"name": "ex", "namespace": "infra", "sectionName": listener}]);
    s.http_routes = vec![
        route(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("http"),
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}], "backendRefs": to("a")}]}),
        ),
        route(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("https"),
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/b"}}], "backendRefs": to("b")}]}),
        ),
    ];
    let (t, _) = table(&s);
    let cases = [
        ("app.ex.com", "/a", "a"),
        ("app.ex.com", "/b", "b"),
        ("app.ex.com", "/c", "404"),
        ("foo.ex.com", "/a", "a"),
        ("foo.ex.com", "/b", "404"),
    ];
    for (host, path, want) in cases {
        assert_eq!(pick(&t, "GET", host, path, &[]), want, "{host} {path}");
    }
}

/// A listener no route attaches to still takes its hostname's requests on its port:
/// they get a 404, not a less specific listener's routes (GatewaySpec.listeners).
#[test]
fn a_listener_without_routes_still_counts() {
    let mut s = gateway_snapshot();
    let all = json!({"namespaces": {"from": "All"}});
    s.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "ex", "namespace": "infra"},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "api", "port": 80, "protocol": "HTTP", "hostname": "api.ex.com", "allowedRoutes": all},
            {"name": "deep", "port": 80, "protocol": "HTTP", "hostname": "*.deep.ex.com", "allowedRoutes": all},
            {"name": "wild", "port": 80, "protocol": "HTTP", "hostname": "*.ex.com", "allowedRoutes": all},
            // on another port: no rival of `wild`
            {"name": "other", "port": 81, "protocol": "HTTP", "hostname": "other.ex.com", "allowedRoutes": all},
        ]}}),
    ));
    s.http_routes = vec![route(
        "w",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": [{"name": "ex", "namespace": "infra", "sectionName": "wild"}],
        "rules": [{"backendRefs": to("w")}]}),
    )];
    let (t, _) = table(&s);
    let cases = [
        ("api.ex.com", "/", "404"),
        ("x.deep.ex.com", "/", "404"),
        ("foo.ex.com", "/", "w"),
        ("other.ex.com", "/", "w"),
    ];
    for (host, path, want) in cases {
        assert_eq!(pick(&t, "GET", host, path, &[]), want, "{host} {path}");
    }
    assert!(
        !t.warnings.iter().any(|w| w.contains("not served")),
        "{:?}",
        t.warnings
    );
}

/// Weighted backendRefs split traffic by weight; a weight of 0 gets nothing; invalid
/// refs get 500s (the spec) for their share.
#[test]
fn weights_split_traffic() {
    let mut s = gateway_snapshot();
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    let eps = json!([{"name": "http", "protocol": "TCP", "port": 8080}]);
    for (svc, ip) in [("a", "10.9.0.1"), ("b", "10.9.0.2")] {
        s.service_imports.push(import(svc, ports.clone()));
        s.exported_services.push(export(svc, "east", ports.clone()));
        s.endpoint_slices.push(slice(
            svc,
            "east",
            eps.clone(),
            json!([ep(ip, Some(true), false)]),
        ));
    }
    s.http_routes = vec![route(
        "w",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": parent(), "rules": [
            {"backendRefs": [{"name": "a", "port": 80, "weight": 1}, {"name": "b", "port": 80, "weight": 3},
                             {"name": "web", "port": 80, "weight": 0}]},
            {"matches": [{"path": {"value": "/half"}}],
             "backendRefs": [{"name": "a", "port": 80}, {"name": "missing", "port": 80}]},
        ]}),
    )];
    let (t, _) = table(&s);
    let mut seen: Map<String, u32> = Map::new();
    for _ in 0..4000 {
        *seen.entry(pick(&t, "GET", "x", "/", &[])).or_default() += 1;
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["a:80", "b:80"],
        "{seen:?}"
    );
    let b = f64::from(seen["b:80"]) / 4000.0;
    assert!(
        (0.7..0.8).contains(&b),
        "b got {b} of the requests, want 0.75"
    );
    let mut half: Map<String, u32> = Map::new();
    for _ in 0..2000 {
        *half.entry(pick(&t, "GET", "x", "/half", &[])).or_default() += 1;
    }
    assert_eq!(
        half.keys().collect::<Vec<_>>(),
        ["a:80", "missing"],
        "{half:?}"
    );
}

/// ServiceImport backendRefs (GEP-1748) resolve like Services; other kinds, and
/// another namespace's Service without a ReferenceGrant, are 500s.
#[test]
fn backend_kinds_and_reference_grants() {
    let mut s = gateway_snapshot();
    let grant = |from: &str| -> Arc<ReferenceGrant> {
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": from}],
                     "to": [{"group": "", "kind": "Service"}]}}),
        )
    };
    let other = |name: &str, path: &str, backend: Value| -> Arc<HTTPRoute> {
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"parentRefs": parent(), "hostnames": ["k.com"],
                     "rules": [{"matches": [{"path": {"value": path}}], "backendRefs": [backend]}]}}),
        )
    };
    s.http_routes = vec![
        route(
            "kinds",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": parent(), "hostnames": ["k.com"], "rules": [
                {"matches": [{"path": {"value": "/si"}}], "backendRefs": [
                    {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}]},
                {"matches": [{"path": {"value": "/cm"}}], "backendRefs": [{"kind": "ConfigMap", "name": "web"}]},
                {"matches": [{"path": {"value": "/noport"}}], "backendRefs": [{"name": "web"}]},
            ]}),
        ),
        other(
            "cross",
            "/cross",
            json!({"name": "web", "namespace": "ns", "port": 80}),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "k.com", "/si", &[]), "web:80");
    let cm = pick(&t, "GET", "k.com", "/cm", &[]);
    assert!(cm.contains("kind ConfigMap"), "{cm}");
    // a Service backendRef without a port is refused as the status says
    // (UnsupportedValue), though web has one TCP port
    let noport = pick(&t, "GET", "k.com", "/noport", &[]);
    assert!(
        noport.contains("a Service backendRef needs a port"),
        "{noport}"
    );
    let cross = pick(&t, "GET", "k.com", "/cross", &[]);
    assert!(
        cross.contains("no ReferenceGrant in ns allows HTTPRoutes from team"),
        "{cross}"
    );
    s.reference_grants = vec![grant("team")];
    let (t, _) = table(&s);
    // Another namespace's backend is named with its namespace.
    assert_eq!(pick(&t, "GET", "k.com", "/cross", &[]), "ns/web:80");
    s.reference_grants = vec![grant("elsewhere")];
    let (t, _) = table(&s);
    assert!(pick(&t, "GET", "k.com", "/cross", &[]).contains("no ReferenceGrant"));
}

/// One table, two front ends: an MCI's paths and an HTTPRoute share a host; the longer
/// path wins, and a route for a path an older MCI serves is reported.
/// A route upstream's CRD validation would refuse (here: a header value with a newline,
/// a ReplacePrefixMatch beside an Exact match) is not served at all, rather than served
/// with the header dropped or the prefix replaced in an exact path; a value with
/// obs-text (RFC 9110) is a header value, and sent as written.
#[test]
fn routes_upstream_validation_refuses_are_not_served_in_part() {
    let mut s = gateway_snapshot();
    let t0 = "2026-01-01T00:00:00Z";
    let set = |v: &str| json!([{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-a", "value": v}]}}]);
    s.http_routes = vec![
        route(
            "bad-value",
            t0,
            json!({"parentRefs": parent(), "hostnames": ["a.com"], "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/ok"}}], "backendRefs": to("ok")},
                {"filters": set("a\nb"), "backendRefs": to("x")}]}),
        ),
        route(
            "exact-prefix",
            t0,
            json!({"parentRefs": parent(), "hostnames": ["b.com"], "rules": [
                {"matches": [{"path": {"type": "Exact", "value": "/a"}}],
                 "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/b"}}}],
                 "backendRefs": to("x")}]}),
        ),
        route(
            "obs-text",
            t0,
            json!({"parentRefs": parent(), "hostnames": ["c.com"], "rules": [
                {"filters": set("caf\u{e9}"), "backendRefs": to("c")}]}),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(t.http_routes, ["ns/obs-text"]);
    assert_eq!(pick(&t, "GET", "a.com", "/ok", &[]), "404");
    assert_eq!(pick(&t, "GET", "b.com", "/a", &[]), "404");
    assert_eq!(pick(&t, "GET", "c.com", "/", &[]), "c");
    let Some(Target::Gateway(rules)) = t.route("c.com", "/").map(|r| &r.target) else {
        panic!("a route for c.com")
    };
    let mut h = HeaderMap::new();
    rules.rules[0].edit_request(&mut h, "/", None);
    assert_eq!(h["x-a"].as_bytes(), "caf\u{e9}".as_bytes());
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

#[test]
fn routes_and_mcis_share_the_table() {
    let mut s = gateway_snapshot();
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "a.com", "http": {"paths": [
            {"path": "/mci", "pathType": "Prefix", "backend": backend("web", json!({"name": "http"}))}]}}]}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": parent(), "hostnames": ["a.com"],
            "rules": [{"backendRefs": to("gw")}]}),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "a.com", "/mci/x").unwrap().len(), 4);
    assert_eq!(pick(&t, "GET", "a.com", "/other", &[]), "gw");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "a.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"name": "http"}))}]}}]}),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "a.com", "/other").unwrap().len(), 4);
    assert_eq!(
        t.warnings,
        [
            "HTTPRoute ns/r: rules[0] is not served on host a.com: MultiClusterIngress ns/m serves path / there first"
        ]
    );
}

/// HR-9: a host both front ends claim. The MCI paths of its most specific MCI host come
/// first, the HTTPRoute rules covering it (wildcard, or no hostname) serve the rest, the
/// MCI host's default backend (the catch-all for a route without hostname) what neither
/// matches; real conflicts are warned of (and said on the route's status).
/// A request a route's rules do not match, on an MCI TLS host with ssl-redirect, gets
/// the MCI's redirect to HTTPS (to the proxy's HTTPS port, which the caller knows), as
/// the MCI's own paths there do; a route rule that matches is the route's.
#[test]
fn the_mci_default_behind_a_route_redirects_to_https_as_the_mci_does() {
    use super::super::tests::mci_ann;
    let web = || backend("web", json!({"name": "http"}));
    let mut s = gateway_snapshot();
    s.mcis = vec![mci_ann(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"tls": [{"hosts": ["a.example.com"], "secretName": "cert"}],
               "defaultBackend": web(),
               "rules": [{"host": "a.example.com", "http": {"paths": [
                   {"path": "/mci", "pathType": "Prefix", "backend": web()}]}}]}),
        json!({"causeway.io/ssl-redirect": "true"}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": parent(), "hostnames": ["*.example.com"],
               "rules": [{"matches": [{"path": {"value": "/api"}}], "backendRefs": to("gw")}]}),
    )];
    let (t, _) = table(&s);
    assert!(t.route("a.example.com", "/mci").unwrap().ssl_redirect);
    assert_eq!(
        pick(&t, "GET", "a.example.com", "/other", &[]),
        "ssl-redirect"
    );
    assert_eq!(pick(&t, "GET", "b.example.com", "/api", &[]), "gw");
}

#[test]
fn mci_and_route_hosts_never_shadow_each_other_silently() {
    let web = || backend("web", json!({"name": "http"}));
    let on = |hostnames: Value, rules: Value| json!({"parentRefs": parent(), "hostnames": hostnames, "rules": rules});
    // (a) an MCI exact host inside the route's wildcard keeps its paths; the route
    // serves the rest of it (it took all of it: /other was a 404)
    let mut s = gateway_snapshot();
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/mci", "pathType": "Prefix", "backend": web()}]}}]}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(json!(["*.example.com"]), json!([{"backendRefs": to("gw")}])),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "a.example.com", "/mci/x").unwrap().len(), 4);
    assert_eq!(pick(&t, "GET", "a.example.com", "/other", &[]), "gw");
    assert_eq!(pick(&t, "GET", "b.example.com", "/mci", &[]), "gw");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    // ... with a defaultBackend: what the route's rules do not match goes there
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": web(), "rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/mci", "pathType": "Prefix", "backend": web()}]}}]}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(
            json!(["*.example.com"]),
            json!([{"matches": [{"path": {"value": "/api"}}], "backendRefs": to("gw")}]),
        ),
    )];
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "a.example.com", "/api/1", &[]), "gw");
    assert_eq!(pick(&t, "GET", "a.example.com", "/other", &[]), "web:http");
    assert_eq!(pick(&t, "GET", "b.example.com", "/other", &[]), "404");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);

    // (b) an MCI Ingress wildcard and a route wildcard with the same suffix: one-label
    // hosts get the MCI's paths, then the route's rules; deeper hosts the route's
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "*.example.com", "http": {"paths": [
            {"path": "/mci", "pathType": "Prefix", "backend": web()}]}}]}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(json!(["*.example.com"]), json!([{"backendRefs": to("gw")}])),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "x.example.com", "/mci").unwrap().len(), 4);
    assert_eq!(pick(&t, "GET", "x.example.com", "/other", &[]), "gw");
    assert_eq!(pick(&t, "GET", "y.x.example.com", "/mci", &[]), "gw");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    // ... and a route's exact host under the MCI wildcard keeps the MCI's paths
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(json!(["a.example.com"]), json!([{"backendRefs": to("gw")}])),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "a.example.com", "/mci").unwrap().len(), 4);
    assert_eq!(pick(&t, "GET", "a.example.com", "/other", &[]), "gw");
    assert_eq!(addrs(&t, "x.example.com", "/mci").unwrap().len(), 4);
    assert_eq!(addrs(&t, "x.example.com", "/other"), Err("404".into()));

    // (c) a route without hostname comes before the catch-all defaultBackend, which
    // still answers what its rules do not match
    s.mcis = vec![mci(
        "catch",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": web()}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(
            json!([]),
            json!([{"matches": [{"path": {"value": "/api"}}], "backendRefs": to("gw")}]),
        ),
    )];
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "any.host", "/api", &[]), "gw");
    assert_eq!(pick(&t, "GET", "any.host", "/other", &[]), "web:http");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    // ... a rule matching every request takes all of them: said
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(json!([]), json!([{"backendRefs": to("gw")}])),
    )];
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "any.host", "/other", &[]), "gw");
    assert_eq!(
        t.warnings,
        [
            "HTTPRoute ns/r: rules[0] matches every request on hosts no rule names, so the catch-all defaultBackend of MultiClusterIngress ns/catch answers none"
        ]
    );
    // ... and a listener without routes no longer hides the catch-all
    s.http_routes.clear();
    s.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "idle", "namespace": "infra"},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    ));
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "any.host", "/").unwrap().len(), 4);

    // (d) an MCI / on a route's host takes it all: the route is told
    let mut s = gateway_snapshot();
    s.mcis = vec![mci(
        "m",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": web()},
            {"path": "/x", "pathType": "Exact", "backend": web()}]}}]}),
    )];
    s.http_routes = vec![route(
        "r",
        "2026-01-01T00:00:00Z",
        on(
            json!(["*.example.com"]),
            json!([{"backendRefs": to("gw")},
                {"matches": [{"path": {"type": "Exact", "value": "/x"}}], "backendRefs": to("gw-x")}]),
        ),
    )];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "a.example.com", "/other").unwrap().len(), 4);
    assert_eq!(pick(&t, "GET", "b.example.com", "/x", &[]), "gw-x");
    assert_eq!(
        t.warnings,
        [
            "HTTPRoute ns/r: rules[0], rules[1] are not served on host a.example.com: MultiClusterIngress ns/m serves path / there first"
        ]
    );
}

/// GW-4: a route whose parent is ServiceImport `web` is served on the mesh port the
/// controller gave web's port (its annotation), with its rules and no hostname
/// matching; a captured port without a mesh port yet, and a route in another namespace,
/// are not served.
#[test]
fn mesh_routes_are_served_on_their_mesh_ports() {
    use causeway_crds::gateway::mesh::MESH_PORTS;
    let mut s = gateway_snapshot();
    let mut web = (*s.service_imports[0]).clone();
    web.metadata.annotations = Some([(MESH_PORTS.to_string(), "80=15000".to_string())].into());
    s.service_imports[0] = Arc::new(web);
    let web_parent =
        json!([{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web"}]);
    s.http_routes = vec![
        route(
            "canary",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": web_parent, "hostnames": ["ignored.example"],
            "rules": [
                {"matches": [{"headers": [{"name": "x-canary", "value": "yes"}]}], "backendRefs": to("canary")},
                {"backendRefs": to("stable")}]}),
        ),
        // another namespace's ServiceImport: not attached
        route(
            "elsewhere",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "namespace": "other"}],
            "rules": [{"backendRefs": to("x")}]}),
        ),
    ];
    let (t, _shared) = table(&s);
    // 80 has a mesh port; 9000 (also captured) has none yet
    assert_eq!(t.mesh.keys().copied().collect::<Vec<_>>(), [15000]);
    let decide_mesh = |headers: &[(&str, &str)]| {
        let Target::Gateway(rules) = &t.mesh_route(15000).unwrap().target else {
            panic!("a mesh port routes by HTTPRoute rules");
        };
        let mut h = HeaderMap::new();
        for (n, v) in headers {
            h.append(
                http::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let req = Request {
            method: &Method::GET,
            host: "web.ns.svc.clusterset.local",
            path: "/",
            query: None,
            headers: &h,
            https: false,
        };
        match decide(rules, &req) {
            Decided::Refused(why) => why
                .msg
                .split("ServiceImport ns/")
                .nth(1)
                .unwrap_or_default()
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string(),
            other => format!("{:?}", std::mem::discriminant(&other)),
        }
    };
    assert_eq!(decide_mesh(&[("x-canary", "yes")]), "canary");
    assert_eq!(decide_mesh(&[]), "stable");
    // nothing under the route's hostname on the ordinary listeners
    assert_eq!(pick(&t, "GET", "ignored.example", "/", &[]), "404");
}

/// Two listeners that cannot be told apart (same port and hostname) are conflicted and
/// not served, as the status controller says (`attach::listener_conflict`): their
/// hostname's requests are not served on that port, while a listener with a hostname
/// of its own on the same port still is.
#[test]
fn conflicting_listeners_are_not_served() {
    let mut s = gateway_snapshot();
    let all = json!({"namespaces": {"from": "All"}});
    s.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "ex", "namespace": "infra"},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "one", "port": 80, "protocol": "HTTP", "hostname": "api.ex.com", "allowedRoutes": all},
            {"name": "two", "port": 80, "protocol": "HTTP", "hostname": "api.ex.com", "allowedRoutes": all},
            {"name": "own", "port": 80, "protocol": "HTTP", "hostname": "own.ex.com", "allowedRoutes": all},
        ]}}),
    ));
    let on =
        |listener: &str| json!([{"name": "ex", "namespace": "infra", "sectionName": listener}]);
    s.http_routes = vec![
        route(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("one"), "rules": [{"backendRefs": to("a")}]}),
        ),
        route(
            "b",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": on("own"), "rules": [{"backendRefs": to("b")}]}),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "api.ex.com", "/", &[]), "404");
    assert_eq!(pick(&t, "GET", "own.ex.com", "/", &[]), "b");
}

/// The endpoints (`cluster=addr`, sorted) of the backend the first rule for `host`
/// and `path` sends to, or why there is none.
fn route_addrs(t: &RouteTable, host: &str, path: &str) -> Result<Vec<String>, String> {
    let Target::Gateway(rules) = &t.route(host, path).ok_or("404")?.target else {
        return Err("not a gateway route".into());
    };
    let rule = rules.rules.first().ok_or("no rule")?;
    target_addrs(&rule.action.backends.first().ok_or("no backendRef")?.1)
}

fn target_addrs(t: &Target) -> Result<Vec<String>, String> {
    match t {
        Target::Backend(b) => {
            let mut v: Vec<String> = b
                .balancer
                .endpoints()
                .iter()
                .map(|e| format!("{}={}", e.cluster, e.addr))
                .collect();
            v.sort();
            Ok(v)
        }
        Target::Unavailable(why) => Err(why.to_string()),
        Target::Gateway(_) => Err("HTTPRoute rules".into()),
    }
}

/// Service `web`'s ServiceImport with `status` (the aggregator's).
fn with_import_status(s: &mut Snapshot, status: Value) {
    let mut web = (*s.service_imports[0]).clone();
    web.status = Some(serde_json::from_value(status).unwrap());
    s.service_imports[0] = Arc::new(web);
}

/// MCI-8 / EPS-7 for every front end: a cluster an MCI of Causeway's class lists in
/// `trafficBlockClusters` (a TrafficControl remedy, or not Ready past the TTL) and the
/// clusters a ServiceImport's aggregator withdrew (`EndpointsWithdrawn`, left out of
/// `status.clusters`) get none of an HTTPRoute's, a mesh route's or an MCI's requests.
#[test]
fn http_route_and_mesh_backends_honour_traffic_blocks() {
    use causeway_crds::gateway::mesh::MESH_PORTS;
    let mut s = gateway_snapshot();
    let web_parent =
        json!([{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web"}]);
    s.http_routes = vec![
        route(
            "r",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": parent(), "hostnames": ["a.com"],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
        ),
        route(
            "mesh",
            "2026-01-01T00:00:00Z",
            json!({"parentRefs": web_parent, "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
        ),
    ];
    let mut web = (*s.service_imports[0]).clone();
    web.metadata.annotations = Some([(MESH_PORTS.to_string(), "80=15000".to_string())].into());
    s.service_imports[0] = Arc::new(web);
    let mesh_addrs = |t: &RouteTable| {
        let Target::Gateway(rules) = &t.mesh_route(15000).unwrap().target else {
            panic!("a mesh route's rules");
        };
        target_addrs(&rules.rules[0].action.backends[0].1)
    };
    let all = [
        "east=10.1.0.1:8080",
        "east=10.1.0.2:8080",
        "north=10.3.0.1:8080",
        "west=10.2.0.1:8080",
    ];
    let (t, _) = table(&s);
    assert_eq!(route_addrs(&t, "a.com", "/").unwrap(), all);
    assert_eq!(mesh_addrs(&t).unwrap(), all);
    // west is blocked, as the MCI controller says on an MCI of another Service's; an
    // MCI of another controller's class says nothing to Causeway.
    let blocking = |name: &str, class: &str, clusters: &[&str]| {
        let mut m = (*mci(
            name,
            "2026-01-01T00:00:00Z",
            json!({"ingressClassName": class, "rules": [{"host": "m.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend("other", json!({"number": 80}))}]}}]}),
        ))
        .clone();
        m.status = Some(causeway_crds::mci::MultiClusterIngressStatus {
            traffic_block_clusters: clusters.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        });
        Arc::new(m)
    };
    s.mcis = vec![
        blocking("m", "causeway", &["west"]),
        blocking("theirs", "nginx", &["east"]),
    ];
    let (t, _) = table(&s);
    let no_west = [
        "east=10.1.0.1:8080",
        "east=10.1.0.2:8080",
        "north=10.3.0.1:8080",
    ];
    assert_eq!(route_addrs(&t, "a.com", "/").unwrap(), no_west);
    assert_eq!(mesh_addrs(&t).unwrap(), no_west);
    // north not Ready, within the TTL (ClusterNotReady): still served, whatever
    // status.clusters says (only EndpointsWithdrawn withdraws: a new exporter the
    // aggregator has not listed yet is not blocked)
    let stale = |reason: &str| {
        json!({"clusters": [{"cluster": "east"}, {"cluster": "west"}],
            "conditions": [{"type": "EndpointsStale", "status": "True", "reason": reason,
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    };
    with_import_status(&mut s, stale("ClusterNotReady"));
    let (t, _) = table(&s);
    assert_eq!(route_addrs(&t, "a.com", "/").unwrap(), no_west);
    // past the TTL: the aggregator withdrew north from web; HTTPRoutes, mesh routes
    // and MCIs alike leave it out
    with_import_status(&mut s, stale("EndpointsWithdrawn"));
    s.mcis.push(mci(
        "web-mci",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "w.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}}]}),
    ));
    let (t, _) = table(&s);
    let east = ["east=10.1.0.1:8080", "east=10.1.0.2:8080"];
    assert_eq!(route_addrs(&t, "a.com", "/").unwrap(), east);
    assert_eq!(mesh_addrs(&t).unwrap(), east);
    assert_eq!(addrs(&t, "w.com", "/").unwrap(), east);
}

/// Every Gateway of a causeway class shares the one data plane, so their listeners
/// are one merged set: a request's hostname picks the most specific listener among
/// every causeway Gateway's, and only the routes attached to it serve it. A tenant's
/// Gateway with a listener for any host cannot take a hostname under another
/// Gateway's more specific listener (whose allowedRoutes keep the tenant's routes out)
/// with a route for that exact hostname, on any port; it still serves the hostnames
/// no more specific listener claims.
#[test]
fn a_gateway_cannot_take_hosts_under_another_gateways_more_specific_listener() {
    let mut s = gateway_snapshot();
    let gateway = |ns: &str, name: &str, class: &str, listeners: Value| -> Arc<Gateway> {
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"gatewayClassName": class, "listeners": listeners}}),
        )
    };
    let route_in = |ns: &str, name: &str, spec: Value| -> Arc<HTTPRoute> {
        obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}),
        )
    };
    // (the snapshot's infra/gw listens for any host: it has no routes here)
    s.gateways.push(gateway(
        "infra",
        "shared",
        "causeway",
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
            "allowedRoutes": {"namespaces": {"from": "Same"}}}]),
    ));
    s.http_routes = vec![
        route_in(
            "infra",
            "shop",
            json!({"parentRefs": [{"name": "shared"}], "hostnames": ["*.example.com"],
            "rules": [{"backendRefs": to("shop")}]}),
        ),
        route_in(
            "evil",
            "r",
            json!({"parentRefs": [{"name": "gw"}], "hostnames": ["shop.example.com", "evil.org"],
            "rules": [{"backendRefs": to("evil-svc")}]}),
        ),
    ];
    for port in [80, 8081] {
        s.gateways
            .retain(|g| g.namespace().as_deref() != Some("evil"));
        s.gateways.push(gateway(
            "evil",
            "gw",
            "causeway",
            json!([{"name": "http", "port": port, "protocol": "HTTP"}]),
        ));
        let (t, _) = table(&s);
        assert_eq!(t.http_routes, ["evil/r", "infra/shop"], "port {port}");
        for path in ["/", "/x"] {
            assert_eq!(
                pick(&t, "GET", "shop.example.com", path, &[]),
                "shop",
                "port {port}"
            );
        }
        assert_eq!(pick(&t, "GET", "a.example.com", "/", &[]), "shop");
        // what no more specific listener claims stays the tenant's
        assert_eq!(
            pick(&t, "GET", "evil.org", "/", &[]),
            "evil-svc",
            "port {port}"
        );
    }
    // A Gateway of another controller's class is no rival (nor are listeners that
    // causeway-proxy does not serve).
    s.gateways.push(gateway(
        "infra",
        "foreign",
        "other",
        json!([{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "evil.org"}]),
    ));
    s.gateways.push(gateway(
        "infra",
        "tls",
        "causeway",
        json!([{"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "evil.org"}]),
    ));
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "evil.org", "/", &[]), "evil-svc");
    // The merge as documented: a served listener of any causeway Gateway that is more
    // specific takes its hostname, with its own routes (none here: 404), as one
    // Gateway's own listener would.
    s.gateways.push(gateway(
        "infra",
        "api",
        "causeway",
        json!([{"name": "http", "port": 9000, "protocol": "HTTP", "hostname": "api.example.com"}]),
    ));
    let (t, _) = table(&s);
    assert_eq!(pick(&t, "GET", "api.example.com", "/", &[]), "404");
    assert_eq!(pick(&t, "GET", "shop.example.com", "/", &[]), "shop");
}

/// GW-4: a ServiceImport port that still carries a mesh port, with no accepted mesh
/// route capturing it (deleted, no longer accepted, or moved), forwards to that port's
/// own endpoints: members keep sending there until the annotation's removal reaches
/// them, and they get answers, not 404s.
#[test]
fn a_mesh_port_without_a_route_passes_through_to_its_service_import() {
    use causeway_crds::gateway::mesh::MESH_PORTS;
    let mut s = gateway_snapshot();
    let mut web = (*s.service_imports[0]).clone();
    // 80 and 9000 are web's ports; 81 is not (a stale annotation)
    web.metadata.annotations = Some(
        [(
            MESH_PORTS.to_string(),
            "80=15000,9000=15001,81=15002".to_string(),
        )]
        .into(),
    );
    s.service_imports[0] = Arc::new(web);
    let (t, _) = table(&s);
    assert_eq!(
        t.mesh.keys().copied().collect::<Vec<_>>(),
        [15000, 15001, 15002]
    );
    let mesh = |t: &RouteTable, port: u16| target_addrs(&t.mesh_route(port).unwrap().target);
    assert_eq!(
        mesh(&t, 15000).unwrap(),
        [
            "east=10.1.0.1:8080",
            "east=10.1.0.2:8080",
            "north=10.3.0.1:8080",
            "west=10.2.0.1:8080"
        ]
    );
    assert_eq!(
        mesh(&t, 15001).unwrap(),
        [
            "east=10.1.0.1:9090",
            "east=10.1.0.2:9090",
            "west=10.2.0.1:9090"
        ]
    );
    let why = mesh(&t, 15002).unwrap_err();
    assert!(why.contains("has no TCP port 81"), "{why}");
    let Target::Backend(b) = &t.mesh_route(15000).unwrap().target else {
        panic!("a backend");
    };
    assert_eq!(&*b.mci, "serviceimport:ns/web");
    // an accepted route takes its port; the others still pass through
    s.http_routes = vec![route(
        "canary",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}],
        "rules": [{"backendRefs": to("canary")}]}),
    )];
    let (t, _) = table(&s);
    assert!(matches!(
        t.mesh_route(15000).unwrap().target,
        Target::Gateway(_)
    ));
    assert!(mesh(&t, 15001).is_ok());
    // once not accepted (a filter causeway-proxy does not support), passed through
    s.http_routes = vec![route(
        "canary",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}],
        "rules": [{"filters": [{"type": "RequestMirror"}], "backendRefs": to("canary")}]}),
    )];
    let (t, _) = table(&s);
    assert_eq!(mesh(&t, 15000).unwrap().len(), 4);
}

/// An MCI and an HTTPRoute of the same namespace/name that use the same backend keep
/// their own metric series (`mci="ns/shop"`, `mci="httproute:ns/shop"`), and neither
/// resets the other's when their clusters differ, rebuild after rebuild.
#[test]
fn an_mci_and_an_http_route_of_one_name_keep_their_own_series() {
    use super::super::tests::mci_ann;
    let mut s = gateway_snapshot();
    // the MCI sends to its proxy's cluster only; the route to every cluster
    s.mcis = vec![mci_ann(
        "shop",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": backend("web", json!({"number": 80}))}),
        json!({"causeway.io/backend-scope": "cluster-local"}),
    )];
    s.http_routes = vec![route(
        "shop",
        "2026-01-01T00:00:00Z",
        json!({"parentRefs": parent(), "hostnames": ["a.com"],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    )];
    let metrics = Arc::new(Metrics::new());
    let shared = Registries::new(metrics.clone());
    let opts = BuildOptions {
        local_cluster: Some("east".into()),
        ..Default::default()
    };
    let route_backend = |t: &RouteTable| {
        let Target::Gateway(rules) = &t.route("a.com", "/").unwrap().target else {
            panic!("gateway route");
        };
        let Target::Backend(b) = &rules.rules[0].action.backends[0].1 else {
            panic!("unresolved");
        };
        b.clone()
    };
    let t = build(&s, &opts, &shared);
    route_backend(&t)
        .metrics
        .cluster("west")
        .unwrap()
        .count(200);
    let Target::Backend(m) = &t.route("x", "/").unwrap().target else {
        panic!("mci backend");
    };
    m.metrics.cluster("east").unwrap().count(200);
    let line = |mci: &str, cluster: &str| {
        format!(
            "causeway_proxy_requests_total{{mci=\"{mci}\",backend=\"web:80\",cluster=\"{cluster}\",code=\"2xx\"}} 1"
        )
    };
    for _ in 0..3 {
        let t = build(&s, &opts, &shared);
        let text = metrics.encode();
        assert!(text.contains(&line("httproute:ns/shop", "west")), "{text}");
        assert!(text.contains(&line("ns/shop", "east")), "{text}");
        assert_eq!(route_backend(&t).balancer.endpoints().len(), 4);
    }
}
