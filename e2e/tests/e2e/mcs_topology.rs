//! Multi-Cluster Services end to end: endpoint readiness, dual-stack and IPv6-only
//! imports, partial namespaces, different ports per cluster, cluster removal, and a
//! controller restart with hand edits.

use std::net::IpAddr;
use std::time::Duration;

use causeway_crds::mcs::v1beta1::{ServiceExport, ServiceImport};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::mcs::port_set;
use crate::mcs_support::{CONSISTENT, Mcs, PRESENT, consistently, eventually, tick};

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

/// A ServiceExport a user labelled `kubernetes.io/service-name` (a label of
/// EndpointSlices, meaningless on it) is still the export of the Service of its name:
/// an endpoint change is carried, and the import is never withdrawn meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_with_a_service_name_label_stays_its_services() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    let ex: ServiceExport = serde_json::from_value(json!({"metadata": {
        "name": "hello", "labels": {"kubernetes.io/service-name": "elsewhere"}}}))
    .unwrap();
    Api::<ServiceExport>::namespaced(m.c(0), &m.ns)
        .create(&Default::default(), &ex)
        .await
        .unwrap();
    eventually("imported in c1", PRESENT, || async {
        (m.si(1, "hello").await.is_some() && !m.mcs_slices(1, "hello").await.is_empty())
            .then_some(())
    })
    .await;
    let api: Api<EndpointSlice> = Api::namespaced(m.c(0), &m.ns);
    let patch = json!({"endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
    api.patch(
        "hello-abc12",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    eventually("the new endpoint imported", PRESENT, || async {
        m.mcs_slices(1, "hello")
            .await
            .into_iter()
            .any(|s| s.endpoints.len() == 2)
            .then_some(())
    })
    .await;
    consistently("still imported", CONSISTENT, || async {
        m.si(1, "hello").await.is_some()
            && m.export_condition(0, "hello", "Valid")
                .await
                .is_some_and(|c| c.0 == "True")
    })
    .await;
}

/// An endpoint field the member's slice drops (topology hints its EndpointSlice
/// controller took back) goes from the hub slice and every import too: the member's
/// endpoints are carried as they are, not merged into what was carried before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_field_the_member_drops_goes_everywhere() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let api: Api<EndpointSlice> = Api::namespaced(m.c(0), &m.ns);
    let endpoints = |hints: bool| {
        let mut e = json!({"addresses": ["10.0.0.1"], "conditions": {"ready": true}});
        if hints {
            e["hints"] = json!({"forZones": [{"name": "zone-a"}]});
        }
        json!({"endpoints": [e]})
    };
    let hinted = |s: &EndpointSlice| s.endpoints.iter().any(|e| e.hints.is_some());
    api.patch(
        "hello-abc12",
        &PatchParams::default(),
        &Patch::Merge(&endpoints(true)),
    )
    .await
    .unwrap();
    eventually("the hints imported in c1", PRESENT, || async {
        m.mcs_slices(1, "hello")
            .await
            .iter()
            .any(hinted)
            .then_some(())
    })
    .await;
    api.patch(
        "hello-abc12",
        &PatchParams::default(),
        &Patch::Merge(&endpoints(false)),
    )
    .await
    .unwrap();
    eventually("the hints gone from c1", PRESENT, || async {
        let slices = m.mcs_slices(1, "hello").await;
        (!slices.is_empty() && !slices.iter().any(hinted)).then_some(())
    })
    .await;
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
    // a list-type map keyed by cluster: its order carries no meaning, and a
    // server-side apply that adds an entry may put it after the entries already there
    let mut clusters: Vec<String> = si
        .status
        .unwrap()
        .clusters
        .into_iter()
        .map(|c| c.cluster)
        .collect();
    clusters.sort();
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
    let said = causeway_controllers::clusters::join::unjoin(
        m.hub.clone(),
        "c0",
        false,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(said.contains("withdrew its imports"), "{said}");
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
    // and its export no longer says it is exported
    let ex = Api::<ServiceExport>::namespaced(m.c(0), &m.ns)
        .get("hello")
        .await
        .unwrap();
    let conds = ex.status.unwrap().conditions;
    let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NotInClusterSet"),
        "{conds:?}"
    );
    assert!(!conds.iter().any(|c| c.type_ == "Conflict"), "{conds:?}");
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
    consistently("and it stays one", Duration::from_secs(2), || async {
        slices.list(&managed).await.unwrap().items.len() == 1
    })
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

/// A derived Service the member refuses for another reason than its IP families (here a
/// ResourceQuota allowing no Services in the namespace) makes the member's import
/// Ready=False/Failed with the API server's answer, not Pending forever; once the
/// quota is gone the derived Service is created and the import is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_derived_service_the_member_refuses_is_not_ready_with_the_answer() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    let quotas: Api<ResourceQuota> = Api::namespaced(m.c(1), &m.ns);
    let quota: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}}),
    )
    .unwrap();
    quotas.create(&Default::default(), &quota).await.unwrap();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let ready = |i: usize| async move {
        let si = m.si(i, "hello").await?;
        si.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status, c.reason, c.message))
    };
    eventually("c0 imports it", PRESENT, || async {
        ready(0).await.filter(|c| c.0 == "True")
    })
    .await;
    let (status, _, message) = eventually("Ready=False/Failed in c1", PRESENT, || async {
        ready(1).await.filter(|c| c.1 == "Failed")
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains("exceeded quota: no-services") && message.contains("limited: services=0"),
        "{message}"
    );
    quotas
        .delete("no-services", &DeleteParams::default())
        .await
        .unwrap();
    let si = eventually(
        "Ready=True in c1 once the quota is gone",
        PRESENT,
        || async {
            m.si(1, "hello").await.filter(|si| {
                si.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
        },
    )
    .await;
    assert!(!si.spec.ips.is_empty(), "the derived Service's IP: {si:?}");
}

/// ★ karmada#4326: `unjoin --preserve` leaves what Causeway wrote into the member (a
/// migration or rollback keeps serving), while the clusterset forgets the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unjoin_preserve_leaves_the_members_imports() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("c0's service imported into c1", PRESENT, || async {
        (m.mcs_slices(1, "hello").await.len() == 1).then_some(())
    })
    .await;
    let said = causeway_controllers::clusters::join::unjoin(
        m.hub.clone(),
        "c1",
        true,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(said.contains("--preserve"), "{said}");
    // the Cluster is gone (its finalizer let go) ...
    let clusters: Api<causeway_crds::federation::cluster::Cluster> = Api::all(m.hub.clone());
    assert!(clusters.get_opt("c1").await.unwrap().is_none());
    // ... and c1 keeps its import, though nothing updates it any more
    tick().await;
    assert!(m.si(1, "hello").await.is_some(), "the ServiceImport stays");
    assert_eq!(m.mcs_slices(1, "hello").await.len(), 1, "its slice stays");
}

