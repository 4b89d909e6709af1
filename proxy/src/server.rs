//! Downstream listeners: HTTP/1.1 and HTTP/2 (h2c prior knowledge on the plain port,
//! ALPN on TLS) through hyper-util's auto builder, a header size limit and a
//! header-read timeout against slowloris (also on choosing the protocol), and graceful
//! draining on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::forward::{Conn, Proxy};

/// Listener limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Time a client has to send the request head (and the TLS handshake, and the
    /// first bytes that show its protocol); also how long an idle keep-alive
    /// connection stays open.
    pub header_read_timeout: Duration,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// How long shutdown waits for open connections.
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32);
    b
}

/// Accepts connections until `stop`, then drains them for up to `drain_timeout`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    proxy: Arc<Proxy>,
    limits: Limits,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(builder(&limits));
    let https = tls.is_some();
    // Cancelled when the drain time is up: connections still open are closed.
    let hard = CancellationToken::new();
    loop {
        let (tcp, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = tcp.set_nodelay(true);
        let conn = Conn::new(remote, https);
        let p = proxy.clone();
        let svc = service_fn(move |req| {
            let proxy = p.clone();
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(proxy.handle(req, conn).await) }
        });
        let gauge = proxy.metrics.downstream_open.clone();
        gauge.inc();
        let open = OpenConn(gauge);
        match &tls {
            None => {
                let io = Detect::new(tcp, limits.header_read_timeout);
                let fut = graceful.watch(
                    builder
                        .serve_connection_with_upgrades(TokioIo::new(io), svc)
                        .into_owned(),
                );
                let hard = hard.clone();
                tokio::spawn(async move {
                    let _open = open;
                    tokio::select! {
                        r = fut => if let Err(e) = r {
                            tracing::debug!(error = %e, %remote, "connection ended with an error");
                        },
                        _ = hard.cancelled() => {}
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let builder = builder.clone();
                let watcher = graceful.watcher();
                let timeout = limits.header_read_timeout;
                let hard = hard.clone();
                tokio::spawn(async move {
                    let _open = open;
                    let tls = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, %remote, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%remote, "TLS handshake timed out");
                            return;
                        }
                    };
                    let io = Detect::new(tls, timeout);
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(io), svc)
                        .into_owned();
                    tokio::select! {
                        r = watcher.watch(conn) => if let Err(e) = r {
                            tracing::debug!(error = %e, %remote, "connection ended with an error");
                        },
                        _ = hard.cancelled() => {}
                    }
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open after {:?}; closing them",
            limits.drain_timeout
        );
        hard.cancel();
    }
}

/// Counts an open downstream connection until dropped.
struct OpenConn(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The HTTP/2 connection preface. hyper-util's auto builder reads up to its length to
/// choose between HTTP/1.1 and HTTP/2.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Gives a new connection the header-read timeout to show which protocol it speaks.
/// hyper-util's auto builder reads the first bytes without a timer (hyper#3962) and
/// hyper's own header-read timer starts after that, so without this a client that
/// connects and sends nothing, or part of the HTTP/2 preface, holds a connection
/// (and a file descriptor) forever. Once the protocol is known, reads pass through.
struct Detect<T> {
    io: T,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    seen: usize,
}

impl<T> Detect<T> {
    fn new(io: T, within: Duration) -> Self {
        Detect {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            seen: 0,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Detect<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.deadline.is_none() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                let rest = &H2_PREFACE[this.seen.min(H2_PREFACE.len())..];
                let n = new.len().min(rest.len());
                this.seen += new.len();
                // End of stream, bytes that are not the preface, or the whole preface:
                // the protocol is decided.
                if new.is_empty() || new[..n] != rest[..n] || this.seen >= H2_PREFACE.len() {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no HTTP/1.1 request or HTTP/2 preface within the header-read timeout",
                ))),
                _ => Poll::Pending,
            },
            r => r,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Detect<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
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

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
