//! Federation API (`causeway.io/v1alpha1`): member clusters, propagation and
//! override policies, and the per-cluster `Work` the scheduler writes.
//!
//! The shapes follow Karmada's `cluster.karmada.io`, `policy.karmada.io` and
//! `work.karmada.io` APIs (field names included) so that Karmada users recognise
//! them; the behaviour lives in the controllers.
//!
//! Types shared by several kinds ([`ClusterAffinity`], [`ResourceSelector`],
//! [`ConflictResolution`], [`PolicyStatus`]) are defined here.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod aggregate;
pub mod binding;
pub mod cluster;
pub mod deps;
pub mod divide;
pub mod health;
pub mod interpreter;
pub mod override_apply;
pub mod overrides;
pub mod propagation;
pub mod prune;
pub mod redistribution;
pub mod rollout;
pub mod schedule;
pub mod selection;
pub mod state_preservation;
pub mod work;

/// The group of an `apiVersion` (`apps/v1` → `apps`; `v1` → the core group, "").
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Selects member clusters. All set fields must match (they are ANDed);
/// an empty affinity selects every cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Selects clusters by the labels of their Cluster objects. Ignored when nil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,

    /// Selects clusters by their provider, region or zone. Ignored when nil.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,

    /// The clusters to select by name. Ignored when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,

    /// Clusters never to select, even when another field matches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

/// Selects clusters by fields of their Cluster spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldSelector {
    /// Requirements on the fields `provider`, `region` and `zone`, with the
    /// operators `In` and `NotIn`. All must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

/// The Cluster fields a [`FieldSelector`] can match: the effective values in the
/// Cluster's status (the spec's, else what its nodes' labels say), else the spec's.
pub mod field_selector_keys {
    /// `status.provider`, else `spec.provider`.
    pub const PROVIDER: &str = "provider";
    /// `status.region`, else `spec.region`.
    pub const REGION: &str = "region";
    /// `status.zones`, else `spec.zones` / `spec.zone`. As in Karmada, `In` needs every
    /// zone of the cluster in the list, and a cluster with no known zone fails `In`.
    pub const ZONE: &str = "zone";
}

/// Selects resource templates on the hub.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// API version of the target resources, e.g. `apps/v1`.
    pub api_version: String,

    /// Kind of the target resources, e.g. `Deployment`.
    pub kind: String,

    /// Namespace of the target resources. For namespaced policies it defaults to
    /// the policy's namespace; for cluster-wide policies an empty namespace
    /// matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Name of the target resource. When set, `labelSelector` is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Selects resources by label. Ignored when `name` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// What to do when a resource to propagate already exists in a member cluster
/// and was not created by Causeway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConflictResolution {
    /// Leave the existing resource alone and report the conflict (the default).
    #[default]
    Abort,
    /// Take the existing resource over and overwrite it.
    Overwrite,
}

impl ConflictResolution {
    /// The value of a template's `causeway.io/conflict-resolution` annotation
    /// (`overwrite` or `abort`, any case); `None` for anything else, which is ignored
    /// in favour of the policy's (F.41).
    pub fn from_annotation(v: &str) -> Option<ConflictResolution> {
        if v.eq_ignore_ascii_case("overwrite") {
            Some(ConflictResolution::Overwrite)
        } else if v.eq_ignore_ascii_case("abort") {
            Some(ConflictResolution::Abort)
        } else {
            None
        }
    }
}

/// Status of the four policy kinds: whether the controllers accepted the policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The metadata.generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions of the policy; `Valid` says whether the policy passed validation
    /// and, when it did not, what to fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Condition types and reasons of the policy kinds.
pub mod policy_conditions {
    /// `Valid`: the policy passed validation.
    pub const VALID: &str = "Valid";
    /// `Valid=True`.
    pub const REASON_VALID: &str = "Valid";
    /// `Valid=False`: the message names the invalid field and the fix.
    pub const REASON_INVALID: &str = "Invalid";
    /// `Valid=False` for a PropagationPolicy whose selection is valid but whose
    /// placement scheduling refuses: it still claims its resources, whose bindings keep
    /// the clusters they have.
    pub const REASON_INVALID_PLACEMENT: &str = "InvalidPlacement";
}

/// Implements `Deref`/`DerefMut`/`From` for a spec newtype over a shared spec
/// struct (used where two kinds, namespaced and cluster-scoped, share one spec).
macro_rules! newtype_spec {
    ($newtype:ident => $inner:ty) => {
        impl std::ops::Deref for $newtype {
            type Target = $inner;

            fn deref(&self) -> &$inner {
                &self.0
            }
        }

        impl std::ops::DerefMut for $newtype {
            fn deref_mut(&mut self) -> &mut $inner {
                &mut self.0
            }
        }

        impl From<$inner> for $newtype {
            fn from(spec: $inner) -> Self {
                Self(spec)
            }
        }
    };
}
pub(crate) use newtype_spec;
