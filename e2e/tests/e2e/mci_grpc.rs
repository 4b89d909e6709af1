//! gRPC end to end: a gRPC Service (port `appProtocol: grpc`) with a real tonic server
//! in each of two member clusters is exported by the MCS controllers, and one
//! MultiClusterIngress on the hub makes it reachable through causeway-proxy: a tonic
//! client's calls reach both clusters' backends over HTTP/2 (unary and server
//! streaming, trailers included).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use causeway_e2e::backends::pod_ip;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[path = "../../../proxy/tests/proxy/grpc_support.rs"]
pub(crate) mod grpc_support;

use grpc_support::{Echo, GRPC_PORT, GrpcClient, GrpcPod};

use crate::mcs_support::{Mcs, PRESENT, create_ns, eventually};

const HOST: &str = "grpc.example.com";

/// A tonic echo server in east and in west (pod `pod` of each: its own loopback IP, so
/// tests can run side by side) behind Service `echo` (port `grpc`, `appProtocol:
/// grpc`), exported from both.
pub(crate) async fn echo_in_two_clusters(mcs: &Mcs, pod: usize) -> Vec<GrpcPod> {
    let mut pods = Vec::new();
    for (i, cluster) in ["east", "west"].iter().enumerate() {
        let IpAddr::V4(ip) = pod_ip(i + 1, pod) else {
            unreachable!("pod IPs are IPv4")
        };
        let pod = GrpcPod::start(ip.octets(), &format!("{cluster}/echo"))
            .await
            .unwrap();
        let spec = json!({"ports": [{"name": "grpc", "port": 50051, "targetPort": GRPC_PORT,
                                     "protocol": "TCP", "appProtocol": "grpc"}]});
        mcs.service(i, "echo", spec, &[&ip.to_string()]).await;
        mcs.export(i, "echo", "exported-label").await;
        pods.push(pod);
    }
    pods
}

/// Unary calls through `c` until both east and west have answered.
pub(crate) async fn calls_reach_both(c: &GrpcClient) {
    let clusters = eventually("calls answered by east and west", PRESENT, || async {
        let mut seen = BTreeSet::new();
        for i in 0..20 {
            if let Ok(r) = c.unary(Echo::text(&i.to_string()), None).await {
                let text = r.into_inner().text;
                seen.insert(text.split('/').next().unwrap_or_default().to_string());
            }
        }
        (seen.len() == 2).then_some(seen)
    })
    .await;
    assert_eq!(clusters, BTreeSet::from(["east".into(), "west".into()]));
}

/// Starts causeway-proxy on `hub` and checks gRPC through it to `host`: unary calls
/// reach east and west, a server stream arrives whole with its trailers; then stops it.
pub(crate) async fn through_proxy(hub: &kube::Client, host: &str) {
    let cfg = causeway_proxy::Config {
        listen_http: "127.0.0.1:0".parse().unwrap(),
        metrics: None,
        publish_lease: false,
        ..Default::default()
    };
    let proxy = causeway_proxy::start(hub.clone(), cfg).await.unwrap();
    let c = GrpcClient::connect(proxy.http, host).await.unwrap();
    // The aggregated ServiceImport keeps appProtocol grpc: the proxy speaks HTTP/2 to
    // both clusters' backends, and the calls reach each of them.
    calls_reach_both(&c).await;
    // Server streaming with its trailing metadata, through the same route.
    let ask = Echo {
        count: 3,
        sleep_ms: 5,
        ..Echo::text("s")
    };
    let (got, trailers) = c.stream(ask, None).await.unwrap();
    let served_by = trailers.get("x-served-by").unwrap().to_str().unwrap();
    let want: Vec<String> = (0..3).map(|i| format!("{served_by}:s-{i}")).collect();
    assert_eq!(got, want);
    tokio::time::timeout(Duration::from_secs(15), proxy.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_service_in_two_clusters_is_reachable_through_one_mci() {
    let mcs = Mcs::start(&["east", "west"], false).await;
    let pods = echo_in_two_clusters(&mcs, 41).await;
    // The hub: the class causeway-proxy serves, and one MCI for the gRPC Service.
    create_ns(&mcs.hub, &mcs.ns).await;
    let apply = PatchParams::apply("test").force();
    let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "causeway",
                     "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": causeway_crds::well_known::INGRESS_CONTROLLER}});
    Api::<IngressClass>::all(mcs.hub.clone())
        .patch("causeway", &apply, &Patch::Apply(&class))
        .await
        .unwrap();
    let mci = json!({"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
        "metadata": {"name": "echo", "namespace": mcs.ns},
        "spec": {"rules": [{"host": HOST, "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "echo", "port": {"name": "grpc"}}}}]}}]}});
    Api::<causeway_crds::mci::MultiClusterIngress>::namespaced(mcs.hub.clone(), &mcs.ns)
        .patch("echo", &apply, &Patch::Apply(&mci))
        .await
        .unwrap();

    through_proxy(&mcs.hub, HOST).await;
    for p in &pods {
        assert!(p.calls() > 0);
    }
}
