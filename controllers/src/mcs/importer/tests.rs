//! Table tests of the importer's pure `desired`: every ServiceImport field a Service
//! also has reaches the derived Service (IMP-10), and `status.endpointSliceObjects`
//! says whether MCS EndpointSlices exist (IMP-13).

use std::sync::Arc;

use causeway_crds::mcs::v1beta1::ServiceImport;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;

fn now() -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
}

fn ns(name: &str) -> Arc<Namespace> {
    Arc::new(serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
}

/// A hub ServiceImport `demo/web` with `spec` merged over a one-port ClusterSetIP spec.
fn hub_import(spec: Value) -> Arc<ServiceImport> {
    let mut base =
        json!({"type": "ClusterSetIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]});
    base.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": base,
            "status": {"clusters": [{"cluster": "east"}]},
        }))
        .unwrap(),
    )
}

fn hub_slice(name: &str) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo", "labels": {
                labels::SERVICE_NAME: "web", labels::SOURCE_CLUSTER: "east"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .unwrap(),
    )
}

fn derived_service(si: Arc<ServiceImport>) -> Value {
    let want = desired(&[si], &[], &[], &[ns("demo")], &[], &[], &now());
    assert_eq!(want.services.len(), 1);
    serde_json::to_value(&want.services[0].spec).unwrap()
}

#[test]
fn every_service_field_of_the_import_reaches_the_derived_service() {
    // (field set on the ServiceImport, path in the derived Service's spec, expected value)
    let table: &[(Value, &str, Value)] = &[
        (
            json!({"sessionAffinity": "ClientIP"}),
            "/sessionAffinity",
            json!("ClientIP"),
        ),
        (
            json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}}}),
            "/sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": 10}}),
        ),
        (
            json!({"internalTrafficPolicy": "Local"}),
            "/internalTrafficPolicy",
            json!("Local"),
        ),
        (
            json!({"trafficDistribution": "PreferClose"}),
            "/trafficDistribution",
            json!("PreferClose"),
        ),
        (
            json!({"ipFamilies": ["IPv6"]}),
            "/ipFamilies",
            json!(["IPv6"]),
        ),
        (
            json!({"ipFamilies": ["IPv6"]}),
            "/ipFamilyPolicy",
            json!("SingleStack"),
        ),
        (
            json!({"ipFamilies": ["IPv4", "IPv6"]}),
            "/ipFamilyPolicy",
            json!("PreferDualStack"),
        ),
        (json!({"type": "Headless"}), "/clusterIP", json!("None")),
        (
            json!({"ports": [{"name": "grpc", "port": 9000, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}]}),
            "/ports",
            json!([{"name": "grpc", "port": 9000, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "targetPort": 9000}]),
        ),
        (
            json!({"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}),
            "/ports/0/protocol",
            json!("UDP"),
        ),
    ];
    for (spec, path, expected) in table {
        let got = derived_service(hub_import(spec.clone()));
        assert_eq!(
            got.pointer(path),
            Some(expected),
            "ServiceImport spec {spec} → derived Service {path}; derived spec: {got}"
        );
    }
}

#[test]
fn unset_fields_stay_unset_on_the_derived_service() {
    let got = derived_service(hub_import(json!({})));
    for path in [
        "/internalTrafficPolicy",
        "/trafficDistribution",
        "/sessionAffinityConfig",
    ] {
        assert_eq!(got.pointer(path), None, "{path} in {got}");
    }
}

#[test]
fn endpoint_slice_objects_is_present_only_with_slices() {
    let si = hub_import(json!({}));
    let status = |slices: &[Arc<EndpointSlice>]| {
        let want = desired(
            std::slice::from_ref(&si),
            slices,
            &[],
            &[ns("demo")],
            &[],
            &[],
            &now(),
        );
        (
            want.imports[0].1.endpoint_slice_objects.clone(),
            want.slices.len(),
        )
    };
    assert_eq!(status(&[]), (Some("Absent".to_string()), 0));
    assert_eq!(
        status(&[hub_slice("web-abc.east"), hub_slice("web-def.east")]),
        (Some("Present".to_string()), 2)
    );
}
