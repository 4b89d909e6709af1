//! The admin listener every component serves: `/metrics` (OpenMetrics text),
//! `/healthz` and `/livez` (the process is up), `/readyz` (the component says it is
//! ready). It stops accepting, and closes open connections, when `stop` is cancelled.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics` (what prometheus-client's text encoder writes).
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the admin endpoints answer from.
#[derive(Clone)]
pub struct Endpoints {
    /// Renders the metrics.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// `Ok` while the component is ready, else what `/readyz` says (e.g. "hub caches
    /// not synced yet", "not the leader (leader is pod-1_...)").
    pub ready: Readiness,
}

/// A readiness check: `Ok`, or why not.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A readiness check from a flag and the one reason it gives while the flag is false.
pub fn ready_when(
    ready: impl Fn() -> bool + Send + Sync + 'static,
    not_ready: &'static str,
) -> Readiness {
    Arc::new(move || {
        if ready() {
            Ok(())
        } else {
            Err(not_ready.to_string())
        }
    })
}

/// Binds the admin listener; the error names `flag` and the address.
pub async fn bind(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {flag} {addr}"))
}

/// One admin answer.
pub fn answer(path: &str, e: &Endpoints) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" => (StatusCode::OK, OPENMETRICS, (e.metrics)()),
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        "/readyz" => match (e.ready)() {
            Ok(()) => (StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("not ready: {why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics, /healthz, /livez or /readyz\n".into(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(ctype),
    );
    r
}

/// Serves `endpoints` on `listener` until `stop`; returns the task.
pub fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
            TokioExecutor::new(),
        ));
        loop {
            let Some((tcp, _)) = crate::net::accept(&listener, &stop, "admin").await else {
                return;
            };
            let e = endpoints.clone();
            let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let r = answer(req.uri().path(), &e);
                async move { Ok::<_, Infallible>(r) }
            });
            let (builder, stop) = (builder.clone(), stop.clone());
            tokio::spawn(async move {
                let conn = builder.serve_connection(TokioIo::new(tcp), svc);
                // a scrape is quick: no admin connection outlives 30 s or shutdown
                tokio::select! {
                    _ = tokio::time::timeout(Duration::from_secs(30), conn) => {}
                    _ = stop.cancelled() => {}
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn answers_every_path_and_stops() {
        let ready = Arc::new(AtomicBool::new(false));
        let r = ready.clone();
        let listener = bind("127.0.0.1:0".parse().unwrap(), "--metrics")
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = serve(
            listener,
            Endpoints {
                metrics: Arc::new(|| "# EOF\n".to_string()),
                ready: ready_when(move || r.load(Ordering::SeqCst), "caches not synced yet"),
            },
            stop.clone(),
        );
        let m = get(addr, "/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(
            m.to_lowercase()
                .contains(&format!("content-type: {OPENMETRICS}")),
            "{m}"
        );
        assert!(m.ends_with("# EOF\n"), "{m}");
        for p in ["/healthz", "/livez"] {
            assert!(get(addr, p).await.starts_with("HTTP/1.1 200"));
        }
        let nr = get(addr, "/readyz").await;
        assert!(
            nr.starts_with("HTTP/1.1 503") && nr.ends_with("not ready: caches not synced yet\n"),
            "{nr}"
        );
        ready.store(true, Ordering::SeqCst);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "closed after stop"
        );
    }

    #[tokio::test]
    async fn a_taken_address_names_the_flag() {
        let held = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = held.local_addr().unwrap();
        let err = bind(addr, "--metrics").await.unwrap_err();
        assert!(format!("{err:#}").starts_with(&format!("listening on --metrics {addr}")));
    }
}
