//! `ResourceBinding` (namespaced) and `ClusterResourceBinding` (cluster-scoped): one
//! per propagated resource template, in the template's namespace (cluster-scoped
//! templates get a ClusterResourceBinding). It records which template, the policy
//! that claimed it (labels [`labels::POLICY_NAME`] and [`labels::POLICY_NAMESPACE`],
//! see [`super::selection::PolicyId::labels`]), the scheduling result, and the
//! status aggregated from the members.
//!
//! The shape is Karmada's `work.karmada.io/v1alpha2` ResourceBinding trimmed to what
//! Causeway uses (federation.md §1.4), plus ★ a reason for every cluster the
//! scheduler did not choose (`status.schedulingReasons`). Both kinds share
//! [`BindingSpec`] and [`BindingStatus`].
//!
//! [`labels::POLICY_NAME`]: crate::well_known::labels::POLICY_NAME
//! [`labels::POLICY_NAMESPACE`]: crate::well_known::labels::POLICY_NAMESPACE

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::propagation::{Placement, Suspension};
use super::work::ResourceHealth;
use super::{ConflictResolution, newtype_spec};

/// What one replica of a workload asks for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRequirements {
    /// The pod template's CPU and memory requests, counted as kube-scheduler does
    /// (the sum of the containers', or the largest init container's if more).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_request: BTreeMap<String, Quantity>,
}

impl ReplicaRequirements {
    /// The requirements of a template (`None` when its pods request nothing).
    pub fn of(template: &serde_json::Value) -> Option<ReplicaRequirements> {
        let resource_request = crate::federation::divide::pod_request(template);
        (!resource_request.is_empty()).then_some(ReplicaRequirements { resource_request })
    }
}

/// The spec shared by ResourceBinding and ClusterResourceBinding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// The resource template this binding propagates.
    pub resource: ResourceReference,

    /// The template's replica count, for workloads (`spec.replicas`); unset for
    /// resources without replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// What one replica asks for (Karmada's `replicaRequirements`), for a division by
    /// available replicas; unset for resources without a pod template, or whose pods
    /// request no CPU or memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,

    /// The scheduling result: the clusters the template goes to, and how many
    /// replicas each runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<TargetCluster>,

    /// The placement of the claiming policy, copied when it claimed the template.
    #[serde(default, skip_serializing_if = "Placement::is_unset")]
    pub placement: Placement,

    /// What to do when the resource already exists in a member and was not created
    /// by Causeway (copied from the policy): Abort (the default) or Overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,

    /// Also propagate what the template depends on (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,

    /// Suspends dispatching to all or some clusters (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,

    /// The ordered rollout of template changes (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::federation::rollout::Rollout>,

    /// How replicas move between clusters (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redistribution: Option<crate::federation::redistribution::Redistribution>,

    /// What to do when a cluster fails (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::federation::propagation::FailoverBehavior>,

    /// Keep the member copies when the template is deleted (copied from the policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,

    /// The OverridePolicies (in the template's namespace) that must exist before
    /// anything is rendered (copied from the policy's `dependentOverrides`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependent_overrides: Vec<String>,

    /// Asks for a fresh division of the replicas (C.23, Karmada's field of the same
    /// name): when it is later than `status.lastScheduledTime`, a division by available
    /// replicas is computed anew from the clusters' capacity instead of keeping the
    /// previous assignment. Set by hand (`kubectl patch`); Causeway keeps it as set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_triggered_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,

    /// The clusters application failover (`failover.application`) moved the template
    /// away from, kept out of the placement until the template's next generation. The
    /// detector writes them; removing one (`kubectl edit`) lets the cluster be
    /// scheduled again at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub evictions: Vec<Eviction>,

    /// Clusters cluster failover moved the template away from, with the state
    /// `failover.cluster.statePreservation` kept, while they stay failed over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub cluster_failovers: Vec<ClusterFailover>,

    /// For the binding of a dependency (a ConfigMap, Secret, ServiceAccount or PVC a
    /// propagated workload uses, with `propagateDeps`): the bindings that need it. Its
    /// clusters are the union of theirs (and, when a policy of its own places it or did,
    /// of that policy's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_by: Vec<BindingSnapshot>,

    /// For the binding of a dependency: the clusters where a binding that needs it
    /// keeps its member copy when deleted (that binding's
    /// `preserveResourcesOnDeletion`, or its template's
    /// `causeway.io/preserve-resources-on-clusters` annotation). The dependency's copies
    /// there are kept too: a kept workload would not restart without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preserve_resources_on_clusters: Vec<String>,
}

