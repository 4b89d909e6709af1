//! One query packet → one response packet, from a [`Zone`] snapshot.
//!
//! The parser reads only what it needs (header, the single question, the OPT record)
//! straight from the packet; the question name is lowercased into a stack buffer and
//! looked up; the response is the header, the question copied as asked, the node's
//! pre-encoded RRs and, for negative answers, the SOA. No allocation beyond `out`,
//! which callers reuse. Malformed input gives FORMERR (or is dropped when even the
//! header is unusable); nothing here can panic on any input.

use crate::index::{Lookup, RrSet, Zone, rtype};
use crate::name::MAX_WIRE_LEN;
use std::ops::Range;

/// DNS response codes used here.
pub mod rcode {
    /// No error.
    pub const NOERROR: u8 = 0;
    /// Format error.
    pub const FORMERR: u8 = 1;
    /// Server failure (not synced yet).
    pub const SERVFAIL: u8 = 2;
    /// Name does not exist.
    pub const NXDOMAIN: u8 = 3;
    /// Not implemented (opcode).
    pub const NOTIMP: u8 = 4;
    /// Refused (outside the zone, zone transfer).
    pub const REFUSED: u8 = 5;
    /// Bad EDNS version (extended: 16).
    pub const BADVERS: u16 = 16;
}

/// Payload limit without EDNS (RFC 1035).
pub const CLASSIC_UDP_LIMIT: usize = 512;
const HEADER_LEN: usize = 12;
const CLASS_IN: u16 = 1;
const CLASS_ANY: u16 = 255;

/// Which transport the query came on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP: answers are limited by the client's payload size; a larger one is cut
    /// to the records that fit as over TCP, with TC set.
    Udp,
    /// TCP: answers up to 65535 bytes; a larger one is cut to the records that fit,
    /// starting at a record chosen by the query ID (so repeated queries reach all
    /// of them), never truncated with TC (RFC 7766 §6.2: TC means nothing over TCP).
    Tcp,
}

/// Server-wide answer settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Whether out-of-zone queries are forwarded (else REFUSED).
    pub forward: bool,
    /// Largest UDP payload this server sends and advertises in OPT.
    pub max_udp_payload: u16,
}

/// What happened to a query (for metrics and the server loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `out` holds a response.
    Reply {
        /// The question's type (0 when the question could not be parsed).
        qtype: u16,
        /// The response code (BADVERS is 16).
        rcode: u16,
        /// The name exists but has no records of the type (NOERROR/NODATA).
        nodata: bool,
        /// The answer did not fit and TC is set.
        truncated: bool,
    },
    /// Out of zone and forwarding is on: relay the packet; the reply must not be
    /// larger than `limit`.
    Forward {
        /// The client's size limit.
        limit: usize,
    },
    /// Nothing to send (not a query, or too short to answer).
    Drop,
}

/// EDNS information from the query's OPT record.
#[derive(Clone, Copy, Debug)]
struct Edns {
    payload: u16,
    version: u8,
    /// The upper 8 bits of the extended rcode (the TTL's first byte).
    ext_rcode: u8,
    /// The first byte of the flags with only the DO bit kept (0x80 or 0): copied
    /// into the response's OPT (RFC 3225 §3).
    dnssec_ok: u8,
}

struct Question {
    /// Lowercased wire name.
    name: [u8; MAX_WIRE_LEN],
    name_len: usize,
    /// End of the question section in the packet.
    end: usize,
    qtype: u16,
    qclass: u16,
}

