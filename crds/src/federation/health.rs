//! Health of a member object per kind (federation.md §8 H.54, Karmada's `healthy.go`):
//! what the work applier reports in each manifest status and what the Work's
//! `Available` condition is made of.
//!
//! - Deployment, StatefulSet: the controller saw the current generation, every
//!   replica is updated and every replica is available. ★ Karmada's rule stops at
//!   "updated", so a Deployment whose new Pods crash-loop or stay Pending counts as
//!   healthy there: a graceful eviction then deletes the old copy before the new one
//!   serves (karmada#3736) and application failover never sees the failure.
//! - ReplicaSet: current generation seen, `availableReplicas >= spec.replicas`.
//! - DaemonSet: current generation seen, every desired pod updated and available.
//! - Service: a LoadBalancer needs an ingress address; other types are healthy.
//! - Ingress: an ingress address. PersistentVolumeClaim: `Bound`.
//! - PodDisruptionBudget: `currentHealthy >= desiredHealthy`.
//! - Pod: `Succeeded`, or `Running` and Ready.
//! - Job: `Complete` → healthy, `Failed` → unhealthy, still running → unknown.
//! - Kinds without a status to judge (ConfigMap, Secret, ServiceAccount, Namespace,
//!   RBAC, ...) are healthy. A workload with no status yet is unknown.
//! - ★ Other kinds (an operator's custom resources, say) are judged by the conditions
//!   most controllers write (kstatus's convention): `Stalled` True → unhealthy; `Ready`
//!   True → healthy once the controller has seen the object's generation
//!   (`status.observedGeneration`, or the condition's own); `Ready` False or Unknown →
//!   unknown (still reconciling: operators report that while they provision, and it
//!   must not fail a cluster over), but such an object is not settled for a rollout
//!   wave until it is Ready. A CustomResourceDefinition is healthy once `Established`,
//!   unhealthy when its names are not accepted. Anything else is unknown (Karmada
//!   counts such kinds healthy, so a failing custom resource never shows).

use serde_json::Value;

use super::work::ResourceHealth;

/// Kinds with nothing in their status to judge: healthy once they exist.
const STATUSLESS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Namespace"),
    ("", "Endpoints"),
    ("", "LimitRange"),
    ("", "ResourceQuota"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("networking.k8s.io", "IngressClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "StorageClass"),
    ("batch", "CronJob"),
];

fn int(v: &Value, path: &str) -> i64 {
    v.pointer(path).and_then(Value::as_i64).unwrap_or(0)
}

fn verdict(ok: bool) -> ResourceHealth {
    if ok {
        ResourceHealth::Healthy
    } else {
        ResourceHealth::Unhealthy
    }
}

/// `metadata.generation == status.observedGeneration`.
fn generation_seen(obj: &Value) -> bool {
    int(obj, "/metadata/generation") == int(obj, "/status/observedGeneration")
}

/// `spec.replicas`, 1 when unset (the API server's default).
fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `status.availableReplicas` (a Deployment leaves it out when 0); for a StatefulSet
/// of a cluster older than Kubernetes 1.22, which reports no availability at all,
/// `readyReplicas`.
fn available(obj: &Value) -> i64 {
    let kind = obj.get("kind").and_then(Value::as_str);
    let mut v = obj.pointer("/status/availableReplicas");
    if v.is_none() && kind == Some("StatefulSet") {
        v = obj.pointer("/status/readyReplicas");
    }
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn has_ingress(obj: &Value) -> bool {
    obj.pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
}

/// The condition `type_` of a `status` object, if it has one.
fn find_condition<'a>(status: Option<&'a Value>, type_: &str) -> Option<&'a Value> {
    status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The status (True, False, Unknown) of `obj`'s condition `type_`, if it has one.
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    find_condition(obj.get("status"), type_)?
        .get("status")?
        .as_str()
}

fn condition_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_) == Some("True")
}

/// The kinds [`health`] has a rule for (their health is Unknown only until their status
/// says more); the others are always Unknown.
pub fn judged(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "apps",
            "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet"
        ) | ("networking.k8s.io", "Ingress")
            | ("", "PersistentVolumeClaim" | "Pod" | "Service")
            | ("policy", "PodDisruptionBudget")
            | ("batch", "Job")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
    ) || STATUSLESS.contains(&(group, kind))
}

