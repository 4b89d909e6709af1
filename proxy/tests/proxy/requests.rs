//! What a request may be and where it goes, on both request paths (the HTTP/1.1
//! engine and hyper): exactly one valid Host, absolute-form targets routed by their
//! authority, dot-segments resolved before routing, underscored header names and
//! asterisk-form, the Upgrade allow-list, and host precedence.

use std::time::Duration;

use serde_json::json;

use crate::harness::*;

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
    eventually("routes", Duration::from_secs(10), || async {
        get(&c, p.http, host, path, &[])
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await?;
    Ok(p)
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
