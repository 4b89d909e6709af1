//! Whether the store takes writes (K.72). A synchro whose write fails after its
//! retries marks the store down; every synchro then drops its watch (nothing is read,
//! nothing queues), one task pings the store with backoff, and when it answers every
//! synchro relists.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::metrics::IndexerMetrics;
use crate::store::Store;

/// The first wait between pings during an outage; doubled up to [`PING_MAX`].
const PING_FIRST: Duration = Duration::from_millis(100);
const PING_MAX: Duration = Duration::from_secs(5);
/// An outage that starts again within this time of the last recovery (the store
/// answered a ping but still failed writes) keeps the longer ping interval.
const FLAP: Duration = Duration::from_secs(10);

/// The store's state, shared by every synchro of one store.
#[derive(Clone)]
pub(crate) struct Health {
    up: watch::Sender<bool>,
    metrics: IndexerMetrics,
}

impl Health {
    /// The store is taken to be up.
    pub(crate) fn new(metrics: IndexerMetrics) -> Health {
        metrics.store_up.set(1);
        Health {
            up: watch::Sender::new(true),
            metrics,
        }
    }

    /// A receiver of the up/down state.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.up.subscribe()
    }

    /// A write failed after its retries: the store is down until a ping answers.
    pub(crate) fn down(&self, why: &str) {
        if self.up.send_replace(false) {
            self.metrics.outages.inc();
            self.metrics.store_up.set(0);
            tracing::warn!(
                error = why,
                "search store unavailable: pausing every watch until it answers again"
            );
        }
    }

    /// Waits until the store is up (returns false if `stop` fires first).
    pub(crate) async fn wait_up(&self, stop: &CancellationToken) -> bool {
        let mut rx = self.up.subscribe();
        tokio::select! {
            r = rx.wait_for(|up| *up) => r.is_ok(),
            _ = stop.cancelled() => false,
        }
    }

    /// Pings the store during outages, with backoff, and marks it up when it answers.
    pub(crate) async fn watch_store(self, store: Store, stop: CancellationToken) {
        let mut rx = self.up.subscribe();
        let mut wait = PING_FIRST;
        let mut recovered: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                r = rx.wait_for(|up| !*up) => if r.is_err() { return },
                _ = stop.cancelled() => return,
            }
            if recovered.is_none_or(|t| t.elapsed() > FLAP) {
                wait = PING_FIRST;
            }
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return,
                }
                wait = (wait * 2).min(PING_MAX);
                match store.ping().await {
                    Ok(()) => break,
                    Err(e) => tracing::debug!(error = %e, "search store still unavailable"),
                }
            }
            recovered = Some(tokio::time::Instant::now());
            self.metrics.store_up.set(1);
            self.up.send_replace(true);
            tracing::info!("search store answers again: every watch relists");
        }
    }
}