/// The health of `obj` (a complete object: apiVersion, kind, metadata, spec, status).
pub fn health(obj: &Value) -> ResourceHealth {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = super::group_of(api_version);
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if STATUSLESS.contains(&(group, kind)) {
        return ResourceHealth::Healthy;
    }
    let status = obj.get("status").filter(|s| s.as_object().is_some());
    match (group, kind) {
        ("", "Service") => {
            let lb = obj.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
            verdict(!lb || has_ingress(obj))
        }
        _ if status.is_none() => ResourceHealth::Unknown,
        ("apps", "Deployment" | "StatefulSet") => verdict(
            generation_seen(obj)
                && int(obj, "/status/updatedReplicas") == replicas(obj)
                && available(obj) >= replicas(obj),
        ),
        ("apps", "ReplicaSet") => {
            verdict(generation_seen(obj) && int(obj, "/status/availableReplicas") >= replicas(obj))
        }
        ("apps", "DaemonSet") => {
            let updated = int(obj, "/status/updatedNumberScheduled");
            verdict(
                generation_seen(obj)
                    && updated >= int(obj, "/status/desiredNumberScheduled")
                    && int(obj, "/status/numberAvailable") >= updated,
            )
        }
        ("networking.k8s.io", "Ingress") => verdict(has_ingress(obj)),
        ("", "PersistentVolumeClaim") => {
            verdict(obj.pointer("/status/phase").and_then(Value::as_str) == Some("Bound"))
        }
        ("policy", "PodDisruptionBudget") => {
            verdict(int(obj, "/status/currentHealthy") >= int(obj, "/status/desiredHealthy"))
        }
        ("", "Pod") => {
            let phase = obj.pointer("/status/phase").and_then(Value::as_str);
            verdict(
                phase == Some("Succeeded")
                    || (phase == Some("Running") && condition_true(obj, "Ready")),
            )
        }
        ("batch", "Job") if condition_true(obj, "Complete") => ResourceHealth::Healthy,
        ("batch", "Job") if condition_true(obj, "Failed") => ResourceHealth::Unhealthy,
        ("batch", "Job") => ResourceHealth::Unknown,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            match (
                condition(obj, "Established"),
                condition(obj, "NamesAccepted"),
            ) {
                (Some("True"), _) => ResourceHealth::Healthy,
                (_, Some("False")) => ResourceHealth::Unhealthy,
                _ => ResourceHealth::Unknown,
            }
        }
        _ => by_conditions(obj),
    }
}

/// kstatus's convention for kinds Causeway has no rule for: `Stalled` True is a
/// failure; `Ready` True is healthy once the controller has seen the object's
/// generation; anything else (Ready False or Unknown: still reconciling, as operators
/// report while they provision) is unknown. An object with a `Ready` condition is not
/// counted as settled while unknown ([`reports_readiness`]).
fn by_conditions(obj: &Value) -> ResourceHealth {
    if condition(obj, "Stalled") == Some("True") {
        return ResourceHealth::Unhealthy;
    }
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    let behind =
        |observed: Option<i64>| generation.is_some_and(|g| observed.is_some_and(|o| o < g));
    if let Some(c) = find_condition(obj.get("status"), "Ready") {
        let seen = obj
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        let own = c.get("observedGeneration").and_then(Value::as_i64);
        if behind(seen) || behind(own) {
            return ResourceHealth::Unknown;
        }
        return match c.get("status").and_then(Value::as_str) {
            Some("True") => ResourceHealth::Healthy,
            _ => ResourceHealth::Unknown,
        };
    }
    ResourceHealth::Unknown
}

