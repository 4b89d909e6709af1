//! `causeway search serve`: the cross-cluster search server (issue 15). It follows the
//! member registry on the hub (the same `Cluster` objects and credential Secrets the hub
//! controller reads, through [`crate::clusters::registry::members`]) and hands the
//! indexer of `causeway-search` the Ready members to watch and the registered ones to
//! keep; the indexer streams their objects into the store, and the API serves them to
//! kubectl, filtered by hub RBAC.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use causeway_runtime::events::Notes;
use causeway_runtime::reflect::Wake;
use causeway_search::indexer::{Fleet, Member};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Resource, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clusters::join::client_for;
use crate::clusters::registry::{Reader, Told, Unusable, members_for};

/// Keeps `tx` at the hub's fleet: every registered Cluster (not being deleted), and the
/// members whose Ready condition is True with a client built from their credentials
/// (rebuilt when the credentials change): Push members, and Pull members registered
/// with `--search-access`. A member that cannot be read (a Pull member without search
/// access, missing credentials) stays registered but unindexed; a Warning Event
/// `NotIndexed` on its Cluster and the log say why, once per reason.
pub async fn follow_fleet(
    hub: kube::Client,
    tx: watch::Sender<Fleet>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let wake = Wake::new();
    let (clusters, secrets) = crate::clusters::registry::caches(&hub, wake.clone(), &stop).await?;
    // clients by member, with the fingerprint they were built for
    let mut built: BTreeMap<String, Member> = BTreeMap::new();
    // what was said about each member that cannot be indexed
    let mut told = Told::default();
    let recorder = Notes::new(
        hub.clone(),
        Reporter {
            controller: "causeway-search".into(),
            instance: None,
        },
    );
    let mut first = true;
    loop {
        let cl: Vec<Cluster> = clusters
            .state()
            .iter()
            .map(|c| c.as_ref().clone())
            .collect();
        let se: Vec<Secret> = secrets.state().iter().map(|s| s.as_ref().clone()).collect();
        let registered: BTreeSet<String> = cl
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| c.name_any())
            .collect();
        let ready_names: BTreeSet<String> = cl
            .iter()
            .filter(|c| crate::clusters::status::is_ready(c))
            .map(|c| c.name_any())
            .collect();
        let (want, unusable) = members_for(Reader::Search, &cl, &se);
        for u in told.news(&unusable) {
            let cluster = cl.iter().find(|c| c.name_any() == u.name);
            tell_not_indexed(&recorder, u, cluster).await;
        }
        built.retain(|name, m| {
            want.get(name)
                .is_some_and(|w| w.fingerprint == m.fingerprint)
        });
        for (name, spec) in &want {
            if built.contains_key(name) {
                continue;
            }
            match client_for(&spec.access).await {
                Ok(client) => {
                    built.insert(
                        name.clone(),
                        Member {
                            client,
                            fingerprint: spec.fingerprint.clone(),
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %format!("{e:#}"), "cannot build a client for the member; not indexing it")
                }
            }
        }
        let ready: BTreeMap<String, Member> = built
            .iter()
            .filter(|(name, _)| ready_names.contains(*name) && registered.contains(*name))
            .map(|(n, m)| (n.clone(), m.clone()))
            .collect();
        if first {
            // the indexer starts from the registry's complete view: it purges what this
            // does not list
            first = false;
            tx.send_replace(Fleet {
                ready: ready.clone(),
                registered: registered.clone(),
            });
        }
        tx.send_if_modified(|f| {
            let same = f.registered == registered
                && f.ready.len() == ready.len()
                && f.ready
                    .iter()
                    .zip(&ready)
                    .all(|((a, x), (b, y))| a == b && x.fingerprint == y.fingerprint);
            if !same {
                f.registered = registered.clone();
                f.ready = ready.clone();
            }
            !same
        });
        if wake
            .next_round(&stop, Duration::from_secs(30), Duration::from_millis(5))
            .await
            .is_none()
        {
            return Ok(());
        }
    }
}

