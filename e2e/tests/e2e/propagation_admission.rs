//! Invalid federation policies: `causeway webhook` with
//! deploy/webhook/policies-admission.yaml on the hub (pointed at it by URL) refuses them
//! at `kubectl apply` with every field to fix, and warns of what a policy ignores; the
//! hub's controller marks an OverridePolicy `Valid` or not, as it does the
//! PropagationPolicies.

use causeway_controllers::webhook;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};
use crate::support::{Env, Webhook, install_webhook};

const BAD_PP: &str = r#"
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: default}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web, namespace: prod}
  placement:
    spreadConstraints:
    - {spreadByField: region, minGroups: 3, maxGroups: 2}
"#;

const BAD_OP: &str = r#"
apiVersion: causeway.io/v1alpha1
kind: OverridePolicy
metadata: {name: web, namespace: default}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
  - overriders:
      plaintext:
      - {path: /metadata/namespace, operator: replace, value: other}
"#;

/// BAD_OP with a path it may override.
fn good_op() -> String {
    BAD_OP.replace(
        "{path: /metadata/namespace, operator: replace, value: other}",
        "{path: /spec/replicas, operator: replace, value: 2}",
    )
}

#[tokio::test]
async fn invalid_policies_are_refused_at_apply_with_what_to_fix() {
    let env = Env::start().await;
    // stored before the webhook: it stays, and only a change to its spec is judged
    let stored = env.file(
        "stored.yaml",
        &BAD_OP.replace(
            "{name: web, namespace: default}",
            "{name: stored, namespace: default}",
        ),
    );
    env.ok(&["apply", "-f", &stored]).await;
    let hook = Webhook::start().await.unwrap();
    install_webhook(
        &env,
        &hook,
        causeway_e2e::webhook::POLICIES,
        webhook::policies::PATH,
    )
    .await;

    let pp = env.file("pp.yaml", BAD_PP);
    let err = env.fails(&["apply", "-f", &pp]).await;
    assert!(
        err.contains(
            "admission webhook \"policies.causeway.io\" denied the request: \
             PropagationPolicy default/web is invalid: spec.resourceSelectors[0].namespace: \
             Invalid value: \"prod\": a PropagationPolicy selects only resources in its own \
             namespace \"default\""
        ) && err.contains("invalid placement: spec.placement.spreadConstraints[0]"),
        "{err}"
    );
    let op = env.file("op.yaml", BAD_OP);
    let err = env.fails(&["apply", "-f", &op]).await;
    assert!(
        err.contains(
            "admission webhook \"policies.causeway.io\" denied the request: OverridePolicy \
             default/web is invalid: spec.overrideRules[0].overriders.plaintext[0].path: Invalid value: \
             \"/metadata/namespace\""
        ),
        "{err}"
    );
    // a ResourceInterpreter whose path and CEL would not do
    let ri = env.file(
        "ri.yaml",
        "apiVersion: causeway.io/v1alpha1\nkind: ResourceInterpreter\nmetadata: {name: web}\n\
         spec:\n  target: {apiVersion: example.com/v1, kind: Gadget}\n  replicas: {path: spec.size}\n\
         \x20 health: {healthy: \"object.status.phase ==\"}\n",
    );
    let err = env.fails(&["apply", "-f", &ri]).await;
    assert!(
        err.contains(
            "admission webhook \"policies.causeway.io\" denied the request: ResourceInterpreter \
             web is invalid: spec.replicas.path: Invalid value: \"spec.size\": must be a JSON \
             pointer under /spec, e.g. /spec/size; spec.health.healthy: Invalid value: \
             \"object.status.phase ==\": compilation failed"
        ),
        "{err}"
    );
    for kind in ["propagationpolicy", "overridepolicy", "resourceinterpreter"] {
        assert!(
            get(&env, "hub", &[kind, "web"]).await.is_none(),
            "{kind} stored"
        );
    }

    // fixed, they go in; rules the hub cannot read go in with a warning
    let fixed = BAD_PP.replace(", namespace: prod", "").replace(
        "minGroups: 3, maxGroups: 2}",
        "minGroups: 1, maxGroups: 2}\n    - {spreadByField: cluster, maxGroups: 3}",
    );
    let warned = fixed.replace(
        "  placement:",
        "  failover:\n    application:\n      decisionConditions: {tolerationSeconds: 30}\n      statePreservation:\n        rules:\n        - {aliasLabelName: example.com/x, jsonPath: \"{.status\"}\n  placement:",
    );
    let pp = env.file("pp.yaml", &warned);
    let out = env.run("hub", &["apply", "-f", &pp]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "Warning: these statePreservation rules are ignored: \
             spec.failover.application.statePreservation.rules[0].jsonPath: \"{.status\": "
        ),
        "{stderr}"
    );
    let op = env.file("op.yaml", &good_op());
    env.ok(&["apply", "-f", &op]).await;
    // a label on a policy stored before is not judged again: the configuration's
    // matchConditions keep the update away from the webhook
    let reviews = |counted: String| -> u64 {
        counted
            .lines()
            .filter(|l| l.starts_with("causeway_webhook_reviews_total{webhook=\"policies\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let before = reviews(hook.counted());
    assert!(before > 0, "{}", hook.counted());
    env.ok(&["label", "overridepolicy", "stored", "team=pay"])
        .await;
    assert_eq!(reviews(hook.counted()), before, "the label was not sent");
    // and a bad change to it is refused
    let op = env.file("op.yaml", BAD_OP);
    env.fails(&["apply", "-f", &op]).await;
    let counted = hook.counted();
    assert!(
        counted
            .contains("causeway_webhook_reviews_total{webhook=\"policies\",decision=\"denied\"} 4"),
        "{counted}"
    );
    hook.stop().await;
}

/// Without the webhook an invalid OverridePolicy is stored; the hub marks it
/// `Valid=False` with what to fix, and `Valid=True` once fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_policy_says_whether_it_is_valid() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    let valid = || async {
        let op = get(&env, "hub", &["overridepolicy", "web", "-n", "default"]).await?;
        let c = op
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Valid")?
            .clone();
        Some((
            c["status"].as_str()?.to_string(),
            c["message"].as_str()?.to_string(),
        ))
    };
    let op = env.file("op.yaml", BAD_OP);
    env.ok(&["apply", "-f", &op]).await;
    let (_, message) = eventually("Valid=False", WAIT, || async {
        valid().await.filter(|(s, _)| s == "False")
    })
    .await;
    assert!(
        message.contains(
            "spec.overrideRules[0].overriders.plaintext[0].path: Invalid value: \
             \"/metadata/namespace\""
        ),
        "{message}"
    );
    let op = env.file("op.yaml", &good_op());
    env.ok(&["apply", "-f", &op]).await;
    eventually("Valid=True", WAIT, || async {
        valid().await.filter(|(s, _)| s == "True")
    })
    .await;
    let columns = env
        .ok(&["get", "overridepolicy", "web", "-n", "default"])
        .await;
    assert!(columns.contains("True"), "{columns}");
}
