//! HTTPRoutes into the route table: one table, two front ends. Each HTTPRoute that
//! [`attach::parents`] attaches to a causeway Gateway becomes [`Rule`]s under the
//! hostnames it serves there; every hostname gets one [`HostRules`] (its own rules,
//! then those of the wildcards and the host-less routes that cover it, in the spec's
//! precedence; only the routes of the most specific listener whose hostname matches,
//! routes or not, among every causeway Gateway's listeners, which share one data
//! plane: [`Via`], [`GwListener::rivals`]), inserted at `/` in the same
//! [`crate::matching::Router`] as the MCI rules: behind the MCI paths of a host both
//! serve, before its MCI default backend (HR-9: the MCI hosts the routes' hostnames
//! cover are routed too, [`insert_rules`]; conflicts warned of by
//! [`attach::mci_overlaps`], which the status controller says on the routes). backendRefs resolve through the MCI's
//! backend path (`service_target`, with the same MCI-8/EPS-7 traffic blocks), so a
//! Service or ServiceImport backend balances exactly as an MCI backend does; the
//! backendRefs of one rule are picked by weight. Mesh ports (GW-4) get the rules of the
//! mesh routes capturing them, or, while a ServiceImport still names one that no route
//! captures, its ServiceImport port's own endpoints ([`pass_through`]).

use std::cmp::Reverse;
use std::collections::BTreeSet;

use causeway_crds::gateway::attach::{self, AttachedListener};
use causeway_crds::gateway::http_route::{
    HTTPHeaderFilter, HTTPPathModifier, HTTPRouteMatch, HTTPRouteRule,
};
use causeway_crds::gateway::mesh;
use http::header::{HeaderName, HeaderValue};
use http::{Method, StatusCode};
use k8s_openapi::api::networking::v1::ServiceBackendPort;

use super::*;
use crate::gateway::{
    Action, Fallback, HeaderEdit, HostRules, PathModifier, Redirect, Rewrite, Rule,
};

/// How specific a hostname is (lower first).
type HostRank = (u8, Reverse<usize>);

/// A hostname routes serve: exact, `*.<suffix>`, or any.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum HostKey {
    Exact(String),
    Wildcard(String),
    Any,
}

impl HostKey {
    fn of(h: Option<&str>) -> HostKey {
        match h {
            None => HostKey::Any,
            Some(h) => match h.strip_prefix("*.") {
                Some(s) => HostKey::Wildcard(s.to_ascii_lowercase()),
                None => HostKey::Exact(h.to_ascii_lowercase()),
            },
        }
    }

    /// Lower is more specific: exact, then wildcards by suffix length, then any.
    fn rank(&self) -> HostRank {
        match self {
            HostKey::Exact(_) => (0, Reverse(0)),
            HostKey::Wildcard(s) => (1, Reverse(s.len())),
            HostKey::Any => (2, Reverse(0)),
        }
    }

    /// Whether requests for `other` may also match this hostname's rules.
    fn covers(&self, other: &HostKey) -> bool {
        let under = |h: &str, s: &str| {
            h.len() > s.len() + 1 && h.ends_with(s) && h.as_bytes()[h.len() - s.len() - 1] == b'.'
        };
        match (self, other) {
            (HostKey::Any, _) => true,
            (HostKey::Wildcard(s), HostKey::Exact(h) | HostKey::Wildcard(h)) => under(h, s),
            _ => false,
        }
    }
}

impl std::fmt::Display for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostKey::Exact(h) => f.write_str(h),
            HostKey::Wildcard(s) => write!(f, "*.{s}"),
            HostKey::Any => f.write_str("*"),
        }
    }
}

/// The listener a rule was attached through: its Gateway (`namespace/name`), port and
/// hostname. A request is matched to the most specific listener whose hostname matches
/// it (GatewaySpec.listeners: exact before wildcard, the longest wildcard first, then
/// none) among this listener's rivals ([`GwListener::rivals`]: its Gateway's listeners
/// on its port, and every other causeway Gateway's served listeners), whether or not
/// routes are attached to it, and only that listener's routes apply to it. The proxy
/// serves every route on both its own ports, so a request is matched in every port
/// group of one Gateway: its listener on another port is not a rival.
#[derive(Clone, Debug)]
struct Via {
    gateway: Arc<str>,
    port: u16,
    host: HostKey,
}

