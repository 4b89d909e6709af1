//! Mesh routes (GW-4), the controller's half: which ServiceImport ports the accepted
//! mesh routes capture, the mesh port each gets from the live causeway-proxies' range,
//! and the annotations that tell the members' importers where to send that traffic
//! (`causeway_crds::gateway::mesh`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;

use causeway_crds::gateway::mesh::{self, MESH_ADDRESSES, MESH_PORTS, MeshParent};
use kube::ResourceExt;

use super::World;

/// Where the live causeway-proxies serve mesh traffic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Waypoints {
    /// Their mesh addresses, sorted.
    pub addresses: Vec<IpAddr>,
    /// The ports every one of them serves (the intersection of their ranges); `None`
    /// when no live proxy serves mesh traffic, or their ranges do not overlap.
    pub range: Option<RangeInclusive<u16>>,
    /// Why there is no range, for the routes' status.
    pub problem: Option<String>,
}

/// The mesh addresses and ports of the live proxies in `world`.
pub fn waypoints(world: &World<'_>) -> Waypoints {
    let mut addresses = BTreeSet::new();
    let mut range: Option<RangeInclusive<u16>> = None;
    let mut bad = Vec::new();
    for p in world.proxies {
        if !crate::mci::lease_held(&p.lease, world.now) {
            continue;
        }
        match &p.mesh {
            None => {}
            Some(Ok((ip, r))) => {
                addresses.insert(*ip);
                range = Some(match range {
                    None => r.clone(),
                    Some(have) => *have.start().max(r.start())..=*have.end().min(r.end()),
                });
            }
            Some(Err(e)) => bad.push(format!("Lease {}: {e}", p.lease.name_any())),
        }
    }
    let addresses: Vec<IpAddr> = addresses.into_iter().collect();
    let (range, problem) = match range {
        None if bad.is_empty() => (
            None,
            Some("no causeway-proxy serves mesh traffic: start one with --listen-mesh <ip>:<first port>-<last port>".to_string()),
        ),
        None => (None, Some(format!("no causeway-proxy serves mesh traffic ({})", bad.join("; ")))),
        Some(r) if r.is_empty() => (
            None,
            Some("the causeway-proxies' --listen-mesh port ranges do not overlap: give them one range".to_string()),
        ),
        Some(r) => (Some(r), None),
    };
    Waypoints {
        addresses,
        range,
        problem,
    }
}

/// The mesh ports the hub ServiceImports carry now, by parent.
pub fn current(world: &World<'_>) -> BTreeMap<MeshParent, u16> {
    let mut out = BTreeMap::new();
    for ((ns, name), si) in world.imports {
        for (port, m) in mesh::ports_of(si) {
            out.insert((ns.clone(), name.clone(), port), m);
        }
    }
    out
}

/// The mesh annotations each hub ServiceImport should carry: both for one with a
/// captured port, none (`None` values: removed) for one that has them and should not.
/// Only the ServiceImports whose annotations change are listed.
pub fn annotations(
    world: &World<'_>,
    allocated: &BTreeMap<MeshParent, u16>,
    waypoints: &Waypoints,
) -> BTreeMap<(String, String), BTreeMap<String, Option<String>>> {
    let mut by_import: BTreeMap<(String, String), BTreeMap<i32, u16>> = BTreeMap::new();
    for ((ns, name, port), m) in allocated {
        by_import
            .entry((ns.clone(), name.clone()))
            .or_default()
            .insert(*port, *m);
    }
    let addresses = mesh::format_addresses(&waypoints.addresses);
    let mut out = BTreeMap::new();
    for (key, si) in world.imports {
        let want: BTreeMap<String, Option<String>> = match by_import.get(key) {
            Some(ports) => [
                (MESH_PORTS.to_string(), Some(mesh::format_ports(ports))),
                (MESH_ADDRESSES.to_string(), Some(addresses.clone())),
            ]
            .into(),
            None => [
                (MESH_PORTS.to_string(), None),
                (MESH_ADDRESSES.to_string(), None),
            ]
            .into(),
        };
        let have = si.annotations();
        if want.iter().any(|(k, v)| have.get(k) != v.as_ref()) {
            out.insert(key.clone(), want);
        }
    }
    out
}

/// How long a released mesh port is not given to another ServiceImport: the members'
/// importers and kube-proxies need a moment to stop sending the old one's traffic there.
pub const MESH_RESERVE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The ports reserved after this pass, by when they were released: those `previous`
/// gave and `allocated` no longer does, released `now`, and those of `released` still
/// within [`MESH_RESERVE`] and not given again.
pub fn release(
    previous: &BTreeMap<MeshParent, u16>,
    allocated: &BTreeMap<MeshParent, u16>,
    mut released: BTreeMap<u16, jiff::Timestamp>,
    now: jiff::Timestamp,
) -> BTreeMap<u16, jiff::Timestamp> {
    let kept: BTreeSet<u16> = allocated.values().copied().collect();
    for port in previous.values() {
        if !kept.contains(port) {
            released.entry(*port).or_insert(now);
        }
    }
    released.retain(|p, at| !kept.contains(p) && now.duration_since(*at) < MESH_RESERVE);
    released
}

/// Every parent the accepted mesh routes of `world` capture.
pub fn wanted(world: &World<'_>) -> BTreeSet<MeshParent> {
    world
        .routes
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .flat_map(|r| mesh::mesh_parents(r, world.imports))
        .filter_map(|v| v.attached.ok())
        .flatten()
        .collect()
}
