//! gRPC through the proxy with a real tonic server and client: HTTP/2 upstream
//! (appProtocol `grpc`, or TLS by annotation) multiplexed on few connections, unary,
//! server-streaming and bidi calls, trailers, statuses, deadlines, retries by gRPC
//! status, a backend killed under load, and active health checks over HTTP/2.
//!
//! gRPC test pods listen on 127.0.41.0/24.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde_json::{Value, json};
use tonic::Code;

use crate::grpc_support::*;
use crate::harness::*;

#[tokio::test]
async fn grpc_calls_stream_both_ways_with_trailers_and_statuses() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 1], "g1").await?;
    grpc_service(&hub, "echo", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "echo", "grpc.test", "echo", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "grpc.test").await?;

    // Unary.
    let r = c.unary(Echo::text("hi"), None).await?;
    assert_eq!(r.into_inner().text, "g1:hi");

    // Server streaming: every message in order, then the custom trailing metadata.
    let ask = Echo {
        text: "s".into(),
        count: 5,
        sleep_ms: 10,
        ..Default::default()
    };
    let (got, trailers) = c.stream(ask, None).await?;
    assert_eq!(got, ["g1:s-0", "g1:s-1", "g1:s-2", "g1:s-3", "g1:s-4"]);
    assert_eq!(
        trailers.get("x-served-by").map(|v| v.to_str().unwrap()),
        Some("g1")
    );

    // Bidi: each message is sent only after the answer to the one before came back.
    let got = c.bidi(&["a", "b", "c"]).await?;
    assert_eq!(got, ["g1:a", "g1:b", "g1:c"]);

    // A status the server answers with arrives unchanged, with its metadata.
    let ask = Echo {
        code: Code::NotFound as u32,
        ..Echo::text("x")
    };
    let e = c.unary(ask, None).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::NotFound, "g1 said no"));
    assert_eq!(e.metadata().get("x-served-by").unwrap(), "g1");

    // Plain HTTP/1.1 to the same HTTP/2 backend (the HTTP/1.1 engine hands it over).
    let r = get(&client(), p.http, "grpc.test", "/plain", &[]).await?;
    assert_eq!((r.status, r.body.as_str()), (200, "g1"));
    Ok(())
}

/// A stream that outlasts the idle timeout (the header-read timeout, 300 ms here) with
/// no new request on its connection is not idle: its connection is not closed under it.
#[tokio::test]
async fn a_stream_longer_than_the_idle_timeout_is_not_cut() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 30], "g1").await?;
    grpc_service(&hub, "echo", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "echo", "grpc.test", "echo", json!({})).await?;
    let p = proxy_with(&hub, None, |c| {
        c.limits.header_read_timeout = Duration::from_millis(300);
    })
    .await?;
    let c = GrpcClient::connect(p.http, "grpc.test").await?;
    // 8 messages 250 ms apart: 2 s, over six idle periods
    let ask = Echo {
        text: "s".into(),
        count: 8,
        sleep_ms: 250,
        ..Default::default()
    };
    let (got, trailers) = c.stream(ask, None).await?;
    assert_eq!(got.len(), 8, "{got:?}");
    assert_eq!(
        trailers.get("x-served-by").map(|v| v.to_str().unwrap()),
        Some("g1")
    );
    // and the bidi call on the same connection, each answer awaited before the next
    // message, still works after it
    assert_eq!(c.bidi(&["a", "b"]).await?, ["g1:a", "g1:b"]);
    Ok(())
}

