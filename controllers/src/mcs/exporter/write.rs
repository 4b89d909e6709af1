//! The exporter's writes: hub namespaces, ExportedServices and slices, the
//! ServiceExport conditions, and their Events (the I/O half; the decisions are in
//! the pure functions of [`super`]).

use super::*;

/// The fields of a hub EndpointSlice that are the member's slice's alone.
const SLICE_FIELDS: &[&str] = &["endpoints", "ports"];

pub(super) async fn publish_events(
    recorder: &kube::runtime::events::Recorder,
    exports: &[Arc<ServiceExport>],
    written: &BTreeMap<(String, String), Vec<Condition>>,
) {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType};
    for ex in exports {
        let key = (ex.namespace().unwrap_or_default(), ex.name_any());
        let Some(next) = written.get(&key) else {
            continue;
        };
        let prev = ex
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        for e in events_for(&prev, next) {
            let ev = Event {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.chars().take(128).collect(),
                note: Some(e.note.chars().take(1000).collect()),
                action: "Export".into(),
                secondary: None,
            };
            if let Err(err) = recorder.publish(&ev, &ex.object_ref(&())).await {
                tracing::debug!(error = %err, "could not publish an Event");
            }
        }
    }
}

/// The hub mirrors the namespaces of exported Services (namespace sameness, NS-1):
/// creates the namespace of each `(namespace, service)` not in `done` yet, a failure
/// reported for that service (see [`forget_failed_namespaces`] for one deleted since).
/// Also used by the relay for Pull members.
pub(crate) async fn ensure_namespaces(
    hub: &kube::Client,
    services: impl IntoIterator<Item = crate::watch::ServiceKey>,
    done: &mut BTreeSet<String>,
    failures: &mut Failures,
) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    for (ns, service) in services {
        if done.contains(&ns) {
            continue;
        }
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match api
            .patch(
                &ns,
                &kube::api::PatchParams::apply(causeway_crds::well_known::FIELD_MANAGER),
                &kube::api::Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => {
                done.insert(ns);
            }
            Err(err) => failures.failed(
                (ns, service),
                &format!("creating the namespace on the hub: {err}"),
            ),
        }
    }
}

/// Forgets, in `done`, the namespace of every key with a failed write: the hub
/// namespace may have been deleted since it was created (writes in it then fail with
/// NotFound, or Forbidden while it terminates), so the retry creates it again rather
/// than failing until a restart. Also used by the relay.
pub(crate) fn forget_failed_namespaces(done: &mut BTreeSet<String>, failures: &Failures) {
    done.retain(|ns| !failures.keys.iter().any(|(n, _)| n == ns));
}

/// Memos of what the exporter found already applied.
pub(super) struct Memos {
    exported: apply::Memo<ExportedService>,
    slices: apply::Memo<EndpointSlice>,
    status: apply::StatusMemo,
}

