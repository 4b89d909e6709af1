//! Which propagation policy claims a resource template (federation.md §8 B.14–15).
//!
//! A resource template (any object on the hub) is propagated by at most one policy: a
//! `PropagationPolicy` in the template's namespace or a `ClusterPropagationPolicy`.
//! [`claim`] decides which, from the policies and the template's current claim:
//!
//! 1. **Matching** ([`resource_selector_matches`]): a selector matches when apiVersion
//!    and kind are equal, its namespace (if set) is the template's, and its name (if
//!    set) is the template's name; only without a name does its labelSelector count
//!    (as in Karmada: the name wins). A policy matches when any selector does; a
//!    PropagationPolicy only ever matches templates in its own namespace, and a
//!    ClusterPropagationPolicy never matches a template in a reserved namespace
//!    ([`is_reserved_namespace`]), nor such a Namespace object itself. No policy matches
//!    what every cluster keeps in every namespace itself
//!    ([`PUBLISHED_BY_EVERY_CLUSTER`]: `kube-root-ca.crt`, the `default`
//!    ServiceAccount), and [`validate_policy`] refuses a selector naming one. A policy with
//!    no selectors matches nothing ([`validate_policy`] rejects it: there is no
//!    select-all).
//! 2. **Ranking**, for a template no policy holds: a matching PropagationPolicy beats
//!    every ClusterPropagationPolicy whatever their priorities (Karmada's detector
//!    looks for a PropagationPolicy first and falls back to cluster policies only when
//!    none matches: `propagateResource` in `pkg/detector/policy.go`). Within one kind,
//!    the higher `priority` wins (default 0); at equal priority the more specific
//!    match wins ([`Specificity`]: name, then labelSelector, then kind only); then
//!    the lexicographically smaller name.
//! 3. **Claims stick**: a template claimed by a policy that still exists and still
//!    matches it stays with that policy, unless a policy with `preemption: Always`
//!    may take it over (Karmada's `pkg/detector/preemption.go`): a PropagationPolicy
//!    of higher priority preempts a PropagationPolicy; any PropagationPolicy with
//!    `Always` preempts a ClusterPropagationPolicy, whatever the priorities; a
//!    ClusterPropagationPolicy of higher priority preempts a ClusterPropagationPolicy,
//!    and never a PropagationPolicy. When several may preempt, the ranking of step 2
//!    picks one, so that the result is a fixed point: claiming again with the winner
//!    as the current claim keeps it. A claim whose policy is gone or no longer
//!    matches is dropped and the template is ranked afresh.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::core::DynamicObject;
use thiserror::Error;

use k8s_validation::FieldError;

use super::ResourceSelector;
use super::propagation::{
    ClusterPropagationPolicy, PreemptionBehavior, PropagationPolicy, PropagationSpec,
};
use crate::well_known::{
    EXECUTION_NAMESPACE_PREFIX, KUBERNETES_NAMESPACE_PREFIX, SYSTEM_NAMESPACE, labels as wk_labels,
};

pub mod labels;
#[cfg(test)]
mod tests;

/// Whether `namespace` is reserved, so that no ClusterPropagationPolicy selects from it:
/// Kubernetes' own (`kube-*`, as Karmada's default `--skipped-propagating-namespaces`)
/// and Causeway's (`causeway-system`, the execution namespaces `causeway-es-<cluster>`).
pub fn is_reserved_namespace(namespace: &str) -> bool {
    namespace.starts_with(KUBERNETES_NAMESPACE_PREFIX)
        || namespace == SYSTEM_NAMESPACE
        || namespace.starts_with(EXECUTION_NAMESPACE_PREFIX)
}

