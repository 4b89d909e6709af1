//! Deletion protection (issue 14, federation.md §8 G.50): with `causeway webhook`
//! serving HTTPS on 127.0.0.1 and deploy/webhook's ValidatingWebhookConfiguration on
//! the hub (pointed at it by URL), `kubectl delete` of a resource template labelled
//! `causeway.io/deletion-protected: Always` fails with how to delete it; once the
//! label is removed, the delete goes through.

use causeway_controllers::webhook;

use crate::support::{Env, Webhook, install_webhook};

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

#[tokio::test]
async fn a_protected_template_cannot_be_deleted_until_its_label_is_removed() {
    let env = Env::start().await;
    let hook = Webhook::start().await.unwrap();
    install_webhook(
        &env,
        &hook,
        causeway_e2e::webhook::DELETION_PROTECTION,
        webhook::PATH,
    )
    .await;
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
    let counted = hook.counted();
    assert!(
        counted
            .contains("causeway_webhook_reviews_total{webhook=\"deletion\",decision=\"denied\"} 1"),
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

    hook.stop().await;
}
