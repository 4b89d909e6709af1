//! `causeway`: the Causeway control-plane binary.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use causeway_controllers::clusters::join;
use causeway_controllers::metrics::Metrics;
use clap::{Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};

mod crds_cmd;

/// Causeway: multi-cluster services, multi-cluster ingress and federation for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "causeway", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate the CustomResourceDefinitions Causeway needs (MCS, MultiClusterIngress, causeway.io).
    Crds(crds_cmd::CrdsArgs),
    /// Run the hub controllers: MCS aggregator, MultiClusterIngress, and an exporter,
    /// importer and health probe per joined member.
    Controller(ControllerArgs),
    /// Register a member cluster on the hub (push mode) from its kubeconfig.
    Join(JoinArgs),
    /// Remove a member cluster from the hub.
    Unjoin(UnjoinArgs),
}

#[derive(Debug, clap::Args)]
struct HubArgs {
    /// kubeconfig of the hub cluster (default: in-cluster config, else $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "CAUSEWAY_HUB_KUBECONFIG")]
    hub_kubeconfig: Option<PathBuf>,
    /// Context in the hub kubeconfig (default: its current context).
    #[arg(long)]
    hub_context: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ControllerArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// Address for /metrics, /healthz and /readyz (the default stays clear of
    /// Prometheus's own 9090).
    #[arg(long, default_value = "127.0.0.1:8479")]
    metrics: SocketAddr,
    /// How often each member's /readyz is probed for its Cluster's Ready condition
    /// (e.g. 10s, 500ms); MultiClusterIngress traffic avoids clusters that are not Ready.
    #[arg(long, default_value = "10s", value_parser = parse_interval)]
    cluster_probe_interval: std::time::Duration,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
}

fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    causeway_crds::mci::tuning::parse_duration(s)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?} is not a duration: use e.g. 500ms, 10s or 1m"))
}

#[derive(Debug, clap::Args)]
struct JoinArgs {
    /// Name of the member on the hub: a DNS-1123 label, unique in the clusterset.
    name: String,
    /// kubeconfig of the member cluster (server URL, CA and a bearer token are taken from it).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Context in the member kubeconfig (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// Cluster id (the source-cluster label value); default: the name.
    #[arg(long)]
    id: Option<String>,
    #[command(flatten)]
    hub: HubArgs,
}

#[derive(Debug, clap::Args)]
struct UnjoinArgs {
    /// Name of the member to remove.
    name: String,
    #[command(flatten)]
    hub: HubArgs,
}

async fn hub_client(h: &HubArgs) -> anyhow::Result<kube::Client> {
    let Some(path) = &h.hub_kubeconfig else {
        let cfg = kube::Config::infer()
            .await
            .context("no --hub-kubeconfig given and no in-cluster or default kubeconfig found")?;
        return kube::Client::try_from(cfg).context("building the hub client");
    };
    let kc = Kubeconfig::read_from(path)
        .with_context(|| format!("reading --hub-kubeconfig {}", path.display()))?;
    let opts = KubeConfigOptions {
        context: h.hub_context.clone(),
        ..Default::default()
    };
    let cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .context("building the hub client config")?;
    kube::Client::try_from(cfg).context("building the hub client")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Crds(args) => crds_cmd::run(args),
        Command::Controller(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_new(&args.log)
                        .context("--log is not a valid filter")?,
                )
                .with_writer(std::io::stderr)
                // colour codes only on a terminal, never in a file or a log collector
                .with_ansi(std::io::stderr().is_terminal())
                .init();
            let hub = hub_client(&args.hub).await?;
            let metrics = Arc::new(Metrics::default());
            let stop = tokio_util::sync::CancellationToken::new();
            let addr =
                causeway_controllers::metrics::serve(args.metrics, metrics.clone(), stop.clone())
                    .await
                    .with_context(|| format!("listening on --metrics {}", args.metrics))?;
            tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
            let s2 = stop.clone();
            // Ctrl-C locally, SIGTERM from the kubelet: stop cleanly either way.
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .context("installing the SIGTERM handler")?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                s2.cancel();
            });
            let opts = causeway_controllers::controller::Options {
                probe_interval: args.cluster_probe_interval,
            };
            causeway_controllers::controller::run_with(hub, metrics, opts, stop).await
        }
        Command::Join(args) => {
            let access = join::member_access(&args.kubeconfig, args.context.as_deref())?;
            let hub = hub_client(&args.hub).await?;
            println!(
                "{}",
                join::join(hub, &args.name, &access, args.id.as_deref()).await?
            );
            Ok(())
        }
        Command::Unjoin(args) => {
            let hub = hub_client(&args.hub).await?;
            println!("{}", join::unjoin(hub, &args.name).await?);
            Ok(())
        }
    }
}
