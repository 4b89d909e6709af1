//! The kubectl-compatible search API (federation.md §4.4, §8 K.65–73): one HTTPS
//! listener serving a whole Kubernetes API under [`route::PREFIX`] (discovery from the
//! indexed types, lists and gets across every member or one, `Table` output with a
//! Cluster column, watches across members from a cursor: [`watch`]), every request authenticated and filtered by the caller's hub RBAC
//! ([`auth`]); and, without auth, `/healthz`, `/readyz` (the store answers) and
//! `/metrics`.
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
    /// [`Options::requestheader_allowed_names`].
    front_proxy_names: Vec<String>,
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
        let tls = causeway_runtime::https::server_config(
            pem.cert.as_bytes(),
            pem.key.as_bytes(),
            "--tls-cert",
            "--tls-key",
        )?;
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
        })
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
            front_proxy_names: self.front_proxy_names,
        });
        causeway_runtime::https::serve(self.listener, self.tls, "search", stop, move |req, _| {
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

async fn handle(shared: &Arc<Shared>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path();
    if matches!(path, "/healthz" | "/livez" | "/metrics" | "/readyz") {
        let ready = match path {
            "/readyz" => shared.store.ping().await.map_err(|e| e.to_string()),
            _ => Ok(()),
        };
        let metrics = shared.metrics.render();
        return answer(
            path,
            &Endpoints {
                metrics: Arc::new(move || metrics.clone()),
                ready: Arc::new(move || ready.clone()),
            },
        )
        .map(|b| b.map_err(|never| match never {}).boxed());
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
            .map_err(|e| failure(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
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
        Route::CoreVersions => json_ok(&discovery::core_versions()),
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
