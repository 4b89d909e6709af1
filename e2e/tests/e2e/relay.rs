//! A Pull member's exports through its outbox and the hub's relay (issue 13 item 2):
//! the member's exporter, with the agent's least-privilege hub identity from
//! `causeway register`, writes only into `causeway-es-<cluster>`; the hub controller's
//! relay publishes the real hub objects with the identity of the outbox's Cluster,
//! whatever the agent wrote, and the aggregator merges them with a Push member's.

use std::sync::Arc;

use causeway_controllers::clusters::register::{RegisterOptions, register};
use causeway_controllers::mcs::HubCaches;
use causeway_controllers::mcs::exporter::{self, Target};
use causeway_crds::exported_service::ExportedService;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::labels;
use causeway_e2e::{Options, hub_endpoint};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::mcs_support::{Mcs, PRESENT, eventually};
use crate::registry::agent_client;

const OUTBOX: &str = "causeway-es-west";

/// The names of the objects of kind `K` in `ns` on the hub that `selector` selects.
async fn names<K>(hub: &kube::Client, ns: &str, selector: &str) -> Vec<String>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut n: Vec<String> = Api::<K>::namespaced(hub.clone(), ns)
        .list(&ListParams::default().labels(selector).limit(500))
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    n.sort();
    n
}

/// The cluster ids in the hub ServiceImport `ns/name`'s status.
async fn import_clusters(hub: &kube::Client, ns: &str, name: &str) -> Option<Vec<String>> {
    let si = Api::<ServiceImport>::namespaced(hub.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    let mut c: Vec<String> = si.status?.clusters.into_iter().map(|c| c.cluster).collect();
    c.sort();
    Some(c)
}

/// The note of the first Event with `reason` in the outbox, once there is one.
async fn event_note(hub: &kube::Client, reason: &str) -> String {
    let events = Api::<Event>::namespaced(hub.clone(), OUTBOX);
    eventually(&format!("a {reason} Event"), PRESENT, || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .and_then(|e| e.note)
    })
    .await
}

