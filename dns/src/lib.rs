//! causeway-dns: an authoritative DNS server for the MCS zone (`clusterset.local`).
//!
//! It answers the names of the Multi-Cluster Services DNS specification from the
//! ServiceImports and MCS EndpointSlices of the member cluster it watches:
//!
//! - [`watch`]: kube watches → DNS-relevant inputs → a rebuilt [`index::Zone`],
//!   swapped atomically (debounced);
//! - [`index`]: the pure zone index (pre-encoded answers keyed by lowercase wire name);
//! - [`answer`]: one query packet → one response packet;
//! - [`server`]: the UDP loop (and forwarding of out-of-zone names);
//! - [`tcp`]: TCP connections: per-client and total limits, timeouts, framing;
//! - [`metrics`]: Prometheus metrics (served by [`causeway_runtime::admin`]);
//! - [`client`]: a one-question client for tests and diagnostics.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! let running = causeway_dns::start(client, causeway_dns::Config::default()).await?;
//! println!("DNS on udp {} tcp {}", running.udp, running.tcp);
//! running.shutdown().await;
//! # Ok(()) }
//! ```

pub mod answer;
mod build;
pub mod client;
pub mod hash;
pub mod index;
pub mod metrics;
pub mod name;
pub mod server;
pub mod tcp;
pub mod watch;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::index::{Zone, ZoneConfig};
use crate::metrics::Metrics;
use crate::server::ServerState;

/// Server configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Zone served (default `clusterset.local`).
    pub zone: String,
    /// UDP and TCP listen address (port 0: a free port, the same for both).
    pub listen: SocketAddr,
    /// TTL of the answers and of negative caching (default 5 s).
    pub ttl: u32,
    /// Where to serve `/metrics`, `/healthz`, `/readyz` (None: nowhere).
    pub metrics: Option<SocketAddr>,
    /// Upstream resolver for names outside the zone (None: REFUSED).
    pub forward: Option<SocketAddr>,
    /// UDP worker threads, each reading its own `SO_REUSEPORT` socket (one plain
    /// socket when 1).
    pub workers: usize,
    /// A TCP client that sends nothing between queries is closed after this long
    /// (default 10 s).
    pub tcp_idle_timeout: Duration,
    /// Once a TCP query has begun, the rest of it must arrive within this long, and
    /// its answer must be written within this long (default 500 ms, as Knot's
    /// `tcp-io-timeout`): half-sent queries do not hold a connection.
    pub tcp_query_timeout: Duration,
    /// Concurrent TCP connections (default 1024). One more closes the connection
    /// idle between queries the longest (the same client's first); when none is idle,
    /// the oldest connection of the client holding the most, if that client holds at
    /// least two more than the new one's and more than
    /// [`tcp::MIN_KEPT_PER_CLIENT`]; else the new one is closed at accept.
    pub max_tcp_connections: usize,
    /// Concurrent TCP connections from one client address (default 256), so one
    /// client cannot take every connection. One more closes that client's connection
    /// idle the longest, or is closed at accept when none is idle.
    pub max_tcp_connections_per_client: usize,
    /// Largest UDP payload sent and advertised (EDNS0); clients asking for less get less.
    pub max_udp_payload: u16,
    /// How long to wait for the upstream when forwarding; a query it does not answer
    /// in time gets SERVFAIL.
    pub forward_timeout: Duration,
    /// Most forwarded queries waiting for the upstream at once (UDP and TCP); one more
    /// is answered REFUSED at once, as CoreDNS's `forward` does over `max_concurrent`
    /// (default 1024).
    pub max_concurrent_forwards: usize,
    /// Delay between a watch event and the index rebuild (collects bursts).
    pub rebuild_debounce: Duration,
    /// Addresses answered for the apex NS target `ns.dns.<zone>` (and as glue in the
    /// apex NS answer). Empty: [`default_nameservers`] of the listen address.
    pub nameservers: Vec<IpAddr>,
}

