//! The eviction rate limit (federation.md §8 J.63): failover takes workloads off
//! failed clusters (and application failover off clusters where they fail) at most
//! [`RATE`] per second (a token bucket of [`BURST`]), so a member that fails does not
//! move every workload of the fleet at once. A binding past
//! the limit keeps its clusters this round, its `Scheduled` message says its failover
//! waits, and the loop runs again when the next eviction is allowed.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Evictions allowed per second.
pub const RATE: f64 = 0.5;
/// Evictions allowed at once.
pub const BURST: f64 = 1.0;

/// The bucket: kept by the loop across rounds.
#[derive(Clone, Debug)]
pub struct Evictions {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Option<Timestamp>,
}

impl Default for Evictions {
    fn default() -> Self {
        Evictions::new(RATE, BURST)
    }
}

impl Evictions {
    /// A full bucket of `burst`, refilled at `rate` per second.
    pub fn new(rate: f64, burst: f64) -> Self {
        Evictions {
            rate,
            burst,
            tokens: burst,
            at: None,
        }
    }

    /// The tokens the bucket holds at `now`.
    fn tokens_at(&self, now: Timestamp) -> f64 {
        match self.at {
            Some(at) => {
                let secs = now.duration_since(at).as_secs_f64().max(0.0);
                (self.tokens + secs * self.rate).min(self.burst)
            }
            None => self.tokens,
        }
    }

    fn refill(&mut self, now: Timestamp) {
        self.tokens = self.tokens_at(now);
        self.at = Some(now);
    }

    /// Takes `n` evictions at `now`, if the bucket holds them (a binding's evictions
    /// go together or wait together).
    pub fn take(&mut self, n: usize, now: Timestamp) -> bool {
        self.refill(now);
        let n = n as f64;
        // a binding with more evictions than the burst waits for a full bucket
        let need = n.min(self.burst);
        if self.tokens + 1e-9 >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }

    /// When the next eviction is allowed.
    pub fn next(&self, now: Timestamp) -> Timestamp {
        let missing = (1.0_f64.min(self.burst) - self.tokens_at(now)).max(0.0);
        let secs = if self.rate > 0.0 {
            missing / self.rate
        } else {
            3600.0
        };
        now.checked_add(SignedDuration::from_secs_f64(secs.min(3600.0)))
            .unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_evictions_at_half_a_second_take_about_twenty_four_seconds() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut e = Evictions::default();
        let (mut done, mut now) = (0, t0);
        while done < 12 {
            if e.take(1, now) {
                done += 1;
            } else {
                now = e.next(now);
            }
        }
        assert_eq!(now.duration_since(t0).as_secs(), 22);
        // a binding with two evictions waits for the bucket to hold one (the burst)
        let mut e = Evictions::new(0.5, 1.0);
        assert!(e.take(2, t0));
        assert!(!e.take(1, t0));
        assert_eq!(e.next(t0).duration_since(t0).as_secs(), 2);
        // asked later without taking, it counts what refilled meanwhile
        let t1 = t0.checked_add(SignedDuration::from_secs(1)).unwrap();
        assert_eq!(e.next(t1).duration_since(t1).as_secs(), 1);
        let t3 = t0.checked_add(SignedDuration::from_secs(3)).unwrap();
        assert_eq!(e.next(t3), t3);
    }
}
