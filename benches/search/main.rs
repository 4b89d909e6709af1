//! Cross-cluster search at scale (issue 15, item 8). N kubesim members (workload
//! simulation off), each holding P Pods owned by ReplicaSets owned by Deployments
//! (about 10 Pods each, in up to 50 namespaces, labelled app/team/tier/
//! pod-template-hash/version), written straight into the members' journals; the
//! members are registered on a kubesim hub as Ready Clusters. The indexer under test is
//! the real `causeway search serve` in a child process, on SQLite and on PostgreSQL:
//! 1. ingest: start → every object stored (objects/s), its peak RSS and CPU;
//! 2. queries through the HTTPS API (hub admin token, one keep-alive client): label +
//!    namespace with paging, owner search, fuzzy name, p50/p99; a deep keyset page;
//! 3. restart on the same database: the relist's store writes (goal 0) and its time.
//!
//! Run: `cargo build --release -p causeway-controllers && cargo run --release -p
//! causeway-benches --bin bench-search -- --help`

mod child;
mod indexer;
mod objects;
mod populate;
mod queries;
mod report;
mod server;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use causeway_controllers::clusters::options::parse_interval;
use causeway_crds::federation::cluster::Cluster;
use causeway_e2e::Options;
use causeway_runtime::log::LogArgs;
use causeway_search::store::Store;
use clap::{Parser, Subcommand};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use indexer::{Kind, Running, Setup};
use objects::Shape;
use report::{Backend, Report};

/// Cross-cluster search at scale: ingest of M members × P Pods (and their ReplicaSets
/// and Deployments) by `causeway search serve` on SQLite and PostgreSQL, query
/// latencies through its API, and a restart's store writes.
#[derive(Parser, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    args: Args,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The indexer alone (`--indexer child` starts it; not for people).
    #[command(hide = true)]
    Indexer(child::ChildArgs),
}

/// Which store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Storage {
    /// An SQLite file.
    Sqlite,
    /// A fresh database on the server in $CAUSEWAY_TEST_POSTGRES.
    Postgres,
}

/// The bench's settings.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Member clusters (`member-1`, `member-2`, …).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=50))]
    members: u16,
    /// Pods per member (plus one ReplicaSet and one Deployment per 10 Pods).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pods: u64,
    /// Stores to measure, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sqlite,postgres"
    )]
    storage: Vec<Storage>,
    /// Samples of each query.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    samples: u64,
    /// The indexer: `serve` (`causeway search serve`, queries over its API) or `child`
    /// (the indexer alone, queries straight to the store).
    #[arg(long, value_enum, default_value = "serve")]
    indexer: Kind,
    /// Longest wait for the ingest, and for the restart's relist.
    #[arg(long, default_value = "30m", value_parser = parse_interval)]
    timeout: Duration,
    /// The `causeway` binary (default: the one next to this executable).
    #[arg(long)]
    causeway: Option<PathBuf>,
    /// Where to write the markdown report ("-" for none).
    #[arg(long, default_value = "benches/results/search.md")]
    out: String,
    /// Keep each store after its run, for study (the PostgreSQL database's URL and the
    /// SQLite file's path are logged); by default they are dropped (gigabytes each).
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    log: LogArgs,
}

/// What to build first when the `causeway` binary is missing.
const BUILD: &str = "cargo build --release -p causeway-controllers";

/// The indexer's counters (Prometheus text names).
const WRITTEN: &str = "search_indexer_objects_written_total";
const UNCHANGED: &str = "search_indexer_objects_unchanged_total";
const DELETED: &str = "search_indexer_objects_deleted_total";
const PURGED: &str = "search_indexer_objects_purged_total";

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Cmd::Indexer(a)) = &cli.cmd {
        causeway_runtime::log::init("warn", Default::default())?;
        return child::main(a);
    }
    let args = cli.args;
    // kube_client=off: the metrics are polled before the server listens
    args.log.init("warn,bench_search=info,kube_client=off")?;
    let causeway = causeway_benches::causeway_bin(args.causeway.as_deref(), BUILD)?;
    if args.storage.contains(&Storage::Postgres)
        && std::env::var(causeway_search::store::testing::POSTGRES_ENV).is_err()
    {
        bail!(
            "{} is not set: start a server with `export {0}=\"$(scripts/postgres start)\"`, or pass --storage sqlite",
            causeway_search::store::testing::POSTGRES_ENV
        );
    }
    let report = causeway_benches::block_on(run(&args, &causeway))?;
    causeway_benches::publish(&report.markdown(&args), &args.out)
}

/// Marks every member's Cluster Ready=True on the hub (no hub controller runs: its
/// member watches would compete with the indexer for the members and the cores).
async fn mark_ready(hub: &kube::Client, members: &[String]) -> anyhow::Result<()> {
    let api: Api<Cluster> = Api::all(hub.clone());
    let now = jiff::Timestamp::now().to_string();
    for m in members {
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "reason": "ClusterReady", "message": "set by the bench", "lastTransitionTime": now}]}});
        api.patch_status(m, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("marking Cluster {m} Ready"))?;
    }
    Ok(())
}

