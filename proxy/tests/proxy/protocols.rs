//! TLS (two SNI hosts, default certificate, hot reload of a Secret), HTTP/2 (h2c
//! prior knowledge and ALPN h2) and a WebSocket-style Upgrade through the proxy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

pub(crate) struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    der: CertificateDer<'static>,
}

impl Ca {
    pub(crate) fn new() -> anyhow::Result<Ca> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "causeway test CA");
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            der: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        })
    }

    /// (cert PEM, key PEM, cert DER) for `host`.
    pub(crate) fn leaf(
        &self,
        host: &str,
    ) -> anyhow::Result<(String, String, CertificateDer<'static>)> {
        let key = rcgen::KeyPair::generate()?;
        let cert =
            rcgen::CertificateParams::new(vec![host.to_string()])?.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem(), cert.der().clone()))
    }
}

pub(crate) async fn tls_secret(hub: &Hub, name: &str, cert: &str, key: &str) -> anyhow::Result<()> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    hub.apply(
        "v1",
        "Secret",
        Some(NS),
        name,
        json!({"type": "kubernetes.io/tls", "data": {"tls.crt": b64(cert), "tls.key": b64(key)}}),
    )
    .await
}

/// One request over TLS: (body, ALPN, the server's leaf certificate).
async fn tls_get(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    sni: &str,
    h2: bool,
) -> anyhow::Result<(String, Option<Vec<u8>>, CertificateDer<'static>)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone())?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = if h2 {
        vec![b"h2".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(sni.to_string())?, tcp)
        .await
        .with_context(|| format!("TLS handshake for {sni}"))?;
    let (_, conn) = tls.get_ref();
    let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    let leaf = conn.peer_certificates().context("no peer certificate")?[0].clone();
    let io = TokioIo::new(tls);
    let body = if h2 {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        let req = http::Request::get(format!("https://{sni}/")).body(Empty::<Bytes>::new())?;
        send.send_request(req)
            .await?
            .into_body()
            .collect()
            .await?
            .to_bytes()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        let req = http::Request::get("/")
            .header("host", sni)
            .body(Empty::<Bytes>::new())?;
        send.send_request(req)
            .await?
            .into_body()
            .collect()
            .await?
            .to_bytes()
    };
    Ok((String::from_utf8_lossy(&body).into_owned(), alpn, leaf))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sni_two_hosts_hot_reload_and_h2() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let one = Pod::start([127, 0, 7, 1], "one").await?;
    let two = Pod::start([127, 0, 7, 2], "two").await?;
    for (svc, pod) in [("one", &one), ("two", &two)] {
        hub.import(svc).await?;
        hub.export(svc, "east", &[(pod.addr, true)]).await?;
    }
    let ca = Ca::new()?;
    let (c1, k1, d1) = ca.leaf("one.test")?;
    let (c2, k2, d2) = ca.leaf("two.test")?;
    tls_secret(&hub, "one-cert", &c1, &k1).await?;
    tls_secret(&hub, "two-cert", &c2, &k2).await?;
    hub.mci(
        "tls",
        json!({
            "tls": [{"hosts": ["one.test"], "secretName": "one-cert"}, {"hosts": ["two.test"], "secretName": "two-cert"}],
            "rules": [rule(Some("one.test"), "/", "Prefix", "one"), rule(Some("two.test"), "/", "Prefix", "two")]
        }),
        json!({}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let https = p.https.unwrap();
    eventually("TLS routes", Duration::from_secs(10), || async {
        tls_get(https, &ca.der, "two.test", false)
            .await
            .is_ok_and(|(b, _, _)| b == "two")
    })
    .await?;
    let (b, alpn, leaf) = tls_get(https, &ca.der, "one.test", false).await?;
    assert_eq!(
        (b.as_str(), alpn.as_deref()),
        ("one", Some(&b"http/1.1"[..]))
    );
    assert_eq!(leaf, d1);
    let (b, alpn, leaf) = tls_get(https, &ca.der, "two.test", true).await?;
    assert_eq!((b.as_str(), alpn.as_deref()), ("two", Some(&b"h2"[..])));
    assert_eq!(leaf, d2);
    // An SNI name without a certificate gets the self-signed default: not trusted.
    assert!(tls_get(https, &ca.der, "three.test", false).await.is_err());

    // Hot reload: a new certificate in the Secret is served without a restart.
    let (c1b, k1b, d1b) = ca.leaf("one.test")?;
    tls_secret(&hub, "one-cert", &c1b, &k1b).await?;
    eventually("reloaded certificate", Duration::from_secs(10), || async {
        tls_get(https, &ca.der, "one.test", false)
            .await
            .is_ok_and(|(_, _, leaf)| leaf == d1b)
    })
    .await?;

    // h2c prior knowledge on the plain port.
    let tcp = tokio::net::TcpStream::connect(p.http).await?;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    for _ in 0..3 {
        let req = http::Request::get("http://two.test/").body(Empty::<Bytes>::new())?;
        let resp = send.send_request(req).await?;
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let body = resp.into_body().collect().await?.to_bytes();
        assert_eq!(&body[..], b"two");
    }
    // HTTP/2 clients may split cookies over several fields; the HTTP/1.1 upstream gets
    // one Cookie line (RFC 9113 section 8.2.3).
    let req = http::Request::get("http://two.test/")
        .header("cookie", "a=1")
        .header("cookie", "b=2; c=3")
        .body(Empty::<Bytes>::new())?;
    let resp = send.send_request(req).await?;
    assert_eq!(resp.headers()["echo-cookie"], "a=1; b=2; c=3");
    p.shutdown().await;
    Ok(())
}

/// A `tls[]` entry without hosts serves the MCI's rule hosts its certificate covers
/// (ingress-nginx's extractTLSSecretName); the others get the default certificate, and
/// a host named in `tls[].hosts` keeps that entry's Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_entry_without_hosts_serves_the_rule_hosts_it_covers() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let app = Pod::start([127, 0, 70, 1], "app").await?;
    hub.import("app").await?;
    hub.export("app", "east", &[(app.addr, true)]).await?;
    let ca = Ca::new()?;
    let (cw, kw, dw) = ca.leaf("*.ex.test")?;
    let (cn, kn, dn) = ca.leaf("named.ex.test")?;
    tls_secret(&hub, "ex-tls", &cw, &kw).await?;
    tls_secret(&hub, "named-tls", &cn, &kn).await?;
    hub.mci(
        "nohosts",
        json!({
            "tls": [{"secretName": "ex-tls"}, {"hosts": ["named.ex.test"], "secretName": "named-tls"}],
            "rules": [
                rule(Some("app.ex.test"), "/", "Prefix", "app"),
                rule(Some("named.ex.test"), "/", "Prefix", "app"),
                rule(Some("other.test"), "/", "Prefix", "app")
            ]
        }),
        json!({}),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let https = p.https.unwrap();
    eventually("TLS route", Duration::from_secs(10), || async {
        tls_get(https, &ca.der, "app.ex.test", false)
            .await
            .is_ok_and(|(b, _, _)| b == "app")
    })
    .await?;
    let (_, _, leaf) = tls_get(https, &ca.der, "app.ex.test", true).await?;
    assert_eq!(leaf, dw);
    let (_, _, leaf) = tls_get(https, &ca.der, "named.ex.test", false).await?;
    assert_eq!(leaf, dn);
    // Not covered by *.ex.test: the self-signed default, not trusted.
    assert!(tls_get(https, &ca.der, "other.test", false).await.is_err());
    p.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_is_tunnelled() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let ws = Pod::start([127, 0, 8, 1], "ws").await?;
    hub.import("ws").await?;
    hub.export("ws", "east", &[(ws.addr, true)]).await?;
    hub.mci(
        "ws",
        json!({"rules": [rule(Some("ws.test"), "/", "Prefix", "ws")]}),
        json!({}),
    )
    .await?;
    // Without an HTTPS listener (and so without watching Secrets).
    let p = proxy_with(&hub, None, |c| {
        c.listen_https = None;
        c.limits.drain_timeout = Duration::from_millis(500);
    })
    .await?;
    assert_eq!(p.https, None);
    let c = client();
    answers(&c, p.http, ("ws.test", "/"), 200, Duration::from_secs(10)).await?;
    let mut s = tokio::net::TcpStream::connect(p.http).await?;
    s.write_all(
        b"GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
        anyhow::ensure!(
            n == 1,
            "closed during the handshake: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(buf[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    for msg in [&b"hello"[..], b"through the causeway"] {
        s.write_all(msg).await?;
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got)).await??;
        assert_eq!(got, msg);
    }
    // Shutdown waits for open tunnels up to the drain time, then cuts them.
    let t0 = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), p.shutdown()).await?;
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "shutdown did not wait for the open tunnel ({:?})",
        t0.elapsed()
    );
    let end = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(
        matches!(end, Ok(Ok(0) | Err(_))),
        "the tunnel outlived shutdown: {end:?}"
    );
    Ok(())
}
