//! Propagation with the least-privilege roles of deploy/: the hub controller runs as the
//! ServiceAccount deploy/rbac/hub.yaml binds, and reaches each (Push) member as the one
//! deploy/rbac/member.yaml binds there. A Deployment and the ConfigMap it mounts, and a
//! RoleBinding to the `edit` ClusterRole, reach
//! both members once the hub may create their namespace there (while the hub's
//! Namespace opts out, each copy says the namespace is missing, and what to do), their
//! binding reports them applied, the template's status is summed, its ordered rollout
//! keeps a revision, deleting the template removes the copies but not the namespace,
//! and a member that leaves is cleaned up after.

use std::time::Duration;

use serde_json::Value;

use crate::mcs_members::least_privileged;
use crate::mcs_support::eventually;

const WAIT: Duration = Duration::from_secs(45);

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {causeway.io/skip-auto-propagation: "true", pod-security.kubernetes.io/enforce: baseline}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: shop}
data: {mode: fast}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27", volumeMounts: [{name: c, mountPath: /etc/web}]}]
      volumes: [{name: c, configMap: {name: web-config}}]
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: shop}
spec:
  propagateDeps: true
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  rollout:
    waves:
    - clusterNames: [c0]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: web-editors, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: web-team}]
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: web-editors, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, name: web-editors}
"#;

async fn kubectl(kc: &std::path::Path, ctx: &str, args: &[&str]) -> std::process::Output {
    crate::support::kubectl_in(kc, ctx, args).await
}

