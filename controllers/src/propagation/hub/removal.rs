//! The hub loop's removals and Events: a deleted template's Works, then its binding
//! and finalizer (G.45–46, confirmed by a live list), and Events told once per note.

use std::sync::Arc;

use causeway_crds::federation::binding::{ClusterResourceBinding, ResourceBinding};
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::{finalizers, labels};
use causeway_runtime::apply;
use causeway_runtime::reflect::Key;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use super::{Ctx, View};

impl Ctx<'_> {
    /// Deletes the Works of a binding whose template is gone or being deleted; once a
    /// live list shows none left, deletes the binding and releases the template.
    pub(super) async fn withdraw(
        &mut self,
        key: &Key,
        works: Option<&Vec<Arc<Work>>>,
        template: Option<&Arc<DynamicObject>>,
    ) {
        for w in works.map(Vec::as_slice).unwrap_or_default() {
            if w.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let api = Api::<Work>::namespaced(self.hub.clone(), &w.namespace().unwrap_or_default());
            let r = apply::remove(&api, &w.name_any())
                .await
                .map(|_| apply::Outcome::Written);
            self.failures.check(key.clone(), r);
        }
        // confirmed by a live list, not the cache (G.45)
        let selector = match key.0.as_str() {
            "" => format!(
                "{}={},!{}",
                labels::BINDING_NAME,
                causeway_crds::names::label_value(&key.1),
                labels::BINDING_NAMESPACE
            ),
            ns => format!(
                "{}={},{}={}",
                labels::BINDING_NAME,
                causeway_crds::names::label_value(&key.1),
                labels::BINDING_NAMESPACE,
                ns
            ),
        };
        let left = crate::clusters::within(
            crate::clusters::CALL_TIMEOUT,
            Api::<Work>::all(self.hub.clone()).list(&ListParams::default().labels(&selector)),
        )
        .await
        // (a shortened label value may name two bindings: these are this one's)
        .map(|mut l| {
            l.items.retain(|w| {
                causeway_crds::names::named_by(&w.metadata, labels::BINDING_NAME).as_deref()
                    == Some(key.1.as_str())
            });
            l
        });
        match left {
            Ok(l) if l.items.is_empty() => {}
            Ok(l) => {
                let pending: Vec<String> = l
                    .items
                    .iter()
                    .filter_map(|w| w.labels().get(labels::CLUSTER).cloned())
                    .collect();
                if let Some(t) = template {
                    let note = format!(
                        "waiting for the member copies to be removed from: {} (a cluster that is not Ready blocks the deletion until it is back or leaves the clusterset)",
                        pending.join(", ")
                    );
                    self.tell_key(key, t, EventType::Normal, "WaitingForRemoval", &note)
                        .await;
                }
                self.failures.failed(
                    key.clone(),
                    &format!("{} Work(s) still being removed", l.items.len()),
                );
                return;
            }
            Err(e) => {
                self.failures.failed(key.clone(), &e);
                return;
            }
        }
        let r = match key.0.as_str() {
            "" => {
                apply::remove(
                    &Api::<ClusterResourceBinding>::all(self.hub.clone()),
                    &key.1,
                )
                .await
            }
            ns => {
                apply::remove(
                    &Api::<ResourceBinding>::namespaced(self.hub.clone(), ns),
                    &key.1,
                )
                .await
            }
        };
        self.failures
            .check(key.clone(), r.map(|_| apply::Outcome::Written));
        if let Some(t) = template {
            self.release(key, t).await;
        }
    }

    /// Removes the propagation finalizer from a template.
    pub(super) async fn release(&mut self, key: &Key, t: &Arc<DynamicObject>) {
        let Some(types) = &t.types else { return };
        let ns = t.namespace();
        if let Some(api) = self
            .kinds
            .api(&types.api_version, &types.kind, ns.as_deref())
        {
            let r = apply::remove_finalizer(&api, t.as_ref(), finalizers::PROPAGATION).await;
            self.failures.check(key.clone(), r);
        }
    }

    pub(super) async fn tell(
        &mut self,
        b: &View<'_>,
        template: &Arc<DynamicObject>,
        type_: EventType,
        reason: &'static str,
        note: &str,
    ) {
        self.tell_key(&b.key, template, type_, reason, note).await;
    }

    /// An Event joining `notes` (`; `), once per distinct set; none to say: the memo
    /// is cleared, so the same notes later are told again.
    pub(super) async fn tell_notes(
        &mut self,
        b: &View<'_>,
        template: &Arc<DynamicObject>,
        type_: EventType,
        reason: &'static str,
        notes: &[String],
    ) {
        if notes.is_empty() {
            self.forget(b, reason);
        } else {
            self.tell(b, template, type_, reason, &notes.join("; "))
                .await;
        }
    }

    pub(super) fn forget(&mut self, b: &View<'_>, reason: &'static str) {
        self.memos.told.remove(&(b.key.clone(), reason));
    }

    /// Publishes an Event on the template, once per distinct note.
    pub(super) async fn tell_key(
        &mut self,
        key: &Key,
        template: &Arc<DynamicObject>,
        type_: EventType,
        reason: &'static str,
        note: &str,
    ) {
        let slot = (key.clone(), reason);
        if self.memos.told.get(&slot).is_some_and(|n| n == note) {
            return;
        }
        let Some(types) = &template.types else { return };
        let Some(resource) = self.kinds.resource(&types.api_version, &types.kind) else {
            return;
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Propagate".into(),
            secondary: None,
        };
        match self
            .notes
            .publish(&ev, &template.object_ref(resource))
            .await
        {
            Ok(()) => {
                self.memos.told.insert(slot, note.to_string());
            }
            Err(e) => tracing::debug!(error = %e, "could not publish an Event"),
        }
    }
}
