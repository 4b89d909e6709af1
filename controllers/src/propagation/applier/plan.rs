//! The work applier's pure step: one Work and what the member holds → the writes to
//! make ([`plan`]); once they are made, [`super::report`] gives the Work's status.
//! No client, no clock.

use std::collections::BTreeMap;

use causeway_crds::federation::ConflictResolution;
use causeway_crds::federation::work::{Work, conditions};
use causeway_crds::well_known::{FIELD_MANAGER, annotations, labels};
use causeway_runtime::apply::contains;

use crate::propagation::render::set_meta;
use kube::ResourceExt;
use serde_json::{Value, json};

/// Why a manifest is not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotApplied {
    /// One of [`conditions`]' reasons.
    pub reason: String,
    /// What went wrong and what to do.
    pub message: String,
}

impl NotApplied {
    /// A reason and message.
    pub fn new(reason: &str, message: impl Into<String>) -> Self {
        NotApplied {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// A manifest's kind as the member serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// Plural resource name.
    pub plural: String,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
}

/// One manifest of the Work, and what the member has for it.
#[derive(Clone, Debug)]
pub struct Observed {
    /// How the member serves the manifest's kind (Err: it does not, and why).
    pub served: Result<Served, String>,
    /// The member object (from the cache or a live GET), None when absent; Err when
    /// it could not be read.
    pub found: Result<Option<Value>, NotApplied>,
}

/// An object a write is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjRef {
    /// apiVersion.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjRef {
    /// The object's reference, from its JSON.
    pub fn of(obj: &Value) -> ObjRef {
        let s = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        ObjRef {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
        }
    }
}

impl std::fmt::Display for ObjRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// A member write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Server-side apply `body` for manifest `ordinal`.
    Apply {
        /// Index in spec.workload.manifests.
        ordinal: usize,
        /// What to apply.
        body: Value,
        /// The member object exists (an error is then an update's, not a create's).
        exists: bool,
        /// The manifest changed since it was last applied: try it with dryRun=All first,
        /// so a change refused as immutable is caught before anything is written.
        dry_run_first: bool,
        /// The manifest allows delete-and-recreate when a change is immutable.
        recreate: bool,
        /// Where `body` carries the member's own count (`causeway.io/retain-replicas`,
        /// with the resourceVersion it was read at): a 409 is then a stale read, and
        /// the count is read again.
        retained: Option<String>,
        /// The object exists and was not this Work's: it is taken over, and the other
        /// managers' ownership of it is dropped once applied (see `write::hand_over`).
        adopt: bool,
    },
    /// Delete the object (Background propagation); `ordinal` when it is a manifest's.
    Delete(ObjRef, Option<usize>),
    /// Strip Causeway's label and annotations, leaving the object in the member.
    Orphan(ObjRef, Option<usize>),
}

/// What one round does for one Work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The member writes.
    pub actions: Vec<Action>,
    /// Per manifest, what is reported when no write fails (a failed write replaces it).
    pub results: Vec<Result<(), NotApplied>>,
    /// The Work is being deleted: remove its finalizer once the actions succeeded.
    pub release: bool,
    /// The Work is being deleted.
    pub deleting: bool,
}

/// The inputs of [`plan`] for one Work.
pub struct Input<'a> {
    /// The member cluster's name.
    pub cluster: &'a str,
    /// The Work.
    pub work: &'a Work,
    /// The member's Cluster is Ready.
    pub ready: bool,
    /// One per manifest.
    pub manifests: &'a [Observed],
    /// Member objects of this Work (labelled managed, annotated with it) that no
    /// manifest names any more.
    pub leftovers: &'a [Value],
}

/// `<namespace>/<name>` of a Work: the value of the member objects' WORK annotation.
pub fn work_ref(work: &Work) -> String {
    format!(
        "{}/{}",
        work.namespace().unwrap_or_default(),
        work.name_any()
    )
}

/// A stable hash of a manifest (FNV-1a 64 of its JSON, keys sorted), hex.
pub fn manifest_hash(manifest: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canonical(manifest).to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, Value> =
                m.iter().map(|(k, v)| (k, canonical(v))).collect();
            json!(sorted)
        }
        Value::Array(l) => Value::Array(l.iter().map(canonical).collect()),
        _ => v.clone(),
    }
}

fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// The value of annotation `key` on `obj`.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

pub(crate) fn terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// The managed fields of a member object Causeway took over once the other managers'
/// entries for its main resource are dropped: Causeway's own, and every manager's
/// subresource entries (status, scale). None when there is nothing to drop, or
/// nothing of Causeway's to keep (a list left empty would not replace the stored one).
pub fn others_dropped(obj: &Value) -> Option<Vec<Value>> {
    let entries = obj.pointer("/metadata/managedFields")?.as_array()?;
    let kept: Vec<Value> = entries
        .iter()
        .filter(|e| {
            e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
                || e.get("subresource")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
        })
        .cloned()
        .collect();
    let mine = kept
        .iter()
        .any(|e| e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER));
    (mine && kept.len() < entries.len()).then_some(kept)
}

/// True when `obj` carries `causeway.io/managed=true` and the annotation of `work`.
pub fn belongs_to(obj: &Value, work: &str) -> bool {
    label(obj, labels::MANAGED) == Some(labels::MANAGED_VALUE)
        && annotation(obj, annotations::WORK) == Some(work)
}

/// What is applied for `manifest`: the manifest without server-set metadata and
/// status, labelled managed, annotated with its Work and hash. When the manifest asks
/// to retain the member's replica count (at `replicas_at`: `spec.replicas`, or where
/// its kind's interpreter says) and the object exists (`existing`), the count is the
/// member's: leaving it out would have server-side apply remove the field Causeway
/// owns since the create (a Deployment would fall back to 1 replica). The count is
/// copied from a read that may be stale (the member's autoscaler may have changed it
/// since), so the apply then carries the object's resourceVersion: the member refuses
/// it (409) if the object changed since, and the next round copies the new count.
pub fn body(manifest: &Value, work: &str, existing: Option<&Value>, replicas_at: &str) -> Value {
    let mut b = manifest.clone();
    let retain = retains(manifest);
    if let Some(m) = b.as_object_mut() {
        m.remove("status");
    }
    if let Some(md) = b.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "ownerReferences",
            "finalizers",
        ] {
            md.remove(k);
        }
    }
    // (a manifest whose metadata or its maps are not objects gets them as objects:
    // indexing into them would panic)
    set_meta(&mut b, "labels", labels::MANAGED, labels::MANAGED_VALUE);
    set_meta(&mut b, "annotations", annotations::WORK, work);
    set_meta(
        &mut b,
        "annotations",
        annotations::APPLIED_HASH,
        &manifest_hash(manifest),
    );
    if retain && let Some(obj) = existing {
        retain_from(&mut b, obj, replicas_at);
    }
    b
}

/// Whether the manifest keeps the member's replica count once the object exists.
fn retains(manifest: &Value) -> bool {
    labels::retains_replicas(manifest)
}

/// Copies into `body` the member object's (`obj`) count at `replicas_at` (or leaves it
/// out when `obj` has none there), with the resourceVersion it was read at as the
/// apply's precondition.
pub fn retain_from(body: &mut Value, obj: &Value, replicas_at: &str) {
    let Some((parent, key)) = replicas_at.rsplit_once('/') else {
        return;
    };
    let Some(parent) = body.pointer_mut(parent).and_then(Value::as_object_mut) else {
        return;
    };
    // a JSON pointer's key with its escapes (RFC 6901) undone
    let key = key.replace("~1", "/").replace("~0", "~");
    match obj.pointer(replicas_at) {
        Some(theirs) => parent.insert(key, theirs.clone()),
        None => parent.remove(&key),
    };
    if let Some(rv) = obj.pointer("/metadata/resourceVersion").cloned()
        && let Some(md) = body.get_mut("metadata").and_then(Value::as_object_mut)
    {
        md.insert("resourceVersion".into(), rv);
    }
}

