//! `Work` (namespaced, in the execution namespace `causeway-es-<cluster>`): the
//! fully rendered objects the scheduler wants in one member cluster, and the
//! status the work applier reports back.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::ConflictResolution;

/// WorkSpec lists the objects to apply to one member cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "Work",
    plural = "works",
    namespaced,
    status = "WorkStatus",
    shortname = "cwk",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "Work holds the objects to apply to the member cluster of its execution namespace (causeway-es-<cluster>).",
    printcolumn(
        name = "Workload-Kind",
        type_ = "string",
        json_path = ".spec.workload.manifests[*].kind"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].status"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The objects to apply.
    #[serde(default)]
    pub workload: WorkloadTemplate,

    /// Stop applying changes to the member (the objects already there stay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_dispatching: Option<bool>,

    /// Keep the objects in the member when this Work is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,

    /// What to do when an object already exists in the member and was not created
    /// by Causeway: Abort (the default) or Overwrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_resolution: Option<ConflictResolution>,

    /// How to read the manifests' kinds that a ResourceInterpreter on the hub
    /// interprets: where their replica count is, and their health rule (CEL), which
    /// the member's applier judges them by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interpretations: Vec<super::interpreter::Interpretation>,
}

/// The objects of a Work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTemplate {
    /// Complete Kubernetes objects (apiVersion, kind, metadata, spec, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<Manifest>,
}

/// One complete Kubernetes object, kept as raw JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Manifest(pub serde_json::Value);

impl Manifest {
    /// `apiVersion` of the object, if present.
    pub fn api_version(&self) -> Option<&str> {
        self.0.get("apiVersion").and_then(serde_json::Value::as_str)
    }

    /// `kind` of the object, if present.
    pub fn kind(&self) -> Option<&str> {
        self.0.get("kind").and_then(serde_json::Value::as_str)
    }

    /// `metadata.namespace` of the object, if present.
    pub fn namespace(&self) -> Option<&str> {
        self.0
            .pointer("/metadata/namespace")
            .and_then(serde_json::Value::as_str)
    }

    /// `metadata.name` of the object, if present.
    pub fn name(&self) -> Option<&str> {
        self.0
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
    }
}

impl JsonSchema for Manifest {
    fn schema_name() -> Cow<'static, str> {
        "Manifest".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        crate::schema::embedded_resource(generator)
    }
}

/// WorkStatus is what the work applier observed in the member.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// Conditions: Applied (every manifest was applied), Available (every applied
    /// object is healthy), Dispatching (not suspended) and Degraded (some object is
    /// Unhealthy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Status of each applied object, as found in the member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_statuses: Vec<ManifestStatus>,
}

/// The observed status of one manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestStatus {
    /// Which manifest this is.
    pub identifier: ResourceIdentifier,

    /// The object's status in the member (raw, for status aggregation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::free_form_object")]
    pub status: Option<serde_json::Value>,

    /// Whether the object is healthy in the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,

    /// Whether the manifest is applied as it is now (false while a write failed or
    /// was refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,

    /// Why it was not applied (see the reasons in [`conditions`]), unset when applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// What went wrong and what to do, for people; unset when applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// `metadata.generation` of the member object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,

    /// The template generation the member object was rendered from (its
    /// `causeway.io/template-generation` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_generation: Option<i64>,
}

impl ManifestStatus {
    /// Whether this is a manifest's status (not that of an object no manifest names
    /// any more, whose removal failed: ordinal -1).
    pub fn is_manifest(&self) -> bool {
        self.identifier.ordinal >= 0
    }

    /// The statuses of manifests among `statuses`, without those of objects no
    /// manifest names any more whose removal failed: what health, failover and
    /// rollouts read.
    pub fn of_manifests(
        statuses: &[ManifestStatus],
    ) -> impl Iterator<Item = &ManifestStatus> + Clone {
        statuses.iter().filter(|m| m.is_manifest())
    }
}

