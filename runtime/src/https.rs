//! Serving HTTPS the same way in every server (the deletion-protection webhook, the
//! search API, kubesim): a rustls config from PEM files with the ring provider and h2 +
//! http/1.1, an accept loop with a bounded TLS handshake that stops, closing open
//! connections, when `stop` is cancelled, and a generated CA ([`Authority`]) for servers
//! that make their own serving certificate.
//!
//! Against clients that hold connections without using them ([`Limits`]): a connection
//! must send a request head within [`HEADER_READ_TIMEOUT`] (its first one, whichever
//! protocol, and each next one on HTTP/1.1), one with no request open is closed after
//! [`IDLE_TIMEOUT`], HTTP/2 peers that stop answering PINGs are dropped, and at most
//! [`MAX_CONNECTIONS`] are served at once: more are not accepted until one ends (they
//! wait in the kernel's listen queue rather than being closed, so a burst just past the
//! cap is served late instead of failing).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A generated certificate authority that issues serving (and other) certificates.
pub struct Authority {
    /// The CA certificate (PEM), for kubeconfigs and clients.
    pub ca_pem: String,
    /// The CA certificate (DER).
    pub ca_der: CertificateDer<'static>,
    /// What signs the certificates it issues.
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A certificate and its key.
pub struct Issued {
    /// Certificate (PEM).
    pub cert_pem: String,
    /// Certificate (DER).
    pub cert_der: CertificateDer<'static>,
    /// PKCS#8 private key (PEM).
    pub key_pem: String,
    /// PKCS#8 private key (DER).
    pub key_der: Vec<u8>,
}

impl Authority {
    /// A fresh CA with common name `cn`.
    pub fn generate(cn: &str) -> Result<Authority, rcgen::Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyUsagePurpose};
        let key = rcgen::KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            ca_pem: cert.pem(),
            ca_der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// A serving certificate with common name `cn`, valid for `sans` (DNS names or IP
    /// addresses).
    pub fn serving(&self, cn: &str, sans: &[String]) -> Result<Issued, rcgen::Error> {
        self.issue(cn, sans, rcgen::ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with common name `cn` (e.g. the front proxy's, or a user's).
    pub fn client(&self, cn: &str) -> Result<Issued, rcgen::Error> {
        self.issue(cn, &[], rcgen::ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(
        &self,
        cn: &str,
        sans: &[String],
        usage: rcgen::ExtendedKeyUsagePurpose,
    ) -> Result<Issued, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(sans.to_vec())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        })
    }
}

/// Put in a request's extensions by [`serve`] when the connection presented a client
/// certificate, which the config's client verifier (see [`verify_clients`]) checked
/// against its CA during the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedClientCertificate {
    /// The subject's common name of the client's certificate (its first CN), if it has
    /// one: kube-apiserver's front proxy presents `front-proxy-client`.
    pub common_name: Option<String>,
}

impl VerifiedClientCertificate {
    /// From the client's chain (leaf first), as the handshake verified it.
    fn of(leaf: &CertificateDer<'_>) -> VerifiedClientCertificate {
        let common_name = x509_parser::parse_x509_certificate(leaf)
            .ok()
            .and_then(|(_, cert)| {
                let cn = cert.subject().iter_common_name().next()?;
                cn.as_str().ok().map(String::from)
            });
        VerifiedClientCertificate { common_name }
    }
}

