//! The hub watches of resource templates, of any kind: a dynamic reflector per
//! `(apiVersion, kind)` that some policy selects (plus the dependency kinds when a
//! policy propagates dependencies), started the first time a policy names the kind and
//! resolved through the hub's discovery, so CRDs installed later are picked up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::binding::binding_name;
use causeway_runtime::reflect::{Cache, Key, KeyOf, Reflector, Wake};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::Scope;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

/// One watched kind.
pub struct Watched {
    /// The resource, as discovery gave it.
    pub resource: ApiResource,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
    /// The cached objects (every one with apiVersion and kind set).
    pub cache: Cache<DynamicObject>,
}

/// How a kind an API server does not serve is reported: `(apiVersion, kind, error)`.
type Unserved = Box<dyn Fn(&str, &str, &str) -> String + Send + Sync>;

/// Dynamic watches of one API server, one per `(apiVersion, kind)` asked for, started
/// on demand and resolved through its discovery; a kind it does not serve is kept in
/// [`Watches::unknown`] and retried on the next [`Watches::ensure`]. The hub's template
/// watches ([`Kinds`]) and each work applier's member watches share it.
pub struct Watches {
    client: kube::Client,
    wake: Arc<Wake>,
    stop: CancellationToken,
    limit: Duration,
    cfg: watcher::Config,
    what: &'static str,
    key_of: KeyOf<DynamicObject>,
    /// How a kind not served is reported: `(apiVersion, kind, error) → message`.
    unserved: Unserved,
    watched: BTreeMap<(String, String), Watched>,
    /// Kinds discovery does not know (yet), with why: reported, retried each round.
    pub unknown: BTreeMap<(String, String), String>,
    /// Those of [`Watches::unknown`] whose discovery call failed (no answer, refused,
    /// an error): not known to be unserved, so nothing of theirs is known to be gone.
    pub unanswered: BTreeSet<(String, String)>,
}

impl Watches {
    /// Nothing watched yet. Objects are selected by `cfg`, a change wakes `wake` for
    /// `key_of` the object, every call (and the wait for a first list) within `limit`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        wake: Arc<Wake>,
        stop: CancellationToken,
        limit: Duration,
        cfg: watcher::Config,
        what: &'static str,
        key_of: KeyOf<DynamicObject>,
        unserved: impl Fn(&str, &str, &str) -> String + Send + Sync + 'static,
    ) -> Watches {
        Watches {
            client,
            wake,
            stop,
            limit,
            cfg,
            what,
            key_of,
            unserved: Box::new(unserved),
            watched: BTreeMap::new(),
            unknown: BTreeMap::new(),
            unanswered: BTreeSet::new(),
        }
    }

    /// Starts the watches of the kinds in `wanted` not watched yet and waits (bounded)
    /// for their first lists.
    pub async fn ensure(&mut self, wanted: &BTreeSet<(String, String)>) {
        self.unknown.retain(|k, _| wanted.contains(k));
        self.unanswered.retain(|k| wanted.contains(k));
        for key in wanted {
            if self.watched.contains_key(key) {
                continue;
            }
            let (api_version, kind) = key;
            let (resource, namespaced) =
                match resolve_served(&self.client, api_version, kind, self.limit).await {
                    Ok(Some(found)) => found,
                    Ok(None) => {
                        let why = (self.unserved)(api_version, kind, "not in its discovery");
                        self.unknown.insert(key.clone(), why);
                        self.unanswered.remove(key);
                        continue;
                    }
                    Err(e) => {
                        let why = (self.unserved)(api_version, kind, &e);
                        self.unknown.insert(key.clone(), why);
                        self.unanswered.insert(key.clone());
                        continue;
                    }
                };
            let reflector = Reflector::start_dynamic(
                Api::all_with(self.client.clone(), &resource),
                resource.clone(),
                self.cfg.clone(),
                self.stop.clone(),
                self.what,
                Some(self.key_of),
            );
            let cache = reflector.subscribe(self.wake.clone());
            let _ = tokio::time::timeout(self.limit, cache.wait_until_ready()).await;
            self.unknown.remove(key);
            self.unanswered.remove(key);
            let w = Watched {
                resource,
                namespaced,
                cache,
            };
            self.watched.insert(key.clone(), w);
        }
    }

    /// The watch of `(apiVersion, kind)`, if it runs.
    pub fn get(&self, api_version: &str, kind: &str) -> Option<&Watched> {
        self.watched
            .get(&(api_version.to_string(), kind.to_string()))
    }

    /// Every watch.
    pub fn all(&self) -> impl Iterator<Item = &Watched> {
        self.watched.values()
    }

    /// The API of `(apiVersion, kind)` in `namespace` (all namespaces for a
    /// cluster-scoped kind or without one), if it is watched.
    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Option<Api<DynamicObject>> {
        let w = self.get(api_version, kind)?;
        Some(match (w.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &w.resource),
            _ => Api::all_with(self.client.clone(), &w.resource),
        })
    }

    /// Whether `(apiVersion, kind)` is watched and its first list has arrived: only
    /// then does an object missing from the cache mean it is gone.
    pub fn synced(&self, api_version: &str, kind: &str) -> bool {
        self.get(api_version, kind)
            .is_some_and(|w| w.cache.is_ready())
    }
}

