//! `causeway`: the Causeway control-plane binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use causeway_controllers::clusters::join;
use causeway_controllers::metrics::Metrics;
use causeway_runtime::admin;
use causeway_runtime::client::HubArgs;
use causeway_runtime::leader::LeaderArgs;
use causeway_runtime::log::LogArgs;
use clap::{Parser, Subcommand};

mod cordon_cmd;
mod crds_cmd;
mod explain_cmd;
mod failover_cmd;
mod promote_cmd;
mod pull_cmd;
mod rollout_cmd;

/// Causeway: multi-cluster services, multi-cluster ingress and federation for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "causeway", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate or install the CustomResourceDefinitions Causeway needs (MCS, About API,
    /// MultiClusterIngress, causeway.io, Gateway API).
    Crds(crds_cmd::CrdsArgs),
    /// Run the hub controllers: MCS aggregator, MultiClusterIngress, and an exporter,
    /// importer and health probe per joined member.
    Controller(ControllerArgs),
    /// Register a member cluster on the hub (push mode) from its kubeconfig.
    Join(JoinArgs),
    /// Remove a member cluster from the hub.
    Unjoin(UnjoinArgs),
    /// Register a member cluster in pull mode: a least-privilege agent identity on the
    /// hub, its credentials in the member (then run `causeway agent` there).
    Register(pull_cmd::RegisterArgs),
    /// Remove a Pull member from the hub (and its agent Secret and imports from the member).
    Unregister(pull_cmd::UnregisterArgs),
    /// Run a Pull member's agent inside it: cluster status, lease, MCS export and import,
    /// with only outbound connections to the hub.
    Agent(pull_cmd::AgentArgs),
    /// Explain a propagated resource template: per member cluster, chosen or not and
    /// why, replicas, each field that differs from the template and the override that
    /// set it, applied and health.
    Explain(explain_cmd::ExplainArgs),
    /// Adopt an object that already runs in a member: its live copy becomes the hub's
    /// template and a PropagationPolicy places it on that member, taking it over with no
    /// change (karmadactl promote).
    Promote(promote_cmd::PromoteArgs),
    /// Follow a propagated template's rollout across the clusters: `causeway rollout
    /// status deployment/web -n demo` waits wave by wave (spec.rollout) until every
    /// cluster runs its current generation, and exits 1 if the rollout passes its
    /// progress deadline (for pipelines, as `kubectl rollout status`).
    Rollout(rollout_cmd::RolloutArgs),
    /// Dry-run cluster failover: `causeway failover plan --cluster east` prints where
    /// every workload scheduled on east would go if east failed over now, how long its
    /// policy tolerates the failure first and what becomes of the old copy.
    Failover(failover_cmd::FailoverArgs),
    /// Cordon a member cluster for maintenance: taint it
    /// cluster.causeway.io/unschedulable:NoSchedule, so no new workload is placed there
    /// and what runs there stays.
    Cordon(cordon_cmd::CordonArgs),
    /// Drain a member cluster: print where each workload scheduled there would go, then
    /// taint it NoExecute too, so they move to the other clusters (refused when one
    /// would have no cluster left, unless --force; --dry-run changes nothing).
    Drain(cordon_cmd::DrainArgs),
    /// End a member cluster's cordon or drain: remove its
    /// cluster.causeway.io/unschedulable taints.
    Uncordon(cordon_cmd::CordonArgs),
    /// Serve Causeway's validating admission webhooks: deletion protection (POST
    /// /validate-deletion), who may write the MCS API (POST /validate-mcs) and invalid
    /// federation policies (POST /validate-policies); deploy/webhook holds their
    /// configurations.
    Webhook(causeway_controllers::webhook::WebhookArgs),
    /// Search across every member: `causeway search pods -l app=web` prints a table with
    /// a CLUSTER column; `causeway search serve` runs the indexer and the
    /// kubectl-compatible search API.
    Search(Box<SearchArgs>),
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct SearchArgs {
    #[command(subcommand)]
    serve: Option<SearchCommand>,
    #[command(flatten)]
    query: causeway_search::cli::QueryArgs,
}

