//! Which parents an HTTPRoute attaches to, and whether its backendRefs may be used: the
//! pure rules both causeway-proxy (what to serve) and the status controller (what to
//! report) follow, so they never disagree. Reasons are the Gateway API's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;

use super::http_route::{HTTPBackendRef, HTTPRoute, HTTPRouteFilter, ParentReference};
use super::{CONTROLLER_NAME, GROUP, Gateway, GatewayClass, Listener, ReferenceGrant};
use crate::federation::selection::labels;

/// The group of `ServiceImport` (GEP-1748 backendRefs).
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";

/// Condition types and reasons of route, Gateway and listener status.
pub mod reasons {
    /// Condition type: the route is attached / the Gateway or class is accepted.
    pub const ACCEPTED: &str = "Accepted";
    /// Condition type: every reference resolved.
    pub const RESOLVED_REFS: &str = "ResolvedRefs";
    /// Condition type: the Gateway (or listener) is configured in the data plane.
    pub const PROGRAMMED: &str = "Programmed";
    /// No listener of the parent allows this route (namespace or kind).
    pub const NOT_ALLOWED_BY_LISTENERS: &str = "NotAllowedByListeners";
    /// No hostname of the route intersects the listeners'.
    pub const NO_MATCHING_LISTENER_HOSTNAME: &str = "NoMatchingListenerHostname";
    /// The sectionName or port of the parentRef matches no listener.
    pub const NO_MATCHING_PARENT: &str = "NoMatchingParent";
    /// A field value is not supported by causeway-proxy.
    pub const UNSUPPORTED_VALUE: &str = "UnsupportedValue";
    /// A cross-namespace reference without a ReferenceGrant.
    pub const REF_NOT_PERMITTED: &str = "RefNotPermitted";
    /// A backendRef of a kind that is neither Service nor ServiceImport.
    pub const INVALID_KIND: &str = "InvalidKind";
    /// A backendRef to an object that does not exist.
    pub const BACKEND_NOT_FOUND: &str = "BackendNotFound";
    /// A listener protocol causeway-proxy does not serve.
    pub const UNSUPPORTED_PROTOCOL: &str = "UnsupportedProtocol";
    /// Condition type: the listener cannot be told apart from another of its Gateway.
    pub const CONFLICTED: &str = "Conflicted";
    /// Another listener on the same port has the same protocol and hostname.
    pub const HOSTNAME_CONFLICT: &str = "HostnameConflict";
    /// `Conflicted` is False.
    pub const NO_CONFLICTS: &str = "NoConflicts";
}
use reasons::*;

/// Why a route does not attach, or a reference does not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The condition reason.
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

fn refused(reason: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        reason,
        message: message.into(),
    }
}

/// A listener a route attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachedListener {
    /// The listener's name.
    pub name: String,
    /// The listener's port (redirects without a port use it).
    pub port: i32,
    /// The hostnames the route serves there (exact or `*.suffix`); empty: any host.
    pub hostnames: Vec<String>,
}

/// The verdict on one parentRef of a route whose parent is a causeway Gateway.
#[derive(Clone, Debug, PartialEq)]
pub struct ParentVerdict {
    /// The parentRef as written in the route.
    pub parent_ref: ParentReference,
    /// `namespace/name` of the Gateway.
    pub gateway: String,
    /// The listeners it attached to, or why it did not.
    pub attached: Result<Vec<AttachedListener>, Refused>,
    /// The listeners whose `attachedRoutes` count the route: those the parentRef
    /// selects (sectionName, port) and whose `allowedRoutes` let it in, whatever the
    /// hostnames, the listener's own validity or the route's support (the Gateway API:
    /// attachment depends "solely on AllowedRoutes and ParentRefs", and routes that are
    /// themselves not Accepted count).
    pub counted: Vec<String>,
}

/// Whether `class` names a GatewayClass served by causeway.
pub fn class_is_ours(class: &str, classes: &[Arc<GatewayClass>]) -> bool {
    classes
        .iter()
        .any(|c| c.name_any() == class && c.spec.controller_name == CONTROLLER_NAME)
}

/// Why causeway-proxy cannot serve a listener (None: it can). Plain HTTP only.
pub fn listener_problem(l: &Listener) -> Option<Refused> {
    (l.protocol != "HTTP").then(|| {
        refused(
            UNSUPPORTED_PROTOCOL,
            format!(
                "listener {} has protocol {}; causeway-proxy serves HTTP listeners only",
                l.name, l.protocol
            ),
        )
    })
}

