//! Gateway API status controller (hub): the status of the GatewayClasses, Gateways and
//! HTTPRoutes causeway-proxy serves (class `controllerName: causeway.io/gateway-controller`).
//!
//! - GatewayClass: `Accepted`.
//! - Gateway: `Accepted` and `Programmed` (a causeway-proxy holds a live Lease; its
//!   addresses are the Gateway's `status.addresses`), and per listener `Accepted`,
//!   `Programmed`, `ResolvedRefs` (HTTP listeners only: `UnsupportedProtocol` else),
//!   `Conflicted` (`HostnameConflict`: another HTTP listener on its port with the same
//!   hostname; neither is served), `supportedKinds` and `attachedRoutes`.
//! - HTTPRoute: per parentRef naming a causeway Gateway, `Accepted` (Accepted,
//!   NotAllowedByListeners, NoMatchingListenerHostname, NoMatchingParent,
//!   UnsupportedValue) and `ResolvedRefs` (ResolvedRefs, RefNotPermitted, InvalidKind,
//!   BackendNotFound), with `controllerName` and `observedGeneration`; an Accepted
//!   message also says where the route and a MultiClusterIngress claim the same
//!   requests (HR-9, `attach::mci_overlaps`, what causeway-proxy warns of).
//!
//! - Mesh routes (GW-4, a ServiceImport parentRef): `Accepted` (or `Pending` while no
//!   causeway-proxy serves mesh traffic) and `ResolvedRefs`; each captured ServiceImport
//!   port gets a mesh port of the proxies' `--listen-mesh` range, written with the
//!   proxies' addresses on the hub ServiceImport ([`mesh`]).
//!
//! Attachment and backendRef rules are `causeway_crds::gateway::attach`'s (and
//! `…::mesh`'s), the same the proxy's table follows. The pure part ([`desired`]) maps the hub caches to every
//! status; [`run`] writes them with the shared applier.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_crds::gateway::attach::{self, ParentVerdict, reasons};
use causeway_crds::gateway::http_route::{HTTPRouteStatus, ParentReference, RouteParentStatus};
use causeway_crds::gateway::{
    CONTROLLER_NAME, GROUP, Gateway, GatewayAddress, GatewayClass, GatewayClassStatus,
    GatewayStatus, HTTPRoute, ListenerStatus, ReferenceGrant, RouteGroupKind,
};
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_runtime::apply::StatusMemo;
use causeway_runtime::reflect::{Dirty, Wake, cache};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

mod mesh;

/// What the hub holds that Gateway API statuses depend on.
pub struct World<'a> {
    /// GatewayClasses.
    pub classes: &'a [Arc<GatewayClass>],
    /// Gateways.
    pub gateways: &'a [Arc<Gateway>],
    /// HTTPRoutes.
    pub routes: &'a [Arc<HTTPRoute>],
    /// ReferenceGrants.
    pub grants: &'a [Arc<ReferenceGrant>],
    /// Hub ServiceImports by (namespace, name): what backendRefs resolve through.
    pub imports: &'a BTreeMap<(String, String), Arc<ServiceImport>>,
    /// Namespace labels (listeners selecting route namespaces).
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// MultiClusterIngresses (HR-9: where they and a route claim the same requests).
    pub mcis: &'a [Arc<MultiClusterIngress>],
    /// IngressClasses (which MCIs causeway-proxy serves).
    pub ingress_classes: &'a [IngressClass],
    /// causeway-proxy Leases.
    pub proxies: &'a [crate::mci::ProxyLease],
    /// The mesh ports this controller gave last (they win over what the ServiceImports'
    /// annotations say, which may lag behind its own writes).
    pub mesh_previous: &'a BTreeMap<causeway_crds::gateway::mesh::MeshParent, u16>,
    /// Mesh ports released a moment ago, not to be given to another ServiceImport yet.
    pub mesh_reserved: &'a std::collections::BTreeSet<u16>,
    /// The Gateways whose status holds fields Causeway's status applies set (their
    /// `managedFields`, read by [`run`]): one no longer of a causeway class gets them
    /// withdrawn.
    pub status_ours: &'a BTreeSet<(String, String)>,
    /// Now.
    pub now: jiff::Timestamp,
}

