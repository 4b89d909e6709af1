//! Table tests of the aggregator's pure `desired`: exported metadata that no API server
//! accepts stays off the ServiceImport and is reported on the export; clusters not
//! Ready past the TTL leave `status.clusters` (EPS-7).

use std::collections::BTreeSet;
use std::sync::Arc;

use causeway_crds::exported_service::ExportedService;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;

fn now() -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
}

fn exported(cluster: &str, labels: Value, annotations: Value) -> Arc<ExportedService> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "ExportedService",
            "metadata": {"name": format!("web.{cluster}"), "namespace": "demo"},
            "spec": {
                "cluster": cluster, "service": "web",
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
                "exportedLabels": labels, "exportedAnnotations": annotations,
                "exportCreationTimestamp": "2026-01-01T00:00:00Z",
            },
        }))
        .unwrap(),
    )
}

fn run(labels: Value, annotations: Value) -> Aggregate {
    let registered = BTreeSet::from(["east".to_string()]);
    let mut v = desired(
        &[exported("east", labels, annotations)],
        &registered,
        &Staleness::default(),
        &[],
        &[],
        &now(),
    );
    assert_eq!(v.len(), 1);
    v.remove(0)
}

fn valid_condition(v: &Aggregate) -> Condition {
    v.exports["web.east"]
        .0
        .iter()
        .find(|c| c.type_ == "Valid")
        .cloned()
        .expect("a Valid condition for the export")
}

#[test]
fn invalid_exported_keys_and_values_are_dropped_and_reported() {
    // (exportedLabels, exportedAnnotations, labels kept, annotations kept, fragments the
    // Valid=False message must hold; none when valid)
    type Case = (
        Value,
        Value,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
    );
    let table: &[Case] = &[
        (
            json!({"team": "web"}),
            json!({"example.com/owner": "x y z"}),
            &["team"],
            &["example.com/owner"],
            &[],
        ),
        (
            json!({"team": "web", "a b": "x"}),
            json!({}),
            &["team"],
            &[],
            &["spec.exportedLabels: Invalid value: \"a b\": name part must consist of"],
        ),
        (
            json!({"tier": "-front"}),
            json!({}),
            &[],
            &[],
            &[
                "spec.exportedLabels: Invalid value: \"-front\": a valid label must be an empty string",
            ],
        ),
        (
            json!({}),
            json!({"only/one/slash": "v", "Example.com/ok": "v"}),
            &[],
            &["Example.com/ok"],
            &["spec.exportedAnnotations: Invalid value: \"only/one/slash\""],
        ),
        // GW-4: where a clusterset IP's traffic goes is not the exporter's to say
        (
            json!({}),
            json!({"causeway.io/mesh-ports": "80=15000", "causeway.io/mesh-addresses": "10.9.9.9", "example.com/ok": "v"}),
            &[],
            &["example.com/ok"],
            &[
                "spec.exportedAnnotations: Invalid value: \"causeway.io/mesh-addresses\": reserved",
                "spec.exportedAnnotations: Invalid value: \"causeway.io/mesh-ports\": reserved",
            ],
        ),
        // the keys the MCS watches key a ServiceImport on (its service, its namespace,
        // that Causeway manages it): an export may not move or hide the import
        (
            json!({
                "multicluster.kubernetes.io/service-name": "other",
                "kubernetes.io/service-name": "other",
                "multicluster.kubernetes.io/source-cluster": "west",
                "causeway.io/origin-namespace": "kube-system",
                "causeway.io/managed": "false",
                "team": "web",
            }),
            json!({}),
            &["team"],
            &[],
            &[
                "spec.exportedLabels: Invalid value: \"causeway.io/managed\": reserved",
                "spec.exportedLabels: Invalid value: \"causeway.io/origin-namespace\": reserved",
                "spec.exportedLabels: Invalid value: \"kubernetes.io/service-name\": reserved",
                "spec.exportedLabels: Invalid value: \"multicluster.kubernetes.io/service-name\": reserved",
                "spec.exportedLabels: Invalid value: \"multicluster.kubernetes.io/source-cluster\": reserved",
            ],
        ),
        (
            json!({}),
            json!({"example.com/big": "x".repeat(256 * 1024)}),
            &[],
            &[],
            &[
                "spec.exportedAnnotations",
                "Too long: may not be more than 262144 bytes",
            ],
        ),
    ];
    for (labels, annotations, kept_labels, kept_annotations, errors) in table {
        let v = run(labels.clone(), annotations.clone());
        let got_labels: Vec<&str> = v
            .import
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != labels::MANAGED)
            .collect();
        assert_eq!(&got_labels, kept_labels, "labels for {labels}");
        let got_annotations: Vec<&str> = v
            .import
            .metadata
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            &got_annotations, kept_annotations,
            "annotations for {annotations}"
        );
        let valid = valid_condition(&v);
        if errors.is_empty() {
            assert_eq!(
                (valid.status.as_str(), valid.reason.as_str()),
                ("True", "Valid")
            );
        } else {
            assert_eq!(
                (valid.status.as_str(), valid.reason.as_str()),
                ("False", "InvalidExportedMetadata"),
                "{labels} {annotations}"
            );
            for e in *errors {
                assert!(
                    valid.message.contains(e),
                    "{e:?} not in {:?}",
                    valid.message
                );
            }
        }
        // the import is written either way, with its Conflict verdict
        assert!(
            v.exports["web.east"]
                .0
                .iter()
                .any(|c| c.type_ == "Conflict")
        );
    }
}

