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

/// Pure: the Cluster's `Ready` condition for a probe's answer, keeping the transition
/// time while the status stays the same and recording the generation observed.
pub fn ready_condition(probe: Probe, current: Option<&Cluster>, now: &Time) -> Condition {
    let (status, reason, message) = probe;
    let prev = current
        .and_then(|c| c.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: current.and_then(|c| c.metadata.generation),
        last_transition_time: crate::condition::since(prev, "Ready", status, now),
    }
}

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
            let cond = ready_condition(
                (status, reason, message),
                current.as_ref(),
                &Time(jiff::Timestamp::now()),
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).unwrap())
    }

    fn cluster(ready: Option<(&str, i64)>) -> Cluster {
        let mut c: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "east", "generation": 4},
            "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:1"},
        }))
        .unwrap();
        if let Some((status, since)) = ready {
            c.status = serde_json::from_value(serde_json::json!({"conditions": [{
                "type": "Ready", "status": status, "reason": "R", "message": "",
                "lastTransitionTime": at(since)}]}))
            .unwrap();
        }
        c
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_does() {
        let ready = || ("True", "ClusterReady", "cluster is ready".to_string());
        let down = || ("False", "ClusterNotReachable", "no answer".to_string());
        // (previous Ready, probe, expected lastTransitionTime)
        type Case = (Option<(&'static str, i64)>, Probe, i64);
        let table: Vec<Case> = vec![
            (None, ready(), 100),
            (Some(("True", 10)), ready(), 10),
            (Some(("True", 10)), down(), 100),
            (Some(("False", 20)), down(), 20),
        ];
        for (prev, probe, since) in table {
            let c = cluster(prev);
            let got = ready_condition(probe.clone(), Some(&c), &at(100));
            assert_eq!(
                got.last_transition_time,
                at(since),
                "{prev:?} then {probe:?}"
            );
            assert_eq!(
                (got.status.as_str(), got.reason.as_str()),
                (probe.0, probe.1)
            );
            assert_eq!(got.observed_generation, Some(4));
        }
        assert_eq!(
            ready_condition(down(), None, &at(7)).last_transition_time,
            at(7)
        );
    }
}