/// The endpoints of `svc`'s MCS slices in member `i`, with the cluster each came from,
/// sorted.
async fn imported_endpoints(m: &Mcs, i: usize, svc: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = m
        .mcs_slices(i, svc)
        .await
        .into_iter()
        .flat_map(|s| {
            let from = s
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .get("multicluster.kubernetes.io/source-cluster")
                .cloned()
                .unwrap_or_default();
            let family = s.address_type.clone();
            s.endpoints
                .into_iter()
                .flat_map(|e| e.addresses)
                .map(move |a| (from.clone(), family.clone(), a))
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// EXP-2 (CONF-25): the same Service in two clusters, exported from one: the other
/// contributes no endpoints anywhere, its own import included, and the import names
/// only the exporter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exp_2_a_cluster_without_an_export_contributes_no_endpoints() {
    let owned = Mcs::start(&["c0", "c1", "c2"], false).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    m.hello(1, &["10.1.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let only_c0 = vec![("c0".to_string(), "IPv4".to_string(), "10.0.0.1".to_string())];
    for i in [0, 1, 2] {
        eventually(&format!("c0's endpoints in c{i}"), PRESENT, || async {
            (imported_endpoints(m, i, "hello").await == only_c0).then_some(())
        })
        .await;
    }
    consistently(
        "only c0's endpoint anywhere, and the import names only c0",
        CONSISTENT,
        || async {
            let mut ok = true;
            for i in [0, 1, 2] {
                ok &= imported_endpoints(m, i, "hello").await == only_c0;
            }
            let clusters: Vec<String> = m
                .si(2, "hello")
                .await
                .and_then(|si| si.status)
                .unwrap_or_default()
                .clusters
                .into_iter()
                .map(|c| c.cluster)
                .collect();
            ok && clusters == ["c0"]
        },
    )
    .await;
}

/// EPS-8: a dual-stack Service has an MCS slice per address type in every importing
/// cluster, each with its endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eps_8_a_dual_stack_service_has_a_slice_per_family() {
    let owned = Mcs::start(&["c0", "c1"], true).await;
    let m = &owned;
    m.hello(0, &["10.0.0.1"]).await;
    // the endpoint controller's second slice, for the IPv6 family
    let v6: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "hello-v6abc", "labels": {"kubernetes.io/service-name": "hello", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv6",
        "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "udp", "port": 42, "protocol": "UDP"}],
        "endpoints": [{"addresses": ["fd00::1"], "conditions": {"ready": true, "serving": true, "terminating": false}}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(m.c(0), &m.ns)
        .create(&Default::default(), &v6)
        .await
        .unwrap();
    m.export(0, "hello", "dummy-label").await;
    let want = vec![
        ("c0".to_string(), "IPv4".to_string(), "10.0.0.1".to_string()),
        ("c0".to_string(), "IPv6".to_string(), "fd00::1".to_string()),
    ];
    for i in [0, 1] {
        eventually(
            &format!("both families' slices in c{i}"),
            PRESENT,
            || async { (imported_endpoints(m, i, "hello").await == want).then_some(()) },
        )
        .await;
        let families: Vec<String> = m
            .mcs_slices(i, "hello")
            .await
            .into_iter()
            .map(|s| s.address_type)
            .collect();
        assert_eq!(
            families.len(),
            2,
            "one slice per family in c{i}: {families:?}"
        );
    }
    let si = m.si(1, "hello").await.unwrap();
    assert_eq!(si.spec.ip_families, vec!["IPv4", "IPv6"]);
}
