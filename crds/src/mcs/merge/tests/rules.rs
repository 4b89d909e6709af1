//! Table tests of the rules the module docs choose where the KEP leaves room:
//! defaults, precedence and ties, IP families, port identity, odd input.

use super::*;

#[test]
fn defaults_and_their_spelled_out_values_do_not_conflict() {
    let mut spelled = hello("a", 100);
    spelled.session_affinity = Some("None".into());
    spelled.session_affinity_config = None;
    spelled.internal_traffic_policy = Some("Cluster".into());
    spelled.ports = vec![ExportedServicePort {
        name: Some(String::new()),
        protocol: Some("TCP".into()),
        app_protocol: Some(String::new()),
        port: 80,
        target_port: Some(IntOrString::Int(0)),
    }];
    let mut unset = spelled.clone();
    unset.cluster = "b".into();
    unset.session_affinity = None;
    unset.session_affinity_config = Some(SessionAffinityConfig { client_ip: None });
    unset.internal_traffic_policy = None;
    unset.ports = vec![ExportedServicePort {
        port: 80,
        ..Default::default()
    }];
    let m = merged(&[spelled, unset]);
    assert_eq!(m.conflict, None);
    let unnamed = ServicePort {
        name: None,
        protocol: Some("TCP".into()),
        app_protocol: None,
        port: 80,
    };
    assert_eq!(m.ports, vec![unnamed.clone()]);
    assert_eq!(m.clusters_for_port(&unnamed).len(), 2);
    assert!(
        m.clusters_for_port(&unnamed)
            .iter()
            .all(|c| c.target_port == IntOrString::Int(80))
    );
}

#[test]
fn traffic_policies_conflict_and_keep_the_oldest() {
    let mut second = hello("cluster-2", 102);
    second.internal_traffic_policy = Some("Local".into());
    second.traffic_distribution = None;
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(m.internal_traffic_policy.as_deref(), Some("Cluster"));
    assert_eq!(m.traffic_distribution.as_deref(), Some("PreferClose"));
    assert_eq!(
        reasons(&m),
        vec![
            INTERNAL_TRAFFIC_POLICY_CONFLICT,
            TRAFFIC_DISTRIBUTION_CONFLICT
        ]
    );

    let mut first = hello("cluster-1", 100);
    first.traffic_distribution = None;
    let m = merged(&[first, hello("cluster-2", 102)]);
    assert_eq!(m.traffic_distribution, None);
    assert!(message(&m).contains("Conflicting trafficDistribution. Using (unset) from oldest"));
}

#[test]
fn equal_timestamps_break_ties_by_cluster_id() {
    let m = merged(&[hello("cluster-b", 100), headless(hello("cluster-a", 100))]);
    assert_eq!(m.winner, "cluster-a");
    assert_eq!(m.import_type, ServiceImportType::Headless);
    assert_eq!(
        message(&m),
        "Conflicting type. Using \"Headless\" from oldest service export in \"cluster-a\". \
         1/2 clusters disagree. \"cluster-a\" has the same creation time as 1 other service \
         export; the tie is broken by cluster id order."
    );
    // An older export beats a lower cluster id.
    let m = merged(&[hello("cluster-b", 99), headless(hello("cluster-a", 100))]);
    assert_eq!(m.winner, "cluster-b");
    assert!(!message(&m).contains("tie"));
}

#[test]
fn unknown_creation_times_rank_last() {
    let mut unknown = headless(hello("cluster-a", 0));
    unknown.export_creation_timestamp = None;
    let m = merged(&[unknown.clone(), hello("cluster-z", 500)]);
    assert_eq!(m.winner, "cluster-z");
    let mut other = hello("cluster-b", 0);
    other.export_creation_timestamp = None;
    let m = merged(&[other, unknown]);
    assert_eq!(m.winner, "cluster-a");
    assert!(message(&m).ends_with(
        "No service export has a known creation time; \"cluster-a\" wins by cluster id order."
    ));
}

#[test]
fn identical_exports_do_not_conflict() {
    let m = merged(&[hello("c1", 100), hello("c2", 101), hello("c3", 100)]);
    assert_eq!(m.conflict, None);
    assert_eq!(m.winner, "c1");
    assert_eq!(m.clusters, vec!["c1", "c2", "c3"]);
    assert_eq!(
        serving(&m, "udp"),
        vec![on("c1", 42), on("c2", 42), on("c3", 42)]
    );
}

