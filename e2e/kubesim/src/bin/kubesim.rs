//! `kubesim`: run one simulated Kubernetes API server and write its kubeconfig.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// A Kubernetes API server for tests and local runs (in memory, TLS + tokens).
///
/// Starts one server, writes a kubeconfig for it, and serves until Ctrl-C.
/// Example: `kubesim --name dev --kubeconfig /tmp/dev.kubeconfig && kubectl --kubeconfig /tmp/dev.kubeconfig get ns`
#[derive(Parser, Debug)]
#[command(name = "kubesim", version)]
struct Args {
    /// Cluster name: the kubeconfig context, the CA's name and the seed of the stable kube-system uid.
    #[arg(long, default_value = "kubesim")]
    name: String,
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig (server URL, CA data, admin token).
    #[arg(long, default_value = "kubesim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Service CIDR; give it twice (IPv4 and IPv6) for a dual-stack cluster. The first is primary.
    #[arg(long = "service-cidr", default_value = "10.96.0.0/16")]
    service_cidrs: Vec<String>,
    /// kube-apiserver style static token file: `token,user,uid,"group1,group2"` per line.
    /// Users in group system:masters may do anything; others are authorized by RBAC objects.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Let requests without credentials in as system:anonymous (RBAC still applies).
    #[arg(long)]
    allow_anonymous: bool,
    /// Serve plain HTTP instead of TLS (debugging only).
    #[arg(long)]
    insecure_http: bool,
    /// Simulate the controllers, scheduler and kubelets: Deployments make ReplicaSets make
    /// Pods (StatefulSets, DaemonSets and Jobs make Pods), Pods are placed on Ready nodes
    /// with room for their requests (else Pending, Unschedulable), and workload status
    /// counts the placed, ready Pods.
    #[arg(long)]
    simulate_workloads: bool,
    /// Carry Service traffic as kube-proxy does: each ClusterIP port on 127.0.0.0/8
    /// gets a real TCP/UDP socket forwarding to the Service's ready endpoints. Needs a
    /// loopback --service-cidr, e.g. 127.96.0.0/16 (ports below 1024 need the privilege
    /// to bind them).
    #[arg(long)]
    service_proxy: bool,
    /// Number of Ready nodes to create (`<name>-node-<i>`).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// CPU capacity (and allocatable) of each node, a Kubernetes quantity: 8, 3500m.
    #[arg(long, default_value = "8", value_parser = quantity)]
    node_cpu: String,
    /// Memory capacity (and allocatable) of each node, a Kubernetes quantity: 32Gi, 512Mi.
    #[arg(long, default_value = "32Gi", value_parser = quantity)]
    node_memory: String,
    /// Pod slots of each node.
    #[arg(long, default_value_t = 110)]
    node_pods: u32,
    /// The nodes' topology.kubernetes.io/region label.
    #[arg(long, default_value = "local")]
    region: String,
    /// The nodes' topology.kubernetes.io/zone labels, comma-separated; nodes take them
    /// round-robin. Default: `<name>-a`.
    #[arg(long, value_delimiter = ',')]
    zones: Vec<String>,
    /// Events kept for watches; a watch from an older resourceVersion gets 410 Gone.
    #[arg(long, default_value_t = 50_000)]
    history: usize,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 5)]
    bookmark_interval: u64,
    /// Keep objects in a journal in this directory and reload them at start, so the
    /// cluster survives a restart (the CA and tokens are new each start; the kubeconfig is rewritten).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    log: causeway_runtime::log::LogArgs,
}

/// Accepts a non-negative Kubernetes quantity (clap names the flag in its error).
fn quantity(s: &str) -> Result<String, String> {
    match kubesim::state::quantity::parse_milli(s)? {
        v if v < 0 => Err(format!("quantity \"{s}\" must not be negative")),
        _ => Ok(s.to_string()),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.log.init("info")?;
    let mut cfg = kubesim::Config::new(&args.name);
    cfg.bind = args.listen;
    cfg.tls = !args.insecure_http;
    cfg.service_cidrs = args
        .service_cidrs
        .iter()
        .map(|c| c.parse::<kubesim::Cidr>().map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()
        .context("--service-cidr")?;
    if let Some(path) = &args.token_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --token-file {}", path.display()))?;
        cfg.tokens = kubesim::http::auth::parse_token_file(&text).map_err(anyhow::Error::msg)?;
    }
    cfg.allow_anonymous = args.allow_anonymous;
    cfg.simulate_workloads = args.simulate_workloads;
    if args.service_proxy
        && !cfg
            .service_cidrs
            .iter()
            .any(|c| c.addr.is_ipv4() && c.addr.is_loopback())
    {
        anyhow::bail!(
            "--service-proxy carries traffic only for ClusterIPs on 127.0.0.0/8: give a loopback --service-cidr too, e.g. --service-cidr 127.96.0.0/16"
        );
    }
    cfg.service_proxy = args.service_proxy;
    cfg.nodes = args.nodes;
    cfg.node_capacity = kubesim::NodeCapacity {
        cpu: args.node_cpu.clone(),
        memory: args.node_memory.clone(),
        pods: args.node_pods,
    };
    cfg.region = args.region.clone();
    if !args.zones.is_empty() {
        cfg.zones = args.zones.clone();
    }
    cfg.history_limit = args.history;
    cfg.data_dir = args.data_dir.clone();
    cfg.bookmark_interval = Duration::from_secs(args.bookmark_interval.max(1));
    let server = kubesim::Server::start(cfg).await?;
    std::fs::write(&args.kubeconfig, server.kubeconfig())
        .with_context(|| format!("writing the kubeconfig to {}", args.kubeconfig.display()))?;
    println!("kubesim \"{}\" serving at {}", server.name(), server.url());
    println!("kubeconfig: {}", args.kubeconfig.display());
    println!(
        "try: kubectl --kubeconfig {} get namespaces",
        args.kubeconfig.display()
    );
    causeway_runtime::signal::shutdown_signal().await;
    server.shutdown();
    println!("kubesim stopped");
    Ok(())
}
