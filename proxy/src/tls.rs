//! TLS termination (MCI-6): certificates from the MCI `tls[]` Secrets, chosen by SNI
//! (exact host, then `*.domain` wildcard, then the default certificate) through a
//! resolver over an arc-swapped map, so a changed Secret is served without restart.
//! rustls with the ring provider only; ALPN `h2` and `http/1.1`.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use k8s_openapi::api::core::v1::Secret;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use causeway_crds::mci::lease::{self, TlsProblem, TlsProblems};

use crate::table::TlsEntry;

/// What is wrong with a certificate or key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// No certificate in the PEM.
    #[error("no PEM certificate found")]
    NoCertificate,
    /// A certificate did not parse.
    #[error("bad PEM certificate: {0}")]
    BadCertificate(rustls_pki_types::pem::Error),
    /// The key did not parse.
    #[error("bad PEM private key: {0}")]
    BadKey(rustls_pki_types::pem::Error),
    /// The key type is not supported.
    #[error("unsupported private key: {0}")]
    UnsupportedKey(rustls::Error),
    /// The key does not match the certificate.
    #[error("the private key does not match the certificate: {0}")]
    Mismatch(rustls::Error),
    /// Self-signed certificate generation failed.
    #[error("generating a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls configuration.
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

/// A certificate and key from PEM.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(TlsError::BadCertificate)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::BadKey)?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(TlsError::UnsupportedKey)?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(TlsError::Mismatch)?;
    Ok(ck)
}

/// A self-signed certificate for `localhost` (used when no default is given).
pub fn self_signed() -> Result<CertifiedKey, TlsError> {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
    certified_key(
        c.cert.pem().as_bytes(),
        c.signing_key.serialize_pem().as_bytes(),
    )
}

/// The certificate and key of the Secret `namespace/name`, or why there is none (a
/// reason of [`lease`] and a message).
fn secret_key(
    namespace: &str,
    name: &str,
    secrets: &[Arc<Secret>],
) -> Result<CertifiedKey, (&'static str, String)> {
    let s = secrets
        .iter()
        .find(|s| {
            s.metadata.namespace.as_deref() == Some(namespace)
                && s.metadata.name.as_deref() == Some(name)
        })
        .ok_or((
            lease::SECRET_NOT_FOUND,
            "not found (the proxy reads Secrets of type kubernetes.io/tls only)".to_string(),
        ))?;
    let d = s.data.as_ref();
    match (
        d.and_then(|d| d.get("tls.crt")),
        d.and_then(|d| d.get("tls.key")),
    ) {
        (Some(c), Some(k)) => {
            certified_key(&c.0, &k.0).map_err(|e| (lease::SECRET_INVALID, e.to_string()))
        }
        _ => Err((
            lease::SECRET_INCOMPLETE,
            "has no tls.crt or no tls.key".to_string(),
        )),
    }
}