/// A client gone silent under an open stream (nothing it sends arrives any more, a
/// laptop asleep) does not hold its connection forever: the proxy's PING goes
/// unanswered and it closes the connection, though the stream keeps it from idling.
#[tokio::test]
async fn a_client_gone_silent_under_a_stream_is_let_go() -> anyhow::Result<()> {
    use std::sync::atomic::AtomicBool;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 31], "g1").await?;
    grpc_service(&hub, "echo", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "echo", "grpc.test", "echo", json!({})).await?;
    let p = proxy_with(&hub, None, |c| {
        c.limits.header_read_timeout = Duration::from_millis(300);
    })
    .await?;
    // a relay between the client and the proxy that can go silent: it then passes
    // nothing on either way, and notes when the proxy closes its side
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let relay_addr = relay.local_addr()?;
    let silent = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(tokio::sync::Notify::new());
    {
        let (silent, closed) = (silent.clone(), closed.clone());
        let upstream = p.http;
        tokio::spawn(async move {
            let (client, _) = relay.accept().await?;
            let proxy = tokio::net::TcpStream::connect(upstream).await?;
            let (mut cr, mut cw) = client.into_split();
            let (mut pr, mut pw) = proxy.into_split();
            let s = silent.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                while let Ok(n @ 1..) = cr.read(&mut buf).await {
                    if !s.load(Relaxed) && pw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                std::future::pending::<()>().await;
            });
            let mut buf = vec![0u8; 16384];
            while let Ok(n @ 1..) = pr.read(&mut buf).await {
                if !silent.load(Relaxed) {
                    let _ = cw.write_all(&buf[..n]).await;
                }
            }
            closed.notify_one();
            std::future::pending::<()>().await;
            anyhow::Ok(())
        });
    }
    let c = GrpcClient::connect(relay_addr, "grpc.test").await?;
    // a 10 s stream
    let ask = Echo {
        text: "s".into(),
        count: 100,
        sleep_ms: 100,
        ..Default::default()
    };
    let call = tokio::spawn(async move { c.stream(ask, None).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    silent.store(true, Relaxed);
    tokio::time::timeout(Duration::from_secs(5), closed.notified())
        .await
        .map_err(|_| {
            anyhow::anyhow!("the proxy still holds the silent client's connection after 5 s")
        })?;
    call.abort();
    Ok(())
}

#[tokio::test]
async fn concurrent_grpc_calls_share_few_upstream_connections() -> anyhow::Result<()> {
    const CALLS: usize = 60;
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 2], "g2").await?;
    grpc_service(
        &hub,
        "many",
        Some("kubernetes.io/h2c"),
        &[("east", &[pod.addr])],
    )
    .await?;
    grpc_mci(&hub, "many", "many.test", "many", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let admin = p.metrics.unwrap();
    let c = GrpcClient::connect(p.http, "many.test").await?;
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let ask = Echo {
                    sleep_ms: 300,
                    ..Echo::text(&i.to_string())
                };
                c.unary(ask, None).await
            })
        })
        .collect();
    // While they are all open upstream: one connection, every call a stream on it.
    let http = client();
    eventually(
        "all calls open upstream",
        Duration::from_secs(5),
        || async {
            metric(&http, admin, "causeway_proxy_upstream_h2_streams")
                .await
                .ok()
                == Some(CALLS as f64)
        },
    )
    .await?;
    assert_eq!(
        metric(&http, admin, "causeway_proxy_upstream_h2_connections").await?,
        1.0
    );
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(call.await??.into_inner().text, format!("g2:{i}"));
    }
    assert_eq!(
        pod.conns(),
        1,
        "{CALLS} concurrent calls, one upstream connection"
    );
    assert_eq!(pod.calls(), CALLS as u64);
    // Streams end with their responses; the connection stays for the next calls.
    assert_eq!(
        metric(&http, admin, "causeway_proxy_upstream_h2_streams").await?,
        0.0
    );
    c.unary(Echo::text("again"), None).await?;
    assert_eq!(pod.conns(), 1);
    Ok(())
}

#[tokio::test]
async fn proxy_errors_to_grpc_calls_are_grpc_statuses() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::{MAX_PENDING_REQUESTS, MAX_REQUESTS};
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 3], "g3").await?;
    grpc_service(&hub, "slow", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "slow", "slow.test", "slow", json!({})).await?;
    grpc_service(&hub, "gone", Some("grpc"), &[("east", &[])]).await?;
    grpc_mci(&hub, "gone", "gone.test", "gone", json!({})).await?;
    grpc_service(&hub, "tight", Some("grpc"), &[("east", &[pod.addr])]).await?;
    let one_at_a_time = json!({ MAX_REQUESTS: "1", MAX_PENDING_REQUESTS: "0" });
    grpc_mci(&hub, "tight", "tight.test", "tight", one_at_a_time).await?;
    let p = proxy(&hub, None).await?;

    // No route: UNIMPLEMENTED, trailers-only (tonic reads the status from the head).
    let c = GrpcClient::connect(p.http, "nowhere.test").await?;
    let e = c.unary(Echo::text("x"), None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("no MultiClusterIngress rule"), "{e:?}");

    // No endpoints: UNAVAILABLE.
    let c = GrpcClient::connect(p.http, "gone.test").await?;
    let e = c.unary(Echo::text("x"), None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("no ready endpoints"), "{e:?}");

    // grpc-timeout passes before the response head: DEADLINE_EXCEEDED from the proxy.
    let c = GrpcClient::connect(p.http, "slow.test").await?;
    let ask = Echo {
        sleep_ms: 3000,
        ..Echo::text("x")
    };
    let started = std::time::Instant::now();
    let e = c
        .unary(ask, Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(
        e.message().contains("grpc-timeout"),
        "the proxy's answer: {e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // ... and while the response streams: it ends with DEADLINE_EXCEEDED.
    let ask = Echo {
        count: 100,
        sleep_ms: 50,
        ..Echo::text("s")
    };
    let e = c
        .stream(ask, Some(Duration::from_millis(400)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // Within its deadline the same call succeeds.
    let ask = Echo {
        sleep_ms: 10,
        ..Echo::text("y")
    };
    let r = c.unary(ask, Some(Duration::from_secs(5))).await?;
    assert_eq!(r.into_inner().text, "g3:y");

    // Circuit open (one call at a time, none waiting): UNAVAILABLE while one is open.
    let c = GrpcClient::connect(p.http, "tight.test").await?;
    let slow = Echo {
        sleep_ms: 1000,
        ..Echo::text("first")
    };
    let before = pod.calls();
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.unary(slow, None).await }
    });
    eventually(
        "the first call upstream",
        Duration::from_secs(5),
        || async { pod.calls() > before },
    )
    .await?;
    let e = c.unary(Echo::text("second"), None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("circuit open"), "{e:?}");
    assert_eq!(first.await??.into_inner().text, "g3:first");
    Ok(())
}