/// Objects every cluster keeps in every namespace itself, each cluster its own:
/// kube-controller-manager's `kube-root-ca.crt` ConfigMap (the cluster's own CA bundle)
/// and the `default` ServiceAccount. No policy propagates them: the hub's CA bundle
/// written into a member would break its Pods' trust in their own API server, and the
/// member's controller would fight the write.
pub const PUBLISHED_BY_EVERY_CLUSTER: [(&str, &str, &str); 2] = [
    ("v1", "ConfigMap", "kube-root-ca.crt"),
    ("v1", "ServiceAccount", "default"),
];

/// Whether (apiVersion, kind, name) is one of [`PUBLISHED_BY_EVERY_CLUSTER`].
pub fn is_published_by_every_cluster(api_version: &str, kind: &str, name: &str) -> bool {
    PUBLISHED_BY_EVERY_CLUSTER.contains(&(api_version, kind, name))
}

/// What selection needs to know about a resource template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateMeta {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// `metadata.namespace`; `None` for a cluster-scoped template.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
}

impl TemplateMeta {
    /// The selection view of an object read through the dynamic API. Fails when the
    /// object has no apiVersion, kind or name.
    pub fn from_object(obj: &DynamicObject) -> Result<Self, SelectionError> {
        let types = obj.types.clone().unwrap_or_default();
        let meta = Self {
            api_version: types.api_version,
            kind: types.kind,
            namespace: obj.namespace().filter(|ns| !ns.is_empty()),
            name: obj.name_any(),
            labels: obj.labels().clone(),
        };
        meta.check()?;
        Ok(meta)
    }

    /// The template's `kind/name` or `kind namespace/name`, for messages.
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    fn check(&self) -> Result<(), SelectionError> {
        for (field, value) in [
            ("apiVersion", &self.api_version),
            ("kind", &self.kind),
            ("metadata.name", &self.name),
        ] {
            if value.is_empty() {
                return Err(SelectionError::InvalidTemplate {
                    template: self.describe(),
                    field,
                });
            }
        }
        Ok(())
    }

    /// Whether this template is one of the reserved namespaces itself (a `v1`
    /// Namespace named like one), which no ClusterPropagationPolicy propagates.
    fn is_reserved_namespace_object(&self) -> bool {
        self.api_version == "v1" && self.kind == "Namespace" && is_reserved_namespace(&self.name)
    }
}

/// Identifies a PropagationPolicy (namespace and name) or a ClusterPropagationPolicy
/// (name only).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    /// The PropagationPolicy's namespace; `None` for a ClusterPropagationPolicy.
    pub namespace: Option<String>,
    /// The policy's name.
    pub name: String,
}

impl PolicyId {
    /// A PropagationPolicy.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A ClusterPropagationPolicy.
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }

    /// The labels a binding carries to name the policy that claimed its template:
    /// [`wk_labels::POLICY_NAME`] and, for a PropagationPolicy,
    /// [`wk_labels::POLICY_NAMESPACE`].
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::from([(wk_labels::POLICY_NAME.to_string(), self.name.clone())]);
        if let Some(ns) = &self.namespace {
            out.insert(wk_labels::POLICY_NAMESPACE.to_string(), ns.clone());
        }
        out
    }

    /// The policy named by a binding's labels (see [`PolicyId::labels`]); `None`
    /// when there is no non-empty policy-name label.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Self> {
        let name = labels
            .get(wk_labels::POLICY_NAME)
            .filter(|n| !n.is_empty())?;
        Some(Self {
            namespace: labels
                .get(wk_labels::POLICY_NAMESPACE)
                .filter(|ns| !ns.is_empty())
                .cloned(),
            name: name.clone(),
        })
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "PropagationPolicy {ns}/{}", self.name),
            None => write!(f, "ClusterPropagationPolicy {}", self.name),
        }
    }
}