/// Answers `pkt` into `out` (cleared first).
pub fn respond(
    zone: &Zone,
    settings: &Settings,
    pkt: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Outcome {
    out.clear();
    if pkt.len() < HEADER_LEN || pkt[2] & 0x80 != 0 {
        // Too short to answer, or a response (never answer those: no loops).
        return Outcome::Drop;
    }
    let opcode = (pkt[2] >> 3) & 0x0F;
    if opcode != 0 {
        return header_only(pkt, rcode::NOTIMP, settings, out);
    }
    if be16(pkt, 4) != Some(1) {
        return header_only(pkt, rcode::FORMERR, settings, out);
    }
    let Some(q) = parse_question(pkt) else {
        return header_only(pkt, rcode::FORMERR, settings, out);
    };
    let Ok(edns) = parse_edns(pkt, q.end) else {
        return header_only(pkt, rcode::FORMERR, settings, out);
    };
    let limit = match (transport, edns) {
        (Transport::Tcp, _) => u16::MAX as usize,
        (Transport::Udp, None) => CLASSIC_UDP_LIMIT,
        (Transport::Udp, Some(e)) => {
            (e.payload.min(settings.max_udp_payload) as usize).max(CLASSIC_UDP_LIMIT)
        }
    };
    let mut r = Response {
        pkt,
        q: &q,
        edns,
        max_udp: settings.max_udp_payload,
        limit,
        transport,
    };
    if let Some(e) = edns
        && e.version != 0
    {
        return r.write(out, rcode::BADVERS, false, None, false);
    }
    if q.qtype == rtype::OPT {
        return r.write(out, rcode::FORMERR as u16, false, None, false);
    }
    let name = &q.name[..q.name_len];
    if !in_zone(name, zone.apex()) {
        // Zone transfers are refused for every name, never forwarded: the upstream
        // would see a transfer asked from this server's address, and only the first
        // message of a multi-message answer would be relayed. Not authoritative here.
        if q.qtype == rtype::AXFR || q.qtype == rtype::IXFR {
            return r.write(out, rcode::REFUSED as u16, false, None, false);
        }
        if settings.forward {
            return Outcome::Forward { limit };
        }
        return r.write(out, rcode::REFUSED as u16, false, None, false);
    }
    if !zone.ready() {
        return r.write(out, rcode::SERVFAIL as u16, false, None, false);
    }
    if (q.qclass != CLASS_IN && q.qclass != CLASS_ANY)
        || q.qtype == rtype::AXFR
        || q.qtype == rtype::IXFR
    {
        return r.write(out, rcode::REFUSED as u16, true, None, false);
    }
    match zone.lookup(name) {
        Lookup::NxDomain => r.write(
            out,
            rcode::NXDOMAIN as u16,
            true,
            Some(zone.soa_authority()),
            false,
        ),
        Lookup::Found(node) => match node.get(q.qtype) {
            Some(set) => {
                // Glue: the apex NS answer carries the NS target's addresses.
                let glue = (q.qtype == rtype::NS && name == zone.apex()).then(|| zone.ns_glue());
                r.answer(out, set, glue)
            }
            None => r.write(
                out,
                rcode::NOERROR as u16,
                true,
                Some(zone.soa_authority()),
                true,
            ),
        },
    }
}

struct Response<'a> {
    pkt: &'a [u8],
    q: &'a Question,
    edns: Option<Edns>,
    max_udp: u16,
    limit: usize,
    transport: Transport,
}

