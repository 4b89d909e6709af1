//! Mesh routes (GAMMA; GEP-1748 "ServiceImport as a parent", requirement GW-4): an
//! HTTPRoute whose parentRef is a `multicluster.x-k8s.io` ServiceImport captures the
//! HTTP traffic sent to that ServiceImport's clusterset IP, in every member, and routes
//! it by the route's rules (matches, filters, weights) to the route's backends.
//!
//! How the traffic gets there (a waypoint, as Istio's ambient mesh calls it):
//! - each causeway-proxy started with `--listen-mesh <ip>:<first>-<last>` publishes
//!   that on its hub Lease ([`PROXY_MESH`]);
//! - the Gateway API controller gives every captured ServiceImport port a port of
//!   that range, stable while the route attaches, and writes it and the proxies'
//!   addresses on the hub ServiceImport ([`MESH_PORTS`], [`MESH_ADDRESSES`]);
//! - each member's importer points the captured ports of the derived Service (the one
//!   holding the clusterset IP) at those addresses and ports instead of the pods;
//! - the proxies listen on those ports and route what arrives there with the rules of
//!   the routes attached to that ServiceImport port, to backends resolved as for any
//!   HTTPRoute (the ServiceImports' own endpoints, never the waypoint).
//!
//! The rules here are pure and shared by the controller (status, ports) and the proxy
//! (what to serve), so they never disagree. Differences from a Gateway parent: route
//! `hostnames` do not apply (the parent is the destination), `sectionName` is refused,
//! and the route must be in the ServiceImport's namespace (consumer routes, which
//! would change only one namespace's view of a service, are not supported).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use kube::ResourceExt;

use super::attach::{MCS_GROUP, Refused, reasons, unsupported};
use super::http_route::{HTTPRoute, ParentReference};
use crate::mcs::ServiceImportType;
use crate::mcs::v1beta1::ServiceImport;

/// On a hub ServiceImport: each captured port and the mesh port causeway-proxy serves
/// it on, `<port>=<mesh port>` comma-separated (e.g. `80=15000,8080=15001`).
pub const MESH_PORTS: &str = "causeway.io/mesh-ports";

/// On a hub ServiceImport: the addresses of the causeway-proxies that serve its mesh
/// ports (comma-separated IPs).
pub const MESH_ADDRESSES: &str = "causeway.io/mesh-addresses";

/// On a causeway-proxy's hub Lease: where it serves mesh traffic,
/// `<ip>:<first port>-<last port>`.
pub const PROXY_MESH: &str = "causeway.io/proxy-mesh";

/// A ServiceImport parent, by (namespace, name, port).
pub type MeshParent = (String, String, i32);

/// Whether `p` refers to a ServiceImport (a mesh parent).
pub fn refers_to_service_import(p: &ParentReference) -> bool {
    p.group.as_deref() == Some(MCS_GROUP) && p.kind.as_deref() == Some("ServiceImport")
}

/// The verdict on one ServiceImport parentRef of a route.
#[derive(Clone, Debug, PartialEq)]
pub struct MeshVerdict {
    /// The parentRef as written in the route.
    pub parent_ref: ParentReference,
    /// The ServiceImport ports the route captures, or why it does not attach.
    pub attached: Result<Vec<MeshParent>, Refused>,
}

fn refused(reason: &'static str, message: String) -> Refused {
    Refused { reason, message }
}

/// The verdict on each ServiceImport parentRef of `route`; `imports` are the hub
/// ServiceImports by (namespace, name).
pub fn mesh_parents(
    route: &HTTPRoute,
    imports: &BTreeMap<(String, String), Arc<ServiceImport>>,
) -> Vec<MeshVerdict> {
    let route_ns = route.namespace().unwrap_or_default();
    let unsupported = unsupported(route);
    route
        .spec
        .parent_refs
        .iter()
        .filter(|p| refers_to_service_import(p))
        .map(|p| MeshVerdict {
            parent_ref: p.clone(),
            attached: attach(p, &route_ns, imports).and_then(|ports| match &unsupported {
                Some(why) => Err(refused(reasons::UNSUPPORTED_VALUE, why.clone())),
                None => Ok(ports),
            }),
        })
        .collect()
}

