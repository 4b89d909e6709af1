//! MultiClusterIngress, data plane, end to end: member Services with real HTTP backends
//! are exported by the MCS controllers, the MCI controller accepts the demo MCI, and
//! causeway-proxy (in-process, watching the hub) balances real HTTP clients across all
//! three clusters and follows endpoint health and dead backends, and keeps serving a
//! cluster whose API server is not ready (its endpoints are stale, not dead).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use causeway_crds::mci::MultiClusterIngress;
use causeway_e2e::backends::{Backend, set_endpoints};
use causeway_e2e::demo;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::api::Api;

use crate::mcs_support::{Mcs, PRESENT, eventually};

pub(crate) type Http = Client<HttpConnector, Empty<Bytes>>;

pub(crate) fn http_client() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

/// GET `path` through the proxy; Ok((status, body)) or Err(transport error).
async fn get(c: &Http, proxy: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let req = hyper::Request::get(format!("http://{proxy}{path}"))
        .header("host", "demo.example.com")
        .body(Empty::new())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), c.request(req))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).trim().to_string()))
}

/// Sends `n` requests; returns hits by `<cluster>/<pod>` and the failures.
pub(crate) async fn spray(
    c: &Http,
    proxy: SocketAddr,
    n: usize,
) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut hits = BTreeMap::new();
    let mut failures = Vec::new();
    for _ in 0..n {
        match get(c, proxy, "/").await {
            Ok((200, body)) => *hits.entry(body).or_insert(0) += 1,
            Ok((code, body)) => failures.push(format!("{code} {body}")),
            Err(e) => failures.push(e),
        }
    }
    (hits, failures)
}

pub(crate) fn clusters(hits: &BTreeMap<String, usize>) -> BTreeSet<String> {
    hits.keys()
        .filter_map(|k| k.split('/').next())
        .map(String::from)
        .collect()
}

