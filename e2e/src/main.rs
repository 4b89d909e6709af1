//! `causeway-local`: a local clusterset (hub + members on kubesim) with Causeway installed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use causeway_e2e::{Clusterset, Options};
use clap::{Parser, Subcommand};

/// Run Causeway locally: a hub and member Kubernetes clusters simulated by kubesim,
/// with Causeway's CRDs installed, driven with kubectl or kube-rs like real clusters.
#[derive(Parser, Debug)]
#[command(name = "causeway-local", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start the hub and member clusters, install the CRDs, write kubeconfigs, and run until Ctrl-C.
    Up(Box<UpArgs>),
    /// Inject a fault into a member of a running `causeway-local up` (from a second terminal):
    /// watch it go NotReady or Unknown, get tainted, keep serving its last endpoints, and recover.
    Fault(FaultArgs),
}

#[derive(clap::Args, Debug)]
struct FaultArgs {
    /// The member cluster.
    cluster: String,
    /// unreachable: a Push member's API server drops every connection, a Pull member's agent
    /// loses the hub; not-ready: its /readyz fails; ok: no fault.
    #[arg(value_enum)]
    fault: causeway_e2e::pull::Fault,
    /// The --dir of the running `causeway-local up`.
    #[arg(long, default_value = ".causeway-local")]
    dir: PathBuf,
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    /// Directory for the kubeconfigs: one per cluster (<name>.kubeconfig) and a merged `kubeconfig` with one context per cluster.
    #[arg(long, default_value = ".causeway-local")]
    dir: PathBuf,
    /// Name of the hub cluster.
    #[arg(long, default_value = "hub")]
    hub: String,
    /// Member cluster names, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "east,west,north")]
    members: Vec<String>,
    /// Members to register in pull mode, each with its own agent (comma separated); the
    /// others join in push mode.
    #[arg(long, value_delimiter = ',')]
    pull: Vec<String>,
    /// Give every cluster an IPv6 service CIDR as well (dual-stack Services; not with
    /// --service-proxy, whose addresses are IPv4 loopback ones).
    #[arg(long, conflicts_with = "service_proxy")]
    dual_stack: bool,
    /// Serve the hub on this port and the members on the next ones (127.0.0.1); 0 picks free ports.
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// Do not fill Deployment/StatefulSet/Job status as if their replicas became ready.
    #[arg(long)]
    no_simulate_workloads: bool,
    /// Keep every cluster's objects under this directory (one sub-directory per cluster) so a
    /// restart brings them back; combine with --base-port for stable addresses.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Demo HTTP backends ("pods") per member behind the exported `web` Service in namespace
    /// `demo` (0: no MultiClusterIngress demo).
    #[arg(long, default_value_t = 2)]
    pods: usize,
    /// causeway-dns for the first member listens here (UDP and TCP); the next members use the
    /// following ports. 0 picks free ports.
    #[arg(long, default_value_t = 0)]
    dns_base_port: u16,
    /// causeway-proxy's plain HTTP listener (HTTP/1.1 and h2c); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    proxy_http: std::net::SocketAddr,
    /// causeway-proxy's HTTPS listener (self-signed default certificate, or the MCI's
    /// tls[] Secrets by SNI); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    proxy_https: std::net::SocketAddr,
    /// Where causeway-proxy serves mesh traffic (HTTPRoutes whose parent is a
    /// ServiceImport): `<ip>:<first port>-<last port>`.
    #[arg(long, default_value = "127.0.0.1:15000-15099", value_parser = causeway_crds::gateway::mesh::parse_proxy_mesh)]
    proxy_mesh: (std::net::IpAddr, std::ops::RangeInclusive<u16>),
    /// Carry Service traffic as kube-proxy does: ClusterIPs and clusterset IPs become
    /// loopback addresses that answer (a port below 1024 needs root or
    /// CAP_NET_BIND_SERVICE; the demo `web` Service uses 80).
    #[arg(long)]
    service_proxy: bool,
    /// Address of the controller's /metrics, /healthz and /readyz (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics: std::net::SocketAddr,
    #[command(flatten)]
    log: causeway_runtime::log::LogArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    causeway_runtime::say::exit("causeway-local", run().await)
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Up(args) => up(*args).await,
        Cmd::Fault(args) => {
            let dir = std::path::absolute(&args.dir).unwrap_or(args.dir.clone());
            causeway_e2e::pull::request_fault(&dir, &args.cluster, args.fault)?;
            println!(
                "asked the `causeway-local up` using {} to make {} {}; watch it on the hub: kubectl --context <hub> get clusters -w",
                dir.display(),
                args.cluster,
                args.fault.word()
            );
            Ok(())
        }
    }
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    args.log.init("warn")?;
    let started = Instant::now();
    let opts = Options {
        hub: args.hub.clone(),
        members: args.members.clone(),
        dual_stack: args.dual_stack,
        base_port: args.base_port,
        simulate_workloads: !args.no_simulate_workloads,
        data_dir: args.data_dir.clone(),
        cidrs: Default::default(),
        topology: causeway_e2e::demo_regions(&args.members),
        service_proxy: args.service_proxy,
        ..Default::default()
    };
    if args.pods > 50 {
        anyhow::bail!(
            "--pods {} is too many: at most 50 demo backends per member",
            args.pods
        );
    }
    // the search server's kubeconfig and context are named `search`
    if let Some(n) = std::iter::once(&opts.hub)
        .chain(&opts.members)
        .find(|n| *n == "search")
    {
        anyhow::bail!(
            "cluster name \"{n}\" is taken by the search server's kubeconfig and context: name the cluster otherwise"
        );
    }
    for p in &args.pull {
        if !opts.members.contains(p) {
            anyhow::bail!(
                "--pull {p}: no member named {p} (members: {})",
                opts.members.join(", ")
            );
        }
    }
    let total = 9;
    println!(
        "[1/{total}] starting {} clusters on kubesim",
        1 + opts.members.len()
    );
    let cs = Clusterset::start(&opts, |line| println!("      {line}")).await?;
    println!("[2/{total}] installing Causeway CRDs into every cluster");
    cs.install_crds().await?;
    println!(
        "[3/{total}] joining the members to the hub ({})",
        opts.members.join(", ")
    );
    cs.join_all_but(&args.pull).await?;
    cs.create_namespace_everywhere("demo").await?;
    println!("[4/{total}] starting the controller (MCS exporter, aggregator, importer)");
    let ctl = cs.start_controller().await?;
    let mut agents = Vec::new();
    for p in &args.pull {
        let agent = cs
            .start_pull_member(
                p,
                causeway_controllers::clusters::options::Timing::fast(),
                true,
            )
            .await?;
        println!(
            "      {p}: pull mode, its agent reaches the hub through {}; registered with --search-access (search reads it with a read-only account)",
            agent.link.addr
        );
        agents.push(agent);
    }
    let agents = std::sync::Arc::new(agents);
    let hook = causeway_e2e::webhook::Webhook::start().await?;
    let hub = causeway_e2e::client(&cs.hub).await?;
    for (manifest, path) in [
        (
            causeway_e2e::webhook::DELETION_PROTECTION,
            causeway_controllers::webhook::PATH,
        ),
        (
            causeway_e2e::webhook::POLICIES,
            causeway_controllers::webhook::policies::PATH,
        ),
    ] {
        hook.install(&hub, manifest, path).await?;
    }
    println!(
        "      causeway webhook at {} for the hub: deletion protection, invalid policies refused at apply",
        hook.base
    );
    let listener = causeway_runtime::admin::bind(args.metrics, "--metrics").await?;
    let metrics_addr = listener.local_addr()?;
    causeway_runtime::admin::serve(listener, ctl.metrics.endpoints(), ctl.stop.clone());
    println!("      metrics, healthz, readyz at http://{metrics_addr}/");
    let backends = if args.pods > 0 {
        println!(
            "[5/{total}] demo: {} HTTP backends per member behind Service demo/web, exported; MultiClusterIngress demo/web on the hub",
            args.pods
        );
        let b = causeway_e2e::demo::web(&cs, args.pods).await?;
        for m in &opts.members {
            let addrs: Vec<String> = b
                .iter()
                .filter(|b| &b.cluster == m)
                .map(|b| b.addr.to_string())
                .collect();
            println!("      {m}: {}", addrs.join(" "));
        }
        b
    } else {
        println!("[5/{total}] demo skipped (--pods 0)");
        Vec::new()
    };
    println!("[6/{total}] starting causeway-dns for every member (zone clusterset.local)");
    let mut dns = Vec::new();
    for (i, m) in cs.members.iter().enumerate() {
        let port = match args.dns_base_port {
            0 => 0,
            p => p
                .checked_add(i as u16)
                .context("--dns-base-port is too high for this many members")?,
        };
        let cfg = causeway_dns::Config {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            metrics: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            ..Default::default()
        };
        let running = causeway_dns::start(causeway_e2e::client(m).await?, cfg)
            .await
            .with_context(|| format!("starting causeway-dns for {}", m.name()))?;
        println!(
            "      {}: dns {} (udp+tcp), metrics http://{}/",
            m.name(),
            running.udp,
            running.metrics.map(|a| a.to_string()).unwrap_or_default()
        );
        dns.push((m.name().to_string(), running));
    }
    println!("[7/{total}] starting causeway-proxy (MultiClusterIngress), locality: none");
    let proxy = causeway_proxy::start(
        causeway_e2e::client(&cs.hub).await?,
        causeway_proxy::Config {
            listen_http: args.proxy_http,
            listen_https: Some(args.proxy_https),
            metrics: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            listen_mesh: Some(args.proxy_mesh.clone()),
            name: Some("local".into()),
            ..Default::default()
        },
    )
    .await
    .context("starting causeway-proxy")?;
    println!(
        "      http://{}/  https://{}/  metrics http://{}/  mesh {}",
        proxy.http,
        proxy.https.map(|a| a.to_string()).unwrap_or_default(),
        proxy.metrics.map(|a| a.to_string()).unwrap_or_default(),
        causeway_crds::gateway::mesh::format_proxy_mesh(args.proxy_mesh.0, &args.proxy_mesh.1)
    );
    let dir = std::path::absolute(&args.dir).unwrap_or(args.dir.clone());
    let search_dir = dir.join("search");
    let search_db = search_dir.join("search.db");
    println!(
        "[8/{total}] starting search: every member indexed into SQLite ({})",
        search_db.display()
    );
    let search = cs
        .start_search(&search_db.display().to_string(), &search_dir)
        .await
        .context("starting the search server")?;
    println!(
        "      {} (kubeconfig context search; /metrics, /healthz, /readyz on the same address)",
        search.server_url()
    );
    println!("[9/{total}] writing kubeconfigs");
    let merged = cs.write_kubeconfigs_with(&dir, &[cs.search_entry(&search)])?;
    for s in cs.all() {
        println!(
            "      {}",
            dir.join(format!("{}.kubeconfig", s.name())).display()
        );
    }
    println!("      {}", dir.join("search.kubeconfig").display());
    let contexts: Vec<String> = cs
        .all()
        .map(|s| s.name().to_string())
        .chain(["search".to_string()])
        .collect();
    println!(
        "      {} (contexts: {})",
        merged.display(),
        contexts.join(", ")
    );
    println!();
    println!(
        "causeway-local is up in {:.1}s: kubeconfigs in {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    println!();
    println!("Try:");
    println!("  export KUBECONFIG={}", merged.display());
    println!("  kubectl config get-contexts");
    println!("  kubectl --context {} get crds", opts.hub);
    for m in &opts.members {
        println!("  kubectl --context {m} get namespaces");
    }
    if opts.members.len() >= 3 && opts.members[..2] == ["east".to_string(), "west".to_string()] {
        println!(
            "  # export the demo Service from east and west, see it imported in {}:",
            opts.members[2]
        );
        println!("  kubectl --context east apply -f examples/mcs-demo/east.yaml");
        println!("  kubectl --context west apply -f examples/mcs-demo/west.yaml");
        println!(
            "  kubectl --context {} get serviceimports,endpointslices -n demo",
            opts.members[2]
        );
    }
    println!(
        "  kubectl --context {} get serviceexports,serviceimports -A",
        opts.members[0]
    );
    println!("  curl -s http://{metrics_addr}/metrics | grep causeway_mcs");
    if args.pods > 0 {
        println!("  # the demo MultiClusterIngress: answers rotate over every cluster's pods:");
        println!(
            "  for i in 1 2 3 4 5 6; do curl -s http://{}/; done",
            proxy.http
        );
        println!(
            "  kubectl --context {} get mci -n demo web -o yaml",
            opts.hub
        );
    }
    if let Some((m, d)) = dns.last()
        && args.pods > 0
    {
        println!("  # the demo Service, resolved by {m}'s causeway-dns:");
        println!(
            "  dig @{} -p {} +short web.demo.svc.clusterset.local",
            d.udp.ip(),
            d.udp.port()
        );
    }
    println!(
        "  # federation: a Deployment, ConfigMap and Service to every member, overridden per region"
    );
    println!(
        "  kubectl --context {} apply -f examples/federation-demo/",
        opts.hub
    );
    println!("  kubectl --context {} get rb -n demo", opts.hub);
    println!(
        "  # policies the hub would mark Valid=False are refused at apply, naming each field to fix:"
    );
    println!(
        "  kubectl --context {} apply -f examples/admission/refused-policies.yaml",
        opts.hub
    );
    println!("  # search: the demo's Pods in every member, one query (CLUSTER column)");
    println!("  kubectl --context search get pods -n demo -l app=shop");
    println!("  kubectl --context search get pods -A -w   # every member's changes, one watch");
    println!("  cargo run --bin causeway -- search pods -l app=shop --sort \"created_at desc\"");
    println!(
        "  cargo run --bin causeway -- explain deployment/shop -n demo --hub-context {}",
        opts.hub
    );
    println!("  # the registry: mode, readiness, region, nodes; then cut a member off and watch");
    println!("  kubectl --context {} get clusters -w", opts.hub);
    if let Some(m) = args.pull.first().or(opts.members.first()) {
        println!(
            "  cargo run --bin causeway-local -- fault {m} unreachable --dir {}   # Unknown/NotReady, tainted",
            dir.display()
        );
        println!(
            "  cargo run --bin causeway-local -- fault {m} ok --dir {}",
            dir.display()
        );
    }
    let faults_dir = dir.clone();
    causeway_e2e::pull::forget_faults(&faults_dir);
    println!();
    println!("Press Ctrl-C to stop.");
    let cs = std::sync::Arc::new(cs);
    tokio::spawn(causeway_e2e::pull::follow_faults(
        cs.clone(),
        agents.clone(),
        faults_dir,
        ctl.stop.clone(),
    ));
    causeway_runtime::signal::shutdown_signal().await;
    println!("stopping...");
    causeway_e2e::pull::forget_faults(&dir);
    for a in agents.iter() {
        a.stop.cancel();
    }
    ctl.stop().await;
    hook.stop().await;
    proxy.shutdown().await;
    search.shutdown().await;
    drop(backends);
    for (_, d) in dns {
        d.shutdown().await;
    }
    cs.shutdown();
    println!("stopped");
    Ok(())
}
