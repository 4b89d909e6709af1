//! Table tests of staleness: which clusters are stale, which are past the TTL, when
//! the next one will be, and the `EndpointsStale` condition at each stage.

use causeway_crds::federation::cluster::ClusterStatus;
use causeway_crds::mcs::ServiceImportStatus;
use serde_json::json;

use super::*;

/// A Cluster `name` whose `Ready` condition is `ready` (status, lastTransitionTime in
/// seconds), or that has no Ready condition yet (None). Shared by the loops' tests.
pub(crate) fn cluster(name: &str, ready: Option<(&str, i64)>) -> Arc<Cluster> {
    let mut c: Cluster = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:1"},
    }))
    .unwrap();
    c.status = Some(ClusterStatus {
        conditions: ready
            .map(|(status, at)| {
                vec![Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: t(at),
                }]
            })
            .unwrap_or_default(),
        ..Default::default()
    });
    Arc::new(c)
}

/// The clusters an import status lists, and its `EndpointsStale` condition.
pub(crate) fn import_summary(st: &ServiceImportStatus) -> (Vec<String>, Option<Summary>) {
    let clusters = st.clusters.iter().map(|c| c.cluster.clone()).collect();
    (clusters, stale_condition(&st.conditions))
}

/// A condition's (status, reason, message).
pub(crate) type Summary = (String, String, String);

/// The `EndpointsStale` condition among `conditions`.
pub(crate) fn stale_condition(conditions: &[Condition]) -> Option<Summary> {
    conditions
        .iter()
        .find(|c| c.type_ == ENDPOINTS_STALE)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A previous `EndpointsStale=True` condition with `reason`, since `at` seconds.
pub(crate) fn stale_true(reason: &str, at: i64) -> Condition {
    Condition {
        type_: ENDPOINTS_STALE.into(),
        status: "True".into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: t(at),
    }
}

pub(crate) fn t(s: i64) -> Time {
    Time(jiff::Timestamp::from_second(s).unwrap())
}

/// TTL of the tests: 300 s.
pub(crate) const TTL: Duration = Duration::from_secs(300);

/// east Ready, west not Ready since 1000 s, north Unknown since 1200 s, south without a
/// Ready condition yet; at `now` seconds.
pub(crate) fn world(now: i64) -> (Vec<Arc<Cluster>>, Staleness) {
    let clusters = vec![
        cluster("east", Some(("True", 0))),
        cluster("west", Some(("False", 1000))),
        cluster("north", Some(("Unknown", 1200))),
        cluster("south", None),
    ];
    let s = Staleness::new(&clusters, TTL, t(now).0);
    (clusters, s)
}

#[test]
fn stale_while_not_ready_and_withdrawn_past_the_ttl() {
    // (now, withdrawn clusters, seconds to the next expiry)
    let table: &[(i64, &[&str], Option<u64>)] = &[
        (1000, &[], Some(300)),
        (1299, &[], Some(1)),
        (1300, &["west"], Some(200)),
        (1499, &["west"], Some(1)),
        (1500, &["north", "west"], None),
    ];
    for (now, want, next) in table {
        let (_, s) = world(*now);
        let got: Vec<&str> = ["east", "west", "north", "south", "gone"]
            .into_iter()
            .filter(|c| s.withdrawn(c))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(&got, want, "withdrawn at {now}");
        assert_eq!(
            s.next_expiry(),
            next.map(Duration::from_secs),
            "next expiry at {now}"
        );
        assert!(s.get("east").is_none() && s.get("south").is_none());
    }
    assert_eq!(
        world(0).1.get("west"),
        Some(&Stale {
            since: t(1000).0,
            expires: t(1300).0
        })
    );
}

#[test]
fn the_condition_says_who_since_when_and_until_when() {
    // (now, serving clusters, previous conditions, expected (status, reason,
    // lastTransitionTime) or None, fragments of the message)
    type Case = (
        i64,
        &'static [&'static str],
        Vec<Condition>,
        Option<(&'static str, &'static str, i64)>,
        &'static [&'static str],
    );
    let table: Vec<Case> = vec![
        // ready: no condition at all
        (1100, &["east", "south"], vec![], None, &[]),
        // stale within the TTL: kept, and said so
        (
            1100,
            &["east", "west"],
            vec![],
            Some(("True", reason::CLUSTER_NOT_READY, 1100)),
            &[
                "cluster west is not Ready since 1970-01-01T00:16:40Z",
                "last known endpoints are served until 1970-01-01T00:21:40Z, then withdrawn",
            ],
        ),
        // past the TTL: withdrawn since the expiry; the transition time stays
        (
            1400,
            &["east", "west", "north"],
            vec![stale_true(reason::CLUSTER_NOT_READY, 1100)],
            Some(("True", reason::ENDPOINTS_WITHDRAWN, 1100)),
            &[
                "cluster north is not Ready since 1970-01-01T00:20:00Z: its last known endpoints are served until 1970-01-01T00:25:00Z",
                "cluster west is not Ready since 1970-01-01T00:16:40Z: its endpoints are withdrawn since 1970-01-01T00:21:40Z until it is Ready again",
            ],
        ),
        // ready again: False from now on
        (
            1600,
            &["east"],
            vec![stale_true(reason::ENDPOINTS_WITHDRAWN, 1100)],
            Some(("False", reason::CLUSTERS_READY, 1600)),
            &["every cluster serving it is Ready"],
        ),
    ];
    for (now, serving, prev, want, fragments) in table {
        let (_, s) = world(now);
        let got = s.condition(serving.iter().copied(), &prev);
        let summary = got.as_ref().map(|c| {
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.clone(),
            )
        });
        assert_eq!(
            summary,
            want.map(|(st, r, at)| (st, r, t(at))),
            "at {now} serving {serving:?}: {got:?}"
        );
        for f in fragments {
            let msg = &got.as_ref().unwrap().message;
            assert!(msg.contains(f), "at {now}: {msg:?} lacks {f:?}");
        }
    }
}

/// `cluster` with the registry's managed taint `key`, added at `at` seconds.
fn tainted(c: Arc<Cluster>, key: &str, at: i64) -> Arc<Cluster> {
    let mut c = (*c).clone();
    c.spec.taints.push(k8s_openapi::api::core::v1::Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: Some(t(at)),
    });
    Arc::new(c)
}

#[test]
fn the_ttl_counts_from_when_the_cluster_first_stopped_being_ready() {
    use causeway_crds::federation::cluster::taints::{NOT_READY, UNREACHABLE};
    // (cluster, expected since): a move between False and Unknown (which resets the
    // condition's lastTransitionTime) does not restart the TTL, as the registry's
    // taint keeps its timeAdded; without a taint, the condition's time is used
    let table: Vec<(Arc<Cluster>, i64)> = vec![
        // False since 1000, then Unknown at 5000: still since 1000
        (
            tainted(cluster("c", Some(("Unknown", 5000))), UNREACHABLE, 1000),
            1000,
        ),
        // Unknown since 1000, then False at 5000: still since 1000
        (
            tainted(cluster("c", Some(("False", 5000))), NOT_READY, 1000),
            1000,
        ),
        // not tainted yet: since the condition changed
        (cluster("c", Some(("False", 5000))), 5000),
    ];
    for (c, since) in table {
        let s = Staleness::new(&[c], TTL, t(6000).0);
        assert_eq!(
            s.get("c"),
            Some(&Stale {
                since: t(since).0,
                expires: t(since + 300).0
            }),
            "since {since}"
        );
        assert_eq!(s.withdrawn("c"), since + 300 <= 6000);
    }
}
