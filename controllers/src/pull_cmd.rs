//! `causeway register`, `causeway unregister` and `causeway agent`: pull mode.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use causeway_controllers::agent;
use causeway_controllers::clusters::join;
use causeway_controllers::clusters::lease::Renewals;
use causeway_controllers::clusters::options::TimingArgs;
use causeway_controllers::clusters::register;
use causeway_controllers::metrics::Metrics;
use causeway_runtime::admin;
use causeway_runtime::client::{ClusterArgs, HubArgs};
use causeway_runtime::log::LogArgs;

#[derive(Debug, clap::Args)]
pub struct RegisterArgs {
    /// Name of the member on the hub: a DNS-1123 label, unique in the clusterset.
    name: String,
    /// kubeconfig of the member cluster (admin credentials: the agent's Secret is written there).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Context in the member kubeconfig (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// kubeconfig of the hub (admin credentials, of any kind kubectl takes: token, client
    /// certificate, exec plugin; only its server URL and CA go into the agent's kubeconfig).
    #[arg(long, env = "CAUSEWAY_HUB_KUBECONFIG")]
    hub_kubeconfig: PathBuf,
    /// Context in the hub kubeconfig (default: its current context).
    #[arg(long)]
    hub_context: Option<String>,
    /// The hub API URL as the member reaches it, when it differs from the hub kubeconfig's.
    #[arg(long)]
    hub_api_endpoint: Option<String>,
    /// Cluster id (the source-cluster label value); default: the member's ClusterProperty
    /// cluster.clusterset.k8s.io, else the name.
    #[arg(long)]
    id: Option<String>,
    /// spec.region of the Cluster (default: what its nodes' topology labels say).
    #[arg(long)]
    cluster_region: Option<String>,
    /// spec.zones of the Cluster, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cluster_zones: Vec<String>,
    /// spec.provider of the Cluster.
    #[arg(long)]
    cluster_provider: Option<String>,
    /// Lifetime of the agent's hub token (and of the search server's member token, with
    /// --search-access), in seconds, at least 600 (the API server's minimum); re-run
    /// register to renew them.
    #[arg(long, default_value_t = 365 * 24 * 3600,
          value_parser = clap::value_parser!(i64).range(register::MIN_TOKEN_SECONDS..))]
    token_expiration_seconds: i64,
    /// Let the hub's search server read this member (list and watch, nothing else): creates
    /// ServiceAccount causeway-system/causeway-search in the member, bound to the read-only
    /// ClusterRole causeway:search-reader, and stores its token and the member's endpoint
    /// on the hub. The member's API server must be reachable from the search server.
    /// Registering again without it takes the access back.
    #[arg(long)]
    search_access: bool,
    /// With --search-access: the member API URL as the search server reaches it, when it
    /// differs from the member kubeconfig's.
    #[arg(long, requires = "search_access")]
    member_api_endpoint: Option<String>,
    /// Also write the agent's hub kubeconfig to this file (to run `causeway agent` by hand).
    #[arg(long)]
    agent_kubeconfig_out: Option<PathBuf>,
}

/// What `--cluster-monitor-grace-period` means to the agent (the hub's help describes
/// what the hub does with it).
const AGENT_GRACE_HELP: &str = "The lease duration: the agent renews its cluster's Lease on the hub every quarter of it, leaves the clusterset only when its Cluster has been missing (or its identity refused) for that long, and fails /readyz when no renewal succeeded for that long. It must match the hub controller's --cluster-monitor-grace-period, after which the hub marks a cluster whose Lease was not renewed Ready=Unknown";

#[derive(Debug, clap::Args)]
pub struct UnregisterArgs {
    /// Name of the Pull member to remove.
    name: String,
    /// kubeconfig of the member: to remove the agent's Secret and the imports there too.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Context in the member kubeconfig.
    #[arg(long)]
    context: Option<String>,
    /// Leave what Causeway imported into the member in place (for a migration or a rollback).
    #[arg(long)]
    preserve: bool,
    /// How long to wait for the agent and the hub controller to finish the cleanup.
    #[arg(long, default_value = "90s", value_parser = causeway_controllers::clusters::options::parse_interval)]
    timeout: std::time::Duration,
    #[command(flatten)]
    hub: HubArgs,
}

#[derive(Debug, clap::Args)]
#[command(mut_arg("cluster_monitor_grace_period", |a| a.help(AGENT_GRACE_HELP)))]
pub struct AgentArgs {
    /// Name of this member's Cluster on the hub.
    #[arg(long, env = "CAUSEWAY_CLUSTER")]
    cluster: String,
    #[command(flatten)]
    hub: HubArgs,
    #[command(flatten)]
    member: ClusterArgs,
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:8480")]
    metrics: SocketAddr,
    #[command(flatten)]
    timing: TimingArgs,
    /// Leader election among the agent's replicas, on a Lease in the member (default
    /// name causeway-agent).
    #[command(flatten)]
    leader: causeway_runtime::leader::LeaderArgs,
    #[command(flatten)]
    log: LogArgs,
}

