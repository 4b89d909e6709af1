//! An answer the proxy makes itself (status, metrics reason, message): made by the
//! pipeline's phases and by the modules below it that decide a request (`gateway`),
//! so it lives below both.

use http::StatusCode;

/// An answer the proxy makes itself.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// Its status.
    pub status: StatusCode,
    /// The reason label (metrics).
    pub reason: &'static str,
    /// The message (logged, and the body).
    pub msg: String,
}

impl Refusal {
    /// An answer with `status`, `reason` and `msg`.
    pub(crate) fn new(status: StatusCode, reason: &'static str, msg: String) -> Self {
        Refusal {
            status,
            reason,
            msg,
        }
    }
}
