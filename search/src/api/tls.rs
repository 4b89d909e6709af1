//! The serving certificate: the operator's files (`--tls-cert`, `--tls-key`), else a
//! self-signed CA and a serving certificate generated once into the data directory
//! (`ca.crt`, `tls.crt`, `tls.key`) and reused on restart, so kubeconfigs holding
//! `ca.crt` keep working.

use std::path::{Path, PathBuf};

use anyhow::Context;
use causeway_runtime::https::Authority;

/// The PEM files a server uses.
#[derive(Clone, Debug)]
pub struct Pem {
    /// The certificate chain.
    pub cert: String,
    /// Its private key.
    pub key: String,
    /// What a client trusts to reach the server (a kubeconfig's
    /// certificate-authority-data): the generated CA, or the given certificate file
    /// (right when it is self-signed; otherwise give clients its CA).
    pub ca: String,
}

/// Names the generated serving certificate is valid for.
const SANS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

fn read(p: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading the {what} file {}", p.display()))
}

/// The operator's files, or the data directory's generated ones (made when missing,
/// with `extra_sans` besides localhost and the loopback addresses).
pub fn load(
    files: Option<(&Path, &Path)>,
    data_dir: &Path,
    extra_sans: &[String],
) -> anyhow::Result<Pem> {
    if let Some((cert, key)) = files {
        let cert = read(cert, "--tls-cert")?;
        return Ok(Pem {
            key: read(key, "--tls-key")?,
            ca: cert.clone(),
            cert,
        });
    }
    let path = |f: &str| -> PathBuf { data_dir.join(f) };
    let (ca, cert, key) = (path("ca.crt"), path("tls.crt"), path("tls.key"));
    if ca.exists() && cert.exists() && key.exists() {
        return Ok(Pem {
            cert: read(&cert, "serving certificate")?,
            key: read(&key, "serving key")?,
            ca: read(&ca, "CA certificate")?,
        });
    }
    let pem = generate(extra_sans).context("generating the self-signed serving certificate")?;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    write(&key, &pem.key, 0o600)?;
    write(&cert, &pem.cert, 0o644)?;
    write(&ca, &pem.ca, 0o644)?;
    tracing::info!(ca = %ca.display(), "generated a self-signed serving certificate; put this CA in kubeconfigs");
    Ok(pem)
}

fn write(p: &Path, content: &str, mode: u32) -> anyhow::Result<()> {
    causeway_runtime::files::write_atomic(p, content.as_bytes(), mode)
}

/// A fresh CA and a serving certificate it signed.
fn generate(extra_sans: &[String]) -> Result<Pem, rcgen::Error> {
    let ca = Authority::generate("causeway-search-ca")?;
    let mut sans: Vec<String> = SANS.iter().map(|s| s.to_string()).collect();
    for s in extra_sans {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }
    let server = ca.serving("causeway-search", &sans)?;
    Ok(Pem {
        cert: server.cert_pem,
        key: server.key_pem,
        ca: ca.ca_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = load(None, &data, &["search.example".into()]).unwrap();
        assert!(first.ca.contains("BEGIN CERTIFICATE"));
        assert_ne!(first.ca, first.cert);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(data.join("tls.key"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let again = load(None, &data, &[]).unwrap();
        assert_eq!(
            (again.cert, again.key, again.ca),
            (first.cert, first.key, first.ca)
        );
    }

    #[test]
    fn given_files_are_used_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "CERT").unwrap();
        let e = load(Some((&cert, &key)), dir.path(), &[]).unwrap_err();
        assert_eq!(
            format!("{e}"),
            format!("reading the --tls-key file {}", key.display())
        );
        std::fs::write(&key, "KEY").unwrap();
        let pem = load(Some((&cert, &key)), dir.path(), &[]).unwrap();
        assert_eq!(
            (pem.cert.as_str(), pem.key.as_str(), pem.ca.as_str()),
            ("CERT", "KEY", "CERT")
        );
        assert!(!dir.path().join("ca.crt").exists(), "nothing generated");
    }
}
