//! Serving HTTPS the same way in every server (the deletion-protection webhook, the
//! search API, kubesim): a rustls config from PEM files with the ring provider and h2 +
//! http/1.1, an accept loop with a bounded TLS handshake that stops, closing open
//! connections, when `stop` is cancelled, and a generated CA ([`Authority`]) for servers
//! that make their own serving certificate.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
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

/// A TLS server config from a PEM certificate chain and key; errors name the flags the
/// files came from (`cert_flag`, `key_flag`).
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_flag: &str,
    key_flag: &str,
) -> anyhow::Result<rustls::ServerConfig> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{cert_flag} is not a PEM certificate"))?;
    anyhow::ensure!(!certs.is_empty(), "{cert_flag} holds no PEM certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .with_context(|| format!("{key_flag} is not a PEM private key"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .with_context(|| format!("{key_flag} does not fit {cert_flag}"))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
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

/// Serves `handler` over TLS on `listener` until `stop`. `what` names the server in log
/// lines.
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
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
        TokioExecutor::new(),
    ));
    while let Some((tcp, peer)) = crate::net::accept(&listener, &stop, what).await {
        let (acceptor, builder, stop, handler) = (
            acceptor.clone(),
            builder.clone(),
            stop.clone(),
            handler.clone(),
        );
        tokio::spawn(async move {
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
            let svc = service_fn(move |mut req: Request<Incoming>| {
                if let Some(v) = &verified {
                    req.extensions_mut().insert(v.clone());
                }
                let answer = handler(req, peer);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let conn = builder.serve_connection(TokioIo::new(tls), svc);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
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
