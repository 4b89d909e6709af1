//! `gateway.networking.k8s.io/v1` HTTPRoute: the subset causeway-proxy serves (matches
//! on path, headers, query parameters and method; header modifiers, redirects, URL
//! rewrites; weighted backendRefs to Services and ServiceImports).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// HTTPRouteSpec defines the desired state of HTTPRoute.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    plural = "httproutes",
    namespaced,
    status = "HTTPRouteStatus",
    category = "gateway-api",
    derive = "PartialEq",
    derive = "Default",
    doc = "HTTPRoute provides a way to route HTTP requests.",
    printcolumn(name = "Hostnames", type_ = "string", json_path = ".spec.hostnames"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// ParentRefs references the resources (usually Gateways) that a Route wants to be attached to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames defines a set of hostnames that should match against the HTTP Host header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub hostnames: Vec<String>,
    /// Rules are a list of HTTP matchers, filters and actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub rules: Vec<HTTPRouteRule>,
}

/// A reference from a Route to its parent (a Gateway, or a listener of one).
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// Group is the group of the referent (default gateway.networking.k8s.io).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind is kind of the referent (default Gateway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace is the namespace of the referent (default: the Route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name is the name of the referent.
    pub name: String,
    /// SectionName is the name of a section within the target resource (a listener name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Port is the network port this Route targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// HTTPRouteRule defines semantics for matching an HTTP request based on conditions
/// (matches), processing it (filters), and forwarding the request to an API object
/// (backendRefs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteRule {
    /// Name is the name of the route rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Matches define conditions used for matching the rule against incoming HTTP requests
    /// (default: one PathPrefix / match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub matches: Option<Vec<HTTPRouteMatch>>,
    /// Filters define the filters that are applied to requests that match this rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub filters: Vec<HTTPRouteFilter>,
    /// BackendRefs defines the backend(s) where matching requests should be sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub backend_refs: Vec<HTTPBackendRef>,
}

/// Predicates that a request must all satisfy to match a rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteMatch {
    /// Path specifies a HTTP request path matcher (default PathPrefix /).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathMatch>,
    /// Headers specifies HTTP request header matchers (ANDed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub headers: Vec<HTTPHeaderMatch>,
    /// QueryParams specifies HTTP query parameter matchers (ANDed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub query_params: Vec<HTTPQueryParamMatch>,
    /// Method specifies HTTP method matcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// A path matcher.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathMatch {
    /// Type specifies how to match against the path Value: Exact, PathPrefix (default) or RegularExpression.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Value of the HTTP path to match against (default /).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A header matcher.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPHeaderMatch {
    /// Type specifies how to match against the value of the header: Exact (default) or RegularExpression.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Name is the name of the HTTP Header to be matched (case-insensitive).
    pub name: String,
    /// Value is the value of HTTP Header to be matched.
    pub value: String,
}

/// A query parameter matcher.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPQueryParamMatch {
    /// Type specifies how to match against the value of the query parameter: Exact (default) or RegularExpression.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Name is the name of the HTTP query param to be matched (case-sensitive).
    pub name: String,
    /// Value is the value of HTTP query param to be matched.
    pub value: String,
}

/// A processing step applied to a request (or its response).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteFilter {
    /// Type identifies the type of filter to apply: RequestHeaderModifier, ResponseHeaderModifier,
    /// RequestRedirect, URLRewrite, RequestMirror, ExtensionRef.
    #[serde(rename = "type")]
    pub type_: String,
    /// RequestHeaderModifier defines a schema for a filter that modifies request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HTTPHeaderFilter>,
    /// ResponseHeaderModifier defines a schema for a filter that modifies response headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_header_modifier: Option<HTTPHeaderFilter>,
    /// RequestRedirect defines a schema for a filter that responds to the request with an HTTP redirection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_redirect: Option<HTTPRequestRedirectFilter>,
    /// URLRewrite defines a schema for a filter that modifies a request during forwarding.
    #[serde(
        default,
        rename = "urlRewrite",
        skip_serializing_if = "Option::is_none"
    )]
    pub url_rewrite: Option<HTTPURLRewriteFilter>,
    /// RequestMirror (not supported by causeway-proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::gateway::any_object")]
    pub request_mirror: Option<serde_json::Value>,
    /// ExtensionRef (not supported by causeway-proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::gateway::any_object")]
    pub extension_ref: Option<serde_json::Value>,
}

/// Header modifications.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPHeaderFilter {
    /// Set overwrites the request with the given header (name, value) before the action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub set: Vec<HTTPHeader>,
    /// Add adds the given header(s) (name, value) to the request before the action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub add: Vec<HTTPHeader>,
    /// Remove the given header(s) from the HTTP request before the action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub remove: Vec<String>,
}

/// A header name and value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HTTPHeader {
    /// Name is the name of the HTTP Header (case-insensitive).
    pub name: String,
    /// Value is the value of HTTP Header to be matched.
    pub value: String,
}

/// A redirect answered by the gateway itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRequestRedirectFilter {
    /// Scheme is the scheme to be used in the value of the Location header (http or https).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Hostname is the hostname to be used in the value of the Location header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Path defines parameters used to modify the path of the incoming request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathModifier>,
    /// Port is the port to be used in the value of the Location header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// StatusCode is the HTTP status code to be used in response (301 or 302, default 302).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<i32>,
}

/// A rewrite applied before forwarding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPURLRewriteFilter {
    /// Hostname is the value to be used to replace the Host header value during forwarding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Path defines a path rewrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathModifier>,
}

/// A path replacement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathModifier {
    /// Type defines the type of path modifier: ReplaceFullPath or ReplacePrefixMatch.
    #[serde(rename = "type")]
    pub type_: String,
    /// ReplaceFullPath specifies the value with which to replace the full path of a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    /// ReplacePrefixMatch specifies the value with which to replace the prefix match of a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

/// A backend a rule forwards to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPBackendRef {
    /// Group is the group of the referent ("" for core, multicluster.x-k8s.io for ServiceImport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind is the Kubernetes resource kind of the referent (default Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name is the name of the referent.
    pub name: String,
    /// Namespace is the namespace of the backend (default: the Route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Port specifies the destination port number to use for this resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Weight specifies the proportion of requests forwarded to the referenced backend (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Filters defined at this level are executed only when the request is forwarded to this backend (not supported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub filters: Vec<HTTPRouteFilter>,
}

/// HTTPRouteStatus defines the observed state of HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteStatus {
    /// Parents is a list of parent resources that are associated with the route, and the status of the route with respect to each parent.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub parents: Vec<RouteParentStatus>,
}

/// The status of a route with respect to one parent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// ParentRef corresponds with a ParentRef in the spec that this RouteParentStatus struct describes the status of.
    pub parent_ref: ParentReference,
    /// ControllerName is a domain/path string that indicates the name of the controller that wrote this status.
    pub controller_name: String,
    /// Conditions describes the status of the route with respect to the Gateway.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
