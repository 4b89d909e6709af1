//! Each policy says whether it is in force, in its `Valid` condition:
//! - a (Cluster)PropagationPolicy: `Valid=True`, or `Valid=False` with what to fix:
//!   reason `Invalid` when it breaks the selection rules (B.15: it claims nothing new; what it holds stays, frozen) or
//!   selects a kind the hub does not serve, `InvalidPlacement` when only its placement is
//!   refused by scheduling (it still claims its resources; their bindings keep the
//!   clusters they have);
//! - a (Cluster)OverridePolicy: `Valid=False` when its spec fails D.26's checks.
//!
//! `causeway webhook` refuses the same specs at admission (`webhook/policies.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use causeway_crds::federation::interpreter::{self, ResourceInterpreter};
use causeway_crds::federation::override_apply;
use causeway_crds::federation::overrides::{ClusterOverridePolicy, OverridePolicy, OverrideSpec};
use causeway_crds::federation::policy_conditions as pc;
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

/// Why a policy is not in force, if it is not, and the condition's reason: the
/// detector's verdict and a kind it selects that the hub does not serve (`Invalid`),
/// and a placement scheduling refuses (`InvalidPlacement` when that is all).
fn problem(
    id: &PolicyId,
    spec: &PropagationSpec,
    invalid: &BTreeMap<PolicyId, String>,
    unknown: &BTreeMap<(String, String), String>,
) -> Option<(&'static str, String)> {
    let mut claims_nothing: Vec<String> = invalid.get(id).cloned().into_iter().collect();
    claims_nothing.extend(spec.resource_selectors.iter().filter_map(|s| {
        unknown
            .get(&(s.api_version.clone(), s.kind.clone()))
            .cloned()
    }));
    claims_nothing.dedup();
    let placement = placement_problem(spec).map(|e| {
        format!("{e} (the resources it selects keep the clusters they have until it is fixed)")
    });
    match (claims_nothing.is_empty(), placement) {
        (true, None) => None,
        (true, Some(p)) => Some((pc::REASON_INVALID_PLACEMENT, p)),
        (false, p) => Some((
            pc::REASON_INVALID,
            claims_nothing
                .into_iter()
                .chain(p)
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}

/// Why a policy's placement cannot be scheduled, whatever the clusters.
pub(crate) fn placement_problem(spec: &PropagationSpec) -> Option<String> {
    validate_placement(&spec.placement)
        .err()
        .map(|e| e.to_string())
}

/// What a policy in force should still know: the `statePreservation` rules it cannot
/// read, which are ignored.
pub(crate) fn caveats(spec: &PropagationSpec) -> Vec<String> {
    let failover = spec.failover.as_ref();
    let rules = [
        (
            "application",
            failover
                .and_then(|f| f.application.as_ref())
                .and_then(|a| a.state_preservation.as_ref()),
        ),
        (
            "cluster",
            failover
                .and_then(|f| f.cluster.as_ref())
                .and_then(|c| c.state_preservation.as_ref()),
        ),
    ];
    let bad_rules: Vec<String> = rules
        .into_iter()
        .flat_map(|(which, preservation)| {
            let at = format!("spec.failover.{which}.statePreservation.rules");
            state_preservation::validate(preservation.map_or(&[][..], |p| &p.rules), &at)
        })
        .map(|(field, value, message)| format!("{field}: {value:?}: {message}"))
        .collect();
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
/// names it (`OverridePolicy demo/web`). Rendering still applies it: an override that
/// cannot be applied fails its cluster (`ApplyOverridesFailed`), the others do what
/// they say.
pub(crate) fn override_problem(policy: &str, spec: &OverrideSpec) -> Option<String> {
    let errors = override_apply::validate(spec);
    (!errors.is_empty()).then(|| {
        let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!("{policy} is invalid: {}", each.join("; "))
    })
}

impl Ctx<'_> {
    /// Writes the `Valid` condition of every override policy whose verdict changed.
    pub(super) async fn override_statuses(&mut self) {
        let (ops, cops) = (self.ops, self.cops);
        for p in ops {
            let ns = p.namespace().unwrap_or_default();
            let why = override_problem(&format!("OverridePolicy {ns}/{}", p.name_any()), &p.spec)
                .map(|w| (pc::REASON_INVALID, w));
            let api = Api::<OverridePolicy>::namespaced(self.hub.clone(), &ns);
            self.policy_status(&api, p.as_ref(), &ns, why, Vec::new(), "policy")
                .await;
        }
        for p in cops {
            let why = override_problem(&format!("ClusterOverridePolicy {}", p.name_any()), &p.spec)
                .map(|w| (pc::REASON_INVALID, w));
            let api = Api::<ClusterOverridePolicy>::all(self.hub.clone());
            self.policy_status(&api, p.as_ref(), "", why, Vec::new(), "policy")
                .await;
        }
    }

    /// Writes the `Valid` condition of every ResourceInterpreter whose verdict changed
    /// (`verdicts`: from [`interpreter::resolve`], by name).
    pub(super) async fn interpreter_statuses(
        &mut self,
        all: &[Arc<ResourceInterpreter>],
        verdicts: &interpreter::Verdicts,
    ) {
        let api = Api::<ResourceInterpreter>::all(self.hub.clone());
        for r in all {
            let why = verdicts.get(&r.name_any()).cloned().flatten().map(|w| {
                (
                    pc::REASON_INVALID,
                    format!("ResourceInterpreter {} is not in force: {w}", r.name_any()),
                )
            });
            self.policy_status(&api, r.as_ref(), "", why, Vec::new(), "interpreter")
                .await;
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
            self.policy_status(&api, p.as_ref(), &ns, why, caveats(&p.spec), "policy")
                .await;
        }
        for p in cpps {
            let id = PolicyId::cluster(p.name_any());
            let why = problem(&id, &p.spec, invalid, &unknown);
            let api = Api::<ClusterPropagationPolicy>::all(self.hub.clone());
            self.policy_status(&api, p.as_ref(), "", why, caveats(&p.spec), "policy")
                .await;
        }
    }

    /// Writes `p`'s `Valid` condition: False with `why`'s reason and message, else True,
    /// with `caveats` (what it ignores; not fatal: a policy in force stays so).
    async fn policy_status<K>(
        &mut self,
        api: &Api<K>,
        p: &K,
        ns: &str,
        why: Option<(&'static str, String)>,
        caveats: Vec<String>,
        noun: &str,
    ) where
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
        let (status, reason, message) = match &why {
            None if caveats.is_empty() => {
                ("True", pc::REASON_VALID, format!("the {noun} is in force"))
            }
            None => (
                "True",
                pc::REASON_VALID,
                format!("the {noun} is in force, but {}", caveats.join("; ")),
            ),
            Some((reason, why)) => ("False", *reason, why.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> PropagationSpec {
        serde_json::from_value(v).expect("spec parses")
    }

    /// The `Valid=False` reason and message of a PropagationPolicy: what makes it claim
    /// nothing is `Invalid` (a refused placement is added to it); a refused placement
    /// alone is `InvalidPlacement`.
    #[test]
    fn a_policy_says_why_it_is_not_in_force() {
        let id = PolicyId::namespaced("demo", "p");
        let web = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]);
        let widget = json!([{"apiVersion": "example.com/v1", "kind": "Widget"}]);
        let bad_spread = json!({"spreadConstraints": [{"spreadByField": "region", "minGroups": 3, "maxGroups": 2}]});
        let aggregated = json!({"replicaScheduling": {"replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Aggregated"}});
        let invalid = BTreeMap::from([(
            id.clone(),
            "PropagationPolicy demo/p is invalid: x".to_string(),
        )]);
        let unknown = BTreeMap::from([(
            ("example.com/v1".to_string(), "Widget".to_string()),
            "the hub does not serve Widget".to_string(),
        )]);
        let none = BTreeMap::new();
        let cases = [
            (
                "in force",
                spec(json!({"resourceSelectors": web})),
                &none,
                None,
            ),
            (
                "a kind the hub does not serve",
                spec(json!({"resourceSelectors": widget})),
                &none,
                Some((pc::REASON_INVALID, "the hub does not serve Widget")),
            ),
            (
                "a placement refused",
                spec(json!({"resourceSelectors": web, "placement": bad_spread})),
                &none,
                Some((
                    pc::REASON_INVALID_PLACEMENT,
                    "invalid placement: spec.placement.spreadConstraints[0].maxGroups",
                )),
            ),
            (
                "what the division does not implement",
                spec(json!({"resourceSelectors": web, "placement": aggregated})),
                &none,
                Some((
                    pc::REASON_INVALID_PLACEMENT,
                    "spec.placement.replicaScheduling.replicaDivisionPreference: Aggregated is not supported yet",
                )),
            ),
            (
                "broken selection and a refused placement",
                spec(json!({"resourceSelectors": web, "placement": bad_spread})),
                &invalid,
                Some((
                    pc::REASON_INVALID,
                    "PropagationPolicy demo/p is invalid: x; invalid placement",
                )),
            ),
        ];
        for (what, spec, invalid, want) in cases {
            let got = problem(&id, &spec, invalid, &unknown);
            match (got, want) {
                (None, None) => {}
                (Some((reason, message)), Some((want_reason, says))) => {
                    assert_eq!(reason, want_reason, "{what}: {message}");
                    assert!(message.starts_with(says), "{what}: {message}");
                }
                (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn an_override_policys_problem_names_it_and_every_field() {
        let spec: OverrideSpec =
            serde_json::from_value(json!({"overrideRules": [{"overriders": {"plaintext": [
            {"path": "/metadata/name", "operator": "replace", "value": "x"},
            {"path": "/spec/replicas", "operator": "remove", "value": 1}]}}]}))
            .unwrap();
        let got = override_problem("OverridePolicy demo/o", &spec).unwrap();
        assert!(got.starts_with("OverridePolicy demo/o is invalid: spec.overrideRules[0].overriders.plaintext[0].path: Invalid value: \"/metadata/name\""), "{got}");
        assert!(
            got.contains("; spec.overrideRules[0].overriders.plaintext[1].value"),
            "{got}"
        );
        let fine: OverrideSpec = serde_json::from_value(json!({"overrideRules": []})).unwrap();
        assert_eq!(override_problem("OverridePolicy demo/o", &fine), None);
    }
}
