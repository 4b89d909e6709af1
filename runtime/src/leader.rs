//! Leader election on a `coordination.k8s.io/v1` Lease, so that a component runs as
//! several replicas with one working and the others standing by.
//!
//! The semantics are client-go's (`k8s.io/client-go/tools/leaderelection`), which
//! kube-controller-manager and most controllers use:
//!
//! - a candidate takes the Lease when it does not exist, has no holder, or its record
//!   has not changed (by the candidate's own clock) for the Lease's duration;
//! - every write carries the `resourceVersion` it read, so of two candidates racing for
//!   the same Lease only one succeeds (the other gets a 409 Conflict);
//! - the leader renews every retry period; when it has not renewed for the renew
//!   deadline (shorter than the lease duration) it steps down: its work is cancelled and
//!   [`Elector::run`] returns an error, so the process exits and restarts as a standby.
//!   It never keeps working without the Lease: the deadline counts from when its last
//!   successful renewal was sent (a standby's clock starts later, when it sees the
//!   write), each renewal request is cut off at the deadline (kube's client has no read
//!   timeout and retries 429/503), and work that ignores its cancelled token is dropped
//!   when the lease duration from that renewal has passed;
//! - on a clean stop (SIGTERM) the leader releases the Lease, so a standby takes over
//!   at its next try instead of after the lease duration.
//!
//! The maintained crates did not fit: `kube-leader-election` needs kube 4, and
//! `kube-lease-manager` (kube 5) counts whole seconds, has no renew deadline and renews
//! without optimistic concurrency.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod args;
mod record;
#[cfg(test)]
mod tests;

pub use args::LeaderArgs;
pub use record::{Timings, held_by_other, holder, next_record, released};

/// Where this replica stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// This replica holds the Lease and its work runs.
    pub leading: bool,
    /// Who holds the Lease, as far as this replica knows (`None`: nobody, or not read yet).
    pub holder: Option<String>,
}

impl Status {
    /// Why `/readyz` should say not ready on a standby (`None` while leading).
    pub fn not_ready(&self) -> Option<String> {
        (!self.leading).then(|| match &self.holder {
            Some(h) => format!("not the leader (leader is {h})"),
            None => "not the leader (no leader elected yet)".to_string(),
        })
    }
}

/// One candidate for one Lease.
pub struct Elector {
    client: kube::Client,
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timings: Timings,
    status: watch::Sender<Status>,
}

/// The Lease as this candidate last saw it, and since when (by our clock) unchanged.
struct Observed {
    lease: Option<Lease>,
    since: Instant,
}

impl Observed {
    fn spec(&self) -> Option<&LeaseSpec> {
        self.lease.as_ref().and_then(|l| l.spec.as_ref())
    }
    /// Remembers `lease`; the clock restarts only when its record changed.
    fn see(&mut self, lease: Option<Lease>) {
        let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
        if spec != self.spec() {
            self.since = Instant::now();
        }
        self.lease = lease;
    }
}

/// `<hostname>_<random>`: unique per process, and says which pod holds the Lease.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "causeway".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

