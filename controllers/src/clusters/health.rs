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
    // the answer's status as it is (kube's `request_text` takes any 2xx or 3xx for
    // success): only 200 is ready (A.1), a redirect to a login page is not
    let get = |path: &'static str| async move {
        let req = http::Request::get(path)
            .body(kube::client::Body::from(Vec::new()))
            .expect("static request");
        tokio::time::timeout(PROBE_TIMEOUT, member.send(req))
            .await
            .map(|r| r.map(|answer| answer.status()))
    };
    let mut answer = get("/readyz").await;
    let mut path = "/readyz";
    if matches!(answer, Ok(Ok(http::StatusCode::NOT_FOUND))) {
        answer = get("/healthz").await;
        path = "/healthz";
    }
    match answer {
        Ok(Ok(http::StatusCode::OK)) => (
            "True",
            conditions::REASON_CLUSTER_READY,
            "cluster is ready".into(),
        ),
        Ok(Ok(code)) => (
            "False",
            conditions::REASON_CLUSTER_NOT_READY,
            format!("cluster is not ready: {path} answered {}", code.as_u16()),
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

    /// A member API server on 127.0.0.1 that answers every request with `status` (and
    /// `/readyz` with 404 when `no_readyz`); its client.
    async fn answering(status: &'static str, no_readyz: bool) -> kube::Client {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let status = match no_readyz && head.starts_with("GET /readyz") {
                        true => "404 Not Found",
                        false => status,
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\nLocation: /login\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    );
                    let _ = sock.write_all(answer.as_bytes()).await;
                });
            }
        });
        let cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
        kube::Client::try_from(cfg).unwrap()
    }

    /// A.1: only 200 is ready; a redirect (a login page in front of the API server) or
    /// a 204 is an answer that is not (ClusterNotReady); `/healthz` only when `/readyz`
    /// is 404, and its answer is judged the same way.
    #[tokio::test]
    async fn only_200_is_ready() {
        for (status, no_readyz, want, says) in [
            ("200 OK", false, conditions::REASON_CLUSTER_READY, "ready"),
            (
                "302 Found",
                false,
                conditions::REASON_CLUSTER_NOT_READY,
                "/readyz answered 302",
            ),
            (
                "204 No Content",
                false,
                conditions::REASON_CLUSTER_NOT_READY,
                "/readyz answered 204",
            ),
            (
                "500 Internal Server Error",
                false,
                conditions::REASON_CLUSTER_NOT_READY,
                "/readyz answered 500",
            ),
            ("200 OK", true, conditions::REASON_CLUSTER_READY, "ready"),
            (
                "301 Moved Permanently",
                true,
                conditions::REASON_CLUSTER_NOT_READY,
                "/healthz answered 301",
            ),
        ] {
            let (_, reason, message) = probe(&answering(status, no_readyz).await).await;
            assert_eq!(
                reason, want,
                "{status} (no /readyz: {no_readyz}): {message}"
            );
            assert!(message.contains(says), "{status}: {message}");
        }
    }

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
