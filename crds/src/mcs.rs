//! Multi-Cluster Services API (`multicluster.x-k8s.io`): ServiceExport and
//! ServiceImport, field for field as mcs-api v0.5.0.
//!
//! Both versions are served: [`v1beta1`] (the storage version, the one the
//! conformance suite talks) and [`v1alpha1`], with identical schemas so no
//! conversion webhook is needed. Each version module holds thin kube-derive
//! types over the shared structs defined here; [`crate::crdgen::mcs_crds`]
//! merges the per-version CRDs into one CRD per kind.
//!
//! Scalar fields that mcs-api types as plain strings (`protocol`,
//! `sessionAffinity`, `internalTrafficPolicy`, ...) are `String`s here as
//! well, so objects written by other MCS implementations always deserialise;
//! the known values are constants in [`values`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod conditions;
pub mod merge;

/// ServiceExportStatus contains the current status of an export.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    /// Conditions of the export: `Valid`, `Ready` and `Conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// ServiceImportType designates the type of a ServiceImport.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum ServiceImportType {
    /// ClusterSetIP services are only accessible via the ClusterSet IP.
    #[default]
    ClusterSetIP,
    /// Headless services allow backend pods to be addressed directly.
    Headless,
}

impl ServiceImportType {
    /// The wire name (`ClusterSetIP` or `Headless`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterSetIP => "ClusterSetIP",
            Self::Headless => "Headless",
        }
    }
}

/// ServicePort represents the port on which the service is exposed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The name of this port within the service. This must be a DNS_LABEL.
    /// All ports within a ServiceSpec must have unique names. When considering
    /// the endpoints for a Service, this must match the 'name' field in the
    /// EndpointPort.
    /// Optional if only one ServicePort is defined on this service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// The IP protocol for this port. Supports "TCP", "UDP", and "SCTP".
    /// Default is TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "TCP"))]
    pub protocol: Option<String>,

    /// The application protocol for this port.
    /// This is used as a hint for implementations to offer richer behavior for protocols that they understand.
    /// This field follows standard Kubernetes label syntax.
    /// Valid values are either:
    ///
    /// * Un-prefixed protocol names - reserved for IANA standard service names (as per
    ///   RFC-6335 and https://www.iana.org/assignments/service-names).
    ///
    /// * Kubernetes-defined prefixed names:
    ///   * 'kubernetes.io/h2c' - HTTP/2 over cleartext as described in https://www.rfc-editor.org/rfc/rfc7540
    ///
    /// * Other protocols should use implementation-defined prefixed names such as
    ///   mycompany.com/my-custom-protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,

    /// The port that will be exposed by this service.
    pub port: i32,
}

impl ServicePort {
    /// The protocol with the API default applied (`TCP` when unset).
    pub fn protocol_or_default(&self) -> &str {
        self.protocol.as_deref().unwrap_or(values::PROTOCOL_TCP)
    }
}

/// ClusterStatus contains service configuration mapped to a specific source cluster.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// cluster is the name of the exporting cluster. Must be a valid RFC-1123 DNS
    /// label.
    pub cluster: String,
}

/// ServiceImportStatus describes derived state of an imported service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    /// EndpointSliceObjects indicates whether imported EndpointSlice objects are
    /// present for this ServiceImport (`Present` or `Absent`; IMP-13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Present", "Absent"]))]
    pub endpoint_slice_objects: Option<String>,

    /// clusters is the list of exporting clusters from which this service
    /// was derived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClusterStatus>,

    /// Conditions of the import: `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The fields of a ServiceExport spec, for decoding it leniently (see the
/// `Deserialize` impl of the versioned `ServiceExportSpec`s).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceExportFields {
    #[serde(default)]
    exported_labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    exported_annotations: std::collections::BTreeMap<String, String>,
}

/// `ports` is required on the wire (mcs-api), but decoding tolerates it missing.
pub(crate) fn require_ports(schema: &mut schemars::Schema) {
    crate::schema::require(schema, "ports");
}

