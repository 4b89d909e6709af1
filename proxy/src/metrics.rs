//! Prometheus metrics (prometheus-client). Per-backend handles are resolved when a
//! route table is built, so a request only bumps atomics.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    mci: String,
    backend: String,
    cluster: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    mci: String,
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    code: String,
    reason: String,
}

/// All proxy metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<BackendLabels, Histogram>,
    retries: Family<BackendLabels, Counter>,
    proxy_errors: Family<ReasonLabels, Counter>,
    /// Upstream connections opened.
    pub upstream_connects: Counter,
    /// Upstream connections open now.
    pub upstream_open: Gauge,
    /// Upstream connect failures.
    pub upstream_connect_errors: Counter,
    /// Upstream HTTP/2 connections open now (also counted in `upstream_open`).
    pub upstream_h2_open: Gauge,
    /// Streams (requests) open on upstream HTTP/2 connections now.
    pub upstream_h2_streams: Gauge,
    /// Outlier ejections.
    pub ejections: Counter,
    /// Retries refused by the retry budget.
    pub retries_exhausted: Counter,
    /// Route table rebuilds.
    pub rebuilds: Counter,
    /// Route table build time.
    pub build_seconds: Histogram,
    /// Path rules in the current table.
    pub routes: Gauge,
    /// Endpoints in the current table.
    pub endpoints: Gauge,
    /// MCIs served by the current table.
    pub mcis: Gauge,
    /// Downstream connections open now.
    pub downstream_open: Gauge,
}

/// Status classes with pre-created counters.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Request counters of one backend in one cluster, by status class.
#[derive(Clone, Debug, Default)]
pub struct ClusterCounters {
    by_class: [Counter; 5],
}

impl ClusterCounters {
    /// Counts a response status.
    pub fn count(&self, status: u16) {
        let i = (status / 100).clamp(1, 5) as usize - 1;
        self.by_class[i].inc();
    }
}

/// The handles one backend uses.
#[derive(Clone, Debug)]
pub struct BackendMetrics {
    /// Per cluster (same order as the balancer's groups; looked up by name).
    pub clusters: Vec<(Arc<str>, ClusterCounters)>,
    /// Time to the response head.
    pub latency: Histogram,
    /// Retries.
    pub retries: Counter,
}

fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 16)
}

impl BackendMetrics {
    /// The counters of `cluster`.
    pub fn cluster(&self, cluster: &str) -> Option<&ClusterCounters> {
        self.clusters
            .iter()
            .find(|(c, _)| &**c == cluster)
            .map(|(_, m)| m)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("causeway_proxy");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests proxied, by MCI, backend, cluster and status class",
            requests.clone(),
        );
        let latency_f = Family::<BackendLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(latency_buckets())) as fn() -> Histogram,
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to upstream response head",
            latency_f.clone(),
        );
        let retries = Family::<BackendLabels, Counter>::default();
        registry.register("retries", "Retries on another endpoint", retries.clone());
        let proxy_errors = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "proxy_responses",
            "Responses the proxy answered itself (no route, no endpoints, upstream errors)",
            proxy_errors.clone(),
        );
        let mut m = Metrics {
            requests,
            latency: latency_f,
            retries,
            proxy_errors,
            upstream_connects: Counter::default(),
            upstream_open: Gauge::default(),
            upstream_connect_errors: Counter::default(),
            upstream_h2_open: Gauge::default(),
            upstream_h2_streams: Gauge::default(),
            ejections: Counter::default(),
            retries_exhausted: Counter::default(),
            rebuilds: Counter::default(),
            build_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            routes: Gauge::default(),
            endpoints: Gauge::default(),
            mcis: Gauge::default(),
            downstream_open: Gauge::default(),
            registry,
        };
        let r = &mut m.registry;
        r.register(
            "upstream_connects",
            "Upstream connections opened",
            m.upstream_connects.clone(),
        );
        r.register(
            "upstream_connections",
            "Upstream connections open",
            m.upstream_open.clone(),
        );
        r.register(
            "upstream_connect_errors",
            "Upstream connection attempts that failed",
            m.upstream_connect_errors.clone(),
        );
        r.register(
            "upstream_h2_connections",
            "Upstream HTTP/2 connections open (shared by concurrent requests)",
            m.upstream_h2_open.clone(),
        );
        r.register(
            "upstream_h2_streams",
            "Requests open on upstream HTTP/2 connections",
            m.upstream_h2_streams.clone(),
        );
        r.register(
            "ejections",
            "Endpoints ejected by outlier detection",
            m.ejections.clone(),
        );
        r.register(
            "retries_exhausted",
            "Retries refused because the retry budget was spent",
            m.retries_exhausted.clone(),
        );
        r.register("table_rebuilds", "Route table rebuilds", m.rebuilds.clone());
        r.register(
            "table_build_seconds",
            "Route table build time",
            m.build_seconds.clone(),
        );
        r.register(
            "table_routes",
            "Path rules in the route table",
            m.routes.clone(),
        );
        r.register(
            "table_endpoints",
            "Endpoints in the route table",
            m.endpoints.clone(),
        );
        r.register("table_mcis", "MultiClusterIngresses served", m.mcis.clone());
        r.register(
            "downstream_connections",
            "Client connections open",
            m.downstream_open.clone(),
        );
        m
    }

    /// Handles for one backend (resolved at table-build time).
    pub fn backend(&self, mci: &str, backend: &str, clusters: &[Arc<str>]) -> BackendMetrics {
        let clusters = clusters
            .iter()
            .map(|c| {
                let by_class = CLASSES.map(|code| {
                    self.requests
                        .get_or_create(&RequestLabels {
                            mci: mci.to_string(),
                            backend: backend.to_string(),
                            cluster: c.to_string(),
                            code: code.to_string(),
                        })
                        .clone()
                });
                (c.clone(), ClusterCounters { by_class })
            })
            .collect();
        let labels = BackendLabels {
            mci: mci.to_string(),
            backend: backend.to_string(),
        };
        BackendMetrics {
            clusters,
            latency: self.latency.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
        }
    }

    /// Drops the series of `backend` of `mci` for `clusters` (all its series when
    /// `whole`: latency and retries too), so backends and clusters that left the route
    /// table do not stay in `/metrics` forever. Handles still held by in-flight
    /// requests keep working; they just are not exported any more.
    pub fn forget(&self, mci: &str, backend: &str, clusters: &[Arc<str>], whole: bool) {
        for c in clusters {
            for code in CLASSES {
                self.requests.remove(&RequestLabels {
                    mci: mci.to_string(),
                    backend: backend.to_string(),
                    cluster: c.to_string(),
                    code: code.to_string(),
                });
            }
        }
        if whole {
            let labels = BackendLabels {
                mci: mci.to_string(),
                backend: backend.to_string(),
            };
            self.latency.remove(&labels);
            self.retries.remove(&labels);
        }
    }

    /// Counts a response the proxy made itself.
    pub fn proxy_response(&self, code: u16, reason: &'static str) {
        self.proxy_errors
            .get_or_create(&ReasonLabels {
                code: code.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut s, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        s
    }
}