/// Why listener `l` of `gw` cannot be told apart from another listener of `gw` that
/// causeway-proxy serves (None: it can). Listeners are distinct by port, protocol and
/// hostname (GatewaySpec.listeners); of the listeners causeway-proxy serves (HTTP), two
/// on one port with the same hostname (none counting as one hostname: any) are a
/// `HostnameConflict`, both of them, and neither is served: the spec's "its network
/// port should not be configured". A listener causeway-proxy does not serve (its
/// protocol) neither conflicts nor takes another offline: it is refused on its own
/// (`UnsupportedProtocol`).
pub fn listener_conflict<'a>(gw: &'a Gateway, l: &'a Listener) -> Option<Refused> {
    if listener_problem(l).is_some() {
        return None;
    }
    let host = |l: &Listener| {
        l.hostname
            .as_deref()
            .filter(|h| !h.is_empty())
            .map(str::to_ascii_lowercase)
    };
    let o = gw.spec.listeners.iter().find(|o| {
        !std::ptr::eq(*o, l)
            && o.port == l.port
            && listener_problem(o).is_none()
            && host(o) == host(l)
    })?;
    // the pair in name order, so that both listeners say the same
    let (a, b) = if l.name <= o.name { (l, o) } else { (o, l) };
    Some(refused(
        HOSTNAME_CONFLICT,
        format!(
            "listeners {} and {} both take {} requests {} on port {}; give one of them another hostname or port",
            a.name,
            b.name,
            l.protocol,
            host(l).map_or("for any hostname".to_string(), |h| format!("for {h}")),
            l.port
        ),
    ))
}

/// Whether `pattern` (exact or `*.suffix`) matches `host` (which may be a wildcard
/// itself): a wildcard matches one or more labels before its suffix.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.ends_with(suffix),
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The hostnames a route with `route` hostnames serves on a listener with `listener`:
/// the spec's intersection (the more specific of each matching pair). `Some(vec![])`:
/// any host; None: they do not intersect.
pub fn intersect(listener: Option<&str>, route: &[String]) -> Option<Vec<String>> {
    let listener = listener.filter(|l| !l.is_empty());
    let route: Vec<String> = route.iter().map(|h| h.to_ascii_lowercase()).collect();
    match (listener.map(str::to_ascii_lowercase), route.is_empty()) {
        (None, _) => Some(route),
        (Some(l), true) => Some(vec![l]),
        (Some(l), false) => {
            let mut out: Vec<String> = Vec::new();
            for h in route {
                let pick = if host_matches(&l, &h) {
                    Some(h)
                } else if host_matches(&h, &l) {
                    Some(l.clone())
                } else {
                    None
                };
                if let Some(p) = pick.filter(|p| !out.contains(p)) {
                    out.push(p);
                }
            }
            (!out.is_empty()).then_some(out)
        }
    }
}

