//! The zone index: a pure function from ServiceImports and MCS EndpointSlices to an
//! immutable [`Zone`] that answers lookups in O(labels).
//!
//! Every owner name (and every empty non-terminal above one) is a key of a hash map
//! from its lowercase wire name to a [`Node`]; each node holds the pre-encoded answer
//! bytes of each record type. A query therefore costs one hash lookup plus a
//! `memcpy`, for positive and negative answers alike, whatever the zone size.
//! Nothing here does I/O; [`crate::watch`] feeds it, [`crate::answer`] reads it.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{A, AAAA, NS, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};
use thiserror::Error;

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
/// SRV priority and weight (Lighthouse's choice).
const SRV_PRIORITY: u16 = 0;
const SRV_WEIGHT: u16 = 50;

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
}

/// A name in the zone: its record sets (empty for an empty non-terminal).
#[derive(Clone, Debug, Default)]
pub struct Node {
    sets: Vec<(u16, RrSet)>,
    any: Option<RrSet>,
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

/// An immutable snapshot of the zone.
#[derive(Debug)]
pub struct Zone {
    apex: Box<[u8]>,
    nodes: HashMap<Box<[u8]>, Node>,
    soa_authority: Box<[u8]>,
    serial: u32,
    ready: bool,
    records: usize,
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
        let mut zone = Builder::new(cfg, 0)?.finish()?;
        zone.ready = false;
        Ok(zone)
    }

    /// Builds the zone from the imports and slices. Objects with names that are not
    /// valid DNS names are skipped (with a warning), never fatal.
    pub fn build<'a>(
        cfg: &ZoneConfig,
        serial: u32,
        imports: impl IntoIterator<Item = &'a ImportInput>,
        slices: impl IntoIterator<Item = &'a SliceInput>,
    ) -> Result<Zone, IndexError> {
        let mut b = Builder::new(cfg, serial)?;
        let mut by_service: HashMap<(&str, &str), Vec<&SliceInput>> = HashMap::new();
        for s in slices {
            by_service
                .entry((s.namespace.as_str(), s.service.as_str()))
                .or_default()
                .push(s);
        }
        for imp in imports {
            let slices = by_service
                .get(&(imp.namespace.as_str(), imp.name.as_str()))
                .map(Vec::as_slice)
                .unwrap_or_default();
            if let Err(e) = b.add_service(imp, slices) {
                tracing::warn!(namespace = %imp.namespace, service = %imp.name, error = %e, "skipping ServiceImport with a name DNS cannot serve");
            }
        }
        b.finish()
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
        self.nodes.len()
    }

    /// The apex SOA as a complete RR for the authority section of negative answers.
    pub fn soa_authority(&self) -> &[u8] {
        &self.soa_authority
    }

    /// Looks a lowercase wire name up.
    pub fn lookup(&self, name: &[u8]) -> Lookup<'_> {
        match self.nodes.get(name) {
            Some(n) => Lookup::Found(n),
            None => Lookup::NxDomain,
        }
    }
}

/// Records collected for one name before encoding; sets dedupe and sort.
#[derive(Default)]
struct NodeBuilder {
    a: BTreeSet<Ipv4Addr>,
    aaaa: BTreeSet<Ipv6Addr>,
    /// (target, port), deduplicated.
    srv: BTreeSet<(String, u16)>,
    txt: Option<(u32, String)>,
    soa: Option<SOA>,
    ns: Option<Name>,
}

struct Builder<'c> {
    cfg: &'c ZoneConfig,
    apex: Vec<u8>,
    apex_dotted: String,
    serial: u32,
    nodes: HashMap<Vec<u8>, NodeBuilder>,
}

impl<'c> Builder<'c> {
    fn new(cfg: &'c ZoneConfig, serial: u32) -> Result<Self, IndexError> {
        let apex = name::to_wire(&cfg.zone)?;
        let apex_dotted = name::to_dotted(&apex);
        let mut b = Builder {
            cfg,
            apex,
            apex_dotted,
            serial,
            nodes: HashMap::new(),
        };
        let ns_host = format!("ns.dns.{}", b.apex_dotted);
        let soa = SOA::new(
            fqdn(&ns_host)?,
            fqdn(&format!("hostmaster.{}", b.apex_dotted))?,
            serial,
            7200,
            1800,
            86400,
            cfg.ttl,
        );
        let apex_node = b.nodes.entry(b.apex.clone()).or_default();
        apex_node.soa = Some(soa);
        apex_node.ns = Some(fqdn(&ns_host)?);
        let ns_wire = name::to_wire(&ns_host)?;
        let ns_node = b.nodes.entry(ns_wire.clone()).or_default();
        for ip in &cfg.nameservers {
            add_ip(ns_node, *ip);
        }
        b.ensure_ancestors(&ns_wire);
        let version = name::prepend("dns-version", &b.apex)?;
        b.nodes.entry(version).or_default().txt = Some((VERSION_TTL, SCHEMA_VERSION.to_string()));
        Ok(b)
    }

