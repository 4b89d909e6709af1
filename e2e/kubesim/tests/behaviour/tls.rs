//! TLS: the server's own CA, and client-certificate authentication.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;

use crate::helpers::*;

async fn list_with(yaml: &str) -> Result<usize, kube::Error> {
    let client = try_client_from_yaml(yaml)
        .await
        .expect("a valid kubeconfig");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.list(&ListParams::default()).await.map(|l| {
        own(l
            .items
            .into_iter()
            .map(|c| c.metadata.name.unwrap_or_default()))
        .len()
    })
}

#[tokio::test]
async fn clients_must_trust_the_servers_own_ca() {
    let a = start().await;
    let b = start_with(kubesim::Config::new("other")).await;
    assert_ne!(
        a.server.ca_pem(),
        b.server.ca_pem(),
        "each server has its own CA"
    );
    let token = a.server.admin_token();

    let right = kubeconfig(
        &a.server.url(),
        a.server.ca_pem().unwrap(),
        Creds {
            token: Some(token),
            ..Default::default()
        },
    );
    assert_eq!(list_with(&right).await.unwrap(), 0);

    let wrong = kubeconfig(
        &a.server.url(),
        b.server.ca_pem().unwrap(),
        Creds {
            token: Some(token),
            ..Default::default()
        },
    );
    let e = list_with(&wrong).await.unwrap_err();
    assert!(
        !matches!(e, kube::Error::Api(_)),
        "the TLS handshake must fail before any API answer: {e:?}"
    );
    // the server's certificate names the loopback address and the in-cluster name
    let url = a.server.url().replace("127.0.0.1", "localhost");
    let by_name = kubeconfig(
        &url,
        a.server.ca_pem().unwrap(),
        Creds {
            token: Some(token),
            ..Default::default()
        },
    );
    assert_eq!(list_with(&by_name).await.unwrap(), 0);
}

#[tokio::test]
async fn client_certificates_authenticate_their_user() {
    let env = start().await;
    let ca = env.server.ca_pem().unwrap();
    let admin = env
        .server
        .issue_client_cert(&kubesim::User::admin("cert-admin"))
        .unwrap();
    let yaml = kubeconfig(
        &env.server.url(),
        ca,
        Creds {
            cert_pem: Some(&admin.cert_pem),
            key_pem: Some(&admin.key_pem),
            ..Default::default()
        },
    );
    assert_eq!(
        list_with(&yaml).await.unwrap(),
        0,
        "a system:masters certificate is admin"
    );

    let carol = kubesim::User {
        name: "carol".into(),
        groups: vec!["system:authenticated".into()],
        ..Default::default()
    };
    let cc = env.server.issue_client_cert(&carol).unwrap();
    let yaml = kubeconfig(
        &env.server.url(),
        ca,
        Creds {
            cert_pem: Some(&cc.cert_pem),
            key_pem: Some(&cc.key_pem),
            ..Default::default()
        },
    );
    match list_with(&yaml).await.unwrap_err() {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains("User \"carol\""),
                "the certificate names the user: {}",
                s.message
            );
        }
        other => panic!("expected 403 for carol, got {other:?}"),
    }

    // a certificate from another server's CA is not accepted
    let other = start_with(kubesim::Config::new("other")).await;
    let foreign = other
        .server
        .issue_client_cert(&kubesim::User::admin("intruder"))
        .unwrap();
    let yaml = kubeconfig(
        &env.server.url(),
        ca,
        Creds {
            cert_pem: Some(&foreign.cert_pem),
            key_pem: Some(&foreign.key_pem),
            ..Default::default()
        },
    );
    match list_with(&yaml).await {
        Ok(n) => panic!("a foreign certificate was accepted ({n} items)"),
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401, "{s:?}"),
        Err(_) => {} // refused in the handshake, as kube-apiserver does
    }
}
