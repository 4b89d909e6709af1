//! Upstream HTTP/2 (h2c prior knowledge, or h2 over TLS with ALPN `h2`): each
//! endpoint keeps a few connections that every request to it shares, one stream per
//! request, instead of a connection per request in flight.
//!
//! A request takes the open connection with the fewest streams; a new connection is
//! opened only when every one carries [`STREAMS_PER_CONNECTION`] streams (at most
//! [`CONNECTIONS_PER_ENDPOINT`]; past that, streams queue on the least busy one, as
//! HTTP/2 servers announce at least 100 concurrent streams). Connects to one endpoint
//! happen one at a time, so a burst of requests to a cold endpoint opens one
//! connection, not one each; when that connect fails, the requests that waited for it
//! fail with it instead of each trying again in turn. A connection idle (no stream)
//! past the idle timeout, or closed by the upstream, leaves the pool on the next reap.
//!
//! [`checkout`](Pool::checkout) happens before the request is built, so a request
//! whose body is streamed can still go to another endpoint when the connect fails.
//!
//! TLS upstreams' certificates are not verified (as nginx's `proxy_ssl_verify off`, its
//! default, and ingress-nginx's `GRPCS` backends): the endpoints are pod IPs, which
//! certificates do not name.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Body, Error, Held, Lease, Open, Settings};
use crate::clock::{nanos, now_nanos};
use crate::endpoint::Endpoint;
use crate::metrics::Metrics;

/// Streams a connection carries before another one is opened.
pub const STREAMS_PER_CONNECTION: usize = 100;
/// Most connections to one endpoint.
pub const CONNECTIONS_PER_ENDPOINT: usize = 4;
/// Attempts at sending a request whose connection closed before it went out.
const SEND_TRIES: usize = 3;
/// Receive window of each upstream stream: how much of a response the upstream may
/// send ahead of the client reading it.
pub const STREAM_WINDOW: u32 = 1024 * 1024;
/// Receive window of each upstream connection: room for every one of its
/// [`STREAMS_PER_CONNECTION`] streams' full window, so streams whose clients read
/// slowly (or not at all) cannot use up the connection's window and stall the other
/// calls on it (hyper's defaults, 5 MiB for the connection and 2 MiB per stream, let
/// three such streams do that). Memory: what the proxy may hold of responses its
/// clients have not taken is at most [`STREAM_WINDOW`] per stream, so 100 MiB for a
/// connection whose every stream's client stopped reading (4 connections per
/// endpoint). Past [`STREAMS_PER_CONNECTION`] streams on a connection (all of an
/// endpoint's connections full), slow streams could again use it up.
pub const CONNECTION_WINDOW: u32 = STREAMS_PER_CONNECTION as u32 * STREAM_WINDOW;

/// The shared HTTP/2 connections to one endpoint.
#[derive(Default)]
pub struct Pool {
    conns: Mutex<Vec<Shared>>,
    /// Held while connecting (one connect at a time per endpoint).
    connecting: tokio::sync::Mutex<()>,
    /// Connects started, and the last one's failure: requests that waited for a connect
    /// that failed get its error.
    connects: AtomicU64,
    failed: Mutex<Option<(u64, std::io::ErrorKind, String)>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("h2::Pool")
            .field("connections", &self.conns.lock().len())
            .finish()
    }
}

struct Shared {
    tx: SendRequest<Body>,
    state: Arc<ConnState>,
}

struct ConnState {
    streams: AtomicUsize,
    /// Clock nanos after which the connection, without streams, is closed.
    idle_until: AtomicU64,
    idle_timeout: u64,
}

/// A stream open on a shared connection: counted until dropped (when the response
/// body has ended, or was dropped).
pub struct Stream {
    state: Arc<ConnState>,
    gauge: Gauge,
}

