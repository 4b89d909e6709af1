//! `PropagationPolicy` (namespaced) and `ClusterPropagationPolicy` (cluster-scoped):
//! which resource templates go to which member clusters, and how replicas are
//! split between them. Both kinds share [`PropagationSpec`].

use k8s_openapi::api::core::v1::Toleration;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ClusterAffinity, ConflictResolution, PolicyStatus, ResourceSelector, newtype_spec};

/// The spec shared by PropagationPolicy and ClusterPropagationPolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PropagationSpec {
    /// The resource templates this policy propagates. At least one selector is
    /// required: there is no "select everything".
    #[schemars(length(min = 1))]
    pub resource_selectors: Vec<ResourceSelector>,

    /// Also propagate what the selected workloads depend on (ConfigMaps, Secrets,
    /// ServiceAccounts and PersistentVolumeClaims referenced by their pod templates),
    /// to the same clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,

    /// Where the selected resources go.
    #[serde(default, skip_serializing_if = "Placement::is_unset")]
    pub placement: Placement,

    /// Among policies matching the same template, the highest priority wins.
    /// Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,

    /// Whether this policy may take templates over from a policy that already
    /// claimed them: Always or Never (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionBehavior>,

    /// OverridePolicies (in the same namespace) that must exist before this policy
    /// is applied, so that no member ever sees the un-overridden template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependent_overrides: Vec<String>,

    /// Failover behaviour when an application or a cluster fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,

    /// What to do when a propagated resource already exists in a member and was not
    /// created by Causeway: Abort (the default) or Overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,

    /// Lazy: changes to this policy take effect only when a template next changes.
    /// Unset: they take effect immediately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_preference: Option<ActivationPreference>,

    /// Stops dispatching to all or some clusters without deleting anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,

    /// Rolls a new template generation out wave by wave: a wave's clusters get it once
    /// every cluster of the waves before runs it, applied and healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::federation::rollout::Rollout>,

    /// How replicas move between clusters when their division changes: a cluster gives
    /// up replicas only as fast as the others run them available (make-before-break).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redistribution: Option<crate::federation::redistribution::Redistribution>,

    /// Keep the propagated resources in the members when the template is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
}

/// Where resources go: cluster selection, tolerations, spreading and replica division.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The clusters to choose from. Mutually exclusive with clusterAffinities.
    /// Unset: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,

    /// Ordered groups of clusters: the first group that can hold the workload is
    /// used, the next ones are failover choices. Mutually exclusive with
    /// clusterAffinity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_affinities: Vec<ClusterAffinityTerm>,

    /// Cluster taints the resources tolerate. The operators Lt and Gt are not allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,

    /// How to spread over clusters, regions, zones or providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,

    /// How replicas of a workload are scheduled. Unset: Duplicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaSchedulingStrategy>,
}

impl Placement {
    /// Whether no placement field is set (every cluster, Duplicated).
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }
}

/// One named group of clusters in clusterAffinities.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinityTerm {
    /// Name of the group, unique within the policy; recorded in the scheduling
    /// result so users see which group is in use.
    pub affinity_name: String,

    /// The clusters of the group.
    #[serde(flatten)]
    pub affinity: ClusterAffinity,
}

/// Spreads resources over groups of clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// Group clusters by this Cluster field. Mutually exclusive with spreadByLabel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_field: Option<SpreadByField>,

    /// Group clusters by the value of this Cluster label. Mutually exclusive with
    /// spreadByField.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_label: Option<String>,

    /// At most this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<i32>,

    /// At least this many groups. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_groups: Option<i32>,
}

/// The Cluster fields resources can be spread by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SpreadByField {
    /// Each cluster is its own group.
    Cluster,
    /// Group by spec.region.
    Region,
    /// Group by spec.zone.
    Zone,
    /// Group by spec.provider.
    Provider,
}

/// How replicas are scheduled over the selected clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingStrategy {
    /// Duplicated: every cluster runs the full replica count.
    /// Divided (the default, as in Karmada): the replicas are split between the clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Divided"))]
    pub replica_scheduling_type: Option<ReplicaSchedulingType>,

    /// How Divided replicas are split: Aggregated (as few clusters as possible) or
    /// Weighted (by weightPreference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_division_preference: Option<ReplicaDivisionPreference>,

    /// The weights for Weighted division. Unset: equal weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<ClusterPreferences>,
}