fn attach(
    p: &ParentReference,
    route_ns: &str,
    imports: &BTreeMap<(String, String), Arc<ServiceImport>>,
) -> Result<Vec<MeshParent>, Refused> {
    let ns = p.namespace.as_deref().unwrap_or(route_ns);
    let id = format!("{ns}/{}", p.name);
    if ns != route_ns {
        return Err(refused(
            reasons::UNSUPPORTED_VALUE,
            format!(
                "ServiceImport {id} is in another namespace than the route: routes that change only their own namespace's view of a service (consumer routes) are not supported; create the route in {ns}"
            ),
        ));
    }
    if p.section_name.is_some() {
        return Err(refused(
            reasons::UNSUPPORTED_VALUE,
            format!(
                "sectionName does not apply to ServiceImport {id}; name the port with port instead"
            ),
        ));
    }
    let Some(import) = imports.get(&(ns.to_string(), p.name.clone())) else {
        return Err(refused(
            reasons::NO_MATCHING_PARENT,
            format!("no ServiceImport {id} on the hub: export the Service from a member cluster"),
        ));
    };
    if import.spec.type_ == ServiceImportType::Headless {
        return Err(refused(
            reasons::UNSUPPORTED_VALUE,
            format!(
                "ServiceImport {id} is Headless: it has no clusterset IP to capture; attach the route to a Gateway instead, or export a ClusterSetIP Service"
            ),
        ));
    }
    let tcp: Vec<i32> = import
        .spec
        .ports
        .iter()
        .filter(|sp| sp.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .map(|sp| sp.port)
        .filter(|port| p.port.is_none_or(|want| want == *port))
        .collect();
    if tcp.is_empty() {
        return Err(refused(reasons::NO_MATCHING_PARENT, {
            let have: Vec<String> = import
                .spec
                .ports
                .iter()
                .map(|sp| format!("{}/{}", sp.port, sp.protocol.as_deref().unwrap_or("TCP")))
                .collect();
            let what = match p.port {
                Some(port) => format!("TCP port {port}"),
                None => "TCP port".to_string(),
            };
            format!(
                "ServiceImport {id} has no {what} (it has {}): name one of its TCP ports in the parentRef",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )
        }));
    }
    Ok(tcp
        .into_iter()
        .map(|port| (ns.to_string(), p.name.clone(), port))
        .collect())
}

/// Parses a proxy's [`PROXY_MESH`] value, `<ip>:<first>-<last>` (IPv6 in brackets).
pub fn parse_proxy_mesh(s: &str) -> Result<(IpAddr, RangeInclusive<u16>), String> {
    let bad = || {
        format!(
            "{s:?} is not <ip>:<first port>-<last port> (e.g. 127.0.0.1:15000-15099, [::1]:15000-15099)"
        )
    };
    let (ip, ports) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip: IpAddr = ip
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| bad())?;
    if ip.is_unspecified() {
        return Err(format!(
            "{s:?}: {ip} is no address members can send traffic to; give the proxy's own address"
        ));
    }
    let (lo, hi) = ports.split_once('-').ok_or_else(bad)?;
    let (lo, hi): (u16, u16) = (
        lo.parse().map_err(|_| bad())?,
        hi.parse().map_err(|_| bad())?,
    );
    if lo == 0 || hi < lo {
        return Err(format!(
            "{s:?}: the port range must be ascending and start above 0"
        ));
    }
    Ok((ip, lo..=hi))
}

/// Parses a ServiceImport's [`MESH_PORTS`] value (entries that do not parse are left
/// out).
pub fn parse_ports(s: &str) -> BTreeMap<i32, u16> {
    s.split(',')
        .filter_map(|e| {
            let (port, mesh) = e.trim().split_once('=')?;
            Some((port.parse().ok()?, mesh.parse().ok()?))
        })
        .collect()
}

/// The mesh ports a ServiceImport carries ([`MESH_PORTS`]), by its port.
pub fn ports_of(si: &ServiceImport) -> BTreeMap<i32, u16> {
    si.annotations()
        .get(MESH_PORTS)
        .map(|v| parse_ports(v))
        .unwrap_or_default()
}

/// The proxies' addresses a ServiceImport carries ([`MESH_ADDRESSES`]); entries that
/// are not IPs are left out.
pub fn addresses_of(si: &ServiceImport) -> Vec<IpAddr> {
    si.annotations()
        .get(MESH_ADDRESSES)
        .into_iter()
        .flat_map(|a| a.split(','))
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

/// Formats [`MESH_ADDRESSES`].
pub fn format_addresses(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Formats a proxy's [`PROXY_MESH`] value (IPv6 in brackets), as
/// [`parse_proxy_mesh`] reads it.
pub fn format_proxy_mesh(ip: IpAddr, range: &RangeInclusive<u16>) -> String {
    match ip {
        IpAddr::V6(_) => format!("[{ip}]:{}-{}", range.start(), range.end()),
        IpAddr::V4(_) => format!("{ip}:{}-{}", range.start(), range.end()),
    }
}

/// Formats [`MESH_PORTS`] (sorted by port).
pub fn format_ports(ports: &BTreeMap<i32, u16>) -> String {
    ports
        .iter()
        .map(|(p, m)| format!("{p}={m}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Gives each `wanted` parent a mesh port of `range`: the one it has in `current` when
/// that is in range and not taken twice, else the lowest free one. A port is not free
/// while `current` gives it to a parent no longer wanted (its members may still send
/// that parent's traffic there until they see it go) or while it is `reserved` (the
/// caller's: released a moment ago). Returns the allocation and the parents left
/// without a port (the range is full), sorted.
pub fn allocate(
    wanted: &BTreeSet<MeshParent>,
    current: &BTreeMap<MeshParent, u16>,
    range: &RangeInclusive<u16>,
    reserved: &BTreeSet<u16>,
) -> (BTreeMap<MeshParent, u16>, Vec<MeshParent>) {
    let mut out = BTreeMap::new();
    let mut used = BTreeSet::new();
    for w in wanted {
        if let Some(&port) = current.get(w)
            && range.contains(&port)
            && used.insert(port)
        {
            out.insert(w.clone(), port);
        }
    }
    let held: BTreeSet<u16> = current
        .iter()
        .filter(|(p, _)| !wanted.contains(*p))
        .map(|(_, port)| *port)
        .collect();
    let mut free = range
        .clone()
        .filter(|p| !used.contains(p) && !held.contains(p) && !reserved.contains(p));
    let mut full = Vec::new();
    for w in wanted {
        if out.contains_key(w) {
            continue;
        }
        match free.next() {
            Some(port) => {
                out.insert(w.clone(), port);
            }
            None => full.push(w.clone()),
        }
    }
    (out, full)
}

#[cfg(test)]
#[path = "mesh_tests.rs"]
mod tests;