/// A cluster application failover moved a template away from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Eviction {
    /// Name of the Cluster.
    pub cluster: String,

    /// Why, for people.
    pub reason: String,

    /// When the template was moved away.
    pub evicted_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,

    /// The template generation that was unhealthy there; a later generation may be
    /// scheduled there again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_generation: Option<i64>,

    /// What `statePreservation` read from the failed copy's status, as the labels the
    /// copies in clusters that did not run it before get.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved_label_state: BTreeMap<String, String>,

    /// The clusters the template ran in when it was moved away (those do not get the
    /// preserved labels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters_before_failover: Vec<String>,
}

/// A cluster that cluster failover moved a template away from, recorded while it stays
/// failed over when the policy has `failover.cluster.statePreservation`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFailover {
    /// Name of the Cluster.
    pub cluster: String,

    /// What was kept, or why nothing was, for people.
    pub reason: String,

    /// When the template was moved away.
    pub failed_over_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,

    /// What `statePreservation` read from the failed copy's last reported status, as
    /// the labels the copies in clusters that did not run it before get.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved_label_state: BTreeMap<String, String>,

    /// The clusters the template ran in when it was moved away (those do not get the
    /// preserved labels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters_before_failover: Vec<String>,
}

/// A binding that requires a dependency, and where it is scheduled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSnapshot {
    /// Namespace of the requiring binding (unset for a ClusterResourceBinding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Name of the requiring binding.
    pub name: String,

    /// Its clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<TargetCluster>,
}

/// Identifies a resource template on the hub.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReference {
    /// API version, e.g. `apps/v1`.
    pub api_version: String,

    /// Kind, e.g. `Deployment`.
    pub kind: String,

    /// Namespace; unset for a cluster-scoped template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Name.
    pub name: String,

    /// UID, so that a template deleted and created again is told apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,

    /// The resourceVersion of the template this binding was last computed from. Causeway
    /// leaves it unset: the hub writes the template's aggregated status, and recording
    /// each resulting resourceVersion would rewrite the binding for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl ResourceReference {
    /// Whether this references the object of `api_version`, `kind`, `namespace` and
    /// `name`: the same API group (any version of it serves the same object), kind,
    /// namespace and name.
    pub fn is(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        api_group(&self.api_version) == api_group(api_version)
            && self.kind == kind
            && self.namespace.as_deref().filter(|n| !n.is_empty())
                == namespace.filter(|n| !n.is_empty())
            && self.name == name
    }
}

/// The API group of an apiVersion: `apps` of `apps/v1`, "" (the core group) of `v1`.
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// One cluster of the scheduling result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetCluster {
    /// Name of the Cluster.
    pub name: String,

    /// Replicas this cluster runs; unset for resources without replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// What the scheduler decided and what the members report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// `Scheduled` (the scheduling result is current) and `FullyApplied` (every
    /// scheduled cluster has applied the resource); see [`conditions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The resource's status in each scheduled cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["clusterName"]))]
    pub aggregated_status: Vec<AggregatedStatusItem>,

    /// Why each cluster that was not chosen was left out, e.g. "taint
    /// cluster.causeway.io/not-ready:NoSchedule not tolerated".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub scheduling_reasons: Vec<SchedulingReason>,

    /// With `spec.rollout`: the wave the rollout waits on and since when (what
    /// `progressDeadlineSeconds` is measured from); absent once every wave is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::federation::rollout::WaveProgress>,

    /// While replicas are held (make-before-break): since when none has moved (what
    /// `spec.redistribution.progressDeadlineSeconds` is measured from); absent when
    /// nothing is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redistribution: Option<crate::federation::redistribution::HoldProgress>,

    /// When the last reschedule `spec.rescheduleTriggeredAt` asked for was carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl BindingStatus {
    /// Whether the binding is frozen because no policy in force claims its template:
    /// none claims it any more (`Scheduled=False`, `PolicyRemoved`), or the policy
    /// holding it is invalid (`PolicyInvalid`). Nothing is re-rendered for it.
    pub fn policy_removed(&self) -> bool {
        self.conditions.iter().any(|c| {
            c.type_ == conditions::SCHEDULED
                && (c.reason == conditions::REASON_POLICY_REMOVED
                    || c.reason == conditions::REASON_POLICY_INVALID)
        })
    }

    /// Whether the binding is frozen because the policy holding it is invalid
    /// (`Scheduled=False`, `PolicyInvalid`): the template is still that policy's.
    pub fn policy_invalid(&self) -> bool {
        self.conditions.iter().any(|c| {
            c.type_ == conditions::SCHEDULED && c.reason == conditions::REASON_POLICY_INVALID
        })
    }

    /// Whether the scheduling result is current (`Scheduled=True`).
    pub fn scheduled(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == conditions::SCHEDULED && c.status == "True")
    }
}

