//! The pure half of leader election: the timings and their checks, and what a
//! candidate writes into the Lease (client-go's `tryAcquireOrRenew`, without the I/O).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// client-go's three durations (kube-controller-manager's defaults: 15 s, 10 s, 2 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a standby waits, after it last saw the Lease change, before it takes
    /// the Lease over (also written into `leaseDurationSeconds`, rounded up).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// Whether these timings can work: a leader must give up (renew deadline) before
    /// a standby may take over (lease duration), and must get more than one try at
    /// renewing (retry period). The error names the flags to fix.
    pub fn check(&self) -> Result<(), String> {
        let Timings {
            lease_duration: l,
            renew_deadline: r,
            retry_period: p,
        } = *self;
        if l < Duration::from_secs(1) {
            return Err(format!(
                "--leader-elect-lease-duration {l:?} is too short: a Lease counts whole seconds, use at least 1s"
            ));
        }
        if r >= l {
            return Err(format!(
                "--leader-elect-renew-deadline ({r:?}) must be shorter than --leader-elect-lease-duration ({l:?}): \
                 the leader has to step down before a standby may take over"
            ));
        }
        if p.is_zero() || p >= r {
            return Err(format!(
                "--leader-elect-retry-period ({p:?}) must be above zero and shorter than --leader-elect-renew-deadline ({r:?}): \
                 the leader needs more than one try at renewing"
            ));
        }
        Ok(())
    }

    /// `leaseDurationSeconds`: the lease duration rounded up to whole seconds.
    pub fn lease_seconds(&self) -> i32 {
        let s = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(s).unwrap_or(i32::MAX).max(1)
    }
}

/// The holder named in a Lease, if any (an empty name means released).
pub fn holder(spec: Option<&LeaseSpec>) -> Option<&str> {
    spec.and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// How long a holder's claim lasts: the Lease's own `leaseDurationSeconds`, else ours.
fn claim(spec: Option<&LeaseSpec>, timings: &Timings) -> Duration {
    spec.and_then(|s| s.lease_duration_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(timings.lease_duration, Duration::from_secs)
}

/// Whether the Lease is held by someone other than `me` and still live: its record
/// last changed (by our own clock) less than its duration ago.
pub fn held_by_other(
    spec: Option<&LeaseSpec>,
    unchanged_for: Duration,
    me: &str,
    timings: &Timings,
) -> bool {
    holder(spec).is_some_and(|h| h != me) && unchanged_for < claim(spec, timings)
}

/// What `me` writes to acquire or renew the Lease whose spec is `old` (`None`: it does
/// not exist yet), or `None` while another holder's claim is live. Renewing keeps
/// `acquireTime` and `leaseTransitions`; taking over sets `acquireTime` and counts a
/// transition; other fields of the spec are kept.
pub fn next_record(
    old: Option<&LeaseSpec>,
    unchanged_for: Duration,
    me: &str,
    timings: &Timings,
    now: Timestamp,
) -> Option<LeaseSpec> {
    if held_by_other(old, unchanged_for, me, timings) {
        return None;
    }
    let mut spec = old.cloned().unwrap_or_default();
    let renewing = holder(old) == Some(me);
    if !renewing {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(match old {
            Some(o) => o.lease_transitions.unwrap_or(0).saturating_add(1),
            None => 0,
        });
    }
    spec.holder_identity = Some(me.to_string());
    spec.lease_duration_seconds = Some(timings.lease_seconds());
    spec.renew_time = Some(MicroTime(now));
    Some(spec)
}

/// What a leader writes when it steps down cleanly (client-go's `ReleaseOnCancel`):
/// no holder, a one-second duration, so a standby takes over at its next try.
pub fn released(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..old.clone()
    }
}