#[derive(Debug, Subcommand)]
enum SearchCommand {
    /// Run the search server: index every Ready member into SQLite (default, a file in
    /// --data-dir) or PostgreSQL (--storage postgres://…) and serve the search API.
    Serve(causeway_controllers::search::ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ControllerArgs {
    #[command(flatten)]
    hub: HubArgs,
    /// Address for /metrics, /healthz and /readyz (the default stays clear of
    /// Prometheus's own 9090).
    #[arg(long, default_value = "127.0.0.1:8479")]
    metrics: SocketAddr,
    #[command(flatten)]
    timing: causeway_controllers::clusters::options::TimingArgs,
    /// For every Service template a MultiClusterIngress served by Causeway names as a
    /// backend, write a ServiceExport next to it and a PropagationPolicy
    /// `propagate-service-<name>` placing it where the Service is scheduled (Karmada's
    /// serviceexportpropagation); both go when no MCI names the Service any more.
    /// Export templates and policies of that name that are not Causeway's are left alone.
    /// Turning the flag off leaves what it made: `kubectl delete
    /// serviceexports,propagationpolicies -A -l causeway.io/mci-backend=true` removes it.
    #[arg(long)]
    export_mci_backends: bool,
    #[command(flatten)]
    leader: LeaderArgs,
    #[command(flatten)]
    log: LogArgs,
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
    /// Leave what Causeway imported into the member in place (for a migration or a
    /// rollback); without it the imports are withdrawn from the member.
    #[arg(long)]
    preserve: bool,
    /// How long to wait for the hub controller to finish the cleanup.
    #[arg(long, default_value = "60s", value_parser = causeway_controllers::clusters::options::parse_interval)]
    timeout: std::time::Duration,
    #[command(flatten)]
    hub: HubArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    causeway_runtime::say::exit("causeway", run().await)
}

async fn run() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Crds(args) => crds_cmd::run(args).await,
        Command::Controller(args) => {
            args.log.init("info")?;
            let hub = args.hub.client().await?;
            let elector = args.leader.elector(hub.clone(), "causeway-controller")?;
            let metrics = Arc::new(Metrics::default());
            let stop = tokio_util::sync::CancellationToken::new();
            let listener = admin::bind(args.metrics, "--metrics").await?;
            let addr = listener.local_addr()?;
            admin::serve(listener, metrics.endpoints(), stop.clone());
            tracing::info!(%addr, "serving /metrics, /healthz, /livez, /readyz");
            // Ctrl-C locally, SIGTERM from the kubelet: stop cleanly either way.
            causeway_runtime::signal::cancel_on_signal(stop.clone());
            let opts = causeway_controllers::controller::Options {
                timing: args.timing.timing(),
                export_mci_backends: args.export_mci_backends,
            };
            causeway_controllers::controller::run_elected(elector, &metrics, &stop, |lead| {
                causeway_controllers::controller::run_with(hub, metrics.clone(), opts, lead)
            })
            .await
        }
        Command::Join(args) => {
            let access = join::member_access(&args.kubeconfig, args.context.as_deref())?;
            let hub = args.hub.client().await?;
            println!(
                "{}",
                join::join(hub, &args.name, &access, args.id.as_deref()).await?
            );
            Ok(())
        }
        Command::Register(args) => pull_cmd::register(args).await,
        Command::Unregister(args) => pull_cmd::unregister(args).await,
        Command::Agent(args) => pull_cmd::agent(args).await,
        Command::Explain(args) => explain_cmd::run(args).await,
        Command::Promote(args) => promote_cmd::run(args).await,
        Command::Rollout(args) => rollout_cmd::run(args).await,
        Command::Failover(args) => failover_cmd::run(args).await,
        Command::Cordon(args) => cordon_cmd::cordon(args, cordon_cmd::Action::Cordon).await,
        Command::Drain(args) => cordon_cmd::drain(args).await,
        Command::Uncordon(args) => cordon_cmd::cordon(args, cordon_cmd::Action::Uncordon).await,
        Command::Webhook(args) => {
            args.log.init("info")?;
            causeway_controllers::webhook::run(args).await
        }
        Command::Search(args) => match args.serve {
            Some(SearchCommand::Serve(serve)) => {
                serve.log.init("info")?;
                causeway_controllers::search::serve(serve).await
            }
            None => causeway_search::cli::run(&args.query).await.map(|_| ()),
        },
        Command::Unjoin(args) => {
            let hub = args.hub.client().await?;
            println!(
                "{}",
                join::unjoin(hub, &args.name, args.preserve, args.timeout).await?
            );
            Ok(())
        }
    }
}
