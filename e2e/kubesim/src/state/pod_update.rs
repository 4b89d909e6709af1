//! kube-apiserver's `ValidatePodUpdate` for the spec: a Pod's spec may change only in
//! its containers' and init containers' images, `activeDeadlineSeconds` (set, or
//! lowered), `tolerations` (added to, or an existing one's `tolerationSeconds`),
//! `schedulingGates` (removed), `terminationGracePeriodSeconds` (to 1 from a negative
//! value) and, while the Pod is gated, additions to `nodeSelector`. Anything else is
//! one `Forbidden` on `spec` with kube-apiserver's wording, so a client (the
//! propagation applier, `kubectl apply`) meets the refusal it would meet on a real
//! cluster. Status writes keep the spec ([`crate::verbs::update::merge_for_update`]) and
//! so pass; kubesim's own scheduler binds Pods in the store, not through an update.
//!
//! Not modelled: the node-affinity additions a gated Pod may also take, and the diff
//! kube-apiserver appends to the message (Go's `cmp.Diff`), for which kubesim names
//! the fields that changed.

use serde_json::{Value, json};

use crate::error::{Cause, forbidden_field, invalid_field, required_field};
use crate::state::immutable::same;

/// The fields kube-apiserver lists in its refusal (`updatablePodSpecFields`).
pub const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The field errors of an update of Pod `old` to `new` (both defaulted), in
/// kube-apiserver's order.
pub fn causes(old: &Value, new: &Value) -> Vec<Cause> {
    let (os, ns) = (spec(old), spec(new));
    let mut c = Vec::new();
    for list in ["containers", "initContainers"] {
        let (before, after) = (items(&os, list), items(&ns, list));
        if before.len() != after.len() {
            c.push(forbidden_field(
                &format!("spec.{list}"),
                "pod updates may not add or remove containers",
            ));
            return c;
        }
        for (i, ctr) in after.iter().enumerate() {
            let image = ctr.get("image").and_then(Value::as_str).unwrap_or_default();
            if image.is_empty() {
                c.push(required_field(&format!("spec.{list}[{i}].image")));
            } else if image.trim() != image {
                c.push(invalid_field(
                    &format!("spec.{list}[{i}].image"),
                    format!(
                        "Invalid value: {image:?}: must not have leading or trailing whitespace"
                    ),
                ));
            }
        }
    }
    if deadline(&os, &ns, &mut c) {
        return c;
    }
    c.extend(only_added_tolerations(&os, &ns));
    c.extend(only_deleted_gates(&os, &ns));
    let mut munged = ns.clone();
    for list in ["containers", "initContainers"] {
        let before = items(&os, list);
        if let Some(after) = munged.get_mut(list).and_then(Value::as_array_mut) {
            for (ctr, was) in after.iter_mut().zip(&before) {
                let Some(m) = ctr.as_object_mut() else {
                    continue; // not a container: the spec differs, refused below
                };
                match was.get("image") {
                    Some(image) => {
                        m.insert("image".into(), image.clone());
                    }
                    None => {
                        m.remove("image");
                    }
                }
            }
        }
    }
    for kept in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        put(&mut munged, kept, os.get(kept));
    }
    let grace = |s: &Value| {
        s.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if grace(&os).is_some_and(|g| g < 0) && grace(&munged) == Some(1) {
        put(
            &mut munged,
            "terminationGracePeriodSeconds",
            os.get("terminationGracePeriodSeconds"),
        );
    }
    if !items(&os, "schedulingGates").is_empty() {
        let selector = |s: &Value| s.get("nodeSelector").cloned().unwrap_or(json!({}));
        let (before, after) = (selector(&os), selector(&munged));
        if !same(Some(&before), Some(&after)) {
            c.extend(node_selector_mutations(&before, &after));
            put(&mut munged, "nodeSelector", os.get("nodeSelector"));
        }
    }
    let changed = changed_fields(&without_false(&os), &without_false(&munged));
    if !changed.is_empty() {
        c.push(forbidden_field(
            "spec",
            &format!(
                "pod updates may not change fields other than {UPDATABLE}\n(changed: {})",
                changed.join(", ")
            ),
        ));
    }
    c
}

