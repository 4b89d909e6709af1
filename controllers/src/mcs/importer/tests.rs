//! Table tests of the importer's pure `desired`: every ServiceImport field a Service
//! also has reaches the derived Service (IMP-10), and `status.endpointSliceObjects`
//! says whether MCS EndpointSlices exist (IMP-13); a source cluster not Ready past the
//! TTL has its slices left out until it is Ready again (EPS-7).

use std::sync::Arc;

use causeway_crds::exported_service::ExportedService;
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
    hub_slice_of(name, "east")
}

fn hub_slice_of(name: &str, cluster: &str) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo", "labels": {
                labels::SERVICE_NAME: "web", labels::SOURCE_CLUSTER: cluster}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }))
        .unwrap(),
    )
}

/// The hub ExportedService of `demo/web` from `cluster`, with `ports` and `excluded`
/// (`status.excludedPorts`, `None`: no verdict yet).
fn exported(cluster: &str, ports: Value, excluded: Option<Value>) -> Arc<ExportedService> {
    let mut e = json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "ExportedService",
        "metadata": {"name": format!("web-{cluster}"), "namespace": "demo"},
        "spec": {"cluster": cluster, "service": "web", "ports": ports},
    });
    if let Some(x) = excluded {
        e["status"] = json!({"excludedPorts": x});
    }
    Arc::new(serde_json::from_value(e).unwrap())
}

/// What a member with namespace `demo`, no derived Services yet and the member
/// imports `prev` wants for `si` and the hub `slices` (east and west export the
/// import's one port).
fn import(
    si: &ServiceImport,
    slices: &[Arc<EndpointSlice>],
    stale: &Staleness,
    prev: &[Arc<ServiceImport>],
) -> Desired {
    let http = || json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    import_with(
        si,
        slices,
        &[
            exported("east", http(), None),
            exported("west", http(), None),
        ],
        stale,
        prev,
    )
}

fn import_with(
    si: &ServiceImport,
    slices: &[Arc<EndpointSlice>],
    exported: &[Arc<ExportedService>],
    stale: &Staleness,
    prev: &[Arc<ServiceImport>],
) -> Desired {
    desired(
        &[Arc::new(si.clone())],
        slices,
        exported,
        stale,
        &[ns("demo")],
        &[],
        prev,
        &now(),
    )
}

fn derived_service(si: Arc<ServiceImport>) -> Value {
    let want = import(&si, &[], &Staleness::default(), &[]);
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
        let want = import(&si, slices, &Staleness::default(), &[]);
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

#[test]
fn slices_of_a_cluster_not_ready_are_kept_until_the_ttl_then_left_out() {
    use crate::mcs::stale::tests::{TTL, cluster, import_summary, t, world};
    use causeway_crds::mcs::conditions::service_import::ENDPOINTS_STALE;
    // the hub import lists east and west (as before the aggregator withdrew west)
    let mut si = (*hub_import(json!({}))).clone();
    si.status =
        serde_json::from_value(json!({"clusters": [{"cluster": "east"}, {"cluster": "west"}]}))
            .unwrap();
    let slices = [
        hub_slice_of("web-1.east", "east"),
        hub_slice_of("web-1.west", "west"),
    ];
    let run = |si: &ServiceImport, stale: &Staleness, prev: &[Arc<ServiceImport>]| {
        let want = import(si, &slices, stale, prev);
        let sources: Vec<String> = want
            .slices
            .iter()
            .map(|s| super::super::source_cluster(s).to_string())
            .collect();
        let (clusters, cond) = import_summary(&want.imports[0].1);
        (sources, clusters, cond)
    };
    // (now, slice sources, status.clusters, EndpointsStale (status, reason), fragment)
    type Case = (
        i64,
        &'static [&'static str],
        &'static [&'static str],
        (&'static str, &'static str),
        &'static str,
    );
    let table: &[Case] = &[
        (
            1299,
            &["east", "west"],
            &["east", "west"],
            ("True", "ClusterNotReady"),
            "served until 1970-01-01T00:21:40Z, then withdrawn",
        ),
        (
            1300,
            &["east"],
            &["east"],
            ("True", "EndpointsWithdrawn"),
            "cluster west is not Ready since 1970-01-01T00:16:40Z: its endpoints are withdrawn since 1970-01-01T00:21:40Z",
        ),
    ];
    for (now, sources, clusters, cond, fragment) in table {
        let (got_sources, got_clusters, got_cond) = run(&si, &world(*now).1, &[]);
        assert_eq!(&got_sources, sources, "at {now}");
        assert_eq!(&got_clusters, clusters, "at {now}");
        let (st, reason, msg) = got_cond.expect("an EndpointsStale condition");
        assert_eq!((st.as_str(), reason.as_str()), *cond, "at {now}");
        assert!(msg.contains(fragment), "{msg:?} lacks {fragment:?}");
    }
    // once the hub import no longer lists west, its slices still make it a serving
    // cluster: the condition keeps saying it is withdrawn
    si.status = serde_json::from_value(json!({"clusters": [{"cluster": "east"}]})).unwrap();
    let (_, _, cond) = run(&si, &world(1300).1, &[]);
    assert_eq!(cond.map(|c| c.1), Some("EndpointsWithdrawn".to_string()));
    // Ready again: its slices are back and the condition turns False
    let ready = Staleness::new(
        &[
            cluster("east", Some(("True", 0))),
            cluster("west", Some(("True", 1500))),
        ],
        TTL,
        t(1600).0,
    );
    let mut prev = si.clone();
    prev.status = serde_json::from_value(json!({"conditions": [{
        "type": ENDPOINTS_STALE, "status": "True", "reason": "EndpointsWithdrawn",
        "message": "", "lastTransitionTime": "1970-01-01T00:18:20Z"}]}))
    .unwrap();
    let (sources, _, cond) = run(&si, &ready, &[Arc::new(prev)]);
    assert_eq!(sources, ["east", "west"]);
    assert_eq!(
        cond.map(|(s, r, _)| (s, r)),
        Some(("False".into(), "ClustersReady".into()))
    );
}