impl Stream {
    fn open(state: &Arc<ConnState>, metrics: &Metrics) -> Stream {
        state.streams.fetch_add(1, Ordering::Relaxed);
        metrics.upstream_h2_streams.inc();
        Stream {
            state: state.clone(),
            gauge: metrics.upstream_h2_streams.clone(),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let s = &self.state;
        s.idle_until.store(
            now_nanos().saturating_add(s.idle_timeout),
            Ordering::Relaxed,
        );
        s.streams.fetch_sub(1, Ordering::Relaxed);
        self.gauge.dec();
    }
}

/// A connection taken for one request, its stream counted.
pub struct Checkout {
    tx: SendRequest<Body>,
    stream: Stream,
}

impl Pool {
    /// A stream on the least busy open connection, unless all are full and another
    /// may be opened.
    fn pick(&self, metrics: &Metrics) -> Option<Checkout> {
        let mut conns = self.conns.lock();
        conns.retain(|c| !c.tx.is_closed());
        let n = conns.len();
        let best = conns
            .iter()
            .min_by_key(|c| c.state.streams.load(Ordering::Relaxed))?;
        let busy = best.state.streams.load(Ordering::Relaxed);
        (busy < STREAMS_PER_CONNECTION || n >= CONNECTIONS_PER_ENDPOINT).then(|| Checkout {
            tx: best.tx.clone(),
            stream: Stream::open(&best.state, metrics),
        })
    }

    /// A connection for one request to `ep`: a shared one, or a new one (`tls`: over
    /// TLS with ALPN `h2`).
    pub async fn checkout(
        &self,
        ep: &Endpoint,
        tls: bool,
        settings: Settings,
        metrics: &Metrics,
    ) -> Result<Checkout, Error> {
        if let Some(c) = self.pick(metrics) {
            return Ok(c);
        }
        let seen = self.connects.load(Ordering::Acquire);
        let _one = self.connecting.lock().await;
        if let Some(c) = self.pick(metrics) {
            return Ok(c);
        }
        // A connect finished while this request waited, and failed: its answer is ours.
        let attempt = self.connects.load(Ordering::Acquire);
        if attempt != seen
            && let Some((n, kind, msg)) = &*self.failed.lock()
            && *n == attempt
        {
            return Err(Error::Connect(std::io::Error::new(*kind, msg.clone())));
        }
        let attempt = self.connects.fetch_add(1, Ordering::AcqRel) + 1;
        let tx = match connect(ep.addr, tls, settings.connect_timeout, metrics).await {
            Ok(tx) => tx,
            Err(e) => {
                let kind = match &e {
                    Error::Connect(io) => io.kind(),
                    _ => std::io::ErrorKind::TimedOut,
                };
                *self.failed.lock() = Some((attempt, kind, e.to_string()));
                return Err(e);
            }
        };
        let state = Arc::new(ConnState {
            streams: AtomicUsize::new(0),
            idle_until: AtomicU64::new(u64::MAX),
            idle_timeout: nanos(settings.idle_timeout),
        });
        let c = Checkout {
            tx: tx.clone(),
            stream: Stream::open(&state, metrics),
        };
        self.conns.lock().push(Shared { tx, state });
        Ok(c)
    }

    /// Closes connections without streams idle past their timeout, and those the
    /// upstream closed.
    pub fn reap(&self, now: u64) {
        self.conns.lock().retain(|c| {
            !c.tx.is_closed()
                && (c.state.streams.load(Ordering::Relaxed) > 0
                    || c.state.idle_until.load(Ordering::Relaxed) > now)
        });
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.lock().len()
    }
}

/// Sends `req` (origin-form URI, Host set) to `ep` on `c`, as `https` when `tls`. A
/// request that did not go out because its connection had closed goes out on another.
pub async fn send(
    ep: &Endpoint,
    mut c: Checkout,
    mut req: Request<Body>,
    tls: bool,
    settings: Settings,
    metrics: &Metrics,
) -> Result<(Response<Incoming>, Lease), Error> {
    absolute(&mut req, ep.addr, tls);
    for _ in 1..SEND_TRIES {
        match c.tx.try_send_request(req).await {
            Ok(resp) => return Ok((resp, Lease(Held::H2(c.stream)))),
            Err(mut e) => match e.take_message() {
                Some(r) => req = r,
                None => return Err(failed(e.into_error())),
            },
        }
        drop(c);
        c = ep.pool.h2.checkout(ep, tls, settings, metrics).await?;
    }
    let resp = c.tx.send_request(req).await.map_err(failed)?;
    Ok((resp, Lease(Held::H2(c.stream))))
}

/// What a request's failure on an HTTP/2 connection means: whether the upstream
/// processed it or not (RFC 9113 §8.7), from h2's error under hyper's.
fn failed(e: hyper::Error) -> Error {
    let h2 = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<h2::Error>());
    match h2 {
        // The upstream reset the stream with REFUSED_STREAM: it did nothing with it.
        Some(h)
            if h.is_reset() && h.is_remote() && h.reason() == Some(h2::Reason::REFUSED_STREAM) =>
        {
            Error::Refused(e)
        }
        // A GOAWAY from the upstream fails only the streams above its last stream id
        // (those it did not process), and the requests made after it, which never went
        // out; streams it covers that were cut later fail with an I/O error.
        Some(h) if h.is_go_away() && h.is_remote() => Error::GoneAway(e),
        Some(_) => Error::Http(e),
        // hyper's connection task ended (on a GOAWAY) with the request still waiting
        // for the upstream's concurrent-stream limit to let its stream open: dropped
        // unsent, and reported only as its dispatch gone (not a client body error).
        None if e.is_user() && e.to_string() == "dispatch task is gone" => Error::GoneAway(e),
        None => Error::Http(e),
    }
}

