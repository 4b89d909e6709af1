//! Upstream HTTP/1.1 keep-alive pools: plain sockets ([`raw`]) for the proxy's own
//! HTTP/1.1 engine ([`crate::h1`]) and for HTTP/2 clients' requests whose body is at
//! hand, and hyper's `client::conn::http1` connections for the rest of what hyper
//! serves (upgrades, streamed uploads, HTTP/1.0 and other handed-off HTTP/1.1
//! requests). Backends spoken
//! to over HTTP/2 ([`Protocol`]: h2c, h2 over TLS; gRPC) share a few multiplexed
//! connections per endpoint instead ([`h2`]).
//!
//! Each [`Endpoint`] owns one [`Pool`], so warm connections
//! survive route-table swaps and are shared by every backend and task that reaches
//! that address. The request path is short on purpose (it is most of the proxy's own
//! CPU per request): pop the most recently used idle connection, wait until hyper says
//! it is ready, send; the response body's [`Lease`] puts the connection back as soon
//! as the body has ended, without a task or a timer per request.
//!
//! A request that could not be written because a pooled connection had just closed
//! (the upstream's keep-alive timeout raced us) comes back from hyper untouched and
//! goes out on the next connection, so idle closes never become client errors. A
//! plain socket is checked for a close (or stray bytes) when it leaves the pool.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpStream;

use crate::clock::{nanos, now_nanos};
use crate::endpoint::Endpoint;
use crate::metrics::Metrics;

pub mod chunked;
pub mod h2;
pub mod raw;

pub use raw::MAX_HEADERS;

/// How the proxy speaks to a backend's endpoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2 in cleartext, prior knowledge.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2Tls,
}

impl Protocol {
    /// A backend port's protocol: the MCI's `causeway.io/backend-protocol` when set,
    /// else HTTP/2 in cleartext for an `appProtocol` that says so (`kubernetes.io/h2c`,
    /// KEP-3726; `grpc`, `h2c` and `http2` as Istio reads them), else HTTP/1.1.
    pub fn of(chosen: Option<Protocol>, app_protocol: Option<&str>) -> Protocol {
        if let Some(p) = chosen {
            return p;
        }
        match app_protocol.map(str::to_ascii_lowercase).as_deref() {
            Some("kubernetes.io/h2c" | "grpc" | "h2c" | "http2") => Protocol::H2c,
            _ => Protocol::Http1,
        }
    }

    /// Spoken over HTTP/2.
    pub fn is_h2(self) -> bool {
        self != Protocol::Http1
    }
}

/// Request body type sent upstream (client bodies streamed, or buffered for retries).
pub type Body = UnsyncBoxBody<Bytes, hyper::Error>;