#[tokio::test]
async fn grpc_calls_are_retried_only_for_the_annotated_codes() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::{GRPC_RETRY_ON, LOAD_BALANCER};
    let hub = Hub::start().await?;
    let bad = GrpcPod::start([127, 0, 41, 4], "bad").await?;
    let good = GrpcPod::start([127, 0, 41, 5], "good").await?;
    bad.fail_with.store(Code::Unavailable as u32, Relaxed);
    grpc_service(
        &hub,
        "flaky",
        Some("grpc"),
        &[("east", &[bad.addr, good.addr])],
    )
    .await?;
    let rr = json!({ LOAD_BALANCER: "round-robin" });
    let retried =
        json!({ LOAD_BALANCER: "round-robin", GRPC_RETRY_ON: "unavailable,resource-exhausted" });
    grpc_mci(&hub, "retried", "retried.test", "flaky", retried).await?;
    grpc_mci(&hub, "plain", "plain.test", "flaky", rr).await?;
    // `bad`'s UNAVAILABLE answers count as failures: kept from ejecting it, so every
    // case below reaches it.
    let p = proxy_with(&hub, None, |c| c.outlier.consecutive_failures = u32::MAX).await?;

    // Listed code: every unary call ends at `good`, those that tried `bad` on a retry.
    let c = GrpcClient::connect(p.http, "retried.test").await?;
    for i in 0..10 {
        let r = c.unary(Echo::text(&i.to_string()), None).await?;
        assert_eq!(r.into_inner().text, format!("good:{i}"));
    }
    assert!(bad.calls() > 0, "round robin sent first attempts to bad");

    // A streamed body (bidi: the client waits for answers) is never replayed.
    let before = bad.calls() + good.calls();
    let mut unavailable = 0;
    for _ in 0..6 {
        match c.bidi(&["a", "b"]).await {
            Ok(got) => assert_eq!(got, ["good:a", "good:b"]),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                unavailable += 1;
            }
        }
    }
    assert!(
        unavailable > 0,
        "bidi calls that reached bad were answered, not retried"
    );
    assert_eq!(
        bad.calls() + good.calls() - before,
        6,
        "one attempt per bidi call"
    );

    // A code not listed arrives as the upstream answered it.
    bad.fail_with.store(Code::PermissionDenied as u32, Relaxed);
    let mut denied = 0;
    for i in 0..10 {
        match c.unary(Echo::text(&i.to_string()), None).await {
            Ok(r) => assert_eq!(r.into_inner().text, format!("good:{i}")),
            Err(e) => {
                assert_eq!(
                    (e.code(), e.message()),
                    (Code::PermissionDenied, "bad said no")
                );
                denied += 1;
            }
        }
    }
    assert!(denied > 0);

    // Without the annotation, no gRPC status is retried.
    bad.fail_with.store(Code::Unavailable as u32, Relaxed);
    let c = GrpcClient::connect(p.http, "plain.test").await?;
    let mut unavailable = 0;
    for i in 0..10 {
        match c.unary(Echo::text(&i.to_string()), None).await {
            Ok(r) => assert_eq!(r.into_inner().text, format!("good:{i}")),
            Err(e) => {
                assert_eq!((e.code(), e.message()), (Code::Unavailable, "bad said no"));
                unavailable += 1;
            }
        }
    }
    assert!(unavailable > 0);
    Ok(())
}

#[tokio::test]
async fn a_grpc_backend_killed_under_load_fails_cleanly_then_calls_go_to_the_survivor()
-> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::LOAD_BALANCER;
    const WORKERS: usize = 8;
    const PER_WORKER: usize = 40;
    const KILL_AT: usize = 80;
    let hub = Hub::start().await?;
    let doomed = GrpcPod::start([127, 0, 41, 6], "doomed").await?;
    let survivor = GrpcPod::start([127, 0, 41, 7], "survivor").await?;
    let clusters: &[(&str, &[SocketAddr])] =
        &[("east", &[doomed.addr]), ("west", &[survivor.addr])];
    grpc_service(&hub, "load", Some("grpc"), clusters).await?;
    grpc_mci(
        &hub,
        "load",
        "load.test",
        "load",
        json!({ LOAD_BALANCER: "round-robin" }),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "load.test").await?;
    let doomed = Arc::new(doomed);
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (c, done, doomed) = (c.clone(), done.clone(), doomed.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..PER_WORKER {
                    let ask = Echo {
                        sleep_ms: 5,
                        ..Echo::text(&format!("{w}.{i}"))
                    };
                    let r = c.unary(ask, None).await;
                    let n = done.fetch_add(1, Relaxed);
                    if n == KILL_AT {
                        doomed.kill();
                    }
                    out.push((n, r.map(|r| r.into_inner().text)));
                }
                out
            })
        })
        .collect();
    let mut results = Vec::new();
    for w in workers {
        results.extend(w.await?);
    }
    results.sort_by_key(|(n, _)| *n);
    assert_eq!(results.len(), WORKERS * PER_WORKER);
    let mut failed = 0;
    for (n, r) in &results {
        match r {
            Ok(text) => assert!(
                text.starts_with("doomed:") || text.starts_with("survivor:"),
                "{text}"
            ),
            // Calls in flight on the killed backend: UNAVAILABLE, the code gRPC
            // clients retry (not a stream reset, read as INTERNAL).
            Err(e) => {
                assert!(*n >= KILL_AT, "call {n} failed before the kill: {e:?}");
                assert_eq!(e.code(), Code::Unavailable, "call {n}: {e:?}");
                failed += 1;
            }
        }
    }
    // At most the calls in flight when it died; the later ones that picked it were
    // refused at connect and went to the survivor, their streamed bodies still unsent.
    assert!(failed < WORKERS, "{failed} calls failed");
    assert!(
        doomed.calls() > 0,
        "the doomed backend served before it was killed"
    );
    // The endpoint was ejected; the last half of the calls all went to the survivor.
    let admin = p.metrics.unwrap();
    assert!(metric(&client(), admin, "causeway_proxy_ejections_total").await? >= 1.0);
    for (n, r) in &results[results.len() / 2..] {
        let text = r.as_ref().map_err(|e| anyhow::anyhow!("call {n}: {e:?}"))?;
        assert!(text.starts_with("survivor:"), "call {n}: {text}");
    }
    Ok(())
}

