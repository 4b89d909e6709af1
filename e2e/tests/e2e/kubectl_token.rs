//! `kubectl create token`: a TokenRequest against kubesim, then that token used with
//! kubectl `--token`, where RBAC applies to the ServiceAccount.

use crate::support::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_then_use_it_as_the_service_account() {
    let env = Env::start().await;
    env.ok(&["create", "serviceaccount", "reader", "-n", "default"])
        .await;
    let rbac = env.file(
        "rbac.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: cm-reader\n  namespace: default\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"get\", \"list\"]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: cm-reader\n  namespace: default\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: cm-reader\nsubjects:\n- kind: ServiceAccount\n  name: reader\n  namespace: default\n",
    );
    env.ok(&["apply", "-f", &rbac]).await;
    env.ok(&["create", "configmap", "visible", "-n", "default"])
        .await;

    let token = env
        .ok(&[
            "create",
            "token",
            "reader",
            "-n",
            "default",
            "--duration=10m",
        ])
        .await;
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let flag = format!("--token={token}");

    let cms = env
        .ok(&[&flag, "get", "configmaps", "-n", "default", "-o", "name"])
        .await;
    assert!(cms.contains("configmap/visible"), "{cms}");
    let denied = env.fails(&[&flag, "get", "secrets", "-n", "default"]).await;
    assert!(
        denied.contains(
            "User \"system:serviceaccount:default:reader\" cannot list resource \"secrets\""
        ),
        "{denied}"
    );
    let other_ns = env
        .fails(&[&flag, "get", "configmaps", "-n", "kube-system"])
        .await;
    assert!(other_ns.contains("forbidden"), "{other_ns}");

    let missing = env
        .fails(&["create", "token", "nobody", "-n", "default"])
        .await;
    assert!(
        missing.contains("serviceaccounts \"nobody\" not found"),
        "{missing}"
    );
    let short = env
        .fails(&[
            "create",
            "token",
            "reader",
            "-n",
            "default",
            "--duration=5m",
        ])
        .await;
    assert!(
        short.contains("may not specify a duration less than 10 minutes"),
        "{short}"
    );
}
