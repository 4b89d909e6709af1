//! The cluster registry at 100 members (issue 13, item 9). One process holds a kubesim
//! hub, N kubesim members of 10 nodes each and the hub controller
//! (`causeway_controllers::controller::run_with`). The controller runs on its own tokio
//! runtime whose threads are named [`CONTROLLER_THREADS`], so /proc gives its CPU time
//! apart from the API servers'. Measured:
//! 1. `causeway join` (push mode) of every member, one after another, → `Ready=True`;
//! 2. the controller's CPU and RSS at steady state over a window, against a floor
//!    window measured before it started (the API servers alone);
//! 3. Pull members' agents cut off from the hub → `Ready=Unknown` and the `unreachable`
//!    taint, against the monitor grace period ([`pull`]).
//!
//! Run: `cargo run --release -p causeway-benches --bin bench-registry -- --help`

mod marks;
mod pull;
mod report;

use std::time::{Duration, Instant};

use anyhow::Context;
use causeway_benches::{cpu_seconds, threads_cpu_seconds};
use causeway_controllers::clusters::join::{client_for, join};
use causeway_controllers::clusters::options::{TimingArgs, parse_interval};
use causeway_runtime::log::LogArgs;
use clap::{CommandFactory, FromArgMatches, Parser};
use futures::{StreamExt, TryStreamExt};
use kubesim::{Config, Server};
use tokio_util::sync::CancellationToken;

use marks::Marks;
use report::{Report, Window};

/// Name prefix of the hub controller's runtime threads.
const CONTROLLER_THREADS: &str = "hub-controller";

/// How many servers start (or get their CRDs) at once.
const PARALLEL: usize = 8;

/// The cluster registry at N members: registration → Ready, the hub controller's
/// steady-state CPU and memory, and a Pull member's agent cut off → Ready=Unknown.
///
/// Everything runs in this process: kubesim API servers (a hub and the members), the
/// hub controller on its own runtime (threads `hub-controller`), and the Pull members'
/// agents. Timing flags are the `causeway controller`'s, with a 10 s grace period.
#[derive(Parser, Debug)]
struct Args {
    /// Push members joined to the hub (kubesim servers in this process).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=500))]
    members: u16,
    /// Nodes of each member.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    nodes: u16,
    /// Length of each CPU/RSS window: the floor (API servers alone), then with the
    /// controller at steady state (e.g. 60s).
    #[arg(long, default_value = "60s", value_parser = parse_interval)]
    window: Duration,
    /// Pull members whose agent is cut off, one after another (repetitions of part 3; 0 skips it).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(0..=100))]
    pull: u16,
    /// Time between two agent cuts (not a multiple of the monitor interval or the lease
    /// renewal, so the cuts fall at every phase of both).
    #[arg(long, default_value = "700ms", value_parser = parse_interval)]
    cut_gap: Duration,
    /// Where to write the markdown report ("-" for none).
    #[arg(long, default_value = "benches/results/registry.md")]
    out: String,
    #[command(flatten)]
    timing: TimingArgs,
    #[command(flatten)]
    log: LogArgs,
}

fn parse_args() -> Args {
    // the controller's own default grace period is Karmada's 40 s; 10 s keeps part 3 short
    let cmd = Args::command().mut_arg("cluster_monitor_grace_period", |a| a.default_value("10s"));
    let matches = cmd.get_matches();
    Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> anyhow::Result<()> {
    let args = parse_args();
    args.log.init("warn,bench_registry=info")?;
    let controller_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CONTROLLER_THREADS)
        // idle blocking threads would take their CPU time with them when they exit
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()
        .context("starting the controller's runtime")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench")
        .enable_all()
        .build()
        .context("starting the bench's runtime")?;
    let result = rt.block_on(run(&args, controller_rt.handle()));
    controller_rt.shutdown_background();
    rt.shutdown_background();
    let report = result?;
    let text = report.markdown(&args);
    println!("{text}");
    if args.out != "-" {
        std::fs::write(&args.out, &text).with_context(|| format!("writing {}", args.out))?;
    }
    Ok(())
}

/// Starts `count` kubesim servers `<prefix>-<i>` with `nodes` nodes each, CRDs installed.
async fn start_servers(prefix: &str, count: u16, nodes: u16) -> anyhow::Result<Vec<Server>> {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let mut cfg = Config::new(&format!("{prefix}-{i:03}"));
            cfg.nodes = nodes.into();
            let s = Server::start(cfg)
                .await
                .with_context(|| format!("starting {prefix}-{i:03}"))?;
            causeway_e2e::install_crds(&causeway_e2e::client(&s).await?)
                .await
                .with_context(|| format!("installing CRDs into {}", s.name()))?;
            anyhow::Ok(s)
        })
        .buffered(PARALLEL)
        .try_collect()
        .await
}

