//! Multi-Cluster Services end to end: members joining while the controller runs,
//! cluster ids from ClusterProperty, rotated credentials, the least-privilege RBAC from
//! deploy/, and writes the hub refuses (with per-service backoff).

use causeway_crds::mcs::ServiceImportType;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::mcs_support::{Mcs, PRESENT, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joined_while_the_controller_runs_takes_part() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into(), "late".into(), "spare".into()],
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
    // another cluster with a cluster id already taken is refused with a clear message
    let err = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "again",
        &causeway_e2e::access(&m.cs.members[3]),
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
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        ..Default::default()
    };
    let owned = Mcs::start_with(opts, 1).await;
    let m = &owned;
    // c1's cluster id in its About API (KEP-2149), written through the older v1alpha1
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

/// Two members, c0 and c1, joined with deploy/'s RBAC applied everywhere (with real
/// kubectl) and service-account tokens bound only to those roles; the controller stopped,
/// and a hub client with the controller's token to start it as. The kubeconfigs (one
/// context per cluster, admin) are in the returned directory.
pub(crate) async fn least_privileged() -> (Mcs, kube::Client, tempfile::TempDir, std::path::PathBuf)
{
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
        ..Default::default()
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
    (owned, restricted, dir, kc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_rbac_from_deploy_is_enough() {
    let (owned, restricted, _dir, _) = least_privileged().await;
    let m = &owned;
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
    // the KEP-2149 membership properties, written with member.yaml's roles
    eventually("c0's membership properties", PRESENT, || async {
        let p = causeway_e2e::cluster_properties(&m.c(0)).await;
        (p.contains_key("clusterset.k8s.io")
            && p.get("cluster.clusterset.k8s.io").map(String::as_str) == Some("c0"))
        .then_some(())
    })
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
    let owned = under_hub_rbac().await;
    let m = &owned;
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
    let ctl = weak_controller(m).await;
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
    // (no lower bound: with the delay doubling, a 3 s window late in the sequence can
    // fall between two retries)
    assert!(during <= 8, "{during} failed exporter writes in 3 s");
    assert!(before >= 1, "the refused write was counted");
    ctl.stop().await;
}

/// EXP-6: an export whose hub EndpointSlices the hub refuses (the controller's hub
/// identity may not create endpointslices, and nothing else is taken away) is
/// Ready=False/Failed with the reason, though its ExportedService was written; once
/// the right is back the slices are written and the export is Ready=True again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_whose_hub_slices_the_hub_refuses_is_ready_false_failed() {
    let owned = under_hub_rbac().await;
    let m = &owned;
    // take away only the controller's right to create EndpointSlices
    slices_may_create(&m.hub, false).await;
    let ctl = weak_controller(m).await;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let ns = m.ns.clone();
    let exported: Api<causeway_crds::exported_service::ExportedService> =
        Api::namespaced(m.hub.clone(), &ns);
    eventually("the ExportedService on the hub", PRESENT, || async {
        exported
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=hello"))
            .await
            .unwrap()
            .items
            .pop()
    })
    .await;
    let (status, reason, message) = eventually("Ready=False/Failed", PRESENT, || async {
        m.export_condition(0, "hello", "Ready")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Failed"));
    assert!(
        message.contains("forbidden") && message.contains("endpointslices"),
        "{message}"
    );
    // nothing on the hub serves the export's endpoints
    let hub_slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(m.hub.clone(), &ns);
    assert!(
        hub_slices
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=hello"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    slices_may_create(&m.hub, true).await;
    eventually(
        "Ready=True/Exported once the hub takes the slices",
        PRESENT,
        || async {
            m.export_condition(0, "hello", "Ready")
                .await
                .filter(|c| c.0 == "True" && c.1 == "Exported")
        },
    )
    .await;
    assert_eq!(
        hub_slices
            .list(&ListParams::default().labels("multicluster.kubernetes.io/service-name=hello"))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    ctl.stop().await;
}

/// CID-4 and CID-5 (KEP-2149): a member carries `clusterset.k8s.io` (the hub's
/// clusterset name) and `cluster.clusterset.k8s.io` (its id) for exactly as long as it
/// is a member: one changed by hand is put back, with a Warning Event on its Cluster; a
/// cluster still in another clusterset may not join; leaving deletes
/// `clusterset.k8s.io` and keeps the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_properties_live_exactly_as_long_as_the_membership() {
    use causeway_crds::about::v1beta1::{ClusterProperty, ClusterPropertySpec};
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into(), "elsewhere".into()],
        ..Default::default()
    };
    let owned = Mcs::start_with(opts, 2).await;
    let m = &owned;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(m.hub.clone(), "causeway-system");
    let clusterset = cms.get("clusterset").await.unwrap().data.unwrap()["name"].clone();
    assert!(clusterset.starts_with("causeway-"), "{clusterset}");
    let props = |i: usize| {
        let c = m.c(i);
        async move { causeway_e2e::cluster_properties(&c).await }
    };
    let is_member = |p: &std::collections::BTreeMap<String, String>, id: &str| {
        p.get("clusterset.k8s.io") == Some(&clusterset)
            && p.get("cluster.clusterset.k8s.io").map(String::as_str) == Some(id)
    };
    for (i, id) in [(0, "c0"), (1, "c1")] {
        eventually(
            &format!("{id}'s membership properties"),
            PRESENT,
            || async { is_member(&props(i).await, id).then_some(()) },
        )
        .await;
    }

    // changed by hand while a member: put back, and the Cluster says so
    let c0_props: Api<ClusterProperty> = Api::all(m.c(0));
    c0_props
        .patch(
            "clusterset.k8s.io",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"value": "fleet-b"}})),
        )
        .await
        .unwrap();
    eventually("c0's clusterset.k8s.io put back", PRESENT, || async {
        is_member(&props(0).await, "c0").then_some(())
    })
    .await;
    // where `kubectl describe cluster c0` finds it
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(m.hub.clone());
    let ev = eventually("a Warning Event on c0's Cluster", PRESENT, || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ClusterPropertyRestored")
                    && e.note.as_deref().is_some_and(|n| n.contains("\"fleet-b\""))
            })
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let regarding = ev.regarding.unwrap();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("Cluster"), Some("c0"))
    );
    assert_eq!(regarding.namespace, None);

    // a cluster still in another clusterset may not join (and nothing is registered)
    let elsewhere: Api<ClusterProperty> = Api::all(m.c(2));
    elsewhere
        .create(
            &Default::default(),
            &ClusterProperty::new(
                "clusterset.k8s.io",
                ClusterPropertySpec {
                    value: "fleet-b".into(),
                },
            ),
        )
        .await
        .unwrap();
    let err = causeway_controllers::clusters::join::join(
        m.hub.clone(),
        "elsewhere",
        &causeway_e2e::access(&m.cs.members[2]),
        None,
    )
    .await
    .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("belongs to clusterset \"fleet-b\"") && err.contains("remove it from"),
        "{err}"
    );
    let clusters: Api<causeway_crds::federation::cluster::Cluster> = Api::all(m.hub.clone());
    assert!(clusters.get_opt("elsewhere").await.unwrap().is_none());
    // and a join racing another hub's (past the check above) cannot take it either: the
    // claim does not overwrite another tool's value
    let err = causeway_controllers::clusters::membership::claim(
        &m.c(2),
        "elsewhere",
        &clusterset,
        "elsewhere",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("another tool set to another value"), "{err}");
    assert_eq!(
        causeway_e2e::cluster_properties(&m.c(2))
            .await
            .get("clusterset.k8s.io")
            .map(String::as_str),
        Some("fleet-b")
    );

    // leaving: clusterset.k8s.io is gone by the time unjoin returns; the id stays
    causeway_controllers::clusters::join::unjoin(
        m.hub.clone(),
        "c1",
        false,
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    let left = props(1).await;
    assert_eq!(left.get("clusterset.k8s.io"), None, "{left:?}");
    assert_eq!(
        left.get("cluster.clusterset.k8s.io").map(String::as_str),
        Some("c1")
    );
    // and it stays gone: nothing of the clusterset writes it any more
    tokio::time::sleep(crate::mcs_support::CONSISTENT).await;
    assert_eq!(props(1).await.get("clusterset.k8s.io"), None);
}