/// The hostname of listener `name` of Gateway `gateway` (`namespace/name`).
fn listener_host(gateways: &[Arc<Gateway>], gateway: &str, name: &str) -> HostKey {
    let h = gateways
        .iter()
        .find(|g| {
            gateway
                .split_once('/')
                .is_some_and(|(ns, n)| g.namespace().as_deref() == Some(ns) && g.name_any() == n)
        })
        .and_then(|g| g.spec.listeners.iter().find(|l| l.name == name))
        .and_then(|l| l.hostname.as_deref())
        .filter(|h| !h.is_empty());
    HostKey::of(h)
}

/// A listener of a causeway Gateway, as a rival in listener selection.
struct GwListener {
    /// `namespace/name` of its Gateway.
    gateway: String,
    port: u16,
    host: HostKey,
    /// causeway-proxy serves it (HTTP, no `HostnameConflict`): only such a listener of
    /// another Gateway is a rival.
    served: bool,
}

impl GwListener {
    /// Whether this listener competes with `via`'s for the requests of a hostname it
    /// matches. Every Gateway of a causeway class shares the one data plane (the
    /// proxy's own listeners, whatever port a listener names), so they count as one
    /// merged Gateway: within `via`'s Gateway, its listeners on `via`'s port (those on
    /// other ports are served on the same sockets alike: no rivals, HR-4); across
    /// Gateways, every listener served, whatever its port (a port number would
    /// otherwise let one Gateway's route past another's more specific listener).
    fn rivals(&self, via: &Via) -> bool {
        if *self.gateway == *via.gateway {
            self.port == via.port
        } else {
            self.served
        }
    }
}

/// Every listener of every Gateway of a causeway class.
fn gateway_listeners(gateways: &[Arc<Gateway>], classes: &[Arc<GatewayClass>]) -> Vec<GwListener> {
    gateways
        .iter()
        .filter(|g| attach::class_is_ours(&g.spec.gateway_class_name, classes))
        .flat_map(|g| {
            let id = format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any());
            g.spec.listeners.iter().map(move |l| {
                let h = l.hostname.as_deref().filter(|h| !h.is_empty());
                GwListener {
                    gateway: id.clone(),
                    port: u16::try_from(l.port).unwrap_or(80),
                    host: HostKey::of(h),
                    served: attach::listener_problem(l).is_none()
                        && attach::listener_conflict(g, l).is_none(),
                }
            })
        })
        .collect()
}

/// Precedence within one hostname: exact path, longest prefix, method, most headers,
/// most query parameters, oldest route (then ns/name), rule, match.
type Precedence = (
    bool,
    Reverse<usize>,
    bool,
    Reverse<usize>,
    Reverse<usize>,
    usize,
    usize,
    usize,
);

