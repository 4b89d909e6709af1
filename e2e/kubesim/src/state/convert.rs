//! Resources stored as another resource: events.k8s.io/v1 Events are core v1 Events, one
//! store as in kube-apiserver, converted with its field mapping on the way in and out.
//! Every other resource is stored as it is served (CRD versions differ only in apiVersion).

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::error::ApiResult;
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

fn is_core_events(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "events"
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

/// A field selector of a request on `rt`, with its field labels turned into paths of the
/// stored object: `regarding.name` on events.k8s.io is `involvedObject.name`; `source` on
/// core Events is `source.component` (kube-apiserver's field label conversions).
pub fn field_selector(rt: &ResourceType, s: &str) -> ApiResult<FieldSelector> {
    let mut fs = FieldSelector::parse(s)?;
    for (path, _, _) in &mut fs.0 {
        if is_events_api(rt) {
            for (from, to) in EVENT_FIELDS {
                if let Some(rest) = path.strip_prefix(from)
                    && (rest.is_empty() || rest.starts_with('.'))
                {
                    *path = format!("{to}{rest}");
                    break;
                }
            }
        } else if is_core_events(rt) && path == "source" {
            *path = "source.component".into();
        }
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