/// Every status the controller wants, by (namespace, name); objects not served by
/// causeway are left out.
#[derive(Debug, Default, PartialEq)]
pub struct Desired {
    /// GatewayClass statuses (namespace "").
    pub classes: BTreeMap<(String, String), GatewayClassStatus>,
    /// Gateway statuses (empty: a Gateway no longer of a causeway class, whose
    /// conditions and addresses Causeway withdraws).
    pub gateways: BTreeMap<(String, String), GatewayStatus>,
    /// HTTPRoute statuses.
    pub routes: BTreeMap<(String, String), HTTPRouteStatus>,
    /// The mesh annotations of the hub ServiceImports that must change (`None`:
    /// removed), by (namespace, name).
    pub mesh: BTreeMap<(String, String), BTreeMap<String, Option<String>>>,
    /// The mesh ports given this pass; `None` while no proxy serves mesh traffic (the
    /// previous ones are then kept for when one does).
    pub mesh_allocated: Option<BTreeMap<causeway_crds::gateway::mesh::MeshParent, u16>>,
}

/// Where the mesh routes stand this pass.
struct MeshState {
    waypoints: mesh::Waypoints,
    allocated: BTreeMap<causeway_crds::gateway::mesh::MeshParent, u16>,
    full: Vec<causeway_crds::gateway::mesh::MeshParent>,
}

struct Cond<'a> {
    prev: &'a [Condition],
    generation: Option<i64>,
    now: &'a Time,
}

impl Cond<'_> {
    fn make(&self, type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
        let status = if ok { "True" } else { "False" };
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into().chars().take(32 * 1024).collect(),
            observed_generation: self.generation,
            last_transition_time: crate::condition::since(self.prev, type_, status, self.now),
        }
    }
}

fn http_route_kind() -> RouteGroupKind {
    RouteGroupKind {
        group: Some(GROUP.into()),
        kind: "HTTPRoute".into(),
    }
}

/// Pure: the route kinds listener `l` supports (those of its `allowedRoutes.kinds`
/// causeway serves, HTTPRoute when it lists none) and the ones it lists that causeway
/// does not serve (`group/kind`), for its `supportedKinds` and `InvalidRouteKinds`.
fn route_kinds(l: &causeway_crds::gateway::Listener) -> (Vec<RouteGroupKind>, Vec<String>) {
    let listed = l
        .allowed_routes
        .as_ref()
        .map(|a| a.kinds.as_slice())
        .unwrap_or_default();
    if listed.is_empty() {
        return (vec![http_route_kind()], Vec::new());
    }
    let (mut supported, mut unsupported) = (Vec::new(), Vec::new());
    for k in listed {
        if causeway_crds::gateway::attach::is_http_route(k) {
            if supported.is_empty() {
                supported.push(http_route_kind());
            }
        } else {
            unsupported.push(format!(
                "{}/{}",
                k.group.as_deref().unwrap_or(GROUP),
                k.kind
            ));
        }
    }
    (supported, unsupported)
}

