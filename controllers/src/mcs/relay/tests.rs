//! Table tests of the relay's pure `desired`.
use super::*;
use crate::mcs::exporter::outbox::to_outbox;
use causeway_crds::exported_service::ExportedServiceSpec;
use causeway_crds::federation::cluster::ClusterSpec;
use serde_json::json;

fn cluster(name: &str, id: Option<&str>, mode: ClusterSyncMode) -> Arc<Cluster> {
    let mut c = Cluster::new(
        name,
        ClusterSpec {
            sync_mode: mode,
            id: id.map(Into::into),
            ..Default::default()
        },
    );
    c.metadata.uid = Some(format!("uid-{name}"));
    Arc::new(c)
}

/// An ExportedService as the exporter of `id` makes it for `demo/<svc>`, then put in
/// the outbox of `outbox`.
fn exported(svc: &str, id: &str, outbox: &str) -> ExportedService {
    let e = ExportedService {
        metadata: ObjectMeta {
            name: Some(exported_service_name(svc, id)),
            namespace: Some("demo".into()),
            labels: Some(BTreeMap::from([
                (labels::SERVICE_NAME.into(), svc.into()),
                (labels::SOURCE_CLUSTER.into(), id.into()),
            ])),
            ..Default::default()
        },
        spec: ExportedServiceSpec {
            cluster: id.into(),
            service: svc.into(),
            ..Default::default()
        },
        status: None,
    };
    to_outbox(e, outbox)
}

fn slice(name: &str, svc: &str, id: &str, outbox: &str) -> EndpointSlice {
    let s: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "demo", "labels": {
            labels::SERVICE_NAME: svc, labels::SOURCE_CLUSTER: id,
            labels::ENDPOINTSLICE_MANAGED_BY: labels::ENDPOINTSLICE_MANAGED_BY_KUBE},
            "annotations": {annotations::EXPORTED_AT: "1"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"]}],
    }))
    .unwrap();
    to_outbox(s, outbox)
}

fn arcs<K>(v: Vec<K>) -> Vec<Arc<K>> {
    v.into_iter().map(Arc::new).collect()
}

/// (namespace, name, spec.cluster or source-cluster, relayed-from) of each written object.
fn summary<K: Resource>(objs: &[K], cluster_of: impl Fn(&K) -> String) -> Vec<[String; 4]> {
    objs.iter()
        .map(|o| {
            let l = o.meta().labels.clone().unwrap_or_default();
            [
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default(),
                cluster_of(o),
                l.get(labels::RELAYED_FROM).cloned().unwrap_or_default(),
            ]
        })
        .collect()
}

fn s4(a: &str, b: &str, c: &str, d: &str) -> [String; 4] {
    [a.into(), b.into(), c.into(), d.into()]
}

/// The label keys of every relayed object (slices add the managed-by label): what the
/// exporter sets on hub objects, and relayed-from.
const RELAYED_LABELS: [&str; 4] = [
    labels::MANAGED,
    labels::RELAYED_FROM,
    labels::SERVICE_NAME,
    labels::SOURCE_CLUSTER,
];

fn label_keys<K: Resource>(o: &K) -> Vec<&str> {
    o.meta()
        .labels
        .iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .collect()
}

