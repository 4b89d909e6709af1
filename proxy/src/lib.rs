//! causeway-proxy: the MultiClusterIngress L7 reverse proxy.
//!
//! Hub objects (MultiClusterIngress, IngressClass, ServiceImport, ExportedService,
//! EndpointSlice, TLS Secrets) are watched ([`watch`]) and turned by a pure function
//! ([`table::build`]) into an immutable [`table::RouteTable`], swapped in with
//! `arc-swap`. Requests match host and path ([`matching`], MCI-5) — or, on a mesh port
//! (`--listen-mesh`, GW-4: [`mesh`] opens one listener per port the table names), the
//! mesh routes captured there — pick an endpoint
//! ([`balance`]: cluster locality, P2C over peak-EWMA, round robin, least request,
//! Maglev), and are forwarded over pooled upstream connections ([`forward`]).
//!
//! Embedding (causeway-local, tests): [`start`] with a hub [`kube::Client`] and a
//! [`Config`]; the returned [`Running`] reports the bound addresses and readiness and
//! shuts down gracefully.

pub mod annotations;
pub mod balance;
pub mod circuit;
pub mod clock;
pub mod endpoint;
pub mod forward;
pub mod gateway;
pub mod grpc;
pub mod h1;
pub mod headers;
pub mod health;
pub mod lease;
pub mod matching;
mod mesh;
pub mod metrics;
pub mod pipeline;
mod refusal;
pub mod retry;
pub mod server;
pub mod table;
pub mod target;
pub mod tls;
pub mod upstream;
mod wake;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use annotations::Defaults;
pub use health::Outlier;
pub use pipeline::Limits;

/// How to run a proxy.
#[derive(Clone, Debug)]
pub struct Config {
    /// The proxy's own cluster id: its endpoints are priority 0, the others spill-over.
    pub cluster: Option<String>,
    /// Name in the Lease `causeway-proxy-<name>` (default: `cluster`, else the hostname).
    pub name: Option<String>,
    /// Plain HTTP listener (HTTP/1.1 and h2c prior knowledge).
    pub listen_http: SocketAddr,
    /// HTTPS listener (None: no TLS).
    pub listen_https: Option<SocketAddr>,
    /// Admin listener: /metrics, /healthz, /readyz (None: off).
    pub metrics: Option<SocketAddr>,
    /// Where mesh traffic is served (GW-4): an IP and the range of mesh ports the
    /// Gateway API controller may give captured ServiceImport ports (None: no mesh).
    pub listen_mesh: Option<(std::net::IpAddr, std::ops::RangeInclusive<u16>)>,
    /// Addresses published on the Lease (default: the HTTP listener's IP, or the
    /// hostname when it listens on a wildcard address).
    pub publish_addresses: Vec<String>,
    /// Keep a hub Lease for the MCI controller.
    pub publish_lease: bool,
    /// Default certificate and key (PEM); None: a self-signed one for `localhost`.
    pub default_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// Timeouts, retries and circuit limits annotations override.
    pub defaults: Defaults,
    /// Passive outlier ejection.
    pub outlier: Outlier,
    /// Listener limits (header size, header-read timeout, drain time).
    pub limits: Limits,
    /// Retry budget: share of requests that may be retried.
    pub retry_budget_percent: f64,
    /// Retry budget: retries per second always allowed.
    pub retry_budget_min_per_sec: u64,
    /// Wait after a hub change before rebuilding (changes in between are merged).
    pub debounce: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster: None,
            name: None,
            listen_http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            listen_https: None,
            metrics: Some(SocketAddr::from(([127, 0, 0, 1], 9091))),
            listen_mesh: None,
            publish_addresses: Vec::new(),
            publish_lease: true,
            default_cert: None,
            defaults: Defaults::default(),
            outlier: Outlier::default(),
            limits: Limits::default(),
            retry_budget_percent: 0.2,
            retry_budget_min_per_sec: 10,
            debounce: Duration::from_millis(30),
        }
    }
}