/// A member slice carries a port of the import only for a source cluster whose export
/// has exactly that port and whose verdict does not exclude it: a cluster that exports
/// another port under the import's port name never gets that port's traffic, also
/// before the aggregator's verdict (CR-3; a CI run once saw the second export's pod
/// answer on the first's port in that moment).
#[test]
fn a_slice_carries_only_the_ports_its_cluster_exports_exactly() {
    let si = hub_import(json!({"ports": [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "grpc", "port": 90, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}]}));
    let slice = |cluster: &str| {
        let mut s = (*hub_slice_of(&format!("web-1.{cluster}"), cluster)).clone();
        s.ports = serde_json::from_value(json!([
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "grpc", "port": 9090, "protocol": "TCP"}]))
        .unwrap();
        Arc::new(s)
    };
    let both = json!([{"name": "http", "port": 80}, {"name": "grpc", "port": 90, "appProtocol": "kubernetes.io/h2c"}]);
    // (what west exports, its verdict's excludedPorts, the port names its slice carries)
    let table: &[(Option<Value>, Option<Value>, &[&str])] = &[
        (Some(both.clone()), None, &["http", "grpc"]),
        // the name on another port number: not before the verdict, nor after it
        (Some(json!([{"name": "http", "port": 81}])), None, &[]),
        (
            Some(json!([{"name": "http", "port": 81}])),
            Some(json!([{"name": "http", "port": 81, "protocol": "TCP"}])),
            &[],
        ),
        // another protocol, another appProtocol
        (
            Some(json!([{"name": "http", "port": 80, "protocol": "UDP"}])),
            None,
            &[],
        ),
        (Some(json!([{"name": "grpc", "port": 90}])), None, &[]),
        // an empty protocol is the default: the same port
        (
            Some(json!([{"name": "http", "port": 80, "protocol": ""}])),
            None,
            &["http"],
        ),
        // a verdict that excludes a port the export has exactly (it was another one)
        (
            Some(both.clone()),
            Some(json!([{"name": "grpc", "port": 90, "protocol": "TCP"}])),
            &["http"],
        ),
    ];
    // (west's export alone: while no export has the import's port exactly, the hub import
    // lags a change of the exports and the port goes by name)
    for (west, excluded, want) in table {
        let mut exports = vec![exported("east", both.clone(), None)];
        if let Some(p) = west {
            exports.push(exported("west", p.clone(), excluded.clone()));
        }
        let got = import_with(
            &si,
            &[slice("east"), slice("west")],
            &exports,
            &Staleness::default(),
            &[],
        );
        let names = |cluster: &str| -> Vec<String> {
            let s = got
                .slices
                .iter()
                .find(|s| super::super::source_cluster(s) == cluster)
                .expect("a slice per source slice");
            s.ports
                .iter()
                .flatten()
                .map(|p| p.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(names("east"), ["http", "grpc"], "west {west:?}");
        assert_eq!(names("west"), *want, "west {west:?}, excluded {excluded:?}");
    }
    // no export (withdrawn, or not seen yet): no slice at all (not even one without
    // ports: headless DNS would answer its addresses)
    let got = import_with(
        &si,
        &[slice("east"), slice("west")],
        &[exported("east", both.clone(), None)],
        &Staleness::default(),
        &[],
    );
    assert!(
        got.slices
            .iter()
            .all(|s| super::super::source_cluster(s) == "east")
    );
    // the only exporter moves http to 8080 and grpc loses its appProtocol: until the hub
    // import follows, its ports still reach the cluster by name (none is another's)
    let changed = json!([{"name": "http", "port": 8080}, {"name": "grpc", "port": 90}]);
    let got = import_with(
        &si,
        &[slice("west")],
        &[exported("west", changed, None)],
        &Staleness::default(),
        &[],
    );
    let ports: Vec<_> = got.slices[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(ports, ["http", "grpc"]);
    // an unnamed port, the import's protocol unset: the same port
    let si = hub_import(json!({"ports": [{"port": 80}]}));
    let mut s = (*hub_slice_of("web-1.west", "west")).clone();
    s.ports = serde_json::from_value(json!([{"port": 8080, "protocol": "TCP"}])).unwrap();
    let got = import_with(
        &si,
        &[Arc::new(s)],
        &[
            exported(
                "west",
                json!([{"name": "", "port": 80, "protocol": "TCP", "appProtocol": ""}]),
                None,
            ),
            exported("east", json!([{"name": "", "port": 81}]), None),
        ],
        &Staleness::default(),
        &[],
    );
    assert_eq!(got.slices[0].ports.as_ref().map(Vec::len), Some(1));
}

/// GW-4: a port a mesh route captures (the hub import's mesh annotations) goes to the
/// causeway-proxies' mesh port instead of the pods; the others still go to the pods;
/// without the annotations nothing changes.
#[test]
fn captured_ports_go_to_the_mesh_waypoint() {
    use causeway_crds::gateway::mesh::{MESH_ADDRESSES, MESH_PORTS};
    let mut si = (*hub_import(json!({"ports": [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "admin", "port": 9090, "protocol": "TCP"}]})))
    .clone();
    let plain = import(&si, &[hub_slice("web-east")], &Staleness::default(), &[]);
    assert_eq!(plain.slices.len(), 1);
    si.metadata.annotations = Some(
        [
            (MESH_PORTS.to_string(), "80=15003".to_string()),
            (
                MESH_ADDRESSES.to_string(),
                "127.0.0.9,::1,127.0.0.10".to_string(),
            ),
        ]
        .into(),
    );
    let http_admin = || {
        json!([{"name": "http", "port": 80, "protocol": "TCP"},
               {"name": "admin", "port": 9090, "protocol": "TCP"}])
    };
    let mut pods = (*hub_slice("web-east")).clone();
    pods.ports = serde_json::from_value(json!([
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "admin", "port": 9091, "protocol": "TCP"}]))
    .unwrap();
    let want = import_with(
        &si,
        &[Arc::new(pods)],
        &[exported("east", http_admin(), None)],
        &Staleness::default(),
        &[],
    );
    let slices = serde_json::to_value(&want.slices).unwrap();
    // the pods' slice keeps only the port not captured
    assert_eq!(
        slices[0]["ports"],
        json!([{"name": "admin", "port": 9091, "protocol": "TCP"}])
    );
    // the waypoint's slice: both proxies, the mesh port under the captured port's name
    assert_eq!(
        slices[1]["metadata"]["labels"][labels::KUBERNETES_SERVICE_NAME],
        json!(derived_service_name("demo", "web"))
    );
    assert_eq!(
        slices[1]["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["addresses"][0].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["127.0.0.9", "127.0.0.10"]
    );
    assert_eq!(
        slices[1]["ports"],
        json!([{"name": "http", "port": 15003, "protocol": "TCP"}])
    );
    // a UDP port of the captured number is not captured
    let mut dns = si.clone();
    dns.spec.ports = serde_json::from_value(json!([
        {"name": "dns-tcp", "port": 80, "protocol": "TCP"},
        {"name": "dns", "port": 80, "protocol": "UDP"}]))
    .unwrap();
    let want = import(&dns, &[], &Staleness::default(), &[]);
    let mesh = serde_json::to_value(want.slices.last().unwrap()).unwrap();
    assert_eq!(
        mesh["ports"],
        json!([{"name": "dns-tcp", "port": 15003, "protocol": "TCP"}])
    );
    // no address: nothing captured
    si.metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(MESH_ADDRESSES);
    let want = import(&si, &[hub_slice("web-east")], &Staleness::default(), &[]);
    assert_eq!(want.slices.len(), 1);
}

/// GW-4 on a dual-stack member (IPv4 first): each family the derived Service has gets
/// its own waypoint slice when the proxies have an address of that family, and the
/// captured port leaves only the source slices of a family that got one (a family with
/// no proxy address keeps its direct endpoints, rather than refusing connections).
#[test]
fn dual_stack_captured_ports_get_a_waypoint_per_family() {
    use causeway_crds::gateway::mesh::{MESH_ADDRESSES, MESH_PORTS};
    let si = |addresses: &str| {
        let mut si = (*hub_import(json!({"ipFamilies": ["IPv4", "IPv6"], "ports": [
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "admin", "port": 9090, "protocol": "TCP"}]})))
        .clone();
        si.metadata.annotations = Some(
            [
                (MESH_PORTS.to_string(), "80=15003".to_string()),
                (MESH_ADDRESSES.to_string(), addresses.to_string()),
            ]
            .into(),
        );
        si
    };
    let pods = |name: &str, family: &str, address: &str| {
        Arc::new(
            serde_json::from_value::<EndpointSlice>(json!({
                "metadata": {"name": name, "namespace": "demo", "labels": {
                    labels::SERVICE_NAME: "web", labels::SOURCE_CLUSTER: "east"}},
                "addressType": family,
                "endpoints": [{"addresses": [address]}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                          {"name": "admin", "port": 9091, "protocol": "TCP"}],
            }))
            .unwrap(),
        )
    };
    let hub_slices = [
        pods("web-east-v4", "IPv4", "10.0.0.1"),
        pods("web-east-v6", "IPv6", "fd00::1"),
    ];
    // the member's derived Service, dual-stack with IPv4 first
    let derived = derived_service_name("demo", "web");
    let svc: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": derived, "namespace": "demo"},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
                     "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack"},
        }))
        .unwrap(),
    );
    let http_admin = json!([{"name": "http", "port": 80, "protocol": "TCP"},
                            {"name": "admin", "port": 9090, "protocol": "TCP"}]);
    let exports = [exported("east", http_admin, None)];
    // (proxies' addresses, per source slice's family: its ports' names,
    //  waypoint slices as (addressType, addresses))
    type Case<'a> = (
        &'a str,
        [(&'a str, &'a [&'a str]); 2],
        &'a [(&'a str, &'a [&'a str])],
    );
    let table: &[Case] = &[
        (
            "127.0.0.9,::9,127.0.0.10",
            [("IPv4", &["admin"]), ("IPv6", &["admin"])],
            &[("IPv4", &["127.0.0.9", "127.0.0.10"]), ("IPv6", &["::9"])],
        ),
        (
            "127.0.0.9",
            [("IPv4", &["admin"]), ("IPv6", &["http", "admin"])],
            &[("IPv4", &["127.0.0.9"])],
        ),
        (
            "::9",
            [("IPv4", &["http", "admin"]), ("IPv6", &["admin"])],
            &[("IPv6", &["::9"])],
        ),
    ];
    for (addresses, sources, waypoints) in table {
        for services in [vec![svc.clone()], vec![]] {
            // with the member's dual-stack derived Service, and before it exists (the
            // import's own families)
            let want = desired(
                &[Arc::new(si(addresses))],
                &hub_slices,
                &exports,
                &Staleness::default(),
                &[ns("demo")],
                &services,
                &[],
                &now(),
            );
            let case = format!("{addresses} (derived Service: {})", !services.is_empty());
            let (source, mesh): (Vec<&EndpointSlice>, Vec<&EndpointSlice>) = want
                .slices
                .iter()
                .partition(|s| s.labels().contains_key(labels::SOURCE_CLUSTER));
            let got: Vec<(&str, Vec<&str>)> = source
                .iter()
                .map(|s| {
                    (
                        s.address_type.as_str(),
                        s.ports
                            .iter()
                            .flatten()
                            .map(|p| p.name.as_deref().unwrap_or_default())
                            .collect(),
                    )
                })
                .collect();
            let expected: Vec<(&str, Vec<&str>)> =
                sources.iter().map(|(f, p)| (*f, p.to_vec())).collect();
            assert_eq!(got, expected, "{case}: source slices' ports");
            let got: Vec<(&str, Vec<&str>)> = mesh
                .iter()
                .map(|s| {
                    (
                        s.address_type.as_str(),
                        s.endpoints
                            .iter()
                            .map(|e| e.addresses[0].as_str())
                            .collect(),
                    )
                })
                .collect();
            let expected: Vec<(&str, Vec<&str>)> =
                waypoints.iter().map(|(f, a)| (*f, a.to_vec())).collect();
            assert_eq!(got, expected, "{case}: waypoint slices");
            for w in &mesh {
                assert_eq!(
                    serde_json::to_value(&w.ports).unwrap(),
                    json!([{"name": "http", "port": 15003, "protocol": "TCP"}]),
                    "{case}"
                );
                assert_eq!(
                    w.labels().get(labels::KUBERNETES_SERVICE_NAME),
                    Some(&derived),
                    "{case}"
                );
            }
            // each family's waypoint has a name of its own, the same whatever else the
            // proxies have (a slice's addressType never changes)
            let names: BTreeSet<String> = mesh.iter().map(|w| w.name_any()).collect();
            assert_eq!(names.len(), mesh.len(), "{case}");
            for w in &mesh {
                let suffix = if w.address_type == "IPv6" {
                    WAYPOINT_IPV6
                } else {
                    WAYPOINT_IPV4
                };
                assert_eq!(w.name_any(), member_slice_name(&derived, suffix), "{case}");
                // nor the single waypoint's name of before, which an IPv6-first import
                // holds with addressType IPv6
                assert_ne!(w.name_any(), member_slice_name(&derived, "mesh"), "{case}");
            }
        }
    }
}

