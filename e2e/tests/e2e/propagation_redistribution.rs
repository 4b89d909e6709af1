//! Make-before-break replica moves (federation.md §9.2 ★) with real kubectl: the
//! README's `examples/migration-demo/`. Deployment web runs its four replicas in east;
//! the policy moves it to west while west cannot start Pods (its nodes cordoned). East
//! keeps its copy, the binding's `Redistributed` condition says why, `maxUnavailable`
//! lets that many go, and east's copy goes once west runs the replicas available.

use std::time::Duration;

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, binding_condition, demo_events, fleet_of, get, has_work};
use crate::support::Env;

/// `(spec.replicas, status.availableReplicas)` of Deployment web in `cluster`.
async fn web(env: &Env, cluster: &str) -> Option<(i64, i64)> {
    let d = get(env, cluster, &["deployment", "web", "-n", "demo"]).await?;
    let n = |p: &str| d.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    Some((n("/spec/replicas"), n("/status/availableReplicas")))
}

/// `(replicas, updatedReplicas, availableReplicas)` of the hub template's `.status`.
async fn hub_web(env: &Env) -> Option<(i64, i64, i64)> {
    let d = get(env, "hub", &["deployment", "web", "-n", "demo"]).await?;
    let n = |p: &str| d.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    Some((
        n("/status/replicas"),
        n("/status/updatedReplicas"),
        n("/status/availableReplicas"),
    ))
}

