use super::*;
use crate::federation::work::{
    ManifestStatus, ResourceHealth, ResourceIdentifier, WorkSpec, WorkStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::json;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// The template generation of the tests.
const G: i64 = 5;

/// A Work whose Degraded condition is `status` since `since`, reported for
/// `observed` (the Work is at generation 2), its one manifest applied at template
/// generation [`G`] and healthy unless Degraded.
fn work(status: Option<&str>, since: &str, observed: i64) -> Work {
    let mut w = Work::new("demo.api-deployment", WorkSpec::default());
    w.metadata.generation = Some(2);
    let health = match status {
        Some("True") => ResourceHealth::Unhealthy,
        Some(_) => ResourceHealth::Healthy,
        None => ResourceHealth::Unknown,
    };
    w.status = Some(WorkStatus {
        manifest_statuses: vec![ManifestStatus {
            identifier: ResourceIdentifier {
                group: "apps".into(),
                kind: "Deployment".into(),
                name: "api".into(),
                version: "v1".into(),
                ..Default::default()
            },
            health: Some(health),
            applied: Some(true),
            template_generation: Some(G),
            ..Default::default()
        }],
        conditions: status
            .map(|s| Condition {
                type_: conditions::DEGRADED.into(),
                status: s.into(),
                reason: "R".into(),
                message: String::new(),
                observed_generation: Some(observed),
                last_transition_time: Time(at(since)),
            })
            .into_iter()
            .collect(),
    });
    w
}

fn behavior(toleration: Option<i32>) -> ApplicationFailoverBehavior {
    serde_json::from_value(match toleration {
        Some(t) => json!({"decisionConditions": {"tolerationSeconds": t}}),
        None => json!({}),
    })
    .unwrap()
}

fn targets(names: &[&str]) -> Vec<TargetCluster> {
    names
        .iter()
        .map(|n| TargetCluster {
            name: n.to_string(),
            replicas: Some(2),
        })
        .collect()
}

fn eviction(cluster: &str, generation: i64) -> Eviction {
    Eviction {
        cluster: cluster.into(),
        reason: "before".into(),
        evicted_at: Time(at("2026-01-01T00:00:00Z")),
        template_generation: Some(generation),
        preserved_label_state: Default::default(),
        clusters_before_failover: Vec::new(),
    }
}

const T0: &str = "2026-01-01T00:00:00Z";

/// One row: the Works of east, west and north (`None`: no Work), what is recorded, and
/// now → the clusters evicted (recorded ones first), the clusters held, next due.
#[test]
fn who_is_moved_away() {
    let sick = || Some(work(Some("True"), T0, 2));
    let fine = || Some(work(Some("False"), T0, 2));
    type Row = (
        &'static str,
        Option<i32>,
        [Option<Work>; 3],
        Vec<Eviction>,
        &'static str,
        Vec<&'static str>,
        Vec<&'static str>,
        Option<&'static str>,
    );
    // refused by a quota: nothing unhealthy, but nothing running either
    let refused = || {
        let mut w = work(Some("False"), T0, 2);
        let m = &mut w.status.as_mut().unwrap().manifest_statuses[0];
        (m.applied, m.health) = (Some(false), Some(ResourceHealth::Unknown));
        Some(w)
    };
    // unhealthy, but still at the template's previous generation
    let older = || {
        let mut w = work(Some("True"), T0, 2);
        w.status.as_mut().unwrap().manifest_statuses[0].template_generation = Some(G - 1);
        Some(w)
    };
    let rows: Vec<Row> = vec![
        (
            "the others are not running it (refused): not moved",
            Some(60),
            [sick(), refused(), refused()],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec!["east"],
            None,
        ),
        (
            "a copy at an older template generation is not judged",
            Some(60),
            [older(), fine(), fine()],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec![],
            None,
        ),
        (
            "unhealthy, not for long enough yet: due when the toleration ends",
            Some(60),
            [sick(), fine(), fine()],
            vec![],
            "2026-01-01T00:00:30Z",
            vec![],
            vec![],
            Some("2026-01-01T00:01:00Z"),
        ),
        (
            "unhealthy for the toleration, healthy elsewhere: moved away",
            Some(60),
            [sick(), fine(), fine()],
            vec![],
            "2026-01-01T00:01:00Z",
            vec!["east"],
            vec![],
            None,
        ),
        (
            "the default toleration is 300 s",
            None,
            [sick(), fine(), fine()],
            vec![],
            "2026-01-01T00:04:59Z",
            vec![],
            vec![],
            Some("2026-01-01T00:05:00Z"),
        ),
        (
            "unhealthy everywhere it runs: the application's fault, not moved",
            Some(60),
            [sick(), sick(), sick()],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec!["east", "west", "north"],
            None,
        ),
        (
            "unhealthy everywhere, one not reporting yet: not moved",
            Some(60),
            [sick(), sick(), None],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec!["east", "west"],
            None,
        ),
        (
            "a report of an older Work generation says nothing",
            Some(60),
            [Some(work(Some("True"), T0, 1)), fine(), fine()],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec![],
            None,
        ),
        (
            "no Degraded condition (unknown health): nothing",
            Some(0),
            [Some(work(None, T0, 2)), fine(), fine()],
            vec![],
            "2026-01-01T01:00:00Z",
            vec![],
            vec![],
            None,
        ),
        (
            "an eviction of this generation stays; of an older one, goes",
            Some(60),
            [None, fine(), fine()],
            vec![eviction("east", G), eviction("north", G - 1)],
            "2026-01-01T01:00:00Z",
            vec!["east"],
            vec![],
            None,
        ),
        (
            "a recorded cluster is not judged again; the other sick one is moved",
            Some(60),
            [sick(), sick(), fine()],
            vec![eviction("east", G)],
            "2026-01-01T01:00:00Z",
            vec!["east", "west"],
            vec![],
            None,
        ),
    ];
    for (what, toleration, works, recorded, now, evicted, held, due) in rows {
        let names = ["east", "west", "north"];
        let scheduled = targets(
            &names
                .iter()
                .copied()
                .filter(|n| !recorded.iter().any(|e| e.cluster == *n))
                .collect::<Vec<_>>(),
        );
        let work_of = |c: &str| {
            let i = names.iter().position(|n| *n == c)?;
            works[i].as_ref()
        };
        let b = behavior(toleration);
        let v = decide(Some(&b), &scheduled, &recorded, work_of, Some(G), at(now));
        let got: Vec<&str> = v.evictions.iter().map(|e| e.cluster.as_str()).collect();
        assert_eq!(got, evicted, "{what}");
        let got: Vec<&str> = v.held.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(got, held, "{what}");
        assert_eq!(v.next_due, due.map(at), "{what}");
        let kept = recorded.iter().filter(|e| e.template_generation == Some(G));
        assert_eq!(v.new, v.evictions.len() - kept.count(), "{what}");
    }
}

/// A new eviction says why, when and for which generation; held ones say what to do.
#[test]
fn evictions_and_holds_explain_themselves() {
    let w = [work(Some("True"), T0, 2), work(Some("False"), T0, 2)];
    let work_of = |c: &str| match c {
        "east" => Some(&w[0]),
        "west" => Some(&w[1]),
        _ => None,
    };
    // decided two minutes after the deadline (the rate limit held it back, or the hub
    // was down): the eviction is timed when it is made, so a graceful purge still
    // gives the other clusters its whole grace period
    let now = at("2026-01-01T00:07:00Z");
    let v = decide(
        Some(&behavior(None)),
        &targets(&["east", "west"]),
        &[],
        work_of,
        Some(G),
        now,
    );
    assert_eq!(
        v.evictions,
        vec![Eviction {
            cluster: "east".into(),
            reason: "unhealthy since 2026-01-01T00:00:00Z, longer than the 300s failover.application tolerates: moved away until the template's next generation".into(),
            evicted_at: Time(at("2026-01-01T00:07:00Z")),
            template_generation: Some(G),
            preserved_label_state: Default::default(),
            clusters_before_failover: Vec::new(),
        }]
    );
    let both = [work(Some("True"), T0, 2), work(Some("True"), T0, 2)];
    let v = decide(
        Some(&behavior(None)),
        &targets(&["east", "west"]),
        &[],
        |c: &str| match c {
            "east" => Some(&both[0]),
            _ => Some(&both[1]),
        },
        Some(G),
        now,
    );
    assert_eq!(
        v.held[0].1,
        "healthy in none of the other clusters it is scheduled to (west): the fault looks like the application's (or those clusters are not Ready), so failover.application does not move it; fix the template"
    );
}

/// Without `failover.application` nothing is evicted, and earlier evictions go.
#[test]
fn without_the_policy_field_evictions_are_forgotten() {
    let sick = work(Some("True"), T0, 2);
    let v = decide(
        None,
        &targets(&["east"]),
        &[eviction("west", G)],
        |_: &str| Some(&sick),
        Some(G),
        at("2026-02-01T00:00:00Z"),
    );
    assert_eq!(v, Verdict::default());
}

/// A toleration too long to add to the time never ends; a negative one is zero.
#[test]
fn extreme_tolerations() {
    let sick = work(Some("True"), T0, 2);
    let fine = work(Some("False"), T0, 2);
    let work_of = |c: &str| {
        if c == "east" {
            Some(&sick)
        } else {
            Some(&fine)
        }
    };
    let v = decide(
        Some(&behavior(Some(-5))),
        &targets(&["east", "west"]),
        &[],
        work_of,
        Some(G),
        at(T0),
    );
    assert_eq!(v.new, 1);
    let mut long = work(Some("True"), "9999-12-30T00:00:00Z", 2);
    long.metadata.generation = Some(2);
    let v = decide(
        Some(&behavior(Some(i32::MAX))),
        &targets(&["east", "west"]),
        &[],
        |c: &str| {
            if c == "east" {
                Some(&long)
            } else {
                Some(&fine)
            }
        },
        Some(G),
        at(T0),
    );
    assert_eq!((v.new, v.next_due), (0, None));
}

/// statePreservation: a new eviction carries what the rules read from the failed copy's
/// status, and the clusters the template ran in then; a rule that reads nothing says so
/// in the reason.
#[test]
fn an_eviction_preserves_the_failed_copys_state() {
    let mut sick = work(Some("True"), T0, 2);
    sick.status.as_mut().unwrap().manifest_statuses[0].status =
        Some(json!({"replicas": 6, "jobStatus": {"id": "job-42"}}));
    let fine = work(Some("False"), T0, 2);
    let b: ApplicationFailoverBehavior = serde_json::from_value(json!({
        "decisionConditions": {"tolerationSeconds": 0},
        "statePreservation": {"rules": [
            {"aliasLabelName": "example.com/job", "jsonPath": "{.jobStatus.id}"},
            {"aliasLabelName": "example.com/nope", "jsonPath": "{.nope}"}]}}))
    .unwrap();
    let v = decide(
        Some(&b),
        &targets(&["east", "west"]),
        &[],
        |c: &str| {
            if c == "east" {
                Some(&sick)
            } else {
                Some(&fine)
            }
        },
        Some(G),
        at(T0),
    );
    let e = &v.evictions[0];
    assert_eq!(
        e.preserved_label_state,
        std::collections::BTreeMap::from([("example.com/job".to_string(), "job-42".to_string())])
    );
    assert_eq!(e.clusters_before_failover, ["east", "west"]);
    assert!(
        e.reason.ends_with(
            "; statePreservation kept nothing for example.com/nope: {.nope} finds nothing in the failed copy's status"
        ),
        "{}",
        e.reason
    );
}
