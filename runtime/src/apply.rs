//! The one applier every controller shares, for typed objects and for
//! [`DynamicObject`](kube::api::DynamicObject)s of any kind alike: compare a desired
//! object with what the API server has, server-side apply (field manager `causeway`)
//! only what differs, write statuses, delete what is no longer desired (by key, or by
//! the owner labels it carries), add and remove finalizers, and collect per-key
//! failures for [`crate::reflect::Wake::after_round`]'s backoff. Level-based: nothing
//! here depends on having seen an event; the memos only skip comparisons.

use std::collections::HashSet;
use std::fmt::Debug;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::reflect::{Key, KeyOf};

use causeway_crds::well_known::FIELD_MANAGER;

/// Errors writing to an API server.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed.
    #[error("{verb} {kind} {namespace}/{name}: {}", crate::say::kube(source))]
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
/// as subsets, lists and scalars exactly, numbers by value, resource quantities by
/// quantity). Server-added fields in `actual` are ignored, so a hand edit of a field we
/// own is seen and reverted.
pub fn contains(actual: &Value, desired: &Value) -> bool {
    let place = if canonicalizes_quantities(desired) {
        Place::Field
    } else {
        Place::Opaque
    };
    contains_in(actual, desired, place)
}

/// Whether `obj` is of a built-in kind, whose quantities kube-apiserver stores in
/// canonical form: its group has no dot (core, apps, batch, autoscaling, policy) or is
/// one of the built-in groups with quantities (RuntimeClass overheads, CSI storage
/// capacities). A custom resource is stored as written: its "1.10" is not its "1.1".
fn canonicalizes_quantities(obj: &Value) -> bool {
    let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str) else {
        return false;
    };
    match api_version.rsplit_once('/') {
        None => true,
        Some((group, _)) => {
            !group.contains('.') || matches!(group, "node.k8s.io" | "storage.k8s.io")
        }
    }
}

/// Maps whose values are resource quantities (container `resources`, ResourceQuota
/// `hard`, LimitRange limits, Pod `overhead`, PersistentVolume `capacity`, Node
/// `allocatable`), and fields that are one (`emptyDir.sizeLimit`). kube-apiserver
/// writes a quantity back in canonical form ("0.5" as "500m", a number 1 as "1").
const QUANTITY_MAPS: [&str; 11] = [
    "limits",
    "requests",
    "hard",
    "capacity",
    "allocatable",
    "overhead",
    "max",
    "min",
    "default",
    "defaultRequest",
    "maxLimitRequestRatio",
];
const QUANTITY_FIELDS: [&str; 1] = ["sizeLimit"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In a built-in object, where a quantity map may start.
    Field,
    QuantityMap,
    Quantity,
    /// In a custom resource (or a part of an object): never a quantity.
    Opaque,
}

