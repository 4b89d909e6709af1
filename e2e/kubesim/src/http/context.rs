//! What every request of one server shares: the config it was started with, its
//! state behind one lock, fault knobs, tokens, PKI, metrics and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::http::auth::User;
use crate::http::metrics::Metrics;
use crate::http::tls::Pki;
use crate::state::cluster::State;
use crate::state::ipam::Cidr;
use crate::state::sim::nodes::NodeCapacity;

/// How to start a server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Cluster name (CA name, kubeconfig context, stable kube-system uid seed).
    pub name: String,
    /// Listen address; port 0 picks a free one.
    pub bind: SocketAddr,
    /// Serve TLS (default). Plain HTTP is for quick debugging.
    pub tls: bool,
    /// Service CIDRs, primary family first (one or two).
    pub service_cidrs: Vec<Cidr>,
    /// Bearer tokens. An admin token is generated when none is given.
    pub tokens: Vec<(String, User)>,
    /// Let unauthenticated requests in as `system:anonymous` (still subject to RBAC).
    pub allow_anonymous: bool,
    /// Events kept for watches; older resourceVersions answer 410 Gone.
    pub history_limit: usize,
    /// Run what kube-controller-manager, kube-scheduler and kubelets would: Deployments
    /// make ReplicaSets make Pods (StatefulSets, DaemonSets and Jobs make Pods), Pods are
    /// placed on nodes with room for their requests, and workload status counts the
    /// placed, ready ones (see [`crate::state::sim`]).
    pub simulate_workloads: bool,
    /// Number of Ready nodes to create at start (`<name>-node-<i>`).
    pub nodes: usize,
    /// Capacity (and allocatable) of each node created at start.
    pub node_capacity: NodeCapacity,
    /// `topology.kubernetes.io/region` of the nodes.
    pub region: String,
    /// `topology.kubernetes.io/zone` of the nodes, taken round-robin (at least one).
    pub zones: Vec<String>,
    /// How often watches with allowWatchBookmarks get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Largest accepted request body.
    pub max_body: usize,
    /// Reported by `/version`.
    pub kubernetes_version: String,
    /// Keep objects in a journal here and reload them at start (None: memory only).
    pub data_dir: Option<std::path::PathBuf>,
    /// Carry Service traffic as kube-proxy would, for ClusterIPs on 127.0.0.0/8 (give
    /// the cluster a loopback service CIDR): see [`crate::http::service_proxy`].
    pub service_proxy: bool,
}

impl Config {
    /// Defaults for a named cluster on 127.0.0.1 with a free port.
    pub fn new(name: &str) -> Self {
        Config {
            name: name.to_string(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: true,
            service_cidrs: vec!["10.96.0.0/16".parse().expect("valid default CIDR")],
            tokens: Vec::new(),
            allow_anonymous: false,
            history_limit: 50_000,
            simulate_workloads: false,
            nodes: 1,
            node_capacity: NodeCapacity::default(),
            region: "local".into(),
            zones: vec![format!("{name}-a")],
            bookmark_interval: Duration::from_secs(5),
            max_body: 3 * 1024 * 1024,
            kubernetes_version: "v1.33.0".into(),
            data_dir: None,
            service_proxy: false,
        }
    }
}

/// Runtime fault injection, to simulate an unhealthy or unreachable member.
#[derive(Debug, Default)]
pub struct Faults {
    not_ready: AtomicBool,
    latency_ms: AtomicU64,
    drop_connections: AtomicBool,
    clock_ahead_s: AtomicU64,
}

impl Faults {
    /// Makes `/readyz` fail (true) or pass.
    pub fn set_not_ready(&self, v: bool) {
        self.not_ready.store(v, Ordering::SeqCst);
    }
    /// Adds latency to every request.
    pub fn set_latency(&self, d: Duration) {
        self.latency_ms
            .store(d.as_millis() as u64, Ordering::SeqCst);
    }
    /// Closes every new connection and request at once (an unreachable server).
    pub fn set_drop_connections(&self, v: bool) {
        self.drop_connections.store(v, Ordering::SeqCst);
    }
    /// Runs the server's clock ahead by `d` for what expires (requested ServiceAccount
    /// tokens), so tests see expiry without waiting.
    pub fn set_clock_ahead(&self, d: Duration) {
        self.clock_ahead_s.store(d.as_secs(), Ordering::SeqCst);
    }
    pub(crate) fn clock_ahead(&self) -> Duration {
        Duration::from_secs(self.clock_ahead_s.load(Ordering::SeqCst))
    }
    pub(crate) fn not_ready(&self) -> bool {
        self.not_ready.load(Ordering::SeqCst)
    }
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::SeqCst))
    }
    pub(crate) fn dropping(&self) -> bool {
        self.drop_connections.load(Ordering::SeqCst)
    }
}

/// Shared by every request of one server.
pub struct Inner {
    /// Config it was started with.
    pub cfg: Config,
    /// Objects, types, allocations.
    pub state: Mutex<State>,
    /// Fault knobs.
    pub faults: Faults,
    /// Bearer tokens (tests add and revoke them at run time).
    pub tokens: parking_lot::RwLock<Vec<(String, User)>>,
    /// PKI (None for plain HTTP).
    pub pki: Option<Arc<Pki>>,
    /// Cancelled at shutdown.
    pub shutdown: CancellationToken,
    /// Wakes the in-process controllers (GC, namespaces, workloads).
    pub changed: tokio::sync::Notify,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// Signs the ServiceAccount tokens TokenRequest issues (see [`crate::http::tokens`]).
    pub sa_key: [u8; 32],
}