/// Says why member `u` is not indexed: in the log, and as a Warning Event on its
/// Cluster (`kubectl describe cluster <name>` on the hub).
async fn tell_not_indexed(recorder: &Notes, u: &Unusable, cluster: Option<&Cluster>) {
    tracing::warn!(cluster = %u.name, reason = %u.reason, "member not indexed");
    // the reasons come from the Clusters listed: one without its object was deleted since
    let Some(reference) = cluster.map(|c| c.object_ref(&())) else {
        return;
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "NotIndexed".into(),
        note: Some(
            format!("search does not index this member: {}", u.reason)
                .chars()
                .take(1000)
                .collect(),
        ),
        action: "Index".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::warn!(cluster = %u.name, error = %e, "could not publish an Event on the Cluster");
    }
}

/// `causeway search serve` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub hub: causeway_runtime::client::HubArgs,
    /// Where the index lives: `postgres://USER@HOST:PORT/DB` for PostgreSQL, else a SQLite
    /// file (default: search.db in --data-dir).
    #[arg(long, env = "CAUSEWAY_SEARCH_STORAGE")]
    pub storage: Option<String>,
    /// SQLite: how many files a new store is made of, each with its own writer (a
    /// cluster's objects are all in one; searches merge the files' pages). More files
    /// ingest faster on more cores (1.5x with 4 on 2 cores); a store made with more
    /// keeps them.
    /// PostgreSQL ignores it.
    #[arg(long, env = "CAUSEWAY_SEARCH_SQLITE_FILES", value_name = "N",
        default_value_t = causeway_search::store::DEFAULT_SQLITE_FILES as u16,
        value_parser = clap::value_parser!(u16).range(1..=causeway_search::store::MAX_SQLITE_FILES as i64))]
    pub sqlite_files: u16,
    /// Directory for the SQLite files and the self-signed serving certificate.
    #[arg(long, default_value = "causeway-search")]
    pub data_dir: std::path::PathBuf,
    /// Address of the search API (HTTPS), with /metrics, /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: std::net::SocketAddr,
    /// Serving certificate (PEM); default: a self-signed one kept in --data-dir
    /// (its CA in ca.crt there, for kubeconfigs). Read again when it changes (a renewed
    /// certificate is served without a restart).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Behind an APIService on a real hub: the requestheader CA of kube-apiserver (the
    /// `requestheader-client-ca-file` of configmap kube-system/extension-apiserver-authentication).
    /// Requests over a client certificate it signed are taken as the user named in
    /// X-Remote-User / X-Remote-Group; others still need a bearer token.
    #[arg(long, value_name = "FILE")]
    pub requestheader_client_ca: Option<std::path::PathBuf>,
    /// The common names the front proxy's certificate may have, comma-separated (the
    /// `requestheader-allowed-names` of that configmap; kubeadm's is
    /// `front-proxy-client`): a certificate of the CA with another name cannot name
    /// users. Empty: any certificate the CA signed may.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAMES",
        requires = "requestheader_client_ca"
    )]
    pub requestheader_allowed_names: Vec<String>,
    /// A type to index, repeatable: `[GROUP/]VERSION/RESOURCE[:metadata][@CLUSTER,…]`
    /// (e.g. `apps/v1/deployments`, `v1/configmaps:metadata`, `v1/secrets:metadata@east`).
    /// Default: Deployments, StatefulSets, DaemonSets, ReplicaSets, Pods, Services,
    /// ConfigMaps (metadata only), Nodes, Namespaces.
    #[arg(long = "resource", value_name = "SPEC")]
    pub resources: Vec<String>,
    /// Cross-cluster watches (`kubectl get -w`, informers) open at once, at most; each
    /// holds one watch on every member it shows. More are refused with 429.
    #[arg(long, default_value_t = causeway_search::api::watch::MAX_WATCHES, value_name = "N")]
    pub max_watches: usize,
    /// A cross-cluster watch that names no timeoutSeconds ends after a random time
    /// between this many seconds and twice it (kube-apiserver's flag of the same name);
    /// kubectl then stops, informers and `causeway search -w` watch again from their
    /// last event. At most a year.
    #[arg(long, default_value_t = causeway_search::api::watch::MIN_TIMEOUT.as_secs(), value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub min_request_timeout: u64,
    #[command(flatten)]
    pub limits: causeway_search::api::Flags,
    #[command(flatten)]
    pub log: causeway_runtime::log::LogArgs,
}

