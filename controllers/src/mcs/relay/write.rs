//! The relay's writes: hub namespaces, relayed ExportedServices and slices, and the
//! Warning Events on outbox objects it will not publish (the I/O half; the decisions
//! are in [`super::desired`]).

use std::collections::{BTreeSet, HashSet};

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

pub(super) async fn write(
    hub: &kube::Client,
    state: &mut State,
    want: &Desired,
    relayed_exported: &[Arc<ExportedService>],
    relayed_slices: &[Arc<EndpointSlice>],
    failures: &mut Failures,
) {
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
        failures.check(service_key(e).unwrap_or_default(), r);
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
        failures.check(service_key(s).unwrap_or_default(), r);
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
