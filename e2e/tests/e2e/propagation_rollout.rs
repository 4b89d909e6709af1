//! Ordered rollouts (`spec.rollout.waves`): the README's rollout demo applied with
//! kubectl to a hub and three members. A new template generation reaches east (the
//! canary), then west, then north, each wave once the ones before run it applied,
//! healthy and available; a generation the canary cannot run stops there, with the
//! later clusters keeping what they run and the binding saying why; the next good
//! generation goes all the way.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, binding_condition, demo_events, fleet_of, get};
use crate::support::Env;

/// Each member's image of Deployment web (None: not there).
async fn images(env: &Env) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for c in ["east", "west", "north"] {
        let d = get(env, c, &["deployment", "web", "-n", "demo"]).await;
        out.push(d.and_then(|d| {
            d.pointer("/spec/template/spec/containers/0/image")
                .and_then(Value::as_str)
                .map(String::from)
        }));
    }
    out
}

/// The binding's RolledOut condition: (status, reason, message).
async fn rolled_out(env: &Env) -> Option<(String, String, String)> {
    let c = binding_condition(env, "web-deployment", "RolledOut").await?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// Asserts every half second for `secs` seconds that the members run `want`.
async fn images_stay(env: &Env, want: &[&str], secs: u64, what: &str) {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        assert_eq!(images(env).await, some(want), "{what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn some(v: &[&str]) -> Vec<Option<String>> {
    v.iter().map(|s| Some(s.to_string())).collect()
}

/// `causeway rollout status deployment/web -n demo --timeout <timeout>`.
async fn rollout_status(env: &Env, timeout: &str) -> std::process::Output {
    let args = [
        "rollout",
        "status",
        "deployment/web",
        "-n",
        "demo",
        "--timeout",
        timeout,
    ];
    crate::propagation_cli::causeway(env, &args).await
}

/// Sets the demo policy's `spec.rollout.progressDeadlineSeconds`.
async fn progress_deadline(env: &Env, secs: u32) {
    let patch = format!(r#"{{"spec":{{"rollout":{{"progressDeadlineSeconds":{secs}}}}}}}"#);
    env.ok(&[
        "patch",
        "propagationpolicy",
        "web",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        &patch,
    ])
    .await;
}

/// Applies the demo's Deployment with `image` and a CPU request of `cpu`.
async fn template(env: &Env, image: &str, cpu: &str) {
    let yaml =
        std::fs::read_to_string(crate::support::repo().join("examples/rollout-demo/web.yaml"))
            .unwrap()
            .replace("nginx:1.27", image)
            .replace("cpu: 100m", &format!("cpu: {cpu}"));
    let f = env.file("web.yaml", &yaml);
    env.ok(&["apply", "-f", &f]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_goes_wave_by_wave_and_stops_at_a_canary_that_fails() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    env.ok(&["apply", "-f", "examples/rollout-demo/"]).await;

    // the first generation goes everywhere, wave by wave
    eventually("nginx:1.27 everywhere", WAIT, || async {
        (images(&env).await == some(&["nginx:1.27"; 3])).then_some(())
    })
    .await;
    eventually("RolledOut=True", WAIT, || async {
        let (status, reason, _) = rolled_out(&env).await?;
        (status == "True" && reason == "RolloutComplete").then_some(())
    })
    .await;

    // a generation the canary cannot run (no node has 500 CPUs): east gets it and
    // the rollout stops there, west and north keep 1.27; with a 12 s progress deadline,
    // reported stuck when it passes, with no further change by anyone
    progress_deadline(&env, 12).await;
    template(&env, "nginx:1.28", "500").await;
    eventually("east runs 1.28", WAIT, || async {
        (images(&env).await[0].as_deref() == Some("nginx:1.28")).then_some(())
    })
    .await;
    let (status, reason, message) = eventually("RolledOut=False on the canary", WAIT, || async {
        let c = rolled_out(&env).await?;
        (c.0 == "False" && c.2.contains("east")).then_some(c)
    })
    .await;
    // (a slow machine may already be past the deadline)
    assert!(
        status == "False"
            && ["WaveInProgress", "ProgressDeadlineExceeded"].contains(&reason.as_str()),
        "{status} {reason}"
    );
    assert!(
        message.contains(
            "wave 1 of 3 (canary) is rolling out template generation 2, waiting for east: "
        ) && message.contains("held at what they run until then: north, west"),
        "{message}"
    );
    images_stay(
        &env,
        &["nginx:1.28", "nginx:1.27", "nginx:1.27"],
        5,
        "the later waves are held",
    )
    .await;
    // the user sees why on the template too
    let events = demo_events(&env, "involvedObject.name=web").await;
    assert!(events.contains("RolloutProgressing"), "{events}");
    // the deadline passes: the rollout is reported stuck, and keeps waiting
    let (status, _, message) = eventually("RolledOut says the deadline passed", WAIT, || async {
        let c = rolled_out(&env).await?;
        (c.1 == "ProgressDeadlineExceeded").then_some(c)
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.starts_with("the progress deadline (12s) passed at ")
            && message.contains("wave 1 of 3 (canary) is rolling out template generation 2"),
        "{message}"
    );
    let table = env.ok(&["get", "rb", "web-deployment", "-n", "demo"]).await;
    assert!(
        table.contains("ROLLOUT") && table.contains("ProgressDeadlineExceeded"),
        "{table}"
    );
    eventually("a RolloutStuck Warning on the template", WAIT, || async {
        let events = demo_events(&env, "reason=RolloutStuck").await;
        events
            .contains("the rollout of template generation 2 has not moved on for 12s: wave 1 of 3 (canary) is not done")
            .then_some(())
    })
    .await;
    assert_eq!(
        images(&env).await,
        some(&["nginx:1.28", "nginx:1.27", "nginx:1.27"]),
        "nothing is rolled back, nothing goes on"
    );
    // a pipeline waiting on it is told, and fails
    let out = rollout_status(&env, "30s").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Deployment demo/web: the progress deadline (12s) passed at "),
        "{stderr}"
    );

    // a good generation: through the canary, then west, then north, which `causeway
    // rollout status` follows until every wave runs it (with a deadline no slow
    // machine overruns)
    progress_deadline(&env, 600).await;
    template(&env, "nginx:1.29", "100m").await;
    let out = rollout_status(&env, "40s").await;
    let waited = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        waited.ends_with(
            "Deployment demo/web: every wave (3) runs template generation 3, applied and healthy\n"
        ),
        "{waited}"
    );
    eventually("nginx:1.29 everywhere", WAIT, || async {
        (images(&env).await == some(&["nginx:1.29"; 3])).then_some(())
    })
    .await;
    eventually("RolledOut=True again", WAIT, || async {
        let (status, _, message) = rolled_out(&env).await?;
        (status == "True" && message.contains("generation 3")).then_some(())
    })
    .await;
    // an Event for each wave it went through, each with its own note
    let events = demo_events(&env, "reason=RolloutProgressing").await;
    for note in [
        "wave 1 of 3 (canary) gets template generation 3",
        "wave 2 of 3 (wave-2) gets template generation 3",
        "wave 3 of 3 (the clusters no wave selects) gets template generation 3",
        "every wave (3) runs template generation 3, applied and healthy",
    ] {
        assert!(events.contains(note), "{note}: {events}");
    }
}

/// With `propagateDeps`, the ConfigMap a held older generation mounts stays in the held
/// clusters while it runs there: the canary gets the new generation (and its new
/// ConfigMap) and gives the old ConfigMap up; west and north keep both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_generation_keeps_the_configmap_it_mounts() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let policy =
        std::fs::read_to_string(crate::support::repo().join("examples/rollout-demo/policy.yaml"))
            .unwrap()
            .replace("  placement:\n", "  propagateDeps: true\n  placement:\n");
    assert!(policy.contains("propagateDeps: true"));
    env.ok(&["apply", "-f", &env.file("policy.yaml", &policy)])
        .await;
    for v in ["web-v1", "web-v2"] {
        env.ok(&["create", "configmap", v, "-n", "demo", "--from-literal=v=1"])
            .await;
    }
    let web = |config: &str, cpu: &str| {
        std::fs::read_to_string(crate::support::repo().join("examples/rollout-demo/web.yaml"))
            .unwrap()
            .replace("cpu: 100m", &format!("cpu: {cpu}"))
            .replace(
                "            memory: 64Mi",
                &format!(
                    "            memory: 64Mi\n        volumeMounts: [{{name: config, mountPath: /etc/web}}]\n      volumes: [{{name: config, configMap: {{name: {config}}}}}]"
                ),
            )
    };
    env.ok(&["apply", "-f", &env.file("web.yaml", &web("web-v1", "100m"))])
        .await;
    let has = |cluster: &'static str, name: &'static str| {
        let env = &env;
        async move {
            get(env, cluster, &["configmap", name, "-n", "demo"])
                .await
                .is_some()
        }
    };
    eventually("web-v1 in every member", WAIT, || async {
        (has("east", "web-v1").await && has("west", "web-v1").await && has("north", "web-v1").await)
            .then_some(())
    })
    .await;

    // generation 2 mounts web-v2 and cannot run on the canary: west and north are held
    env.ok(&["apply", "-f", &env.file("web.yaml", &web("web-v2", "500"))])
        .await;
    eventually("east has web-v2 and gave web-v1 up", WAIT, || async {
        (has("east", "web-v2").await && !has("east", "web-v1").await).then_some(())
    })
    .await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for c in ["west", "north"] {
            assert!(
                has(c, "web-v1").await,
                "{c} runs generation 1, which mounts web-v1"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// R.6 ★: a cluster that joins the placement while its wave is held gets the generation
/// that wave runs, rendered from the template revision the hub keeps, rather than
/// nothing; once every wave runs the newest generation, the older revisions go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_joins_a_held_wave_runs_what_the_wave_runs() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let policy =
        std::fs::read_to_string(crate::support::repo().join("examples/rollout-demo/policy.yaml"))
            .unwrap();
    assert!(policy.contains("  placement:\n"));
    let placed = |clusters: &str| {
        policy.replace(
            "  placement:\n",
            &format!("  placement:\n    clusterAffinity: {{clusterNames: [{clusters}]}}\n"),
        )
    };
    let two = env.file("policy.yaml", &placed("east, west"));
    env.ok(&["apply", "-f", &two, "-f", "examples/rollout-demo/web.yaml"])
        .await;
    let revisions = || async {
        let list = get(&env, "hub", &["controllerrevisions", "-n", "demo"]).await?;
        let mut names: Vec<String> = list["items"]
            .as_array()?
            .iter()
            .filter_map(|r| r.pointer("/metadata/name")?.as_str().map(String::from))
            .collect();
        names.sort();
        Some(names)
    };
    eventually(
        "nginx:1.27 in east and west, revision 1 kept",
        WAIT,
        || async {
            let placed = images(&env).await == [some(&["nginx:1.27"; 2]), vec![None]].concat();
            (placed && revisions().await? == ["web-deployment-g1"]).then_some(())
        },
    )
    .await;

    // the canary cannot run generation 2: west is held at generation 1
    template(&env, "nginx:1.28", "500").await;
    eventually("east runs 1.28, west is held", WAIT, || async {
        let c = rolled_out(&env).await?;
        (images(&env).await[..2] == some(&["nginx:1.28", "nginx:1.27"]) && c.0 == "False")
            .then_some(())
    })
    .await;
    // north joins: it is in the last wave, held, and runs what that wave runs
    let three = env.file("policy.yaml", &placed("east, west, north"));
    env.ok(&["apply", "-f", &three]).await;
    eventually("north runs generation 1 (nginx:1.27)", WAIT, || async {
        (images(&env).await == some(&["nginx:1.28", "nginx:1.27", "nginx:1.27"])).then_some(())
    })
    .await;
    let north = get(&env, "north", &["deployment", "web", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        north.pointer("/metadata/annotations/causeway.io~1template-generation"),
        Some(&Value::from("1")),
        "{north}"
    );
    assert_eq!(
        revisions().await.unwrap(),
        ["web-deployment-g1", "web-deployment-g2"]
    );
    // still held, and said so
    let (_, _, message) = rolled_out(&env).await.unwrap();
    assert!(
        message.ends_with("held at what they run until then: north, west"),
        "{message}"
    );
    images_stay(
        &env,
        &["nginx:1.28", "nginx:1.27", "nginx:1.27"],
        3,
        "north stays at what its wave runs",
    )
    .await;

    // an OverridePolicy edit reaches a held cluster at once, on the generation it runs
    let labelled = env.file(
        "op.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: OverridePolicy
metadata: {name: west-team, namespace: demo}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
  - targetCluster: {clusterNames: [west]}
    overriders:
      labelsOverrider: [{operator: add, value: {team: payments}}]
"#,
    );
    env.ok(&["apply", "-f", &labelled]).await;
    eventually("held west labelled, still at nginx:1.27", WAIT, || async {
        let west = get(&env, "west", &["deployment", "web", "-n", "demo"]).await?;
        let team = west.pointer("/metadata/labels/team")?.as_str()?;
        let image = west
            .pointer("/spec/template/spec/containers/0/image")?
            .as_str()?;
        (team == "payments" && image == "nginx:1.27").then_some(())
    })
    .await;

    // a good generation goes everywhere, and only its revision is kept
    template(&env, "nginx:1.29", "100m").await;
    eventually("nginx:1.29 everywhere, revision 3 alone", WAIT, || async {
        let everywhere = images(&env).await == some(&["nginx:1.29"; 3]);
        (everywhere && revisions().await? == ["web-deployment-g3"]).then_some(())
    })
    .await;
}
