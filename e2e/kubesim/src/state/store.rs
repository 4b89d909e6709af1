//! In-memory object storage behind one global, monotonically increasing
//! resourceVersion, with a bounded event history (as etcd's watch window) used for
//! watches, consistent paginated lists and `resourceVersionMatch=Exact`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::{ApiError, ApiResult};
use crate::state::persist::Journal;
use crate::state::registry::GroupResource;
use crate::state::stored::{Event, EventType, StoredObj};

type Key = (String, String);

/// Where an object lives, by uid.
#[derive(Debug, Clone)]
pub struct UidEntry {
    /// Resource.
    pub gr: GroupResource,
    /// Namespace.
    pub ns: String,
    /// Name.
    pub name: String,
}

/// The object store.
pub struct Store {
    rv: u64,
    objects: HashMap<GroupResource, BTreeMap<Key, Arc<StoredObj>>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    compacted: u64,
    uids: HashMap<String, UidEntry>,
    tx: broadcast::Sender<Arc<Event>>,
    journal: Option<Journal>,
    gc_hint: bool,
    workload_hint: bool,
    rbac_hint: bool,
    namespace_hint: bool,
    quota_namespaces: std::collections::BTreeSet<String>,
}

impl Store {
    /// An empty store keeping `history_limit` events for watches.
    pub fn new(history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(history_limit.clamp(1024, 65536));
        Store {
            rv: 0,
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            uids: HashMap::new(),
            tx,
            journal: None,
            gc_hint: true,
            workload_hint: true,
            rbac_hint: true,
            namespace_hint: true,
            quota_namespaces: Default::default(),
        }
    }

    /// Journals every later change (see [`crate::state::persist`]).
    pub fn set_journal(&mut self, j: Journal) {
        self.journal = Some(j);
    }

    /// True (once) when a change since the last call may give garbage collection or
    /// namespace termination work: a delete, an object with owners, or one being deleted.
    pub fn take_gc_hint(&mut self) -> bool {
        std::mem::take(&mut self.gc_hint)
    }