/// Whether a member object's `status` has a `Ready` condition: then its health is
/// judged from it, and Unknown means "not Ready yet", not "no rule for its kind".
pub fn reports_readiness(status: Option<&Value>) -> bool {
    find_condition(status, "Ready").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResourceHealth::*;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, gen_: i64, spec: Value, status: Value) -> Value {
        let mut o = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "x", "generation": gen_}, "spec": spec});
        if !status.is_null() {
            o["status"] = status;
        }
        o
    }

    /// Kinds with no rule of their own: the Ready / Stalled conditions, once the
    /// controller has seen the object's generation; a CRD by Established.
    #[test]
    fn custom_resources_by_their_conditions() {
        let cr = |status: Value| obj("example.com/v1", "Database", 3, json!({}), status);
        let ready = |s: &str| json!({"type": "Ready", "status": s});
        let cases = [
            (
                "Ready",
                cr(json!({"observedGeneration": 3, "conditions": [ready("True")]})),
                Healthy,
            ),
            (
                "not Ready yet (reconciling)",
                cr(json!({"observedGeneration": 3, "conditions": [ready("False")]})),
                Unknown,
            ),
            (
                "Stalled wins over Ready",
                cr(json!({"conditions": [ready("True"), {"type": "Stalled", "status": "True"}]})),
                Unhealthy,
            ),
            (
                "Ready unknown",
                cr(json!({"conditions": [ready("Unknown")]})),
                Unknown,
            ),
            (
                "Ready, of an older generation",
                cr(json!({"observedGeneration": 2, "conditions": [ready("True")]})),
                Unknown,
            ),
            (
                "Ready, its own observedGeneration older",
                cr(
                    json!({"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 2}]}),
                ),
                Unknown,
            ),
            (
                "no observedGeneration at all",
                cr(json!({"conditions": [ready("True")]})),
                Healthy,
            ),
            (
                "Stalled",
                cr(json!({"conditions": [{"type": "Stalled", "status": "True"}]})),
                Unhealthy,
            ),
            (
                "other conditions",
                cr(json!({"conditions": [{"type": "Synced", "status": "True"}]})),
                Unknown,
            ),
            ("no status", cr(Value::Null), Unknown),
            (
                "a CRD established",
                obj(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    1,
                    json!({}),
                    json!({"conditions": [{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "True"}]}),
                ),
                Healthy,
            ),
            (
                "a CRD whose names clash",
                obj(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    1,
                    json!({}),
                    json!({"conditions": [{"type": "NamesAccepted", "status": "False"}]}),
                ),
                Unhealthy,
            ),
            (
                "a Job still running is not judged by Ready",
                obj(
                    "batch/v1",
                    "Job",
                    1,
                    json!({}),
                    json!({"conditions": [ready("False")]}),
                ),
                Unknown,
            ),
        ];
        for (what, o, want) in cases {
            assert_eq!(health(&o), want, "{what}");
        }
    }

    #[test]
    fn readiness_is_reported_by_a_ready_condition() {
        let st = |conds: Value| json!({"conditions": conds});
        assert!(reports_readiness(Some(&st(
            json!([{"type": "Ready", "status": "False"}])
        ))));
        assert!(!reports_readiness(Some(&st(
            json!([{"type": "Synced", "status": "True"}])
        ))));
        assert!(!reports_readiness(Some(&json!({}))));
        assert!(!reports_readiness(None));
    }

    #[test]
    fn health_per_kind() {
        let cases = [
            // Deployment: generation seen and every replica updated
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    2,
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 2, "updatedReplicas": 3, "availableReplicas": 3}),
                ),
                Healthy,
            ),
            // every Pod updated, but crash-looping or Pending: not healthy (★)
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    2,
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 2, "updatedReplicas": 3, "availableReplicas": 1}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    2,
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 1, "updatedReplicas": 3}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    2,
                    json!({"replicas": 3}),
                    json!({"observedGeneration": 2, "updatedReplicas": 2}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    1,
                    json!({}),
                    json!({"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1}),
                ),
                Healthy,
            ),
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    1,
                    json!({"replicas": 1}),
                    Value::Null,
                ),
                Unknown,
            ),
            (
                obj(
                    "apps/v1",
                    "StatefulSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}),
                ),
                Healthy,
            ),
            // a Deployment leaves availableReplicas out when 0: readyReplicas (Ready
            // Pods not yet available for minReadySeconds) does not stand in
            (
                obj(
                    "apps/v1",
                    "Deployment",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "readyReplicas": 2}),
                ),
                Unhealthy,
            ),
            // a StatefulSet of an older cluster: readyReplicas stands in
            (
                obj(
                    "apps/v1",
                    "StatefulSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "readyReplicas": 2}),
                ),
                Healthy,
            ),
            (
                obj(
                    "apps/v1",
                    "StatefulSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 0}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "apps/v1",
                    "StatefulSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 1}),
                ),
                Unhealthy,
            ),
            // ReplicaSet: available >= desired
            (
                obj(
                    "apps/v1",
                    "ReplicaSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "availableReplicas": 2}),
                ),
                Healthy,
            ),
            (
                obj(
                    "apps/v1",
                    "ReplicaSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "availableReplicas": 1}),
                ),
                Unhealthy,
            ),
            // DaemonSet: all desired updated, all updated available
            (
                obj(
                    "apps/v1",
                    "DaemonSet",
                    1,
                    json!({}),
                    json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2}),
                ),
                Healthy,
            ),
            (
                obj(
                    "apps/v1",
                    "DaemonSet",
                    1,
                    json!({}),
                    json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 1}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "apps/v1",
                    "DaemonSet",
                    1,
                    json!({}),
                    json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 1, "numberAvailable": 1}),
                ),
                Unhealthy,
            ),
            // Service: a LoadBalancer needs an ingress address
            (
                obj(
                    "v1",
                    "Service",
                    0,
                    json!({"type": "ClusterIP"}),
                    Value::Null,
                ),
                Healthy,
            ),
            (
                obj(
                    "v1",
                    "Service",
                    0,
                    json!({"type": "LoadBalancer"}),
                    json!({"loadBalancer": {}}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "v1",
                    "Service",
                    0,
                    json!({"type": "LoadBalancer"}),
                    json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
                ),
                Healthy,
            ),
            (
                obj(
                    "networking.k8s.io/v1",
                    "Ingress",
                    1,
                    json!({}),
                    json!({"loadBalancer": {"ingress": [{"hostname": "lb"}]}}),
                ),
                Healthy,
            ),
            (
                obj(
                    "networking.k8s.io/v1",
                    "Ingress",
                    1,
                    json!({}),
                    json!({"loadBalancer": {}}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "v1",
                    "PersistentVolumeClaim",
                    0,
                    json!({}),
                    json!({"phase": "Bound"}),
                ),
                Healthy,
            ),
            (
                obj(
                    "v1",
                    "PersistentVolumeClaim",
                    0,
                    json!({}),
                    json!({"phase": "Pending"}),
                ),
                Unhealthy,
            ),
            (
                obj(
                    "policy/v1",
                    "PodDisruptionBudget",
                    1,
                    json!({}),
                    json!({"currentHealthy": 3, "desiredHealthy": 2}),
                ),
                Healthy,
            ),
            (
                obj(
                    "policy/v1",
                    "PodDisruptionBudget",
                    1,
                    json!({}),
                    json!({"currentHealthy": 1, "desiredHealthy": 2}),
                ),
                Unhealthy,
            ),
            // Pod: Succeeded, or Running and Ready
            (
                obj("v1", "Pod", 0, json!({}), json!({"phase": "Succeeded"})),
                Healthy,
            ),
            (
                obj(
                    "v1",
                    "Pod",
                    0,
                    json!({}),
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
                ),
                Healthy,
            ),
            (
                obj(
                    "v1",
                    "Pod",
                    0,
                    json!({}),
                    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
                ),
                Unhealthy,
            ),
            (
                obj("v1", "Pod", 0, json!({}), json!({"phase": "Pending"})),
                Unhealthy,
            ),
            // Job: Complete healthy, Failed unhealthy, running unknown
            (
                obj(
                    "batch/v1",
                    "Job",
                    1,
                    json!({}),
                    json!({"conditions": [{"type": "Complete", "status": "True"}]}),
                ),
                Healthy,
            ),
            (
                obj(
                    "batch/v1",
                    "Job",
                    1,
                    json!({}),
                    json!({"conditions": [{"type": "Failed", "status": "True"}]}),
                ),
                Unhealthy,
            ),
            (
                obj("batch/v1", "Job", 1, json!({}), json!({"active": 1})),
                Unknown,
            ),
            // nothing to judge: healthy; unknown kinds: unknown
            (obj("v1", "ConfigMap", 0, Value::Null, Value::Null), Healthy),
            (obj("v1", "Secret", 0, Value::Null, Value::Null), Healthy),
            (
                obj("v1", "ServiceAccount", 0, Value::Null, Value::Null),
                Healthy,
            ),
            (
                obj("v1", "Namespace", 0, json!({}), json!({"phase": "Active"})),
                Healthy,
            ),
            (
                obj(
                    "rbac.authorization.k8s.io/v1",
                    "Role",
                    0,
                    Value::Null,
                    Value::Null,
                ),
                Healthy,
            ),
            (
                obj(
                    "example.com/v1",
                    "Widget",
                    1,
                    json!({}),
                    json!({"ready": true}),
                ),
                Unknown,
            ),
            // same kind name in another group is not mistaken for the core one
            (
                obj("example.com/v1", "ConfigMap", 0, Value::Null, Value::Null),
                Unknown,
            ),
            (json!({}), Unknown),
        ];
        for (o, want) in cases {
            assert_eq!(health(&o), want, "{o}");
        }
    }
}