impl Response<'_> {
    fn opt_len(&self) -> usize {
        if self.edns.is_some() { 11 } else { 0 }
    }

    /// A positive answer. When it does not fit, the whole records that fit, from the
    /// one at the query ID modulo the count on, wrapping around (a headless answer
    /// may be any subset of the endpoints, spec §2.4.1): over UDP with TC, so that
    /// resolvers that can retry over TCP fetch them all and those that cannot (musl
    /// before 1.2.4) still get addresses (RFC 2181 §9 allows a partial RRset with
    /// TC); over TCP without TC (RFC 7766 §6.2).
    /// `additional` goes in the additional section when it fits, else is left out
    /// (RFC 2181 §9: only a missing answer sets TC).
    fn answer(&mut self, out: &mut Vec<u8>, rrs: &RrSet, additional: Option<&RrSet>) -> Outcome {
        let fixed = self.q.end + self.opt_len();
        let (count, head, tail, tc) = if fixed + rrs.wire.len() <= self.limit {
            (rrs.count, &rrs.wire[..], &[][..], false)
        } else {
            // The records are sorted, so a plain prefix would always leave out the
            // same endpoints; starting at the query ID (mod the count) rotates them.
            let id = u16::from_be_bytes([self.pkt[0], self.pkt[1]]);
            let start = id % rrs.count.max(1);
            let (count, head, tail) =
                fitting_window(&rrs.ends, start, self.limit.saturating_sub(fixed));
            tracing::debug!(
                records = rrs.count,
                sent = count,
                start,
                limit = self.limit,
                transport = ?self.transport,
                "answer larger than the limit: sending the records that fit"
            );
            let tc = self.transport == Transport::Udp;
            (count, &rrs.wire[head], &rrs.wire[tail], tc)
        };
        let size = fixed + head.len() + tail.len();
        let (ar_count, ar_wire) = match additional {
            Some(a) if size + a.wire.len() <= self.limit => (a.count, &a.wire[..]),
            _ => (0, &[][..]),
        };
        self.header(out, rcode::NOERROR as u16, true, tc, [count, 0, ar_count]);
        out.extend_from_slice(head);
        out.extend_from_slice(tail);
        out.extend_from_slice(ar_wire);
        self.opt(out, rcode::NOERROR as u16);
        Outcome::Reply {
            qtype: self.q.qtype,
            rcode: 0,
            nodata: false,
            truncated: tc,
        }
    }

    /// A response without answers, with an optional authority RR.
    fn write(
        &mut self,
        out: &mut Vec<u8>,
        rcode: u16,
        aa: bool,
        authority: Option<&[u8]>,
        nodata: bool,
    ) -> Outcome {
        let auth = authority.unwrap_or_default();
        if self.q.end + auth.len() + self.opt_len() > self.limit {
            return self.write_tc(out, rcode);
        }
        self.header(
            out,
            rcode,
            aa,
            false,
            [0, u16::from(authority.is_some()), 0],
        );
        out.extend_from_slice(auth);
        self.opt(out, rcode);
        Outcome::Reply {
            qtype: self.q.qtype,
            rcode,
            nodata,
            truncated: false,
        }
    }

    fn write_tc(&mut self, out: &mut Vec<u8>, rcode: u16) -> Outcome {
        self.header(out, rcode, true, true, [0, 0, 0]);
        self.opt(out, rcode);
        Outcome::Reply {
            qtype: self.q.qtype,
            rcode,
            nodata: false,
            truncated: true,
        }
    }

    /// Header and the question as asked; `counts`: answer, authority and additional
    /// RRs (the OPT record is added to the last).
    fn header(&self, out: &mut Vec<u8>, rcode: u16, aa: bool, tc: bool, counts: [u16; 3]) {
        let [ancount, nscount, arcount] = counts;
        out.clear();
        let p = self.pkt;
        let [an0, an1] = ancount.to_be_bytes();
        let [ns0, ns1] = nscount.to_be_bytes();
        let [ar0, ar1] = (arcount + u16::from(self.edns.is_some())).to_be_bytes();
        // One copy of the whole header (a push per field was a tenth of an answer).
        out.extend_from_slice(&[
            p[0],
            p[1],
            // QR, opcode (0), AA, TC, RD copied.
            0x80 | if aa { 0x04 } else { 0 } | if tc { 0x02 } else { 0 } | (p[2] & 0x01),
            // RA=0, Z=0, AD=0, CD copied, low 4 bits of the rcode.
            (p[3] & 0x10) | (rcode & 0x0F) as u8,
            0,
            1,
            an0,
            an1,
            ns0,
            ns1,
            ar0,
            ar1,
        ]);
        out.extend_from_slice(&p[HEADER_LEN..self.q.end]);
    }

    fn opt(&self, out: &mut Vec<u8>, rcode: u16) {
        if let Some(e) = self.edns {
            write_opt(out, self.max_udp, rcode, e.dnssec_ok);
        }
    }
}

/// Appends an OPT record: `payload`, the upper bits of `rcode`, version 0, and the
/// DO bit of the query (`dnssec_ok`: 0x80 or 0), no options.
fn write_opt(out: &mut Vec<u8>, payload: u16, rcode: u16, dnssec_ok: u8) {
    let [t0, t1] = rtype::OPT.to_be_bytes();
    let [m0, m1] = payload.to_be_bytes();
    out.extend_from_slice(&[0, t0, t1, m0, m1, (rcode >> 4) as u8, 0, dnssec_ok, 0, 0, 0]);
}

/// The longest run of whole resource records that fits in `budget` bytes, starting at
/// record number `start` and wrapping around to the first record, from where each
/// record ends (`ends`, [`RrSet::ends`](crate::index::RrSet)): (records, the byte range
/// from `start` on, the byte range wrapped to from 0). Starts at record 0 when there is
/// no record number `start`. Binary searches: a large set costs no more than a small one.
fn fitting_window(ends: &[u32], start: u16, budget: usize) -> (u16, Range<usize>, Range<usize>) {
    let end = |i: usize| ends[i] as usize;
    let start = if usize::from(start) < ends.len() {
        usize::from(start)
    } else {
        0
    };
    let from = if start == 0 { 0 } else { end(start - 1) };
    let head = ends[start..].partition_point(|&e| e as usize - from <= budget);
    let head_end = if head == 0 {
        from
    } else {
        end(start + head - 1)
    };
    if start + head < ends.len() {
        return (head as u16, from..head_end, 0..0);
    }
    let used = head_end - from;
    let tail = ends[..start].partition_point(|&e| used + e as usize <= budget);
    let tail_end = if tail == 0 { 0 } else { end(tail - 1) };
    ((head + tail) as u16, from..head_end, 0..tail_end)
}

