//! `activationPreference: Lazy` (federation.md §8 B, Karmada's lazy activation): a
//! policy's changes reach the templates it already propagates only when each template
//! next changes, so an edit of a policy that selects many templates (a new cluster, a
//! failover setting) rolls out as the templates are updated, not all at once.
//!
//! What a binding takes from its policy (placement, conflict resolution, dependencies,
//! suspension, rollout, redistribution, failover, retention, dependent overrides) is
//! its snapshot of the policy. Under a Lazy policy, the detector records on the binding
//! the hash of the template's content when it last took the policy's spec in
//! ([`annotations::ACTIVATED_TEMPLATE`]), and while the template's content hashes the
//! same, the binding keeps its snapshot ([`Activation::Kept`]). A binding without the
//! hash whose policy turns Lazy keeps what it has, and the hash is recorded then (the
//! hash is not computed for the templates of other policies).
//! Which policy claims the template is decided at once, as Karmada does: only what
//! the binding does with it waits.
//!
//! A Lazy policy that claims a template created before it propagates nothing until
//! the template changes ([`Activation::Pending`]): creating such a policy does not
//! push every template it selects at once. A template created with or after the policy
//! (the same second counts) is propagated at once.
//!
//! The content hashed is the template without what the API server and Causeway write
//! (`status`, `metadata.resourceVersion`, `generation`, `uid`, `creationTimestamp`,
//! `managedFields`, `finalizers`, ...): a change of labels, annotations or spec
//! counts.

use std::borrow::Cow;

use causeway_crds::federation::binding::BindingSpec;
use causeway_crds::federation::propagation::{ActivationPreference, PropagationSpec};
use causeway_crds::federation::selection::{PolicyId, PolicyRef};
use causeway_crds::well_known::annotations;
use kube::api::ObjectMeta;
use kube::core::DynamicObject;

use crate::propagation::applier::plan::manifest_hash;

/// What the detector does with the claiming policy's spec.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Activation<'a> {
    /// Takes the policy's spec as it is now.
    Now,
    /// Keeps the binding's snapshot of the policy: a Lazy policy, a template unchanged
    /// since the binding last took the policy's spec.
    Kept(&'a BindingSpec),
    /// Propagates nothing yet: a Lazy policy claimed a template created before it,
    /// unchanged since (the hash it had then).
    Pending(String),
}

/// The hash of `template`'s content (see the module documentation).
pub(super) fn template_hash(template: &DynamicObject) -> String {
    let mut v = serde_json::to_value(template).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for k in crate::propagation::render::SERVER_METADATA {
            m.remove(k);
        }
    }
    manifest_hash(&v)
}

/// What to do with `policy`'s spec for `template` (content hash `hash`), given the
/// binding that exists now, if any, and whether Works of the template's binding exist
/// (a binding deleted by hand: its Works still run in the members).
pub(super) fn activation<'a>(
    policy: &PolicyRef<'_>,
    template: &DynamicObject,
    hash: &str,
    existing: Option<(&ObjectMeta, &'a BindingSpec)>,
    has_works: bool,
) -> Activation<'a> {
    if !is_lazy(policy.spec) {
        return Activation::Now;
    }
    match existing {
        // pending while the template (the same one: not one deleted and created again
        // since) has not changed
        Some((m, spec)) if annotation(m, annotations::ACTIVATION_PENDING).is_some() => {
            let same = annotation(m, annotations::ACTIVATION_PENDING) == Some(hash)
                && spec.resource.uid.as_deref() == template.metadata.uid.as_deref();
            if same && before_the_policy(policy, template) {
                Activation::Pending(hash.to_string())
            } else {
                Activation::Now
            }
        }
        // (an empty hash is none: earlier versions wrote one while the policy was not
        // Lazy, as the applier could not remove the annotation then)
        Some((m, spec)) => {
            match annotation(m, annotations::ACTIVATED_TEMPLATE).filter(|h| !h.is_empty()) {
                // unchanged since the binding took the policy's spec
                Some(h) if h == hash => Activation::Kept(spec),
                // the template changed since
                Some(_) => Activation::Now,
                // a policy's binding from before the hash was recorded: kept (the hash is
                // recorded now); a dependency's binding is no snapshot of a policy's spec
                None if is_policys(m) && spec.required_by.is_empty() => Activation::Kept(spec),
                None => Activation::Now,
            }
        }
        // the binding was deleted while its Works run: made again as the policy says
        None if has_works => Activation::Now,
        // a template that was there before the policy was last written (created, or
        // edited to select it) waits for its own change
        None if before_the_policy(policy, template) => Activation::Pending(hash.to_string()),
        None => Activation::Now,
    }
}