fn spec(o: &Value) -> Value {
    o.get("spec").cloned().unwrap_or(json!({}))
}

fn items(spec: &Value, list: &str) -> Vec<Value> {
    spec.get(list)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Sets (or, for None, removes) `key` of `spec`.
fn put(spec: &mut Value, key: &str, v: Option<&Value>) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    match v {
        Some(v) => {
            m.insert(key.into(), v.clone());
        }
        None => {
            m.remove(key);
        }
    }
}

/// `activeDeadlineSeconds` may be set, or lowered, never raised or removed. True when
/// kube-apiserver stops validating there.
fn deadline(os: &Value, ns: &Value, c: &mut Vec<Cause>) -> bool {
    const FIELD: &str = "spec.activeDeadlineSeconds";
    let (before, after) = (
        os.get("activeDeadlineSeconds").filter(|v| !v.is_null()),
        ns.get("activeDeadlineSeconds").filter(|v| !v.is_null()),
    );
    match (before, after) {
        (_, Some(n)) => {
            let v = n.as_i64().unwrap_or(-1);
            if !(0..=i64::from(i32::MAX)).contains(&v) {
                c.push(invalid_field(
                    FIELD,
                    format!("Invalid value: {n}: must be between 0 and 2147483647, inclusive"),
                ));
                return true;
            }
            if before.and_then(Value::as_i64).is_some_and(|o| o < v) {
                c.push(invalid_field(
                    FIELD,
                    format!("Invalid value: {n}: must be less than or equal to previous value"),
                ));
                return true;
            }
            false
        }
        (Some(_), None) => {
            c.push(invalid_field(
                FIELD,
                "Invalid value: null: must not update from a positive integer to nil value",
            ));
            false
        }
        (None, None) => false,
    }
}

/// Every existing toleration must still be there; only its `tolerationSeconds` may
/// change (`validateOnlyAddedTolerations`).
fn only_added_tolerations(os: &Value, ns: &Value) -> Vec<Cause> {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let after: Vec<Value> = items(ns, "tolerations")
        .iter()
        .map(without_seconds)
        .collect();
    let kept = items(os, "tolerations").iter().all(|t| {
        let t = without_seconds(t);
        after.iter().any(|n| same(Some(&t), Some(n)))
    });
    if kept {
        Vec::new()
    } else {
        vec![forbidden_field(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )]
    }
}

/// Scheduling gates may only be removed (`validateOnlyDeletedSchedulingGates`).
fn only_deleted_gates(os: &Value, ns: &Value) -> Vec<Cause> {
    let name = |g: &Value| {
        g.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let before: Vec<String> = items(os, "schedulingGates").iter().map(name).collect();
    items(ns, "schedulingGates")
        .iter()
        .enumerate()
        .map(|(i, g)| (i, name(g)))
        .filter(|(_, n)| !before.contains(n))
        .map(|(i, n)| {
            forbidden_field(
                &format!("spec.schedulingGates[{i}].name"),
                &format!("only deletion is allowed, but found new scheduling gate '{n}'"),
            )
        })
        .collect()
}

/// A gated Pod's nodeSelector may gain keys, not lose or change them.
fn node_selector_mutations(before: &Value, after: &Value) -> Vec<Cause> {
    let Some(before) = before.as_object() else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = before.keys().collect();
    keys.sort();
    keys.into_iter()
        .filter(|k| after.get(k.as_str()) != before.get(k.as_str()))
        .map(|k| {
            let v = after.get(k.as_str()).cloned().unwrap_or(Value::Null);
            invalid_field(
                &format!("spec.nodeSelector[{k}]"),
                format!("Invalid value: {v}: only additions to spec.nodeSelector are allowed (no mutations or deletions)"),
            )
        })
        .collect()
}

/// `v` without `false` members: kube-apiserver stores a typed object, where a `false`
/// bool is Go's zero value and not written back, so `hostNetwork: false` and no
/// `hostNetwork` are the same spec. (For the few `*bool` fields, nil to false is a change
/// in kube-apiserver that kubesim lets through.)
fn without_false(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| **v != Value::Bool(false))
                .map(|(k, v)| (k.clone(), without_false(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_false).collect()),
        other => other.clone(),
    }
}