/// Where the resource record that starts at `at` ends (None past the last one): the
/// tests' check of [`RrSet::ends`](crate::index::RrSet).
#[cfg(test)]
fn rr_end(wire: &[u8], at: usize) -> Option<usize> {
    let i = skip_name(wire, at)?;
    let end = i + 10 + be16(wire, i + 8)? as usize;
    (end <= wire.len()).then_some(end)
}

/// A reply with `rcode` and no records to a query [`respond`] answered with
/// [`Outcome::Forward`]: SERVFAIL when the upstream failed, REFUSED over the limit of
/// concurrent forwards. It echoes the question and carries OPT when the query did
/// (as CoreDNS's `forward` answers). False when `pkt` is not a readable query.
pub fn forward_error(pkt: &[u8], settings: &Settings, rcode: u8, out: &mut Vec<u8>) -> bool {
    out.clear();
    if pkt.len() < HEADER_LEN || be16(pkt, 4) != Some(1) {
        return false;
    }
    let Some(q) = parse_question(pkt) else {
        return false;
    };
    let Ok(edns) = parse_edns(pkt, q.end) else {
        return false;
    };
    let mut r = Response {
        pkt,
        q: &q,
        edns,
        max_udp: settings.max_udp_payload,
        limit: u16::MAX as usize,
        transport: Transport::Tcp,
    };
    r.write(out, u16::from(rcode), false, None, false);
    true
}

/// Whether the upstream response `resp` answers `query`'s question (RFC 5452 §9.1):
/// one question, of the same name (without regard to case), type and class. The ID
/// alone is not enough to take a forwarded reply.
pub fn same_question(query: &[u8], resp: &[u8]) -> bool {
    if be16(resp, 4) != Some(1) {
        return false;
    }
    match (parse_question(query), parse_question(resp)) {
        (Some(q), Some(r)) => {
            q.name[..q.name_len] == r.name[..r.name_len]
                && (q.qtype, q.qclass) == (r.qtype, r.qclass)
        }
        _ => false,
    }
}

/// The answer to a UDP datagram longer than the server reads, of which `pkt` is the
/// beginning: FORMERR, the header only (what follows may be cut anywhere), with an
/// OPT when one is found in what was read. Dropped when it is not a query, as
/// [`respond`] drops it.
pub fn cut_off(pkt: &[u8], settings: &Settings, out: &mut Vec<u8>) -> Outcome {
    out.clear();
    if pkt.len() < HEADER_LEN || pkt[2] & 0x80 != 0 {
        return Outcome::Drop;
    }
    header_only(pkt, rcode::FORMERR, settings, out)
}

/// A reply without the question (it could not be read, or the opcode is not
/// implemented): the header and, when the query has a valid OPT record, an OPT
/// (RFC 6891 §7); the header alone when no OPT can be found.
fn header_only(pkt: &[u8], rcode: u8, settings: &Settings, out: &mut Vec<u8>) -> Outcome {
    out.clear();
    let edns = find_edns(pkt);
    out.extend_from_slice(&pkt[0..2]);
    out.push(0x80 | (pkt[2] & 0x79));
    out.push((pkt[3] & 0x10) | rcode);
    out.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    if let Some(e) = edns {
        write_opt(out, settings.max_udp_payload, u16::from(rcode), e.dnssec_ok);
    }
    Outcome::Reply {
        qtype: 0,
        rcode: rcode as u16,
        nodata: false,
        truncated: false,
    }
}

/// The OPT record of a packet whose question section [`parse_question`] does not
/// take (no question, several, or a name it refuses): the questions are skipped as
/// names (compressed or not) with type and class, then the records are walked as
/// [`parse_edns`] does. None when the packet is malformed anywhere on the way.
fn find_edns(pkt: &[u8]) -> Option<Edns> {
    let mut i = HEADER_LEN;
    for _ in 0..be16(pkt, 4)? {
        i = skip_name(pkt, i)? + 4;
        if i > pkt.len() {
            return None;
        }
    }
    parse_edns(pkt, i).ok().flatten()
}

