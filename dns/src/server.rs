//! The UDP loops: one blocking thread per socket reads a batch of datagrams with one
//! `recvmmsg`, answers each from the current snapshot and writes the answers with one
//! `sendmmsg`. With several workers each has its own `SO_REUSEPORT` socket (the kernel
//! spreads clients over them), so no packet crosses a thread. Buffers are per worker
//! and reused; the snapshot is one `ArcSwap` load per batch; the counts go to the
//! metrics once per batch. TCP connections are in [`crate::tcp`]; both share
//! [`ServerState`] and the forwarding here.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{
    self, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, MultiHeaders, SockFlag,
    SockProtocol, SockType, SockaddrStorage, sockopt,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::answer::{self, Outcome, Settings, Transport, rcode};
use crate::index::Zone;
use crate::metrics::{Metrics, Tally};

/// Largest UDP datagram read (bigger ones are cut by the kernel, which says so with
/// `MSG_TRUNC` in the message's flags, and are answered FORMERR).
const UDP_READ: usize = 4096;

/// Datagrams read, and answers written, per system call at most.
pub const BATCH: usize = 32;

/// What the loops share.
pub struct ServerState {
    /// The current zone snapshot.
    pub zone: ArcSwap<Zone>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Answer settings.
    pub settings: Settings,
    /// Upstream for out-of-zone names.
    pub forward: Option<SocketAddr>,
    /// How long to wait for the upstream (then SERVFAIL).
    pub forward_timeout: Duration,
    /// One permit per forwarded query waiting for the upstream (UDP and TCP); none
    /// left: REFUSED at once.
    pub forward_slots: Arc<Semaphore>,
    /// TCP clients silent between queries are closed after this long.
    pub tcp_idle_timeout: Duration,
    /// A begun TCP query must arrive (and its answer be written) within this long.
    pub tcp_query_timeout: Duration,
    /// TCP connection limits (total and per client address).
    pub tcp_slots: Arc<crate::tcp::Slots>,
}

impl ServerState {
    /// Answers one packet and counts it in the metrics at once (TCP).
    pub(crate) fn handle(&self, pkt: &[u8], transport: Transport, out: &mut Vec<u8>) -> Outcome {
        let mut tally = Tally::default();
        let mut since = Instant::now();
        let outcome = self.answer(
            &self.zone.load(),
            pkt,
            false,
            transport,
            out,
            &mut tally,
            &mut since,
        );
        self.metrics.flush(&mut tally);
        outcome
    }

    /// A slot for one more forwarded query; `None` (counted) when
    /// `max_concurrent_forwards` are already waiting for the upstream.
    pub(crate) fn forward_permit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.forward_slots.clone().try_acquire_owned().ok();
        if permit.is_none() {
            self.metrics.forward_refused();
        }
        permit
    }

    /// The error answer to a forwarded query (`out` cleared when there is none).
    pub(crate) fn forward_error(&self, pkt: &[u8], rcode: u8, out: &mut Vec<u8>) -> bool {
        answer::forward_error(pkt, &self.settings, rcode, out)
    }

    /// Answers one packet from `zone` (FORMERR when `cut`: a datagram longer than
    /// was read), counting it in `tally` with the time from `since` to the end of the
    /// answer, which becomes the next `since`: a batch reads the clock once per query,
    /// not twice.
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &self,
        zone: &Zone,
        pkt: &[u8],
        cut: bool,
        transport: Transport,
        out: &mut Vec<u8>,
        tally: &mut Tally,
        since: &mut Instant,
    ) -> Outcome {
        let outcome = if cut {
            answer::cut_off(pkt, &self.settings, out)
        } else {
            answer::respond(zone, &self.settings, pkt, transport, out)
        };
        let now = Instant::now();
        tally.record(&outcome, now.saturating_duration_since(*since));
        *since = now;
        outcome
    }
}

/// A datagram's length (more than [`UDP_READ`]: it was longer and came cut), sender
/// and local address, as read.
type Got = (usize, Option<SockaddrStorage>, Option<Local>);

