//! Admission of the federation policies, for `causeway webhook`'s
//! `POST /validate-policies` (deploy/webhook/policies-admission.yaml sends it creates
//! and updates of PropagationPolicies, OverridePolicies and their cluster-scoped
//! kinds): a spec the hub would mark `Valid=False` is refused at `kubectl apply`, with
//! the same message, instead of being stored and reported later.
//!
//! - (Cluster)PropagationPolicy: the selection rules (B.15), the placement's fields and
//!   what scheduling does not implement; `statePreservation` rules it cannot read are
//!   admitted with a warning (they are ignored, as the `Valid` condition says).
//! - (Cluster)OverridePolicy: D.26's checks of the rules and overriders.
//!
//! What depends on the hub's state (a kind the hub does not serve) is left to the
//! `Valid` condition. An update that leaves the spec as it was is admitted, so an
//! older policy that is now refused can still be labelled, or have its finalizers
//! removed.

use causeway_crds::federation::interpreter::{self, ResourceInterpreter};
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use causeway_crds::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use causeway_crds::federation::selection::{PolicyRef, validate_policy};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::propagation::hub::policies::{caveats, override_problem, placement_problem};

/// The path kube-apiserver POSTs the policies' AdmissionReviews to.
pub const PATH: &str = "/validate-policies";

/// What admission says of a policy: refused with why, or admitted with warnings.
fn verdict(kind: &str, namespace: &str, object: &Value) -> Result<Vec<String>, String> {
    fn read<T: DeserializeOwned>(kind: &str, object: &Value) -> Result<T, String> {
        serde_json::from_value(object.clone())
            .map_err(|e| format!("the object is not a valid {kind}: {e}"))
    }
    let mut object = object.clone();
    if let Some(md) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && md
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .is_empty()
        && !namespace.is_empty()
    {
        md.insert("namespace".into(), json!(namespace));
    }
    let propagation = |policy: PolicyRef<'_>| {
        let mut why: Vec<String> = Vec::new();
        if let Err(e) = validate_policy(&policy) {
            why.push(e.to_string());
        }
        why.extend(placement_problem(policy.spec));
        if why.is_empty() {
            Ok(caveats(policy.spec))
        } else {
            Err(why.join("; "))
        }
    };
    match kind {
        "PropagationPolicy" => propagation(PolicyRef::from_pp(&read::<PropagationPolicy>(
            kind, &object,
        )?)),
        "ClusterPropagationPolicy" => propagation(PolicyRef::from_cpp(&read::<
            ClusterPropagationPolicy,
        >(kind, &object)?)),
        "OverridePolicy" => {
            let p = read::<OverridePolicy>(kind, &object)?;
            let ns = p.metadata.namespace.as_deref().unwrap_or(namespace);
            let policy = format!(
                "{kind} {ns}/{}",
                p.metadata.name.as_deref().unwrap_or_default()
            );
            override_problem(&policy, &p.spec).map_or(Ok(Vec::new()), Err)
        }
        "ClusterOverridePolicy" => {
            let p = read::<ClusterOverridePolicy>(kind, &object)?;
            let policy = format!("{kind} {}", p.metadata.name.as_deref().unwrap_or_default());
            override_problem(&policy, &p.spec).map_or(Ok(Vec::new()), Err)
        }
        "ResourceInterpreter" => {
            let r = read::<ResourceInterpreter>(kind, &object)?;
            let problems = interpreter::problems(&r.spec);
            if problems.is_empty() {
                Ok(Vec::new())
            } else {
                let name = r.metadata.name.as_deref().unwrap_or_default();
                Err(format!("{kind} {name} is invalid: {}", problems.join("; ")))
            }
        }
        _ => Ok(Vec::new()),
    }
}