fn hub_slice(name: &str, cluster: &str, managed: bool) -> Arc<EndpointSlice> {
    let mut labels = json!({labels::SERVICE_NAME: "web", labels::SOURCE_CLUSTER: cluster});
    if managed {
        labels[labels::MANAGED] = json!(labels::MANAGED_VALUE);
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo", "labels": labels},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap(),
    )
}

#[test]
fn what_unregistered_clusters_left_is_withdrawn_and_nothing_else() {
    let exports = [
        exported("east", json!({}), json!({})),
        exported("gone", json!({}), json!({})),
    ];
    let slices = [
        hub_slice("web-1.east", "east", true),
        hub_slice("web-1.gone", "gone", true),
        // not Causeway's (no managed label): never touched
        hub_slice("web-2.gone", "gone", false),
    ];
    // (registered clusters, exports withdrawn, slices withdrawn)
    let table: &[(&[&str], &[&str], &[&str])] = &[
        (&["east", "gone"], &[], &[]),
        (&["east"], &["web.gone"], &["web-1.gone"]),
        (
            &[],
            &["web.east", "web.gone"],
            &["web-1.east", "web-1.gone"],
        ),
    ];
    for (registered, want_exports, want_slices) in table {
        let registered: BTreeSet<String> = registered.iter().map(|c| c.to_string()).collect();
        let w = withdrawals(&exports, &slices, &registered);
        let names = |l: &[(String, String, String)]| -> Vec<String> {
            l.iter().map(|(_, n, _)| n.clone()).collect()
        };
        assert_eq!(names(&w.exports), *want_exports, "{registered:?}");
        assert_eq!(names(&w.slices), *want_slices, "{registered:?}");
        assert!(
            w.exports
                .iter()
                .chain(&w.slices)
                .all(|(ns, _, svc)| ns == "demo" && svc == "web")
        );
    }
}

#[test]
fn the_hub_import_says_whether_mcs_endpoint_slices_exist() {
    let registered = BTreeSet::from(["east".to_string()]);
    let exports = [exported("east", json!({}), json!({}))];
    let status = |slices: &[Arc<EndpointSlice>]| {
        desired(
            &exports,
            &registered,
            &Staleness::default(),
            &[],
            slices,
            &now(),
        )[0]
        .import
        .status
        .as_ref()
        .and_then(|s| s.endpoint_slice_objects.clone())
    };
    assert_eq!(status(&[]).as_deref(), Some("Absent"));
    assert_eq!(
        status(&[hub_slice("web-1.east", "east", true)]).as_deref(),
        Some("Present")
    );
}

#[test]
fn a_cluster_not_ready_is_kept_until_the_ttl_then_left_out_until_ready_again() {
    use crate::mcs::stale::tests::{cluster, import_summary, stale_true, t, world};
    // east Ready; west not Ready since 1000 s (TTL 300 s); only west has slices
    let registered = BTreeSet::from(["east".to_string(), "west".to_string()]);
    let exports = [
        exported("east", json!({}), json!({})),
        exported("west", json!({}), json!({})),
    ];
    let slices = [hub_slice("web-1.west", "west", true)];
    let run = |stale: &Staleness, prev: Vec<Condition>| {
        let prev_import: ServiceImport = serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "ClusterSetIP"},
            "status": {"conditions": prev},
        }))
        .unwrap();
        let mut v = desired(
            &exports,
            &registered,
            stale,
            &[Arc::new(prev_import)],
            &slices,
            &t(1400),
        );
        let st = v.remove(0).import.status.unwrap();
        let (clusters, cond) = import_summary(&st);
        (clusters, st.endpoint_slice_objects.unwrap(), cond)
    };
    // (now, clusters listed, endpointSliceObjects, EndpointsStale (status, reason), fragment)
    type Case = (
        i64,
        &'static [&'static str],
        &'static str,
        Option<(&'static str, &'static str)>,
        &'static str,
    );
    let table: &[Case] = &[
        (
            1100,
            &["east", "west"],
            "Present",
            Some(("True", "ClusterNotReady")),
            "cluster west is not Ready since 1970-01-01T00:16:40Z: its last known endpoints are served until 1970-01-01T00:21:40Z",
        ),
        (
            1300,
            &["east"],
            "Absent",
            Some(("True", "EndpointsWithdrawn")),
            "its endpoints are withdrawn since 1970-01-01T00:21:40Z",
        ),
    ];
    for (now, clusters, objects, cond, fragment) in table {
        let (got_clusters, got_objects, got_cond) = run(&world(*now).1, vec![]);
        assert_eq!(&got_clusters, clusters, "at {now}");
        assert_eq!(&got_objects, objects, "at {now}");
        let (st, reason, msg) = got_cond.expect("an EndpointsStale condition");
        assert_eq!(Some((st.as_str(), reason.as_str())), *cond, "at {now}");
        assert!(msg.contains(fragment), "{msg:?} lacks {fragment:?}");
    }
    // withdrawn, not deleted: the hub objects of a registered cluster stay
    assert_eq!(
        withdrawals(&exports, &slices, &registered),
        Withdrawals::default()
    );
    // Ready again: listed, and the condition turns False
    let ready = Staleness::new(
        &[
            cluster("east", Some(("True", 0))),
            cluster("west", Some(("True", 1500))),
        ],
        crate::mcs::stale::tests::TTL,
        t(1600).0,
    );
    let (clusters, objects, cond) = run(&ready, vec![stale_true("EndpointsWithdrawn", 1100)]);
    assert_eq!(clusters, ["east", "west"]);
    assert_eq!(objects, "Present");
    assert_eq!(
        cond.map(|(s, r, _)| (s, r)),
        Some(("False".into(), "ClustersReady".into()))
    );
    // never stale: no condition
    assert_eq!(run(&ready, vec![]).2, None);
}
