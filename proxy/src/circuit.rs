//! Circuit breaking per backend service: a cap on concurrent requests (Envoy's
//! `max_requests`; `max_connections` caps the same count, as each HTTP/1.1 upstream
//! request holds one connection). The counters are shared by every route-table
//! generation through a [`Registry`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// Concurrent requests to one backend service.
#[derive(Debug, Default)]
pub struct Circuit {
    active: AtomicU32,
}

/// A slot in a circuit; dropping it frees the slot.
#[derive(Debug)]
pub struct Permit(Arc<Circuit>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Circuit {
    /// Takes a slot unless `max` are taken.
    pub fn try_acquire(self: &Arc<Self>, max: u32) -> Option<Permit> {
        let prev = self.active.fetch_add(1, Ordering::Relaxed);
        if prev >= max {
            self.active.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Permit(self.clone()))
    }

    /// Requests in flight.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }
}

/// Circuits by backend key, kept while a table holds them.
#[derive(Debug, Default)]
pub struct Registry {
    circuits: Mutex<HashMap<String, Weak<Circuit>>>,
}

impl Registry {
    /// The circuit of `key` (e.g. `ns/svc:port`).
    pub fn circuit(&self, key: &str) -> Arc<Circuit> {
        let mut m = self.circuits.lock();
        if let Some(c) = m.get(key).and_then(Weak::upgrade) {
            return c;
        }
        let c = Arc::new(Circuit::default());
        m.insert(key.to_string(), Arc::downgrade(&c));
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

    #[test]
    fn caps_and_frees() {
        let r = Registry::default();
        let c = r.circuit("a");
        let p1 = c.try_acquire(2).unwrap();
        let _p2 = c.try_acquire(2).unwrap();
        assert!(c.try_acquire(2).is_none());
        drop(p1);
        assert!(c.try_acquire(2).is_some());
        assert!(Arc::ptr_eq(&c, &r.circuit("a")));
    }
}