#[test]
fn ip_families_come_from_the_oldest_known_and_are_never_empty() {
    // Both dual-stack, other primary family: no conflict, winner's order.
    let mut v4v6 = hello("a", 100);
    v4v6.ip_families = vec!["IPv4".into(), "IPv6".into()];
    let mut v6v4 = hello("b", 101);
    v6v4.ip_families = vec!["IPv6".into(), "IPv4".into()];
    let m = merged(&[v4v6.clone(), v6v4]);
    assert_eq!(
        (m.ip_families.clone(), m.conflict),
        (vec!["IPv4".into(), "IPv6".into()], None)
    );

    // Single-stack v6 newer than dual-stack: conflict, dual-stack kept (IMP-4).
    let mut v6 = hello("b", 101);
    v6.ip_families = vec!["IPv6".into()];
    let m = merged(&[v4v6, v6.clone()]);
    assert_eq!(m.ip_families, vec!["IPv4", "IPv6"]);
    assert_eq!(reasons(&m), vec![IP_FAMILY_CONFLICT]);
    assert!(message(&m).starts_with(
        "Conflicting ipFamilies. Using [\"IPv4\",\"IPv6\"] from oldest service export in \"a\"."
    ));

    // Unknown families (winner): taken from the next export, named in the message.
    let mut unknown = hello("a", 100);
    unknown.ip_families = vec!["bogus".into()];
    unknown.cluster_ips.clear();
    let m = merged(&[unknown.clone(), v6, hello("c", 102)]);
    assert_eq!(m.winner, "a");
    assert_eq!(m.ip_families, vec!["IPv6"]);
    assert!(message(&m).contains(
        "Using [\"IPv6\"] from oldest service export with known families, in \"b\" (the oldest, \"a\", has none). 1/3"
    ));

    // Nothing known anywhere: IPv4.
    assert_eq!(merged(&[unknown.clone()]).ip_families, vec!["IPv4"]);

    // Families inferred from clusterIPs; duplicates dropped.
    let mut inferred = unknown;
    inferred.cluster_ips = vec!["fd00::10".into(), "10.0.0.1".into()];
    assert_eq!(
        merged(&[inferred.clone()]).ip_families,
        vec!["IPv6", "IPv4"]
    );
    inferred.ip_families = vec!["IPv6".into(), "IPv6".into()];
    assert_eq!(merged(&[inferred]).ip_families, vec!["IPv6"]);
}

