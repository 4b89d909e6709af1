//! The namespaces members need (hub/namespaces.rs), with real kubectl: a template
//! propagated to a member gets its namespace there, with the hub Namespace's labels
//! and annotations, kept as the hub's change; withdrawing the last template there
//! leaves the namespace (unmarked); a namespace made so is taken over by a policy that
//! propagates it, with no conflict; a hub Namespace that opts out is not created, and
//! the copy says what to do.

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};
use crate::support::Env;

fn configmap_and_policy(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: web, namespace: {ns}}}
data: {{mode: fast}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: {ns}}}
spec:
  resourceSelectors:
  - {{apiVersion: v1, kind: ConfigMap, name: web}}
  placement:
    clusterAffinity: {{clusterNames: [east]}}
"#
    )
}

const NAMESPACE_POLICY: &str = r#"apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: Namespace, name: shop}
  placement:
    clusterAffinity: {clusterNames: [east]}
"#;

/// Member namespace `shop`'s label `key` (None: no such namespace or label).
async fn shop_label(env: &Env, cluster: &str, key: &str) -> Option<String> {
    let ns = get(env, cluster, &["namespace", "shop"]).await?;
    let l = ns.pointer("/metadata/labels")?.get(key)?;
    l.as_str().map(String::from)
}

/// The Applied condition's (status, message) of Work `name` in east's execution
/// namespace, once it reports on its current generation.
async fn applied(env: &Env, name: &str) -> Option<(String, String)> {
    let w = get(env, "hub", &["work", name, "-n", "causeway-es-east"]).await?;
    let c = w
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Applied")?
        .clone();
    (c["observedGeneration"] == w["metadata"]["generation"]).then(|| {
        (
            c["status"].as_str().unwrap_or_default().to_string(),
            c["message"].as_str().unwrap_or_default().to_string(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gets_the_namespaces_of_what_is_propagated_to_it() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&["create", "namespace", "shop"]).await;
    env.ok(&[
        "label",
        "namespace",
        "shop",
        "pod-security.kubernetes.io/enforce=baseline",
    ])
    .await;
    env.ok(&["annotate", "namespace", "shop", "owner=team-shop"])
        .await;
    let app = env.file("app.yaml", &configmap_and_policy("shop"));
    env.ok(&["apply", "-f", &app]).await;

    // east gets the namespace, with the hub's label and annotation, and the copy
    eventually("namespace shop and its ConfigMap in east", WAIT, || async {
        let ns = get(&env, "east", &["namespace", "shop"]).await?;
        let owner = ns.pointer("/metadata/annotations/owner")?;
        assert_eq!(owner, "team-shop");
        get(&env, "east", &["configmap", "web", "-n", "shop"]).await?;
        let enforce = shop_label(&env, "east", "pod-security.kubernetes.io/enforce").await;
        (enforce.as_deref() == Some("baseline")).then_some(())
    })
    .await;
    let out = env
        .ok(&["get", "works", "-n", "causeway-es-east", "shop.namespace"])
        .await;
    assert!(out.contains("Namespace"), "{out}");
    // west runs nothing in shop: no namespace there
    assert!(get(&env, "west", &["namespace", "shop"]).await.is_none());
    assert!(
        get(
            &env,
            "hub",
            &["work", "shop.namespace", "-n", "causeway-es-west"]
        )
        .await
        .is_none()
    );

    // the hub's labels are the members'
    env.ok(&[
        "label",
        "namespace",
        "shop",
        "pod-security.kubernetes.io/enforce=restricted",
        "--overwrite",
    ])
    .await;
    eventually("east's label follows the hub's", WAIT, || async {
        let enforce = shop_label(&env, "east", "pod-security.kubernetes.io/enforce").await;
        (enforce.as_deref() == Some("restricted")).then_some(())
    })
    .await;
    // and what the hub's Namespace drops goes from east's too
    env.ok(&["annotate", "namespace", "shop", "owner-"]).await;
    eventually("east's annotation dropped", WAIT, || async {
        let ns = get(&env, "east", &["namespace", "shop"]).await?;
        ns.pointer("/metadata/annotations/owner")
            .is_none()
            .then_some(())
    })
    .await;

    // the last copy withdrawn: the namespace stays, no longer Causeway's
    env.ok(&["delete", "configmap", "web", "-n", "shop"]).await;
    eventually("the copy gone, the namespace left", WAIT, || async {
        let copy = get(&env, "east", &["configmap", "web", "-n", "shop"]).await;
        let work = get(
            &env,
            "hub",
            &["work", "shop.namespace", "-n", "causeway-es-east"],
        )
        .await;
        let managed = shop_label(&env, "east", "causeway.io/managed").await;
        (copy.is_none() && work.is_none() && managed.is_none()).then_some(())
    })
    .await;
    assert_eq!(
        shop_label(&env, "east", "pod-security.kubernetes.io/enforce")
            .await
            .as_deref(),
        Some("restricted"),
        "the namespace stays in east as it was"
    );

    // propagated again: the namespace left behind is taken back
    env.ok(&["apply", "-f", &app]).await;
    eventually("shop.namespace applied again", WAIT, || async {
        let (status, _) = applied(&env, "shop.namespace").await?;
        let managed = shop_label(&env, "east", "causeway.io/managed").await;
        (status == "True" && managed.as_deref() == Some("true")).then_some(())
    })
    .await;

    // a policy that propagates the Namespace itself takes it over, with no conflict
    let ns_policy = env.file("ns-policy.yaml", NAMESPACE_POLICY);
    env.ok(&["apply", "-f", &ns_policy]).await;
    eventually("the policy's Work manages shop in east", WAIT, || async {
        let (status, message) = applied(&env, "shop-namespace").await?;
        assert_ne!(status, "False", "{message}");
        let made = get(
            &env,
            "hub",
            &["work", "shop.namespace", "-n", "causeway-es-east"],
        )
        .await;
        let ns = get(&env, "east", &["namespace", "shop"]).await?;
        let work = ns
            .pointer("/metadata/annotations/causeway.io~1work")?
            .as_str()?;
        (status == "True" && made.is_none() && work.ends_with("/shop-namespace")).then_some(())
    })
    .await;
    assert!(
        get(&env, "east", &["configmap", "web", "-n", "shop"])
            .await
            .is_some(),
        "the copy stays through the handover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_opts_out_is_not_created_and_the_copy_says_so() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    // a namespace the member had (demo) is the member's: left as it is
    let app = env.file("demo.yaml", &configmap_and_policy("demo"));
    env.ok(&["apply", "-f", &app]).await;
    eventually("the copy in demo, demo.namespace applied", WAIT, || async {
        get(&env, "east", &["configmap", "web", "-n", "demo"]).await?;
        let (status, _) = applied(&env, "demo.namespace").await?;
        (status == "True").then_some(())
    })
    .await;
    let demo = get(&env, "east", &["namespace", "demo"])
        .await
        .expect("demo");
    assert!(
        demo.pointer("/metadata/labels/causeway.io~1managed")
            .is_none(),
        "{demo}"
    );
    assert!(
        demo.pointer("/metadata/annotations/causeway.io~1work")
            .is_none(),
        "{demo}"
    );

    env.ok(&["create", "namespace", "quiet"]).await;
    env.ok(&[
        "label",
        "namespace",
        "quiet",
        "causeway.io/skip-auto-propagation=true",
    ])
    .await;
    let app = env.file("app.yaml", &configmap_and_policy("quiet"));
    env.ok(&["apply", "-f", &app]).await;
    let (status, message) = eventually("the copy says its namespace is missing", WAIT, || async {
        applied(&env, "quiet.web-configmap")
            .await
            .filter(|(s, _)| s == "False")
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains(
            "its namespace \"quiet\" does not exist there; the hub creates a template's namespace \
             in the members it goes to, with the Work causeway-es-east/quiet.namespace (whose \
             status says how that went), unless the hub's Namespace quiet is labelled \
             causeway.io/skip-auto-propagation=true"
        ),
        "{message}"
    );
    assert!(get(&env, "east", &["namespace", "quiet"]).await.is_none());
    let works: Value = get(&env, "hub", &["works", "-n", "causeway-es-east"])
        .await
        .expect("works");
    let names: Vec<&str> = works["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    assert!(!names.contains(&"quiet.namespace"), "{names:?}");

    // the label removed: the namespace is made, and the copy lands
    env.ok(&[
        "label",
        "namespace",
        "quiet",
        "causeway.io/skip-auto-propagation-",
    ])
    .await;
    eventually("quiet and its copy in east", WAIT, || async {
        get(&env, "east", &["configmap", "web", "-n", "quiet"])
            .await
            .map(|_| ())
    })
    .await;
}

/// A member's execution namespace on the hub deleted by hand is made again (the
/// registry is level-based: it does not remember having made it once), and what the
/// member is sent lands in it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_namespace_deleted_by_hand_comes_back() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    eventually("east's execution namespace", WAIT, || async {
        get(&env, "hub", &["namespace", "causeway-es-east"])
            .await
            .map(|_| ())
    })
    .await;
    env.ok(&["delete", "namespace", "causeway-es-east", "--wait=false"])
        .await;
    env.ok(&["create", "namespace", "shop"]).await;
    let app = env.file("app.yaml", &configmap_and_policy("shop"));
    env.ok(&["apply", "-f", &app]).await;
    eventually(
        "causeway-es-east made again, and the ConfigMap in east",
        WAIT,
        || async {
            let ns = get(&env, "hub", &["namespace", "causeway-es-east"]).await?;
            if ns.pointer("/metadata/deletionTimestamp").is_some() {
                return None;
            }
            get(&env, "east", &["configmap", "web", "-n", "shop"])
                .await
                .map(|_| ())
        },
    )
    .await;
}
