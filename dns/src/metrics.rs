//! Prometheus metrics (served on `/metrics` by the shared admin listener).
//!
//! Query counters are created up front for every (type, rcode) pair and kept in a
//! flat table, never a label-map lookup. The UDP workers count into a [`Tally`] of their
//! own (plain additions) and add it to the shared metrics once per batch of datagrams
//! ([`Metrics::flush`]): no lock and no shared atomic per packet. The latency histogram
//! is made of atomics ([`LatencyHistogram`]); prometheus-client's takes a lock per
//! observation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::MetricType;
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

/// Upper bound of the first latency bucket; each next bucket doubles it.
const LATENCY_FIRST_NS: u64 = 2_000;
/// Latency buckets with a finite bound (2 µs … 65.5 ms), then +Inf.
const LATENCY_BUCKETS: usize = 16;

/// The latency bucket of `ns` nanoseconds: the first whose bound is at least `ns`
/// (`LATENCY_BUCKETS` is +Inf).
fn latency_bucket(ns: u64) -> usize {
    let over = ns.saturating_sub(1) / LATENCY_FIRST_NS;
    ((u64::BITS - over.leading_zeros()) as usize).min(LATENCY_BUCKETS)
}

/// A query latency histogram of atomics, encoded like prometheus-client's.
#[derive(Clone, Debug, Default)]
struct LatencyHistogram(Arc<LatencyCells>);