/// A PropagationPolicy or ClusterPropagationPolicy, as selection sees it.
#[derive(Clone, Copy, Debug)]
pub struct PolicyRef<'a> {
    /// The PropagationPolicy's namespace; `None` for a ClusterPropagationPolicy.
    pub namespace: Option<&'a str>,
    /// The policy's name.
    pub name: &'a str,
    /// The policy's spec.
    pub spec: &'a PropagationSpec,
    /// When the policy itself (not its status) was last written, by the API server's
    /// clock (`metadata.managedFields`, else its creation): `activationPreference: Lazy`
    /// leaves alone the templates that were there before then until they change.
    /// `None`: not known (then nothing is held back).
    pub spec_changed: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// [`PolicyRef::spec_changed`] of a policy with `meta`: the latest time the API server
/// stamped on a write of the policy itself (not of its status) in `managedFields`, else
/// its creation.
fn spec_changed(
    meta: &kube::api::ObjectMeta,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    last_written(meta.managed_fields.as_deref().unwrap_or_default())
        .or(meta.creation_timestamp.as_ref())
}

/// When an object itself (not a subresource such as `status`) was last written, by
/// the API server's clock: the latest time among its `managedFields` entries.
pub fn last_written(
    fields: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry],
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    fields
        .iter()
        .filter(|m| m.subresource.as_deref().unwrap_or_default().is_empty())
        .filter_map(|m| m.time.as_ref())
        .max_by_key(|t| t.0)
}

impl<'a> PolicyRef<'a> {
    /// A PropagationPolicy (a policy without a namespace is read as in `default`, as
    /// the API server would have defaulted it).
    pub fn from_pp(policy: &'a PropagationPolicy) -> Self {
        Self {
            namespace: Some(policy.metadata.namespace.as_deref().unwrap_or("default")),
            name: policy.metadata.name.as_deref().unwrap_or_default(),
            spec: &policy.spec,
            spec_changed: spec_changed(&policy.metadata),
        }
    }

    /// A ClusterPropagationPolicy.
    pub fn from_cpp(policy: &'a ClusterPropagationPolicy) -> Self {
        Self {
            namespace: None,
            name: policy.metadata.name.as_deref().unwrap_or_default(),
            spec: &policy.spec,
            spec_changed: spec_changed(&policy.metadata),
        }
    }

    /// The policy's identity.
    pub fn id(&self) -> PolicyId {
        PolicyId {
            namespace: self.namespace.map(str::to_string),
            name: self.name.to_string(),
        }
    }

    /// `spec.priority`, default 0.
    pub fn priority(&self) -> i32 {
        self.spec.priority.unwrap_or(0)
    }

    fn preempts(&self) -> bool {
        self.spec.preemption == Some(PreemptionBehavior::Always)
    }

    /// How specifically this policy selects `template`; `None` when it does not
    /// select it at all (see the module documentation for the scope rules).
    pub fn specificity(&self, template: &TemplateMeta) -> Option<Specificity> {
        if is_published_by_every_cluster(&template.api_version, &template.kind, &template.name) {
            return None;
        }
        match self.namespace {
            Some(ns) if template.namespace.as_deref() != Some(ns) => return None,
            None if template
                .namespace
                .as_deref()
                .is_some_and(is_reserved_namespace)
                || template.is_reserved_namespace_object() =>
            {
                return None;
            }
            _ => {}
        }
        policy_specificity(&self.spec.resource_selectors, template)
    }

    /// The ranking key of step 2 (greater is better): PropagationPolicy first, then
    /// priority, then specificity, then the smaller name.
    fn rank(&self, specificity: Specificity) -> (bool, i32, Specificity, std::cmp::Reverse<&str>) {
        (
            self.namespace.is_some(),
            self.priority(),
            specificity,
            std::cmp::Reverse(self.name),
        )
    }

    /// Whether this policy may take a template over from `holder` (step 3).
    fn can_preempt(&self, holder: &PolicyRef<'_>) -> bool {
        if !self.preempts() || self.id() == holder.id() {
            return false;
        }
        match (self.namespace, holder.namespace) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            _ => self.priority() > holder.priority(),
        }
    }
}

