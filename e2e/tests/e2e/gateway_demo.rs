//! The README's Gateway API example (`examples/gateway-demo/hub.yaml`) on the
//! causeway-local demo: applied with kubectl, its HTTPRoute's ServiceImport backendRef
//! reaches the `web` Service in all three members; its redirect and response header
//! filter work; the controller reports it Accepted with its references resolved.

use std::collections::BTreeSet;

use crate::gateway_support::{ACCEPTED, expect_route};
use crate::mci_proxy::Fixture;
use crate::mcs_support::{PRESENT, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_gateway_example_serves_every_cluster() {
    let f = Fixture::start().await;
    let kubectl = crate::mci::Kubectl::new(&f.mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/gateway-demo/hub.yaml"])
        .await;
    let get = |path: &'static str| {
        let req = hyper::Request::get(format!("http://{}{path}", f.proxy.http))
            .header("host", "shop.example.com")
            .body(http_body_util::Empty::new())
            .unwrap();
        f.client.request(req)
    };
    let clusters = eventually(
        "shop.example.com answered from every cluster",
        PRESENT,
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..12 {
                let r = get("/").await.ok()?;
                let added = r.headers().get("x-served-by")?.to_str().ok()? == "causeway-gateway";
                (r.status() == 200 && added).then_some(())?;
                seen.insert(r.headers().get("x-cluster")?.to_str().ok()?.to_string());
            }
            (seen.len() == 3).then_some(seen)
        },
    )
    .await;
    assert_eq!(
        clusters,
        BTreeSet::from(["east", "north", "west"].map(String::from))
    );
    let r = get("/old/page").await.unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(r.headers()["location"], "http://shop.example.com/new/page");
    expect_route(&f.mcs.hub, "demo", "shop", "shop", &ACCEPTED).await;
    // The MCI demo still serves every other host.
    let req = hyper::Request::get(format!("http://{}/", f.proxy.http))
        .body(http_body_util::Empty::new())
        .unwrap();
    assert_eq!(f.client.request(req).await.unwrap().status(), 200);
}

/// The README's mesh example (`examples/mesh-demo/route.yaml`) on the causeway-local
/// demo: applied with kubectl, the route captures web's port 80 on a mesh port of the
/// proxy, where its redirect and its response header apply and web's pods of every
/// member answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_mesh_example_routes_the_mesh_port() {
    let f = Fixture::start_with(|cfg| {
        cfg.listen_mesh = Some(("127.0.0.78".parse().unwrap(), 15000..=15009));
    })
    .await;
    let kubectl = crate::mci::Kubectl::new(&f.mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/mesh-demo/route.yaml"])
        .await;
    let get = |path: &'static str| {
        let req = hyper::Request::get(format!("http://127.0.0.78:15000{path}"))
            .header("host", "web.demo.svc.clusterset.local")
            .body(http_body_util::Empty::new())
            .unwrap();
        f.client.request(req)
    };
    let clusters = eventually(
        "the mesh port answered from every cluster",
        PRESENT,
        || async {
            let mut seen = BTreeSet::new();
            for _ in 0..12 {
                let r = get("/").await.ok()?;
                let added = r.headers().get("x-routed-by")?.to_str().ok()? == "causeway-mesh";
                (r.status() == 200 && added).then_some(())?;
                seen.insert(r.headers().get("x-cluster")?.to_str().ok()?.to_string());
            }
            (seen.len() == 3).then_some(seen)
        },
    )
    .await;
    assert_eq!(
        clusters,
        BTreeSet::from(["east", "north", "west"].map(String::from))
    );
    let r = get("/old/page").await.unwrap();
    assert_eq!(r.status(), 301);
    assert_eq!(
        r.headers()["location"],
        "http://web.demo.svc.clusterset.local/new/page"
    );
    let status = kubectl
        .ok(
            "hub",
            &[
                "get",
                "httproute",
                "web-mesh",
                "-n",
                "demo",
                "-o",
                "jsonpath={.status.parents[0].conditions[0].message}",
            ],
        )
        .await;
    assert_eq!(
        status.trim(),
        "captures the traffic to ServiceImport demo/web port 80 (mesh port 15000) through causeway-proxy at 127.0.0.78"
    );
}