async fn run(args: &Args, causeway: &std::path::Path) -> anyhow::Result<Report> {
    let began = Instant::now();
    let dir = tempfile::tempdir()?;
    let members: Vec<String> = (1..=args.members).map(|i| format!("member-{i}")).collect();
    let opts = Options {
        members: members.clone(),
        simulate_workloads: false,
        data_dir: Some(dir.path().join("clusters")),
        ..Options::default()
    };
    let shape = Shape { pods: args.pods };
    let t = Instant::now();
    let cs = populate::start(&opts, shape).await?;
    let populate = t.elapsed();
    tracing::info!(seconds = populate.as_secs_f64(), "members populated");
    cs.install_crds().await?;
    cs.join_all().await?;
    let hub = causeway_e2e::client(&cs.hub).await?;
    mark_ready(&hub, &members).await?;
    let kubeconfigs = dir.path().join("kubeconfigs");
    cs.write_kubeconfigs(&kubeconfigs)?;
    let setup = Setup {
        causeway,
        kubeconfigs: &kubeconfigs,
        hub: cs.hub.name(),
        members: &members,
        token: cs.hub.admin_token(),
    };
    let mut report = Report {
        shape,
        members: members.clone(),
        populate,
        backends: Vec::new(),
        total: Duration::ZERO,
    };
    for storage in &args.storage {
        let b = measure(args, &setup, *storage, shape, dir.path()).await?;
        report.backends.push(b);
        report.total = began.elapsed();
        // each store's figures are kept even if a later one fails or runs out of time
        if args.out != "-" {
            std::fs::write(&args.out, report.markdown(args))
                .with_context(|| format!("writing {}", args.out))?;
        }
    }
    cs.shutdown();
    Ok(report)
}

/// Ingest, queries and a restart on one store.
async fn measure(
    args: &Args,
    setup: &Setup<'_>,
    storage: Storage,
    shape: Shape,
    dir: &std::path::Path,
) -> anyhow::Result<Backend> {
    let name = format!("{storage:?}").to_lowercase();
    let spec = match storage {
        Storage::Sqlite => dir.join(format!("{name}.db")).display().to_string(),
        Storage::Postgres => causeway_search::store::testing::postgres_db().await,
    };
    let state = dir.join(format!("serve-{name}"));
    let expected = shape.objects() * setup.members.len() as u64;
    let log = dir.join(format!("{name}.log"));

    // 1. ingest
    let t0 = Instant::now();
    let members_cpu = causeway_benches::cpu_seconds("/proc/self/stat")?;
    let mut ix = Running::start(args.indexer, setup, &spec, &state, &log).await?;
    let (ingest, _) = ix
        .until(t0, &[WRITTEN], args.timeout, |v| v[0] >= expected as f64)
        .await
        .with_context(|| format!("ingest into {name}"))?;
    let ingested = ix.stats()?;
    let ingest_members_cpu = causeway_benches::cpu_seconds("/proc/self/stat")? - members_cpu;
    tracing::info!(backend = %name, seconds = ingest.as_secs_f64(), peak_mib = ingested.peak_kib / 1024, "every object stored");

    // 2. queries
    let store;
    let target = match &ix {
        Running::Serve(_, api) => queries::Target::Http(api.clone()),
        Running::Child(..) => {
            store = Store::open_with(&spec, report::sqlite_files()).await?;
            queries::Target::Direct(store.clone())
        }
    };
    let mut counted = Vec::new();
    if let queries::Target::Http(api) = &target {
        for (path, per_member) in queries::expected(shape) {
            let n = queries::count(api, path).await?;
            counted.push((path, n, per_member * setup.members.len() as u64));
        }
    }
    let timings = queries::run(&target, shape, setup.members, args.samples as usize).await?;
    let queried = ix.stats()?;
    drop(target);
    ix.stop().await?;
    tracing::info!(backend = %name, "queries timed; restarting the indexer");

    // 3. restart on the same store
    let t0 = Instant::now();
    let members_cpu = causeway_benches::cpu_seconds("/proc/self/stat")?;
    let mut ix = Running::start(args.indexer, setup, &spec, &state, &log).await?;
    let (relist, after) = ix
        .until(
            t0,
            &[WRITTEN, UNCHANGED, DELETED, PURGED],
            args.timeout,
            |v| v[0] + v[1] >= expected as f64,
        )
        .await
        .with_context(|| format!("relist from {name}"))?;
    let relist_members_cpu = causeway_benches::cpu_seconds("/proc/self/stat")? - members_cpu;
    let restarted = ix.stop().await?;
    if args.keep {
        let kept = match storage {
            Storage::Sqlite => {
                let to =
                    std::env::temp_dir().join(format!("bench-search-{}.db", std::process::id()));
                std::fs::copy(&spec, &to)
                    .with_context(|| format!("keeping {spec} as {}", to.display()))?;
                to.display().to_string()
            }
            Storage::Postgres => spec.clone(),
        };
        tracing::info!(backend = %name, store = %kept, "store kept (--keep)");
    } else if storage == Storage::Postgres {
        drop_database(&spec).await?;
    }
    Ok(Backend {
        name,
        expected,
        ingest,
        ingested,
        ingest_members_cpu,
        counted,
        timings,
        queried,
        relist,
        relist_written: after[0] as u64,
        relist_deleted: after[2] as u64,
        relist_purged: after[3] as u64,
        restarted,
        relist_members_cpu,
        kind: args.indexer,
    })
}

/// Drops the bench's PostgreSQL database (a million objects take gigabytes).
async fn drop_database(url: &str) -> anyhow::Result<()> {
    let (base, db) = url
        .rsplit_once('/')
        .with_context(|| format!("{url} names no database"))?;
    let db = db.split('?').next().unwrap_or(db);
    let (client, conn) =
        tokio_postgres::connect(&format!("{base}/postgres"), tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to {base}/postgres"))?;
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .with_context(|| format!("dropping database {db}"))?;
    Ok(())
}
