//! Test harness: a kubesim hub with the Causeway CRDs, real hyper backends on their
//! own loopback IPs, hub objects written as the MCS controllers would, an in-process
//! proxy, and a small HTTP client.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use causeway_crds::well_known::labels::{SERVICE_NAME, SOURCE_CLUSTER};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "demo";

/// The port every test pod listens on.
pub const POD_PORT: u16 = 18080;

pub struct Hub {
    server: kubesim::Server,
    pub client: kube::Client,
}

impl Hub {
    pub async fn start() -> anyhow::Result<Hub> {
        let server = kubesim::Server::start(kubesim::Config::new("hub")).await?;
        let kc = kube::config::Kubeconfig::from_yaml(&server.kubeconfig())?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let client = kube::Client::try_from(cfg)?;
        let hub = Hub { server, client };
        hub.install_crds().await?;
        hub.apply("v1", "Namespace", None, NS, json!({})).await?;
        hub.apply(
            "networking.k8s.io/v1",
            "IngressClass",
            None,
            "causeway",
            json!({
                "metadata": {"annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
                "spec": {"controller": causeway_crds::well_known::INGRESS_CONTROLLER}
            }),
        )
        .await?;
        Ok(hub)
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        causeway_runtime::crds::install(
            &self.client,
            &causeway_crds::crdgen::all_crds(),
            "test",
            Duration::from_secs(10),
        )
        .await?;
        Ok(())
    }

    fn api(&self, api_version: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let plural = match kind {
            "IngressClass" => "ingressclasses".to_string(),
            "MultiClusterIngress" => "multiclusteringresses".to_string(),
            k if k.ends_with('s') => format!("{}es", k.to_ascii_lowercase()),
            k => format!("{}s", k.to_ascii_lowercase()),
        };
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            &plural,
        );
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Server-side applies `body` (metadata merged with name/namespace).
    /// A kubeconfig (YAML) for the hub, for the binary.
    pub fn kubeconfig(&self) -> String {
        self.server.kubeconfig()
    }

    pub async fn apply(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
        mut body: Value,
    ) -> anyhow::Result<()> {
        body["apiVersion"] = json!(api_version);
        body["kind"] = json!(kind);
        body["metadata"]["name"] = json!(name);
        if let Some(ns) = ns {
            body["metadata"]["namespace"] = json!(ns);
        }
        self.api(api_version, kind, ns)
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&body),
            )
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
        Ok(())
    }

    pub async fn delete(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: &str,
    ) -> anyhow::Result<()> {
        match self
            .api(api_version, kind, ns)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// ServiceImport `svc` with port `http`/80.
    pub async fn import(&self, svc: &str) -> anyhow::Result<()> {
        self.apply(
            "multicluster.x-k8s.io/v1beta1",
            "ServiceImport",
            Some(NS),
            svc,
            json!({"spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}),
        )
        .await
    }

    /// What the exporter of `cluster` writes for `svc`: the ExportedService and a hub
    /// slice with `endpoints` as (address, ready).
    pub async fn export(
        &self,
        svc: &str,
        cluster: &str,
        endpoints: &[(SocketAddr, bool)],
    ) -> anyhow::Result<()> {
        self.apply(
            "causeway.io/v1alpha1",
            "ExportedService",
            Some(NS),
            &format!("{svc}.{cluster}"),
            json!({"spec": {"cluster": cluster, "service": svc, "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}}),
        )
        .await?;
        self.slice(svc, cluster, endpoints).await
    }

    pub async fn slice(
        &self,
        svc: &str,
        cluster: &str,
        endpoints: &[(SocketAddr, bool)],
    ) -> anyhow::Result<()> {
        let port = endpoints.first().map_or(8080, |(a, _)| a.port());
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(a, ready)| json!({"addresses": [a.ip().to_string()], "conditions": {"ready": ready}}))
            .collect();
        self.apply(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            Some(NS),
            &format!("{svc}-{cluster}"),
            json!({
                "metadata": {"labels": {SERVICE_NAME: svc, SOURCE_CLUSTER: cluster, "endpointslice.kubernetes.io/managed-by": "causeway.io"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "protocol": "TCP", "port": port}],
                "endpoints": eps
            }),
        )
        .await
    }

    /// Sets `status.trafficBlockClusters` of an MCI (as the MCI controller would).
    pub async fn block(&self, mci: &str, clusters: &[&str]) -> anyhow::Result<()> {
        self.api(
            "networking.karmada.io/v1alpha1",
            "MultiClusterIngress",
            Some(NS),
        )
        .patch_status(
            mci,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"trafficBlockClusters": clusters}})),
        )
        .await
        .with_context(|| format!("blocking {clusters:?} on {mci}"))?;
        Ok(())
    }

    pub async fn mci(&self, name: &str, spec: Value, annotations: Value) -> anyhow::Result<()> {
        self.apply(
            "networking.karmada.io/v1alpha1",
            "MultiClusterIngress",
            Some(NS),
            name,
            json!({"metadata": {"annotations": annotations}, "spec": spec}),
        )
        .await
    }
}

