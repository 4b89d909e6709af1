use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

fn at(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn cluster(mode: &str, ready: Option<(&str, &str, i64)>) -> Cluster {
    let mut c: Cluster = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "west", "creationTimestamp": Time(at(0))},
        "spec": {"syncMode": mode},
    }))
    .unwrap();
    if let Some((status, reason, since)) = ready {
        c.status = serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": status, "reason": reason, "message": "",
            "lastTransitionTime": Time(at(since))}]}))
        .unwrap();
    }
    c
}

fn lease(renewed: i64) -> Lease {
    let mut l = Lease::default();
    l.metadata.name = Some(cluster_lease_name("west"));
    l.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
        renew_time: Some(MicroTime(at(renewed))),
        ..Default::default()
    });
    l
}

fn timing() -> Timing {
    Timing {
        monitor_grace_period: Duration::from_secs(40),
        startup_grace_period: Duration::from_secs(60),
        ..Timing::default()
    }
}

/// A.4: (what, cluster, lease renewals seen by the monitor at each second, the second
/// it checks last, the Unknown reason expected then).
#[test]
fn a_silent_agent_makes_its_cluster_unknown_after_the_grace_period() {
    type Step = (i64, Option<i64>);
    let ready = Some(("True", "ClusterReady", 5));
    let cases: Vec<(&str, Cluster, Vec<Step>, Option<&str>)> = vec![
        (
            "a Push cluster is never aged",
            cluster("Push", ready),
            vec![(0, None), (500, None)],
            None,
        ),
        (
            "fresh lease: nothing",
            cluster("Pull", ready),
            vec![(10, Some(10)), (30, Some(30)), (60, Some(50))],
            None,
        ),
        (
            "no renewal for the grace period: Unknown",
            cluster("Pull", ready),
            vec![(10, Some(10)), (49, Some(10))],
            None,
        ),
        (
            "no renewal past the grace period: Unknown",
            cluster("Pull", ready),
            vec![(10, Some(10)), (50, Some(10))],
            Some(conditions::REASON_CLUSTER_STATUS_UNKNOWN),
        ),
        (
            "a renewed lease alone keeps it alive",
            cluster("Pull", ready),
            vec![
                (10, Some(10)),
                (45, Some(45)),
                (80, Some(79)),
                (119, Some(115)),
            ],
            None,
        ),
        (
            "never posted: the startup grace period, from creation",
            cluster("Pull", None),
            vec![(30, None), (59, None)],
            None,
        ),
        (
            "never posted past the startup grace period",
            cluster("Pull", None),
            vec![(30, None), (60, None)],
            Some(conditions::REASON_CLUSTER_STATUS_NEVER_UPDATED),
        ),
        (
            "created ahead of this clock (a skew): no silence yet, not 300 s of it",
            cluster("Pull", None),
            vec![(-300, None)],
            None,
        ),
        (
            "already Unknown: not posted again",
            cluster("Pull", Some(("Unknown", "ClusterStatusUnknown", 5))),
            vec![(10, Some(1)), (200, Some(1))],
            None,
        ),
    ];
    for (what, c, steps, want) in cases {
        let mut fresh = Freshness::default();
        let mut got = None;
        for (t, renewed) in steps {
            let l = renewed.map(lease);
            got = fresh.verdict(&c, l.as_ref(), at(t), &timing());
        }
        assert_eq!(got.as_ref().map(|c| c.reason.as_str()), want, "{what}");
        if let Some(c) = got {
            assert_eq!(c.status, "Unknown", "{what}");
            assert!(c.message.contains("west"), "{what}: {}", c.message);
        }
    }
}

#[test]
fn a_ready_change_counts_as_a_report() {
    let mut fresh = Freshness::default();
    let t = timing();
    let c1 = cluster("Pull", Some(("True", "ClusterReady", 5)));
    assert!(fresh.verdict(&c1, None, at(10), &t).is_none());
    // the agent posted a new Ready (False) at 45 without a lease: still fresh at 80
    let c2 = cluster("Pull", Some(("False", "ClusterNotReady", 45)));
    assert!(fresh.verdict(&c2, None, at(45), &t).is_none());
    assert!(fresh.verdict(&c2, None, at(80), &t).is_none());
    assert!(fresh.verdict(&c2, None, at(85), &t).is_some());
}

