//! Graceful shutdown: SIGINT (Ctrl-C) locally, SIGTERM from the kubelet.

use tokio_util::sync::CancellationToken;

/// Waits for SIGINT or SIGTERM (only SIGINT where SIGTERM cannot be watched).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the process");
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// Cancels `stop` on the first SIGINT or SIGTERM.
pub fn cancel_on_signal(stop: CancellationToken) {
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown_signal() => {
                tracing::info!("signal received: shutting down");
                stop.cancel();
            }
            _ = stop.cancelled() => {}
        }
    });
}