fn contains_in(actual: &Value, desired: &Value, place: Place) -> bool {
    match (actual, desired) {
        (Value::Object(a), Value::Object(d)) => d.iter().all(|(k, dv)| match a.get(k) {
            Some(av) => {
                let inner = if place == Place::Opaque {
                    Place::Opaque
                } else if place == Place::QuantityMap || QUANTITY_FIELDS.contains(&k.as_str()) {
                    Place::Quantity
                } else if QUANTITY_MAPS.contains(&k.as_str()) {
                    Place::QuantityMap
                } else {
                    Place::Field
                };
                contains_in(av, dv, inner)
            }
            None => {
                dv.is_null()
                    || dv.as_object().is_some_and(|m| m.is_empty())
                    || dv.as_array().is_some_and(|l| l.is_empty())
            }
        }),
        (Value::Array(a), Value::Array(d)) => {
            let inner = if place == Place::Opaque {
                Place::Opaque
            } else {
                Place::Field
            };
            a.len() == d.len() && a.iter().zip(d).all(|(x, y)| contains_in(x, y, inner))
        }
        (Value::Number(a), Value::Number(d)) => a == d || a.as_f64() == d.as_f64(),
        (Value::String(a), Value::String(d)) if place == Place::Quantity => {
            a == d || causeway_crds::quantity::same(a, d)
        }
        (Value::String(a), Value::Number(d)) if place == Place::Quantity => {
            causeway_crds::quantity::same(a, &d.to_string())
        }
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

/// Of an object's `managedFields`, the labels and annotations Causeway's own applies
/// hold (field manager [`FIELD_MANAGER`], operation Apply, the object itself, not a
/// subresource), as one entry; none when they hold none. A cache keeps this in place of
/// the whole list so that [`ensure_owning`] can tell a label or annotation Causeway set
/// and no longer sets from one somebody else set.
pub fn owned_metadata(
    fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    let ours = fields?.into_iter().find(|e| {
        e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    })?;
    let FieldsV1(Value::Object(mut all)) = ours.fields_v1? else {
        return None;
    };
    let Some(Value::Object(mut metadata)) = all.remove("f:metadata") else {
        return None;
    };
    metadata.retain(|k, v| {
        matches!(k.as_str(), "f:labels" | "f:annotations")
            && v.as_object().is_some_and(|m| !m.is_empty())
    });
    if metadata.is_empty() {
        return None;
    }
    Some(vec![ManagedFieldsEntry {
        manager: ours.manager,
        operation: ours.operation,
        fields_v1: Some(FieldsV1(
            serde_json::json!({ "f:metadata": Value::Object(metadata) }),
        )),
        ..ManagedFieldsEntry::default()
    }])
}

/// True when `have` (a serialized object, with its `managedFields`) holds a label or
/// annotation through Causeway's applies that `want` (a serialized desired object) does
/// not set: an apply of `want` removes it. Without `managedFields` (a cache that drops
/// them), nothing is known and this is false.
fn owned_metadata_left_out(have: &Value, want: &Value) -> bool {
    let Some(entries) = have
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return false;
    };
    entries
        .iter()
        .filter(|e| {
            e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .is_empty()
        })
        .any(|e| {
            ["labels", "annotations"].iter().any(|section| {
                let owned = e
                    .pointer(&format!("/fieldsV1/f:metadata/f:{section}"))
                    .and_then(Value::as_object);
                let wanted = want.get("metadata").and_then(|m| m.get(*section));
                owned.is_some_and(|keys| {
                    keys.keys()
                        .filter_map(|k| k.strip_prefix("f:"))
                        .any(|k| wanted.and_then(|w| w.get(k)).is_none())
                })
            })
        })
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
{
    ensure_owning(api, desired, actual, &[]).await
}

/// Whether `have` holds `want` ([`contains`]) and, at the fields `owned` (top-level or
/// dotted paths), nothing `want` leaves out: what [`ensure_owning`] finds already
/// applied (labels and annotations aside).
pub fn holds_owning(have: &Value, want: &Value, owned: &[&str]) -> bool {
    let at = |v: &Value, k: &str| v.pointer(&format!("/{}", k.replace('.', "/"))).cloned();
    let nothing_more = owned.iter().all(|k| match (at(have, k), at(want, k)) {
        (Some(h), Some(w)) => contains(&w, &h),
        (Some(h), None) => h.is_null() || h.as_object().is_some_and(|m| m.is_empty()),
        _ => true,
    });
    contains(have, want) && nothing_more
}

/// [`ensure`], where the fields `owned` (top-level such as `spec`, or dotted paths such
/// as `spec.trafficDistribution`) are Causeway's alone:
/// `actual` must also hold nothing there that `desired` leaves out (an optional field
/// gone to `None`, an item gone from a list), or the apply removes it. Elsewhere
/// `actual` may hold more (what the server or others set), except a label or annotation
/// its `managedFields` (when the cache keeps them, [`owned_metadata`]) say Causeway's
/// applies hold and `desired` no longer sets: the apply removes it.
pub async fn ensure_owning<K>(
    api: &Api<K>,
    desired: &K,
    actual: Option<&K>,
    owned: &[&str],
) -> Result<Outcome, ApplyError>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = desired.name_any();
    let want = comparable(desired).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
    let kind = kind_of::<K>(&want);
    if let Some(a) = actual {
        let have = serde_json::to_value(a).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
        if holds_owning(&have, &want, owned) && !owned_metadata_left_out(&have, &want) {
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
    if actual.is_some_and(|a| same_status(a, status)) {
        return Ok(Outcome::Unchanged);
    }
    apply_status_as(api, FIELD_MANAGER, name, api_version, kind, status, None).await
}

/// Whether a status is as desired: a status is ours whole, so neither has a field the
/// other lacks.
fn same_status(actual: &Value, desired: &Value) -> bool {
    contains(actual, desired) && contains(desired, actual)
}

/// Server-side applies `status` under field `manager` (forced), unconditionally. Two
/// writers of one object's status (a Pull agent and the hub's lease monitor) use two
/// managers, so neither's apply drops the fields the other set. With
/// `resource_version`, the write is refused (409) if the object changed since the
/// caller read it, so a decision made on a stale read never lands.
pub async fn apply_status_as<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    api_version: &str,
    kind: &str,
    status: &Value,
    resource_version: Option<&str>,
) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    patch_status_as(
        api,
        manager,
        name,
        api_version,
        kind,
        status,
        resource_version,
    )
    .await?;
    Ok(Outcome::Written)
}

/// [`apply_status_as`]: the object as the server stored it.
async fn patch_status_as<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    api_version: &str,
    kind: &str,
    status: &Value,
    resource_version: Option<&str>,
) -> Result<K, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut body = serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "status": status});
    if let Some(rv) = resource_version {
        body["metadata"]["resourceVersion"] = serde_json::json!(rv);
    }
    api.patch_status(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|source| ApplyError::Kube {
        verb: "apply status",
        kind: kind.to_string(),
        namespace: String::new(),
        name: name.to_string(),
        source,
    })
}

