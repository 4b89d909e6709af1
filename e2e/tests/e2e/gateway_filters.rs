//! Gateway API conformance, HTTPRoute filters: HTTPRouteRequestHeaderModifier,
//! HTTPRouteResponseHeaderModifier, HTTPRouteRedirectHostAndStatus,
//! HTTPRouteRedirectPath, HTTPRouteRedirectPort, HTTPRouteRedirectScheme,
//! HTTPRouteRewritePath, HTTPRouteRewriteHost (upstream manifests, ports 80), and the
//! Causeway case behind them all: an HTTPRoute whose ServiceImport backendRef
//! (GEP-1748) reaches the Service in both member clusters.

use std::collections::BTreeSet;

use crate::gateway_support::{ACCEPTED, Gateway, INFRA, Req, get};

/// Expects a redirect answered by the proxy: status and Location.
async fn redirect(gw: &Gateway, target: &str, status: u16, location: &str) {
    let case = format!("redirect {target}");
    let r = get("redir.example", target);
    gw.expect(&case, r, |g| {
        g.status == status && g.backend.is_none() && g.header("location") == Some(location)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_filters() {
    let gw = Gateway::start().await;
    gw.apply("filters", include_str!("gateway_filters.yaml"))
        .await;
    for name in [
        "request-header-modifier",
        "response-header-modifier",
        "redirect",
        "rewrite",
    ] {
        gw.expect_route(INFRA, name, "same-namespace", &ACCEPTED)
            .await;
    }
    let v1 = "infra-backend-v1";

    // HTTPRouteRequestHeaderModifier
    let h = "headers.example";
    let seen = |headers: &'static [(&'static str, &'static str)], target: &'static str| Req {
        headers,
        ..get(h, target)
    };
    let g = gw
        .expect_backend(
            "set",
            seen(
                &[
                    ("Some-Other-Header", "val"),
                    ("X-Header-Set", "some-other-value"),
                ],
                "/set",
            ),
            v1,
        )
        .await;
    assert_eq!(
        g.seen_headers.get("x-header-set").map(String::as_str),
        Some("set-overwrites-values")
    );
    assert_eq!(
        g.seen_headers.get("some-other-header").map(String::as_str),
        Some("val")
    );
    let g = gw
        .expect_backend(
            "add",
            seen(&[("X-Header-Add", "some-other-value")], "/add"),
            v1,
        )
        .await;
    assert_eq!(
        g.seen_headers.get("x-header-add").map(String::as_str),
        Some("some-other-value,add-appends-values")
    );
    let g = gw
        .expect_backend(
            "remove",
            seen(&[("X-Header-Remove", "val"), ("Keep", "k")], "/remove"),
            v1,
        )
        .await;
    assert!(
        !g.seen_headers.contains_key("x-header-remove"),
        "{:?}",
        g.seen_headers
    );
    assert_eq!(g.seen_headers.get("keep").map(String::as_str), Some("k"));
    let g = gw
        .expect_backend(
            "multiple",
            seen(
                &[
                    ("X-Header-Set-2", "set-val"),
                    ("X-Header-Add-2", "add-val"),
                    ("X-Header-Remove-1", "r"),
                    ("X-Header-Remove-2", "r"),
                ],
                "/multiple",
            ),
            v1,
        )
        .await;
    let want = [
        ("x-header-set-1", Some("header-set-1")),
        ("x-header-set-2", Some("header-set-2")),
        ("x-header-add-1", Some("header-add-1")),
        ("x-header-add-2", Some("add-val,header-add-2")),
        ("x-header-add-3", Some("header-add-3")),
        ("x-header-remove-1", None),
        ("x-header-remove-2", None),
    ];
    for (n, v) in want {
        assert_eq!(
            g.seen_headers.get(n).map(String::as_str),
            v,
            "{n}: {:?}",
            g.seen_headers
        );
    }
    let g = gw
        .expect_backend(
            "case-insensitivity",
            seen(
                &[("X-Header-Remove", "r"), ("x-header-add", "a")],
                "/case-insensitivity",
            ),
            v1,
        )
        .await;
    assert_eq!(
        g.seen_headers.get("x-header-set").map(String::as_str),
        Some("header-set")
    );
    assert_eq!(
        g.seen_headers.get("x-header-add").map(String::as_str),
        Some("a,header-add")
    );
    assert_eq!(
        g.seen_headers.get("x-lowercase-add").map(String::as_str),
        Some("lowercase-add")
    );
    assert_eq!(
        g.seen_headers.get("x-mixedcase-add-1").map(String::as_str),
        Some("mixedcase-add-1")
    );
    assert_eq!(
        g.seen_headers.get("x-uppercase-add").map(String::as_str),
        Some("uppercase-add")
    );
    assert!(!g.seen_headers.contains_key("x-header-remove"));

    // HTTPRouteResponseHeaderModifier, on the headers the echo backend answers with.
    let g = gw
        .expect_backend("response", get("response.example", "/"), v1)
        .await;
    assert_eq!(g.header("x-cluster"), Some("overwritten"));
    assert_eq!(g.header("x-header-add"), Some("add-appends-values"));
    assert_eq!(g.header("x-seen-method"), None);
    assert_eq!(g.header("x-seen-path"), Some("/"));

    // HTTPRouteRedirectHostAndStatus, HTTPRouteRedirectPath, HTTPRouteRedirectPort,
    // HTTPRouteRedirectScheme (listener port 80: not written in Locations).
    let cases = [
        (
            "/hostname-redirect",
            302,
            "http://example.org/hostname-redirect",
        ),
        (
            "/host-and-status",
            301,
            "http://example.org/host-and-status",
        ),
        (
            "/original-prefix/lemon",
            302,
            "http://redir.example/replacement-prefix/lemon",
        ),
        (
            "/full/path/original",
            302,
            "http://redir.example/full-path-replacement",
        ),
        (
            "/path-and-host",
            302,
            "http://example.org/replacement-prefix",
        ),
        (
            "/path-and-status",
            301,
            "http://redir.example/replacement-prefix",
        ),
        (
            "/full-path-and-host",
            302,
            "http://example.org/replacement-full",
        ),
        (
            "/full-path-and-status",
            301,
            "http://redir.example/replacement-full",
        ),
        ("/port", 302, "http://redir.example:8083/port"),
        (
            "/port-and-host",
            302,
            "http://example.org:8083/port-and-host",
        ),
        (
            "/port-and-status",
            301,
            "http://redir.example:8083/port-and-status",
        ),
        ("/scheme", 302, "https://redir.example/scheme"),
        (
            "/scheme-and-host",
            302,
            "https://example.org/scheme-and-host",
        ),
        (
            "/scheme-and-status",
            301,
            "https://redir.example/scheme-and-status",
        ),
        (
            "/scheme-and-port",
            302,
            "https://redir.example:8443/scheme-and-port",
        ),
    ];
    for (target, status, location) in cases {
        redirect(&gw, target, status, location).await;
    }

    // HTTPRouteRewritePath, HTTPRouteRewriteHost: what the backend receives.
    let cases = [
        ("/prefix/one/two", "/one/two", "rewrite.example"),
        ("/prefix/one", "/one", "rewrite.example"),
        ("/strip-prefix/three", "/three", "rewrite.example"),
        ("/strip-prefix", "/", "rewrite.example"),
        ("/full/one/two", "/one", "rewrite.example"),
        ("/full/rewrite-host?q=1", "/one?q=1", "one.example.org"),
        ("/host/keep-path", "/host/keep-path", "two.example.org"),
    ];
    for (target, path, host) in cases {
        let g = gw
            .expect_backend("rewrite", get("rewrite.example", target), v1)
            .await;
        assert_eq!(
            (g.seen_target.as_deref(), g.seen_host.as_deref()),
            (Some(path), Some(host)),
            "{target}"
        );
    }
}

/// The "done when" of Gateway API support: one HTTPRoute with a ServiceImport backendRef
/// (GEP-1748) serves the Service from both member clusters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serviceimport_backend_reaches_both_clusters() {
    let gw = Gateway::start().await;
    gw.apply(
        "serviceimport",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: across-clusters
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  hostnames:
  - shop.example.com
  rules:
  - backendRefs:
    - group: multicluster.x-k8s.io
      kind: ServiceImport
      name: infra-backend-v1
      port: 80
"#,
    )
    .await;
    gw.expect_route(INFRA, "across-clusters", "same-namespace", &ACCEPTED)
        .await;
    gw.expect_backend(
        "serviceimport",
        get("shop.example.com", "/"),
        "infra-backend-v1",
    )
    .await;
    // Both members export it (west's export may land a while after east's: the MCS
    // chain exporter → hub → aggregator → proxy runs for every member, and CI runs the
    // whole e2e suite at once on 2 cores).
    crate::mcs_support::eventually(
        "answers from east and west",
        std::time::Duration::from_secs(60),
        || async {
            let mut clusters = BTreeSet::new();
            for _ in 0..30 {
                let g = gw.send(&get("shop.example.com", "/")).await.ok()?;
                (g.status == 200).then_some(())?;
                clusters.extend(g.cluster);
            }
            (clusters == BTreeSet::from(["east".to_string(), "west".to_string()])).then_some(())
        },
    )
    .await;
    // GW-5 (GEP-1748): one particular cluster is reached through a ServiceImport only
    // that cluster exports (infra-backend-v2 lives in east only, v3 in west only), never
    // through a name that addresses a cluster
    gw.apply(
        "per-cluster",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: per-cluster
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  hostnames:
  - east.example.com
  rules:
  - backendRefs:
    - {group: multicluster.x-k8s.io, kind: ServiceImport, name: infra-backend-v2, port: 80}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: per-cluster-west
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  hostnames:
  - west.example.com
  rules:
  - backendRefs:
    - {group: multicluster.x-k8s.io, kind: ServiceImport, name: infra-backend-v3, port: 80}
"#,
    )
    .await;
    for (host, backend, cluster) in [
        ("east.example.com", "infra-backend-v2", "east"),
        ("west.example.com", "infra-backend-v3", "west"),
    ] {
        gw.expect_backend("per-cluster", get(host, "/"), backend)
            .await;
        for _ in 0..20 {
            let g = gw.send(&get(host, "/")).await.unwrap();
            assert_eq!(
                (g.status, g.cluster.as_deref()),
                (200, Some(cluster)),
                "{host}"
            );
        }
    }
    gw.delete("per-cluster").await;
    // The Gateway is programmed, with the proxy's address, and counts the route.
    let api: kube::Api<causeway_crds::gateway::Gateway> =
        kube::Api::namespaced(gw.mcs.hub.clone(), INFRA);
    crate::mcs_support::eventually(
        "Gateway programmed with one attached route",
        crate::mcs_support::PRESENT,
        || async {
            let g = api.get("same-namespace").await.ok()?;
            let s = g.status?;
            let programmed = s
                .conditions
                .iter()
                .any(|c| c.type_ == "Programmed" && c.status == "True");
            (programmed && !s.addresses.is_empty() && s.listeners.first()?.attached_routes == 1)
                .then_some(())
        },
    )
    .await;
    gw.expect_status("other hosts", get("other.example.com", "/"), 404)
        .await;
}