/// Adds every accepted HTTPRoute of `snap` to `table`.
pub(super) fn add(
    idx: &Index<'_>,
    snap: &Snapshot,
    opts: &BuildOptions,
    shared: &Registries,
    mci_hosts: &attach::MciHosts,
    table: &mut RouteTable,
) {
    let mut by_host: BTreeMap<HostKey, Vec<(Precedence, Arc<Rule>, Via)>> = BTreeMap::new();
    // GW-4: the rules of each mesh port (a captured ServiceImport port)
    let mut by_mesh_port: BTreeMap<u16, Vec<(Precedence, Arc<Rule>)>> = BTreeMap::new();
    let imports: BTreeMap<(String, String), Arc<ServiceImport>> = snap
        .service_imports
        .iter()
        .map(|si| {
            (
                (si.namespace().unwrap_or_default(), si.name_any()),
                si.clone(),
            )
        })
        .collect();
    let default_match = [HTTPRouteMatch::default()];
    let gw_listeners = gateway_listeners(&snap.gateways, &snap.gateway_classes);
    let mut overlaps: Vec<String> = Vec::new();
    for (order, route) in oldest_first(&snap.http_routes).into_iter().enumerate() {
        let ns = route.namespace().unwrap_or_default();
        let id = format!("{ns}/{}", route.name_any());
        if route.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let listeners: Vec<(AttachedListener, Via)> = attach::parents(
            route,
            &snap.gateways,
            &snap.gateway_classes,
            &snap.namespaces,
        )
        .into_iter()
        .filter_map(|v| Some((Arc::<str>::from(v.gateway), v.attached.ok()?)))
        .flat_map(|(gateway, ls)| {
            ls.into_iter().map(move |l| {
                let port = u16::try_from(l.port).unwrap_or(80);
                let host = listener_host(&snap.gateways, &gateway, &l.name);
                let via = Via {
                    gateway: gateway.clone(),
                    port,
                    host,
                };
                (l, via)
            })
        })
        .collect();
        // (mesh port, ServiceImport port) of each ServiceImport port it captures that
        // the controller gave a mesh port
        let mesh_ports: Vec<(u16, u16)> = mesh::mesh_parents(route, &imports)
            .into_iter()
            .filter_map(|v| v.attached.ok())
            .flatten()
            .filter_map(|(ns, name, port)| {
                let si = imports.get(&(ns, name))?;
                let m = *mesh::ports_of(si).get(&port)?;
                Some((m, u16::try_from(port).ok()?))
            })
            .collect();
        if listeners.is_empty() && mesh_ports.is_empty() {
            // Not ours, or not accepted: its status says why.
            continue;
        }
        // HR-9: where the MultiClusterIngresses take its paths or it their defaults
        let said: BTreeSet<String> = listeners
            .iter()
            .flat_map(|(l, _)| attach::mci_overlaps(route, &l.hostnames, mci_hosts))
            .collect();
        overlaps.extend(said.into_iter().map(|w| format!("HTTPRoute {id}: {w}")));
        let (tuning, warnings) = annotations::parse(&id, route.annotations(), &opts.defaults);
        table
            .warnings
            .extend(warnings.into_iter().map(|w| format!("HTTPRoute {id}: {w}")));
        let route_id: Arc<str> = id.as_str().into();
        let mut b = MciBuilder {
            idx,
            opts,
            shared,
            // (its own metric series, whatever MCI has its name)
            mci: format!("httproute:{id}").into(),
            ns: ns.clone(),
            tuning: Arc::new(tuning),
            cache: HashMap::new(),
            new_backends: Vec::new(),
            endpoints: 0,
        };
        for (ri, rule) in route.spec.rules.iter().enumerate() {
            let mut warn = |w: String| {
                table
                    .warnings
                    .push(format!("HTTPRoute {id}: rules[{ri}]: {w}"))
            };
            let action = Arc::new(action(&mut b, rule, &snap.reference_grants, &mut warn));
            let matches = rule
                .matches
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or(&default_match);
            for (mi, m) in matches.iter().enumerate() {
                for (l, via) in &listeners {
                    let port = u16::try_from(l.port).unwrap_or(80);
                    let (prec, rule) = rule_of(&route_id, m, port, action.clone(), &mut warn);
                    let rule = Arc::new(rule);
                    let prec = (prec.0, prec.1, prec.2, prec.3, prec.4, order, ri, mi);
                    let hosts: Vec<Option<&str>> = if l.hostnames.is_empty() {
                        vec![None]
                    } else {
                        l.hostnames.iter().map(|h| Some(h.as_str())).collect()
                    };
                    for h in hosts {
                        // (Attached through two listeners with this hostname: kept
                        // once per request, below.)
                        by_host.entry(HostKey::of(h)).or_default().push((
                            prec,
                            rule.clone(),
                            via.clone(),
                        ));
                    }
                }
                // a mesh parent: hostnames do not apply (the parent is the destination)
                for &(mesh_port, port) in &mesh_ports {
                    let (prec, rule) = rule_of(&route_id, m, port, action.clone(), &mut warn);
                    let prec = (prec.0, prec.1, prec.2, prec.3, prec.4, order, ri, mi);
                    let rules = by_mesh_port.entry(mesh_port).or_default();
                    if !rules.iter().any(|(p, _)| *p == prec) {
                        rules.push((prec, Arc::new(rule)));
                    }
                }
            }
        }
        table.endpoints += b.endpoints;
        table.backends.append(&mut b.new_backends);
        table.http_routes.push(id);
    }
    for (mesh_port, mut rules) in by_mesh_port {
        rules.sort_by_key(|(p, _)| *p);
        let rules = HostRules {
            rules: rules.into_iter().map(|(_, r)| r).collect(),
            fallback: None,
        };
        table.mesh.insert(
            mesh_port,
            Arc::new(Route {
                mci: "Gateway API mesh".into(),
                target: Target::Gateway(Arc::new(rules)),
                ssl_redirect: false,
            }),
        );
    }
    pass_through(idx, snap, opts, shared, table);
    // The hostnames to route: those of the routes, those of the listeners of the
    // Gateways they attached to (a listener without routes still takes its hostname's
    // requests from its Gateway's less specific listeners on that port), and those of
    // every other Gateway's served listeners (which take them from every Gateway's less
    // specific listeners: [`GwListener::rivals`]); HR-9: and the MultiClusterIngress
    // rule hosts, exact and Ingress wildcards, where the routes covering them serve what
    // the MCI paths there do not.
    let mut keys: BTreeMap<HostKey, Origin> = BTreeMap::new();
    let route_key = Origin {
        route: true,
        ingress_wildcard: false,
    };
    for k in by_host.keys() {
        keys.insert(k.clone(), route_key);
    }
    let used: BTreeSet<&str> = by_host
        .values()
        .flatten()
        .map(|(_, _, v)| &*v.gateway)
        .collect();
    for l in gw_listeners
        .iter()
        .filter(|l| l.served || used.contains(l.gateway.as_str()))
    {
        keys.insert(l.host.clone(), route_key);
    }
    for h in table.router.exact_hosts() {
        keys.entry(HostKey::Exact(h.to_string())).or_default();
    }
    for s in table.router.wildcard_suffixes() {
        keys.entry(HostKey::Wildcard(s.to_string()))
            .or_default()
            .ingress_wildcard = true;
    }
    for (key, origin) in &keys {
        // The rules of this hostname and of the wildcards and any host covering it.
        let mut all: Vec<(HostRank, Precedence, &Arc<Rule>, &Via)> = by_host
            .iter()
            .filter(|(other, _)| *other == key || other.covers(key))
            .flat_map(|(other, rules)| rules.iter().map(|(p, r, v)| (other.rank(), *p, r, v)))
            .collect();
        if all.is_empty() {
            continue;
        }
        // Only those of the most specific listener whose hostname matches, among the
        // listeners of every causeway Gateway that rival the one a rule came through
        // (`Via`, [`GwListener::rivals`]).
        let mut best: HashMap<(&str, u16), Option<HostRank>> = HashMap::new();
        for (_, _, _, via) in &all {
            best.entry((&via.gateway, via.port)).or_insert_with(|| {
                gw_listeners
                    .iter()
                    .filter(|l| l.rivals(via) && (l.host == *key || l.host.covers(key)))
                    .map(|l| l.host.rank())
                    .min()
            });
        }
        all.retain(|(_, _, _, via)| {
            best.get(&(&*via.gateway, via.port)) == Some(&Some(via.host.rank()))
        });
        // Hostname first, then the rule's precedence; a rule attached through two
        // listeners once.
        all.sort_by_key(|(h, p, _, _)| (*h, *p));
        all.dedup_by_key(|(h, p, _, _)| (*h, *p));
        if all.is_empty() && !origin.route {
            // an MCI host no route serves: the MCI's alone
            continue;
        }
        let rules: Vec<Arc<Rule>> = all.into_iter().map(|(_, _, r, _)| r.clone()).collect();
        match key {
            // (an exact host no MCI names gets the Ingress wildcard's rules serving it)
            HostKey::Exact(h) => {
                let paths = table.router.exact_inheriting_mut(h);
                let fallback = paths.default_value().cloned();
                insert_rules(paths, &rules, fallback);
            }
            HostKey::Wildcard(s) => {
                if origin.route {
                    insert_rules(table.router.deep_wildcard_mut(s), &rules, None);
                }
                if origin.ingress_wildcard {
                    let paths = table.router.host_mut(Some(&format!("*.{s}")));
                    let fallback = paths.default_value().cloned();
                    insert_rules(paths, &rules, fallback);
                }
            }
            // the rules of routes without hostname: the catch-all default behind them
            HostKey::Any => {
                let catch_all = table.router.default_value().cloned();
                insert_rules(table.router.host_mut(None), &rules, catch_all);
            }
        }
    }
    // HR-9: what the MultiClusterIngresses leave the routes, said (the status
    // controller says the same on the routes: one function)
    table.warnings.extend(overlaps);
}

