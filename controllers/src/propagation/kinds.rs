//! The hub watches of resource templates, of any kind: a dynamic reflector per
//! `(apiVersion, kind)` that some policy selects (plus the dependency kinds when a
//! policy propagates dependencies), started the first time a policy names the kind and
//! resolved through the hub's discovery, so CRDs installed later are picked up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use causeway_crds::federation::binding::binding_name;
use causeway_runtime::reflect::{Cache, Key, Reflector, Wake};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, TypeMeta};
use kube::discovery::Scope;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

/// One watched kind.
struct Watched {
    resource: ApiResource,
    namespaced: bool,
    cache: Cache<DynamicObject>,
}

/// The template watches of the hub.
pub struct Kinds {
    hub: kube::Client,
    wake: Arc<Wake>,
    stop: CancellationToken,
    watched: BTreeMap<(String, String), Watched>,
    /// Kinds discovery does not know (yet), with why: reported, retried each round.
    pub unknown: BTreeMap<(String, String), String>,
}

/// The key a template's change marks dirty: its binding's.
pub fn template_key(o: &DynamicObject) -> Option<Key> {
    let kind = o.types.as_ref()?.kind.as_str();
    Some((
        o.namespace().unwrap_or_default(),
        binding_name(kind, &o.name_any()),
    ))
}

impl Kinds {
    /// No kind watched yet; changes wake `wake`.
    pub fn new(hub: kube::Client, wake: Arc<Wake>, stop: CancellationToken) -> Kinds {
        Kinds {
            hub,
            wake,
            stop,
            watched: BTreeMap::new(),
            unknown: BTreeMap::new(),
        }
    }

    /// Starts the watches of the kinds in `wanted` not watched yet (resolving them
    /// through discovery) and waits for their first lists. Kinds discovery does not
    /// know are kept in [`Kinds::unknown`] and retried on the next call.
    pub async fn ensure(&mut self, wanted: &BTreeSet<(String, String)>) {
        self.unknown.retain(|k, _| wanted.contains(k));
        for key in wanted {
            if self.watched.contains_key(key) {
                continue;
            }
            let (api_version, kind) = key;
            let found = resolve(&self.hub, api_version, kind, crate::clusters::CALL_TIMEOUT).await;
            let (resource, namespaced) = match found {
                Ok(found) => found,
                Err(e) => {
                    self.unknown.insert(
                        key.clone(),
                        format!("the hub does not serve {kind} in {api_version} ({e}): install its CRD on the hub, or fix the policy's resourceSelectors"),
                    );
                    continue;
                }
            };
            let api: Api<DynamicObject> = Api::all_with(self.hub.clone(), &resource);
            let reflector = Reflector::start_dynamic(
                api,
                resource.clone(),
                watcher::Config::default(),
                self.stop.clone(),
                "hub resource templates",
                Some(template_key),
            );
            let cache = reflector.subscribe(self.wake.clone());
            let _ =
                tokio::time::timeout(crate::clusters::CALL_TIMEOUT, cache.wait_until_ready()).await;
            self.unknown.remove(key);
            self.watched.insert(
                key.clone(),
                Watched {
                    resource,
                    namespaced,
                    cache,
                },
            );
        }
    }

    /// Every watched template, with `apiVersion` and `kind` set (list items may lack
    /// them).
    pub fn templates(&self) -> Vec<Arc<DynamicObject>> {
        let mut out = Vec::new();
        for w in self.watched.values() {
            for o in w.cache.state() {
                if o.types.as_ref().is_some_and(|t| t.kind == w.resource.kind) {
                    out.push(o);
                } else {
                    let mut o = (*o).clone();
                    o.types = Some(TypeMeta {
                        api_version: w.resource.api_version.clone(),
                        kind: w.resource.kind.clone(),
                    });
                    out.push(Arc::new(o));
                }
            }
        }
        out
    }

    /// The API of kind `(apiVersion, kind)` in `namespace` (all namespaces for a
    /// cluster-scoped kind), if it is watched.
    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Option<Api<DynamicObject>> {
        let w = self
            .watched
            .get(&(api_version.to_string(), kind.to_string()))?;
        Some(match (w.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.hub.clone(), ns, &w.resource),
            _ => Api::all_with(self.hub.clone(), &w.resource),
        })
    }

    /// Whether kind `(apiVersion, kind)` is watched and its first list has arrived: only
    /// then does a template missing from [`Kinds::templates`] mean it is gone.
    pub fn synced(&self, api_version: &str, kind: &str) -> bool {
        self.watched
            .get(&(api_version.to_string(), kind.to_string()))
            .is_some_and(|w| w.cache.is_ready())
    }

    /// The resource of a watched kind.
    pub fn resource(&self, api_version: &str, kind: &str) -> Option<&ApiResource> {
        self.watched
            .get(&(api_version.to_string(), kind.to_string()))
            .map(|w| &w.resource)
    }
}

/// Resolves `(apiVersion, kind)` through `client`'s discovery (within `limit`): its
/// resource and whether it is namespaced.
pub async fn resolve(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    limit: std::time::Duration,
) -> Result<(ApiResource, bool), String> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) =
        crate::clusters::within(limit, kube::discovery::pinned_kind(client, &gvk)).await?;
    Ok((resource, caps.scope == Scope::Namespaced))
}

/// The `(apiVersion, kind)` of a resource type, for [`Kinds::ensure`].
pub fn kind_of<K: Resource<DynamicType = ()>>() -> (String, String) {
    (K::api_version(&()).into_owned(), K::kind(&()).into_owned())
}
