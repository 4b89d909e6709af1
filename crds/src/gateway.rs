//! The subset of Gateway API (`gateway.networking.k8s.io`) that causeway-proxy serves:
//! `GatewayClass`, `Gateway` and `HTTPRoute` (v1), `ReferenceGrant` (v1beta1). Field
//! names are the upstream schema's, so upstream YAML applies unchanged (fields outside
//! the subset are pruned by the API server).
//!
//! The crates.io `gateway-api` crate is not used: it is built on another kube and
//! k8s-openapi than this workspace's, and would pull a second copy of both.
//!
//! - [`http_route`]: `HTTPRoute` and its matches, filters and backendRefs.
//! - [`attach`]: the pure rules shared by the proxy and the status controller: which
//!   parents a route attaches to (with the spec's reasons when it does not), hostname
//!   intersection, and backendRef checks (kinds, ReferenceGrants).
//! - [`mesh`]: routes whose parent is a ServiceImport (GAMMA): which ports they
//!   capture, and the mesh ports causeway-proxy serves them on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod attach;
pub mod http_route;
pub mod mesh;

pub use http_route::HTTPRoute;

/// An object kept as it is (fields causeway-proxy does not read).
pub(crate) fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// The API group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// The `controllerName` of GatewayClasses causeway-proxy serves.
pub const CONTROLLER_NAME: &str = "causeway.io/gateway-controller";

/// GatewayClassSpec: which controller implements Gateways of this class.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "GatewayClass",
    plural = "gatewayclasses",
    status = "GatewayClassStatus",
    shortname = "gc",
    category = "gateway-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "GatewayClass describes a class of Gateways available to the user for creating Gateway resources.",
    printcolumn(
        name = "Controller",
        type_ = "string",
        json_path = ".spec.controllerName"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// ControllerName is the name of the controller that is managing Gateways of this class.
    pub controller_name: String,
    /// ParametersRef is a reference to a resource that contains the configuration parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_ref: Option<ParametersReference>,
    /// Description helps describe a GatewayClass with more details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A reference to a configuration resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParametersReference {
    /// Group is the group of the referent.
    pub group: String,
    /// Kind is kind of the referent.
    pub kind: String,
    /// Name is the name of the referent.
    pub name: String,
    /// Namespace is the namespace of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// GatewayClassStatus is the current status of the GatewayClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassStatus {
    /// Conditions is the current status from the controller for this GatewayClass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// GatewaySpec: the class and the listeners of a Gateway.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "Gateway",
    plural = "gateways",
    namespaced,
    status = "GatewayStatus",
    shortname = "gtw",
    category = "gateway-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "Gateway represents an instance of a service-traffic handling infrastructure by binding Listeners to a set of IP addresses.",
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.gatewayClassName"),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".status.addresses[*].value"
    ),
    printcolumn(
        name = "Programmed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Programmed\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// GatewayClassName used for this Gateway.
    pub gateway_class_name: String,
    /// Listeners associated with this Gateway.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub listeners: Vec<Listener>,
    /// Addresses requested for this Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub addresses: Vec<GatewayAddress>,
}

/// A logical endpoint of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Name is the name of the Listener (unique within a Gateway).
    pub name: String,
    /// Hostname specifies the virtual hostname to match for protocol types that define this concept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Port is the network port.
    pub port: i32,
    /// Protocol specifies the network protocol this listener expects to receive.
    pub protocol: String,
    /// TLS is the TLS configuration for the Listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::gateway::any_object")]
    pub tls: Option<serde_json::Value>,
    /// AllowedRoutes defines the types of routes that MAY be attached to a Listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// Which routes may attach to a listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// Namespaces indicates namespaces from which Routes may be attached to this Listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
    /// Kinds specifies the groups and kinds of Routes that are allowed to bind to this listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub kinds: Vec<RouteGroupKind>,
}

/// The namespaces routes may attach from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// From indicates where Routes will be selected for this Gateway: All, Same or Selector (default Same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Selector must be specified when From is set to "Selector".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A group and kind of route.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// Group is the group of the Route (default gateway.networking.k8s.io).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind is the kind of the Route.
    pub kind: String,
}

/// An address requested for, or bound to, a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// Type of the address (IPAddress or Hostname).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Value of the address.
    pub value: String,
}

/// GatewayStatus defines the observed state of Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// Addresses lists the network addresses that have been bound to the Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub addresses: Vec<GatewayAddress>,
    /// Conditions describe the current conditions of the Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Listeners provide status for each unique listener port defined in the Spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub listeners: Vec<ListenerStatus>,
}

/// The status of one listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// Name is the name of the Listener that this status corresponds to.
    pub name: String,
    /// SupportedKinds is the list indicating the Kinds supported by this listener.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub supported_kinds: Vec<RouteGroupKind>,
    /// AttachedRoutes represents the total number of Routes that have been successfully attached to this Listener.
    pub attached_routes: i32,
    /// Conditions describe the current condition of this listener.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// ReferenceGrantSpec: which objects of other namespaces may refer to objects of this one.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1beta1",
    kind = "ReferenceGrant",
    plural = "referencegrants",
    namespaced,
    shortname = "refgrant",
    category = "gateway-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "ReferenceGrant identifies kinds of resources in other namespaces that are trusted to reference the specified kinds of resources in the same namespace as the policy."
)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    /// From describes the trusted namespaces and kinds that can reference the resources described in "To".
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub from: Vec<ReferenceGrantFrom>,
    /// To describes the resources that may be referenced by the resources described in "From".
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub to: Vec<ReferenceGrantTo>,
}

/// A trusted referrer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantFrom {
    /// Group is the group of the referent.
    pub group: String,
    /// Kind is the kind of the referent.
    pub kind: String,
    /// Namespace is the namespace of the referent.
    pub namespace: String,
}

/// A kind (and optionally name) that may be referred to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantTo {
    /// Group is the group of the referent ("" for the core API group).
    pub group: String,
    /// Kind is the kind of the referent.
    pub kind: String,
    /// Name is the name of the referent (all of that kind when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}