/// A service backend `{"service": {"name": svc, "port": {"name": "http"}}}`.
pub fn backend(svc: &str) -> Value {
    json!({"service": {"name": svc, "port": {"name": "http"}}})
}

/// A rule with one Prefix path.
pub fn rule(host: Option<&str>, path: &str, kind: &str, svc: &str) -> Value {
    let mut r =
        json!({"http": {"paths": [{"path": path, "pathType": kind, "backend": backend(svc)}]}});
    if let Some(h) = host {
        r["host"] = json!(h);
    }
    r
}

/// A backend "pod": answers its name; `/status/<code>` answers that code; echoes
/// X-Forwarded-*, X-Request-Id and Host as `echo-*` headers; `Upgrade` requests get a
/// 101 and an echo of the bytes sent.
pub struct Pod {
    pub addr: SocketAddr,
    pub name: String,
    pub hits: Arc<AtomicU64>,
    /// Status code of `/healthz`.
    pub health: Arc<AtomicU16>,
    stop: CancellationToken,
}

impl Pod {
    pub async fn start(ip: [u8; 4], name: &str) -> anyhow::Result<Pod> {
        // One port for every pod (a slice has one port for all its endpoints); each pod
        // has its own loopback IP.
        let l = TcpListener::bind(SocketAddr::new(IpAddr::from(ip), POD_PORT))
            .await
            .with_context(|| format!("binding pod {name} on {ip:?}:{POD_PORT}"))?;
        let addr = l.local_addr()?;
        let stop = CancellationToken::new();
        let hits = Arc::new(AtomicU64::new(0));
        let health = Arc::new(AtomicU16::new(200));
        let (n, h, s, hc) = (name.to_string(), hits.clone(), stop.clone(), health.clone());
        tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let (tcp, _) = tokio::select! {
                    r = l.accept() => match r { Ok(x) => x, Err(_) => continue },
                    _ = s.cancelled() => break,
                };
                let (n, h, hc) = (n.clone(), h.clone(), hc.clone());
                let svc = service_fn(move |req| pod_answer(req, n.clone(), h.clone(), hc.clone()));
                conns.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .with_upgrades()
                        .await;
                });
            }
            // Killed: every open connection dies with the process.
            conns.abort_all();
        });
        Ok(Pod {
            addr,
            name: name.to_string(),
            hits,
            health,
            stop,
        })
    }

    pub fn kill(&self) {
        self.stop.cancel();
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn pod_answer(
    mut req: Request<Incoming>,
    name: String,
    hits: Arc<AtomicU64>,
    health: Arc<AtomicU16>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = http::StatusCode::from_u16(health.load(Ordering::Relaxed))
            .unwrap_or(http::StatusCode::OK);
        return Ok(r);
    }
    hits.fetch_add(1, Ordering::Relaxed);
    if let Some(ms) = path
        .strip_prefix("/sleep/")
        .and_then(|m| m.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    // `/bytes/<n>`: a body of n bytes
    if let Some(n) = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        return Ok(Response::new(Full::new(Bytes::from(vec![b'x'; n]))));
    }
    if path == "/echo" {
        let body = req
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Ok(Response::new(Full::new(body)));
    }
    if req.headers().contains_key(http::header::UPGRADE) {
        let up = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(io) = up.await {
                let mut io = TokioIo::new(io);
                let mut buf = [0u8; 1024];
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        });
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
        r.headers_mut().insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        r.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("upgrade"),
        );
        return Ok(r);
    }
    let code = req
        .uri()
        .path()
        .strip_prefix("/status/")
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(200);
    let mut r = Response::new(Full::new(Bytes::from(name)));
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    for h in [
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-request-id",
        "host",
    ] {
        if let Some(v) = req.headers().get(h) {
            r.headers_mut().insert(
                http::HeaderName::from_bytes(format!("echo-{h}").as_bytes()).unwrap(),
                v.clone(),
            );
        }
    }
    // Every Cookie line as the upstream saw it, " | " between lines.
    let cookies: Vec<&str> = req
        .headers()
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if !cookies.is_empty()
        && let Ok(v) = http::HeaderValue::from_str(&cookies.join(" | "))
    {
        r.headers_mut().insert("echo-cookie", v);
    }
    Ok(r)
}

