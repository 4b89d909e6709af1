//! Starting a server: its state (fresh or from a journal), the TLS listener,
//! HTTP/1.1 + HTTP/2 connections, the in-process controllers, and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::auth::User;
use crate::http::context::{Config, Faults, Inner};
use crate::http::metrics::Metrics;
use crate::http::tls::{ClientCert, Pki};
use crate::state::bootstrap::{bootstrap, restore};
use crate::state::cluster::State;
use crate::state::ipam::Ipam;
use crate::state::meta::new_uid;
use crate::state::registry::{Registry, gr};
use crate::state::sim::nodes::NodeSet;
use crate::state::store::Store;

/// A running server.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
    addr: SocketAddr,
    admin_token: String,
    dns: Option<SocketAddr>,
}

/// Errors starting a server.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source} (is another server using that port?)")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("cannot create the server's certificates: {0}")]
    Pki(String),
    /// Invalid config.
    #[error("invalid kubesim config: {0}")]
    Config(String),
}

impl Server {
    /// Starts a server and its in-process controllers; returns once it accepts connections.
    pub async fn start(cfg: Config) -> Result<Server, StartError> {
        if cfg.service_cidrs.is_empty() || cfg.service_cidrs.len() > 2 {
            return Err(StartError::Config("give one or two service CIDRs".into()));
        }
        if cfg.service_cidrs.len() == 2
            && cfg.service_cidrs[0].family() == cfg.service_cidrs[1].family()
        {
            return Err(StartError::Config(
                "two service CIDRs must be of different IP families".into(),
            ));
        }
        let nodes = NodeSet {
            cluster: &cfg.name,
            count: cfg.nodes,
            capacity: &cfg.node_capacity,
            region: &cfg.region,
            zones: &cfg.zones,
            kubelet_version: &cfg.kubernetes_version,
        };
        nodes.validate().map_err(StartError::Config)?;
        let listener = TcpListener::bind(cfg.bind)
            .await
            .map_err(|source| StartError::Bind {
                addr: cfg.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: cfg.bind,
            source,
        })?;
        let pki = if cfg.tls {
            let sans = vec![
                "127.0.0.1".to_string(),
                "localhost".to_string(),
                addr.ip().to_string(),
                "kubernetes.default.svc".to_string(),
            ];
            Some(Pki::generate(&cfg.name, &sans).map_err(|e| StartError::Pki(e.to_string()))?)
        } else {
            None
        };
        let mut tokens = cfg.tokens.clone();
        let admin_token = match tokens
            .iter()
            .find(|(_, u)| u.groups.iter().any(|g| g == "system:masters"))
        {
            Some((t, _)) => t.clone(),
            None => {
                let t = format!("kubesim-{}", new_uid().replace('-', ""));
                tokens.push((t.clone(), User::admin("kubesim-admin")));
                t
            }
        };
        let mut state = State {
            store: Store::new(cfg.history_limit),
            registry: Registry::builtin(),
            ipam: Ipam::new(cfg.service_cidrs.clone()),
            root_ca: pki.as_ref().map(|p| p.ca_pem.clone()),
        };
        match &cfg.data_dir {
            Some(dir) => {
                let (journal, restored, max_rv) = crate::state::persist::Journal::open(dir)
                    .map_err(|e| {
                        StartError::Config(format!("cannot use --data-dir {}: {e}", dir.display()))
                    })?;
                let fresh = restored.is_empty();
                restore(&mut state, restored, max_rv);
                if fresh {
                    state.store.set_journal(journal);
                    bootstrap(&mut state, &cfg.name, &cfg.service_cidrs, &nodes);
                } else {
                    state.store.set_journal(journal);
                }
            }
            None => bootstrap(&mut state, &cfg.name, &cfg.service_cidrs, &nodes),
        }
        // bound before anything is spawned: a failure leaves nothing running
        let dns_socket = match cfg.service_proxy {
            true => Some(
                tokio::net::UdpSocket::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|e| StartError::Config(format!("binding the cluster DNS: {e}")))?,
            ),
            false => None,
        };
        let inner = Arc::new(Inner {
            cfg,
            state: Mutex::new(state),
            faults: Faults::default(),
            tokens: parking_lot::RwLock::new(tokens),
            pki,
            shutdown: CancellationToken::new(),
            changed: tokio::sync::Notify::new(),
            metrics: Metrics::default(),
            sa_key: crate::http::tokens::new_key(),
        });
        tokio::spawn(accept_loop(inner.clone(), listener));
        tokio::spawn(controllers(inner.clone()));
        let mut dns = None;
        if let Some(socket) = dns_socket {
            dns = socket.local_addr().ok();
            tokio::spawn(crate::http::service_proxy::run(
                inner.clone(),
                inner.shutdown.clone(),
            ));
            tokio::spawn(crate::http::cluster_dns::run(
                inner.clone(),
                socket,
                inner.shutdown.clone(),
            ));
        }
        tracing::info!(name = %inner.cfg.name, %addr, tls = inner.cfg.tls, "kubesim serving");
        Ok(Server {
            inner,
            addr,
            admin_token,
            dns,
        })
    }

    /// Listen address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cluster DNS (UDP, `cluster.local`), with the service proxy on
    /// ([`crate::http::cluster_dns`]).
    pub fn dns_addr(&self) -> Option<SocketAddr> {
        self.dns
    }

    /// Base URL (`https://127.0.0.1:port`).
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.inner.cfg.tls { "https" } else { "http" },
            self.addr
        )
    }

    /// Cluster name.
    pub fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    /// A bearer token of a `system:masters` user.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA certificate (PEM) clients must trust; None for plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.inner.pki.as_deref().map(|p| p.ca_pem.as_str())
    }

    /// Issues a client certificate for a user.
    pub fn issue_client_cert(&self, user: &User) -> Result<ClientCert, StartError> {
        let pki = self
            .inner
            .pki
            .as_ref()
            .ok_or_else(|| StartError::Config("client certificates need TLS".into()))?;
        pki.issue_client(user)
            .map_err(|e| StartError::Pki(e.to_string()))
    }

    /// Accepts another bearer token from now on (e.g. to test credential rotation).
    pub fn add_token(&self, token: &str, user: User) {
        self.inner.tokens.write().push((token.to_string(), user));
    }

    /// Stops accepting a bearer token: requests with it get 401 from now on.
    pub fn revoke_token(&self, token: &str) {
        self.inner.tokens.write().retain(|(t, _)| t != token);
    }

    /// The uid of `kube-system` (stable per cluster name; used as cluster id).
    pub fn kube_system_uid(&self) -> String {
        let st = self.inner.state.lock();
        st.store
            .get(&gr("", "namespaces"), "", "kube-system")
            .and_then(|o| {
                o.value
                    .pointer("/metadata/uid")
                    .and_then(|v| v.as_str())
                    .map(String::from)
            })
            .unwrap_or_default()
    }

    /// Fault knobs.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Marks node `name` Ready or NotReady, as its kubelet would report (reason
    /// `KubeletReady`/`KubeletNotReady`; lastTransitionTime when it changes). With
    /// `simulate_workloads`, Pods on a NotReady node lose their Ready condition and no new
    /// Pod is placed there. Errors with 404 NotFound when there is no such node.
    pub fn set_node_ready(&self, name: &str, ready: bool) -> Result<(), crate::error::ApiError> {
        crate::state::sim::nodes::set_ready(&mut self.inner.state.lock(), name, ready)?;
        self.inner.changed.notify_one();
        Ok(())
    }

    /// A kubeconfig (YAML) for this server with the admin token.
    pub fn kubeconfig(&self) -> String {
        crate::kubeconfig::single(self.name(), &self.url(), self.ca_pem(), &self.admin_token)
    }

    /// A kube-rs client configuration for the server, as its admin ([`Server::kubeconfig`]).
    pub async fn client_config(&self) -> kube::Config {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig())
            .expect("kubesim writes a valid kubeconfig");
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kubesim's kubeconfig gives a client configuration")
    }

    /// A kube-rs client of the server, as its admin.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.client_config().await).expect("a client for kubesim")
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.state.lock().store.rv()
    }

    /// How many write requests (create, update, patch, delete, deletecollection) this
    /// server has received that were not `dryRun=All`, successful or not; the same count
    /// as `kubesim_write_requests_total` on `/metrics`. Tests assert "no writes" with it:
    /// read it, act, read it again. Not counted: requests refused before routing
    /// (unauthenticated, unknown paths) and DELETEs refused before their body is read
    /// (RBAC), since only the body says whether a DELETE is a dry run.
    pub fn write_requests(&self) -> u64 {
        self.inner.metrics.writes.get()
    }

    /// Stops accepting, ends watches and background work.
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// Resolves when the server has been shut down.
    pub async fn stopped(&self) {
        self.inner.shutdown.cancelled().await
    }
}

