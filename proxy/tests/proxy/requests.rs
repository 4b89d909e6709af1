//! What a request may be and where it goes, on both request paths (the HTTP/1.1
//! engine and hyper): exactly one valid Host, absolute-form targets routed by their
//! authority, dot-segments resolved before routing, underscored header names and
//! asterisk-form, the Upgrade allow-list, and host precedence.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;
use crate::scripted::*;

/// The status code of the first response in `out`.
fn status(out: &str) -> u16 {
    out.strip_prefix("HTTP/1.1 ")
        .or_else(|| out.strip_prefix("HTTP/1.0 "))
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The engine name for messages, and whether the proxy runs its own HTTP/1.1 engine.
const PATHS: [(&str, bool); 2] = [("engine", true), ("hyper", false)];

/// A proxy serving every request on the engine (`own`) or on hyper, with `host` routed.
async fn proxy_on(
    hub: &Hub,
    own: bool,
    host: &str,
    path: &str,
) -> anyhow::Result<causeway_proxy::Running> {
    let p = proxy_with(hub, None, |c| c.limits.own_http1 = own).await?;
    let c = client();
    answers(&c, p.http, (host, path), 200, Duration::from_secs(10)).await?;
    Ok(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_needs_exactly_one_valid_host() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    // The catch-all (rules without host) is the same upstream: a request without a
    // usable Host would reach it.
    let spec = json!({
        "rules": [rule(Some("one.test"), "/", "Prefix", "hosts"), rule(None, "/", "Prefix", "hosts")],
    });
    let _up = site_with(&hub, [127, 0, 14, 1], "hosts", spec, json!({})).await?;
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "one.test", "/").await?;
        for bad in [
            "GET / HTTP/1.1\r\nHost: one.test\r\nHost: other.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: other.test\r\nHost: one.test\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: one.test@other.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: one.test/x\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: one.test\r\nHost: other.test\r\n\r\n",
        ] {
            let out = raw(p.http, bad.as_bytes()).await?;
            assert_eq!(status(&out), 400, "[{engine}] {bad:?}: {out}");
            assert!(!out.contains("GET /"), "[{engine}] forwarded: {out}");
        }
        // HTTP/1.0 needs no Host: the rules without host. It goes upstream as
        // HTTP/1.1, which needs a Host: an empty one (RFC 9112 §3.2).
        let out = raw(p.http, b"GET /old HTTP/1.0\r\n\r\n").await?;
        assert_eq!(status(&out), 200, "[{engine}] {out}");
        assert!(
            out.contains("GET /old HTTP/1.1\r\n")
                && count(&out.to_ascii_lowercase(), "\r\nhost:") == 1
                && out.to_ascii_lowercase().contains("\r\nhost: \r\n"),
            "[{engine}] {out}"
        );
        // The same for an HTTP/2 request without `:authority` or Host.
        let mut send = crate::h2::h2(p.http).await?;
        let req = http::Request::builder()
            .uri("/h2-no-authority")
            // (h2 sends a request with no authority only as a forwarded HTTP/1.x one.)
            .version(http::Version::HTTP_11)
            .body(crate::h2::full(b""))?;
        let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
            .await
            .context("no answer within 10 s")??;
        assert_eq!(resp.status(), 200, "[{engine}]");
        let body = tokio::time::timeout(
            Duration::from_secs(10),
            http_body_util::BodyExt::collect(resp.into_body()),
        )
        .await??
        .to_bytes();
        let head = String::from_utf8_lossy(&body).to_ascii_lowercase();
        assert!(
            head.starts_with("get /h2-no-authority http/1.1\r\n")
                && count(&head, "\r\nhost:") == 1
                && head.contains("\r\nhost: \r\n"),
            "[{engine}] {head}"
        );
        p.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_is_routed_by_its_authority() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let _up = site(&hub, [127, 0, 14, 2], "absolute", "abs.test").await?;
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "abs.test", "/").await?;
        let out = raw(
            p.http,
            b"GET http://ABS.test:80/x?q=1 HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n",
        )
        .await?;
        assert_eq!(status(&out), 200, "[{engine}] {out}");
        let lower = out.to_ascii_lowercase();
        assert!(out.contains("GET /x?q=1 HTTP/1.1\r\n"), "[{engine}] {out}");
        assert!(lower.contains("host: abs.test:80\r\n"), "[{engine}] {out}");
        assert!(!lower.contains("other.test"), "[{engine}] {out}");
        for bad in [
            "GET ftp://abs.test/x HTTP/1.1\r\nHost: abs.test\r\n\r\n",
            "GET http://user@abs.test/x HTTP/1.1\r\nHost: abs.test\r\n\r\n",
            "GET * HTTP/1.1\r\nHost: abs.test\r\n\r\n",
        ] {
            let out = raw(p.http, bad.as_bytes()).await?;
            assert_eq!(status(&out), 400, "[{engine}] {bad:?}: {out}");
        }
        // `OPTIONS *` is the one request with an asterisk-form target.
        let out = raw(
            p.http,
            b"OPTIONS * HTTP/1.1\r\nHost: abs.test\r\nConnection: close\r\n\r\n",
        )
        .await?;
        assert_ne!(status(&out), 400, "[{engine}] {out}");
        p.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_are_resolved_before_routing() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    // /foo: the scripted upstream (it shows the path it got); /dead: a pod answering
    // its name.
    let dead = Pod::start([127, 0, 14, 4], "dead").await?;
    hub.import("dead").await?;
    hub.export("dead", "east", &[(dead.addr, true)]).await?;
    let spec = json!({"rules": [{"host": "dots.test", "http": {"paths": [
        {"path": "/foo", "pathType": "Prefix", "backend": backend("foo")},
        {"path": "/dead", "pathType": "Prefix", "backend": backend("dead")},
    ]}}]});
    let _up = site_with(&hub, [127, 0, 14, 3], "foo", spec, json!({})).await?;
    let req =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: dots.test\r\nConnection: close\r\n\r\n");
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "dots.test", "/dead").await?;
        for path in [
            "/foo/../dead",
            "/foo/%2e%2e/dead",
            "/foo/.%2E/dead/",
            "/foo/./../dead",
        ] {
            let out = raw(p.http, req(path).as_bytes()).await?;
            assert_eq!(status(&out), 200, "[{engine}] {path}: {out}");
            assert!(
                out.ends_with("dead"),
                "[{engine}] {path} reached /foo: {out}"
            );
        }
        for (path, upstream) in [
            ("/foo/./bar", "/foo/bar"),
            ("/foo/%2e/x/..?a=/../b", "/foo/?a=/../b"),
            ("/foo/a%2Fb/..%2e", "/foo/a%2Fb/..%2e"),
            ("/foo/index.html", "/foo/index.html"),
        ] {
            let out = raw(p.http, req(path).as_bytes()).await?;
            assert_eq!(status(&out), 200, "[{engine}] {path}: {out}");
            let want = format!("GET {upstream} HTTP/1.1\r\n");
            assert!(out.contains(&want), "[{engine}] {path}: {out}");
        }
        for path in [
            "/..",
            "/foo/../../dead",
            "/%2e%2E/foo",
            "/foo/x%2F..%2Fy",
            "/foo/..%2f",
        ] {
            let out = raw(p.http, req(path).as_bytes()).await?;
            assert_eq!(status(&out), 400, "[{engine}] {path}: {out}");
        }
        // HTTP/2 (h2c prior knowledge): the same, and a 400 leaves the connection usable.
        let tcp = TcpStream::connect(p.http).await?;
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(tcp),
        )
        .await?;
        tokio::spawn(conn);
        for (path, want) in [
            ("/foo/%2e%2e/dead", 200),
            ("/..", 400),
            ("/foo/../dead", 200),
        ] {
            let req = http::Request::get(format!("http://dots.test{path}"))
                .body(http_body_util::Empty::<bytes::Bytes>::new())?;
            let resp = send.send_request(req).await?;
            assert_eq!(resp.status().as_u16(), want, "[{engine}] h2 {path}");
            let body = http_body_util::BodyExt::collect(resp.into_body()).await?;
            if want == 200 {
                assert_eq!(&body.to_bytes()[..], b"dead", "[{engine}] h2 {path}");
            }
        }
        p.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underscored_header_names_are_dropped_unless_allowed() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let _plain = site(&hub, [127, 0, 14, 5], "plain", "plain.test").await?;
    let spec = json!({"rules": [rule(Some("under.test"), "/", "Prefix", "under")]});
    let ann =
        json!({ causeway_crds::well_known::annotations::mci::UNDERSCORES_IN_HEADERS: "true" });
    let _under = site_with(&hub, [127, 0, 14, 6], "under", spec, ann).await?;
    let req = |host: &str| {
        format!(
            "GET /h HTTP/1.1\r\nHost: {host}\r\nX_Secret: 1\r\nTransfer_Encoding: chunked\r\n\
             X-Kept: 1\r\nConnection: close\r\n\r\n"
        )
    };
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "plain.test", "/").await?;
        routed(&p, "under.test").await?;
        let out = raw(p.http, req("plain.test").as_bytes()).await?;
        assert_eq!(status(&out), 200, "[{engine}] {out}");
        assert!(
            out.to_ascii_lowercase().contains("x-kept: 1"),
            "[{engine}] {out}"
        );
        assert!(
            !out.contains('_'),
            "[{engine}] an underscored name went up: {out}"
        );
        let out = raw(p.http, req("under.test").as_bytes()).await?;
        let lower = out.to_ascii_lowercase();
        assert!(lower.contains("x_secret: 1"), "[{engine}] {out}");
        assert!(
            lower.contains("transfer_encoding: chunked"),
            "[{engine}] {out}"
        );
        p.shutdown().await;
    }
    Ok(())
}