#[test]
fn relays_outbox_objects_with_the_identity_of_the_outbox() {
    let clusters = vec![
        cluster("east", Some("east.set"), ClusterSyncMode::Pull),
        cluster("west", None, ClusterSyncMode::Pull),
        cluster("push", None, ClusterSyncMode::Push),
    ];
    // (case, outbox ExportedServices, outbox slices, expected exported, expected slices,
    //  expected ignored reasons)
    type Case = (
        &'static str,
        Vec<ExportedService>,
        Vec<EndpointSlice>,
        Vec<[String; 4]>,
        Vec<[String; 4]>,
        Vec<&'static str>,
    );
    let lying_spec = {
        let mut e = exported("web", "east.set", "east");
        e.spec.cluster = "west".into();
        e
    };
    let lying_label = {
        let mut s = slice("web-1.west", "web", "west", "east");
        s.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(labels::SOURCE_CLUSTER.into(), "west".into());
        s
    };
    let foreign_marker = {
        let mut e = exported("web", "west", "west");
        e.metadata.namespace = Some("causeway-es-east".into());
        e
    };
    let reserved = {
        let mut e = exported("web", "east.set", "east");
        e.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(labels::ORIGIN_NAMESPACE.into(), "causeway-es-west".into());
        e
    };
    // a lying agent labels its slice as kube-dns's (kube-proxy would send that
    // Service's traffic to its endpoints) and adds labels of its own
    let kube_dns = |origin: &str| {
        let mut s = slice("web-1.east.set", "web", "east.set", "east");
        let l = s.metadata.labels.as_mut().unwrap();
        l.insert(labels::KUBERNETES_SERVICE_NAME.into(), "kube-dns".into());
        l.insert("app".into(), "evil".into());
        l.insert(labels::ORIGIN_NAMESPACE.into(), origin.into());
        let a = s.metadata.annotations.as_mut().unwrap();
        a.insert("evil.example/annotation".into(), "x".into());
        s
    };
    let in_namespace = |origin: &str| {
        let mut e = exported("web", "east.set", "east");
        e.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(labels::ORIGIN_NAMESPACE.into(), origin.into());
        e
    };
    let table: Vec<Case> = vec![
        (
            "an honest agent: same names, the Cluster's id, relayed-from its name",
            vec![exported("web", "east.set", "east")],
            vec![slice("web-1.east.set", "web", "east.set", "east")],
            vec![s4("demo", "web.east.set", "east.set", "east")],
            vec![s4("demo", "web-1.east.set", "east.set", "east")],
            vec![],
        ),
        (
            "an id falls back to the Cluster's name",
            vec![exported("web", "west", "west")],
            vec![],
            vec![s4("demo", "web.west", "west", "west")],
            vec![],
            vec![],
        ),
        (
            "a lying agent claims another cluster: the identity is forced, the names follow it",
            vec![lying_spec],
            vec![lying_label],
            vec![s4("demo", "web.east.set", "east.set", "east")],
            vec![s4("demo", "web-1.west.east.set", "east.set", "east")],
            vec![],
        ),
        (
            "an object marked for another cluster's outbox is ignored and reported",
            vec![foreign_marker],
            vec![],
            vec![],
            vec![],
            vec!["OutboxMismatch"],
        ),
        (
            "Causeway's own namespaces are not origins",
            vec![reserved],
            vec![],
            vec![],
            vec![],
            vec!["ReservedOriginNamespace"],
        ),
        (
            "a lying agent's labels and annotations stay behind: only the exporter's, forced",
            vec![],
            vec![kube_dns("demo")],
            vec![],
            vec![s4("demo", "web-1.east.set", "east.set", "east")],
            vec![],
        ),
        (
            "Kubernetes' own namespaces are not origins",
            vec![
                in_namespace("kube-system"),
                in_namespace("kube-public"),
                in_namespace("kube-node-lease"),
            ],
            vec![kube_dns("kube-system")],
            vec![],
            vec![],
            vec![
                "ReservedOriginNamespace",
                "ReservedOriginNamespace",
                "ReservedOriginNamespace",
                "ReservedOriginNamespace",
            ],
        ),
        (
            "an origin that is not a namespace name, or no origin at all, is not published",
            vec![in_namespace("Not_A_Namespace"), {
                let mut e = exported("web", "east.set", "east");
                e.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .remove(labels::ORIGIN_NAMESPACE);
                e
            }],
            vec![],
            vec![],
            vec![],
            vec!["InvalidOriginNamespace", "OutboxIncomplete"],
        ),
        (
            "default is an origin like any other",
            vec![in_namespace("default")],
            vec![kube_dns("default")],
            vec![s4("default", "web.east.set", "east.set", "east")],
            vec![s4("default", "web-1.east.set", "east.set", "east")],
            vec![],
        ),
        (
            "outboxes of Push and unregistered clusters are not relayed",
            vec![
                exported("web", "push", "push"),
                exported("web", "gone", "gone"),
            ],
            vec![slice("web-1.gone", "web", "gone", "gone")],
            vec![],
            vec![],
            vec![],
        ),
    ];
    for (case, ex, sl, want_ex, want_sl, want_ignored) in table {
        let got = desired(&clusters, &arcs(ex), &arcs(sl), &[], &[]);
        assert_eq!(
            summary(&got.exported, |e| e.spec.cluster.clone()),
            want_ex,
            "{case}"
        );
        for e in &got.exported {
            assert_eq!(e.labels()[labels::SOURCE_CLUSTER], e.spec.cluster, "{case}");
            assert_eq!(label_keys(e), RELAYED_LABELS, "{case}");
        }
        assert_eq!(
            summary(&got.slices, |s| s.labels()[labels::SOURCE_CLUSTER].clone()),
            want_sl,
            "{case}"
        );
        for s in &got.slices {
            let mut keys = RELAYED_LABELS.to_vec();
            keys.insert(2, labels::ENDPOINTSLICE_MANAGED_BY);
            assert_eq!(label_keys(s), keys, "{case}");
            // of the annotations only the exporter's timestamp
            assert_eq!(
                s.annotations(),
                &BTreeMap::from([(annotations::EXPORTED_AT.into(), "1".into())]),
                "{case}"
            );
            assert_eq!(
                s.labels()[labels::ENDPOINTSLICE_MANAGED_BY],
                labels::ENDPOINTSLICE_MANAGED_BY_VALUE,
                "{case}"
            );
            assert_eq!(s.endpoints[0].addresses, ["10.0.0.1"], "{case}");
        }
        let reasons: Vec<_> = got.ignored.iter().map(|i| i.reason).collect();
        assert_eq!(reasons, want_ignored, "{case}");
        // the namespace creation list: every origin namespace written to, once
        let namespaces: Vec<_> = got.namespaces.keys().cloned().collect();
        let expected: BTreeSet<String> = want_ex
            .iter()
            .chain(&want_sl)
            .map(|w| w[0].clone())
            .collect();
        assert_eq!(namespaces, Vec::from_iter(expected), "{case}");
    }
}