/// `cfg` with optional client certificates: a client may present one, and if it does
/// it must chain to a CA in `ca_pem` (else the handshake fails); requests over such a
/// connection carry [`VerifiedClientCertificate`]. `flag` names where the CA came from.
pub fn verify_clients(
    cfg: rustls::ServerConfig,
    ca_pem: &[u8],
    flag: &str,
) -> anyhow::Result<rustls::ServerConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        let c = c.with_context(|| format!("{flag} is not a PEM certificate bundle"))?;
        roots
            .add(c)
            .with_context(|| format!("{flag} holds a certificate that is not a usable CA"))?;
    }
    anyhow::ensure!(!roots.is_empty(), "{flag} holds no PEM certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .with_context(|| format!("{flag}: cannot verify client certificates with it"))?;
    let mut out = rustls::ServerConfig::builder_with_provider(cfg.crypto_provider().clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(cfg.cert_resolver.clone());
    out.alpn_protocols = cfg.alpn_protocols.clone();
    Ok(out)
}

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long a connection may take to send a request head, by default: its first (on
/// either protocol, counted from the end of the TLS handshake) and, on HTTP/1.1, each
/// next one (kube-apiserver's ReadHeaderTimeout is 32 s).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection with no request open for this long is closed, by default
/// (kube-apiserver's HTTP/2 IdleTimeout). A long response (a watch) is a request open.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How often an HTTP/2 connection is PINGed, by default; a PING not answered within
/// [`KEEP_ALIVE_TIMEOUT`] closes it (a peer gone without a FIN, under an open watch).
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// See [`KEEP_ALIVE_INTERVAL`].
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Connections served at once, by default; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 2048;

/// How long a stopping server lets the requests in progress finish, by default (no new
/// connection is accepted meanwhile; HTTP/2 clients are sent GOAWAY): a webhook's
/// AdmissionReview in flight as its Pod is replaced is answered, not cut (kube-apiserver
/// would refuse the write it was for). What is still open then (a watch) is cut.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection closed for idleness may take to say goodbye (HTTP/2 GOAWAY).
const GOODBYE: Duration = Duration::from_secs(5);

/// What [`serve_with`] allows a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// [`IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// [`KEEP_ALIVE_INTERVAL`].
    pub keep_alive_interval: Duration,
    /// [`KEEP_ALIVE_TIMEOUT`].
    pub keep_alive_timeout: Duration,
    /// [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// [`DRAIN_TIMEOUT`].
    pub drain_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            keep_alive_interval: KEEP_ALIVE_INTERVAL,
            keep_alive_timeout: KEEP_ALIVE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            drain_timeout: DRAIN_TIMEOUT,
        }
    }
}

impl Limits {
    /// hyper's builder with these limits, and a timer (without one hyper silently runs
    /// no timeout at all).
    fn builder(&self) -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
        let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        b.http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(self.keep_alive_interval))
            .keep_alive_timeout(self.keep_alive_timeout);
        b
    }
}

/// Whether the server serves as many connections as it may (then connections with no
/// request open are closed), and the telling of it to every connection.
#[derive(Default)]
struct AtCap {
    now: std::sync::atomic::AtomicBool,
    told: tokio::sync::Notify,
}

impl AtCap {
    fn set(&self, full: bool) {
        self.now.store(full, std::sync::atomic::Ordering::SeqCst);
        if full {
            self.told.notify_waiters();
        }
    }

    fn get(&self) -> bool {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What a connection is doing: how many requests are open (a request is open until its
/// response body is done or dropped), since when none is, and whether it sent any.
struct Activity {
    state: parking_lot::Mutex<(usize, Instant, bool)>,
    /// Told when the last open request ends.
    changed: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            state: parking_lot::Mutex::new((0, Instant::now(), false)),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// A request opens; it is open until the guard is dropped.
    fn open(self: &Arc<Self>) -> Open {
        let mut s = self.state.lock();
        s.0 += 1;
        s.2 = true;
        Open(self.clone())
    }

    /// When the connection is to be closed if nothing happens meanwhile (None: a
    /// request is open).
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let (open, since, any) = *self.state.lock();
        let wait = if any {
            limits.idle_timeout
        } else {
            limits.header_read_timeout
        };
        (open == 0).then(|| since + wait)
    }

    /// When the connection is to be closed at the connection cap (None: a request is
    /// open): at once when it has been idle since a request, after [`CAP_GRACE`] when
    /// it has sent none yet (a new connection, the one that took the last place, is
    /// given the time to send its first request).
    fn deadline_at_cap(&self) -> Option<Instant> {
        let (open, since, any) = *self.state.lock();
        (open == 0).then(|| if any { since } else { since + CAP_GRACE })
    }
}

/// How long a new connection may take to send its first request when the server is at
/// its connection cap before it is closed to make room.
const CAP_GRACE: Duration = Duration::from_secs(2);

/// An open request of a connection ([`Activity::open`]).
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.0 -= 1;
        if s.0 == 0 {
            s.1 = Instant::now();
            // (a stored permit if the connection's task is not waiting right now)
            self.0.changed.notify_one();
        }
    }
}

/// A response body that keeps its request open until it is done or dropped.
struct Tracked<B> {
    body: std::pin::Pin<Box<B>>,
    _open: Open,
}