/// Registers member `west` in pull mode (cluster id `id`, else its name); the agent's
/// hub client.
async fn register_west(m: &Mcs, id: Option<&str>) -> kube::Client {
    let done = register(
        m.hub.clone(),
        hub_endpoint(&m.cs.hub),
        "west",
        &causeway_e2e::member(m.cs.member("west").unwrap()).await,
        &RegisterOptions {
            id: id.map(String::from),
            token_seconds: 3600,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    agent_client(&done.agent_kubeconfig).await
}

/// West's exporter (member `i` of `m`, cluster id `id`) as its agent runs it, writing
/// into its outbox with the agent's hub client; stopped when the guard drops.
fn west_exporter(
    m: &Mcs,
    i: usize,
    id: &str,
    agent_hub: &kube::Client,
) -> tokio_util::sync::DropGuard {
    let stop = CancellationToken::new();
    tokio::spawn(exporter::run_to(
        id.into(),
        m.c(i),
        agent_hub.clone(),
        Arc::new(HubCaches::start(agent_hub, &stop)),
        Target::Outbox {
            cluster: "west".into(),
        },
        Arc::new(causeway_controllers::metrics::Metrics::default()),
        stop.clone(),
    ));
    stop.drop_guard()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_members_exports_go_through_its_outbox_and_the_relay() {
    let opts = Options {
        members: vec!["east".into(), "west".into()],
        ..Default::default()
    };
    // east joins in push mode; west registers in pull mode
    let m = Mcs::start_with(opts, 1).await;
    let agent_hub = register_west(&m, Some("west.example")).await;
    // the agent's identity really cannot write into the Service's namespace on the hub
    let forbidden = ExportedService::new("x.west.example", Default::default());
    let err = Api::<ExportedService>::namespaced(agent_hub.clone(), &m.ns)
        .create(&PostParams::default(), &forbidden)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    // west's exporter, as its agent runs it
    let exporter = west_exporter(&m, 1, "west.example", &agent_hub);
    m.hello(0, &["10.1.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    m.hello(1, &["10.2.0.1"]).await;
    m.export(1, "hello", "dummy-label").await;

    // the outbox holds west's export under <namespace>.<name>
    let ns = m.ns.clone();
    let outbox = &format!("{}=west", labels::OUTBOX);
    eventually("west's ExportedService in its outbox", PRESENT, || async {
        let n = names::<ExportedService>(&m.hub, OUTBOX, outbox).await;
        (n == [format!("{ns}.hello.west.example")]).then_some(())
    })
    .await;
    // the aggregator merges the relayed export with east's
    eventually("hub ServiceImport from east and west", PRESENT, || async {
        let c = import_clusters(&m.hub, &ns, "hello").await?;
        (c == ["east", "west.example"]).then_some(())
    })
    .await;
    let relayed = Api::<ExportedService>::namespaced(m.hub.clone(), &ns)
        .get("hello.west.example")
        .await
        .unwrap();
    assert_eq!(relayed.spec.cluster, "west.example");
    assert_eq!(relayed.labels()[labels::RELAYED_FROM], "west");
    assert!(!relayed.labels().contains_key(labels::OUTBOX));
    let relayed_from_west = format!("{}=west", labels::RELAYED_FROM);
    let slices = Api::<EndpointSlice>::namespaced(m.hub.clone(), &ns)
        .list(&ListParams::default().labels(&relayed_from_west))
        .await
        .unwrap()
        .items;
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert_eq!(slices[0].labels()[labels::SOURCE_CLUSTER], "west.example");
    assert_eq!(slices[0].endpoints[0].addresses, ["10.2.0.1"]);
    // west's ServiceExport is Ready once the relayed export is on the hub
    eventually("west's export Ready", PRESENT, || async {
        let (status, _, _) = m.export_condition(1, "hello", "Ready").await?;
        (status == "True").then_some(())
    })
    .await;
    // unexporting removes the outbox objects, the relayed ones, and west from the import
    m.unexport(1, "hello").await;
    eventually(
        "west's outbox and relayed objects gone",
        PRESENT,
        || async {
            let outboxed = names::<ExportedService>(&m.hub, OUTBOX, outbox).await;
            let outboxed_slices = names::<EndpointSlice>(&m.hub, OUTBOX, outbox).await;
            let relayed = names::<ExportedService>(&m.hub, &ns, &relayed_from_west).await;
            let relayed_slices = names::<EndpointSlice>(&m.hub, &ns, &relayed_from_west).await;
            (outboxed.is_empty()
                && outboxed_slices.is_empty()
                && relayed.is_empty()
                && relayed_slices.is_empty())
            .then_some(())
        },
    )
    .await;
    eventually("hub ServiceImport from east only", PRESENT, || async {
        let c = import_clusters(&m.hub, &ns, "hello").await?;
        (c == ["east"]).then_some(())
    })
    .await;

    // west's exporter stops (it would delete from its outbox what it did not write)
    drop(exporter);
    // a lying agent: it claims to be east, and to have exported at the epoch (the
    // oldest export wins a conflict); the relay publishes it as west, exported no
    // earlier than west registered
    let mut lie: ExportedService = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "ExportedService",
        "metadata": {"name": format!("{ns}.liar.east"), "labels": {
            labels::OUTBOX: "west", labels::ORIGIN_NAMESPACE: ns,
            labels::SERVICE_NAME: "liar", labels::SOURCE_CLUSTER: "east"},
            "annotations": {"causeway.io/origin-name": "liar.east"}},
        "spec": {"cluster": "east", "service": "liar", "ports": [{"port": 80, "protocol": "TCP"}],
                 "exportCreationTimestamp": "1970-01-01T00:00:00Z"},
    }))
    .unwrap();
    let outbox_api = Api::<ExportedService>::namespaced(agent_hub.clone(), OUTBOX);
    outbox_api
        .create(&PostParams::default(), &lie)
        .await
        .unwrap();
    let forced = eventually("the lie published as west's", PRESENT, || async {
        Api::<ExportedService>::namespaced(m.hub.clone(), &ns)
            .get_opt("liar.west.example")
            .await
            .unwrap()
    })
    .await;
    assert_eq!(forced.spec.cluster, "west.example");
    assert_eq!(forced.labels()[labels::SOURCE_CLUSTER], "west.example");
    let registered = Api::<Cluster>::all(m.hub.clone())
        .get("west")
        .await
        .unwrap()
        .metadata
        .creation_timestamp;
    assert!(registered.is_some());
    assert_eq!(forced.spec.export_creation_timestamp, registered);
    // only the relayed object counts: the outbox one is nobody's export
    eventually("liar imported from west only", PRESENT, || async {
        let c = import_clusters(&m.hub, &ns, "liar").await?;
        (c == ["west.example"]).then_some(())
    })
    .await;
    // the clamped time is written once, not again each round
    let settled = Api::<ExportedService>::namespaced(m.hub.clone(), &ns)
        .get("liar.west.example")
        .await
        .unwrap();
    assert_eq!(settled.metadata.generation, Some(1));
    assert_eq!(settled.spec.export_creation_timestamp, registered);
    assert!(
        Api::<ExportedService>::namespaced(m.hub.clone(), &ns)
            .get_opt("liar.east")
            .await
            .unwrap()
            .is_none()
    );
    // a lying agent labels its slices as kube-dns's, which a hub kube-proxy would route
    // to: in the Service's namespace the label stays behind, in kube-system nothing is
    // published and a Warning Event says why
    let slice_api = Api::<EndpointSlice>::namespaced(agent_hub.clone(), OUTBOX);
    for (origin, name) in [
        (ns.as_str(), "liar-1.west.example"),
        ("kube-system", "kube-dns-1"),
    ] {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": format!("{origin}.{name}"), "labels": {
                labels::OUTBOX: "west", labels::ORIGIN_NAMESPACE: origin,
                labels::SERVICE_NAME: "liar", labels::KUBERNETES_SERVICE_NAME: "kube-dns",
                "app": "evil"},
                "annotations": {"causeway.io/origin-name": name}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.9.9.9"]}],
        }))
        .unwrap();
        slice_api.create(&PostParams::default(), &s).await.unwrap();
    }
    let relayed = eventually("the kube-dns-labelled slice relayed", PRESENT, || async {
        Api::<EndpointSlice>::namespaced(m.hub.clone(), &ns)
            .get_opt("liar-1.west.example")
            .await
            .unwrap()
    })
    .await;
    let mut keys: Vec<_> = relayed.labels().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            labels::MANAGED,
            labels::RELAYED_FROM,
            labels::ENDPOINTSLICE_MANAGED_BY,
            labels::SERVICE_NAME,
            labels::SOURCE_CLUSTER,
        ],
        "only the exporter's labels are relayed"
    );
    let note = event_note(&m.hub, "ReservedOriginNamespace").await;
    assert!(note.contains("\"kube-system\""), "{note}");
    // the Event is sent in the round that wrote: nothing went to kube-system
    assert!(
        names::<EndpointSlice>(&m.hub, "kube-system", &relayed_from_west)
            .await
            .is_empty()
    );
    // marked for another cluster's outbox: not published, and a Warning Event says why
    lie.metadata.name = Some(format!("{ns}.other.east"));
    lie.labels_mut()
        .insert(labels::OUTBOX.into(), "east".into());
    lie.spec.service = "other".into();
    outbox_api
        .create(&PostParams::default(), &lie)
        .await
        .unwrap();
    let note = event_note(&m.hub, "OutboxMismatch").await;
    assert!(note.contains("outbox of Cluster \"west\""), "{note}");
    assert!(
        names::<ExportedService>(&m.hub, &ns, &relayed_from_west)
            .await
            .iter()
            .all(|n| !n.starts_with("other.")),
        "the mismatched object is not published"
    );
}

