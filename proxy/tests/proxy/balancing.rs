//! Balancing across member clusters: distribution, endpoint readiness changes, a
//! backend killed under load, locality spill-over and consistent-hash stickiness.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

async fn site(hub: &Hub, svc: &str, annotations: serde_json::Value) -> anyhow::Result<()> {
    hub.import(svc).await?;
    hub.mci(
        &format!("{svc}-mci"),
        json!({"rules": [rule(Some("lb.test"), "/", "Prefix", svc)]}),
        annotations,
    )
    .await
}

fn table_has(p: &causeway_proxy::Running, addr: std::net::SocketAddr) -> bool {
    p.table()
        .backends
        .iter()
        .any(|b| b.balancer.endpoints().iter().any(|e| e.addr == addr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spreads_over_three_clusters_and_follows_slice_changes() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let east = Pod::start([127, 0, 3, 1], "east").await?;
    let west = Pod::start([127, 0, 3, 2], "west").await?;
    let north = Pod::start([127, 0, 3, 3], "north").await?;
    // Round robin: sequential requests on loopback would let peak-EWMA settle on the
    // fastest endpoint (by design), which says nothing about cluster coverage.
    site(
        &hub,
        "web",
        json!({"causeway.io/load-balancer": "round-robin"}),
    )
    .await?;
    for pod in [&east, &west, &north] {
        hub.export("web", &pod.name, &[(pod.addr, true)]).await?;
    }
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("all endpoints", Duration::from_secs(10), || async {
        [&east, &west, &north]
            .iter()
            .all(|pod| table_has(&p, pod.addr))
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 300).await?;
    for name in ["east", "west", "north"] {
        let n = s.get(name).copied().unwrap_or(0);
        assert!(n >= 30, "{name} got {n} of 300: {s:?}");
    }

    // MCI-8: clusters in status.trafficBlockClusters get no new requests.
    hub.block("web-mci", &["north", "east"]).await?;
    eventually("blocked", Duration::from_secs(5), || async {
        !table_has(&p, north.addr) && !table_has(&p, east.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 20).await?;
    assert_eq!(s.get("west"), Some(&20), "{s:?}");
    hub.block("web-mci", &[]).await?;
    eventually("unblocked", Duration::from_secs(5), || async {
        table_has(&p, north.addr) && table_has(&p, east.addr)
    })
    .await?;

    // ready=false in the hub slice: no new requests within 1 s.
    let t0 = Instant::now();
    hub.slice("web", "west", &[(west.addr, false)]).await?;
    eventually("west unready", Duration::from_secs(1), || async {
        !table_has(&p, west.addr)
    })
    .await?;
    let took = t0.elapsed();
    let before = west.hits();
    let s = spread(&c, p.http, "lb.test", "/", 60).await?;
    assert_eq!(west.hits(), before, "{s:?}");
    assert_eq!(s.values().sum::<usize>(), s["east"] + s["north"], "{s:?}");
    eprintln!("unready endpoint left the table after {took:?}");

    // Removed from the slice entirely.
    hub.slice("web", "north", &[]).await?;
    eventually("north removed", Duration::from_secs(1), || async {
        !table_has(&p, north.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 30).await?;
    assert_eq!(s.get("east"), Some(&30), "{s:?}");

    // Back again.
    hub.slice("web", "west", &[(west.addr, true)]).await?;
    eventually("west back", Duration::from_secs(5), || async {
        table_has(&p, west.addr)
    })
    .await?;
    p.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_under_load_costs_no_client_errors() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pods = [
        Pod::start([127, 0, 4, 1], "a").await?,
        Pod::start([127, 0, 4, 2], "b").await?,
        Pod::start([127, 0, 4, 3], "c").await?,
    ];
    site(&hub, "web", json!({})).await?;
    hub.export("web", "east", &[(pods[0].addr, true), (pods[1].addr, true)])
        .await?;
    hub.export("web", "west", &[(pods[2].addr, true)]).await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("endpoints", Duration::from_secs(10), || async {
        pods.iter().all(|x| table_has(&p, x.addr))
    })
    .await?;
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (c, done, errors, addr) = (c.clone(), done.clone(), errors.clone(), p.http);
        workers.push(tokio::spawn(async move {
            for _ in 0..150 {
                match get(&c, addr, "lb.test", "/", &[]).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => {
                        eprintln!("error response: {} {}", r.status, r.body);
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("client error: {e:#}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    eventually("warm-up", Duration::from_secs(30), || async {
        done.load(Ordering::Relaxed) >= 100
    })
    .await?;
    pods[1].kill();
    let at_kill = pods.iter().map(Pod::hits).collect::<Vec<_>>();
    for w in workers {
        w.await?;
    }
    let errors = errors.load(Ordering::Relaxed);
    assert!(errors <= 2, "{errors} client errors of 600");
    let after: Vec<u64> = pods.iter().map(Pod::hits).collect();
    assert!(
        after[0] > at_kill[0] + 50 && after[2] > at_kill[2] + 50,
        "{at_kill:?} → {after:?}"
    );
    let m = get(&c, p.metrics.unwrap(), "x", "/metrics", &[])
        .await?
        .body;
    assert!(m.contains("causeway_proxy_ejections_total 1"), "{m}");
    p.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locality_keeps_traffic_home_and_spills_over() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let e1 = Pod::start([127, 0, 5, 1], "east").await?;
    let e2 = Pod::start([127, 0, 5, 2], "east").await?;
    let w1 = Pod::start([127, 0, 5, 3], "west").await?;
    let w2 = Pod::start([127, 0, 5, 4], "west").await?;
    site(&hub, "web", json!({})).await?;
    hub.export("web", "east", &[(e1.addr, true), (e2.addr, true)])
        .await?;
    hub.export("web", "west", &[(w1.addr, true), (w2.addr, true)])
        .await?;
    let p = proxy(&hub, Some("east")).await?;
    let c = client();
    eventually("endpoints", Duration::from_secs(10), || async {
        [&e1, &e2, &w1, &w2].iter().all(|x| table_has(&p, x.addr))
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 100).await?;
    assert_eq!(s.get("east"), Some(&100), "{s:?}");

    // Half of east unready: P0 keeps 50% × 1.4 = 70%.
    hub.slice("web", "east", &[(e1.addr, true), (e2.addr, false)])
        .await?;
    eventually("e2 out", Duration::from_secs(5), || async {
        !table_has(&p, e2.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 400).await?;
    let east = s.get("east").copied().unwrap_or(0);
    assert!(
        (200..=360).contains(&east),
        "expected ~280 of 400 to east: {s:?}"
    );

    // All of east unready: everything to west.
    hub.slice("web", "east", &[(e1.addr, false), (e2.addr, false)])
        .await?;
    eventually("east out", Duration::from_secs(5), || async {
        !table_has(&p, e1.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 50).await?;
    assert_eq!(s.get("west"), Some(&50), "{s:?}");

    // East back, then its pods die: failures are retried elsewhere and ejection
    // (at most half the backend) sends the traffic west.
    hub.slice("web", "east", &[(e1.addr, true), (e2.addr, true)])
        .await?;
    eventually("east back", Duration::from_secs(5), || async {
        table_has(&p, e1.addr) && table_has(&p, e2.addr)
    })
    .await?;
    assert_eq!(
        spread(&c, p.http, "lb.test", "/", 20).await?.get("east"),
        Some(&20)
    );
    e1.kill();
    e2.kill();
    // Until both are ejected a request may need two retries; the retry budget (20% of
    // requests plus 10/s) bounds what is retried, so a few 502s are allowed on a slow,
    // busy machine — then everything goes west.
    let s = spread(&c, p.http, "lb.test", "/", 60).await?;
    let west = s.get("west").copied().unwrap_or(0);
    assert!(west >= 48, "retried to west within the budget: {s:?}");
    let s = spread(&c, p.http, "lb.test", "/", 30).await?;
    assert_eq!(s.get("west"), Some(&30), "east ejected, all west: {s:?}");
    p.shutdown().await;
    Ok(())
}

/// MCI-4's cluster-local backends: a proxy in east sends to east's endpoints only and
/// never spills over; one that does not know its cluster answers 503 saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_local_backends_never_leave_home() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let e1 = Pod::start([127, 0, 5, 11], "east").await?;
    let w1 = Pod::start([127, 0, 5, 12], "west").await?;
    site(
        &hub,
        "web",
        json!({"causeway.io/backend-scope": "cluster-local"}),
    )
    .await?;
    hub.export("web", "east", &[(e1.addr, true)]).await?;
    hub.export("web", "west", &[(w1.addr, true)]).await?;
    let p = proxy(&hub, Some("east")).await?;
    let anywhere = proxy(&hub, None).await?;
    let c = client();
    eventually("east's endpoint", Duration::from_secs(10), || async {
        table_has(&p, e1.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 40).await?;
    assert_eq!(s.get("east"), Some(&40), "{s:?}");
    assert!(
        !table_has(&p, w1.addr),
        "west is not in an east proxy's table"
    );

    // east unready: no spill-over to west, a 503 that says why
    hub.slice("web", "east", &[(e1.addr, false)]).await?;
    eventually("east out", Duration::from_secs(5), || async {
        !table_has(&p, e1.addr)
    })
    .await?;
    let r = get(&c, p.http, "lb.test", "/", &[]).await?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body
            .contains("no ready endpoints of demo/web in this proxy's cluster east"),
        "{}",
        r.body
    );

    let r = get(&c, anywhere.http, "lb.test", "/", &[]).await?;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("causeway-proxy --cluster"), "{}", r.body);
    p.shutdown().await;
    anywhere.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_is_sticky() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let pods = [
        Pod::start([127, 0, 6, 1], "p1").await?,
        Pod::start([127, 0, 6, 2], "p2").await?,
        Pod::start([127, 0, 6, 3], "p3").await?,
    ];
    site(
        &hub,
        "web",
        json!({"causeway.io/load-balancer": "consistent-hash", "causeway.io/hash-on": "header:x-user"}),
    )
    .await?;
    hub.export(
        "web",
        "east",
        &pods.iter().map(|x| (x.addr, true)).collect::<Vec<_>>(),
    )
    .await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("endpoints", Duration::from_secs(10), || async {
        pods.iter().all(|x| table_has(&p, x.addr))
    })
    .await?;
    let mut used = std::collections::BTreeSet::new();
    for u in 0..20 {
        let user = format!("user-{u}");
        let first = get(&c, p.http, "lb.test", "/", &[("x-user", &user)])
            .await?
            .body;
        for _ in 0..4 {
            assert_eq!(
                get(&c, p.http, "lb.test", "/", &[("x-user", &user)])
                    .await?
                    .body,
                first,
                "{user}"
            );
        }
        used.insert(first);
    }
    assert!(used.len() >= 2, "{used:?}");
    p.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_weights_split_traffic() -> anyhow::Result<()> {
    let hub = Hub::start().await?;
    let east = Pod::start([127, 0, 11, 1], "east").await?;
    let west = Pod::start([127, 0, 11, 2], "west").await?;
    site(
        &hub,
        "web",
        json!({"causeway.io/cluster-weights": "east=3,west=1", "causeway.io/load-balancer": "least-request"}),
    )
    .await?;
    hub.export("web", "east", &[(east.addr, true)]).await?;
    hub.export("web", "west", &[(west.addr, true)]).await?;
    let p = proxy(&hub, None).await?;
    let c = client();
    eventually("endpoints", Duration::from_secs(10), || async {
        table_has(&p, east.addr) && table_has(&p, west.addr)
    })
    .await?;
    let s = spread(&c, p.http, "lb.test", "/", 400).await?;
    let e = s.get("east").copied().unwrap_or(0);
    assert!(
        (250..=350).contains(&e),
        "expected ~300 of 400 to east: {s:?}"
    );
    p.shutdown().await;
    Ok(())
}