/// Why a request got no upstream response.
#[derive(Debug)]
pub enum Error {
    /// The TCP connect failed.
    Connect(std::io::Error),
    /// The TCP connect did not finish within the connect timeout.
    ConnectTimeout(Duration),
    /// The connection failed while sending the request or reading the response head.
    Http(hyper::Error),
    /// The HTTP/1.1 engine's socket failed while sending the request or reading the
    /// response head.
    Io(std::io::Error),
    /// The upstream closed the connection before a whole response head arrived.
    Closed,
    /// The upstream's response could not be parsed or framed (what is wrong).
    Malformed(&'static str),
    /// An HTTP/2 upstream refused the request's stream (`RST_STREAM` with
    /// `REFUSED_STREAM`): it did not process it (RFC 9113 §8.7), but is busy.
    Refused(hyper::Error),
    /// An HTTP/2 upstream's connection went away before the request's stream was
    /// processed: a `GOAWAY` whose last stream id is below it, or one that came before
    /// the stream could open (RFC 9113 §8.7). The endpoint itself may be fine (a
    /// graceful restart): a new connection to it will do.
    GoneAway(hyper::Error),
}

impl Error {
    /// Nothing reached the upstream: safe to retry any request elsewhere.
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Connect(_) | Error::ConnectTimeout(_))
    }

    /// The upstream did not process the request ([`Error::Refused`],
    /// [`Error::GoneAway`]): safe to send again, as after a refused connect, if the
    /// body can be.
    pub fn is_unprocessed(&self) -> bool {
        matches!(self, Error::Refused(_) | Error::GoneAway(_))
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(e) => write!(f, "connect failed: {e}"),
            Error::ConnectTimeout(t) => write!(f, "connect timed out after {t:?}"),
            Error::Io(e) => write!(f, "connection failed: {e}"),
            Error::Closed => f.write_str("connection closed before the response head arrived"),
            Error::Malformed(what) => write!(f, "invalid response: {what}"),
            Error::Refused(e) | Error::GoneAway(e) | Error::Http(e) => {
                match self {
                    Error::Refused(_) => f.write_str("stream refused, not processed: ")?,
                    Error::GoneAway(_) => f.write_str("connection went away, not processed: ")?,
                    _ => {}
                }
                write!(f, "{e}")?;
                let mut src = std::error::Error::source(e);
                while let Some(s) = src {
                    write!(f, ": {s}")?;
                    src = s.source();
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

/// The error of a response body cut because the upstream sent nothing for the read
/// timeout (`forward`'s `ReadTimeout`).
#[derive(Debug)]
pub struct ReadTimedOut(pub Duration);

impl std::fmt::Display for ReadTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the upstream sent nothing for {:?} (the read timeout)",
            self.0
        )
    }
}

impl std::error::Error for ReadTimedOut {}

struct Idle {
    tx: SendRequest<Body>,
    /// Clock nanos after which the connection is closed instead of reused.
    expires: u64,
}

/// A plain upstream connection of the HTTP/1.1 engine ([`crate::h1`]), counted in the
/// open-connections gauge while it lives.
pub struct Raw {
    /// The socket.
    pub stream: TcpStream,
    _open: Open,
}

struct RawIdle {
    conn: Raw,
    expires: u64,
}

/// Idle keep-alive connections to one endpoint, most recently used last: hyper client
/// connections (requests served through hyper) and plain sockets (the HTTP/1.1 engine).
#[derive(Default)]
pub struct Pool {
    idle: Mutex<Vec<Idle>>,
    raw: Mutex<Vec<RawIdle>>,
    /// Shared HTTP/2 connections.
    pub h2: h2::Pool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &self.idle.lock().len())
            .field("raw", &self.raw.lock().len())
            .field("h2", &self.h2)
            .finish()
    }
}

/// Per-request settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// How long an unused connection stays in the pool.
    pub idle_timeout: Duration,
    /// Most idle connections kept for the endpoint (more are closed when returned).
    /// The backend's max-connections: a pool smaller than the concurrency the
    /// backend allows closes and reopens connections under bursts (h2 clients
    /// multiplex hundreds of streams); the idle timeout reaps what a burst left.
    pub max_idle: usize,
}

/// A connection on loan to one response; put back in its endpoint's pool when the
/// body ended (dropped before that, it closes: the rest of the body is unread). On a
/// shared HTTP/2 connection: the stream, counted open until the body ended.
pub struct Lease(Held);

enum Held {
    H1 {
        tx: SendRequest<Body>,
        ep: Arc<Endpoint>,
        settings: Settings,
    },
    H2(h2::Stream),
    Released,
}

impl Lease {
    /// The response body ended: the connection can carry the next request.
    pub fn release(&mut self) {
        match std::mem::replace(&mut self.0, Held::Released) {
            Held::H1 { tx, ep, settings } => ep.pool.put(tx, settings),
            Held::H2(stream) => drop(stream),
            Held::Released => {}
        }
    }
}