/// Whether the lowercase wire name is the apex or below it (label-aligned suffix).
fn in_zone(name: &[u8], apex: &[u8]) -> bool {
    crate::name::is_within(name, apex)
}

fn be16(pkt: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*pkt.get(at)?, *pkt.get(at + 1)?]))
}

/// Reads the question: an uncompressed name (no pointers in questions), type, class.
fn parse_question(pkt: &[u8]) -> Option<Question> {
    let mut q = Question {
        name: [0; MAX_WIRE_LEN],
        name_len: 0,
        end: 0,
        qtype: 0,
        qclass: 0,
    };
    let mut i = HEADER_LEN;
    loop {
        let len = *pkt.get(i)? as usize;
        if len & 0xC0 != 0 {
            return None;
        }
        let next = q.name_len + 1 + len;
        if next > MAX_WIRE_LEN {
            return None;
        }
        let label = pkt.get(i..i + 1 + len)?;
        for (dst, src) in q.name[q.name_len..next].iter_mut().zip(label) {
            *dst = src.to_ascii_lowercase();
        }
        q.name_len = next;
        i += 1 + len;
        if len == 0 {
            break;
        }
    }
    q.qtype = be16(pkt, i)?;
    q.qclass = be16(pkt, i + 2)?;
    q.end = i + 4;
    Some(q)
}

/// Skips a possibly compressed name in a resource record.
fn skip_name(pkt: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let len = *pkt.get(i)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Some(i + 1),
            0x00 => i += 1 + len as usize,
            0xC0 => return pkt.get(i + 1).map(|_| i + 2),
            _ => return None,
        }
    }
}

/// Walks the answer, authority and additional sections after the question and
/// returns the OPT record's contents. Err on a malformed record or a second OPT.
fn parse_edns(pkt: &[u8], mut i: usize) -> Result<Option<Edns>, ()> {
    let counts = [be16(pkt, 6), be16(pkt, 8), be16(pkt, 10)];
    let mut edns = None;
    for (section, count) in counts.into_iter().enumerate() {
        for _ in 0..count.ok_or(())? {
            let name_start = i;
            i = skip_name(pkt, i).ok_or(())?;
            let rt = be16(pkt, i).ok_or(())?;
            let class = be16(pkt, i + 2).ok_or(())?;
            let ttl = pkt.get(i + 4..i + 8).ok_or(())?;
            let rdlen = be16(pkt, i + 8).ok_or(())? as usize;
            let end = i + 10 + rdlen;
            if end > pkt.len() {
                return Err(());
            }
            if rt == rtype::OPT {
                if section != 2 || edns.is_some() || pkt[name_start] != 0 {
                    return Err(());
                }
                edns = Some(Edns {
                    payload: class,
                    ext_rcode: ttl[0],
                    version: ttl[1],
                    dnssec_ok: ttl[2] & 0x80,
                });
            }
            i = end;
        }
    }
    Ok(edns)
}

/// Rewrites an upstream response to the client's `query` that does not fit the
/// client's limit into a truncated one: header with TC, the question and, when the
/// query had an OPT record, an OPT (RFC 6891 §7) with this server's payload size, the
/// query's DO bit and the upstream's extended rcode (when its OPT is still in `resp`,
/// which may be cut short). Returns false when the upstream response is not even a
/// readable header + question.
pub fn truncate_foreign(resp: &[u8], query: &[u8], settings: &Settings, out: &mut Vec<u8>) -> bool {
    out.clear();
    if resp.len() < HEADER_LEN || be16(resp, 4) != Some(1) {
        return false;
    }
    let Some(q) = parse_question(resp) else {
        return false;
    };
    let client_edns = parse_question(query).and_then(|cq| parse_edns(query, cq.end).ok().flatten());
    out.extend_from_slice(&resp[0..2]);
    out.push(resp[2] | 0x02);
    out.push(resp[3]);
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(client_edns.is_some())]);
    out.extend_from_slice(&resp[HEADER_LEN..q.end]);
    if let Some(e) = client_edns {
        let ext = parse_edns(resp, q.end)
            .ok()
            .flatten()
            .map_or(0, |u| u16::from(u.ext_rcode) << 4);
        write_opt(out, settings.max_udp_payload, ext, e.dnssec_ok);
    }
    true
}

#[cfg(test)]
#[path = "answer_tests.rs"]
pub(crate) mod tests;
