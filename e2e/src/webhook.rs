//! `causeway webhook` serving HTTPS on 127.0.0.1 with a certificate of its own CA, and
//! deploy/webhook's ValidatingWebhookConfigurations pointed at it by URL (kubesim runs no
//! Services): what causeway-local runs on its hub, and what the tests use.

use std::sync::Arc;

use anyhow::Context;
use causeway_controllers::webhook;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// deploy/webhook/validatingwebhookconfiguration.yaml: deletion protection.
pub const DELETION_PROTECTION: &str =
    include_str!("../../deploy/webhook/validatingwebhookconfiguration.yaml");
/// deploy/webhook/policies-admission.yaml: invalid federation policies.
pub const POLICIES: &str = include_str!("../../deploy/webhook/policies-admission.yaml");
/// deploy/webhook/mcs-admission.yaml: who may write the MCS API.
pub const MCS: &str = include_str!("../../deploy/webhook/mcs-admission.yaml");

/// A running `causeway webhook`.
pub struct Webhook {
    /// `https://127.0.0.1:<port>`.
    pub base: String,
    /// The CA that signed its certificate (PEM).
    pub ca_pem: String,
    /// Its review counters.
    pub metrics: Arc<webhook::Metrics>,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl Webhook {
    /// Starts the webhook on a free port of 127.0.0.1, with the default MCS policy.
    pub async fn start() -> anyhow::Result<Webhook> {
        let pki = kubesim::http::tls::Pki::generate("webhook", &["127.0.0.1".into()])
            .context("making the webhook's certificate")?;
        let tls = webhook::server_config(
            pki.server_cert_pem.as_bytes(),
            pki.server_key_pem.as_bytes(),
        )?;
        let listener = causeway_runtime::admin::bind("127.0.0.1:0".parse()?, "the webhook").await?;
        let base = format!("https://{}", listener.local_addr()?);
        let stop = CancellationToken::new();
        let metrics = webhook::Metrics::new();
        let server = tokio::spawn(webhook::serve(
            listener,
            tls,
            metrics.clone(),
            Default::default(),
            stop.clone(),
        ));
        Ok(Webhook {
            base,
            ca_pem: pki.ca_pem.clone(),
            metrics,
            stop,
            server,
        })
    }

    /// The ValidatingWebhookConfiguration `manifest` (one of this module's constants, or
    /// any such YAML) with every webhook sent to `path` here, trusting this CA, instead
    /// of the in-cluster Service.
    pub fn configuration(&self, manifest: &str, path: &str) -> anyhow::Result<Value> {
        let mut cfg: Value =
            serde_saphyr::from_str(manifest).context("the webhook configuration parses")?;
        let ca = serde_json::to_value(k8s_openapi::ByteString(self.ca_pem.as_bytes().to_vec()))?;
        let hooks = cfg["webhooks"]
            .as_array_mut()
            .context("the configuration has no webhooks")?;
        for hook in hooks {
            hook["clientConfig"] = json!({"url": format!("{}{path}", self.base), "caBundle": ca});
        }
        Ok(cfg)
    }

    /// Applies [`Webhook::configuration`] to the cluster of `client` (server-side apply).
    pub async fn install(
        &self,
        client: &kube::Client,
        manifest: &str,
        path: &str,
    ) -> anyhow::Result<()> {
        let cfg = self.configuration(manifest, path)?;
        let name = cfg["metadata"]["name"]
            .as_str()
            .context("the configuration has no name")?
            .to_string();
        let gvk = GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        );
        let api: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "validatingwebhookconfigurations"),
        );
        api.patch(
            &name,
            &PatchParams::apply("causeway-local").force(),
            &Patch::Apply(&cfg),
        )
        .await
        .with_context(|| format!("applying the webhook configuration {name}"))?;
        Ok(())
    }

    /// `causeway_webhook_reviews_total` as `/metrics` shows it.
    pub fn counted(&self) -> String {
        (self.metrics.endpoints().metrics)()
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.server.await;
    }
}