/// One worker's buffers and `mmsghdr` arrays, reused for every batch.
pub struct Batch {
    /// `BATCH` receive buffers of `UDP_READ` bytes, back to back.
    bufs: Vec<u8>,
    /// Length, sender and local address of each datagram of the last read (no
    /// sender: not answered, as a query sent to a multicast group).
    got: Vec<Got>,
    /// The answer to each datagram of the last read.
    outs: Vec<Vec<u8>>,
    /// Which datagrams of the last read get an answer.
    replies: Vec<usize>,
    /// Where the answers go (the first `replies.len()`).
    to: Vec<Option<SockaddrStorage>>,
    recv: MultiHeaders<SockaddrStorage>,
    send: MultiHeaders<SockaddrStorage>,
    /// The socket's family, and whether it reports each datagram's local address.
    kind: Kind,
}

/// What a worker's socket is: its family, and whether it listens on a wildcard
/// address (then the kernel tells the local address each datagram was sent to, and
/// the answer leaves from it: with several local addresses, the route's own source
/// address may not be the one the client asked, and a client with a connected socket
/// drops an answer from any other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kind {
    v6: bool,
    pktinfo: bool,
}

/// The local address a datagram was sent to, the source of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Local {
    /// `IP_PKTINFO`'s `ipi_spec_dst`.
    V4(Ipv4Addr),
    /// `IPV6_PKTINFO`'s address (IPv4-mapped for IPv4 clients of a dual-stack socket)
    /// and, for a link-local address only, its interface.
    V6(Ipv6Addr, u32),
}

/// Where a datagram was sent, from its packet-info control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    /// A local unicast address, the answer's source.
    Unicast(Local),
    /// A multicast group (IPv4 `224.0.0.0/4`, IPv6 `ff00::/8`, or IPv4-mapped
    /// multicast on a dual-stack socket): a DNS server answers unicast queries only,
    /// so the datagram is dropped.
    Multicast,
}

impl Dest {
    /// From a received control message; `None` for any message other than packet
    /// info (then the local address was not reported).
    fn from_cmsg(c: &ControlMessageOwned) -> Option<Dest> {
        match c {
            ControlMessageOwned::Ipv4PacketInfo(i) => {
                // `ipi_addr` is the header's destination, `ipi_spec_dst` the local
                // address to answer from (an interface's for a multicast query).
                let to = Ipv4Addr::from(u32::from_be(i.ipi_addr.s_addr));
                Some(if to.is_multicast() {
                    Dest::Multicast
                } else {
                    Dest::Unicast(Local::V4(Ipv4Addr::from(u32::from_be(
                        i.ipi_spec_dst.s_addr,
                    ))))
                })
            }
            ControlMessageOwned::Ipv6PacketInfo(i) => {
                let ip = Ipv6Addr::from(i.ipi6_addr.s6_addr);
                if ip.is_multicast() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast()) {
                    return Some(Dest::Multicast);
                }
                let link_local = ip.segments()[0] & 0xffc0 == 0xfe80;
                let ifindex = if link_local { i.ipi6_ifindex } else { 0 };
                Some(Dest::Unicast(Local::V6(ip, ifindex)))
            }
            _ => None,
        }
    }
}

impl Local {
    /// No preference (the kernel picks the source), for a datagram whose local
    /// address was not reported, on a socket of `kind` answering `peer`.
    fn any(kind: Kind, peer: Option<&SockaddrStorage>) -> Local {
        if !kind.v6 {
            return Local::V4(Ipv4Addr::UNSPECIFIED);
        }
        // IPv4 clients of a dual-stack socket need an IPv4-mapped source.
        let mapped = peer
            .and_then(|p| p.as_sockaddr_in6())
            .is_some_and(|p| p.ip().to_ipv4_mapped().is_some());
        let ip = if mapped {
            Ipv4Addr::UNSPECIFIED.to_ipv6_mapped()
        } else {
            Ipv6Addr::UNSPECIFIED
        };
        Local::V6(ip, 0)
    }

