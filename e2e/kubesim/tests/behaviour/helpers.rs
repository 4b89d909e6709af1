//! Shared test plumbing: one kubesim server per test, kube clients for it, raw
//! requests, polling with a deadline, and a small CustomResourceDefinition.

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Upper bound for anything a test waits for.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A running server and an admin client for it. Shuts the server down on drop.
pub struct Env {
    pub server: kubesim::Server,
    pub client: Client,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

/// Starts a server with the default test config.
pub async fn start() -> Env {
    start_with(kubesim::Config::new("t")).await
}

/// Starts a server with `cfg`.
/// Starts a server with `cfg`, once kube-controller-manager's per-namespace objects
/// are in `default` (as a real cluster's test harness waits for them): a test that
/// watches or counts a namespace's objects then sees only its own writes.
pub async fn start_with(cfg: kubesim::Config) -> Env {
    let server = kubesim::Server::start(cfg).await.expect("kubesim starts");
    let client = client_from_yaml(&server.kubeconfig()).await;
    namespace_settled(&client, "default").await;
    Env { server, client }
}

impl Env {
    /// The server's resourceVersion once it has stayed put for 300 ms (at most 10 s):
    /// the cluster's start-up writes in every namespace are done.
    pub async fn quiet(&self) -> u64 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut rv = self.server.resource_version();
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let now = self.server.resource_version();
            if now == rv || tokio::time::Instant::now() > deadline {
                return now;
            }
            rv = now;
        }
    }
}

/// The ConfigMap the cluster keeps in every namespace (kube-controller-manager's root CA
/// publisher): tests that count their own ConfigMaps leave it out.
pub const ROOT_CA: &str = "kube-root-ca.crt";

/// Names without the cluster's own [`ROOT_CA`].
pub fn own(names: impl IntoIterator<Item = String>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| n != ROOT_CA && !n.ends_with("/kube-root-ca.crt"))
        .collect()
}

/// Waits for the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap that
/// the cluster keeps in every namespace.
pub async fn namespace_settled(client: &Client, ns: &str) {
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("{ns}'s default ServiceAccount and kube-root-ca.crt"),
        || async {
            let have_sa = sa.get_opt("default").await.ok()?.is_some();
            let have_ca = cms.get_opt(ROOT_CA).await.ok()?.is_some();
            (have_sa && have_ca).then_some(())
        },
    )
    .await;
}

/// A kube client from kubeconfig YAML (or JSON), built the way users build one.
pub async fn client_from_yaml(yaml: &str) -> Client {
    try_client_from_yaml(yaml)
        .await
        .expect("a usable kubeconfig")
}

/// Same, returning errors.
pub async fn try_client_from_yaml(yaml: &str) -> anyhow::Result<Client> {
    let kc = Kubeconfig::from_yaml(yaml)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// Credentials for a custom kubeconfig.
#[derive(Default)]
pub struct Creds<'a> {
    pub token: Option<&'a str>,
    pub cert_pem: Option<&'a str>,
    pub key_pem: Option<&'a str>,
}

/// A kubeconfig (JSON is valid YAML) for `url` trusting `ca_pem`, with the given credentials.
pub fn kubeconfig(url: &str, ca_pem: &str, creds: Creds) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut user = json!({});
    if let Some(t) = creds.token {
        user["token"] = json!(t);
    }
    if let Some(c) = creds.cert_pem {
        user["client-certificate-data"] = json!(b64(c));
    }
    if let Some(k) = creds.key_pem {
        user["client-key-data"] = json!(b64(k));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "default"}}],
        "current-context": "x",
    })
    .to_string()
}

/// A client of `env`'s server with the given credentials.
pub async fn client_with(env: &Env, creds: Creds<'_>) -> Client {
    client_from_yaml(&kubeconfig(
        &env.server.url(),
        env.server.ca_pem().unwrap(),
        creds,
    ))
    .await
}

/// Bearer-token credentials.
pub fn token_creds(token: &str) -> Creds<'_> {
    Creds {
        token: Some(token),
        ..Default::default()
    }
}

/// A raw response: status code and body (JSON when it parses, else a string value).
pub struct Raw {
    pub code: u16,
    pub body: Value,
}

/// Sends a raw request through the kube client (auth, TLS) and returns the status and body.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Raw {
    try_raw(client, method, path, content_type, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: transport error: {e}"))
}

/// Same, returning transport errors.
pub async fn try_raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<Raw, kube::Error> {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    let req = b
        .body(kube::client::Body::from(body))
        .expect("valid request");
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(Raw { code, body })
}

/// The API status code of a kube error (panics on transport errors).
pub fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The message of a kube API error (of any other error, what it says).
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The `reason` of a kube API error.
pub fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.reason.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// (reason, field, message) of one cause of a 422.
pub type Cause = (String, String, String);

/// Every cause of a 422.
pub fn causes(e: &kube::Error) -> Vec<Cause> {
    let kube::Error::Api(s) = e else {
        panic!("expected an API error, got {e:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    s.details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `f` until it yields `Some`, or panics after [`DEADLINE`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {DEADLINE:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Runs `fut` with the test deadline.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {DEADLINE:?}: {what}"))
}

/// Every watch event of `api` after resourceVersion `rv` (a one-second watch, no
/// bookmarks); `what` names it if it does not end in time.
pub async fn events_since<K>(api: &Api<K>, rv: &str, what: &str) -> Vec<kube::api::WatchEvent<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::TryStreamExt;
    let params = kube::api::WatchParams::default()
        .disable_bookmarks()
        .timeout(1);
    within(
        what,
        api.watch(&params, rv)
            .await
            .unwrap()
            .try_collect::<Vec<_>>(),
    )
    .await
    .unwrap()
}

/// True when `get` answers 404.
pub async fn is_gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => panic!("get {name}: {e}"),
        Ok(_) => false,
    }
}

/// Creates a namespace, and waits for what the cluster keeps in it.
pub async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    namespace_settled(client, name).await;
}

/// A ConfigMap value.
pub fn cm(name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .expect("valid ConfigMap")
}

/// Group of the test CRD.
pub const WIDGET_GROUP: &str = "test.causeway.io";

/// The CRD `widgets.test.causeway.io` (namespaced, status subresource).
pub fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.causeway.io"},
        "spec": {
            "group": WIDGET_GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wdg"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"},
                            "color": {"type": "string", "default": "blue"},
                        }},
                        "status": {"type": "object", "properties": {
                            "ready": {"type": "boolean"},
                            "observed": {"type": "integer"},
                        }},
                    },
                }},
            }],
        },
    }))
    .expect("valid CRD")
}

/// The ApiResource of widgets.
pub fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(WIDGET_GROUP, "v1", "Widget"),
        "widgets",
    )
}

/// A Widget object.
pub fn widget(name: &str, spec: Value) -> DynamicObject {
    let mut o = DynamicObject::new(name, &widget_resource());
    o.data = json!({"spec": spec});
    o
}

/// Creates the widget CRD and waits until it is Established; returns the namespaced widget Api.
pub async fn install_widgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .expect("create CRD");
    eventually("widgets CRD Established", || async {
        let c = crds.get("widgets.test.causeway.io").await.ok()?;
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    Api::namespaced_with(client.clone(), ns, &widget_resource())
}
