//! Record building for the index: the names and records of one service (a
//! fragment rebuilt only when that service's import or slices change), the
//! zone's fixed names, and the encoding of both into pre-encoded [`Node`]s.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{A, AAAA, NS, SOA, TXT};
use hickory_proto::rr::{Name, RData};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

use crate::hash::NameMap;
use crate::index::{
    ImportInput, IndexError, Node, PortInput, RrSet, SCHEMA_VERSION, ServiceKind, SliceInput,
    VERSION_TTL, ZoneConfig, rtype,
};
use crate::name::{self, NameError};

/// SRV priority and weight (Lighthouse's choice).
const SRV_PRIORITY: u16 = 0;
const SRV_WEIGHT: u16 = 50;

/// Records collected for one name before encoding; sets dedupe and sort.
#[derive(Default)]
pub(crate) struct NodeBuilder {
    a: BTreeSet<Ipv4Addr>,
    aaaa: BTreeSet<Ipv6Addr>,
    /// (target as a lowercase wire name, port), deduplicated.
    srv: BTreeSet<(Vec<u8>, u16)>,
    txt: Option<(u32, String)>,
    soa: Option<SOA>,
    ns: Option<Name>,
}

/// Names being built, by lowercase wire name.
pub(crate) type Nodes = HashMap<Vec<u8>, NodeBuilder>;

/// Inserts every ancestor of `wire` strictly between it and `stop` (empty
/// non-terminals answer NODATA, not NXDOMAIN).
fn ensure_between(nodes: &mut Nodes, wire: &[u8], stop: &[u8]) {
    let mut cur = name::parent(wire);
    while let Some(p) = cur {
        if p.len() <= stop.len() {
            break;
        }
        nodes.entry(p.to_vec()).or_default();
        cur = name::parent(p);
    }
}

/// The apex (SOA, NS), `ns.dns` (nameserver addresses), `dns-version` (TXT) and the
/// empty non-terminals `svc` and `<ns>.svc` above the given service names.
pub(crate) fn static_nodes<'a>(
    cfg: &ZoneConfig,
    apex: &[u8],
    apex_dotted: &str,
    serial: u32,
    services: impl Iterator<Item = &'a [u8]>,
) -> Result<Nodes, IndexError> {
    let mut nodes = Nodes::new();
    let ns_host = format!("ns.dns.{apex_dotted}");
    let apex_node = nodes.entry(apex.to_vec()).or_default();
    apex_node.soa = Some(SOA::new(
        fqdn(&ns_host)?,
        fqdn(&format!("hostmaster.{apex_dotted}"))?,
        serial,
        7200,
        1800,
        86400,
        cfg.ttl,
    ));
    apex_node.ns = Some(fqdn(&ns_host)?);
    let ns_wire = name::to_wire(&ns_host)?;
    let ns_node = nodes.entry(ns_wire.clone()).or_default();
    for ip in &cfg.nameservers {
        add_ip(ns_node, *ip);
    }
    ensure_between(&mut nodes, &ns_wire, apex);
    let version = name::prepend("dns-version", apex)?;
    nodes.entry(version).or_default().txt = Some((VERSION_TTL, SCHEMA_VERSION.to_string()));
    for svc in services {
        ensure_between(&mut nodes, svc, apex);
    }
    Ok(nodes)
}

/// The apex NS target's addresses as full RRs (owner `ns.dns.<zone>`), for the
/// additional section of the apex NS answer (glue).
pub(crate) fn ns_glue(cfg: &ZoneConfig, apex_dotted: &str) -> Result<RrSet, IndexError> {
    let owner = name::to_wire(&format!("ns.dns.{apex_dotted}"))?;
    let mut records = Vec::new();
    let mut ns = NodeBuilder::default();
    for ip in &cfg.nameservers {
        add_ip(&mut ns, *ip);
    }
    let a = ns.a.iter().map(|ip| (rtype::A, RData::A(A(*ip))));
    let aaaa = ns
        .aaaa
        .iter()
        .map(|ip| (rtype::AAAA, RData::AAAA(AAAA(*ip))));
    for (rt, rdata) in a.chain(aaaa).take(u16::MAX as usize) {
        records.push(encode_full_rr(&owner, rt, cfg.ttl, &rdata)?);
    }
    Ok(RrSet::of(records))
}