/// What [`start`] needs besides the hub.
#[derive(Clone, Debug)]
pub struct StartOptions {
    /// `postgres://…` or a SQLite file path.
    pub storage: String,
    /// Files of a new SQLite store ([`ServeArgs::sqlite_files`]).
    pub sqlite_files: usize,
    /// The certificate's directory (and the SQLite file's, by default).
    pub data_dir: std::path::PathBuf,
    /// The API's address.
    pub listen: std::net::SocketAddr,
    /// Serving certificate and key files, else a self-signed pair in `data_dir`.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// What to index.
    pub resources: Vec<causeway_search::indexer::ResourceSpec>,
    /// The front proxy's CA (APIService mode), see [`ServeArgs::requestheader_client_ca`].
    pub requestheader_ca: Option<std::path::PathBuf>,
    /// See [`ServeArgs::requestheader_allowed_names`].
    pub requestheader_allowed_names: Vec<String>,
    /// What cross-cluster watches may hold ([`ServeArgs::max_watches`]).
    pub watches: causeway_search::api::watch::Limits,
    /// The most objects one page answers ([`causeway_search::api::Flags::max_page_size`]).
    pub max_page_size: u32,
    /// Connections served at once ([`causeway_search::api::Flags::max_connections`]).
    pub max_connections: usize,
}

/// A running search server.
pub struct Running {
    /// The API's address.
    pub addr: std::net::SocketAddr,
    /// The CA that signed the API's certificate (for kubeconfigs).
    pub ca_pem: String,
    /// Which store: `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Cancel to stop everything.
    pub stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// The kubeconfig server URL of the search API.
    pub fn server_url(&self) -> String {
        format!(
            "https://{}{}",
            self.addr,
            causeway_search::api::route::PREFIX
        )
    }

    /// Stops and waits for every task.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Opens the store, binds the API and starts the fleet follower, the indexer and the
/// API; they run until [`Running::stop`].
pub async fn start(hub: kube::Client, opts: StartOptions) -> anyhow::Result<Running> {
    let store = causeway_search::store::Store::open_with(&opts.storage, opts.sqlite_files)
        .await
        .map_err(|e| anyhow::anyhow!("opening the search store {}: {e}", redact(&opts.storage)))?;
    let server = causeway_search::api::Server::bind(&causeway_search::api::Options {
        listen: opts.listen,
        data_dir: opts.data_dir.clone(),
        tls: opts.tls.clone(),
        requestheader_ca: opts.requestheader_ca.clone(),
        requestheader_allowed_names: opts.requestheader_allowed_names.clone(),
        watches: opts.watches,
    })
    .await?;
    let server = server
        .max_page_size(opts.max_page_size)
        .max_connections(opts.max_connections);
    let stop = CancellationToken::new();
    let mut registry = prometheus_client::registry::Registry::with_prefix("causeway");
    let metrics = causeway_search::indexer::IndexerMetrics::new(&mut registry);
    let (tx, mut rx) = watch::channel(Fleet::default());
    let positions = causeway_search::positions::Positions::default();
    let (addr, ca_pem, backend) = (server.addr, server.ca_pem.clone(), store.backend());
    let follower = {
        let (hub, stop) = (hub.clone(), stop.clone());
        tokio::spawn(async move {
            if let Err(e) = follow_fleet(hub, tx, stop.clone()).await {
                tracing::error!(error = %format!("{e:#}"), "cannot follow the member registry; stopping");
                stop.cancel();
            }
        })
    };
    // the indexer purges every cluster its first fleet does not list: wait for the
    // registry's complete view rather than starting from an empty one
    tokio::select! {
        r = rx.changed() => r.map_err(|_| anyhow::anyhow!("could not read the member registry on the hub"))?,
        _ = stop.cancelled() => anyhow::bail!("could not read the member registry on the hub (see the error above)"),
    }
    let indexer = tokio::spawn(causeway_search::indexer::run(
        store.clone(),
        opts.resources,
        rx,
        metrics,
        positions.clone(),
        stop.child_token(),
    ));
    let api = tokio::spawn(server.serve(store, hub, positions, registry, stop.child_token()));
    Ok(Running {
        addr,
        ca_pem,
        backend,
        stop,
        tasks: vec![follower, indexer, api],
    })
}

/// A storage URL without its password (in the user part or a `password=` parameter),
/// for messages.
fn redact(storage: &str) -> String {
    let mut out = match (storage.find("://"), storage.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &storage[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &storage[..s + 3], &storage[at..]),
                None => storage.to_string(),
            }
        }
        _ => storage.to_string(),
    };
    if let Some(i) = out.find("password=") {
        let start = i + "password=".len();
        let end = out[start..]
            .find(['&', ' '])
            .map_or(out.len(), |e| start + e);
        out.replace_range(start..end, "***");
    }
    out
}