/// Certificates by SNI host.
#[derive(Debug, Default)]
pub struct Certs {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl Certs {
    /// Builds the map from the table's `tls[]` entries and the TLS Secrets; a Secret that
    /// is missing or bad leaves its hosts on the default certificate: it is logged and
    /// returned among the problems (published on the proxy's Lease, MCI-10). A host
    /// named in `tls[].hosts` gets that Secret (the oldest MCI's); a rule host no
    /// `tls[].hosts` names gets the first entry without hosts whose certificate covers it
    /// ([`TlsEntry::if_covered`]).
    pub fn build<'e>(entries: &'e [TlsEntry], secrets: &[Arc<Secret>]) -> (Certs, TlsProblems) {
        let mut by_key: HashMap<(&str, &str), Option<Arc<CertifiedKey>>> = HashMap::new();
        let mut problems = TlsProblems::new();
        let mut certs = Certs::default();
        let mut load = |e: &'e TlsEntry| {
            by_key
                .entry((e.namespace.as_str(), e.secret.as_str()))
                .or_insert_with(|| match secret_key(&e.namespace, &e.secret, secrets) {
                    Ok(ck) => Some(Arc::new(ck)),
                    Err((reason, why)) => {
                        tracing::warn!(
                            "TLS Secret {}/{}: {why}; its hosts get the default certificate",
                            e.namespace,
                            e.secret
                        );
                        problems.insert(
                            lease::secret_key(&e.namespace, &e.secret),
                            TlsProblem {
                                reason: reason.into(),
                                message: why,
                            },
                        );
                        None
                    }
                })
                .clone()
        };
        for e in entries.iter().filter(|e| !e.if_covered) {
            if let Some(ck) = load(e) {
                certs.insert(&e.host, ck);
            }
        }
        for e in entries.iter().filter(|e| e.if_covered) {
            let Some(ck) = load(e) else { continue };
            if !certs.has(&e.host) && covers(&ck, &e.host) {
                certs.insert(&e.host, ck);
            }
        }
        (certs, problems)
    }

    /// Serves `host` (exact or `*.suffix`) with `ck`, unless it has a certificate.
    fn insert(&mut self, host: &str, ck: Arc<CertifiedKey>) {
        match host.strip_prefix("*.") {
            Some(suffix) => self.wildcard.entry(suffix.to_string()).or_insert(ck),
            None => self.exact.entry(host.to_string()).or_insert(ck),
        };
    }

    /// Whether `host` (exact or `*.suffix`) has a certificate.
    fn has(&self, host: &str) -> bool {
        match host.strip_prefix("*.") {
            Some(suffix) => self.wildcard.contains_key(suffix),
            None => self.exact.contains_key(host),
        }
    }

    fn get(&self, sni: &str) -> Option<&Arc<CertifiedKey>> {
        let sni = sni.trim_end_matches('.').to_ascii_lowercase();
        self.exact.get(&sni).or_else(|| {
            let (first, suffix) = sni.split_once('.')?;
            (!first.is_empty())
                .then(|| self.wildcard.get(suffix))
                .flatten()
        })
    }
}

/// A label no certificate names: a wildcard host `*.suffix` is covered by a
/// certificate that covers `<this>.suffix`, i.e. one for `*.suffix` itself.
const WILDCARD_PROBE: &str = "causeway-wildcard-probe";

/// Whether the certificate of `ck` covers `host` (exact or `*.suffix`): one of its
/// subjectAltName DNS names matches it (rustls's, that is webpki's, name check: as Go's
/// `VerifyHostname`, which ingress-nginx uses, the common name does not count).
pub fn covers(ck: &CertifiedKey, host: &str) -> bool {
    let Some(cert) = ck.end_entity_cert().ok() else {
        return false;
    };
    let Ok(parsed) = rustls::server::ParsedCertificate::try_from(cert) else {
        return false;
    };
    let name = match host.strip_prefix("*.") {
        Some(suffix) => format!("{WILDCARD_PROBE}.{suffix}"),
        None => host.to_string(),
    };
    ServerName::try_from(name)
        .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok())
}

/// SNI resolver with hot-swappable certificates.
#[derive(Debug)]
pub struct Resolver {
    /// The current map.
    pub certs: ArcSwap<Certs>,
    default: Arc<CertifiedKey>,
}