/// causeway-proxy started with a hub token bound only to deploy/rbac/proxy.yaml.
pub(crate) async fn proxy_as_deployed(
    mcs: &Mcs,
    cfg: causeway_proxy::Config,
) -> causeway_proxy::Running {
    let kubectl = crate::mci::Kubectl::new(mcs);
    kubectl
        .ok("hub", &["apply", "-f", "deploy/rbac/proxy.yaml"])
        .await;
    mcs.cs.hub.add_token(
        "proxy-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-proxy".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let access = causeway_controllers::clusters::join::MemberAccess {
        token: "proxy-token".into(),
        ..causeway_e2e::access(&mcs.cs.hub)
    };
    let restricted = causeway_controllers::clusters::join::client_for(&access)
        .await
        .unwrap();
    causeway_proxy::start(restricted, cfg)
        .await
        .expect("proxy starts")
}

pub(crate) struct Fixture {
    pub(crate) mcs: Mcs,
    pub(crate) backends: Vec<Backend>,
    pub(crate) proxy: causeway_proxy::Running,
    pub(crate) client: Http,
}

impl Fixture {
    pub(crate) async fn start() -> Fixture {
        Fixture::start_with(|_| {}).await
    }

    /// [`Fixture::start`] with the proxy's configuration changed by `f`.
    pub(crate) async fn start_with(f: impl FnOnce(&mut causeway_proxy::Config)) -> Fixture {
        let mcs = Mcs::start(&["east", "west", "north"], false).await;
        mcs.cs
            .create_namespace_everywhere(demo::NAMESPACE)
            .await
            .unwrap();
        let backends = demo::web(&mcs.cs, 2).await.unwrap();
        let mut cfg = causeway_proxy::Config {
            listen_http: "127.0.0.1:0".parse().unwrap(),
            metrics: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        };
        f(&mut cfg);
        let proxy = proxy_as_deployed(&mcs, cfg).await;
        Fixture {
            mcs,
            backends,
            proxy,
            client: http_client(),
        }
    }

    pub(crate) fn member(&self, name: &str) -> usize {
        ["east", "west", "north"]
            .iter()
            .position(|m| *m == name)
            .unwrap()
    }

    fn pods_of(&self, cluster: &str) -> Vec<&Backend> {
        self.backends
            .iter()
            .filter(|b| b.cluster == cluster)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_reaches_every_cluster_and_follows_endpoint_health() {
    let f = Fixture::start().await;
    let proxy = f.proxy.http;
    // The demo MCI's traffic reaches all three clusters.
    let hits = eventually("answers from east, west and north", PRESENT, || async {
        let (hits, _) = spray(&f.client, proxy, 30).await;
        (clusters(&hits).len() == 3).then_some(hits)
    })
    .await;
    eprintln!("distribution over 30 requests: {hits:?}");
    // The demo MCI asks for round robin: every pod of every cluster gets its share.
    let (hits, failures) = spray(&f.client, proxy, 90).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(hits.len(), 6, "all six pods answer: {hits:?}");
    for (pod, n) in &hits {
        assert!(*n >= 10, "every pod gets a share: {hits:?} ({pod})");
    }
    // The controller publishes the proxy's address in the MCI status.
    let api: Api<MultiClusterIngress> = Api::namespaced(f.mcs.hub.clone(), demo::NAMESPACE);
    eventually("status.loadBalancer has the proxy", PRESENT, || async {
        let m = api.get_opt(demo::SERVICE).await.ok()??;
        let lb = m.status?.load_balancer?.ingress?;
        lb.iter()
            .any(|i| i.ip.as_deref() == Some("127.0.0.1"))
            .then_some(())
    })
    .await;

    // An endpoint turning not-ready in its member's EndpointSlice stops getting traffic.
    let east = f.pods_of("east");
    let (east_c, victim) = (f.mcs.c(f.member("east")), east[0].pod.clone());
    let ready = BTreeMap::from([(victim.clone(), false)]);
    set_endpoints(&east_c, demo::NAMESPACE, demo::SERVICE, &east, &ready)
        .await
        .unwrap();
    let changed = Instant::now();
    let key = format!("east/{victim}");
    eventually(
        "the not-ready endpoint gets no traffic",
        PRESENT,
        || async {
            let (hits, _) = spray(&f.client, proxy, 30).await;
            (!hits.contains_key(&key)).then_some(())
        },
    )
    .await;
    eprintln!(
        "not-ready endpoint out of rotation after {:?} (member slice → exporter → hub → proxy)",
        changed.elapsed()
    );
    let (hits, failures) = spray(&f.client, proxy, 60).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(!hits.contains_key(&key), "{hits:?}");
    assert_eq!(clusters(&hits).len(), 3, "{hits:?}");

    // A backend killed under load: connect failures are retried on another endpoint.
    let west = f.pods_of("west");
    west[0].kill();
    let dead = format!("west/{}", west[0].pod);
    let (hits, failures) = spray(&f.client, proxy, 200).await;
    assert!(
        failures.len() <= 200 / 5,
        "more client errors than the 20% retry budget: {failures:?}"
    );
    eprintln!(
        "backend killed: {} client errors of 200; distribution {hits:?}",
        failures.len()
    );
    let (hits, failures) = spray(&f.client, proxy, 60).await;
    assert!(failures.is_empty(), "after ejection: {failures:?}");
    assert!(!hits.contains_key(&dead), "{hits:?}");

    // A member whose API server is not ready is a control-plane outage, not a
    // data-plane one (EPS-7): north's pods keep getting traffic within the
    // stale-endpoints TTL (stale.rs covers the drain after it).
    f.mcs.cs.members[f.member("north")]
        .faults()
        .set_not_ready(true);
    eventually("north's Cluster is not Ready", PRESENT, || async {
        let c = crate::stale::cluster_ready(&f.mcs.hub, "north").await?;
        (c.status != "True").then_some(())
    })
    .await;
    let (hits, failures) = spray(&f.client, proxy, 30).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(clusters(&hits).contains("north"), "{hits:?}");
    f.mcs.cs.members[f.member("north")]
        .faults()
        .set_not_ready(false);
    eventually("north back in rotation", PRESENT, || async {
        let (hits, _) = spray(&f.client, proxy, 30).await;
        clusters(&hits).contains("north").then_some(())
    })
    .await;
    f.proxy.shutdown().await;
}

/// MCI-10: a TLS Secret the proxy cannot serve a certificate from shows on the MCI (the
/// HTTPS port's `error`, the Accepted reason and a Warning Event) until it is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_secret_the_proxy_cannot_serve_shows_on_the_mci() {
    use k8s_openapi::api::core::v1::{Event, Secret};
    use kube::api::{Patch, PatchParams, PostParams};

    let mcs = Mcs::start(&["east"], false).await;
    mcs.cs
        .create_namespace_everywhere(demo::NAMESPACE)
        .await
        .unwrap();
    let _backends = demo::web(&mcs.cs, 1).await.unwrap();
    let cfg = causeway_proxy::Config {
        listen_http: "127.0.0.1:0".parse().unwrap(),
        listen_https: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    };
    let proxy = proxy_as_deployed(&mcs, cfg).await;
    let https = i32::from(proxy.https.unwrap().port());
    let api: Api<MultiClusterIngress> = Api::namespaced(mcs.hub.clone(), demo::NAMESPACE);
    api.patch(
        demo::SERVICE,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"tls": [
            {"hosts": ["web.example.com"], "secretName": "web-cert"}]}})),
    )
    .await
    .unwrap();
    // (the HTTPS port's error, the Accepted condition's reason and message)
    let seen = || async {
        let m = api.get_opt(demo::SERVICE).await.ok()??;
        let st = m.status?;
        let port = st
            .load_balancer?
            .ingress?
            .into_iter()
            .flat_map(|i| i.ports.unwrap_or_default())
            .find(|p| p.port == https)?;
        let c = st.conditions.into_iter().find(|c| c.type_ == "Accepted")?;
        Some((port.error, c.reason, c.message))
    };
    let (_, _, message) = eventually("the HTTPS port's error", PRESENT, || async {
        seen().await.filter(|(e, r, _)| {
            e.as_deref() == Some("causeway.io/TLSSecretNotFound") && r == "TLSSecretUnusable"
        })
    })
    .await;
    assert!(
        message.contains("TLS Secret demo/web-cert: not found")
            && message.contains("web.example.com get the proxy's default certificate"),
        "{message}"
    );
    let events: Api<Event> = Api::namespaced(mcs.hub.clone(), demo::NAMESPACE);
    eventually("a Warning Event", PRESENT, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("TLSSecretUnusable")
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.name.as_deref() == Some(demo::SERVICE)
            })
            .then_some(())
    })
    .await;

    // the Secret arrives: no error, the usual reason
    let cert = rcgen::generate_simple_self_signed(vec!["web.example.com".to_string()]).unwrap();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "web-cert", "namespace": demo::NAMESPACE},
        "stringData": {"tls.crt": cert.cert.pem(), "tls.key": cert.signing_key.serialize_pem()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(mcs.hub.clone(), demo::NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    eventually("no error once the Secret serves", PRESENT, || async {
        seen()
            .await
            .filter(|(e, r, _)| e.is_none() && r == "Accepted")
    })
    .await;
    proxy.shutdown().await;
}
