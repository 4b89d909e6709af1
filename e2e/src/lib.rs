//! The end-to-end harness: a hub and member clusters on kubesim, each with its own
//! service CIDR, CA and token, with Causeway's CRDs installed. `causeway-local` and
//! the scenarios under `e2e/tests/` both start clustersets through it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, Patch, PatchParams};
use kubesim::{Cidr, Config, Server};

pub mod backends;
pub mod demo;
pub mod pull;
pub mod webhook;

/// Field manager used for everything the harness writes.
pub const MANAGER: &str = "causeway-local";

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// Hub cluster name.
    pub hub: String,
    /// Member cluster names.
    pub members: Vec<String>,
    /// Give every cluster an IPv6 service CIDR too.
    pub dual_stack: bool,
    /// First port: hub on `base_port`, members on the following ports. 0 = any free ports.
    pub base_port: u16,
    /// Run workloads on the members' simulated nodes (never on the hub, whose
    /// templates are not run).
    pub simulate_workloads: bool,
    /// Keep each cluster's objects under `<dir>/<name>/` so they survive a restart.
    pub data_dir: Option<PathBuf>,
    /// Service CIDRs for particular clusters (by name), instead of the defaults.
    pub cidrs: std::collections::BTreeMap<String, Vec<Cidr>>,
    /// Nodes each cluster starts with.
    pub nodes: usize,
    /// Capacity of each node.
    pub node_capacity: kubesim::NodeCapacity,
    /// Region and zones of particular clusters' nodes (by name), instead of `local` and `<name>-a`.
    pub topology: std::collections::BTreeMap<String, (String, Vec<String>)>,
    /// Carry Service traffic (kubesim's service proxy, as kube-proxy): clusters without
    /// a `cidrs` entry get a loopback service CIDR ([`loopback_cidrs`]), so ClusterIPs
    /// (and clusterset IPs) are real addresses on this machine.
    pub service_proxy: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            hub: "hub".into(),
            members: vec!["east".into(), "west".into(), "north".into()],
            dual_stack: false,
            base_port: 0,
            simulate_workloads: true,
            data_dir: None,
            cidrs: Default::default(),
            nodes: 1,
            node_capacity: Default::default(),
            topology: Default::default(),
            service_proxy: false,
        }
    }
}

/// The regions (and zones) `causeway-local up` gives its members, so placements and
/// overrides by region have something to tell apart: `east` is in `us-east`, `west` in
/// `us-west`, `north` in `eu-north` (zones `<region>-a`, `<region>-b`); other members
/// keep the default region `local`.
pub fn demo_regions(
    members: &[String],
) -> std::collections::BTreeMap<String, (String, Vec<String>)> {
    members
        .iter()
        .filter_map(|m| {
            let region = match m.as_str() {
                "east" => "us-east",
                "west" => "us-west",
                "north" => "eu-north",
                _ => return None,
            };
            let zones = vec![format!("{region}-a"), format!("{region}-b")];
            Some((m.clone(), (region.to_string(), zones)))
        })
        .collect()
}

/// A running hub and its members.
pub struct Clusterset {
    /// The hub.
    pub hub: Server,
    /// Members, in the order given.
    pub members: Vec<Server>,
}

/// The service CIDRs of the `index`-th cluster (hub = 0): 10.96+i.0.0/16, fd00:10:96+i::/112.
pub fn service_cidrs(index: usize, dual_stack: bool) -> Vec<Cidr> {
    let mut v = vec![
        format!("10.{}.0.0/16", 96 + index)
            .parse()
            .expect("valid v4 CIDR"),
    ];
    if dual_stack {
        v.push(
            format!("fd00:10:{}::/112", 96 + index)
                .parse()
                .expect("valid v6 CIDR"),
        );
    }
    v
}