/// The binding's `Redistributed` condition: `(status, reason, message)`.
async fn redistributed(env: &Env) -> Option<(String, String, String)> {
    let c = binding_condition(env, "web-deployment", "Redistributed").await?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// The demo's `to-west.yaml` with `maxUnavailable` set to `max`.
async fn move_to_west(env: &Env, max: &str) {
    let yaml = std::fs::read_to_string(
        crate::support::repo().join("examples/migration-demo/to-west.yaml"),
    )
    .unwrap();
    assert!(yaml.contains("maxUnavailable: 0") && yaml.contains("progressDeadlineSeconds: 600"));
    let f = env.file(
        "to-west.yaml",
        &yaml.replace("maxUnavailable: 0", &format!("maxUnavailable: {max}")),
    );
    env.ok(&["apply", "-f", &f]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_keeps_the_old_copy_until_the_new_one_runs() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&["apply", "-f", "examples/migration-demo/web.yaml"])
        .await;
    eventually("east runs web's 4 replicas available", WAIT, || async {
        (web(&env, "east").await == Some((4, 4))).then_some(())
    })
    .await;
    eventually("Redistributed=True", WAIT, || async {
        let (status, reason, message) = redistributed(&env).await?;
        (status == "True" && reason == "SharesApplied")
            .then_some(())
            .filter(|_| message == "every cluster runs its share of the 4 replicas")
    })
    .await;

    // west cannot start Pods yet: the move waits for it, east keeps all four
    env.ok_in("west", &["cordon", "-l", "kubernetes.io/os=linux"])
        .await;
    move_to_west(&env, "0").await;
    eventually("west has web, none available", WAIT, || async {
        (web(&env, "west").await == Some((4, 0))).then_some(())
    })
    .await;
    let held = "east keeps 4 (no longer scheduled there) while west has 0 of its 4 \
                available; spec.redistribution.maxUnavailable lets 0 of the 4 replicas be \
                unavailable";
    eventually("Redistributed=False, east held", WAIT, || async {
        let c = redistributed(&env).await?;
        (c == ("False".into(), "HoldingReplicas".into(), held.into())).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(web(&env, "east").await, Some((4, 4)), "east keeps its copy");
    assert!(has_work(&env, "east", "web").await);
    // on the hub the move reads as a rolling update: east's 4 are old replicas that
    // serve, and kubectl rollout status waits for them to go
    eventually(
        "the hub's web counts east's 4 as old replicas",
        WAIT,
        || async { (hub_web(&env).await == Some((8, 4, 4))).then_some(()) },
    )
    .await;
    let out = env
        .run(
            "hub",
            &[
                "rollout",
                "status",
                "deployment/web",
                "-n",
                "demo",
                "--timeout=2s",
            ],
        )
        .await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("4 old replicas are pending termination"),
        "{said}"
    );

    // past the hold's progress deadline (1 s here, measured from when it began) it
    // is reported stuck, and nothing is forced
    let patch = r#"{"spec":{"redistribution":{"progressDeadlineSeconds":1}}}"#;
    env.ok(&[
        "patch",
        "pp",
        "web",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        patch,
    ])
    .await;
    eventually(
        "Redistributed=False, ProgressDeadlineExceeded",
        WAIT,
        || async {
            let (status, reason, message) = redistributed(&env).await?;
            (status == "False"
                && reason == "ProgressDeadlineExceeded"
                && message.starts_with(held)
                && message
                    .contains("; the progress deadline (1s without a replica moving) passed at "))
            .then_some(())
        },
    )
    .await;
    eventually(
        "a RedistributionStuck Warning on the template",
        WAIT,
        || async {
            let events = demo_events(&env, "reason=RedistributionStuck").await;
            events
                .contains(
                    "replicas held above their clusters' shares (make-before-break) have not \
                 moved for 1s",
                )
                .then_some(())
        },
    )
    .await;
    // told once per stall: more rounds within it (a change to the binding wakes the
    // hub's loop for it) tell nothing new
    for i in 0..3 {
        let poke = format!("causeway-test/poke={i}");
        let args = [
            "annotate",
            "rb",
            "web-deployment",
            "-n",
            "demo",
            &poke,
            "--overwrite",
        ];
        env.ok(&args).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let stuck = env
        .ok(&[
            "get",
            "events",
            "-n",
            "demo",
            "--field-selector",
            "reason=RedistributionStuck",
            "-o",
            "json",
        ])
        .await;
    let stuck: Value = serde_json::from_str(&stuck).unwrap();
    assert_eq!(stuck["items"].as_array().map(Vec::len), Some(1), "{stuck}");
    assert_eq!(web(&env, "east").await, Some((4, 4)), "nothing forced");
    // the clock is in the binding's status
    let rb = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"])
        .await
        .unwrap();
    let hold = rb.pointer("/status/redistribution").cloned().unwrap();
    assert_eq!(
        (&hold["held"], &hold["available"], &hold["shares"]),
        (&4.into(), &4.into(), &serde_json::json!({"west": 4})),
        "{hold}"
    );

    // maxUnavailable 2: two of east's replicas may go before west makes up for them
    move_to_west(&env, "2").await;
    eventually("east down to 2", WAIT, || async {
        (web(&env, "east").await == Some((2, 2))).then_some(())
    })
    .await;
    let (status, reason, message) = redistributed(&env).await.unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HoldingReplicas")
    );
    assert!(
        message.starts_with("east keeps 2 (no longer scheduled there)"),
        "{message}"
    );
    // a deadline a few seconds ahead: the condition turns when it passes, with no
    // other change (the loop wakes at the deadline)
    let since = || async {
        let rb = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"]).await?;
        rb.pointer("/status/redistribution/since").cloned()
    };
    let before = since().await;
    let patch = r#"{"spec":{"redistribution":{"progressDeadlineSeconds":8}}}"#;
    env.ok(&[
        "patch",
        "pp",
        "web",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        patch,
    ])
    .await;
    eventually("stuck again once 8 s pass", WAIT, || async {
        let (_, reason, _) = redistributed(&env).await?;
        (reason == "ProgressDeadlineExceeded").then_some(())
    })
    .await;
    assert_eq!(since().await, before, "no replica moved");

    // west starts its Pods: east's copy goes, the condition turns True
    env.ok_in("west", &["uncordon", "-l", "kubernetes.io/os=linux"])
        .await;
    eventually("east's copy gone, west runs 4 available", WAIT, || async {
        (web(&env, "east").await.is_none() && web(&env, "west").await == Some((4, 4))).then_some(())
    })
    .await;
    eventually("Redistributed=True again", WAIT, || async {
        let (status, reason, _) = redistributed(&env).await?;
        (status == "True" && reason == "SharesApplied").then_some(())
    })
    .await;
    let rb = get(&env, "hub", &["rb", "web-deployment", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        rb.pointer("/status/redistribution"),
        None,
        "no hold, no clock"
    );
    eventually(
        "the hub's web: 4, all updated and available",
        WAIT,
        || async { (hub_web(&env).await == Some((4, 4, 4))).then_some(()) },
    )
    .await;
    env.ok(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "demo",
        "--timeout=5s",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_max_unavailable_is_refused_with_what_to_write() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    env.ok(&["apply", "-f", "examples/migration-demo/web.yaml"])
        .await;
    move_to_west(&env, "\"150%\"").await;
    eventually("the policy says what is wrong", WAIT, || async {
        let p = get(&env, "hub", &["pp", "web", "-n", "demo"]).await?;
        let valid = p
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Valid")?
            .clone();
        let message = valid["message"].as_str()?.to_string();
        (valid["status"] == "False"
            && message.contains("spec.redistribution.maxUnavailable")
            && message.contains("give a count (1) or a percentage from \"0%\" to \"100%\""))
        .then_some(())
    })
    .await;
}