/// Where a hostname to route comes from.
#[derive(Clone, Copy, Debug, Default)]
struct Origin {
    /// A route's or a listener's hostname.
    route: bool,
    /// An MCI Ingress wildcard (`*.<suffix>`, one label): the routes' rules go into its
    /// table too.
    ingress_wildcard: bool,
}

/// Inserts `rules` (those of one hostname) at `/` in `paths`, behind the MCI paths
/// there (HR-9: their longer paths, and an MCI `/`, come first), before its default
/// backend (`fallback`: what none of them match). A hostname left without rules answers
/// 404 rather than fall through to a wildcard's, unless an MCI serves it (its rules and
/// default stay as they are).
fn insert_rules(
    paths: &mut crate::matching::Paths<Arc<Route>>,
    rules: &[Arc<Rule>],
    fallback: Option<Arc<Route>>,
) {
    if rules.is_empty() && (!paths.is_empty() || paths.default_value().is_some()) {
        return;
    }
    let route = Arc::new(Route {
        mci: "Gateway API".into(),
        target: Target::Gateway(Arc::new(HostRules {
            rules: rules.to_vec(),
            fallback: fallback.map(Fallback::new),
        })),
        ssl_redirect: false,
    });
    // (false: an MCI rule for / takes the host; said by the overlap warnings)
    paths.insert(PathKind::Prefix, "/", route);
}