#[tokio::test]
async fn grpc_over_tls_to_the_backend_with_the_backend_protocol_annotation() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::BACKEND_PROTOCOL;
    let key = rcgen::KeyPair::generate()?;
    let cert =
        rcgen::CertificateParams::new(vec!["echo.demo.svc".to_string()])?.self_signed(&key)?;
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let hub = Hub::start().await?;
    let pod = GrpcPod::start_tls([127, 0, 41, 8], "tls", Some(Arc::new(tls))).await?;
    // No appProtocol on the port: the annotation alone says h2 over TLS.
    grpc_service(&hub, "secure", None, &[("east", &[pod.addr])]).await?;
    grpc_mci(
        &hub,
        "secure",
        "secure.test",
        "secure",
        json!({ BACKEND_PROTOCOL: "h2" }),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "secure.test").await?;
    assert_eq!(
        c.unary(Echo::text("x"), None).await?.into_inner().text,
        "tls:x"
    );
    let ask = Echo {
        count: 3,
        ..Echo::text("s")
    };
    let (got, trailers) = c.stream(ask, None).await?;
    assert_eq!(got, ["tls:s-0", "tls:s-1", "tls:s-2"]);
    assert_eq!(trailers.get("x-served-by").unwrap(), "tls");
    assert_eq!(c.bidi(&["a", "b"]).await?, ["tls:a", "tls:b"]);
    assert_eq!(pod.conns(), 1);
    Ok(())
}

#[tokio::test]
async fn active_health_checks_speak_http2_to_http2_backends() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::{
        HEALTH_CHECK_INTERVAL, HEALTH_CHECK_PATH, LOAD_BALANCER,
    };
    let hub = Hub::start().await?;
    let sick = GrpcPod::start([127, 0, 41, 9], "sick").await?;
    let well = GrpcPod::start([127, 0, 41, 10], "well").await?;
    sick.health.store(503, Relaxed);
    let eps = [sick.addr, well.addr];
    grpc_service(
        &hub,
        "checked",
        Some("kubernetes.io/h2c"),
        &[("east", &eps)],
    )
    .await?;
    let ann = json!({
        HEALTH_CHECK_PATH: "/healthz",
        HEALTH_CHECK_INTERVAL: "100ms",
        LOAD_BALANCER: "round-robin",
    });
    grpc_mci(&hub, "checked", "checked.test", "checked", ann).await?;
    let p = proxy(&hub, None).await?;
    let unhealthy = |addr| {
        let t = p.table();
        let ep = t
            .backends
            .iter()
            .flat_map(|b| b.balancer.endpoints())
            .find(|e| e.addr == addr);
        ep.map(|e| e.is_unhealthy())
    };
    // Both are checked over HTTP/2 (an HTTP/1.1 probe gets no answer from them).
    eventually("both checked", Duration::from_secs(10), || async {
        unhealthy(sick.addr) == Some(true) && well.checks.load(Relaxed) >= 2
    })
    .await?;
    assert_eq!(unhealthy(well.addr), Some(false));
    let c = GrpcClient::connect(p.http, "checked.test").await?;
    for i in 0..6 {
        let r = c.unary(Echo::text(&i.to_string()), None).await?;
        assert_eq!(r.into_inner().text, format!("well:{i}"));
    }
    // Healthy again: back in rotation.
    sick.health.store(200, Relaxed);
    eventually("sick recovered", Duration::from_secs(10), || async {
        unhealthy(sick.addr) == Some(false)
    })
    .await?;
    let mut served = std::collections::BTreeSet::new();
    for i in 0..6 {
        let text = c
            .unary(Echo::text(&i.to_string()), None)
            .await?
            .into_inner()
            .text;
        served.insert(text.split(':').next().unwrap_or_default().to_string());
    }
    assert_eq!(served, ["sick".to_string(), "well".to_string()].into());
    Ok(())
}

#[tokio::test]
async fn a_backend_closing_its_connection_gracefully_loses_no_call() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 11], "rolling").await?;
    grpc_service(&hub, "rolling", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "rolling", "rolling.test", "rolling", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "rolling.test").await?;
    for round in 1..=3u64 {
        for i in 0..5 {
            let r = c.unary(Echo::text(&format!("{round}.{i}")), None).await?;
            assert_eq!(r.into_inner().text, format!("rolling:{round}.{i}"));
        }
        assert_eq!(pod.conns(), round, "one connection until it is closed");
        // GOAWAY: the next calls take a new connection, none fails.
        pod.drain();
    }
    Ok(())
}