/// The names of one service: `<svc>.<ns>.svc.<zone>` and everything below it. Empty
/// when nothing is served (headless without ready endpoints). Only the service's own
/// name can fail it: a port, a slice or an endpoint whose name DNS cannot carry is
/// left out with a warning, and the rest is served.
pub(crate) fn service_nodes(
    apex: &[u8],
    apex_dotted: &str,
    imp: &ImportInput,
    slices: &[&SliceInput],
) -> Result<(Vec<u8>, Nodes), NameError> {
    let svc = format!("{}.{}.svc.{apex_dotted}", imp.name, imp.namespace);
    let svc_wire = name::to_wire(&svc)?;
    let mut nodes = Nodes::new();
    match imp.kind {
        ServiceKind::ClusterSetIp => {
            let node = nodes.entry(svc_wire.clone()).or_default();
            for ip in &imp.ips {
                add_ip(node, *ip);
            }
            for p in &imp.ports {
                node.srv.insert((svc_wire.clone(), p.port));
            }
            for (owner, port) in port_owners(&imp.ports, &svc, &svc_wire) {
                ensure_between(&mut nodes, &owner, &svc_wire);
                nodes
                    .entry(owner)
                    .or_default()
                    .srv
                    .insert((svc_wire.clone(), port));
            }
        }
        ServiceKind::Headless => add_headless(&mut nodes, &svc, &svc_wire, slices),
    }
    debug_assert!(name::is_within(&svc_wire, apex));
    Ok((svc_wire, nodes))
}

/// The `_<port>._<proto>.<svc>` owner of each named port, with its number. A port
/// whose name or protocol is not a DNS label (a 63-character port name is 64 with
/// the `_`) gets no SRV of its own, with a warning; the service is still served.
fn port_owners(ports: &[PortInput], svc: &str, svc_wire: &[u8]) -> Vec<(Vec<u8>, u16)> {
    let mut owners = Vec::with_capacity(ports.len());
    for p in ports {
        let Some(pname) = port_name(p) else { continue };
        let proto = p.protocol.to_ascii_lowercase();
        match name::prepend(&format!("_{pname}._{proto}"), svc_wire) {
            Ok(w) => owners.push((w, p.port)),
            Err(e) => {
                tracing::warn!(port = %pname, protocol = %proto, service = %svc, error = %e, "no SRV for a port whose name is not a DNS label")
            }
        }
    }
    owners
}

fn add_headless(nodes: &mut Nodes, svc: &str, svc_wire: &[u8], slices: &[&SliceInput]) {
    for slice in slices {
        let cluster_wire = match name::prepend(&slice.cluster, svc_wire) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(cluster = %slice.cluster, service = %svc, error = %e, "skipping EndpointSlice: source-cluster is not a DNS name");
                continue;
            }
        };
        let owners = port_owners(&slice.ports, svc, svc_wire);
        for ep in slice.endpoints.iter().filter(|e| e.ready) {
            for ip in &ep.addresses {
                let label = match &ep.hostname {
                    Some(h) if !h.is_empty() => h.to_ascii_lowercase(),
                    _ => name::dashed_ip(ip),
                };
                // The service's addresses are every ready address (DNS-8), named or not.
                add_ip(nodes.entry(svc_wire.to_vec()).or_default(), *ip);
                // The endpoint's name is also the target of its SRV records, kept in
                // wire form: no second parse of the name as text. One that cannot be
                // encoded gets no name and no SRV (nothing could point at it).
                let host_wire = match name::prepend(&label, &cluster_wire) {
                    Ok(w) if !label.contains('.') => w,
                    Ok(_) => {
                        tracing::warn!(hostname = %label, %ip, cluster = %slice.cluster, service = %svc, "endpoint without a name or SRV (still among the service's addresses): hostname is not a DNS label");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(hostname = %label, %ip, cluster = %slice.cluster, service = %svc, error = %e, "endpoint without a name or SRV (still among the service's addresses): hostname is not a DNS label");
                        continue;
                    }
                };
                // `<cluster>.<svc>...` gets no records (the form is reserved), but it
                // exists as an empty non-terminal: NODATA, not NXDOMAIN (RFC 8020).
                ensure_between(nodes, &host_wire, svc_wire);
                let svc_node = nodes.entry(svc_wire.to_vec()).or_default();
                for p in &slice.ports {
                    svc_node.srv.insert((host_wire.clone(), p.port));
                }
                for (owner, port) in &owners {
                    ensure_between(nodes, owner, svc_wire);
                    nodes
                        .entry(owner.clone())
                        .or_default()
                        .srv
                        .insert((host_wire.clone(), *port));
                }
                add_ip(nodes.entry(host_wire).or_default(), *ip);
            }
        }
    }
}

