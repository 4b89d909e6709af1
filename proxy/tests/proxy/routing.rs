//! MCI-5 routing through the proxy: host/path precedence, 404/503, default backend,
//! forwarding headers, invalid MCIs ignored, ssl-redirect, and the published Lease.

use std::time::Duration;

use kube::ResourceExt;
use serde_json::json;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_path_routing_with_404_503_and_forwarded_headers() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let api = Pod::start([127, 0, 1, 1], "api").await?;
    let web = Pod::start([127, 0, 1, 2], "web").await?;
    let wild = Pod::start([127, 0, 1, 3], "wild").await?;
    let fallback = Pod::start([127, 0, 1, 4], "fallback").await?;
    for (svc, pod) in [
        ("api", &api),
        ("web", &web),
        ("wild", &wild),
        ("fallback", &fallback),
    ] {
        hub.import(svc).await?;
        hub.export(svc, "east", &[(pod.addr, true)]).await?;
    }
    hub.import("empty").await?;
    hub.export("empty", "east", &[]).await?;
    hub.mci(
        "site",
        json!({
            "defaultBackend": backend("fallback"),
            "rules": [
                {"host": "a.test", "http": {"paths": [
                    {"path": "/api", "pathType": "Prefix", "backend": backend("api")},
                    {"path": "/api/exact", "pathType": "Exact", "backend": backend("web")},
                    {"path": "/", "pathType": "Prefix", "backend": backend("web")},
                    {"path": "/gone", "pathType": "Prefix", "backend": backend("nope")},
                    {"path": "/empty", "pathType": "Prefix", "backend": backend("empty")}
                ]}},
                rule(Some("*.w.test"), "/", "ImplementationSpecific", "wild"),
                rule(Some("s.test"), "/s", "Prefix", "api")
            ]
        }),
        json!({}),
    )
    .await?;
    // An MCI without rules: its default backend catches the hosts no rule names.
    hub.mci(
        "catchall",
        json!({"defaultBackend": backend("web")}),
        json!({}),
    )
    .await?;
    // A second MCI without a default backend; and an invalid one that must be ignored.
    hub.mci(
        "other",
        json!({"rules": [rule(Some("b.test"), "/only", "Exact", "api")]}),
        json!({}),
    )
    .await?;
    hub.mci(
        "broken",
        json!({"rules": [rule(Some("10.0.0.1"), "/", "Prefix", "api")]}),
        json!({}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("routes", Duration::from_secs(10), || async {
        get(&c, p.http, "a.test", "/api", &[])
            .await
            .is_ok_and(|r| r.body == "api")
    })
    .await?;
    let cases: &[(&str, &str, u16, &str)] = &[
        ("a.test", "/api", 200, "api"),
        ("a.test", "/api/", 200, "api"),
        ("a.test", "/api/v1?x=1", 200, "api"),
        ("a.test", "/apix", 200, "web"),
        ("a.test", "/api/exact", 200, "web"),
        ("a.test", "/api/exact/more", 200, "api"),
        ("A.TEST:8080", "/", 200, "web"),
        ("x.w.test", "/anything", 200, "wild"),
        // The site's default backend serves the site's hosts' unmatched paths...
        ("s.test", "/s/1", 200, "api"),
        ("s.test", "/other", 200, "fallback"),
        // ...and the rule-less MCI's the hosts no rule names.
        ("y.x.w.test", "/anything", 200, "web"),
        ("w.test", "/", 200, "web"),
        ("b.test", "/only", 200, "api"),
        ("10.0.0.1", "/", 200, "web"),
    ];
    for (host, path, status, body) in cases {
        let r = get(&c, p.http, host, path, &[]).await?;
        assert_eq!(
            (r.status, r.body.as_str()),
            (*status, *body),
            "{host}{path}"
        );
    }
    // b.test's MCI has no default backend: its unmatched paths are 404, whatever the
    // other MCIs' defaults.
    let r = get(&c, p.http, "b.test", "/only/not", &[]).await?;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = get(&c, p.http, "a.test", "/gone", &[]).await?;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("no ServiceImport demo/nope"), "{}", r.body);
    let r = get(&c, p.http, "a.test", "/empty", &[]).await?;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("no ready endpoints"), "{}", r.body);
    let t = p.table();
    assert!(
        t.ignored.iter().any(|i| i.mci == "demo/broken"),
        "{:?}",
        t.ignored
    );

    // Forwarding headers as the backend sees them.
    let r = get(
        &c,
        p.http,
        "a.test",
        "/",
        &[("x-forwarded-for", "192.0.2.7")],
    )
    .await?;
    assert_eq!(r.headers["echo-x-forwarded-for"], "192.0.2.7, 127.0.0.1");
    assert_eq!(r.headers["echo-x-forwarded-proto"], "http");
    assert_eq!(r.headers["echo-x-forwarded-host"], "a.test");
    assert_eq!(r.headers["echo-host"], "a.test");
    assert_eq!(r.headers["echo-x-request-id"].len(), 32);
    let r = get(&c, p.http, "a.test", "/", &[("x-request-id", "abc")]).await?;
    assert_eq!(r.headers["echo-x-request-id"], "abc");

    // Without any default backend, unmatched requests are 404 with a reason.
    for mci in ["site", "catchall"] {
        hub.delete(
            "networking.karmada.io/v1alpha1",
            "MultiClusterIngress",
            Some(NS),
            mci,
        )
        .await?;
    }
    answers(&c, p.http, ("zzz.test", "/"), 404, Duration::from_secs(10)).await?;
    let r = get(&c, p.http, "zzz.test", "/x", &[]).await?;
    assert!(
        r.body.contains("no MultiClusterIngress rule matches"),
        "{}",
        r.body
    );
    assert_eq!(get(&c, p.http, "b.test", "/only", &[]).await?.body, "api");

    // Metrics are served.
    let m = get(&c, p.metrics.unwrap(), "x", "/metrics", &[]).await?;
    assert!(
        m.body.contains("causeway_proxy_requests_total"),
        "{}",
        m.body
    );
    assert!(m.body.contains("causeway_proxy_table_rebuilds_total"));
    let open = metric(
        &c,
        p.metrics.unwrap(),
        "causeway_proxy_upstream_connections",
    )
    .await?;
    assert!(open >= 1.0, "{}", m.body);
    assert_eq!(
        get(&c, p.metrics.unwrap(), "x", "/readyz", &[])
            .await?
            .status,
        200
    );
    p.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_redirect_and_the_published_lease() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let web = Pod::start([127, 0, 2, 1], "web").await?;
    hub.import("web").await?;
    hub.export("web", "east", &[(web.addr, true)]).await?;
    hub.mci(
        "secure",
        json!({
            "tls": [{"hosts": ["s.test"], "secretName": "s-cert"}],
            "rules": [rule(Some("s.test"), "/", "Prefix", "web"), rule(Some("plain.test"), "/", "Prefix", "web")]
        }),
        json!({"causeway.io/ssl-redirect": "true"}),
    )
    .await?;
    let p = proxy(&hub, Some("east")).await?;
    let c = client();
    answers(
        &c,
        p.http,
        ("plain.test", "/"),
        200,
        Duration::from_secs(10),
    )
    .await?;
    let r = get(&c, p.http, "s.test", "/a?b=c", &[]).await?;
    assert_eq!(r.status, 308);
    let https = p.https.unwrap().port();
    assert_eq!(
        r.headers["location"],
        format!("https://s.test:{https}/a?b=c")
    );

    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(hub.client.clone(), "causeway-system");
    eventually("lease", Duration::from_secs(10), || async {
        leases
            .get_opt("causeway-proxy-test-east")
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await?;
    let l = leases.get("causeway-proxy-test-east").await?;
    let ann = l.metadata.annotations.unwrap_or_default();
    assert_eq!(ann["causeway.io/proxy-addresses"], "127.0.0.1");
    assert_eq!(
        ann["causeway.io/proxy-ports"],
        format!("{}/http,{https}/https", p.http.port())
    );
    assert_eq!(
        l.metadata.labels.unwrap_or_default()["causeway.io/component"],
        "causeway-proxy"
    );
    assert_eq!(l.spec.unwrap().lease_duration_seconds, Some(15));
    // the MCI's TLS Secret does not exist: the Lease says so (MCI-10), until it does
    let problems: serde_json::Value = serde_json::from_str(&ann["causeway.io/proxy-tls-problems"])?;
    assert_eq!(
        problems,
        json!({"demo/s-cert": {"reason": "TLSSecretNotFound",
            "message": "not found (the proxy reads Secrets of type kubernetes.io/tls only)"}})
    );
    let ca = crate::protocols::Ca::new()?;
    let (cert, key, _) = ca.leaf("s.test")?;
    crate::protocols::tls_secret(&hub, "s-cert", &cert, &key).await?;
    eventually(
        "no TLS problem on the Lease",
        Duration::from_secs(10),
        || async {
            leases.get("causeway-proxy-test-east").await.is_ok_and(|l| {
                !l.annotations()
                    .contains_key("causeway.io/proxy-tls-problems")
            })
        },
    )
    .await?;
    crate::protocols::tls_secret(&hub, "s-cert", "junk", &key).await?;
    eventually(
        "an invalid Secret on the Lease",
        Duration::from_secs(10),
        || async {
            leases.get("causeway-proxy-test-east").await.is_ok_and(|l| {
                l.annotations()
                    .get("causeway.io/proxy-tls-problems")
                    .is_some_and(|p| p.contains("\"reason\":\"TLSSecretInvalid\""))
            })
        },
    )
    .await?;
    p.shutdown().await;
    assert!(leases.get_opt("causeway-proxy-test-east").await?.is_none());
    Ok(())
}
