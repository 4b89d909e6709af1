use causeway_crds::federation::cluster::{
    ApiEnablement, Cluster, ClusterSpec, ClusterStatus, NodeSummary, conditions,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use super::status_body;
use crate::clusters::summary::{Summary, Topology};

fn cond(type_: &str, status: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: format!("{type_}{status}"),
        message: String::new(),
        last_transition_time: Time("2026-01-01T00:00:00Z".parse().unwrap()),
        observed_generation: None,
    }
}

fn apis(gv: &str) -> (Vec<ApiEnablement>, Condition) {
    let e = ApiEnablement {
        group_version: gv.into(),
        ..Default::default()
    };
    (vec![e], cond(conditions::COMPLETE_API_ENABLEMENTS, "True"))
}

fn summary(region: Option<&str>, nodes: i32) -> Summary {
    Summary {
        nodes: NodeSummary {
            total_num: nodes,
            ready_num: nodes,
        },
        resources: Default::default(),
        topology: Topology {
            region: region.map(String::from),
            zones: vec!["z-a".into()],
            provider: Some("kubesim".into()),
        },
    }
}

/// What a worker posted when it knew everything: version 1.31, apps/v1, region eu,
/// 3 nodes; and a stale Ready=True of its own.
fn posted() -> Cluster {
    let mut st: ClusterStatus = serde_json::from_value(status_body(
        &cond(conditions::READY, "True"),
        Some("v1.31.0"),
        Some(&apis("apps/v1")),
        Some(&summary(Some("eu"), 3)),
        None,
    ))
    .unwrap();
    st.lease = None;
    let mut c = Cluster::new("east", ClusterSpec::default());
    c.status = Some(st);
    c
}

fn field<'a>(body: &'a Value, path: &str) -> &'a Value {
    body.pointer(path).unwrap_or(&Value::Null)
}

/// The status a worker posts carries over from the current status what it does not know
/// itself (a restarted hub whose member is unreachable, caches not synced yet), so an
/// apply under its manager never removes the region, zones, APIs and summaries that
/// placements read; what it knows replaces them.
#[test]
fn what_the_worker_does_not_know_is_carried_over_and_what_it_knows_replaces_it() {
    let not_ready = cond(conditions::READY, "False");
    let cur = posted();
    // (case, version, apis, summary, current) → expected version, first API,
    // region, node count, the conditions' types and statuses
    type Row<'a> = (
        &'a str,
        Option<&'a str>,
        Option<(Vec<ApiEnablement>, Condition)>,
        Option<Summary>,
        Option<&'a Cluster>,
        Value,
    );
    let rows: Vec<Row> = vec![
        (
            "a new worker that reached nothing: all carried but Ready",
            None,
            None,
            None,
            Some(&cur),
            json!([
                "v1.31.0",
                "apps/v1",
                "eu",
                3,
                [["Ready", "False"], ["CompleteAPIEnablements", "True"]]
            ]),
        ),
        (
            "everything known: replaces the current status",
            Some("v1.32.1"),
            Some(apis("batch/v1")),
            Some(summary(None, 5)),
            Some(&cur),
            json!([
                "v1.32.1",
                "batch/v1",
                null,
                5,
                [["Ready", "False"], ["CompleteAPIEnablements", "True"]]
            ]),
        ),
        (
            "only the summary known",
            None,
            None,
            Some(summary(Some("us"), 1)),
            Some(&cur),
            json!([
                "v1.31.0",
                "apps/v1",
                "us",
                1,
                [["Ready", "False"], ["CompleteAPIEnablements", "True"]]
            ]),
        ),
        (
            "a discovery that found nothing (it failed): the APIs stay, its condition says so",
            Some("v1.31.0"),
            Some((vec![], cond(conditions::COMPLETE_API_ENABLEMENTS, "False"))),
            None,
            Some(&cur),
            json!([
                "v1.31.0",
                "apps/v1",
                "eu",
                3,
                [["Ready", "False"], ["CompleteAPIEnablements", "False"]]
            ]),
        ),
        (
            "nothing known and no status yet: Ready alone",
            None,
            None,
            None,
            None,
            json!([null, null, null, null, [["Ready", "False"]]]),
        ),
    ];
    for (case, version, apis, summary, current, want) in rows {
        let body = status_body(
            &not_ready,
            version,
            apis.as_ref(),
            summary.as_ref(),
            current,
        );
        let conds: Vec<Value> = field(&body, "/conditions")
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| json!([c["type"], c["status"]]))
            .collect();
        let got = json!([
            field(&body, "/kubernetesVersion"),
            field(&body, "/apiEnablements/0/groupVersion"),
            field(&body, "/region"),
            field(&body, "/nodeSummary/totalNum"),
            conds,
        ]);
        assert_eq!(got, want, "{case}");
    }
    // a region set in the spec while nothing is known counts at once, as it would in
    // a known summary
    let mut moved = posted();
    moved.spec.region = Some("us".into());
    moved.spec.zones = vec!["us-a".into()];
    let body = status_body(&not_ready, None, None, None, Some(&moved));
    assert_eq!(
        (
            field(&body, "/region"),
            field(&body, "/zones"),
            field(&body, "/provider")
        ),
        (&json!("us"), &json!(["us-a"]), &json!("kubesim"))
    );
}
