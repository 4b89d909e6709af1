//! A cheap process-wide monotonic clock in nanoseconds, so balancer and ejection
//! state fits in atomics.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since the process-wide epoch (never 0, so 0 can mean "unset").
pub fn now_nanos() -> u64 {
    nanos_at(Instant::now())
}

/// [`now_nanos`] of `t`, a clock read already made (one read can serve a request's
/// timers and its balancer state).
pub fn nanos_at(t: Instant) -> u64 {
    (t.saturating_duration_since(epoch()).as_nanos() as u64).max(1)
}

/// Nanoseconds of a duration, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A fast thread-local xorshift generator for P2C picks (not cryptographic).
pub fn rand_u64() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x9E37_79B9_7F4A_7C15);
            let local = 0u8;
            (t ^ (&local as *const u8 as u64).rotate_left(32)) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

/// A uniform index below `n` (n > 0).
pub fn rand_below(n: usize) -> usize {
    ((rand_u64() >> 11) % n as u64) as usize
}