/// The template watches of the hub: every template, keyed by its binding.
pub struct Kinds(pub Watches);

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
        Kinds(Watches::new(
            hub,
            wake,
            stop,
            crate::clusters::CALL_TIMEOUT,
            watcher::Config::default(),
            "hub resource templates",
            template_key,
            |api_version, kind, e| {
                format!(
                    "the hub does not serve {kind} in {api_version} ({e}): install its CRD on the hub, or fix the policy's resourceSelectors"
                )
            },
        ))
    }

    /// Every watched template (the reflectors set their apiVersion and kind).
    pub fn templates(&self) -> Vec<Arc<DynamicObject>> {
        self.0.all().flat_map(|w| w.cache.state()).collect()
    }

    /// The resource of a watched kind.
    pub fn resource(&self, api_version: &str, kind: &str) -> Option<&ApiResource> {
        self.0.get(api_version, kind).map(|w| &w.resource)
    }
}

impl std::ops::Deref for Kinds {
    type Target = Watches;

    fn deref(&self) -> &Watches {
        &self.0
    }
}

impl std::ops::DerefMut for Kinds {
    fn deref_mut(&mut self) -> &mut Watches {
        &mut self.0
    }
}

/// Resolves `(apiVersion, kind)` through `client`'s discovery (within `limit`): its
/// resource and whether it is namespaced, telling a kind `client` does not serve (`Ok(None)`: its group/version
/// or the kind is not in discovery) from a call that failed (no answer, refused, 401…).
pub async fn resolve_served(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    limit: Duration,
) -> Result<Option<(ApiResource, bool)>, String> {
    use crate::clusters::CallError;
    use kube::error::DiscoveryError;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match crate::clusters::call(limit, kube::discovery::pinned_kind(client, &gvk)).await {
        Ok((resource, caps)) => Ok(Some((resource, caps.scope == Scope::Namespaced))),
        Err(CallError::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(None),
        Err(CallError::Kube(kube::Error::Discovery(DiscoveryError::MissingKind(_)))) => Ok(None),
        Err(e) => Err(format!("discovering {kind}.{api_version}: {e}")),
    }
}

/// The `(apiVersion, kind)` of a resource type, for [`Watches::ensure`].
pub fn kind_of<K: Resource<DynamicType = ()>>() -> (String, String) {
    (K::api_version(&()).into_owned(), K::kind(&()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusters::summary::tests::member;

    fn watches(client: kube::Client) -> Watches {
        Watches::new(
            client,
            Wake::new(),
            CancellationToken::new(),
            Duration::from_secs(2),
            watcher::Config::default(),
            "test",
            template_key,
            |api_version, kind, e| format!("{kind} {api_version}: {e}"),
        )
    }

    fn wanted(kinds: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        kinds
            .iter()
            .map(|(a, k)| (a.to_string(), k.to_string()))
            .collect()
    }

    /// A kind the member answers it does not serve is unknown; one whose discovery
    /// gets no answer is unknown and unanswered (its objects may still be there); a
    /// served one is watched.
    #[tokio::test]
    async fn a_kind_not_served_is_told_from_a_discovery_with_no_answer() {
        let (server, client) = member(kubesim::Config::new("kinds")).await;
        let mut w = watches(client.clone());
        w.ensure(&wanted(&[
            ("v1", "ConfigMap"),
            ("example.com/v1", "Widget"),
        ]))
        .await;
        assert!(w.get("v1", "ConfigMap").is_some());
        let widget = ("example.com/v1".to_string(), "Widget".to_string());
        assert!(w.unknown.contains_key(&widget));
        assert!(w.unanswered.is_empty(), "{:?}", w.unanswered);
        server.shutdown();
        server.stopped().await;
        let mut gone = watches(client);
        gone.ensure(&wanted(&[("apps/v1", "Deployment")])).await;
        let deployment = ("apps/v1".to_string(), "Deployment".to_string());
        assert!(gone.unknown.contains_key(&deployment));
        assert!(gone.unanswered.contains(&deployment));
        // no longer wanted: forgotten
        gone.ensure(&BTreeSet::new()).await;
        assert!(gone.unknown.is_empty() && gone.unanswered.is_empty());
    }
}
