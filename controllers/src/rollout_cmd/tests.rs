use causeway_crds::federation::binding::{BindingStatus, conditions};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::{Seen, Standing, standing};

fn seen<'a>(
    status: Option<&'a BindingStatus>,
    ordered: bool,
    generation: Option<i64>,
    clusters: &'a [String],
    works: &'a [causeway_crds::federation::work::Work],
) -> Seen<'a> {
    Seen {
        status,
        ordered,
        generation,
        replicas: (None, None),
        clusters,
        works,
    }
}

fn status(type_: &str, status: &str, reason: &str, generation: Option<i64>) -> BindingStatus {
    BindingStatus {
        conditions: vec![Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{reason} message"),
            observed_generation: generation,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }],
        ..Default::default()
    }
}

#[test]
fn where_a_rollout_stands() {
    let rolled = |s: &str, r: &str, g: i64| status(conditions::ROLLED_OUT, s, r, Some(g));
    let done = |r: &str| Standing::Done(format!("{r} message"));
    let going = |r: &str| Standing::Going(format!("{r} message"));
    /// What, the binding's status, ordered, the template's generation, the answer.
    type Case = (
        &'static str,
        Option<BindingStatus>,
        bool,
        Option<i64>,
        Standing,
    );
    let cases: Vec<Case> = vec![
        (
            "complete at the template's generation",
            Some(rolled("True", conditions::REASON_ROLLOUT_COMPLETE, 3)),
            true,
            Some(3),
            done(conditions::REASON_ROLLOUT_COMPLETE),
        ),
        (
            "complete, but of the generation before",
            Some(rolled("True", conditions::REASON_ROLLOUT_COMPLETE, 2)),
            true,
            Some(3),
            Standing::Going("waiting for the hub to roll out template generation 3".into()),
        ),
        (
            "a wave in progress",
            Some(rolled("False", conditions::REASON_WAVE_IN_PROGRESS, 3)),
            true,
            Some(3),
            going(conditions::REASON_WAVE_IN_PROGRESS),
        ),
        (
            "past its progress deadline",
            Some(rolled(
                "False",
                conditions::REASON_PROGRESS_DEADLINE_EXCEEDED,
                3,
            )),
            true,
            Some(3),
            Standing::Failed(format!(
                "{} message",
                conditions::REASON_PROGRESS_DEADLINE_EXCEEDED
            )),
        ),
        (
            "ordered, a kind with no generation: nothing to order, but it must be applied",
            Some(status(
                conditions::ROLLED_OUT,
                "Unknown",
                conditions::REASON_NO_GENERATION,
                None,
            )),
            true,
            None,
            Standing::Going("waiting for the members to apply it".into()),
        ),
        (
            "ordered, a kind with no generation, applied everywhere",
            Some(BindingStatus {
                conditions: [
                    status(
                        conditions::ROLLED_OUT,
                        "Unknown",
                        conditions::REASON_NO_GENERATION,
                        None,
                    ),
                    status(
                        conditions::FULLY_APPLIED,
                        "True",
                        conditions::REASON_FULLY_APPLIED_SUCCESS,
                        None,
                    ),
                ]
                .into_iter()
                .flat_map(|s| s.conditions)
                .collect(),
                ..Default::default()
            }),
            true,
            None,
            Standing::Done(format!(
                "{} message; its kind keeps no metadata.generation, so which change the clusters run cannot be told",
                conditions::REASON_FULLY_APPLIED_SUCCESS
            )),
        ),
        (
            "ordered, no condition yet",
            None,
            true,
            Some(1),
            Standing::Going("waiting for the hub to start the rollout".into()),
        ),
        (
            "not ordered, a kind with no generation: applied everywhere",
            Some(status(
                conditions::FULLY_APPLIED,
                "True",
                conditions::REASON_FULLY_APPLIED_SUCCESS,
                None,
            )),
            false,
            None,
            Standing::Done(format!(
                "{} message; its kind keeps no metadata.generation, so which change the clusters run cannot be told",
                conditions::REASON_FULLY_APPLIED_SUCCESS
            )),
        ),
        (
            "not ordered: not applied yet",
            Some(status(
                conditions::FULLY_APPLIED,
                "False",
                conditions::REASON_FULLY_APPLIED_FAILED,
                None,
            )),
            false,
            Some(3),
            going(conditions::REASON_FULLY_APPLIED_FAILED),
        ),
        (
            "not ordered, no status yet",
            None,
            false,
            Some(1),
            Standing::Going("waiting for the members to apply it".into()),
        ),
    ];
    for (what, st, ordered, generation, want) in cases {
        let east = ["east".to_string()];
        let s = seen(st.as_ref(), ordered, generation, &east, &[]);
        assert_eq!(standing(&s), want, "{what}");
    }
}