/// A member that cannot carry the KEP-2149 properties still takes part, and its Cluster
/// says why: one without the About API (`AboutAPIMissing`, naming `causeway crds
/// install`), one whose Causeway identity may not list ClusterProperties
/// (`ClusterPropertiesForbidden`, naming the RBAC file to apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_cannot_carry_the_properties_is_named_with_the_fix() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (owned, restricted, _dir, _) = least_privileged().await;
    let m = &owned;
    // c0: Causeway's role there loses its About API rules
    let roles: Api<ClusterRole> = Api::all(m.c(0));
    let mut role = roles.get("causeway:member").await.unwrap();
    role.rules
        .as_mut()
        .unwrap()
        .retain(|r| !r.api_groups.iter().flatten().any(|g| g == "about.k8s.io"));
    role.metadata.managed_fields = None;
    roles
        .replace("causeway:member", &Default::default(), &role)
        .await
        .unwrap();
    // c1: no About API at all
    let crds: Api<CustomResourceDefinition> = Api::all(m.c(1));
    crds.delete("clusterproperties.about.k8s.io", &Default::default())
        .await
        .unwrap();
    eventually("c1 no longer serves ClusterProperties", PRESENT, || async {
        let api: Api<causeway_crds::about::v1beta1::ClusterProperty> = Api::all(m.c(1));
        api.list(&Default::default()).await.is_err().then_some(())
    })
    .await;
    let ctl = m.cs.start_controller_as(restricted).unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(m.hub.clone());
    for (cluster, reason, fix) in [
        (
            "c0",
            "ClusterPropertiesForbidden",
            "apply this release's deploy/rbac/member.yaml in the member",
        ),
        (
            "c1",
            "AboutAPIMissing",
            "run `causeway crds install` against the member",
        ),
    ] {
        let ev = eventually(&format!("{reason} on {cluster}"), PRESENT, || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
                })
        })
        .await;
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        let note = ev.note.unwrap_or_default();
        assert!(note.contains(fix), "{reason}: {note}");
    }
    // both still take part: an export from c0 is imported in c1
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    eventually("imported in c1", PRESENT, || async {
        m.si(1, "hello").await.filter(|s| !s.spec.ips.is_empty())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_come_back_after_their_hub_namespace_is_deleted() {
    use causeway_crds::mcs::v1beta1::ServiceImport;
    use k8s_openapi::api::core::v1::Namespace;
    let m = Mcs::start(&["c0", "c1"], false).await;
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let hub_si = Api::<ServiceImport>::namespaced(m.hub.clone(), &m.ns);
    eventually("the hub ServiceImport", PRESENT, || async {
        hub_si.get_opt("hello").await.unwrap()
    })
    .await;
    eventually("SI in c1", PRESENT, || async { m.si(1, "hello").await }).await;
    // someone deletes the namespace on the hub (NS-1: the hub mirrors it)
    let namespaces = Api::<Namespace>::all(m.hub.clone());
    namespaces
        .delete(&m.ns, &Default::default())
        .await
        .expect("namespace deleted");
    eventually("the hub namespace gone", PRESENT, || async {
        match namespaces.get_opt(&m.ns).await.unwrap() {
            None => Some(()),
            Some(ns) if ns.metadata.deletion_timestamp.is_none() => Some(()),
            Some(_) => None,
        }
    })
    .await;
    // the exporter creates it again, and the export is imported again
    let back = std::time::Duration::from_secs(30);
    eventually("the hub ServiceImport back", back, || async {
        hub_si.get_opt("hello").await.unwrap()
    })
    .await;
    eventually("SI in c1 back", back, || async {
        let si = m.si(1, "hello").await?;
        (si.spec.ports.len() == 2).then_some(si)
    })
    .await;
}

/// One member c0, its controller stopped, and deploy/rbac/hub.yaml applied to the hub
/// with kubectl (for tests that take one right away from the controller's role).
/// Gives (or takes away) the hub controller's right to create EndpointSlices
/// (`causeway:controller`, as `deploy/rbac/hub.yaml` makes it).
pub(crate) async fn slices_may_create(hub: &kube::Client, create: bool) {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let roles: Api<ClusterRole> = Api::all(hub.clone());
    let mut role = roles.get("causeway:controller").await.unwrap();
    let mut found = false;
    for r in role.rules.as_mut().unwrap() {
        if r.resources
            .as_ref()
            .is_some_and(|res| res.iter().any(|x| x == "endpointslices"))
        {
            found = true;
            r.verbs.retain(|v| v != "create");
            if create {
                r.verbs.push("create".into());
            }
        }
    }
    assert!(found, "deploy/rbac/hub.yaml grants endpointslices");
    roles
        .replace("causeway:controller", &Default::default(), &role)
        .await
        .unwrap();
}

/// The hub controller, started as its ServiceAccount (what `deploy/rbac/hub.yaml`
/// grants it, not an admin's rights).
pub(crate) async fn weak_controller(m: &Mcs) -> causeway_e2e::Controller {
    m.cs.hub.add_token(
        "weak",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-controller".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let access = causeway_controllers::clusters::join::MemberAccess {
        token: "weak".into(),
        ..causeway_e2e::access(&m.cs.hub)
    };
    m.cs.start_controller_as(
        causeway_controllers::clusters::join::client_for(&access)
            .await
            .unwrap(),
    )
    .unwrap()
}

async fn under_hub_rbac() -> Mcs {
    under_hub_rbac_with(
        causeway_e2e::Options {
            members: vec!["c0".into()],
            ..Default::default()
        },
        1,
    )
    .await
}

/// [`Mcs::start_with`], its controller stopped and `deploy/rbac/hub.yaml` applied to
/// the hub (for [`weak_controller`]).
pub(crate) async fn under_hub_rbac_with(opts: causeway_e2e::Options, join: usize) -> Mcs {
    let mut owned = Mcs::start_with(opts, join).await;
    owned.stop_controller().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = owned.cs.write_kubeconfigs(dir.path()).unwrap();
    let o = std::process::Command::new(crate::support::kubectl_bin())
        .env("KUBECONFIG", &kc)
        .args(["--context", "hub", "apply", "-f"])
        .arg(crate::support::repo().join("deploy/rbac/hub.yaml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    owned
}