/// EXP-6 for a Pull member: what the hub refuses when the relay publishes the agent's
/// export (here the controller may not create EndpointSlices) shows on the member's
/// ServiceExport as `Ready=False/Failed` with the hub's answer, and goes once the hub
/// takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_hub_refuses_of_a_pull_members_export_shows_on_its_service_export() {
    use crate::mcs_members::{slices_may_create, under_hub_rbac_with, weak_controller};
    let opts = Options {
        members: vec!["west".into()],
        ..Default::default()
    };
    let m = under_hub_rbac_with(opts, 0).await;
    slices_may_create(&m.hub, false).await;
    let ctl = weak_controller(&m).await;
    let agent_hub = register_west(&m, None).await;
    let _exporter = west_exporter(&m, 0, "west", &agent_hub);
    m.hello(0, &["10.2.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let (_, reason, message) =
        eventually("Ready=False/Failed on west's export", PRESENT, || async {
            m.export_condition(0, "hello", "Ready")
                .await
                .filter(|c| c.0 == "False")
        })
        .await;
    assert_eq!(reason, "Failed");
    assert!(
        message.contains("the hub refused") && message.contains("endpointslices"),
        "{message}"
    );
    slices_may_create(&m.hub, true).await;
    eventually(
        "Ready=True/Exported once the hub takes it",
        PRESENT,
        || async {
            m.export_condition(0, "hello", "Ready")
                .await
                .filter(|c| c.0 == "True" && c.1 == "Exported")
        },
    )
    .await;
    ctl.stop().await;
}
