//! `causeway webhook`: Causeway's validating admission webhooks.
//!
//! - Deletion protection (federation.md §8 G.50), `POST /validate-deletion`: denies the
//!   DELETE of any object labelled `causeway.io/deletion-protected: Always` and allows
//!   everything else. Its ValidatingWebhookConfiguration (deploy/webhook) sends it only
//!   DELETEs of labelled objects; the check here does not rely on that.
//! - Who may write the MCS API (API-9, API-10), `POST /validate-mcs`: [`mcs`].
//! - Invalid federation policies, refused at admission, `POST /validate-policies`:
//!   [`policies`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use causeway_crds::well_known::labels::{DELETION_PROTECTED, DELETION_PROTECTED_ALWAYS};
use http::{Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub mod mcs;
pub mod policies;

/// The path kube-apiserver POSTs deletion AdmissionReviews to.
pub const PATH: &str = "/validate-deletion";

/// AdmissionReviews larger than this are refused (kube-apiserver sends at most ~3 MiB
/// objects, twice for an update).
const MAX_BODY: usize = 8 << 20;

/// `causeway webhook` flags.
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub addr: SocketAddr,
    /// Serving certificate (PEM, leaf first); the ValidatingWebhookConfiguration's
    /// caBundle must trust it. Read again when it changes (a renewed certificate is
    /// served without a restart).
    #[arg(long)]
    pub cert: PathBuf,
    /// Private key of the serving certificate (PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// Address for /metrics, /healthz and /readyz (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:8481")]
    pub metrics: SocketAddr,
    #[command(flatten)]
    pub mcs: mcs::McsPolicy,
    #[command(flatten)]
    pub log: causeway_runtime::log::LogArgs,
}

/// The webhook's metrics: `causeway_webhook_reviews_total{webhook="deletion|mcs|policies",
/// decision="allowed|denied|bad_request"}`.
#[derive(Default)]
pub struct Metrics {
    registry: prometheus_client::registry::Registry,
    reviews: prometheus_client::metrics::family::Family<
        Vec<(&'static str, &'static str)>,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl Metrics {
    /// The registered metrics.
    pub fn new() -> Arc<Metrics> {
        let mut m = Metrics::default();
        m.registry.register(
            "causeway_webhook_reviews",
            "AdmissionReviews answered, by decision",
            m.reviews.clone(),
        );
        Arc::new(m)
    }

    fn count(&self, webhook: &'static str, decision: &'static str) {
        self.reviews
            .get_or_create(&vec![("webhook", webhook), ("decision", decision)])
            .inc();
    }

    /// What the admin listener serves: the metrics, always ready once serving.
    pub fn endpoints(self: &Arc<Self>) -> causeway_runtime::admin::Endpoints {
        let m = self.clone();
        causeway_runtime::admin::Endpoints {
            metrics: Arc::new(move || {
                let mut s = String::new();
                let _ = prometheus_client::encoding::text::encode(&mut s, &m.registry);
                s
            }),
            ready: causeway_runtime::admin::ready_when(|| true, ""),
        }
    }
}

/// Runs the webhook until Ctrl-C or SIGTERM.
pub async fn run(args: WebhookArgs) -> anyhow::Result<()> {
    let (listener, tls) = listen(args.addr, &args.cert, &args.key).await?;
    tracing::info!(addr = %listener.local_addr()?, deletion = PATH, mcs = mcs::PATH, policies = policies::PATH, "serving the admission webhooks");
    let stop = CancellationToken::new();
    causeway_runtime::signal::cancel_on_signal(stop.clone());
    let metrics = Metrics::new();
    let admin = causeway_runtime::admin::bind(args.metrics, "--metrics").await?;
    tracing::info!(addr = %admin.local_addr()?, "serving /metrics, /healthz, /livez, /readyz");
    causeway_runtime::admin::serve(admin, metrics.endpoints(), stop.clone());
    serve(listener, tls, metrics, Arc::new(args.mcs), stop).await;
    Ok(())
}

/// Reads the serving certificate and key files (`--cert`, `--key`; read again when
/// they change) and binds `addr` (`--addr`), for [`serve`].
pub async fn listen(
    addr: SocketAddr,
    cert: &Path,
    key: &Path,
) -> anyhow::Result<(TcpListener, rustls::ServerConfig)> {
    // read again when the files change: a certificate renewed in place is served
    // without a restart
    let tls = causeway_runtime::https::reloading_server_config(cert, key, ("--cert", "--key"))?;
    let listener = causeway_runtime::admin::bind(addr, "--addr").await?;
    Ok((listener, tls))
}

/// A TLS server config from a PEM certificate chain and key (`--cert`, `--key`).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> anyhow::Result<rustls::ServerConfig> {
    causeway_runtime::https::server_config(cert_pem, key_pem, "--cert", "--key")
}

/// Serves the webhooks on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    metrics: Arc<Metrics>,
    policy: Arc<mcs::McsPolicy>,
    stop: CancellationToken,
) {
    causeway_runtime::https::serve(listener, tls, "webhook", stop, move |req, _| {
        let (metrics, policy) = (metrics.clone(), policy.clone());
        async move { handle(req, &metrics, &policy).await }
    })
    .await
}