/// Clustersets with a service proxy started by this process (each gets its own block of
/// loopback addresses, so tests running side by side never bind the same ClusterIP).
static LOOPBACK_BLOCKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The loopback service CIDR of the `index`-th cluster (hub = 0) of a clusterset whose
/// block is `block`, for kubesim's service proxy: 127.(100+block).(index).0/24.
pub fn loopback_cidrs(block: usize, index: usize) -> Vec<Cidr> {
    vec![
        format!("127.{}.{index}.0/24", 100 + block % 150)
            .parse()
            .expect("valid v4 CIDR"),
    ]
}

fn validate(opts: &Options) -> anyhow::Result<()> {
    let mut names = vec![opts.hub.clone()];
    names.extend(opts.members.iter().cloned());
    for n in &names {
        if !k8s_validation::is_dns1123_label(n) {
            bail!(
                "cluster name \"{n}\" is not a DNS-1123 label (lowercase letters, digits, '-'; e.g. east-1)"
            );
        }
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != names.len() {
        bail!("cluster names must be unique, got {names:?}");
    }
    if opts.members.is_empty() {
        bail!("give at least one member cluster");
    }
    if names.len() > 100 {
        bail!("at most 99 member clusters");
    }
    Ok(())
}

impl Clusterset {
    /// Starts the hub and members (no CRDs yet); `progress` is told about each step.
    pub async fn start(
        opts: &Options,
        mut progress: impl FnMut(&str),
    ) -> anyhow::Result<Clusterset> {
        validate(opts)?;
        // per process too (test binaries, worktrees side by side): the pid picks the
        // first block
        let block = if opts.service_proxy {
            std::process::id() as usize * 7
                + LOOPBACK_BLOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        } else {
            0
        };
        let mut servers = Vec::new();
        let names: Vec<String> = std::iter::once(opts.hub.clone())
            .chain(opts.members.iter().cloned())
            .collect();
        for (i, name) in names.iter().enumerate() {
            let mut cfg = Config::new(name);
            if opts.base_port != 0 {
                let port = opts
                    .base_port
                    .checked_add(i as u16)
                    .context("--base-port too high for this many clusters")?;
                cfg.bind = ([127, 0, 0, 1], port).into();
            }
            let cfg_cidrs =
                opts.cidrs
                    .get(name)
                    .cloned()
                    .unwrap_or_else(|| match opts.service_proxy {
                        true => loopback_cidrs(block, i),
                        false => service_cidrs(i, opts.dual_stack),
                    });
            cfg.service_cidrs = cfg_cidrs.clone();
            cfg.service_proxy = opts.service_proxy;
            // the hub holds templates that are never run there: no workload simulation
            cfg.simulate_workloads = opts.simulate_workloads && i != 0;
            cfg.nodes = opts.nodes;
            cfg.node_capacity = opts.node_capacity.clone();
            if let Some((region, zones)) = opts.topology.get(name) {
                cfg.region = region.clone();
                cfg.zones = zones.clone();
            }
            cfg.data_dir = opts.data_dir.as_ref().map(|d| d.join(name));
            let s = Server::start(cfg)
                .await
                .with_context(|| format!("starting cluster {name}"))?;
            progress(&format!(
                "{} {name} API server at {} (service CIDR {})",
                if i == 0 { "hub   " } else { "member" },
                s.url(),
                cfg_cidrs
                    .iter()
                    .map(|c| format!("{}/{}", c.addr, c.prefix))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            servers.push(s);
        }
        let hub = servers.remove(0);
        Ok(Clusterset {
            hub,
            members: servers,
        })
    }

    /// Hub then members.
    pub fn all(&self) -> impl Iterator<Item = &Server> {
        std::iter::once(&self.hub).chain(self.members.iter())
    }

    /// A member by name.
    pub fn member(&self, name: &str) -> Option<&Server> {
        self.members.iter().find(|m| m.name() == name)
    }

    /// Installs Causeway's CRDs in every cluster and waits until they are served.
    pub async fn install_crds(&self) -> anyhow::Result<()> {
        for s in self.all() {
            install_crds(&client(s).await?)
                .await
                .with_context(|| format!("installing CRDs into {}", s.name()))?;
        }
        Ok(())
    }

    /// Writes `<name>.kubeconfig` per cluster and a merged `kubeconfig`; returns the merged path.
    pub fn write_kubeconfigs(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        self.write_kubeconfigs_with(dir, &[])
    }

    /// [`Clusterset::write_kubeconfigs`], with `extra` contexts (e.g. `search`) in the
    /// merged kubeconfig and a file each.
    pub fn write_kubeconfigs_with(
        &self,
        dir: &Path,
        extra: &[kubesim::kubeconfig::Entry],
    ) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut entries = Vec::new();
        for s in self.all() {
            let path = dir.join(format!("{}.kubeconfig", s.name()));
            std::fs::write(&path, s.kubeconfig())
                .with_context(|| format!("writing {}", path.display()))?;
            entries.push(entry(s));
        }
        for e in extra {
            let path = dir.join(format!("{}.kubeconfig", e.name));
            std::fs::write(&path, kubesim::kubeconfig::multi(std::slice::from_ref(e)))
                .with_context(|| format!("writing {}", path.display()))?;
            entries.push(e.clone());
        }
        let merged = dir.join("kubeconfig");
        std::fs::write(&merged, kubesim::kubeconfig::multi(&entries))
            .with_context(|| format!("writing {}", merged.display()))?;
        Ok(merged)
    }

    /// Registers every member on the hub (`causeway join`, push mode).
    pub async fn join_all(&self) -> anyhow::Result<()> {
        self.join_all_but(&[]).await
    }

    /// Registers every member but those named in `pull` (which register in pull mode).
    pub async fn join_all_but(&self, pull: &[String]) -> anyhow::Result<()> {
        let hub = client(&self.hub).await?;
        for m in self
            .members
            .iter()
            .filter(|m| !pull.iter().any(|p| p == m.name()))
        {
            causeway_controllers::clusters::join::join(hub.clone(), m.name(), &access(m), None)
                .await
                .with_context(|| format!("joining {}", m.name()))?;
        }
        Ok(())
    }

    /// Creates a namespace in the hub (where templates of it are written) and in every
    /// member (imports land only where it exists, NS-2).
    pub async fn create_namespace_everywhere(&self, ns: &str) -> anyhow::Result<()> {
        let body =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        for m in self.all() {
            let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client(m).await?);
            api.patch(ns, &PatchParams::apply(MANAGER), &Patch::Apply(&body))
                .await
                .with_context(|| format!("creating namespace {ns} in {}", m.name()))?;
        }
        Ok(())
    }

    /// Starts the hub controllers in this process; they stop with the returned token.
    pub async fn start_controller(&self) -> anyhow::Result<Controller> {
        self.start_controller_as(client(&self.hub).await?)
    }

    /// Starts the hub controllers with the given hub client (e.g. a least-privilege token).
    pub fn start_controller_as(&self, hub: kube::Client) -> anyhow::Result<Controller> {
        // Probe members every second and damp for seconds, so readiness changes show
        // quickly in tests and locally.
        let opts = causeway_controllers::controller::Options {
            timing: causeway_controllers::clusters::options::Timing::fast(),
            ..Default::default()
        };
        self.start_controller_with(hub, opts)
    }

    /// Starts the hub controllers with the given hub client and settings.
    pub fn start_controller_with(
        &self,
        hub: kube::Client,
        opts: causeway_controllers::controller::Options,
    ) -> anyhow::Result<Controller> {
        let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
        // one controller, not elected: it leads
        metrics.set_unelected();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(causeway_controllers::controller::run_with(
            hub,
            metrics.clone(),
            opts,
            stop.clone(),
        ));
        Ok(Controller {
            stop,
            metrics,
            task,
        })
    }

    /// Starts the search server in this process (indexer + API on 127.0.0.1, a free
    /// port) on `storage` (a SQLite path or `postgres://…`), following this hub's
    /// registry; its certificate goes to `data_dir`.
    pub async fn start_search(
        &self,
        storage: &str,
        data_dir: &Path,
    ) -> anyhow::Result<causeway_controllers::search::Running> {
        self.start_search_with(storage, data_dir, Default::default())
            .await
    }

    /// [`Self::start_search`] with the given watch limits.
    pub async fn start_search_with(
        &self,
        storage: &str,
        data_dir: &Path,
        watches: causeway_search::api::watch::Limits,
    ) -> anyhow::Result<causeway_controllers::search::Running> {
        causeway_controllers::search::start(
            client(&self.hub).await?,
            causeway_controllers::search::StartOptions {
                storage: storage.to_string(),
                sqlite_files: causeway_search::store::DEFAULT_SQLITE_FILES,
                data_dir: data_dir.to_path_buf(),
                listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                tls: None,
                resources: causeway_search::indexer::default_resources(),
                requestheader_ca: None,
                requestheader_allowed_names: Vec::new(),
                watches,
                max_page_size: causeway_search::api::MAX_PAGE,
                max_connections: causeway_runtime::https::MAX_CONNECTIONS,
            },
        )
        .await
    }

    /// The kubeconfig entry `search` for a running search server, with the hub's admin
    /// token (what it may list on the hub is what it finds).
    pub fn search_entry(
        &self,
        search: &causeway_controllers::search::Running,
    ) -> kubesim::kubeconfig::Entry {
        kubesim::kubeconfig::Entry {
            name: "search".into(),
            server: search.server_url(),
            ca_pem: Some(search.ca_pem.clone()),
            token: self.hub.admin_token().to_string(),
        }
    }

    /// Stops every server.
    pub fn shutdown(&self) {
        for s in self.all() {
            s.shutdown();
        }
    }
}

/// The hub controllers running in-process.
pub struct Controller {
    /// Cancels them.
    pub stop: tokio_util::sync::CancellationToken,
    /// Their metrics.
    pub metrics: std::sync::Arc<causeway_controllers::metrics::Metrics>,
    /// The main task.
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Controller {
    /// Stops the controllers and waits for the main loop to end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// A cluster's About API ClusterProperties, name → value (empty when it has none or
/// does not serve them).
pub async fn cluster_properties(c: &kube::Client) -> std::collections::BTreeMap<String, String> {
    let api: Api<causeway_crds::about::v1beta1::ClusterProperty> = Api::all(c.clone());
    api.list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|p| (p.metadata.name.unwrap_or_default(), p.spec.value))
                .collect()
        })
        .unwrap_or_default()
}