/// An agent that stepped down because its member's API server stopped answering
/// posted Ready=False (ClusterNotReachable) last: the Unknown that follows its silence
/// says so, rather than only "unreachable from the hub or its agent is down".
#[test]
fn the_unknown_after_a_failing_report_repeats_it() {
    let mut fresh = Freshness::default();
    let t = timing();
    let mut c = cluster("Pull", Some(("False", "ClusterNotReachable", 5)));
    c.status.as_mut().unwrap().conditions[0].message = "cluster is not reachable: refused".into();
    assert!(fresh.verdict(&c, Some(&lease(5)), at(10), &t).is_none());
    let unknown = fresh.verdict(&c, Some(&lease(5)), at(51), &t).unwrap();
    assert!(
        unknown.message.ends_with(
            "its agent is down; its last report: ClusterNotReachable (cluster is not reachable: refused)"
        ),
        "{}",
        unknown.message
    );
}

fn taint(key: &str, added: i64) -> Taint {
    Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: Some(Time(at(added))),
    }
}

fn ready(status: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: "R".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(at(0)),
    }
}

/// A.5, the table of federation.md §1.1.
#[test]
fn the_ready_condition_maps_to_taints() {
    let user = Taint {
        key: "dedicated".into(),
        effect: "NoExecute".into(),
        value: Some("gpu".into()),
        time_added: None,
    };
    let nr = taints::NOT_READY;
    let un = taints::UNREACHABLE;
    // (what, current taints, Ready status, expected taint keys or None for unchanged)
    type Case<'a> = (&'a str, Vec<Taint>, Option<&'a str>, Option<Vec<&'a str>>);
    let cases: Vec<Case> = vec![
        ("no condition yet: not-ready", vec![], None, Some(vec![nr])),
        ("False: not-ready", vec![], Some("False"), Some(vec![nr])),
        (
            "False drops unreachable",
            vec![taint(un, 1)],
            Some("False"),
            Some(vec![nr]),
        ),
        (
            "Unknown: unreachable, drops not-ready",
            vec![taint(nr, 1)],
            Some("Unknown"),
            Some(vec![un]),
        ),
        (
            "True drops both",
            vec![taint(nr, 1), taint(un, 1)],
            Some("True"),
            Some(vec![]),
        ),
        ("True with none: unchanged", vec![], Some("True"), None),
        (
            "already right: unchanged",
            vec![taint(nr, 1)],
            Some("False"),
            None,
        ),
        (
            "a user's taints stay",
            vec![user.clone(), taint(un, 1)],
            Some("True"),
            Some(vec!["dedicated"]),
        ),
    ];
    for (what, current, status, want) in cases {
        let cond = status.map(ready);
        let got = desired_taints(&current, cond.as_ref(), &Time(at(100)));
        assert_eq!(
            got.as_ref()
                .map(|ts| ts.iter().map(|t| t.key.as_str()).collect::<Vec<_>>()),
            want,
            "{what}"
        );
    }
    // one that replaces the other (False to Unknown) takes its timeAdded: failover
    // counts from when the member stopped being Ready; a new one gets now
    let got = desired_taints(
        &[taint(nr, 1), user.clone()],
        Some(&ready("Unknown")),
        &Time(at(100)),
    )
    .unwrap();
    assert_eq!(
        got.iter().find(|t| t.key == un).unwrap().time_added,
        Some(Time(at(1)))
    );
    assert_eq!(got.len(), 2);
    let got = desired_taints(&[user], Some(&ready("Unknown")), &Time(at(100))).unwrap();
    assert_eq!(
        got.iter().find(|t| t.key == un).unwrap().time_added,
        Some(Time(at(100)))
    );
}
