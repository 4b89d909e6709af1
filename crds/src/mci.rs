//! Karmada's `networking.karmada.io/v1alpha1` MultiClusterIngress, with the same
//! schema as Karmada's CRD so existing MultiClusterIngress YAML applies unchanged.
//!
//! The spec *is* a `networking.k8s.io/v1` [`IngressSpec`]; [`MultiClusterIngressSpec`]
//! only wraps it (and dereferences to it) because kube-derive generates the root
//! type from the spec struct.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use k8s_openapi::api::networking::v1::{IngressLoadBalancerStatus, IngressSpec};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::schema::set_at;

pub mod backend;
pub mod class;
pub mod lease;
pub mod tuning;
pub mod validate;

/// The desired state of a MultiClusterIngress: exactly a `networking.k8s.io/v1`
/// IngressSpec (`ingressClassName`, `defaultBackend`, `rules`, `tls`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize)]
#[kube(
    group = "networking.karmada.io",
    version = "v1alpha1",
    kind = "MultiClusterIngress",
    plural = "multiclusteringresses",
    namespaced,
    status = "MultiClusterIngressStatus",
    shortname = "mci",
    category = "karmada-io",
    derive = "PartialEq",
    derive = "Default",
    doc = "MultiClusterIngress is a collection of rules that allow inbound connections to reach the endpoints defined by a backend. The structure of MultiClusterIngress is same as Ingress, indicates the Ingress in multi-clusters.",
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.ingressClassName"),
    printcolumn(name = "Hosts", type_ = "string", json_path = ".spec.rules[*].host"),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".status.loadBalancer.ingress[*].ip"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(transparent)]
pub struct MultiClusterIngressSpec(pub IngressSpec);

impl<'de> Deserialize<'de> for MultiClusterIngressSpec {
    /// Karmada makes the spec optional: a missing or null spec is an empty one.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self(
            Option::<IngressSpec>::deserialize(deserializer)?.unwrap_or_default(),
        ))
    }
}

impl Deref for MultiClusterIngressSpec {
    type Target = IngressSpec;

    fn deref(&self) -> &IngressSpec {
        &self.0
    }
}

impl DerefMut for MultiClusterIngressSpec {
    fn deref_mut(&mut self) -> &mut IngressSpec {
        &mut self.0
    }
}

impl From<IngressSpec> for MultiClusterIngressSpec {
    fn from(spec: IngressSpec) -> Self {
        Self(spec)
    }
}

impl JsonSchema for MultiClusterIngressSpec {
    fn schema_name() -> Cow<'static, str> {
        "MultiClusterIngressSpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = IngressSpec::json_schema(generator);
        schema.insert(
            "description".into(),
            "Spec is the desired state of the MultiClusterIngress.".into(),
        );
        // List and map semantics of networking.k8s.io/v1, as in Karmada's CRD.
        for path in ["rules", "rules[].http.paths", "tls", "tls[].hosts"] {
            set_at(&mut schema, path, "x-kubernetes-list-type", json!("atomic"));
        }
        for backend in ["defaultBackend", "rules[].http.paths[].backend"] {
            for atomic_map in ["resource", "service.port"] {
                set_at(
                    &mut schema,
                    &format!("{backend}.{atomic_map}"),
                    "x-kubernetes-map-type",
                    json!("atomic"),
                );
            }
        }
        schema
    }
}

/// The current state of a MultiClusterIngress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = mci_status_schema)]
pub struct MultiClusterIngressStatus {
    /// loadBalancer contains the current status of the load-balancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<IngressLoadBalancerStatus>,

    /// TrafficBlockClusters records the cluster name list that needs to perform traffic block.
    /// When the cloud provider implements its multicluster-cloud-provider and refreshes
    /// the service backend address to the LoadBalancer Service, it needs to filter out
    /// the backend addresses in these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic_block_clusters: Vec<String>,

    /// ServiceLocations records the locations of MulticlusterIngress's backend
    /// Service resources. It will be set by the system controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_locations: Vec<ServiceLocation>,

    /// Causeway's addition (Karmada's status has no conditions; extra fields do not
    /// change how Karmada YAML applies): `Accepted` says whether Causeway serves this
    /// object and, when not, why (invalid spec, IngressClass of another controller...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// `type` of the MultiClusterIngress condition that says whether Causeway serves it.
pub const ACCEPTED: &str = "Accepted";

/// `type` of the MultiClusterIngress condition that says whether every backend names a
/// port of its hub ServiceImport (`False`, reason [`BACKEND_NOT_FOUND`]: causeway-proxy
/// answers 503 for it). Like `Accepted`, Causeway's addition, said as an Event too.
pub const RESOLVED_REFS: &str = "ResolvedRefs";

/// The `ResolvedRefs` reason (and Warning Event) of an MCI with a backend whose
/// ServiceImport or port does not exist (the Gateway API's reason for the same).
pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";

/// `type` of the MultiClusterIngress condition that says a cluster serving its backends
/// is not Ready, so its endpoints are stale and, past the TTL, withdrawn (the same
/// condition as on ServiceImport, with the same reasons).
pub const ENDPOINTS_STALE: &str = crate::mcs::conditions::service_import::ENDPOINTS_STALE;

fn mci_status_schema(schema: &mut Schema) {
    for path in ["loadBalancer.ingress", "loadBalancer.ingress[].ports"] {
        set_at(schema, path, "x-kubernetes-list-type", json!("atomic"));
    }
}

/// ServiceLocation records the locations of MulticlusterIngress's backend Service resources.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceLocation {
    /// name is the referenced service. The service must exist in
    /// the same namespace as the MultiClusterService object.
    pub name: String,

    /// Clusters records the cluster list where the Service is located.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{HTTPIngressPath, HTTPIngressRuleValue, IngressRule};

    #[test]
    fn spec_is_an_ingress_spec_on_the_wire() {
        let spec = MultiClusterIngressSpec(IngressSpec {
            ingress_class_name: Some("causeway".into()),
            rules: Some(vec![IngressRule {
                host: Some("demo.example.com".into()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        ..Default::default()
                    }],
                }),
            }]),
            ..Default::default()
        });
        let mci = MultiClusterIngress::new("demo", spec.clone());
        let value = serde_json::to_value(&mci).unwrap();
        assert_eq!(value["apiVersion"], "networking.karmada.io/v1alpha1");
        assert_eq!(value["spec"], serde_json::to_value(&spec.0).unwrap());
        // Deref gives direct access to the IngressSpec fields.
        assert_eq!(mci.spec.ingress_class_name.as_deref(), Some("causeway"));
    }

    #[test]
    fn spec_may_be_missing() {
        let mci: MultiClusterIngress = serde_json::from_str(
            r#"{"apiVersion":"networking.karmada.io/v1alpha1","kind":"MultiClusterIngress","metadata":{"name":"a"}}"#,
        )
        .unwrap();
        assert_eq!(mci.spec, MultiClusterIngressSpec::default());
    }
}
