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
/// answered a ping but still failed writes: a full disk, a read-only standby) keeps the
/// longer ping interval, and the relist waits [`HOLD_FIRST`], doubled on every such
/// flap up to [`HOLD_MAX`], so members are not relisted every few seconds while a store
/// answers pings but refuses writes.
const FLAP: Duration = Duration::from_secs(10);
const HOLD_FIRST: Duration = Duration::from_secs(5);
const HOLD_MAX: Duration = Duration::from_secs(300);

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
        let mut hold = Duration::ZERO;
        loop {
            tokio::select! {
                r = rx.wait_for(|up| !*up) => if r.is_err() { return },
                _ = stop.cancelled() => return,
            }
            if recovered.is_none_or(|t| t.elapsed() > FLAP) {
                wait = PING_FIRST;
                hold = Duration::ZERO;
            } else {
                hold = (hold * 2).clamp(HOLD_FIRST, HOLD_MAX);
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
            if !hold.is_zero() {
                tracing::warn!(
                    ?hold,
                    "search store answers pings but failed writes again right after the last relist: waiting before relisting"
                );
                tokio::select! {
                    _ = tokio::time::sleep(hold) => {}
                    _ = stop.cancelled() => return,
                }
            }
            recovered = Some(tokio::time::Instant::now());
            self.metrics.store_up.set(1);
            self.up.send_replace(true);
            tracing::info!("search store answers again: every watch relists");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_store_that_keeps_failing_right_after_recovery_is_relisted_less_and_less_often() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db").display().to_string())
            .await
            .unwrap();
        let health = Health::new(IndexerMetrics::default());
        let stop = CancellationToken::new();
        tokio::spawn(health.clone().watch_store(store, stop.clone()));
        let mut pauses = Vec::new();
        for _ in 0..5 {
            // a write fails right after every recovery: the store answers pings only
            let started = tokio::time::Instant::now();
            health.down("disk full");
            assert!(health.wait_up(&stop).await);
            pauses.push(started.elapsed());
        }
        assert!(pauses[0] < Duration::from_secs(1), "{pauses:?}");
        for w in pauses.windows(2).skip(1) {
            assert!(w[1] > w[0], "each flap waits longer: {pauses:?}");
        }
        assert!(pauses[4] >= Duration::from_secs(40), "{pauses:?}");
        // an outage long after the last recovery starts afresh
        tokio::time::sleep(FLAP * 2).await;
        let started = tokio::time::Instant::now();
        health.down("a blip");
        assert!(health.wait_up(&stop).await);
        assert!(started.elapsed() < Duration::from_secs(1));
        stop.cancel();
    }
}