/// How precisely a selector matches a template (Karmada's implicit priority). Greater
/// is more specific.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Specificity {
    /// Matched by apiVersion and kind (and namespace) only.
    KindOnly,
    /// Matched by labelSelector.
    LabelSelector,
    /// Matched by name.
    Name,
}

/// How `sel` matches `template`; `None` when it does not. A selector's name, when set,
/// decides alone (its labelSelector is ignored); an invalid labelSelector matches
/// nothing.
pub fn selector_specificity(
    sel: &ResourceSelector,
    template: &TemplateMeta,
) -> Option<Specificity> {
    let namespace = sel.namespace.as_deref().filter(|ns| !ns.is_empty());
    if sel.api_version != template.api_version
        || sel.kind != template.kind
        || namespace.is_some_and(|ns| template.namespace.as_deref() != Some(ns))
    {
        return None;
    }
    if let Some(name) = sel.name.as_deref().filter(|n| !n.is_empty()) {
        return (name == template.name).then_some(Specificity::Name);
    }
    match &sel.label_selector {
        None => Some(Specificity::KindOnly),
        Some(ls) => labels::matches(ls, &template.labels).then_some(Specificity::LabelSelector),
    }
}

/// Whether `sel` selects `template` (see [`selector_specificity`]).
pub fn resource_selector_matches(sel: &ResourceSelector, template: &TemplateMeta) -> bool {
    selector_specificity(sel, template).is_some()
}

/// The most specific match of any of `selectors`; `None` when none matches (and
/// always for an empty list).
pub fn policy_specificity(
    selectors: &[ResourceSelector],
    template: &TemplateMeta,
) -> Option<Specificity> {
    selectors
        .iter()
        .filter_map(|sel| selector_specificity(sel, template))
        .max()
}

/// The outcome of [`claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The policy that holds the template.
    pub policy: PolicyId,
    /// How specifically it selects the template.
    pub specificity: Specificity,
    /// The policy the template was taken from by preemption, if it was.
    pub preempted: Option<PolicyId>,
}

