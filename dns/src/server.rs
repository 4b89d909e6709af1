//! The UDP loop: read a packet, answer it from the current snapshot, write the
//! answer. Buffers are per loop and reused; the snapshot is an `ArcSwap` load. TCP
//! connections are in [`crate::tcp`]; both share [`ServerState`] and the forwarding here.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use crate::answer::{self, Outcome, Settings, Transport};
use crate::index::Zone;
use crate::metrics::Metrics;

/// Largest UDP datagram read (bigger ones are cut and answered FORMERR).
const UDP_READ: usize = 4096;

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
    pub(crate) fn handle(&self, pkt: &[u8], transport: Transport, out: &mut Vec<u8>) -> Outcome {
        let start = Instant::now();
        let zone = self.zone.load();
        let outcome = answer::respond(&zone, &self.settings, pkt, transport, out);
        self.metrics.record(&outcome, start.elapsed());
        outcome
    }
}

/// Answers UDP queries on a dedicated thread until `stop` is set.
///
/// A blocking `recv_from` costs one system call per query where an async socket
/// costs three or four under a paced load (a read that would block, `epoll_wait`,
/// the read): this is the hot path, so it gets a plain thread per worker. No read
/// timeout (arming a timer per sleep costs too): shutdown sets `stop` and sends
/// empty datagrams to wake the workers.
pub fn udp_worker(
    sock: std::net::UdpSocket,
    shared: Arc<ServerState>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
) {
    let mut buf = vec![0u8; UDP_READ];
    let mut out = Vec::with_capacity(UDP_READ);
    while !stop.load(Ordering::Relaxed) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                // ICMP errors from earlier sends can surface here; keep serving.
                tracing::debug!(error = %e, "udp recv failed");
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let pkt = &buf[..n];
        match shared.handle(pkt, Transport::Udp, &mut out) {
            Outcome::Reply { .. } => {
                if let Err(e) = sock.send_to(&out, peer) {
                    tracing::debug!(%peer, error = %e, "udp send failed");
                }
            }
            Outcome::Forward { limit } => {
                if let (Some(upstream), Ok(reply_sock)) = (shared.forward, sock.try_clone()) {
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
            }
            Outcome::Drop => {}
        }
    }
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

/// Binds UDP and TCP on the same address; with port 0, both get the same free port.
pub async fn bind(addr: SocketAddr) -> Result<(std::net::UdpSocket, TcpListener), crate::Error> {
    let err = |what, source| crate::Error::Bind { what, addr, source };
    let mut attempts = 0;
    loop {
        let udp = std::net::UdpSocket::bind(addr).map_err(|e| err("UDP", e))?;
        let local = udp.local_addr().map_err(|e| err("UDP", e))?;
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
