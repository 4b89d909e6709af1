//! Multi-Cluster Services end to end: the API-level conformance specs CONF-1…16 with the
//! suite's fixtures and timeouts. Endpoints, IP families, namespaces, ports per cluster
//! and restarts are in `mcs_topology.rs`; joining, cluster ids, credentials, RBAC and
//! refused writes in `mcs_members.rs`.

use std::net::IpAddr;

use causeway_crds::mcs::ServiceImportType;
use causeway_crds::mcs::v1beta1::ServiceImport;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::mcs_support::{CONSISTENT, Mcs, PRESENT, consistently, eventually, tick};

pub(crate) fn port_set(si: &ServiceImport) -> Vec<(String, String, i32)> {
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

/// Waits until member `i`'s ServiceExport `hello` is at `generation` and each of its
/// conditions (Valid, Ready, Conflict) says it is for that generation.
async fn observed_generation_is(m: &Mcs, i: usize, generation: i64) {
    let api: Api<causeway_crds::mcs::v1beta1::ServiceExport> = Api::namespaced(m.c(i), &m.ns);
    eventually(
        &format!("cluster {i}'s export conditions at generation {generation}"),
        PRESENT,
        || async {
            let ex = api.get("hello").await.unwrap();
            let conds = ex.status?.conditions;
            (ex.metadata.generation == Some(generation)
                && conds.len() == 3
                && conds
                    .iter()
                    .all(|c| c.observed_generation == Some(generation)))
            .then_some(())
        },
    )
    .await;
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

/// What an export or its Service stops having goes from the import too: an exported
/// label taken out of the ServiceExport, and the Service's trafficDistribution, leave
/// the ServiceImport and the derived Service (the applies compared only what they set,
/// so a field they no longer set stayed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_or_field_the_export_no_longer_has_leaves_the_import() {
    use kube::ResourceExt;
    use kube::api::{Patch, PatchParams};
    let owned = Mcs::start(&["c0"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let si = eventually("SI with the label and PreferClose", PRESENT, || async {
        let si = m.si(0, "hello").await?;
        (si.labels().contains_key("dummy-label")
            && si.spec.traffic_distribution.as_deref() == Some("PreferClose"))
        .then_some(si)
    })
    .await;
    assert!(si.annotations().contains_key("dummy-annotation"));
    let exports: Api<causeway_crds::mcs::v1beta1::ServiceExport> = Api::namespaced(m.c(0), &m.ns);
    exports
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"exportedLabels": null}})),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(m.c(0), &m.ns);
    services
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"trafficDistribution": null}})),
        )
        .await
        .unwrap();
    eventually(
        "the label and trafficDistribution gone from the SI",
        PRESENT,
        || async {
            let si = m.si(0, "hello").await?;
            (!si.labels().contains_key("dummy-label") && si.spec.traffic_distribution.is_none())
                .then_some(())
        },
    )
    .await;
    let si = m.si(0, "hello").await.unwrap();
    assert!(
        si.annotations().contains_key("dummy-annotation"),
        "the exported annotation stays"
    );
    eventually(
        "trafficDistribution gone from the derived Service",
        PRESENT,
        || async {
            let derived = services
                .list(
                    &ListParams::default().labels("multicluster.kubernetes.io/service-name=hello"),
                )
                .await
                .ok()?;
            let d = derived.items.first()?;
            d.spec
                .as_ref()
                .is_some_and(|s| s.traffic_distribution.is_none())
                .then_some(())
        },
    )
    .await;
}

