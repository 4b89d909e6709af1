//! The engine's connection timers.

use std::pin::Pin;

use tokio::time::Instant;

use crate::wake::OnWake;

/// A timer re-armed only when it fires early: moving the deadline later (once per
/// request, the usual case) costs a clock read, not a timer-wheel update, so a
/// connection's timers touch the wheel about once per timeout period. Polled through
/// [`OnWake`]: a poll while it has not fired is a flag read.
pub(super) struct Deadline {
    sleep: OnWake<Pin<Box<tokio::time::Sleep>>>,
    due: Instant,
}

impl Deadline {
    pub(super) fn new(due: Instant) -> Self {
        Deadline {
            sleep: OnWake::new(Box::pin(tokio::time::sleep_until(due))),
            due,
        }
    }

    pub(super) fn set(&mut self, due: Instant) {
        self.due = due;
        if self.sleep.get_ref().deadline() > due {
            self.sleep.get_mut().as_mut().reset(due);
        }
    }

    /// Resolves once the deadline has passed.
    pub(super) async fn expired(&mut self) {
        loop {
            (&mut self.sleep).await;
            if Instant::now() >= self.due {
                return;
            }
            let due = self.due;
            self.sleep.get_mut().as_mut().reset(due);
        }
    }
}