/// Sends `req` and reads until the response head is complete.
async fn head_of(proxy: std::net::SocketAddr, req: &str) -> anyhow::Result<(TcpStream, String)> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(req.as_bytes()).await?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .context("no response head")??;
        anyhow::ensure!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    Ok((s, String::from_utf8_lossy(&got).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_only_to_allowed_protocols() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    // The pods answer any Upgrade with a 101 and echo the tunnel.
    let mut pods = Vec::new();
    for (ip, svc, host, ann) in [
        ([127, 0, 14, 7], "ws", "ws.test", json!({})),
        (
            [127, 0, 14, 8],
            "custom",
            "custom.test",
            json!({ causeway_crds::well_known::annotations::mci::ALLOWED_UPGRADES: "websocket, Foo" }),
        ),
    ] {
        let pod = Pod::start(ip, svc).await?;
        hub.import(svc).await?;
        hub.export(svc, "east", &[(pod.addr, true)]).await?;
        let spec = json!({"rules": [rule(Some(host), "/", "Prefix", svc)]});
        hub.mci(svc, spec, ann).await?;
        pods.push(pod);
    }
    let req = |host: &str, proto: &str| {
        format!(
            "GET /up HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: {proto}\r\n\r\n"
        )
    };
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "ws.test", "/").await?;
        routed(&p, "custom.test").await?;
        for (host, proto, tunnel) in [
            ("ws.test", "websocket", true),
            ("ws.test", "WebSocket", true),
            ("ws.test", "foo", false),
            ("ws.test", "h2c", false),
            ("ws.test", "websocket, foo", false),
            ("custom.test", "foo/2", true),
            ("custom.test", "websocket", true),
            ("custom.test", "h2c", false),
        ] {
            let (mut s, head) = head_of(p.http, &req(host, proto)).await?;
            if tunnel {
                assert_eq!(status(&head), 101, "[{engine}] {host} {proto}: {head}");
                s.write_all(b"ping").await?;
                let mut echo = [0u8; 4];
                tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut echo))
                    .await
                    .context("no echo through the tunnel")??;
                assert_eq!(&echo, b"ping");
            } else {
                // Served as a plain request: the upstream never saw the Upgrade.
                assert_eq!(status(&head), 200, "[{engine}] {host} {proto}: {head}");
                assert!(
                    !head.to_ascii_lowercase().contains("upgrade"),
                    "[{engine}] {head}"
                );
            }
        }
        p.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_host_is_its_own_server() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let mut pods = Vec::new();
    for (ip, svc) in [
        ([127, 0, 14, 9], "exact"),
        ([127, 0, 14, 10], "wild"),
        ([127, 0, 14, 11], "fallback"),
    ] {
        let pod = Pod::start(ip, svc).await?;
        hub.import(svc).await?;
        hub.export(svc, "east", &[(pod.addr, true)]).await?;
        pods.push(pod);
    }
    let spec = json!({
        "defaultBackend": backend("fallback"),
        "rules": [
            rule(Some("www.prec.test"), "/only", "Prefix", "exact"),
            rule(Some("*.prec.test"), "/", "Prefix", "wild"),
            rule(None, "/", "Prefix", "wild"),
        ],
    });
    hub.mci("prec", spec, json!({})).await?;
    for (engine, own) in PATHS {
        let p = proxy_on(&hub, own, "www.prec.test", "/only").await?;
        let c = client();
        for (host, path, want) in [
            ("www.prec.test", "/only/x", "exact"),
            // The exact host's paths do not match: its own default, not the wildcard.
            ("www.prec.test", "/other", "fallback"),
            ("api.prec.test", "/other", "wild"),
            ("elsewhere.test", "/other", "wild"),
        ] {
            let r = get(&c, p.http, host, path, &[]).await?;
            assert_eq!(
                (r.status, r.body.as_str()),
                (200, want),
                "[{engine}] {host}{path}"
            );
        }
        p.shutdown().await;
    }
    Ok(())
}

#[test]
fn logs_to_a_file_have_no_colour_codes() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("causeway-proxy-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // A hub nobody serves: the proxy logs that its watches fail.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n\
         clusters: [{name: dead, cluster: {server: 'http://127.0.0.1:9'}}]\n\
         contexts: [{name: dead, context: {cluster: dead, user: dead}}]\n\
         users: [{name: dead, user: {}}]\n",
    )?;
    // Both streams to the file, as a service manager or `> log 2>&1` would.
    let log = dir.join("proxy.log");
    let out = std::fs::File::create(&log)?;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_causeway-proxy"))
        .args(["--listen-http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        .args(["--no-publish", "--log", "info"])
        .arg("--hub-kubeconfig")
        .arg(&kubeconfig)
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while std::time::Instant::now() < deadline {
        text = std::fs::read_to_string(&log)?;
        if text.contains("WARN") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("WARN"), "no warning logged: {text}");
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file: {text:?}"
    );
    Ok(())
}
