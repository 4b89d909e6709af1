//! `causeway explain` and `causeway promote` on the real pipeline: the hub controller
//! (detector, renderer, status) and the members' work appliers running.

use serde_json::Value;

use super::{PROMOTE_EAST, SHOP, WAIT, deployment_policy, ok};
use crate::mcs_support::eventually;
use crate::support::Env;

async fn running() -> (Env, causeway_e2e::Controller) {
    crate::propagation::fleet_of(&["east", "west"]).await
}

/// The member's Deployment demo/shop as JSON, if it is there.
async fn member_shop(env: &Env, cluster: &str) -> Option<Value> {
    let out = env
        .run(
            cluster,
            &["get", "deployment", "shop", "-n", "demo", "-o", "json"],
        )
        .await;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())?
}

/// The names of the ReplicaSets in east's namespace demo.
async fn replicasets(env: &Env) -> Vec<String> {
    env.ok_in("east", &["get", "replicasets", "-n", "demo", "-o", "name"])
        .await
        .lines()
        .map(String::from)
        .collect()
}

/// F.44 end to end: promote adopts a Deployment that runs in east. The hub controller
/// takes it over (Causeway's label and Work annotation on it) without changing it: same
/// object, same spec, no new ReplicaSet; west gets nothing; explain shows it applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_adopts_a_member_deployment_with_no_spec_change() {
    let (env, _ctl) = running().await;
    env.ok_in("east", &["apply", "-f", &env.file("shop.json", SHOP)])
        .await;
    let before = member_shop(&env, "east").await.expect("shop in east");
    let replicasets_before = eventually("shop's ReplicaSet in east", WAIT, || async {
        let names = replicasets(&env).await;
        (!names.is_empty()).then_some(names)
    })
    .await;
    ok(&env, &PROMOTE_EAST).await;
    let after = eventually("east's shop adopted by Causeway", WAIT, || async {
        let d = member_shop(&env, "east").await?;
        let managed = d.pointer("/metadata/labels/causeway.io~1managed")?;
        (managed == "true"
            && d.pointer("/metadata/annotations/causeway.io~1work")
                .is_some())
        .then_some(d)
    })
    .await;
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "recreated"
    );
    // (the generation moves: kube-apiserver bumps a Deployment's on an annotation
    // change, and adoption adds causeway.io/work; the spec and its Pods do not)
    assert_eq!(after["spec"], before["spec"], "spec changed");
    assert_eq!(
        replicasets(&env).await,
        replicasets_before,
        "adoption rolled the Pods (a new ReplicaSet)"
    );
    let out = eventually("explain: east applied", WAIT, || async {
        let out = ok(&env, &["explain", "deployment/shop", "-n", "demo"]).await;
        out.contains("applied: yes").then_some(out)
    })
    .await;
    assert!(
        out.contains("claimed by PropagationPolicy demo/shop-deployment"),
        "{out}"
    );
    assert!(out.contains("east: chosen, 3 replica(s)"), "{out}");
    assert!(out.contains("west: not chosen: "), "{out}");
    assert!(
        member_shop(&env, "west").await.is_none(),
        "west got the promoted Deployment"
    );
}

