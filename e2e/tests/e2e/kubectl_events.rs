//! Real kubectl reads the Events Causeway writes: kube-rs's Recorder writes
//! events.k8s.io/v1, kubectl reads core v1 (`get events`, `describe`).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::support::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_events_and_describe_show_events_written_through_events_k8s_io() {
    let env = Env::start().await;
    let cm = env.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: noted\n  namespace: default\n",
    );
    env.ok(&["apply", "-f", &cm]).await;
    let client = env.hub_client().await;
    let obj = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get("noted")
        .await
        .expect("the ConfigMap exists");
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "causeway-controller".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "ExportConflict".into(),
        note: Some("port 80 differs in west".into()),
        action: "Export".into(),
        secondary: None,
    };
    recorder
        .publish(&event, &obj.object_ref(&()))
        .await
        .expect("the Recorder writes the event");

    let events = env.ok(&["get", "events", "-n", "default"]).await;
    for want in [
        "Warning",
        "ExportConflict",
        "configmap/noted",
        "port 80 differs in west",
    ] {
        assert!(events.contains(want), "{want} missing from:\n{events}");
    }
    let described = env
        .ok(&["describe", "configmap", "noted", "-n", "default"])
        .await;
    let section = described
        .split_once("Events:")
        .map(|(_, s)| s)
        .unwrap_or_default();
    for want in [
        "Warning",
        "ExportConflict",
        "causeway-controller",
        "port 80 differs in west",
    ] {
        assert!(
            section.contains(want),
            "{want} missing from the Events of:\n{described}"
        );
    }
}
