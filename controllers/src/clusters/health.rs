//! Member health (Karmada's cluster status controller): GET `/readyz` (falling back to
//! `/healthz` when the server has no `/readyz`) every probe interval, written to the
//! Cluster's `Ready` condition — `ClusterReady`, `ClusterNotReady` (an answer other than
//! 200) or `ClusterNotReachable` (no answer). MultiClusterIngress load balancing drops
//! clusters that are not Ready (MCI-8).

use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use causeway_runtime::apply;

/// One probe's verdict: (status, reason, message).
pub type Probe = (&'static str, &'static str, String);

/// How long one probe may take before the member counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Probes the member once.
pub async fn probe(member: &kube::Client) -> Probe {
    let get = |path: &'static str| async move {
        let req = http::Request::get(path)
            .body(Vec::new())
            .expect("static request");
        tokio::time::timeout(PROBE_TIMEOUT, member.request_text(req)).await
    };
    let mut answer = get("/readyz").await;
    if let Ok(Err(kube::Error::Api(s))) = &answer
        && s.code == 404
    {
        answer = get("/healthz").await;
    }
    match answer {
        Ok(Ok(_)) => ("True", "ClusterReady", "cluster is ready".into()),
        Ok(Err(kube::Error::Api(s))) => (
            "False",
            "ClusterNotReady",
            format!("cluster is not ready: /readyz answered {}", s.code),
        ),
        Ok(Err(e)) => (
            "False",
            "ClusterNotReachable",
            format!("cluster is not reachable: {e}"),
        ),
        Err(_) => (
            "False",
            "ClusterNotReachable",
            format!(
                "cluster is not reachable: no answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// Probes `member` every `interval` and keeps the hub Cluster `name`'s Ready condition,
/// until `stop`.
pub async fn run(
    name: String,
    member: kube::Client,
    hub: kube::Client,
    interval: Duration,
    stop: CancellationToken,
) {
    let api: Api<Cluster> = Api::all(hub);
    let mut written: Option<(&'static str, &'static str)> = None;
    loop {
        let (status, reason, message) = tokio::select! {
            v = probe(&member) => v,
            _ = stop.cancelled() => return,
        };
        if written != Some((status, reason)) {
            let current = api.get_opt(&name).await.ok().flatten();
            let prev = current
                .as_ref()
                .and_then(|c| c.status.as_ref())
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .cloned();
            let prev_conds = current
                .as_ref()
                .and_then(|c| c.status.as_ref())
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            let since =
                crate::condition::since(prev_conds, "Ready", status, &Time(jiff::Timestamp::now()));
            let cond = Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message,
                observed_generation: current.as_ref().and_then(|c| c.metadata.generation),
                last_transition_time: since,
            };
            let body = serde_json::json!({ "conditions": [cond] });
            match apply::ensure_status(&api, &name, "causeway.io/v1alpha1", "Cluster", &body, None)
                .await
            {
                Ok(_) => {
                    if prev.as_ref().is_none_or(|p| p.status != status) {
                        tracing::info!(cluster = %name, status, reason, "cluster readiness changed");
                    }
                    written = Some((status, reason));
                }
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %e, "cannot write the cluster's Ready condition; retrying")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}
