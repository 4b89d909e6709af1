//! The account phase: what the proxy records about each exchange with an upstream
//! (latency, outlier state, per-cluster status counts, retries) and about the answers
//! it makes itself. Both engines call these; they never call back.

use http::StatusCode;

use super::{Proxy, Refusal};
use crate::endpoint::{Endpoint, InFlight};
use crate::table::Backend;

/// Records the arrival of a response head: the endpoint's latency sample and the
/// backend's latency histogram.
#[inline]
pub(crate) fn head_arrived(b: &Backend, inflight: &mut InFlight) {
    let rtt = inflight.responded();
    b.metrics.latency.observe(rtt as f64 / 1e9);
}

impl Proxy {
    /// Counts and logs a response the proxy makes itself; returns its body.
    pub(crate) fn note(&self, status: StatusCode, reason: &'static str, msg: &str) -> String {
        self.metrics.proxy_response(status.as_u16(), reason);
        tracing::debug!(status = status.as_u16(), reason, "{msg}");
        format!("{status}: {msg}\n")
    }

    /// Records an exchange with `ep` that got no answer within the request timeout;
    /// returns the 504.
    pub(crate) fn timed_out(&self, b: &Backend, ep: &Endpoint) -> Refusal {
        self.failure(b, ep);
        if let Some(c) = b.metrics.cluster(&ep.cluster) {
            c.count(504);
        }
        Refusal::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            format!(
                "upstream {} in cluster {} did not answer within {:?}",
                ep.addr, ep.cluster, b.tuning.limits.request_timeout
            ),
        )
    }

    /// Records a failed exchange with `ep`; returns the message.
    pub(crate) fn failed(&self, b: &Backend, ep: &Endpoint, e: &dyn std::fmt::Display) -> String {
        self.failure(b, ep);
        if let Some(c) = b.metrics.cluster(&ep.cluster) {
            c.count(502);
        }
        format!("upstream {} in cluster {} failed: {e}", ep.addr, ep.cluster)
    }

    /// Records a response head from `ep` with `status`: latency, outlier state, count.
    pub(crate) fn responded(
        &self,
        b: &Backend,
        ep: &Endpoint,
        inflight: &mut InFlight,
        status: u16,
    ) {
        head_arrived(b, inflight);
        self.answered(b, ep, status);
    }

    /// Records the status `ep` answered with: outlier state, count.
    pub(crate) fn answered(&self, b: &Backend, ep: &Endpoint, status: u16) {
        if status >= 500 {
            self.failure(b, ep);
        } else {
            ep.record_success();
        }
        if let Some(c) = b.metrics.cluster(&ep.cluster) {
            c.count(status);
        }
    }

    /// Whether another attempt at a request to `b` fits the retry budget (counted
    /// either way).
    pub(crate) fn retry(&self, b: &Backend) -> bool {
        if !self.budget.withdraw() {
            self.metrics.retries_exhausted.inc();
            return false;
        }
        b.metrics.retries.inc();
        true
    }

    /// An upstream failure of `ep` (passive outlier ejection).
    fn failure(&self, b: &Backend, ep: &Endpoint) {
        if self.outlier.failure(ep, b.balancer.endpoints()) {
            self.metrics.ejections.inc();
        }
    }
}
