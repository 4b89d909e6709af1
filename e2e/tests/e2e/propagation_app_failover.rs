//! Application failover (federation.md §8 J.64) with real kubectl: the README's
//! `examples/app-failover-demo/`, its toleration cut to 2 s. Deployment api is divided
//! over east, west and north; an OverridePolicy asks east's Pods for 500 CPUs, so
//! they stay Pending there: two seconds later east's replicas move to west and north,
//! the binding records and explains the eviction, an Event says so, and east's copy
//! goes once west and north run it healthy (purgeMode Gracefully). East stays out (no
//! bouncing back) until the template's next generation, which runs there again. A
//! template broken in every cluster is not moved at all (★).

use std::time::{Duration, Instant};

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, binding_condition, demo_events, fleet_of, get, has_work, replicas};
use crate::support::Env;

/// Applies the demo's Deployment and policy (`examples/app-failover-demo/api.yaml`), its
/// toleration cut to `toleration` seconds, with each `(from, to)` of `edits` replaced.
async fn apply_demo(env: &Env, toleration: u32, edits: &[(&str, &str)]) {
    let mut yaml =
        std::fs::read_to_string(crate::support::repo().join("examples/app-failover-demo/api.yaml"))
            .unwrap()
            .replace(
                "tolerationSeconds: 20",
                &format!("tolerationSeconds: {toleration}"),
            );
    for (from, to) in edits {
        assert!(yaml.contains(from), "the demo has {from:?}");
        yaml = yaml.replace(from, to);
    }
    let f = env.file("api.yaml", &yaml);
    env.ok(&["apply", "-f", &f]).await;
}

/// The demo, tolerating 2 s of unhealthiness, with `image`.
async fn apply_api(env: &Env, image: &str) {
    apply_demo(env, 2, &[("nginx:1.27", image)]).await;
}

/// The clusters of the binding's `spec.evictions`.
async fn evicted(env: &Env) -> Vec<String> {
    let rb = get(env, "hub", &["rb", "api-deployment", "-n", "demo"]).await;
    rb.and_then(|rb| rb.pointer("/spec/evictions").cloned())
        .and_then(|e| e.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["cluster"].as_str().map(String::from))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_that_fails_in_one_cluster_moves_to_the_others() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    apply_api(&env, "nginx:1.27").await;
    eventually("2 replicas in each member", WAIT, || async {
        (replicas(&env, "api").await == vec![Some(2), Some(2), Some(2)]).then_some(())
    })
    .await;

    // east cannot run it: after 2 s unhealthy, west and north run all 6
    env.ok(&[
        "apply",
        "-f",
        "examples/app-failover-demo/east-cannot-run-it.yaml",
    ])
    .await;
    eventually("west and north run 3 each", WAIT, || async {
        let r = replicas(&env, "api").await;
        (r[1] == Some(3) && r[2] == Some(3)).then_some(())
    })
    .await;
    assert_eq!(evicted(&env).await, vec!["east".to_string()]);
    let rb = get(&env, "hub", &["rb", "api-deployment", "-n", "demo"])
        .await
        .unwrap();
    let eviction = rb.pointer("/spec/evictions/0").unwrap();
    let reason = eviction["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("unhealthy since ")
            && reason.ends_with(
                "longer than the 2s failover.application tolerates: moved away until the template's next generation"
            ),
        "{reason}"
    );
    assert_eq!(eviction["templateGeneration"], 1);
    let reasons = rb.pointer("/status/schedulingReasons").unwrap().to_string();
    assert!(
        reasons.contains("east") && reasons.contains(reason),
        "{reasons}"
    );
    let events = eventually("an ApplicationFailover Event", WAIT, || async {
        let e = demo_events(&env, "reason=ApplicationFailover").await;
        e.contains("cluster east: unhealthy since").then_some(e)
    })
    .await;
    assert!(events.contains("Warning"), "{events}");
    // purged gracefully: once west and north run it healthy, east's Work goes
    eventually("east's Work purged", WAIT, || async {
        (!has_work(&env, "east", "api").await).then_some(())
    })
    .await;
    // and east stays out: the binding does not send it back where it just failed
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        assert_eq!(
            replicas(&env, "api").await,
            vec![None, Some(3), Some(3)],
            "east stays out until the next generation"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // east fixed, and a new generation: tried there again
    env.ok(&["delete", "overridepolicy", "api-east", "-n", "demo"])
        .await;
    apply_api(&env, "nginx:1.28").await;
    eventually("2 replicas in each member again", WAIT, || async {
        (replicas(&env, "api").await == vec![Some(2), Some(2), Some(2)]).then_some(())
    })
    .await;
    assert!(evicted(&env).await.is_empty());
}

/// ★ A template unhealthy in every cluster (no member can run 500 CPUs) is the
/// application's fault: it is not moved, and the binding says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_that_fails_everywhere_is_not_moved() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    apply_demo(&env, 1, &[("cpu: 50m", "cpu: \"500\"")]).await;
    // each cluster is held back once its own toleration ends (west's may end first):
    // wait for east's
    let held = "healthy in none of the other clusters it is scheduled to (west): the fault \
                looks like the application's (or those clusters are not Ready), so \
                failover.application does not move it; fix the template";
    eventually(
        "Scheduled says failover is held back for east",
        WAIT,
        || async {
            let c = binding_condition(&env, "api-deployment", "Scheduled").await?;
            let m = c["message"].as_str()?.to_string();
            (m.contains("application failover held back") && m.contains(held)).then_some(m)
        },
    )
    .await;
    assert_eq!(replicas(&env, "api").await[..2], [Some(3), Some(3)]);
    assert!(evicted(&env).await.is_empty());
}

/// statePreservation: api prefers east (an affinity group of its own) and falls back to
/// west; when it fails in east, west's copy gets what the rule read from east's status
/// (its `replicas`) as a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replacement_gets_the_failed_copys_state() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    apply_demo(
        &env,
        2,
        &[
            (
                "    replicaScheduling:\n      replicaSchedulingType: Divided\n",
                "    clusterAffinities:\n    - affinityName: primary\n      clusterNames: [east]\n    - affinityName: backup\n      clusterNames: [west]\n    replicaScheduling:\n      replicaSchedulingType: Divided\n",
            ),
            (
                "      gracePeriodSeconds: 120\n",
                "      gracePeriodSeconds: 120\n      statePreservation:\n        rules:\n        - aliasLabelName: failover.example.com/replicas\n          jsonPath: \"{ .replicas }\"\n",
            ),
        ],
    )
    .await;
    eventually("6 replicas in east", WAIT, || async {
        (replicas(&env, "api").await[..2] == [Some(6), None]).then_some(())
    })
    .await;
    env.ok(&[
        "apply",
        "-f",
        "examples/app-failover-demo/east-cannot-run-it.yaml",
    ])
    .await;
    let label = eventually("west runs api with east's state", WAIT, || async {
        let d = get(&env, "west", &["deployment", "api", "-n", "demo"]).await?;
        d.pointer("/metadata/labels/failover.example.com~1replicas")
            .and_then(|v| v.as_str())
            .map(String::from)
    })
    .await;
    assert_eq!(label, "6");
    let rb = get(&env, "hub", &["rb", "api-deployment", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        rb.pointer("/spec/evictions/0/preservedLabelState"),
        Some(&serde_json::json!({"failover.example.com/replicas": "6"}))
    );
}
