//! The zone index: a pure function from ServiceImports and MCS EndpointSlices to an
//! immutable [`Zone`] that answers lookups in O(labels).
//!
//! Every owner name (and every empty non-terminal above one) is a key of a hash map
//! from its lowercase wire name to a [`Node`]; each node holds the pre-encoded answer
//! bytes of each record type. A query therefore costs one hash lookup plus a
//! `memcpy`, for positive and negative answers alike, whatever the zone size.
//! Nothing here does I/O; [`crate::watch`] feeds it, [`crate::answer`] reads it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use thiserror::Error;

use crate::build;
use crate::hash::NameMap;
use crate::name::{self, NameError};

/// RR type codes the index serves.
pub mod rtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Name server.
    pub const NS: u16 = 2;
    /// Start of authority.
    pub const SOA: u16 = 6;
    /// Text.
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// Service locator.
    pub const SRV: u16 = 33;
    /// EDNS0 pseudo-record.
    pub const OPT: u16 = 41;
    /// Incremental zone transfer.
    pub const IXFR: u16 = 251;
    /// Zone transfer.
    pub const AXFR: u16 = 252;
    /// Any type.
    pub const ANY: u16 = 255;
}

/// Schema version of the MCS DNS specification served at `dns-version.<zone>`.
pub const SCHEMA_VERSION: &str = "1.0.0";
/// TTL of the `dns-version` TXT record (the specification's example).
pub const VERSION_TTL: u32 = 28800;

/// How a ServiceImport is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// A clusterset VIP (`spec.ips`).
    ClusterSetIp,
    /// The endpoints' own addresses.
    Headless,
}