/// Without waves, every scheduled cluster's Work must run the template's generation
/// (applied, healthy), not only have applied something: FullyApplied may still be the
/// last generation's.
#[test]
fn without_waves_every_cluster_must_run_the_generation() {
    let applied = status(
        conditions::FULLY_APPLIED,
        "True",
        conditions::REASON_FULLY_APPLIED_SUCCESS,
        None,
    );
    let work = |cluster: &str, generation: i64| -> causeway_crds::federation::work::Work {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "demo.web-configmap", "namespace": format!("causeway-es-{cluster}"), "generation": 1},
            "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}}]}},
            "status": {"manifestStatuses": [{"identifier": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap", "namespace": "demo", "name": "web"},
                "applied": true, "health": "Healthy", "templateGeneration": generation}]},
        }))
        .unwrap()
    };
    let clusters = ["east".to_string(), "west".to_string()];
    let works = [work("east", 3), work("west", 2)];
    assert_eq!(
        standing(&seen(Some(&applied), false, Some(3), &clusters, &works)),
        Standing::Going(
            "template generation 3 is rolling out, waiting for west: ConfigMap web runs template generation 2".into()
        )
    );
    let works = [work("east", 3), work("west", 3)];
    assert_eq!(
        standing(&seen(Some(&applied), false, Some(3), &clusters, &works)),
        Standing::Done("every cluster (2) runs template generation 3, applied and healthy".into())
    );
    assert_eq!(
        standing(&seen(
            Some(&applied),
            false,
            Some(3),
            &clusters,
            &works[..1]
        )),
        Standing::Going(
            "template generation 3 is rolling out, waiting for west: no Work yet".into()
        )
    );
}

/// What waiting cannot fix fails at once; a new replica count waits for its division;
/// a RolledOut condition of another generation (a template deleted and made again) is
/// not taken for this one's.
#[test]
fn what_waiting_cannot_fix_and_what_it_must_wait_for() {
    let east = ["east".to_string()];
    let unscheduled = status(conditions::SCHEDULED, "False", "NoClusterFit", Some(1));
    assert_eq!(
        standing(&seen(Some(&unscheduled), true, Some(1), &east, &[])),
        Standing::Failed("not scheduled: NoClusterFit message".into())
    );
    assert_eq!(
        standing(&seen(None, false, Some(1), &[], &[])),
        Standing::Failed("scheduled to no cluster".into())
    );
    // spread constraints not met now, or a scheduler error: the clusters chosen before
    // are kept and the rollout goes on there
    for reason in [
        conditions::REASON_UNSCHEDULABLE,
        conditions::REASON_SCHEDULER_ERROR,
    ] {
        let kept = BindingStatus {
            conditions: [
                status(conditions::SCHEDULED, "False", reason, Some(1)),
                status(
                    conditions::ROLLED_OUT,
                    "False",
                    conditions::REASON_WAVE_IN_PROGRESS,
                    Some(1),
                ),
            ]
            .into_iter()
            .flat_map(|s| s.conditions)
            .collect(),
            ..Default::default()
        };
        assert_eq!(
            standing(&seen(Some(&kept), true, Some(1), &east, &[])),
            Standing::Going(format!("{} message", conditions::REASON_WAVE_IN_PROGRESS)),
            "{reason}"
        );
        assert_eq!(
            standing(&seen(Some(&kept), true, Some(1), &[], &[])),
            Standing::Failed(format!("not scheduled: {reason} message")),
            "{reason}, and no cluster kept"
        );
    }
    let done = status(
        conditions::ROLLED_OUT,
        "True",
        conditions::REASON_ROLLOUT_COMPLETE,
        Some(5),
    );
    let mut s = seen(Some(&done), true, Some(5), &east, &[]);
    s.replicas = (Some(8), Some(4));
    assert_eq!(
        standing(&s),
        Standing::Going("waiting for the hub to divide the new replica count (8)".into())
    );
    assert_eq!(
        standing(&seen(Some(&done), true, Some(1), &east, &[])),
        Standing::Going("waiting for the hub to roll out template generation 1".into())
    );
}