#[derive(Debug, Default)]
struct LatencyCells {
    buckets: [AtomicU64; LATENCY_BUCKETS + 1],
    sum_ns: AtomicU64,
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut bound = LATENCY_FIRST_NS as f64 / 1e9;
        let mut count = 0;
        let mut buckets = Vec::with_capacity(LATENCY_BUCKETS + 1);
        for (i, cell) in self.0.buckets.iter().enumerate() {
            let n = cell.load(Ordering::Relaxed);
            count += n;
            // The last bound is +Inf, as in prometheus-client's own histogram.
            buckets.push((
                if i < LATENCY_BUCKETS {
                    bound
                } else {
                    f64::INFINITY
                },
                n,
            ));
            bound *= 2.0;
        }
        let sum = self.0.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Counts of one UDP worker since its last [`Metrics::flush`].
#[derive(Clone, Debug)]
pub struct Tally {
    queries: [u64; QUERY_CELLS],
    latency: [u64; LATENCY_BUCKETS + 1],
    latency_ns: u64,
    truncated: u64,
    dropped: u64,
    forwarded: u64,
    /// Which cells are non-zero: bit `i` for `queries[i]`, bit `QUERY_CELLS + j` for
    /// `latency[j]`, so a flush visits only those (a batch touches two or three).
    touched: u128,
}

const QUERY_CELLS: usize = QTYPES.len() * RCODES.len();
const _: () = assert!(QUERY_CELLS + LATENCY_BUCKETS < u128::BITS as usize);

impl Default for Tally {
    fn default() -> Self {
        Tally {
            queries: [0; QUERY_CELLS],
            latency: [0; LATENCY_BUCKETS + 1],
            latency_ns: 0,
            truncated: 0,
            dropped: 0,
            forwarded: 0,
            touched: 0,
        }
    }
}

impl Tally {
    /// Counts one handled packet.
    pub fn record(&mut self, outcome: &Outcome, elapsed: Duration) {
        match *outcome {
            Outcome::Reply {
                qtype,
                rcode: rc,
                nodata,
                truncated,
            } => {
                let cell = qtype_index(qtype) * RCODES.len() + rcode_index(rc, nodata);
                self.queries[cell] += 1;
                if truncated {
                    self.truncated += 1;
                }
                let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
                let bucket = latency_bucket(ns);
                self.latency[bucket] += 1;
                self.touched |= (1 << cell) | (1 << (QUERY_CELLS + bucket));
                self.latency_ns = self.latency_ns.saturating_add(ns);
            }
            Outcome::Forward { .. } => self.forwarded += 1,
            Outcome::Drop => self.dropped += 1,
        }
    }
}

fn qtype_index(qtype: u16) -> usize {
    match qtype {
        rtype::A => 0,
        rtype::AAAA => 1,
        rtype::SRV => 2,
        rtype::TXT => 3,
        rtype::SOA => 4,
        rtype::NS => 5,
        rtype::ANY => 6,
        _ => 7,
    }
}

fn rcode_index(rc: u16, nodata: bool) -> usize {
    match rc {
        0 if nodata => 1,
        0 => 0,
        x if x == rcode::NXDOMAIN as u16 => 2,
        x if x == rcode::SERVFAIL as u16 => 3,
        x if x == rcode::REFUSED as u16 => 4,
        x if x == rcode::FORMERR as u16 => 5,
        x if x == rcode::NOTIMP as u16 => 6,
        rcode::BADVERS => 7,
        _ => 8,
    }
}

/// All metrics of one server.
pub struct Metrics {
    registry: Registry,
    queries: Vec<Counter>,
    latency: LatencyHistogram,
    truncated: Counter,
    dropped: Counter,
    forwarded: Counter,
    forward_failures: Counter,
    forward_refused: Counter,
    tcp_timeouts: Counter,
    tcp_refused: Counter,
    tcp_evicted: Counter,
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
        let latency = LatencyHistogram::default();
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
            "Out-of-zone queries for --forward (those refused over --max-concurrent-forwards included)",
            forwarded.clone(),
        );
        let forward_failures = Counter::default();
        registry.register(
            "forward_failures",
            "Forwarded queries without a usable upstream answer (answered SERVFAIL)",
            forward_failures.clone(),
        );
        let forward_refused = Counter::default();
        registry.register(
            "forward_refused",
            "Out-of-zone queries answered REFUSED at once because --max-concurrent-forwards were waiting for the upstream",
            forward_refused.clone(),
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
            "TCP connections closed at accept: over --tcp-max-connections or --tcp-max-connections-per-client with no connection idle to close instead",
            tcp_refused.clone(),
        );
        let tcp_evicted = Counter::default();
        registry.register(
            "tcp_evicted",
            "TCP connections idle between queries closed to make room for a new one (over --tcp-max-connections or --tcp-max-connections-per-client)",
            tcp_evicted.clone(),
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
            forward_refused,
            tcp_timeouts,
            tcp_refused,
            tcp_evicted,
            swaps,
            build_seconds,
            records,
            names,
        }
    }

    /// Counts one handled packet at once (TCP; the UDP workers use a [`Tally`]).
    pub fn record(&self, outcome: &Outcome, elapsed: Duration) {
        let mut t = Tally::default();
        t.record(outcome, elapsed);
        self.flush(&mut t);
    }

    /// Adds a worker's counts to the shared metrics and zeroes them.
    pub fn flush(&self, t: &mut Tally) {
        let cells = &self.latency.0;
        let mut touched = t.touched;
        while touched != 0 {
            let i = touched.trailing_zeros() as usize;
            touched &= touched - 1;
            if i < QUERY_CELLS {
                self.queries[i].inc_by(std::mem::take(&mut t.queries[i]));
            } else {
                let j = i - QUERY_CELLS;
                cells.buckets[j].fetch_add(std::mem::take(&mut t.latency[j]), Ordering::Relaxed);
            }
        }
        t.touched = 0;
        if t.latency_ns > 0 {
            cells.sum_ns.fetch_add(t.latency_ns, Ordering::Relaxed);
        }
        for (c, n) in [
            (&self.truncated, t.truncated),
            (&self.dropped, t.dropped),
            (&self.forwarded, t.forwarded),
        ] {
            if n > 0 {
                c.inc_by(n);
            }
        }
        t.latency_ns = 0;
        t.truncated = 0;
        t.dropped = 0;
        t.forwarded = 0;
    }

    /// Counts a forwarded query that got no answer.
    pub fn forward_failed(&self) {
        self.forward_failures.inc();
    }

    /// Counts an out-of-zone query refused over the limit of concurrent forwards.
    pub fn forward_refused(&self) {
        self.forward_refused.inc();
    }

    /// Counts a TCP connection closed on timeout.
    pub fn tcp_timeout(&self) {
        self.tcp_timeouts.inc();
    }

    /// Counts a TCP connection refused by the connection limits.
    pub fn tcp_refused(&self) {
        self.tcp_refused.inc();
    }

    /// Counts an idle TCP connection closed to make room for a new one.
    pub fn tcp_evicted(&self) {
        self.tcp_evicted.inc();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_hold_values_up_to_their_bound() {
        // (nanoseconds, bucket): bucket k holds (2 µs × 2^(k-1), 2 µs × 2^k].
        for (ns, want) in [
            (0, 0),
            (1, 0),
            (2_000, 0),
            (2_001, 1),
            (4_000, 1),
            (4_001, 2),
            (65_536_000, 15),
            (65_536_001, 16),
            (u64::MAX, 16),
        ] {
            assert_eq!(latency_bucket(ns), want, "{ns} ns");
        }
    }

    #[test]
    fn a_flushed_tally_shows_in_the_text_and_is_zeroed() {
        let m = Metrics::new();
        let mut t = Tally::default();
        let a = Outcome::Reply {
            qtype: rtype::A,
            rcode: 0,
            nodata: false,
            truncated: false,
        };
        let nx = Outcome::Reply {
            qtype: rtype::AAAA,
            rcode: rcode::NXDOMAIN as u16,
            nodata: false,
            truncated: true,
        };
        t.record(&a, Duration::from_micros(1));
        t.record(&a, Duration::from_micros(3));
        t.record(&nx, Duration::from_secs(1));
        t.record(&Outcome::Drop, Duration::ZERO);
        // The last cell of the table (other type, other rcode).
        let odd = Outcome::Reply {
            qtype: 99,
            rcode: 9,
            nodata: false,
            truncated: false,
        };
        t.record(&odd, Duration::from_micros(3));
        assert!(!m.encode().contains(r#"qtype="A",rcode="NOERROR"} 2"#));
        m.flush(&mut t);
        assert_eq!(format!("{t:?}"), format!("{:?}", Tally::default()));
        m.flush(&mut t); // zeroed: a second flush adds nothing
        let text = m.encode();
        for line in [
            r#"causeway_dns_queries_total{qtype="A",rcode="NOERROR"} 2"#,
            r#"causeway_dns_queries_total{qtype="AAAA",rcode="NXDOMAIN"} 1"#,
            "causeway_dns_truncated_total 1",
            "causeway_dns_dropped_total 1",
            r#"causeway_dns_queries_total{qtype="other",rcode="other"} 1"#,
            "causeway_dns_query_duration_seconds_count 4",
            "causeway_dns_query_duration_seconds_sum 1.000007",
            r#"causeway_dns_query_duration_seconds_bucket{le="0.000002"} 1"#,
            r#"causeway_dns_query_duration_seconds_bucket{le="0.000004"} 3"#,
            r#"causeway_dns_query_duration_seconds_bucket{le="+Inf"} 4"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }
}
