//! Prometheus metrics (served on `/metrics` by the shared admin listener).
//!
//! Query counters are created up front for every (type, rcode) pair and kept in a
//! flat table, so counting a query is one atomic add, never a label-map lookup.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::answer::{Outcome, rcode};
use crate::index::rtype;

const QTYPES: [&str; 8] = ["A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "other"];
const RCODES: [&str; 9] = [
    "NOERROR", "NODATA", "NXDOMAIN", "SERVFAIL", "REFUSED", "FORMERR", "NOTIMP", "BADVERS", "other",
];

type Labels = Vec<(String, String)>;

/// All metrics of one server.
pub struct Metrics {
    registry: Registry,
    queries: Vec<Counter>,
    latency: Histogram,
    truncated: Counter,
    dropped: Counter,
    forwarded: Counter,
    forward_failures: Counter,
    tcp_timeouts: Counter,
    tcp_refused: Counter,
    /// Index swaps.
    pub swaps: Counter,
    /// Index build time.
    pub build_seconds: Histogram,
    /// Resource records in the current index.
    pub records: Gauge,
    /// Names in the current index.
    pub names: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("causeway_dns");
        let family = Family::<Labels, Counter>::default();
        let mut queries = Vec::with_capacity(QTYPES.len() * RCODES.len());
        for t in QTYPES {
            for r in RCODES {
                let labels = vec![("qtype".into(), t.into()), ("rcode".into(), r.into())];
                queries.push(family.get_or_create(&labels).clone());
            }
        }
        registry.register(
            "queries",
            "DNS queries answered, by question type and response code",
            family,
        );
        let latency = Histogram::new(exponential_buckets(0.000_002, 2.0, 16));
        registry.register(
            "query_duration_seconds",
            "Time to answer a query (server side, excluding I/O)",
            latency.clone(),
        );
        let truncated = Counter::default();
        registry.register(
            "truncated",
            "UDP answers sent with TC because they did not fit",
            truncated.clone(),
        );
        let dropped = Counter::default();
        registry.register(
            "dropped",
            "Packets dropped without an answer (not a query, or shorter than a header)",
            dropped.clone(),
        );
        let forwarded = Counter::default();
        registry.register(
            "forwarded",
            "Out-of-zone queries relayed to --forward",
            forwarded.clone(),
        );
        let forward_failures = Counter::default();
        registry.register(
            "forward_failures",
            "Forwarded queries without an upstream answer",
            forward_failures.clone(),
        );
        let tcp_timeouts = Counter::default();
        registry.register(
            "tcp_timeouts",
            "TCP connections closed for idleness or slowness",
            tcp_timeouts.clone(),
        );
        let tcp_refused = Counter::default();
        registry.register(
            "tcp_refused",
            "TCP connections closed at accept: over --tcp-max-connections or --tcp-max-connections-per-client",
            tcp_refused.clone(),
        );
        let swaps = Counter::default();
        registry.register(
            "index_swaps",
            "Zone index snapshots published",
            swaps.clone(),
        );
        let build_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "index_build_seconds",
            "Time to build a zone index snapshot",
            build_seconds.clone(),
        );
        let records = Gauge::default();
        registry.register(
            "index_records",
            "Resource records in the current zone index",
            records.clone(),
        );
        let names = Gauge::default();
        registry.register(
            "index_names",
            "Names (empty non-terminals included) in the current zone index",
            names.clone(),
        );
        Metrics {
            registry,
            queries,
            latency,
            truncated,
            dropped,
            forwarded,
            forward_failures,
            tcp_timeouts,
            tcp_refused,
            swaps,
            build_seconds,
            records,
            names,
        }
    }

    /// Counts one handled packet.
    pub fn record(&self, outcome: &Outcome, elapsed: Duration) {
        match *outcome {
            Outcome::Reply {
                qtype,
                rcode: rc,
                nodata,
                truncated,
            } => {
                let t = match qtype {
                    rtype::A => 0,
                    rtype::AAAA => 1,
                    rtype::SRV => 2,
                    rtype::TXT => 3,
                    rtype::SOA => 4,
                    rtype::NS => 5,
                    rtype::ANY => 6,
                    _ => 7,
                };
                let r = match rc {
                    0 if nodata => 1,
                    0 => 0,
                    x if x == rcode::NXDOMAIN as u16 => 2,
                    x if x == rcode::SERVFAIL as u16 => 3,
                    x if x == rcode::REFUSED as u16 => 4,
                    x if x == rcode::FORMERR as u16 => 5,
                    x if x == rcode::NOTIMP as u16 => 6,
                    rcode::BADVERS => 7,
                    _ => 8,
                };
                if let Some(c) = self.queries.get(t * RCODES.len() + r) {
                    c.inc();
                }
                if truncated {
                    self.truncated.inc();
                }
                self.latency.observe(elapsed.as_secs_f64());
            }
            Outcome::Forward { .. } => {
                self.forwarded.inc();
            }
            Outcome::Drop => {
                self.dropped.inc();
            }
        }
    }

    /// Counts a forwarded query that got no answer.
    pub fn forward_failed(&self) {
        self.forward_failures.inc();
    }

    /// Counts a TCP connection closed on timeout.
    pub fn tcp_timeout(&self) {
        self.tcp_timeouts.inc();
    }

    /// Counts a TCP connection refused by the connection limits.
    pub fn tcp_refused(&self) {
        self.tcp_refused.inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}