/// The spec fields (top level, sorted) that differ semantically.
fn changed_fields(os: &Value, ns: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let (a, b) = (
        os.as_object().unwrap_or(&empty),
        ns.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !same(a.get(k.as_str()), b.get(k.as_str())))
        .map(|k| format!("spec.{k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"spec": spec})
    }

    fn base() -> Value {
        json!({"containers": [{"name": "c", "image": "nginx:1"}], "nodeName": "node-a",
               "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
               "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]})
    }

    fn with(f: impl FnOnce(&mut Value)) -> Value {
        let mut s = base();
        f(&mut s);
        s
    }

    fn forbidden_spec(changed: &str) -> (String, String) {
        (
            "spec".into(),
            format!(
                "Forbidden: pod updates may not change fields other than {UPDATABLE}\n(changed: {changed})"
            ),
        )
    }

    #[test]
    fn pod_update_table() {
        type Case = (&'static str, Value, Value, Vec<(String, String)>);
        let msg = |f: &str, m: &str| (f.to_string(), m.to_string());
        let cases: Vec<Case> = vec![
            ("nothing changed", base(), base(), vec![]),
            (
                "an image",
                base(),
                with(|s| s["containers"][0]["image"] = json!("nginx:2")),
                vec![],
            ),
            (
                "an image and a port",
                base(),
                with(|s| {
                    s["containers"][0]["image"] = json!("nginx:2");
                    s["containers"][0]["ports"] = json!([{"containerPort": 80}]);
                }),
                vec![forbidden_spec("spec.containers")],
            ),
            (
                "an env var",
                base(),
                with(|s| s["containers"][0]["env"] = json!([{"name": "A", "value": "1"}])),
                vec![forbidden_spec("spec.containers")],
            ),
            (
                "a container added",
                base(),
                with(|s| {
                    s["containers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "d", "image": "x"}))
                }),
                vec![msg(
                    "spec.containers",
                    "Forbidden: pod updates may not add or remove containers",
                )],
            ),
            (
                "a container that is not an object",
                base(),
                with(|s| s["containers"] = json!(["nginx:2"])),
                vec![
                    msg("spec.containers[0].image", "Required value"),
                    forbidden_spec("spec.containers"),
                ],
            ),
            (
                "an image emptied",
                base(),
                with(|s| s["containers"][0]["image"] = json!("")),
                vec![msg("spec.containers[0].image", "Required value")],
            ),
            (
                "an image with a space",
                base(),
                with(|s| s["containers"][0]["image"] = json!("nginx:2 ")),
                vec![msg(
                    "spec.containers[0].image",
                    "Invalid value: \"nginx:2 \": must not have leading or trailing whitespace",
                )],
            ),
            (
                "nodeName dropped (a PUT of the manifest as written)",
                base(),
                with(|s| {
                    s.as_object_mut().unwrap().remove("nodeName");
                }),
                vec![forbidden_spec("spec.nodeName")],
            ),
            (
                "a toleration added, and an existing one's seconds changed",
                base(),
                with(|s| {
                    s["tolerations"][0]["tolerationSeconds"] = json!(60);
                    s["tolerations"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"key": "x", "operator": "Exists"}));
                }),
                vec![],
            ),
            (
                "a toleration removed",
                base(),
                with(|s| s["tolerations"] = json!([])),
                vec![msg(
                    "spec.tolerations",
                    "Forbidden: existing toleration can not be modified except its tolerationSeconds",
                )],
            ),
            (
                "activeDeadlineSeconds set",
                base(),
                with(|s| s["activeDeadlineSeconds"] = json!(600)),
                vec![],
            ),
            (
                "activeDeadlineSeconds lowered",
                with(|s| s["activeDeadlineSeconds"] = json!(600)),
                with(|s| s["activeDeadlineSeconds"] = json!(60)),
                vec![],
            ),
            (
                "activeDeadlineSeconds raised",
                with(|s| s["activeDeadlineSeconds"] = json!(60)),
                with(|s| s["activeDeadlineSeconds"] = json!(600)),
                vec![msg(
                    "spec.activeDeadlineSeconds",
                    "Invalid value: 600: must be less than or equal to previous value",
                )],
            ),
            (
                "activeDeadlineSeconds removed",
                with(|s| s["activeDeadlineSeconds"] = json!(60)),
                base(),
                vec![msg(
                    "spec.activeDeadlineSeconds",
                    "Invalid value: null: must not update from a positive integer to nil value",
                )],
            ),
            (
                "activeDeadlineSeconds negative",
                base(),
                with(|s| s["activeDeadlineSeconds"] = json!(-1)),
                vec![msg(
                    "spec.activeDeadlineSeconds",
                    "Invalid value: -1: must be between 0 and 2147483647, inclusive",
                )],
            ),
            (
                "a grace period to 1 from a negative one",
                with(|s| s["terminationGracePeriodSeconds"] = json!(-1)),
                with(|s| s["terminationGracePeriodSeconds"] = json!(1)),
                vec![],
            ),
            (
                "a grace period changed otherwise",
                base(),
                with(|s| s["terminationGracePeriodSeconds"] = json!(5)),
                vec![forbidden_spec("spec.terminationGracePeriodSeconds")],
            ),
            (
                "a scheduling gate removed, a node selector added while gated",
                with(|s| s["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}])),
                with(|s| {
                    s["schedulingGates"] = json!([{"name": "b"}]);
                    s["nodeSelector"] = json!({"zone": "z1"});
                }),
                vec![],
            ),
            (
                "a scheduling gate added",
                with(|s| s["schedulingGates"] = json!([{"name": "a"}])),
                with(|s| s["schedulingGates"] = json!([{"name": "a"}, {"name": "c"}])),
                vec![msg(
                    "spec.schedulingGates[1].name",
                    "Forbidden: only deletion is allowed, but found new scheduling gate 'c'",
                )],
            ),
            (
                "a gated Pod's node selector changed",
                with(|s| {
                    s["schedulingGates"] = json!([{"name": "a"}]);
                    s["nodeSelector"] = json!({"zone": "z1"});
                }),
                with(|s| {
                    s["schedulingGates"] = json!([{"name": "a"}]);
                    s["nodeSelector"] = json!({"zone": "z2"});
                }),
                vec![msg(
                    "spec.nodeSelector[zone]",
                    "Invalid value: \"z2\": only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                )],
            ),
            (
                "a node selector added to a Pod that is not gated",
                base(),
                with(|s| s["nodeSelector"] = json!({"zone": "z1"})),
                vec![forbidden_spec("spec.nodeSelector")],
            ),
            (
                "empty, false and absent are the same",
                base(),
                with(|s| {
                    s["volumes"] = json!([]);
                    s["nodeSelector"] = json!({});
                    s["hostname"] = json!("");
                    s["hostNetwork"] = json!(false);
                    s["containers"][0]["tty"] = json!(false);
                }),
                vec![],
            ),
        ];
        for (name, old, new, want) in cases {
            let got: Vec<(String, String)> = causes(&pod(old), &pod(new))
                .into_iter()
                .map(|c| (c.field, c.message))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