/// The resource's status in one member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatusItem {
    /// Name of the Cluster.
    pub cluster_name: String,

    /// The member object's status, as found there (raw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub status: Option<serde_json::Value>,

    /// Whether the resource was applied to the cluster.
    #[serde(default)]
    pub applied: bool,

    /// Why it was not applied (or a note on how it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_message: Option<String>,

    /// Health of the member object: Healthy, Unhealthy or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
}

/// Why the scheduler did not choose a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingReason {
    /// Name of the Cluster.
    pub cluster: String,

    /// Why it was not chosen, for people.
    pub reason: String,
}

/// A resource template propagated by a PropagationPolicy or ClusterPropagationPolicy
/// (the BindingSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ResourceBinding",
    plural = "resourcebindings",
    namespaced,
    status = "BindingStatus",
    shortname = "rb",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ResourceBinding binds a namespaced resource template to the member clusters it is propagated to.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.resource.kind"),
    printcolumn(name = "Template", type_ = "string", json_path = ".spec.resource.name"),
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".metadata.labels.causeway\\.io/policy-name"
    ),
    printcolumn(
        name = "Scheduled",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Scheduled\")].status"
    ),
    printcolumn(
        name = "Fully-Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"FullyApplied\")].status"
    ),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"RolledOut\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct ResourceBindingSpec(pub BindingSpec);
newtype_spec!(ResourceBindingSpec => BindingSpec);

/// A cluster-scoped resource template propagated by a ClusterPropagationPolicy (the
/// BindingSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ClusterResourceBinding",
    plural = "clusterresourcebindings",
    status = "BindingStatus",
    shortname = "crb",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterResourceBinding binds a cluster-scoped resource template to the member clusters it is propagated to.",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.resource.kind"),
    printcolumn(name = "Template", type_ = "string", json_path = ".spec.resource.name"),
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".metadata.labels.causeway\\.io/policy-name"
    ),
    printcolumn(
        name = "Scheduled",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Scheduled\")].status"
    ),
    printcolumn(
        name = "Fully-Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"FullyApplied\")].status"
    ),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"RolledOut\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct ClusterResourceBindingSpec(pub BindingSpec);
newtype_spec!(ClusterResourceBindingSpec => BindingSpec);

/// The name of the binding of a template: `<name>-<kind>`, lower-cased, with `:`
/// (allowed in some names, e.g. ClusterRoles `system:...`) replaced by `.`, as Karmada
/// names its bindings; hashed when longer than a name may be (253).
pub fn binding_name(kind: &str, name: &str) -> String {
    crate::names::bounded(format!("{name}-{kind}").to_lowercase().replace(':', "."))
}

/// Condition types and reasons of the binding kinds.
pub mod conditions {
    /// `Scheduled`: the scheduling result in spec.clusters is current.
    pub const SCHEDULED: &str = "Scheduled";
    /// `FullyApplied`: every scheduled cluster has applied the resource.
    pub const FULLY_APPLIED: &str = "FullyApplied";
    /// `RolledOut` (only with `spec.rollout`): every wave runs the template's
    /// generation, applied and healthy.
    pub const ROLLED_OUT: &str = "RolledOut";

