//! Plumbing for tests that run against kubesim: an HTTPS validating admission webhook
//! on 127.0.0.1 whose answers (and how long each takes) the test decides, and the
//! ValidatingWebhookConfiguration that sends a cluster's requests to it.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

/// How a [`Webhook`] answers a review's `request`: after how long, with which
/// `response` (its `uid` is filled in).
pub type Answer = Arc<dyn Fn(&Value) -> (Duration, Value) + Send + Sync>;

/// A running webhook; it records every AdmissionReview it gets.
pub struct Webhook {
    /// `https://127.0.0.1:<port>/validate`.
    pub url: String,
    /// The CA that signed its certificate (PEM).
    pub ca_pem: String,
    /// The reviews received, in order.
    pub seen: Arc<parking_lot::Mutex<Vec<Value>>>,
}

impl Webhook {
    /// Starts a webhook on a free port of 127.0.0.1 answering with `answer`.
    pub async fn start(answer: Answer) -> anyhow::Result<Webhook> {
        let pki = crate::http::tls::Pki::generate("webhook", &["127.0.0.1".into()])?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()?));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let (answer, record) = (answer.clone(), record.clone());
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (answer, record) = (answer.clone(), record.clone());
                    async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let review: Value = serde_json::from_slice(&body).unwrap_or_default();
                        record.lock().push(review.clone());
                        let (delay, mut response) = answer(&review["request"]);
                        tokio::time::sleep(delay).await;
                        response["uid"] = review["request"]["uid"].clone();
                        let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
                        Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from(
                            out.to_string(),
                        ))))
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Ok(Webhook {
            url: format!("https://{addr}/validate"),
            ca_pem: pki.ca_pem.clone(),
            seen,
        })
    }

    /// The ValidatingWebhookConfiguration `check` with one webhook sent here: see
    /// [`configuration`].
    pub fn configuration(&self, extra: Value) -> Value {
        configuration(&self.ca_pem, &self.url, extra)
    }
}

/// The ValidatingWebhookConfiguration `check` with one webhook `check.example.com` sent
/// to `url` (trusting `ca_pem`): CREATE, UPDATE and DELETE of ConfigMaps, policy Fail,
/// unless a field of `extra` (`rules`, `failurePolicy`, `objectSelector`…) says
/// otherwise.
pub fn configuration(ca_pem: &str, url: &str, extra: Value) -> Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut hook = json!({
        "name": "check.example.com",
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE", "UPDATE", "DELETE"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(hook), Some(extra)) = (hook.as_object_mut(), extra.as_object()) {
        hook.extend(extra.clone());
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "check"},
        "webhooks": [hook],
    })
}
