//! The engine's connection timers.

use std::pin::Pin;

use tokio::time::Instant;

/// A timer re-armed only when it fires early: moving the deadline later (once per
/// request, the usual case) costs a clock read, not a timer-wheel update, so a
/// connection's timers touch the wheel about once per timeout period.
pub(super) struct Deadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    due: Instant,
}

impl Deadline {
    pub(super) fn new(due: Instant) -> Self {
        Deadline {
            sleep: Box::pin(tokio::time::sleep_until(due)),
            due,
        }
    }

    pub(super) fn set(&mut self, due: Instant) {
        self.due = due;
        if self.sleep.deadline() > due {
            self.sleep.as_mut().reset(due);
        }
    }

    /// Resolves once the deadline has passed.
    pub(super) async fn expired(&mut self) {
        loop {
            self.sleep.as_mut().await;
            if Instant::now() >= self.due {
                return;
            }
            let due = self.due;
            self.sleep.as_mut().reset(due);
        }
    }
}
