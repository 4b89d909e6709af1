//! MultiClusterIngress, control plane: Karmada's YAML applied with kubectl is accepted
//! unchanged and gets Karmada's status (serviceLocations, trafficBlockClusters,
//! loadBalancer from the proxies) and says when a cluster's endpoints are stale; invalid objects get a condition and an
//! Event instead of a crash; other IngressClasses are left alone; the finalizer lets go.

use std::time::Duration;

use causeway_crds::mci::{ENDPOINTS_STALE, MultiClusterIngress};
use causeway_crds::well_known::{annotations, finalizers, labels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::mcs_support::{Mcs, PRESENT, eventually};

/// kubectl against one context of the clusterset, with a kubeconfig in a temp dir.
pub struct Kubectl {
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
}

impl Kubectl {
    pub fn new(mcs: &Mcs) -> Kubectl {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = mcs.cs.write_kubeconfigs(dir.path()).unwrap();
        Kubectl {
            _dir: dir,
            kubeconfig,
        }
    }

    /// Runs kubectl in `context`, asserting success; returns stdout.
    pub async fn ok(&self, context: &str, args: &[&str]) -> String {
        let mut cmd = std::process::Command::new(crate::support::kubectl_bin());
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--context")
            .arg(context)
            .args(args)
            .current_dir(crate::support::repo());
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Exports a plain ClusterIP Service `name` (port 80 `http`) from members `idx`.
pub async fn export_web(mcs: &Mcs, idx: &[usize], name: &str, endpoints: &[&str]) {
    for &i in idx {
        mcs.service(
            i,
            name,
            json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
            endpoints,
        )
        .await;
        mcs.export(i, name, "x-label").await;
    }
}

async fn mci(mcs: &Mcs, name: &str) -> Option<MultiClusterIngress> {
    Api::<MultiClusterIngress>::namespaced(mcs.hub.clone(), &mcs.ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn accepted(m: &MultiClusterIngress) -> Option<(String, String, String)> {
    let c = m
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_mci_applies_unchanged_and_gets_karmada_status() {
    let mcs = Mcs::start(&["east", "west", "north"], false).await;
    crate::mcs_support::create_ns(&mcs.hub, &mcs.ns).await;
    export_web(&mcs, &[0, 1, 2], "web", &["10.1.0.1"]).await;
    let kubectl = Kubectl::new(&mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/30-ingressclass.yaml"])
        .await;
    // Karmada's sample unchanged but for its namespace and IngressClass.
    let sample =
        std::fs::read_to_string(crate::support::repo().join("examples/31-mci-karmada-sample.yaml"))
            .unwrap()
            .replace("namespace: default", &format!("namespace: {}", mcs.ns));
    let ours = sample.replace("ingressClassName: nginx", "ingressClassName: causeway");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mci.yaml");
    std::fs::write(&f, &ours).unwrap();
    kubectl
        .ok("hub", &["apply", "-f", f.to_str().unwrap()])
        .await;

    // Karmada's sample names Service `web` port 81; the export has 80 — locations come
    // from the ServiceImport regardless of the port.
    let m = eventually(
        "the MCI is accepted with its service locations",
        PRESENT,
        || async {
            let m = mci(&mcs, "demo-localhost").await?;
            let st = m.status.as_ref()?;
            (accepted(&m)?.0 == "True" && st.service_locations.first()?.clusters.len() == 3)
                .then_some(m)
        },
    )
    .await;
    let st = m.status.clone().unwrap();
    assert_eq!(st.service_locations[0].name, "web");
    assert_eq!(
        st.service_locations[0].clusters,
        vec!["east", "north", "west"]
    );
    assert!(st.traffic_block_clusters.is_empty(), "{st:?}");
    assert!(m.finalizers().contains(&finalizers::MCI.to_string()));
    // kubectl shows it with the short name and Karmada's columns.
    let out = kubectl
        .ok("hub", &["get", "mci", "-n", &mcs.ns, "demo-localhost"])
        .await;
    assert!(
        out.contains("demo-localhost") && out.contains("causeway"),
        "{out}"
    );

    // A proxy publishes itself with a Lease: its address shows in status.loadBalancer.
    create_proxy_lease(&mcs.hub, "causeway-proxy-test", "127.0.0.9", "8080/http").await;
    eventually("status.loadBalancer shows the proxy", PRESENT, || async {
        let m = mci(&mcs, "demo-localhost").await?;
        let lb = m.status?.load_balancer?.ingress?;
        (lb.len() == 1
            && lb[0].ip.as_deref() == Some("127.0.0.9")
            && lb[0].ports.as_ref()?[0].port == 8080)
            .then_some(())
    })
    .await;

    // A member whose API server stops being ready is a control-plane outage, not a
    // data-plane one (EPS-7): within the stale-endpoints TTL it is not blocked, and the
    // MCI says its endpoints are stale (stale.rs covers the block after the TTL).
    mcs.cs.members[1].faults().set_not_ready(true);
    eventually("the MCI says west is stale", PRESENT, || async {
        let st = mci(&mcs, "demo-localhost").await?.status?;
        let c = st.conditions.iter().find(|c| c.type_ == ENDPOINTS_STALE)?;
        (c.status == "True" && c.reason == "ClusterNotReady" && c.message.contains("cluster west"))
            .then_some(st)
    })
    .await;
    let st = mci(&mcs, "demo-localhost").await.unwrap().status.unwrap();
    assert!(st.traffic_block_clusters.is_empty(), "{st:?}");
    mcs.cs.members[1].faults().set_not_ready(false);
    eventually("west is fresh once ready again", PRESENT, || async {
        let st = mci(&mcs, "demo-localhost").await?.status?;
        let c = st.conditions.iter().find(|c| c.type_ == ENDPOINTS_STALE)?;
        (c.status == "False" && st.traffic_block_clusters.is_empty()).then_some(())
    })
    .await;

    // Karmada's sample as is (class nginx) is left alone: no finalizer, no status.
    let other = sample.replace("name: demo-localhost", "name: for-nginx");
    std::fs::write(&f, &other).unwrap();
    kubectl
        .ok("hub", &["apply", "-f", f.to_str().unwrap()])
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = mci(&mcs, "for-nginx").await.unwrap();
    assert!(n.finalizers().is_empty(), "{n:?}");
    assert!(n.status.is_none_or(|s| s.conditions.is_empty()));

    // Deleting ours: the finalizer is released and the object goes.
    kubectl
        .ok(
            "hub",
            &[
                "delete",
                "mci",
                "-n",
                &mcs.ns,
                "demo-localhost",
                "--wait=false",
            ],
        )
        .await;
    eventually("the MCI is gone", PRESENT, || async {
        mci(&mcs, "demo-localhost").await.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_mci_gets_a_condition_and_an_event_not_a_crash() {
    let mcs = Mcs::start(&["east"], false).await;
    crate::mcs_support::create_ns(&mcs.hub, &mcs.ns).await;
    let kubectl = Kubectl::new(&mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/30-ingressclass.yaml"])
        .await;
    let api: Api<MultiClusterIngress> = Api::namespaced(mcs.hub.clone(), &mcs.ns);
    let bad: MultiClusterIngress = serde_json::from_value(json!({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
        "metadata": {"name": "bad", "annotations": {annotations::mci::LOAD_BALANCER: "fastest"}},
        "spec": {"ingressClassName": "causeway", "rules": [{"host": "10.0.0.1", "http": {"paths": [
            {"path": "/a//b", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &bad).await.unwrap();
    let (status, reason, message) =
        eventually("Accepted=False on the bad MCI", PRESENT, || async {
            accepted(&mci(&mcs, "bad").await?)
        })
        .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Invalid"));
    for needle in [
        "spec.rules[0].host",
        "not an IP address",
        "spec.rules[0].http.paths[0].path",
        "\"//\"",
    ] {
        assert!(message.contains(needle), "{needle} not in {message}");
    }
    let events: Api<Event> = Api::namespaced(mcs.hub.clone(), &mcs.ns);
    eventually(
        "a Warning InvalidSpec Event on the MCI",
        PRESENT,
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("InvalidSpec")
                        && e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                })
                .then_some(())
        },
    )
    .await;

    // Fixing the spec makes it accepted; the bad annotation is reported, defaults used.
    api.patch(
        "bad",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"rules": [{"host": "ok.example.com", "http": {"paths": [
            {"path": "/a", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})),
    )
    .await
    .unwrap();
    let (status, reason, message) = eventually("accepted after the fix", PRESENT, || async {
        let a = accepted(&mci(&mcs, "bad").await?)?;
        (a.0 == "True").then_some(a)
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "InvalidAnnotations")
    );
    assert!(
        message.contains(annotations::mci::LOAD_BALANCER),
        "{message}"
    );
    api.delete("bad", &DeleteParams::default()).await.unwrap();
    eventually("deleted", PRESENT, || async {
        mci(&mcs, "bad").await.is_none().then_some(())
    })
    .await;

    // Two default IngressClasses: an MCI without a class is ambiguous. It is left alone
    // (no finalizer, no status) and a Warning Event says why.
    let classes: Api<k8s_openapi::api::networking::v1::IngressClass> = Api::all(mcs.hub.clone());
    for (name, controller) in [
        (
            "causeway-default",
            causeway_crds::well_known::INGRESS_CONTROLLER,
        ),
        ("nginx-default", "k8s.io/ingress-nginx"),
    ] {
        let class = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {annotations::INGRESS_CLASS_IS_DEFAULT: "true"}},
            "spec": {"controller": controller}}))
        .unwrap();
        classes
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }
    let classless: MultiClusterIngress = serde_json::from_value(json!({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
        "metadata": {"name": "classless"},
        "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &classless)
        .await
        .unwrap();
    let note = eventually("a Warning AmbiguousIngressClass Event", PRESENT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("AmbiguousIngressClass")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("classless"))
            .then_some(e.note.unwrap_or_default())
        })
    })
    .await;
    assert!(
        note.contains("causeway-default") && note.contains("nginx-default"),
        "{note}"
    );
    let m = mci(&mcs, "classless").await.unwrap();
    assert!(m.finalizers().is_empty() && m.status.is_none(), "{m:?}");
}

/// Writes a Lease like a causeway-proxy's (held now, 15 s).
pub async fn create_proxy_lease(hub: &kube::Client, name: &str, address: &str, ports: &str) {
    crate::mcs_support::create_ns(hub, "causeway-system").await;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "causeway-system",
            "labels": {labels::COMPONENT: labels::PROXY_COMPONENT},
            "annotations": {annotations::PROXY_ADDRESSES: address, annotations::PROXY_PORTS: ports}},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 15, "renewTime": now},
    }))
    .unwrap();
    Api::<Lease>::namespaced(hub.clone(), "causeway-system")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

/// MCI-1 on Karmada's own MultiClusterIngress CRD, whose status has no `conditions`:
/// server-side apply refuses a status with them, so Causeway writes the status without
/// them (loadBalancer, serviceLocations still land) and says Accepted once, as an Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_karmadas_own_crd_the_status_lands_without_conditions() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mcs = Mcs::start(&["east", "west", "north"], false).await;
    crate::mcs_support::create_ns(&mcs.hub, &mcs.ns).await;
    export_web(&mcs, &[0, 1, 2], "web", &["10.1.0.1"]).await;
    // Karmada's CRD: Causeway's without status.conditions
    let crds: Api<CustomResourceDefinition> = Api::all(mcs.hub.clone());
    let mut crd = crds
        .get("multiclusteringresses.networking.karmada.io")
        .await
        .unwrap();
    for v in crd.spec.versions.iter_mut() {
        let status = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"))
            .and_then(|s| s.properties.as_mut())
            .expect("a status schema");
        assert!(status.remove("conditions").is_some());
    }
    crds.replace(&crd.name_any(), &PostParams::default(), &crd)
        .await
        .unwrap();
    let kubectl = Kubectl::new(&mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/30-ingressclass.yaml"])
        .await;
    let sample =
        std::fs::read_to_string(crate::support::repo().join("examples/31-mci-karmada-sample.yaml"))
            .unwrap()
            .replace("namespace: default", &format!("namespace: {}", mcs.ns))
            .replace("ingressClassName: nginx", "ingressClassName: causeway");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("mci.yaml");
    std::fs::write(&f, &sample).unwrap();
    kubectl
        .ok("hub", &["apply", "-f", f.to_str().unwrap()])
        .await;
    let m = eventually("the status, without conditions", PRESENT, || async {
        let m = mci(&mcs, "demo-localhost").await?;
        let st = m.status.as_ref()?;
        (st.service_locations.first()?.clusters.len() == 3).then_some(m)
    })
    .await;
    assert!(m.status.unwrap().conditions.is_empty());
    // said once, not at every round (there is no condition to compare with)
    tokio::time::sleep(Duration::from_secs(8)).await;
    let events: Api<Event> = Api::namespaced(mcs.hub.clone(), &mcs.ns);
    let accepted: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Accepted")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("demo-localhost")
        })
        .collect();
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    assert!(accepted[0].series.is_none(), "{:?}", accepted[0].series);
}

/// The MCI controller's failed writes so far (`reconcile_errors{controller="mci"}`).
fn mci_reconcile_errors(mcs: &Mcs) -> u64 {
    let text = mcs
        .ctl
        .as_ref()
        .expect("the controller runs")
        .metrics
        .encode();
    text.lines()
        .filter(|l| l.starts_with("reconcile_errors") || l.contains("_reconcile_errors"))
        .filter(|l| l.contains("controller=\"mci\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Deleting a served MCI withdraws its status and lets the finalizer go on the first
/// attempt: the status write changes the resourceVersion, so the finalizer's removal
/// must not be guarded by the one read before it (it was: a 409, a warning and a
/// reconcile failure at every deletion). A backend naming a port its ServiceImport lacks
/// is said in `ResolvedRefs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_served_mci_releases_it_without_a_failed_reconcile() {
    let mcs = Mcs::start(&["east"], false).await;
    crate::mcs_support::create_ns(&mcs.hub, &mcs.ns).await;
    export_web(&mcs, &[0], "web", &["10.1.0.1"]).await;
    let kubectl = Kubectl::new(&mcs);
    kubectl
        .ok("hub", &["apply", "-f", "examples/30-ingressclass.yaml"])
        .await;
    create_proxy_lease(&mcs.hub, "causeway-proxy-test", "127.0.0.9", "8080/http").await;
    let api: Api<MultiClusterIngress> = Api::namespaced(mcs.hub.clone(), &mcs.ns);
    let m: MultiClusterIngress = serde_json::from_value(json!({
        "apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
        "metadata": {"name": "served"},
        "spec": {"ingressClassName": "causeway", "rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
            {"path": "/typo", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "htp"}}}}]}}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &m).await.unwrap();
    let refs = eventually(
        "served, with its finalizer, an address and ResolvedRefs",
        PRESENT,
        || async {
            let m = mci(&mcs, "served").await?;
            let st = m.status.as_ref()?;
            st.load_balancer.as_ref()?.ingress.as_ref()?;
            let refs = st
                .conditions
                .iter()
                .find(|c| c.type_ == causeway_crds::mci::RESOLVED_REFS)?;
            (accepted(&m)?.0 == "True" && m.finalizers().contains(&finalizers::MCI.to_string()))
                .then(|| refs.clone())
        },
    )
    .await;
    assert_eq!(
        (refs.status.as_str(), refs.reason.as_str()),
        ("False", causeway_crds::mci::BACKEND_NOT_FOUND)
    );
    assert!(
        refs.message.contains("backend web port htp: ServiceImport"),
        "{}",
        refs.message
    );
    let before = mci_reconcile_errors(&mcs);
    api.delete("served", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the MCI is gone", PRESENT, || async {
        mci(&mcs, "served").await.is_none().then_some(())
    })
    .await;
    // a round or two more, for a failure to show
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        mci_reconcile_errors(&mcs),
        before,
        "the release failed at least once"
    );
}
