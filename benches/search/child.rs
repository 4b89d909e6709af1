//! `bench-search indexer`: the indexer of `causeway-search` alone in its own process
//! (so /proc gives its own CPU and peak RSS), for when `causeway search serve` is not
//! available (`--indexer child`). Its fleet is every member of a kubeconfig directory,
//! all Ready; its metrics go to a file, rewritten every 100 ms, in the Prometheus text
//! format the server's /metrics would serve.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use causeway_search::indexer::{self, Fleet, IndexerMetrics, Member};
use causeway_search::store::Store;
use tokio_util::sync::CancellationToken;

use crate::server::RESOURCES;

/// The indexer alone (started by the bench; not for people).
#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// Store: a path or a postgres:// URL.
    #[arg(long)]
    storage: String,
    /// Holds `<member>.kubeconfig` for every member.
    #[arg(long)]
    kubeconfigs: PathBuf,
    /// The members, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    members: Vec<String>,
    /// Where to write the metrics.
    #[arg(long)]
    metrics_file: PathBuf,
}

/// Runs the indexer until killed.
pub fn main(args: &ChildArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(run(args))
}

async fn run(args: &ChildArgs) -> anyhow::Result<()> {
    let store = Store::open_with(&args.storage, crate::report::sqlite_files())
        .await
        .with_context(|| format!("opening the store {}", args.storage))?;
    let mut ready = BTreeMap::new();
    for m in &args.members {
        let path = args.kubeconfigs.join(format!("{m}.kubeconfig"));
        let kc = kube::config::Kubeconfig::read_from(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?;
        let member = Member {
            client: kube::Client::try_from(cfg)?,
            fingerprint: "bench".into(),
        };
        ready.insert(m.clone(), member);
    }
    let fleet = Fleet {
        registered: args.members.iter().cloned().collect::<BTreeSet<_>>(),
        ready,
    };
    let (_tx, rx) = tokio::sync::watch::channel(fleet);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = IndexerMetrics::new(&mut registry);
    let specs = indexer::parse_all(&RESOURCES)?;
    let stop = CancellationToken::new();
    tokio::spawn(indexer::run(
        store,
        specs,
        rx,
        metrics,
        Default::default(),
        stop.clone(),
    ));
    let tmp = args.metrics_file.with_extension("tmp");
    loop {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &args.metrics_file)?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