fn route_allowed(
    l: &Listener,
    gateway_ns: &str,
    route_ns: &str,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<(), String> {
    let allowed = l.allowed_routes.as_ref();
    let kinds = allowed.map(|a| a.kinds.as_slice()).unwrap_or_default();
    if !kinds.is_empty() && !kinds.iter().any(is_http_route) {
        return Err(format!("listener {} does not allow HTTPRoutes", l.name));
    }
    let from = allowed.and_then(|a| a.namespaces.as_ref());
    match from.and_then(|n| n.from.as_deref()).unwrap_or("Same") {
        "All" => Ok(()),
        "Same" if gateway_ns == route_ns => Ok(()),
        "Same" => Err(format!(
            "listener {} allows routes from its own namespace {gateway_ns} only",
            l.name
        )),
        "Selector" => {
            let empty = BTreeMap::new();
            let labels_of = namespaces.get(route_ns).unwrap_or(&empty);
            match from.and_then(|n| n.selector.as_ref()) {
                Some(sel) if labels::matches(sel, labels_of) => Ok(()),
                _ => Err(format!(
                    "namespace {route_ns} does not match the selector of listener {}",
                    l.name
                )),
            }
        }
        other => Err(format!(
            "listener {} has allowedRoutes.namespaces.from {other:?} (All, Same or Selector)",
            l.name
        )),
    }
}

/// Whether `p` refers to a Gateway (the default kind).
pub fn refers_to_gateway(p: &ParentReference) -> bool {
    p.group.as_deref().unwrap_or(GROUP) == GROUP
        && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
}

/// The verdict on each parentRef of `route` that names a Gateway of a causeway class
/// (other parents are other controllers' business and are left out). `namespaces`:
/// namespace labels, for listeners that select route namespaces.
pub fn parents(
    route: &HTTPRoute,
    gateways: &[Arc<Gateway>],
    classes: &[Arc<GatewayClass>],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<ParentVerdict> {
    let route_ns = route.namespace().unwrap_or_default();
    let unsupported = unsupported(route);
    let mut out = Vec::new();
    for p in route
        .spec
        .parent_refs
        .iter()
        .filter(|p| refers_to_gateway(p))
    {
        let ns = p.namespace.clone().unwrap_or_else(|| route_ns.clone());
        let Some(gw) = gateways
            .iter()
            .find(|g| g.namespace().as_deref() == Some(ns.as_str()) && g.name_any() == p.name)
        else {
            continue;
        };
        if !class_is_ours(&gw.spec.gateway_class_name, classes) {
            continue;
        }
        let attached =
            attach(route, &route_ns, p, gw, namespaces).and_then(|ls| match &unsupported {
                Some(why) => Err(refused(UNSUPPORTED_VALUE, why.clone())),
                None => Ok(ls),
            });
        out.push(ParentVerdict {
            parent_ref: p.clone(),
            gateway: format!("{ns}/{}", p.name),
            attached,
            counted: selected(p, gw)
                // an HTTPRoute is a kind only HTTP and HTTPS listeners take
                .filter(|l| matches!(l.protocol.as_str(), "HTTP" | "HTTPS"))
                .filter(|l| route_allowed(l, &ns, &route_ns, namespaces).is_ok())
                .map(|l| l.name.clone())
                .collect(),
        });
    }
    out
}

fn attach(
    route: &HTTPRoute,
    route_ns: &str,
    p: &ParentReference,
    gw: &Gateway,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<Vec<AttachedListener>, Refused> {
    let gw_ns = gw.namespace().unwrap_or_default();
    let named: Vec<&Listener> = selected(p, gw).collect();
    if named.is_empty() {
        return Err(refused(
            NO_MATCHING_PARENT,
            format!(
                "Gateway {gw_ns}/{} has no listener{}{}",
                p.name,
                p.section_name
                    .as_ref()
                    .map(|s| format!(" named {s}"))
                    .unwrap_or_default(),
                p.port.map(|s| format!(" on port {s}")).unwrap_or_default()
            ),
        ));
    }
    let mut why_not: Vec<String> = Vec::new();
    let mut allowed: Vec<&Listener> = Vec::new();
    for l in named.into_iter().filter(|l| listener_problem(l).is_none()) {
        let why = match listener_conflict(gw, l) {
            Some(c) => Err(format!("not served: {}", c.message)),
            None => route_allowed(l, &gw_ns, route_ns, namespaces),
        };
        match why {
            Ok(()) => allowed.push(l),
            Err(m) if !why_not.contains(&m) => why_not.push(m),
            Err(_) => {}
        }
    }
    if allowed.is_empty() {
        let msg = if why_not.is_empty() {
            "no HTTP listener of the Gateway matches".to_string()
        } else {
            why_not.join("; ")
        };
        return Err(refused(NOT_ALLOWED_BY_LISTENERS, msg));
    }
    let out: Vec<AttachedListener> = allowed
        .into_iter()
        .filter_map(|l| {
            Some(AttachedListener {
                name: l.name.clone(),
                port: l.port,
                hostnames: intersect(l.hostname.as_deref(), &route.spec.hostnames)?,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(refused(
            NO_MATCHING_LISTENER_HOSTNAME,
            format!(
                "no hostname of the route ({}) matches a listener hostname of Gateway {gw_ns}/{}",
                route.spec.hostnames.join(", "),
                p.name
            ),
        ));
    }
    Ok(out)
}

/// The listeners of `gw` that parentRef `p` selects (its sectionName and port).
fn selected<'a>(p: &'a ParentReference, gw: &'a Gateway) -> impl Iterator<Item = &'a Listener> {
    gw.spec
        .listeners
        .iter()
        .filter(|l| p.section_name.as_ref().is_none_or(|s| *s == l.name))
        .filter(|l| p.port.is_none_or(|port| port == l.port))
}

/// What in `route` causeway-proxy does not support (None: everything is supported).
pub fn unsupported(route: &HTTPRoute) -> Option<String> {
    let mut out = Vec::new();
    for (i, rule) in route.spec.rules.iter().enumerate() {
        for m in rule.matches.iter().flatten() {
            let t = m.path.as_ref().and_then(|p| p.type_.as_deref());
            if !matches!(t, None | Some("Exact" | "PathPrefix")) {
                out.push(format!(
                    "rules[{i}]: path match type {} is not supported (use Exact or PathPrefix)",
                    t.unwrap_or_default()
                ));
            }
            if let Some(method) = m.method.as_deref()
                && !METHODS.contains(&method)
            {
                out.push(format!(
                    "rules[{i}]: method {method:?} is not one of {}",
                    METHODS.join(", ")
                ));
            }
            for h in m.headers.iter().filter(|h| !is_header_name(&h.name)) {
                out.push(format!(
                    "rules[{i}]: header match name {:?} is not a header name",
                    h.name
                ));
            }
            let typed = m.headers.iter().filter_map(|h| h.type_.as_deref());
            let q = m.query_params.iter().filter_map(|h| h.type_.as_deref());
            if let Some(t) = typed.chain(q).find(|t| *t != "Exact") {
                out.push(format!("rules[{i}]: header and query parameter match type {t} is not supported (use Exact)"));
            }
        }
        upstream_rule_checks(i, rule, &mut out);
        let filters = rule
            .filters
            .iter()
            .chain(rule.backend_refs.iter().flat_map(|b| b.filters.iter()));
        for f in filters {
            filter_values(i, f, &mut out);
            if !matches!(
                f.type_.as_str(),
                "RequestHeaderModifier"
                    | "ResponseHeaderModifier"
                    | "RequestRedirect"
                    | "URLRewrite"
            ) {
                out.push(format!(
                    "rules[{i}]: filter type {} is not supported",
                    f.type_
                ));
            }
        }
        if rule.backend_refs.iter().any(|b| !b.filters.is_empty()) {
            out.push(format!(
                "rules[{i}]: filters on backendRefs are not supported (put them on the rule)"
            ));
        }
    }
    (!out.is_empty()).then(|| out.join("; "))
}

/// What upstream's CRD validation (its CEL rules on HTTPRouteRule and the spec's
/// "Accepted=False" cases) refuses in rule `i`, which Causeway's CRD lets through: a
/// ReplacePrefixMatch beside a match that is not a PathPrefix, a RequestRedirect with a
/// URLRewrite or with backendRefs, a core filter twice in one list.
fn upstream_rule_checks(i: usize, rule: &super::http_route::HTTPRouteRule, out: &mut Vec<String>) {
    let lists = std::iter::once(&rule.filters).chain(rule.backend_refs.iter().map(|b| &b.filters));
    for filters in lists {
        // ReplacePrefixMatch: only compatible with PathPrefix matches (the spec:
        // "Using any other HTTPRouteMatch type on the same HTTPRouteRule will result in
        // the implementation setting the Accepted Condition for the Route to status:
        // False"); no matches is one PathPrefix / match
        for f in filters {
            let prefix = [
                f.request_redirect.as_ref().and_then(|r| r.path.as_ref()),
                f.url_rewrite.as_ref().and_then(|r| r.path.as_ref()),
            ]
            .into_iter()
            .flatten()
            .any(|p| p.type_ == "ReplacePrefixMatch");
            if !prefix {
                continue;
            }
            let other = rule
                .matches
                .iter()
                .flatten()
                .enumerate()
                .find_map(|(j, m)| {
                    let t = m.path.as_ref().and_then(|p| p.type_.as_deref());
                    (!matches!(t, None | Some("PathPrefix"))).then(|| (j, t.unwrap_or_default()))
                });
            if let Some((j, t)) = other {
                out.push(format!(
                    "rules[{i}]: {} path type ReplacePrefixMatch replaces the prefix a PathPrefix match matched, and matches[{j}] is {t}: use ReplaceFullPath, or PathPrefix matches only",
                    f.type_
                ));
            }
        }
        let has = |t: &str| filters.iter().any(|f| f.type_ == t);
        if has("RequestRedirect") && has("URLRewrite") {
            out.push(format!(
                "rules[{i}]: RequestRedirect and URLRewrite cannot be used together (a redirect answers the request, a rewrite forwards it): keep one of them"
            ));
        }
        for t in [
            "RequestHeaderModifier",
            "ResponseHeaderModifier",
            "RequestRedirect",
            "URLRewrite",
        ] {
            let n = filters.iter().filter(|f| f.type_ == t).count();
            if n > 1 {
                out.push(format!(
                    "rules[{i}]: filter {t} is given {n} times: put all its edits in one"
                ));
            }
        }
    }
    if !rule.backend_refs.is_empty() && rule.filters.iter().any(|f| f.type_ == "RequestRedirect") {
        out.push(format!(
            "rules[{i}]: RequestRedirect answers every request itself, so backendRefs cannot be used with it: remove the backendRefs or the filter"
        ));
    }
}

/// Whether a listener's `allowedRoutes.kinds` entry names HTTPRoute, the one route
/// kind causeway-proxy serves (its group defaults to the Gateway API's).
pub fn is_http_route(k: &super::RouteGroupKind) -> bool {
    k.kind == "HTTPRoute" && k.group.as_deref().unwrap_or(GROUP) == GROUP
}

/// The methods an HTTPRoute match may name (the spec's enum).
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// Whether `name` is an HTTP header name (RFC 9110 token), as the spec's pattern.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` is an HTTP field value (RFC 9110: visible ASCII, obs-text, space and
/// tab; no other control character): what causeway-proxy can send
/// (`http::HeaderValue::from_bytes` takes exactly these).
pub fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// The values of filter `f` causeway-proxy cannot apply as written (the CRDs carry no
/// pattern or enum that would refuse them): each is said, and the route refused, rather
/// than matched more broadly or filtered otherwise than asked.
fn filter_values(i: usize, f: &HTTPRouteFilter, out: &mut Vec<String>) {
    let edits = [&f.request_header_modifier, &f.response_header_modifier];
    for e in edits.into_iter().flatten() {
        // (`remove` names are plain strings in the spec: one that is no header name
        // removes nothing)
        let names = e.set.iter().chain(&e.add).map(|h| &h.name);
        for n in names.filter(|n| !is_header_name(n)) {
            out.push(format!(
                "rules[{i}]: {} header name {n:?} is not a header name",
                f.type_
            ));
        }
        for h in e.set.iter().chain(&e.add) {
            if !is_header_value(&h.value) {
                out.push(format!(
                    "rules[{i}]: {} header {}: value {:?} is not an HTTP header value (control characters other than tab are not allowed): remove them",
                    f.type_, h.name, h.value
                ));
            }
        }
    }
    if let Some(r) = &f.request_redirect {
        if let Some(code) = r.status_code.filter(|c| ![301, 302].contains(c)) {
            out.push(format!(
                "rules[{i}]: RequestRedirect statusCode {code} is not supported (use 301 or 302)"
            ));
        }
        if let Some(scheme) = r
            .scheme
            .as_deref()
            .filter(|s| !["http", "https"].contains(s))
        {
            out.push(format!(
                "rules[{i}]: RequestRedirect scheme {scheme:?} is not http or https"
            ));
        }
    }
    let paths = [
        f.request_redirect.as_ref().and_then(|r| r.path.as_ref()),
        f.url_rewrite.as_ref().and_then(|r| r.path.as_ref()),
    ];
    for p in paths.into_iter().flatten() {
        let given = match p.type_.as_str() {
            "ReplaceFullPath" => p.replace_full_path.is_some(),
            "ReplacePrefixMatch" => p.replace_prefix_match.is_some(),
            other => {
                out.push(format!(
                    "rules[{i}]: {} path type {other:?} is not supported (use ReplaceFullPath or ReplacePrefixMatch)",
                    f.type_
                ));
                continue;
            }
        };
        if !given {
            let field = if p.type_ == "ReplaceFullPath" {
                "replaceFullPath"
            } else {
                "replacePrefixMatch"
            };
            out.push(format!(
                "rules[{i}]: {} path type {} needs {field}",
                f.type_, p.type_
            ));
        }
    }
}

/// The kind of a backendRef causeway-proxy forwards to; both resolve through the hub
/// ServiceImport of that name (a Service is served where it is exported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// A core Service.
    Service,
    /// An MCS ServiceImport (GEP-1748).
    ServiceImport,
}

impl BackendKind {
    fn group_kind(self) -> (&'static str, &'static str) {
        match self {
            BackendKind::Service => ("", "Service"),
            BackendKind::ServiceImport => (MCS_GROUP, "ServiceImport"),
        }
    }
}

/// The kind and namespace of `b`, a backendRef of a route in `route_ns`, or why it may
/// not be used: `InvalidKind`, or `RefNotPermitted` (another namespace, and no
/// ReferenceGrant there lets HTTPRoutes of `route_ns` refer to it).
pub fn backend(
    route_ns: &str,
    b: &HTTPBackendRef,
    grants: &[Arc<ReferenceGrant>],
) -> Result<(BackendKind, String), Refused> {
    let group = b.group.as_deref().unwrap_or("");
    let kind = b.kind.as_deref().unwrap_or("Service");
    let k = match (group, kind) {
        ("", "Service") => BackendKind::Service,
        (MCS_GROUP, "ServiceImport") => BackendKind::ServiceImport,
        _ => {
            return Err(refused(
                INVALID_KIND,
                format!(
                    "backendRef {} has kind {kind} in group {group:?}; use a Service or a {MCS_GROUP} ServiceImport",
                    b.name
                ),
            ));
        }
    };
    let ns = b.namespace.clone().unwrap_or_else(|| route_ns.to_string());
    if k == BackendKind::Service && b.port.is_none() {
        return Err(refused(
            UNSUPPORTED_VALUE,
            format!(
                "backendRef {ns}/{}: a Service backendRef needs a port (the Gateway API requires it)",
                b.name
            ),
        ));
    }
    if ns != route_ns && !granted(route_ns, k, &ns, &b.name, grants) {
        return Err(refused(
            REF_NOT_PERMITTED,
            format!(
                "backendRef {ns}/{} is in another namespace and no ReferenceGrant in {ns} allows HTTPRoutes from {route_ns} to refer to it",
                b.name
            ),
        ));
    }
    Ok((k, ns))
}

fn granted(
    from_ns: &str,
    kind: BackendKind,
    to_ns: &str,
    name: &str,
    grants: &[Arc<ReferenceGrant>],
) -> bool {
    let (group, k) = kind.group_kind();
    grants
        .iter()
        .filter(|g| g.namespace().as_deref() == Some(to_ns))
        .any(|g| {
            g.spec
                .from
                .iter()
                .any(|f| f.group == GROUP && f.kind == "HTTPRoute" && f.namespace == from_ns)
                && g.spec.to.iter().any(|t| {
                    t.group == group && t.kind == k && t.name.as_deref().is_none_or(|n| n == name)
                })
        })
}

/// One path rule of a MultiClusterIngress host, as [`mci_overlaps`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MciPath {
    /// `Exact` (else a prefix: `Prefix`, `ImplementationSpecific`).
    pub exact: bool,
    /// The path as matched: a prefix without its trailing slashes (`/` is empty).
    pub path: String,
    /// `namespace/name` of the MultiClusterIngress whose rule it is (the oldest of
    /// identical rules: it is the one served).
    pub mci: String,
}

/// The rules and default backend of one MultiClusterIngress rule host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MciHost {
    /// Its path rules, every MCI's.
    pub paths: Vec<MciPath>,
    /// `namespace/name` of the MCI whose defaultBackend answers what none of its rules
    /// match: the oldest MCI naming the host decides, with or without one (named hosts
    /// only; for the rules without host it is [`MciHosts::catch_all`]).
    pub default: Option<String>,
}

/// What the MultiClusterIngresses causeway-proxy serves claim, by rule host: the input
/// of [`mci_overlaps`], read alike by the proxy (its warnings) and the Gateway status
/// controller (the routes' status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MciHosts {
    /// By rule host, lowercase: exact, `*.suffix` (an Ingress wildcard: one label), or
    /// None (the rules without host).
    pub hosts: BTreeMap<Option<String>, MciHost>,
    /// `namespace/name` of the MCI whose defaultBackend is the catch-all (the requests
    /// whose host no rule names).
    pub catch_all: Option<String>,
}

/// The order in which objects take what they both claim: the oldest first (those
/// without a creation time last), then the alphabetical order of `namespace/name` (the
/// Gateway API's tie-break: `team-b/api` before `team/web`, as '-' sorts before '/').
/// One key for causeway-proxy and the status controllers.
pub fn age_key(meta: &kube::api::ObjectMeta) -> impl Ord + use<> {
    let t = meta.creation_timestamp.as_ref().map(|t| t.0);
    let id = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    (t.is_none(), t, id)
}

/// The hosts the served MultiClusterIngresses of `mcis` claim (MCI-3 class ours, MCI-2
/// valid, not being deleted), oldest first as causeway-proxy serves them.
pub fn mci_hosts(
    mcis: &[Arc<crate::mci::MultiClusterIngress>],
    ingress_classes: &[k8s_openapi::api::networking::v1::IngressClass],
) -> MciHosts {
    mci_claims(mcis, ingress_classes).hosts
}

/// What a served MultiClusterIngress asks for that causeway-proxy gives an older one
/// (or an earlier rule of its own) instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShadowedRule {
    /// A path rule of `host` (None: the rules without host), as written.
    Path {
        /// The rule host, lowercase.
        host: Option<String>,
        /// Its `pathType`.
        path_type: String,
        /// Its path (`/` when unset).
        path: String,
    },
    /// Its defaultBackend, as the default of a host its rules name.
    HostDefault(String),
    /// Its defaultBackend, as the catch-all of the hosts no rule names.
    CatchAll,
}

/// One [`ShadowedRule`] of an MCI and who serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shadowed {
    /// What is not served.
    pub rule: ShadowedRule,
    /// `namespace/name` of the MCI that serves it (the MCI itself: an earlier rule of
    /// its own, identical).
    pub by: String,
    /// Whether `by` is the MCI itself.
    pub own: bool,
}

