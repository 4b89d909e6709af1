//! The kubectl-compatible search API (federation.md §4.4, §8 K.65–73): one HTTPS
//! listener serving a whole Kubernetes API under [`route::PREFIX`] (discovery from the
//! indexed types, lists and gets across every member or one, `Table` output with a
//! Cluster column, watches across members from a cursor: [`watch`]), every request authenticated and filtered by the caller's hub RBAC
//! ([`auth`]); without auth, `/healthz` and `/readyz` (whether the store answers, no
//! more); and `/metrics`, for callers the hub lets `get` the non-resource URL `/metrics`.
//!
//! A kubeconfig reaches it with `server: https://HOST:PORT/apis/search.causeway.io/v1alpha1/resources`
//! and a hub token: `kubectl get deployments -A -l app=web`.

pub mod auth;
pub mod discovery;
pub mod front_proxy;
pub mod list;
pub mod route;
pub mod status;
pub mod tls;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_runtime::admin::{Endpoints, answer};
use causeway_runtime::table::IncludeObject;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::auth::{Auth, Denied};
use crate::api::route::Route;
use crate::api::status::{Reply, failure, json_ok};
use crate::positions::Positions;
use crate::store::Store;

/// Where and how to serve.
#[derive(Clone, Debug)]
pub struct Options {
    /// The listen address.
    pub listen: SocketAddr,
    /// Where a generated certificate is kept.
    pub data_dir: PathBuf,
    /// The serving certificate and key files, else a generated one.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The front proxy's CA (a real hub's requestheader CA, behind an APIService): a
    /// client certificate it signed makes X-Remote-User/X-Remote-Group trusted.
    pub requestheader_ca: Option<PathBuf>,
    /// The common names a front proxy's certificate may have (kube-apiserver's
    /// `--requestheader-allowed-names`); empty: any the CA signed.
    pub requestheader_allowed_names: Vec<String>,
    /// What cross-cluster watches may hold (how many, how long a client may stop
    /// reading).
    pub watches: watch::Limits,
}

/// A bound, not yet serving, search API.
pub struct Server {
    listener: TcpListener,
    tls: rustls::ServerConfig,
    /// The bound address.
    pub addr: SocketAddr,
    /// The CA clients trust to reach it (kubeconfig certificate-authority-data).
    pub ca_pem: String,
    watches: watch::Limits,
    front_proxy_names: Vec<String>,
    max_page: u32,
    connections: causeway_runtime::https::Limits,
}

/// The most objects a list page holds by default ([`Server::max_page_size`]).
pub const MAX_PAGE: u32 = 5000;

/// The search API's own settings, as flags a command flattens into its own (e.g.
/// `#[command(flatten)] api: causeway_search::api::Flags`; `causeway search serve`
/// passes them to [`Server`]'s builder methods).
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct Flags {
    /// The most objects one page answers: a list whose `limit` is larger gets this many
    /// and a continue token for the rest, as kube-apiserver answers when it pages
    /// (kubectl and informers follow it; kubectl asks for 500 at a time anyway). A list
    /// without a `limit` gets everything, as from kube-apiserver.
    #[arg(long, default_value_t = MAX_PAGE, value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..))]
    pub max_page_size: u32,
    /// Cross-cluster watches one user may hold open at once; more are refused with
    /// 429. Watches that show the user nothing count too.
    #[arg(long, default_value_t = watch::MAX_WATCHES_PER_USER, value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_watches_per_user: usize,
    /// Connections the search API serves at once: at this many, the connections with no
    /// request open are closed to make room, and past it new ones wait to be accepted
    /// (in the kernel's listen queue) until one ends. A connection must send its request
    /// head within 30 s, and one with no request open is closed after 90 s idle.
    #[arg(long, default_value_t = causeway_runtime::https::MAX_CONNECTIONS, value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
}

impl Default for Flags {
    fn default() -> Flags {
        Flags {
            max_page_size: MAX_PAGE,
            max_watches_per_user: watch::MAX_WATCHES_PER_USER,
            max_connections: causeway_runtime::https::MAX_CONNECTIONS,
        }
    }
}

