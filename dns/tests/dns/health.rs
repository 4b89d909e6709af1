//! Health-aware answers: not-ready endpoints and withdrawn clusters disappear.

use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::support::Env;

#[tokio::test]
async fn not_ready_and_withdrawn_endpoints_disappear() {
    let env = Env::start().await;
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}]);
    env.import("hz", "Headless", &[], ports.clone()).await;
    env.slice(
        "hz",
        "c1",
        "IPv4",
        &[
            ("10.5.0.1", None, Some(true)),
            ("10.5.0.2", None, Some(true)),
        ],
        ports.clone(),
    )
    .await;
    env.slice(
        "hz",
        "c2",
        "IPv4",
        &[("10.6.0.1", Some("hz-0"), None)],
        ports.clone(),
    )
    .await;
    let svc = "hz.demo.svc.clusterset.local.";
    let all = ["A 10.5.0.1", "A 10.5.0.2", "A 10.6.0.1"];
    env.until("all ready", svc, RecordType::A, |r| r.answers == all)
        .await;

    // 10.5.0.2 turns not ready.
    env.slice(
        "hz",
        "c1",
        "IPv4",
        &[
            ("10.5.0.1", None, Some(true)),
            ("10.5.0.2", None, Some(false)),
        ],
        ports.clone(),
    )
    .await;
    env.until("not-ready endpoint gone", svc, RecordType::A, |r| {
        r.answers == ["A 10.5.0.1", "A 10.6.0.1"]
    })
    .await;
    let r = env
        .tcp("10-5-0-2.c1.hz.demo.svc.clusterset.local.", RecordType::A)
        .await;
    assert_eq!(r.rcode, 3);
    let r = env.udp(svc, RecordType::SRV).await;
    assert_eq!(r.answers.len(), 2, "{r:?}");

    // The controller withdraws cluster c2's slice.
    env.delete_slice("hz-c2-ipv4").await;
    env.until("withdrawn cluster gone", svc, RecordType::A, |r| {
        r.answers == ["A 10.5.0.1"]
    })
    .await;
    assert_eq!(
        env.udp("hz-0.c2.hz.demo.svc.clusterset.local.", RecordType::A)
            .await
            .rcode,
        3
    );

    // No ready endpoint left: NXDOMAIN.
    env.slice(
        "hz",
        "c1",
        "IPv4",
        &[("10.5.0.1", None, Some(false))],
        ports.clone(),
    )
    .await;
    env.until("no ready endpoints", svc, RecordType::A, |r| {
        r.rcode == 3 && r.soa
    })
    .await;
}

#[tokio::test]
async fn serviceimport_changes_and_deletes_are_followed() {
    let env = Env::start().await;
    let svc = "cs.demo.svc.clusterset.local.";
    env.import(
        "cs",
        "ClusterSetIP",
        &["10.43.0.1"],
        json!([{"port": 80, "protocol": "TCP"}]),
    )
    .await;
    env.until("created", svc, RecordType::A, |r| {
        r.answers == ["A 10.43.0.1"]
    })
    .await;
    let r = env.udp(svc, RecordType::SRV).await;
    assert_eq!(
        r.answers,
        ["SRV 80 cs.demo.svc.clusterset.local."],
        "unnamed ports only in the bare-name SRV"
    );
    env.import(
        "cs",
        "ClusterSetIP",
        &["10.43.0.2"],
        json!([{"port": 80, "protocol": "TCP"}]),
    )
    .await;
    env.until("changed", svc, RecordType::A, |r| {
        r.answers == ["A 10.43.0.2"]
    })
    .await;
    env.delete_import("cs").await;
    env.until("deleted", svc, RecordType::A, |r| r.rcode == 3)
        .await;
}