/// HTTP/2 carries the target as `:scheme`, `:authority` and `:path`: the authority is
/// the request's Host (the endpoint's address when it has none that fits).
fn absolute(req: &mut Request<Body>, addr: SocketAddr, tls: bool) {
    let authority = req
        .headers_mut()
        .remove(HOST)
        .and_then(|h| Authority::try_from(h.as_bytes()).ok())
        .or_else(|| Authority::try_from(addr.to_string()).ok());
    let mut parts = std::mem::take(req.uri_mut()).into_parts();
    parts.scheme = Some(if tls { Scheme::HTTPS } else { Scheme::HTTP });
    parts.authority = authority;
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(PathAndQuery::from_static("/"));
    }
    if let Ok(u) = Uri::from_parts(parts) {
        *req.uri_mut() = u;
    }
    *req.version_mut() = Version::HTTP_2;
}

/// A new HTTP/2 connection to `addr` (over TLS when `tls`), not shared.
pub(crate) async fn connect(
    addr: SocketAddr,
    tls: bool,
    timeout: Duration,
    metrics: &Metrics,
) -> Result<SendRequest<Body>, Error> {
    // With TCP keepalive: a shared connection outlives any one request, and a backend
    // gone without a reset must not keep it (see `keepalive` for why not HTTP/2 PINGs).
    let tcp = super::tcp_kept_alive(addr, timeout, metrics).await?;
    if !tls {
        return handshake(tcp, addr, metrics).await;
    }
    let connector =
        tokio_rustls::TlsConnector::from(client_config().map_err(|e| {
            Error::Connect(std::io::Error::other(format!("TLS client setup: {e}")))
        })?);
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let stream = match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
        Ok(Ok(s)) => s,
        // Nothing reached the application: as safe to retry elsewhere as a refused
        // connect.
        Ok(Err(e)) => {
            metrics.upstream_connect_errors.inc();
            return Err(Error::Connect(std::io::Error::new(
                e.kind(),
                format!("TLS handshake failed: {e}"),
            )));
        }
        Err(_) => {
            metrics.upstream_connect_errors.inc();
            return Err(Error::ConnectTimeout(timeout));
        }
    };
    handshake(stream, addr, metrics).await
}

async fn handshake<T>(
    io: T,
    addr: SocketAddr,
    metrics: &Metrics,
) -> Result<SendRequest<Body>, Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake(TokioIo::new(io))
        .await
        .map_err(Error::Http)?;
    metrics.upstream_connects.inc();
    metrics.upstream_open.inc();
    metrics.upstream_h2_open.inc();
    let open = (
        Open(metrics.upstream_open.clone()),
        Open(metrics.upstream_h2_open.clone()),
    );
    tokio::spawn(async move {
        let _open = open;
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, %addr, "upstream HTTP/2 connection ended with an error");
        }
    });
    Ok(tx)
}

/// The TLS client configuration for h2 upstreams (ALPN `h2`, certificates accepted
/// unverified: see the module docs), built once.
fn client_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(CONFIG.get_or_init(|| Arc::new(cfg)).clone())
}

/// Accepts any certificate; handshake signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