#[test]
fn reasons_follow_the_conflict_reasons_order() {
    let first = hello("cluster-1", 100);
    let mut last = headless(hello("cluster-2", 200));
    last.ports = vec![port("tcp", "TCP", 43)];
    last.session_affinity = Some("None".into());
    last.session_affinity_config = None;
    last.exported_labels = BTreeMap::from([("l".into(), "v".into())]);
    last.exported_annotations = BTreeMap::from([("a".into(), "v".into())]);
    last.internal_traffic_policy = Some("Local".into());
    last.traffic_distribution = None;
    last.ip_families = vec!["IPv6".into()];
    let m = merged(&[last, first]);
    assert_eq!(reasons(&m), CONFLICT_REASONS.to_vec());
    let text = message(&m);
    let positions: Vec<usize> = [
        "Conflicting ports.",
        "Conflicting type.",
        "Conflicting sessionAffinity.",
        "Conflicting sessionAffinityConfig.",
        "Conflicting exportedLabels.",
        "Conflicting exportedAnnotations.",
        "Conflicting internalTrafficPolicy.",
        "Conflicting trafficDistribution.",
        "Conflicting ipFamilies.",
    ]
    .iter()
    .map(|s| {
        text.find(s)
            .unwrap_or_else(|| panic!("{s} missing in {text}"))
    })
    .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn app_protocol_mismatch_is_a_port_conflict() {
    let mut second = hello("cluster-2", 102);
    second.ports[0].app_protocol = Some("kubernetes.io/h2c".into());
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(
        m.ports,
        vec![import_port("tcp", "TCP", 42), import_port("udp", "UDP", 42)]
    );
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert_eq!(serving(&m, "tcp"), vec![on("cluster-1", 42)]);
    assert_eq!(
        serving(&m, "udp"),
        vec![on("cluster-1", 42), on("cluster-2", 42)]
    );
    assert!(message(&m).contains("\"cluster-2\" tcp:42/TCP (appProtocol kubernetes.io/h2c)"));
}

#[test]
fn target_ports_are_per_cluster_and_not_global() {
    let mut first = hello("cluster-1", 100);
    first.ports[0].target_port = Some(IntOrString::String("web".into()));
    let mut second = hello("cluster-2", 101);
    second.ports[0].target_port = Some(IntOrString::Int(8042));
    let m = merged(&[first, second]);
    assert_eq!(m.conflict, None);
    assert_eq!(
        serving(&m, "tcp"),
        vec![
            ("cluster-1".to_owned(), IntOrString::String("web".into())),
            on("cluster-2", 8042)
        ]
    );
}

#[test]
fn a_new_name_on_a_taken_port_number_is_left_out() {
    let mut second = hello("cluster-2", 101);
    second.ports = vec![port("web", "TCP", 42), port("udp", "UDP", 42)];
    let m = merged(&[hello("cluster-1", 100), second]);
    assert_eq!(
        m.ports,
        vec![import_port("tcp", "TCP", 42), import_port("udp", "UDP", 42)]
    );
    assert_eq!(
        m.excluded_ports["cluster-2"],
        vec![import_port("web", "TCP", 42)]
    );
    assert_eq!(
        serving(&m, "udp"),
        vec![on("cluster-1", 42), on("cluster-2", 42)]
    );
}

#[test]
fn unnamed_ports_clash_by_their_empty_name() {
    let mut first = hello("a", 100);
    first.ports = vec![ExportedServicePort {
        port: 80,
        ..Default::default()
    }];
    let mut second = hello("b", 101);
    second.ports = vec![ExportedServicePort {
        port: 81,
        ..Default::default()
    }];
    let m = merged(&[first, second]);
    assert_eq!(m.ports.len(), 1);
    assert_eq!(m.ports[0].port, 80);
    assert_eq!(reasons(&m), vec![PORT_CONFLICT]);
    assert!(message(&m).ends_with("Ports left out: \"b\" 81/TCP."));
}

#[test]
fn duplicate_cluster_ids_keep_the_oldest_entry() {
    let newer = headless(hello("cluster-1", 200));
    let older = hello("cluster-1", 100);
    let m = merged(&[newer.clone(), older, hello("cluster-2", 150)]);
    assert_eq!(m.clusters, vec!["cluster-1", "cluster-2"]);
    assert_eq!(m.import_type, ServiceImportType::ClusterSetIP);
    assert_eq!(m.conflict, None);
    // Same cluster and time: still independent of the order.
    let mut twin = newer.clone();
    twin.ports.pop();
    let m = merged(&[newer, twin]);
    assert_eq!(m.clusters, vec!["cluster-1"]);
}

#[test]
fn explicit_exports_override_the_spec_identity() {
    let spec = hello("ignored", 100);
    let first_seen = at(50);
    let exports = [
        Export::new("cluster-b", Some(&first_seen), &spec),
        Export::new("cluster-a", None, &spec),
    ];
    let m = merge(&exports).expect("non-empty");
    assert_eq!(m.winner, "cluster-b");
    assert_eq!(m.clusters, vec!["cluster-a", "cluster-b"]);
}

#[test]
fn service_import_spec_copies_the_merge_and_leaves_ips_empty() {
    let m = merged(&[hello("cluster-1", 100), hello("cluster-2", 101)]);
    let spec = to_service_import_spec(&m);
    assert_eq!(
        spec,
        ServiceImportSpec {
            ports: m.ports.clone(),
            ips: vec![],
            type_: ServiceImportType::ClusterSetIP,
            session_affinity: Some("ClientIP".into()),
            session_affinity_config: Some(client_ip(10)),
            ip_families: vec!["IPv4".into()],
            internal_traffic_policy: Some("Cluster".into()),
            traffic_distribution: Some("PreferClose".into()),
        }
    );
    assert_eq!(
        m.cluster_statuses(),
        vec![
            ClusterStatus {
                cluster: "cluster-1".into()
            },
            ClusterStatus {
                cluster: "cluster-2".into()
            }
        ]
    );
}

#[test]
fn odd_input_does_not_panic() {
    let mut odd = ExportedServiceSpec {
        cluster: String::new(),
        service_type: Some("ExternalName".into()),
        ports: vec![
            ExportedServicePort {
                port: -1,
                protocol: Some("tcp".into()),
                ..Default::default()
            },
            ExportedServicePort {
                port: -1,
                protocol: Some("tcp".into()),
                ..Default::default()
            },
        ],
        ip_families: vec!["IPv4".into(); 5],
        cluster_ips: vec!["not an ip".into()],
        ..Default::default()
    };
    let m = merged(&[odd.clone()]);
    assert_eq!(m.ports.len(), 1);
    assert_eq!(m.ip_families, vec!["IPv4"]);
    odd.ip_families.clear();
    assert_eq!(merged(&[odd]).ip_families, vec!["IPv4"]);
}
