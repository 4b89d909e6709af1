//! Propagation at scale (issue 14, item 11). A kubesim hub and N kubesim members
//! (workload simulation off, so the figures are propagation's, not kubesim's pods) run
//! in this process; the hub controller is the real `causeway controller` binary in a
//! child process (its own CPU time and peak RSS from /proc). Measured:
//! 1. D Deployments + C ConfigMaps (namespace `bench`, labelled) and one
//!    PropagationPolicy selecting them by label for every member: the policy's creation
//!    → every copy in every member (member watches), → every binding `FullyApplied`;
//! 2. a template's image changed K times, one after another: the hub write → the last
//!    member's watch delivering the new image, p50 / p99 / max;
//! 3. the controller restarted with nothing changed (a cold start re-reads
//!    everything): the members' and the hub's write requests until it settles and
//!    over a window that also holds its periodic resync (goal 0 member writes);
//! 4. the controller's peak RSS and CPU seconds for each part.
//!
//! Run: `cargo build --release -p causeway-controllers && cargo run --release -p
//! causeway-benches --bin bench-propagation -- --help`

mod controller;
mod objects;
mod report;
mod seen;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use causeway_controllers::clusters::options::parse_interval;
use causeway_controllers::clusters::status::ready_of;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::propagation::PropagationPolicy;
use causeway_e2e::{Clusterset, Options};
use causeway_runtime::log::LogArgs;
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubesim::Server;
use tokio_util::sync::CancellationToken;

use controller::Controller;
use objects::NS;
use report::{Part1, Part2, Part3, Report};
use seen::Seen;

/// How many template writes are in flight at once.
const PARALLEL: usize = 32;

/// Propagation at scale: D Deployments + C ConfigMaps to N members (time to every copy
/// and to every binding FullyApplied), a template change → every member (p50/p99), the
/// member writes of a controller restart with nothing changed, and the controller's
/// CPU and peak RSS.
///
/// The API servers (kubesim: a hub and the members, workload simulation off) run in
/// this process, the hub controller as the `causeway controller` binary in a child
/// process.
#[derive(Parser, Debug)]
pub struct Args {
    /// Deployment templates on the hub.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    deployments: u32,
    /// ConfigMap templates on the hub.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    configmaps: u32,
    /// Member clusters (`member-1`, `member-2`, …), all chosen by the policy.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    members: u16,
    /// Template changes to time in part 2 (one Deployment's image each, one after
    /// another; 0 skips part 2).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    changes: u32,
    /// Pause after each change has reached every member, before the next.
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    change_gap: Duration,
    /// Longest wait for one change to reach every member.
    #[arg(long, default_value = "30s", value_parser = parse_interval)]
    change_timeout: Duration,
    /// Longest wait for part 1 (every copy, every binding FullyApplied).
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    timeout: Duration,
    /// Longest wait for the controller to go quiet (after part 1, before part 3, and
    /// after the restart); one that never does is reported with what it still writes.
    #[arg(long, default_value = "2m", value_parser = parse_interval)]
    settle_timeout: Duration,
    /// The controller counts as settled after this long with no write to any cluster
    /// and under 5 % of a core.
    #[arg(long, default_value = "3s", value_parser = parse_interval)]
    quiet: Duration,
    /// Part 3 counts writes from the restart over this window; over 60 s, it holds the
    /// controller's periodic full resync too.
    #[arg(long, default_value = "75s", value_parser = parse_interval)]
    resync_window: Duration,
    /// The `causeway` binary (default: the one next to this executable).
    #[arg(long)]
    causeway: Option<PathBuf>,
    /// Where to write the markdown report ("-" for none).
    #[arg(long, default_value = "benches/results/propagation.md")]
    out: String,
    #[command(flatten)]
    log: LogArgs,
}

/// What to build first when the `causeway` binary is missing.
const BUILD: &str = "cargo build --release -p causeway-controllers";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init("warn,bench_propagation=info")?;
    let causeway = causeway_benches::causeway_bin(args.causeway.as_deref(), BUILD)?;
    let report = causeway_benches::block_on(run(&args, &causeway))?;
    causeway_benches::publish(&report.markdown(&args), &args.out)
}

/// Write requests (not dry runs) each server has received so far, hub first, then the
/// members.
fn writes(servers: &[&Server]) -> Vec<u64> {
    servers.iter().map(|s| s.write_requests()).collect()
}

/// Changes each server has stored so far (its resourceVersion: kubesim has one counter
/// for all objects; a write that changes nothing does not move it).
fn changes(servers: &[&Server]) -> Vec<u64> {
    servers.iter().map(|s| s.resource_version()).collect()
}