impl std::fmt::Display for Shadowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = &self.by;
        match &self.rule {
            ShadowedRule::Path {
                host,
                path_type,
                path,
            } => {
                let on = match host {
                    Some(h) => format!("host {h}"),
                    None => "the rules without host".to_string(),
                };
                if self.own {
                    write!(
                        f,
                        "path {path} ({path_type}) of {on} repeats an earlier rule of its own, which is the one served"
                    )
                } else {
                    write!(
                        f,
                        "path {path} ({path_type}) of {on} is served by the older MultiClusterIngress {by}"
                    )
                }
            }
            ShadowedRule::HostDefault(h) => write!(
                f,
                "defaultBackend does not serve host {h}: the older MultiClusterIngress {by} names it first and decides its default"
            ),
            ShadowedRule::CatchAll => write!(
                f,
                "defaultBackend is not the catch-all for hosts no rule names: the older MultiClusterIngress {by} provides it"
            ),
        }
    }
}

/// The conflicts of one served MultiClusterIngress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MciConflict {
    /// What it asks for and does not get, in spec order (paths, then host defaults,
    /// then the catch-all).
    pub shadowed: Vec<Shadowed>,
    /// How many things it asks for: each path rule, its defaultBackend for each host
    /// its rules name, and as the catch-all (when it is one).
    pub claims: usize,
}