/// GW-4: every mesh port a ServiceImport still names ([`mesh::MESH_PORTS`]) that no
/// accepted mesh route captures forwards to that ServiceImport port's own endpoints, as
/// if nothing captured it. Members keep sending the clusterset IP's traffic to the mesh
/// port until the controller drops the annotation and their importers and kube-proxy
/// follow (seconds); a route deleted, no longer accepted, or moved to another mesh port
/// must not turn that window into 404s (or a closed listener).
fn pass_through(
    idx: &Index<'_>,
    snap: &Snapshot,
    opts: &BuildOptions,
    shared: &Registries,
    table: &mut RouteTable,
) {
    let no_annotations = BTreeMap::new();
    for si in oldest_first(&snap.service_imports) {
        let ports = mesh::ports_of(si);
        if ports.is_empty() || si.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = si.namespace().unwrap_or_default();
        let name = si.name_any();
        let id = format!("serviceimport:{ns}/{name}");
        let (tuning, _) = annotations::parse(&id, &no_annotations, &opts.defaults);
        let mut b = MciBuilder {
            idx,
            opts,
            shared,
            mci: id.as_str().into(),
            ns: ns.clone(),
            tuning: Arc::new(tuning),
            cache: HashMap::new(),
            new_backends: Vec::new(),
            endpoints: 0,
        };
        for (port, mesh_port) in ports {
            // (a port two ServiceImports name: the oldest's)
            if table.mesh.contains_key(&mesh_port) {
                continue;
            }
            let svc = IngressServiceBackend {
                name: name.clone(),
                port: Some(ServiceBackendPort {
                    number: Some(port),
                    name: None,
                }),
            };
            let target = b.service_target(&ns, &svc);
            table.mesh.insert(
                mesh_port,
                Arc::new(Route {
                    mci: format!(
                        "ServiceImport {ns}/{name} port {port} (no mesh route captures it: passed through)"
                    )
                    .into(),
                    target,
                    ssl_redirect: false,
                }),
            );
        }
        table.endpoints += b.endpoints;
        table.backends.append(&mut b.new_backends);
    }
}

type Partial = (bool, Reverse<usize>, bool, Reverse<usize>, Reverse<usize>);

fn rule_of(
    route: &Arc<str>,
    m: &HTTPRouteMatch,
    listener_port: u16,
    action: Arc<Action>,
    warn: &mut impl FnMut(String),
) -> (Partial, Rule) {
    let path_kind = match m.path.as_ref().and_then(|p| p.type_.as_deref()) {
        Some("Exact") => PathKind::Exact,
        _ => PathKind::Prefix,
    };
    let value = m
        .path
        .as_ref()
        .and_then(|p| p.value.as_deref())
        .unwrap_or("/");
    let path = crate::matching::rule_path(path_kind, value);
    let method = m
        .method
        .as_deref()
        .and_then(|s| match Method::from_bytes(s.as_bytes()) {
            Ok(m) => Some(m),
            Err(_) => {
                warn(format!("method {s:?} is not a method; matching any"));
                None
            }
        });
    let mut headers: Vec<(HeaderName, Box<str>)> = Vec::new();
    for h in &m.headers {
        match HeaderName::from_bytes(h.name.as_bytes()) {
            // Only the first of equivalent names counts (the spec).
            Ok(n) if headers.iter().any(|(x, _)| *x == n) => {}
            Ok(n) => headers.push((n, h.value.as_str().into())),
            Err(_) => warn(format!(
                "header name {:?} is invalid; match ignored",
                h.name
            )),
        }
    }
    let mut query: Vec<(Box<str>, Box<str>)> = Vec::new();
    for q in &m.query_params {
        if !query.iter().any(|(n, _)| **n == *q.name) {
            query.push((q.name.as_str().into(), q.value.as_str().into()));
        }
    }
    let prec = (
        path_kind != PathKind::Exact,
        Reverse(path.len()),
        method.is_none(),
        Reverse(headers.len()),
        Reverse(query.len()),
    );
    let rule = Rule {
        route: route.clone(),
        path_kind,
        path,
        method,
        headers,
        query,
        listener_port,
        action,
    };
    (prec, rule)
}

