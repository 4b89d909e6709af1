//! `activationPreference: Lazy` with real kubectl and the README's
//! `examples/lazy-demo/`: a Lazy policy's edits reach the templates it propagates only
//! as each one changes; a template created before the policy waits for its first
//! change; a template created after it goes out at once; a policy that is no longer
//! Lazy applies its spec to every template at once.

use std::time::Duration;

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, binding_condition, fleet_of, get};
use crate::support::{Env, repo};

/// Which of east and west hold ConfigMap `name` in demo.
async fn holders(env: &Env, name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    for c in ["east", "west"] {
        if get(env, c, &["configmap", name, "-n", "demo"])
            .await
            .is_some()
        {
            out.push(c);
        }
    }
    out
}

/// Waits until exactly `want` hold ConfigMap `name`.
async fn held_by(env: &Env, name: &str, want: &[&str]) {
    eventually(&format!("{name} in {want:?}"), WAIT, || async {
        (holders(env, name).await == want).then_some(())
    })
    .await;
}

/// The binding's `Scheduled` condition of ConfigMap `name`: `(status, reason, message)`.
async fn scheduled(env: &Env, name: &str) -> Option<(String, String, String)> {
    let c = binding_condition(env, &format!("{name}-configmap"), "Scheduled").await?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// The demo's file `name`, with `(from, to)` replaced.
fn demo(env: &Env, name: &str, from: &str, to: &str) -> String {
    let yaml = std::fs::read_to_string(repo().join("examples/lazy-demo").join(name)).unwrap();
    assert!(yaml.contains(from), "{name} has {from:?}");
    env.file(name, &yaml.replace(from, to))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_policys_changes_wait_for_each_template_to_change() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    // a ConfigMap from before the policy (creation times are in seconds)
    let old = demo(
        &env,
        "settings.yaml",
        "name: settings",
        "name: old-settings",
    );
    env.ok(&["apply", "-f", &old]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.ok(&["apply", "-f", "examples/lazy-demo/policy.yaml"])
        .await;
    // ... waits for its first change, and says so
    let (status, _, message) = eventually("old-settings pending", WAIT, || async {
        let c = scheduled(&env, "old-settings").await?;
        (c.1 == "ActivationPending").then_some(c)
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains("PropagationPolicy demo/settings has activationPreference: Lazy")
            && message.contains("kubectl annotate configmap old-settings -n demo"),
        "{message}"
    );
    // one created after the policy goes out at once
    env.ok(&["apply", "-f", "examples/lazy-demo/settings.yaml"])
        .await;
    held_by(&env, "settings", &["east"]).await;
    assert!(holders(&env, "old-settings").await.is_empty());

    // the policy adds west: nothing moves until a ConfigMap changes, and the binding
    // says what waits
    let both = demo(
        &env,
        "policy.yaml",
        "clusterNames: [east]",
        "clusterNames: [east, west]",
    );
    env.ok(&["apply", "-f", &both]).await;
    eventually("settings says the policy's change waits", WAIT, || async {
        let (status, _, message) = scheduled(&env, "settings").await?;
        (status == "True"
            && message.contains(
                "the changes of PropagationPolicy demo/settings since wait for the template to change (activationPreference: Lazy)",
            ))
        .then_some(())
    })
    .await;
    let rb = get(&env, "hub", &["rb", "settings-configmap", "-n", "demo"])
        .await
        .unwrap();
    let names = |rb: &Value| -> Vec<String> {
        rb.pointer("/spec/clusters")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(names(&rb), ["east"], "{rb}");
    assert_eq!(holders(&env, "settings").await, ["east"]);
    // settings changes: it takes the policy's spec now
    env.ok(&[
        "annotate",
        "configmap",
        "settings",
        "-n",
        "demo",
        "causeway.io/activate=1",
    ])
    .await;
    held_by(&env, "settings", &["east", "west"]).await;
    // old-settings changes: it is propagated, with the policy as it is now
    env.ok(&[
        "label",
        "configmap",
        "old-settings",
        "-n",
        "demo",
        "touched=yes",
    ])
    .await;
    held_by(&env, "old-settings", &["east", "west"]).await;
    let (status, reason, _) = scheduled(&env, "old-settings").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Success"));

    // a ConfigMap the policy does not select yet, then an edit that selects it: it was
    // there before the edit, so it waits as one from before the policy does
    let late = env.file(
        "late.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: demo, labels: {tier: late}}\ndata: {mode: slow}\n",
    );
    env.ok(&["apply", "-f", &late]).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let wider = |lazy: bool| {
        let yaml = std::fs::read_to_string(&both).unwrap().replace(
            "matchLabels: {tier: settings}",
            "matchExpressions: [{key: tier, operator: In, values: [settings, late]}]",
        );
        let yaml = if lazy {
            yaml
        } else {
            yaml.replace("  activationPreference: Lazy\n", "")
        };
        env.file(&format!("wider-{lazy}.yaml"), &yaml)
    };
    env.ok(&["apply", "-f", &wider(true)]).await;
    eventually("late pending", WAIT, || async {
        let (_, reason, _) = scheduled(&env, "late").await?;
        (reason == "ActivationPending").then_some(())
    })
    .await;
    // one the edited selector takes in, created after the edit, goes out at once
    let later = env.file(
        "later.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: later, namespace: demo, labels: {tier: late}}\ndata: {mode: slow}\n",
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.ok(&["apply", "-f", &later]).await;
    held_by(&env, "later", &["east", "west"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(holders(&env, "late").await.is_empty());
    let recorded = || async {
        let rb = get(&env, "hub", &["rb", "later-configmap", "-n", "demo"]).await?;
        let a = rb.pointer("/metadata/annotations/causeway.io~1activated-template");
        Some(a.and_then(Value::as_str).map(String::from))
    };
    let hash = recorded()
        .await
        .flatten()
        .expect("Lazy records the template's hash");
    assert!(!hash.is_empty());
    // no longer Lazy: what waited goes out at once
    env.ok(&["apply", "-f", &wider(false)]).await;
    held_by(&env, "later", &["east", "west"]).await;
    held_by(&env, "late", &["east", "west"]).await;
    // and the hash goes from a binding whose spec did not change (the hub's applier
    // removes an annotation it no longer sets)
    eventually("the hash of later removed", WAIT, || async {
        recorded().await?.is_none().then_some(())
    })
    .await;

    // no longer Lazy, and west only: every ConfigMap follows at once
    let eager = demo(&env, "policy.yaml", "  activationPreference: Lazy\n", "");
    let eager_west = std::fs::read_to_string(&eager)
        .unwrap()
        .replace("clusterNames: [east]", "clusterNames: [west]");
    let eager_west = env.file("eager-west.yaml", &eager_west);
    env.ok(&["apply", "-f", &eager_west]).await;
    held_by(&env, "settings", &["west"]).await;
    held_by(&env, "old-settings", &["west"]).await;
}