/// Known values of the string-typed MCS fields.
pub mod values {
    /// `protocol: TCP` (the default).
    pub const PROTOCOL_TCP: &str = "TCP";
    /// `protocol: UDP`.
    pub const PROTOCOL_UDP: &str = "UDP";
    /// `protocol: SCTP`.
    pub const PROTOCOL_SCTP: &str = "SCTP";
    /// `sessionAffinity: ClientIP`.
    pub const SESSION_AFFINITY_CLIENT_IP: &str = "ClientIP";
    /// `sessionAffinity: None` (the default; an unset value means the same).
    pub const SESSION_AFFINITY_NONE: &str = "None";
    /// `ipFamilies[]: IPv4`.
    pub const IPV4: &str = "IPv4";
    /// `ipFamilies[]: IPv6`.
    pub const IPV6: &str = "IPv6";
    /// `internalTrafficPolicy: Cluster`.
    pub const INTERNAL_TRAFFIC_POLICY_CLUSTER: &str = "Cluster";
    /// `internalTrafficPolicy: Local`.
    pub const INTERNAL_TRAFFIC_POLICY_LOCAL: &str = "Local";
    /// `trafficDistribution: PreferClose`.
    pub const TRAFFIC_DISTRIBUTION_PREFER_CLOSE: &str = "PreferClose";
    /// `status.endpointSliceObjects: Present`: MCS EndpointSlices exist for the import.
    pub const ENDPOINT_SLICE_OBJECTS_PRESENT: &str = "Present";
    /// `status.endpointSliceObjects: Absent`: no MCS EndpointSlice exists for the import.
    pub const ENDPOINT_SLICE_OBJECTS_ABSENT: &str = "Absent";
}