/// A port of a ServiceImport or an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInput {
    /// Port name (`None` or empty: unnamed, no `_<port>._<proto>` SRV).
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP` (any case).
    pub protocol: String,
    /// Port number.
    pub port: u16,
}

/// What the index needs from a ServiceImport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportInput {
    /// Namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// ClusterSetIP or Headless.
    pub kind: ServiceKind,
    /// Clusterset IPs (one per family).
    pub ips: Vec<IpAddr>,
    /// Ports.
    pub ports: Vec<PortInput>,
}

/// One endpoint of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInput {
    /// Addresses (all of the slice's family).
    pub addresses: Vec<IpAddr>,
    /// `hostname`, preferred for the per-endpoint name.
    pub hostname: Option<String>,
    /// `conditions.ready` (unset counts as ready).
    pub ready: bool,
}

/// What the index needs from an MCS EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInput {
    /// Namespace.
    pub namespace: String,
    /// The `multicluster.kubernetes.io/service-name` label.
    pub service: String,
    /// The `multicluster.kubernetes.io/source-cluster` label.
    pub cluster: String,
    /// Endpoints.
    pub endpoints: Vec<EndpointInput>,
    /// Ports (numbers for headless SRV).
    pub ports: Vec<PortInput>,
}

/// Zone-wide settings.
#[derive(Clone, Debug)]
pub struct ZoneConfig {
    /// Zone apex, e.g. `clusterset.local`.
    pub zone: String,
    /// TTL of every record but `dns-version`, and the negative-caching TTL.
    pub ttl: u32,
    /// Addresses answered for the apex NS target `ns.dns.<zone>`.
    pub nameservers: Vec<IpAddr>,
}

/// A bad zone configuration.
#[derive(Debug, Error)]
pub enum IndexError {
    /// The zone name is not a valid DNS name.
    #[error("--zone: {0}")]
    Zone(#[from] NameError),
    /// hickory-proto refused to encode a record.
    #[error("encoding {what}: {source}")]
    Encode {
        /// Which record.
        what: String,
        /// Why.
        source: hickory_proto::ProtoError,
    },
}

/// Pre-encoded resource records of one type at one name. Each RR starts with the
/// compression pointer `0xC00C` (the question name, at offset 12 of every response),
/// so the answer echoes the name in the case the client asked.
#[derive(Clone, Debug, Default)]
pub struct RrSet {
    /// Number of RRs in `wire`.
    pub count: u16,
    /// RRs in wire format.
    pub wire: Box<[u8]>,
    /// Where each RR of `wire` ends: an answer too large for the client is cut at a
    /// record boundary found by binary search, not by parsing records one by one.
    pub ends: Box<[u32]>,
}

impl RrSet {
    /// The set of `records` (each one whole RR in wire format), at most `u16::MAX`.
    pub fn of<R: AsRef<[u8]>>(records: impl IntoIterator<Item = R>) -> RrSet {
        let (mut wire, mut ends) = (Vec::new(), Vec::new());
        for r in records.into_iter().take(u16::MAX as usize) {
            wire.extend_from_slice(r.as_ref());
            ends.push(u32::try_from(wire.len()).unwrap_or(u32::MAX));
        }
        RrSet {
            count: ends.len() as u16,
            wire: wire.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
        }
    }

    /// The records of `sets` one after the other (`None` past `u16::MAX` records).
    pub fn concat<'a>(sets: impl IntoIterator<Item = &'a RrSet> + Clone) -> Option<RrSet> {
        let count: usize = sets.clone().into_iter().map(|s| s.count as usize).sum();
        if count > u16::MAX as usize {
            return None;
        }
        let (mut wire, mut ends) = (Vec::new(), Vec::with_capacity(count));
        for s in sets {
            let base = u32::try_from(wire.len()).unwrap_or(u32::MAX);
            ends.extend(s.ends.iter().map(|e| base.saturating_add(*e)));
            wire.extend_from_slice(&s.wire);
        }
        Some(RrSet {
            count: count as u16,
            wire: wire.into_boxed_slice(),
            ends: ends.into_boxed_slice(),
        })
    }
}

/// A name in the zone: its record sets (empty for an empty non-terminal).
#[derive(Clone, Debug, Default)]
pub struct Node {
    pub(crate) sets: Vec<(u16, RrSet)>,
    pub(crate) any: Option<RrSet>,
}

impl Node {
    /// The records of `qtype` here (`ANY`: all of them), if any.
    pub fn get(&self, qtype: u16) -> Option<&RrSet> {
        if qtype == rtype::ANY {
            return self.any.as_ref();
        }
        self.sets.iter().find(|(t, _)| *t == qtype).map(|(_, s)| s)
    }
}

/// The names of one service (`<svc>.<ns>.svc.<zone>` and below), encoded. Shared
/// between snapshots: a change rebuilds only the services it touches.
#[derive(Debug, Default)]
pub struct ServiceNodes {
    nodes: NameMap<Node>,
    records: usize,
}

/// An immutable snapshot of the zone.
///
/// Two levels: the zone's own names (apex, `dns-version`, `ns.dns`, the `svc` and
/// `<ns>.svc` empty non-terminals), and per service the names at and below
/// `<svc>.<ns>.svc.<zone>`, found by the question name's suffix without copying.
#[derive(Debug)]
pub struct Zone {
    apex: Box<[u8]>,
    statics: NameMap<Node>,
    services: NameMap<Arc<ServiceNodes>>,
    soa_authority: Box<[u8]>,
    ns_glue: RrSet,
    serial: u32,
    ready: bool,
    records: usize,
    names: usize,
}

/// Result of a lookup.
#[derive(Debug)]
pub enum Lookup<'z> {
    /// The name exists (maybe as an empty non-terminal).
    Found(&'z Node),
    /// No such name in the zone.
    NxDomain,
}

impl Zone {
    /// The zone before the first sync: it knows its apex (to tell in-zone from
    /// out-of-zone names) and answers SERVFAIL for everything in it.
    pub fn unsynced(cfg: &ZoneConfig) -> Result<Zone, IndexError> {
        let mut zone = ZoneState::new(cfg.clone())?.snapshot(0)?;
        zone.ready = false;
        Ok(zone)
    }

    /// Builds the zone from the imports and slices in one go. Objects with names that
    /// are not valid DNS names are skipped (with a warning), never fatal.
    pub fn build<'a>(
        cfg: &ZoneConfig,
        serial: u32,
        imports: impl IntoIterator<Item = &'a ImportInput>,
        slices: impl IntoIterator<Item = &'a SliceInput>,
    ) -> Result<Zone, IndexError> {
        let mut state = ZoneState::new(cfg.clone())?;
        let by_service = group_slices(slices);
        for imp in imports {
            let key = (imp.namespace.as_str(), imp.name.as_str());
            let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or_default();
            state.set_service(&imp.namespace, &imp.name, Some(imp), slices);
        }
        state.snapshot(serial)
    }

    /// The apex in lowercase wire format.
    pub fn apex(&self) -> &[u8] {
        &self.apex
    }

    /// Whether the zone reflects a completed sync.
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// Number of resource records.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Number of names (empty non-terminals included).
    pub fn names(&self) -> usize {
        self.names
    }

    /// The apex SOA as a complete RR for the authority section of negative answers.
    pub fn soa_authority(&self) -> &[u8] {
        &self.soa_authority
    }

    /// The addresses of the apex NS target as complete RRs, for the additional
    /// section of the apex NS answer (empty when none are configured).
    pub fn ns_glue(&self) -> &RrSet {
        &self.ns_glue
    }

    /// Looks a lowercase wire name up: O(labels), no allocation.
    pub fn lookup(&self, name: &[u8]) -> Lookup<'_> {
        let Some(rel_end) = name.len().checked_sub(self.apex.len()) else {
            return Lookup::NxDomain;
        };
        if name[rel_end..] != *self.apex {
            return Lookup::NxDomain;
        }
        // Start offsets of the last three labels before the apex.
        let mut last = [usize::MAX; 3];
        let mut i = 0;
        while i < rel_end {
            last = [last[1], last[2], i];
            i += 1 + name[i] as usize;
        }
        if i != rel_end {
            return Lookup::NxDomain;
        }
        let found = if last[0] != usize::MAX && name[last[2]..rel_end] == *b"\x03svc" {
            self.services
                .get(&name[last[0]..])
                .and_then(|s| s.nodes.get(name))
        } else {
            self.statics.get(name)
        };
        match found {
            Some(n) => Lookup::Found(n),
            None => Lookup::NxDomain,
        }
    }
}

/// Slices grouped by (namespace, service).
pub fn group_slices<'a>(
    slices: impl IntoIterator<Item = &'a SliceInput>,
) -> HashMap<(&'a str, &'a str), Vec<&'a SliceInput>> {
    let mut by_service: HashMap<(&str, &str), Vec<&SliceInput>> = HashMap::new();
    for s in slices {
        by_service
            .entry((s.namespace.as_str(), s.service.as_str()))
            .or_default()
            .push(s);
    }
    by_service
}

/// The zone being maintained: per-service fragments, rebuilt one service at a time,
/// from which [`ZoneState::snapshot`] assembles immutable [`Zone`]s cheaply.
#[derive(Debug)]
pub struct ZoneState {
    cfg: ZoneConfig,
    apex: Vec<u8>,
    apex_dotted: String,
    services: NameMap<Arc<ServiceNodes>>,
    keys: HashMap<(String, String), Box<[u8]>>,
}

impl ZoneState {
    /// An empty zone (validates the zone name).
    pub fn new(cfg: ZoneConfig) -> Result<ZoneState, IndexError> {
        let apex = name::to_wire(&cfg.zone)?;
        let apex_dotted = name::to_dotted(&apex);
        Ok(ZoneState {
            cfg,
            apex,
            apex_dotted,
            services: NameMap::default(),
            keys: HashMap::new(),
        })
    }

    /// Rebuilds service `namespace/name` from its import (None: deleted) and slices.
    pub fn set_service(
        &mut self,
        namespace: &str,
        name: &str,
        imp: Option<&ImportInput>,
        slices: &[&SliceInput],
    ) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(old) = self.keys.remove(&key) {
            self.services.remove(&old);
        }
        let Some(imp) = imp else { return };
        let built = build::service_nodes(&self.apex, &self.apex_dotted, imp, slices)
            .map_err(IndexError::from)
            .and_then(|(wire, nodes)| Ok((wire, build::encode(nodes, self.cfg.ttl)?)));
        match built {
            Ok((_, enc)) if enc.nodes.is_empty() => {}
            Ok((wire, enc)) => {
                let wire = wire.into_boxed_slice();
                self.keys.insert(key, wire.clone());
                let nodes = ServiceNodes {
                    nodes: enc.nodes,
                    records: enc.records,
                };
                self.services.insert(wire, Arc::new(nodes));
            }
            Err(e) => {
                tracing::warn!(%namespace, service = %name, error = %e, "skipping ServiceImport with a name DNS cannot serve");
            }
        }
    }

    /// An immutable snapshot (shares the service fragments).
    pub fn snapshot(&self, serial: u32) -> Result<Zone, IndexError> {
        let statics = build::static_nodes(
            &self.cfg,
            &self.apex,
            &self.apex_dotted,
            serial,
            self.services.keys().map(|k| &**k),
        )?;
        let enc = build::encode(statics, self.cfg.ttl)?;
        let soa_authority = enc.soa_authority.unwrap_or_default();
        let ns_glue = build::ns_glue(&self.cfg, &self.apex_dotted)?;
        let records = enc.records + self.services.values().map(|s| s.records).sum::<usize>();
        let names = enc.nodes.len() + self.services.values().map(|s| s.nodes.len()).sum::<usize>();
        Ok(Zone {
            apex: self.apex.clone().into_boxed_slice(),
            statics: enc.nodes,
            services: self.services.clone(),
            soa_authority,
            ns_glue,
            serial,
            ready: true,
            records,
            names,
        })
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
