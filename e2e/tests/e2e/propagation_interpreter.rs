//! A custom kind read through a ResourceInterpreter (README, "Custom kinds"), with the
//! README's `examples/interpreter-demo/` and real kubectl: Gadget keeps its replica
//! count at `spec.workers.count`, so a Divided placement writes each member's share
//! there; its health is the interpreter's CEL, judged by each member's applier from
//! the rule its Work carries; an unhealthy copy fails over by that rule. The members
//! run no Gadget operator: the test writes their status as one would.

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, binding_condition, fleet_of, get};
use crate::support::{Env, repo};

/// The demo's file `name`, with each `(from, to)` of `edits` replaced.
fn demo(env: &Env, name: &str, edits: &[(&str, &str)]) -> String {
    let path = repo().join("examples/interpreter-demo").join(name);
    let mut yaml = std::fs::read_to_string(path).unwrap();
    for (from, to) in edits {
        assert!(yaml.contains(from), "{name} has {from:?}");
        yaml = yaml.replace(from, to);
    }
    env.file(name, &yaml)
}

/// `kubectl apply -f file` on the hub until it succeeds (a kind the hub serves only
/// once its CRD is established).
async fn apply(env: &Env, file: &str) {
    eventually(&format!("{file} applied"), WAIT, || async {
        env.run("hub", &["apply", "-f", file])
            .await
            .status
            .success()
            .then_some(())
    })
    .await;
}

/// Gadget g1's worker count in `cluster`.
async fn workers(env: &Env, cluster: &str) -> Option<i64> {
    get(env, cluster, &["gadget", "g1", "-n", "demo"])
        .await?
        .pointer("/spec/workers/count")?
        .as_i64()
}