/// Which policy holds `template`, given every PropagationPolicy and
/// ClusterPropagationPolicy (`policies`, in any order) and the policy that held it so
/// far (`current`, e.g. [`PolicyId::from_labels`] of its binding). `Ok(None)` when no
/// policy selects it. The rules are in the module documentation.
///
/// Fails when the template has no apiVersion, kind or name, or when a policy is
/// listed twice.
pub fn claim(
    template: &TemplateMeta,
    policies: &[PolicyRef<'_>],
    current: Option<&PolicyId>,
) -> Result<Option<Claim>, SelectionError> {
    template.check()?;
    let mut seen = BTreeSet::new();
    for p in policies {
        let id = p.id();
        if !seen.insert(id.clone()) {
            return Err(SelectionError::DuplicatePolicy(id));
        }
    }
    let matching: Vec<(PolicyRef<'_>, Specificity)> = policies
        .iter()
        .filter_map(|p| Some((*p, p.specificity(template)?)))
        .collect();
    let best = |candidates: &mut dyn Iterator<Item = &(PolicyRef<'_>, Specificity)>| {
        candidates
            .max_by(|(a, sa), (b, sb)| a.rank(*sa).cmp(&b.rank(*sb)))
            .map(|(p, s)| (p.id(), *s))
    };
    let holder = current.and_then(|id| matching.iter().find(|(p, _)| p.id() == *id));
    let result = match holder {
        Some((held, held_specificity)) => {
            match best(&mut matching.iter().filter(|(p, _)| p.can_preempt(held))) {
                Some((policy, specificity)) => Claim {
                    policy,
                    specificity,
                    preempted: Some(held.id()),
                },
                None => Claim {
                    policy: held.id(),
                    specificity: *held_specificity,
                    preempted: None,
                },
            }
        }
        None => match best(&mut matching.iter()) {
            Some((policy, specificity)) => Claim {
                policy,
                specificity,
                preempted: None,
            },
            None => return Ok(None),
        },
    };
    Ok(Some(result))
}

/// Checks the selection rules of a policy (B.15): at least one resource selector;
/// each with an apiVersion and a kind and a valid labelSelector; a
/// PropagationPolicy's selectors only in its own namespace; a
/// ClusterPropagationPolicy's never in a reserved namespace. The placement is
/// checked by the scheduler.
pub fn validate_policy(policy: &PolicyRef<'_>) -> Result<(), SelectionError> {
    let mut errors = Vec::new();
    let mut push = |field: String, value: &str, message: String| {
        errors.push(FieldError {
            field,
            value: value.to_string(),
            message,
        })
    };
    if policy.name.len() > 63 {
        push(
            "metadata.name".into(),
            policy.name,
            format!(
                "{} characters: a policy's name is written into the label {} of every binding it claims, and a label value holds at most 63; rename the policy",
                policy.name.len(),
                crate::well_known::labels::POLICY_NAME
            ),
        );
    }
    let selectors = &policy.spec.resource_selectors;
    if selectors.is_empty() {
        push(
            "spec.resourceSelectors".into(),
            "[]",
            "at least one resource selector is required (there is no select-all, so that \
             nothing, Secrets included, is propagated by accident): give the apiVersion and \
             kind, and a name or labelSelector, of the resources to propagate"
                .into(),
        );
    }
    for (i, sel) in selectors.iter().enumerate() {
        let at = format!("spec.resourceSelectors[{i}]");
        if sel.api_version.is_empty() {
            push(
                format!("{at}.apiVersion"),
                "",
                "required: the API version of the resources to propagate, e.g. apps/v1".into(),
            );
        }
        if sel.kind.is_empty() {
            push(
                format!("{at}.kind"),
                "",
                "required: the kind of the resources to propagate, e.g. Deployment".into(),
            );
        }
        let namespace = sel.namespace.as_deref().filter(|ns| !ns.is_empty());
        match (policy.namespace, namespace) {
            (Some(own), Some(ns)) if ns != own => push(
                format!("{at}.namespace"),
                ns,
                format!(
                    "a PropagationPolicy selects only resources in its own namespace {own:?}: \
                     leave namespace empty or set it to {own:?}, or use a \
                     ClusterPropagationPolicy"
                ),
            ),
            (None, Some(ns)) if is_reserved_namespace(ns) => {
                push(format!("{at}.namespace"), ns, reserved_message())
            }
            _ => {}
        }
        let selects_reserved_namespace_object = sel.api_version == "v1"
            && sel.kind == "Namespace"
            && sel.name.as_deref().is_some_and(is_reserved_namespace);
        if policy.namespace.is_none() && selects_reserved_namespace_object {
            push(
                format!("{at}.name"),
                sel.name.as_deref().unwrap_or_default(),
                reserved_message(),
            );
        }
        if let Some(name) = sel.name.as_deref()
            && is_published_by_every_cluster(&sel.api_version, &sel.kind, name)
        {
            push(
                format!("{at}.name"),
                name,
                format!(
                    "every cluster keeps its own {} {name:?} in every namespace (its own \
                     kube-controller-manager writes it), so it is never propagated: remove \
                     this selector",
                    sel.kind
                ),
            );
        }
        if let Some(ls) = &sel.label_selector {
            for e in labels::validate(ls, &format!("{at}.labelSelector")) {
                push(e.field, &e.value, e.message);
            }
        }
    }
    for (i, w) in policy
        .spec
        .rollout
        .iter()
        .flat_map(|r| r.waves.iter())
        .enumerate()
    {
        let at = format!("spec.rollout.waves[{i}]");
        if w.cluster_names.is_empty() && w.label_selector.is_none() {
            push(
                at.clone(),
                "",
                "a wave selects no cluster: give clusterNames or a labelSelector (clusters no \
                 wave selects go last, in a wave of their own)"
                    .into(),
            );
        }
        if let Some(ls) = &w.label_selector {
            for e in labels::validate(ls, &format!("{at}.labelSelector")) {
                push(e.field, &e.value, e.message);
            }
        }
    }
    if let Some(secs) = policy
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.progress_deadline_seconds)
        .filter(|s| *s < 1)
    {
        push(
            "spec.rollout.progressDeadlineSeconds".into(),
            &secs.to_string(),
            "must be at least 1 (seconds a wave may take); leave it out for no deadline".into(),
        );
    }
    if let Some(secs) = policy
        .spec
        .redistribution
        .as_ref()
        .and_then(|r| r.progress_deadline_seconds)
        .filter(|s| *s < 1)
    {
        push(
            "spec.redistribution.progressDeadlineSeconds".into(),
            &secs.to_string(),
            "must be at least 1 (seconds a hold may go without a replica moving); leave it out for no deadline".into(),
        );
    }
    if let Some(r) = &policy.spec.redistribution
        && let Err(e) = crate::federation::redistribution::max_unavailable(Some(r), 100)
    {
        let value = match &r.max_unavailable {
            Some(IntOrString::Int(n)) => n.to_string(),
            Some(IntOrString::String(s)) => s.clone(),
            None => String::new(),
        };
        push("spec.redistribution.maxUnavailable".into(), &value, e);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SelectionError::InvalidPolicy {
            policy: policy.id(),
            errors,
        })
    }
}