/// The manifest's valid conflict-resolution annotation, else the Work's (which the
/// hub rendered from the same annotation, or the policy's when it was invalid: F.41).
fn overwrite(work: &Work, manifest: &Value) -> bool {
    annotation(manifest, annotations::CONFLICT_RESOLUTION)
        .and_then(ConflictResolution::from_annotation)
        .or(work.spec.conflict_resolution)
        == Some(ConflictResolution::Overwrite)
}

/// A Namespace the hub made on its own (`hub/namespaces.rs`): the manifest of the
/// hub's namespace Work, and the member namespace it created (the label goes on at
/// creation only, so a namespace the member had never carries it).
fn made_by_hub(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str) == Some("Namespace")
        && label(v, labels::AUTO_NAMESPACE).is_some()
}

/// Manifest `ordinal` is unusable (no apiVersion, kind or name).
fn malformed(ordinal: usize) -> NotApplied {
    NotApplied::new(
        conditions::REASON_APPLIED_FAILED,
        format!(
            "manifest {ordinal} lacks apiVersion, kind or metadata.name: fix the resource template"
        ),
    )
}

/// The conflict message of F.40.
pub fn conflict_message(obj: &ObjRef, cluster: &str) -> String {
    format!(
        "{} {}/{} already exists in cluster {cluster} and is not managed by Causeway; set conflictResolution: Overwrite on the policy or annotate the template {}=overwrite to adopt it",
        obj.kind,
        obj.namespace,
        obj.name,
        annotations::CONFLICT_RESOLUTION
    )
}

/// Pure: the writes for one Work.
pub fn plan(input: &Input) -> Plan {
    let work = input.work;
    let wref = work_ref(work);
    let manifests = &work.spec.workload.manifests;
    let mut out = Plan {
        deleting: work.metadata.deletion_timestamp.is_some(),
        ..Default::default()
    };
    if out.deleting {
        return plan_deletion(input, &wref, out);
    }
    let suspended = work.spec.suspend_dispatching == Some(true);
    for (i, (m, seen)) in manifests.iter().zip(input.manifests).enumerate() {
        let m = &m.0;
        let r = ObjRef::of(m);
        let result = if !input.ready {
            Err(NotApplied::new(
                conditions::REASON_CLUSTER_NOT_READY,
                format!(
                    "cluster {} is not Ready: nothing is applied until it is",
                    input.cluster
                ),
            ))
        } else if r.api_version.is_empty() || r.kind.is_empty() || r.name.is_empty() {
            Err(malformed(i))
        } else if let Err(e) = &seen.served {
            Err(NotApplied::new(
                conditions::REASON_APPLIED_FAILED,
                e.clone(),
            ))
        } else {
            match &seen.found {
                Err(e) => Err(e.clone()),
                Ok(found) => {
                    manifest_step(input, i, m, &r, found.as_ref(), &wref, suspended).map(|a| {
                        if let Some(a) = a {
                            out.actions.push(a);
                        }
                    })
                }
            }
        };
        out.results.push(result);
    }
    if input.ready && !suspended {
        for l in input.leftovers {
            if !terminating(l) {
                out.actions.push(Action::Delete(ObjRef::of(l), None));
            }
        }
    }
    out
}