/// The kind of a serialized object (typed objects serialize theirs; a
/// `DynamicObject` carries it in `types`), else the Rust type's name.
fn kind_of<K>(serialized: &Value) -> String {
    serialized
        .get("kind")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| {
            let t = std::any::type_name::<K>();
            t.rsplit("::").next().unwrap_or(t).to_string()
        })
}

/// Deletes an object; NotFound counts as done, and so does a deletion already under
/// way ([`deletion_under_way`]).
pub async fn remove<K>(api: &Api<K>, name: &str) -> Result<(), ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if gone_or_going(&s) => Ok(()),
        Err(source) => Err(ApplyError::Kube {
            verb: "delete",
            kind: kind_of::<K>(&Value::Null),
            namespace: String::new(),
            name: name.to_string(),
            source,
        }),
    }
}

/// Whether the answer to a DELETE says the object is already being deleted:
/// kube-apiserver answers a second DELETE of a Terminating namespace whose content is
/// not yet gone with 409 Conflict, details kind `namespaces` ("The system is ensuring
/// all content is removed from this namespace…"). What the DELETE asked for is under
/// way. Any other 409 (a webhook's, a precondition's) is not.
pub fn deletion_under_way(s: &kube::core::Status) -> bool {
    s.code == 409 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces")
}