/// The statuses of everything in `world` that causeway serves.
pub fn desired(world: &World<'_>) -> Desired {
    let now = Time(world.now);
    let mut out = Desired::default();
    for c in world.classes {
        if c.spec.controller_name != CONTROLLER_NAME {
            continue;
        }
        let prev = c
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let cond = Cond {
            prev,
            generation: c.metadata.generation,
            now: &now,
        };
        out.classes.insert(
            crate::watch::key(c.as_ref()),
            GatewayClassStatus {
                conditions: vec![cond.make(
                    reasons::ACCEPTED,
                    true,
                    "Accepted",
                    "served by causeway-proxy",
                )],
            },
        );
    }
    // GW-4: the mesh ports of the ServiceImport ports mesh routes capture
    let waypoints = mesh::waypoints(world);
    let (allocated, full) = match &waypoints.range {
        Some(range) => {
            let mut current = mesh::current(world);
            current.extend(world.mesh_previous.iter().map(|(k, v)| (k.clone(), *v)));
            causeway_crds::gateway::mesh::allocate(
                &mesh::wanted(world),
                &current,
                range,
                world.mesh_reserved,
            )
        }
        None => Default::default(),
    };
    out.mesh = mesh::annotations(world, &allocated, &waypoints);
    out.mesh_allocated = waypoints.range.is_some().then(|| allocated.clone());
    let mesh_state = MeshState {
        waypoints,
        allocated,
        full,
    };
    // HR-9: the hosts the served MCIs claim (the proxy reads them alike)
    let mci_hosts = attach::mci_hosts(world.mcis, world.ingress_classes);
    // Routes first: listeners count the routes attached to them.
    let mut attached: BTreeMap<(String, String), i32> = BTreeMap::new();
    for r in world.routes {
        let verdicts = attach::parents(r, world.gateways, world.classes, world.namespaces);
        let mesh_verdicts = causeway_crds::gateway::mesh::mesh_parents(r, world.imports);
        if verdicts.is_empty() && mesh_verdicts.is_empty() {
            // no parent of ours takes it (any more: its parentRef changed, the Gateway
            // went, its class is another controller's): the entries we wrote go, as
            // the spec asks, and the other controllers' stay
            let ours = |p: &RouteParentStatus| p.controller_name == CONTROLLER_NAME;
            if r.status
                .as_ref()
                .is_some_and(|s| s.parents.iter().any(ours))
            {
                out.routes.insert(
                    crate::watch::key(r.as_ref()),
                    route_status(r, &[], &[], &mesh_state, &mci_hosts, world, &now),
                );
            }
            continue;
        }
        // once per listener, however many of the route's parentRefs reach it
        let counted: BTreeSet<(&str, &str)> = verdicts
            .iter()
            .flat_map(|v| v.counted.iter().map(|l| (v.gateway.as_str(), l.as_str())))
            .collect();
        for (gateway, listener) in counted {
            *attached
                .entry((gateway.to_string(), listener.to_string()))
                .or_default() += 1;
        }
        out.routes.insert(
            crate::watch::key(r.as_ref()),
            route_status(
                r,
                &verdicts,
                &mesh_verdicts,
                &mesh_state,
                &mci_hosts,
                world,
                &now,
            ),
        );
    }
    let addresses = addresses(world);
    for g in world.gateways {
        if !attach::class_is_ours(&g.spec.gateway_class_name, world.classes) {
            // its class went, or is another controller's: what Causeway wrote goes (an
            // empty status applied as its manager), what others wrote stays
            let key = crate::watch::key(g.as_ref());
            if world.status_ours.contains(&key) {
                out.gateways.insert(key, GatewayStatus::default());
            }
            continue;
        }
        let (ns, name) = crate::watch::key(g.as_ref());
        let id = format!("{ns}/{name}");
        let prev_status = g.status.clone().unwrap_or_default();
        let cond = |prev| Cond {
            prev,
            generation: g.metadata.generation,
            now: &now,
        };
        let listeners = g
            .spec
            .listeners
            .iter()
            .map(|l| {
                let prev = prev_status
                    .listeners
                    .iter()
                    .find(|p| p.name == l.name)
                    .map(|p| p.conditions.as_slice())
                    .unwrap_or_default();
                let c = cond(prev);
                let problem = attach::listener_problem(l);
                let conflict = attach::listener_conflict(g, l);
                let (ok, reason, msg) = match &problem {
                    None => (true, "Accepted", "served by causeway-proxy".to_string()),
                    Some(p) => (false, p.reason, p.message.clone()),
                };
                let programmed = match (&problem, &conflict) {
                    (None, None) => c.make(reasons::PROGRAMMED, true, "Programmed", msg.clone()),
                    (Some(_), _) => c.make(reasons::PROGRAMMED, false, "Invalid", msg.clone()),
                    (None, Some(x)) => {
                        c.make(reasons::PROGRAMMED, false, "Invalid", x.message.clone())
                    }
                };
                let conflicted = match &conflict {
                    None => c.make(
                        reasons::CONFLICTED,
                        false,
                        reasons::NO_CONFLICTS,
                        "no other listener causeway-proxy serves on its port has the same hostname",
                    ),
                    Some(x) => c.make(reasons::CONFLICTED, true, x.reason, x.message.clone()),
                };
                let (supported, unsupported) = route_kinds(l);
                let resolved = if unsupported.is_empty() {
                    c.make(
                        reasons::RESOLVED_REFS,
                        true,
                        "ResolvedRefs",
                        "no references to resolve",
                    )
                } else {
                    c.make(
                        reasons::RESOLVED_REFS,
                        false,
                        "InvalidRouteKinds",
                        format!(
                            "causeway-proxy serves HTTPRoute only, not {}",
                            unsupported.join(", ")
                        ),
                    )
                };
                ListenerStatus {
                    name: l.name.clone(),
                    supported_kinds: if ok { supported } else { Vec::new() },
                    attached_routes: attached
                        .get(&(id.clone(), l.name.clone()))
                        .copied()
                        .unwrap_or(0),
                    conditions: vec![
                        c.make(reasons::ACCEPTED, ok, reason, msg),
                        programmed,
                        resolved,
                        conflicted,
                    ],
                }
            })
            .collect();
        let c = cond(&prev_status.conditions);
        let (unsupported, unassigned) = requested_addresses(&g.spec.addresses, &addresses);
        let accepted = if unsupported.is_empty() {
            c.make(
                reasons::ACCEPTED,
                true,
                "Accepted",
                "served by causeway-proxy",
            )
        } else {
            c.make(
                reasons::ACCEPTED,
                false,
                "UnsupportedAddress",
                format!(
                    "spec.addresses asks for {}: causeway-proxy takes addresses of type IPAddress or Hostname only",
                    unsupported.join(", ")
                ),
            )
        };
        let programmed = if !unsupported.is_empty() {
            c.make(
                reasons::PROGRAMMED,
                false,
                "Invalid",
                "the Gateway is not accepted (see Accepted)",
            )
        } else if addresses.is_empty() {
            c.make(
                reasons::PROGRAMMED,
                false,
                "Pending",
                "no causeway-proxy holds a live Lease yet",
            )
        } else if !unassigned.is_empty() {
            c.make(
                reasons::PROGRAMMED,
                false,
                "AddressNotAssigned",
                format!(
                    "spec.addresses asks for {}, which no causeway-proxy serves at (they serve at {}): name addresses of the proxies, or leave spec.addresses empty",
                    unassigned.join(", "),
                    addresses
                        .iter()
                        .map(|a| a.value.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        } else {
            c.make(
                reasons::PROGRAMMED,
                true,
                "Programmed",
                "causeway-proxy serves its listeners",
            )
        };
        out.gateways.insert(
            (ns, name),
            GatewayStatus {
                addresses: addresses.clone(),
                conditions: vec![accepted, programmed],
                listeners,
            },
        );
    }
    out
}

/// The Gateway's addresses: those the live causeway-proxies publish.
/// Whether two address values are the same: IPs compared as IPs (`2001:db8:0::1` is
/// `2001:db8::1`), hostnames as written, ignoring case.
fn same_address(a: &str, b: &str) -> bool {
    match (a.parse::<std::net::IpAddr>(), b.parse::<std::net::IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// Pure: of a Gateway's `spec.addresses`, those of a type causeway-proxy does not take
/// (only IPAddress, the default, and Hostname), and those of a supported type that no
/// proxy serves at (`have`), each as `type value`.
fn requested_addresses(
    wanted: &[GatewayAddress],
    have: &[GatewayAddress],
) -> (Vec<String>, Vec<String>) {
    let (mut unsupported, mut unassigned) = (Vec::new(), Vec::new());
    for a in wanted {
        let t = a.type_.as_deref().unwrap_or("IPAddress");
        let said = format!("{t} {}", a.value);
        if !matches!(t, "IPAddress" | "Hostname") {
            unsupported.push(said);
        } else if !have.iter().any(|h| {
            h.type_.as_deref().unwrap_or("IPAddress") == t && same_address(&h.value, &a.value)
        }) {
            unassigned.push(said);
        }
    }
    (unsupported, unassigned)
}

fn addresses(world: &World<'_>) -> Vec<GatewayAddress> {
    crate::mci::load_balancer(world.proxies, world.now, &Default::default())
        .ingress
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| match (i.ip, i.hostname) {
            (Some(ip), _) => Some(GatewayAddress {
                type_: Some("IPAddress".into()),
                value: ip,
            }),
            (None, Some(h)) => Some(GatewayAddress {
                type_: Some("Hostname".into()),
                value: h,
            }),
            _ => None,
        })
        .collect()
}

/// `ResolvedRefs` of a route: the first backendRef that may not be used, does not
/// exist, or names no port of its ServiceImport (the port lookup causeway-proxy serves
/// with, `causeway_crds::mci::backend::service_port`).
fn resolved_refs(r: &HTTPRoute, world: &World<'_>) -> Result<(), attach::Refused> {
    let ns = r.namespace().unwrap_or_default();
    for b in r
        .spec
        .rules
        .iter()
        .flat_map(|rule| rule.backend_refs.iter())
    {
        let (_, backend_ns) = attach::backend(&ns, b, world.grants)?;
        let Some(si) = world.imports.get(&(backend_ns.clone(), b.name.clone())) else {
            return Err(attach::Refused {
                reason: reasons::BACKEND_NOT_FOUND,
                message: format!(
                    "backendRef {backend_ns}/{}: no ServiceImport of that name on the hub (export the Service from a member cluster)",
                    b.name
                ),
            });
        };
        backend_port(&backend_ns, b, si)?;
    }
    Ok(())
}

/// Whether backendRef `b` (in `ns`) names a port of its ServiceImport `si` (a Service
/// backendRef without one is refused by [`attach::backend`]: "Port is required when
/// the referent is a Kubernetes Service", `UnsupportedValue`): a ServiceImport's may
/// leave it out when the ServiceImport has one TCP port; one it does not have is
/// `BackendNotFound`.
fn backend_port(
    ns: &str,
    b: &causeway_crds::gateway::http_route::HTTPBackendRef,
    si: &ServiceImport,
) -> Result<(), attach::Refused> {
    use causeway_crds::mci::backend::{PortError, service_port};
    let want = b.port.map(
        |number| k8s_openapi::api::networking::v1::ServiceBackendPort {
            name: None,
            number: Some(number),
        },
    );
    match service_port(si, want.as_ref()) {
        Ok(_) => Ok(()),
        Err(e) => Err(attach::Refused {
            reason: match e {
                PortError::Unspecified { tcp_ports } if tcp_ports > 0 => reasons::UNSUPPORTED_VALUE,
                _ => reasons::BACKEND_NOT_FOUND,
            },
            message: format!("backendRef {ns}/{}: {}", b.name, e.message(ns, &b.name)),
        }),
    }
}

fn route_status(
    r: &HTTPRoute,
    verdicts: &[ParentVerdict],
    mesh_verdicts: &[causeway_crds::gateway::mesh::MeshVerdict],
    mesh_state: &MeshState,
    mci_hosts: &attach::MciHosts,
    world: &World<'_>,
    now: &Time,
) -> HTTPRouteStatus {
    let refs = resolved_refs(r, world);
    // the causeway.io tuning annotations causeway-proxy reads on routes too (the MCI
    // parse): a value that does not parse is served with its default, and said here
    let tuning = causeway_crds::mci::tuning::parse(r.annotations()).1;
    let tuning_note = (!tuning.is_empty()).then(|| {
        format!(
            "served with defaults for: {}",
            tuning
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    });
    let prev_parents = r
        .status
        .as_ref()
        .map(|s| s.parents.as_slice())
        .unwrap_or_default();
    // one parent's status: its Accepted condition (decided by `accepted`, from its
    // previous conditions) and the route's ResolvedRefs
    let parent = |parent_ref: &ParentReference, accepted: &dyn Fn(&Cond<'_>) -> Condition| {
        let prev = prev_parents
            .iter()
            .find(|p| p.parent_ref == *parent_ref && p.controller_name == CONTROLLER_NAME)
            .map(|p| p.conditions.as_slice())
            .unwrap_or_default();
        let c = Cond {
            prev,
            generation: r.metadata.generation,
            now,
        };
        let resolved = match &refs {
            Ok(()) => c.make(
                reasons::RESOLVED_REFS,
                true,
                "ResolvedRefs",
                "every backendRef resolved",
            ),
            Err(e) => c.make(reasons::RESOLVED_REFS, false, e.reason, e.message.clone()),
        };
        let mut accepted = accepted(&c);
        if let Some(note) = tuning_note.as_deref().filter(|_| accepted.status == "True") {
            accepted.message = format!("{}; {note}", accepted.message)
                .chars()
                .take(32 * 1024)
                .collect();
        }
        RouteParentStatus {
            parent_ref: parent_ref.clone(),
            controller_name: CONTROLLER_NAME.into(),
            conditions: vec![accepted, resolved],
        }
    };
    let mut parents: Vec<RouteParentStatus> = verdicts
        .iter()
        .map(|v| {
            parent(&v.parent_ref, &|c| match &v.attached {
                Ok(ls) => {
                    // HR-9: what the MultiClusterIngresses serve first on its hostnames
                    // there, or it takes from their defaultBackends (served: Accepted)
                    let overlaps: BTreeSet<String> = ls
                        .iter()
                        .flat_map(|l| attach::mci_overlaps(r, &l.hostnames, mci_hosts))
                        .collect();
                    let mut message = format!(
                        "attached to listener{} {} of Gateway {}",
                        if ls.len() == 1 { "" } else { "s" },
                        ls.iter()
                            .map(|l| l.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        v.gateway
                    );
                    if !overlaps.is_empty() {
                        message = format!(
                            "{message}; overlaps MultiClusterIngresses: {}",
                            overlaps.into_iter().collect::<Vec<_>>().join("; ")
                        );
                    }
                    c.make(reasons::ACCEPTED, true, "Accepted", message)
                }
                Err(e) => c.make(reasons::ACCEPTED, false, e.reason, e.message.clone()),
            })
        })
        .collect();
    parents.extend(
        mesh_verdicts
            .iter()
            .map(|v| parent(&v.parent_ref, &|c| mesh_accepted(c, v, mesh_state))),
    );
    // the entries other controllers wrote for their parents stay as they are (the
    // list is written whole)
    parents.extend(
        prev_parents
            .iter()
            .filter(|p| p.controller_name != CONTROLLER_NAME)
            .cloned(),
    );
    HTTPRouteStatus { parents }
}

/// The Accepted condition of a ServiceImport parent (GW-4).
fn mesh_accepted(
    c: &Cond<'_>,
    v: &causeway_crds::gateway::mesh::MeshVerdict,
    mesh_state: &MeshState,
) -> Condition {
    match (&v.attached, &mesh_state.waypoints.problem) {
        (Err(e), _) => c.make(reasons::ACCEPTED, false, e.reason, e.message.clone()),
        (Ok(_), Some(problem)) => c.make(reasons::ACCEPTED, false, "Pending", problem.clone()),
        (Ok(ports), None) => {
            let waiting: Vec<String> = ports
                .iter()
                .filter(|p| mesh_state.full.contains(p))
                .map(|p| p.2.to_string())
                .collect();
            let served: Vec<String> = ports
                .iter()
                .filter_map(|p| {
                    Some(format!(
                        "{} (mesh port {})",
                        p.2,
                        mesh_state.allocated.get(p)?
                    ))
                })
                .collect();
            let (ns, name) = ports
                .first()
                .map(|p| (p.0.as_str(), p.1.as_str()))
                .unwrap_or_default();
            let wait = format!(
                "no mesh port left for port {} in the causeway-proxies' --listen-mesh range: widen it",
                waiting.join(", ")
            );
            if served.is_empty() {
                return c.make(reasons::ACCEPTED, false, "Pending", wait);
            }
            let mut message = format!(
                "captures the traffic to ServiceImport {ns}/{name} port {} through causeway-proxy at {}",
                served.join(", "),
                causeway_crds::gateway::mesh::format_addresses(&mesh_state.waypoints.addresses)
                    .replace(',', ", ")
            );
            if !waiting.is_empty() {
                message = format!("{message}; {wait}");
            }
            c.make(reasons::ACCEPTED, true, "Accepted", message)
        }
    }
}

/// Runs the Gateway API status controller until `stop`.
pub async fn run(
    hub: kube::Client,
    caches: Arc<crate::mcs::HubCaches>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let all = watcher::Config::default;
    let classes = cache(
        Api::<GatewayClass>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub gatewayclasses",
        None,
    );
    let gateways = cache(
        Api::<Gateway>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub gateways",
        None,
    );
    let routes = cache(
        Api::<HTTPRoute>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub httproutes",
        None,
    );
    let grants = cache(
        Api::<ReferenceGrant>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub referencegrants",
        None,
    );
    let namespaces = cache(
        Api::<Namespace>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub namespaces",
        None,
    );
    let mcis = cache(
        Api::<MultiClusterIngress>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub multiclusteringresses (gateway)",
        None,
    );
    let ingress_classes = cache(
        Api::<IngressClass>::all(hub.clone()),
        all(),
        wake.clone(),
        stop.clone(),
        "hub ingressclasses (gateway)",
        None,
    );
    let proxies =
        crate::mci::proxy_leases(&hub, &wake, &stop, "hub causeway-proxy leases (gateway)");
    let imports = caches.imports.subscribe(wake.clone());
    if classes.wait_until_ready().await.is_err()
        || gateways.wait_until_ready().await.is_err()
        || routes.wait_until_ready().await.is_err()
        || grants.wait_until_ready().await.is_err()
        || namespaces.wait_until_ready().await.is_err()
        || mcis.wait_until_ready().await.is_err()
        || ingress_classes.wait_until_ready().await.is_err()
        || proxies.wait_until_ready().await.is_err()
        || imports.wait_until_ready().await.is_err()
    {
        return;
    }
    tracing::info!("gateway api status controller running");
    let mut memo = StatusMemo::default();
    // GW-4: the mesh ports given last, and those released (not given to another
    // ServiceImport for RESERVE: members may still send its traffic there)
    let mut mesh_previous = BTreeMap::new();
    let mut released: BTreeMap<u16, jiff::Timestamp> = BTreeMap::new();
    let mut status_managers = StatusManagers::default();
    loop {
        let started = Instant::now();
        let (c, g, r) = (classes.state(), gateways.state(), routes.state());
        let status_ours = status_managers.read(&hub, &g, &c).await;
        let import_map = imports
            .state()
            .into_iter()
            .map(|i| (crate::watch::key(i.as_ref()), i))
            .collect();
        let ns_labels = namespaces
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        let (grant_list, lease_list) = (
            grants.state(),
            crate::mci::ProxyLease::read_all(&proxies.state()),
        );
        let mci_list = mcis.state();
        let ingress_class_list: Vec<IngressClass> = ingress_classes
            .state()
            .iter()
            .map(|c| c.as_ref().clone())
            .collect();
        let world = World {
            classes: &c,
            gateways: &g,
            routes: &r,
            grants: &grant_list,
            imports: &import_map,
            namespaces: &ns_labels,
            mcis: &mci_list,
            ingress_classes: &ingress_class_list,
            proxies: &lease_list,
            mesh_previous: &mesh_previous,
            mesh_reserved: &released.keys().copied().collect(),
            status_ours: &status_ours,
            now: jiff::Timestamp::now(),
        };
        let want = desired(&world);
        if let Some(allocated) = &want.mesh_allocated {
            released = mesh::release(&mesh_previous, allocated, released, world.now);
            mesh_previous = allocated.clone();
        }
        let mut failed = std::collections::HashSet::new();
        let all = |_: &str| Api::all(hub.clone());
        write_all(all, &mut memo, &want.classes, &c, &mut failed).await;
        let ns = |ns: &str| Api::namespaced(hub.clone(), ns);
        write_all(ns, &mut memo, &want.gateways, &g, &mut failed).await;
        let ns = |ns: &str| Api::namespaced(hub.clone(), ns);
        write_all(ns, &mut memo, &want.routes, &r, &mut failed).await;
        for ((ns, name), ann) in &want.mesh {
            let Some(si) = import_map.get(&(ns.clone(), name.clone())) else {
                continue;
            };
            let api: Api<ServiceImport> = Api::namespaced(hub.clone(), ns);
            let r = causeway_runtime::apply::set_annotations(
                &api,
                si.as_ref(),
                causeway_crds::well_known::MESH_FIELD_MANAGER,
                ann,
            );
            if let Err(e) = r.await {
                tracing::warn!(namespace = %ns, name = %name, error = %e, "writing a ServiceImport's mesh ports failed; retrying with backoff");
                failed.insert((ns.clone(), name.clone()));
            }
        }
        metrics.observe_reconcile("gateway", "hub", started.elapsed(), failed.len());
        wake.record_failures(&Dirty::full(), &failed);
        // Proxy Leases expire without an event: look again within a renew interval.
        if wake
            .next_round(&stop, Duration::from_secs(5), Duration::from_millis(5))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// Which Gateways not of a causeway class hold status fields Causeway's applies set: the
/// cache keeps no `managedFields`, so each such Gateway with a status is read once per
/// resourceVersion.
#[derive(Default)]
struct StatusManagers {
    /// By Gateway: the resourceVersion read, and whether Causeway's status apply holds
    /// fields there.
    seen: BTreeMap<(String, String), (Option<String>, bool)>,
}

impl StatusManagers {
    async fn read(
        &mut self,
        hub: &kube::Client,
        gateways: &[Arc<Gateway>],
        classes: &[Arc<GatewayClass>],
    ) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        let mut seen = BTreeMap::new();
        for g in gateways {
            if attach::class_is_ours(&g.spec.gateway_class_name, classes)
                || g.status
                    .as_ref()
                    .is_none_or(|s| *s == GatewayStatus::default())
            {
                continue;
            }
            let key = crate::watch::key(g.as_ref());
            let rv = g.resource_version();
            let ours = match self.seen.get(&key) {
                Some((at, ours)) if *at == rv => *ours,
                _ => {
                    let api: Api<Gateway> = Api::namespaced(hub.clone(), &key.0);
                    // (bounded: a stuck call must not hold the status loop)
                    let read = api.get_opt(&key.1);
                    match crate::clusters::within(crate::clusters::CALL_TIMEOUT, read).await {
                        Ok(Some(fresh)) => status_applied_by_causeway(&fresh),
                        Ok(None) => continue,
                        Err(e) => {
                            tracing::debug!(namespace = %key.0, name = %key.1, error = %e, "reading a Gateway's field managers failed; trying again next round");
                            continue;
                        }
                    }
                }
            };
            if ours {
                out.insert(key.clone());
            }
            seen.insert(key, (rv, ours));
        }
        self.seen = seen;
        out
    }
}

/// Whether Causeway's status apply holds fields of `g`'s status (its `managedFields`).
fn status_applied_by_causeway(g: &Gateway) -> bool {
    g.metadata.managed_fields.iter().flatten().any(|e| {
        e.manager.as_deref() == Some(causeway_crds::well_known::FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref() == Some("status")
            && e.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:status"))
                .and_then(serde_json::Value::as_object)
                .is_some_and(|m| !m.is_empty())
    })
}

/// Writes the `want`ed status of each object in `objects` (the shared applier, field
/// manager `causeway`); a failed write is recorded in `failed`.
async fn write_all<K, S>(
    api_for: impl Fn(&str) -> Api<K>,
    memo: &mut StatusMemo,
    want: &BTreeMap<(String, String), S>,
    objects: &[Arc<K>],
    failed: &mut std::collections::HashSet<(String, String)>,
) where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    S: serde::Serialize,
{
    for o in objects {
        let key = crate::watch::key(o.as_ref());
        let Some(status) = want.get(&key) else {
            continue;
        };
        let api = api_for(&key.0);
        let status = json!(status);
        let actual = || {
            serde_json::to_value(o.as_ref())
                .ok()
                .and_then(|v| v.get("status").cloned())
        };
        let res = memo
            .ensure(
                &api,
                &key.0,
                &key.1,
                &K::api_version(&()),
                &K::kind(&()),
                &status,
                o.resource_version(),
                actual,
            )
            .await;
        if let Err(e) = res {
            tracing::warn!(kind = %K::kind(&()), namespace = %key.0, name = %key.1, error = %e, "gateway api status write failed; retrying with backoff");
            failed.insert(key);
        }
    }
}

#[cfg(test)]
mod tests;