async fn get(kc: &std::path::Path, ctx: &str, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let o = kubectl(kc, ctx, &all).await;
    o.status
        .success()
        .then(|| serde_json::from_slice(&o.stdout).ok())
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagation_works_with_the_least_privilege_roles_of_deploy() {
    let (owned, restricted, dir, kc) = least_privileged().await;
    // the federation roles, besides hub.yaml and member.yaml
    for (ctx, file) in [
        ("hub", "deploy/rbac/propagation-hub.yaml"),
        ("c0", "deploy/rbac/propagation-member.yaml"),
        ("c1", "deploy/rbac/propagation-member.yaml"),
    ] {
        let path = crate::support::repo().join(file);
        let o = kubectl(&kc, ctx, &["apply", "-f", path.to_str().unwrap()]).await;
        assert!(
            o.status.success(),
            "{ctx} {file}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let _ctl = owned.cs.start_controller_as(restricted).unwrap();
    let app = dir.path().join("app.yaml");
    std::fs::write(&app, APP).unwrap();
    let o = kubectl(&kc, "hub", &["apply", "-f", app.to_str().unwrap()]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // the members lack namespace shop, which the hub may not create: each copy says
    // so, and what to do
    let hint = "its namespace \"shop\" does not exist there; the hub creates a template's \
                namespace in the members it goes to, with the Work causeway-es-c0/shop.namespace \
                (whose status says how that went), unless the hub's Namespace shop is labelled \
                causeway.io/skip-auto-propagation=true";
    eventually("the missing namespace is named", WAIT, || async {
        let works = get(&kc, "hub", &["works", "-n", "causeway-es-c0"]).await?;
        let said = works["items"].as_array()?.iter().any(|w| {
            w.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["message"].as_str().is_some_and(|m| m.contains(hint)))
        });
        said.then_some(())
    })
    .await;
    let o = kubectl(
        &kc,
        "hub",
        &[
            "label",
            "namespace",
            "shop",
            "causeway.io/skip-auto-propagation-",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for c in ["c0", "c1"] {
        eventually(&format!("web and its ConfigMap in {c}"), WAIT, || async {
            // the namespace, with the hub's Pod Security label
            let ns = get(&kc, c, &["namespace", "shop"]).await?;
            let enforce = ns.pointer("/metadata/labels/pod-security.kubernetes.io~1enforce")?;
            assert_eq!(enforce, "baseline");
            get(&kc, c, &["deployment", "web", "-n", "shop"]).await?;
            get(&kc, c, &["configmap", "web-config", "-n", "shop"]).await?;
            // a RoleBinding to `edit`, which causeway-hub may grant only through `bind`
            get(&kc, c, &["rolebinding", "web-editors", "-n", "shop"]).await?;
            Some(())
        })
        .await;
    }
    eventually(
        "FullyApplied, the template's status summed",
        WAIT,
        || async {
            let rb = get(&kc, "hub", &["rb", "web-deployment", "-n", "shop"]).await?;
            let applied = crate::propagation::fully_applied(&rb);
            let web = get(&kc, "hub", &["deployment", "web", "-n", "shop"]).await?;
            (applied && web.pointer("/status/replicas") == Some(&Value::from(2))).then_some(())
        },
    )
    .await;
    eventually("the rollout's revision kept", WAIT, || async {
        get(
            &kc,
            "hub",
            &["controllerrevision", "web-deployment-g1", "-n", "shop"],
        )
        .await
        .map(|_| ())
    })
    .await;
    let o = kubectl(
        &kc,
        "hub",
        &["delete", "deployment", "web", "-n", "shop", "--wait=false"],
    )
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for c in ["c0", "c1"] {
        eventually(
            &format!("web and its ConfigMap gone from {c}"),
            WAIT,
            || async {
                let web = get(&kc, c, &["deployment", "web", "-n", "shop"]).await;
                let config = get(&kc, c, &["configmap", "web-config", "-n", "shop"]).await;
                (web.is_none() && config.is_none()).then_some(())
            },
        )
        .await;
        assert!(
            get(&kc, c, &["namespace", "shop"]).await.is_some(),
            "the namespace stays in {c}"
        );
    }
    // a member leaves: the controller cleans its hub objects up (its execution
    // namespace, its credentials) and lets the Cluster go
    let o = kubectl(&kc, "hub", &["delete", "cluster", "c1", "--wait=false"]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    eventually(
        "c1 gone, with its execution namespace and credentials",
        WAIT,
        || async {
            let cluster = get(&kc, "hub", &["cluster", "c1"]).await;
            let es = get(&kc, "hub", &["namespace", "causeway-es-c1"]).await;
            let secret = get(
                &kc,
                "hub",
                &["secret", "-n", "causeway-system", "c1-credentials"],
            )
            .await;
            (cluster.is_none() && es.is_none() && secret.is_none()).then_some(())
        },
    )
    .await;
    // a Secret Causeway did not write (no causeway.io/cluster label naming the member:
    // one a person pointed the Cluster at) stays when its Cluster goes
    let o = kubectl(
        &kc,
        "hub",
        &[
            "label",
            "secret",
            "-n",
            "causeway-system",
            "c0-credentials",
            "causeway.io/cluster-",
        ],
    )
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = kubectl(&kc, "hub", &["delete", "cluster", "c0", "--wait=false"]).await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    eventually("c0 gone", WAIT, || async {
        get(&kc, "hub", &["cluster", "c0"])
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        get(
            &kc,
            "hub",
            &["secret", "-n", "causeway-system", "c0-credentials"]
        )
        .await
        .is_some(),
        "a Secret Causeway did not write is kept"
    );
}

const PULL_EXPORT: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: web, namespace: shop}
"#;

/// A Pull member's agent reaches its member only as the ServiceAccount
/// `causeway-system/causeway-agent` with the roles of deploy/agent/rbac.yaml and
/// deploy/rbac/propagation-agent.yaml, applied with kubectl: the member turns Ready (the
/// status controller's reads), a Deployment, its ConfigMap and a RoleBinding to `edit`
/// reach it in a namespace the hub has it create, the binding is FullyApplied, a
/// Service it exports is imported on the hub with the export's status written, and
/// deleting the template removes the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_members_agent_works_with_the_roles_of_deploy() {
    use crate::support::Env;
    let env = Env::start_with(causeway_e2e::Options {
        members: vec!["west".into()],
        ..Default::default()
    })
    .await;
    let west = env.cs.member("west").unwrap();
    west.add_token(
        "agent-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-agent".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let as_agent = causeway_controllers::clusters::join::client_for(
        &causeway_controllers::clusters::join::MemberAccess {
            token: "agent-token".into(),
            ..causeway_e2e::access(west)
        },
    )
    .await
    .unwrap();
    // RBAC is enforced: the agent's account may do nothing until deploy/'s roles are in
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::all(as_agent.clone());
    let err = pods.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 403),
        "{err}"
    );
    for file in [
        "deploy/agent/rbac.yaml",
        "deploy/rbac/propagation-agent.yaml",
    ] {
        let path = crate::support::repo().join(file);
        env.ok_in("west", &["apply", "-f", path.to_str().unwrap()])
            .await;
    }
    let ctl = env.cs.start_controller().await.unwrap();
    let agent = env
        .cs
        .start_pull_member_as(
            "west",
            causeway_controllers::clusters::options::Timing::fast(),
            false,
            as_agent,
        )
        .await
        .unwrap();
    eventually("west Ready through its agent", WAIT, || async {
        let c = get(&env.kubeconfig, "hub", &["cluster", "west"]).await?;
        let ready = c
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    })
    .await;
    // the first test's workload, the hub allowed to create its namespace
    let app = env.file(
        "app.yaml",
        &APP.replace(r#"causeway.io/skip-auto-propagation: "true", "#, ""),
    );
    env.ok(&["apply", "-f", &app]).await;
    eventually("the copies in west", WAIT, || async {
        let ns = get(&env.kubeconfig, "west", &["namespace", "shop"]).await?;
        let enforce = ns.pointer("/metadata/labels/pod-security.kubernetes.io~1enforce")?;
        assert_eq!(enforce, "baseline");
        get(
            &env.kubeconfig,
            "west",
            &["deployment", "web", "-n", "shop"],
        )
        .await?;
        get(
            &env.kubeconfig,
            "west",
            &["configmap", "web-config", "-n", "shop"],
        )
        .await?;
        get(
            &env.kubeconfig,
            "west",
            &["rolebinding", "web-editors", "-n", "shop"],
        )
        .await?;
        Some(())
    })
    .await;
    eventually("FullyApplied", WAIT, || async {
        let rb = get(
            &env.kubeconfig,
            "hub",
            &["rb", "web-deployment", "-n", "shop"],
        )
        .await?;
        let applied = crate::propagation::fully_applied(&rb);
        applied.then_some(())
    })
    .await;
    // the exporter and the importer with the same roles
    let export = env.file("export.yaml", PULL_EXPORT);
    env.ok_in("west", &["apply", "-f", &export]).await;
    eventually(
        "the export imported on the hub, its status written",
        WAIT,
        || async {
            get(
                &env.kubeconfig,
                "hub",
                &["serviceimport", "web", "-n", "shop"],
            )
            .await?;
            let ex = get(
                &env.kubeconfig,
                "west",
                &["serviceexport", "web", "-n", "shop"],
            )
            .await?;
            let conds = ex.pointer("/status/conditions")?.as_array()?;
            (!conds.is_empty()).then_some(())
        },
    )
    .await;
    env.ok(&["delete", "deployment", "web", "-n", "shop", "--wait=false"])
        .await;
    eventually("the copy gone from west", WAIT, || async {
        get(
            &env.kubeconfig,
            "west",
            &["deployment", "web", "-n", "shop"],
        )
        .await
        .is_none()
        .then_some(())
    })
    .await;
    agent.stop.cancel();
    ctl.stop().await;
}