/// The API's metrics.
pub struct Metrics {
    registry: prometheus_client::registry::Registry,
    requests: Family<Vec<(&'static str, String)>, Counter>,
    query: Histogram,
    watches: Gauge,
    stalled: Counter,
}

impl Metrics {
    /// The API's metrics, registered into `registry` (which also holds the indexer's,
    /// so one /metrics shows both) under `search_api_` (`causeway_search_api_` with the
    /// server's `causeway` prefix).
    fn new(mut registry: prometheus_client::registry::Registry) -> Metrics {
        let requests = Family::default();
        let query = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let sub = registry.sub_registry_with_prefix("search_api");
        sub.register(
            "requests",
            "Search API requests answered, by HTTP status code",
            requests.clone(),
        );
        sub.register(
            "query_seconds",
            "Time the store took to answer a search",
            query.clone(),
        );
        let watches = Gauge::default();
        sub.register(
            "watches",
            "Cross-cluster watches open (each holds one watch per member it shows)",
            watches.clone(),
        );
        let stalled = Counter::default();
        sub.register(
            "watches_stalled",
            "Cross-cluster watches ended because their client stopped reading",
            stalled.clone(),
        );
        Metrics {
            registry,
            requests,
            query,
            watches,
            stalled,
        }
    }

    fn count(&self, code: StatusCode) {
        self.requests
            .get_or_create(&vec![("code", code.as_u16().to_string())])
            .inc();
    }

    fn observe_query(&self, d: Duration) {
        self.query.observe(d.as_secs_f64());
    }