/// A pod that answers every call at once with a trailers-only `UNAVAILABLE` is a
/// failing pod: ejected, not the favourite of the (default, peak-EWMA) balancer for its
/// fast answers.
#[tokio::test]
async fn a_pod_failing_every_call_at_once_is_ejected_not_favoured() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let bad = GrpcPod::start([127, 0, 41, 40], "bad").await?;
    let good = GrpcPod::start([127, 0, 41, 41], "good").await?;
    bad.fail_with.store(Code::Unavailable as u32, Relaxed);
    // Slower than `bad`'s answers: peak-EWMA prefers `bad`.
    good.delay_ms.store(20, Relaxed);
    let eps = [bad.addr, good.addr];
    grpc_service(&hub, "ewma", Some("grpc"), &[("east", &eps)]).await?;
    grpc_mci(&hub, "ewma", "ewma.test", "ewma", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "ewma.test").await?;
    for i in 0..30 {
        if let Err(e) = c.unary(Echo::text(&i.to_string()), None).await {
            assert_eq!((e.code(), e.message()), (Code::Unavailable, "bad said no"));
        }
    }
    assert!(bad.calls() > 0);
    let admin = p.metrics.unwrap();
    let ejections = metric(&client(), admin, "causeway_proxy_ejections_total").await?;
    assert!(ejections >= 1.0, "ejections: {ejections}");
    // Ejected: the calls after go to the good pod.
    let before = bad.calls();
    for i in 0..10 {
        let r = c.unary(Echo::text(&i.to_string()), None).await?;
        assert_eq!(r.into_inner().text, format!("good:{i}"));
    }
    assert_eq!(bad.calls(), before);
    Ok(())
}

/// Clients that stop reading large server streams do not use up the flow-control
/// window of the upstream connection their calls share with everyone's.
#[tokio::test]
async fn slow_readers_do_not_stall_other_calls_on_the_shared_connection() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 42], "big").await?;
    grpc_service(&hub, "big", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "big", "big.test", "big", json!({})).await?;
    let p = proxy(&hub, None).await?;
    // Three clients open 9 MiB streams and read none of it.
    let mut held = Vec::new();
    for _ in 0..3 {
        let c = GrpcClient::connect(p.http, "big.test").await?;
        let ask = Echo {
            count: 9 * 1024,
            ..Echo::text(&"x".repeat(1024))
        };
        held.push((c.open_stream(ask, None).await?, c));
    }
    // Time for the windows to fill.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(pod.conns(), 1, "the calls share one upstream connection");
    let c = GrpcClient::connect(p.http, "big.test").await?;
    let r = tokio::time::timeout(Duration::from_secs(1), c.unary(Echo::text("hi"), None))
        .await
        .map_err(|_| anyhow::anyhow!("a unary call stalled behind three unread streams"))??;
    assert_eq!(r.into_inner().text, "big:hi");
    // The streams were only waiting: read, they go on.
    let (s, _) = &mut held[0];
    assert!(s.message().await?.is_some());
    Ok(())
}

/// The deadline ends a stream whose upstream is always ahead of its slow client (a
/// frame always at hand in the proxy).
#[tokio::test]
async fn a_deadline_ends_a_stream_whose_upstream_is_always_ahead() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 43], "fast").await?;
    grpc_service(&hub, "fast", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "fast", "fast.test", "fast", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "fast.test").await?;
    let ask = Echo {
        count: 10_000,
        sleep_ms: 0,
        ..Echo::text(&"x".repeat(1024))
    };
    let started = std::time::Instant::now();
    let mut s = c.open_stream(ask, Some(Duration::from_millis(300))).await?;
    // About 10 messages a millisecond: 1 s for all of them.
    let mut got = 0;
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(10), s.message()).await? {
            Ok(Some(_)) => got += 1,
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
        if got % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let e = end.ok_or_else(|| anyhow::anyhow!("all {got} messages, past the deadline"))?;
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(got < 10_000, "{got}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// Each attempt carries what is left of the call's deadline upstream: less than the
/// client gave, and less again on the retry.
#[tokio::test]
async fn each_attempt_carries_what_is_left_of_the_deadline() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::{GRPC_RETRY_ON, LOAD_BALANCER};
    let hub = Hub::start().await?;
    let bad = GrpcPod::start([127, 0, 41, 44], "bad").await?;
    let good = GrpcPod::start([127, 0, 41, 45], "good").await?;
    bad.fail_with.store(Code::Unavailable as u32, Relaxed);
    let eps = [bad.addr, good.addr];
    grpc_service(&hub, "budget", Some("grpc"), &[("east", &eps)]).await?;
    let ann = json!({ LOAD_BALANCER: "round-robin", GRPC_RETRY_ON: "unavailable" });
    grpc_mci(&hub, "budget", "budget.test", "budget", ann).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "budget.test").await?;
    let given = Duration::from_secs(5);
    // Round robin: within two calls, one goes to `bad` first, then to `good`.
    for i in 0..2 {
        let ask = Echo {
            sleep_ms: 100,
            ..Echo::text(&i.to_string())
        };
        let r = c.unary(ask, Some(given)).await?;
        assert_eq!(r.into_inner().text, format!("good:{i}"));
        if !bad.timeouts().is_empty() {
            break;
        }
    }
    let first = bad.timeouts();
    let retry = good.timeouts();
    assert_eq!(first.len(), 1, "{first:?}");
    let first = grpc_timeout(&first[0]).unwrap();
    let retry = grpc_timeout(retry.last().unwrap()).unwrap();
    assert!(first < given, "first attempt: {first:?}");
    assert!(
        first > given - Duration::from_secs(1),
        "first attempt: {first:?}"
    );
    // The first attempt took 100 ms.
    assert!(
        retry + Duration::from_millis(100) <= first,
        "{retry:?} after {first:?}"
    );
    Ok(())
}