/// A derived Service is recreated only for what an update may not change: headless or
/// not, and the primary IP family asked for.
#[test]
fn a_derived_service_is_recreated_only_for_what_an_update_cannot_change() {
    let svc = |v: serde_json::Value| -> Service {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "d"}, "spec": v})).unwrap()
    };
    let ip = svc(serde_json::json!({"clusterIP": "10.0.0.9", "ipFamilies": ["IPv4"]}));
    let rows = [
        (
            "headless to ClusterIP",
            svc(serde_json::json!({"clusterIP": "None", "ipFamilies": ["IPv4"]})),
            svc(serde_json::json!({"ipFamilies": ["IPv4"]})),
            true,
        ),
        (
            "ClusterIP to headless",
            ip.clone(),
            svc(serde_json::json!({"clusterIP": "None"})),
            true,
        ),
        (
            "same type and family",
            ip.clone(),
            svc(serde_json::json!({"ipFamilies": ["IPv4"]})),
            false,
        ),
        (
            "a port or affinity changed",
            ip.clone(),
            svc(serde_json::json!({"sessionAffinity": "ClientIP"})),
            false,
        ),
        (
            "another primary family",
            ip.clone(),
            svc(serde_json::json!({"ipFamilies": ["IPv6"]})),
            true,
        ),
        (
            "dual stack asked (no family given)",
            ip,
            svc(serde_json::json!({"ipFamilyPolicy": "PreferDualStack"})),
            false,
        ),
    ];
    for (case, actual, desired, want) in rows {
        assert_eq!(needs_recreate(&actual, &desired), want, "{case}");
    }
}