impl Pool {
    fn checkout(&self, now: u64) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock();
        while let Some(c) = idle.pop() {
            if c.expires > now && !c.tx.is_closed() {
                return Some(c.tx);
            }
        }
        None
    }

    fn put(&self, tx: SendRequest<Body>, settings: Settings) {
        if tx.is_closed() || settings.idle_timeout.is_zero() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < settings.max_idle {
            idle.push(Idle {
                tx,
                expires: now_nanos().saturating_add(nanos(settings.idle_timeout)),
            });
        }
    }

    /// Closes connections idle past their timeout (or closed by the upstream).
    pub fn reap(&self, now: u64) {
        self.idle
            .lock()
            .retain(|c| c.expires > now && !c.tx.is_closed());
        self.raw.lock().retain(|c| c.expires > now);
        self.h2.reap(now);
    }

    /// The most recently used idle plain connection that is still open (an upstream
    /// that closed it, or sent bytes nobody asked for, shows as readable: it is
    /// dropped).
    pub fn checkout_raw(&self, now: u64) -> Option<Raw> {
        let mut idle = self.raw.lock();
        while let Some(c) = idle.pop() {
            let mut probe = [0u8; 1];
            if c.expires > now
                && matches!(c.conn.stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                return Some(c.conn);
            }
        }
        None
    }

    /// Puts a plain connection whose last response ended cleanly back.
    pub fn put_raw(&self, conn: Raw, settings: Settings) {
        if settings.idle_timeout.is_zero() {
            return;
        }
        let mut idle = self.raw.lock();
        if idle.len() < settings.max_idle {
            idle.push(RawIdle {
                conn,
                expires: now_nanos().saturating_add(nanos(settings.idle_timeout)),
            });
        }
    }
}

/// Sends `req` (origin-form URI, Host set) to `ep` on one of its pooled connections, or
/// a new one. The [`Lease`] goes with the response body.
pub async fn send(
    ep: &Arc<Endpoint>,
    mut req: Request<Body>,
    settings: Settings,
    metrics: &Metrics,
) -> Result<(Response<Incoming>, Lease), Error> {
    loop {
        let (mut tx, reused) = match ep.pool.checkout(now_nanos()) {
            Some(tx) => (tx, true),
            // Boxed: the connect path is rare and large, and this future is part of
            // every request's state.
            None => (
                Box::pin(connect(ep.addr, settings.connect_timeout, metrics)).await?,
                false,
            ),
        };
        // A pooled connection finished its last response; hyper marks it ready
        // once its task has seen that, which is at most one scheduler turn away.
        if let Err(e) = tx.ready().await {
            if reused {
                continue;
            }
            return Err(Error::Http(e));
        }
        match tx.try_send_request(req).await {
            Ok(resp) => {
                return Ok((
                    resp,
                    Lease(Held::H1 {
                        tx,
                        ep: ep.clone(),
                        settings,
                    }),
                ));
            }
            Err(mut e) => match e.take_message() {
                // Not written: the pooled connection closed under us. Next one.
                Some(r) if reused => req = r,
                _ => return Err(Error::Http(e.into_error())),
            },
        }
    }
}

/// Counts an upstream connection in the open-connections gauge until its task ends.
pub(crate) struct Open(pub(crate) Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A new plain connection for the HTTP/1.1 engine.
pub async fn connect_raw(
    addr: SocketAddr,
    timeout: Duration,
    metrics: &Metrics,
) -> Result<Raw, Error> {
    let stream = tcp(addr, timeout, metrics).await?;
    metrics.upstream_connects.inc();
    metrics.upstream_open.inc();
    Ok(Raw {
        stream,
        _open: Open(metrics.upstream_open.clone()),
    })
}

/// TCP keepalive of the upstream connections hyper drives (shared HTTP/2 connections,
/// streamed uploads, upgrade tunnels): a backend that vanishes without a reset (its
/// node lost, a partition) is noticed within 30 s of silence plus 3 unanswered probes
/// 10 s apart, and its connection leaves the pool with the streams on it failed, instead
/// of staying there for good (an open stream keeps a connection from idling out).
///
/// Not HTTP/2 PING keep-alive: grpc-go servers answer a client that pings more often
/// than their `EnforcementPolicy.MinTime` (5 minutes by default) with `GOAWAY
/// ENHANCE_YOUR_CALM` ("too_many_pings"), which would end the long quiet streams
/// (watches) this is meant to keep. Keepalive probes are the kernel's, below HTTP/2:
/// no server sees them as pings, and they cost nothing per request.
///
/// (The HTTP/1.1 engine's own sockets go without: each request on them has the read
/// timeout, and an idle one is checked as it leaves the pool.)
pub(crate) fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

/// A new TCP connection to `addr` with [`keepalive`] on (see there).
pub(crate) async fn tcp_kept_alive(
    addr: SocketAddr,
    timeout: Duration,
    metrics: &Metrics,
) -> Result<TcpStream, Error> {
    let tcp = tcp(addr, timeout, metrics).await?;
    if let Err(e) = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive()) {
        tracing::debug!(error = %e, %addr, "setting TCP keepalive on an upstream socket failed");
    }
    Ok(tcp)
}

