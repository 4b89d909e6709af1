//! Each (Cluster)PropagationPolicy says whether it is in force: `Valid=True`, or
//! `Valid=False` with what to fix (it breaks the selection rules, B.15, or selects a
//! kind the hub does not serve), so a policy that claims nothing says why. Each
//! (Cluster)OverridePolicy says whether its spec is valid (D.26's checks: the same ones
//! `causeway webhook` refuses at admission).

use std::collections::BTreeMap;
use std::sync::Arc;

use causeway_crds::federation::override_apply;
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy, OverrideSpec};
use causeway_crds::federation::policy_conditions as pc;
use causeway_crds::federation::propagation::StatePreservationRule;
use causeway_crds::federation::propagation::{
    ClusterPropagationPolicy, PropagationPolicy, PropagationSpec,
};
use causeway_crds::federation::schedule::validate_placement;
use causeway_crds::federation::selection::PolicyId;
use causeway_crds::federation::state_preservation;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Ctx;

const API_VERSION: &str = "causeway.io/v1alpha1";

/// Why a policy is not in force, if it is not: the detector's verdict, else a kind
/// it selects that the hub does not serve, else a placement scheduling refuses.
fn problem(
    id: &PolicyId,
    spec: &PropagationSpec,
    invalid: &BTreeMap<PolicyId, String>,
    unknown: &BTreeMap<(String, String), String>,
) -> Option<String> {
    invalid
        .get(id)
        .cloned()
        .or_else(|| {
            spec.resource_selectors.iter().find_map(|s| {
                unknown
                    .get(&(s.api_version.clone(), s.kind.clone()))
                    .cloned()
            })
        })
        .or_else(|| {
            // its bindings keep the clusters they had (`Scheduled=False`)
            placement_problem(spec).map(|e| {
                format!("{e} (the resources it selects keep the clusters they had until then)")
            })
        })
}

/// Why a policy's placement cannot be scheduled, whatever the clusters.
pub(crate) fn placement_problem(spec: &PropagationSpec) -> Option<String> {
    validate_placement(&spec.placement)
        .err()
        .map(|e| e.to_string())
}

/// What a policy in force should still know: the `statePreservation` rules it cannot
/// read, which are ignored (`spec` is the policy's JSON).
pub(crate) fn caveats(policy: &serde_json::Value) -> Vec<String> {
    let mut bad_rules: Vec<String> = Vec::new();
    for which in ["application", "cluster"] {
        let rules = policy
            .pointer(&format!("/spec/failover/{which}/statePreservation/rules"))
            .and_then(|r| serde_json::from_value::<Vec<StatePreservationRule>>(r.clone()).ok())
            .unwrap_or_default();
        bad_rules.extend(
            state_preservation::validate(
                &rules,
                &format!("spec.failover.{which}.statePreservation.rules"),
            )
            .into_iter()
            .map(|(field, value, message)| format!("{field}: {value:?}: {message}")),
        );
    }
    if bad_rules.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "these statePreservation rules are ignored: {}",
            bad_rules.join("; ")
        )]
    }
}

/// Why an override policy's spec is invalid, if it is: every field to fix. `policy`
/// names it (`OverridePolicy demo/web`).
pub(crate) fn override_problem(policy: &str, spec: &OverrideSpec) -> Option<String> {
    let errors = override_apply::validate(spec);
    (!errors.is_empty()).then(|| {
        let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "{policy} is invalid (fix it: the clusters a bad rule targets get no new manifests while it fails): {}",
            each.join("; ")
        )
    })
}

impl Ctx<'_> {
    /// Writes the `Valid` condition of every override policy whose verdict changed.
    pub(super) async fn override_statuses(&mut self) {
        let (ops, cops) = (self.ops, self.cops);
        for p in ops {
            let ns = p.namespace().unwrap_or_default();
            let why = override_problem(&format!("OverridePolicy {ns}/{}", p.name_any()), &p.spec);
            let api = Api::<OverridePolicy>::namespaced(self.hub.clone(), &ns);
            self.policy_status(&api, p.as_ref(), &ns, why).await;
        }
        for p in cops {
            let why = override_problem(&format!("ClusterOverridePolicy {}", p.name_any()), &p.spec);
            let api = Api::<ClusterOverridePolicy>::all(self.hub.clone());
            self.policy_status(&api, p.as_ref(), "", why).await;
        }
    }

    /// Writes the `Valid` condition of every policy whose verdict changed.
    pub(super) async fn policy_statuses(
        &mut self,
        pps: &[Arc<PropagationPolicy>],
        cpps: &[Arc<ClusterPropagationPolicy>],
        invalid: &BTreeMap<PolicyId, String>,
    ) {
        let unknown = self.kinds.unknown.clone();
        for p in pps {
            let ns = p.namespace().unwrap_or_default();
            let id = PolicyId::namespaced(ns.clone(), p.name_any());
            let why = problem(&id, &p.spec, invalid, &unknown);
            let api = Api::<PropagationPolicy>::namespaced(self.hub.clone(), &ns);
            self.policy_status(&api, p.as_ref(), &ns, why).await;
        }
        for p in cpps {
            let id = PolicyId::cluster(p.name_any());
            let why = problem(&id, &p.spec, invalid, &unknown);
            let api = Api::<ClusterPropagationPolicy>::all(self.hub.clone());
            self.policy_status(&api, p.as_ref(), "", why).await;
        }
    }

    async fn policy_status<K>(&mut self, api: &Api<K>, p: &K, ns: &str, why: Option<String>)
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let actual = serde_json::to_value(p)
            .ok()
            .and_then(|v| v.get("status").cloned());
        let previous: Vec<Condition> = actual
            .as_ref()
            .and_then(|s| s.get("conditions"))
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        // statePreservation rules this cannot read are ignored, not fatal: a policy that
        // was in force stays so
        let caveats = serde_json::to_value(p)
            .map(|v| caveats(&v))
            .unwrap_or_default();
        let (status, reason, message) = match &why {
            None if caveats.is_empty() => (
                "True",
                pc::REASON_VALID,
                "the policy is in force".to_string(),
            ),
            None => (
                "True",
                pc::REASON_VALID,
                format!("the policy is in force, but {}", caveats.join("; ")),
            ),
            Some(why) => ("False", pc::REASON_INVALID, why.clone()),
        };
        let condition = Condition {
            type_: pc::VALID.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: p.meta().generation,
            last_transition_time: crate::condition::since(&previous, pc::VALID, status, self.now),
        };
        let body = json!({"observedGeneration": p.meta().generation, "conditions": [condition]});
        let kind = K::kind(&()).into_owned();
        let name = p.name_any();
        let key = (ns.to_string(), format!("{kind}/{name}"));
        let r = self
            .memos
            .status
            .ensure(
                api,
                ns,
                &name,
                API_VERSION,
                &kind,
                &body,
                p.resource_version(),
                || actual,
            )
            .await;
        self.failures.check(key, r);
    }
}
