//! Resources stored as another resource: events.k8s.io/v1 Events are core v1 Events, one
//! store as in kube-apiserver, converted with its field mapping on the way in and out.
//! Every other resource is stored as it is served (CRD versions differ only in apiVersion).

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::state::registry::ResourceType;
use crate::state::selectors::FieldSelector;

/// events.k8s.io/v1 field → core v1 field (kube-apiserver's `Convert_v1_Event_To_core_Event`;
/// the other fields — eventTime, series, reportingInstance, related, action, reason, type —
/// have the same name in both).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn is_events_api(rt: &ResourceType) -> bool {
    rt.group == "events.k8s.io" && rt.plural == "events"
}

/// Renames top-level fields `from` → `to`. A field of the target shape in the source means
/// nothing there (kube-apiserver's decoder drops it), so it is dropped first.
fn rename(mut v: Value, pairs: &[(&str, &str)], api_version: &str) -> Value {
    if let Some(m) = v.as_object_mut() {
        for (_, to) in pairs {
            m.remove(*to);
        }
        for (from, to) in pairs {
            if let Some(x) = m.remove(*from) {
                m.insert((*to).to_string(), x);
            }
        }
        m.insert("apiVersion".into(), json!(api_version));
    }
    v
}

/// An object in `rt`'s shape as it is to be stored.
pub fn to_storage(rt: &ResourceType, v: Value) -> Value {
    if is_events_api(rt) {
        rename(v, EVENT_FIELDS, "v1")
    } else {
        v
    }
}

/// A stored object in `rt`'s shape (apiVersion of `rt` when converted, else unchanged).
pub fn from_storage<'a>(rt: &ResourceType, v: &'a Value) -> Cow<'a, Value> {
    if is_events_api(rt) {
        let back: Vec<(&str, &str)> = EVENT_FIELDS.iter().map(|(a, b)| (*b, *a)).collect();
        Cow::Owned(rename(v.clone(), &back, &rt.api_version()))
    } else {
        Cow::Borrowed(v)
    }
}

/// One field label a type's selectors may name.
#[derive(Clone, Copy)]
struct Label {
    /// The label, as a client writes it.
    name: &'static str,
    /// The stored object's path it reads (`None`: accepted, always empty).
    path: Option<&'static str>,
    /// What it reads as when the object lacks the field: the value kube-apiserver
    /// defaults it to, or formats its zero value as.
    absent: &'static str,
    /// A second path read when the first is absent or empty.
    or_path: Option<&'static str>,
}

/// A label that reads the path of its name.
const fn same(name: &'static str) -> Label {
    at(name, name)
}

/// A label that reads `path`.
const fn at(name: &'static str, path: &'static str) -> Label {
    Label {
        name,
        path: Some(path),
        absent: "",
        or_path: None,
    }
}

/// A label that reads its name's path, `absent` when the object lacks it.
const fn or(name: &'static str, absent: &'static str) -> Label {
    Label {
        absent,
        ..same(name)
    }
}

const NAME: Label = same("metadata.name");
const NAMESPACE: Label = same("metadata.namespace");