/// A running proxy.
pub struct Running {
    /// Bound HTTP address.
    pub http: SocketAddr,
    /// Bound HTTPS address.
    pub https: Option<SocketAddr>,
    /// Bound admin address.
    pub metrics: Option<SocketAddr>,
    ready: Arc<AtomicBool>,
    table: Arc<ArcSwap<table::RouteTable>>,
    stop: CancellationToken,
    /// The admin listener outlives the drain (so /readyz can say "draining").
    admin_stop: CancellationToken,
    servers: Vec<JoinHandle<()>>,
    tunnels: pipeline::Drain,
    drain_timeout: Duration,
    admin: Option<JoinHandle<()>>,
    lease: Option<JoinHandle<()>>,
}

impl Running {
    /// Hub caches synced and the first route table built.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The current route table (for inspection).
    pub fn table(&self) -> Arc<table::RouteTable> {
        self.table.load_full()
    }

    /// Reports not ready, stops accepting, drains open connections and WebSocket
    /// tunnels (up to the drain timeout, then cuts them), deletes the Lease, then stops
    /// the admin listener.
    pub async fn shutdown(mut self) {
        self.ready.store(false, Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        self.stop.cancel();
        for s in std::mem::take(&mut self.servers) {
            let _ = s.await;
        }
        // WebSocket tunnels get what is left of the drain time.
        let left = self.drain_timeout.saturating_sub(started.elapsed());
        self.tunnels.finish(left, "WebSocket tunnels").await;
        if let Some(l) = self.lease.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), l).await;
        }
        self.admin_stop.cancel();
        if let Some(a) = self.admin.take() {
            let _ = a.await;
        }
    }
}

impl Drop for Running {
    /// Dropped without [`Running::shutdown`]: stop everything without waiting.
    fn drop(&mut self) {
        self.stop.cancel();
        self.admin_stop.cancel();
        self.tunnels.cut();
    }
}

fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} listener on {addr}"))
}