    /// `Scheduled=True`.
    pub const REASON_SUCCESS: &str = "Success";
    /// `Scheduled=False`: no cluster passed the placement; schedulingReasons says why
    /// for each.
    pub const REASON_NO_CLUSTER_FIT: &str = "NoClusterFit";
    /// `Scheduled=False`: clusters fit, but the replicas or spread constraints cannot
    /// be satisfied.
    pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
    /// `Scheduled=False`: the placement is invalid or scheduling failed otherwise;
    /// the message says what to fix.
    pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";
    /// `Scheduled=False`: no policy claims the template any more (the policy was
    /// deleted or no longer selects it). The binding and the member copies stay as
    /// they are, frozen: nothing is re-rendered until a policy claims the template
    /// again; deleting the template removes the copies (G.47, D.32).
    pub const REASON_POLICY_REMOVED: &str = "PolicyRemoved";
    /// `Scheduled=False`: the policy that holds the template became invalid (B.15). It
    /// keeps the template (no other policy takes it): the binding and the member copies
    /// stay as they are, frozen, until the policy is fixed; the message names the
    /// policy and what is wrong.
    pub const REASON_POLICY_INVALID: &str = "PolicyInvalid";
    /// `Scheduled=False`: a policy with `activationPreference: Lazy` claimed a template
    /// that existed before it; it is propagated once the template changes.
    pub const REASON_ACTIVATION_PENDING: &str = "ActivationPending";
    /// `FullyApplied=True`.
    pub const REASON_FULLY_APPLIED_SUCCESS: &str = "FullyAppliedSuccess";
    /// `FullyApplied=False`: the message names the clusters that have not applied.
    pub const REASON_FULLY_APPLIED_FAILED: &str = "FullyAppliedFailed";
    /// `RolledOut=True`.
    pub const REASON_ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// `RolledOut=Unknown`: the template has no `metadata.generation` to order by.
    pub const REASON_NO_GENERATION: &str = "NoGeneration";
    /// `RolledOut=False`: the message names the wave, the clusters it waits for and
    /// why, and the clusters held at what they run.
    pub const REASON_WAVE_IN_PROGRESS: &str = "WaveInProgress";
    /// `RolledOut=False`: the wave waited on has taken longer than the rollout's
    /// `progressDeadlineSeconds` (it still waits; nothing is rolled back).
    pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// `Redistributed` (Deployments, ReplicaSets, StatefulSets): every cluster runs its
    /// share of the replicas; False while some cluster keeps more, until the others
    /// run enough of them available (make-before-break).
    pub const REDISTRIBUTED: &str = "Redistributed";
    /// `Redistributed=True`.
    pub const REASON_SHARES_APPLIED: &str = "SharesApplied";
    /// `Redistributed=False`: the message names the clusters kept above their share
    /// and the available replicas waited for.
    pub const REASON_HOLDING_REPLICAS: &str = "HoldingReplicas";
    /// `Redistributed=False`: `spec.redistribution.maxUnavailable` is unusable, so the
    /// shares were written at once.
    pub const REASON_INVALID_MAX_UNAVAILABLE: &str = "InvalidMaxUnavailable";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::selection::PolicyId;
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn crds_have_short_names_scopes_and_the_kubectl_get_columns() {
        use kube::CustomResourceExt;
        for (crd, scope, short) in [
            (ResourceBinding::crd(), "Namespaced", "rb"),
            (ClusterResourceBinding::crd(), "Cluster", "crb"),
        ] {
            assert_eq!(crd.spec.scope, scope);
            assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
            assert_eq!(
                crd.spec.names.categories,
                Some(vec!["causeway".to_string()])
            );
            let version = &crd.spec.versions[0];
            assert!(
                version
                    .subresources
                    .as_ref()
                    .is_some_and(|s| s.status.is_some())
            );
            let cols: Vec<_> = version
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| (c.name.as_str(), c.json_path.as_str()))
                .collect();
            assert_eq!(
                cols,
                [
                    ("Kind", ".spec.resource.kind"),
                    ("Template", ".spec.resource.name"),
                    ("Policy", ".metadata.labels.causeway\\.io/policy-name"),
                    (
                        "Scheduled",
                        ".status.conditions[?(@.type==\"Scheduled\")].status"
                    ),
                    (
                        "Fully-Applied",
                        ".status.conditions[?(@.type==\"FullyApplied\")].status"
                    ),
                    (
                        "Rollout",
                        ".status.conditions[?(@.type==\"RolledOut\")].reason"
                    ),
                    ("Age", ".metadata.creationTimestamp"),
                ]
            );
        }
    }

    #[test]
    fn a_reference_names_one_object_in_any_version_of_its_group() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(
            api_group("gateway.networking.k8s.io/v1"),
            "gateway.networking.k8s.io"
        );
        let r = ResourceReference {
            api_version: "gateway.networking.k8s.io/v1".into(),
            kind: "Gateway".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
            ..ResourceReference::default()
        };
        let gw = "gateway.networking.k8s.io/v1beta1";
        assert!(r.is(gw, "Gateway", Some("shop"), "web"));
        assert!(!r.is("networking.istio.io/v1", "Gateway", Some("shop"), "web"));
        assert!(!r.is(gw, "Gateway", Some("other"), "web"));
        assert!(!r.is(gw, "Gateway", None, "web"));
    }

    #[test]
    fn binding_names_follow_karmada() {
        let table = [
            ("Deployment", "web", "web-deployment"),
            (
                "ClusterRole",
                "system:aggregate-to-edit",
                "system.aggregate-to-edit-clusterrole",
            ),
            ("ConfigMap", "Mixed", "mixed-configmap"),
        ];
        for (kind, name, want) in table {
            assert_eq!(binding_name(kind, name), want);
        }
    }

    #[test]
    fn resource_binding_round_trips_in_karmada_shape() {
        let doc = json!({
            "apiVersion": "causeway.io/v1alpha1",
            "kind": "ResourceBinding",
            "metadata": {
                "name": "web-deployment",
                "namespace": "demo",
                "labels": {"causeway.io/policy-name": "web", "causeway.io/policy-namespace": "demo"},
            },
            "spec": {
                "resource": {
                    "apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo",
                    "name": "web", "uid": "u-1", "resourceVersion": "42",
                },
                "replicas": 3,
                "clusters": [{"name": "m1", "replicas": 3}, {"name": "m2", "replicas": 3}],
                "placement": {"clusterAffinity": {"clusterNames": ["m1", "m2"]}},
                "conflictResolution": "Overwrite",
                "propagateDeps": true,
            },
            "status": {
                "conditions": [{
                    "type": "Scheduled", "status": "True", "reason": "Success", "message": "",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }],
                "aggregatedStatus": [{
                    "clusterName": "m1", "status": {"readyReplicas": 3}, "applied": true,
                    "health": "Healthy",
                }, {
                    "clusterName": "m2", "applied": false,
                    "appliedMessage": "already exists and is not managed by Causeway",
                }],
                "schedulingReasons": [{"cluster": "m3", "reason": "not matched by clusterNames [m1, m2]"}],
            },
        });
        let rb: ResourceBinding = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(rb.spec.resource.name, "web");
        assert_eq!(
            rb.spec.clusters[1],
            TargetCluster {
                name: "m2".into(),
                replicas: Some(3)
            }
        );
        let status = rb.status.as_ref().unwrap();
        assert_eq!(
            status.aggregated_status[0].health,
            Some(ResourceHealth::Healthy)
        );
        assert!(!status.aggregated_status[1].applied);
        assert_eq!(status.scheduling_reasons[0].cluster, "m3");
        assert_eq!(
            PolicyId::from_labels(rb.meta().labels.as_ref().unwrap()),
            Some(PolicyId::namespaced("demo", "web"))
        );
        assert_eq!(serde_json::to_value(&rb).unwrap(), doc);
    }

    #[test]
    fn cluster_resource_binding_is_cluster_scoped_with_an_optional_namespace() {
        let mut crb = ClusterResourceBinding::new(
            "admin-clusterrole",
            BindingSpec {
                resource: ResourceReference {
                    api_version: "rbac.authorization.k8s.io/v1".into(),
                    kind: "ClusterRole".into(),
                    name: "admin".into(),
                    ..Default::default()
                },
                ..Default::default()
            }
            .into(),
        );
        crb.metadata.labels = Some(PolicyId::cluster("rbac").labels());
        let v = serde_json::to_value(&crb).unwrap();
        assert_eq!(
            v["spec"],
            json!({"resource": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "admin"}})
        );
        assert_eq!(
            v["metadata"]["labels"],
            json!({"causeway.io/policy-name": "rbac"})
        );
        let back: ClusterResourceBinding = serde_json::from_value(v).unwrap();
        assert_eq!(back, crb);
    }
}
