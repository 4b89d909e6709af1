//! Per-endpoint state that must outlive route-table swaps: peak-EWMA latency, requests
//! in flight, and passive outlier-ejection counters. All atomics; the [`Registry`]
//! hands out one `Arc<Endpoint>` per address at table-build time, so the request path
//! never locks or hashes a map.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::clock::{nanos, now_nanos};

/// linkerd2-proxy's default RTT estimate for an endpoint without samples.
pub const DEFAULT_RTT: Duration = Duration::from_millis(30);
/// linkerd2-proxy's EWMA decay.
pub const DECAY: Duration = Duration::from_secs(10);

/// One upstream address (pod IP and target port).
#[derive(Debug)]
pub struct Endpoint {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The member cluster serving it.
    pub cluster: Arc<str>,
    pending: AtomicU32,
    /// f64 bits: peak-EWMA RTT in nanoseconds.
    ewma: AtomicU64,
    /// Last EWMA update (clock nanos).
    stamp: AtomicU64,
    consecutive_failures: AtomicU32,
    ejections: AtomicU32,
    /// Clock nanos until which the endpoint is ejected (0: not ejected).
    ejected_until: AtomicU64,
    /// Set by the active health check.
    unhealthy: AtomicBool,
    /// Idle keep-alive connections to this address.
    pub pool: crate::upstream::Pool,
}

impl Endpoint {
    /// A fresh endpoint with the default RTT estimate.
    pub fn new(addr: SocketAddr, cluster: Arc<str>) -> Self {
        Endpoint {
            addr,
            cluster,
            pending: AtomicU32::new(0),
            ewma: AtomicU64::new((DEFAULT_RTT.as_nanos() as f64).to_bits()),
            stamp: AtomicU64::new(now_nanos()),
            consecutive_failures: AtomicU32::new(0),
            ejections: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            unhealthy: AtomicBool::new(false),
            pool: Default::default(),
        }
    }

    /// Requests in flight.
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Relaxed)
    }

    /// Marks a request as started; the guard ends it (and records its RTT).
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.start_at(now_nanos())
    }

    /// [`start`](Self::start) with the clock already read.
    pub fn start_at(self: &Arc<Self>, now: u64) -> InFlight {
        self.pending.fetch_add(1, Ordering::Relaxed);
        InFlight {
            ep: self.clone(),
            start: now,
            done: false,
        }
    }

    /// The peak-EWMA RTT estimate decayed to `now` (nanoseconds).
    pub fn rtt_estimate(&self, now: u64) -> f64 {
        let ewma = f64::from_bits(self.ewma.load(Ordering::Relaxed));
        let stamp = self.stamp.load(Ordering::Relaxed);
        let elapsed = now.saturating_sub(stamp) as f64;
        // With no new samples the estimate decays towards zero, as in tower's PeakEwma.
        ewma * (-elapsed / DECAY.as_nanos() as f64).exp()
    }

    /// Peak-EWMA load: RTT estimate × (pending + 1).
    pub fn load(&self, now: u64) -> f64 {
        self.rtt_estimate(now).max(1.0) * (self.pending() as f64 + 1.0)
    }

    /// Records an RTT sample: a higher sample replaces the estimate (peak), a lower
    /// one is blended in with weight decaying over [`DECAY`].
    pub fn observe_rtt(&self, rtt_nanos: u64, now: u64) {
        let rtt = rtt_nanos as f64;
        let prev = self.rtt_estimate(now);
        let next = if rtt > prev {
            rtt
        } else {
            let stamp = self.stamp.load(Ordering::Relaxed);
            let elapsed = now.saturating_sub(stamp) as f64;
            let w = (-elapsed / DECAY.as_nanos() as f64).exp();
            prev * w + rtt * (1.0 - w)
        };
        self.ewma.store(next.to_bits(), Ordering::Relaxed);
        self.stamp.store(now, Ordering::Relaxed);
    }

    /// Not ejected and not failing its active health check.
    pub fn available(&self, now: u64) -> bool {
        !self.unhealthy.load(Ordering::Relaxed) && !self.is_ejected(now)
    }

    /// Ejected by outlier detection right now.
    pub fn is_ejected(&self, now: u64) -> bool {
        self.ejected_until.load(Ordering::Relaxed) > now
    }

    /// How many times this endpoint was ejected.
    pub fn ejections(&self) -> u32 {
        self.ejections.load(Ordering::Relaxed)
    }

    /// Failing its active health check.
    pub fn is_unhealthy(&self) -> bool {
        self.unhealthy.load(Ordering::Relaxed)
    }

    /// Sets the active-health-check verdict.
    pub fn set_unhealthy(&self, v: bool) {
        self.unhealthy.store(v, Ordering::Relaxed);
    }

    /// A success resets the consecutive-failure count.
    pub fn record_success(&self) {
        if self.consecutive_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }

    /// A failure (connect error, 5xx); returns the consecutive count.
    pub fn record_failure(&self) -> u32 {
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Ejects for `base × ejections` (capped at `max`); false when already ejected.
    pub fn eject(&self, now: u64, base: Duration, max: Duration) -> bool {
        if self.is_ejected(now) {
            return false;
        }
        let n = self.ejections.fetch_add(1, Ordering::Relaxed) + 1;
        let d = base.saturating_mul(n).min(max);
        self.ejected_until
            .store(now.saturating_add(nanos(d)), Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        true
    }

    /// Ends an ejection early (tests, operator action).
    pub fn unject(&self) {
        self.ejected_until.store(0, Ordering::Relaxed);
    }
}

/// A request in flight on an endpoint; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight {
    ep: Arc<Endpoint>,
    start: u64,
    done: bool,
}