/// Whether `template` was created before `policy` was last written (both by the API
/// server's clock, in seconds: the same second counts as after); not when either time
/// is unknown.
fn before_the_policy(policy: &PolicyRef<'_>, template: &DynamicObject) -> bool {
    match (&template.metadata.creation_timestamp, policy.spec_changed) {
        (Some(t), Some(p)) => t.0 < p.0,
        _ => false,
    }
}

/// Whether `spec` has `activationPreference: Lazy`.
pub(super) fn is_lazy(spec: &PropagationSpec) -> bool {
    spec.activation_preference == Some(ActivationPreference::Lazy)
}

/// Whether binding `m` is a policy's (its labels name the claiming policy).
pub(super) fn is_policys(m: &ObjectMeta) -> bool {
    m.labels
        .as_ref()
        .is_some_and(|l| PolicyId::from_labels(l).is_some())
}

pub(super) fn annotation<'m>(m: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    m.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The spec the binding is made from: `policy`'s, with the snapshot's fields in place
/// of the policy's when the snapshot is kept.
pub(super) fn effective<'a>(
    policy: &'a PropagationSpec,
    activation: &Activation<'_>,
) -> Cow<'a, PropagationSpec> {
    let Activation::Kept(snapshot) = activation else {
        return Cow::Borrowed(policy);
    };
    let mut spec = policy.clone();
    spec.placement = snapshot.placement.clone();
    spec.conflict_resolution = snapshot.conflict_resolution;
    spec.propagate_deps = snapshot.propagate_deps;
    spec.suspension = snapshot.suspension.clone();
    spec.rollout = snapshot.rollout.clone();
    spec.redistribution = snapshot.redistribution.clone();
    spec.failover = snapshot.failover.clone();
    spec.preserve_resources_on_deletion = snapshot.preserve_resources_on_deletion;
    spec.dependent_overrides = snapshot.dependent_overrides.clone();
    Cow::Owned(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn template(created: i64, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo", "labels": labels,
                "creationTimestamp": at(created), "resourceVersion": "7", "generation": 2,
                "uid": "u1", "finalizers": ["causeway.io/propagation"]},
            "spec": {"replicas": 2},
            "status": {"replicas": 2},
        }))
        .unwrap()
    }

    fn lazy() -> PropagationSpec {
        PropagationSpec {
            activation_preference: Some(ActivationPreference::Lazy),
            ..PropagationSpec::default()
        }
    }

    fn binding(key: &str, hash: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some(PolicyId::namespaced("demo", "web").labels()),
            annotations: Some([(key.to_string(), hash.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_hash_follows_what_the_user_writes_only() {
        let t = template(100, json!({"app": "web"}));
        let h = template_hash(&t);
        // what the API server and Causeway write does not count
        let mut written = serde_json::to_value(&t).unwrap();
        written["metadata"]["resourceVersion"] = json!("8");
        written["metadata"]["generation"] = json!(3);
        written["metadata"]["finalizers"] = json!([]);
        written["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        written["status"] = json!({"replicas": 4});
        let written: DynamicObject = serde_json::from_value(written).unwrap();
        assert_eq!(template_hash(&written), h);
        // a label, an annotation or the spec does
        assert_ne!(template_hash(&template(100, json!({"app": "web2"}))), h);
        let mut annotated = serde_json::to_value(&t).unwrap();
        annotated["metadata"]["annotations"] = json!({"causeway.io/activate": "1"});
        let annotated: DynamicObject = serde_json::from_value(annotated).unwrap();
        assert_ne!(template_hash(&annotated), h);
        let mut spec = serde_json::to_value(&t).unwrap();
        spec["spec"]["replicas"] = json!(3);
        let spec: DynamicObject = serde_json::from_value(spec).unwrap();
        assert_ne!(template_hash(&spec), h);
    }

    /// A case: its name, the policy, the binding that exists, whether Works exist, and
    /// what is expected.
    type Case<'a> = (
        &'a str,
        PolicyRef<'a>,
        Option<(ObjectMeta, &'a BindingSpec)>,
        bool,
        Activation<'a>,
    );

    #[test]
    fn a_lazy_policy_waits_for_the_template_to_change() {
        let t = template(100, json!({}));
        let h = template_hash(&t);
        let (lazy, eager) = (lazy(), PropagationSpec::default());
        let policy = |spec, spec_changed| PolicyRef {
            namespace: Some("demo"),
            name: "web",
            spec,
            spec_changed,
        };
        let snapshot = BindingSpec::default();
        // a pending binding records the template's uid
        let mut pending_spec = BindingSpec::default();
        pending_spec.resource.uid = Some("u1".into());
        let mut other_uid = BindingSpec::default();
        other_uid.resource.uid = Some("u0".into());
        let dependency: BindingSpec = serde_json::from_value(json!({
            "resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "web"},
            "requiredBy": [{"namespace": "demo", "name": "api-deployment"}]}))
        .unwrap();
        let labelled = || ObjectMeta {
            labels: Some(PolicyId::namespaced("demo", "web").labels()),
            ..ObjectMeta::default()
        };
        let (before, same, after) = (at(50), at(100), at(150));
        let cases: Vec<Case> = vec![
            (
                "not lazy: at once",
                policy(&eager, Some(&before)),
                Some((binding(annotations::ACTIVATED_TEMPLATE, &h), &snapshot)),
                false,
                Activation::Now,
            ),
            (
                "lazy, unchanged: kept",
                policy(&lazy, Some(&before)),
                Some((binding(annotations::ACTIVATED_TEMPLATE, &h), &snapshot)),
                true,
                Activation::Kept(&snapshot),
            ),
            (
                "lazy, changed: at once",
                policy(&lazy, Some(&before)),
                Some((binding(annotations::ACTIVATED_TEMPLATE, "other"), &snapshot)),
                true,
                Activation::Now,
            ),
            (
                "lazy, a policy's binding from before the hash: kept",
                policy(&lazy, Some(&before)),
                Some((labelled(), &snapshot)),
                true,
                Activation::Kept(&snapshot),
            ),
            (
                "lazy, an empty hash (the policy was not Lazy): kept",
                policy(&lazy, Some(&before)),
                Some((binding(annotations::ACTIVATED_TEMPLATE, ""), &snapshot)),
                true,
                Activation::Kept(&snapshot),
            ),
            (
                "lazy, a dependency's binding: no snapshot, at once",
                policy(&lazy, Some(&after)),
                Some((ObjectMeta::default(), &dependency)),
                true,
                Activation::Now,
            ),
            (
                "lazy, new template after the policy: at once",
                policy(&lazy, Some(&before)),
                None,
                false,
                Activation::Now,
            ),
            (
                "lazy, new template in the same second: at once",
                policy(&lazy, Some(&same)),
                None,
                false,
                Activation::Now,
            ),
            (
                "lazy, template from before the policy's spec: pending",
                policy(&lazy, Some(&after)),
                None,
                false,
                Activation::Pending(h.clone()),
            ),
            (
                "lazy, the policy's last write not known: at once",
                policy(&lazy, None),
                None,
                false,
                Activation::Now,
            ),
            (
                "pending, but the template is from after the policy's last write: at once",
                policy(&lazy, Some(&before)),
                Some((binding(annotations::ACTIVATION_PENDING, &h), &pending_spec)),
                false,
                Activation::Now,
            ),
            (
                "lazy, its binding deleted while its Works run: at once",
                policy(&lazy, Some(&after)),
                None,
                true,
                Activation::Now,
            ),
            (
                "pending, unchanged: still",
                policy(&lazy, Some(&after)),
                Some((binding(annotations::ACTIVATION_PENDING, &h), &pending_spec)),
                false,
                Activation::Pending(h.clone()),
            ),
            (
                "pending, changed: at once",
                policy(&lazy, Some(&after)),
                Some((
                    binding(annotations::ACTIVATION_PENDING, "other"),
                    &pending_spec,
                )),
                false,
                Activation::Now,
            ),
            (
                "pending, the template made again: at once",
                policy(&lazy, Some(&after)),
                Some((binding(annotations::ACTIVATION_PENDING, &h), &other_uid)),
                false,
                Activation::Now,
            ),
            (
                "pending, the policy no longer lazy: at once",
                policy(&eager, Some(&after)),
                Some((binding(annotations::ACTIVATION_PENDING, &h), &pending_spec)),
                false,
                Activation::Now,
            ),
        ];
        for (case, p, existing, has_works, want) in cases {
            let existing = existing.as_ref().map(|(m, s)| (m, *s));
            let got = activation(&p, &t, &h, existing, has_works);
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn a_kept_snapshot_replaces_what_the_binding_takes_from_the_policy() {
        let mut policy = lazy();
        policy.propagate_deps = Some(true);
        policy.dependent_overrides = vec!["o".into()];
        policy.priority = Some(5);
        let snapshot = BindingSpec::default();
        let kept = effective(&policy, &Activation::Kept(&snapshot));
        assert_eq!(kept.propagate_deps, None);
        assert!(kept.dependent_overrides.is_empty());
        // what decides the claim stays the policy's
        assert_eq!(kept.priority, Some(5));
        assert!(*kept != policy);
        assert!(matches!(
            effective(&policy, &Activation::Now),
            Cow::Borrowed(_)
        ));
        assert!(*effective(&policy, &Activation::Now) == policy);
    }
}
