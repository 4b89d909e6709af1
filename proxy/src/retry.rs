//! Retry budget (linkerd2/Finagle style): retries may add at most `percent` of the
//! requests seen in the last 10 s, plus `min_per_sec` per second, so a failing
//! backend cannot multiply the load. Lock-free: ten one-second buckets of atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::now_nanos;

const BUCKETS: usize = 10;

#[derive(Default)]
struct Bucket {
    second: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
}

/// The budget.
pub struct Budget {
    percent: f64,
    min_per_sec: u64,
    buckets: [Bucket; BUCKETS],
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("percent", &self.percent)
            .field("min_per_sec", &self.min_per_sec)
            .finish()
    }
}

impl Budget {
    /// `percent` of requests (0.2 = 20%) plus `min_per_sec` retries per second.
    pub fn new(percent: f64, min_per_sec: u64) -> Self {
        Budget {
            percent: percent.max(0.0),
            min_per_sec,
            buckets: Default::default(),
        }
    }

    fn bucket(&self, now_sec: u64) -> &Bucket {
        let b = &self.buckets[(now_sec % BUCKETS as u64) as usize];
        let s = b.second.load(Ordering::Relaxed);
        if s != now_sec
            && b.second
                .compare_exchange(s, now_sec, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            b.requests.store(0, Ordering::Relaxed);
            b.retries.store(0, Ordering::Relaxed);
        }
        b
    }

    fn totals(&self, now_sec: u64) -> (u64, u64) {
        self.buckets
            .iter()
            .filter(|b| now_sec.saturating_sub(b.second.load(Ordering::Relaxed)) < BUCKETS as u64)
            .fold((0, 0), |(r, t), b| {
                (
                    r + b.requests.load(Ordering::Relaxed),
                    t + b.retries.load(Ordering::Relaxed),
                )
            })
    }

    /// Counts a request (every first attempt).
    pub fn deposit(&self) {
        self.deposit_at(now_nanos() / 1_000_000_000);
    }

    fn deposit_at(&self, sec: u64) {
        self.bucket(sec).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a retry from the budget; false when it is spent.
    pub fn withdraw(&self) -> bool {
        self.withdraw_at(now_nanos() / 1_000_000_000)
    }

    fn withdraw_at(&self, sec: u64) -> bool {
        let (requests, retries) = self.totals(sec);
        let allowed = (requests as f64 * self.percent) as u64 + self.min_per_sec * BUCKETS as u64;
        if retries >= allowed {
            return false;
        }
        self.bucket(sec).retries.fetch_add(1, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_percent_plus_minimum() {
        let b = Budget::new(0.2, 1);
        let sec = 1000;
        for _ in 0..100 {
            b.deposit_at(sec);
        }
        // 20% of 100 + 1/s over the 10 s window.
        let n = (0..100).filter(|_| b.withdraw_at(sec)).count();
        assert_eq!(n, 30);
        // The window moves on: old requests and retries no longer count.
        assert!(b.withdraw_at(sec + 20));
        let n = (0..100).filter(|_| b.withdraw_at(sec + 20)).count();
        assert_eq!(n, 9);
    }
}