pub(crate) async fn tcp(
    addr: SocketAddr,
    timeout: Duration,
    metrics: &Metrics,
) -> Result<TcpStream, Error> {
    let tcp = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            metrics.upstream_connect_errors.inc();
            return Err(Error::Connect(e));
        }
        Err(_) => {
            metrics.upstream_connect_errors.inc();
            return Err(Error::ConnectTimeout(timeout));
        }
    };
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    metrics: &Metrics,
) -> Result<SendRequest<Body>, Error> {
    let tcp = tcp_kept_alive(addr, timeout, metrics).await?;
    let (tx, conn) = http1::Builder::new()
        .handshake(TokioIo::new(tcp))
        .await
        .map_err(Error::Http)?;
    metrics.upstream_connects.inc();
    metrics.upstream_open.inc();
    let open = Open(metrics.upstream_open.clone());
    tokio::spawn(async move {
        let _open = open;
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, %addr, "upstream connection ended with an error");
        }
    });
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::Protocol;

    /// The keepalive options are read back from a connected upstream socket (the
    /// kernel's values, not the builder's): what the HTTP/2 pool and hyper's HTTP/1.1
    /// connections connect with.
    #[tokio::test]
    async fn upstream_sockets_have_tcp_keepalive_on() {
        use std::time::Duration;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let metrics = crate::metrics::Metrics::new();
        let check = |tcp: &tokio::net::TcpStream| {
            let s = socket2::SockRef::from(tcp);
            assert!(s.keepalive().unwrap(), "SO_KEEPALIVE");
            assert_eq!(s.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
            assert_eq!(s.tcp_keepalive_interval().unwrap(), Duration::from_secs(10));
            assert_eq!(s.tcp_keepalive_retries().unwrap(), 3);
        };
        let tcp = super::tcp_kept_alive(addr, Duration::from_secs(2), &metrics)
            .await
            .unwrap();
        check(&tcp);
        // The plain engine's sockets are left as they were.
        let raw = super::connect_raw(addr, Duration::from_secs(2), &metrics)
            .await
            .unwrap();
        assert!(!socket2::SockRef::from(&raw.stream).keepalive().unwrap());
    }

    #[test]
    fn protocol_comes_from_the_mci_then_the_ports_app_protocol() {
        use Protocol::*;
        for (chosen, app, want) in [
            (None, None, Http1),
            (None, Some("kubernetes.io/h2c"), H2c),
            (None, Some("grpc"), H2c),
            (None, Some("GRPC"), H2c),
            (None, Some("h2c"), H2c),
            (None, Some("http2"), H2c),
            (None, Some("http"), Http1),
            (None, Some("kubernetes.io/ws"), Http1),
            (Some(H2Tls), None, H2Tls),
            (Some(H2Tls), Some("grpc"), H2Tls),
            (Some(Http1), Some("kubernetes.io/h2c"), Http1),
            (Some(H2c), Some("http"), H2c),
        ] {
            assert_eq!(Protocol::of(chosen, app), want, "{chosen:?} {app:?}");
        }
        assert!(!Http1.is_h2() && H2c.is_h2() && H2Tls.is_h2());
    }
}
