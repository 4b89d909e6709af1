//! The relay's writes: hub namespaces, relayed ExportedServices and slices, and the
//! Warning Events on outbox objects it will not publish (the I/O half; the decisions
//! are in [`super::desired`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use super::*;

/// What the relay remembers between rounds.
pub(super) struct State {
    namespaces: BTreeSet<String>,
    exported: apply::Memo<ExportedService>,
    slices: apply::Memo<EndpointSlice>,
    /// (uid, resourceVersion, reason) of the outbox objects already reported.
    reported: HashSet<(String, String, &'static str)>,
}

impl Default for State {
    /// As the exporter's memos: a relayed ExportedService's spec and a slice's
    /// endpoints and ports are the relay's alone.
    fn default() -> Self {
        State {
            namespaces: Default::default(),
            exported: apply::Memo::owning(&["spec"]),
            slices: apply::Memo::owning(&["endpoints", "ports"]),
            reported: Default::default(),
        }
    }
}

/// What the hub refused, by the cluster that published it and its service: the first
/// answer of each.
pub(super) type Refused = HashMap<(String, ServiceKey), String>;

/// Records a refused write of relayed object `meta` (its cluster from its
/// `relayed-from` label) under `key`.
fn refused_for(refused: &mut Refused, meta: &ObjectMeta, key: ServiceKey, e: &apply::ApplyError) {
    let cluster = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::RELAYED_FROM))
        .cloned()
        .unwrap_or_default();
    refused
        .entry((cluster, key))
        .or_insert_with(|| e.to_string());
}

/// Writes what the relay wants; returns what the hub refused.
pub(super) async fn write(
    hub: &kube::Client,
    state: &mut State,
    want: &Desired,
    relayed_exported: &[Arc<ExportedService>],
    relayed_slices: &[Arc<EndpointSlice>],
    failures: &mut Failures,
) -> Refused {
    let mut refused = Refused::new();
    let namespaces = want.namespaces.values().cloned();
    super::super::exporter::write::ensure_namespaces(
        hub,
        namespaces,
        &mut state.namespaces,
        failures,
    )
    .await;
    let actual = crate::watch::by_key(relayed_exported);
    for e in &want.exported {
        let api = Api::namespaced(hub.clone(), &e.namespace().unwrap_or_default());
        let r = state
            .exported
            .ensure(&api, e, actual.get(&key(e)).map(|a| a.as_ref()))
            .await;
        let k = service_key(e).unwrap_or_default();
        if let Err(err) = &r {
            refused_for(&mut refused, &e.metadata, k.clone(), err);
        }
        failures.check(k, r);
    }
    let keep = want.exported.iter().map(key).collect();
    for (k, e) in apply::remove_all_but(
        |ns| Api::<ExportedService>::namespaced(hub.clone(), ns),
        relayed_exported,
        &keep,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    let actual = crate::watch::by_key(relayed_slices);
    for s in &want.slices {
        let api = Api::namespaced(hub.clone(), &s.namespace().unwrap_or_default());
        let r = state
            .slices
            .ensure(&api, s, actual.get(&key(s)).map(|a| a.as_ref()))
            .await;
        let k = service_key(s).unwrap_or_default();
        if let Err(err) = &r {
            refused_for(&mut refused, &s.metadata, k.clone(), err);
        }
        failures.check(k, r);
    }
    let keep = want.slices.iter().map(key).collect();
    for (k, e) in apply::remove_all_but(
        |ns| Api::<EndpointSlice>::namespaced(hub.clone(), ns),
        relayed_slices,
        &keep,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    super::super::exporter::write::forget_failed_namespaces(&mut state.namespaces, failures);
    refused
}

/// Pure: the [`annotations::RELAY_REFUSED`] each outbox ExportedService of the round
/// should carry, where it differs from what it carries: (the object, the value, None
/// to remove it).
pub(super) fn refusals_to_tell<'a>(
    outbox_exported: &'a [Arc<ExportedService>],
    refused: &Refused,
) -> Vec<(&'a ExportedService, Option<String>)> {
    outbox_exported
        .iter()
        .filter_map(|o| {
            let ns = o.namespace().unwrap_or_default();
            let cluster = cluster_of_execution_namespace(&ns)?;
            let want = refused
                .get(&(cluster.to_string(), service_key(o.as_ref())?))
                .map(|why| why.chars().take(1000).collect::<String>());
            let have = o.annotations().get(annotations::RELAY_REFUSED);
            (have != want.as_ref()).then_some((o.as_ref(), want))
        })
        .collect()
}

/// Tells each outbox ExportedService what the hub refused of it (and takes it back
/// once nothing is), for its agent to put on the ServiceExport.
pub(super) async fn tell_refusals(
    hub: &kube::Client,
    outbox_exported: &[Arc<ExportedService>],
    refused: &Refused,
) {
    for (o, want) in refusals_to_tell(outbox_exported, refused) {
        let ns = o.namespace().unwrap_or_default();
        let api: Api<ExportedService> = Api::namespaced(hub.clone(), &ns);
        let patch =
            serde_json::json!({"metadata": {"annotations": {annotations::RELAY_REFUSED: want}}});
        let (name, pp, merge) = (
            o.name_any(),
            kube::api::PatchParams::default(),
            kube::api::Patch::Merge(&patch),
        );
        let write = api.patch(&name, &pp, &merge);
        if let Err(e) = crate::clusters::within(crate::clusters::CALL_TIMEOUT, write).await {
            tracing::warn!(namespace = %ns, name = %o.name_any(), error = %e, "cannot tell the outbox what the hub refused; retrying");
        }
    }
}

/// A Warning Event on each ignored outbox object, once per version of it (a log line
/// when the Event cannot be written). A full round (`full`) sees every outbox object,
/// so it forgets the ones no longer ignored.
pub(super) async fn report(
    recorder: &kube::runtime::events::Recorder,
    state: &mut State,
    ignored: &[Ignored],
    full: bool,
) {
    use kube::runtime::events::{Event, EventType};
    let seen = |i: &Ignored| {
        (
            i.object.uid.clone().unwrap_or_default(),
            i.object.resource_version.clone().unwrap_or_default(),
            i.reason,
        )
    };
    if full {
        let now: HashSet<_> = ignored.iter().map(seen).collect();
        state.reported.retain(|k| now.contains(k));
    }
    for i in ignored {
        if !state.reported.insert(seen(i)) {
            continue;
        }
        let (ns, name) = (
            i.object.namespace.as_deref().unwrap_or_default(),
            i.object.name.as_deref().unwrap_or_default(),
        );
        tracing::warn!(namespace = ns, name, reason = i.reason, "{}", i.note);
        let ev = Event {
            type_: EventType::Warning,
            reason: i.reason.into(),
            note: Some(i.note.chars().take(1000).collect()),
            action: "Relay".into(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&ev, &i.object).await {
            tracing::warn!(namespace = ns, name, error = %err, "could not publish an Event on an ignored outbox object");
        }
    }
}