    /// The control message data that sends from this address.
    fn info(self) -> PktInfo {
        match self {
            Local::V4(ip) => PktInfo::V4(libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            }),
            Local::V6(ip, ifindex) => PktInfo::V6(libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: ip.octets(),
                },
                ipi6_ifindex: ifindex,
            }),
        }
    }
}

/// `IP_PKTINFO` or `IPV6_PKTINFO` data to send with.
enum PktInfo {
    V4(libc::in_pktinfo),
    V6(libc::in6_pktinfo),
}

impl PktInfo {
    fn cmsg(&self) -> ControlMessage<'_> {
        match self {
            PktInfo::V4(i) => ControlMessage::Ipv4PacketInfo(i),
            PktInfo::V6(i) => ControlMessage::Ipv6PacketInfo(i),
        }
    }
}

impl Batch {
    /// Allocates the buffers for a worker reading `sock`. When `sock` listens on a
    /// wildcard address (`0.0.0.0`, `::`), turns on `IP_PKTINFO` or
    /// `IPV6_RECVPKTINFO` so that each answer leaves from the address its query was
    /// sent to. The `mmsghdr` arrays are primed (see [`primed_headers`]).
    pub fn for_socket(sock: &std::net::UdpSocket) -> std::io::Result<Batch> {
        let local = sock.local_addr()?;
        let kind = Kind {
            v6: local.is_ipv6(),
            pktinfo: local.ip().is_unspecified(),
        };
        if kind.pktinfo {
            set_pktinfo(sock, kind.v6)?;
        }
        Ok(Batch {
            bufs: vec![0; BATCH * UDP_READ],
            got: Vec::with_capacity(BATCH),
            outs: (0..BATCH).map(|_| Vec::with_capacity(UDP_READ)).collect(),
            replies: Vec::with_capacity(BATCH),
            to: vec![None; BATCH],
            recv: primed_headers(kind)?,
            send: primed_headers(kind)?,
            kind,
        })
    }

    /// Blocks until a datagram arrives, then takes up to `BATCH` of those queued, in
    /// one `recvmmsg`; returns how many.
    fn read(&mut self, fd: RawFd) -> nix::Result<usize> {
        let mut chunks = self.bufs.chunks_mut(UDP_READ);
        let mut iovs: [[IoSliceMut<'_>; 1]; BATCH] =
            std::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or_default())]);
        let got = socket::recvmmsg(
            fd,
            &mut self.recv,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        )?;
        self.got.clear();
        let kind = self.kind;
        let mut unreported = false;
        self.got.extend(got.map(|m| {
            let dest = kind.pktinfo.then(|| {
                m.cmsgs()
                    .ok()
                    .and_then(|mut c| c.find_map(|c| Dest::from_cmsg(&c)))
            });
            // A datagram longer than its buffer comes cut, with MSG_TRUNC in its
            // flags (the length read is the buffer's): counted as longer than that.
            let bytes = if m.flags.contains(MsgFlags::MSG_TRUNC) {
                m.bytes.max(UDP_READ + 1)
            } else {
                m.bytes
            };
            let (entry, missing) = received(kind, bytes, m.address, dest);
            unreported |= missing;
            entry
        }));
        if unreported {
            // The kernel shrinks a header's control length to what it wrote, and nix
            // never restores it: a header that took no control message would take
            // none again. Fresh headers; the datagrams read are copied out already.
            tracing::debug!(
                "a datagram came without its local address; resetting the batch headers"
            );
            match primed_headers(kind) {
                Ok(h) => self.recv = h,
                Err(e) => tracing::warn!(error = %e, "resetting the UDP batch headers"),
            }
        }
        Ok(self.got.len())
    }

    /// Writes the answers of the last read with `sendmmsg` (one call per run of
    /// answers from the same local address); an answer the kernel refuses (an
    /// unroutable sender, say) is skipped, the others still go.
    fn write(&mut self, fd: RawFd) {
        let mut iov = [[IoSlice::new(&[])]; BATCH];
        let mut from = [None; BATCH];
        let to = &mut self.to;
        let n = self.replies.len();
        for (k, &i) in self.replies.iter().enumerate() {
            iov[k] = [IoSlice::new(&self.outs[i])];
            to[k] = self.got[i].1;
            from[k] = self.got[i].2;
        }
        let mut done = 0;
        while done < n {
            // The control message goes with every message of one call.
            let end = (done..n).find(|&k| from[k] != from[done]).unwrap_or(n);
            let info = from[done].map(Local::info);
            let cmsg = info.as_ref().map(PktInfo::cmsg);
            match socket::sendmmsg(
                fd,
                &mut self.send,
                &iov[done..end],
                &to[done..end],
                cmsg.as_slice(),
                MsgFlags::empty(),
            ) {
                Ok(sent) => done += sent.count().max(1),
                Err(Errno::EINTR) => {}
                Err(e) => {
                    let peer = to[done].as_ref().and_then(std_addr);
                    tracing::debug!(?peer, error = %e, "udp send failed");
                    done += 1;
                }
            }
        }
    }
}

