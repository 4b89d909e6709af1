//! The server's own PKI: a CA generated at start, a serving certificate for the
//! loopback names, and client certificates it issues (authenticated by fingerprint).

use std::collections::HashMap;
use std::sync::Arc;

use causeway_runtime::https::Authority;
use parking_lot::Mutex;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

use crate::http::auth::User;

/// A client credential issued by the server's CA.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// PEM certificate.
    pub cert_pem: String,
    /// PEM PKCS#8 key.
    pub key_pem: String,
}

/// CA, serving certificate and issued client certificates.
pub struct Pki {
    /// The CA certificate (PEM), for kubeconfigs.
    pub ca_pem: String,
    /// The serving certificate (PEM), for servers other than kubesim that tests run
    /// with this CA (admission webhooks, say).
    pub server_cert_pem: String,
    /// The serving certificate's private key (PEM).
    pub server_key_pem: String,
    ca_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    server_cert: CertificateDer<'static>,
    server_key: Vec<u8>,
    issued: Mutex<HashMap<[u8; 32], User>>,
}

impl Pki {
    /// Generates a CA named after the server and a serving cert for `sans`.
    pub fn generate(name: &str, sans: &[String]) -> Result<Arc<Self>, rcgen::Error> {
        let ca = Authority::generate(&format!("kubesim-ca-{name}"))?;
        let server = ca.serving("kube-apiserver", sans)?;
        Ok(Arc::new(Pki {
            ca_pem: ca.ca_pem,
            server_cert_pem: server.cert_pem,
            server_key_pem: server.key_pem,
            ca_der: ca.ca_der,
            issuer: ca.issuer,
            server_cert: server.cert_der,
            server_key: server.key_der,
            issued: Mutex::new(HashMap::new()),
        }))
    }

    /// Issues a client certificate for a user (CN = user, O = groups).
    pub fn issue_client(&self, user: &User) -> Result<ClientCert, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name
            .push(DnType::CommonName, user.name.clone());
        for g in &user.groups {
            p.distinguished_name
                .push(DnType::OrganizationName, g.clone());
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &self.issuer)?;
        self.issued
            .lock()
            .insert(fingerprint(cert.der()), user.clone());
        Ok(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The user a presented client certificate was issued to.
    pub fn user_for_cert(&self, der: &[u8]) -> Option<User> {
        self.issued.lock().get(&fingerprint(der)).cloned()
    }

    /// A rustls server config: our serving cert, optional client certs from our CA, h2 + http/1.1.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![self.server_cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone())),
            )?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

fn fingerprint(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}