impl<B: hyper::body::Body> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.get_mut().body.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A TLS server config from a PEM certificate chain and key; errors name the flags the
/// files came from (`cert_flag`, `key_flag`).
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_flag: &str,
    key_flag: &str,
) -> anyhow::Result<rustls::ServerConfig> {
    let key = certified_key(cert_pem, key_pem, (cert_flag, key_flag))?;
    config_with(Arc::new(rustls::sign::SingleCertAndKey::from(key)))
}

/// A TLS server config serving the certificate in the PEM files `cert` and `key` (named
/// by `flags` in errors), read again when they change ([`ReloadingCert`]): a bad file
/// at start is an error, a bad one later is logged and the certificate served so far
/// kept.
pub fn reloading_server_config(
    cert: &std::path::Path,
    key: &std::path::Path,
    flags: (&'static str, &'static str),
) -> anyhow::Result<rustls::ServerConfig> {
    let resolver = ReloadingCert::load(cert, key, flags, RELOAD_EVERY)?;
    config_with(Arc::new(resolver))
}

/// A TLS server config (h2 and http/1.1, no client certificates) serving what
/// `resolver` gives.
pub fn config_with(
    resolver: Arc<dyn rustls::server::ResolvesServerCert>,
) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A certificate chain and its key from PEM, checked to fit each other.
fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    (cert_flag, key_flag): (&str, &str),
) -> anyhow::Result<rustls::sign::CertifiedKey> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{cert_flag} is not a PEM certificate"))?;
    anyhow::ensure!(!certs.is_empty(), "{cert_flag} holds no PEM certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .with_context(|| format!("{key_flag} is not a PEM private key"))?;
    rustls::sign::CertifiedKey::from_der(certs, key, &rustls::crypto::ring::default_provider())
        .with_context(|| format!("{key_flag} does not fit {cert_flag}"))
}

/// How often [`ReloadingCert`] reads its files again, at most.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// A serving certificate read from PEM files and read again when they change, so one
/// renewed in place (cert-manager rewriting the Secret a Pod mounts, an operator
/// copying new files over the old) is served from the next TLS handshakes on, with no
/// restart: a server that kept the certificate it started with would serve it past
/// its expiry, and every client (kube-apiserver calling a webhook, kubectl) would fail.
///
/// A handshake reads the two files again (a few KiB) when the last read is `every`
/// old. A changed pair that cannot be read or parsed, or whose key does not fit its
/// certificate (a renewal caught between its two writes), is logged once and the
/// certificate served so far kept; the pair is tried again at its next change.
#[derive(Debug)]
pub struct ReloadingCert {
    files: (std::path::PathBuf, std::path::PathBuf),
    flags: (&'static str, &'static str),
    every: Duration,
    state: parking_lot::Mutex<Served>,
}

#[derive(Debug)]
struct Served {
    key: Arc<rustls::sign::CertifiedKey>,
    /// The files' bytes at the last read (an error's text if it failed).
    seen: Result<[Vec<u8>; 2], String>,
    read_at: Instant,
}

impl ReloadingCert {
    /// Reads `cert` and `key` (named by `flags` in errors) now; again at most every
    /// `every`.
    pub fn load(
        cert: &std::path::Path,
        key: &std::path::Path,
        flags: (&'static str, &'static str),
        every: Duration,
    ) -> anyhow::Result<ReloadingCert> {
        let files = (cert.to_path_buf(), key.to_path_buf());
        let pems = read_files(&files, flags)?;
        let key = certified_key(&pems[0], &pems[1], flags)?;
        Ok(ReloadingCert {
            files,
            flags,
            every,
            state: parking_lot::Mutex::new(Served {
                key: Arc::new(key),
                seen: Ok(pems),
                read_at: Instant::now(),
            }),
        })
    }

    /// The certificate to serve, read again first if it is time and the files changed.
    fn current(&self) -> Arc<rustls::sign::CertifiedKey> {
        let mut s = self.state.lock();
        if s.read_at.elapsed() < self.every {
            return s.key.clone();
        }
        s.read_at = Instant::now();
        let now = read_files(&self.files, self.flags).map_err(|e| format!("{e:#}"));
        if now == s.seen {
            return s.key.clone();
        }
        let used = now
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
            .and_then(|[c, k]| certified_key(c, k, self.flags));
        match used {
            Ok(key) => {
                s.key = Arc::new(key);
                tracing::info!(cert = %self.files.0.display(), "the serving certificate changed on disk: serving the new one");
            }
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                "the serving certificate changed on disk but cannot be used; still serving the one read before"
            ),
        }
        s.seen = now;
        s.key.clone()
    }
}