/// This process's CPU time and the controller threads' over `len`, and RSS around it.
async fn window(len: Duration) -> anyhow::Result<Window> {
    let rss_before_kib = causeway_benches::status_kib("self", "VmRSS:");
    let started = Instant::now();
    let process = cpu_seconds("/proc/self/stat")?;
    let controller = threads_cpu_seconds(CONTROLLER_THREADS)?;
    tokio::time::sleep(len).await;
    Ok(Window {
        process_cpu: cpu_seconds("/proc/self/stat")? - process,
        controller_cpu: threads_cpu_seconds(CONTROLLER_THREADS)? - controller,
        elapsed: started.elapsed(),
        rss_before_kib,
        rss_after_kib: causeway_benches::status_kib("self", "VmRSS:"),
    })
}

async fn run(args: &Args, controller_rt: &tokio::runtime::Handle) -> anyhow::Result<Report> {
    let timing = args.timing.timing();
    let began = Instant::now();
    let hub = start_servers("hub", 1, 1).await?.remove(0);
    let members = start_servers("member", args.members, args.nodes).await?;
    tracing::info!(
        members = members.len(),
        seconds = began.elapsed().as_secs(),
        "API servers started"
    );
    let hub_client = causeway_e2e::client(&hub).await?;
    let stop = CancellationToken::new();
    let _stop_all = stop.clone().drop_guard();
    let marks = Marks::watch(hub_client.clone(), stop.clone());

    // 2a. the floor: the API servers alone (their own controllers tick every second)
    tokio::time::sleep(Duration::from_secs(3)).await;
    let floor = window(args.window).await?;
    tracing::info!(cpu = floor.process_cpu, "floor measured");

    // 1. the controller runs; members join one after another
    let hub_access = causeway_e2e::access(&hub);
    let opts = causeway_controllers::controller::Options {
        timing: timing.clone(),
        ..Default::default()
    };
    let controller = controller_rt.spawn({
        let stop = stop.child_token();
        async move {
            // built here, so its connections live on the controller's runtime
            let hub = client_for(&hub_access).await?;
            let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
            causeway_controllers::controller::run_with(hub, metrics, opts, stop).await
        }
    });
    let names: Vec<String> = members.iter().map(|m| m.name().to_string()).collect();
    let mut registered = Vec::new();
    let joins = Instant::now();
    for m in &members {
        join(hub_client.clone(), m.name(), &causeway_e2e::access(m), None)
            .await
            .with_context(|| format!("joining {}", m.name()))?;
        registered.push(Instant::now());
    }
    let joins = joins.elapsed();
    let ready = marks
        .wait_all(
            &names,
            |m| m.ready,
            "Ready=True",
            Duration::from_secs(60) + timing.status_interval,
        )
        .await?;
    let to_ready: Vec<Duration> = ready
        .iter()
        .zip(&registered)
        .map(|(r, at)| r.saturating_duration_since(*at))
        .collect();
    let all_ready = ready
        .iter()
        .max()
        .map(|r| r.saturating_duration_since(registered[0]));
    tracing::info!(seconds = ?all_ready, "every member Ready");

    // 2b. steady state: every worker has listed and probed; the next rounds find nothing to write
    tokio::time::sleep(timing.status_interval + Duration::from_secs(5)).await;
    let steady = window(args.window).await?;
    if controller.is_finished() {
        let ended = controller.await.context("the controller panicked")?;
        anyhow::bail!("the controller stopped during the bench: {ended:?}");
    }
    tracing::info!(cpu = steady.controller_cpu, "controller measured");

    // 3. Pull members cut off
    let cuts = if args.pull > 0 {
        let pull_members = start_servers("pull", args.pull, args.nodes).await?;
        let cuts = pull::cut_off(
            &hub,
            &hub_client,
            &pull_members,
            &marks,
            &timing,
            args.cut_gap,
        )
        .await?;
        for s in &pull_members {
            s.shutdown();
        }
        Some(cuts)
    } else {
        None
    };
    // the controller and the hub watch first, so none of them logs the servers going away
    stop.cancel();
    for s in std::iter::once(&hub).chain(&members) {
        s.shutdown();
    }
    Ok(Report {
        timing,
        joins,
        to_ready,
        all_ready,
        floor,
        steady,
        cuts,
        total: began.elapsed(),
    })
}
