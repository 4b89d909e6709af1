//! TokenReview, SubjectAccessReview and SelfSubjectAccessReview, through kube-rs and kubectl.

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::helpers::*;

fn alice() -> kubesim::http::auth::User {
    kubesim::http::auth::User {
        name: "alice".into(),
        groups: vec!["devs".into(), "system:authenticated".into()],
        ..Default::default()
    }
}

async fn review_token(client: &kube::Client, token: &str) -> serde_json::Value {
    let tr: TokenReview = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    let out = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &tr)
        .await
        .unwrap();
    serde_json::to_value(out.status.unwrap()).unwrap()
}

#[tokio::test]
async fn token_review_authenticates_known_tokens_and_rejects_revoked_ones() {
    let env = start().await;
    env.server.add_token("alice-token", alice());
    let st = review_token(&env.client, "alice-token").await;
    assert_eq!(st["authenticated"], true, "{st}");
    assert_eq!(st["user"]["username"], "alice");
    assert_eq!(
        st["user"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    for (what, token) in [("unknown", "nope"), ("revoked", "alice-token")] {
        env.server.revoke_token("alice-token");
        let st = review_token(&env.client, token).await;
        assert_eq!(st["authenticated"], false, "{what}: {st}");
        assert!(
            st["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}: {st}"
        );
    }
    // a user without `create tokenreviews` may not ask
    env.server.add_token(
        "bob-token",
        kubesim::http::auth::User {
            name: "bob".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let bob = client_with(&env, token_creds("bob-token")).await;
    let tr: TokenReview = serde_json::from_value(json!({"spec": {"token": "x"}})).unwrap();
    let e = Api::<TokenReview>::all(bob)
        .create(&PostParams::default(), &tr)
        .await
        .unwrap_err();
    assert_eq!(code(&e), 403);
    // served in discovery, create-only
    let r = raw(
        &env.client,
        "GET",
        "/apis/authentication.k8s.io/v1",
        None,
        vec![],
    )
    .await;
    let res = &r.body["resources"];
    let tr = res
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "tokenreviews");
    assert_eq!(
        tr.map(|x| x["verbs"].clone()),
        Some(json!(["create"])),
        "{res}"
    );
}

async fn grant_view(env: &Env) {
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "cm-view"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(env.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let b: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "devs-view"},
        "subjects": [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "cm-view", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

#[tokio::test]
async fn subject_access_review_answers_with_the_rbac_that_requests_go_through() {
    let env = start().await;
    grant_view(&env).await;
    let api = Api::<SubjectAccessReview>::all(env.client.clone());
    let ask = |user: &str, groups: &[&str], verb: &str| {
        serde_json::from_value::<SubjectAccessReview>(json!({"spec": {
            "user": user, "groups": groups,
            "resourceAttributes": {"namespace": "default", "verb": verb, "resource": "configmaps"},
        }}))
        .unwrap()
    };
    let st = api
        .create(&PostParams::default(), &ask("alice", &["devs"], "list"))
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(st.allowed);
    assert_eq!(st.denied, Some(false));
    assert_eq!(
        st.reason.as_deref(),
        Some(
            r#"RBAC: allowed by ClusterRoleBinding "devs-view" of ClusterRole "cm-view" to Group "devs""#
        )
    );
    for (user, groups, verb) in [
        ("alice", &["devs"][..], "delete"),
        ("carol", &[][..], "list"),
    ] {
        let st = api
            .create(&PostParams::default(), &ask(user, groups, verb))
            .await
            .unwrap()
            .status
            .unwrap();
        assert!(!st.allowed, "{user} {verb}");
    }
    // non-resource URLs: only nonResourceURLs rules grant them
    for (groups, want) in [(vec!["devs"], false), (vec!["system:masters"], true)] {
        let sar: SubjectAccessReview = serde_json::from_value(json!({"spec": {
            "user": "alice", "groups": groups,
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        }}))
        .unwrap();
        let st = api
            .create(&PostParams::default(), &sar)
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.allowed, want, "{groups:?}");
    }
    let e = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"spec": {"user": "a"}})).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400);
}

#[tokio::test]
async fn self_subject_access_review_and_kubectl_auth_can_i() {
    let env = start().await;
    grant_view(&env).await;
    env.server.add_token("alice-token", alice());
    let c = client_with(&env, token_creds("alice-token")).await;
    let ssar: SelfSubjectAccessReview = serde_json::from_value(json!({"spec": {
        "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "configmaps"},
    }}))
    .unwrap();
    let st = Api::<SelfSubjectAccessReview>::all(c)
        .create(&PostParams::default(), &ssar)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(st.allowed);
    // real kubectl, as alice
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let creds = token_creds("alice-token");
    std::fs::write(
        &kc,
        kubeconfig(&env.server.url(), env.server.ca_pem().unwrap(), creds),
    )
    .unwrap();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    for (verb, want) in [("list", "yes"), ("delete", "no")] {
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["auth", "can-i", verb, "configmaps", "-n", "default"])
            .output();
        let out = within("kubectl auth can-i", out)
            .await
            .unwrap_or_else(|e| panic!("run {kubectl} (install kubectl or set KUBECTL): {e}"));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn the_bootstrap_auth_delegator_role_lets_a_delegated_server_ask_reviews() {
    // as kube-apiserver's bootstrap policy: system:auth-delegator grants exactly the two
    // reviews an aggregated API server or webhook needs
    let env = start().await;
    env.server.add_token(
        "search-token",
        kubesim::http::auth::User {
            name: "system:serviceaccount:causeway-system:causeway-search".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    env.server.add_token("alice-token", alice());
    let search = client_with(&env, token_creds("search-token")).await;
    let tr: TokenReview =
        serde_json::from_value(json!({"spec": {"token": "alice-token"}})).unwrap();
    let e = Api::<TokenReview>::all(search.clone())
        .create(&PostParams::default(), &tr)
        .await
        .unwrap_err();
    assert_eq!(code(&e), 403, "not bound yet");
    let b: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "search-auth-delegator"},
        "subjects": [{"kind": "ServiceAccount", "name": "causeway-search", "namespace": "causeway-system"}],
        "roleRef": {"kind": "ClusterRole", "name": "system:auth-delegator", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
    let st = Api::<TokenReview>::all(search.clone())
        .create(&PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(st.authenticated == Some(true), "{st:?}");
    let sar: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": "alice", "groups": ["devs"],
        "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"},
    }}))
    .unwrap();
    let st = Api::<SubjectAccessReview>::all(search)
        .create(&PostParams::default(), &sar)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!st.allowed, "alice may not list pods");
}
