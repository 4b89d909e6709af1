//! Multi-Cluster Services end to end: the API-level conformance specs CONF-1…16 with the
//! suite's fixtures and timeouts, plus dual-stack, partial namespaces, cluster removal,
//! controller restart, three clusters with different ports, and hand edits.

use std::net::IpAddr;

use causeway_crds::mcs::ServiceImportType;
use causeway_crds::mcs::v1beta1::ServiceImport;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::mcs_support::{CONSISTENT, Mcs, PRESENT, consistently, eventually, tick};

fn port_set(si: &ServiceImport) -> Vec<(String, String, i32)> {
    let mut v: Vec<_> = si
        .spec
        .ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.protocol_or_default().to_string(),
                p.port,
            )
        })
        .collect();
    v.sort();
    v
}

async fn conflict_on(m: &Mcs, i: usize) -> (String, String, String) {
    eventually(
        &format!("Conflict=True on cluster {i}"),
        PRESENT,
        || async move {
            m.export_condition(i, "hello", "Conflict")
                .await
                .filter(|c| c.0 == "True")
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_1_import_exists_while_any_cluster_exports() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI on c0", PRESENT, || async { m.si(0, "hello").await }).await;
    tick().await;
    m.hello(1, &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    consistently("SI stays on c0 after c1 exports", CONSISTENT, || async {
        m.si(0, "hello").await.is_some()
    })
    .await;
    m.unexport(0, "hello").await;
    consistently("SI stays on c0 after c0 unexports", CONSISTENT, || async {
        m.si(0, "hello").await.is_some()
    })
    .await;
    m.unexport(1, "hello").await;
    eventually("SI gone on c0 and c1", PRESENT, || async {
        (m.si(0, "hello").await.is_none() && m.si(1, "hello").await.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_2_only_exported_labels_and_annotations_are_propagated() {
    let owned = Mcs::start(&["c0"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let si = eventually("SI", PRESENT, || async { m.si(0, "hello").await }).await;
    let (l, a) = (
        si.metadata.labels.unwrap_or_default(),
        si.metadata.annotations.unwrap_or_default(),
    );
    assert_eq!(l.get("dummy-label").map(String::as_str), Some("true"));
    assert_eq!(a.get("dummy-annotation").map(String::as_str), Some("true"));
    assert!(
        !l.contains_key("dummy-svc")
            && !a.contains_key("dummy-svc")
            && !l.contains_key("dummy-svcexport"),
        "{l:?} {a:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_3_conflicting_exported_labels_oldest_wins_and_both_report_conflict() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI", PRESENT, || async { m.si(0, "hello").await }).await;
    tick().await;
    m.hello(1, &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label2").await;
    for i in 0..2 {
        let (_, reason, msg) = conflict_on(m, i).await;
        assert!(
            reason.contains("LabelsConflict") && reason.contains("AnnotationsConflict"),
            "{reason}: {msg}"
        );
        assert!(
            msg.contains("c0"),
            "the message names the winning cluster: {msg}"
        );
    }
    for i in 0..2 {
        let si = m.si(i, "hello").await.unwrap();
        let l = si.metadata.labels.unwrap_or_default();
        assert!(
            l.contains_key("dummy-label") && !l.contains_key("dummy-label2"),
            "{l:?}"
        );
        let a = si.metadata.annotations.unwrap_or_default();
        assert!(
            a.contains_key("dummy-annotation") && !a.contains_key("dummy-annotation2"),
            "{a:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_4_to_9_clusterip_import_properties_and_unexport() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("Valid=True", PRESENT, || async {
        m.export_condition(0, "hello", "Valid")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    for i in 0..2 {
        let si = eventually("SI with IPs on every cluster", PRESENT, || async move {
            // the spec is written first, the status right after it
            m.si(i, "hello").await.filter(|s| {
                // IMP-13: `endpointSliceObjects: Present` once the MCS slices are there
                !s.spec.ips.is_empty()
                    && s.status.as_ref().is_some_and(|st| {
                        !st.clusters.is_empty()
                            && st.endpoint_slice_objects.as_deref() == Some("Present")
                    })
            })
        })
        .await;
        assert_eq!(si.spec.type_, ServiceImportType::ClusterSetIP);
        // CONF-5
        assert_eq!(si.spec.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(
            serde_json::to_value(&si.spec.session_affinity_config).unwrap(),
            json!({"clientIP": {"timeoutSeconds": 10}})
        );
        // CONF-6, CONF-7
        assert_eq!(si.spec.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(si.spec.traffic_distribution.as_deref(), Some("PreferClose"));
        // CONF-8
        assert_eq!(si.spec.ips.len(), si.spec.ip_families.len());
        for (ip, fam) in si.spec.ips.iter().zip(&si.spec.ip_families) {
            let ip: IpAddr = ip.parse().expect("IP parses");
            assert_eq!(if ip.is_ipv4() { "IPv4" } else { "IPv6" }, fam);
        }
        // CONF-9
        assert_eq!(
            port_set(&si),
            vec![
                ("tcp".into(), "TCP".into(), 42),
                ("udp".into(), "UDP".into(), 42)
            ]
        );
        assert!(si.spec.ports.iter().all(|p| p.app_protocol.is_none()));
        // IMP-10: kube-proxy reads these from the derived Service, not the ServiceImport
        let derived = si.metadata.annotations.as_ref().unwrap()
            [causeway_crds::well_known::annotations::DERIVED_SERVICE]
            .clone();
        let svc = Api::<Service>::namespaced(m.c(i), &m.ns)
            .get(&derived)
            .await
            .unwrap()
            .spec
            .unwrap();
        assert_eq!(svc.session_affinity.as_deref(), Some("ClientIP"));
        assert_eq!(svc.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(svc.traffic_distribution.as_deref(), Some("PreferClose"));
        let st = si.status.unwrap();
        assert_eq!(
            st.clusters
                .iter()
                .map(|c| c.cluster.as_str())
                .collect::<Vec<_>>(),
            vec!["c0"]
        );
    }
    let ready = eventually("Ready=True", PRESENT, || async {
        m.export_condition(0, "hello", "Ready")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(ready.1, "Exported");
    m.unexport(0, "hello").await;
    eventually("SI gone everywhere", PRESENT, || async {
        (m.si(0, "hello").await.is_none() && m.si(1, "hello").await.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_10_port_union_raises_conflict() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI", PRESENT, || async { m.si(0, "hello").await }).await;
    tick().await;
    m.service(1, "hello", json!({"ports": [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "stcp", "port": 142, "protocol": "SCTP"}]}), &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    for i in 0..2 {
        let (_, reason, _) = conflict_on(m, i).await;
        assert!(reason.contains("PortConflict"), "{reason}");
    }
    let want = vec![
        ("stcp".to_string(), "SCTP".to_string(), 142),
        ("tcp".into(), "TCP".into(), 42),
        ("udp".into(), "UDP".into(), 42),
    ];
    for i in 0..2 {
        eventually("union of ports", PRESENT, || {
            let want = want.clone();

            async move { m.si(i, "hello").await.filter(|s| port_set(s) == want) }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_11_conflicting_port_number_keeps_the_oldest() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI", PRESENT, || async { m.si(0, "hello").await }).await;
    tick().await;
    m.service(
        1,
        "hello",
        json!({"ports": [{"name": "tcp", "port": 43, "protocol": "TCP"}]}),
        &["10.1.0.1"],
    )
    .await;
    m.export(1, "hello", "dummy-label").await;
    for i in 0..2 {
        let (_, reason, msg) = conflict_on(m, i).await;
        assert!(
            reason.contains("PortConflict") && msg.contains("c0"),
            "{reason}: {msg}"
        );
    }
    consistently("SI keeps c0's ports", CONSISTENT, || async {
        m.si(1, "hello").await.is_some_and(|s| {
            port_set(&s)
                == vec![
                    ("tcp".into(), "TCP".into(), 42),
                    ("udp".into(), "UDP".into(), 42),
                ]
        })
    })
    .await;
    // a Warning Event on each ServiceExport says why
    for i in 0..2 {
        let ns = m.ns.clone();
        eventually("a PortConflict Event on the ServiceExport", PRESENT, || {
            let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(m.c(i), &ns);
            async move {
                let evs = api.list(&ListParams::default()).await.unwrap().items;
                evs.into_iter().find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason
                            .as_deref()
                            .is_some_and(|r| r.contains("PortConflict"))
                        && e.regarding.as_ref().is_some_and(|r| {
                            r.kind.as_deref() == Some("ServiceExport")
                                && r.name.as_deref() == Some("hello")
                        })
                })
            }
        })
        .await;
    }
    // CR-6: c1's endpoints do not carry port tcp (it serves 43, not 42)
    eventually("c1's imported slice carries no port", PRESENT, || async {
        m.mcs_slices(0, "hello").await.into_iter().find(|s| {
            s.metadata.labels.as_ref().unwrap()["multicluster.kubernetes.io/source-cluster"] == "c1"
                && s.ports.as_ref().is_some_and(|p| p.is_empty())
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_12_13_headless_import_without_ips() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.service(
        0,
        "hello",
        json!({"clusterIP": "None", "ports": [{"name": "tcp", "port": 42}]}),
        &["10.0.0.1", "10.0.0.2"],
    )
    .await;
    m.export(0, "hello", "dummy-label").await;
    for i in 0..2 {
        let si = eventually("headless SI everywhere", PRESENT, || async move {
            m.si(i, "hello").await
        })
        .await;
        assert_eq!(si.spec.type_, ServiceImportType::Headless);
        assert!(
            !si.spec.ip_families.is_empty(),
            "IMP-8: ipFamilies set for headless too"
        );
    }
    consistently("headless ips stay empty", CONSISTENT, || async {
        m.si(0, "hello")
            .await
            .is_some_and(|s| s.spec.ips.is_empty())
    })
    .await;
    m.unexport(0, "hello").await;
    eventually("SI gone", PRESENT, || async {
        (m.si(0, "hello").await.is_none() && m.si(1, "hello").await.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_14_externalname_is_invalid_and_not_imported() {
    let owned = Mcs::start(&["c0"], false).await;
    let m = &owned;
    m.service(
        0,
        "hello",
        json!({"type": "ExternalName", "externalName": "example.com"}),
        &[],
    )
    .await;
    m.export(0, "hello", "dummy-label").await;
    let (st, reason, _) = eventually("Valid=False", PRESENT, || async {
        m.export_condition(0, "hello", "Valid")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "InvalidServiceType")
    );
    consistently("no SI", CONSISTENT, || async {
        m.si(0, "hello").await.is_none()
    })
    .await;
    // a ServiceExport without a Service says so
    m.export(0, "nothing", "dummy-label").await;
    let (_, reason, msg) = eventually("Valid=False NoService", PRESENT, || async {
        m.export_condition(0, "nothing", "Valid")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "NoService", "{msg}");
    assert!(msg.contains("create it"), "{msg}");
    // ... and one whose name no Service can have says that, not "create it"
    m.export(0, "no.such.service", "dummy-label").await;
    let (_, reason, msg) = eventually("Valid=False for an invalid name", PRESENT, || async {
        m.export_condition(0, "no.such.service", "Valid")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "NoService", "{msg}");
    assert!(
        msg.contains("not a valid Service name") && !msg.contains("create it"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_15_conflicting_headlessness_oldest_clusterip_wins() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI", PRESENT, || async { m.si(0, "hello").await }).await;
    tick().await;
    m.service(1, "hello", json!({"clusterIP": "None", "ports": [{"name": "tcp", "port": 42}, {"name": "udp", "port": 42, "protocol": "UDP"}]}), &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    for i in 0..2 {
        let (_, reason, _) = conflict_on(m, i).await;
        assert!(reason.contains("TypeConflict"), "{reason}");
        assert_eq!(
            m.si(i, "hello").await.unwrap().spec.type_,
            ServiceImportType::ClusterSetIP
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conf_16_mcs_endpointslices_with_labels_removed_on_unexport() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1", "10.0.0.2"]).await;
    m.export(0, "hello", "dummy-label").await;
    for i in 0..2 {
        let slices = eventually("MCS slice in every cluster", PRESENT, || async move {
            let s = m.mcs_slices(i, "hello").await;
            (!s.is_empty()).then_some(s)
        })
        .await;
        let s = &slices[0];
        let l = s.metadata.labels.clone().unwrap();
        assert_eq!(l["multicluster.kubernetes.io/service-name"], "hello");
        assert_eq!(l["multicluster.kubernetes.io/source-cluster"], "c0");
        assert!(
            l.get("endpointslice.kubernetes.io/managed-by")
                .is_some_and(|v| v != "endpointslice-controller.k8s.io")
        );
        assert_eq!(s.address_type, "IPv4");
        assert_eq!(s.endpoints.len(), 2);
        let si = m.si(i, "hello").await.unwrap();
        let derived =
            si.metadata.annotations.unwrap()["multicluster.kubernetes.io/derived-service"].clone();
        assert_eq!(l["kubernetes.io/service-name"], derived);
        let svc = Api::<Service>::namespaced(m.c(i), &m.ns)
            .get(&derived)
            .await
            .unwrap();
        assert_eq!(
            svc.spec.unwrap().cluster_ips.unwrap(),
            si.spec.ips,
            "SI ips are the derived Service's"
        );
    }
    m.unexport(0, "hello").await;
    for i in 0..2 {
        eventually("slices deleted", PRESENT, || async move {
            m.mcs_slices(i, "hello").await.is_empty().then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_changes_follow_with_their_readiness() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("slice in c1", PRESENT, || async {
        (!m.mcs_slices(1, "hello").await.is_empty()).then_some(())
    })
    .await;
    let api: Api<EndpointSlice> = Api::namespaced(m.c(0), &m.ns);
    let patch = json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}, {"addresses": ["10.0.0.9"], "conditions": {"ready": false}}]});
    api.patch(
        "hello-abc12",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    let s = eventually("new endpoint imported", PRESENT, || async {
        m.mcs_slices(1, "hello")
            .await
            .into_iter()
            .find(|s| s.endpoints.len() == 2)
    })
    .await;
    assert_eq!(
        s.endpoints[1].conditions.as_ref().unwrap().ready,
        Some(false),
        "readiness is carried as is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_import_gets_an_ip_per_family() {
    let owned = Mcs::start(&["c0", "c1"], true).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let si = eventually("dual-stack SI", PRESENT, || async {
        m.si(1, "hello").await.filter(|s| s.spec.ips.len() == 2)
    })
    .await;
    assert_eq!(si.spec.ip_families, vec!["IPv4", "IPv6"]);
    assert!(
        si.spec.ips[0].parse::<IpAddr>().unwrap().is_ipv4()
            && si.spec.ips[1].parse::<IpAddr>().unwrap().is_ipv6()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_only_where_the_namespace_exists_and_follows_it() {
    let owned = Mcs::start(&["c0", "c1", "c2"], false).await;
    let m = &owned;
    let only = "partial-ns";
    crate::mcs_support::create_ns(&m.c(0), only).await;
    crate::mcs_support::create_ns(&m.c(1), only).await;
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
    )
    .unwrap();
    Api::<Service>::namespaced(m.c(0), only)
        .create(&Default::default(), &svc)
        .await
        .unwrap();
    let ex: causeway_crds::mcs::v1beta1::ServiceExport =
        serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {}})).unwrap();
    Api::<causeway_crds::mcs::v1beta1::ServiceExport>::namespaced(m.c(0), only)
        .create(&Default::default(), &ex)
        .await
        .unwrap();
    let get = |i: usize| {
        let c = m.c(i);
        async move {
            Api::<ServiceImport>::namespaced(c, only)
                .get_opt("web")
                .await
                .unwrap()
        }
    };
    eventually("SI in c0 and c1", PRESENT, || async {
        (get(0).await.is_some() && get(1).await.is_some()).then_some(())
    })
    .await;
    assert!(get(2).await.is_none(), "c2 has no namespace partial-ns");
    crate::mcs_support::create_ns(&m.c(2), only).await;
    eventually("SI in c2 once the namespace exists", PRESENT, || async {
        get(2).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_with_different_port_sets_route_ports_per_cluster() {
    let owned = Mcs::start(&["c0", "c1", "c2"], false).await;
    let m = &owned;
    m.service(
        0,
        "api",
        json!({"ports": [{"name": "http", "port": 80}]}),
        &["10.0.0.1"],
    )
    .await;
    m.export(0, "api", "dummy-label").await;
    eventually("SI", PRESENT, || async { m.si(0, "api").await }).await;
    tick().await;
    m.service(
        1,
        "api",
        json!({"ports": [{"name": "http", "port": 80}, {"name": "grpc", "port": 9000}]}),
        &["10.1.0.1"],
    )
    .await;
    m.export(1, "api", "dummy-label").await;
    m.service(
        2,
        "api",
        json!({"ports": [{"name": "metrics", "port": 9090}]}),
        &["10.2.0.1"],
    )
    .await;
    m.export(2, "api", "dummy-label").await;
    let want = vec![
        ("grpc".to_string(), "TCP".to_string(), 9000),
        ("http".into(), "TCP".into(), 80),
        ("metrics".into(), "TCP".into(), 9090),
    ];
    let si = eventually("union of three port sets", PRESENT, || {
        let want = want.clone();

        async move {
            m.si(2, "api").await.filter(|s| {
                port_set(s) == want && s.status.as_ref().is_some_and(|st| st.clusters.len() == 3)
            })
        }
    })
    .await;
    let clusters: Vec<String> = si
        .status
        .unwrap()
        .clusters
        .into_iter()
        .map(|c| c.cluster)
        .collect();
    assert_eq!(clusters, vec!["c0", "c1", "c2"]);
    let ports_of = |s: &EndpointSlice| {
        let src = s.metadata.labels.as_ref().unwrap()["multicluster.kubernetes.io/source-cluster"]
            .clone();
        let mut names: Vec<String> = s
            .ports
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| p.name)
            .collect();
        names.sort();
        (src, names)
    };
    let expect = |src: &str| -> Vec<String> {
        match src {
            "c0" => vec!["http".into()],
            "c1" => vec!["grpc".into(), "http".into()],
            _ => vec!["metrics".into()],
        }
    };
    eventually(
        "three slices, each with the ports its cluster serves",
        PRESENT,
        || async {
            let s = m.mcs_slices(0, "api").await;
            (s.len() == 3
                && s.iter()
                    .map(ports_of)
                    .all(|(src, names)| names == expect(&src)))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_cluster_endpoints_are_withdrawn() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    tick().await;
    m.hello(1, &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    eventually("two source clusters in c1", PRESENT, || async {
        (m.mcs_slices(1, "hello").await.len() == 2).then_some(())
    })
    .await;
    causeway_controllers::clusters::join::unjoin(m.hub.clone(), "c0")
        .await
        .unwrap();
    let s = eventually("c0's endpoints withdrawn", PRESENT, || async {
        let s = m.mcs_slices(1, "hello").await;
        (s.len() == 1).then_some(s)
    })
    .await;
    assert_eq!(
        s[0].metadata.labels.as_ref().unwrap()["multicluster.kubernetes.io/source-cluster"],
        "c1"
    );
    let si = eventually("status.clusters without c0", PRESENT, || async {
        m.si(1, "hello")
            .await
            .filter(|s| s.status.as_ref().is_some_and(|st| st.clusters.len() == 1))
    })
    .await;
    assert_eq!(si.status.unwrap().clusters[0].cluster, "c1");
    // and the removed member's own imports are withdrawn, nothing orphaned there
    eventually("no imports left in the removed member", PRESENT, || async {
        (m.si(0, "hello").await.is_none() && m.mcs_slices(0, "hello").await.is_empty())
            .then_some(())
    })
    .await;
    let derived = Api::<Service>::namespaced(m.c(0), &m.ns)
        .list(&ListParams::default().labels("causeway.io/managed=true"))
        .await
        .unwrap();
    assert!(derived.items.is_empty(), "derived Services withdrawn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_restart_mid_change_converges_and_hand_edits_are_reverted() {
    let mut m = Mcs::start(&["c0", "c1"], false).await;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI in c1", PRESENT, || async { m.si(1, "hello").await }).await;
    m.stop_controller().await;
    // changes while the controller is down
    m.unexport(0, "hello").await;
    m.service(
        0,
        "other",
        json!({"ports": [{"name": "http", "port": 8080}]}),
        &["10.0.0.5"],
    )
    .await;
    m.export(0, "other", "dummy-label").await;
    m.restart_controller().await;
    eventually("old import removed, new one created", PRESENT, || async {
        (m.si(1, "hello").await.is_none() && m.si(1, "other").await.is_some()).then_some(())
    })
    .await;
    // a hand edit of a managed object is reverted, a deleted one comes back
    let api: Api<ServiceImport> = Api::namespaced(m.c(1), &m.ns);
    api.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"sessionAffinity": "ClientIP"}})),
    )
    .await
    .unwrap();
    eventually("edit reverted", PRESENT, || async {
        m.si(1, "other")
            .await
            .filter(|s| s.spec.session_affinity.as_deref() == Some("None"))
    })
    .await;
    let slices: Api<EndpointSlice> = Api::namespaced(m.c(1), &m.ns);
    let name = m.mcs_slices(1, "other").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    slices
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    eventually("deleted slice recreated", PRESENT, || async {
        (!m.mcs_slices(1, "other").await.is_empty()).then_some(())
    })
    .await;
    // deleted hub objects come back too (the aggregator may remove the import in between)
    let hub_es: Api<causeway_crds::exported_service::ExportedService> =
        Api::namespaced(m.hub.clone(), &m.ns);
    let hub_si: Api<ServiceImport> = Api::namespaced(m.hub.clone(), &m.ns);
    let _ = hub_si.delete("other", &DeleteParams::default()).await;
    let _ = hub_es.delete("other.c0", &DeleteParams::default()).await;
    eventually(
        "hub ExportedService and ServiceImport recreated",
        PRESENT,
        || async {
            (hub_es.get_opt("other.c0").await.unwrap().is_some()
                && hub_si.get_opt("other").await.unwrap().is_some())
            .then_some(())
        },
    )
    .await;
    // converged: exactly one MCS slice in c1, nothing duplicated
    let managed =
        ListParams::default().labels("endpointslice.kubernetes.io/managed-by=causeway.io");
    eventually("one MCS slice in c1", PRESENT, || async {
        (slices.list(&managed).await.unwrap().items.len() == 1).then_some(())
    })
    .await;
    consistently(
        "and it stays one",
        std::time::Duration::from_secs(2),
        || async { slices.list(&managed).await.unwrap().items.len() == 1 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_only_import_into_an_ipv4_cluster_is_not_ready_with_a_reason() {
    let mut opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    opts.cidrs
        .insert("c0".into(), vec!["fd00:10:97::/112".parse().unwrap()]);
    let owned = Mcs::start_with(opts, 2).await;
    let m = &owned;
    m.service(0, "v6", json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"], "ports": [{"name": "http", "port": 80}]}), &["fd00::10"]).await;
    m.export(0, "v6", "dummy-label").await;
    let si = eventually("IPv6 import in the IPv6 cluster", PRESENT, || async {
        m.si(0, "v6").await.filter(|s| !s.spec.ips.is_empty())
    })
    .await;
    assert_eq!(si.spec.ip_families, vec!["IPv6"]);
    assert!(si.spec.ips[0].parse::<IpAddr>().unwrap().is_ipv6());
    let si = eventually(
        "Ready=False IPFamilyNotSupported in the IPv4 cluster",
        PRESENT,
        || async {
            m.si(1, "v6").await.filter(|s| {
                s.status.as_ref().is_some_and(|st| {
                    st.conditions.iter().any(|c| {
                        c.type_ == "Ready"
                            && c.status == "False"
                            && c.reason == "IPFamilyNotSupported"
                    })
                })
            })
        },
    )
    .await;
    assert!(
        si.spec.ips.is_empty(),
        "no IP from a family the cluster lacks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joined_while_the_controller_runs_takes_part() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into(), "late".into()],
        ..Default::default()
    };
    let owned = Mcs::start_with(opts, 2).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("SI in c1", PRESENT, || async { m.si(1, "hello").await }).await;
    assert!(m.si(2, "hello").await.is_none(), "not joined yet");
    let late = &m.cs.members[2];
    let msg = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "late",
        &causeway_e2e::access(late),
        None,
    )
    .await
    .unwrap();
    assert!(msg.contains("late"), "{msg}");
    eventually("SI in the late member", PRESENT, || async {
        m.si(2, "hello").await
    })
    .await;
    // and it exports too
    m.hello(2, &["10.2.0.1"]).await;
    m.export(2, "hello", "dummy-label").await;
    eventually("late's endpoints imported in c0", PRESENT, || async {
        (m.mcs_slices(0, "hello").await.len() == 2).then_some(())
    })
    .await;
    // a duplicate cluster id is refused with a clear message
    let err = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "again",
        &causeway_e2e::access(late),
        Some("late"),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("already used by member"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_id_comes_from_the_members_cluster_property() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    let owned = Mcs::start_with(opts, 1).await;
    let m = &owned;
    // the About API (KEP-2149) in c1, with its cluster id
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "clusterproperties.about.k8s.io"},
        "spec": {"group": "about.k8s.io", "scope": "Cluster", "names": {"plural": "clusterproperties", "singular": "clusterproperty", "kind": "ClusterProperty", "listKind": "ClusterPropertyList"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"value": {"type": "string", "maxLength": 128000}}}}}}}]}
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(m.c(1));
    crds.create(&Default::default(), &crd).await.unwrap();
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty"),
        "clusterproperties",
    );
    let props: Api<kube::core::DynamicObject> = Api::all_with(m.c(1), &ar);
    let prop: kube::core::DynamicObject = serde_json::from_value(json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "c1.example.org"}})).unwrap();
    eventually("ClusterProperty served", PRESENT, || async {
        props.create(&Default::default(), &prop).await.ok()
    })
    .await;
    let c1 = &m.cs.members[1];
    let msg = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "c1",
        &causeway_e2e::access(c1),
        None,
    )
    .await
    .unwrap();
    assert!(msg.contains("id c1.example.org"), "{msg}");
    let err = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "c1",
        &causeway_e2e::access(c1),
        Some("other"),
    )
    .await
    .unwrap_err();
    assert!(format!("{err:#}").contains("disagrees"), "{err:#}");
    m.hello(1, &["10.1.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    let s = eventually("c1's slice in c0", PRESENT, || async {
        m.mcs_slices(0, "hello").await.into_iter().next()
    })
    .await;
    assert_eq!(
        s.metadata.labels.unwrap()["multicluster.kubernetes.io/source-cluster"],
        "c1.example.org"
    );
    // the import's status names the cluster by that id (status is written after the spec)
    eventually("status.clusters = [c1.example.org]", PRESENT, || async {
        m.si(0, "hello").await.filter(|si| {
            si.status.as_ref().is_some_and(|st| {
                st.clusters
                    .iter()
                    .map(|c| c.cluster.as_str())
                    .eq(["c1.example.org"])
            })
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_member_credentials_are_picked_up_without_a_restart() {
    use k8s_openapi::api::core::v1::Secret;
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    let owned = Mcs::start_with(opts, 0).await;
    let m = &owned;
    let (c0, c1) = (&m.cs.members[0], &m.cs.members[1]);
    c0.add_token("token-one", kubesim::User::admin("causeway-one"));
    let mut access = causeway_e2e::access(c0);
    access.token = "token-one".into();
    causeway_controllers::clusters::join::join(m.hub.clone(), "c0", &access, None)
        .await
        .unwrap();
    causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "c1",
        &causeway_e2e::access(c1),
        None,
    )
    .await
    .unwrap();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("imported with the first token", PRESENT, || async {
        m.si(1, "hello").await
    })
    .await;
    // rotate: a new token in the member and in the hub Secret, then the old one stops working
    c0.add_token("token-two", kubesim::User::admin("causeway-two"));
    let secrets: Api<Secret> = Api::namespaced(m.hub.clone(), "causeway-system");
    secrets
        .patch("c0-credentials", &PatchParams::apply("rotation").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c0-credentials"}, "stringData": {"token": "token-two"}})))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    c0.revoke_token("token-one");
    m.service(
        0,
        "after",
        json!({"ports": [{"name": "http", "port": 80}]}),
        &["10.0.0.7"],
    )
    .await;
    m.export(0, "after", "dummy-label").await;
    eventually(
        "an export made after the rotation is imported",
        PRESENT,
        || async { m.si(1, "after").await },
    )
    .await;
    let ready = eventually(
        "its ServiceExport is Ready (status written with the new token)",
        PRESENT,
        || async {
            m.export_condition(0, "after", "Ready")
                .await
                .filter(|c| c.0 == "True")
        },
    )
    .await;
    assert_eq!(ready.1, "Exported");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_rbac_from_deploy_is_enough() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    let mut owned = Mcs::start_with(opts, 0).await;
    owned.stop_controller().await;
    let m = &owned;
    // the RBAC manifests from deploy/, applied with kubectl
    let kubectl = crate::support::kubectl_bin();
    let dir = tempfile::tempdir().unwrap();
    let kc = m.cs.write_kubeconfigs(dir.path()).unwrap();
    let repo = crate::support::repo();
    for (ctx, file) in [
        ("hub", "deploy/rbac/hub.yaml"),
        ("c0", "deploy/rbac/member.yaml"),
        ("c1", "deploy/rbac/member.yaml"),
    ] {
        let o = std::process::Command::new(&kubectl)
            .env("KUBECONFIG", &kc)
            .args(["--context", ctx, "apply", "-f"])
            .arg(repo.join(file))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{ctx} {file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // service-account tokens bound only to those roles
    let sa = |name: &str| kubesim::User {
        name: format!("system:serviceaccount:causeway-system:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:authenticated".into(),
        ],
    };
    m.cs.hub
        .add_token("hub-controller-token", sa("causeway-controller"));
    for (i, member) in m.cs.members.iter().enumerate() {
        let token = format!("member-{i}-token");
        member.add_token(&token, sa("causeway-hub"));
        let mut access = causeway_e2e::access(member);
        access.token = token;
        causeway_controllers::clusters::join::join(m.hub.clone(), member.name(), &access, None)
            .await
            .unwrap();
    }
    let hub_access = causeway_controllers::clusters::join::MemberAccess {
        token: "hub-controller-token".into(),
        ..causeway_e2e::access(&m.cs.hub)
    };
    let restricted = causeway_controllers::clusters::join::client_for(&hub_access)
        .await
        .unwrap();
    // RBAC is really enforced: the controller's token cannot read Secrets outside causeway-system
    let err = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(restricted.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    let ctl = m.cs.start_controller_as(restricted).unwrap();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let si = eventually(
        "imported with least-privilege credentials",
        PRESENT,
        || async { m.si(1, "hello").await.filter(|s| !s.spec.ips.is_empty()) },
    )
    .await;
    assert_eq!(si.spec.type_, ServiceImportType::ClusterSetIP);
    eventually("MCS slice in c1", PRESENT, || async {
        (!m.mcs_slices(1, "hello").await.is_empty()).then_some(())
    })
    .await;
    eventually("export Ready", PRESENT, || async {
        m.export_condition(0, "hello", "Ready")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    // The MultiClusterIngress controller and the member health probes work with the
    // same roles: an MCI is accepted, finalized, and gets its service locations.
    crate::mcs_support::create_ns(&m.hub, &m.ns).await;
    let class: k8s_openapi::api::networking::v1::IngressClass = serde_json::from_value(json!({
        "metadata": {"name": "causeway"}, "spec": {"controller": causeway_crds::well_known::INGRESS_CONTROLLER}}))
    .unwrap();
    Api::all(m.hub.clone())
        .create(&Default::default(), &class)
        .await
        .unwrap();
    let mci: causeway_crds::mci::MultiClusterIngress = serde_json::from_value(json!({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
        "metadata": {"name": "hello"},
        "spec": {"ingressClassName": "causeway", "defaultBackend": {"service": {"name": "hello", "port": {"name": "tcp"}}}}}))
    .unwrap();
    let mcis: Api<causeway_crds::mci::MultiClusterIngress> = Api::namespaced(m.hub.clone(), &m.ns);
    mcis.create(&Default::default(), &mci).await.unwrap();
    eventually(
        "MCI accepted with locations under least privilege",
        PRESENT,
        || async {
            let got = mcis.get_opt("hello").await.ok()??;
            let st = got.status.as_ref()?;
            (st.conditions
                .iter()
                .any(|c| c.type_ == "Accepted" && c.status == "True")
                && st.service_locations.first()?.clusters == vec!["c0".to_string()]
                && !got
                    .metadata
                    .finalizers
                    .clone()
                    .unwrap_or_default()
                    .is_empty())
            .then_some(())
        },
    )
    .await;
    eventually("members' Ready conditions written", PRESENT, || async {
        let cl = Api::<causeway_crds::federation::cluster::Cluster>::all(m.hub.clone())
            .get("c0")
            .await
            .ok()?;
        cl.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_the_hub_refuses_is_ready_false_failed_with_the_reason() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let opts = causeway_e2e::Options {
        members: vec!["c0".into()],
        ..Default::default()
    };
    let mut owned = Mcs::start_with(opts, 1).await;
    owned.stop_controller().await;
    let m = &owned;
    let kubectl = crate::support::kubectl_bin();
    let dir = tempfile::tempdir().unwrap();
    let kc = m.cs.write_kubeconfigs(dir.path()).unwrap();
    let o = std::process::Command::new(&kubectl)
        .env("KUBECONFIG", &kc)
        .args(["--context", "hub", "apply", "-f"])
        .arg(crate::support::repo().join("deploy/rbac/hub.yaml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // take away the controller's right to write ExportedServices
    let roles: Api<ClusterRole> = Api::all(m.hub.clone());
    let mut role = roles.get("causeway:controller").await.unwrap();
    role.rules.as_mut().unwrap().retain(|r| {
        !r.resources
            .as_ref()
            .is_some_and(|res| res.iter().any(|x| x == "exportedservices"))
    });
    role.rules.as_mut().unwrap().push(serde_json::from_value(json!({"apiGroups": ["causeway.io"], "resources": ["exportedservices"], "verbs": ["get", "list", "watch"]})).unwrap());
    roles
        .replace("causeway:controller", &Default::default(), &role)
        .await
        .unwrap();
    m.cs.hub.add_token(
        "weak",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-controller".into(),
            groups: vec!["system:authenticated".into()],
        },
    );
    let access = causeway_controllers::clusters::join::MemberAccess {
        token: "weak".into(),
        ..causeway_e2e::access(&m.cs.hub)
    };
    let ctl =
        m.cs.start_controller_as(
            causeway_controllers::clusters::join::client_for(&access)
                .await
                .unwrap(),
        )
        .unwrap();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let (status, reason, message) = eventually("Ready=False/Failed", PRESENT, || async {
        m.export_condition(0, "hello", "Ready")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Failed"));
    assert!(
        message.contains("forbidden") && message.contains("exportedservices"),
        "{message}"
    );
    let ns = m.ns.clone();
    eventually("an ExportFailed Warning Event", PRESENT, || {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(m.c(0), &ns);
        async move {
            api.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ExportFailed"))
        }
    })
    .await;
    // a persistent 403 is retried with per-service backoff (200 ms, doubling), not in
    // a hot loop: a handful of failed writes in 3 s, where a retry every few
    // milliseconds made hundreds
    let failed_writes = || {
        ctl.metrics
            .encode()
            .lines()
            .find(|l| {
                l.starts_with("causeway_reconcile_errors_total{")
                    && l.contains("controller=\"exporter\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = failed_writes();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let during = failed_writes() - before;
    assert!(
        (1..=8).contains(&during),
        "{during} failed exporter writes in 3 s"
    );
    ctl.stop().await;
}
