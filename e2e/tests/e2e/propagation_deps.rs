//! Dependencies end to end (federation.md §8 F.43, G.46–47, I.56): what a Deployment
//! with `propagateDeps` mounts is kept where the Deployment's copy is kept, and a
//! dependency with a policy of its own keeps its clusters and follows the Deployment.

use std::time::Duration;

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};
use crate::support::Env;

/// Whether `cluster` has `what` (`configmap/cfg`...) in namespace demo.
async fn has(env: &Env, cluster: &str, what: &str) -> bool {
    get(env, cluster, &[what, "-n", "demo"]).await.is_some()
}

/// Asserts for a few seconds (not once) that each of `clusters` has each of `what`.
async fn stays(env: &Env, clusters: &[&str], what: &[&str], why: &str) {
    for _ in 0..8 {
        for c in clusters {
            for w in what {
                assert!(has(env, c, w).await, "{c}: {w} gone ({why})");
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Deployment `web` mounting ConfigMap `cfg` (and PVC `data` when `pvc`), with
/// `annotations` (YAML flow map entries, may be empty).
fn web(annotations: &str, pvc: bool) -> String {
    let (mount, volume) = if pvc {
        (
            ", {name: data, mountPath: /data}",
            "\n      - {name: data, persistentVolumeClaim: {claimName: data}}",
        )
    } else {
        ("", "")
    };
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: demo, annotations: {{{annotations}}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: web:1
        volumeMounts: [{{name: config, mountPath: /etc/web}}{mount}]
      volumes:
      - {{name: config, configMap: {{name: cfg}}}}{volume}
"#
    )
}

/// The PropagationPolicy of `web` (propagateDeps) placing it on `clusters`.
fn web_policy(clusters: &str) -> String {
    format!(
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: demo}}
spec:
  propagateDeps: true
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  placement:
    clusterAffinity: {{clusterNames: [{clusters}]}}
"#
    )
}

const CFG: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: demo}
data: {mode: "fast"}
"#;

/// F.43, G.46 ★: Deployment web (propagateDeps) on east and north, annotated
/// `causeway.io/preserve-resources-on-clusters: north`, mounts PVC data and ConfigMap
/// cfg. `kubectl delete deploy web`: north keeps web's copy, and so its PVC and
/// ConfigMap (deleting them under it would be data loss); east loses all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_deployment_keeps_the_pvc_and_configmap_it_mounts() {
    let (env, _ctl) = fleet_of(&["east", "north"]).await;
    let pvc = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: demo}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#;
    let app = env.file(
        "app.yaml",
        &format!(
            "{CFG}---\n{pvc}---\n{}---\n{}",
            web("causeway.io/preserve-resources-on-clusters: north", true),
            web_policy("east, north")
        ),
    );
    env.ok(&["apply", "-f", &app]).await;
    let all = [
        "deployment/web",
        "configmap/cfg",
        "persistentvolumeclaim/data",
    ];
    for m in ["east", "north"] {
        for what in all {
            eventually(&format!("{m}: {what}"), WAIT, || async {
                has(&env, m, what).await.then_some(())
            })
            .await;
        }
    }
    env.ok(&["delete", "deployment", "web", "-n", "demo"]).await;
    eventually("east's copies removed", WAIT, || async {
        for what in all {
            if has(&env, "east", what).await {
                return None;
            }
        }
        Some(())
    })
    .await;
    stays(&env, &["north"], &all, "web's copy is kept in north").await;
}

/// G.47, I.56: ConfigMap cfg has a ClusterPropagationPolicy of its own, `configs`;
/// Deployment web (propagateDeps) is on east. While configs places cfg on north only,
/// east gets it too (web runs there). configs then places it everywhere, and is
/// deleted: the copies in west and north stay (deleting a policy leaves the members
/// alone), and so does east's, which web uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_with_its_own_policy_keeps_its_copies_and_follows_its_workload() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let configs = |clusters: &str| {
        format!(
            r#"apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {{name: configs}}
spec:
  resourceSelectors:
  - {{apiVersion: v1, kind: ConfigMap, namespace: demo, name: cfg}}
  placement:
    clusterAffinity: {{clusterNames: [{clusters}]}}
"#
        )
    };
    let app = env.file(
        "app.yaml",
        &format!(
            "{CFG}---\n{}---\n{}---\n{}",
            web("", false),
            web_policy("east"),
            configs("north")
        ),
    );
    env.ok(&["apply", "-f", &app]).await;
    eventually(
        "cfg in north (its policy) and east (web's)",
        WAIT,
        || async {
            let (east, west, north) = (
                has(&env, "east", "configmap/cfg").await,
                has(&env, "west", "configmap/cfg").await,
                has(&env, "north", "configmap/cfg").await,
            );
            (east && !west && north).then_some(())
        },
    )
    .await;
    let everywhere = env.file("configs.yaml", &configs("east, west, north"));
    env.ok(&["apply", "-f", &everywhere]).await;
    eventually("cfg everywhere", WAIT, || async {
        for m in ["east", "west", "north"] {
            if !has(&env, m, "configmap/cfg").await {
                return None;
            }
        }
        Some(())
    })
    .await;
    env.ok(&["delete", "clusterpropagationpolicy", "configs"])
        .await;
    stays(
        &env,
        &["east", "west", "north"],
        &["configmap/cfg"],
        "its policy was deleted",
    )
    .await;
}