/// Runs the in-process controllers ([`crate::state::controllers`]) until shutdown; wakes on every write and at least once a second.
async fn controllers(inner: Arc<Inner>) {
    loop {
        tokio::select! {
            _ = inner.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = inner.shutdown.cancelled() => return,
        }
        // settle bursts of writes into one pass
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut passes = 0;
        loop {
            let changed = crate::state::controllers::pass(
                &mut inner.state.lock(),
                inner.cfg.simulate_workloads,
            );
            passes += 1;
            if !changed || passes > 20 {
                break;
            }
        }
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    let tls = match &inner.pki {
        Some(pki) => match pki.server_config() {
            Ok(c) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(c))),
            Err(e) => {
                tracing::error!(error = %e, "kubesim TLS config failed; not serving");
                return;
            }
        },
        None => None,
    };
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let Some((tcp, peer)) =
            causeway_runtime::net::accept(&listener, &inner.shutdown, "kubesim").await
        else {
            break;
        };
        if inner.faults.dropping() {
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        let inner2 = inner.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            match tls {
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        };
                    let cert_user = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| inner2.pki.as_ref().and_then(|p| p.user_for_cert(c)));
                    let svc = service_fn(move |req| {
                        crate::http::api::handle(inner2.clone(), req, cert_user.clone())
                    });
                    let conn = builder.serve_connection(TokioIo::new(stream), svc);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
                None => {
                    let svc =
                        service_fn(move |req| crate::http::api::handle(inner2.clone(), req, None));
                    let conn = builder.serve_connection(TokioIo::new(tcp), svc);
                    let _ = watcher.watch(conn.into_owned()).await;
                }
            }
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}
