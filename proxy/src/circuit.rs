//! Circuit breaking per backend service, after Envoy's thresholds:
//! - `max_requests`: concurrent requests;
//! - `max_connections`: concurrent upstream exchanges (each HTTP/1.1 request holds one
//!   pooled connection), beyond which requests wait for a slot...
//! - `max_pending_requests`: ...but only this many may wait.
//!
//! Over a threshold the proxy answers 503 saying which one. The counters are shared by
//! every route-table generation through a [`Registry`] (keyed by backend and limits).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One backend's counters.
#[derive(Debug)]
pub struct Circuit {
    active: AtomicU32,
    pending: AtomicU32,
    connections: Arc<Semaphore>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Open {
    /// Too many requests in flight.
    #[error("max-requests reached: {0} requests already in flight")]
    Requests(u32),
    /// Too many requests waiting for a connection slot.
    #[error("max-pending-requests reached: {0} requests already waiting for a connection")]
    Pending(u32),
    /// Waited for a connection slot until the request timeout.
    #[error("no connection slot freed within the request timeout (max-connections {0})")]
    Timeout(u32),
}

/// Slots held by a request; dropping frees them.
#[derive(Debug)]
pub struct Permit {
    circuit: Arc<Circuit>,
    _connection: OwnedSemaphorePermit,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.circuit.active.fetch_sub(1, Ordering::Relaxed);
    }
}

struct PendingGuard<'a>(&'a AtomicU32);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Circuit {
    fn new(max_connections: u32) -> Self {
        Circuit {
            active: AtomicU32::new(0),
            pending: AtomicU32::new(0),
            connections: Arc::new(Semaphore::new(max_connections as usize)),
        }
    }

    /// Takes a request slot and a connection slot (waiting up to `wait` when
    /// `max_pending` allows).
    pub async fn acquire(
        self: &Arc<Self>,
        max_requests: u32,
        max_pending: u32,
        max_connections: u32,
        wait: Duration,
    ) -> Result<Permit, Open> {
        let prev = self.active.fetch_add(1, Ordering::Relaxed);
        if prev >= max_requests {
            self.active.fetch_sub(1, Ordering::Relaxed);
            return Err(Open::Requests(max_requests));
        }
        let conn = match self.connections.clone().try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) => {
                let waiting = self.pending.fetch_add(1, Ordering::Relaxed);
                let _g = PendingGuard(&self.pending);
                if waiting >= max_pending {
                    Err(Open::Pending(max_pending))
                } else {
                    match tokio::time::timeout(wait, self.connections.clone().acquire_owned()).await
                    {
                        Ok(Ok(p)) => Ok(p),
                        _ => Err(Open::Timeout(max_connections)),
                    }
                }
            }
        };
        match conn {
            Ok(c) => Ok(Permit {
                circuit: self.clone(),
                _connection: c,
            }),
            Err(e) => {
                self.active.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Requests in flight.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }
}

/// Circuits by backend key, kept while a table holds them.
#[derive(Debug, Default)]
pub struct Registry {
    circuits: Mutex<HashMap<(String, u32), Weak<Circuit>>>,
}

impl Registry {
    /// The circuit of `key` (e.g. `ns/svc:port`) with `max_connections` slots.
    pub fn circuit(&self, key: &str, max_connections: u32) -> Arc<Circuit> {
        let mut m = self.circuits.lock();
        let k = (key.to_string(), max_connections);
        if let Some(c) = m.get(&k).and_then(Weak::upgrade) {
            return c;
        }
        let c = Arc::new(Circuit::new(max_connections));
        m.insert(k, Arc::downgrade(&c));
        c
    }

    /// Drops circuits nobody holds.
    pub fn sweep(&self) {
        self.circuits.lock().retain(|_, w| w.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn requests_connections_and_pending() {
        let r = Registry::default();
        let c = r.circuit("a", 1);
        assert!(Arc::ptr_eq(&c, &r.circuit("a", 1)));
        let p1 = c.acquire(10, 1, 1, W).await.unwrap();
        // Connection slots are full: one may wait (and times out), the next is refused.
        let c2 = c.clone();
        let waiter =
            tokio::spawn(async move { c2.acquire(10, 1, 1, Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(c.acquire(10, 1, 1, W).await.unwrap_err(), Open::Pending(1));
        drop(p1);
        let p2 = waiter.await.unwrap().unwrap();
        assert_eq!(c.acquire(10, 5, 1, W).await.unwrap_err(), Open::Timeout(1));
        drop(p2);
        // Request cap.
        let c = r.circuit("b", 10);
        let _a = c.acquire(1, 0, 10, W).await.unwrap();
        assert_eq!(c.acquire(1, 0, 10, W).await.unwrap_err(), Open::Requests(1));
        assert_eq!(c.active(), 1);
    }
}
