//! `causeway-dns`: serves the MCS DNS zone of the member cluster it watches.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// Authoritative DNS for Multi-Cluster Services (`<svc>.<ns>.svc.clusterset.local`),
/// answered from the ServiceImports and MCS EndpointSlices of one member cluster.
#[derive(Parser, Debug)]
#[command(name = "causeway-dns", version)]
struct Args {
    /// The member cluster to watch.
    #[command(flatten)]
    cluster: causeway_runtime::client::ClusterArgs,
    /// Zone to serve authoritatively.
    #[arg(long, default_value = "clusterset.local")]
    zone: String,
    /// Address for DNS over UDP and TCP (same port for both). [::]:PORT serves IPv6
    /// and IPv4 clients alike (IPv4 only on a host without IPv6).
    #[arg(long, default_value = "127.0.0.1:5353")]
    listen: SocketAddr,
    /// TTL in seconds of every answer (and of negative caching).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=86400))]
    ttl: u32,
    /// Serve /metrics, /healthz and /readyz on this address (e.g. 0.0.0.0:9153).
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Relay names outside the zone to this resolver (ip:port). Without it they are REFUSED.
    /// A query the resolver does not answer gets SERVFAIL.
    #[arg(long)]
    forward: Option<SocketAddr>,
    /// Most forwarded queries (--forward) waiting for the resolver at once, over UDP
    /// and TCP together; more are answered REFUSED at once (as CoreDNS's forward
    /// max_concurrent), so a slow resolver cannot pile up tasks and sockets here.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_concurrent_forwards: u32,
    /// UDP worker threads, each a blocking loop on its own SO_REUSEPORT socket (the
    /// kernel spreads clients over them) reading and answering batches of datagrams;
    /// also the size of the async runtime for watches, TCP and metrics.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Close TCP clients that send nothing between queries for this many seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    tcp_idle_timeout: u64,
    /// Once a TCP query has begun, close the connection unless the rest of it arrives
    /// within this many milliseconds (also the limit for writing its answer), so
    /// half-sent queries cannot hold connections.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    tcp_query_timeout_ms: u64,
    /// Most TCP connections open at once. One more makes room by closing the
    /// connection idle between queries the longest (the new client's own first); when
    /// none is idle, the oldest connection of the client holding the most, if it holds
    /// at least two more than the new client and more than 2; else the new one is
    /// closed as it is accepted. Keep it below the process's file descriptor limit.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tcp_max_connections: u32,
    /// Most TCP connections open at once from one client IP address, so one client
    /// cannot take every connection. One more makes room by closing that client's
    /// connection idle the longest; it is closed as it is accepted only when none is
    /// idle. In a cluster the clients are the CoreDNS pods, one connection per
    /// query in flight.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    tcp_max_connections_per_client: u32,
    /// Address of this server answered for the apex NS target `ns.dns.<zone>` (A or
    /// AAAA, also as glue in the apex NS answer, so the zone can be delegated here).
    /// Repeat for several. Default: the --listen address; when that is 0.0.0.0, the
    /// IPv4 address of the interface of the default route (the pod IP in a pod); when
    /// it is :: (dual-stack), its IPv6 and IPv4 addresses, each when routed; loopback
    /// only when no address is routed.
    #[arg(long = "ns-address", value_name = "IP")]
    ns_address: Vec<std::net::IpAddr>,
    #[command(flatten)]
    log: causeway_runtime::log::LogArgs,
}

fn main() -> std::process::ExitCode {
    causeway_runtime::say::exit("causeway-dns", start())
}

fn start() -> anyhow::Result<()> {
    let args = Args::parse();
    // Logs go to stderr, coloured only when it is a terminal (not in files or pipes).
    args.log.init("info")?;
    // Validate the zone before touching the cluster: bad input fails fast.
    causeway_dns::name::to_wire(&args.zone).context("--zone")?;
    let workers = usize::from(args.workers);
    let rt = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
    .context("starting the tokio runtime")?;
    rt.block_on(run(args, workers))
}

async fn run(args: Args, workers: usize) -> anyhow::Result<()> {
    let client = args.cluster.client().await?;
    let cfg = causeway_dns::Config {
        zone: args.zone.clone(),
        listen: args.listen,
        ttl: args.ttl,
        metrics: args.metrics,
        forward: args.forward,
        max_concurrent_forwards: args.max_concurrent_forwards as usize,
        workers,
        tcp_idle_timeout: Duration::from_secs(args.tcp_idle_timeout),
        tcp_query_timeout: Duration::from_millis(args.tcp_query_timeout_ms),
        max_tcp_connections: args.tcp_max_connections as usize,
        max_tcp_connections_per_client: args.tcp_max_connections_per_client as usize,
        nameservers: args.ns_address.clone(),
        ..causeway_dns::Config::default()
    };
    let running = causeway_dns::start(client, cfg).await?;
    causeway_runtime::signal::shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}