/// The read timeout ends a stream with `DEADLINE_EXCEEDED` trailers (not a stream
/// reset), but not one whose call has a deadline: that governs. And a backend killed
/// mid-stream: the client gets `UNAVAILABLE` (which it may retry), not a reset
/// (`INTERNAL`).
#[tokio::test]
async fn the_read_timeout_ends_a_stream_unless_the_call_has_a_deadline() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 46], "quiet").await?;
    grpc_service(&hub, "cut", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "cut", "cut.test", "cut", json!({})).await?;
    let p = proxy_with(&hub, None, |c| {
        c.defaults.read_timeout = Duration::from_millis(500);
    })
    .await?;
    let c = GrpcClient::connect(p.http, "cut.test").await?;

    // The read timeout: DEADLINE_EXCEEDED.
    let ask = Echo {
        count: 3,
        sleep_ms: 1000,
        ..Echo::text("quiet")
    };
    let e = c.stream(ask.clone(), None).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("read timeout"), "{e:?}");
    // With a deadline, that alone bounds the stream.
    let (got, _) = c.stream(ask, Some(Duration::from_secs(8))).await?;
    assert_eq!(got.len(), 3);
    Ok(())
}

#[tokio::test]
async fn a_backend_killed_mid_stream_ends_the_call_unavailable() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 51], "doomed").await?;
    grpc_service(&hub, "killed", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "killed", "killed.test", "killed", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "killed.test").await?;
    let ask = Echo {
        count: 100,
        sleep_ms: 20,
        ..Echo::text("s")
    };
    let mut s = c.open_stream(ask, None).await?;
    for _ in 0..3 {
        assert!(s.message().await?.is_some());
    }
    pod.kill();
    let e = loop {
        match s.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => anyhow::bail!("the stream ended cleanly"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    Ok(())
}

/// A `grpc-timeout` longer than the route's request timeout replaces it for the wait
/// for the response head.
#[tokio::test]
async fn a_deadline_longer_than_the_request_timeout_is_honoured() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::REQUEST_TIMEOUT;
    let hub = Hub::start().await?;
    let pod = GrpcPod::start([127, 0, 41, 47], "patient").await?;
    grpc_service(&hub, "patient", Some("grpc"), &[("east", &[pod.addr])]).await?;
    let ann = json!({ REQUEST_TIMEOUT: "1s" });
    grpc_mci(&hub, "patient", "patient.test", "patient", ann).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "patient.test").await?;
    let ask = Echo {
        sleep_ms: 2000,
        ..Echo::text("x")
    };
    let r = c.unary(ask.clone(), Some(Duration::from_secs(5))).await?;
    assert_eq!(r.into_inner().text, "patient:x");
    // Without one, the request timeout still applies.
    let e = c.unary(ask, None).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("did not answer within"), "{e:?}");
    Ok(())
}

/// A pod drained (GOAWAY) while 8 calls are in flight and it lets only 4 streams run
/// at once: the calls still waiting for a stream to open never reached it, and go out
/// again on a new connection. None fails.
#[tokio::test]
async fn a_drain_with_calls_waiting_for_a_stream_loses_none() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pod = GrpcPod::start_limited([127, 0, 41, 48], "limited", 4).await?;
    grpc_service(&hub, "limited", Some("grpc"), &[("east", &[pod.addr])]).await?;
    grpc_mci(&hub, "limited", "limited.test", "limited", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "limited.test").await?;
    // The connection is up, and its stream limit known.
    c.unary(Echo::text("warm"), None).await?;
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let ask = Echo {
                    sleep_ms: 300,
                    ..Echo::text(&i.to_string())
                };
                c.unary(ask, None).await
            })
        })
        .collect();
    eventually("4 calls served", Duration::from_secs(5), || async {
        pod.calls() == 5
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    pod.drain();
    for (i, call) in calls.into_iter().enumerate() {
        let r = call
            .await?
            .map_err(|e| anyhow::anyhow!("call {i}: {e:?}"))?;
        assert_eq!(r.into_inner().text, format!("limited:{i}"));
    }
    assert_eq!(pod.calls(), 9, "each call served once");
    Ok(())
}

/// Streams an upstream refuses (`REFUSED_STREAM`: not processed) go to another
/// endpoint, bodies and all, though gRPC calls are POSTs.
#[tokio::test]
async fn refused_streams_are_sent_again_elsewhere() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::LOAD_BALANCER;
    let hub = Hub::start().await?;
    let refuser = Refuser::start([127, 0, 41, 49]).await?;
    let good = GrpcPod::start([127, 0, 41, 50], "good").await?;
    let eps = [refuser.addr, good.addr];
    grpc_service(&hub, "busy", Some("grpc"), &[("east", &eps)]).await?;
    let ann = json!({ LOAD_BALANCER: "round-robin" });
    grpc_mci(&hub, "busy", "busy.test", "busy", ann).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "busy.test").await?;
    for i in 0..6 {
        let r = c.unary(Echo::text(&i.to_string()), None).await?;
        assert_eq!(r.into_inner().text, format!("good:{i}"));
    }
    assert!(refuser.refused.load(Relaxed) > 0, "round robin tried it");
    assert_eq!(good.calls(), 6);
    Ok(())
}

