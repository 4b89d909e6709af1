//! The "done when" for Gateway API: the gRPC Service of `mci_grpc.rs` (a tonic
//! server in east and in west, `appProtocol: grpc`) reached through one HTTPRoute with a
//! ServiceImport backendRef instead of an MCI: unary calls reach both clusters and a
//! server stream keeps its trailers, and the route is Accepted with resolved refs.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::gateway_support::{ACCEPTED, expect_route};
use crate::mci_grpc::{echo_in_two_clusters, through_proxy};
use crate::mcs_support::{Mcs, create_ns};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_service_in_two_clusters_is_reachable_through_one_http_route() {
    let mcs = Mcs::start(&["east", "west"], false).await;
    let _pods = echo_in_two_clusters(&mcs, 42).await;
    create_ns(&mcs.hub, &mcs.ns).await;
    let ns = mcs.ns.as_str();
    let objects = [
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "causeway"},
            "spec": {"controllerName": causeway_crds::gateway::CONTROLLER_NAME}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "grpc", "namespace": ns},
            "spec": {"gatewayClassName": "causeway",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "echo", "namespace": ns},
            "spec": {"parentRefs": [{"name": "grpc"}], "hostnames": ["grpc.example.com"],
                     "rules": [{"backendRefs": [{"group": "multicluster.x-k8s.io",
                         "kind": "ServiceImport", "name": "echo", "port": 50051}]}]}}),
    ];
    for o in &objects {
        let gvk = kube::api::GroupVersionKind::try_from(&kube::api::TypeMeta {
            api_version: o["apiVersion"].as_str().unwrap().into(),
            kind: o["kind"].as_str().unwrap().into(),
        })
        .unwrap();
        let (ar, _) = kube::discovery::pinned_kind(&mcs.hub, &gvk).await.unwrap();
        let name = o["metadata"]["name"].as_str().unwrap();
        let api: Api<kube::api::DynamicObject> = match o["metadata"]["namespace"].as_str() {
            Some(n) => Api::namespaced_with(mcs.hub.clone(), n, &ar),
            None => Api::all_with(mcs.hub.clone(), &ar),
        };
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(o))
            .await
            .unwrap();
    }
    through_proxy(&mcs.hub, "grpc.example.com").await;
    expect_route(&mcs.hub, ns, "echo", "grpc", &ACCEPTED).await;
}