#[test]
fn an_object_the_relay_did_not_write_is_never_replaced() {
    let clusters = vec![cluster("east", None, ClusterSyncMode::Pull)];
    let outbox = arcs(vec![exported("web", "east", "east")]);
    // a Push member registered with the same id already exported web
    let mut theirs = ExportedService::new(
        "web.east",
        ExportedServiceSpec {
            cluster: "east".into(),
            service: "web".into(),
            ..Default::default()
        },
    );
    theirs.metadata.namespace = Some("demo".into());
    let got = desired(&clusters, &outbox, &[], &arcs(vec![theirs.clone()]), &[]);
    assert!(got.exported.is_empty());
    assert_eq!(got.ignored[0].reason, "HubObjectTaken");
    assert!(
        got.ignored[0].note.contains("demo/web.east"),
        "{}",
        got.ignored[0].note
    );
    // what the relay wrote itself is updated
    theirs
        .metadata
        .labels
        .get_or_insert_default()
        .insert(labels::RELAYED_FROM.into(), "east".into());
    let got = desired(&clusters, &outbox, &[], &arcs(vec![theirs]), &[]);
    assert_eq!(got.exported.len(), 1);
    assert!(got.ignored.is_empty());
}

#[test]
fn a_cluster_that_left_or_is_leaving_keeps_nothing() {
    let outbox = arcs(vec![exported("web", "east", "east")]);
    let slices = arcs(vec![slice("web-1.east", "web", "east", "east")]);
    let mut leaving = Cluster::new(
        "east",
        ClusterSpec {
            sync_mode: ClusterSyncMode::Pull,
            ..Default::default()
        },
    );
    leaving.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    for clusters in [vec![], vec![Arc::new(leaving)]] {
        let got = desired(&clusters, &outbox, &slices, &[], &[]);
        // nothing desired: the writer deletes every relayed object of the cluster
        assert!(got.exported.is_empty() && got.slices.is_empty());
        assert!(got.namespaces.is_empty() && got.ignored.is_empty());
    }
}

