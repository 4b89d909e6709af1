//! Table tests of the conformance fixtures (CONF-3/4/5/6/7/9/10/11/15/26/27);
//! the rules chosen where the KEP leaves room are in [`rules`].

use k8s_openapi::api::core::v1::{ClientIPConfig, SessionAffinityConfig};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::exported_service::ExportedServicePort;
use crate::mcs::conditions::service_export::reason::*;

mod rules;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).expect("valid timestamp"))
}

fn port(name: &str, protocol: &str, number: i32) -> ExportedServicePort {
    ExportedServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port: number,
        ..Default::default()
    }
}

fn import_port(name: &str, protocol: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port: number,
        app_protocol: None,
    }
}

fn client_ip(timeout: i32) -> SessionAffinityConfig {
    SessionAffinityConfig {
        client_ip: Some(ClientIPConfig {
            timeout_seconds: Some(timeout),
        }),
    }
}

/// The conformance suite's Service `hello` (tcp/42 + udp/42, ClientIP with
/// timeout 10, internalTrafficPolicy Cluster, trafficDistribution PreferClose),
/// exported from `cluster` at `second`.
fn hello(cluster: &str, second: i64) -> ExportedServiceSpec {
    ExportedServiceSpec {
        cluster: cluster.into(),
        service: "hello".into(),
        service_type: Some("ClusterIP".into()),
        ports: vec![port("tcp", "TCP", 42), port("udp", "UDP", 42)],
        session_affinity: Some("ClientIP".into()),
        session_affinity_config: Some(client_ip(10)),
        internal_traffic_policy: Some("Cluster".into()),
        traffic_distribution: Some("PreferClose".into()),
        ip_families: vec!["IPv4".into()],
        cluster_ips: vec!["10.96.0.10".into()],
        export_creation_timestamp: Some(at(second)),
        ..Default::default()
    }
}

fn headless(mut spec: ExportedServiceSpec) -> ExportedServiceSpec {
    spec.headless = true;
    spec.cluster_ips.clear();
    spec
}

/// Merges `specs` in every order, checks all orders agree, returns the result.
fn merged(specs: &[ExportedServiceSpec]) -> Merged {
    let result = merge_specs(specs).expect("non-empty input");
    let mut indices: Vec<usize> = (0..specs.len()).collect();
    for_each_permutation(&mut indices, 0, &mut |perm| {
        let permuted: Vec<&ExportedServiceSpec> = perm.iter().map(|&i| &specs[i]).collect();
        assert_eq!(
            merge_specs(permuted),
            Some(result.clone()),
            "order {perm:?}"
        );
    });
    result
}

fn for_each_permutation(items: &mut Vec<usize>, k: usize, f: &mut dyn FnMut(&[usize])) {
    if k == items.len() {
        f(items);
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        for_each_permutation(items, k + 1, f);
        items.swap(k, i);
    }
}

fn serving(merged: &Merged, name: &str) -> Vec<(String, IntOrString)> {
    let pc = merged
        .port_clusters
        .iter()
        .find(|pc| pc.port.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no port {name}"));
    pc.clusters
        .iter()
        .map(|c| (c.cluster.clone(), c.target_port.clone()))
        .collect()
}

fn on(cluster: &str, target: i32) -> (String, IntOrString) {
    (cluster.to_owned(), IntOrString::Int(target))
}

fn reasons(merged: &Merged) -> Vec<&'static str> {
    merged
        .conflict
        .as_ref()
        .map(|c| c.reasons.clone())
        .unwrap_or_default()
}

fn message(merged: &Merged) -> &str {
    merged.conflict.as_ref().map_or("", |c| c.message.as_str())
}

#[test]
fn empty_input_merges_to_nothing() {
    assert_eq!(merge(&[]), None);
    assert_eq!(merge_specs([]), None);
}

