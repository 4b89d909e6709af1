//! Tasks that shutdown waits for: the listeners' connections, and the WebSocket
//! tunnels the hyper path opens (held by [`Proxy`](super::Proxy)).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::wake::Stop;

/// Tasks that shutdown waits for (connections, WebSocket tunnels), up to a drain time,
/// then cuts.
#[derive(Clone, Default)]
pub struct Drain {
    tasks: TaskTracker,
    cut: CancellationToken,
}

impl Drain {
    /// Runs `f` until it ends or the drain cuts it.
    pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        let cut = self.cut.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                // The task first; the cut (polled at each of the task's wake-ups) is
                // watched through `Stop`, which reads a flag instead of taking the
                // token's locks.
                biased;
                () = f => {}
                () = Stop::new(&cut) => {}
            }
        });
    }

    /// Takes no more tasks, waits up to `within` for the running ones, then cuts the
    /// rest (`what` names them in the warning).
    pub async fn finish(&self, within: Duration, what: &str) {
        self.tasks.close();
        if tokio::time::timeout(within, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open = self.tasks.len(),
                "{what} still open after {within:?}; closing them"
            );
            self.cut.cancel();
            self.tasks.wait().await;
        }
    }

    /// Cuts every task now.
    pub fn cut(&self) {
        self.cut.cancel();
    }
}
