//! `causeway-proxy`: serves the hub's MultiClusterIngresses (see the library docs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use causeway_crds::mci::tuning::parse_duration_or_why;
use clap::Parser;

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration_or_why(s)
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration_or_why(s)? {
        d if d.is_zero() => Err(format!("{s:?} is zero: use a duration above 0")),
        d => Ok(d),
    }
}

/// The Causeway MultiClusterIngress L7 proxy: watches MultiClusterIngresses,
/// ServiceImports, ExportedServices, EndpointSlices and TLS Secrets on the hub and
/// routes HTTP clients to ready endpoints in every member cluster.
#[derive(Parser, Debug)]
#[command(name = "causeway-proxy", version)]
struct Args {
    #[command(flatten)]
    hub: causeway_runtime::client::HubArgs,
    /// This proxy's own cluster id: its endpoints get all traffic while healthy; others
    /// take the spill-over as it degrades (Envoy priority levels, overprovisioning 1.4).
    #[arg(long)]
    cluster: Option<String>,
    /// Proxy name, used for the hub Lease causeway-proxy-<name> (default: --cluster, else the hostname).
    #[arg(long)]
    name: Option<String>,
    /// Plain HTTP listen address (HTTP/1.1 and HTTP/2 prior knowledge).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen_http: SocketAddr,
    /// HTTPS listen address (TLS with SNI from the MCI tls[] Secrets; off when unset).
    #[arg(long)]
    listen_https: Option<SocketAddr>,
    /// Admin listen address serving /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:9091")]
    metrics: SocketAddr,
    /// Address published for MCI status.loadBalancer (repeat or comma-separate; default: the HTTP listen IP).
    #[arg(long, value_delimiter = ',')]
    publish_address: Vec<String>,
    /// Do not keep the hub Lease that publishes this proxy's addresses.
    #[arg(long)]
    no_publish: bool,
    /// Default TLS certificate (PEM) for SNI names without an MCI certificate (default: self-signed).
    #[arg(long, requires = "default_key")]
    default_cert: Option<PathBuf>,
    /// Private key (PEM) of --default-cert.
    #[arg(long, requires = "default_cert")]
    default_key: Option<PathBuf>,
    /// Upstream connect timeout (annotation causeway.io/connect-timeout overrides).
    #[arg(long, default_value = "2s", value_parser = positive_duration)]
    connect_timeout: Duration,
    /// Time until the upstream response head (annotation causeway.io/request-timeout overrides).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    request_timeout: Duration,
    /// Idle time after which pooled upstream connections close (causeway.io/idle-timeout
    /// overrides). Keep it below the backends' own keep-alive timeout (Node.js and Apache
    /// 5 s, nginx 75 s): a request sent just as the backend closes an idle connection
    /// fails, and a POST cannot be resent.
    #[arg(long, default_value = "4s", value_parser = positive_duration)]
    idle_timeout: Duration,
    /// Longest wait for the next bytes of a response body once its head has arrived
    /// (as nginx's proxy_read_timeout): an upstream silent longer mid-body has the
    /// response cut off (the client connection or HTTP/2 stream is closed), and the
    /// request's circuit slot is freed. Long-polling, server-sent events and streaming
    /// gRPC backends that stay quiet longer need a larger value. An HTTP/1.1 client
    /// that takes none of its response for as long (it stopped reading) is let go the
    /// same way (nginx's send_timeout); so is an HTTP/2 client that keeps a stream's
    /// window shut that long (its connection is closed).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    read_timeout: Duration,
    /// Retries on another endpoint for connect failures and idempotent requests (causeway.io/retries overrides).
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// Time a client has to send its request head (and finish the TLS handshake); idle
    /// keep-alive connections are closed after it too.
    #[arg(long, default_value = "10s", value_parser = positive_duration)]
    header_read_timeout: Duration,
    /// Largest accepted request head in bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_header_bytes: usize,
    /// How long shutdown waits for open connections to finish.
    #[arg(long, default_value = "10s", value_parser = duration)]
    drain_timeout: Duration,
    /// HTTP/1.1 engine: "own" serves plain HTTP/1.1 requests on the proxy's own parser
    /// and upstream sockets, and hands anything else (HTTP/2, WebSocket, chunked or
    /// large uploads, answers the proxy makes itself) to hyper; "hyper" serves every
    /// request through hyper.
    #[arg(long, default_value = "own", value_parser = ["own", "hyper"])]
    http1_engine: String,
    /// Consecutive connect errors or 5xx that eject an endpoint.
    #[arg(long, default_value_t = 5)]
    eject_after: u32,
    /// First ejection time (the n-th ejection lasts n times as long, up to 10x).
    #[arg(long, default_value = "30s", value_parser = duration)]
    eject_base: Duration,
    /// Serve mesh traffic (Gateway API HTTPRoutes whose parent is a ServiceImport):
    /// `<ip>:<first port>-<last port>`, e.g. `127.0.0.1:15000-15099`. The Gateway API
    /// controller gives each captured ServiceImport port one port of the range, and the
    /// members send the traffic to that ServiceImport's clusterset IP there. Every
    /// proxy with this flag should get the same range.
    #[arg(long, value_parser = listen_mesh)]
    listen_mesh: Option<(std::net::IpAddr, std::ops::RangeInclusive<u16>)>,
    /// Tokio worker threads (default: one per CPU; 1 runs everything on one thread).
    #[arg(long)]
    worker_threads: Option<usize>,
    #[command(flatten)]
    log: causeway_runtime::log::LogArgs,
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    no_transparent_huge_pages();
    let args = Args::parse();
    let r = runtime(args.worker_threads).and_then(|rt| rt.block_on(run(args)));
    causeway_runtime::say::exit("causeway-proxy", r)
}

