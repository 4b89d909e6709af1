use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn spec(holder: Option<&str>, duration: Option<i32>, transitions: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: holder.map(String::from),
        lease_duration_seconds: duration,
        lease_transitions: Some(transitions),
        acquire_time: Some(MicroTime(t(0))),
        renew_time: Some(MicroTime(t(5))),
        ..Default::default()
    }
}

/// (case, old record, unchanged for, want: `None` = held by another, else the
/// transitions and acquire time written).
type Case = (
    &'static str,
    Option<LeaseSpec>,
    Duration,
    Option<(i32, Timestamp)>,
);

#[test]
fn who_may_write_the_lease_and_what() {
    let tm = Timings::default(); // 15 s
    let cases: Vec<Case> = vec![
        ("no lease yet: create it", None, secs(0), Some((0, t(100)))),
        (
            "released (no holder): take it",
            Some(spec(None, Some(1), 3)),
            secs(0),
            Some((4, t(100))),
        ),
        (
            "empty holder: take it",
            Some(spec(Some(""), Some(15), 3)),
            secs(0),
            Some((4, t(100))),
        ),
        (
            "ours: renew, keep acquire time and transitions",
            Some(spec(Some("me"), Some(15), 3)),
            secs(0),
            Some((3, t(0))),
        ),
        (
            "ours even when stale: renew",
            Some(spec(Some("me"), Some(15), 3)),
            secs(60),
            Some((3, t(0))),
        ),
        (
            "another's, live",
            Some(spec(Some("other"), Some(15), 3)),
            secs(14),
            None,
        ),
        (
            "another's, unchanged for its duration: take over",
            Some(spec(Some("other"), Some(15), 3)),
            secs(15),
            Some((4, t(100))),
        ),
        (
            "another's with a longer duration of its own: still live",
            Some(spec(Some("other"), Some(30), 3)),
            secs(20),
            None,
        ),
        (
            "another's without a duration: ours counts",
            Some(spec(Some("other"), None, 3)),
            secs(16),
            Some((4, t(100))),
        ),
    ];
    for (case, old, unchanged, want) in cases {
        let got = next_record(old.as_ref(), unchanged, "me", &tm, t(100));
        match (got, want) {
            (None, None) => {}
            (Some(g), Some((transitions, acquired))) => {
                assert_eq!(g.holder_identity.as_deref(), Some("me"), "{case}");
                assert_eq!(g.lease_transitions, Some(transitions), "{case}");
                assert_eq!(g.acquire_time, Some(MicroTime(acquired)), "{case}");
                assert_eq!(g.renew_time, Some(MicroTime(t(100))), "{case}");
                assert_eq!(g.lease_duration_seconds, Some(15), "{case}");
            }
            (g, w) => panic!("{case}: got {g:?}, want {w:?}"),
        }
    }
}

#[test]
fn a_released_lease_has_no_holder_and_expires_at_once() {
    let mut old = spec(Some("me"), Some(15), 2);
    old.strategy = Some("OldestEmulationVersion".into());
    let r = released(&old, t(100));
    assert_eq!(holder(Some(&r)), None);
    assert_eq!(r.lease_duration_seconds, Some(1));
    assert_eq!(r.lease_transitions, Some(2));
    assert_eq!(r.strategy, old.strategy, "other fields kept");
}

#[test]
fn timings_are_checked_with_the_flag_to_fix() {
    let ms = Duration::from_millis;
    let cases = [
        (secs(15), secs(10), secs(2), None),
        (secs(3), secs(2), ms(500), None),
        (
            ms(500),
            ms(400),
            ms(100),
            Some("--leader-elect-lease-duration"),
        ),
        (
            secs(10),
            secs(10),
            secs(2),
            Some("--leader-elect-renew-deadline"),
        ),
        (
            secs(10),
            secs(12),
            secs(2),
            Some("--leader-elect-renew-deadline"),
        ),
        (
            secs(15),
            secs(10),
            secs(10),
            Some("--leader-elect-retry-period"),
        ),
        (
            secs(15),
            secs(10),
            secs(0),
            Some("--leader-elect-retry-period"),
        ),
    ];
    for (l, r, p, want) in cases {
        let got = Timings {
            lease_duration: l,
            renew_deadline: r,
            retry_period: p,
        }
        .check();
        match want {
            None => assert_eq!(got, Ok(()), "{l:?} {r:?} {p:?}"),
            Some(flag) => {
                let e = got.unwrap_err();
                assert!(e.starts_with(flag), "{l:?} {r:?} {p:?}: {e}");
            }
        }
    }
    let lease = |d| Timings {
        lease_duration: d,
        ..Timings::default()
    };
    assert_eq!(lease(secs(15)).lease_seconds(), 15);
    assert_eq!(lease(ms(2500)).lease_seconds(), 3, "rounded up");
}

#[test]
fn a_standby_says_who_leads() {
    let cases = [
        (true, Some("a"), None),
        (
            false,
            Some("pod-1_x"),
            Some("not the leader (leader is pod-1_x)"),
        ),
        (false, None, Some("not the leader (no leader elected yet)")),
    ];
    for (leading, holder, want) in cases {
        let s = Status {
            leading,
            holder: holder.map(String::from),
        };
        assert_eq!(s.not_ready().as_deref(), want);
    }
}

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    leader: LeaderArgs,
}

#[test]
fn flags_have_kube_controller_manager_names_and_defaults() {
    let d = Cli::try_parse_from(["x"]).unwrap().leader;
    assert!(d.leader_elect);
    assert_eq!(d.timings(), Timings::default());
    assert_eq!(d.leader_elect_resource_namespace, "causeway-system");
    let cases: [(&[&str], bool); 4] = [
        (&["--leader-elect=false"], false),
        (&["--leader-elect"], true),
        (&["--leader-elect=true"], true),
        (&["--leader-elect", "false"], false),
    ];
    for (args, want) in cases {
        let cli = Cli::try_parse_from(std::iter::once(&"x").chain(args)).unwrap();
        assert_eq!(cli.leader.leader_elect, want, "{args:?}");
    }
    let c = Cli::try_parse_from([
        "x",
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "500ms",
    ])
    .unwrap();
    assert_eq!(
        c.leader.timings(),
        Timings {
            lease_duration: secs(3),
            renew_deadline: secs(2),
            retry_period: Duration::from_millis(500),
        }
    );
    let e = Cli::try_parse_from(["x", "--leader-elect-retry-period", "soon"]).unwrap_err();
    assert!(e.to_string().contains("\"soon\" is not a duration"), "{e}");
    // the rule a value breaks is said
    for (value, says) in [
        ("0s", "must be more than 0"),
        ("48h", "is too long: at most 24h"),
    ] {
        let e = Cli::try_parse_from(["x", "--leader-elect-retry-period", value]).unwrap_err();
        assert!(e.to_string().contains(says), "{value}: {e}");
    }
}