/// Whether the answer to a DELETE means what it asked for is done or under way: the
/// object is gone (404) or already being deleted ([`deletion_under_way`]). Every
/// deleter reads DELETE answers through this one.
pub fn gone_or_going(s: &kube::core::Status) -> bool {
    s.code == 404 || deletion_under_way(s)
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

    /// At the owned fields nothing more than desired is held: an endpoint's `hints`
    /// the source dropped, or a `ready: false` it left unset, is not "applied".
    #[test]
    fn holds_owning_table() {
        let have = json!({"metadata": {"labels": {"x": "1"}}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false},
                "hints": {"forZones": [{"name": "a"}]}}]});
        let owned = &["endpoints", "ports"];
        let cases = [
            (
                json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false},
                "hints": {"forZones": [{"name": "a"}]}}]}),
                true,
            ),
            (
                json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]}),
                false,
            ),
            (
                json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {},
                "hints": {"forZones": [{"name": "a"}]}}]}),
                false,
            ),
            // outside the owned fields, more is fine
            (
                json!({"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false},
                "hints": {"forZones": [{"name": "a"}]}}], "metadata": {}}),
                true,
            ),
        ];
        for (want, held) in &cases {
            assert_eq!(holds_owning(&have, want, owned), *held, "{want}");
        }
        // where plain containment says "applied"
        assert!(contains(&have, &cases[1].0) && contains(&have, &cases[2].0));
    }

    /// A namespace whose content is still being removed answers a second DELETE with
    /// 409 (kube-apiserver's namespace storage; kubesim does the same): [`remove`]
    /// takes that as the deletion it asked for, under way, not as a failure.
    #[tokio::test]
    async fn removing_a_namespace_already_terminating_is_done() {
        use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
        let server = kubesim::Server::start(kubesim::Config::new("remove"))
            .await
            .unwrap();
        let client = server.client().await;
        let nss: Api<Namespace> = Api::all(client.clone());
        let pp = kube::api::PostParams::default();
        nss.create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
        )
        .await
        .unwrap();
        // content held by a finalizer keeps the namespace Terminating
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
        cms.create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
        remove(&nss, "doomed").await.unwrap();
        let second = nss.delete("doomed", &DeleteParams::background()).await;
        assert!(
            matches!(&second, Err(kube::Error::Api(s)) if deletion_under_way(s)),
            "{second:?}"
        );
        remove(&nss, "doomed").await.unwrap();
        // another 409 (a webhook's, a precondition's) is no deletion under way
        let other: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 409, "reason": "Conflict",
            "message": "Operation cannot be fulfilled on configmaps \"x\"",
            "details": {"name": "x", "kind": "configmaps"}}))
        .unwrap();
        assert!(!deletion_under_way(&other));
        assert!(
            nss.get("doomed")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
        server.shutdown();
    }

    /// A memo forgets the objects no round has asked about for ten minutes (churning
    /// names) and keeps every object the rounds ask about, however many there are:
    /// 2000 live objects, a round every 30 s, 100 new names each round never asked
    /// about again.
    #[test]
    fn a_memo_forgets_objects_no_round_asks_about() {
        let start = std::time::Instant::now();
        let mut seen: Seen<String, u64> = Seen::default();
        let live: Vec<String> = (0..2000).map(|i| format!("live-{i}")).collect();
        let mut misses = 0;
        for round in 0..100u64 {
            let now = start + std::time::Duration::from_secs(30 * round);
            for k in &live {
                if seen.get_at(k, now).is_none() {
                    misses += 1;
                    seen.insert_at(k.clone(), round, now);
                }
            }
            for i in 0..100 {
                seen.insert_at(format!("gone-{round}-{i}"), round, now);
            }
        }
        assert_eq!(
            misses, 2000,
            "each live object missed once, in the first round"
        );
        // 50 minutes of churn: what is left is the live objects and the last ten to
        // twenty minutes' names
        let churn = seen.len() - 2000;
        assert!(
            churn <= 100 * 40,
            "{churn} forgotten names kept (at most twenty minutes' worth)"
        );
        assert!(live.iter().all(|k| seen.get_at(k, start).is_some()));
    }

    #[test]
    fn a_quantity_kube_apiserver_wrote_in_canonical_form_is_the_one_applied() {
        let actual = json!({"apiVersion": "v1", "spec": {
            "containers": [{"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "1"}}}],
            "volumes": [{"emptyDir": {"sizeLimit": "1k"}}],
            "hard": {"pods": "10"},
            "labels": {"v": "500m"},
            "replicas": 2,
        }});
        let v1 = |spec: Value| json!({"apiVersion": "v1", "spec": spec});
        let cases = [
            (
                v1(
                    json!({"containers": [{"resources": {"limits": {"cpu": "0.5", "memory": "1024Mi"}}}]}),
                ),
                true,
            ),
            (
                v1(json!({"containers": [{"resources": {"requests": {"cpu": 1}}}]})),
                true,
            ),
            (
                v1(json!({"containers": [{"resources": {"requests": {"cpu": "1000m"}}}]})),
                true,
            ),
            (
                v1(json!({"volumes": [{"emptyDir": {"sizeLimit": "1e3"}}]})),
                true,
            ),
            (v1(json!({"hard": {"pods": "1e1"}})), true),
            // a different quantity is a difference
            (
                v1(json!({"containers": [{"resources": {"limits": {"cpu": "0.6"}}}]})),
                false,
            ),
            (
                v1(json!({"containers": [{"resources": {"limits": {"memory": "1G"}}}]})),
                false,
            ),
            // outside a quantity's place strings compare as strings, numbers as numbers
            (v1(json!({"labels": {"v": "0.5"}})), false),
            (v1(json!({"replicas": "2"})), false),
        ];
        for (desired, want) in cases {
            assert_eq!(contains(&actual, &desired), want, "{desired}");
        }
        // apps/v1 is built in too
        let d = json!({"apiVersion": "apps/v1", "spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "0.5"}}}]}}}});
        let a = json!({"apiVersion": "apps/v1", "spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"cpu": "500m"}}}]}}}});
        assert!(contains(&a, &d));
        // a custom resource is stored as written: "1.10" is not "1.1", "0.5" not "500m"
        let cr = |version: &str, cpu: &str| {
            json!({"apiVersion": "example.com/v1", "spec": {"default": {"version": version},
                   "template": {"spec": {"containers": [{"resources": {"limits": {"cpu": cpu}}}]}}}})
        };
        assert!(!contains(&cr("1.1", "500m"), &cr("1.10", "500m")));
        assert!(!contains(&cr("1.1", "500m"), &cr("1.1", "0.5")));
        assert!(contains(&cr("1.1", "500m"), &cr("1.1", "500m")));
    }

    fn entry(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> Value {
        let mut e = json!({"manager": manager, "operation": operation, "fieldsV1": fields});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    #[test]
    fn a_label_or_annotation_causeway_applied_and_no_longer_sets_is_left_out() {
        let ours = json!({"f:metadata": {"f:annotations": {"f:causeway.io/a": {}}, "f:labels": {"f:team": {}}}, "f:spec": {}});
        let have = |entries: Vec<Value>| json!({"metadata": {"name": "x", "annotations": {"causeway.io/a": "1", "user": "u"}, "labels": {"team": "t"}, "managedFields": entries}});
        let both =
            json!({"metadata": {"annotations": {"causeway.io/a": "1"}, "labels": {"team": "t"}}});
        let no_annotation = json!({"metadata": {"labels": {"team": "t"}}});
        let no_label = json!({"metadata": {"annotations": {"causeway.io/a": "1"}}});
        let cases = [
            (
                "every key still set",
                have(vec![entry(FIELD_MANAGER, "Apply", None, ours.clone())]),
                &both,
                false,
            ),
            (
                "an annotation left out",
                have(vec![entry(FIELD_MANAGER, "Apply", None, ours.clone())]),
                &no_annotation,
                true,
            ),
            (
                "a label left out",
                have(vec![entry(FIELD_MANAGER, "Apply", None, ours.clone())]),
                &no_label,
                true,
            ),
            (
                "another manager's key",
                have(vec![entry("kubectl", "Apply", None, ours.clone())]),
                &no_annotation,
                false,
            ),
            (
                "an update, not an apply",
                have(vec![entry(FIELD_MANAGER, "Update", None, ours.clone())]),
                &no_annotation,
                false,
            ),
            (
                "the status subresource",
                have(vec![entry(
                    FIELD_MANAGER,
                    "Apply",
                    Some("status"),
                    ours.clone(),
                )]),
                &no_annotation,
                false,
            ),
            (
                "no managedFields (a cache that drops them)",
                json!({"metadata": {"annotations": {"causeway.io/a": "1"}}}),
                &no_annotation,
                false,
            ),
        ];
        for (what, have, want, left_out) in cases {
            assert_eq!(owned_metadata_left_out(&have, want), left_out, "{what}");
        }
    }

    #[test]
    fn a_cache_keeps_only_the_labels_and_annotations_of_causeways_applies() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let e = |manager: &str, operation: &str, subresource: Option<&str>, fields: Value| {
            ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                subresource: subresource.map(String::from),
                fields_v1: Some(FieldsV1(fields)),
                ..ManagedFieldsEntry::default()
            }
        };
        let ours = json!({"f:metadata": {"f:annotations": {"f:causeway.io/a": {}}, "f:labels": {}, "f:finalizers": {"v:x": {}}}, "f:spec": {"f:replicas": {}}});
        let kept = owned_metadata(Some(vec![
            e(
                "kubectl",
                "Apply",
                None,
                json!({"f:metadata": {"f:labels": {"f:user": {}}}}),
            ),
            e(
                FIELD_MANAGER,
                "Apply",
                Some("status"),
                json!({"f:status": {}}),
            ),
            e(FIELD_MANAGER, "Apply", None, ours),
        ]))
        .expect("an entry");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].manager.as_deref(), Some(FIELD_MANAGER));
        assert_eq!(
            kept[0].fields_v1.as_ref().map(|f| &f.0),
            Some(&json!({"f:metadata": {"f:annotations": {"f:causeway.io/a": {}}}}))
        );
        // nothing of ours in the metadata: nothing kept
        assert!(
            owned_metadata(Some(vec![e(
                FIELD_MANAGER,
                "Apply",
                None,
                json!({"f:spec": {}})
            )]))
            .is_none()
        );
        assert!(owned_metadata(None).is_none());
        // what is kept is what the applier reads
        let have = json!({"metadata": {"annotations": {"causeway.io/a": "1"}, "managedFields": serde_json::to_value(&kept).unwrap()}});
        assert!(owned_metadata_left_out(&have, &json!({"metadata": {}})));
        assert!(!owned_metadata_left_out(
            &have,
            &json!({"metadata": {"annotations": {"causeway.io/a": "2"}}})
        ));
    }
}

/// Remembers, per object, a fingerprint of the desired state last found already
/// applied and the resourceVersion it was found at, so rounds skip the comparison
/// for objects nothing has touched. Fingerprints, not copies: a few bytes per object.
pub struct Memo<K> {
    seen: Seen<(String, String), (String, u64)>,
    owned: &'static [&'static str],
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Default for Memo<K> {
    fn default() -> Self {
        Memo {
            seen: Default::default(),
            owned: &[],
            _kind: std::marker::PhantomData,
        }
    }
}

impl<K> Memo<K> {
    /// A memo whose objects' top-level fields `owned` are Causeway's alone (see
    /// [`ensure_owning`]).
    pub fn owning(owned: &'static [&'static str]) -> Self {
        Memo {
            owned,
            ..Memo::default()
        }
    }
}

/// A memo's entries, which forget the objects no round has asked about for
/// [`Seen::MAX_AGE`] (deleted, renamed: EndpointSlices and namespaces come and go).
/// Each entry keeps when it was last read or written; an insert at least `MAX_AGE`
/// after the last sweep drops the entries older than that. The map so holds what the
/// last twenty minutes or so touched, and a live object whose entry went (its loop
/// asked nothing of it for ten minutes) costs one comparison, not a write, when it is
/// asked about again.
struct Seen<K, V> {
    map: std::collections::HashMap<K, (V, std::cell::Cell<std::time::Instant>)>,
    next_sweep: Option<std::time::Instant>,
}

impl<K, V> Default for Seen<K, V> {
    fn default() -> Self {
        Seen {
            map: Default::default(),
            next_sweep: None,
        }
    }
}

impl<K: std::hash::Hash + Eq, V> Seen<K, V> {
    const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

    fn get(&self, k: &K) -> Option<&V> {
        self.get_at(k, std::time::Instant::now())
    }

    fn get_at(&self, k: &K, now: std::time::Instant) -> Option<&V> {
        let (v, used) = self.map.get(k)?;
        used.set(now);
        Some(v)
    }

    fn insert(&mut self, k: K, v: V) {
        self.insert_at(k, v, std::time::Instant::now());
    }

    fn insert_at(&mut self, k: K, v: V, now: std::time::Instant) {
        self.map.insert(k, (v, std::cell::Cell::new(now)));
        let due = *self.next_sweep.get_or_insert(now + Self::MAX_AGE);
        if now >= due {
            self.map
                .retain(|_, (_, used)| now.saturating_duration_since(used.get()) < Self::MAX_AGE);
            self.next_sweep = Some(now + Self::MAX_AGE);
        }
    }

    fn remove(&mut self, k: &K) {
        self.map.remove(k);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
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
        let out = ensure_owning(api, desired, actual, self.owned).await?;
        if out == Outcome::Unchanged {
            self.remember(desired, actual);
        }
        Ok(out)
    }
}

/// [`Memo`] for status subresources: remembers the status last found applied, or last
/// written, per object (by apiVersion and kind too: a loop that writes the statuses of
/// several kinds keeps one entry for each) and the object's resourceVersion then. After
/// a write that is the resourceVersion the server answered with: the object at that
/// version is what the server made of the status (a value it normalizes is not written
/// again and again), and nothing is compared until the object changes.
#[derive(Default)]
pub struct StatusMemo {
    seen: Seen<(String, String, String), (u64, String)>,
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
        let key = (
            format!("{api_version}/{kind}"),
            namespace.to_string(),
            name.to_string(),
        );
        let print = fingerprint(status);
        if let (Some(rv), Some((v, r))) = (&actual_rv, self.seen.get(&key))
            && r == rv
            && *v == print
        {
            return Ok(Outcome::Unchanged);
        }
        if actual().is_some_and(|a| same_status(&a, status)) {
            match actual_rv {
                Some(rv) => self.seen.insert(key, (print, rv)),
                None => self.seen.remove(&key),
            };
            return Ok(Outcome::Unchanged);
        }
        self.seen.remove(&key);
        let stored =
            patch_status_as(api, FIELD_MANAGER, name, api_version, kind, status, None).await?;
        if let Some(rv) = stored.resource_version() {
            self.seen.insert(key, (print, rv));
        }
        Ok(Outcome::Written)
    }
}

/// Deletes every object in `actual` whose `(namespace, name)` is not in `keep`, through
/// `api_for(namespace)`; returns the failures, each with `key_of` the object (its own
/// key without one). NotFound counts as done.
pub async fn remove_all_but<K>(
    api_for: impl Fn(&str) -> Api<K>,
    actual: &[std::sync::Arc<K>],
    keep: &std::collections::BTreeSet<(String, String)>,
    key_of: KeyOf<K>,
) -> Vec<(Key, ApplyError)>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut errors = Vec::new();
    for a in actual {
        let key = (a.namespace().unwrap_or_default(), a.name_any());
        if !keep.contains(&key)
            && let Err(e) = remove(&api_for(&key.0), &key.1).await
        {
            errors.push((key_of(a.as_ref()).unwrap_or(key), e));
        }
    }
    errors
}

