//! `ExportedService` (`causeway.io/v1alpha1`, namespaced, on the hub): what the
//! exporter of member `<cluster>` publishes for its exported Service `<svc>`, as
//! object `<svc>.<cluster>` in the Service's namespace. The aggregator merges all
//! ExportedServices of one namespace/name into the ServiceImport and writes its
//! conflict verdict back into each one's status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SessionAffinityConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::mcs::{ServiceImportType, ServicePort};

/// ExportedServiceSpec is one cluster's export of one Service: the Service's
/// global properties (KEP-1645 conflict-resolution inputs) at export time.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "causeway.io",
    version = "v1alpha1",
    kind = "ExportedService",
    plural = "exportedservices",
    namespaced,
    status = "ExportedServiceStatus",
    shortname = "exsvc",
    category = "causeway",
    derive = "PartialEq",
    derive = "Default",
    doc = "ExportedService is one member cluster's export of one Service, published to the hub as <service>.<cluster>.",
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.service"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Headless", type_ = "boolean", json_path = ".spec.headless"),
    printcolumn(
        name = "Conflict",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Conflict\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ExportedServiceSpec {
    /// The cluster id of the exporting member.
    pub cluster: String,

    /// Name of the exported Service (and of its ServiceExport) in the member.
    pub service: String,

    /// The Service's type in the member: ClusterIP, NodePort or LoadBalancer
    /// (ExternalName Services are never exported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_type: Option<String>,

    /// Whether the Service is headless (clusterIP: None); it then contributes a
    /// Headless ServiceImport, otherwise a ClusterSetIP one.
    #[serde(default)]
    pub headless: bool,

    /// The Service's ports, including each port's targetPort.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ExportedServicePort>,

    /// The Service's sessionAffinity (ClientIP or None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,

    /// The Service's sessionAffinityConfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,

    /// The Service's internalTrafficPolicy (Cluster or Local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,

    /// The Service's trafficDistribution (e.g. PreferClose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,

    /// The Service's ipFamilies (IPv4, IPv6), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub ip_families: Vec<String>,

    /// The Service's clusterIPs in the member (empty when headless).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[serde(rename = "clusterIPs")]
    #[schemars(length(max = 2))]
    pub cluster_ips: Vec<String>,

    /// The ServiceExport's spec.exportedLabels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_labels: BTreeMap<String, String>,

    /// The ServiceExport's spec.exportedAnnotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exported_annotations: BTreeMap<String, String>,

    /// creationTimestamp of the ServiceExport in the member. On a conflict the
    /// oldest export wins (ties broken by cluster id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_creation_timestamp: Option<Time>,
}

impl ExportedServiceSpec {
    /// The ServiceImport type this export contributes.
    pub fn import_type(&self) -> ServiceImportType {
        if self.headless {
            ServiceImportType::Headless
        } else {
            ServiceImportType::ClusterSetIP
        }
    }
}

/// A port of an exported Service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportedServicePort {
    /// The port's name (optional when the Service has one port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// TCP, UDP or SCTP. Defaults to TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,

    /// The port's appProtocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,

    /// The Service port.
    pub port: i32,

    /// The pods' port (number or name) in the member; unset means the same as port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
}

impl ExportedServicePort {
    /// The port as it appears in a ServiceImport (without targetPort).
    pub fn to_service_port(&self) -> ServicePort {
        ServicePort {
            name: self.name.clone(),
            protocol: self.protocol.clone(),
            app_protocol: self.app_protocol.clone(),
            port: self.port,
        }
    }
}

/// ExportedServiceStatus is the aggregator's verdict on one export.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportedServiceStatus {
    /// The metadata.generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions: Conflict (same types, reasons and messages as the ServiceExport
    /// Conflict condition, which the exporter copies into the member).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Ports of this export left out of the ServiceImport because they conflict
    /// with the winning definition. Importers must not send traffic for these
    /// ports to this cluster's endpoints (strict per-port routing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub excluded_ports: Vec<ServicePort>,
}

/// Condition types of ExportedService (reasons: [`crate::mcs::conditions::service_export::reason`]).
pub mod conditions {
    /// Conflict: the export disagrees with the merged ServiceImport.
    pub const CONFLICT: &str = crate::mcs::conditions::service_export::CONFLICT;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_type_follows_headless() {
        let mut spec = ExportedServiceSpec::default();
        assert_eq!(spec.import_type(), ServiceImportType::ClusterSetIP);
        spec.headless = true;
        assert_eq!(spec.import_type(), ServiceImportType::Headless);
    }

    #[test]
    fn target_port_is_dropped_in_the_import_port() {
        let port = ExportedServicePort {
            name: Some("http".into()),
            port: 80,
            target_port: Some(IntOrString::Int(8080)),
            ..Default::default()
        };
        assert_eq!(
            port.to_service_port(),
            ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }
        );
    }
}
