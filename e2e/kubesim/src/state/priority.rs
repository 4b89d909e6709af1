//! Pod priority as kube-apiserver gives it: `scheduling.k8s.io/v1` PriorityClasses (the
//! registry strategy's validation and the built-in `system-*` classes) and the
//! `Priority` admission plugin, which resolves a new Pod's `priorityClassName` (or the
//! global default class) into `spec.priority` and `spec.preemptionPolicy`.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause, forbidden_field, invalid_field};
use crate::state::registry::{GroupResource, gr};
use crate::state::store::Store;

/// The built-in classes kube-apiserver creates: name, value, description.
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The highest value a user's class may have.
pub const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;

const PREEMPT_LOWER: &str = "PreemptLowerPriority";

fn classes_gr() -> GroupResource {
    gr("scheduling.k8s.io", "priorityclasses")
}

/// The built-in classes as stored objects.
pub fn system_classes(now: &str) -> Vec<Value> {
    SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": name, "uid": crate::state::meta::new_uid(), "creationTimestamp": now},
                   "value": value, "description": description, "preemptionPolicy": PREEMPT_LOWER})
        })
        .collect()
}

/// A class's defaults: `value` 0 (Go's int32 without omitempty), `preemptionPolicy`
/// PreemptLowerPriority.
pub fn class_defaults(obj: &mut Value) {
    if obj.get("value").is_none_or(Value::is_null) {
        obj["value"] = json!(0);
    }
    if obj
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        obj["preemptionPolicy"] = json!(PREEMPT_LOWER);
    }
}

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The validation and admission of a PriorityClass written over `old` (None: created).
pub fn validate_class(store: &Store, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let name = name_of(obj);
    let mut causes: Vec<Cause> = Vec::new();
    let value = obj.get("value").and_then(Value::as_i64);
    match value {
        None => causes.push(invalid_field("value", "Invalid value: must be an integer")),
        Some(v) if v < i64::from(i32::MIN) || v > i64::from(i32::MAX) => {
            causes.push(invalid_field(
                "value",
                format!("Invalid value: {v}: must be a 32-bit integer"),
            ))
        }
        _ => {}
    }
    let value = value.unwrap_or_default();
    let global = obj
        .get("globalDefault")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if name.starts_with("system-") {
        let known = SYSTEM_CLASSES
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, v, _)| *v);
        let why = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some(v) if v != value => Some(format!("value of {name} PriorityClass must be {v}")),
            Some(_) if global => Some(format!(
                "globalDefault of {name} PriorityClass must be false"
            )),
            Some(_) => None,
        };
        if let Some(why) = why {
            causes.push(forbidden_field(
                "metadata.name",
                &format!("priority class names with 'system-' prefix are reserved for system use only. error: {why}"),
            ));
        }
    } else if value > HIGHEST_USER_DEFINABLE {
        causes.push(forbidden_field(
            "value",
            &format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"
            ),
        ));
    }
    let policy = obj
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .unwrap_or(PREEMPT_LOWER);
    if !matches!(policy, PREEMPT_LOWER | "Never") {
        causes.push(invalid_field(
            "preemptionPolicy",
            format!("Unsupported value: \"{policy}\": supported values: \"Never\", \"PreemptLowerPriority\""),
        ));
    }
    if let Some(old) = old {
        if old.get("value") != obj.get("value") {
            causes.push(forbidden_field("value", "may not be changed in an update."));
        }
        if old.get("preemptionPolicy") != obj.get("preemptionPolicy") {
            causes.push(invalid_field(
                "preemptionPolicy",
                format!("Invalid value: {:?}: field is immutable", policy),
            ));
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "PriorityClass",
            "scheduling.k8s.io",
            name,
            causes,
        ));
    }
    // the Priority admission plugin: one global default at most
    if global
        && let Some((other, _)) = default_class(store)
        && (old.is_none() || other != name)
    {
        return Err(ApiError::forbidden_because(
            "scheduling.k8s.io",
            "priorityclasses",
            name,
            &format!(
                "PriorityClass {other} is already marked as default. Only one default can exist"
            ),
        ));
    }
    Ok(())
}

/// The global default class (the lowest value when a race left several): name and
/// the class.
fn default_class(store: &Store) -> Option<(String, Value)> {
    store
        .list(&classes_gr(), None)
        .into_iter()
        .filter(|c| c.value.get("globalDefault").and_then(Value::as_bool) == Some(true))
        .min_by_key(|c| c.value.get("value").and_then(Value::as_i64).unwrap_or(0))
        .map(|c| (c.name().to_string(), c.value.clone()))
}

/// The Priority admission plugin on a new Pod: resolves its class (or the global
/// default) into `spec.priority` and `spec.preemptionPolicy`. `Err` is kube's reason
/// for refusing the Pod (a 403).
pub fn admit_pod(store: &Store, pod: &mut Value) -> Result<(), String> {
    let class_name = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let (priority, policy) = if class_name.is_empty() {
        match default_class(store) {
            Some((name, c)) => {
                pod["spec"]["priorityClassName"] = json!(name);
                (
                    c.get("value").and_then(Value::as_i64).unwrap_or(0),
                    c.get("preemptionPolicy")
                        .and_then(Value::as_str)
                        .map(String::from),
                )
            }
            None => (0, Some(PREEMPT_LOWER.to_string())),
        }
    } else {
        let Some(c) = store.get(&classes_gr(), "", &class_name) else {
            return Err(format!("no PriorityClass with name {class_name} was found"));
        };
        (
            c.value.get("value").and_then(Value::as_i64).unwrap_or(0),
            c.value
                .get("preemptionPolicy")
                .and_then(Value::as_str)
                .map(String::from),
        )
    };
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
        ));
    }
    pod["spec"]["priority"] = json!(priority);
    if let Some(policy) = policy {
        if let Some(given) = pod
            .pointer("/spec/preemptionPolicy")
            .and_then(Value::as_str)
            && given != policy
        {
            return Err(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
        pod["spec"]["preemptionPolicy"] = json!(policy);
    }
    Ok(())
}

/// An update keeps what admission set on create (a client that sends a Pod without
/// them does not clear them).
pub fn keep_on_update(old: &Value, new: &mut Value) {
    for field in ["priority", "preemptionPolicy"] {
        if new.pointer(&format!("/spec/{field}")).is_none()
            && let Some(v) = old.pointer(&format!("/spec/{field}"))
            && new.get("spec").is_some_and(Value::is_object)
        {
            new["spec"][field] = v.clone();
        }
    }
}