/// Defines the version-specific `ServiceExportSpec` / `ServiceImportSpec` structs
/// (and with them, through kube-derive, the `ServiceExport` / `ServiceImport`
/// root types) of one MCS API version. Every version gets the same fields, so the
/// schemas are identical.
macro_rules! mcs_version {
    ($version:tt) => {
        use std::collections::BTreeMap;

        use k8s_openapi::api::core::v1::SessionAffinityConfig;
        use kube::CustomResource;
        use schemars::JsonSchema;
        use serde::{Deserialize, Serialize};

        pub use crate::mcs::{
            ClusterStatus, ServiceExportStatus, ServiceImportStatus, ServiceImportType, ServicePort,
        };

        /// ServiceExportSpec describes an exported service extra information.
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
        #[kube(
            group = "multicluster.x-k8s.io",
            version = $version,
            kind = "ServiceExport",
            plural = "serviceexports",
            namespaced,
            status = "ServiceExportStatus",
            shortname = "svcex",
            shortname = "svcexport",
            category = "multicluster",
            derive = "PartialEq",
            derive = "Default",
            doc = "ServiceExport declares that the Service with the same name and namespace as this export should be consumable from other clusters.",
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct ServiceExportSpec {
            /// exportedLabels describes the labels exported. It is optional for implementation.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub exported_labels: BTreeMap<String, String>,
            /// exportedAnnotations describes the annotations exported. It is optional for implementation.
            #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
            pub exported_annotations: BTreeMap<String, String>,
        }

        impl<'de> Deserialize<'de> for ServiceExportSpec {
            /// mcs-api makes the spec optional: a missing or null spec is an empty one.
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let fields = Option::<crate::mcs::ServiceExportFields>::deserialize(deserializer)?
                    .unwrap_or_default();
                Ok(Self {
                    exported_labels: fields.exported_labels,
                    exported_annotations: fields.exported_annotations,
                })
            }
        }

        /// ServiceImportSpec describes an imported service and the information necessary to consume it.
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[kube(
            group = "multicluster.x-k8s.io",
            version = $version,
            kind = "ServiceImport",
            plural = "serviceimports",
            namespaced,
            status = "ServiceImportStatus",
            shortname = "svcim",
            shortname = "svcimport",
            category = "multicluster",
            derive = "PartialEq",
            derive = "Default",
            doc = "ServiceImport describes a service imported from clusters in a ClusterSet.",
            printcolumn(name = "Type", type_ = "string", description = "The type of this ServiceImport", json_path = ".spec.type"),
            printcolumn(name = "IP", type_ = "string", description = "The VIP for this ServiceImport", json_path = ".spec.ips"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        #[schemars(transform = crate::mcs::require_ports)]
        pub struct ServiceImportSpec {
            /// The ports of the imported service (no targetPort: the importing side maps
            /// ports by name through EndpointSlices).
            #[serde(default)]
            #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
            pub ports: Vec<ServicePort>,
            /// ip will be used as the VIP for this service when type is ClusterSetIP.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 2))]
            pub ips: Vec<String>,
            /// type defines the type of this service.
            /// Must be ClusterSetIP or Headless.
            #[serde(rename = "type")]
            pub type_: ServiceImportType,
            /// Supports "ClientIP" and "None". Used to maintain session affinity.
            /// Enable client IP based session affinity.
            /// Must be ClientIP or None.
            /// Defaults to None.
            /// Ignored when type is Headless
            /// More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub session_affinity: Option<String>,
            /// sessionAffinityConfig contains session affinity configuration.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub session_affinity_config: Option<SessionAffinityConfig>,
            /// IPFamilies identifies all the IPFamilies assigned for this ServiceImport.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            #[schemars(length(max = 2))]
            pub ip_families: Vec<String>,
            /// InternalTrafficPolicy describes how nodes distribute service traffic they
            /// receive on the ClusterIP. If set to "Local", the proxy will assume that pods
            /// only want to talk to endpoints of the service on the same node as the pod,
            /// dropping the traffic if there are no local endpoints. The default value,
            /// "Cluster", uses the standard behavior of routing to all endpoints evenly
            /// (possibly modified by topology and other features).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub internal_traffic_policy: Option<String>,
            /// TrafficDistribution offers a way to express preferences for how traffic
            /// is distributed to Service endpoints. Implementations can use this field
            /// as a hint, but are not required to guarantee strict adherence. If the
            /// field is not set, the implementation will apply its default routing
            /// strategy. If set to "PreferClose", implementations should prioritize
            /// endpoints that are in the same zone.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub traffic_distribution: Option<String>,
        }
    };
}

/// `multicluster.x-k8s.io/v1beta1`: the storage version, and the one Causeway uses.
pub mod v1beta1 {
    mcs_version!("v1beta1");
}

/// `multicluster.x-k8s.io/v1alpha1`: served for older clients; same schema as [`v1beta1`].
pub mod v1alpha1 {
    mcs_version!("v1alpha1");
}

/// Converts between the two served versions. The schemas are identical, so the
/// conversion only changes `apiVersion`.
macro_rules! convert_versions {
    ($from:ident => $to:ident) => {
        impl From<$from::ServiceExportSpec> for $to::ServiceExportSpec {
            fn from(s: $from::ServiceExportSpec) -> Self {
                Self {
                    exported_labels: s.exported_labels,
                    exported_annotations: s.exported_annotations,
                }
            }
        }

        impl From<$from::ServiceExport> for $to::ServiceExport {
            fn from(o: $from::ServiceExport) -> Self {
                Self {
                    metadata: o.metadata,
                    spec: o.spec.into(),
                    status: o.status,
                }
            }
        }

        impl From<$from::ServiceImportSpec> for $to::ServiceImportSpec {
            fn from(s: $from::ServiceImportSpec) -> Self {
                Self {
                    ports: s.ports,
                    ips: s.ips,
                    type_: s.type_,
                    session_affinity: s.session_affinity,
                    session_affinity_config: s.session_affinity_config,
                    ip_families: s.ip_families,
                    internal_traffic_policy: s.internal_traffic_policy,
                    traffic_distribution: s.traffic_distribution,
                }
            }
        }

        impl From<$from::ServiceImport> for $to::ServiceImport {
            fn from(o: $from::ServiceImport) -> Self {
                Self {
                    metadata: o.metadata,
                    spec: o.spec.into(),
                    status: o.status,
                }
            }
        }
    };
}

convert_versions!(v1alpha1 => v1beta1);
convert_versions!(v1beta1 => v1alpha1);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn versions_convert_losslessly() {
        let mut spec = v1alpha1::ServiceImportSpec {
            ports: vec![ServicePort {
                name: Some("tcp".into()),
                port: 42,
                ..Default::default()
            }],
            type_: ServiceImportType::Headless,
            ..Default::default()
        };
        spec.ip_families.push(values::IPV4.into());
        let alpha = v1alpha1::ServiceImport::new("hello", spec.clone());
        let beta: v1beta1::ServiceImport = alpha.clone().into();
        assert_eq!(
            v1beta1::ServiceImport::api_version(&()),
            "multicluster.x-k8s.io/v1beta1"
        );
        let back: v1alpha1::ServiceImport = beta.into();
        assert_eq!(back, alpha);
    }

    #[test]
    fn service_export_spec_may_be_missing_or_null() {
        for doc in [
            r#"{"apiVersion":"multicluster.x-k8s.io/v1beta1","kind":"ServiceExport","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"multicluster.x-k8s.io/v1beta1","kind":"ServiceExport","metadata":{"name":"a"},"spec":null}"#,
            r#"{"apiVersion":"multicluster.x-k8s.io/v1beta1","kind":"ServiceExport","metadata":{"name":"a"},"spec":{}}"#,
        ] {
            let export: v1beta1::ServiceExport = serde_json::from_str(doc).unwrap();
            assert_eq!(export.spec, v1beta1::ServiceExportSpec::default(), "{doc}");
        }
        let export: v1alpha1::ServiceExport = serde_json::from_str(
            r#"{"metadata":{"name":"a"},"spec":{"exportedLabels":{"k":"v"}}}"#,
        )
        .unwrap();
        assert_eq!(export.spec.exported_labels["k"], "v");
    }

    #[test]
    fn protocol_defaults_to_tcp() {
        let port = ServicePort {
            port: 80,
            ..Default::default()
        };
        assert_eq!(port.protocol_or_default(), "TCP");
    }
}
