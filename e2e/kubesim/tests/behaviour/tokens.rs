//! TokenRequest (`POST .../serviceaccounts/{name}/token`): the token authenticates as the
//! ServiceAccount, RBAC applies to it, and it stops working when it expires, when the
//! ServiceAccount is deleted, or when it was issued for another audience.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::helpers::*;

async fn service_account(client: &Client, ns: &str, name: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &sa).await.unwrap();
}

/// Lets `subject` get and list ConfigMaps in `ns`.
async fn grant_configmap_reads(client: &Client, ns: &str, subject: serde_json::Value) {
    let pp = PostParams::default();
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "cm-reader"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})).unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&pp, &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "cm-reader"}, "subjects": [subject], "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"}})).unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&pp, &rb)
        .await
        .unwrap();
}

async fn request_token(
    client: &Client,
    ns: &str,
    sa: &str,
    spec: serde_json::Value,
) -> Result<TokenRequest, kube::Error> {
    let tr: TokenRequest = serde_json::from_value(json!({"spec": spec})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &tr)
        .await
}

async fn token_client(env: &Env, token: &str) -> Client {
    client_from_yaml(&kubeconfig(
        &env.server.url(),
        env.server.ca_pem().unwrap(),
        Creds {
            token: Some(token),
            ..Default::default()
        },
    ))
    .await
}

fn token_of(tr: &TokenRequest) -> String {
    tr.status.as_ref().expect("status").token.clone()
}

#[tokio::test]
async fn a_requested_token_is_the_service_account_under_rbac() {
    let env = start().await;
    service_account(&env.client, "default", "reader").await;
    grant_configmap_reads(
        &env.client,
        "default",
        json!({"kind": "ServiceAccount", "name": "reader", "namespace": "default"}),
    )
    .await;
    let tr = request_token(
        &env.client,
        "default",
        "reader",
        json!({"expirationSeconds": 600}),
    )
    .await
    .unwrap();
    let status = tr.status.clone().unwrap();
    assert!(!status.token.is_empty());
    let left = status.expiration_timestamp.0.as_second() - jiff::Timestamp::now().as_second();
    assert!((590..=610).contains(&left), "expires in {left}s");
    assert_eq!(tr.spec.expiration_seconds, Some(600));
    assert_eq!(
        tr.spec.audiences,
        vec!["https://kubernetes.default.svc.cluster.local".to_string()]
    );

    let sa = token_client(&env, &status.token).await;
    Api::<ConfigMap>::namespaced(sa.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("the Role lets the ServiceAccount list ConfigMaps");
    let e = Api::<Secret>::namespaced(sa.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 403);
    assert!(
        s.message.contains(
            "User \"system:serviceaccount:default:reader\" cannot list resource \"secrets\""
        ),
        "{}",
        s.message
    );
    // The token carries the ServiceAccount groups.
    grant_configmap_reads(
        &env.client,
        "kube-system",
        json!({"kind": "Group", "name": "system:serviceaccounts:default"}),
    )
    .await;
    Api::<ConfigMap>::namespaced(sa.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .expect("bound through group system:serviceaccounts:default");
    // A ServiceAccount may not mint tokens unless RBAC says so.
    let e = request_token(&sa, "default", "reader", json!({}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 403);
}

#[tokio::test]
async fn tokens_stop_working_when_expired_or_when_the_service_account_is_gone() {
    let env = start().await;
    service_account(&env.client, "default", "short").await;
    grant_configmap_reads(
        &env.client,
        "default",
        json!({"kind": "ServiceAccount", "name": "short", "namespace": "default"}),
    )
    .await;
    let tr = request_token(&env.client, "default", "short", json!({}))
        .await
        .unwrap();
    assert_eq!(
        tr.spec.expiration_seconds,
        Some(3600),
        "the default is an hour"
    );
    let sa = token_client(&env, &token_of(&tr)).await;
    let cms: Api<ConfigMap> = Api::namespaced(sa, "default");
    cms.list(&ListParams::default()).await.unwrap();
    env.server
        .faults()
        .set_clock_ahead(Duration::from_secs(3601));
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(
        (code(&e), reason(&e).as_str()),
        (401, "Unauthorized"),
        "expired"
    );
    env.server.faults().set_clock_ahead(Duration::ZERO);
    cms.list(&ListParams::default()).await.unwrap();

    // Deleting the ServiceAccount revokes its tokens; a new one of the same name does not
    // bring them back (the token names the uid).
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), "default");
    sas.delete("short", &Default::default()).await.unwrap();
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(code(&e), 401, "ServiceAccount deleted");
    service_account(&env.client, "default", "short").await;
    let e = cms.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(code(&e), 401, "same name, another ServiceAccount");
    // A token for another audience is not for the API server.
    let other = request_token(
        &env.client,
        "default",
        "short",
        json!({"audiences": ["vault"]}),
    )
    .await
    .unwrap();
    let c = token_client(&env, &token_of(&other)).await;
    let e = Api::<ConfigMap>::namespaced(c, "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), 401, "audience vault");
    // A forged token is refused.
    let mut forged = token_of(&tr);
    forged.pop();
    forged.push('A');
    let c = token_client(&env, &forged).await;
    let e = Api::<ConfigMap>::namespaced(c, "default")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), 401, "bad signature");
}

#[tokio::test]
async fn token_requests_for_missing_service_accounts_or_bad_durations_are_refused() {
    let env = start().await;
    let e = request_token(&env.client, "default", "nobody", json!({}))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "serviceaccounts \"nobody\" not found")
    );
    service_account(&env.client, "default", "sa").await;
    let e = request_token(
        &env.client,
        "default",
        "sa",
        json!({"expirationSeconds": 599}),
    )
    .await
    .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 422);
    assert!(
        s.message.contains(
            "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        ),
        "{}",
        s.message
    );
    // Only POST is served on the token subresource.
    let r = raw(
        &env.client,
        "GET",
        "/api/v1/namespaces/default/serviceaccounts/sa/token",
        None,
        vec![],
    )
    .await;
    assert_eq!(r.code, 405, "{:?}", r.body);
    // A body of another kind is a 400, not a token.
    let r = raw(
        &env.client,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/sa/token",
        Some("application/json"),
        br#"{"apiVersion": "v1", "kind": "ConfigMap"}"#.to_vec(),
    )
    .await;
    assert_eq!(r.code, 400, "{:?}", r.body);
}