impl InFlight {
    /// The response head arrived: records the RTT sample and returns it (nanoseconds).
    pub fn responded(&mut self) -> u64 {
        let now = now_nanos();
        let rtt = now.saturating_sub(self.start);
        if !self.done {
            self.done = true;
            self.ep.observe_rtt(rtt, now);
        }
        rtt
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ep.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Endpoint state by address, kept while any route table (or request) holds it.
/// Keyed by address first (cheap to hash), then by cluster.
#[derive(Debug, Default)]
pub struct Registry {
    endpoints: Mutex<HashMap<SocketAddr, Vec<Weak<Endpoint>>>>,
}

impl Registry {
    /// The shared state for `addr` in `cluster` (created on first use).
    pub fn endpoint(&self, cluster: &str, addr: SocketAddr) -> Arc<Endpoint> {
        let mut m = self.endpoints.lock();
        let v = m.entry(addr).or_default();
        if let Some(e) = v
            .iter()
            .filter_map(Weak::upgrade)
            .find(|e| &*e.cluster == cluster)
        {
            return e;
        }
        let e = Arc::new(Endpoint::new(addr, cluster.into()));
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(&e));
        e
    }

    /// Drops entries nobody holds any more (called after each table build).
    pub fn sweep(&self) {
        self.endpoints.lock().retain(|_, v| {
            v.retain(|w| w.strong_count() > 0);
            !v.is_empty()
        });
    }

    /// Closes pooled upstream connections idle past their timeout.
    pub fn reap_idle(&self, now: u64) {
        let live: Vec<Arc<Endpoint>> = self
            .endpoints
            .lock()
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect();
        for e in live {
            e.pool.reap(now);
        }
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.endpoints.lock().values().map(Vec::len).sum()
    }

    /// No live entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_ewma_takes_peaks_and_decays() {
        let e = Endpoint::new("127.0.0.1:1".parse().unwrap(), "c".into());
        let t0 = now_nanos();
        e.observe_rtt(200_000_000, t0);
        assert!(e.rtt_estimate(t0) >= 199_000_000.0);
        e.observe_rtt(1_000_000, t0 + 1_000_000_000);
        let est = e.rtt_estimate(t0 + 1_000_000_000);
        assert!(est < 200_000_000.0 && est > 1_000_000.0, "{est}");
        // Pending requests multiply the cost.
        let g = Arc::new(Endpoint::new("127.0.0.1:2".parse().unwrap(), "c".into()));
        let base = g.load(t0);
        let _f = g.start();
        assert!(g.load(t0) > 1.9 * base);
    }

    #[test]
    fn registry_shares_state_across_builds() {
        let r = Registry::default();
        let a = r.endpoint("c", "127.0.0.1:1".parse().unwrap());
        let b = r.endpoint("c", "127.0.0.1:1".parse().unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        drop((a, b));
        r.sweep();
        assert!(r.is_empty());
    }

    #[test]
    fn ejection_grows_and_caps() {
        let e = Endpoint::new("127.0.0.1:1".parse().unwrap(), "c".into());
        let now = now_nanos();
        assert!(e.eject(now, Duration::from_secs(1), Duration::from_secs(3)));
        assert!(!e.available(now));
        assert!(!e.eject(now, Duration::from_secs(1), Duration::from_secs(3)));
        assert!(e.available(now + 1_500_000_000));
        assert!(e.eject(
            now + 1_500_000_000,
            Duration::from_secs(1),
            Duration::from_secs(3)
        ));
        assert!(!e.available(now + 3_000_000_000));
        assert!(e.available(now + 3_600_000_000));
    }
}
