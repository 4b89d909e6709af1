//! `OverridePolicy` (namespaced) and `ClusterOverridePolicy` (cluster-scoped):
//! per-cluster changes applied to resource templates before they are written to a
//! member. Both kinds share [`OverrideSpec`].
//!
//! Within one rule the overriders apply in the order image → command → args →
//! labels → annotations → field → plaintext.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ClusterAffinity, PolicyStatus, ResourceSelector, newtype_spec};

/// The spec shared by OverridePolicy and ClusterOverridePolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// The resource templates the overrides apply to. Empty: every template the
    /// policy can see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_selectors: Vec<ResourceSelector>,

    /// The overrides, each for a set of target clusters, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub override_rules: Vec<RuleWithCluster>,
}

/// Overriders for a set of clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleWithCluster {
    /// The clusters the overriders apply to. Unset: every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,

    /// The changes to make.
    pub overriders: Overriders,
}

/// The seven kinds of change an override rule can make.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// RFC 6902 JSON patch operations on the whole object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PlaintextOverrider>,

    /// Changes to container images (registry, repository or tag).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_overrider: Vec<ImageOverrider>,

    /// Changes to a container's command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_overrider: Vec<CommandArgsOverrider>,

    /// Changes to a container's args.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args_overrider: Vec<CommandArgsOverrider>,

    /// Changes to metadata.labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels_overrider: Vec<LabelAnnotationOverrider>,

    /// Changes to metadata.annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations_overrider: Vec<LabelAnnotationOverrider>,

    /// Patches to JSON or YAML documents embedded in string fields (e.g. ConfigMap data).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_overrider: Vec<FieldOverrider>,
}

/// A patch operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverriderOperator {
    /// Add the value.
    Add,
    /// Remove the value.
    Remove,
    /// Replace the value (the default, D.26).
    #[default]
    Replace,
}

/// One RFC 6902 JSON patch operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlaintextOverrider {
    /// JSON pointer (RFC 6901) to the target field, e.g. /spec/replicas.
    pub path: String,

    /// add, remove or replace (default: replace).
    #[serde(default)]
    pub operator: OverriderOperator,

    /// The value for add and replace (any JSON value); must be unset for remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub value: Option<serde_json::Value>,
}

/// Changes one part of container images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverrider {
    /// Which image field to change. Unset: every container image (not init
    /// containers', as in Karmada: name one by its path) of Pods and of the pod
    /// templates of Deployments, ReplicaSets, DaemonSets, StatefulSets, Jobs and
    /// CronJobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate: Option<ImagePredicate>,

    /// The part of the image reference to change.
    pub component: ImageComponent,

    /// add, remove or replace.
    pub operator: OverriderOperator,

    /// The new value of the component (for add and replace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Locates one image field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePredicate {
    /// JSON pointer to the image field, e.g. /spec/template/spec/containers/0/image.
    pub path: String,
}

/// A part of an image reference `registry/repository:tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImageComponent {
    /// The registry host (and port), e.g. registry.k8s.io.
    Registry,
    /// The repository path, e.g. library/nginx.
    Repository,
    /// The tag, e.g. 1.27.
    Tag,
}

/// Adds items to or removes items from a container's command or args.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    /// The container to change (one of `containers`, not of `initContainers`, as in
    /// Karmada).
    pub container_name: String,

    /// add (append the values) or remove (drop the values).
    pub operator: OverriderOperator,

    /// The items to add or remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<String>,
}

/// Adds, removes or replaces labels or annotations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelAnnotationOverrider {
    /// add, remove or replace.
    pub operator: OverriderOperator,

    /// The keys and values (values are ignored for remove).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub value: BTreeMap<String, String>,
}

/// Patches a JSON or YAML document stored in a string field.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldOverrider {
    /// JSON pointer (RFC 6901) to the string field, e.g. /data/config.yaml.
    pub field_path: String,

    /// Patch operations when the field holds JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json: Vec<JsonPatchOperation>,

    /// Patch operations when the field holds YAML.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub yaml: Vec<YamlPatchOperation>,
}

/// One patch operation on an embedded JSON document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatchOperation {
    /// JSON pointer inside the embedded document.
    pub sub_path: String,

    /// add, remove or replace.
    pub operator: OverriderOperator,

    /// The value for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub value: Option<serde_json::Value>,
}

/// One patch operation on an embedded YAML document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct YamlPatchOperation {
    /// JSON pointer inside the embedded document.
    pub sub_path: String,

    /// add, remove or replace.
    pub operator: OverriderOperator,

    /// The value for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub value: Option<serde_json::Value>,
}

/// Per-cluster changes to resource templates (the OverrideSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "OverridePolicy",
    plural = "overridepolicies",
    namespaced,
    status = "PolicyStatus",
    shortname = "op",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "OverridePolicy changes resource templates in its namespace per member cluster.",
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
pub struct OverridePolicySpec(pub OverrideSpec);
newtype_spec!(OverridePolicySpec => OverrideSpec);

/// Per-cluster changes to resource templates (the OverrideSpec).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ClusterOverridePolicy",
    plural = "clusteroverridepolicies",
    status = "PolicyStatus",
    shortname = "cop",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterOverridePolicy changes cluster-scoped resource templates, and templates in any namespace, per member cluster. Cluster policies apply before namespaced ones.",
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
pub struct ClusterOverridePolicySpec(pub OverrideSpec);
newtype_spec!(ClusterOverridePolicySpec => OverrideSpec);
