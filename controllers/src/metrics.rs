//! Controller metrics (Prometheus), served by the shared admin listener
//! ([`causeway_runtime::admin`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use causeway_runtime::admin::Endpoints;
use causeway_runtime::leader::Status;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels: controller and cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Loop {
    /// exporter, importer, aggregator.
    pub controller: String,
    /// Member (or "hub").
    pub cluster: String,
}

/// Labels: cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    /// Member name.
    pub cluster: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric of the controller.
pub struct Metrics {
    registry: Registry,
    reconcile: Family<Loop, Histogram, fn() -> Histogram>,
    errors: Family<Loop, Counter>,
    exports: Family<ClusterLabel, Gauge>,
    imports: Family<ClusterLabel, Gauge>,
    conflicts: Gauge,
    import_latency: Family<ClusterLabel, Histogram, fn() -> Histogram>,
    members: Gauge,
    leader: Gauge,
    ready: AtomicBool,
    /// Why this replica stands by (leader election), if it does.
    standby: parking_lot::Mutex<Option<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("causeway");
        let reconcile = Family::<Loop, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let errors = Family::<Loop, Counter>::default();
        let exports = Family::<ClusterLabel, Gauge>::default();
        let imports = Family::<ClusterLabel, Gauge>::default();
        let conflicts = Gauge::default();
        let import_latency =
            Family::<ClusterLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        let members = Gauge::default();
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without election), 0 on a standby",
            leader.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile round took",
            reconcile.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Writes that failed in a reconcile round",
            errors.clone(),
        );
        registry.register(
            "mcs_exports",
            "ServiceExports a member exports",
            exports.clone(),
        );
        registry.register(
            "mcs_imports",
            "ServiceImports written in a member",
            imports.clone(),
        );
        registry.register(
            "mcs_conflicts",
            "Multi-cluster services with a Conflict",
            conflicts.clone(),
        );
        registry.register(
            "mcs_endpoint_propagation_seconds",
            "From the exporter writing a hub EndpointSlice to the importer writing it into a member",
            import_latency.clone(),
        );
        registry.register(
            "members",
            "Member clusters the controller reaches",
            members.clone(),
        );
        Metrics {
            registry,
            reconcile,
            errors,
            exports,
            imports,
            conflicts,
            import_latency,
            members,
            leader,
            ready: AtomicBool::new(false),
            standby: parking_lot::Mutex::new(None),
        }
    }
}

impl Metrics {
    /// Records one reconcile round.
    pub fn observe_reconcile(
        &self,
        controller: &str,
        cluster: &str,
        took: Duration,
        errors: usize,
    ) {
        let l = Loop {
            controller: controller.into(),
            cluster: cluster.into(),
        };
        self.reconcile.get_or_create(&l).observe(took.as_secs_f64());
        if errors > 0 {
            self.errors.get_or_create(&l).inc_by(errors as u64);
        }
    }
    /// Exports of a member.
    pub fn set_exports(&self, cluster: &str, n: i64) {
        self.exports
            .get_or_create(&ClusterLabel {
                cluster: cluster.into(),
            })
            .set(n);
    }
    /// Imports in a member.
    pub fn set_imports(&self, cluster: &str, n: i64) {
        self.imports
            .get_or_create(&ClusterLabel {
                cluster: cluster.into(),
            })
            .set(n);
    }
    /// Services in conflict.
    pub fn set_conflicts(&self, n: i64) {
        self.conflicts.set(n);
    }
    /// Members reached.
    pub fn set_members(&self, n: i64) {
        self.members.set(n);
    }
    /// Endpoint propagation latency into a member.
    pub fn observe_propagation(&self, cluster: &str, seconds: f64) {
        self.import_latency
            .get_or_create(&ClusterLabel {
                cluster: cluster.into(),
            })
            .observe(seconds.max(0.0));
    }
    /// Marks the controller ready (caches synced).
    pub fn set_ready(&self, v: bool) {
        self.ready.store(v, Ordering::SeqCst);
    }
    /// Where this replica stands in the leader election: the `causeway_leader` gauge,
    /// and on a standby the reason `/readyz` gives.
    pub fn set_leader(&self, status: &Status) {
        self.leader.set(i64::from(status.leading));
        *self.standby.lock() = status.not_ready();
    }
    /// This replica runs without leader election: it is the leader.
    pub fn set_unelected(&self) {
        self.set_leader(&Status {
            leading: true,
            holder: None,
        });
    }
    /// What the admin listener answers: these metrics, and ready once this replica
    /// leads (if elected) and its caches synced.
    pub fn endpoints(self: &Arc<Self>) -> Endpoints {
        let (m, r) = (self.clone(), self.clone());
        Endpoints {
            metrics: Arc::new(move || m.encode()),
            ready: Arc::new(move || {
                if let Some(why) = r.standby.lock().clone() {
                    return Err(why);
                }
                if r.ready.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("caches not synced yet".into())
                }
            }),
        }
    }
    /// Text exposition.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}