    fn render(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}

/// What every request handler shares.
pub struct Shared {
    store: Store,
    auth: Auth,
    metrics: Metrics,
    /// Where the store is in each member's types, and how to watch them (K.73).
    positions: Positions,
    /// [`Options::watches`].
    watches: watch::Limits,
    /// The watches each user has open ([`watch::Limits::per_user`]).
    per_user: Arc<watch::PerUser>,
    /// The most objects a list page holds ([`Server::max_page_size`]).
    max_page: u32,
    /// [`Options::requestheader_allowed_names`].
    front_proxy_names: Vec<String>,
    /// Cancelled when the server stops: open watches end (a stop lets requests in
    /// progress finish, and a watch would otherwise last its whole timeout).
    stopping: CancellationToken,
}

impl Server {
    /// Loads (or generates) the certificate and binds the listener.
    pub async fn bind(opts: &Options) -> anyhow::Result<Server> {
        let extra_sans: Vec<String> = [opts.listen.ip()]
            .into_iter()
            .filter(|ip| !ip.is_unspecified())
            .map(|ip| ip.to_string())
            .collect();
        let files = opts.tls.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        let pem = tls::load(files, &opts.data_dir, &extra_sans)?;
        let flags = ("--tls-cert", "--tls-key");
        let tls = match files {
            // the operator's files, read again when they change: a certificate renewed
            // in place is served without a restart
            Some((cert, key)) => {
                causeway_runtime::https::reloading_server_config(cert, key, flags)?
            }
            None => causeway_runtime::https::server_config(
                pem.cert.as_bytes(),
                pem.key.as_bytes(),
                flags.0,
                flags.1,
            )?,
        };
        let tls = match &opts.requestheader_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    anyhow::anyhow!("reading --requestheader-client-ca {}: {e}", path.display())
                })?;
                causeway_runtime::https::verify_clients(tls, &pem, "--requestheader-client-ca")?
            }
            None => tls,
        };
        let listener = causeway_runtime::admin::bind(opts.listen, "--listen").await?;
        Ok(Server {
            addr: listener.local_addr()?,
            listener,
            tls,
            ca_pem: pem.ca,
            watches: opts.watches,
            front_proxy_names: opts.requestheader_allowed_names.clone(),
            max_page: MAX_PAGE,
            connections: causeway_runtime::https::Limits::default(),
        })
    }

    /// At most `n` objects per list page ([`MAX_PAGE`] by default): a list whose `limit`
    /// is larger is answered `n` objects and a continue token for the rest, as
    /// kube-apiserver answers when it pages. A list without a `limit` (or with
    /// `limit=0`) is not capped: it gets everything, as from kube-apiserver (`kubectl get
    /// --raw` and informers that do not page follow no token).
    pub fn max_page_size(mut self, n: u32) -> Server {
        self.max_page = n.max(1);
        self
    }

    /// At most `n` cross-cluster watches open per user
    /// ([`watch::MAX_WATCHES_PER_USER`] by default; also [`watch::Limits::per_user`]).
    pub fn max_watches_per_user(mut self, n: usize) -> Server {
        self.watches.per_user = n.max(1);
        self
    }

    /// At most `n` connections served at once
    /// ([`causeway_runtime::https::MAX_CONNECTIONS`] by default).
    pub fn max_connections(mut self, n: usize) -> Server {
        self.connections.max_connections = n.max(1);
        self
    }

    /// The connection limits (timeouts, how many at once).
    pub fn connection_limits(mut self, limits: causeway_runtime::https::Limits) -> Server {
        self.connections = limits;
        self
    }

    /// Serves until `stop`: the store's objects, reviewed by `hub`; watches go to the
    /// members `positions` shows (the indexer's); /metrics shows `registry` (the
    /// caller's metrics, e.g. the indexer's) with the API's own.
    pub async fn serve(
        self,
        store: Store,
        hub: kube::Client,
        positions: Positions,
        registry: prometheus_client::registry::Registry,
        stop: CancellationToken,
    ) {
        tracing::info!(addr = %self.addr, prefix = route::PREFIX, "serving the search API");
        let shared = Arc::new(Shared {
            store,
            auth: Auth::new(hub),
            metrics: Metrics::new(registry),
            positions,
            watches: self.watches,
            per_user: Arc::default(),
            max_page: self.max_page,
            front_proxy_names: self.front_proxy_names,
            stopping: stop.clone(),
        });
        let (listener, tls, limits) = (self.listener, self.tls, self.connections);
        causeway_runtime::https::serve_with(listener, tls, "search", limits, stop, move |req, _| {
            let shared = shared.clone();
            async move {
                let started = Instant::now();
                let (method, path) = (req.method().clone(), req.uri().path().to_string());
                let r = handle(&shared, req).await;
                shared.metrics.count(r.status());
                tracing::debug!(%method, path, code = r.status().as_u16(), ms = started.elapsed().as_millis() as u64, "search request");
                r
            }
        })
        .await
    }
}

/// An admin endpoint's answer (runtime's [`answer`]) from `metrics` and readiness.
fn admin(path: &str, metrics: String, ready: Result<(), String>) -> Reply {
    answer(
        path,
        &Endpoints {
            metrics: Arc::new(move || metrics.clone()),
            ready: Arc::new(move || ready.clone()),
        },
    )
    .map(|b| b.map_err(|never| match never {}).boxed())
}

