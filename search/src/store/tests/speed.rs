//! Rough speed figures (ignored by default; run with
//! `cargo test -p causeway-search --profile bench-fast store::tests::speed -- --ignored --nocapture`):
//! 100,000 objects (or `CAUSEWAY_SPEED_OBJECTS`) upserted in batches of 500, then paged
//! queries and their plans.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

const OBJECTS: usize = 100_000;
const BATCH: usize = 500;

fn batch(start: usize) -> Vec<Record> {
    (start..start + BATCH)
        .map(|i| {
            let extra = json!({
                "metadata": {
                    "labels": {"app": format!("app-{}", i % 100), "tier": (["front", "back"][i % 2])},
                    "annotations": {"example.com/note": "x".repeat(200)},
                    "ownerReferences": [{"uid": format!("owner-{}", i / 10), "controller": true}],
                    "creationTimestamp": jiff::Timestamp::from_second(1_704_067_200 + i as i64).unwrap().to_string(),
                },
                "status": {"phase": (["Running", "Pending"][i % 2]), "replicas": i % 5},
            });
            record(
                &format!("c{}", i % 5),
                &format!("ns-{}", i % 50),
                &format!("obj-{i:07}"),
                &(i + 1).to_string(),
                extra,
            )
        })
        .collect()
}

/// This process's CPU time (user + system), from /proc/self/stat (Linux; 0 elsewhere).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after_comm
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0);
    Duration::from_millis(ticks * 10)
}

fn percentile(mut d: Vec<Duration>, p: f64) -> Duration {
    d.sort();
    d[((d.len() - 1) as f64 * p).round() as usize]
}

both!(
    #[ignore = "speed figures, run on demand"]
    speed,
    |s: Store, spec: String| async move {
        let objects = std::env::var("CAUSEWAY_SPEED_OBJECTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(OBJECTS);
        let (mut wall, mut used) = (Duration::ZERO, Duration::ZERO);
        for start in (0..objects).step_by(BATCH) {
            let b = batch(start);
            let (t, c) = (Instant::now(), cpu());
            s.upsert(b).await.unwrap();
            (wall, used) = (wall + t.elapsed(), used + (cpu() - c));
        }
        let secs = wall.as_secs_f64();
        // SQLite works in this process: its CPU time is the rate on an idle machine
        let per_cpu = match s.backend() {
            "sqlite" => format!(
                "; {:.1} CPU-s in this process ({:.0} objects per CPU-s)",
                used.as_secs_f64(),
                objects as f64 / used.as_secs_f64().max(0.001)
            ),
            _ => String::new(),
        };
        println!(
            "{}: {objects} objects in batches of {BATCH}: {secs:.1} s in upserts, {:.0} objects/s{per_cpu}",
            s.backend(),
            objects as f64 / secs,
        );
        let again: Vec<Vec<Record>> = (0..OBJECTS).step_by(BATCH).take(20).map(batch).collect();
        let started = Instant::now();
        for b in again {
            s.upsert(b).await.unwrap();
        }
        println!(
            "{}: 10,000 unchanged objects re-upserted: {:.0} objects/s",
            s.backend(),
            10_000.0 / started.elapsed().as_secs_f64()
        );
        let queries = [
            "limit=500",
            "limit=500&withRemainingCount=true",
            "limit=100&orderby=created_at_desc",
            "limit=100&orderby=resource_version",
            "limit=100&clusters=c1&namespaces=ns-7",
            "limit=100&labelSelector=app%3Dapp-7",
            "limit=100&labelSelector=app%3Dapp-7,tier!%3Dfront",
            "limit=100&fieldSelector=status.phase%3DRunning",
            "limit=100&fuzzy-name=00042",
            "limit=100&since=2024-01-01T12:00:00Z&before=2024-01-01T13:00:00Z",
        ];
        for qs in queries {
            let (times, _) = timed_pages(&s, &deployments(), qs, 30).await;
            println!(
                "{}: {qs}: up to 30 consecutive pages p50 {:?} p99 {:?}\n    {}",
                s.backend(),
                percentile(times.clone(), 0.5),
                percentile(times, 0.99),
                plan(&s, qs).await
            );
        }
        if s.backend() == "postgres" {
            testing::drop_postgres_db(&spec).await;
        }
    }
);

/// The time of each of up to `pages` consecutive pages of `qs` (by continue token), and
/// the objects they held.
async fn timed_pages(s: &Store, gvr: &Gvr, qs: &str, pages: usize) -> (Vec<Duration>, usize) {
    let (mut times, mut n) = (Vec::new(), 0);
    let mut token = None::<String>;
    for _ in 0..pages {
        let q = match &token {
            Some(t) => format!("{qs}&continue={t}"),
            None => qs.to_string(),
        };
        let t = Instant::now();
        let page = s.search(gvr, &query(&q), &Scope::default()).await.unwrap();
        times.push(t.elapsed());
        n += page.items.len();
        token = page.continue_token;
        if token.is_none() {
            break;
        }
    }
    (times, n)
}

/// The bench's query shapes (`benches/search`) on an existing store, e.g. one the bench
/// left: `CAUSEWAY_SPEED_STORE=/path/search.db cargo test -p causeway-search --profile
/// bench-fast store::tests::speed::queries_on_an_existing_store -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "speed figures of an existing store, run on demand"]
async fn queries_on_an_existing_store() {
    let spec = std::env::var("CAUSEWAY_SPEED_STORE").expect("CAUSEWAY_SPEED_STORE: a store spec");
    let s = Store::open(&spec).await.unwrap();
    let pods = Gvr {
        group: "".into(),
        version: "v1".into(),
        resource: "pods".into(),
    };
    let queries = [
        "limit=100&namespaces=ns-07&labelSelector=tier%3Dbackend,version%20in%20(v1,v2,v3)",
        "limit=100&namespaces=ns-23&labelSelector=tier%3Ddb,version%20in%20(v1,v2,v3)",
        "limit=100&labelSelector=tier%3Dcache",
        "limit=100&labelSelector=app%3Dpayments-api-1600",
        "limit=100&fuzzyName=catalog-worker-1234",
        "limit=100&fuzzyName=payments-api-17",
        "limit=100&fuzzyName=checkout-web-4242",
        "limit=100&fuzzyName=pay",
        "limit=100&fuzzyName=zzzz",
        "limit=100&ownerName=payments-api-0&ownerGR=deployments.apps&ownerSeniority=1&clusters=member-0",
        "limit=100&ownerName=search-web-995&ownerGR=deployments.apps&ownerSeniority=1&clusters=member-9",
    ];
    for qs in queries {
        let (times, n) = timed_pages(&s, &pods, qs, 10).await;
        println!(
            "{}: {qs}: {} pages, {n} objects, p50 {:?} max {:?}",
            s.backend(),
            times.len(),
            percentile(times.clone(), 0.5),
            percentile(times, 1.0),
        );
    }
}