/// Writes g1's status in `cluster` as its operator would.
async fn set_status(env: &Env, cluster: &str, status: &str) {
    let patch = format!(r#"{{"status":{status}}}"#);
    let args = [
        "patch",
        "gadget",
        "g1",
        "-n",
        "demo",
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    env.ok_in(cluster, &args).await;
}

/// The health `cluster` reports for g1 in the binding's aggregated status.
async fn health(env: &Env, cluster: &str) -> Option<String> {
    let rb = get(env, "hub", &["rb", "g1-gadget", "-n", "demo"]).await?;
    let items = rb.pointer("/status/aggregatedStatus")?.as_array()?.clone();
    let item = items.iter().find(|i| i["clusterName"] == cluster)?;
    item["health"].as_str().map(String::from)
}

/// The message of the Available condition of g1's Work in `cluster`.
async fn available(env: &Env, cluster: &str) -> Option<String> {
    let ns = format!("causeway-es-{cluster}");
    let w = get(env, "hub", &["work", "demo.g1-gadget", "-n", &ns]).await?;
    let conditions = w.pointer("/status/conditions")?.as_array()?.clone();
    let c = conditions.iter().find(|c| c["type"] == "Available")?;
    c["message"].as_str().map(String::from)
}

/// The Valid condition of ResourceInterpreter `name`: (status, message).
async fn valid(env: &Env, name: &str) -> Option<(String, String)> {
    let r = get(env, "hub", &["resourceinterpreter", name]).await?;
    let conditions = r.pointer("/status/conditions")?.as_array()?.clone();
    let c = conditions.iter().find(|c| c["type"] == "Valid")?;
    Some((
        c["status"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_kind_is_divided_judged_and_failed_over_by_its_interpreter() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    apply(&env, &demo(&env, "1-crd.yaml", &[])).await;
    env.ok(&["apply", "-f", &demo(&env, "2-interpreter.yaml", &[])])
        .await;
    let gadget = demo(
        &env,
        "3-gadget.yaml",
        &[("tolerationSeconds: 20", "tolerationSeconds: 2")],
    );
    apply(&env, &gadget).await;
    eventually("the interpreter is in force", WAIT, || async {
        let (status, message) = valid(&env, "gadgets").await?;
        (status == "True" && message == "the interpreter is in force").then_some(())
    })
    .await;

    // divided 3:1 where the interpreter says the count is
    eventually("3 workers in east, 1 in west", WAIT, || async {
        (workers(&env, "east").await == Some(3) && workers(&env, "west").await == Some(1))
            .then_some(())
    })
    .await;
    let east = get(&env, "east", &["gadget", "g1", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        east.pointer("/spec/image"),
        Some(&Value::from("gadget:1.0"))
    );
    // the ConfigMap its workers' pod spec names went along (propagateDeps)
    for c in ["east", "west"] {
        eventually(&format!("gadget-config in {c}"), WAIT, || async {
            get(&env, c, &["configmap", "gadget-config", "-n", "demo"])
                .await
                .map(|_| ())
        })
        .await;
    }
    let work = get(
        &env,
        "hub",
        &["work", "demo.g1-gadget", "-n", "causeway-es-east"],
    )
    .await
    .unwrap();
    let carried = work.pointer("/spec/interpretations/0").unwrap();
    assert_eq!(carried["interpreter"], "gadgets", "{carried}");
    assert_eq!(carried["replicasPath"], "/spec/workers/count", "{carried}");

    // no status yet: Unknown, with nothing to say; then the CEL decides
    eventually("both Unknown before any status", WAIT, || async {
        (health(&env, "east").await.as_deref() == Some("Unknown")
            && health(&env, "west").await.as_deref() == Some("Unknown"))
        .then_some(())
    })
    .await;
    set_status(&env, "west", r#"{"phase":"Running","readyWorkers":1}"#).await;
    eventually("west Healthy", WAIT, || async {
        (health(&env, "west").await.as_deref() == Some("Healthy")).then_some(())
    })
    .await;
    set_status(&env, "east", r#"{"phase":"Running","readyWorkers":2}"#).await;
    // the hub's Gadget sums the members' ready workers (so east's status is reported)
    eventually("the hub's status: 3 ready workers", WAIT, || async {
        let g = get(&env, "hub", &["gadget", "g1", "-n", "demo"]).await?;
        (g.pointer("/status/readyWorkers") == Some(&3.into())).then_some(())
    })
    .await;
    // that status is still progressing (neither healthy nor failed): Unknown, with
    // nothing to say (no rule failed), and not failed over
    let m = available(&env, "east").await.unwrap();
    assert!(
        m.contains("manifest 0 (Gadget demo/g1): Unknown") && !m.contains("ResourceInterpreter"),
        "{m}"
    );
    // a sum the template's status cannot take (phase is a string there) is told
    let sum = |fields: &str| format!(r#"{{"spec":{{"status":{{"sum":{fields}}}}}}}"#);
    let patch = sum(r#"["readyWorkers","phase"]"#);
    env.ok(&["patch", "ri", "gadgets", "--type=merge", "-p", &patch])
        .await;
    eventually("a StatusNotAggregated Event", WAIT, || async {
        let events = crate::propagation::demo_events(&env, "reason=StatusNotAggregated").await;
        events
            .contains(
                "the members' readyWorkers, phase could not be written to the template's status",
            )
            .then_some(())
    })
    .await;
    let patch = sum(r#"["readyWorkers"]"#);
    env.ok(&["patch", "ri", "gadgets", "--type=merge", "-p", &patch])
        .await;
    // a status the rule cannot read says so, naming the interpreter
    set_status(&env, "east", r#"{"phase":"Running","readyWorkers":null}"#).await;
    eventually(
        "east's Work names the rule that cannot tell",
        WAIT,
        || async {
            let m = available(&env, "east").await?;
            m.contains("Unknown (ResourceInterpreter gadgets: health.healthy: ")
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        workers(&env, "east").await,
        Some(3),
        "Unknown is no failure"
    );

    // failed by the rule: after 2 s, west runs all 4 workers and east is evicted
    set_status(&env, "east", r#"{"phase":"Failed","readyWorkers":0}"#).await;
    eventually("west runs all 4 workers", WAIT, || async {
        (workers(&env, "west").await == Some(4)).then_some(())
    })
    .await;
    let rb = get(&env, "hub", &["rb", "g1-gadget", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        rb.pointer("/spec/evictions/0/cluster"),
        Some(&"east".into())
    );
    eventually("east's copy purged (purgeMode Directly)", WAIT, || async {
        get(&env, "east", &["gadget", "g1", "-n", "demo"])
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // an edit that breaks the interpreter renders nothing: west keeps its 4 workers
    // (the defaults would give it the whole template again), and says why
    let path = |p: &str| format!(r#"{{"spec":{{"replicas":{{"path":"{p}"}}}}}}"#);
    let patch = path("spec.workers.count");
    let args = ["patch", "ri", "gadgets", "--type=merge", "-p", &patch];
    env.ok(&args).await;
    eventually("an InterpreterInvalid Event", WAIT, || async {
        let events = crate::propagation::demo_events(&env, "reason=InterpreterInvalid").await;
        events
            .contains("ResourceInterpreter gadgets is invalid: spec.replicas.path")
            .then_some(())
    })
    .await;
    let west_work = || async {
        let w = get(
            &env,
            "hub",
            &["work", "demo.g1-gadget", "-n", "causeway-es-west"],
        )
        .await;
        w.and_then(|w| w.pointer("/metadata/generation")?.as_i64())
    };
    let before = west_work().await;
    env.ok(&[
        "patch",
        "gadget",
        "g1",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"spec":{"image":"gadget:1.1"}}"#,
    ])
    .await;
    // the detector handled the new generation (east's eviction, recorded at the
    // first, is lifted), while nothing was rendered
    eventually(
        "east's eviction lifted by the new generation",
        WAIT,
        || async {
            let rb = get(&env, "hub", &["rb", "g1-gadget", "-n", "demo"]).await?;
            rb.pointer("/spec/evictions").is_none().then_some(())
        },
    )
    .await;
    assert_eq!(west_work().await, before, "west's Work is not rewritten");
    // the binding keeps the count it had (the defaults would read none)
    let rb = get(&env, "hub", &["rb", "g1-gadget", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(rb.pointer("/spec/replicas"), Some(&4.into()), "{rb}");
    let west = get(&env, "west", &["gadget", "g1", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(west.pointer("/spec/workers/count"), Some(&4.into()));
    assert_eq!(
        west.pointer("/spec/image"),
        Some(&"gadget:1.0".into()),
        "nothing rendered"
    );
    let patch = path("/spec/workers/count");
    let args = ["patch", "ri", "gadgets", "--type=merge", "-p", &patch];
    env.ok(&args).await;
    eventually("fixed: the new image reaches west", WAIT, || async {
        let w = get(&env, "west", &["gadget", "g1", "-n", "demo"]).await?;
        (w.pointer("/spec/image") == Some(&"gadget:1.1".into())).then_some(())
    })
    .await;
    // east is scheduled again (3:1), and west gives up its workers only as east
    // reports them ready (make-before-break by readyWorkers): none yet
    let held = "west keeps 4 (its share is 1) while east has 0 of its 3 available; \
                spec.redistribution.maxUnavailable lets 0 of the 4 replicas be unavailable";
    eventually("west held at 4 while east starts", WAIT, || async {
        let (status, message) = redistributed(&env).await?;
        (workers(&env, "east").await == Some(3) && status == "False" && message == held)
            .then_some(())
    })
    .await;
    assert_eq!(workers(&env, "west").await, Some(4));

    // one interpreter per kind; a broken one says what to fix
    let second = env.file(
        "second.yaml",
        "apiVersion: causeway.io/v1alpha1\nkind: ResourceInterpreter\nmetadata: {name: gadgets-again}\n\
         spec:\n  target: {apiVersion: example.com/v2, kind: Gadget}\n  replicas: {path: /spec/size}\n\
         ---\napiVersion: causeway.io/v1alpha1\nkind: ResourceInterpreter\nmetadata: {name: widgets}\n\
         spec:\n  target: {apiVersion: example.com/v1, kind: Widget}\n  replicas: {path: spec.size}\n",
    );
    env.ok(&["apply", "-f", &second]).await;
    eventually("the second and the broken one refused", WAIT, || async {
        let (s1, m1) = valid(&env, "gadgets-again").await?;
        let (s2, m2) = valid(&env, "widgets").await?;
        (s1 == "False"
            && m1.contains("ResourceInterpreter gadgets already interprets Gadget")
            && s2 == "False"
            && m2.contains("spec.replicas.path: Invalid value: \"spec.size\""))
        .then_some(())
    })
    .await;
    let listed = env.ok(&["get", "ri"]).await;
    assert!(
        listed.contains("TARGET") && listed.contains("Gadget") && listed.contains("False"),
        "{listed}"
    );
    // the first stays in force
    assert_eq!(
        valid(&env, "gadgets").await.map(|v| v.0).as_deref(),
        Some("True")
    );
    // deleting the first puts the next one in force (it has no health rule);
    // deleting both takes the rule out of the Works, and health is Causeway's own
    // again (kstatus: no Ready condition, Unknown). First west Healthy by the rule:
    let count = workers(&env, "west").await.unwrap();
    let ready = format!(r#"{{"phase":"Running","readyWorkers":{count}}}"#);
    set_status(&env, "west", &ready).await;
    eventually("west Healthy by the rule", WAIT, || async {
        (health(&env, "west").await.as_deref() == Some("Healthy")).then_some(())
    })
    .await;
    env.ok(&["delete", "resourceinterpreter", "gadgets"]).await;
    eventually("the second in force", WAIT, || async {
        (valid(&env, "gadgets-again").await?.0 == "True").then_some(())
    })
    .await;
    let carried = || async {
        let w = get(
            &env,
            "hub",
            &["work", "demo.g1-gadget", "-n", "causeway-es-west"],
        )
        .await?;
        Some(w.pointer("/spec/interpretations").cloned())
    };
    eventually("west's Work carries the second's rule", WAIT, || async {
        let c = carried().await??;
        (c[0]["interpreter"] == "gadgets-again").then_some(())
    })
    .await;
    eventually(
        "west no longer judged by the deleted rule",
        WAIT,
        || async { (health(&env, "west").await.as_deref() == Some("Unknown")).then_some(()) },
    )
    .await;
    env.ok(&["delete", "resourceinterpreter", "gadgets-again"])
        .await;
    eventually("west's Work carries no rule", WAIT, || async {
        carried().await?.is_none().then_some(())
    })
    .await;
    eventually("west's health by Causeway's own rule", WAIT, || async {
        (health(&env, "west").await.as_deref() == Some("Unknown")).then_some(())
    })
    .await;
}

/// The binding's `Redistributed` condition: `(status, message)`.
async fn redistributed(env: &Env) -> Option<(String, String)> {
    let c = binding_condition(env, "g1-gadget", "Redistributed").await?;
    Some((
        c["status"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_kinds_workers_move_make_before_break() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    apply(&env, &demo(&env, "1-crd.yaml", &[])).await;
    env.ok(&["apply", "-f", &demo(&env, "2-interpreter.yaml", &[])])
        .await;
    apply(&env, &demo(&env, "3-gadget.yaml", &[])).await;
    eventually("3 workers in east, 1 in west", WAIT, || async {
        (workers(&env, "east").await == Some(3) && workers(&env, "west").await == Some(1))
            .then_some(())
    })
    .await;
    set_status(&env, "east", r#"{"phase":"Running","readyWorkers":3}"#).await;
    set_status(&env, "west", r#"{"phase":"Running","readyWorkers":1}"#).await;
    eventually("Redistributed=True", WAIT, || async {
        let (status, message) = redistributed(&env).await?;
        (status == "True" && message == "every cluster runs its share of the 4 replicas")
            .then_some(())
    })
    .await;

    // the weights turn 1:3: west gets its 3 at once, east keeps the 2 west does not
    // report ready yet (readyWorkers, where the interpreter says they are counted)
    let swapped = demo(
        &env,
        "3-gadget.yaml",
        &[
            ("[east]\n          weight: 3", "[east]\n          weight: 1"),
            ("[west]\n          weight: 1", "[west]\n          weight: 3"),
        ],
    );
    env.ok(&["apply", "-f", &swapped]).await;
    let held = |keeps: i64, ready: i64| {
        format!(
            "east keeps {keeps} (its share is 1) while west has {ready} of its 3 available; \
             spec.redistribution.maxUnavailable lets 0 of the 4 replicas be unavailable"
        )
    };
    eventually("west asks for 3, east held at 3", WAIT, || async {
        let (status, message) = redistributed(&env).await?;
        (workers(&env, "west").await == Some(3) && status == "False" && message == held(3, 1))
            .then_some(())
    })
    .await;
    assert_eq!(workers(&env, "east").await, Some(3), "east keeps its 3");
    // one more ready in west: east gives up one
    set_status(&env, "west", r#"{"phase":"Running","readyWorkers":2}"#).await;
    eventually("east keeps 2", WAIT, || async {
        let (_, message) = redistributed(&env).await?;
        (workers(&env, "east").await == Some(2) && message == held(2, 2)).then_some(())
    })
    .await;
    // all 3 ready in west: east runs its share
    set_status(&env, "west", r#"{"phase":"Running","readyWorkers":3}"#).await;
    eventually("east runs its share of 1", WAIT, || async {
        let (status, _) = redistributed(&env).await?;
        (workers(&env, "east").await == Some(1) && status == "True").then_some(())
    })
    .await;
}
