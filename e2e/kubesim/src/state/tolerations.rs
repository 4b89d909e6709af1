//! The `DefaultTolerationSeconds` admission plugin (on by default in kube-apiserver): a
//! Pod that does not tolerate `node.kubernetes.io/not-ready:NoExecute` (or
//! `…/unreachable`) gets a toleration of it for 300 s, so its node's controller evicts
//! it five minutes after the node stops reporting, not at once. A toleration with an
//! empty key tolerates every key, and one with an empty effect every effect.

use serde_json::{Value, json};

/// The taints the plugin adds tolerations for.
const TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// How long the added tolerations tolerate them (the plugin's flag defaults).
const SECONDS: i64 = 300;

/// Adds the default tolerations a Pod lacks (create and update, as the plugin does).
pub fn admit_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let have: Vec<Value> = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tolerates = |taint: &str| {
        have.iter().any(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        })
    };
    let added: Vec<Value> = TAINTS
        .iter()
        .filter(|taint| !tolerates(taint))
        .map(|taint| {
            json!({"key": taint, "operator": "Exists", "effect": "NoExecute",
                   "tolerationSeconds": SECONDS})
        })
        .collect();
    if added.is_empty() {
        return;
    }
    let mut all = have;
    all.extend(added);
    spec.insert("tolerations".into(), Value::Array(all));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default(taint: &str) -> Value {
        json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    }

    /// The plugin's cases: what a Pod tolerates decides which defaults it gets.
    #[test]
    fn a_pod_gets_the_default_tolerations_it_lacks() {
        let not_ready = default(TAINTS[0]);
        let unreachable = default(TAINTS[1]);
        let custom = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60});
        let gpu = json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"});
        let cases: Vec<(&str, Option<Value>, Value)> = vec![
            ("none", None, json!([not_ready, unreachable])),
            (
                "an empty list",
                Some(json!([])),
                json!([not_ready, unreachable]),
            ),
            (
                "another key: kept first",
                Some(json!([gpu])),
                json!([gpu, not_ready, unreachable]),
            ),
            (
                "its own not-ready toleration (60 s) is kept",
                Some(json!([custom])),
                json!([custom, unreachable]),
            ),
            (
                "not-ready for NoSchedule only does not count",
                Some(json!([{"key": TAINTS[0], "operator": "Exists", "effect": "NoSchedule"}])),
                json!([{"key": TAINTS[0], "operator": "Exists", "effect": "NoSchedule"}, not_ready, unreachable]),
            ),
            (
                "an empty effect tolerates NoExecute",
                Some(json!([{"key": TAINTS[1], "operator": "Exists"}])),
                json!([{"key": TAINTS[1], "operator": "Exists"}, not_ready]),
            ),
            (
                "an empty key tolerates every taint",
                Some(json!([{"operator": "Exists"}])),
                json!([{"operator": "Exists"}]),
            ),
            (
                "both defaults already there: unchanged",
                Some(json!([unreachable, not_ready])),
                json!([unreachable, not_ready]),
            ),
        ];
        for (name, tolerations, want) in cases {
            let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}});
            if let Some(t) = tolerations {
                pod["spec"]["tolerations"] = t;
            }
            admit_pod(&mut pod);
            assert_eq!(pod["spec"]["tolerations"], want, "{name}");
            // admitting again (an update) adds nothing more
            let again = pod.clone();
            admit_pod(&mut pod);
            assert_eq!(pod, again, "{name}: a second pass changed it");
        }
    }
}
