//! What the MCS statuses and Events tell a user when something is not imported as
//! asked: a member without the namespace (namespace sameness), exported metadata that
//! no API server accepts.

use causeway_crds::mcs::v1beta1::{ServiceExport, ServiceImport};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

use crate::mcs_support::{Mcs, PRESENT, create_ns, eventually};

async fn create<K>(c: &kube::Client, ns: &str, v: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(c.clone(), ns)
        .create(&Default::default(), &serde_json::from_value(v).unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_the_namespace_is_named_on_the_hub_import() {
    let m = Mcs::start(&["c0", "c1"], false).await;
    let only = "only-in-c0";
    create_ns(&m.c(0), only).await;
    create::<Service>(
        &m.c(0),
        only,
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    create::<ServiceExport>(
        &m.c(0),
        only,
        json!({"metadata": {"name": "web"}, "spec": {}}),
    )
    .await;
    // the hub import exists, c1 has no namespace: the hub ServiceImport says why
    let events = Api::<Event>::namespaced(m.hub.clone(), only);
    let ev = eventually(
        "a NamespaceMissing Event on the hub import",
        PRESENT,
        || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("NamespaceMissing")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web")
                })
        },
    )
    .await;
    let regarding = ev.regarding.clone().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("ServiceImport"));
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    let note = ev.note.clone().unwrap_or_default();
    assert!(
        note.contains("cluster c1 does not import only-in-c0/web")
            && note.contains("create namespace only-in-c0 in c1"),
        "{note}"
    );
    assert_eq!(ev.reporting_instance.as_deref(), Some("c1"));
    // c0, which has the namespace, is not named
    let all = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        !all.iter()
            .any(|e| e.note.as_deref().unwrap_or_default().contains("cluster c0")),
        "{all:?}"
    );
    // once the namespace exists the service is imported there
    create_ns(&m.c(1), only).await;
    eventually("imported in c1", PRESENT, || async {
        Api::<ServiceImport>::namespaced(m.c(1), only)
            .get_opt("web")
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_metadata_no_api_server_accepts_is_reported_and_the_rest_imported() {
    let m = Mcs::start(&["c0", "c1"], false).await;
    m.hello(0, &["10.0.0.1"]).await;
    create::<ServiceExport>(
        &m.c(0),
        &m.ns,
        json!({"metadata": {"name": "hello"}, "spec": {
            "exportedLabels": {"team": "web", "bad key": "x"},
            "exportedAnnotations": {"example.com/owner": "me", "only/one/slash": "v"}}}),
    )
    .await;
    let (_, reason, msg) = eventually("Valid=False on the export", PRESENT, || async {
        m.export_condition(0, "hello", "Valid")
            .await
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "InvalidExportedMetadata", "{msg}");
    for part in [
        "spec.exportedLabels: Invalid value: \"bad key\"",
        "spec.exportedAnnotations: Invalid value: \"only/one/slash\"",
        "fix or remove it in the ServiceExport",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    // the service is still imported everywhere, with the valid metadata only
    for i in 0..2 {
        let si = eventually("SI imported", PRESENT, || async { m.si(i, "hello").await }).await;
        let (l, a) = (
            si.metadata.labels.unwrap_or_default(),
            si.metadata.annotations.unwrap_or_default(),
        );
        assert_eq!(l.get("team").map(String::as_str), Some("web"), "{l:?}");
        assert!(!l.contains_key("bad key"), "{l:?}");
        assert_eq!(a.get("example.com/owner").map(String::as_str), Some("me"));
        assert!(!a.contains_key("only/one/slash"), "{a:?}");
    }
    let ready = m.export_condition(0, "hello", "Ready").await.unwrap();
    assert_eq!(ready.0, "True", "{ready:?}");
}