/// Duplicated or Divided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaSchedulingType {
    /// Every cluster runs the full replica count.
    Duplicated,
    /// The replicas are split between the clusters.
    Divided,
}

/// How Divided replicas are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaDivisionPreference {
    /// Pack replicas into as few clusters as their capacity allows.
    Aggregated,
    /// Split by static or dynamic weights.
    Weighted,
}

/// Weights for Weighted division.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// Static weights per group of clusters. Ignored when dynamicWeight is set.
    /// Clusters matched by no entry get no replicas.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_weight_list: Vec<StaticClusterWeight>,

    /// Weights computed from each cluster's capacity: AvailableReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_weight: Option<DynamicWeightFactor>,
}

/// A static weight for a group of clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticClusterWeight {
    /// The clusters this weight applies to.
    pub target_cluster: ClusterAffinity,

    /// The weight (at least 1).
    #[schemars(range(min = 1))]
    pub weight: i64,
}

/// Where dynamic weights come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DynamicWeightFactor {
    /// Weight by how many more replicas each cluster can hold.
    AvailableReplicas,
}

/// Whether a policy may preempt templates claimed by another policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionBehavior {
    /// Take templates over from lower-priority policies.
    Always,
    /// Never take a claimed template over (the default).
    #[default]
    Never,
}

/// When policy changes take effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ActivationPreference {
    /// Only when a template next changes.
    Lazy,
}

/// Stops dispatching Work to members.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    /// Suspend dispatching to every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching: Option<bool>,

    /// Suspend dispatching to these clusters only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching_on_clusters: Option<SuspendClusters>,
}

/// The clusters to suspend dispatching to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspendClusters {
    /// Cluster names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
}

/// What to do when an application or a whole cluster fails.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverBehavior {
    /// Move the application away from a cluster where it stays unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailoverBehavior>,

    /// Move the application away from a cluster that fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFailoverBehavior>,
}

/// Application failover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationFailoverBehavior {
    /// When to decide the application has failed.
    #[serde(default)]
    pub decision_conditions: DecisionConditions,

    /// How to remove the application from the failed cluster. Defaults to Gracefully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,

    /// With Gracefully: how long to wait for the replacement to become healthy
    /// before removing the old copy. Defaults to 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,

    /// State to carry from the failed copy to the replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

/// When an application counts as failed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionConditions {
    /// How long the application must stay unhealthy. Defaults to 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i32>,
}

/// Cluster failover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFailoverBehavior {
    /// How to remove the application from the failed cluster. Defaults to Gracefully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,

    /// State to carry from the failed copy to the replacement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

/// How an application is removed from a cluster it fails over from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PurgeMode {
    /// Remove it at once.
    Directly,
    /// Remove it once the replacement is healthy or the grace period ends.
    Gracefully,
    /// Never remove it.
    Never,
}

/// State carried over on failover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservation {
    /// Each rule copies one value of the failed copy's status into a label of the
    /// replacement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<StatePreservationRule>,
}

/// Copies a status value into a label.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservationRule {
    /// The label to set on the replacement.
    pub alias_label_name: String,
    /// JSONPath into the failed copy's status, e.g. {.replicas}.
    pub json_path: String,
}

/// Which resource templates to propagate, and where (the PropagationSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "PropagationPolicy",
    plural = "propagationpolicies",
    namespaced,
    status = "PolicyStatus",
    shortname = "pp",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "PropagationPolicy propagates resource templates in its namespace to member clusters.",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Conflict-Resolution",
        type_ = "string",
        json_path = ".spec.conflictResolution"
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct PropagationPolicySpec(pub PropagationSpec);
newtype_spec!(PropagationPolicySpec => PropagationSpec);

/// Which resource templates to propagate, and where (the PropagationSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ClusterPropagationPolicy",
    plural = "clusterpropagationpolicies",
    status = "PolicyStatus",
    shortname = "cpp",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterPropagationPolicy propagates cluster-scoped resource templates, and templates in any namespace, to member clusters.",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Conflict-Resolution",
        type_ = "string",
        json_path = ".spec.conflictResolution"
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct ClusterPropagationPolicySpec(pub PropagationSpec);
newtype_spec!(ClusterPropagationPolicySpec => PropagationSpec);