async fn handle(
    req: http::Request<hyper::body::Incoming>,
    metrics: &Metrics,
    policy: &mcs::McsPolicy,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if req.method() != Method::POST || ![PATH, mcs::PATH, policies::PATH].contains(&path) {
        return reply(
            StatusCode::NOT_FOUND,
            format!(
                "not found: POST AdmissionReviews to {PATH} (deletion protection), {} (the MCS API's writers) or {} (the federation policies)",
                mcs::PATH,
                policies::PATH
            ),
        );
    }
    let webhook = match path {
        mcs::PATH => "mcs",
        policies::PATH => "policies",
        _ => "deletion",
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                format!("reading the body failed: {e}"),
            );
        }
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(review) if review.pointer("/request/uid").is_some() => {
            let answer = match webhook {
                "mcs" => mcs::review_response(&review, policy),
                "policies" => policies::review_response(&review),
                _ => review_response(&review),
            };
            let allowed = answer.pointer("/response/allowed") == Some(&Value::Bool(true));
            metrics.count(webhook, if allowed { "allowed" } else { "denied" });
            let mut r = reply(StatusCode::OK, answer.to_string());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            r
        }
        _ => {
            metrics.count(webhook, "bad_request");
            reply(
                StatusCode::BAD_REQUEST,
                "the body must be an admission.k8s.io/v1 AdmissionReview with a request".into(),
            )
        }
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

/// The AdmissionReview answering `review`: a DELETE of a protected object is denied
/// (403, with how to delete it), anything else allowed.
pub fn review_response(review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let protected = req["oldObject"]["metadata"]["labels"][DELETION_PROTECTED]
        .as_str()
        .is_some_and(|v| v == DELETION_PROTECTED_ALWAYS);
    let response = if req["operation"] == "DELETE" && protected {
        let kind = req["kind"]["kind"].as_str().unwrap_or("object");
        let resource = req["resource"]["resource"].as_str().unwrap_or("");
        let group = req["resource"]["group"].as_str().unwrap_or("");
        let name = req["name"].as_str().unwrap_or("");
        let ns = req["namespace"].as_str().unwrap_or("");
        let target = match group {
            "" => format!("{resource}/{name}"),
            g => format!("{resource}.{g}/{name}"),
        };
        let ns_flag = match ns {
            "" => String::new(),
            n => format!(" -n {n}"),
        };
        json!({
            "uid": uid,
            "allowed": false,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": format!(
                    "{kind} {target} is deletion-protected ({DELETION_PROTECTED}={DELETION_PROTECTED_ALWAYS}): \
                     remove the label first to delete it: kubectl label {target}{ns_flag} {DELETION_PROTECTED}-"
                ),
            },
        })
    } else {
        json!({"uid": uid, "allowed": true})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(op: &str, old_labels: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u-1", "operation": op, "name": "web", "namespace": "shop",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "oldObject": {"metadata": {"name": "web", "labels": old_labels}},
        }})
    }

    #[test]
    fn only_the_delete_of_a_protected_object_is_denied() {
        let cases = [
            ("DELETE", json!({DELETION_PROTECTED: "Always"}), false),
            ("DELETE", json!({DELETION_PROTECTED: "Never"}), true),
            ("DELETE", json!({DELETION_PROTECTED: "always"}), true),
            ("DELETE", json!({}), true),
            ("DELETE", Value::Null, true),
            ("UPDATE", json!({DELETION_PROTECTED: "Always"}), true),
            ("CREATE", json!({DELETION_PROTECTED: "Always"}), true),
        ];
        for (op, labels, allowed) in cases {
            let r = review_response(&review(op, labels.clone()));
            assert_eq!(r["response"]["uid"], "u-1");
            assert_eq!(r["response"]["allowed"], allowed, "{op} {labels}");
        }
    }

    #[test]
    fn a_denial_says_how_to_delete_the_object() {
        let r = review_response(&review("DELETE", json!({DELETION_PROTECTED: "Always"})));
        assert_eq!(r["response"]["status"]["code"], 403);
        assert_eq!(
            r["response"]["status"]["message"],
            "Deployment deployments.apps/web is deletion-protected (causeway.io/deletion-protected=Always): \
             remove the label first to delete it: kubectl label deployments.apps/web -n shop causeway.io/deletion-protected-"
        );
    }

    #[test]
    fn bad_certificates_and_keys_are_clear_errors() {
        let c = rcgen_pair();
        assert!(server_config(c.0.as_bytes(), c.1.as_bytes()).is_ok());
        let e = server_config(b"junk", c.1.as_bytes()).unwrap_err();
        assert!(
            format!("{e:#}").contains("--cert holds no PEM certificate"),
            "{e:#}"
        );
        let e = server_config(c.0.as_bytes(), b"junk").unwrap_err();
        assert!(
            format!("{e:#}").contains("--key is not a PEM private key"),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn a_missing_certificate_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("tls.crt");
        let e = listen("127.0.0.1:0".parse().unwrap(), &cert, &cert)
            .await
            .unwrap_err();
        let want = format!("reading the --cert file {}", cert.display());
        assert!(format!("{e:#}").starts_with(&want), "{e:#}");
    }

    fn rcgen_pair() -> (String, String) {
        let pki = kubesim::http::tls::Pki::generate("t", &["127.0.0.1".into()]).unwrap();
        let c = pki
            .issue_client(&kubesim::User {
                name: "x".into(),
                groups: vec![],
                ..Default::default()
            })
            .unwrap();
        (c.cert_pem, c.key_pem)
    }
}
