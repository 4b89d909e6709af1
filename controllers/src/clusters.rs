//! Member clusters: registration (`join`/`unjoin`) and the registry the controller follows.

pub mod finalize;
pub mod health;
pub mod join;
pub mod lease;
pub mod monitor;
pub mod options;
pub mod register;
pub mod registry;
pub mod status;
pub mod summary;

/// How long one call to a hub or member API server may take in the registry's loops:
/// kube's client has no read timeout and retries 429/503 for minutes, and one stuck
/// call must not freeze a status, lease or monitor loop.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `fut` within `limit`, with a timeout reported as an error like any other.
pub async fn within<T, E: std::fmt::Display>(
    limit: std::time::Duration,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}