impl Elector {
    /// A candidate `identity` for the Lease `namespace/name`; the timings are checked.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: Timings,
    ) -> anyhow::Result<Elector> {
        timings.check().map_err(anyhow::Error::msg)?;
        if identity.is_empty() {
            anyhow::bail!("--leader-elect-identity must not be empty");
        }
        Ok(Elector {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            timings,
            status: watch::Sender::new(Status::default()),
        })
    }

    /// This candidate's identity (what `holderIdentity` says while it leads).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Follows this candidate's [`Status`].
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    fn publish(&self, leading: bool, observed: &Observed) {
        let holder = if leading {
            Some(self.identity.clone())
        } else {
            let unchanged = observed.since.elapsed();
            held_by_other(observed.spec(), unchanged, &self.identity, &self.timings)
                .then(|| holder(observed.spec()).map(String::from))
                .flatten()
        };
        let next = Status { leading, holder };
        self.status.send_if_modified(|s| {
            let changed = *s != next;
            *s = next;
            changed
        });
    }

    /// Waits until this candidate holds the Lease, then runs `work` with a token that is
    /// cancelled when leadership ends. Returns `Ok` when `stop` is cancelled (the Lease
    /// is released after the work ended) or the work's own result if it ends first, and
    /// an error when the Lease was lost (not renewed within the renew deadline, or taken
    /// by another holder): the caller should exit, as client-go controllers do.
    pub async fn run<F, Fut>(&self, stop: &CancellationToken, work: F) -> anyhow::Result<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut observed = Observed {
            lease: None,
            since: Instant::now(),
        };
        let lease = format!("{}/{}", self.namespace, self.name);
        tracing::info!(%lease, identity = %self.identity, "waiting to become the leader");
        let mut renewed = loop {
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(Some(sent)) => break sent,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%lease, error = %format!("{e:#}"), "reading or taking the leader Lease failed; retrying")
                }
            }
            self.publish(false, &observed);
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.timings.retry_period)) => {}
                _ = stop.cancelled() => return Ok(()),
            }
        };
        tracing::info!(%lease, identity = %self.identity, "became the leader");
        self.publish(true, &observed);
        let lead = stop.child_token();
        let work = work(lead.clone());
        tokio::pin!(work);
        let ended = tokio::select! {
            r = &mut work => Ok(r),
            lost = self.keep(&mut observed, stop, &mut renewed) => Err(lost),
        };
        // the Lease is ours (and the work may run) until the renew deadline; after the
        // lease duration a standby may hold it
        let renew_deadline = tokio::time::Instant::from_std(renewed + self.timings.renew_deadline);
        let expiry = tokio::time::Instant::from_std(renewed + self.timings.lease_duration);
        lead.cancel();
        match ended {
            Ok(r) => {
                self.release(&mut observed).await;
                r
            }
            Err(None) => {
                // stopped cleanly: let the work finish (no longer than the Lease stays
                // ours without renewals), then hand the Lease over at once
                let r = tokio::time::timeout_at(renew_deadline, work).await;
                self.release(&mut observed).await;
                r.unwrap_or_else(|_| {
                    anyhow::bail!(
                        "the work did not stop after the stop signal within the renew deadline ({:?} from the last renewal of the leader Lease)",
                        self.timings.renew_deadline
                    )
                })
            }
            Err(Some(why)) => {
                self.publish(false, &observed);
                tracing::error!(%lease, identity = %self.identity, reason = %why, "lost the leader Lease; stopping");
                // the work had its token cancelled; give it until a standby could take
                // the Lease, then drop it
                let _ = tokio::time::timeout_at(expiry, work).await;
                anyhow::bail!(
                    "lost the leader Lease {lease} ({why}); exiting so that this replica restarts as a standby"
                )
            }
        }
    }

    /// Renews every retry period until `stop` (`None`) or until leadership is lost
    /// (`Some(why)`): another holder took the Lease, or no renewal succeeded within the
    /// renew deadline of `renewed` (when the last successful one was sent; updated).
    async fn keep(
        &self,
        observed: &mut Observed,
        stop: &CancellationToken,
        renewed: &mut Instant,
    ) -> Option<String> {
        loop {
            let deadline = tokio::time::Instant::from_std(*renewed + self.timings.renew_deadline);
            let next = tokio::time::Instant::now() + self.timings.retry_period;
            tokio::select! {
                _ = tokio::time::sleep_until(next.min(deadline)) => {}
                _ = stop.cancelled() => return None,
            }
            if tokio::time::Instant::now() >= deadline {
                return Some(format!(
                    "not renewed within the renew deadline of {:?}",
                    self.timings.renew_deadline
                ));
            }
            let attempt = tokio::select! {
                r = tokio::time::timeout_at(deadline, self.try_acquire_or_renew(observed)) => r,
                _ = stop.cancelled() => return None,
            };
            match attempt {
                Ok(Ok(Some(sent))) => *renewed = sent,
                Ok(Ok(None)) => {
                    return Some(match holder(observed.spec()) {
                        Some(h) => format!("{h} holds it now"),
                        None => "another candidate changed it first".into(),
                    });
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %format!("{e:#}"), "renewing the leader Lease failed; retrying");
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, "renewing the leader Lease did not finish by the renew deadline");
                }
            }
        }
    }

    /// One try: `Ok(Some(sent))` when this candidate holds the Lease afterwards, `sent`
    /// being when the write that holds it left (its claim runs from then, at the latest).
    async fn try_acquire_or_renew(
        &self,
        observed: &mut Observed,
    ) -> anyhow::Result<Option<Instant>> {
        let current = self.api.get_opt(&self.name).await.context("reading")?;
        observed.see(current);
        let sent = Instant::now();
        let now = Timestamp::now();
        let unchanged = observed.since.elapsed();
        let Some(spec) = next_record(
            observed.spec(),
            unchanged,
            &self.identity,
            &self.timings,
            now,
        ) else {
            return Ok(None);
        };
        let written = match &observed.lease {
            Some(l) => {
                // carries the resourceVersion read above: a concurrent writer makes this a 409
                let mut l = l.clone();
                l.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &l)
                    .await
            }
            None => self.create(spec).await,
        };
        match written {
            Ok(l) => {
                observed.see(Some(l));
                Ok(Some(sent))
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e).context("writing"),
        }
    }

    async fn create(&self, spec: LeaseSpec) -> Result<Lease, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            spec: Some(spec),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Err(kube::Error::Api(e)) if e.code == 404 => {
                // the namespace is missing (a fresh hub): create it, then the Lease
                let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}});
                Api::<Namespace>::all(self.client.clone())
                    .patch(
                        &self.namespace,
                        &PatchParams::apply("causeway"),
                        &Patch::Apply(&body),
                    )
                    .await?;
                self.api.create(&PostParams::default(), &lease).await
            }
            r => r,
        }
    }

    /// Hands the Lease over if this candidate still holds it (best effort, bounded).
    async fn release(&self, observed: &mut Observed) {
        self.publish(false, observed);
        let Some(mut lease) = observed.lease.clone() else {
            return;
        };
        let Some(spec) = lease.spec.as_ref() else {
            return;
        };
        if holder(Some(spec)) != Some(self.identity.as_str()) {
            return;
        }
        lease.spec = Some(released(spec, Timestamp::now()));
        let pp = PostParams::default();
        let write = self.api.replace(&self.name, &pp, &lease);
        match tokio::time::timeout(self.timings.renew_deadline, write).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.name, "released the leader Lease"),
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.name, error = %e, "releasing the leader Lease failed; a standby takes over when it expires")
            }
            Err(_) => {
                tracing::warn!(lease = %self.name, "releasing the leader Lease timed out; a standby takes over when it expires")
            }
        }
    }
}

/// `d` plus up to 20% (client-go's jitter factor 1.2), so that candidates that started
/// together do not keep asking at the same instant.
fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    d + d.mul_f64((r % 1000) as f64 / 5000.0)
}