impl Default for Memos {
    /// An ExportedService's spec and a slice's endpoints and ports are the exporter's
    /// alone: what the member's Service or export stops having goes from the hub.
    fn default() -> Self {
        Memos {
            exported: apply::Memo::owning(&["spec"]),
            slices: apply::Memo::owning(SLICE_FIELDS),
            status: Default::default(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn write(
    failures: &mut Failures,
    memo: &mut Memos,
    member: &kube::Client,
    hub: &kube::Client,
    want: &Desired,
    exports: &[Arc<ServiceExport>],
    hub_exported: &[Arc<ExportedService>],
    hub_slices: &[Arc<EndpointSlice>],
) -> BTreeMap<(String, String), Vec<Condition>> {
    let mut written = BTreeMap::new();
    let exports_by_key = crate::watch::by_key(exports);
    let hub_slices_by_key = crate::watch::by_key(hub_slices);
    let hub_exported_by_key = crate::watch::by_key(hub_exported);
    // ExportedServices and hub slices; a failed write of either makes the export
    // Ready=False/Failed (EXP-6), with the first failure's answer
    let mut failed: std::collections::HashMap<(String, String), String> = Default::default();
    let keep: BTreeSet<(String, String)> = want
        .exported
        .iter()
        .map(|e| (e.namespace().unwrap_or_default(), e.name_any()))
        .collect();
    for e in &want.exported {
        let ns = e.namespace().unwrap_or_default();
        let api: Api<ExportedService> = Api::namespaced(hub.clone(), &ns);
        let actual = hub_exported_by_key
            .get(&(ns.clone(), e.name_any()))
            .copied();
        let r = memo
            .exported
            .ensure(&api, e, actual.map(|a| a.as_ref()))
            .await;
        // the member's service, wherever the object goes (an outbox names it in a label)
        let key = service_key(e).unwrap_or_default();
        if let Err(err) = &r {
            failed.entry(key.clone()).or_insert_with(|| err.to_string());
        }
        failures.check(key, r);
    }
    for (k, e) in apply::remove_all_but(
        |ns| Api::<ExportedService>::namespaced(hub.clone(), ns),
        hub_exported,
        &keep,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    // hub EndpointSlices
    let keep: BTreeSet<(String, String)> = want
        .slices
        .iter()
        .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
        .collect();
    for s in &want.slices {
        let ns = s.namespace().unwrap_or_default();
        let api: Api<EndpointSlice> = Api::namespaced(hub.clone(), &ns);
        let actual = hub_slices_by_key.get(&(ns.clone(), s.name_any())).copied();
        if memo.slices.unchanged(s, actual.map(|a| a.as_ref())) {
            continue;
        }
        // (the endpoints and ports are the member's alone: a field the member's slice
        // no longer has goes from the hub's too)
        let unchanged = actual.is_some_and(|a| {
            serde_json::to_value(a.as_ref())
                .ok()
                .zip(serde_json::to_value(s).ok())
                .is_some_and(|(av, sv)| apply::holds_owning(&av, &strip_meta(sv), SLICE_FIELDS))
        });
        if unchanged {
            memo.slices.remember(s, actual.map(|a| a.as_ref()));
            continue;
        }
        let mut stamped = s.clone();
        stamped.metadata.annotations.get_or_insert_default().insert(
            annotations::EXPORTED_AT.to_string(),
            jiff::Timestamp::now().as_millisecond().to_string(),
        );
        let key = service_key(s).unwrap_or_default();
        let r = apply::ensure(&api, &stamped, None).await;
        if let Err(err) = &r {
            failed.entry(key.clone()).or_insert_with(|| err.to_string());
        }
        failures.check(key, r);
    }
    for (k, e) in apply::remove_all_but(
        |ns| Api::<EndpointSlice>::namespaced(hub.clone(), ns),
        hub_slices,
        &keep,
        service_key,
    )
    .await
    {
        // endpoints the member no longer has, still served from the hub
        failed.entry(k.clone()).or_insert_with(|| e.to_string());
        failures.failed(k, &e);
    }
    // a Pull member's outbox: what the hub refused when the relay published it (EXP-6)
    for (key, why) in relay_refusals(hub_exported) {
        failed.entry(key).or_insert(why);
    }
    // ServiceExport conditions
    for ((ns, name), conds) in &want.conditions {
        let actual = exports_by_key.get(&(ns.clone(), name.clone())).copied();
        let conds = with_write_failure(
            conds.clone(),
            failed.get(&(ns.clone(), name.clone())).map(String::as_str),
        );
        let status = json!({"conditions": conds});
        written.insert((ns.clone(), name.clone()), conds);
        let api: Api<ServiceExport> = Api::namespaced(member.clone(), ns);
        failures.check(
            (ns.clone(), name.clone()),
            memo.status
                .ensure(
                    &api,
                    ns,
                    name,
                    "multicluster.x-k8s.io/v1beta1",
                    "ServiceExport",
                    &status,
                    actual.and_then(|a| a.resource_version()),
                    || actual.and_then(|e| e.status.as_ref()).map(|s| json!(s)),
                )
                .await,
        );
    }
    written
}

/// Pure: the refusals the relay put on outbox ExportedServices (none on the hub's own,
/// which never carry the annotation), by the member's service.
pub(super) fn relay_refusals(exported: &[Arc<ExportedService>]) -> Vec<((String, String), String)> {
    exported
        .iter()
        .filter_map(|e| {
            let why = e.annotations().get(annotations::RELAY_REFUSED)?;
            Some((
                service_key(e.as_ref())?,
                format!("the hub refused what this member's agent published: {why}"),
            ))
        })
        .collect()
}

fn strip_meta(mut v: Value) -> Value {
    if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        md.retain(|k, _| matches!(k.as_str(), "labels" | "name" | "namespace"));
    }
    v
}
