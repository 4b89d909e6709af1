//! The applier's watches of member objects, of any kind: one dynamic reflector per
//! `(apiVersion, kind)` some Work names (in its manifests or, for manifests since
//! removed, in its status), selected by `causeway.io/managed=true`, started on demand;
//! each kind resolved once through the member's discovery (a kind the member does not
//! serve is retried each round, so a CRD installed later is picked up). A change to an
//! object wakes the loop for the Work its `causeway.io/work` annotation names.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::well_known::{annotations, labels};
use causeway_runtime::reflect::{Key, Wake};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::plan::Served;

/// The Work a member object's change belongs to: its `causeway.io/work` annotation.
pub fn member_key(o: &DynamicObject) -> Option<Key> {
    let (ns, name) = o.annotations().get(annotations::WORK)?.split_once('/')?;
    Some((ns.to_string(), name.to_string()))
}

/// `(group, kind)`: objects are matched across versions of one kind.
pub type GroupKind = (String, String);

pub use causeway_crds::federation::group_of;

use crate::propagation::kinds::Watches;

/// The member watches of one applier.
pub struct Members {
    cluster: String,
    watches: Watches,
}

/// Objects of one kind by (namespace, name).
type ByName = HashMap<(String, String), Arc<DynamicObject>>;

/// The cached member objects of one round (shared, not copied: an object becomes
/// JSON only when a Work asks for it).
#[derive(Default)]
pub struct Index {
    /// By (group, kind): the apiVersion watched, and the objects by (namespace, name).
    objects: HashMap<GroupKind, (String, ByName)>,
    /// By the Work their annotation names: (group, kind) and the object.
    by_work: HashMap<String, Vec<(GroupKind, Arc<DynamicObject>)>>,
}

impl Index {
    /// The cached object, as JSON with apiVersion and kind, if any.
    pub fn get(&self, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let (av, m) = self
            .objects
            .get(&(group_of(api_version).to_string(), kind.to_string()))?;
        let o = m.get(&(ns.to_string(), name.to_string()))?;
        Some(to_json(o, av, kind))
    }

    /// Every cached object annotated with Work `wref`, as JSON.
    pub fn of_work(&self, wref: &str) -> Vec<Value> {
        let Some(objs) = self.by_work.get(wref) else {
            return Vec::new();
        };
        objs.iter()
            .filter_map(|(gk, o)| {
                let (av, _) = self.objects.get(gk)?;
                Some(to_json(o, av, &gk.1))
            })
            .collect()
    }
}

impl Members {
    /// Nothing watched yet; changes wake `wake`; every member call within `limit`.
    pub fn new(
        cluster: &str,
        client: kube::Client,
        wake: Arc<Wake>,
        stop: CancellationToken,
        limit: Duration,
    ) -> Members {
        let name = cluster.to_string();
        let managed = format!("{}={}", labels::MANAGED, labels::MANAGED_VALUE);
        let watches = Watches::new(
            client,
            wake,
            stop,
            limit,
            watcher::Config::default().labels(&managed),
            "member objects of Works",
            member_key,
            move |api_version, kind, e| {
                format!(
                    "cluster {name} does not serve {kind} in {api_version} ({e}): install its CRD in the member, or fix the resource template"
                )
            },
        );
        Members {
            cluster: cluster.to_string(),
            watches,
        }
    }

    /// Starts the watches of the `(apiVersion, kind)`s in `wanted` not watched yet and
    /// waits (bounded) for their first lists.
    pub async fn ensure(&mut self, wanted: &BTreeSet<(String, String)>) {
        self.watches.ensure(wanted).await;
    }

    /// How the member serves `(apiVersion, kind)`.
    pub fn served(&self, api_version: &str, kind: &str) -> Result<Served, String> {
        let key = (api_version.to_string(), kind.to_string());
        match self.watches.get(api_version, kind) {
            Some(w) => Ok(Served {
                plural: w.resource.plural.clone(),
                namespaced: w.namespaced,
            }),
            None => Err(self.watches.unknown.get(&key).cloned().unwrap_or_else(|| {
                format!(
                    "cluster {} does not serve {kind} in {api_version} yet",
                    self.cluster
                )
            })),
        }
    }

    /// Whether the member's discovery did not answer for `(apiVersion, kind)` (as
    /// opposed to answering that it does not serve it): its objects may still be there.
    pub fn unanswered(&self, api_version: &str, kind: &str) -> bool {
        self.watches
            .unanswered
            .contains(&(api_version.to_string(), kind.to_string()))
    }

    /// The API of `(apiVersion, kind)` in namespace `ns` ("default" when a namespaced
    /// object names none), if the member serves it.
    pub fn api(&self, api_version: &str, kind: &str, ns: &str) -> Option<Api<DynamicObject>> {
        let ns = if ns.is_empty() { "default" } else { ns };
        self.watches.api(api_version, kind, Some(ns))
    }

    /// A snapshot of every cached object.
    pub fn index(&self) -> Index {
        let mut out = Index::default();
        for w in self.watches.all() {
            let gk = (
                group_of(&w.resource.api_version).to_string(),
                w.resource.kind.clone(),
            );
            let mut m = HashMap::new();
            for o in w.cache.state() {
                if let Some(wref) = o.annotations().get(annotations::WORK) {
                    out.by_work
                        .entry(wref.clone())
                        .or_default()
                        .push((gk.clone(), o.clone()));
                }
                m.insert((o.namespace().unwrap_or_default(), o.name_any()), o);
            }
            out.objects.insert(gk, (w.resource.api_version.clone(), m));
        }
        out
    }
}

/// The JSON of an object read from the member (list items and GETs of
/// `DynamicObject`s may lack apiVersion and kind).
pub fn to_json(o: &DynamicObject, api_version: &str, kind: &str) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    v["apiVersion"] = json!(api_version);
    v["kind"] = json!(kind);
    if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        md.remove("managedFields");
    }
    v
}