/// The apex NS target's addresses when none is configured: the listen address; when
/// that is unspecified, the local addresses the host would use to reach the outside
/// (the interface of the default route: the pod IP in a pod), found by connecting a
/// UDP socket, which sends nothing. `0.0.0.0` is IPv4 only; `::` is dual-stack (IPv4
/// clients reach it too): its routed IPv6 address and its routed IPv4 address, each
/// when there is one. Loopback only when there is no routed address at all.
pub fn default_nameservers(listen: IpAddr) -> Vec<IpAddr> {
    if !listen.is_unspecified() {
        return vec![listen];
    }
    // Documentation addresses (RFC 5737, RFC 3849): only routed, never reached.
    let v4 = routed_source(
        (Ipv4Addr::UNSPECIFIED, 0).into(),
        (Ipv4Addr::new(192, 0, 2, 1), 53).into(),
    );
    let v6 = match listen {
        IpAddr::V4(_) => None,
        IpAddr::V6(_) => routed_source(
            (Ipv6Addr::UNSPECIFIED, 0).into(),
            (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), 53).into(),
        ),
    };
    pick_nameservers(listen, v4, v6)
}

/// The local address a UDP socket bound to `bind` gets when connected to `probe`.
fn routed_source(bind: SocketAddr, probe: SocketAddr) -> Option<IpAddr> {
    std::net::UdpSocket::bind(bind)
        .and_then(|s| s.connect(probe).and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
}

/// [`default_nameservers`] of an unspecified `listen` from the routed addresses found
/// (the listen address's family first); loopback only when none is routed.
fn pick_nameservers(listen: IpAddr, v4: Option<IpAddr>, v6: Option<IpAddr>) -> Vec<IpAddr> {
    let found = match listen {
        IpAddr::V4(_) => [v4, None],
        IpAddr::V6(_) => [v6, v4],
    };
    let routed: Vec<IpAddr> = found
        .into_iter()
        .flatten()
        .filter(|ip| !ip.is_unspecified() && !ip.is_loopback())
        .collect();
    if !routed.is_empty() {
        return routed;
    }
    vec![match listen {
        IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
        IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
    }]
}

impl Default for Config {
    fn default() -> Self {
        Config {
            zone: "clusterset.local".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 5353)),
            ttl: 5,
            metrics: None,
            forward: None,
            workers: 1,
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_query_timeout: Duration::from_millis(500),
            max_tcp_connections: 1024,
            max_tcp_connections_per_client: 256,
            max_udp_payload: 1232,
            forward_timeout: Duration::from_secs(2),
            max_concurrent_forwards: 1024,
            rebuild_debounce: Duration::from_millis(5),
            nameservers: Vec::new(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum Error {
    /// The zone name (or another index setting) is invalid.
    #[error(transparent)]
    Index(#[from] index::IndexError),
    /// A listen address could not be bound.
    #[error(
        "binding the {what} listener on {addr}: {source} (is the port in use, or below 1024 without privileges?)"
    )]
    Bind {
        /// UDP, TCP or metrics.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Setting(String),
}

/// Whether a bind failed because the host has no IPv6 at all.
fn no_ipv6(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EAFNOSUPPORT | nix::libc::EADDRNOTAVAIL)
    )
}

/// A running server; dropping it does not stop it, call [`Running::shutdown`].
pub struct Running {
    /// Bound UDP address.
    pub udp: SocketAddr,
    /// Bound TCP address (same port as UDP).
    pub tcp: SocketAddr,
    /// Bound metrics address.
    pub metrics: Option<SocketAddr>,
    shared: Arc<ServerState>,
    tasks: Vec<JoinHandle<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// A handle on each worker's socket, to wake its reader at shutdown.
    udp_socks: Vec<std::net::UdpSocket>,
    stop: Arc<AtomicBool>,
    admin_stop: CancellationToken,
}

impl Running {
    /// Whether the first sync is done (queries in the zone no longer get SERVFAIL).
    pub fn ready(&self) -> bool {
        self.shared.zone.load().ready()
    }

    /// The current zone snapshot (for tests and diagnostics).
    pub fn zone(&self) -> Arc<Zone> {
        self.shared.zone.load_full()
    }

    /// The metrics (for tests and diagnostics).
    pub fn metrics_handle(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// Stops every task and thread and closes the sockets.
    pub async fn shutdown(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.admin_stop.cancel();
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        // Wake the blocked UDP workers (bounded: a worker that never wakes is left
        // behind, not waited for).
        for s in &self.udp_socks {
            server::wake(s);
        }
        for _ in 0..100 {
            if self.threads.iter().all(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for t in self.threads.into_iter().filter(|t| t.is_finished()) {
            let _ = t.join();
        }
    }
}

/// Binds the listeners and starts watching; returns once the sockets are bound (the
/// zone answers SERVFAIL until the first sync, see [`Running::ready`]).
pub async fn start(client: kube::Client, cfg: Config) -> anyhow::Result<Running> {
    Ok(start_inner(client, cfg).await?)
}

async fn start_inner(client: kube::Client, cfg: Config) -> Result<Running, Error> {
    if cfg.workers == 0 {
        return Err(Error::Setting("workers must be at least 1".into()));
    }
    if cfg.max_udp_payload < 512 {
        return Err(Error::Setting(
            "max_udp_payload must be at least 512".into(),
        ));
    }
    if cfg.max_tcp_connections == 0 || cfg.max_tcp_connections_per_client == 0 {
        return Err(Error::Setting(
            "TCP connection limits must be at least 1".into(),
        ));
    }
    if cfg.tcp_idle_timeout.is_zero() || cfg.tcp_query_timeout.is_zero() {
        return Err(Error::Setting("TCP timeouts must be above zero".into()));
    }
    if cfg.max_concurrent_forwards == 0
        || cfg.max_concurrent_forwards > tokio::sync::Semaphore::MAX_PERMITS
    {
        return Err(Error::Setting(format!(
            "max_concurrent_forwards must be between 1 and {}",
            tokio::sync::Semaphore::MAX_PERMITS
        )));
    }
    let zone_cfg = ZoneConfig {
        zone: cfg.zone.clone(),
        ttl: cfg.ttl,
        nameservers: if cfg.nameservers.is_empty() {
            default_nameservers(cfg.listen.ip())
        } else {
            cfg.nameservers.clone()
        },
    };
    let zone = Zone::unsynced(&zone_cfg)?;
    let (udp, tcp) = match server::bind(cfg.listen, cfg.workers).await {
        // `::` (the deployment's) on a host without IPv6 (booted with ipv6.disable=1):
        // IPv4 only, rather than not at all.
        Err(Error::Bind { source, .. })
            if cfg.listen.ip() == IpAddr::from(Ipv6Addr::UNSPECIFIED) && no_ipv6(&source) =>
        {
            let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, cfg.listen.port()));
            tracing::warn!(listen = %cfg.listen, error = %source, fallback = %v4, "IPv6 is not available: listening on IPv4 only");
            server::bind(v4, cfg.workers).await?
        }
        bound => bound?,
    };
    let udp_addr = udp[0].local_addr().map_err(|source| Error::Bind {
        what: "UDP",
        addr: cfg.listen,
        source,
    })?;
    let tcp_addr = tcp.local_addr().map_err(|source| Error::Bind {
        what: "TCP",
        addr: cfg.listen,
        source,
    })?;
    let metrics_listener = match cfg.metrics {
        Some(addr) => {
            let bind = |addr| async move {
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| Error::Bind {
                        what: "metrics",
                        addr,
                        source,
                    })
            };
            Some(match bind(addr).await {
                // As for DNS: `::` on a host without IPv6 is IPv4 only.
                Err(Error::Bind { source, .. })
                    if addr.ip() == IpAddr::from(Ipv6Addr::UNSPECIFIED) && no_ipv6(&source) =>
                {
                    bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, addr.port()))).await?
                }
                bound => bound?,
            })
        }
        None => None,
    };
    let shared = Arc::new(ServerState {
        zone: ArcSwap::from_pointee(zone),
        metrics: Arc::new(Metrics::new()),
        settings: answer::Settings {
            forward: cfg.forward.is_some(),
            max_udp_payload: cfg.max_udp_payload,
        },
        forward: cfg.forward,
        forward_timeout: cfg.forward_timeout,
        forward_slots: Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrent_forwards)),
        tcp_idle_timeout: cfg.tcp_idle_timeout,
        tcp_query_timeout: cfg.tcp_query_timeout,
        // A new connection has the query timeout to begin its first query before it
        // counts as idle (and may be closed to make room).
        tcp_slots: Arc::new(tcp::Slots::new(
            cfg.max_tcp_connections,
            cfg.max_tcp_connections_per_client,
            cfg.tcp_query_timeout,
        )),
    });
    let mut tasks = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut udp_socks = Vec::new();
    let rt = tokio::runtime::Handle::current();
    for (i, sock) in udp.into_iter().enumerate() {
        let bind_err = |source| Error::Bind {
            what: "UDP",
            addr: cfg.listen,
            source,
        };
        udp_socks.push(sock.try_clone().map_err(bind_err)?);
        let (w_shared, w_stop, w_rt) = (shared.clone(), stop.clone(), rt.clone());
        // The batch buffers are made on the worker's thread (they are not Send); it
        // says whether that worked before serving.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let t = std::thread::Builder::new()
            .name(format!("dns-udp-{i}"))
            .spawn(move || match server::Batch::for_socket(&sock) {
                Ok(batch) => {
                    let _ = ready_tx.send(Ok(()));
                    server::udp_worker(sock, batch, w_shared, w_stop, w_rt);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::Setting(format!("starting a UDP worker thread: {e}")))?;
        threads.push(t);
        let failed = match ready_rx.await {
            Ok(Ok(())) => continue,
            Ok(Err(source)) => bind_err(source),
            Err(_) => Error::Setting("a UDP worker thread died at start".into()),
        };
        // Stop the workers already serving before giving up.
        stop.store(true, Ordering::Relaxed);
        udp_socks.iter().for_each(server::wake);
        return Err(failed);
    }
    tasks.push(tokio::spawn(tcp::accept(tcp, shared.clone())));
    let mut metrics_addr = None;
    let admin_stop = CancellationToken::new();
    if let Some(l) = metrics_listener {
        metrics_addr = l.local_addr().ok();
        let (m, s) = (shared.metrics.clone(), shared.clone());
        let endpoints = causeway_runtime::admin::Endpoints {
            metrics: Arc::new(move || m.encode()),
            ready: causeway_runtime::admin::ready_when(
                move || s.zone.load().ready(),
                "waiting for the first list of ServiceImports and EndpointSlices",
            ),
        };
        tasks.push(causeway_runtime::admin::serve(
            l,
            endpoints,
            admin_stop.clone(),
        ));
    }
    tasks.push(tokio::spawn(watch::run(
        client,
        shared.clone(),
        zone_cfg,
        cfg.rebuild_debounce,
    )));
    tracing::info!(udp = %udp_addr, tcp = %tcp_addr, zone = %cfg.zone, "causeway-dns listening");
    Ok(Running {
        udp: udp_addr,
        tcp: tcp_addr,
        metrics: metrics_addr,
        shared,
        tasks,
        threads,
        udp_socks,
        admin_stop,
        stop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_nameserver_is_the_listen_address_or_a_real_local_one() {
        let ip: IpAddr = "127.0.0.7".parse().unwrap();
        assert_eq!(default_nameservers(ip), [ip]);
        let ip: IpAddr = "::1".parse().unwrap();
        assert_eq!(default_nameservers(ip), [ip]);
        for any in [
            IpAddr::from(Ipv4Addr::UNSPECIFIED),
            Ipv6Addr::UNSPECIFIED.into(),
        ] {
            let got = default_nameservers(any);
            assert!(!got.is_empty(), "{any}");
            assert!(got.iter().all(|ip| !ip.is_unspecified()), "{any}: {got:?}");
            // Loopback only alone (no routed address), in the listen family.
            if got.iter().any(|ip| ip.is_loopback()) {
                assert_eq!(got.len(), 1, "{any}: {got:?}");
                assert_eq!(got[0].is_ipv4(), any.is_ipv4(), "{any}: same family");
            }
            if any.is_ipv4() {
                assert!(got.iter().all(|ip| ip.is_ipv4()), "0.0.0.0 is IPv4 only");
            }
        }
    }

    /// An IPv6-only pod listening on `::` advertises its pod IP; an IPv4-only one its
    /// IPv4 address (reached through the dual-stack socket), never loopback.
    #[test]
    fn default_nameservers_never_advertise_loopback_when_an_address_is_routed() {
        let any4 = IpAddr::from(Ipv4Addr::UNSPECIFIED);
        let any6 = IpAddr::from(Ipv6Addr::UNSPECIFIED);
        let (v4, v6): (IpAddr, IpAddr) = ("10.1.2.3".parse().unwrap(), "fd00::3".parse().unwrap());
        let lo4 = IpAddr::from(Ipv4Addr::LOCALHOST);
        let lo6 = IpAddr::from(Ipv6Addr::LOCALHOST);
        let cases = [
            (any6, Some(v4), Some(v6), vec![v6, v4]),
            (any6, None, Some(v6), vec![v6]),
            (any6, Some(v4), None, vec![v4]),
            (any6, Some(v4), Some(lo6), vec![v4]),
            (any6, None, None, vec![lo6]),
            (any4, Some(v4), None, vec![v4]),
            (any4, Some(lo4), None, vec![lo4]),
            (any4, None, None, vec![lo4]),
        ];
        for (listen, found4, found6, want) in cases {
            assert_eq!(
                pick_nameservers(listen, found4, found6),
                want,
                "{listen} {found4:?} {found6:?}"
            );
        }
    }
}
