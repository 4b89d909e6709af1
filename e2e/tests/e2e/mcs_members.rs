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
            ..Default::default()
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
    // (no lower bound: with the delay doubling, a 3 s window late in the sequence can
    // fall between two retries)
    assert!(during <= 8, "{during} failed exporter writes in 3 s");
    assert!(before >= 1, "the refused write was counted");
    ctl.stop().await;
}