impl rustls::server::ResolvesServerCert for ReloadingCert {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current())
    }
}

fn read_files(
    (cert, key): &(std::path::PathBuf, std::path::PathBuf),
    (cert_flag, key_flag): (&str, &str),
) -> anyhow::Result<[Vec<u8>; 2]> {
    let read = |p: &std::path::Path, flag: &str| {
        std::fs::read(p).with_context(|| format!("reading the {flag} file {}", p.display()))
    };
    Ok([read(cert, cert_flag)?, read(key, key_flag)?])
}

/// A response body that is whole or streamed; a streamed one may fail, which makes
/// the server drop the connection (what it still holds for the client with it).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A whole response body.
pub fn full(b: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(b.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// A streamed `application/json` response (a watch: one JSON frame per chunk, as
/// kube-apiserver sends them), ending when every sender of `rx` is gone.
pub fn json_stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response<Body> {
    json_stream_until(rx, CancellationToken::new())
}

/// [`json_stream`], cut off when `abort` is cancelled: the frames not yet sent are
/// dropped and the response fails, so the server drops the connection (a client that
/// stopped reading would otherwise keep them, and it, for as long as it stays
/// connected).
pub fn json_stream_until(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    abort: CancellationToken,
) -> Response<Body> {
    use futures::StreamExt;
    let frames =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .map(|b| Ok(Frame::data(b)))
            // one wait on the token for the whole response, not one per frame
            .take_until(abort.clone().cancelled_owned());
    let cut = futures::stream::once(async move { abort.is_cancelled() }).filter_map(|cut| {
        std::future::ready(cut.then(|| {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))
        }))
    });
    let stream = frames.chain(cut);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// Serves `handler` over TLS on `listener` until `stop`, with the default [`Limits`].
/// `what` names the server in log lines.
pub async fn serve<H, F, B>(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    what: &'static str,
    stop: CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_with(listener, tls, what, Limits::default(), stop, handler).await
}

/// [`serve`] with these `limits`.
pub async fn serve_with<H, F, B>(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    what: &'static str,
    limits: Limits,
    stop: CancellationToken,
    handler: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let builder = Arc::new(limits.builder());
    let max = limits.max_connections.max(1);
    let permits = Arc::new(tokio::sync::Semaphore::new(max));
    let full = Arc::new(AtCap::default());
    let mut warned: Option<Instant> = None;
    loop {
        // a place first: at the cap, every connection with no request open is closed
        // (a client that reconnects loses nothing), so that connections kept open and
        // idle (a slowloris, or one asking /healthz every minute) cannot keep new ones,
        // kubelet's probes among them, out; past the cap while every connection has a
        // request open, new ones wait in the listen queue
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => break,
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                    warned = Some(Instant::now());
                    tracing::warn!(
                        server = what,
                        max,
                        "serving as many connections as allowed: idle ones are closed, and more wait to be accepted until one ends"
                    );
                }
                full.set(true);
                let p = tokio::select! {
                    p = permits.clone().acquire_owned() => p,
                    _ = stop.cancelled() => break,
                };
                full.set(false);
                match p {
                    Ok(p) => p,
                    Err(_) => break,
                }
            }
        };
        let Some((tcp, peer)) = crate::net::accept(&listener, &stop, what).await else {
            break;
        };
        let (acceptor, builder, stop, handler, full) = (
            acceptor.clone(),
            builder.clone(),
            stop.clone(),
            handler.clone(),
            full.clone(),
        );
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    return tracing::debug!(server = what, %peer, error = %e, "TLS handshake failed");
                }
                Err(_) => return tracing::debug!(server = what, %peer, "TLS handshake timed out"),
            };
            let verified = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(VerifiedClientCertificate::of);
            let activity = Activity::new();
            let svc = {
                let activity = activity.clone();
                service_fn(move |mut req: Request<Incoming>| {
                    let open = activity.open();
                    if let Some(v) = &verified {
                        req.extensions_mut().insert(v.clone());
                    }
                    let answer = handler(req, peer);
                    async move {
                        let r = answer.await.map(|body| Tracked {
                            body: Box::pin(body),
                            _open: open,
                        });
                        Ok::<_, Infallible>(r)
                    }
                })
            };
            let conn = builder.serve_connection(TokioIo::new(tls), svc);
            tokio::pin!(conn);
            'serving: loop {
                // (told of the cap before it is looked at: no telling is missed)
                let filled = full.told.notified();
                tokio::pin!(filled);
                filled.as_mut().enable();
                // no request open: the connection has until its deadline to send one,
                // none at the cap
                let due = |limits: &Limits| {
                    let normal = activity.deadline(limits)?;
                    Some(match activity.deadline_at_cap() {
                        Some(at_cap) if full.get() => normal.min(at_cap),
                        _ => normal,
                    })
                };
                let deadline = due(&limits).unwrap_or_else(|| Instant::now() + limits.idle_timeout);
                tokio::select! {
                    _ = conn.as_mut() => return,
                    _ = stop.cancelled() => break 'serving,
                    // a request opened or ended: a new deadline
                    _ = activity.changed.notified() => continue,
                    _ = &mut filled => {}
                    _ = tokio::time::sleep_until(deadline.into()) => {}
                }
                if due(&limits).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!(server = what, %peer, "closing a connection with no request open");
                    conn.as_mut().graceful_shutdown();
                    // HTTP/2's GOAWAY still lets in a stream the client sent meanwhile:
                    // the connection is dropped after GOODBYE only while no request is
                    // open, a request let in is served to its end
                    loop {
                        tokio::select! {
                            _ = conn.as_mut() => return,
                            _ = stop.cancelled() => break 'serving,
                            _ = tokio::time::sleep(GOODBYE) => {}
                        }
                        if activity.deadline(&limits).is_some() {
                            return;
                        }
                    }
                }
            }
            // stopping: the requests in progress may finish, within the drain time
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.drain_timeout, conn.as_mut()).await;
        });
    }
    // every connection holds a permit until it ends: all of them back, all are done
    drop(listener);
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.drain_timeout, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::info!(
            server = what,
            "stopped with requests still open past the drain time: they were cut"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Pki {
        ca_pem: String,
        server_cert_pem: String,
        server_key_pem: String,
    }

    fn pki() -> Pki {
        let ca = Authority::generate("test-ca").unwrap();
        let s = ca.serving("test", &["127.0.0.1".into()]).unwrap();
        Pki {
            ca_pem: ca.ca_pem,
            server_cert_pem: s.cert_pem,
            server_key_pem: s.key_pem,
        }
    }

    #[test]
    fn bad_certificates_and_keys_name_their_flags() {
        let p = pki();
        let (cert, key) = (p.server_cert_pem.as_bytes(), p.server_key_pem.as_bytes());
        assert!(server_config(cert, key, "--tls-cert", "--tls-key").is_ok());
        let cases: [(&[u8], &[u8], &str); 3] = [
            (b"junk", key, "--tls-cert holds no PEM certificate"),
            (cert, b"junk", "--tls-key is not a PEM private key"),
            (
                p.ca_pem.as_bytes(),
                key,
                "--tls-key does not fit --tls-cert",
            ),
        ];
        for (c, k, want) in cases {
            let e = server_config(c, k, "--tls-cert", "--tls-key").unwrap_err();
            assert!(format!("{e:#}").contains(want), "{e:#}");
        }
    }

    /// The leaf certificate a TLS handshake with `addr` is given.
    async fn served_leaf(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .unwrap();
        s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    #[tokio::test]
    async fn a_certificate_renewed_on_disk_is_served_without_a_restart() {
        let ca = Authority::generate("test-ca").unwrap();
        let issue = |cn: &str| ca.serving(cn, &["127.0.0.1".into()]).unwrap();
        let der = |i: &Issued| i.cert_der.to_vec();
        let (first, second) = (issue("first"), issue("second"));
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &first.cert_pem).unwrap();
        std::fs::write(&key, &first.key_pem).unwrap();
        let flags = ("--tls-cert", "--tls-key");
        // a file that cannot be used at start is an error that names its flag
        let missing = dir.path().join("none.crt");
        let e = ReloadingCert::load(&missing, &key, flags, Duration::ZERO).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("reading the --tls-cert file"),
            "{e:#}"
        );
        let resolver = ReloadingCert::load(&cert, &key, flags, Duration::ZERO).unwrap();
        let tls = config_with(Arc::new(resolver)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, tls, "test", stop.clone(), |_, _| async {
            Response::new(Full::new(Bytes::from_static(b"ok")))
        }));
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&first));
        // half a renewal (the certificate written, not yet its key): the old pair stays
        std::fs::write(&cert, &second.cert_pem).unwrap();
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&first));
        // the whole renewal: the new certificate, on the next handshake
        std::fs::write(&key, &second.key_pem).unwrap();
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&second));
        // a file broken or gone keeps what is served
        std::fs::write(&cert, "junk").unwrap();
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&second));
        std::fs::remove_file(&cert).unwrap();
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&second));
        // and a good pair again is taken
        std::fs::write(&cert, &first.cert_pem).unwrap();
        std::fs::write(&key, &first.key_pem).unwrap();
        assert_eq!(served_leaf(addr, &ca.ca_pem).await, der(&first));
        stop.cancel();
    }

    /// One HTTP/1.1 GET over TLS trusting `ca_pem`; the raw response.
    async fn get(addr: SocketAddr, ca_pem: &str, path: &str) -> String {
        get_as(addr, ca_pem, path, None)
            .await
            .expect("TLS handshake")
    }

    /// One GET presenting `client` (a certificate and key) if given; Err when the
    /// handshake fails.
    async fn get_as(
        addr: SocketAddr,
        ca_pem: &str,
        path: &str,
        client: Option<&Issued>,
    ) -> std::io::Result<String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
        let cfg = match client {
            Some(c) => cfg
                .with_client_auth_cert(
                    vec![c.cert_der.clone()],
                    PrivateKeyDer::try_from(c.key_der.clone()).unwrap(),
                )
                .unwrap(),
            None => cfg.with_no_client_auth(),
        };
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    #[tokio::test]
    async fn client_certificates_of_the_given_ca_are_marked_verified() {
        let p = pki();
        let front = Authority::generate("front-proxy-ca").unwrap();
        let other = Authority::generate("someone-else").unwrap();
        let tls = server_config(
            p.server_cert_pem.as_bytes(),
            p.server_key_pem.as_bytes(),
            "--cert",
            "--key",
        )
        .unwrap();
        let tls =
            verify_clients(tls, front.ca_pem.as_bytes(), "--requestheader-client-ca").unwrap();
        let e = verify_clients(
            server_config(
                p.server_cert_pem.as_bytes(),
                p.server_key_pem.as_bytes(),
                "--cert",
                "--key",
            )
            .unwrap(),
            b"junk",
            "--requestheader-client-ca",
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("--requestheader-client-ca holds no PEM certificate"),
            "{e:#}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            tls,
            "test",
            stop.clone(),
            |req, _| async move {
                let v = req.extensions().get::<VerifiedClientCertificate>();
                let said = match v {
                    Some(v) => format!("verified={}", v.common_name.as_deref().unwrap_or("-")),
                    None => "verified=false".to_string(),
                };
                Response::new(Full::new(Bytes::from(said)))
            },
        ));
        let proxy = front.client("front-proxy-client").unwrap();
        let r = get_as(addr, &p.ca_pem, "/", Some(&proxy)).await.unwrap();
        assert!(r.ends_with("verified=front-proxy-client"), "{r}");
        let r = get_as(addr, &p.ca_pem, "/", None).await.unwrap();
        assert!(r.ends_with("verified=false"), "{r}");
        // a certificate from another CA does not get in at all
        let stranger = other.client("mallory").unwrap();
        let r = get_as(addr, &p.ca_pem, "/", Some(&stranger)).await;
        assert!(
            r.is_err() || r.as_ref().is_ok_and(|s| s.is_empty()),
            "{r:?}"
        );
        stop.cancel();
    }

    /// A TLS client of `addr` offering `alpn`, handshake done.
    async fn connect(
        addr: SocketAddr,
        ca_pem: &str,
        alpn: &[&[u8]],
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("TLS handshake")
    }

    /// A server answering "ok" (and, on /slow, a body sent over 1.5 s) with `limits`;
    /// its address, CA and stop.
    async fn limited(limits: Limits) -> (SocketAddr, String, CancellationToken) {
        let p = pki();
        let tls = server_config(
            p.server_cert_pem.as_bytes(),
            p.server_key_pem.as_bytes(),
            "--cert",
            "--key",
        )
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve_with(
            listener,
            tls,
            "test",
            limits,
            stop.clone(),
            |req, _| async move {
                if req.uri().path() == "/slow" {
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    tokio::spawn(async move {
                        for part in ["slow ", "but ", "alive"] {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            let _ = tx.send(Bytes::from(part)).await;
                        }
                    });
                    return json_stream(rx);
                }
                Response::new(full("ok"))
            },
        ));
        (addr, p.ca_pem, stop)
    }

    /// Reads until the server closes the connection; how long that took (None: it
    /// was still open after `within`).
    async fn closed_after<S: tokio::io::AsyncRead + Unpin>(
        s: &mut S,
        within: Duration,
    ) -> Option<Duration> {
        let started = std::time::Instant::now();
        let mut buf = [0u8; 1024];
        tokio::time::timeout(within, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .ok()
        .map(|()| started.elapsed())
    }

    /// Slowloris: a client that completes TLS and then sends nothing (on HTTP/1.1, on
    /// h2 by ALPN, or naming no protocol) is closed once the header-read timeout has
    /// passed, not held for ever.
    #[tokio::test]
    async fn a_connection_that_sends_nothing_after_tls_is_closed() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(500),
            ..Limits::default()
        };
        let (addr, ca, stop) = limited(limits).await;
        for alpn in [&[b"http/1.1".as_slice()][..], &[b"h2"], &[]] {
            let mut silent = connect(addr, &ca, alpn).await;
            let took = closed_after(&mut silent, Duration::from_secs(10)).await;
            let took = took.unwrap_or_else(|| panic!("{alpn:?}: still open after 10 s"));
            assert!(
                took >= Duration::from_millis(400),
                "{alpn:?}: closed too early, after {took:?}"
            );
            assert!(
                took < Duration::from_secs(5),
                "{alpn:?}: closed after {took:?}"
            );
        }
        // a request head that never ends is cut off as well
        let mut slow = connect(addr, &ca, &[b"http/1.1"]).await;
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        assert!(
            closed_after(&mut slow, Duration::from_secs(10))
                .await
                .is_some()
        );
        // and a client that asks in time is served
        let r = get(addr, &ca, "/").await;
        assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("ok"), "{r}");
        stop.cancel();
    }

    /// An HTTP/2 connection is closed once no request has been open on it for the idle
    /// timeout; a response still streaming keeps it open.
    #[tokio::test]
    async fn an_idle_http2_connection_is_closed_but_not_one_streaming() {
        let limits = Limits {
            idle_timeout: Duration::from_millis(800),
            ..Limits::default()
        };
        let (addr, ca, stop) = limited(limits).await;
        let tls = connect(addr, &ca, &[b"h2"]).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .unwrap();
        let conn = tokio::spawn(conn);
        let req = |path: &str| {
            Request::get(format!("https://127.0.0.1{path}"))
                .body(http_body_util::Empty::<Bytes>::new())
                .unwrap()
        };
        // 1.5 s of streaming, longer than the idle timeout
        let r = send.send_request(req("/slow")).await.unwrap();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"slow but alive");
        let r = send.send_request(req("/")).await.unwrap();
        assert_eq!(r.status(), 200);
        drop(r);
        let started = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .expect("the idle connection is closed")
            .unwrap()
            .ok();
        assert!(
            started.elapsed() >= Duration::from_millis(500),
            "closed after {:?}",
            started.elapsed()
        );
        stop.cancel();
    }

    /// A stopping server lets a request in progress finish (within the drain time),
    /// takes no new connection, and cuts what is still open when the drain time is up.
    #[tokio::test]
    async fn stopping_lets_requests_in_progress_finish_within_the_drain_time() {
        let p = pki();
        let tls = || {
            server_config(
                p.server_cert_pem.as_bytes(),
                p.server_key_pem.as_bytes(),
                "--cert",
                "--key",
            )
            .unwrap()
        };
        let start = |drain: Duration| async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = CancellationToken::new();
            let limits = Limits {
                drain_timeout: drain,
                ..Limits::default()
            };
            let served = tokio::spawn(serve_with(
                listener,
                tls(),
                "test",
                limits,
                stop.clone(),
                |req, _| async move {
                    // "/forever" never ends; "/slow" ends after 1.5 s
                    let parts = if req.uri().path() == "/forever" {
                        1000
                    } else {
                        3
                    };
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    tokio::spawn(async move {
                        for part in ["slow ", "but ", "alive"].iter().cycle().take(parts) {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            let _ = tx.send(Bytes::from(*part)).await;
                        }
                    });
                    json_stream(rx)
                },
            ));
            (addr, stop, served)
        };
        let (addr, stop, served) = start(DRAIN_TIMEOUT).await;
        let ca = p.ca_pem.clone();
        let slow = tokio::spawn(async move { get(addr, &ca, "/slow").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.cancel();
        let r = tokio::time::timeout(Duration::from_secs(4), slow)
            .await
            .expect("answered within the drain time")
            .unwrap();
        // the whole chunked body, its last chunk included
        assert!(r.contains("alive") && r.ends_with("0\r\n\r\n"), "{r}");
        tokio::time::timeout(Duration::from_secs(2), served)
            .await
            .expect("the server ends once its requests are done")
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "no connection is accepted once stopped"
        );
        // past the drain time, what is open is cut and the server ends
        let (addr, stop, served) = start(Duration::from_millis(800)).await;
        let ca = p.ca_pem.clone();
        let forever = tokio::spawn(async move { get(addr, &ca, "/forever").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopped = Instant::now();
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(3), served)
            .await
            .expect("the server ends at the drain time")
            .unwrap();
        assert!(
            stopped.elapsed() >= Duration::from_millis(700),
            "{:?}",
            stopped.elapsed()
        );
        let r = tokio::time::timeout(Duration::from_secs(3), forever)
            .await
            .expect("the open request was cut")
            .unwrap();
        assert!(!r.ends_with("0\r\n\r\n"), "the body was not ended: {r}");
    }

    /// At `max_connections`, connections with no request open are closed to make room;
    /// while every one has a request open, a new connection waits until one ends.
    #[tokio::test]
    async fn at_the_cap_idle_connections_make_room_and_busy_ones_are_waited_for() {
        let limits = Limits {
            max_connections: 1,
            ..Limits::default()
        };
        let (addr, ca, stop) = limited(limits).await;
        // an idle connection (TLS, then nothing) is closed for a new one
        let mut idle = connect(addr, &ca, &[b"http/1.1"]).await;
        let r = tokio::time::timeout(Duration::from_secs(10), get(addr, &ca, "/"))
            .await
            .expect("served: the idle connection made room");
        assert!(r.ends_with("ok"), "{r}");
        let mut rest = Vec::new();
        // (an EOF or a reset: either way the server let go of it)
        let _ = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut rest))
            .await
            .expect("the idle connection was closed");
        // a connection with a request open (a slow stream) is not: the next one waits
        let busy = tokio::spawn({
            let ca = ca.clone();
            async move { get(addr, &ca, "/slow").await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let next = tokio::spawn({
            let ca = ca.clone();
            async move { get(addr, &ca, "/").await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !next.is_finished(),
            "served past the cap while the only connection is busy"
        );
        let slow = busy.await.unwrap();
        // (chunked: each part on its own line)
        assert!(
            ["slow ", "but ", "alive\r\n0\r\n"]
                .iter()
                .all(|p| slow.contains(p)),
            "the busy one was cut: {slow}"
        );
        let r = tokio::time::timeout(Duration::from_secs(10), next)
            .await
            .expect("served once the busy connection ended")
            .unwrap();
        assert!(r.ends_with("ok"), "{r}");
        stop.cancel();
    }

    #[tokio::test]
    async fn serves_the_handler_over_tls_until_stopped() {
        let p = pki();
        let tls = server_config(
            p.server_cert_pem.as_bytes(),
            p.server_key_pem.as_bytes(),
            "--cert",
            "--key",
        )
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            tls,
            "test",
            stop.clone(),
            |req, peer| async move {
                Response::new(Full::new(Bytes::from(format!(
                    "{} from {}",
                    req.uri().path(),
                    peer.ip()
                ))))
            },
        ));
        let r = get(addr, &p.ca_pem, "/hello").await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert!(r.ends_with("/hello from 127.0.0.1"), "{r}");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server stops when cancelled")
            .unwrap();
    }
}