fn manifest_step(
    input: &Input,
    i: usize,
    m: &Value,
    r: &ObjRef,
    found: Option<&Value>,
    wref: &str,
    suspended: bool,
) -> Result<Option<Action>, NotApplied> {
    let recreate = annotation(m, annotations::RECREATE_ON_IMMUTABLE) == Some("true");
    let replicas_at = causeway_crds::federation::interpreter::replicas_pointer(input.work, m);
    let Some(obj) = found else {
        if suspended {
            return Err(NotApplied::new(
                conditions::REASON_SUSPEND_DISPATCHING,
                format!(
                    "{r} is not in cluster {} yet: dispatching is suspended",
                    input.cluster
                ),
            ));
        }
        return Ok(Some(Action::Apply {
            ordinal: i,
            body: body(m, wref, None, replicas_at),
            exists: false,
            dry_run_first: false,
            recreate,
            retained: None,
            adopt: false,
        }));
    };
    let managed = label(obj, labels::MANAGED);
    // the hub's namespace Work keeps only the namespaces it made (and those a Work
    // made by it left); one the member had, or another Work manages, exists, which is
    // all it is for: it is left as it is
    if made_by_hub(m)
        && !belongs_to(obj, wref)
        && !(made_by_hub(obj) && managed != Some(labels::MANAGED_VALUE))
    {
        return Ok(None);
    }
    if managed == Some("false") {
        return Err(NotApplied::new(
            conditions::REASON_MANAGED_LABEL_FALSE,
            format!(
                "{r} in cluster {} is labelled {}=false: Causeway leaves it alone; remove the label to let Causeway manage it",
                input.cluster,
                labels::MANAGED
            ),
        ));
    }
    if !belongs_to(obj, wref) && !overwrite(input.work, m) && !made_by_hub(obj) {
        let message = match annotation(obj, annotations::WORK) {
            Some(other) if managed == Some(labels::MANAGED_VALUE) => format!(
                "{r} in cluster {} is managed by Work {other}; set conflictResolution: Overwrite on the policy to take it over",
                input.cluster
            ),
            _ => conflict_message(r, input.cluster),
        };
        return Err(NotApplied::new(conditions::REASON_CONFLICT, message));
    }
    if terminating(obj) {
        return Err(NotApplied::new(
            conditions::REASON_WAITING_FOR_REMOVAL,
            format!(
                "{r} in cluster {} is being deleted; it is applied again once it is gone",
                input.cluster
            ),
        ));
    }
    let want = body(m, wref, Some(obj), replicas_at);
    if contains(obj, &want) {
        return Ok(None);
    }
    if suspended {
        return Err(NotApplied::new(
            conditions::REASON_SUSPEND_DISPATCHING,
            format!(
                "{r} in cluster {} differs from the Work: dispatching is suspended",
                input.cluster
            ),
        ));
    }
    let changed = annotation(obj, annotations::APPLIED_HASH) != Some(manifest_hash(m).as_str());
    let retained = retains(m).then(|| replicas_at.to_string());
    Ok(Some(Action::Apply {
        ordinal: i,
        body: want,
        exists: true,
        dry_run_first: changed,
        recreate,
        retained,
        adopt: !belongs_to(obj, wref),
    }))
}

fn plan_deletion(input: &Input, wref: &str, mut out: Plan) -> Plan {
    if !input.ready {
        let why = NotApplied::new(
            conditions::REASON_CLUSTER_NOT_READY,
            format!(
                "cluster {} is not Ready: its objects are removed once it is",
                input.cluster
            ),
        );
        out.results = vec![Err(why); input.manifests.len()];
        return out;
    }
    let preserve = input.work.spec.preserve_resources_on_deletion == Some(true);
    let found = input
        .manifests
        .iter()
        .enumerate()
        .map(|(i, o)| (Some(i), o.found.clone()))
        .chain(input.leftovers.iter().map(|l| (None, Ok(Some(l.clone())))));
    let (mut remaining, mut unread) = (false, false);
    for (ordinal, f) in found {
        let result = match f {
            Err(e) => {
                remaining = true;
                unread = true;
                Err(e)
            }
            Ok(Some(obj)) if belongs_to(&obj, wref) => {
                remaining = true;
                let r = ObjRef::of(&obj);
                if preserve {
                    out.actions.push(Action::Orphan(r, ordinal));
                    Ok(())
                } else if terminating(&obj) {
                    Err(NotApplied::new(
                        conditions::REASON_WAITING_FOR_REMOVAL,
                        format!("{r} in cluster {} is still terminating", input.cluster),
                    ))
                } else {
                    out.actions.push(Action::Delete(r, ordinal));
                    Ok(())
                }
            }
            // gone, or never Causeway's: nothing to do
            Ok(_) => Ok(()),
        };
        if ordinal.is_some() {
            out.results.push(result);
        }
    }
    // orphaning is done once its patches land (an object that could not be read is
    // not orphaned yet: G.46); deletion once a live read finds nothing
    out.release = !remaining || (preserve && !unread);
    out
}
