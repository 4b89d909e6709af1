//! Gateway API conformance, HTTPRoute core: the upstream cases
//! (kubernetes-sigs/gateway-api `conformance/tests/httproute-*.yaml` and their `.go`
//! expectations) ported to a Causeway clusterset ([`crate::gateway_support`]): every
//! manifest is applied with kubectl to the hub, requests go through a real
//! causeway-proxy to real echo backends in the members, and the status the controller
//! writes is checked per parent. docs/requirements/gateway.md lists the cases.
//! Hostnames, namespaces and invalid references are in `gateway_refs.rs`, filters and
//! redirects in `gateway_filters.rs`.

use crate::gateway_support::{ACCEPTED, Gateway, Headers, INFRA, Req, get};

/// HTTPRouteSimpleSameNamespace, HTTPRouteMatching, HTTPRouteMatchingAcrossRoutes,
/// HTTPRouteHeaderMatching, HTTPRouteQueryParamMatching, HTTPRouteMethodMatching,
/// HTTPRouteWeight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_matching_and_weights() {
    let gw = Gateway::start().await;
    // HTTPRouteSimpleSameNamespace
    gw.apply(
        "simple",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: gateway-conformance-infra-test
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 80
"#,
    )
    .await;
    gw.expect_route(
        INFRA,
        "gateway-conformance-infra-test",
        "same-namespace",
        &ACCEPTED,
    )
    .await;
    gw.expect_backend("simple", get("example.com", "/"), "infra-backend-v1")
        .await;
    gw.delete("simple").await;

    // HTTPRouteMatching
    gw.apply(
        "matching",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /
    - headers:
      - name: version
        value: one
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - path:
        type: PathPrefix
        value: /v2
    - headers:
      - name: version
        value: two
    backendRefs:
    - name: infra-backend-v2
      port: 80
"#,
    )
    .await;
    gw.expect_route(INFRA, "matching", "same-namespace", &ACCEPTED)
        .await;
    let h = "matching.example";
    let v1 = "infra-backend-v1";
    let v2 = "infra-backend-v2";
    let cases: &[(Req<'_>, &str)] = &[
        (get(h, "/"), v1),
        (get(h, "/example"), v1),
        (
            Req {
                headers: &[("version", "one")],
                ..get(h, "/")
            },
            v1,
        ),
        (get(h, "/v2"), v2),
        (get(h, "/v2/example"), v2),
        (
            Req {
                headers: &[("version", "two")],
                ..get(h, "/")
            },
            v2,
        ),
        (get(h, "/v2example"), v1),
        (get(h, "/foo/v2/example"), v1),
    ];
    for (r, want) in cases {
        gw.expect_backend("matching", r.clone(), want).await;
    }
    gw.delete("matching").await;

    // HTTPRouteMatchingAcrossRoutes: precedence across two routes and hostnames.
    gw.apply(
        "across",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: matching-part1
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  hostnames:
  - example.com
  - example.net
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - path:
        type: Exact
        value: /example
    backendRefs:
    - name: infra-backend-v1
      port: 80
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: matching-part2
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  hostnames:
  - example.com
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /v2
    - headers:
      - name: version
        value: two
    backendRefs:
    - name: infra-backend-v2
      port: 80
"#,
    )
    .await;
    let cases: &[(Req<'_>, &str)] = &[
        (get("example.com", "/"), v1),
        (get("example.net", "/"), v1),
        (get("example.com", "/example"), v1),
        (get("example.net", "/example"), v1),
        (get("example.com", "/v2"), v2),
        (get("example.com", "/v2/example"), v2),
        (
            Req {
                headers: &[("version", "two")],
                ..get("example.com", "/")
            },
            v2,
        ),
        // part2 is not for example.net.
        (get("example.net", "/v2"), v1),
        (
            Req {
                headers: &[("version", "two")],
                ..get("example.net", "/")
            },
            v1,
        ),
    ];
    for (r, want) in cases {
        gw.expect_backend("matching-across-routes", r.clone(), want)
            .await;
    }
    gw.delete("across").await;

    // HTTPRouteHeaderMatching
    gw.apply(
        "headers",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: header-matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - headers:
      - name: version
        value: one
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - headers:
      - name: version
        value: two
    backendRefs:
    - name: infra-backend-v2
      port: 80
  - matches:
    - headers:
      - name: version
        value: two
      - name: color
        value: orange
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - headers:
      - name: color
        value: blue
    - headers:
      - name: color
        value: green
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - headers:
      - name: color
        value: red
    - headers:
      - name: color
        value: yellow
    backendRefs:
    - name: infra-backend-v2
      port: 80
"#,
    )
    .await;
    let h = "headers.example";
    let cases: &[(Headers<'_>, Option<&str>)] = &[
        (&[("Version", "one")], Some(v1)),
        (&[("Version", "two")], Some(v2)),
        (&[("Version", "two"), ("Color", "orange")], Some(v1)),
        (&[("Version", "two"), ("Color", "blue")], Some(v2)),
        (&[("Color", "blue")], Some(v1)),
        (&[("Color", "green")], Some(v1)),
        (&[("Color", "red")], Some(v2)),
        (&[("Color", "yellow")], Some(v2)),
        (&[("Version", "three")], None),
        (&[("Color", "purple")], None),
        (&[("Version", "one"), ("Color", "purple")], Some(v1)),
    ];
    for (headers, want) in cases {
        let r = Req {
            headers,
            ..get(h, "/")
        };
        gw.expect_served("header-matching", r, *want).await;
    }
    gw.delete("headers").await;

    // HTTPRouteQueryParamMatching
    gw.apply(
        "query",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: query-param-matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - queryParams:
      - name: animal
        value: whale
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - queryParams:
      - name: animal
        value: dolphin
    backendRefs:
    - name: infra-backend-v2
      port: 80
  - matches:
    - queryParams:
      - name: animal
        value: dolphin
      - name: color
        value: blue
    - queryParams:
      - name: ANIMAL
        value: Whale
    backendRefs:
    - name: infra-backend-v3
      port: 80
"#,
    )
    .await;
    let h = "query.example";
    let v3 = "infra-backend-v3";
    let cases: &[(&str, Option<&str>)] = &[
        ("/?animal=whale", Some(v1)),
        ("/?animal=dolphin", Some(v2)),
        ("/?animal=dolphin&color=blue", Some(v3)),
        ("/?ANIMAL=Whale", Some(v3)),
        ("/?animal=dolphin&color=yellow", Some(v2)),
        ("/?color=blue", None),
        ("/?animal=phoenix", None),
        ("/?animal=phoenix&color=red", None),
        ("/", None),
    ];
    for (target, want) in cases {
        gw.expect_served("query-param-matching", get(h, target), *want)
            .await;
    }
    gw.delete("query").await;

    // HTTPRouteMethodMatching
    gw.apply(
        "method",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: method-matching
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - matches:
    - method: POST
    backendRefs:
    - name: infra-backend-v1
      port: 80
  - matches:
    - method: GET
    backendRefs:
    - name: infra-backend-v2
      port: 80
"#,
    )
    .await;
    let h = "method.example";
    gw.expect_backend(
        "method-matching",
        Req {
            method: "POST",
            ..get(h, "/")
        },
        v1,
    )
    .await;
    gw.expect_backend("method-matching", get(h, "/"), v2).await;
    gw.expect_status(
        "method-matching",
        Req {
            method: "HEAD",
            ..get(h, "/")
        },
        404,
    )
    .await;
    gw.delete("method").await;

    // HTTPRouteWeight: 70/30/0 across three backendRefs.
    gw.apply(
        "weight",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: weighted-backends
  namespace: gateway-conformance-infra
spec:
  parentRefs:
  - name: same-namespace
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 80
      weight: 70
    - name: infra-backend-v2
      port: 80
      weight: 30
    - name: infra-backend-v3
      port: 80
      weight: 0
"#,
    )
    .await;
    gw.expect_route(INFRA, "weighted-backends", "same-namespace", &ACCEPTED)
        .await;
    gw.expect_backend("weight", get("weight.example", "/"), v1)
        .await;
    let mut seen = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..400 {
        let g = gw.send(&get("weight.example", "/")).await.unwrap();
        *seen
            .entry(g.backend.unwrap_or(format!("status {}", g.status)))
            .or_default() += 1;
    }
    let share = |b: &str| f64::from(seen.get(b).copied().unwrap_or(0)) / 400.0;
    assert!(
        (0.6..0.8).contains(&share(v1)) && (0.2..0.4).contains(&share(v2)),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 2, "weight 0 gets nothing: {seen:?}");
}
