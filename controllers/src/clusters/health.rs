//! Member health (Karmada's cluster status controller, A.1–A.3): GET `/readyz` (falling
//! back to `/healthz` only when the server answers 404), turned into the Cluster's
//! `Ready` condition — `ClusterReady`, `ClusterNotReady` (an answer other than 200) or
//! `ClusterNotReachable` (no answer) — and damped against flapping ([`Damper`]). The
//! loop that posts it is [`super::status`].

use std::time::Duration;

use causeway_crds::federation::cluster::{Cluster, conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::options::Timing;

/// One probe's verdict: (status, reason, message).
pub type Probe = (&'static str, &'static str, String);

/// How long one probe may take before the member counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Pure: the Cluster's `Ready` condition for a probe's answer, keeping the transition
/// time while the status stays the same and recording the generation observed.
pub fn ready_condition(probe: Probe, current: Option<&Cluster>, now: &Time) -> Condition {
    condition(conditions::READY, probe, current, now)
}

/// Pure: a Cluster condition of `type_` for a verdict (status, reason, message).
pub fn condition(type_: &str, verdict: Probe, current: Option<&Cluster>, now: &Time) -> Condition {
    let (status, reason, message) = verdict;
    let prev = current
        .and_then(|c| c.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: current.and_then(|c| c.metadata.generation),
        last_transition_time: crate::condition::since(prev, type_, status, now),
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
        Ok(Ok(_)) => (
            "True",
            conditions::REASON_CLUSTER_READY,
            "cluster is ready".into(),
        ),
        Ok(Err(kube::Error::Api(s))) => (
            "False",
            conditions::REASON_CLUSTER_NOT_READY,
            format!("cluster is not ready: /readyz answered {}", s.code),
        ),
        Ok(Err(e)) => (
            "False",
            conditions::REASON_CLUSTER_NOT_REACHABLE,
            format!("cluster is not reachable: {e}"),
        ),
        Err(_) => (
            "False",
            conditions::REASON_CLUSTER_NOT_REACHABLE,
            format!(
                "cluster is not reachable: no answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// Flap damping (Karmada's `cluster_condition_cache.go`, A.2): a move between `True`
/// and `False` takes effect only once the new observation has lasted the failure (or
/// success) threshold; until then the current condition is kept. Moves from or to
/// `Unknown`, and a first condition, are not damped. One per member, in memory.
///
/// Unlike Karmada, a controller that restarts mid-flap starts a new window rather than
/// writing its first observation at once, so a restart never flips a cluster.
#[derive(Debug, Default, Clone)]
pub struct Damper {
    /// The status observed by the latest probes, and since when it has been observed.
    observed: Option<(String, jiff::Timestamp)>,
}

impl Damper {
    /// The Ready condition to post for `observed`, given the posted `current` one.
    pub fn adjust(
        &mut self,
        current: Option<&Condition>,
        observed: Condition,
        now: jiff::Timestamp,
        timing: &Timing,
    ) -> Condition {
        let since = match &self.observed {
            Some((status, since)) if *status == observed.status => *since,
            _ => {
                self.observed = Some((observed.status.clone(), now));
                now
            }
        };
        let Some(current) = current else {
            return observed;
        };
        let threshold = match observed.status.as_str() {
            "True" => timing.success_threshold,
            _ => timing.failure_threshold,
        };
        let flip = matches!(
            (current.status.as_str(), observed.status.as_str()),
            ("True", "False") | ("False", "True")
        );
        let waited = now.duration_since(since).unsigned_abs();
        if flip && waited < threshold {
            return current.clone();
        }
        observed
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

    fn cond(status: &str, since: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(since),
        }
    }

    /// A.2: a run of probes (second, observed status) against what gets posted, with the
    /// posted condition fed back as the next round's current one.
    #[test]
    fn flaps_shorter_than_the_thresholds_are_damped() {
        let timing = Timing {
            failure_threshold: std::time::Duration::from_secs(30),
            success_threshold: std::time::Duration::from_secs(20),
            ..Timing::default()
        };
        type Run = (
            &'static str,
            Option<&'static str>,
            Vec<(i64, &'static str, &'static str)>,
        );
        let runs: Vec<Run> = vec![
            (
                "a new cluster takes its first observation at once",
                None,
                vec![(0, "False", "False")],
            ),
            (
                "failures shorter than the failure threshold keep it Ready",
                Some("True"),
                vec![
                    (0, "False", "True"),
                    (10, "False", "True"),
                    (29, "False", "True"),
                    (30, "False", "False"),
                ],
            ),
            (
                "one success inside the window cancels the pending transition",
                Some("True"),
                vec![
                    (0, "False", "True"),
                    (20, "True", "True"),
                    (25, "False", "True"),
                    (50, "False", "True"),
                    (55, "False", "False"),
                ],
            ),
            (
                "recovery waits for the success threshold",
                Some("False"),
                vec![
                    (0, "True", "False"),
                    (19, "True", "False"),
                    (20, "True", "True"),
                ],
            ),
            (
                "Unknown to False is not damped",
                Some("Unknown"),
                vec![(0, "False", "False")],
            ),
            (
                "Unknown to True is not damped",
                Some("Unknown"),
                vec![(0, "True", "True")],
            ),
            (
                "a restart mid-flap opens a new window instead of flipping",
                Some("True"),
                vec![
                    (100, "False", "True"),
                    (129, "False", "True"),
                    (130, "False", "False"),
                ],
            ),
        ];
        for (what, start, steps) in runs {
            let mut damper = Damper::default();
            let mut current = start.map(|s| cond(s, -1000));
            for (t, observed, want) in steps {
                let got = damper.adjust(current.as_ref(), cond(observed, t), at(t).0, &timing);
                assert_eq!(got.status, want, "{what}: at {t}s observed {observed}");
                current = Some(got);
            }
        }
    }

    #[test]
    fn zero_thresholds_turn_damping_off() {
        let timing = Timing {
            failure_threshold: std::time::Duration::ZERO,
            success_threshold: std::time::Duration::ZERO,
            ..Timing::default()
        };
        let mut damper = Damper::default();
        let got = damper.adjust(Some(&cond("True", 0)), cond("False", 5), at(5).0, &timing);
        assert_eq!(got.status, "False");
    }
}