    /// Marks every ancestor of `wire` below the apex as existing (empty
    /// non-terminals answer NODATA, not NXDOMAIN).
    fn ensure_ancestors(&mut self, wire: &[u8]) {
        let mut cur = name::parent(wire);
        while let Some(p) = cur {
            if p.len() <= self.apex.len() {
                break;
            }
            self.nodes.entry(p.to_vec()).or_default();
            cur = name::parent(p);
        }
    }

    fn add_service(&mut self, imp: &ImportInput, slices: &[&SliceInput]) -> Result<(), NameError> {
        let svc = format!("{}.{}.svc.{}", imp.name, imp.namespace, self.apex_dotted);
        let svc_wire = name::to_wire(&svc)?;
        match imp.kind {
            ServiceKind::ClusterSetIp => {
                let mut named = Vec::new();
                for p in &imp.ports {
                    if let Some(pname) = port_name(p) {
                        named.push(name::prepend(
                            &format!("_{pname}._{}", p.protocol.to_ascii_lowercase()),
                            &svc_wire,
                        )?);
                    }
                }
                let node = self.nodes.entry(svc_wire.clone()).or_default();
                for ip in &imp.ips {
                    add_ip(node, *ip);
                }
                for p in &imp.ports {
                    node.srv.insert((svc.clone(), p.port));
                }
                for (p, wire) in imp
                    .ports
                    .iter()
                    .filter(|p| port_name(p).is_some())
                    .zip(named)
                {
                    self.nodes
                        .entry(wire.clone())
                        .or_default()
                        .srv
                        .insert((svc.clone(), p.port));
                    self.ensure_ancestors(&wire);
                }
                self.ensure_ancestors(&svc_wire);
            }
            ServiceKind::Headless => self.add_headless(&svc, &svc_wire, slices),
        }
        Ok(())
    }