/// Starts watching the hub and serving.
pub async fn start(hub: kube::Client, cfg: Config) -> anyhow::Result<Running> {
    if let Some((ip, range)) = &cfg.listen_mesh {
        for (what, addr) in [("HTTP", Some(cfg.listen_http)), ("HTTPS", cfg.listen_https)] {
            if let Some(a) = addr
                && range.contains(&a.port())
                && (a.ip() == *ip || a.ip().is_unspecified())
            {
                anyhow::bail!(
                    "the --listen-mesh range {}-{} on {ip} holds the {what} listener's port {}: give the mesh ports a range of their own",
                    range.start(),
                    range.end(),
                    a.port()
                );
            }
        }
    }
    let stop = CancellationToken::new();
    let http_l = bind(cfg.listen_http, "HTTP").await?;
    let http = http_l.local_addr()?;
    let https_l = match cfg.listen_https {
        Some(a) => Some(bind(a, "HTTPS").await?),
        None => None,
    };
    let https = https_l.as_ref().map(|l| l.local_addr()).transpose()?;
    let admin_l = match cfg.metrics {
        Some(a) => Some(bind(a, "metrics").await?),
        None => None,
    };
    let metrics_addr = admin_l.as_ref().map(|l| l.local_addr()).transpose()?;

    let metrics = Arc::new(metrics::Metrics::new());
    let shared = Arc::new(table::Registries::new(metrics.clone()));
    let table = Arc::new(ArcSwap::from_pointee(table::RouteTable::default()));
    let ready = Arc::new(AtomicBool::new(false));
    let resolver = match &https_l {
        None => None,
        Some(_) => {
            let ck = match &cfg.default_cert {
                Some((c, k)) => tls::certified_key(c, k).context("the default certificate")?,
                None => tls::self_signed()?,
            };
            Some(Arc::new(tls::Resolver::new(ck)))
        }
    };

    let caches = watch::Caches::start(&hub, &stop, resolver.is_some());
    let opts = table::BuildOptions {
        local_cluster: cfg.cluster.clone(),
        defaults: cfg.defaults.clone(),
    };
    let (tls_problems, tls_watch) = tokio::sync::watch::channel(Default::default());
    let (built, built_watch) = tokio::sync::watch::channel(0);
    let targets = watch::Targets {
        table: table.clone(),
        resolver: resolver.clone(),
        ready: ready.clone(),
        tls_problems,
        built,
    };
    tokio::spawn(watch::run(
        caches,
        opts,
        shared.clone(),
        targets,
        cfg.debounce,
        stop.clone(),
    ));
    tokio::spawn(health::run_active(
        table.clone(),
        metrics.clone(),
        stop.clone(),
    ));
    tokio::spawn(reap_idle(shared.clone(), stop.clone()));

    let proxy = Arc::new(pipeline::Proxy {
        table: table.clone(),
        metrics: metrics.clone(),
        outlier: cfg.outlier.clone(),
        budget: retry::Budget::new(cfg.retry_budget_percent, cfg.retry_budget_min_per_sec),
        https_port: https.map(|a| a.port()),
        tunnels: pipeline::Drain::default(),
    });
    let mut servers = vec![tokio::spawn(server::serve(
        http_l,
        None,
        None,
        proxy.clone(),
        cfg.limits.clone(),
        stop.clone(),
    ))];
    if let (Some(l), Some(r)) = (https_l, resolver) {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(r)?));
        servers.push(tokio::spawn(server::serve(
            l,
            Some(acceptor),
            None,
            proxy.clone(),
            cfg.limits.clone(),
            stop.clone(),
        )));
    }
    if let Some(mesh) = cfg.listen_mesh.clone() {
        servers.push(tokio::spawn(mesh::run(
            table.clone(),
            built_watch,
            mesh,
            proxy.clone(),
            cfg.limits.clone(),
            stop.clone(),
        )));
    }
    let admin_stop = CancellationToken::new();
    let admin = admin_l.map(|l| {
        let (m, r) = (metrics.clone(), ready.clone());
        let endpoints = causeway_runtime::admin::Endpoints {
            metrics: Arc::new(move || m.encode()),
            ready: causeway_runtime::admin::ready_when(
                move || r.load(Ordering::Relaxed),
                "hub caches not synced, no route table yet, or draining",
            ),
        };
        causeway_runtime::admin::serve(l, endpoints, admin_stop.clone())
    });
    let lease = cfg.publish_lease.then(|| {
        let name = cfg
            .name
            .clone()
            .or_else(|| cfg.cluster.clone())
            .or_else(hostname)
            .unwrap_or_else(|| "proxy".into());
        let addresses = if cfg.publish_addresses.is_empty() {
            // A wildcard listen address says nothing to clients: publish the hostname.
            match http.ip().is_unspecified().then(hostname).flatten() {
                Some(h) => h,
                None => http.ip().to_string(),
            }
        } else {
            cfg.publish_addresses.join(",")
        };
        let ports = causeway_crds::mci::lease::ports_text(http.port(), https.map(|h| h.port()));
        let mesh = cfg
            .listen_mesh
            .as_ref()
            .map(|(ip, r)| causeway_crds::gateway::mesh::format_proxy_mesh(*ip, r));
        tokio::spawn(lease::run(
            hub.clone(),
            name,
            addresses,
            ports,
            mesh,
            tls_watch,
            stop.clone(),
        ))
    });
    tracing::info!(%http, ?https, metrics = ?metrics_addr, "causeway-proxy serving");
    Ok(Running {
        http,
        https,
        metrics: metrics_addr,
        ready,
        table,
        stop,
        admin_stop,
        servers,
        tunnels: proxy.tunnels.clone(),
        drain_timeout: cfg.limits.drain_timeout,
        admin,
        lease,
    })
}

/// Closes upstream keep-alive connections idle past their timeout, once a second.
async fn reap_idle(shared: Arc<table::Registries>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => shared.endpoints.reap_idle(clock::now_nanos()),
            _ = stop.cancelled() => return,
        }
    }
}
