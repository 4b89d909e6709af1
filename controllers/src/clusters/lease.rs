//! The Pull agent's heartbeat (A.4): it renews the hub Lease `cluster-<name>` in
//! `causeway-system` every quarter of the lease duration (Karmada: 40 s lease, 10 s
//! renewals). `causeway register` creates the Lease, so the agent needs only `get` and
//! `patch` on that one object. The hub's [`super::monitor`] reads it.

use std::time::Duration;

use causeway_crds::names::cluster_lease_name;
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

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

/// Renews the lease of `cluster` until `stop`.
pub async fn run(
    hub: kube::Client,
    cluster: String,
    identity: String,
    duration: Duration,
    stop: CancellationToken,
) {
    let every = renew_interval(duration);
    // a fixed tick, each renewal bounded by it: one slow answer from the hub must not
    // push the next renewals back until the lease runs out
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        match super::within(every, renew_once(&hub, &cluster, &identity, duration)).await {
            Ok(()) if failing => {
                tracing::info!(cluster, "cluster lease renewed again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!(cluster, error = %e, "cannot renew the cluster lease on the hub; the hub marks the cluster Unknown if this lasts");
                }
                failing = true;
            }
        }
    }
}