async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path();
    // probes need no token, and say no more than whether the store answers (its errors
    // name hosts and databases: they go to the log)
    if matches!(path, "/healthz" | "/livez" | "/readyz") {
        let ready = match path {
            "/readyz" => shared.store.ping().await.map_err(|e| {
                tracing::warn!(error = %e, "/readyz: the search store is not answering");
                "the search store is not answering (the search server's log says why)".to_string()
            }),
            _ => Ok(()),
        };
        return admin(path, String::new(), ready);
    }
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let proxied = req
        .extensions()
        .get::<causeway_runtime::https::VerifiedClientCertificate>()
        .and_then(|cert| Some((cert, front_proxy::user(req.headers())?)));
    let authenticated = match proxied {
        Some((cert, user)) => match front_proxy::allowed(cert, &shared.front_proxy_names) {
            Ok(()) => Ok(shared.auth.front_proxy_caller(user)),
            // not the front proxy: its headers name no one, a token still may
            Err(why) if authorization.is_none() => Err(Denied::Unauthenticated(why)),
            Err(_) => shared.auth.authenticate(authorization).await,
        },
        None => shared.auth.authenticate(authorization).await,
    };
    let caller = match authenticated {
        Ok(c) => shared.auth.impersonate(c, req.headers()).await,
        Err(e) => Err(e),
    };
    let caller = match caller {
        Ok(c) => c,
        Err(e) => return e.reply(),
    };
    // /metrics names the members and what each holds: only for callers the hub lets
    // `get` it, as kube-apiserver's own /metrics (a Prometheus ServiceAccount bound to a
    // role with nonResourceURLs ["/metrics"], verbs ["get"]: deploy/search/rbac.yaml)
    if path == "/metrics" {
        return match shared.auth.allowed_path(&caller, "get", path).await {
            Ok(true) => admin(path, shared.metrics.render(), Ok(())),
            Ok(false) => failure(
                StatusCode::FORBIDDEN,
                format!(
                    "forbidden: User \"{}\" cannot get path \"/metrics\"",
                    caller.user.username.as_deref().unwrap_or_default()
                ),
            ),
            Err(e) => e.reply(),
        };
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return failure(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "the search API is read-only: {} is not supported (get and list only)",
                req.method()
            ),
        );
    }
    let route = route::route(path);
    let types = || async {
        shared
            .store
            .types()
            .await
            .map_err(|e| status::store_unavailable(&e))
    };
    let not_found = || {
        failure(
            StatusCode::NOT_FOUND,
            "the server could not find the requested resource",
        )
    };
    let found = |v: Option<serde_json::Value>| v.map_or_else(not_found, |v| json_ok(&v));
    match route {
        Route::SearchGroup => json_ok(&discovery::search_group()),
        Route::CoreVersions => match types().await {
            Ok(t) => json_ok(&discovery::core_versions(&t)),
            Err(r) => r,
        },
        Route::Groups => match types().await {
            Ok(t) => json_ok(&discovery::groups(&t)),
            Err(r) => r,
        },
        Route::Group(g) => match types().await {
            Ok(t) => found(discovery::group(&t, &g)),
            Err(r) => r,
        },
        Route::Resources { group, version } => match types().await {
            Ok(t) => found(discovery::resources(&t, &group, &version)),
            Err(r) => r,
        },
        Route::Objects(target) => {
            let params: Vec<(String, String)> = req
                .uri()
                .query()
                .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default();
            let table = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("as=Table"));
            // what a Table's rows carry (`kubectl get --sort-by` asks for the objects)
            let table = match table.then(|| {
                let include = params.iter().find(|(k, _)| k == "includeObject");
                IncludeObject::parse(include.map(|(_, v)| v.as_str()))
            }) {
                None => None,
                Some(Ok(include)) => Some(include),
                Some(Err(e)) => return failure(StatusCode::BAD_REQUEST, e),
            };
            list::objects(shared, &caller, &target, params, table).await
        }
        Route::NotFound => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        api: Flags,
    }

    /// The API's flags, as a command flattening them shows and parses them.
    #[test]
    fn the_api_flags_have_defaults_limits_and_help() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.api, Flags::default());
        assert_eq!(cli.api.max_page_size, 5000);
        let cli = Cli::try_parse_from([
            "x",
            "--max-page-size=100",
            "--max-watches-per-user=3",
            "--max-connections=10",
        ])
        .unwrap();
        assert_eq!(
            (
                cli.api.max_page_size,
                cli.api.max_watches_per_user,
                cli.api.max_connections
            ),
            (100, 3, 10)
        );
        for zero in [
            "--max-page-size=0",
            "--max-watches-per-user=0",
            "--max-connections=0",
        ] {
            assert!(Cli::try_parse_from(["x", zero]).is_err(), "{zero}");
        }
        let help = Cli::command().render_long_help().to_string();
        for flag in [
            "--max-page-size <N>",
            "--max-watches-per-user <N>",
            "--max-connections <N>",
        ] {
            assert!(help.contains(flag), "{help}");
        }
        assert!(help.contains("a continue token for the rest"), "{help}");
    }
}
