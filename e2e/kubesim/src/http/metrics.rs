//! `/metrics`: request counts and live watches, in the Prometheus text format.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// get, list, watch, create, ...
    pub verb: String,
    /// group/resource.
    pub resource: String,
    /// HTTP status code.
    pub code: u16,
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    /// Requests by verb, resource and code.
    pub requests: Family<RequestLabels, Counter>,
    /// Open watches.
    pub watchers: Gauge,
    /// Write requests (create, update, patch, delete, deletecollection) that are not
    /// `dryRun=All`, whatever their outcome: what a client sent to change something.
    pub writes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let watchers = Gauge::default();
        let writes = Counter::default();
        registry.register(
            "apiserver_request",
            "API requests by verb, resource and HTTP code",
            requests.clone(),
        );
        registry.register(
            "apiserver_registered_watchers",
            "Open watch streams",
            watchers.clone(),
        );
        registry.register(
            "kubesim_write_requests",
            "Create, update, patch and delete requests that are not dry runs",
            writes.clone(),
        );
        Metrics {
            registry,
            requests,
            watchers,
            writes,
        }
    }
}

impl Metrics {
    /// Counts a request with `verb` and the `dryRun` query parameter as a write when
    /// it is one.
    pub fn count_write(&self, verb: &str, dry_run: Option<&str>) {
        let write = matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        if write && dry_run != Some("All") {
            self.writes.inc();
        }
    }

    /// Text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        if prometheus_client::encoding::text::encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}
