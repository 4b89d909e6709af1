//! HTTPRoutes on the proxy's listeners: requests the HTTP/1.1 engine hands to hyper's
//! path (HTTPRoute rules read the whole request), with bodies and on kept-alive
//! connections shared with requests the engine answers itself, and over HTTP/2.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::harness::{Hub, NS, Pod, client, eventually, get, proxy, proxy_with, send};
use crate::scripted::{Scripted, raw};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_requests_with_bodies_on_kept_alive_connections() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = Pod::start([127, 0, 61, 1], "east-web").await?;
    hub.import("web").await?;
    hub.export("web", "east", &[(pod.addr, true)]).await?;
    let v1 = "gateway.networking.k8s.io/v1";
    hub.apply(
        v1,
        "GatewayClass",
        None,
        "causeway",
        json!({"spec": {"controllerName": causeway_crds::gateway::CONTROLLER_NAME}}),
    )
    .await?;
    hub.apply(v1, "Gateway", Some(NS), "gw",
        json!({"spec": {"gatewayClassName": "causeway", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})).await?;
    hub.apply(v1, "HTTPRoute", Some(NS), "r", json!({"spec": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["gw.example"],
        "rules": [{"matches": [{"method": "POST"}],
                   "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-forwarded-host", "value": "set-by-route"}]}}],
                   "backendRefs": [{"name": "web", "port": 80}]}]}})).await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("the route is served", Duration::from_secs(20), || async {
        p.table().http_routes == ["demo/r"]
    })
    .await?;
    // One client, one kept-alive connection: the engine's own 404s and routed POSTs
    // with bodies, alternating.
    for i in 0..3 {
        let miss = get(&c, p.http, "other.example", "/", &[]).await?;
        assert_eq!(miss.status, 404, "{}", miss.body);
        let body = Bytes::from(format!("payload {i}"));
        let r = send(
            &c,
            http::Method::POST,
            p.http,
            "gw.example",
            "/echo",
            &[],
            body.clone(),
        )
        .await?;
        assert_eq!((r.status, r.body.as_bytes()), (200, &body[..]));
        // A GET matches no rule of the route: 404 from the proxy.
        let r = get(&c, p.http, "gw.example", "/", &[]).await?;
        assert_eq!(r.status, 404, "{}", r.body);
        assert!(r.body.contains("no HTTPRoute rule matches"), "{}", r.body);
    }
    // The route's header filter reached the backend (which echoes X-Forwarded-Host).
    let r = send(
        &c,
        http::Method::POST,
        p.http,
        "gw.example",
        "/",
        &[],
        Bytes::from_static(b"x"),
    )
    .await?;
    assert_eq!(r.headers["echo-x-forwarded-host"], "set-by-route");
    assert_eq!(pod.hits(), 4);
    // The same over HTTP/2 (the raw upstream pool, the map the route edited written
    // as it is): the filter's header, the proxy's own once each.
    let mut h2 = crate::h2::h2(p.http).await?;
    let req = http::Request::post("http://gw.example/")
        .header("x-forwarded-for", "10.9.9.9")
        .body(crate::h2::full(b"x"))?;
    let resp = h2.send_request(req).await?;
    assert_eq!(resp.status(), 200);
    let h = resp.headers();
    assert_eq!(h["echo-x-forwarded-host"], "set-by-route");
    assert_eq!(h["echo-x-forwarded-for"], "10.9.9.9, 127.0.0.1");
    assert_eq!(h["echo-host"], "gw.example");
    assert_eq!(h["echo-x-request-id"].len(), 32);
    assert_eq!(pod.hits(), 5);
    Ok(())
}