/// A datagram's entry in [`Batch::got`]: `bytes` long from `from`, and `dest` when
/// the socket (of `kind`) asks for packet info: `Some(None)` when none came. Also
/// whether its local address went unreported: only a missing packet-info message
/// means the headers lost their control room (a multicast destination is reported).
/// A query to a multicast group gets no sender, so no answer.
fn received(
    kind: Kind,
    bytes: usize,
    from: Option<SockaddrStorage>,
    dest: Option<Option<Dest>>,
) -> (Got, bool) {
    match dest {
        None => ((bytes, from, None), false),
        Some(Some(Dest::Unicast(local))) => ((bytes, from, Some(local)), false),
        Some(Some(Dest::Multicast)) => ((bytes, None, None), false),
        Some(None) => (
            (bytes, from, Some(Local::any(kind, from.as_ref()))),
            bytes > 0,
        ),
    }
}

/// Asks the kernel for each datagram's local address (`IP_PKTINFO`, or
/// `IPV6_RECVPKTINFO`, which covers the IPv4 clients of a dual-stack socket too).
fn set_pktinfo(sock: &impl AsFd, v6: bool) -> std::io::Result<()> {
    if v6 {
        socket::setsockopt(sock, sockopt::Ipv6RecvPacketInfo, &true)?;
    } else {
        socket::setsockopt(sock, sockopt::Ipv4PacketInfo, &true)?;
    }
    Ok(())
}

/// `mmsghdr` arrays for a socket of `kind` whose sender slots have all been written
/// once, with room for one packet-info control message each when `kind.pktinfo`.
///
/// nix's result iterators copy out the sender slot of every message they yield: for
/// `sendmmsg` (whose count we need) and for the empty read a `shutdown` causes, the
/// kernel never wrote it. Receiving `BATCH` empty datagrams on a private loopback
/// socket fills every slot with a real address first, so those copies read written
/// memory. The kernel also writes each header's address and control lengths, which
/// nix never resets and the next call uses as the room available: the private
/// socket is of the same family (IPv4 loopback, or IPv4-mapped loopback on an IPv6
/// socket) and reports its packet info the same way, so both come out at full size.
fn primed_headers(kind: Kind) -> std::io::Result<MultiHeaders<SockaddrStorage>> {
    let cmsg = match (kind.pktinfo, kind.v6) {
        (false, _) => None,
        (true, false) => Some(nix::cmsg_space!(libc::in_pktinfo)),
        (true, true) => Some(nix::cmsg_space!(libc::in6_pktinfo)),
    };
    let mut headers = MultiHeaders::preallocate(BATCH, cmsg);
    let sock = if kind.v6 {
        let fd = socket::socket(
            AddressFamily::Inet6,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::Udp,
        )?;
        socket::setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
        let at = SocketAddr::from((Ipv4Addr::LOCALHOST.to_ipv6_mapped(), 0));
        socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(at))?;
        std::net::UdpSocket::from(fd)
    } else {
        std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?
    };
    if kind.pktinfo {
        set_pktinfo(&sock, kind.v6)?;
    }
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    let me = sock.local_addr()?;
    for _ in 0..BATCH {
        sock.send_to(&[], me)?;
    }
    let mut bufs = [[0u8; 1]; BATCH];
    let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
        bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
    // No MSG_WAITFORONE: waits for all BATCH (or the read timeout).
    let (got, with_info) = socket::recvmmsg(
        sock.as_raw_fd(),
        &mut headers,
        iovs.iter_mut(),
        MsgFlags::empty(),
        None,
    )?
    .fold((0, 0), |(got, info), m| {
        let has = m
            .cmsgs()
            .is_ok_and(|mut c| c.any(|c| Dest::from_cmsg(&c).is_some()));
        (got + 1, info + usize::from(has))
    });
    if got < BATCH || (kind.pktinfo && with_info < BATCH) {
        return Err(std::io::Error::other(format!(
            "priming the UDP batch headers: {got} of {BATCH} loopback datagrams arrived, {with_info} with their local address"
        )));
    }
    Ok(headers)
}