/// The member refused the derived Service: the import says why (`IPFamilyNotSupported`
/// for its families, IMP-7; `Failed` for anything else, a ResourceQuota, an admission
/// webhook, no cluster IP left), with the API server's message, rather than waiting for
/// cluster IPs; the other conditions stay as they are.
#[test]
fn a_refused_derived_service_makes_the_import_not_ready_with_the_answer() {
    let si = hub_import(json!({}));
    let want = import(&si, &[hub_slice("s1")], &Staleness::default(), &[]);
    let st = &want.imports[0].1;
    let ready = |st: &ServiceImportStatus| {
        let c = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    assert_eq!(ready(st).1, "Pending", "no derived Service yet");
    let quota = "exceeded quota: q, requested: services=1, used: services=0, limited: services=0";
    let table = [
        (
            Refused::Write(quota.into()),
            "Failed",
            format!("this cluster refused the derived Service (retrying): {quota}"),
        ),
        (
            Refused::IpFamilies("spec.ipFamilies[0]: Unsupported value: \"IPv6\"".into()),
            "IPFamilyNotSupported",
            "this cluster cannot serve the service's IP families: spec.ipFamilies[0]: Unsupported value: \"IPv6\"".into(),
        ),
    ];
    let later = Time(jiff::Timestamp::from_second(1_700_000_100).unwrap());
    for (why, reason, message) in table {
        let got = refused_status(st, &why, &[], &later);
        assert_eq!(
            ready(&got),
            ("False".into(), reason.into(), message.clone()),
            "{why:?}"
        );
        assert_eq!(
            got.conditions.len(),
            st.conditions.len(),
            "only Ready changes"
        );
        // a member import already False keeps its transition time
        let mut prev = got.conditions.clone();
        prev[0].last_transition_time = now();
        let again = refused_status(st, &why, &prev, &later);
        assert_eq!(again.conditions[0].last_transition_time, now(), "{why:?}");
        // one that was Ready turns False now
        prev[0].status = "True".into();
        let turned = refused_status(st, &why, &prev, &later);
        assert_eq!(turned.conditions[0].last_transition_time, later, "{why:?}");
    }
}

/// The derived Service's ports are the importer's alone: an `appProtocol` the import no
/// longer has goes from the member's derived Service, and the desired ports hold every field
/// the API server defaults on a port, so a converged importer writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_loses_its_app_protocol_loses_it_on_the_derived_service() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, ListParams, PostParams};
    let server = kubesim::Server::start(kubesim::Config::new("importer"))
        .await
        .expect("kubesim starts");
    let member = server.client().await;
    Api::<Namespace>::all(member.clone())
        .create(&PostParams::default(), &ns("demo"))
        .await
        .unwrap();
    let services = Api::<Service>::namespaced(member.clone(), "demo");
    let derived = || async {
        services
            .list(&ListParams::default().labels(labels::DERIVED_SERVICE_SELECTOR))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(Arc::new)
            .collect::<Vec<_>>()
    };
    let metrics = crate::metrics::Metrics::default();
    let mut memo = Memos::default();
    // one round of the importer's writes of the derived Service for `si`
    let mut round = async |si: Arc<ServiceImport>| {
        let want = Desired {
            services: import(&si, &[], &Staleness::default(), &[]).services,
            ..Desired::default()
        };
        let failures = write(
            &mut memo,
            "c1",
            &member,
            &want,
            &[],
            &derived().await,
            &[],
            &metrics,
            &now(),
        )
        .await;
        assert_eq!(failures.count, 0, "{failures:?}");
    };
    let app_protocols = || async {
        let d = derived().await;
        assert_eq!(d.len(), 1);
        d[0].spec
            .as_ref()
            .unwrap()
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.app_protocol))
            .collect::<Vec<_>>()
    };
    let two = |app: Value| {
        hub_import(json!({"ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "appProtocol": app},
            {"name": "dns", "port": 53, "protocol": "UDP"},
        ]}))
    };
    round(two(json!("http"))).await;
    assert_eq!(
        app_protocols().await,
        [("http".into(), Some("http".into())), ("dns".into(), None)]
    );
    round(two(Value::Null)).await;
    assert_eq!(
        app_protocols().await,
        [("http".into(), None), ("dns".into(), None)],
        "the appProtocol the import no longer has is gone"
    );
    // converged: the API server's defaults (protocol, targetPort) are what desired
    // says, so nothing is written again
    let before = server.write_requests();
    round(two(Value::Null)).await;
    round(two(Value::Null)).await;
    assert_eq!(
        server.write_requests(),
        before,
        "a converged importer writes nothing"
    );
}