fn reserved_message() -> String {
    format!(
        "a ClusterPropagationPolicy never selects resources in the reserved namespaces \
         ({KUBERNETES_NAMESPACE_PREFIX}*, {SYSTEM_NAMESPACE}, {EXECUTION_NAMESPACE_PREFIX}*): \
         propagate from another namespace, or with a PropagationPolicy in that namespace"
    )
}

/// Why a policy or a template cannot take part in selection.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SelectionError {
    /// The policy breaks the selection rules; each error names the field and the fix.
    #[error("{policy} is invalid: {}", join(.errors))]
    InvalidPolicy {
        /// The policy.
        policy: PolicyId,
        /// What is wrong, per field.
        errors: Vec<FieldError>,
    },
    /// The resource template lacks a field selection needs.
    #[error(
        "resource template {template:?} has no {field}: only complete objects (apiVersion, kind, metadata.name) can be propagated"
    )]
    InvalidTemplate {
        /// The template, as far as it is known.
        template: String,
        /// The missing field.
        field: &'static str,
    },
    /// A template would have the binding another template of the same kind name and
    /// namespace/name, in another API group, has (bindings are named `<name>-<kind>`,
    /// whatever the group): it is not propagated.
    #[error("{0}")]
    BindingNameTaken(Box<BindingNameTaken>),
    /// The same policy was passed twice to [`claim`].
    #[error(
        "{0} is listed twice: pass each policy once (a PropagationPolicy is identified by namespace and name, a ClusterPropagationPolicy by name)"
    )]
    DuplicatePolicy(PolicyId),
}

/// A template whose binding name (`<name>-<kind>`) another template's binding has:
/// one of the same kind name and namespace/name in another API group (Gateway API's
/// and Istio's `Gateway`, core and Knative `Service`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "{kind} {} in {api_version} is not propagated: its binding {binding:?} is taken by the {kind} of the same name in {holder} (a binding is named <name>-<kind>, whatever the API group): rename one of the two, or propagate only one",
    match namespace { Some(ns) => format!("{ns}/{name}"), None => name.clone() }
)]
pub struct BindingNameTaken {
    /// The template's apiVersion.
    pub api_version: String,
    /// The template's kind.
    pub kind: String,
    /// The template's namespace; `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// The template's name.
    pub name: String,
    /// The binding's name.
    pub binding: String,
    /// The apiVersion of the template that has the binding.
    pub holder: String,
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