    /// The namespaces where something a ResourceQuota may count changed since the last
    /// call (any namespaced write but Events' and Leases'), once.
    pub fn take_quota_namespaces(&mut self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut self.quota_namespaces)
    }

    /// True (once) when a workload (apps, batch), a Pod or a Node changed since the last call.
    pub fn take_workload_hint(&mut self) -> bool {
        std::mem::take(&mut self.workload_hint)
    }

    /// True (once) when a namespace, a ServiceAccount or a ConfigMap changed since the
    /// last call (the per-namespace defaults' work).
    pub fn take_namespace_hint(&mut self) -> bool {
        std::mem::take(&mut self.namespace_hint)
    }

    /// True (once) when a ClusterRole changed since the last call (aggregation's work).
    pub fn take_rbac_hint(&mut self) -> bool {
        std::mem::take(&mut self.rbac_hint)
    }

    /// Moves the resourceVersion past everything a journal ever recorded.
    pub fn restore_rv(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
        self.compacted = self.rv;
    }

    /// Puts back an object read from the journal, keeping its resourceVersion.
    pub fn restore(&mut self, gr: &GroupResource, value: Value, rv: u64) {
        self.rv = self.rv.max(rv);
        let obj = StoredObj::new(value);
        let key = (obj.namespace().to_string(), obj.name().to_string());
        self.index_uid(gr, &key, &obj);
        self.objects.entry(gr.clone()).or_default().insert(key, obj);
        self.compacted = self.rv;
    }

    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion a watch can start from.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Subscribes to future events. Call with the state lock held, together with
    /// [`Store::history_since`], so nothing falls between.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    /// Events after `rv`, or 410 when they were compacted away.
    pub fn history_since(&self, rv: u64) -> ApiResult<Vec<Arc<Event>>> {
        if rv < self.compacted {
            return Err(too_old(rv));
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.range(start..).cloned().collect())
    }

    /// One object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<StoredObj>> {
        self.objects
            .get(gr)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    /// Where a uid lives.
    pub fn by_uid(&self, uid: &str) -> Option<&UidEntry> {
        self.uids.get(uid)
    }

    /// Objects of a resource (one namespace or all), in key order.
    pub fn list(&self, gr: &GroupResource, ns: Option<&str>) -> Vec<Arc<StoredObj>> {
        let Some(m) = self.objects.get(gr) else {
            return Vec::new();
        };
        match ns {
            Some(ns) => m
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => m.values().cloned().collect(),
        }
    }

    /// Every resource with objects.
    pub fn resources(&self) -> Vec<GroupResource> {
        self.objects
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Objects of a resource as they were at `rv` (`resourceVersionMatch=Exact`).
    pub fn list_at(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        rv: u64,
    ) -> ApiResult<Vec<Arc<StoredObj>>> {
        self.list_after(gr, ns, rv, None)
    }

    /// Objects of a resource (one namespace or all) as they were at `rv`, in key order,
    /// those after the key `after` only (consistent pagination: a page reads the rest
    /// of the type from where the last ended, the changes since `rv` undone, and never
    /// copies the keys of the objects before it).
    pub fn list_after(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        rv: u64,
        after: Option<(&str, &str)>,
    ) -> ApiResult<Vec<Arc<StoredObj>>> {
        if rv > self.rv {
            return Err(ApiError::timeout(format!(
                "Too large resource version: {rv}, current: {}",
                self.rv
            )));
        }
        if rv < self.compacted {
            return Err(too_old(rv));
        }
        let wanted = |k_ns: &str, k_name: &str| {
            ns.is_none_or(|n| n == k_ns) && after.is_none_or(|a| (k_ns, k_name) > a)
        };
        // the objects' states at `rv` where they changed since: the oldest change's
        // previous state (None: created since)
        let mut undone: BTreeMap<Key, Option<Arc<StoredObj>>> = BTreeMap::new();
        for e in self.history.iter().rev().take_while(|e| e.rv > rv) {
            if &e.gr == gr && wanted(e.obj.namespace(), e.obj.name()) {
                let key = (e.obj.namespace().to_string(), e.obj.name().to_string());
                undone.insert(key, e.prev.clone());
            }
        }
        let start = match (after, ns) {
            (Some((a_ns, a_name)), _) => Bound::Excluded((a_ns.to_string(), a_name.to_string())),
            (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut out: Vec<Arc<StoredObj>> = match self.objects.get(gr) {
            None => Vec::new(),
            Some(m) => m
                .range((start, Bound::Unbounded))
                .skip_while(|((n, _), _)| ns.is_some_and(|x| n.as_str() < x))
                .take_while(|((n, _), _)| ns.is_none_or(|x| n == x))
                .filter(|(k, _)| undone.is_empty() || !undone.contains_key(*k))
                .map(|(_, v)| v.clone())
                .collect(),
        };
        let before = out.len();
        out.extend(undone.into_values().flatten());
        if out.len() > before {
            out.sort_by(|a, b| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name())));
        }
        Ok(out)
    }

    /// Commits a create or update. Sets `metadata.resourceVersion`; returns the event.
    pub fn put(&mut self, gr: &GroupResource, mut value: Value) -> Arc<Event> {
        self.rv += 1;
        let rv = self.rv;
        value["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let obj = StoredObj::new(value);
        let key = (obj.namespace().to_string(), obj.name().to_string());
        self.index_uid(gr, &key, &obj);
        let prev = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(key, obj.clone());
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(Event {
            rv,
            gr: gr.clone(),
            kind,
            obj,
            prev,
        })
    }

    /// Removes an object; the DELETED event carries its last state with a new RV.
    pub fn delete(&mut self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Event>> {
        let prev = self
            .objects
            .get_mut(gr)?
            .remove(&(ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let rv = self.rv;
        let mut last = prev.value.clone();
        last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        if let Some(uid) = last.pointer("/metadata/uid").and_then(Value::as_str) {
            self.uids.remove(uid);
        }
        Some(self.record(Event {
            rv,
            gr: gr.clone(),
            kind: EventType::Deleted,
            obj: StoredObj::new(last),
            prev: Some(prev),
        }))
    }

    /// Remembers where the object with this uid lives.
    fn index_uid(&mut self, gr: &GroupResource, key: &Key, obj: &StoredObj) {
        if let Some(uid) = obj.value.pointer("/metadata/uid").and_then(Value::as_str) {
            self.uids.insert(
                uid.to_string(),
                UidEntry {
                    gr: gr.clone(),
                    ns: key.0.clone(),
                    name: key.1.clone(),
                },
            );
        }
    }

    fn record(&mut self, e: Event) -> Arc<Event> {
        if let Some(j) = &mut self.journal {
            j.append(&e);
        }
        let md = e.obj.value.get("metadata");
        fn owners(o: &StoredObj) -> Option<&Value> {
            o.value.pointer("/metadata/ownerReferences")
        }
        // an update that keeps the owner references gives GC no new work (a status
        // write of a simulated Pod, say); a new object with owners, or new owners, may
        if e.kind == EventType::Deleted
            || md.is_some_and(|m| m.get("deletionTimestamp").is_some())
            || (md.is_some_and(|m| m.get("ownerReferences").is_some())
                && e.prev.as_deref().map(owners) != Some(owners(&e.obj)))
            || (e.gr.group.is_empty() && e.gr.resource == "namespaces")
        {
            self.gc_hint = true;
        }
        if e.gr.group.is_empty()
            && matches!(
                e.gr.resource.as_str(),
                "namespaces" | "serviceaccounts" | "configmaps"
            )
        {
            self.namespace_hint = true;
        }
        if e.gr.group == "rbac.authorization.k8s.io" && e.gr.resource == "clusterroles" {
            self.rbac_hint = true;
        }
        if !matches!(e.gr.resource.as_str(), "events" | "leases") && !e.obj.namespace().is_empty() {
            self.quota_namespaces.insert(e.obj.namespace().to_string());
        }
        // a PriorityClass or ResourceQuota too: Pods refused for want of a class or of
        // room are made once there is one
        if matches!(e.gr.group.as_str(), "apps" | "batch")
            || (e.gr.group.is_empty() && matches!(e.gr.resource.as_str(), "pods" | "nodes"))
            || (e.gr.group == "scheduling.k8s.io" && e.gr.resource == "priorityclasses")
            || (e.gr.group.is_empty() && e.gr.resource == "resourcequotas")
        {
            self.workload_hint = true;
        }
        let e = Arc::new(e);
        self.history.push_back(e.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        // No receivers is fine.
        let _ = self.tx.send(e.clone());
        e
    }
}

fn too_old(rv: u64) -> ApiError {
    ApiError::gone(format!("too old resource version: {rv}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gr() -> GroupResource {
        GroupResource {
            group: String::new(),
            resource: "configmaps".into(),
        }
    }

    fn cm(ns: &str, name: &str, v: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "uid": format!("{ns}-{name}")}, "data": {"v": v}})
    }

    #[test]
    fn rv_is_global_and_monotonic_and_list_at_reconstructs_the_past() {
        let mut s = Store::new(100);
        s.put(&gr(), cm("a", "x", "1"));
        s.put(&gr(), cm("a", "y", "1"));
        let at = s.rv();
        s.put(&gr(), cm("a", "x", "2"));
        s.delete(&gr(), "a", "y");
        s.put(&gr(), cm("b", "z", "1"));
        assert_eq!(s.rv(), 5);
        let past = s.list_at(&gr(), None, at).unwrap();
        let names: Vec<_> = past
            .iter()
            .map(|o| (o.name().to_string(), o.value["data"]["v"].clone()))
            .collect();
        assert_eq!(
            names,
            vec![("x".into(), json!("1")), ("y".into(), json!("1"))]
        );
        assert_eq!(s.list(&gr(), Some("b")).len(), 1);
        assert!(s.by_uid("a-y").is_none());
    }

    #[test]
    fn compaction_answers_410() {
        let mut s = Store::new(3);
        for i in 0..10 {
            s.put(&gr(), cm("a", &format!("o{i}"), "v"));
        }
        assert_eq!(s.history_since(2).unwrap_err().code, 410);
        assert_eq!(s.list_at(&gr(), None, 2).unwrap_err().code, 410);
        assert_eq!(s.history_since(7).unwrap().len(), 3);
        assert_eq!(s.list_at(&gr(), None, 11).unwrap_err().code, 504);
    }
}
