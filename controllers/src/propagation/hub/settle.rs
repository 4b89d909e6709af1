//! D.32 ★: an OverridePolicy deleted together with its PropagationPolicy
//! (`kubectl delete -f app/` deletes `override.yaml` before `propagation.yaml`, one
//! request after the other) must not push the un-overridden template in between.
//!
//! Each Work records which override policies wrote the values that differ from the
//! template (its provenance annotation). When one of them no longer exists, the
//! binding's re-render waits [`SETTLE`] from when the hub first saw it gone: a
//! PropagationPolicy deleted meanwhile freezes the binding (PolicyRemoved) with the
//! overridden copies as they are; otherwise the render goes ahead once the time is up
//! (the loop wakes then), and the members lose the override as the user asked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use causeway_crds::federation::override_apply::{PolicyId, PolicyKind};
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::annotations;
use causeway_runtime::reflect::Key;
use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

/// How long a binding whose overrides went waits before it is rendered without
/// them: longer than the gap between the deletes of one `kubectl delete` command.
pub(super) const SETTLE: SignedDuration = SignedDuration::from_secs(5);

/// The override policies that exist (and are not being deleted), as the Works'
/// provenance names them (`OverridePolicy demo/flags`, `ClusterOverridePolicy all`).
pub(super) fn present(
    ops: &[Arc<OverridePolicy>],
    cops: &[Arc<ClusterOverridePolicy>],
) -> BTreeSet<String> {
    let namespaced = ops
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PolicyId {
            kind: PolicyKind::OverridePolicy,
            namespace: p.namespace(),
            name: p.name_any(),
        });
    let cluster = cops
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| PolicyId {
            kind: PolicyKind::ClusterOverridePolicy,
            namespace: None,
            name: p.name_any(),
        });
    namespaced.chain(cluster).map(|p| p.to_string()).collect()
}

/// The override policies that wrote a value of one of `works`' manifests (their
/// provenance: ordinal → path → `<policy> rule <n> (<overrider>)`) and are not in
/// `present` any more. A Work being deleted, or whose annotation cannot be read,
/// names none.
pub(super) fn vanished(works: &[Arc<Work>], present: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in works {
        if w.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(text) = w.annotations().get(annotations::PROVENANCE) else {
            continue;
        };
        let Ok(serde_json::Value::Object(ordinals)) = serde_json::from_str(text) else {
            continue;
        };
        let origins = ordinals
            .values()
            .filter_map(serde_json::Value::as_object)
            .flat_map(|paths| paths.values())
            .filter_map(serde_json::Value::as_str);
        for origin in origins {
            // (names have no spaces: the last " rule " ends the policy's name)
            let Some((policy, _)) = origin.rsplit_once(" rule ") else {
                continue;
            };
            if !present.contains(policy) {
                out.insert(policy.to_string());
            }
        }
    }
    out
}

/// When the hub first saw each override policy of a binding's copies gone.
#[derive(Debug, Default)]
pub(super) struct Settling(HashMap<Key, BTreeMap<String, Timestamp>>);

impl Settling {
    /// Until when the binding `key`, whose copies carry values of the `vanished`
    /// override policies, waits before it is rendered again; `None`: render now. A
    /// policy is timed from the first round that sees it gone.
    pub(super) fn hold(
        &mut self,
        key: &Key,
        vanished: BTreeSet<String>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        if vanished.is_empty() {
            self.0.remove(key);
            return None;
        }
        let seen = self.0.entry(key.clone()).or_default();
        seen.retain(|p, _| vanished.contains(p));
        for p in vanished {
            seen.entry(p).or_insert(now);
        }
        let until = seen.values().max().copied()?.checked_add(SETTLE).ok()?;
        (now < until).then_some(until)
    }

    /// Forgets the bindings not in `bound` (deleted ones).
    pub(super) fn retain(&mut self, bound: &BTreeSet<Key>) {
        self.0.retain(|k, _| bound.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn work(provenance: &str) -> Arc<Work> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
                "metadata": {"name": "w", "namespace": "causeway-es-east",
                             "annotations": {annotations::PROVENANCE: provenance}},
                "spec": {"workload": {"manifests": []}}
            }))
            .unwrap(),
        )
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn an_override_that_went_holds_the_render_for_a_while() {
        let op: Arc<OverridePolicy> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "flags", "namespace": "demo"},
                "spec": {"overrideRules": []}
            }))
            .unwrap(),
        );
        let cop: Arc<ClusterOverridePolicy> = Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "all"}, "spec": {"overrideRules": []}
            }))
            .unwrap(),
        );
        let both = present(&[op], std::slice::from_ref(&cop));
        assert_eq!(
            both,
            BTreeSet::from([
                "ClusterOverridePolicy all".to_string(),
                "OverridePolicy demo/flags".to_string()
            ])
        );
        let works = [work(
            r#"{"0":{"/data/key":"OverridePolicy demo/flags rule 0 (plaintext)","/data/x":"ClusterOverridePolicy all rule 2 (field)"}}"#,
        )];
        assert!(vanished(&works, &both).is_empty());
        let only_cluster = present(&[], &[cop]);
        let gone = vanished(&works, &only_cluster);
        assert_eq!(gone, BTreeSet::from(["OverridePolicy demo/flags".into()]));
        // unreadable provenance names nothing
        assert!(vanished(&[work("not json")], &BTreeSet::new()).is_empty());

        let key: Key = ("demo".into(), "flags-configmap".into());
        let mut s = Settling::default();
        let until = at(100).checked_add(SETTLE).unwrap();
        assert_eq!(s.hold(&key, gone.clone(), at(100)), Some(until));
        assert_eq!(s.hold(&key, gone.clone(), at(103)), Some(until));
        assert_eq!(s.hold(&key, gone.clone(), at(105)), None);
        // another policy gone later: timed from when it went
        let more = BTreeSet::from(["OverridePolicy demo/flags".into(), "X".into()]);
        assert_eq!(
            s.hold(&key, more, at(106)),
            Some(at(106).checked_add(SETTLE).unwrap())
        );
        // rendered (or the policy back): nothing held, nothing remembered
        assert_eq!(s.hold(&key, BTreeSet::new(), at(107)), None);
        assert_eq!(s.hold(&key, gone, at(200)), Some(at(205)));
        s.retain(&BTreeSet::new());
        assert!(s.0.is_empty());
    }
}
