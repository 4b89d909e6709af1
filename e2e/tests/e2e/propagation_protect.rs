//! Deletion protection (issue 14, federation.md §8 G.50): with `causeway webhook`
//! serving HTTPS on 127.0.0.1 and deploy/webhook's ValidatingWebhookConfiguration on
//! the hub (pointed at it by URL), `kubectl delete` of a resource template labelled
//! `causeway.io/deletion-protected: Always` fails with how to delete it; once the
//! label is removed, the delete goes through.

use causeway_controllers::webhook;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{Env, repo};

const APP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels:
    app: web
    causeway.io/deletion-protected: Always
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - {name: web, image: nginx:1.27}
"#;

/// deploy/webhook's configuration, sent to `url` and trusting `ca_pem` instead of the
/// in-cluster Service (kubesim runs no Services).
fn configuration(url: &str, ca_pem: &str) -> Value {
    let path = repo().join("deploy/webhook/validatingwebhookconfiguration.yaml");
    let text = std::fs::read_to_string(&path).expect("the deploy manifest");
    let mut cfg: Value = serde_saphyr::from_str(&text).expect("the deploy manifest parses");
    let ca =
        serde_json::to_value(k8s_openapi::ByteString(ca_pem.as_bytes().to_vec())).expect("base64");
    cfg["webhooks"][0]["clientConfig"] = json!({"url": url, "caBundle": ca});
    cfg
}

#[tokio::test]
async fn a_protected_template_cannot_be_deleted_until_its_label_is_removed() {
    let env = Env::start().await;
    let pki = kubesim::http::tls::Pki::generate("webhook", &["127.0.0.1".into()]).unwrap();
    let cert = env.file("tls.crt", &pki.server_cert_pem);
    let key = env.file("tls.key", &pki.server_key_pem);
    let (listener, tls) =
        webhook::listen("127.0.0.1:0".parse().unwrap(), cert.as_ref(), key.as_ref())
            .await
            .unwrap();
    let url = format!(
        "https://{}{}",
        listener.local_addr().unwrap(),
        webhook::PATH
    );
    let stop = CancellationToken::new();
    let metrics = webhook::Metrics::new();
    let server = tokio::spawn(webhook::serve(listener, tls, metrics.clone(), stop.clone()));

    let cfg = env.file(
        "webhook.json",
        &configuration(&url, &pki.ca_pem).to_string(),
    );
    env.ok(&["apply", "-f", &cfg]).await;
    let app = env.file("app.yaml", APP);
    env.ok(&["apply", "-f", &app]).await;

    let err = env.fails(&["delete", "deployment", "web"]).await;
    assert!(
        err.contains(
            "admission webhook \"deletion-protection.causeway.io\" denied the request: \
             Deployment deployments.apps/web is deletion-protected (causeway.io/deletion-protected=Always): \
             remove the label first to delete it: kubectl label deployments.apps/web -n default causeway.io/deletion-protected-"
        ),
        "{err}"
    );
    env.ok(&["get", "deployment", "web"]).await;
    let counted = (metrics.endpoints().metrics)();
    assert!(
        counted.contains("causeway_webhook_reviews_total{decision=\"denied\"} 1"),
        "{counted}"
    );

    // other objects are not protected
    env.ok(&["create", "configmap", "plain"]).await;
    env.ok(&["delete", "configmap", "plain"]).await;

    env.ok(&[
        "label",
        "deployments.apps/web",
        "-n",
        "default",
        "causeway.io/deletion-protected-",
    ])
    .await;
    env.ok(&["delete", "deployment", "web"]).await;
    let left = env
        .run(
            "hub",
            &[
                "get",
                "deployment",
                "web",
                "--ignore-not-found",
                "-o",
                "name",
            ],
        )
        .await;
    assert!(left.status.success());
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "", "deleted");

    stop.cancel();
    server.await.unwrap();
}