fn header_edit(f: &HTTPHeaderFilter, warn: &mut impl FnMut(String)) -> HeaderEdit {
    let mut pairs = |v: &[causeway_crds::gateway::http_route::HTTPHeader]| {
        v.iter()
            .filter_map(|h| {
                match (
                    HeaderName::from_bytes(h.name.as_bytes()),
                    // RFC 9110 field values, obs-text included (`attach::is_header_value`
                    // refuses a route with any other)
                    HeaderValue::from_bytes(h.value.as_bytes()),
                ) {
                    (Ok(n), Ok(v)) => Some((n, v)),
                    _ => {
                        warn(format!(
                            "header {:?}: {:?} is invalid; ignored",
                            h.name, h.value
                        ));
                        None
                    }
                }
            })
            .collect::<Vec<_>>()
    };
    HeaderEdit {
        set: pairs(&f.set),
        add: pairs(&f.add),
        remove: f
            .remove
            .iter()
            .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
            .collect(),
    }
}

fn path_modifier(p: &HTTPPathModifier) -> Option<PathModifier> {
    match p.type_.as_str() {
        "ReplaceFullPath" => Some(PathModifier::Full(p.replace_full_path.clone()?)),
        "ReplacePrefixMatch" => Some(PathModifier::Prefix(p.replace_prefix_match.clone()?)),
        _ => None,
    }
}

fn action(
    b: &mut MciBuilder<'_>,
    rule: &HTTPRouteRule,
    grants: &[Arc<ReferenceGrant>],
    warn: &mut impl FnMut(String),
) -> Action {
    let mut a = Action::default();
    for f in &rule.filters {
        match f.type_.as_str() {
            "RequestHeaderModifier" => {
                a.request_headers = f
                    .request_header_modifier
                    .as_ref()
                    .map(|h| header_edit(h, warn));
            }
            "ResponseHeaderModifier" => {
                a.response_headers = f
                    .response_header_modifier
                    .as_ref()
                    .map(|h| header_edit(h, warn));
            }
            "RequestRedirect" => {
                a.redirect = f.request_redirect.as_ref().map(|r| Redirect {
                    scheme: r.scheme.clone(),
                    hostname: r.hostname.clone(),
                    path: r.path.as_ref().and_then(path_modifier),
                    port: r.port.and_then(|p| u16::try_from(p).ok()),
                    status: match r.status_code {
                        Some(301) => StatusCode::MOVED_PERMANENTLY,
                        _ => StatusCode::FOUND,
                    },
                });
            }
            "URLRewrite" => {
                a.rewrite = f.url_rewrite.as_ref().map(|r| Rewrite {
                    hostname: r
                        .hostname
                        .as_deref()
                        .and_then(|h| HeaderValue::from_str(h).ok()),
                    path: r.path.as_ref().and_then(path_modifier),
                });
            }
            // Other filters make the route not Accepted (attach::unsupported).
            _ => {}
        }
    }
    let ns = b.ns.clone();
    let mut total = 0u64;
    for r in &rule.backend_refs {
        let weight = u64::try_from(r.weight.unwrap_or(1)).unwrap_or(0);
        if weight == 0 {
            continue;
        }
        let target = match attach::backend(&ns, r, grants) {
            Err(e) => Target::Unavailable(e.message.into()),
            Ok((_, backend_ns)) => {
                let svc = IngressServiceBackend {
                    name: r.name.clone(),
                    port: r.port.map(|p| ServiceBackendPort {
                        number: Some(p),
                        name: None,
                    }),
                };
                b.service_target(&backend_ns, &svc)
            }
        };
        total += weight;
        a.backends.push((total, target));
    }
    a
}

#[cfg(test)]
#[path = "../gateway_table_tests.rs"]
mod tests;