/// GW-4 after an upgrade: an IPv6-first dual-stack import already has the single
/// waypoint slice of before (`mesh`, addressType IPv6, the derived Service's first
/// family). A slice's addressType never changes (kube-apiserver refuses the update with
/// 422), so no desired slice may take that name for the other family: each family's
/// waypoint is written under its own new name, and the old slice goes as one no longer
/// desired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_ipv6_first_import_gets_a_waypoint_per_family_under_new_names() {
    use causeway_crds::gateway::mesh::{MESH_ADDRESSES, MESH_PORTS};
    use kube::api::{Api, ListParams, PostParams};
    let server = kubesim::Server::start(kubesim::Config::new("importer"))
        .await
        .expect("kubesim starts");
    let member = server.client().await;
    Api::<Namespace>::all(member.clone())
        .create(&PostParams::default(), &ns("demo"))
        .await
        .unwrap();
    let derived = derived_service_name("demo", "web");
    let slices_api = Api::<EndpointSlice>::namespaced(member.clone(), "demo");
    let managed_by = format!(
        "{}={}",
        labels::ENDPOINTSLICE_MANAGED_BY,
        labels::ENDPOINTSLICE_MANAGED_BY_VALUE
    );
    let member_slices = || async {
        slices_api
            .list(&ListParams::default().labels(&managed_by))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(Arc::new)
            .collect::<Vec<_>>()
    };
    // what the importer wrote before: one waypoint slice `mesh`, of the first family
    let old_name = member_slice_name(&derived, "mesh");
    let old: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": old_name, "namespace": "demo", "labels": {
            labels::SERVICE_NAME: "web",
            labels::MANAGED: labels::MANAGED_VALUE,
            labels::ENDPOINTSLICE_MANAGED_BY: labels::ENDPOINTSLICE_MANAGED_BY_VALUE,
            labels::KUBERNETES_SERVICE_NAME: derived}},
        "addressType": "IPv6",
        "endpoints": [{"addresses": ["::9"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 15003, "protocol": "TCP"}],
    }))
    .unwrap();
    slices_api
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    // the hub import, IPv6 first, port 80 captured, proxies of both families
    let mut si = (*hub_import(json!({"ipFamilies": ["IPv6", "IPv4"], "ports": [
        {"name": "http", "port": 80, "protocol": "TCP"}]})))
    .clone();
    si.metadata.annotations = Some(
        [
            (MESH_PORTS.to_string(), "80=15003".to_string()),
            (MESH_ADDRESSES.to_string(), "127.0.0.9,::9".to_string()),
        ]
        .into(),
    );
    let pods = |name: &str, family: &str, address: &str| {
        Arc::new(
            serde_json::from_value::<EndpointSlice>(json!({
                "metadata": {"name": name, "namespace": "demo", "labels": {
                    labels::SERVICE_NAME: "web", labels::SOURCE_CLUSTER: "east"}},
                "addressType": family,
                "endpoints": [{"addresses": [address]}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }))
            .unwrap(),
        )
    };
    let hub_slices = [
        pods("web-v6.east", "IPv6", "fd00::1"),
        pods("web-v4.east", "IPv4", "10.0.0.1"),
    ];
    // the member's derived Service, dual-stack with IPv6 first
    let svc: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": derived, "namespace": "demo"},
            "spec": {"clusterIP": "fd00:96::10", "clusterIPs": ["fd00:96::10", "10.96.0.10"],
                     "ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "PreferDualStack"},
        }))
        .unwrap(),
    );
    let exports = [exported(
        "east",
        json!([{"name": "http", "port": 80, "protocol": "TCP"}]),
        None,
    )];
    let want = desired(
        &[Arc::new(si)],
        &hub_slices,
        &exports,
        &Staleness::default(),
        &[ns("demo")],
        &[svc],
        &[],
        &now(),
    );
    let metrics = crate::metrics::Metrics::default();
    let mut memo = Memos::default();
    let mut round = async || {
        let before = member_slices().await;
        let want = Desired {
            slices: want.slices.clone(),
            ..Desired::default()
        };
        let failures = write(
            &mut memo,
            "c1",
            &member,
            &want,
            &[],
            &[],
            &before,
            &metrics,
            &now(),
        )
        .await;
        assert_eq!(failures.count, 0, "{failures:?}");
        let after = member_slices().await;
        // what kube-apiserver enforces and kubesim does not: a name keeps its family
        for b in &before {
            if let Some(a) = after.iter().find(|a| a.name_any() == b.name_any()) {
                assert_eq!(
                    a.address_type,
                    b.address_type,
                    "{}: an EndpointSlice's addressType is immutable",
                    b.name_any()
                );
            }
        }
        after
    };
    let after = round().await;
    let waypoints: BTreeMap<String, (String, Vec<String>)> = after
        .iter()
        .filter(|s| !s.labels().contains_key(labels::SOURCE_CLUSTER))
        .map(|s| {
            (
                s.name_any(),
                (
                    s.address_type.clone(),
                    s.endpoints
                        .iter()
                        .flat_map(|e| e.addresses.clone())
                        .collect(),
                ),
            )
        })
        .collect();
    assert_eq!(
        waypoints,
        BTreeMap::from([
            (
                member_slice_name(&derived, WAYPOINT_IPV4),
                ("IPv4".to_string(), vec!["127.0.0.9".to_string()])
            ),
            (
                member_slice_name(&derived, WAYPOINT_IPV6),
                ("IPv6".to_string(), vec!["::9".to_string()])
            ),
        ]),
        "a waypoint per family under new names; the old `mesh` slice is gone"
    );
    // the captured port left both families' source slices, each with its waypoint
    for s in after
        .iter()
        .filter(|s| s.labels().contains_key(labels::SOURCE_CLUSTER))
    {
        assert_eq!(s.ports.as_deref(), Some(&[][..]), "{}", s.name_any());
    }
    // converged: nothing is written again
    let before = server.write_requests();
    round().await;
    assert_eq!(
        server.write_requests(),
        before,
        "a converged importer writes nothing"
    );
}

