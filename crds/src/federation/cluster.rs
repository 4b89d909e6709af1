//! `Cluster` (cluster-scoped): a registered member cluster, how to reach it, and
//! its observed health and capacity.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ClusterSpec describes how to reach a member cluster and where it runs.
/// Placement label selectors match the Cluster object's own metadata labels.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    status = "ClusterStatus",
    shortname = "mcl",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "Cluster is a member cluster registered with the hub.",
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.kubernetesVersion"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.syncMode"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Region", type_ = "string", json_path = ".status.region"),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.nodeSummary.readyNum"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        priority = 1,
        json_path = ".spec.apiEndpoint"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The cluster id: the member's ClusterProperty cluster.clusterset.k8s.io when
    /// present, otherwise the Cluster object's name. It is the value of the
    /// multicluster.kubernetes.io/source-cluster label on MCS EndpointSlices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,

    /// The uid of the member's kube-system namespace, recorded at registration: the
    /// physical cluster's identity. A second Cluster with the same value is the same
    /// cluster registered under another name, and is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "kubeSystemUID")]
    pub kube_system_uid: Option<String>,

    /// Push: the hub's controllers reach the member through apiEndpoint.
    /// Pull: the causeway agent inside the member reaches the hub.
    pub sync_mode: ClusterSyncMode,

    /// URL of the member's API server (required in Push mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,

    /// Base64-encoded PEM bundle of the CAs that sign the member API server's
    /// certificate. When unset, the caBundle key of the secretRef Secret is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub ca_bundle: Option<String>,

    /// Secret on the hub holding the credentials for the member: key token
    /// (a bearer token) and optionally key caBundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<ClusterSecretRef>,

    /// Skip verification of the member API server's certificate (testing only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verification: Option<bool>,

    /// HTTP(S) proxy URL used to reach the member API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "proxyURL")]
    pub proxy_url: Option<String>,

    /// Cloud or infrastructure provider name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// Region the member runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,

    /// Zone the member runs in (when it runs in exactly one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,

    /// Zones the member spans.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,

    /// Taints keep workloads that do not tolerate them off the cluster
    /// (NoSchedule) or evict them (NoExecute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// How the hub and a member exchange state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ClusterSyncMode {
    /// The hub's controllers connect to the member.
    #[default]
    Push,
    /// An agent inside the member connects to the hub.
    Pull,
}

/// Reference to the Secret holding a member's credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

/// ClusterStatus is the observed state of a member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Version of the member's Kubernetes API server (from /version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,

    /// The API groups, versions and resources the member serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["groupVersion"]))]
    pub api_enablements: Vec<ApiEnablement>,

    /// Conditions: Ready (the API server answers /readyz) and
    /// CompleteAPIEnablements (whether API discovery was complete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Node counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_summary: Option<NodeSummary>,

    /// Resource capacity and use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_summary: Option<ResourceSummary>,

    /// The region the member runs in: spec.region, else the
    /// topology.kubernetes.io/region label its nodes agree on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,

    /// The zones the member spans: spec.zones (or spec.zone), else its nodes'
    /// topology.kubernetes.io/zone labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,

    /// The infrastructure provider: spec.provider, else the scheme of its nodes'
    /// spec.providerID (aws, gce, azure, kubesim...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// The agent's lease (Pull mode): when it last reported in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<ClusterLease>,

    /// Actions to take on the cluster because of its conditions, e.g.
    /// TrafficControl (drain it from MultiClusterIngress load balancing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedy_actions: Vec<String>,
}

/// The resources a member serves in one group/version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEnablement {
    /// The group/version, e.g. apps/v1 (or v1 for the core group).
    pub group_version: String,
    /// The resources served in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApiResourceRef>,
}

/// One served resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResourceRef {
    /// Plural resource name, e.g. deployments.
    pub name: String,
    /// Kind, e.g. Deployment.
    pub kind: String,
}

/// Node counts of a member.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Number of nodes.
    #[serde(default)]
    pub total_num: i32,
    /// Number of Ready nodes.
    #[serde(default)]
    pub ready_num: i32,
}

/// Resource capacity and use of a member, summed over its nodes and pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSummary {
    /// Allocatable resources of all nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Resources requested by pods not yet scheduled.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocating: BTreeMap<String, Quantity>,
    /// Resources requested by scheduled pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: BTreeMap<String, Quantity>,
}

/// The lease a Pull-mode agent renews on the hub.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLease {
    /// Identity of the agent holding the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// When the agent last renewed the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<MicroTime>,
    /// How long the lease is valid after a renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
}

/// Condition types and reasons of Cluster.
pub mod conditions {
    /// Ready: the member's API server is reachable and ready.
    pub const READY: &str = "Ready";
    /// Ready=True.
    pub const REASON_CLUSTER_READY: &str = "ClusterReady";
    /// Ready=False: /readyz (or /healthz) answered with a status other than 200.
    pub const REASON_CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// Ready=False: the API server could not be reached at all.
    pub const REASON_CLUSTER_NOT_REACHABLE: &str = "ClusterNotReachable";
    /// Ready=Unknown: the status was not refreshed within the grace period.
    pub const REASON_CLUSTER_STATUS_UNKNOWN: &str = "ClusterStatusUnknown";
    /// Ready=Unknown: the status was never posted.
    pub const REASON_CLUSTER_STATUS_NEVER_UPDATED: &str = "ClusterStatusNeverUpdated";

    /// CompleteAPIEnablements: API discovery of the member was complete.
    pub const COMPLETE_API_ENABLEMENTS: &str = "CompleteAPIEnablements";
    /// CompleteAPIEnablements=True.
    pub const REASON_COMPLETE: &str = "Complete";
    /// CompleteAPIEnablements=False: some groups failed discovery.
    pub const REASON_PARTIAL: &str = "Partial";
    /// CompleteAPIEnablements=False: discovery returned nothing.
    pub const REASON_EMPTY: &str = "Empty";
}

/// Taints the cluster controller manages from the Ready condition (effect NoSchedule).
pub mod taints {
    /// Added while Ready is False (or not yet reported).
    pub const NOT_READY: &str = "cluster.causeway.io/not-ready";
    /// Added while Ready is Unknown.
    pub const UNREACHABLE: &str = "cluster.causeway.io/unreachable";
    /// Added by `causeway cordon` (NoSchedule) and `causeway drain` (NoExecute too).
    pub const UNSCHEDULABLE: &str = "cluster.causeway.io/unschedulable";
}

/// Remedy actions a Cluster status can carry.
pub mod remedy_actions {
    /// Drain the cluster's backends from MultiClusterIngress load balancing.
    pub const TRAFFIC_CONTROL: &str = "TrafficControl";
}

impl Cluster {
    /// The cluster id: `spec.id` when set, otherwise the object's name.
    pub fn cluster_id(&self) -> Option<&str> {
        self.spec
            .id
            .as_deref()
            .filter(|id| !id.is_empty())
            .or(self.metadata.name.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_falls_back_to_the_name() {
        let mut c = Cluster::new("member-1", ClusterSpec::default());
        assert_eq!(c.cluster_id(), Some("member-1"));
        c.spec.id = Some("m1.set".into());
        assert_eq!(c.cluster_id(), Some("m1.set"));
    }
}