#[test]
fn one_cluster_reproduces_its_service() {
    // CONF-4, CONF-5, CONF-6, CONF-7, CONF-9, IMP-11.
    let m = merged(&[hello("cluster-1", 100)]);
    assert_eq!(m.import_type, ServiceImportType::ClusterSetIP);
    assert_eq!(
        m.ports,
        vec![import_port("tcp", "TCP", 42), import_port("udp", "UDP", 42)]
    );
    assert_eq!(m.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(m.session_affinity_config, Some(client_ip(10)));
    assert_eq!(m.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(m.traffic_distribution.as_deref(), Some("PreferClose"));
    assert_eq!(m.ip_families, vec!["IPv4"]);
    assert_eq!(m.clusters, vec!["cluster-1"]);
    assert_eq!(m.winner, "cluster-1");
    assert_eq!(m.conflict, None);
    assert!(m.excluded_ports.is_empty());
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-1", 42)]);
    assert_eq!(serving(&m, "udp"), vec![on("cluster-1", 42)]);
}

#[test]
fn conf10_union_of_ports_raises_port_conflict() {
    let mut second = hello("cluster-2", 102);
    second.ports = vec![port("tcp", "TCP", 42), port("stcp", "SCTP", 142)];
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(
        m.ports,
        vec![
            import_port("stcp", "SCTP", 142),
            import_port("tcp", "TCP", 42),
            import_port("udp", "UDP", 42),
        ]
    );
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert!(m.excluded_ports.is_empty());
    assert_eq!(serving(&m, "stcp"), vec![on("cluster-2", 142)]);
    assert_eq!(
        serving(&m, "tcp"),
        vec![on("cluster-1", 42), on("cluster-2", 42)]
    );
    assert_eq!(serving(&m, "udp"), vec![on("cluster-1", 42)]);
    assert_eq!(
        message(&m),
        "Conflicting ports. Using the union of all exported ports, clashing ports resolved by \
         precedence starting with oldest service export in \"cluster-1\". 1/2 clusters disagree."
    );
}

/// A Service of several ports names them all, and so must the derived one: an
/// unnamed port never sits beside others in the union, whichever export is older.
#[test]
fn an_unnamed_port_is_never_beside_other_ports() {
    let mut unnamed = hello("cluster-1", 100);
    unnamed.ports = vec![port("", "TCP", 80)];
    let mut named = hello("cluster-2", 102);
    named.ports = vec![port("http", "TCP", 80), port("metrics", "TCP", 9090)];
    let m = merged(&[unnamed.clone(), named.clone()]);
    let unnamed_80 = ServicePort {
        name: None,
        ..import_port("", "TCP", 80)
    };
    assert_eq!(m.ports, vec![unnamed_80]);
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert_eq!(
        m.excluded_ports["cluster-2"],
        vec![
            import_port("http", "TCP", 80),
            import_port("metrics", "TCP", 9090)
        ]
    );
    // the named ones older: the unnamed port is left out
    let mut unnamed = hello("cluster-1", 200);
    unnamed.ports = vec![port("", "TCP", 7070)];
    let m = merged(&[named, unnamed]);
    assert_eq!(
        m.ports,
        vec![
            import_port("http", "TCP", 80),
            import_port("metrics", "TCP", 9090)
        ]
    );
    assert_eq!(
        m.excluded_ports["cluster-1"],
        vec![ServicePort {
            name: None,
            ..import_port("", "TCP", 7070)
        }]
    );
}

#[test]
fn conf11_same_name_other_number_keeps_the_oldest() {
    let mut second = hello("cluster-2", 102);
    second.ports = vec![port("tcp", "TCP", 43)];
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(
        m.ports,
        vec![import_port("tcp", "TCP", 42), import_port("udp", "UDP", 42)]
    );
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert_eq!(
        m.excluded_ports,
        BTreeMap::from([("cluster-2".to_owned(), vec![import_port("tcp", "TCP", 43)])])
    );
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-1", 42)]);
    assert!(
        message(&m).ends_with("1/2 clusters disagree. Ports left out: \"cluster-2\" tcp:43/TCP.")
    );
}

#[test]
fn conf11_reversed_ages_keep_the_other_definition() {
    let mut first = hello("cluster-2", 99);
    first.ports = vec![port("tcp", "TCP", 43)];
    let m = merged(&[hello("cluster-1", 100), first]);
    assert_eq!(m.winner, "cluster-2");
    assert_eq!(
        m.ports,
        vec![import_port("tcp", "TCP", 43), import_port("udp", "UDP", 42)]
    );
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-2", 43)]);
    assert_eq!(serving(&m, "udp"), vec![on("cluster-1", 42)]);
    assert_eq!(
        m.excluded_ports["cluster-1"],
        vec![import_port("tcp", "TCP", 42)]
    );
}

#[test]
fn conf26_same_name_other_number_routes_only_to_the_oldest() {
    let mut second = hello("cluster-2", 102);
    second.ports = vec![ExportedServicePort {
        target_port: Some(IntOrString::Int(42)),
        ..port("tcp", "TCP", 4242)
    }];
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(m.clusters_for_port(&import_port("tcp", "TCP", 42)).len(), 1);
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-1", 42)]);
    assert_eq!(m.clusters_for_port(&import_port("tcp", "TCP", 4242)), &[]);
}

#[test]
fn conf27_other_name_routes_each_port_to_its_cluster() {
    let mut second = hello("cluster-2", 102);
    second.ports = vec![ExportedServicePort {
        target_port: Some(IntOrString::Int(42)),
        ..port("tcp2", "TCP", 4242)
    }];
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-1", 42)]);
    assert_eq!(serving(&m, "tcp2"), vec![on("cluster-2", 42)]);
    let tcp2 = ServicePort {
        protocol: None,
        ..import_port("tcp2", "TCP", 4242)
    };
    assert_eq!(m.clusters_for_port(&tcp2)[0].cluster, "cluster-2");
}

#[test]
fn conf15_cluster_ip_older_than_headless_gives_cluster_set_ip() {
    let m = merged(&[hello("cluster-1", 100), headless(hello("cluster-2", 102))]);
    assert_eq!(m.import_type, ServiceImportType::ClusterSetIP);
    assert_eq!(reasons(&m), vec![TYPE_CONFLICT]);
    assert_eq!(
        message(&m),
        "Conflicting type. Using \"ClusterSetIP\" from oldest service export in \"cluster-1\". \
         1/2 clusters disagree."
    );
    assert_eq!(
        m.conflict.as_ref().map(Conflict::reason).as_deref(),
        Some("TypeConflict")
    );
}

#[test]
fn headless_older_gives_headless_with_families() {
    let mut spec = headless(hello("cluster-1", 100));
    spec.ip_families.clear();
    let m = merged(&[spec.clone(), hello("cluster-2", 101)]);
    assert_eq!(m.import_type, ServiceImportType::Headless);
    // cluster-1's families are unknown: cluster-2's are used (IMP-8).
    assert_eq!(m.ip_families, vec!["IPv4"]);
    let alone = merged(&[spec]);
    assert_eq!(alone.import_type, ServiceImportType::Headless);
    assert_eq!(alone.ip_families, vec!["IPv4"]);
    assert!(to_service_import_spec(&alone).ips.is_empty());
}

#[test]
fn node_port_and_load_balancer_export_as_cluster_set_ip() {
    // EXP-9: the Service type is not a global property, headlessness is.
    let mut node_port = hello("a", 100);
    node_port.service_type = Some("NodePort".into());
    let mut load_balancer = hello("b", 101);
    load_balancer.service_type = Some("LoadBalancer".into());
    let m = merged(&[node_port, load_balancer, hello("c", 102)]);
    assert_eq!(m.import_type, ServiceImportType::ClusterSetIP);
    assert_eq!(m.conflict, None);
}

#[test]
fn conf3_labels_and_annotations_come_from_the_oldest() {
    let mut first = hello("cluster-1", 100);
    first.exported_labels = BTreeMap::from([("dummy-label".into(), "true".into())]);
    first.exported_annotations = BTreeMap::from([("dummy-annotation".into(), "true".into())]);
    let mut second = hello("cluster-2", 102);
    second.exported_labels = BTreeMap::from([("dummy-label2".into(), "true".into())]);
    second.exported_annotations = BTreeMap::from([("dummy-annotation2".into(), "true".into())]);
    let m = merged(&[first.clone(), second]);
    assert_eq!(m.labels, first.exported_labels);
    assert_eq!(m.annotations, first.exported_annotations);
    assert_eq!(reasons(&m), vec![LABELS_CONFLICT, ANNOTATIONS_CONFLICT]);
    assert_eq!(
        m.conflict.as_ref().map(Conflict::reason).as_deref(),
        Some("LabelsConflict,AnnotationsConflict")
    );
    assert_eq!(
        message(&m),
        "Conflicting exportedLabels. Using the exportedLabels from oldest service export in \
         \"cluster-1\". 1/2 clusters disagree. Conflicting exportedAnnotations. Using the \
         exportedAnnotations from oldest service export in \"cluster-1\". 1/2 clusters disagree."
    );
}

#[test]
fn session_affinity_conflicts_keep_the_oldest() {
    let mut second = hello("cluster-2", 102);
    second.session_affinity = Some("None".into());
    second.session_affinity_config = None;
    let mut third = hello("cluster-3", 103);
    third.session_affinity_config = Some(client_ip(20));
    let m = merged(&[hello("cluster-1", 100), second, third]);
    assert_eq!(m.session_affinity.as_deref(), Some("ClientIP"));
    assert_eq!(m.session_affinity_config, Some(client_ip(10)));
    assert_eq!(
        reasons(&m),
        vec![SESSION_AFFINITY_CONFLICT, SESSION_AFFINITY_CONFIG_CONFLICT]
    );
    assert_eq!(
        message(&m),
        "Conflicting sessionAffinity. Using \"ClientIP\" from oldest service export in \
         \"cluster-1\". 1/3 clusters disagree. Conflicting sessionAffinityConfig. Using \
         {\"clientIP\":{\"timeoutSeconds\":10}} from oldest service export in \"cluster-1\". \
         2/3 clusters disagree."
    );
}