/// Pruning by owner labels: lists what `list` holds that matches `owner_selector`
/// (e.g. `causeway.io/managed=true,causeway.io/work-name=web`) and deletes, through
/// `api_for(namespace)`, every such object whose `(namespace, name)` is not in `keep`;
/// returns how many went.
pub async fn prune<K>(
    list: &Api<K>,
    api_for: impl Fn(&str) -> Api<K>,
    owner_selector: &str,
    keep: &std::collections::BTreeSet<(String, String)>,
) -> Result<usize, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let listed = list
        .list(&ListParams::default().labels(owner_selector))
        .await
        .map_err(|source| ApplyError::Kube {
            verb: "list",
            kind: kind_of::<K>(&Value::Null),
            namespace: String::new(),
            name: owner_selector.to_string(),
            source,
        })?;
    let mut n = 0;
    for o in listed.items {
        let key = (o.namespace().unwrap_or_default(), o.name_any());
        if !keep.contains(&key) {
            remove(&api_for(&key.0), &key.1).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Sets annotations of `obj` (through `api`): each `Some` value set, each `None` removed,
/// the others left as they are; `Unchanged` when they already are so. A JSON merge
/// patch: unlike an apply, it never creates an object that has just been deleted, and
/// it leaves the fields other managers own alone.
pub async fn set_annotations<K>(
    api: &Api<K>,
    obj: &K,
    manager: &str,
    annotations: &std::collections::BTreeMap<String, Option<String>>,
) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let have = obj.annotations();
    if annotations.iter().all(|(k, v)| have.get(k) == v.as_ref()) {
        return Ok(Outcome::Unchanged);
    }
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..Default::default()
    };
    api.patch(&obj.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| ApplyError::Kube {
            verb: "annotate",
            kind: kind_of::<K>(&serde_json::to_value(obj).unwrap_or_default()),
            namespace: obj.namespace().unwrap_or_default(),
            name: obj.name_any(),
            source,
        })?;
    Ok(Outcome::Written)
}