/// How the hub reaches a member server (its URL, CA and admin token).
pub fn access(s: &Server) -> causeway_controllers::clusters::join::MemberAccess {
    causeway_controllers::clusters::join::MemberAccess {
        server: s.url(),
        ca_pem: s.ca_pem().map(String::from),
        token: s.admin_token().to_string(),
    }
}

/// A member server as `causeway register` reaches it (its admin's token).
pub async fn member(s: &Server) -> causeway_controllers::clusters::join::Member {
    causeway_controllers::clusters::join::Member::from_access(&access(s))
        .await
        .expect("a client for the member")
}

/// Where a Pull agent reaches a hub server (its URL and CA).
pub fn hub_endpoint(s: &Server) -> causeway_controllers::clusters::register::HubEndpoint {
    causeway_controllers::clusters::register::HubEndpoint {
        server: s.url(),
        ca_pem: s.ca_pem().map(String::from),
        tls_server_name: None,
    }
}

fn entry(s: &Server) -> kubesim::kubeconfig::Entry {
    kubesim::kubeconfig::Entry {
        name: s.name().to_string(),
        server: s.url(),
        ca_pem: s.ca_pem().map(String::from),
        token: s.admin_token().to_string(),
    }
}

/// A kube client for a server (admin token, the server's CA).
pub async fn client(s: &Server) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(&s.kubeconfig())
        .context("parsing the generated kubeconfig")?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .context("building a client config")?;
    kube::Client::try_from(cfg).context("building a client")
}

/// Server-side applies every Causeway CRD and waits for `Established`.
pub async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    causeway_runtime::crds::install(
        client,
        &causeway_crds::crdgen::all_crds(),
        MANAGER,
        Duration::from_secs(10),
    )
    .await?;
    Ok(())
}
