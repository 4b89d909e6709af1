//! The small applier every controller shares: compare a desired object with what the
//! API server has, server-side apply only what differs, delete what is no longer
//! desired. Level-based: nothing here remembers earlier calls.

use std::collections::HashSet;
use std::fmt::Debug;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use causeway_crds::well_known::FIELD_MANAGER;

use crate::watch::{ServiceKey, service_key};

/// Errors writing to an API server.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed.
    #[error("{verb} {kind} {namespace}/{name}: {source}")]
    Kube {
        /// apply, delete, status.
        verb: &'static str,
        /// Kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// The object could not be serialized.
    #[error("serializing {0}: {1}")]
    Serialize(String, serde_json::Error),
}

/// True when every field `desired` sets has the same value in `actual` (maps compared
/// as subsets, lists and scalars exactly, numbers by value). Server-added fields in
/// `actual` are ignored, so a hand edit of a field we own is seen and reverted.
pub fn contains(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d.iter().all(|(k, dv)| match a.get(k) {
            Some(av) => contains(av, dv),
            None => {
                dv.is_null()
                    || dv.as_object().is_some_and(|m| m.is_empty())
                    || dv.as_array().is_some_and(|l| l.is_empty())
            }
        }),
        (Value::Array(a), Value::Array(d)) => {
            a.len() == d.len() && a.iter().zip(d).all(|(x, y)| contains(x, y))
        }
        (Value::Number(a), Value::Number(d)) => a == d || a.as_f64() == d.as_f64(),
        _ => actual == desired,
    }
}

fn comparable<K: Serialize>(obj: &K) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.retain(|k, _| matches!(k.as_str(), "labels" | "annotations" | "name" | "namespace"));
        }
    }
    Ok(v)
}

/// What `ensure` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Already as desired.
    Unchanged,
    /// Created or updated.
    Written,
}

/// Server-side applies `desired` unless `actual` already contains it.
pub async fn ensure<K>(api: &Api<K>, desired: &K, actual: Option<&K>) -> Result<Outcome, ApplyError>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    K::DynamicType: Default,
{
    let name = desired.name_any();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let want = comparable(desired).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
    if let Some(a) = actual {
        let have = serde_json::to_value(a).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
        if contains(&have, &want) {
            return Ok(Outcome::Unchanged);
        }
    }
    let mut body =
        serde_json::to_value(desired).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
    if let Some(m) = body.as_object_mut() {
        m.remove("status");
        if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            md.remove("resourceVersion");
            md.remove("managedFields");
        }
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|source| ApplyError::Kube {
        verb: "apply",
        kind,
        namespace: desired.namespace().unwrap_or_default(),
        name,
        source,
    })?;
    Ok(Outcome::Written)
}

/// Server-side applies a status (subresource) unless it is already equal.
pub async fn ensure_status<K>(
    api: &Api<K>,
    name: &str,
    api_version: &str,
    kind: &str,
    status: &Value,
    actual: Option<&Value>,
) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if actual.is_some_and(|a| contains(a, status) && contains(status, a)) {
        return Ok(Outcome::Unchanged);
    }
    let body = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "status": status});
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|source| ApplyError::Kube {
        verb: "apply status",
        kind: kind.to_string(),
        namespace: String::new(),
        name: name.to_string(),
        source,
    })?;
    Ok(Outcome::Written)
}

/// Deletes an object; NotFound counts as done.
pub async fn remove<K>(api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(ApplyError::Kube {
            verb: "delete",
            kind: K::kind(&K::DynamicType::default()).to_string(),
            namespace: String::new(),
            name: name.to_string(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn contains_table() {
        let actual = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "uid": "x"}, "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "clusterIP": "10.0.0.1"}});
        let cases = [
            (json!({"metadata": {"labels": {"a": "1"}}}), true),
            (json!({"metadata": {"labels": {"a": "2"}}}), false),
            (json!({"spec": {"ports": [{"port": 80}]}}), true),
            (json!({"spec": {"ports": [{"port": 80.0}]}}), true),
            (
                json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}}),
                false,
            ),
            (json!({"spec": {"missing": "x"}}), false),
            (json!({"spec": {"missing": []}}), true),
            (json!({"spec": {"missing": null}}), true),
        ];
        for (desired, want) in cases {
            assert_eq!(contains(&actual, &desired), want, "{desired}");
        }
    }
}

/// Remembers, per object, a fingerprint of the desired state last found already
/// applied and the resourceVersion it was found at, so rounds skip the comparison
/// for objects nothing has touched. Fingerprints, not copies: a few bytes per object.
pub struct Memo<K> {
    seen: std::collections::HashMap<(String, String), (String, u64)>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Default for Memo<K> {
    fn default() -> Self {
        Memo {
            seen: Default::default(),
            _kind: std::marker::PhantomData,
        }
    }
}

fn fingerprint<K: Serialize>(desired: &K) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(desired).unwrap_or_default().hash(&mut h);
    h.finish()
}

