//! The Pull agent's heartbeat (A.4): it renews the hub Lease `cluster-<name>` in
//! `causeway-system` every quarter of the lease duration (Karmada: 40 s lease, 10 s
//! renewals). `causeway register` creates the Lease (and the hub's monitor creates it
//! again if it goes), so the agent needs only `get` and `patch` on that one object. The
//! hub's [`super::monitor`] reads it.
//!
//! A renewal that fails is counted ([`Renewals`], on the agent's /metrics:
//! `causeway_cluster_lease_renewal_failures_total` and
//! `causeway_cluster_lease_last_renewal_timestamp_seconds`), warned about once per lease
//! duration while it lasts, and once no renewal has succeeded for a whole lease
//! duration the agent's /readyz fails (the hub marks the cluster Unknown then); the
//! first renewal that succeeds makes it ready again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_crds::names::cluster_lease_name;
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::ClusterLabel;

/// The renewal interval for a lease of `duration`.
pub fn renew_interval(duration: Duration) -> Duration {
    (duration / 4).max(Duration::from_millis(100))
}

/// Renews the lease once.
pub async fn renew_once(
    hub: &kube::Client,
    cluster: &str,
    identity: &str,
    duration: Duration,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let patch = json!({"spec": {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration.as_secs().max(1),
        "renewTime": MicroTime(jiff::Timestamp::now()),
    }});
    api.patch(
        &cluster_lease_name(cluster),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

/// What the renewals of one agent came to: the metrics they feed and the readiness
/// they decide.
pub struct Renewals {
    registry: Registry,
    failures: Family<ClusterLabel, Counter>,
    last_success: Family<ClusterLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    state: parking_lot::Mutex<State>,
}

/// The renewals' state, by the steady clock.
#[derive(Debug, Default)]
struct State {
    /// While renewals run: since when they were expected to succeed (started, or the
    /// last success) and the lease duration.
    running: Option<(Instant, Duration)>,
    /// The last failure's error, while failing.
    last_error: Option<String>,
}

impl Default for Renewals {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("causeway");
        let failures = Family::<ClusterLabel, Counter>::default();
        let last_success =
            Family::<ClusterLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "cluster_lease_renewal_failures",
            "Renewals of the cluster's Lease on the hub that failed (Pull agent)",
            failures.clone(),
        );
        registry.register(
            "cluster_lease_last_renewal_timestamp_seconds",
            "When the cluster's Lease on the hub was last renewed, in seconds since the Unix epoch (Pull agent; absent before the first renewal)",
            last_success.clone(),
        );
        Renewals {
            registry,
            failures,
            last_success,
            state: parking_lot::Mutex::new(State::default()),
        }
    }
}

impl Renewals {
    fn label(cluster: &str) -> ClusterLabel {
        ClusterLabel {
            cluster: cluster.into(),
        }
    }

    /// Renewals of a lease of `duration` start now: the clock of /readyz starts.
    pub fn start(&self, duration: Duration) {
        *self.state.lock() = State {
            running: Some((Instant::now(), duration)),
            last_error: None,
        };
    }

    /// Renewals stopped (the agent stops working): they no longer decide readiness.
    pub fn stop(&self) {
        *self.state.lock() = State::default();
    }

    /// One renewal of `cluster`'s lease succeeded.
    pub fn succeeded(&self, cluster: &str) {
        let mut st = self.state.lock();
        if let Some((since, _)) = &mut st.running {
            *since = Instant::now();
        }
        st.last_error = None;
        self.last_success
            .get_or_create(&Self::label(cluster))
            .set(jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
    }

    /// One renewal of `cluster`'s lease failed with `error`.
    pub fn failed(&self, cluster: &str, error: &str) {
        self.state.lock().last_error = Some(error.to_string());
        self.failures.get_or_create(&Self::label(cluster)).inc();
    }

    /// How long renewals have been failing (none succeeded since they started or since
    /// the last success), if they are.
    pub fn failing_for(&self) -> Option<Duration> {
        let st = self.state.lock();
        let (since, _) = st.running?;
        st.last_error.as_ref().map(|_| since.elapsed())
    }

    /// `Ok` unless no renewal has succeeded for a whole lease duration (since they
    /// started, or since the last success); then why not.
    pub fn ready(&self) -> Result<(), String> {
        let st = self.state.lock();
        let Some((since, duration)) = st.running else {
            return Ok(());
        };
        let quiet = since.elapsed();
        if quiet < duration {
            return Ok(());
        }
        Err(format!(
            "the cluster's Lease has not been renewed on the hub for {} s (lease duration {} s), so the hub marks the cluster Unknown{}",
            quiet.as_secs(),
            duration.as_secs(),
            st.last_error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ))
    }

    /// These metrics, as OpenMetrics text (ending with `# EOF`).
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}

/// Renews the lease of `cluster` until `stop`, reporting into `renewals`.
pub async fn run(
    hub: kube::Client,
    cluster: String,
    identity: String,
    duration: Duration,
    renewals: Arc<Renewals>,
    stop: CancellationToken,
) {
    let every = renew_interval(duration);
    // a fixed tick, each renewal bounded by it: one slow answer from the hub must not
    // push the next renewals back until the lease runs out
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    renewals.start(duration);
    // when the last warning was logged, while failing: one per lease duration
    let mut warned: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => {
                renewals.stop();
                return;
            }
        }
        match super::within(every, renew_once(&hub, &cluster, &identity, duration)).await {
            Ok(()) => {
                if let Some(failing) = renewals.failing_for() {
                    tracing::info!(cluster, after = ?failing, "cluster lease renewed again");
                }
                renewals.succeeded(&cluster);
                warned = None;
            }
            Err(e) => {
                renewals.failed(&cluster, &e);
                let failing = renewals.failing_for().unwrap_or_default();
                if warned.is_none_or(|w| w.elapsed() >= duration) {
                    warned = Some(Instant::now());
                    if failing < duration {
                        tracing::warn!(cluster, error = %e, failing_for = ?failing, "cannot renew the cluster lease on the hub; the hub marks the cluster Unknown if this lasts a lease ({duration:?})");
                    } else {
                        tracing::warn!(cluster, error = %e, failing_for = ?failing, "the cluster lease has not been renewed on the hub for a lease ({duration:?}): the hub marks the cluster Unknown, and this agent's /readyz fails until a renewal succeeds; check the agent's hub credentials and RBAC (get, patch on Lease causeway-system/{}) and that the Lease exists", cluster_lease_name(&cluster));
                    }
                }
            }
        }
    }
}