/// `causeway search serve`: runs until SIGINT/SIGTERM.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let resources = if args.resources.is_empty() {
        causeway_search::indexer::default_resources()
    } else {
        causeway_search::indexer::parse_all(&args.resources)
            .map_err(|e| anyhow::anyhow!("--resource: {e}"))?
    };
    let storage = args
        .storage
        .clone()
        .unwrap_or_else(|| args.data_dir.join("search.db").display().to_string());
    let running = start(
        hub,
        StartOptions {
            storage,
            sqlite_files: args.sqlite_files.into(),
            data_dir: args.data_dir.clone(),
            listen: args.listen,
            tls: args.tls_cert.clone().zip(args.tls_key.clone()),
            resources,
            requestheader_ca: args.requestheader_client_ca.clone(),
            requestheader_allowed_names: args.requestheader_allowed_names.clone(),
            watches: causeway_search::api::watch::Limits {
                max: args.max_watches,
                min_timeout: std::time::Duration::from_secs(args.min_request_timeout),
                per_user: args.limits.max_watches_per_user,
                ..Default::default()
            },
            max_page_size: args.limits.max_page_size,
            max_connections: args.limits.max_connections,
        },
    )
    .await?;
    tracing::info!(
        server = %running.server_url(),
        store = running.backend,
        "search serving; a kubeconfig cluster with this server and a hub token lists across every member"
    );
    causeway_runtime::signal::cancel_on_signal(running.stop.clone());
    running.stop.cancelled().await;
    running.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn storage_urls_lose_their_password_in_messages() {
        assert_eq!(
            super::redact("postgres://search:s3cret@db:5432/idx"),
            "postgres://search:***@db:5432/idx"
        );
        assert_eq!(
            super::redact("postgres://search@db/idx"),
            "postgres://search@db/idx"
        );
        assert_eq!(super::redact("/var/lib/search.db"), "/var/lib/search.db");
        assert_eq!(
            super::redact("postgres://db/idx?user=s&password=s3cret&sslmode=disable"),
            "postgres://db/idx?user=s&password=***&sslmode=disable"
        );
    }

    /// `causeway search serve` takes the API's limits as flags, with the API's
    /// defaults when none is given.
    #[test]
    fn serve_takes_the_apis_limits() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cmd {
            #[command(flatten)]
            args: super::ServeArgs,
        }
        let default = Cmd::try_parse_from(["serve"]).unwrap().args.limits;
        assert_eq!(default, causeway_search::api::Flags::default());
        let set = Cmd::try_parse_from([
            "serve",
            "--max-page-size",
            "2",
            "--max-watches-per-user",
            "3",
            "--max-connections",
            "4",
        ])
        .unwrap()
        .args
        .limits;
        assert_eq!(
            (
                set.max_page_size,
                set.max_watches_per_user,
                set.max_connections
            ),
            (2, 3, 4)
        );
        assert!(Cmd::try_parse_from(["serve", "--max-page-size", "0"]).is_err());
    }
}