/// A refused stream whose body was streamed (a bidi call: the client sends as the
/// answers come) cannot be sent again: the proxy answers UNAVAILABLE at once rather
/// than resending half a body elsewhere; each call is one attempt.
#[tokio::test]
async fn a_refused_stream_with_a_streamed_body_is_not_sent_again() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::LOAD_BALANCER;
    let hub = Hub::start().await?;
    let refuser = Refuser::start([127, 0, 41, 52]).await?;
    let good = GrpcPod::start([127, 0, 41, 53], "good").await?;
    let eps = [refuser.addr, good.addr];
    grpc_service(&hub, "busy2", Some("grpc"), &[("east", &eps)]).await?;
    let ann = json!({ LOAD_BALANCER: "round-robin" });
    grpc_mci(&hub, "busy2", "busy2.test", "busy2", ann).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "busy2.test").await?;
    let mut unavailable = 0;
    for _ in 0..6 {
        let call = tokio::time::timeout(Duration::from_secs(10), c.bidi(&["a", "b"])).await?;
        match call {
            Ok(got) => assert_eq!(got, ["good:a", "good:b"]),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                unavailable += 1;
            }
        }
    }
    let refused = refuser.refused.load(Relaxed);
    assert!(refused > 0, "round robin tried the refuser");
    assert_eq!(
        unavailable, refused,
        "every refused bidi call ended UNAVAILABLE"
    );
    assert_eq!(
        refused as u64 + good.calls(),
        6,
        "one attempt per call: none was sent again"
    );
    Ok(())
}

/// Calls whose deadline is longer than the route's request timeout, to a pod that
/// takes them and sends no response head: the deadline answers them
/// (DEADLINE_EXCEEDED), and the wait is not held against the pod. gRPC servers hold a
/// stream's head until its first message, so a quiet subscription looks the same as
/// this; counting it would eject healthy pods.
#[tokio::test]
async fn a_call_quiet_past_the_request_timeout_is_not_held_against_the_pod() -> anyhow::Result<()> {
    use causeway_crds::well_known::annotations::mci::{LOAD_BALANCER, REQUEST_TIMEOUT};
    let hub = Hub::start().await?;
    let hung = Refuser::start_hung([127, 0, 41, 60]).await?;
    let good = GrpcPod::start([127, 0, 41, 61], "good").await?;
    let eps = [hung.addr, good.addr];
    grpc_service(&hub, "hung", Some("grpc"), &[("east", &eps)]).await?;
    let ann = json!({ REQUEST_TIMEOUT: "1s", LOAD_BALANCER: "round-robin" });
    grpc_mci(&hub, "hung", "hung.test", "hung", ann).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "hung.test").await?;
    let calls = (0..16).map(|i| {
        let c = c.clone();
        async move {
            c.unary(Echo::text(&i.to_string()), Some(Duration::from_secs(2)))
                .await
        }
    });
    for r in futures::future::join_all(calls).await {
        if let Err(e) = r {
            assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
        }
    }
    assert!(hung.refused.load(Relaxed) > 0, "round robin tried it");
    let admin = p.metrics.unwrap();
    let ejections = metric(&client(), admin, "causeway_proxy_ejections_total").await?;
    assert_eq!(ejections, 0.0);
    Ok(())
}

/// A healthy pod answering `DEADLINE_EXCEEDED` to calls that carried a deadline (its
/// copy of it ran out) is not failing: it is not ejected, though it answers fast.
#[tokio::test]
async fn deadline_exceeded_under_client_deadlines_ejects_no_pod() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let late = GrpcPod::start([127, 0, 41, 62], "late").await?;
    let good = GrpcPod::start([127, 0, 41, 63], "good").await?;
    late.fail_with.store(Code::DeadlineExceeded as u32, Relaxed);
    good.delay_ms.store(20, Relaxed);
    let eps = [late.addr, good.addr];
    grpc_service(&hub, "late", Some("grpc"), &[("east", &eps)]).await?;
    grpc_mci(&hub, "late", "late.test", "late", json!({})).await?;
    let p = proxy(&hub, None).await?;
    let c = GrpcClient::connect(p.http, "late.test").await?;
    for i in 0..30 {
        let r = c.unary(Echo::text(&i.to_string()), Some(Duration::from_secs(5)));
        if let Err(e) = r.await {
            assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
        }
    }
    assert!(late.calls() > 0);
    let admin = p.metrics.unwrap();
    let ejections = metric(&client(), admin, "causeway_proxy_ejections_total").await?;
    assert_eq!(ejections, 0.0);
    Ok(())
}