impl MciConflict {
    /// Whether nothing it asks for is served (an older MCI takes all of it).
    pub fn all_shadowed(&self) -> bool {
        self.claims > 0 && self.shadowed.len() == self.claims
    }
}

/// What the served MultiClusterIngresses claim, and what each of them loses to an older
/// one: computed once, read by causeway-proxy (its route table's warnings, the HTTPRoute
/// overlaps) and the MCI controller (the Accepted condition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MciClaims {
    /// By rule host ([`mci_hosts`]).
    pub hosts: MciHosts,
    /// By `namespace/name`, the served MCIs that lose something.
    pub conflicts: BTreeMap<String, MciConflict>,
}

/// [`MciClaims`] of `mcis`: the served ones (MCI-3 class ours, MCI-2 valid, not being
/// deleted) in [`age_key`] order, as causeway-proxy serves them (`proxy/src/table.rs`):
/// of identical path rules (host, Exact or a prefix, the path as matched) the first
/// is served; the oldest MCI naming a host decides its default backend, with or
/// without one (ingress-nginx's server); the oldest MCI with a defaultBackend and no
/// rules, or rules without host, provides the catch-all.
pub fn mci_claims(
    mcis: &[Arc<crate::mci::MultiClusterIngress>],
    ingress_classes: &[k8s_openapi::api::networking::v1::IngressClass],
) -> MciClaims {
    let mut served: Vec<&Arc<crate::mci::MultiClusterIngress>> = mcis
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| crate::mci::class::select(m, ingress_classes).is_ours())
        .filter(|m| crate::mci::validate::validate(m).is_empty())
        .collect();
    served.sort_by_cached_key(|m| age_key(&m.metadata));
    let mut out = MciClaims::default();
    let hosts = &mut out.hosts;
    // who names each host first (decides its default, with or without one)
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for m in served {
        let id = format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any());
        let has_default = m.spec.default_backend.is_some();
        let mut conflict = MciConflict::default();
        let mut named: Vec<Option<String>> = Vec::new();
        for rule in m.spec.rules.iter().flatten() {
            let host = rule
                .host
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(str::to_ascii_lowercase);
            if !named.contains(&host) {
                named.push(host.clone());
            }
            let first = !hosts.hosts.contains_key(&host);
            let entry = hosts.hosts.entry(host.clone()).or_default();
            // the oldest MCI naming a host decides its default (ingress-nginx's server)
            if first && host.is_some() && has_default {
                entry.default = Some(id.clone());
            }
            for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                conflict.claims += 1;
                let exact = p.path_type == "Exact";
                let raw = p.path.as_deref().unwrap_or("/");
                let path = if exact {
                    raw.to_string()
                } else {
                    raw.trim_end_matches('/').to_string()
                };
                match entry
                    .paths
                    .iter()
                    .find(|q| q.exact == exact && q.path == path)
                {
                    Some(q) => conflict.shadowed.push(Shadowed {
                        rule: ShadowedRule::Path {
                            host: host.clone(),
                            path_type: p.path_type.clone(),
                            path: raw.to_string(),
                        },
                        by: q.mci.clone(),
                        own: q.mci == id,
                    }),
                    None => entry.paths.push(MciPath {
                        exact,
                        path,
                        mci: id.clone(),
                    }),
                }
            }
        }
        for h in named.iter().flatten() {
            let by = owner.entry(h.clone()).or_insert_with(|| id.clone());
            if has_default {
                conflict.claims += 1;
                if *by != id {
                    conflict.shadowed.push(Shadowed {
                        rule: ShadowedRule::HostDefault(h.clone()),
                        by: by.clone(),
                        own: false,
                    });
                }
            }
        }
        if has_default && (named.is_empty() || named.contains(&None)) {
            conflict.claims += 1;
            match &hosts.catch_all {
                None => hosts.catch_all = Some(id.clone()),
                Some(by) => conflict.shadowed.push(Shadowed {
                    rule: ShadowedRule::CatchAll,
                    by: by.clone(),
                    own: false,
                }),
            }
        }
        if !conflict.shadowed.is_empty() {
            out.conflicts.insert(id, conflict);
        }
    }
    out
}

