//! Gateway API conformance, HTTPRoute core: hostname intersection, routes and backends
//! in other namespaces (listener namespace selectors, ReferenceGrants) and the invalid
//! references, each with the status the spec asks for. See `gateway.rs`.

use crate::gateway_support::{ACCEPTED, Gateway, INFRA, WEB, get};

/// HTTPRouteHostnameIntersection, HTTPRouteCrossNamespace, HTTPRouteReferenceGrant,
/// and the invalid cases (HTTPRouteInvalidCrossNamespaceBackendRef,
/// HTTPRouteInvalidBackendRefUnknownKind, HTTPRouteInvalidNonExistentBackendRef,
/// HTTPRouteInvalidParentRefNotMatchingSectionName,
/// HTTPRouteInvalidParentRefNotMatchingListenerPort,
/// HTTPRouteInvalidCrossNamespaceParentRef).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_hostnames_namespaces_and_invalid_refs() {
    let gw = Gateway::start().await;
    gw.apply("intersection", include_str!("gateway_intersection.yaml"))
        .await;
    let gwname = "httproute-hostname-intersection";
    for r in [
        "specific-host-matches-listener-specific-host",
        "specific-host-matches-listener-wildcard-host",
        "wildcard-host-matches-listener-specific-host",
        "wildcard-host-matches-listener-wildcard-host",
    ] {
        gw.expect_route(INFRA, r, gwname, &ACCEPTED).await;
    }
    gw.expect_route(
        INFRA,
        "no-intersecting-hosts",
        gwname,
        &[("Accepted", "False", "NoMatchingListenerHostname")],
    )
    .await;
    let (v1, v2, v3) = ("infra-backend-v1", "infra-backend-v2", "infra-backend-v3");
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("very.specific.com", "/s1", Some(v1)),
        ("non.matching.com", "/s1", None),
        ("foo.nonmatchingwildcard.io", "/s1", None),
        ("foo.wildcard.io", "/s2", Some(v2)),
        ("bar.wildcard.io", "/s2", Some(v2)),
        ("foo.bar.wildcard.io", "/s2", Some(v2)),
        ("non.matching.com", "/s2", None),
        ("wildcard.io", "/s2", None),
        ("very.specific.com", "/s3", Some(v3)),
        ("foo.specific.com", "/s3", None),
        ("foo.anotherwildcard.io", "/s4", Some(v1)),
        ("bar.anotherwildcard.io", "/s4", Some(v1)),
        ("foo.bar.anotherwildcard.io", "/s4", Some(v1)),
        ("anotherwildcard.io", "/s4", None),
        ("nonmatchingwildcard.io", "/s4", None),
        ("very.specific.com", "/s5", None),
    ];
    for (host, path, want) in cases {
        gw.expect_served("hostname-intersection", get(host, path), *want)
            .await;
    }
    gw.delete("intersection").await;

    // HTTPRouteCrossNamespace: a route in the web-backend namespace, selected by the
    // backend-namespaces Gateway's listener.
    gw.apply(
        "cross",
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: cross-namespace
  namespace: gateway-conformance-web-backend
spec:
  parentRefs:
  - name: backend-namespaces
    namespace: gateway-conformance-infra
  rules:
  - backendRefs:
    - name: web-backend
      port: 80
"#,
    )
    .await;
    gw.expect_route(WEB, "cross-namespace", "backend-namespaces", &ACCEPTED)
        .await;
    gw.expect_backend("cross-namespace", get("cross.example", "/"), "web-backend")
        .await;
    gw.delete("cross").await;

    // The invalid references: Accepted, not resolved, 500 for their traffic.
    gw.apply("invalid-backends", include_str!("gateway_invalid.yaml"))
        .await;
    for (name, reason, path) in [
        (
            "invalid-cross-namespace-backend-ref",
            "RefNotPermitted",
            "/cross",
        ),
        ("invalid-backend-ref-unknown-kind", "InvalidKind", "/kind"),
        (
            "invalid-nonexistent-backend-ref",
            "BackendNotFound",
            "/nonexistent",
        ),
    ] {
        gw.expect_route(
            INFRA,
            name,
            "same-namespace",
            &[
                ("Accepted", "True", "Accepted"),
                ("ResolvedRefs", "False", reason),
            ],
        )
        .await;
        gw.expect_status(name, get("invalid.example", path), 500)
            .await;
    }
    for (ns, name, parent, reason) in [
        (
            INFRA,
            "invalid-parentref-section-name",
            "same-namespace",
            "NoMatchingParent",
        ),
        (
            INFRA,
            "invalid-parentref-listener-port",
            "same-namespace",
            "NoMatchingParent",
        ),
        (
            WEB,
            "invalid-cross-namespace-parent-ref",
            "same-namespace",
            "NotAllowedByListeners",
        ),
    ] {
        gw.expect_route(ns, name, parent, &[("Accepted", "False", reason)])
            .await;
    }
    gw.expect_status(
        "not-accepted routes are not served",
        get("invalid.example", "/not-accepted"),
        404,
    )
    .await;

    // HTTPRouteReferenceGrant: the same cross-namespace backendRef, now granted.
    gw.apply(
        "grant",
        r#"
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata:
  name: reference-grant
  namespace: gateway-conformance-web-backend
spec:
  from:
  - group: gateway.networking.k8s.io
    kind: HTTPRoute
    namespace: gateway-conformance-infra
  to:
  - group: ""
    kind: Service
    name: web-backend
"#,
    )
    .await;
    gw.expect_route(
        INFRA,
        "invalid-cross-namespace-backend-ref",
        "same-namespace",
        &ACCEPTED,
    )
    .await;
    gw.expect_backend(
        "reference-grant",
        get("invalid.example", "/cross"),
        "web-backend",
    )
    .await;
    gw.delete("grant").await;
    gw.expect_status("grant withdrawn", get("invalid.example", "/cross"), 500)
        .await;
}
