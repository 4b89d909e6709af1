//! Upkeep a database gets once its writers go quiet after writing: a WAL checkpoint on
//! SQLite ([`super::sqlite`]), a VACUUM on PostgreSQL ([`super::postgres`]).

use parking_lot::Mutex;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long the writers must have been quiet before the upkeep runs.
pub(crate) const IDLE: Duration = Duration::from_secs(1);

/// When a writer last committed, if the upkeep has not been done since. Cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Dirty(Arc<Mutex<Option<Instant>>>);

impl Dirty {
    /// A write was committed.
    pub fn wrote(&self) {
        *self.0.lock() = Some(Instant::now());
    }

    /// The last write the upkeep has not followed yet, if any.
    pub fn since(&self) -> Option<Instant> {
        *self.0.lock()
    }

    /// The upkeep covers the writes up to `at`: clean, unless a write came since.
    pub fn done(&self, at: Instant) {
        let mut last = self.0.lock();
        if *last == Some(at) {
            *last = None;
        }
    }

    /// Runs `upkeep(mark, last write)` each time the writes have stopped for [`IDLE`],
    /// until every other handle of this mark is dropped (the database is closed; an
    /// upkeep running then ends first). The upkeep calls [`Dirty::done`] once it has
    /// done its work; otherwise it runs again [`IDLE`]/2 later, or after the next quiet
    /// period if there are writes meanwhile.
    pub fn upkeep<F, Fut>(&self, mut upkeep: F)
    where
        F: FnMut(Dirty, Instant) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let weak = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE / 2).await;
                let Some(mark) = weak.upgrade().map(Dirty) else {
                    return;
                };
                let Some(at) = mark.since() else {
                    continue;
                };
                if at.elapsed() >= IDLE {
                    upkeep(mark, at).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The upkeep runs once per quiet period after writes, not while they go on, and
    /// not again once done; it stops when the database is dropped.
    // paused time: the clock moves only when every task waits, so a slow machine cannot
    // make the writes look quiet
    #[tokio::test(start_paused = true)]
    async fn upkeep_runs_once_the_writes_stop() {
        let dirty = Dirty::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        dirty.upkeep(move |mark, at| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { mark.done(at) }
        });
        // writes every 200 ms for 1.6 s: never quiet for IDLE
        let started = Instant::now();
        while started.elapsed() < IDLE * 8 / 5 {
            dirty.wrote();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0, "ran while writes went on");
        while dirty.since().is_some() {
            assert!(started.elapsed() < IDLE * 6, "no upkeep once quiet");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(IDLE * 2).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "ran again with nothing new");
        // a write during the upkeep keeps the mark: the upkeep ran for older writes
        let at = Instant::now();
        tokio::time::sleep(IDLE).await;
        *dirty.0.lock() = Some(at);
        dirty.wrote();
        dirty.done(at);
        assert!(dirty.since().is_some(), "a newer write was marked clean");
        // the task (and its upkeep, holding `runs`) ends with the database
        drop(dirty);
        tokio::time::sleep(IDLE).await;
        assert_eq!(
            Arc::strong_count(&runs),
            1,
            "the upkeep outlived the database"
        );
    }
}