impl<K> Memo<K>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    K::DynamicType: Default,
{
    /// True when `desired` was found applied at exactly `actual`'s resourceVersion.
    pub fn unchanged(&self, desired: &K, actual: Option<&K>) -> bool {
        let key = (desired.namespace().unwrap_or_default(), desired.name_any());
        match (
            actual.and_then(|a| a.resource_version()),
            self.seen.get(&key),
        ) {
            (Some(rv), Some((r, f))) => *r == rv && *f == fingerprint(desired),
            _ => false,
        }
    }

    /// Records that `desired` is applied in `actual`.
    pub fn remember(&mut self, desired: &K, actual: Option<&K>) {
        let key = (desired.namespace().unwrap_or_default(), desired.name_any());
        match actual.and_then(|a| a.resource_version()) {
            Some(rv) => {
                self.seen.insert(key, (rv, fingerprint(desired)));
            }
            None => {
                self.seen.remove(&key);
            }
        }
    }

    /// [`ensure`] with the memo.
    pub async fn ensure(
        &mut self,
        api: &Api<K>,
        desired: &K,
        actual: Option<&K>,
    ) -> Result<Outcome, ApplyError> {
        if self.unchanged(desired, actual) {
            return Ok(Outcome::Unchanged);
        }
        let out = ensure(api, desired, actual).await?;
        if out == Outcome::Unchanged {
            self.remember(desired, actual);
        }
        Ok(out)
    }
}

/// [`Memo`] for status subresources: remembers the status last found applied per object
/// and the object's resourceVersion then.
#[derive(Default)]
pub struct StatusMemo {
    seen: std::collections::HashMap<(String, String), (u64, String)>,
}

impl StatusMemo {
    /// [`ensure_status`] with the memo; `actual` is only computed on a miss.
    #[allow(clippy::too_many_arguments)]
    pub async fn ensure<K>(
        &mut self,
        api: &Api<K>,
        namespace: &str,
        name: &str,
        api_version: &str,
        kind: &str,
        status: &Value,
        actual_rv: Option<String>,
        actual: impl FnOnce() -> Option<Value>,
    ) -> Result<Outcome, ApplyError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let key = (namespace.to_string(), name.to_string());
        let print = fingerprint(status);
        if let (Some(rv), Some((v, r))) = (&actual_rv, self.seen.get(&key))
            && r == rv
            && *v == print
        {
            return Ok(Outcome::Unchanged);
        }
        let out = ensure_status(api, name, api_version, kind, status, actual().as_ref()).await?;
        match (out, actual_rv) {
            (Outcome::Unchanged, Some(rv)) => {
                self.seen.insert(key, (print, rv));
            }
            _ => {
                self.seen.remove(&key);
            }
        }
        Ok(out)
    }
}

/// Deletes every object in `actual` whose `(namespace, name)` is not in `keep`; returns
/// the failures with the service of each object (NotFound counts as done).
pub async fn remove_all_but<K>(
    client: &kube::Client,
    actual: &[std::sync::Arc<K>],
    keep: &std::collections::BTreeSet<(String, String)>,
) -> Vec<(ServiceKey, ApplyError)>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default,
{
    let mut errors = Vec::new();
    for a in actual {
        let key = (a.namespace().unwrap_or_default(), a.name_any());
        if !keep.contains(&key)
            && let Err(e) = remove(&Api::<K>::namespaced(client.clone(), &key.0), &key.1).await
        {
            errors.push((service_key(a.as_ref()).unwrap_or(key), e));
        }
    }
    errors
}

/// The writes of one round that failed, by the service they belong to: those services
/// are retried with per-key backoff ([`causeway_runtime::reflect::Wake::after_round`]).
#[derive(Debug)]
pub struct Failures {
    /// The loop, for the log (exporter, importer, aggregator).
    what: &'static str,
    /// The cluster, for the log.
    cluster: String,
    /// The services with a failed write.
    pub keys: HashSet<ServiceKey>,
    /// How many writes failed.
    pub count: usize,
}

impl Failures {
    /// No failure yet, for loop `what` on `cluster`.
    pub fn new(what: &'static str, cluster: &str) -> Self {
        Failures {
            what,
            cluster: cluster.to_string(),
            keys: HashSet::new(),
            count: 0,
        }
    }

    /// Records the result of a write for service `key`: the outcome, or `Unchanged`
    /// after a failure (logged).
    pub fn check(&mut self, key: ServiceKey, r: Result<Outcome, ApplyError>) -> Outcome {
        match r {
            Ok(o) => o,
            Err(e) => {
                self.failed(key, &e);
                Outcome::Unchanged
            }
        }
    }

    /// Records a failed write for service `key`.
    pub fn failed(&mut self, key: ServiceKey, e: &dyn std::fmt::Display) {
        tracing::warn!(
            controller = self.what,
            cluster = %self.cluster,
            service = %format!("{}/{}", key.0, key.1),
            error = %e,
            "write failed; retrying with backoff"
        );
        self.keys.insert(key);
        self.count += 1;
    }
}
