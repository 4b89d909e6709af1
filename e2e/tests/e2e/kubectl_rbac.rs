//! RBAC on the hub as kube-apiserver enforces it, with real kubectl and Causeway's own
//! `deploy/rbac/member.yaml`: the bootstrap `view`/`edit`/`admin` roles and their
//! aggregation, privilege-escalation prevention and its `escalate`/`bind` way out, and
//! the validation of RBAC objects.

use std::time::{Duration, Instant};

use crate::support::Env;

async fn can(env: &Env, args: &[&str]) -> String {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let out = env.run("hub", &a).await;
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const EXPORT: &str = "apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: web
  namespace: team
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_is_enforced_as_kube_apiserver_enforces_it() {
    let env = Env::start().await;
    env.ok(&["create", "namespace", "team"]).await;
    for (name, role, user) in [("dev-admin", "admin", "dev"), ("vera-view", "view", "vera")] {
        let role = format!("--clusterrole={role}");
        let user = format!("--user={user}");
        env.ok(&["-n", "team", "create", "rolebinding", name, &role, &user])
            .await;
    }
    // the bootstrap roles: view reads workloads but no Secrets; admin (edit's rules,
    // aggregated) writes them and reads Secrets; neither reaches other namespaces
    assert_eq!(
        can(&env, &["list", "pods", "-n", "team", "--as", "vera"]).await,
        "yes"
    );
    assert_eq!(
        can(&env, &["get", "secrets", "-n", "team", "--as", "vera"]).await,
        "no"
    );
    assert_eq!(
        can(&env, &["delete", "pods", "-n", "team", "--as", "vera"]).await,
        "no"
    );
    assert_eq!(
        can(&env, &["get", "secrets", "-n", "team", "--as", "dev"]).await,
        "yes"
    );
    assert_eq!(
        can(
            &env,
            &["create", "deployments.apps", "-n", "team", "--as", "dev"]
        )
        .await,
        "yes"
    );
    assert_eq!(
        can(&env, &["list", "pods", "-n", "default", "--as", "dev"]).await,
        "no"
    );

    // Causeway's member manifest aggregates ServiceExport editing into edit and admin
    // (API-10): namespace admins may export, viewers may not
    let export = env.file("export.yaml", EXPORT);
    let err = env.fails(&["create", "-f", &export, "--as", "dev"]).await;
    assert!(
        err.contains("cannot create resource \"serviceexports\""),
        "{err}"
    );
    env.ok(&["apply", "-f", "deploy/rbac/member.yaml"]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while can(
        &env,
        &[
            "create",
            "serviceexports.multicluster.x-k8s.io",
            "-n",
            "team",
            "--as",
            "dev",
        ],
    )
    .await
        != "yes"
    {
        assert!(
            Instant::now() < deadline,
            "edit never aggregated the serviceexport editor role"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let edit = env
        .ok(&[
            "get",
            "clusterrole",
            "edit",
            "-o",
            "jsonpath={.rules[*].resources}",
        ])
        .await;
    assert!(edit.contains("serviceexports"), "{edit}");
    env.ok(&["create", "-f", &export, "--as", "dev"]).await;
    let err = env
        .fails(&[
            "-n",
            "team",
            "delete",
            "serviceexport",
            "web",
            "--as",
            "vera",
        ])
        .await;
    assert!(
        err.contains(r#"serviceexports.multicluster.x-k8s.io "web" is forbidden: User "vera" cannot delete resource "serviceexports""#),
        "{err}"
    );

    // escalation: dev may write Roles (admin) but grant only what it holds
    env.ok(&[
        "-n",
        "team",
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
        "--as",
        "dev",
    ])
    .await;
    env.ok(&[
        "-n",
        "team",
        "create",
        "rolebinding",
        "eve-reads",
        "--role=pod-reader",
        "--user=eve",
        "--as",
        "dev",
    ])
    .await;
    // a Role with nodes in it, which dev's admin binding does not hold
    let too_much = [
        "-n",
        "team",
        "create",
        "role",
        "too-much",
        "--verb=get,deletecollection",
        "--resource=pods,nodes",
        "--as",
        "dev",
    ];
    let err = env.fails(&too_much).await;
    assert!(
        err.contains("roles.rbac.authorization.k8s.io \"too-much\" is forbidden: user \"dev\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\" \"deletecollection\"]}"),
        "{err}"
    );
    let err = env
        .fails(&[
            "-n",
            "team",
            "create",
            "rolebinding",
            "dev-root",
            "--clusterrole=cluster-admin",
            "--user=dev",
            "--as",
            "dev",
        ])
        .await;
    assert!(
        err.contains("is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}"),
        "{err}"
    );
    // a binding to a role that does not exist is checked against nothing: 404
    let err = env
        .fails(&[
            "-n",
            "team",
            "create",
            "rolebinding",
            "ghost",
            "--role=ghost",
            "--user=eve",
            "--as",
            "dev",
        ])
        .await;
    assert!(
        err.contains(r#"roles.rbac.authorization.k8s.io "ghost" not found"#),
        "{err}"
    );
    // `escalate` on roles and `bind` on clusterroles lift the check
    env.ok(&[
        "-n",
        "team",
        "create",
        "role",
        "escalator",
        "--verb=escalate,bind",
        "--resource=roles.rbac.authorization.k8s.io,clusterroles.rbac.authorization.k8s.io",
    ])
    .await;
    env.ok(&[
        "-n",
        "team",
        "create",
        "rolebinding",
        "dev-escalates",
        "--role=escalator",
        "--user=dev",
    ])
    .await;
    env.ok(&too_much).await;
    env.ok(&[
        "-n",
        "team",
        "create",
        "rolebinding",
        "dev-root",
        "--clusterrole=cluster-admin",
        "--user=dev",
        "--as",
        "dev",
    ])
    .await;

    // validation, in kube-apiserver's words
    let empty = env.file(
        "empty-verbs.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: empty\n  namespace: team\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: []\n",
    );
    let err = env.fails(&["create", "-f", &empty]).await;
    assert!(
        err.contains("rules[0].verbs: Required value: verbs must contain at least one value"),
        "{err}"
    );
    let err = env
        .fails(&[
            "-n",
            "team",
            "patch",
            "rolebinding",
            "eve-reads",
            "--type=merge",
            "-p",
            r#"{"roleRef":{"name":"too-much"}}"#,
        ])
        .await;
    assert!(err.contains("roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"too-much\"}: cannot change roleRef"), "{err}");
    let bad_subject = env.file(
        "bad-subject.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: bad\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: x\nsubjects:\n- kind: Robot\n  name: r2\n",
    );
    let err = env.fails(&["create", "-f", &bad_subject]).await;
    assert!(
        err.contains(r#"roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#)
            && err.contains(r#"subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#),
        "{err}"
    );
}