/// `after - before`, element by element.
fn delta(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Waits until every Cluster on the hub is `Ready=True`.
async fn clusters_ready(hub: &kube::Client, count: usize, limit: Duration) -> anyhow::Result<()> {
    let api: Api<Cluster> = Api::all(hub.clone());
    let deadline = Instant::now() + limit;
    loop {
        let list = api.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|c| ready_of(c).is_some_and(|r| r.status == "True"))
            .count();
        if ready == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{ready} of {count} Clusters Ready=True within {} s: is the controller running?",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates every template on the hub.
async fn create_templates(hub: &kube::Client, args: &Args) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), NS);
    let config_maps: Api<ConfigMap> = Api::namespaced(hub.clone(), NS);
    let pp = PostParams::default();
    let all = (0..args.deployments as usize)
        .map(|i| (true, i))
        .chain((0..args.configmaps as usize).map(|i| (false, i)));
    futures::stream::iter(all)
        .map(|(deployment, i)| {
            let (deployments, config_maps, pp) = (&deployments, &config_maps, &pp);
            async move {
                if deployment {
                    deployments
                        .create(pp, &objects::deployment(i))
                        .await
                        .map(drop)
                } else {
                    config_maps
                        .create(pp, &objects::config_map(i))
                        .await
                        .map(drop)
                }
                .with_context(|| {
                    let kind = if deployment {
                        "Deployment"
                    } else {
                        "ConfigMap"
                    };
                    format!("creating {kind} {NS}/{}", objects::name(i))
                })
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn run(args: &Args, causeway: &std::path::Path) -> anyhow::Result<Report> {
    let began = Instant::now();
    let opts = Options {
        members: (1..=args.members).map(|i| format!("member-{i}")).collect(),
        simulate_workloads: false,
        ..Options::default()
    };
    let cs = Clusterset::start(&opts, |_| {}).await?;
    cs.install_crds().await?;
    cs.join_all().await?;
    cs.create_namespace_everywhere(NS).await?;
    let dir = tempfile::tempdir()?;
    cs.write_kubeconfigs(dir.path())?;
    let kubeconfig = dir.path().join(format!("{}.kubeconfig", cs.hub.name()));
    let servers: Vec<&Server> = cs.all().collect();
    let hub = causeway_e2e::client(&cs.hub).await?;
    let mut members = Vec::new();
    for m in &cs.members {
        members.push((m.name().to_string(), causeway_e2e::client(m).await?));
    }
    let stop = CancellationToken::new();
    let _stop_all = stop.clone().drop_guard();
    let seen = Seen::watch(&hub, &members, &stop);
    seen.listed(Duration::from_secs(30)).await?;

    let t = Instant::now();
    create_templates(&hub, args).await?;
    let populate = t.elapsed();
    tracing::info!(seconds = populate.as_secs_f64(), "templates created");

    let log = dir.path().join("controller.log");
    let mut ctl = Controller::start(causeway, &kubeconfig, &log)?;
    clusters_ready(&hub, cs.members.len(), Duration::from_secs(60)).await?;
    let settle_writes = || writes(&servers);

    // 1. the policy → every copy, every binding FullyApplied
    let before = (ctl.stats()?, writes(&servers));
    let t0 = Instant::now();
    Api::<PropagationPolicy>::namespaced(hub.clone(), NS)
        .create(&PostParams::default(), &objects::policy())
        .await
        .context("creating the PropagationPolicy")?;
    let objects = (args.deployments + args.configmaps) as usize;
    let copies = seen
        .all_copies(
            args.deployments as usize,
            args.configmaps as usize,
            args.timeout,
        )
        .await;
    let copies = copies.map_err(|e| e.context(ctl.log_tail(20)))? - t0;
    tracing::info!(seconds = copies.as_secs_f64(), "every copy in every member");
    let applied = seen.all_fully_applied(objects, args.timeout).await;
    let applied = applied.map_err(|e| e.context(ctl.log_tail(20)))? - t0;
    tracing::info!(
        seconds = applied.as_secs_f64(),
        "every binding FullyApplied"
    );
    let settled = ctl
        .settle(t0, args.quiet, args.settle_timeout, settle_writes)
        .await?;
    let part1 = Part1 {
        copies,
        applied,
        settled,
        cpu: ctl.stats()?.cpu - before.0.cpu,
        startup_cpu: before.0.cpu,
        writes: delta(&writes(&servers), &before.1),
    };

    // 2. template changes
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), NS);
    let cpu = ctl.stats()?.cpu;
    let mut last = Vec::new();
    let mut each = Vec::new();
    for k in 1..=args.changes as usize {
        let i = (k * 7919) % args.deployments as usize;
        let name = objects::name(i);
        let t0 = Instant::now();
        deployments
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(objects::image_patch(k)),
            )
            .await
            .with_context(|| format!("changing {name}'s image"))?;
        let seen_at = seen
            .image_everywhere(&name, &objects::image(k), args.change_timeout)
            .await
            .map_err(|e| e.context(format!("change {k} of {}", args.changes)))?;
        each.extend(seen_at.iter().map(|at| *at - t0));
        last.push(*seen_at.iter().max().expect("at least one member") - t0);
        tokio::time::sleep(args.change_gap).await;
    }
    tracing::info!(changes = last.len(), "template changes timed");
    let part2 = Part2 {
        last,
        each,
        cpu: ctl.stats()?.cpu - cpu,
    };

    // 3. a restart with nothing changed
    let before_restart = ctl
        .settle(
            Instant::now(),
            args.quiet,
            args.settle_timeout,
            settle_writes,
        )
        .await?;
    let first = ctl.stop().await?;
    tracing::info!("controller stopped; restarting it");
    let before = (writes(&servers), changes(&servers));
    let restart = Instant::now();
    let mut ctl = Controller::start(causeway, &kubeconfig, &log)?;
    let settled = ctl
        .settle(restart, args.quiet, args.settle_timeout, settle_writes)
        .await?;
    let to_settled = delta(&writes(&servers), &before.0);
    let settled_cpu = ctl.stats()?.cpu;
    if let Some(rest) = args.resync_window.checked_sub(restart.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let window = restart.elapsed();
    let in_window = delta(&writes(&servers), &before.0);
    let changed = delta(&changes(&servers), &before.1);
    let second = ctl.stop().await?;
    let part3 = Part3 {
        before_restart,
        settled,
        to_settled,
        settled_cpu,
        window,
        in_window,
        changed,
        stats: second,
    };
    stop.cancel();
    cs.shutdown();
    Ok(Report {
        members: cs.members.iter().map(|m| m.name().to_string()).collect(),
        populate,
        part1,
        part2,
        first,
        part3,
        total: began.elapsed(),
    })
}
