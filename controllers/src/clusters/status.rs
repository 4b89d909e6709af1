//! The cluster status controller (A.1–A.3, A.8): one per member, run by the hub for Push
//! members and by the agent inside a Pull member. Every status interval it probes the
//! member, damps the verdict ([`Damper`]), and posts the Cluster's status: the `Ready`
//! condition, the Kubernetes version, and what [`super::summary`] gathers. It writes
//! only when something changed, under its own field manager, so the hub's lease
//! monitor (which may post `Ready=Unknown` for a silent Pull member) never erases it.

use causeway_crds::federation::cluster::{Cluster, conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::health::{Damper, probe, ready_condition};
use super::options::Timing;
use causeway_runtime::apply;

/// Field manager of the status this controller posts.
pub const MANAGER: &str = "causeway-cluster-status";

/// How many status rounds pass between two reads of the member's version.
const VERSION_EVERY: u32 = 30;

/// Pure: the status body to post from the damped Ready condition and what else is known.
pub fn status_body(ready: &Condition, version: Option<&str>) -> Value {
    let mut body = json!({ "conditions": [ready] });
    if let Some(v) = version {
        body["kubernetesVersion"] = json!(v);
    }
    body
}

/// The Ready condition a Cluster carries now.
pub fn ready_of(c: &Cluster) -> Option<&Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::READY)
}

/// Posts the status of Cluster `name` (on `hub`) for the `member` it describes, every
/// status interval, until `stop`.
pub async fn run(
    name: String,
    member: kube::Client,
    hub: kube::Client,
    timing: Timing,
    stop: CancellationToken,
) {
    let api: Api<Cluster> = Api::all(hub);
    let mut damper = Damper::default();
    let mut version: Option<String> = None;
    let mut round: u32 = 0;
    loop {
        let verdict = tokio::select! {
            v = probe(&member) => v,
            _ = stop.cancelled() => return,
        };
        let reachable = verdict.0 == "True";
        if reachable && (version.is_none() || round.is_multiple_of(VERSION_EVERY)) {
            if let Ok(v) = member.apiserver_version().await {
                version = Some(v.git_version);
            }
        }
        round = round.wrapping_add(1);
        match api.get_opt(&name).await {
            Ok(Some(current)) => {
                let now = jiff::Timestamp::now();
                let observed = ready_condition(verdict, Some(&current), &Time(now));
                let ready = damper.adjust(ready_of(&current), observed, now, &timing);
                let body = status_body(&ready, version.as_deref());
                let live = current
                    .status
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or(Value::Null);
                if !apply::contains(&live, &body) {
                    let before = ready_of(&current).map(|c| c.status.clone());
                    match apply::apply_status_as(
                        &api,
                        MANAGER,
                        &name,
                        "causeway.io/v1alpha1",
                        "Cluster",
                        &body,
                    )
                    .await
                    {
                        Ok(_) if before.as_deref() != Some(ready.status.as_str()) => {
                            tracing::info!(cluster = %name, status = %ready.status, reason = %ready.reason, "cluster readiness changed");
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(cluster = %name, error = %e, "cannot post the cluster's status; retrying")
                        }
                    }
                }
            }
            Ok(None) => {
                tracing::debug!(cluster = %name, "the Cluster is gone; its workers stop soon")
            }
            Err(e) => {
                tracing::warn!(cluster = %name, error = %e, "cannot read the Cluster from the hub; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(timing.status_interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}
