//! Demo HTTP backends standing in for pods: real hyper servers on loopback addresses
//! (127.0.0.0/8 is all loopback on Linux, so every "pod" gets its own IP), answering
//! `<cluster>/<pod>` so a client can see which cluster served it. A member's Service
//! gets a selector-less EndpointSlice that points at them, exactly as kube-controller-
//! manager would write it for real pods.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::MANAGER;

/// One running backend ("pod").
pub struct Backend {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its cluster.
    pub cluster: String,
    /// Its pod name.
    pub pod: String,
    /// Requests served.
    pub hits: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Backend {
    /// Starts a backend on `ip:port` (port 0: any free port). Each answer's body is
    /// `<cluster>/<pod>\n`; headers `x-cluster` and `x-pod` carry the same, and
    /// `x-seen-forwarded-for` / `x-seen-host` / `x-seen-path` / `x-seen-method` /
    /// `x-seen-target` (path and query) echo what the proxy sent, and `x-seen-headers`
    /// every request header ([`seen_headers`]).
    pub async fn start(ip: IpAddr, port: u16, cluster: &str, pod: &str) -> anyhow::Result<Backend> {
        let listener = TcpListener::bind((ip, port))
            .await
            .with_context(|| format!("binding demo backend {cluster}/{pod} on {ip}:{port}"))?;
        let addr = listener.local_addr()?;
        let hits = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let (c, p, h, s) = (
            cluster.to_string(),
            pod.to_string(),
            hits.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Some((stream, _)) =
                    causeway_runtime::net::accept(&listener, &s, "demo backend").await
                else {
                    return;
                };
                let (c, p, h, s) = (c.clone(), p.clone(), h.clone(), s.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        h.fetch_add(1, Ordering::Relaxed);
                        let seen = |name: &str| {
                            req.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string()
                        };
                        let resp = Response::builder()
                            .header("x-cluster", c.as_str())
                            .header("x-pod", p.as_str())
                            .header("x-seen-forwarded-for", seen("x-forwarded-for"))
                            .header("x-seen-host", seen("host"))
                            .header("x-seen-path", req.uri().path())
                            .header("x-seen-method", req.method().as_str())
                            .header(
                                "x-seen-target",
                                req.uri().path_and_query().map_or("/", |p| p.as_str()),
                            )
                            .header("x-seen-headers", seen_headers(req.headers()))
                            .body(Full::new(Bytes::from(format!("{c}/{p}\n"))))
                            .expect("static response");
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .into_owned();
                    tokio::select! {
                        _ = conn => {}
                        _ = s.cancelled() => {}
                    }
                });
            }
        });
        Ok(Backend {
            addr,
            cluster: cluster.to_string(),
            pod: pod.to_string(),
            hits,
            stop,
        })
    }

    /// Stops listening and drops open connections (the "pod" dies).
    pub fn kill(&self) {
        self.stop.cancel();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The request headers as a JSON object (lowercase name → the values joined by `,`),
/// so a test can see what a proxy added, changed or removed.
pub fn seen_headers(h: &hyper::HeaderMap) -> String {
    let mut m: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (n, v) in h {
        m.entry(n.as_str())
            .or_default()
            .push(v.to_str().unwrap_or("?"));
    }
    let m: BTreeMap<&str, String> = m.into_iter().map(|(k, v)| (k, v.join(","))).collect();
    serde_json::to_string(&m).unwrap_or_default()
}

/// The loopback address of pod `pod` (1-based) of the `cluster`-th member (1-based):
/// 127.<100 + cluster>.0.<pod>.
pub fn pod_ip(cluster: usize, pod: usize) -> IpAddr {
    IpAddr::from([127, (100 + cluster).min(255) as u8, 0, pod.min(254) as u8])
}

/// Starts `pods` backends of one cluster on one shared port (so that one EndpointSlice
/// port describes them all), retrying with another port if one is taken.
pub async fn start_pods(
    cluster_index: usize,
    cluster: &str,
    service: &str,
    pods: usize,
) -> anyhow::Result<Vec<Backend>> {
    let mut last_err = None;
    for _ in 0..20 {
        let first = Backend::start(
            pod_ip(cluster_index, 1),
            0,
            cluster,
            &format!("{service}-1"),
        )
        .await?;
        let port = first.addr.port();
        let mut all = vec![first];
        let mut ok = true;
        for i in 2..=pods {
            match Backend::start(
                pod_ip(cluster_index, i),
                port,
                cluster,
                &format!("{service}-{i}"),
            )
            .await
            {
                Ok(b) => all.push(b),
                Err(e) => {
                    last_err = Some(e);
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return Ok(all);
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no free port")))
}

/// Creates (server-side applies) a selector-less Service `name` with port 80 (`http`) in
/// `namespace` of `member`, and an EndpointSlice `<name>-pods` listing `backends` as ready
/// endpoints on their port: what kube-controller-manager writes for real pods.
pub async fn publish(
    member: &kube::Client,
    namespace: &str,
    name: &str,
    backends: &[Backend],
) -> anyhow::Result<()> {
    publish_on(member, namespace, name, 80, backends).await
}

/// [`publish`] with Service port `port` (`http`).
pub async fn publish_on(
    member: &kube::Client,
    namespace: &str,
    name: &str,
    port: u16,
    backends: &[Backend],
) -> anyhow::Result<()> {
    let pp = PatchParams::apply(MANAGER).force();
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP",
                             "targetPort": backends.first().map(|b| b.addr.port()).unwrap_or(80)}]},
    });
    Api::<Service>::namespaced(member.clone(), namespace)
        .patch(name, &pp, &Patch::Apply(&svc))
        .await
        .with_context(|| format!("creating Service {namespace}/{name}"))?;
    let ready: BTreeMap<String, bool> = backends.iter().map(|b| (b.pod.clone(), true)).collect();
    let all: Vec<&Backend> = backends.iter().collect();
    set_endpoints(member, namespace, name, &all, &ready).await
}

/// Rewrites `<name>-pods` with `backends`, each ready or not as `ready` says (by pod name;
/// missing = ready); an empty list leaves a slice without endpoints.
pub async fn set_endpoints(
    member: &kube::Client,
    namespace: &str,
    name: &str,
    backends: &[&Backend],
    ready: &BTreeMap<String, bool>,
) -> anyhow::Result<()> {
    let port = backends.first().map(|b| b.addr.port()).unwrap_or(80);
    let endpoints: Vec<serde_json::Value> = backends
        .iter()
        .map(|b| {
            let r = ready.get(&b.pod).copied().unwrap_or(true);
            json!({
                "addresses": [b.addr.ip().to_string()],
                "conditions": {"ready": r, "serving": r, "terminating": false},
                "targetRef": {"kind": "Pod", "name": b.pod, "namespace": namespace},
            })
        })
        .collect();
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-pods"), "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    });
    Api::<EndpointSlice>::namespaced(member.clone(), namespace)
        .patch(
            &format!("{name}-pods"),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await
        .with_context(|| format!("writing EndpointSlice {namespace}/{name}-pods"))?;
    Ok(())
}