    fn add_headless(&mut self, svc: &str, svc_wire: &[u8], slices: &[&SliceInput]) {
        let mut any_ready = false;
        for slice in slices {
            let cluster_wire = match name::prepend(&slice.cluster, svc_wire) {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(cluster = %slice.cluster, service = %svc, error = %e, "skipping EndpointSlice: source-cluster is not a DNS name");
                    continue;
                }
            };
            for ep in slice.endpoints.iter().filter(|e| e.ready) {
                for ip in &ep.addresses {
                    let label = match &ep.hostname {
                        Some(h) if !h.is_empty() => h.to_ascii_lowercase(),
                        _ => name::dashed_ip(ip),
                    };
                    let host_wire = match name::prepend(&label, &cluster_wire) {
                        Ok(w) if label.split('.').count() == 1 => w,
                        Ok(_) | Err(_) => {
                            tracing::warn!(hostname = %label, service = %svc, "skipping endpoint: hostname is not a DNS label");
                            continue;
                        }
                    };
                    any_ready = true;
                    let target = format!("{label}.{}.{svc}", slice.cluster.to_ascii_lowercase());
                    add_ip(self.nodes.entry(host_wire).or_default(), *ip);
                    add_ip(self.nodes.entry(svc_wire.to_vec()).or_default(), *ip);
                    for p in &slice.ports {
                        self.nodes
                            .entry(svc_wire.to_vec())
                            .or_default()
                            .srv
                            .insert((target.clone(), p.port));
                        if let Some(pname) = port_name(p) {
                            let proto = p.protocol.to_ascii_lowercase();
                            match name::prepend(&format!("_{pname}._{proto}"), svc_wire) {
                                Ok(w) => {
                                    self.nodes
                                        .entry(w.clone())
                                        .or_default()
                                        .srv
                                        .insert((target.clone(), p.port));
                                    self.ensure_ancestors(&w);
                                }
                                Err(e) => {
                                    tracing::warn!(port = %pname, service = %svc, error = %e, "no SRV for a port whose name is not a DNS label")
                                }
                            }
                        }
                    }
                }
            }
        }
        if any_ready {
            self.ensure_ancestors(svc_wire);
        }
    }

    fn finish(self) -> Result<Zone, IndexError> {
        let ttl = self.cfg.ttl;
        let mut records = 0;
        let mut soa_authority = Vec::new();
        let mut nodes = HashMap::with_capacity(self.nodes.len());
        for (wire, nb) in self.nodes {
            let mut sets = Vec::new();
            let mut any = RrSet::default();
            let mut push = |rt: u16, rrs: Vec<Vec<u8>>| {
                if rrs.is_empty() {
                    return;
                }
                let count = rrs.len().min(u16::MAX as usize) as u16;
                let bytes: Vec<u8> = rrs.into_iter().take(count as usize).flatten().collect();
                if any.count.checked_add(count).is_some() {
                    any.count += count;
                    let mut all = std::mem::take(&mut any.wire).into_vec();
                    all.extend_from_slice(&bytes);
                    any.wire = all.into_boxed_slice();
                }
                sets.push((
                    rt,
                    RrSet {
                        count,
                        wire: bytes.into_boxed_slice(),
                    },
                ));
            };
            if let Some(soa) = &nb.soa {
                let rdata = RData::SOA(soa.clone());
                push(rtype::SOA, vec![encode_rr(rtype::SOA, ttl, &rdata)?]);
                soa_authority = encode_full_rr(&wire, rtype::SOA, ttl, &rdata)?;
            }
            if let Some(ns) = &nb.ns {
                push(
                    rtype::NS,
                    vec![encode_rr(rtype::NS, ttl, &RData::NS(NS(ns.clone())))?],
                );
            }
            let a =
                nb.a.iter()
                    .map(|ip| encode_rr(rtype::A, ttl, &RData::A(A(*ip))))
                    .collect::<Result<Vec<_>, _>>()?;
            push(rtype::A, a);
            let aaaa = nb
                .aaaa
                .iter()
                .map(|ip| encode_rr(rtype::AAAA, ttl, &RData::AAAA(AAAA(*ip))))
                .collect::<Result<Vec<_>, _>>()?;
            push(rtype::AAAA, aaaa);
            let mut srv = Vec::new();
            for (target, port) in &nb.srv {
                let rdata = RData::SRV(SRV::new(SRV_PRIORITY, SRV_WEIGHT, *port, fqdn(target)?));
                srv.push(encode_rr(rtype::SRV, ttl, &rdata)?);
            }
            push(rtype::SRV, srv);
            if let Some((txt_ttl, text)) = &nb.txt {
                let rdata = RData::TXT(TXT::new(vec![text.clone()]));
                push(rtype::TXT, vec![encode_rr(rtype::TXT, *txt_ttl, &rdata)?]);
            }
            records += sets.iter().map(|(_, s)| s.count as usize).sum::<usize>();
            let any = (any.count > 0).then_some(any);
            nodes.insert(wire.into_boxed_slice(), Node { sets, any });
        }
        Ok(Zone {
            apex: self.apex.into_boxed_slice(),
            nodes,
            soa_authority: soa_authority.into_boxed_slice(),
            serial: self.serial,
            ready: true,
            records,
        })
    }
}

/// The port's lowercase name if it is named.
fn port_name(p: &PortInput) -> Option<String> {
    p.name
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(str::to_ascii_lowercase)
}

fn add_ip(node: &mut NodeBuilder, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            node.a.insert(v4);
        }
        IpAddr::V6(v6) => {
            node.aaaa.insert(v6);
        }
    }
}

fn fqdn(dotted: &str) -> Result<Name, IndexError> {
    let mut n = Name::from_ascii(dotted).map_err(|source| IndexError::Encode {
        what: dotted.to_string(),
        source,
    })?;
    n.set_fqdn(true);
    Ok(n)
}

fn encode_rdata(rt: u16, rdata: &RData) -> Result<Vec<u8>, IndexError> {
    let mut buf = Vec::with_capacity(32);
    let mut enc = BinEncoder::new(&mut buf);
    enc.set_canonical_form(true);
    rdata.emit(&mut enc).map_err(|source| IndexError::Encode {
        what: format!("type {rt} rdata"),
        source,
    })?;
    Ok(buf)
}

/// One RR whose owner is a pointer to the question name.
fn encode_rr(rt: u16, ttl: u32, rdata: &RData) -> Result<Vec<u8>, IndexError> {
    encode_full_rr(&[0xC0, 0x0C], rt, ttl, rdata)
}

/// One RR with an explicit owner (wire name or pointer).
fn encode_full_rr(owner: &[u8], rt: u16, ttl: u32, rdata: &RData) -> Result<Vec<u8>, IndexError> {
    let rd = encode_rdata(rt, rdata)?;
    let mut out = Vec::with_capacity(owner.len() + 10 + rd.len());
    out.extend_from_slice(owner);
    out.extend_from_slice(&rt.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rd.len() as u16).to_be_bytes());
    out.extend_from_slice(&rd);
    Ok(out)
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