/// Identifies one manifest of a Work and the object it became.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIdentifier {
    /// Index of the manifest in spec.workload.manifests; -1 for an object of this
    /// Work that no manifest names any more and whose removal from the member failed
    /// (it is tried again until it is gone).
    pub ordinal: i32,

    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,

    /// API version.
    pub version: String,

    /// Kind.
    pub kind: String,

    /// Plural resource name, e.g. deployments.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,

    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,

    /// Name.
    pub name: String,
}

/// Health of an applied object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ResourceHealth {
    /// The object is healthy (for example, a Deployment with all replicas available).
    Healthy,
    /// The object is not healthy.
    Unhealthy,
    /// Health cannot be told (no rule for the kind, or no status yet).
    Unknown,
}

/// Condition types and reasons of Work.
pub mod conditions {
    /// Applied: every manifest was applied to the member.
    pub const APPLIED: &str = "Applied";
    /// Available: every applied object is healthy.
    pub const AVAILABLE: &str = "Available";
    /// Degraded: some objects are Unhealthy (not merely of unknown health); its
    /// `lastTransitionTime` is when they became so, which application failover times.
    pub const DEGRADED: &str = "Degraded";
    /// Dispatching: whether dispatching is suspended.
    pub const DISPATCHING: &str = "Dispatching";

    /// Applied=True.
    pub const REASON_APPLIED_SUCCESSFUL: &str = "AppliedSuccessful";
    /// Applied=False: the message names the manifests that failed and why.
    pub const REASON_APPLIED_FAILED: &str = "AppliedFailed";
    /// Applied=False: an object exists in the member, is not Causeway's, and
    /// conflictResolution is Abort.
    pub const REASON_CONFLICT: &str = "ResourceConflict";
    /// Available=True.
    pub const REASON_RESOURCES_AVAILABLE: &str = "ResourcesAvailable";
    /// Available=False.
    pub const REASON_RESOURCES_UNAVAILABLE: &str = "ResourcesUnavailable";
    /// Degraded=True.
    pub const REASON_RESOURCES_UNHEALTHY: &str = "ResourcesUnhealthy";
    /// Degraded=False.
    pub const REASON_NO_RESOURCES_UNHEALTHY: &str = "NoResourcesUnhealthy";
    /// Dispatching=False: suspended by the policy.
    pub const REASON_SUSPEND_DISPATCHING: &str = "SuspendDispatching";
    /// A manifest not applied: the member object carries `causeway.io/managed: "false"`.
    pub const REASON_MANAGED_LABEL_FALSE: &str = "ManagedLabelFalse";
    /// A manifest not applied: the change touches an immutable field.
    pub const REASON_IMMUTABLE_FIELD: &str = "ImmutableFieldChange";
    /// Nothing applied: the member cluster is not Ready.
    pub const REASON_CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// A create that did not answer within the per-cluster timeout.
    pub const REASON_CREATION_TIMED_OUT: &str = "CreationTimedOut";
    /// An update that did not answer within the per-cluster timeout.
    pub const REASON_UPDATE_TIMED_OUT: &str = "UpdateTimedOut";
    /// A delete that did not answer within the per-cluster timeout.
    pub const REASON_DELETION_TIMED_OUT: &str = "DeletionTimedOut";
    /// A member object that is leaving is still terminating.
    pub const REASON_WAITING_FOR_REMOVAL: &str = "WaitingForRemoval";
    /// The overrides failed for this cluster (set by the hub on the binding).
    pub const REASON_APPLY_OVERRIDES_FAILED: &str = "ApplyOverridesFailed";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn manifest_accessors() {
        let m = Manifest(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "demo"},
        }));
        assert_eq!(m.api_version(), Some("apps/v1"));
        assert_eq!(m.kind(), Some("Deployment"));
        assert_eq!(m.namespace(), Some("demo"));
        assert_eq!(m.name(), Some("web"));
    }
}