impl Resolver {
    /// A resolver with only the default certificate.
    pub fn new(default: CertifiedKey) -> Self {
        Resolver {
            certs: ArcSwap::from_pointee(Certs::default()),
            default: Arc::new(default),
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let certs = self.certs.load();
        Some(
            hello
                .server_name()
                .and_then(|sni| certs.get(sni).cloned())
                .unwrap_or_else(|| self.default.clone()),
        )
    }
}

/// The server configuration: ring provider, resolver, ALPN h2 + http/1.1.
pub fn server_config(resolver: Arc<Resolver>) -> Result<rustls::ServerConfig, TlsError> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsError::Config)?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(name: &str, crt: &[u8], key: &[u8]) -> Arc<Secret> {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.type_ = Some("kubernetes.io/tls".into());
        s.data = Some(
            [
                ("tls.crt".to_string(), ByteString(crt.to_vec())),
                ("tls.key".to_string(), ByteString(key.to_vec())),
            ]
            .into(),
        );
        Arc::new(s)
    }

    #[test]
    fn sni_exact_wildcard_and_bad_secrets() {
        let a = rcgen::generate_simple_self_signed(vec!["a.foo.com".to_string()]).unwrap();
        let w = rcgen::generate_simple_self_signed(vec!["*.bar.com".to_string()]).unwrap();
        let secrets = vec![
            secret(
                "a",
                a.cert.pem().as_bytes(),
                a.signing_key.serialize_pem().as_bytes(),
            ),
            secret(
                "w",
                w.cert.pem().as_bytes(),
                w.signing_key.serialize_pem().as_bytes(),
            ),
            secret("bad", b"junk", b"junk"),
        ];
        let e = |host: &str, s: &str| TlsEntry {
            host: host.into(),
            namespace: "ns".into(),
            secret: s.into(),
            if_covered: false,
        };
        let mut half = Secret::default();
        half.metadata.name = Some("half".into());
        half.metadata.namespace = Some("ns".into());
        let secrets = [secrets, vec![Arc::new(half)]].concat();
        let (certs, problems) = Certs::build(
            &[
                e("a.foo.com", "a"),
                e("*.bar.com", "w"),
                e("c.foo.com", "bad"),
                e("c2.foo.com", "bad"),
                e("d.foo.com", "gone"),
                e("h.foo.com", "half"),
            ],
            &secrets,
        );
        let reasons: Vec<(&str, &str)> = problems
            .iter()
            .map(|(k, p)| (k.as_str(), p.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("ns/bad", lease::SECRET_INVALID),
                ("ns/gone", lease::SECRET_NOT_FOUND),
                ("ns/half", lease::SECRET_INCOMPLETE)
            ],
            "one problem per Secret, however many hosts use it"
        );
        assert_eq!(
            problems["ns/gone"].message,
            "not found (the proxy reads Secrets of type kubernetes.io/tls only)"
        );
        assert!(certs.get("A.foo.com").is_some());
        assert!(certs.get("x.bar.com").is_some());
        assert!(certs.get("bar.com").is_none());
        assert!(certs.get("y.x.bar.com").is_none());
        assert!(certs.get("c.foo.com").is_none());
        assert!(self_signed().is_ok());
        assert!(matches!(
            certified_key(b"", b""),
            Err(TlsError::NoCertificate)
        ));
    }

    /// Entries without hosts ([`TlsEntry::if_covered`]): a host gets the first one
    /// whose certificate covers it, after any entry that names it.
    #[test]
    fn entries_without_hosts_serve_what_their_certificate_covers() {
        let make = |names: &[&str]| {
            let c = rcgen::generate_simple_self_signed(
                names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            )
            .unwrap();
            (c.cert.pem(), c.signing_key.serialize_pem())
        };
        let (wc, wk) = make(&["*.ex.com"]);
        let (oc, ok) = make(&["other.com"]);
        let (nc, nk) = make(&["named.ex.com"]);
        let secrets = vec![
            secret("ex-tls", wc.as_bytes(), wk.as_bytes()),
            secret("other-tls", oc.as_bytes(), ok.as_bytes()),
            secret("named-tls", nc.as_bytes(), nk.as_bytes()),
        ];
        let key = |s: &str| {
            let s = secrets
                .iter()
                .find(|x| x.metadata.name.as_deref() == Some(s));
            let d = s.unwrap().data.as_ref().unwrap();
            certified_key(&d["tls.crt"].0, &d["tls.key"].0).unwrap()
        };
        let ex = key("ex-tls");
        assert!(covers(&ex, "app.ex.com"));
        assert!(covers(&ex, "*.ex.com"));
        assert!(!covers(&ex, "ex.com"));
        assert!(!covers(&ex, "a.app.ex.com"));
        assert!(!covers(&ex, "*.app.ex.com"));
        assert!(!covers(&key("named-tls"), "*.ex.com"));
        let e = |host: &str, s: &str, if_covered: bool| TlsEntry {
            host: host.into(),
            namespace: "ns".into(),
            secret: s.into(),
            if_covered,
        };
        let (certs, problems) = Certs::build(
            &[
                // other-tls first, but it covers none of these.
                e("app.ex.com", "other-tls", true),
                e("app.ex.com", "ex-tls", true),
                e("named.ex.com", "ex-tls", true),
                e("*.w.ex.com", "ex-tls", true),
                e("plain.com", "ex-tls", true),
                e("named.ex.com", "named-tls", false),
            ],
            &secrets,
        );
        assert!(problems.is_empty());
        let leaf = |sni: &str| certs.get(sni).map(|ck| ck.cert[0].clone());
        assert_eq!(leaf("app.ex.com"), Some(ex.cert[0].clone()));
        assert_eq!(leaf("named.ex.com"), Some(key("named-tls").cert[0].clone()));
        assert_eq!(leaf("x.w.ex.com"), None);
        assert_eq!(leaf("plain.com"), None);
    }
}