/// Keeps the proxy's heap in 4 KiB pages. mimalloc reserves its arenas with
/// `madvise(MADV_HUGEPAGE)`, so on a kernel with transparent huge pages in `madvise`
/// mode (the common default) every 2 MiB of arena the proxy touches became resident
/// at once: under the proxy bench that was 22 of its 51 MiB peak RSS, and 7 of its
/// 20 MiB idle. Disabling THP for the process costs no measurable CPU here (the heap
/// is small and hot).
///
/// mimalloc has touched two huge pages (4 MiB, mostly empty) before `main` runs, so
/// the flag is set and then the binary executes itself again, once: the flag is kept
/// across `execve` (prctl(2)), so the new image's allocator starts with THP off (the
/// test is `tests/proxy/binary.rs`: no huge page in the running binary's heap). The
/// process keeps its id, arguments and environment. Failure (an old kernel, a seccomp
/// filter, no `/proc/self/exe`) only costs memory.
fn no_transparent_huge_pages() {
    use std::os::unix::process::CommandExt;
    match nix::sys::prctl::get_thp_disable() {
        // Set already: by this function before it executed the binary again (or by
        // whoever started it).
        Ok(true) => return,
        Ok(false) => {}
        Err(e) => return thp_warning(&e),
    }
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        return thp_warning(&e);
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return thp_warning(&e),
    };
    let mut args = std::env::args_os();
    let mut again = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        again.arg0(arg0);
    }
    // Returns only on failure; THP stays off for what is allocated from now on.
    let e = again.args(args).exec();
    thp_warning(&e);
}

fn thp_warning(e: &dyn std::fmt::Display) {
    eprintln!(
        "causeway-proxy: could not start with transparent huge pages off ({e}); memory use may be higher"
    );
}

fn listen_mesh(s: &str) -> Result<(std::net::IpAddr, std::ops::RangeInclusive<u16>), String> {
    causeway_crds::gateway::mesh::parse_proxy_mesh(s)
}

fn runtime(workers: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut rt = match workers {
        Some(0) => anyhow::bail!("--worker-threads must be at least 1"),
        // One worker: everything on the main thread (no cross-thread wake-ups, as an
        // nginx worker process runs).
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut rt = tokio::runtime::Builder::new_multi_thread();
            rt.worker_threads(n);
            rt
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    rt.enable_all();
    rt.build().context("starting the tokio runtime")
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Logs go to stderr, coloured only on a terminal: a file or a log collector gets
    // plain text, not ANSI escape codes.
    args.log.init("info")?;
    let default_cert = match (&args.default_cert, &args.default_key) {
        (Some(c), Some(k)) => Some((
            std::fs::read(c).with_context(|| format!("reading --default-cert {}", c.display()))?,
            std::fs::read(k).with_context(|| format!("reading --default-key {}", k.display()))?,
        )),
        _ => None,
    };
    let hub = args.hub.client().await?;
    let cfg = causeway_proxy::Config {
        cluster: args.cluster.clone(),
        name: args.name.clone(),
        listen_http: args.listen_http,
        listen_https: args.listen_https,
        metrics: Some(args.metrics),
        listen_mesh: args.listen_mesh.clone(),
        publish_addresses: args.publish_address.clone(),
        publish_lease: !args.no_publish,
        default_cert,
        defaults: causeway_proxy::Defaults {
            connect_timeout: args.connect_timeout,
            request_timeout: args.request_timeout,
            idle_timeout: args.idle_timeout,
            read_timeout: args.read_timeout,
            retries: args.retries,
            ..Default::default()
        },
        outlier: causeway_proxy::Outlier {
            consecutive_failures: args.eject_after.max(1),
            base_ejection: args.eject_base,
            max_ejection: args.eject_base * 10,
            ..Default::default()
        },
        limits: causeway_proxy::Limits {
            header_read_timeout: args.header_read_timeout,
            max_header_bytes: args.max_header_bytes,
            drain_timeout: args.drain_timeout,
            send_timeout: args.read_timeout,
            own_http1: args.http1_engine == "own",
        },
        ..Default::default()
    };
    let running = causeway_proxy::start(hub, cfg).await?;
    causeway_runtime::signal::shutdown_signal().await;
    tracing::info!("shutting down: draining connections");
    running.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_positive_durations() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        assert_eq!(positive_duration("300ms"), Ok(Duration::from_millis(300)));
        assert!(positive_duration("0s").unwrap_err().contains("zero"));
        assert!(positive_duration("soon").is_err());
        let args = Args::try_parse_from(["causeway-proxy"]).unwrap();
        assert_eq!(args.read_timeout, Duration::from_secs(60));
        let args = Args::try_parse_from(["causeway-proxy", "--read-timeout", "5m"]).unwrap();
        assert_eq!(args.read_timeout, Duration::from_secs(300));
        assert!(Args::try_parse_from(["causeway-proxy", "--read-timeout", "0s"]).is_err());
        // a zero timeout would fail every request (or connection): refused, as the
        // annotations that override them refuse it
        for flag in [
            "--connect-timeout",
            "--request-timeout",
            "--idle-timeout",
            "--header-read-timeout",
        ] {
            let e = Args::try_parse_from(["causeway-proxy", flag, "0s"]).unwrap_err();
            assert!(e.to_string().contains("zero"), "{flag}: {e}");
            assert!(Args::try_parse_from(["causeway-proxy", flag, "1s"]).is_ok());
        }
    }
}