/// Adds `finalizer` to `obj` (through `api`, scoped to its namespace) unless it is
/// there: a JSON patch guarded by a test of the current list, so a concurrent change is
/// refused (and retried by the caller) rather than lost.
pub async fn add_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let current = obj.finalizers().to_vec();
    if current.iter().any(|f| f == finalizer) {
        return Ok(Outcome::Unchanged);
    }
    let mut next = current.clone();
    next.push(finalizer.to_string());
    patch_finalizers(api, obj, current, next).await
}

/// Removes `finalizer` from the object if it is there (same guard as [`add_finalizer`]).
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let current = obj.finalizers().to_vec();
    if !current.iter().any(|f| f == finalizer) {
        return Ok(Outcome::Unchanged);
    }
    let next: Vec<String> = current
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    patch_finalizers(api, obj, current, next).await
}

async fn patch_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    current: Vec<String>,
    next: Vec<String>,
) -> Result<Outcome, ApplyError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.name_any();
    let ops = if obj.meta().finalizers.is_none() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": next},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": next},
        ])
    };
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| ApplyError::Serialize(name.clone(), e))?;
    api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(|source| ApplyError::Kube {
            verb: "patch finalizers",
            kind: kind_of::<K>(&serde_json::to_value(obj).unwrap_or_default()),
            namespace: obj.namespace().unwrap_or_default(),
            name,
            source,
        })?;
    Ok(Outcome::Written)
}

/// The writes of one round that failed, by the key they belong to: those keys are
/// retried with per-key backoff ([`crate::reflect::Wake::after_round`]).
#[derive(Debug)]
pub struct Failures {
    /// The loop, for the log (e.g. exporter).
    what: &'static str,
    /// The cluster, for the log.
    cluster: String,
    /// The keys with a failed write.
    pub keys: HashSet<Key>,
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

    /// Records the result of a write for `key`: the outcome, or `Unchanged` after a
    /// failure (logged).
    pub fn check(&mut self, key: Key, r: Result<Outcome, ApplyError>) -> Outcome {
        match r {
            Ok(o) => o,
            Err(e) => {
                self.failed(key, &e);
                Outcome::Unchanged
            }
        }
    }

    /// Records a failed write for `key`.
    pub fn failed(&mut self, key: Key, e: &dyn std::fmt::Display) {
        tracing::warn!(
            controller = self.what,
            cluster = %self.cluster,
            key = %format!("{}/{}", key.0, key.1),
            error = %e,
            "write failed; retrying with backoff"
        );
        self.keys.insert(key);
        self.count += 1;
    }
}