/// The AdmissionReview answering `review`: a create or update of a policy whose spec
/// is invalid is denied (422, Invalid, with every field to fix); anything else is
/// allowed, with warnings where the policy has rules it ignores.
pub fn review_response(review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let operation = req["operation"].as_str().unwrap_or_default();
    let kind = req["kind"]["kind"].as_str().unwrap_or_default();
    let namespace = req["namespace"].as_str().unwrap_or_default();
    let unchanged = operation == "UPDATE" && req["object"]["spec"] == req["oldObject"]["spec"];
    let judged = match operation {
        "CREATE" | "UPDATE" if !unchanged => verdict(kind, namespace, &req["object"]),
        _ => Ok(Vec::new()),
    };
    let response = match judged {
        Ok(warnings) if warnings.is_empty() => json!({"uid": uid, "allowed": true}),
        Ok(warnings) => json!({"uid": uid, "allowed": true, "warnings": warnings}),
        Err(why) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 422, "reason": "Invalid", "message": why},
        }),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(op: &str, kind: &str, object: Value, old: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": op, "name": "p", "namespace": "demo",
            "kind": {"group": "causeway.io", "version": "v1alpha1", "kind": kind},
            "object": object, "oldObject": old,
        }})
    }

    fn pp(spec: Value) -> Value {
        json!({"apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "p"}, "spec": spec})
    }

    fn op(spec: Value) -> Value {
        json!({"apiVersion": "causeway.io/v1alpha1", "kind": "OverridePolicy",
            "metadata": {"name": "o", "namespace": "demo"}, "spec": spec})
    }

    /// Each case: (operation, kind, object, old object, allowed, what the message or
    /// the warnings contain).
    #[test]
    fn invalid_policies_are_refused_with_what_to_fix() {
        let web = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
        let good = pp(json!({"resourceSelectors": web}));
        let no_selector = pp(json!({"resourceSelectors": []}));
        let other_ns = pp(
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
            "namespace": "prod"}]}),
        );
        let bad_spread = pp(
            json!({"resourceSelectors": web, "placement": {"spreadConstraints": [
            {"spreadByField": "region", "minGroups": 3, "maxGroups": 2}]}}),
        );
        let bad_rules = pp(
            json!({"resourceSelectors": web, "failover": {"application": {
            "decisionConditions": {"tolerationSeconds": 30},
            "statePreservation": {"rules": [{"aliasLabelName": "x", "jsonPath": "{.status"}]}}}}),
        );
        let bad_override = op(json!({"overrideRules": [{"overriders": {"plaintext": [
            {"path": "/metadata/namespace", "operator": "replace", "value": "x"}]}}]}));
        let good_override = op(json!({"overrideRules": [{"overriders": {"plaintext": [
            {"path": "/spec/replicas", "operator": "replace", "value": 1}]}}]}));
        let cases = [
            (
                "CREATE",
                "PropagationPolicy",
                good.clone(),
                Value::Null,
                true,
                "",
            ),
            (
                "CREATE",
                "PropagationPolicy",
                no_selector.clone(),
                Value::Null,
                false,
                "PropagationPolicy demo/p is invalid: spec.resourceSelectors: Invalid value: \"[]\": at least one resource selector is required",
            ),
            (
                "UPDATE",
                "PropagationPolicy",
                other_ns,
                good.clone(),
                false,
                "a PropagationPolicy selects only resources in its own namespace \"demo\"",
            ),
            (
                "CREATE",
                "PropagationPolicy",
                bad_spread,
                Value::Null,
                false,
                "invalid placement: spec.placement.spreadConstraints[0]",
            ),
            (
                "CREATE",
                "PropagationPolicy",
                bad_rules,
                Value::Null,
                true,
                "these statePreservation rules are ignored: spec.failover.application.statePreservation.rules[0]",
            ),
            (
                "CREATE",
                "OverridePolicy",
                bad_override.clone(),
                Value::Null,
                false,
                "OverridePolicy demo/o is invalid: spec.overrideRules[0].overriders.plaintext[0].path: Invalid value: \"/metadata/namespace\"",
            ),
            (
                "CREATE",
                "OverridePolicy",
                good_override,
                Value::Null,
                true,
                "",
            ),
            // a label added to a policy stored before: the spec did not change
            (
                "UPDATE",
                "OverridePolicy",
                bad_override.clone(),
                bad_override.clone(),
                true,
                "",
            ),
            (
                "UPDATE",
                "PropagationPolicy",
                no_selector.clone(),
                no_selector,
                true,
                "",
            ),
            (
                "DELETE",
                "OverridePolicy",
                Value::Null,
                bad_override,
                true,
                "",
            ),
            (
                "CREATE",
                "OverridePolicy",
                op(json!({"overrideRules": "x"})),
                Value::Null,
                false,
                "the object is not a valid OverridePolicy: ",
            ),
            (
                "CREATE",
                "ConfigMap",
                json!({"data": 1}),
                Value::Null,
                true,
                "",
            ),
            (
                "CREATE",
                "PropagationPolicy",
                pp(
                    json!({"resourceSelectors": web, "placement": {"spreadConstraints": [
                    {"spreadByLabel": "topology.example.com/rack", "minGroups": 2}]}}),
                ),
                Value::Null,
                false,
                "spreadByLabel",
            ),
            (
                "CREATE",
                "PropagationPolicy",
                pp(
                    json!({"resourceSelectors": web, "placement": {"replicaScheduling": {
                    "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Aggregated"}}}),
                ),
                Value::Null,
                false,
                "Aggregated is not supported yet",
            ),
            (
                "CREATE",
                "ClusterPropagationPolicy",
                json!({"apiVersion": "causeway.io/v1alpha1", "kind": "ClusterPropagationPolicy",
                    "metadata": {"name": "c"}, "spec": {"resourceSelectors": [
                        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system"}]}}),
                Value::Null,
                false,
                "ClusterPropagationPolicy c is invalid: spec.resourceSelectors[0].namespace: Invalid value: \"kube-system\"",
            ),
            (
                "CREATE",
                "ClusterOverridePolicy",
                json!({"apiVersion": "causeway.io/v1alpha1", "kind": "ClusterOverridePolicy",
                    "metadata": {"name": "c"}, "spec": {"overrideRules": [{"targetCluster": {
                        "clusterNames": ["east", "east"]}, "overriders": {}}]}}),
                Value::Null,
                false,
                "ClusterOverridePolicy c is invalid: spec.overrideRules[0].targetCluster.clusterNames: Invalid value: \"east\": Duplicate value",
            ),
            (
                "CREATE",
                "ResourceInterpreter",
                json!({"apiVersion": "causeway.io/v1alpha1", "kind": "ResourceInterpreter",
                    "metadata": {"name": "gadgets"}, "spec": {
                        "target": {"apiVersion": "example.com/v1", "kind": "Gadget"},
                        "replicas": {"path": "spec.size"},
                        "health": {"healthy": "object.status.phase =="}}}),
                Value::Null,
                false,
                "ResourceInterpreter gadgets is invalid: spec.replicas.path: Invalid value: \"spec.size\": must be a JSON pointer under /spec, e.g. /spec/size; spec.health.healthy: Invalid value",
            ),
            (
                "UPDATE",
                "ResourceInterpreter",
                json!({"apiVersion": "causeway.io/v1alpha1", "kind": "ResourceInterpreter",
                    "metadata": {"name": "gadgets"}, "spec": {
                        "target": {"apiVersion": "example.com/v1", "kind": "Gadget"},
                        "replicas": {"path": "/spec/size"},
                        "health": {"healthy": "object.status.phase == 'Running'"}}}),
                Value::Null,
                true,
                "",
            ),
        ];
        for (operation, kind, object, old, allowed, says) in cases {
            let r = review_response(&review(operation, kind, object.clone(), old));
            let r = &r["response"];
            assert_eq!(r["uid"], "u-1");
            assert_eq!(r["allowed"], allowed, "{operation} {kind} {object}: {r}");
            let said = if allowed {
                r["warnings"].to_string()
            } else {
                assert_eq!(r["status"]["code"], 422, "{r}");
                r["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            };
            assert!(
                said.contains(says),
                "{operation} {kind}: {said:?} lacks {says:?}"
            );
            if allowed && says.is_empty() {
                assert!(r.get("warnings").is_none(), "{r}");
            }
        }
    }
}