/// CR-2 (the oldest export wins a conflict) is not the agent's to win: an export may
/// not claim to be older than its Cluster's registration. A claim from before it (the
/// epoch) comes out clamped to it; a later claim, one equal to it and none at all are
/// unchanged; and the same outbox gives the same export round after round (no
/// flapping writes), also once the clamped one is on the hub.
#[test]
fn an_export_is_never_older_than_its_clusters_registration() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    let registered = 1_700_000_000;
    let mut east = (*cluster("east", Some("east.set"), ClusterSyncMode::Pull)).clone();
    east.metadata.creation_timestamp = Some(at(registered));
    let clusters = vec![Arc::new(east)];
    let claiming = |svc: &str, claim: Option<Time>| {
        let mut e = exported(svc, "east.set", "east");
        e.spec.export_creation_timestamp = claim;
        e
    };
    // (service, claimed exportCreationTimestamp, relayed exportCreationTimestamp)
    let table = [
        ("epoch", Some(at(0)), Some(at(registered))),
        ("before", Some(at(registered - 1)), Some(at(registered))),
        ("same", Some(at(registered)), Some(at(registered))),
        (
            "later",
            Some(at(registered + 3600)),
            Some(at(registered + 3600)),
        ),
        ("unknown", None, None),
    ];
    let outbox = arcs(
        table
            .iter()
            .map(|(svc, claim, _)| claiming(svc, claim.clone()))
            .collect(),
    );
    let got = desired(&clusters, &outbox, &[], &[], &[]);
    let relayed = |got: &Desired| -> Vec<(String, Option<Time>)> {
        got.exported
            .iter()
            .map(|e| {
                (
                    e.spec.service.clone(),
                    e.spec.export_creation_timestamp.clone(),
                )
            })
            .collect()
    };
    let expected: Vec<(String, Option<Time>)> = table
        .iter()
        .map(|(svc, _, want)| (svc.to_string(), want.clone()))
        .collect();
    assert_eq!(relayed(&got), expected);
    // the rest of a legitimate export is as the agent wrote it, but its cluster id
    let later = got
        .exported
        .iter()
        .find(|e| e.spec.service == "later")
        .unwrap();
    let mut want = claiming("later", Some(at(registered + 3600))).spec;
    want.cluster = "east.set".into();
    assert_eq!(later.spec, want);
    // stable: the next round, with the relayed objects on the hub, wants the same
    let on_hub: Vec<Arc<ExportedService>> = got
        .exported
        .iter()
        .map(|e| {
            let mut e = e.clone();
            // as the API server gives it back: through JSON, second precision
            e = serde_json::from_value(serde_json::to_value(&e).unwrap()).unwrap();
            Arc::new(e)
        })
        .collect();
    let again = desired(&clusters, &outbox, &[], &on_hub, &[]);
    assert!(again.ignored.is_empty(), "{:?}", again.ignored);
    assert_eq!(relayed(&again), expected);
    for (a, b) in got.exported.iter().zip(&on_hub) {
        assert_eq!(a.spec, b.spec);
    }
}

/// The pure rule: clamped up to the registration, never down; nothing to check
/// against, nothing trusted.
#[test]
fn trusted_creation_clamps_only_claims_before_the_registration() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let at = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
    let table = [
        (Some(at(0)), Some(at(100)), Some(at(100))),
        (Some(at(99)), Some(at(100)), Some(at(100))),
        (Some(at(100)), Some(at(100)), Some(at(100))),
        (Some(at(101)), Some(at(100)), Some(at(101))),
        (None, Some(at(100)), None),
        (Some(at(0)), None, None),
    ];
    for (claimed, registered, want) in table {
        assert_eq!(
            trusted_creation(claimed.as_ref(), registered.as_ref()),
            want,
            "{claimed:?} {registered:?}"
        );
    }
}