pub async fn register(args: RegisterArgs) -> anyhow::Result<()> {
    // the agent's kubeconfig is written after everything else: a path it cannot be
    // written to is said before anything changes
    if let Some(path) = &args.agent_kubeconfig_out {
        causeway_runtime::files::check_writable(path).context("--agent-kubeconfig-out")?;
    }
    let member = join::Member::from_kubeconfig(&args.kubeconfig, args.context.as_deref()).await?;
    let (hub, hub_endpoint) =
        register::hub_admin(&args.hub_kubeconfig, args.hub_context.as_deref()).await?;
    let opts = register::RegisterOptions {
        id: args.id,
        region: args.cluster_region,
        zones: args.cluster_zones,
        provider: args.cluster_provider,
        hub_endpoint: args.hub_api_endpoint,
        token_seconds: args.token_expiration_seconds,
        search_access: args.search_access,
        member_endpoint: args.member_api_endpoint,
        agent_kubeconfig_out: args.agent_kubeconfig_out.clone(),
        member_kubeconfig: Some(args.kubeconfig.clone()),
        member_context: args.context.clone(),
    };
    let done = register::register(hub, hub_endpoint, &args.name, &member, &opts).await?;
    // it holds the agent's token: the user's alone
    if let Some(path) = &args.agent_kubeconfig_out {
        causeway_runtime::files::write_atomic(path, done.agent_kubeconfig.as_bytes(), 0o600)?;
    }
    println!("{}", done.message);
    Ok(())
}

pub async fn unregister(args: UnregisterArgs) -> anyhow::Result<()> {
    let member = match args.kubeconfig.as_deref() {
        Some(k) => Some(join::Member::from_kubeconfig(k, args.context.as_deref()).await?),
        None => None,
    };
    let hub = args.hub.client().await?;
    println!(
        "{}",
        register::unregister(
            hub,
            &args.name,
            member.as_ref(),
            args.preserve,
            args.timeout
        )
        .await?
    );
    Ok(())
}

pub async fn agent(args: AgentArgs) -> anyhow::Result<()> {
    args.log.init("info")?;
    let hub = args.hub.client().await?;
    let member = args.member.client().await?;
    let elector = args.leader.elector(member.clone(), "causeway-agent")?;
    let metrics = Arc::new(Metrics::default());
    let renewals = Arc::new(Renewals::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = admin::bind(args.metrics, "--metrics").await?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz, /livez, /readyz");
    admin::serve(
        listener,
        agent::endpoints(&metrics, &renewals),
        stop.clone(),
    );
    causeway_runtime::signal::cancel_on_signal(stop.clone());
    let timing = args.timing.timing();
    agent::run_elected(
        elector,
        hub,
        member,
        args.cluster,
        timing,
        metrics,
        renewals,
        stop,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        register: RegisterArgs,
    }

    #[derive(Debug, clap::Parser)]
    struct AgentCli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    /// The agent's --cluster-monitor-grace-period is its lease duration, which must
    /// match the hub's: its help says so, not only what the hub does with it.
    #[test]
    fn the_agent_grace_period_help_says_it_is_the_lease_and_must_match_the_hub() {
        let mut cmd = <AgentCli as clap::CommandFactory>::command();
        let help = cmd.render_long_help().to_string();
        let flag = help
            .split_once("--cluster-monitor-grace-period")
            .map(|(_, rest)| rest)
            .expect("the flag is there");
        let flag = flag.split("\n      --").next().unwrap().replace('\n', " ");
        let flag = flag.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flag.contains("The lease duration"), "{flag}");
        assert!(
            flag.contains("must match the hub controller's --cluster-monitor-grace-period"),
            "{flag}"
        );
        assert!(flag.contains("[default: 40s]"), "{flag}");
        let parsed = AgentCli::try_parse_from([
            "agent",
            "--cluster",
            "west",
            "--cluster-monitor-grace-period",
            "20s",
        ])
        .unwrap();
        assert_eq!(
            parsed.agent.timing.timing().lease_duration(),
            std::time::Duration::from_secs(20)
        );
    }

    #[test]
    fn a_token_lifetime_the_api_server_refuses_is_refused_before_anything_is_written() {
        let parse = |seconds: &str| {
            Cli::try_parse_from([
                "register",
                "west",
                "--kubeconfig",
                "west.conf",
                "--hub-kubeconfig",
                "admin.conf",
                "--token-expiration-seconds",
                seconds,
            ])
        };
        let e = parse("60").unwrap_err().to_string();
        assert!(e.contains("60 is not in 600.."), "{e}");
        assert_eq!(parse("600").unwrap().register.token_expiration_seconds, 600);
        let mut cmd = <Cli as clap::CommandFactory>::command();
        let help = cmd.render_long_help().to_string();
        assert!(help.contains("at least 600"), "{help}");
    }
}