/// `Trailer` is not hop-by-hop (RFC 9110 §7.6.1): an upstream's chunked response that
/// announces `Trailer: x-checksum` reaches an HTTP/1.1 client through an HTTPRoute
/// (hyper's path, whose HTTP/1.1 writer sends only announced trailers) with the
/// announcement and the trailer, on either engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_an_http1_client_through_an_http_route() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let up = Scripted::start([127, 0, 72, 1]).await?;
    hub.import("trl").await?;
    hub.export("trl", "east", &[(up.addr, true)]).await?;
    let v1 = "gateway.networking.k8s.io/v1";
    hub.apply(
        v1,
        "GatewayClass",
        None,
        "causeway",
        json!({"spec": {"controllerName": causeway_crds::gateway::CONTROLLER_NAME}}),
    )
    .await?;
    hub.apply(v1, "Gateway", Some(NS), "gw",
        json!({"spec": {"gatewayClassName": "causeway", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})).await?;
    hub.apply(
        v1,
        "HTTPRoute",
        Some(NS),
        "trl",
        json!({"spec": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["trl.example"],
        "rules": [{"backendRefs": [{"name": "trl", "port": 80}]}]}}),
    )
    .await?;
    for own in [true, false] {
        let p = proxy_with(&hub, None, |c| c.limits.own_http1 = own).await?;
        eventually("the route is served", Duration::from_secs(20), || async {
            p.table().http_routes == ["demo/trl"]
        })
        .await?;
        let out = raw(
            p.http,
            b"GET /trailers HTTP/1.1\r\nHost: trl.example\r\nTE: trailers\r\nConnection: close\r\n\r\n",
        )
        .await?;
        let lower = out.to_ascii_lowercase();
        assert!(lower.starts_with("http/1.1 200"), "[own={own}] {out}");
        assert!(
            lower.contains("\r\ntrailer: x-checksum\r\n"),
            "[own={own}] {out}"
        );
        assert!(
            lower.contains("\r\n0\r\nx-checksum: abc\r\n"),
            "[own={own}] {out}"
        );
        p.shutdown().await;
    }
    Ok(())
}

/// MCI-8 / EPS-7 through an HTTPRoute: a cluster an MCI's status blocks (as the MCI
/// controller writes `trafficBlockClusters`, here on an MCI of another Service) and a
/// cluster the aggregator withdrew from the ServiceImport (`EndpointsWithdrawn`, left
/// out of `status.clusters`) get none of the route's requests, and get them back when
/// lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_backends_honour_cluster_traffic_blocks() -> anyhow::Result<()> {
    use causeway_crds::mcs::v1beta1::ServiceImport;
    use kube::api::{Api, Patch, PatchParams};

    let hub = Hub::start().await?;
    let east = Pod::start([127, 0, 62, 1], "east").await?;
    let west = Pod::start([127, 0, 62, 2], "west").await?;
    hub.import("web").await?;
    hub.export("web", "east", &[(east.addr, true)]).await?;
    hub.export("web", "west", &[(west.addr, true)]).await?;
    hub.import("other").await?;
    hub.mci(
        "other-mci",
        json!({"rules": [crate::harness::rule(Some("other.test"), "/", "Prefix", "other")]}),
        json!({}),
    )
    .await?;
    let v1 = "gateway.networking.k8s.io/v1";
    hub.apply(
        v1,
        "GatewayClass",
        None,
        "causeway",
        json!({"spec": {"controllerName": causeway_crds::gateway::CONTROLLER_NAME}}),
    )
    .await?;
    hub.apply(v1, "Gateway", Some(NS), "gw",
        json!({"spec": {"gatewayClassName": "causeway", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})).await?;
    hub.apply(
        v1,
        "HTTPRoute",
        Some(NS),
        "r",
        json!({"spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["gw.example"],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    let serves = |pod: &Pod| {
        let addr = pod.addr;
        p.table()
            .backends
            .iter()
            .filter(|b| &*b.mci == "httproute:demo/r")
            .any(|b| b.balancer.endpoints().iter().any(|e| e.addr == addr))
    };
    eventually("both clusters", Duration::from_secs(20), || async {
        serves(&east) && serves(&west)
    })
    .await?;
    // TrafficControl on west (or west stale past the TTL), as an MCI's status says
    hub.block("other-mci", &["west"]).await?;
    eventually("west blocked", Duration::from_secs(10), || async {
        serves(&east) && !serves(&west)
    })
    .await?;
    let s = crate::harness::spread(&c, p.http, "gw.example", "/", 20).await?;
    assert_eq!(s.get("east"), Some(&20), "{s:?}");
    hub.block("other-mci", &[]).await?;
    eventually("west back", Duration::from_secs(10), || async {
        serves(&east) && serves(&west)
    })
    .await?;
    // the aggregator withdrew west from web past the TTL
    Api::<ServiceImport>::namespaced(hub.client.clone(), NS)
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"clusters": [{"cluster": "east"}],
                "conditions": [{"type": "EndpointsStale", "status": "True", "reason": "EndpointsWithdrawn",
                    "message": "cluster west is not Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
        )
        .await?;
    eventually("west withdrawn", Duration::from_secs(10), || async {
        serves(&east) && !serves(&west)
    })
    .await?;
    let s = crate::harness::spread(&c, p.http, "gw.example", "/", 20).await?;
    assert_eq!(s.get("east"), Some(&20), "{s:?}");
    p.shutdown().await;
    Ok(())
}
