//! Upstream HTTP/1.1 keep-alive pools (hyper-util's legacy `Client`), one per distinct
//! (connect timeout, idle timeout) pair, shared by every backend and thread that uses
//! those timeouts.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Metrics;

/// Request body type sent upstream (client bodies streamed, or buffered for retries).
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// An HTTP connector that counts connections and connect failures.
#[derive(Clone)]
pub struct Connector {
    inner: HttpConnector,
    metrics: Arc<Metrics>,
}

type ConnectFuture =
    Pin<Box<dyn Future<Output = Result<Counted, Box<dyn std::error::Error + Send + Sync>>> + Send>>;

/// An upstream connection counted in the open-connections gauge until dropped.
pub struct Counted {
    io: TokioIo<tokio::net::TcpStream>,
    gauge: Gauge,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl hyper::rt::Read for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl Connection for Counted {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Counted;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let fut = self.inner.call(uri);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            match fut.await {
                Ok(io) => {
                    metrics.upstream_connects.inc();
                    metrics.upstream_open.inc();
                    Ok(Counted {
                        io,
                        gauge: metrics.upstream_open.clone(),
                    })
                }
                Err(e) => {
                    metrics.upstream_connect_errors.inc();
                    Err(e.into())
                }
            }
        })
    }
}

/// A pooled upstream client.
pub type Client = hyper_util::client::legacy::Client<Connector, Body>;

/// Clients by timeouts.
pub struct Upstreams {
    metrics: Arc<Metrics>,
    clients: Mutex<Vec<((Duration, Duration), Client)>>,
}

impl Upstreams {
    /// No clients yet.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Upstreams {
            metrics,
            clients: Mutex::new(Vec::new()),
        }
    }

    /// The client for these timeouts (built on first use; called at table-build time).
    pub fn client(&self, connect: Duration, idle: Duration) -> Client {
        let mut v = self.clients.lock();
        if let Some((_, c)) = v.iter().find(|(k, _)| *k == (connect, idle)) {
            return c.clone();
        }
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect));
        http.set_nodelay(true);
        http.enforce_http(true);
        let connector = Connector {
            inner: http,
            metrics: self.metrics.clone(),
        };
        let c = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(idle)
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(256)
            .build(connector);
        v.push(((connect, idle), c.clone()));
        c
    }
}