/// Only an answer that says no to the derived Service is a refusal the member import
/// reports (Ready=False); a write that got none (a timeout, a lost connection, 429, a
/// 5xx, a namespace that just went) is only retried, and a refusal said before stays
/// as it is meanwhile rather than turning back into Pending.
#[test]
fn only_an_answer_that_says_no_is_a_refusal_of_the_derived_service() {
    let api = |code: u16, reason: &str, message: &str| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }))
    };
    let quota = "services \"d\" is forbidden: exceeded quota: q, requested: services=1, used: services=0, limited: services=0";
    let families = "Service \"d\" is invalid: spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster";
    let full = "Internal error occurred: failed to allocate a serviceIP: range is full";
    let table: Vec<(&str, kube::Error, Option<Refused>)> = vec![
        (
            "quota",
            api(403, "Forbidden", quota),
            Some(Refused::Write(quota.into())),
        ),
        (
            "webhook",
            api(
                400,
                "BadRequest",
                "admission webhook \"x\" denied the request: no",
            ),
            Some(Refused::Write(
                "admission webhook \"x\" denied the request: no".into(),
            )),
        ),
        (
            "conflict",
            api(409, "Conflict", "Apply failed with 1 conflict"),
            Some(Refused::Write("Apply failed with 1 conflict".into())),
        ),
        (
            "invalid",
            api(
                422,
                "Invalid",
                "Service \"d\" is invalid: spec.ports[0].port: Invalid value",
            ),
            Some(Refused::Write(
                "Service \"d\" is invalid: spec.ports[0].port: Invalid value".into(),
            )),
        ),
        (
            "families",
            api(422, "Invalid", families),
            Some(Refused::IpFamilies(families.into())),
        ),
        (
            "no cluster IP left",
            api(500, "InternalError", full),
            Some(Refused::Write(full.into())),
        ),
        (
            "throttled",
            api(429, "TooManyRequests", "too many requests"),
            None,
        ),
        (
            "internal",
            api(
                500,
                "InternalError",
                "Internal error occurred: etcdserver: leader changed",
            ),
            None,
        ),
        (
            "webhook unreachable",
            api(
                500,
                "InternalError",
                "Internal error occurred: failed calling webhook \"x\": context deadline exceeded",
            ),
            None,
        ),
        (
            "unavailable",
            api(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            None,
        ),
        (
            "server timeout",
            api(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            None,
        ),
        (
            "namespace gone",
            api(404, "NotFound", "namespaces \"demo\" not found"),
            None,
        ),
        (
            "client timeout",
            kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ))),
            None,
        ),
        (
            "connection",
            kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            ))),
            None,
        ),
    ];
    for (case, e, want) in table {
        assert_eq!(refusal(&e), want, "{case}");
    }

    // while unanswered: a refusal said before stays, anything else is as desired
    let si = hub_import(json!({}));
    let want = import(&si, &[hub_slice("s1")], &Staleness::default(), &[]);
    let st = &want.imports[0].1;
    let ready = |st: &ServiceImportStatus| {
        let c = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    assert_eq!(ready(&unanswered_status(st, &[])), ready(st));
    for why in [
        Refused::Write(quota.into()),
        Refused::IpFamilies(families.into()),
    ] {
        let before = refused_status(st, &why, &[], &now());
        let kept = unanswered_status(st, &before.conditions);
        assert_eq!(kept.conditions, before.conditions, "{why:?}");
    }
    let mut ready_before = st.conditions.clone();
    ready_before[0].status = "True".into();
    ready_before[0].reason = "Ready".into();
    assert_eq!(ready(&unanswered_status(st, &ready_before)), ready(st));
}