const REGISTRY: &str = r#"{"apiVersion": "causeway.io/v1alpha1", "kind": "OverridePolicy",
 "metadata": {"name": "registry", "namespace": "demo"},
 "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"}],
  "overrideRules": [{"targetCluster": {"clusterNames": ["east"]},
   "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "mirror.us.example.com"}]}}]}}"#;

/// explain on a template the hub controller really propagated: east is chosen and its
/// copy differs by the image the OverridePolicy set (named with its rule and
/// overrider) and the template generation; west is left out with the scheduler's
/// reason; east applied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_real_propagation_names_the_override_of_each_field() {
    let (env, _ctl) = running().await;
    env.ok(&["apply", "-f", &env.file("shop.json", SHOP)]).await;
    env.ok(&["apply", "-f", &env.file("registry.json", REGISTRY)])
        .await;
    deployment_policy(&env.hub_client().await, "shop", "shop", &["east"]).await;
    eventually("east runs the overridden image", WAIT, || async {
        let d = member_shop(&env, "east").await?;
        let image = d.pointer("/spec/template/spec/containers/0/image")?;
        (image == "mirror.us.example.com/nginx:1.27").then_some(())
    })
    .await;
    let out = eventually("explain: east applied and healthy", WAIT, || async {
        let out = ok(&env, &["explain", "deployment/shop", "-n", "demo"]).await;
        out.contains("applied: yes, health: Healthy").then_some(out)
    })
    .await;
    let want = [
        "  binding: ResourceBinding demo/shop-deployment, claimed by PropagationPolicy demo/shop",
        "east: chosen, 3 replica(s)",
        "  spec.template.spec.containers[0].image: \"nginx:1.27\" → \"mirror.us.example.com/nginx:1.27\"  (set by OverridePolicy demo/registry rule 0 (image))",
        "  metadata.annotations[\"causeway.io/template-generation\"]: <none> → \"1\"  (added by Causeway: the template generation it was rendered from)",
    ];
    for line in want {
        assert!(
            out.lines().any(|l| l == line),
            "no line {line:?} in:\n{out}"
        );
    }
    assert_eq!(out.matches(" → ").count(), 2, "{out}");
    let west = out
        .lines()
        .find(|l| l.starts_with("west: not chosen: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        west.len() > "west: not chosen: ".len(),
        "no reason for west: {out}"
    );

    // §9.5 ★: a second policy pinning the image overrides the mirror in east; the hub
    // says so in an Event, and explain on east's copy
    env.ok(&["apply", "-f", &env.file("pin.json", PIN)]).await;
    let said = "spec.template.spec.containers[0].image: OverridePolicy demo/z-pin rule 0 \
                (plaintext) overrides OverridePolicy demo/registry rule 0 (image)";
    eventually("east runs the pinned image", WAIT, || async {
        let d = member_shop(&env, "east").await?;
        let image = d.pointer("/spec/template/spec/containers/0/image")?;
        (image == "nginx:1.28").then_some(())
    })
    .await;
    let out = ok(&env, &["explain", "deployment/shop", "-n", "demo"]).await;
    let note = format!("  note: two override policies write one path: {said}");
    assert!(
        out.lines().any(|l| l == note),
        "no line {note:?} in:\n{out}"
    );
    let events = eventually("an OverridesOverlap Event", WAIT, || async {
        let out = crate::propagation::demo_events(&env, "reason=OverridesOverlap").await;
        out.contains("OverridesOverlap").then_some(out)
    })
    .await;
    assert!(
        events.contains(&format!("cluster east: {said}")),
        "{events}"
    );
}

const PIN: &str = r#"{"apiVersion": "causeway.io/v1alpha1", "kind": "OverridePolicy",
 "metadata": {"name": "z-pin", "namespace": "demo"},
 "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"}],
  "overrideRules": [{"overriders": {"plaintext": [
   {"path": "/spec/template/spec/containers/0/image", "operator": "replace", "value": "nginx:1.28"}]}}]}}"#;

/// A cluster-scoped object: promote writes a ClusterPropagationPolicy, the hub
/// controller adopts the member's ClusterRole through a ClusterResourceBinding, and
/// explain (no -n) follows that binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_and_explain_a_cluster_scoped_object() {
    let (env, _ctl) = running().await;
    let role = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "shop-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}"#;
    env.ok_in("east", &["apply", "-f", &env.file("role.json", role)])
        .await;
    let out = ok(
        &env,
        &["promote", "clusterrole/shop-reader", "--cluster", "east"],
    )
    .await;
    assert!(
        out.contains("created ClusterPropagationPolicy shop-reader-clusterrole"),
        "{out}"
    );
    let out = eventually("explain: east applied the ClusterRole", WAIT, || async {
        let out = ok(
            &env,
            &[
                "explain",
                "clusterroles.rbac.authorization.k8s.io/shop-reader",
            ],
        )
        .await;
        out.contains("applied: yes").then_some(out)
    })
    .await;
    for line in [
        "ClusterRole shop-reader",
        "  binding: ClusterResourceBinding shop-reader-clusterrole, claimed by ClusterPropagationPolicy shop-reader-clusterrole",
        "east: chosen",
        "  work: causeway-es-east/shop-reader-clusterrole",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "no line {line:?} in:\n{out}"
        );
    }
    let role = env
        .ok_in("east", &["get", "clusterrole", "shop-reader", "-o", "json"])
        .await;
    let role: Value = serde_json::from_str(&role).unwrap();
    assert_eq!(
        role["metadata"]["labels"]["causeway.io/managed"], "true",
        "{role}"
    );
}
