//! Member clusters: registration (`join`/`unjoin`) and the registry the controller follows.

pub mod finalize;
pub mod health;
pub mod join;
pub mod lease;
pub mod membership;
pub mod monitor;
pub mod options;
pub mod register;
pub mod registry;
pub mod status;
pub mod summary;
#[cfg(test)]
mod testing;

/// How long one call to a hub or member API server may take in the registry's loops:
/// kube's client has no read timeout and retries 429/503 for minutes, and one stuck
/// call must not freeze a status, lease or monitor loop.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `fut` within `limit`, with a timeout reported as an error like any other.
pub async fn within<T, E: std::fmt::Display + 'static>(
    limit: std::time::Duration,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| causeway_runtime::say::display(&e)),
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

/// A call to a cluster that failed: no answer in time, or the API server's error
/// (kept whole, so callers can match its code).
#[derive(Debug)]
pub enum CallError {
    /// No answer within the limit.
    TimedOut(std::time::Duration),
    /// The API server's answer.
    Kube(kube::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::TimedOut(d) => write!(f, "no answer within {} ms", d.as_millis()),
            CallError::Kube(e) => f.write_str(&causeway_runtime::say::kube(e)),
        }
    }
}

/// `fut` within `limit` (kube's client has no read timeout of its own).
pub async fn call<T>(
    limit: std::time::Duration,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(CallError::Kube),
        Err(_) => Err(CallError::TimedOut(limit)),
    }
}

/// The registry's clock for the durations it measures itself (flap-damping windows, a
/// Pull member's silence): the wall time when the process started plus the monotonic
/// time since, so a step of the system clock (NTP, a resumed VM) neither flips nor ages
/// every cluster at once. Times written into the API use the wall clock.
pub fn steady_now() -> jiff::Timestamp {
    static START: std::sync::OnceLock<(jiff::Timestamp, std::time::Instant)> =
        std::sync::OnceLock::new();
    let (wall, mono) = *START.get_or_init(|| (jiff::Timestamp::now(), std::time::Instant::now()));
    wall.checked_add(mono.elapsed()).unwrap_or(wall)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_steady_clock_follows_the_wall_clock_and_never_goes_back() {
        let mut last = super::steady_now();
        for _ in 0..1000 {
            let t = super::steady_now();
            assert!(t >= last);
            last = t;
        }
        let drift = jiff::Timestamp::now().duration_since(last).unsigned_abs();
        assert!(drift < std::time::Duration::from_secs(1), "{drift:?}");
    }

    #[tokio::test]
    async fn within_turns_a_hang_into_an_error() {
        let hang = std::future::pending::<Result<(), String>>();
        let err = super::within(std::time::Duration::from_millis(50), hang)
            .await
            .unwrap_err();
        assert_eq!(err, "no answer within 50 ms");
    }
}