/// An `appProtocol` the exported Service no longer has leaves the importing member's
/// derived Service too (its ports are the importer's alone), and an importer that has
/// caught up writes nothing more into that member (the derived ports hold what the API
/// server defaults on a port, so nothing differs round after round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_protocol_the_export_drops_leaves_the_derived_service() {
    use kube::api::{Patch, PatchParams};
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.service(
        0,
        "web",
        json!({"ports": [{"name": "http", "port": 80, "appProtocol": "http"}]}),
        &["10.0.0.1"],
    )
    .await;
    m.export(0, "web", "dummy-label").await;
    let derived = Api::<Service>::namespaced(m.c(1), &m.ns);
    let app_protocol = || async {
        let list = derived
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=web"))
            .await
            .unwrap();
        let svc = list.items.into_iter().next()?;
        let port = svc.spec.as_ref()?.ports.as_ref()?.first()?.clone();
        Some((port.app_protocol, svc))
    };
    eventually(
        "the derived Service in c1 with appProtocol http",
        PRESENT,
        || async {
            app_protocol()
                .await
                .filter(|(a, _)| a.as_deref() == Some("http"))
        },
    )
    .await;
    Api::<Service>::namespaced(m.c(0), &m.ns)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 80}]}})),
        )
        .await
        .unwrap();
    let (_, svc) = eventually(
        "appProtocol gone from c1's derived Service",
        PRESENT,
        || async { app_protocol().await.filter(|(a, _)| a.is_none()) },
    )
    .await;
    let si = eventually("the import without it", PRESENT, || async {
        m.si(1, "web")
            .await
            .filter(|si| si.spec.ports.iter().all(|p| p.app_protocol.is_none()))
    })
    .await;
    assert_eq!(si.spec.ports.len(), 1);
    // caught up: no write into c1, the derived Service as it is
    tick().await;
    let before = m.cs.members[1].write_requests();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        m.cs.members[1].write_requests(),
        before,
        "a caught-up importer writes nothing"
    );
    let (_, now) = app_protocol().await.unwrap();
    assert_eq!(
        now.metadata.resource_version, svc.metadata.resource_version,
        "the derived Service is not written again"
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
    // every condition, Conflict copied from the hub too, is for the export as it is
    for i in 0..2 {
        observed_generation_is(m, i, 1).await;
    }
    let exports: Api<causeway_crds::mcs::v1beta1::ServiceExport> = Api::namespaced(m.c(1), &m.ns);
    exports
        .patch(
            "hello",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"exportedAnnotations": {"more": "1"}}})),
        )
        .await
        .unwrap();
    observed_generation_is(m, 1, 2).await;
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

/// An import that changes type gets a derived Service of that type: headless (the
/// older export) while c0 exports, ClusterSetIP with a real clusterset IP once only c1
/// (ClusterIP) does. The API server never lets an update change a Service's
/// headlessness, so the derived Service is recreated; before, it stayed headless and
/// the import published `None` as its IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_that_changes_type_gets_a_derived_service_of_that_type() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.service(
        0,
        "hello",
        json!({"clusterIP": "None", "ports": [{"name": "tcp", "port": 42}]}),
        &["10.0.0.1"],
    )
    .await;
    m.export(0, "hello", "dummy-label").await;
    eventually("a headless SI in c1", PRESENT, || async {
        m.si(1, "hello")
            .await
            .filter(|si| si.spec.type_ == ServiceImportType::Headless)
    })
    .await;
    m.service(
        1,
        "hello",
        json!({"ports": [{"name": "tcp", "port": 42}]}),
        &["10.0.1.1"],
    )
    .await;
    m.export(1, "hello", "dummy-label").await;
    tick().await;
    m.unexport(0, "hello").await;
    let si = eventually("a ClusterSetIP SI in c1 with an IP", PRESENT, || async {
        m.si(1, "hello").await.filter(|si| {
            si.spec.type_ == ServiceImportType::ClusterSetIP && !si.spec.ips.is_empty()
        })
    })
    .await;
    assert!(
        si.spec.ips.iter().all(|ip| ip.parse::<IpAddr>().is_ok()),
        "{:?}",
        si.spec.ips
    );
    let derived = Api::<Service>::namespaced(m.c(1), &m.ns)
        .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=hello"))
        .await
        .unwrap();
    let spec = derived.items[0].spec.clone().unwrap();
    assert_ne!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.cluster_ips.unwrap_or_default(), si.spec.ips);
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
        let derived = m
            .si(i, "hello")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap()["multicluster.kubernetes.io/derived-service"]
            .clone();
        assert_eq!(l["kubernetes.io/service-name"], derived);
        // the SI's ips are written once the derived Service has its cluster IPs: a
        // later step than the slices, so waited for
        let svc = Api::<Service>::namespaced(m.c(i), &m.ns);
        let (derived, svc) = (&derived, &svc);
        eventually("SI ips are the derived Service's", PRESENT, || async move {
            let ips = svc.get(derived).await.ok()?.spec?.cluster_ips?;
            let si = m.si(i, "hello").await?;
            (!ips.is_empty() && si.spec.ips == ips).then_some(())
        })
        .await;
    }
    m.unexport(0, "hello").await;
    for i in 0..2 {
        eventually("slices deleted", PRESENT, || async move {
            m.mcs_slices(i, "hello").await.is_empty().then_some(())
        })
        .await;
    }
}