/// An HTTP/1.1 client cannot receive trailers: a gRPC stream whose backend is killed
/// mid-stream aborts its connection, never ends as a clean chunked body.
#[tokio::test]
async fn a_backend_killed_mid_stream_aborts_an_http1_client() -> anyhow::Result<()> {
    use prost::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hub = Hub::start().await?;
    let mut pods = Vec::new();
    let rounds = [(64, "cut", None), (65, "cut-deadline", Some("30S"))];
    for (ip, svc, _) in rounds {
        let pod = GrpcPod::start([127, 0, 41, ip], "doomed").await?;
        grpc_service(&hub, svc, Some("grpc"), &[("east", &[pod.addr])]).await?;
        grpc_mci(&hub, svc, &format!("{svc}.test"), svc, json!({})).await?;
        pods.push(pod);
    }
    let p = proxy(&hub, None).await?;
    let ask = Echo {
        count: 200,
        sleep_ms: 20,
        ..Echo::text("s")
    }
    .encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(ask.len() as u32).to_be_bytes());
    frame.extend_from_slice(&ask);
    for ((_, svc, deadline), pod) in rounds.into_iter().zip(&pods) {
        let mut tcp = tokio::net::TcpStream::connect(p.http).await?;
        let mut head = format!(
            "POST /test.Echo/Stream HTTP/1.1\r\nHost: {svc}.test\r\n\
             Content-Type: application/grpc\r\nTE: trailers\r\nContent-Length: {}\r\n",
            frame.len()
        );
        if let Some(d) = deadline {
            head.push_str(&format!("grpc-timeout: {d}\r\n"));
        }
        head.push_str("\r\n");
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&frame).await?;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // Some messages, then the kill.
        while got.windows(7).filter(|w| w == b"doomed:").count() < 3 {
            let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await??;
            anyhow::ensure!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        pod.kill();
        loop {
            match tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await? {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        assert!(
            !got.ends_with(b"0\r\n\r\n"),
            "{deadline:?}: a clean end: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    Ok(())
}

/// An HTTP/2 server that refuses every stream (`RST_STREAM` `REFUSED_STREAM`).
struct Refuser {
    addr: SocketAddr,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Refuser {
    async fn start(ip: [u8; 4]) -> anyhow::Result<Refuser> {
        Self::serve(ip, false).await
    }

    /// One that never answers (`refused` counts the calls).
    async fn start_hung(ip: [u8; 4]) -> anyhow::Result<Refuser> {
        Self::serve(ip, true).await
    }

    async fn serve(ip: [u8; 4], hang: bool) -> anyhow::Result<Refuser> {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        let l = tokio::net::TcpListener::bind(SocketAddr::from((ip, GRPC_PORT))).await?;
        let addr = l.local_addr()?;
        let refused = Arc::new(AtomicUsize::new(0));
        let n = refused.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let n = n.clone();
                let svc = hyper::service::service_fn(move |_req| {
                    n.fetch_add(1, Relaxed);
                    async move {
                        if hang {
                            std::future::pending::<()>().await;
                        }
                        Err::<http::Response<http_body_util::Empty<bytes::Bytes>>, _>(
                            h2::Error::from(h2::Reason::REFUSED_STREAM),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tcp), svc),
                );
            }
        });
        Ok(Refuser {
            addr,
            refused,
            task,
        })
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Hub objects for gRPC Service `svc`: the ServiceImport (port `grpc`, `appProtocol`
/// as given), and per cluster its ExportedService and slice of `endpoints` (ready).
pub async fn grpc_service(
    hub: &Hub,
    svc: &str,
    app_protocol: Option<&str>,
    clusters: &[(&str, &[SocketAddr])],
) -> anyhow::Result<()> {
    let mut port = json!({"name": "grpc", "protocol": "TCP", "port": 50051});
    if let Some(a) = app_protocol {
        port["appProtocol"] = json!(a);
    }
    hub.apply(
        "multicluster.x-k8s.io/v1beta1",
        "ServiceImport",
        Some(NS),
        svc,
        json!({"spec": {"type": "ClusterSetIP", "ports": [port.clone()]}}),
    )
    .await?;
    for (cluster, endpoints) in clusters {
        let mut exported = port.clone();
        exported["targetPort"] = json!(GRPC_PORT);
        hub.apply(
            "causeway.io/v1alpha1",
            "ExportedService",
            Some(NS),
            &format!("{svc}.{cluster}"),
            json!({"spec": {"cluster": cluster, "service": svc, "ports": [exported]}}),
        )
        .await?;
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|a| json!({"addresses": [a.ip().to_string()], "conditions": {"ready": true}}))
            .collect();
        hub.apply(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            Some(NS),
            &format!("{svc}-{cluster}"),
            json!({
                "metadata": {"labels": {
                    causeway_crds::well_known::labels::SERVICE_NAME: svc,
                    causeway_crds::well_known::labels::SOURCE_CLUSTER: cluster,
                    "endpointslice.kubernetes.io/managed-by": "causeway.io"}},
                "addressType": "IPv4",
                "ports": [{"name": "grpc", "protocol": "TCP", "port": GRPC_PORT}],
                "endpoints": eps
            }),
        )
        .await?;
    }
    Ok(())
}

/// An MCI `name` sending every request for `host` to `svc`'s port `grpc`.
pub async fn grpc_mci(
    hub: &Hub,
    name: &str,
    host: &str,
    svc: &str,
    annotations: Value,
) -> anyhow::Result<()> {
    let backend = json!({"service": {"name": svc, "port": {"name": "grpc"}}});
    hub.mci(
        name,
        json!({"rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]}),
        annotations,
    )
    .await
}
