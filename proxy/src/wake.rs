//! Futures a connection polls at every wake-up, made cheap to poll when they are not
//! what woke it.
//!
//! A `select!` polls every pending branch each time the task wakes. Polling the
//! shutdown token's `cancelled()` takes two locks (the token's and its waiter list's),
//! `CancellationToken::is_cancelled` takes one, and polling a `Sleep` registers the
//! waker again: with the shutdown token, the drain's cut token and two timers polled
//! in every request's `select!`s, that was about 900 instructions per HTTP/1.1 request
//! (`benches/proxy/instructions.sh`: 3.7 polls of the tokens' futures and 2.4 of the
//! timers per request, 7% of the engine's 12.7k; about 200 with this). [`OnWake`] polls
//! its future once with a waker of its own, which sets a flag before it wakes the
//! task; after that a poll reads the flag and polls the future again only once that
//! waker has fired (or the task's waker changed).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// A future polled only when its own waker has fired since its last poll (or on the
/// first poll, or when polled from another task).
pub(crate) struct OnWake<F> {
    inner: F,
    /// The waker `inner` holds (None: it must be polled).
    woken: Option<Arc<Woken>>,
}

/// The waker an [`OnWake`] gives its future: marks that it fired, then wakes the task.
struct Woken {
    fired: AtomicBool,
    task: Waker,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl<F> OnWake<F> {
    pub(crate) fn new(inner: F) -> Self {
        OnWake { inner, woken: None }
    }

    /// The future, to change it: its next poll reaches it.
    pub(crate) fn get_mut(&mut self) -> &mut F {
        self.woken = None;
        &mut self.inner
    }

    /// The future, as it is.
    pub(crate) fn get_ref(&self) -> &F {
        &self.inner
    }

    /// Whether the future's waker has fired since it was last polled.
    fn fired(&self) -> bool {
        self.woken
            .as_ref()
            .is_some_and(|w| w.fired.load(Ordering::Acquire))
    }
}

impl<F: Future + Unpin> Future for OnWake<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Polled for this task, and not woken by its future since: nothing changed.
        if let Some(w) = &self.woken
            && !w.fired.load(Ordering::Acquire)
            && w.task.will_wake(cx.waker())
        {
            return Poll::Pending;
        }
        let woken = Arc::new(Woken {
            fired: AtomicBool::new(false),
            task: cx.waker().clone(),
        });
        let waker = Waker::from(woken.clone());
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll(&mut Context::from_waker(&waker));
        this.woken = r.is_pending().then_some(woken);
        r
    }
}

/// The shutdown token, as one connection's task watches it: a future that resolves
/// when the token is cancelled, and [`is_cancelled`](Stop::is_cancelled).
pub(crate) struct Stop<'a> {
    token: &'a CancellationToken,
    cancelled: OnWake<Pin<Box<WaitForCancellationFuture<'a>>>>,
    /// `cancelled` has resolved.
    done: bool,
}

impl<'a> Stop<'a> {
    /// Watches `token`.
    pub(crate) fn new(token: &'a CancellationToken) -> Self {
        Stop {
            token,
            cancelled: OnWake::new(Box::pin(token.cancelled())),
            done: false,
        }
    }

    /// Whether the token is cancelled (once this has been polled, a flag read until
    /// the token wakes it).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.done
            || match self.cancelled.woken {
                Some(_) => self.cancelled.fired() && self.token.is_cancelled(),
                None => self.token.is_cancelled(),
            }
    }
}

impl Future for Stop<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.done {
            return Poll::Ready(());
        }
        let r = Pin::new(&mut self.cancelled).poll(cx);
        self.done = r.is_ready();
        r
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn resolves_when_the_token_is_cancelled_after_it_was_polled() {
        let token = CancellationToken::new();
        let mut stop = Stop::new(&token);
        // Registered, then pending.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut stop)
                .await
                .is_err()
        );
        assert!(!stop.is_cancelled());
        let t = token.clone();
        let cancel = tokio::spawn(async move {
            tokio::task::yield_now().await;
            t.cancel();
        });
        tokio::time::timeout(Duration::from_secs(5), &mut stop)
            .await
            .expect("the watch resolves once the token is cancelled");
        assert!(stop.is_cancelled());
        cancel.await.unwrap();
    }

    #[tokio::test]
    async fn sees_a_token_cancelled_before_it_was_polled() {
        let token = CancellationToken::new();
        let mut stop = Stop::new(&token);
        token.cancel();
        assert!(stop.is_cancelled());
        tokio::time::timeout(Duration::from_secs(5), &mut stop)
            .await
            .expect("resolves at once");
    }

    #[tokio::test]
    async fn is_cancelled_after_a_cancel_between_polls() {
        let token = CancellationToken::new();
        let mut stop = Stop::new(&token);
        assert!(futures::poll!(&mut stop).is_pending());
        assert!(!stop.is_cancelled());
        token.cancel();
        // The flag is set by the token's wake, before any poll.
        assert!(stop.is_cancelled());
        assert!(futures::poll!(&mut stop).is_ready());
    }
}
