//! Core v1 Events and events.k8s.io/v1 Events are one store, as in kube-apiserver: what
//! kube-rs's Recorder writes through events.k8s.io is a core Event (kubectl's view), and
//! the other way round, with kube-apiserver's field mapping, in lists, gets and watches.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Resource};
use serde_json::json;

use crate::helpers::*;

async fn next_event<K, S>(s: &mut S) -> WatchEvent<K>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    within("the next watch event", s.next())
        .await
        .expect("the watch does not end")
        .expect("no watch error")
}

#[tokio::test]
async fn recorder_events_are_core_events_in_lists_and_watches() {
    let env = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let obj = cms
        .create(&PostParams::default(), &cm("web", json!({}), json!({})))
        .await
        .unwrap();
    let core: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let mut watch = core
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    let recorder = Recorder::new(
        env.client.clone(),
        Reporter {
            controller: "causeway.io/mcs".into(),
            instance: Some("hub-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Conflict".into(),
        note: Some("port 80 differs in west".into()),
        action: "Export".into(),
        secondary: None,
    };
    recorder.publish(&ev, &obj.object_ref(&())).await.unwrap();

    // kubectl describe's query: field selectors on involvedObject.
    let uid = obj.metadata.uid.clone().unwrap();
    let sel = format!(
        "involvedObject.name=web,involvedObject.namespace=default,involvedObject.kind=ConfigMap,involvedObject.uid={uid}"
    );
    let list = core
        .list(&ListParams::default().fields(&sel))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "{list:?}");
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("port 80 differs in west"));
    assert_eq!(e.reason.as_deref(), Some("Conflict"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.action.as_deref(), Some("Export"));
    assert_eq!(e.reporting_component.as_deref(), Some("causeway.io/mcs"));
    assert_eq!(e.reporting_instance.as_deref(), Some("hub-0"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.involved_object.uid.as_deref(), Some(uid.as_str()));
    assert!(e.event_time.is_some(), "{e:?}");
    let other = core
        .list(&ListParams::default().fields("involvedObject.uid=not-this-one"))
        .await
        .unwrap();
    assert!(other.items.is_empty(), "{other:?}");
    // `source` is the reporting controller when the Event has no source (kube-apiserver's
    // selectable fields of an Event)
    let by_source = core
        .list(&ListParams::default().fields("source=causeway.io/mcs"))
        .await
        .unwrap();
    assert_eq!(by_source.items.len(), 1, "{by_source:?}");

    match next_event(&mut watch).await {
        WatchEvent::Added(a) => assert_eq!(a.message.as_deref(), Some("port 80 differs in west")),
        other => panic!("expected ADDED on the core watch, got {other:?}"),
    }
    // The Recorder patches a repeated event into a series; the core watch sees it.
    recorder.publish(&ev, &obj.object_ref(&())).await.unwrap();
    match next_event(&mut watch).await {
        WatchEvent::Modified(m) => {
            assert_eq!(m.series.as_ref().and_then(|s| s.count), Some(2), "{m:?}");
            assert_eq!(m.message.as_deref(), Some("port 80 differs in west"));
        }
        other => panic!("expected MODIFIED on the core watch, got {other:?}"),
    }
}

#[tokio::test]
async fn core_events_are_events_k8s_io_events() {
    let env = start().await;
    let new_api: Api<NewEvent> = Api::namespaced(env.client.clone(), "default");
    let mut watch = new_api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let core: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Service", "name": "web", "namespace": "default", "uid": "u-1"},
        "reason": "Synced", "message": "all good", "type": "Normal", "count": 3,
        "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:05:00Z",
        "source": {"component": "legacy-controller", "host": "node-1"},
        "reportingComponent": "legacy-controller", "reportingInstance": "node-1",
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();

    let got = new_api.get("web.1").await.unwrap();
    assert_eq!(got.note.as_deref(), Some("all good"));
    assert_eq!(
        got.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("web")
    );
    assert_eq!(got.deprecated_count, Some(3));
    assert!(got.deprecated_first_timestamp.is_some() && got.deprecated_last_timestamp.is_some());
    assert_eq!(
        got.deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("legacy-controller")
    );
    assert_eq!(
        got.reporting_controller.as_deref(),
        Some("legacy-controller")
    );
    // events.k8s.io's field labels select on the same objects
    let by_regarding = new_api
        .list(&ListParams::default().fields("regarding.name=web,regarding.uid=u-1"))
        .await
        .unwrap();
    assert_eq!(by_regarding.items.len(), 1);
    match next_event(&mut watch).await {
        WatchEvent::Added(a) => assert_eq!(a.note.as_deref(), Some("all good")),
        other => panic!("expected ADDED on the events.k8s.io watch, got {other:?}"),
    }
    // Deleting through one API deletes from the other.
    new_api.delete("web.1", &Default::default()).await.unwrap();
    assert!(is_gone(&core, "web.1").await);
    match next_event(&mut watch).await {
        WatchEvent::Deleted(d) => assert_eq!(d.note.as_deref(), Some("all good")),
        other => panic!("expected DELETED on the events.k8s.io watch, got {other:?}"),
    }
}