/// The std form of a socket address nix read (IPv4 or IPv6, else `None`).
fn std_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddrV4::from(*v4).into());
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::from(SocketAddrV6::from(*v6)))
}

/// Answers UDP queries on a dedicated thread until `stop` is set.
///
/// A blocking read costs one system call per wake-up where an async socket costs
/// three or four under a paced load (a read that would block, `epoll_wait`, the read):
/// this is the hot path, so it gets a plain thread per worker, and every datagram
/// queued when it wakes is read and answered with one system call each way. No read
/// timeout (arming a timer per sleep costs too): shutdown sets `stop` and shuts the
/// socket's reading side ([`wake`]), which ends the blocked read.
///
/// A panic (a bug) is caught and the worker serves on, with the datagrams of that read
/// unanswered (their clients ask again): as a TCP connection's task ends alone, not
/// the server. A worker thread that ended would leave its socket unread, and with
/// several sockets on the port the kernel would keep sending it a share of the
/// clients, whose queries would go unanswered while the server looked healthy.
pub fn udp_worker(
    sock: std::net::UdpSocket,
    mut batch: Batch,
    shared: Arc<ServerState>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
) {
    // Shared with the forwarding tasks, which answer from this socket.
    let sock = Arc::new(sock);
    serve_on_after_panics("UDP worker", || {
        udp_serve(&sock, &mut batch, &shared, &stop, &rt);
    });
}

/// Runs `serve` until it returns, again after each panic (logged); how many there were.
pub fn serve_on_after_panics(what: &str, mut serve: impl FnMut()) -> usize {
    let mut panics = 0;
    loop {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut serve)) {
            Ok(()) => return panics,
            Err(_) => {
                panics += 1;
                tracing::error!(
                    what,
                    panics,
                    "panicked (a bug: please report it, with the log before this line); serving on"
                );
            }
        }
    }
}