/// Field labels per type, as kube-apiserver's field label conversion functions and
/// `ToSelectableFields` define them (pkg/apis/core/v1/conversion.go, the registries'
/// strategies). `None`: the type takes `metadata.name` and `metadata.namespace` only
/// (`runtime.DefaultMetaV1FieldSelectorConversion`); CRDs are [`crd_labels`].
fn labels(rt: &ResourceType) -> Option<&'static [Label]> {
    const PODS: &[Label] = &[
        NAME,
        NAMESPACE,
        same("spec.nodeName"),
        // restartPolicy and schedulerName are defaulted on every write (`defaults`)
        same("spec.restartPolicy"),
        same("spec.schedulerName"),
        // what admission (ServiceAccount) and PrepareForCreate would have set, and a
        // bool's zero value, which kubesim does not store
        or("spec.serviceAccountName", "default"),
        or("spec.hostNetwork", "false"),
        or("status.phase", "Pending"),
        same("status.podIP"),
        // accepted by the conversion, absent from the selectable set: always empty
        Label {
            name: "status.podIPs",
            path: None,
            absent: "",
            or_path: None,
        },
        same("status.nominatedNodeName"),
        // old v1 clients' name for spec.nodeName
        at("spec.host", "spec.nodeName"),
    ];
    const NODES: &[Label] = &[NAME, or("spec.unschedulable", "false")];
    const NAMESPACES: &[Label] = &[same("status.phase"), NAME];
    // Secrets' and Services' types are defaulted on write (`kinds`)
    const SECRETS: &[Label] = &[same("type"), NAMESPACE, NAME];
    const SERVICES: &[Label] = &[NAMESPACE, NAME, same("spec.clusterIP"), same("spec.type")];
    const CORE_EVENTS: &[Label] = &[
        same("involvedObject.kind"),
        same("involvedObject.namespace"),
        same("involvedObject.name"),
        same("involvedObject.uid"),
        same("involvedObject.apiVersion"),
        same("involvedObject.resourceVersion"),
        same("involvedObject.fieldPath"),
        same("reason"),
        same("reportingComponent"),
        // the reporting controller when there is no source (events.k8s.io Events)
        Label {
            or_path: Some("reportingComponent"),
            ..at("source", "source.component")
        },
        same("type"),
        NAMESPACE,
        NAME,
    ];
    // events.k8s.io/v1 labels, read on the stored core Event
    const EVENTS: &[Label] = &[
        same("reason"),
        at("regarding.kind", "involvedObject.kind"),
        at("regarding.namespace", "involvedObject.namespace"),
        at("regarding.name", "involvedObject.name"),
        at("regarding.uid", "involvedObject.uid"),
        at("regarding.apiVersion", "involvedObject.apiVersion"),
        at(
            "regarding.resourceVersion",
            "involvedObject.resourceVersion",
        ),
        at("regarding.fieldPath", "involvedObject.fieldPath"),
        at("reportingController", "reportingComponent"),
        same("type"),
        NAMESPACE,
        NAME,
    ];
    // JobToSelectableFields: status.successful is status.succeeded
    const JOBS: &[Label] = &[
        NAME,
        NAMESPACE,
        Label {
            absent: "0",
            ..at("status.successful", "status.succeeded")
        },
    ];
    Some(match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => PODS,
        ("", "nodes") => NODES,
        ("", "namespaces") => NAMESPACES,
        ("", "secrets") => SECRETS,
        ("", "services") => SERVICES,
        ("", "events") => CORE_EVENTS,
        ("events.k8s.io", "events") => EVENTS,
        ("batch", "jobs") => JOBS,
        _ => return None,
    })
}

/// A CRD's labels (apiextensions' `crConverter.ConvertFieldLabel`): `metadata.name`, and
/// `metadata.namespace` when its resources are namespaced. (`selectableFields` are not
/// served.)
fn crd_labels(rt: &ResourceType) -> &'static [Label] {
    if rt.namespaced {
        &[NAME, NAMESPACE]
    } else {
        &[NAME]
    }
}

/// A field selector of a request on `rt`, each label checked against the type's and
/// turned into the stored object's path (`regarding.name` on events.k8s.io reads
/// `involvedObject.name`; `source` on core Events reads `source.component`). A label the
/// type does not have is a 400 with kube-apiserver's message.
pub fn field_selector(rt: &ResourceType, s: &str) -> ApiResult<FieldSelector> {
    let mut fs = FieldSelector::parse(s)?;
    // a type with labels of its own (CRDs included) names the one it lacks; the others
    // say which two they take (`DefaultMetaV1FieldSelectorConversion`)
    let (table, own) = match (rt.crd.is_some(), labels(rt)) {
        (true, _) => (crd_labels(rt), true),
        (false, Some(t)) => (t, true),
        (false, None) => (&[NAME, NAMESPACE][..], false),
    };
    let unknown = |l: &str| match own {
        true => format!("field label not supported: {l}"),
        false => format!(
            "{l:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
    };
    for term in &mut fs.0 {
        let name = term.path.take().unwrap_or_default();
        let Some(label) = table.iter().find(|l| l.name == name) else {
            return Err(ApiError::bad_request(unknown(&name)));
        };
        term.path = label.path.map(String::from);
        term.absent = label.absent;
        term.or_path = label.or_path;
    }
    Ok(fs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::registry::Registry;

    #[test]
    fn events_round_trip_between_the_two_apis() {
        let reg = Registry::builtin();
        let ev = reg.get("events.k8s.io", "v1", "events").unwrap();
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Service", "name": "web"}, "note": "hi", "reportingController": "causeway.io/mcs",
            "reportingInstance": "hub-1", "eventTime": "2025-01-01T00:00:00.000000Z", "series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00.000000Z"},
            "deprecatedCount": 3, "action": "Export", "reason": "Conflict", "type": "Warning", "message": "dropped"});
        let core = to_storage(&ev, new.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["reportingComponent"], "causeway.io/mcs");
        assert_eq!(core["count"], 3);
        assert_eq!(core["series"]["count"], 2);
        assert!(core.get("note").is_none() && core.get("regarding").is_none());
        let mut want = new;
        want.as_object_mut().unwrap().remove("message");
        assert_eq!(from_storage(&ev, &core).into_owned(), want);
        let fs = field_selector(
            &ev,
            "regarding.name=web,reportingController=causeway.io/mcs",
        )
        .unwrap();
        assert!(fs.matches(&core));
        let core_rt = reg.get("", "v1", "events").unwrap();
        assert!(matches!(from_storage(&core_rt, &core), Cow::Borrowed(_)));
    }
}