/// A proxy with test-friendly settings.
pub async fn proxy(hub: &Hub, cluster: Option<&str>) -> anyhow::Result<causeway_proxy::Running> {
    proxy_with(hub, cluster, |_| {}).await
}

/// A proxy with test-friendly settings, adjusted by `f`.
pub async fn proxy_with(
    hub: &Hub,
    cluster: Option<&str>,
    f: impl FnOnce(&mut causeway_proxy::Config),
) -> anyhow::Result<causeway_proxy::Running> {
    let mut cfg = causeway_proxy::Config {
        cluster: cluster.map(str::to_string),
        name: Some(format!("test-{}", cluster.unwrap_or("x"))),
        listen_http: "127.0.0.1:0".parse()?,
        listen_https: Some("127.0.0.1:0".parse()?),
        metrics: Some("127.0.0.1:0".parse()?),
        outlier: causeway_proxy::Outlier {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(60),
            max_ejected_share: 0.5,
        },
        debounce: Duration::from_millis(20),
        ..Default::default()
    };
    f(&mut cfg);
    let p = causeway_proxy::start(hub.client.clone(), cfg).await?;
    eventually("proxy ready", Duration::from_secs(20), || async {
        p.ready()
    })
    .await?;
    Ok(p)
}

/// Polls `f` until true or `within` passes.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `GET http://<proxy><path>` with `Host: host` answers `status`.
pub async fn answers(
    c: &Client,
    proxy: SocketAddr,
    (host, path): (&str, &str),
    status: u16,
    within: Duration,
) -> anyhow::Result<()> {
    let what = format!("GET {host}{path} answering {status}");
    eventually(&what, within, || async {
        get(c, proxy, host, path, &[])
            .await
            .is_ok_and(|r| r.status == status)
    })
    .await
}

pub type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

pub fn client() -> Client {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// A response: status, body, headers.
pub struct Resp {
    pub status: u16,
    pub body: String,
    pub headers: http::HeaderMap,
}

/// GET `http://<proxy><path>` with `Host: host` and extra headers.
pub async fn get(
    c: &Client,
    proxy: SocketAddr,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<Resp> {
    send(c, http::Method::GET, proxy, host, path, extra, Bytes::new()).await
}

/// Any request.
pub async fn send(
    c: &Client,
    method: http::Method,
    proxy: SocketAddr,
    host: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Bytes,
) -> anyhow::Result<Resp> {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{proxy}{path}"))
        .header("host", host);
    for (k, v) in extra {
        b = b.header(*k, *v);
    }
    let resp = tokio::time::timeout(Duration::from_secs(10), c.request(b.body(Full::new(body))?))
        .await
        .context("request timed out")??;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Resp {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        headers,
    })
}

/// Counts bodies of `n` requests.
pub async fn spread(
    c: &Client,
    proxy: SocketAddr,
    host: &str,
    path: &str,
    n: usize,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut m = BTreeMap::new();
    for _ in 0..n {
        let r = get(c, proxy, host, path, &[]).await?;
        let key = if r.status == 200 {
            r.body
        } else {
            format!("status {}", r.status)
        };
        *m.entry(key).or_insert(0) += 1;
    }
    Ok(m)
}

/// The value of an unlabelled metric from the admin listener's `/metrics`.
pub async fn metric(c: &Client, admin: SocketAddr, name: &str) -> anyhow::Result<f64> {
    let m = get(c, admin, "x", "/metrics", &[]).await?;
    m.body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no metric {name} in\n{}", m.body))
}
