//! GW-4, mesh routes (GAMMA, GEP-1748): an HTTPRoute whose parent is ServiceImport
//! `store` captures the HTTP traffic members send to store's clusterset IP, and routes
//! it by its rules. East and west both export `store`; `store-v1` runs in east only,
//! `store-v2` in west only. kubesim carries Service traffic as kube-proxy does
//! (`Options::service_proxy`), a real causeway-proxy serves mesh traffic on
//! 127.0.0.77, and the Gateway API controller gives the captured port its mesh port.
//! From west, a request to store's clusterset IP goes to store-v1 in east, and with
//! `x-canary: yes` to store-v2; deleting the route gives store's own pods back.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use causeway_crds::gateway::HTTPRoute;
use causeway_e2e::backends::{publish_on, start_pods};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::mcs_support::{Mcs, PRESENT, eventually};

const PORT: u16 = 8080;

/// (Service, members exporting it).
const SERVICES: &[(&str, &[usize])] = &[("store", &[0, 1]), ("store-v1", &[0]), ("store-v2", &[1])];

/// Who answers a GET to `ip`:[`PORT`] with Host `host` and `headers`: the backend's
/// `<cluster>/<pod>`, or the status when the proxy answers.
async fn ask(ip: IpAddr, host: &str, headers: &[(&str, &str)]) -> Option<String> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::get(format!("http://{ip}:{PORT}/"))
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .ok()?;
    for (k, v) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).ok()?,
            http::HeaderValue::from_str(v).ok()?,
        );
    }
    let resp = tokio::time::timeout(Duration::from_secs(2), client.request(req))
        .await
        .ok()?
        .ok()?;
    let status = resp.status();
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    let body = String::from_utf8_lossy(&body).trim().to_string();
    Some(if status.is_success() {
        body
    } else {
        format!("{status}: {body}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mesh_route_captures_the_traffic_to_a_clusterset_ip() {
    let opts = causeway_e2e::Options {
        members: vec!["east".into(), "west".into()],
        service_proxy: true,
        ..Default::default()
    };
    let m = Mcs::start_with(opts, 2).await;
    let mut pods = Vec::new();
    for (svc, members) in SERVICES {
        for &i in *members {
            let cluster = ["east", "west"][i];
            let p = start_pods(i + 1, cluster, svc, 1).await.expect("pods");
            publish_on(&m.c(i), &m.ns, svc, PORT, &p)
                .await
                .expect("Service");
            m.export(i, svc, "dummy-label").await;
            pods.extend(p);
        }
    }
    let cfg = causeway_proxy::Config {
        listen_http: "127.0.0.1:0".parse().unwrap(),
        metrics: None,
        listen_mesh: Some(("127.0.0.77".parse().unwrap(), 15000..=15009)),
        debounce: Duration::from_millis(20),
        ..Default::default()
    };
    let proxy = crate::mci_proxy::proxy_as_deployed(&m, cfg).await;
    let ip: IpAddr = eventually("store imported in west", PRESENT, || async {
        let si = m.si(1, "store").await?;
        si.spec.ips.first()?.parse().ok()
    })
    .await;
    let host = format!("store.{}.svc.clusterset.local", m.ns);
    // before any route: store's own pods, in both clusters
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        if let Some(who) = ask(ip, &host, &[]).await {
            seen.insert(who);
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["east/store-1", "west/store-1"]
    );

    let route: HTTPRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "store-canary", "namespace": m.ns},
        "spec": {
            "parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "store", "port": PORT}],
            "rules": [
                {"matches": [{"headers": [{"name": "x-canary", "value": "yes"}]}],
                 "backendRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "store-v2", "port": PORT}]},
                {"backendRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "store-v1", "port": PORT}]},
            ]
        }
    }))
    .unwrap();
    let routes: Api<HTTPRoute> = Api::namespaced(m.hub.clone(), &m.ns);
    routes
        .patch(
            "store-canary",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&route),
        )
        .await
        .expect("route applied");
    let accepted = eventually("the route Accepted", PRESENT, || async {
        let r = routes.get("store-canary").await.ok()?;
        let parent = r.status?.parents.into_iter().next()?;
        let c = parent
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Accepted")?;
        (c.status == "True").then_some(c.message)
    })
    .await;
    assert!(
        accepted.contains("port 8080 (mesh port 15000) through causeway-proxy at 127.0.0.77"),
        "{accepted}"
    );
    // captured: every request from west to store's clusterset IP follows the route
    eventually("store's traffic goes to store-v1", PRESENT, || async {
        (ask(ip, &host, &[]).await.as_deref() == Some("east/store-v1-1")).then_some(())
    })
    .await;
    for _ in 0..10 {
        assert_eq!(
            ask(ip, &host, &[]).await.as_deref(),
            Some("east/store-v1-1")
        );
        assert_eq!(
            ask(ip, &host, &[("x-canary", "yes")]).await.as_deref(),
            Some("west/store-v2-1")
        );
    }
    // from east too: its own clusterset IP of store
    let east_ip: IpAddr = m.si(0, "store").await.unwrap().spec.ips[0].parse().unwrap();
    eventually("captured in east too", PRESENT, || async {
        (ask(east_ip, &host, &[("x-canary", "yes")]).await.as_deref() == Some("west/store-v2-1"))
            .then_some(())
    })
    .await;

    // the route deleted: store's own pods again
    routes
        .delete("store-canary", &DeleteParams::default())
        .await
        .expect("route deleted");
    eventually("store's own pods again", PRESENT, || async {
        let who = ask(ip, &host, &[]).await?;
        who.starts_with("east/store-1")
            .then_some(())
            .or_else(|| who.starts_with("west/store-1").then_some(()))
    })
    .await;
    drop(proxy);
}
