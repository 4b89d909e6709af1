//! The UDP loops: one blocking thread per socket reads a batch of datagrams with one
//! `recvmmsg`, answers each from the current snapshot and writes the answers with one
//! `sendmmsg`. With several workers each has its own `SO_REUSEPORT` socket (the kernel
//! spreads clients over them), so no packet crosses a thread. Buffers are per worker
//! and reused; the snapshot is one `ArcSwap` load per batch; the counts go to the
//! metrics once per batch. TCP connections are in [`crate::tcp`]; both share
//! [`ServerState`] and the forwarding here.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use nix::errno::Errno;
use nix::sys::socket::{
    self, AddressFamily, ControlMessage, MsgFlags, MultiHeaders, SockFlag, SockProtocol, SockType,
    SockaddrStorage, sockopt,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::answer::{self, Outcome, Settings, Transport};
use crate::index::Zone;
use crate::metrics::{Metrics, Tally};

/// Largest UDP datagram read (bigger ones are cut and answered FORMERR).
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
    /// How long to wait for the upstream.
    pub forward_timeout: Duration,
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
            transport,
            out,
            &mut tally,
            &mut since,
        );
        self.metrics.flush(&mut tally);
        outcome
    }

    /// Answers one packet from `zone`, counting it in `tally` with the time from
    /// `since` to the end of the answer, which becomes the next `since`: a batch reads
    /// the clock once per query, not twice.
    fn answer(
        &self,
        zone: &Zone,
        pkt: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
        tally: &mut Tally,
        since: &mut Instant,
    ) -> Outcome {
        let outcome = answer::respond(zone, &self.settings, pkt, transport, out);
        let now = Instant::now();
        tally.record(&outcome, now.saturating_duration_since(*since));
        *since = now;
        outcome
    }
}

/// One worker's buffers and `mmsghdr` arrays, reused for every batch.
pub struct Batch {
    /// `BATCH` receive buffers of `UDP_READ` bytes, back to back.
    bufs: Vec<u8>,
    /// Length and sender of each datagram of the last read.
    got: Vec<(usize, Option<SockaddrStorage>)>,
    /// The answer to each datagram of the last read.
    outs: Vec<Vec<u8>>,
    /// Which datagrams of the last read get an answer.
    replies: Vec<usize>,
    /// Where the answers go (the first `replies.len()`).
    to: Vec<Option<SockaddrStorage>>,
    recv: MultiHeaders<SockaddrStorage>,
    send: MultiHeaders<SockaddrStorage>,
}

impl Batch {
    /// Allocates the buffers. The `mmsghdr` arrays are primed (see [`primed_headers`]).
    pub fn new() -> std::io::Result<Batch> {
        Ok(Batch {
            bufs: vec![0; BATCH * UDP_READ],
            got: Vec::with_capacity(BATCH),
            outs: (0..BATCH).map(|_| Vec::with_capacity(UDP_READ)).collect(),
            replies: Vec::with_capacity(BATCH),
            to: vec![None; BATCH],
            recv: primed_headers()?,
            send: primed_headers()?,
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
        self.got.extend(got.map(|m| (m.bytes, m.address)));
        Ok(self.got.len())
    }

    /// Writes the answers of the last read with `sendmmsg`; an answer the kernel
    /// refuses (an unroutable sender, say) is skipped, the others still go.
    fn write(&mut self, fd: RawFd) {
        let mut iov = [[IoSlice::new(&[])]; BATCH];
        let to = &mut self.to;
        let n = self.replies.len();
        for (k, &i) in self.replies.iter().enumerate() {
            iov[k] = [IoSlice::new(&self.outs[i])];
            to[k] = self.got[i].1;
        }
        let mut done = 0;
        while done < n {
            let no_cmsgs: [ControlMessage<'_>; 0] = [];
            match socket::sendmmsg(
                fd,
                &mut self.send,
                &iov[done..n],
                &to[done..n],
                no_cmsgs,
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

/// `mmsghdr` arrays whose sender slots have all been written once.
///
/// nix's result iterators copy out the sender slot of every message they yield: for
/// `sendmmsg` (whose count we need) and for the empty read a `shutdown` causes, the
/// kernel never wrote it. Receiving `BATCH` empty datagrams on a private loopback
/// socket fills every slot with a real address first, so those copies read written
/// memory.
fn primed_headers() -> std::io::Result<MultiHeaders<SockaddrStorage>> {
    let mut headers = MultiHeaders::preallocate(BATCH, None);
    let sock = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))?;
    let me = sock.local_addr()?;
    for _ in 0..BATCH {
        sock.send_to(&[], me)?;
    }
    let mut bufs = [[0u8; 1]; BATCH];
    let mut iovs: Vec<[IoSliceMut<'_>; 1]> =
        bufs.iter_mut().map(|b| [IoSliceMut::new(b)]).collect();
    // No MSG_WAITFORONE: waits for all BATCH (or the read timeout).
    let got = socket::recvmmsg(
        sock.as_raw_fd(),
        &mut headers,
        iovs.iter_mut(),
        MsgFlags::empty(),
        None,
    )?
    .count();
    if got < BATCH {
        return Err(std::io::Error::other(format!(
            "priming the UDP batch headers: {got} of {BATCH} loopback datagrams arrived"
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
pub fn udp_worker(
    sock: std::net::UdpSocket,
    mut batch: Batch,
    shared: Arc<ServerState>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
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
            let (len, Some(peer)) = &batch.got[i] else {
                continue;
            };
            let at = i * UDP_READ;
            let pkt = &batch.bufs[at..at + (*len).min(UDP_READ)];
            let out = &mut batch.outs[i];
            match shared.answer(&zone, pkt, Transport::Udp, out, &mut tally, &mut since) {
                Outcome::Reply { .. } => batch.replies.push(i),
                Outcome::Forward { limit } => {
                    if let Some(peer) = std_addr(peer) {
                        forward(&sock, &shared, &rt, pkt, peer, limit);
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

/// Relays an out-of-zone query to the upstream on the runtime; the answer goes back
/// from the worker's socket.
fn forward(
    sock: &std::net::UdpSocket,
    shared: &Arc<ServerState>,
    rt: &tokio::runtime::Handle,
    pkt: &[u8],
    peer: SocketAddr,
    limit: usize,
) {
    let (Some(upstream), Ok(reply_sock)) = (shared.forward, sock.try_clone()) else {
        return;
    };
    let query = pkt.to_vec();
    let shared = shared.clone();
    rt.spawn(async move {
        match forward_udp(upstream, &query, shared.forward_timeout).await {
            Some(resp) => {
                let mut small = Vec::new();
                let reply = if resp.len() <= limit {
                    &resp
                } else if answer::truncate_foreign(&resp, &mut small) {
                    &small
                } else {
                    return;
                };
                let _ = reply_sock.send_to(reply, peer);
            }
            None => shared.metrics.forward_failed(),
        }
    });
}

/// Relays a query to the upstream over UDP; `None` on timeout or error.
async fn forward_udp(upstream: SocketAddr, query: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let bind: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(bind).await.ok()?;
    sock.connect(upstream).await.ok()?;
    sock.send(query).await.ok()?;
    let mut buf = vec![0u8; 65535];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        // Only the answer to this query (same ID) is relayed.
        if n >= 2 && buf[..2] == query[..2] {
            buf.truncate(n);
            return Some(buf);
        }
    }
}

/// Relays a query to the upstream over TCP.
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
