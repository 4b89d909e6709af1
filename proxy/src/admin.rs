//! The admin listener: `/metrics` (OpenMetrics), `/healthz` (the process is up) and
//! `/readyz` (every hub cache synced and the first route table built).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Serves until `stop`.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
        TokioExecutor::new(),
    ));
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => continue,
            },
            _ = stop.cancelled() => return,
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        let builder = builder.clone();
        let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let (status, ctype, body) = match req.uri().path() {
                "/metrics" => (
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics.encode(),
                ),
                "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
                "/readyz" if ready.load(Ordering::Relaxed) => {
                    (StatusCode::OK, "text/plain", "ready\n".to_string())
                }
                "/readyz" => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "not ready: hub caches not synced or no route table yet\n".to_string(),
                ),
                _ => (
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    "not found\n".to_string(),
                ),
            };
            let mut r = Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = status;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(ctype),
            );
            async move { Ok::<_, Infallible>(r) }
        });
        let stop = stop.clone();
        tokio::spawn(async move {
            let conn = builder.serve_connection(TokioIo::new(tcp), svc);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}