/// EXP-1/2: a hub slice whose cluster has no export on the hub (one left behind by a
/// refused delete, or published while its export was refused) is not imported: not
/// for a ClusterSetIP import, nor a headless one, whose DNS answers every address of
/// the member slices whatever their ports; `endpointSliceObjects` says Absent.
#[test]
fn slices_of_a_cluster_without_an_export_are_not_imported() {
    let http = || json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    for spec in [json!({}), json!({"type": "Headless"})] {
        let si = hub_import(spec.clone());
        let slices = [
            hub_slice_of("web.east", "east"),
            hub_slice_of("web.west", "west"),
        ];
        let want = import_with(
            &si,
            &slices,
            &[exported("east", http(), None)],
            &Staleness::default(),
            &[],
        );
        let from: Vec<&str> = want
            .slices
            .iter()
            .map(|s| s.labels()[labels::SOURCE_CLUSTER].as_str())
            .collect();
        assert_eq!(from, ["east"], "{spec}");
        let alone = import_with(
            &si,
            &[hub_slice_of("web.west", "west")],
            &[],
            &Staleness::default(),
            &[],
        );
        assert!(alone.slices.is_empty(), "{spec}");
        assert_eq!(
            alone.imports[0].1.endpoint_slice_objects.as_deref(),
            Some(values::ENDPOINT_SLICE_OBJECTS_ABSENT),
            "{spec}"
        );
    }
}