/// Encoded nodes, the apex SOA as a full RR (when the apex is among them), and the
/// number of resource records.
pub(crate) struct Encoded {
    pub nodes: NameMap<Node>,
    pub soa_authority: Option<Box<[u8]>>,
    pub records: usize,
}

/// Encodes built names into pre-encoded record sets.
pub(crate) fn encode(built: Nodes, ttl: u32) -> Result<Encoded, IndexError> {
    let mut records = 0;
    let mut soa_authority = None;
    let mut nodes = NameMap::with_capacity_and_hasher(built.len(), Default::default());
    for (wire, nb) in built {
        let mut sets: Vec<(u16, RrSet)> = Vec::new();
        let mut push = |rt: u16, rrs: Vec<Vec<u8>>| {
            if rrs.is_empty() {
                return;
            }
            sets.push((rt, RrSet::of(rrs)));
        };
        if let Some(soa) = &nb.soa {
            let rdata = RData::SOA(soa.clone());
            push(rtype::SOA, vec![encode_rr(rtype::SOA, ttl, &rdata)?]);
            soa_authority =
                Some(encode_full_rr(&wire, rtype::SOA, ttl, &rdata)?.into_boxed_slice());
        }
        if let Some(ns) = &nb.ns {
            push(
                rtype::NS,
                vec![encode_rr(rtype::NS, ttl, &RData::NS(NS(ns.clone())))?],
            );
        }
        let a =
            nb.a.iter()
                .map(|ip| encode_rr(rtype::A, ttl, &RData::A(A(*ip))));
        push(rtype::A, a.collect::<Result<_, _>>()?);
        let aaaa = nb
            .aaaa
            .iter()
            .map(|ip| encode_rr(rtype::AAAA, ttl, &RData::AAAA(AAAA(*ip))));
        push(rtype::AAAA, aaaa.collect::<Result<_, _>>()?);
        let srv = nb
            .srv
            .iter()
            .map(|(target, port)| encode_srv(ttl, target, *port))
            .collect();
        push(rtype::SRV, srv);
        if let Some((txt_ttl, text)) = &nb.txt {
            let rdata = RData::TXT(TXT::new(vec![text.clone()]));
            push(rtype::TXT, vec![encode_rr(rtype::TXT, *txt_ttl, &rdata)?]);
        }
        records += sets.iter().map(|(_, s)| s.count as usize).sum::<usize>();
        let any = any_set(&sets);
        nodes.insert(wire.into_boxed_slice(), Node { sets, any });
    }
    Ok(Encoded {
        nodes,
        soa_authority,
        records,
    })
}

/// All sets of a node concatenated, for `ANY` (None when empty or too many).
fn any_set(sets: &[(u16, RrSet)]) -> Option<RrSet> {
    RrSet::concat(sets.iter().map(|(_, s)| s)).filter(|s| s.count > 0)
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

/// One SRV RR (owner: a pointer to the question name) whose target is already a
/// lowercase wire name (at most 255 bytes): priority, weight, port and the target,
/// uncompressed (RFC 2782), as hickory-proto writes it in canonical form.
fn encode_srv(ttl: u32, target: &[u8], port: u16) -> Vec<u8> {
    let mut rd = Vec::with_capacity(6 + target.len());
    rd.extend_from_slice(&SRV_PRIORITY.to_be_bytes());
    rd.extend_from_slice(&SRV_WEIGHT.to_be_bytes());
    rd.extend_from_slice(&port.to_be_bytes());
    rd.extend_from_slice(target);
    raw_rr(&[0xC0, 0x0C], rtype::SRV, ttl, &rd)
}

/// One RR with an explicit owner (wire name or pointer).
fn encode_full_rr(owner: &[u8], rt: u16, ttl: u32, rdata: &RData) -> Result<Vec<u8>, IndexError> {
    Ok(raw_rr(owner, rt, ttl, &encode_rdata(rt, rdata)?))
}

/// One RR from its owner and its encoded RDATA (shorter than 64 KiB).
fn raw_rr(owner: &[u8], rt: u16, ttl: u32, rd: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(owner.len() + 10 + rd.len());
    out.extend_from_slice(owner);
    out.extend_from_slice(&rt.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rd.len() as u16).to_be_bytes());
    out.extend_from_slice(rd);
    out
}
