//! kubesim at scale: list 10,000 EndpointSlices, one write fanned out to 200 watchers,
//! 1,000 creates/s sustained. Prints a table and writes benches/results/kubesim.md.
//!
//! Run: `cargo run --profile bench-fast -p causeway-benches --bin bench-kubesim`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use causeway_benches::pct;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::sync::Semaphore;

/// Benchmarks of kubesim against the figures the spec asks for.
#[derive(Parser, Debug)]
struct Args {
    /// EndpointSlices to list.
    #[arg(long, default_value_t = 10_000)]
    slices: usize,
    /// Concurrent watchers for the fan-out test.
    #[arg(long, default_value_t = 200)]
    watchers: usize,
    /// Writes fanned out (each measured).
    #[arg(long, default_value_t = 50)]
    fanout_writes: usize,
    /// Target create rate per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds to sustain the create rate.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Where to write the markdown report ("-" for none).
    #[arg(long, default_value = "benches/results/kubesim.md")]
    out: String,
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn slice(i: usize) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}-abcde"), "namespace": "bench", "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": (0..3).map(|e| json!({"addresses": [format!("10.{}.{}.{}", (i >> 8) & 255, i & 255, e + 1)], "conditions": {"ready": true, "serving": true, "terminating": false}})).collect::<Vec<_>>()
    }))
    .expect("valid slice")
}

async fn client(s: &kubesim::Server) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(&s.kubeconfig())?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = kubesim::Server::start(kubesim::Config::new("bench")).await?;
    let c = client(&server).await?;
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bench"}}))?,
    )
    .await?;
    let eps: Api<EndpointSlice> = Api::namespaced(c.clone(), "bench");

    // 1. populate and list
    let t = Instant::now();
    let sem = Arc::new(Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..args.slices {
        let eps = eps.clone();
        let permit = sem.clone().acquire_owned().await?;
        tasks.push(tokio::spawn(async move {
            let _p = permit;
            eps.create(&PostParams::default(), &slice(i)).await
        }));
    }
    for t in tasks {
        t.await??;
    }
    let populate = t.elapsed();
    let mut list_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let l = eps.list(&ListParams::default()).await?;
        anyhow::ensure!(
            l.items.len() == args.slices,
            "listed {} of {}",
            l.items.len(),
            args.slices
        );
        list_times.push(t.elapsed());
    }
    list_times.sort();
    let mut raw_times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let req = http::Request::get("/apis/discovery.k8s.io/v1/namespaces/bench/endpointslices")
            .body(Vec::new())?;
        let text = c.request_text(req).await?;
        anyhow::ensure!(text.len() > args.slices * 100);
        raw_times.push(t.elapsed());
    }
    raw_times.sort();

    // 2. fan-out: N watchers, one write at a time, time until every watcher saw it
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "bench");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "fan"}, "data": {"n": "0"}}))?,
    )
    .await?;
    let rv = cms
        .get("fan")
        .await?
        .metadata
        .resource_version
        .context("rv")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String, Instant)>();
    let mut watch_tasks = Vec::new();
    for w in 0..args.watchers {
        let c = client(&server).await?;
        let api: Api<ConfigMap> = Api::namespaced(c, "bench");
        let tx = tx.clone();
        let rv = rv.clone();
        watch_tasks.push(tokio::spawn(async move {
            let wp = WatchParams::default()
                .fields("metadata.name=fan")
                .timeout(290);
            let mut s = api.watch(&wp, &rv).await?.boxed();
            while let Some(ev) = s.try_next().await? {
                if let WatchEvent::Modified(cm) = ev {
                    let n = cm
                        .data
                        .and_then(|d| d.get("n").cloned())
                        .unwrap_or_default();
                    if tx.send((w, n, Instant::now())).is_err() {
                        break;
                    }
                }
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut fanout = Vec::new();
    for n in 1..=args.fanout_writes {
        let t = Instant::now();
        cms.patch(
            "fan",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"n": n.to_string()}})),
        )
        .await?;
        let mut seen = 0;
        let mut last = t;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen < args.watchers {
            let (_, got, at) = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .context("fan-out timed out")?
                .context("watchers ended")?;
            if got == n.to_string() {
                seen += 1;
                last = last.max(at);
            }
        }
        fanout.push(last - t);
    }
    for t in watch_tasks {
        t.abort();
    }
    fanout.sort();

    // 3. sustained creates
    let total = args.rate * args.seconds;
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / args.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let sem = Arc::new(Semaphore::new(256));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        tick.tick().await;
        let cms = cms.clone();
        let permit = sem.clone().acquire_owned().await?;
        tasks.push(tokio::spawn(async move {
            let _p = permit;
            let t = Instant::now();
            cms.create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": format!("c-{i}")}, "data": {"i": i.to_string()}}),
                )
                .expect("cm"),
            )
            .await?;
            anyhow::Ok(t.elapsed())
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.push(t.await??);
    }
    let elapsed = started.elapsed();
    lat.sort();
    let achieved = total as f64 / elapsed.as_secs_f64();

    let report = format!(
        "# kubesim benchmark\n\n\
Command: `cargo run --profile bench-fast -p causeway-benches --bin bench-kubesim`\n\n\
Machine: 2 cores, 24 GiB; kubesim (TLS, HTTP/1.1) and the kube-rs clients share the process and both cores, so every figure includes client-side JSON decoding.\n\n\
| measurement | result | goal |\n|---|---|---|\n\
| populate {slices} EndpointSlices (32 concurrent creates) | {pop:.2} s ({pop_rate:.0}/s) | |\n\
| list {slices} EndpointSlices, kube-rs typed (median of 5 / max) | {lmed} / {lmax} | < 1 s |\n\
| list {slices} EndpointSlices, raw bytes (median of 5 / max) | {rmed} / {rmax} | < 1 s |\n\
| one write seen by all {w} watchers, p50 / p99 / max of {fw} writes | {f50} / {f99} / {fmax} | < 1 s |\n\
| sustained creates: target {rate}/s for {secs} s | achieved {ach:.0}/s; latency p50 {c50}, p99 {c99} | 1,000/s |\n",
        slices = args.slices,
        pop = populate.as_secs_f64(),
        pop_rate = args.slices as f64 / populate.as_secs_f64(),
        lmed = ms(pct(&list_times, 0.5)),
        lmax = ms(pct(&list_times, 1.0)),
        rmed = ms(pct(&raw_times, 0.5)),
        rmax = ms(pct(&raw_times, 1.0)),
        w = args.watchers,
        fw = args.fanout_writes,
        f50 = ms(pct(&fanout, 0.5)),
        f99 = ms(pct(&fanout, 0.99)),
        fmax = ms(pct(&fanout, 1.0)),
        rate = args.rate,
        secs = args.seconds,
        ach = achieved,
        c50 = ms(pct(&lat, 0.5)),
        c99 = ms(pct(&lat, 0.99)),
    );
    println!("{report}");
    if args.out != "-" {
        std::fs::write(&args.out, &report).with_context(|| format!("writing {}", args.out))?;
        println!("written to {}", args.out);
    }
    server.shutdown();
    Ok(())
}