fn udp_serve(
    sock: &Arc<std::net::UdpSocket>,
    batch: &mut Batch,
    shared: &Arc<ServerState>,
    stop: &AtomicBool,
    rt: &tokio::runtime::Handle,
) {
    let fd = sock.as_raw_fd();
    let mut tally = Tally::default();
    loop {
        let read = batch.read(fd);
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let n = match read {
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => {
                // ICMP errors from earlier sends can surface here; keep serving.
                tracing::debug!(error = %e, "udp recv failed");
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let zone = shared.zone.load();
        batch.replies.clear();
        let mut since = Instant::now();
        for i in 0..n {
            let (len, Some(peer), local) = &batch.got[i] else {
                continue;
            };
            let at = i * UDP_READ;
            let cut = *len > UDP_READ;
            let pkt = &batch.bufs[at..at + (*len).min(UDP_READ)];
            let out = &mut batch.outs[i];
            match shared.answer(&zone, pkt, cut, Transport::Udp, out, &mut tally, &mut since) {
                Outcome::Reply { .. } => batch.replies.push(i),
                Outcome::Forward { limit } => {
                    if let Some(to) = std_addr(peer) {
                        match shared.forward_permit() {
                            Some(permit) => {
                                let client = Client {
                                    to,
                                    local: *local,
                                    limit,
                                };
                                forward(sock, shared, rt, pkt, client, permit);
                            }
                            // Over the limit: REFUSED now, in this batch.
                            None => {
                                if shared.forward_error(pkt, rcode::REFUSED, out) {
                                    batch.replies.push(i);
                                }
                            }
                        }
                    }
                    since = Instant::now();
                }
                Outcome::Drop => {}
            }
        }
        drop(zone);
        // Counted before the answers leave: a client holding its answer sees it counted.
        shared.metrics.flush(&mut tally);
        batch.write(fd);
    }
}

/// Ends a worker's blocked read for shutdown: `shutdown(SHUT_RD)` on a UDP socket
/// wakes its reader with an empty read (Linux answers ENOTCONN for an unconnected
/// socket but wakes it all the same).
pub fn wake(sock: &std::net::UdpSocket) {
    let _ = socket::shutdown(sock.as_raw_fd(), socket::Shutdown::Read);
}

/// Where a forwarded answer goes, and its size limit.
struct Client {
    to: SocketAddr,
    /// The address the query was sent to (on a wildcard address), the answer's source.
    local: Option<Local>,
    limit: usize,
}

/// Relays an out-of-zone query to the upstream on the runtime, holding `permit` until
/// it is done; the answer (SERVFAIL when the upstream gives none in time) goes back
/// from the worker's socket.
fn forward(
    sock: &Arc<std::net::UdpSocket>,
    shared: &Arc<ServerState>,
    rt: &tokio::runtime::Handle,
    pkt: &[u8],
    client: Client,
    permit: OwnedSemaphorePermit,
) {
    let Some(upstream) = shared.forward else {
        return;
    };
    let query = pkt.to_vec();
    let (sock, shared) = (sock.clone(), shared.clone());
    rt.spawn(async move {
        let _permit = permit;
        let limit = client.limit;
        let mut reply = Vec::new();
        let ok = match forward_udp(upstream, &query, limit, shared.forward_timeout).await {
            Ok(resp) if resp.len() <= limit => {
                reply = resp;
                true
            }
            // Larger than the client takes: TC, the question and OPT (if asked).
            Ok(resp) => answer::truncate_foreign(&resp, &query, &shared.settings, &mut reply),
            Err(e) => {
                tracing::debug!(%upstream, error = %e, "forwarding over UDP failed");
                false
            }
        };
        if !ok {
            shared.metrics.forward_failed();
            if !shared.forward_error(&query, rcode::SERVFAIL, &mut reply) {
                return;
            }
        }
        // the worker's socket blocks (its thread waits in recv); this task is on the
        // runtime, which must never wait on a full send buffer: MSG_DONTWAIT (an answer
        // that does not fit now is dropped, as the network may drop any datagram)
        let info = client.local.map(|l| l.info());
        let cmsgs: Vec<_> = info.iter().map(|i| i.cmsg()).collect();
        let sent = socket::sendmsg(
            sock.as_raw_fd(),
            &[IoSlice::new(&reply)],
            &cmsgs,
            MsgFlags::MSG_DONTWAIT,
            Some(&SockaddrStorage::from(client.to)),
        )
        .map_err(std::io::Error::from);
        if let Err(e) = sent {
            tracing::debug!(peer = %client.to, error = %e, "udp send of a forwarded answer failed");
        }
    });
}

/// Relays a query to the upstream over UDP and returns its answer, read into a buffer
/// of `limit + 1` bytes (not 64 KiB per query): an answer longer than `limit` comes
/// back cut, longer than `limit`, for the caller to truncate.
async fn forward_udp(
    upstream: SocketAddr,
    query: &[u8],
    limit: usize,
    timeout: Duration,
) -> std::io::Result<Vec<u8>> {
    let deadline = tokio::time::Instant::now() + timeout;
    tokio::time::timeout_at(deadline, async {
        let bind: SocketAddr = if upstream.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).await?;
        sock.connect(upstream).await?;
        sock.send(query).await?;
        let mut buf = vec![0u8; limit + 1];
        loop {
            let n = sock.recv(&mut buf).await?;
            // Only the answer to this query is relayed: the same ID and the same
            // question (RFC 5452 §9.1); anything else is ignored and the wait goes on.
            let got = &buf[..n];
            if got.len() >= 2 && got[..2] == query[..2] && answer::same_question(query, got) {
                buf.truncate(n);
                return Ok(buf);
            }
            tracing::debug!(%upstream, "forwarded UDP answer with another ID or question; ignored");
        }
    })
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Relays a query to the upstream over TCP. `None` when the upstream gives no answer
/// in time, or one whose ID or question is not the query's (only the answer to this
/// query is relayed, as over UDP, RFC 5452 §9.1; a connection carries this one query,
/// so anything else is a broken upstream and the client gets SERVFAIL rather than a
/// stranger's answer).
pub(crate) async fn forward_tcp(
    upstream: SocketAddr,
    query: &[u8],
    timeout: Duration,
) -> Option<Vec<u8>> {
    tokio::time::timeout(timeout, async {
        let mut s = TcpStream::connect(upstream).await.ok()?;
        let mut framed = Vec::with_capacity(query.len() + 2);
        framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
        framed.extend_from_slice(query);
        s.write_all(&framed).await.ok()?;
        let len = s.read_u16().await.ok()? as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.ok()?;
        if resp.get(..2) != query.get(..2) || !answer::same_question(query, &resp) {
            tracing::debug!(%upstream, "forwarded TCP answer with another ID or question; dropped");
            return None;
        }
        Some(resp)
    })
    .await
    .ok()
    .flatten()
}

/// Binds `workers` UDP sockets and a TCP listener on the same address; with port 0,
/// all get the same free port.
pub async fn bind(
    addr: SocketAddr,
    workers: usize,
) -> Result<(Vec<std::net::UdpSocket>, TcpListener), crate::Error> {
    let err = |what, source| crate::Error::Bind { what, addr, source };
    let mut attempts = 0;
    loop {
        let udp = match bind_udp(addr, workers) {
            Ok(udp) => udp,
            // Port 0 with several workers: the probed port was taken before the group
            // bound it; probe another.
            Err(e) if addr.port() == 0 && attempts < 20 => {
                tracing::debug!(error = %e, "UDP port taken; trying another");
                attempts += 1;
                continue;
            }
            Err(e) => return Err(err("UDP", e)),
        };
        let local = udp[0].local_addr().map_err(|e| err("UDP", e))?;
        match TcpListener::bind(local).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if addr.port() == 0 && attempts < 20 => {
                tracing::debug!(%local, error = %e, "TCP port taken; trying another");
                attempts += 1;
            }
            Err(e) => return Err(err("TCP", e)),
        }
    }
}

/// One plain UDP socket for one worker; for more, a group of `SO_REUSEPORT` sockets
/// on one port, one per worker. With port 0 the port is found by a probe socket
/// without `SO_REUSEPORT` (the kernel may hand a port-0 `SO_REUSEPORT` bind a port
/// that another group of the same user already shares; it never hands a plain bind a
/// port in use).
fn bind_udp(addr: SocketAddr, workers: usize) -> std::io::Result<Vec<std::net::UdpSocket>> {
    if workers <= 1 {
        return Ok(vec![std::net::UdpSocket::bind(addr)?]);
    }
    let addr = if addr.port() == 0 {
        std::net::UdpSocket::bind(addr)?.local_addr()?
    } else {
        addr
    };
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    (0..workers)
        .map(|_| {
            let fd = socket::socket(
                family,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                SockProtocol::Udp,
            )?;
            socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
            socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
            Ok(std::net::UdpSocket::from(fd))
        })
        .collect::<Result<_, Errno>>()
        .map_err(std::io::Error::from)
}

#[cfg(test)]
mod panic_tests {
    #[test]
    fn a_worker_serves_on_after_a_panic() {
        let mut calls = 0;
        let panics = super::serve_on_after_panics("test worker", || {
            calls += 1;
            assert!(calls > 2, "a bug in call {calls}");
        });
        assert_eq!((panics, calls), (2, 3));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(to: [u8; 4], spec_dst: [u8; 4]) -> ControlMessageOwned {
        ControlMessageOwned::Ipv4PacketInfo(libc::in_pktinfo {
            ipi_ifindex: 2,
            ipi_spec_dst: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::from(spec_dst)).to_be(),
            },
            ipi_addr: libc::in_addr {
                s_addr: u32::from(Ipv4Addr::from(to)).to_be(),
            },
        })
    }

    fn v6(to: Ipv6Addr, ifindex: u32) -> ControlMessageOwned {
        ControlMessageOwned::Ipv6PacketInfo(libc::in6_pktinfo {
            ipi6_addr: libc::in6_addr {
                s6_addr: to.octets(),
            },
            ipi6_ifindex: ifindex,
        })
    }

    #[test]
    fn multicast_destinations_are_reported_and_not_answered() {
        let v6_kind = Kind {
            v6: true,
            pktinfo: true,
        };
        let peer = SockaddrStorage::from(SocketAddr::from(([10, 0, 0, 9], 5353)));
        let multicast = [
            v6("ff02::1".parse().unwrap(), 2),
            v6("ff05::fb".parse().unwrap(), 0),
            v6(Ipv4Addr::new(224, 0, 0, 251).to_ipv6_mapped(), 0),
            v4([224, 0, 0, 251], [10, 0, 0, 1]),
            v4([239, 255, 255, 250], [10, 0, 0, 1]),
        ];
        for c in &multicast {
            let dest = Dest::from_cmsg(c);
            assert_eq!(dest, Some(Dest::Multicast), "{c:?}");
            // Packet info came: no reset of the headers, and no answer.
            let ((len, to, local), unreported) = received(v6_kind, 40, Some(peer), Some(dest));
            assert_eq!((len, to, local, unreported), (40, None, None, false));
        }
    }

    #[test]
    fn unicast_destinations_are_the_answer_source() {
        let cases = [
            (
                v4([10, 0, 0, 1], [10, 0, 0, 1]),
                Local::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ),
            // A broadcast or other address answers from the interface's address.
            (
                v4([10, 0, 0, 255], [10, 0, 0, 1]),
                Local::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ),
            (
                v6("2001:db8::1".parse().unwrap(), 3),
                Local::V6("2001:db8::1".parse().unwrap(), 0),
            ),
            (
                v6("fe80::1".parse().unwrap(), 3),
                Local::V6("fe80::1".parse().unwrap(), 3),
            ),
            (
                v6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped(), 1),
                Local::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped(), 0),
            ),
        ];
        let kind = Kind {
            v6: true,
            pktinfo: true,
        };
        let peer = SockaddrStorage::from(SocketAddr::from(([10, 0, 0, 9], 5353)));
        for (c, want) in cases {
            let dest = Dest::from_cmsg(&c);
            assert_eq!(dest, Some(Dest::Unicast(want)), "{c:?}");
            let (got, unreported) = received(kind, 40, Some(peer), Some(dest));
            assert_eq!(got, (40, Some(peer), Some(want)));
            assert!(!unreported);
        }
    }

    #[test]
    fn only_a_missing_packet_info_message_resets_the_headers() {
        assert_eq!(Dest::from_cmsg(&ControlMessageOwned::Ipv4Tos(0)), None);
        let kind = Kind {
            v6: false,
            pktinfo: true,
        };
        let peer = SockaddrStorage::from(SocketAddr::from(([10, 0, 0, 9], 5353)));
        let any = Some(Local::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            received(kind, 40, Some(peer), Some(None)),
            ((40, Some(peer), any), true)
        );
        // The empty read of a shutdown is not a lost control message.
        assert_eq!(received(kind, 0, None, Some(None)), ((0, None, any), false));
        // A socket on one address asks for no packet info.
        let bound = Kind {
            v6: false,
            pktinfo: false,
        };
        assert_eq!(
            received(bound, 40, Some(peer), None),
            ((40, Some(peer), None), false)
        );
    }
}
