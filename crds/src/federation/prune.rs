//! What a resource template carries that the hub's API server allocated or its
//! controllers set, per kind, and that must not reach a member (each member allocates
//! its own): Karmada's `RemoveIrrelevantFields`. Pure.
//!
//! | kind | removed |
//! |---|---|
//! | Service | `spec.clusterIP`/`spec.clusterIPs` (unless headless, `None`), `spec.healthCheckNodePort` |
//! | Job | `spec.selector` and the `controller-uid`/`job-name` template labels the hub generated (unless `spec.manualSelector`) |
//! | ServiceAccount | `secrets` (token Secrets are the member's own) |
//! | PersistentVolumeClaim | `spec.volumeName` (the member binds its own volume) |
//! | Pod | `spec.nodeName` (the member schedules it) |

use serde_json::Value;

/// The Job labels kube-apiserver generates for a Job without `manualSelector`.
const JOB_GENERATED_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// Removes from `manifest` (an object of kind `kind`) what the hub allocated.
pub fn prune_allocated(kind: &str, manifest: &mut Value) {
    let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) else {
        if kind == "ServiceAccount"
            && let Some(o) = manifest.as_object_mut()
        {
            o.remove("secrets");
        }
        return;
    };
    match kind {
        "Service" => {
            let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
            if !headless {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            spec.remove("healthCheckNodePort");
        }
        "Job" if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) => {
            spec.remove("selector");
            if let Some(l) = spec
                .get_mut("template")
                .and_then(|t| t.get_mut("metadata"))
                .and_then(|m| m.get_mut("labels"))
                .and_then(Value::as_object_mut)
            {
                for k in JOB_GENERATED_LABELS {
                    l.remove(k);
                }
            }
        }
        "PersistentVolumeClaim" => {
            spec.remove("volumeName");
        }
        "Pod" => {
            spec.remove("nodeName");
        }
        _ => {}
    }
    if kind == "ServiceAccount"
        && let Some(o) = manifest.as_object_mut()
    {
        o.remove("secrets");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_loses_what_the_hub_allocated_and_keeps_the_rest() {
        let cases = [
            (
                "Service",
                json!({"spec": {"clusterIP": "10.96.0.2", "clusterIPs": ["10.96.0.2"], "ports": [{"port": 80, "nodePort": 30080}], "healthCheckNodePort": 31000}}),
                json!({"spec": {"ports": [{"port": 80, "nodePort": 30080}]}}),
            ),
            (
                "Service",
                json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
                json!({"spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
            ),
            (
                "Job",
                json!({"spec": {"selector": {"matchLabels": {"controller-uid": "u"}}, "completions": 2,
                       "template": {"metadata": {"labels": {"app": "x", "controller-uid": "u", "job-name": "j",
                       "batch.kubernetes.io/controller-uid": "u", "batch.kubernetes.io/job-name": "j"}}}}}),
                json!({"spec": {"completions": 2, "template": {"metadata": {"labels": {"app": "x"}}}}}),
            ),
            (
                "Job",
                json!({"spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}}),
                json!({"spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}}),
            ),
            (
                "ServiceAccount",
                json!({"secrets": [{"name": "t"}], "automountServiceAccountToken": false}),
                json!({"automountServiceAccountToken": false}),
            ),
            (
                "PersistentVolumeClaim",
                json!({"spec": {"volumeName": "pv-1", "resources": {"requests": {"storage": "1Gi"}}}}),
                json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}}),
            ),
            (
                "Pod",
                json!({"spec": {"nodeName": "n1", "containers": []}}),
                json!({"spec": {"containers": []}}),
            ),
            (
                "Deployment",
                json!({"spec": {"replicas": 2}}),
                json!({"spec": {"replicas": 2}}),
            ),
            (
                "ConfigMap",
                json!({"data": {"a": "b"}}),
                json!({"data": {"a": "b"}}),
            ),
        ];
        for (kind, mut input, want) in cases {
            prune_allocated(kind, &mut input);
            assert_eq!(input, want, "{kind}");
        }
    }
}