/// Whether a rule of `kind` (exact or a prefix) with path `rule` (as matched) takes
/// every request a route match with `path` (as matched; `exact` or a prefix) would.
fn path_covers(rule_exact: bool, rule: &str, exact: bool, path: &str) -> bool {
    if rule_exact {
        exact && rule == path
    } else {
        rule.is_empty()
            || (path.starts_with(rule)
                && (path.len() == rule.len() || path.as_bytes()[rule.len()] == b'/'))
    }
}

/// Whether `host` is one label under `suffix` (what an Ingress wildcard `*.suffix`
/// matches), or (`deep`) one or more labels (a Gateway API wildcard).
fn under(host: &str, suffix: &str, deep: bool) -> bool {
    host.len() > suffix.len() + 1
        && host.ends_with(suffix)
        && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        && (deep || !host[..host.len() - suffix.len() - 1].contains('.'))
}

/// HR-9: where an HTTPRoute and the MultiClusterIngresses really conflict on a parent
/// the route attached to with `hostnames` (an [`AttachedListener`]'s; empty: any host),
/// each said once, for the route's status (Accepted stays True: the route is served
/// wherever the MCIs leave it room) and causeway-proxy's warnings.
///
/// causeway-proxy serves a host both front ends claim as follows (`proxy/src/table/
/// gateway.rs`): the MCI rules that serve it (MCI-5: its exact MCI host, else the MCI
/// Ingress wildcard matching it; the MCI rules without host only for hosts neither
/// front end names) come first, the longest path winning; the HTTPRoute rules that
/// serve it (HR-4) take every request those paths do not match; the MCI host's
/// defaultBackend (for a host no rule names: the catch-all defaultBackend) what neither
/// matches. So a route rule is not served on such a host when an MCI path there takes
/// every path it matches, and an MCI defaultBackend answers nothing on a host where a
/// route rule matches every request (`PathPrefix /`, no method, header or query
/// match). Both are reported.
pub fn mci_overlaps(route: &HTTPRoute, hostnames: &[String], mcis: &MciHosts) -> Vec<String> {
    if mcis.hosts.is_empty() && mcis.catch_all.is_none() {
        return Vec::new();
    }
    // (rule index, exact, path as matched, matches every request)
    let mut matches: Vec<(usize, bool, String, bool)> = Vec::new();
    for (i, rule) in route.spec.rules.iter().enumerate() {
        let ms = rule.matches.as_deref().unwrap_or_default();
        if ms.is_empty() {
            matches.push((i, false, String::new(), true));
        }
        for m in ms {
            let exact = m.path.as_ref().and_then(|p| p.type_.as_deref()) == Some("Exact");
            let raw = m
                .path
                .as_ref()
                .and_then(|p| p.value.as_deref())
                .unwrap_or("/");
            let path = if exact {
                raw.to_string()
            } else {
                raw.trim_end_matches('/').to_string()
            };
            let all = !exact
                && path.is_empty()
                && m.method.is_none()
                && m.headers.is_empty()
                && m.query_params.is_empty();
            matches.push((i, exact, path, all));
        }
    }
    let catch_all_rule = matches.iter().find(|m| m.3).map(|m| m.0);
    // the MCI hosts each hostname of the route shares
    let mut shared: BTreeSet<&Option<String>> = BTreeSet::new();
    let mut any = false;
    let hostnames: Vec<String> = hostnames.iter().map(|h| h.to_ascii_lowercase()).collect();
    if hostnames.is_empty() {
        any = true;
        shared.extend(mcis.hosts.keys());
    }
    for h in &hostnames {
        match h.strip_prefix("*.") {
            Some(s) => shared.extend(mcis.hosts.keys().filter(|k| match k.as_deref() {
                Some(m) => match m.strip_prefix("*.") {
                    Some(t) => t == s || under(t, s, true),
                    None => under(m, s, true),
                },
                None => false,
            })),
            None => {
                let exact = Some(h.clone());
                if mcis.hosts.contains_key(&exact) {
                    shared.extend(mcis.hosts.get_key_value(&exact).map(|(k, _)| k));
                } else if let Some((_, s)) = h.split_once('.') {
                    let wild = Some(format!("*.{s}"));
                    if under(h, s, false) {
                        shared.extend(mcis.hosts.get_key_value(&wild).map(|(k, _)| k));
                    }
                }
            }
        }
    }
    let mut out: BTreeSet<String> = BTreeSet::new();
    // (host, MCI, its path) → the route's rules it shadows
    let mut shadowed: BTreeMap<(String, &str, &str), BTreeSet<usize>> = BTreeMap::new();
    for key in shared {
        let Some(host) = mcis.hosts.get(key) else {
            continue;
        };
        let on = match key {
            Some(h) => format!("host {h}"),
            None => "hosts no rule names".to_string(),
        };
        for (i, exact, path, _) in &matches {
            if let Some(p) = host
                .paths
                .iter()
                .find(|p| path_covers(p.exact, &p.path, *exact, path))
            {
                shadowed
                    .entry((on.clone(), &p.mci, &p.path))
                    .or_default()
                    .insert(*i);
            }
        }
        if let (Some(i), Some(d)) = (catch_all_rule, &host.default) {
            out.insert(format!(
                "rules[{i}] matches every request on {on}, so the defaultBackend of MultiClusterIngress {d} answers none there"
            ));
        }
    }
    for ((on, mci, path), rules) in shadowed {
        let rules: Vec<String> = rules.iter().map(|i| format!("rules[{i}]")).collect();
        out.insert(format!(
            "{} not served on {on}: MultiClusterIngress {mci} serves path {} there first",
            rules.join(", ") + if rules.len() == 1 { " is" } else { " are" },
            if path.is_empty() { "/" } else { path }
        ));
    }
    if let (true, Some(i), Some(d)) = (any, catch_all_rule, &mcis.catch_all) {
        out.insert(format!(
            "rules[{i}] matches every request on hosts no rule names, so the catch-all defaultBackend of MultiClusterIngress {d} answers none"
        ));
    }
    out.into_iter().collect()
}

#[cfg(test)]
#[path = "attach_tests.rs"]
mod tests;
