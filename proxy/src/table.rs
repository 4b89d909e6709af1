//! The route table: a pure function from a snapshot of hub objects to an immutable
//! [`RouteTable`] (MCI-3 class selection, MCI-2 validation, MCI-4 backend resolution,
//! MCI-5 matching, MCI-7 readiness, MCI-8/EPS-7 traffic blocks, the same for every
//! front end: [`Blocks`]), HTTPRoutes on Gateways and mesh routes by mesh port
//! ([`RouteTable::mesh`], GW-4). Stateful balancer parts
//! (endpoint EWMA, ejections, circuits, upstream pools) come from [`Registries`] and are
//! attached by `Arc`, so they survive rebuilds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use causeway_crds::exported_service::ExportedService;
use causeway_crds::gateway::{Gateway, GatewayClass, HTTPRoute, ReferenceGrant};
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mcs::conditions::service_import::{ENDPOINTS_STALE, reason as stale_reason};
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::labels::{SERVICE_NAME, SOURCE_CLUSTER};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IngressBackend, IngressClass, IngressServiceBackend};
use kube::ResourceExt;

use crate::annotations::{self, Defaults, Tuning};
use crate::balance::{Balancer, Group};
use crate::circuit::Circuit;
use crate::matching::{PathKind, Router};
use crate::metrics::{BackendMetrics, Metrics};

/// The hub objects a table is built from.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// MultiClusterIngresses (all namespaces).
    pub mcis: Vec<Arc<MultiClusterIngress>>,
    /// IngressClasses.
    pub ingress_classes: Vec<IngressClass>,
    /// ServiceImports (aggregator output).
    pub service_imports: Vec<Arc<ServiceImport>>,
    /// ExportedServices `<svc>.<cluster>`.
    pub exported_services: Vec<Arc<ExportedService>>,
    /// Hub EndpointSlices with the MCS service-name and source-cluster labels.
    pub endpoint_slices: Vec<Arc<EndpointSlice>>,
    /// Gateway API GatewayClasses.
    pub gateway_classes: Vec<Arc<GatewayClass>>,
    /// Gateways (all namespaces).
    pub gateways: Vec<Arc<Gateway>>,
    /// HTTPRoutes (all namespaces).
    pub http_routes: Vec<Arc<HTTPRoute>>,
    /// ReferenceGrants (all namespaces).
    pub reference_grants: Vec<Arc<ReferenceGrant>>,
    /// Namespace labels (listeners that select route namespaces).
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

/// Build settings.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// The proxy's own cluster: priority 0; the other clusters are priority 1.
    pub local_cluster: Option<String>,
    /// Timeouts, retries and limits that annotations override.
    pub defaults: Defaults,
}

/// `(MCI, backend)` names.
type MciBackend = (Arc<str>, Arc<str>);

/// Endpoint and circuit state, and metric handles, kept across table generations.
pub struct Registries {
    /// Endpoint state by cluster and address.
    pub endpoints: crate::endpoint::Registry,
    /// Circuits by backend.
    pub circuits: crate::circuit::Registry,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Metric handles by (owner id, backend), reused while the clusters stay the same
    /// ([`Backend::mci`]).
    backend_metrics: parking_lot::Mutex<HashMap<MciBackend, BackendMetrics>>,
}

impl Registries {
    /// Fresh shared state.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Registries {
            endpoints: Default::default(),
            circuits: Default::default(),
            metrics,
            backend_metrics: Default::default(),
        }
    }

    fn backend_metrics(
        &self,
        mci: &Arc<str>,
        backend: &Arc<str>,
        clusters: &[Arc<str>],
    ) -> BackendMetrics {
        let mut m = self.backend_metrics.lock();
        let key = (mci.clone(), backend.clone());
        if let Some(b) = m.get(&key) {
            if b.clusters.len() == clusters.len()
                && b.clusters.iter().zip(clusters).all(|((a, _), b)| a == b)
            {
                return b.clone();
            }
            // Clusters that no longer serve this backend leave /metrics.
            let gone: Vec<Arc<str>> = b
                .clusters
                .iter()
                .map(|(c, _)| c.clone())
                .filter(|c| !clusters.contains(c))
                .collect();
            self.metrics.forget(mci, backend, &gone, false);
        }
        let b = self.metrics.backend(mci, backend, clusters);
        m.insert(key, b.clone());
        b
    }

    /// Forgets the metric series of backends that are not in `kept` (the new table's).
    fn sweep_metrics(&self, kept: &[Arc<Backend>]) {
        let kept: std::collections::HashSet<(&str, &str)> =
            kept.iter().map(|b| (&*b.mci, &*b.name)).collect();
        self.backend_metrics.lock().retain(|(mci, name), b| {
            let keep = kept.contains(&(&**mci, &**name));
            if !keep {
                let clusters: Vec<Arc<str>> = b.clusters.iter().map(|(c, _)| c.clone()).collect();
                self.metrics.forget(mci, name, &clusters, true);
            }
            keep
        });
    }
}

/// A resolved backend: `service:port` of one MCI, HTTPRoute or mesh pass-through.
pub struct Backend {
    /// Whose backend it is, and its `mci` metric label: `ns/name` of an MCI,
    /// `httproute:ns/name` of an HTTPRoute, `serviceimport:ns/name` of a mesh port's
    /// pass-through (so an MCI and an HTTPRoute of the same name never share series).
    pub mci: Arc<str>,
    /// `service:port`.
    pub name: Arc<str>,
    /// Endpoint choice.
    pub balancer: Balancer,
    /// The MCI's tuning.
    pub tuning: Arc<Tuning>,
    /// Concurrent-request cap, shared across tables.
    pub circuit: Arc<Circuit>,
    /// Metric handles.
    pub metrics: BackendMetrics,
    /// How the endpoints are spoken to (the MCI's choice, else the port's appProtocol).
    pub protocol: crate::upstream::Protocol,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("mci", &self.mci)
            .field("name", &self.name)
            .field("endpoints", &self.balancer.endpoints().len())
            .finish()
    }
}

/// Where a route sends requests.
#[derive(Debug, Clone)]
pub enum Target {
    /// A backend (which may have no ready endpoints: 503).
    Backend(Arc<Backend>),
    /// The backend could not be resolved (503 with this reason).
    Unavailable(Arc<str>),
    /// HTTPRoute rules of this host, decided per request ([`crate::gateway`]).
    Gateway(Arc<crate::gateway::HostRules>),
}

/// One matched route.
#[derive(Debug, Clone)]
pub struct Route {
    /// `ns/name` of the MCI.
    pub mci: Arc<str>,
    /// The target.
    pub target: Target,
    /// Plain-HTTP requests get a 308 to https.
    pub ssl_redirect: bool,
}

/// A `tls[]` entry: the Secret for an SNI host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsEntry {
    /// Host (exact or `*.foo.com`), lowercase.
    pub host: String,
    /// Namespace of the Secret (the MCI's).
    pub namespace: String,
    /// Secret name.
    pub secret: String,
    /// From a `tls[]` entry without hosts: `host` is one of the MCI's rule hosts, served
    /// with this Secret only if its certificate covers it (ingress-nginx's
    /// `extractTLSSecretName`), and only if no `tls[].hosts` names it.
    pub if_covered: bool,
}

/// Why an MCI is not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// `ns/name`.
    pub mci: String,
    /// Reason.
    pub reason: String,
}

/// The immutable route table.
#[derive(Debug, Default)]
pub struct RouteTable {
    router: Router<Arc<Route>>,
    /// Every backend (health checks, metrics).
    pub backends: Vec<Arc<Backend>>,
    /// SNI entries, oldest MCI first (`tls::Certs::build` gives the entries with
    /// hosts precedence over those without).
    pub tls: Vec<TlsEntry>,
    /// `ns/name` of the MCIs served.
    pub served: Vec<String>,
    /// `ns/name` of the HTTPRoutes served.
    pub http_routes: Vec<String>,
    /// MCIs not served, with the reason.
    pub ignored: Vec<Ignored>,
    /// Warnings (bad annotations, conflicting defaults).
    pub warnings: Vec<String>,
    /// Endpoints attached.
    pub endpoints: usize,
    /// Build time.
    pub build_time: std::time::Duration,
    /// GW-4: the route of each mesh port (a ServiceImport port mesh routes capture; a
    /// pass-through to that port's endpoints while no accepted route captures it).
    pub mesh: BTreeMap<u16, Arc<Route>>,
}

impl RouteTable {
    /// The route for a request (host lowercase without port; path without query).
    pub fn route(&self, host: &str, path: &str) -> Option<&Arc<Route>> {
        self.router.route(host, path)
    }

    /// The route of the traffic that arrived on mesh port `port`.
    pub fn mesh_route(&self, port: u16) -> Option<&Arc<Route>> {
        self.mesh.get(&port)
    }

    /// Path rules.
    pub fn routes(&self) -> usize {
        self.router.len()
    }
}

struct Index<'a> {
    imports: HashMap<(&'a str, &'a str), &'a ServiceImport>,
    exports: HashMap<(&'a str, &'a str), Vec<&'a ExportedService>>,
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// MCI-8 / EPS-7: the clusters no front end sends new requests to.
    blocks: Blocks<'a>,
}

/// MCI-8 and EPS-7, one input for every front end (MCIs, HTTPRoutes, mesh routes):
/// the clusters that get no new requests. The controller's verdict on a cluster
/// (`blocks_traffic`: a `TrafficControl` remedy, or not Ready past
/// `--stale-endpoints-ttl`) is the same whichever object a backend belongs to; the
/// proxy reads it where the controller publishes it, as Cluster objects are not in its
/// view (nor its TTL):
/// - every MultiClusterIngress of Causeway's class lists, in
///   `status.trafficBlockClusters`, the clusters serving its backends that it blocks;
///   any cluster listed there is blocked for every backend;
/// - a hub ServiceImport whose `EndpointsStale` condition says `EndpointsWithdrawn`
///   leaves the withdrawn clusters out of `status.clusters`: its exporters missing
///   there get none of that service's requests (the aggregator's TTL, not a copy).
#[derive(Default)]
struct Blocks<'a> {
    /// From the MCIs' `trafficBlockClusters`.
    clusters: BTreeSet<&'a str>,
    /// By service (namespace, name): the exporting clusters its ServiceImport withdrew.
    withdrawn: HashMap<(&'a str, &'a str), BTreeSet<&'a str>>,
}

impl<'a> Index<'a> {
    fn new(s: &'a Snapshot) -> Self {
        let ns = |m: &'a kube::api::ObjectMeta| m.namespace.as_deref().unwrap_or("");
        let mut imports = HashMap::new();
        for si in &s.service_imports {
            if let Some(n) = si.metadata.name.as_deref() {
                imports.insert((ns(&si.metadata), n), si.as_ref());
            }
        }
        let mut exports: HashMap<_, Vec<_>> = HashMap::new();
        for es in &s.exported_services {
            exports
                .entry((ns(&es.metadata), es.spec.service.as_str()))
                .or_default()
                .push(es.as_ref());
        }
        let mut slices: HashMap<_, Vec<_>> = HashMap::new();
        for sl in &s.endpoint_slices {
            let labels = sl.metadata.labels.as_ref();
            if let Some(svc) = labels.and_then(|l| l.get(SERVICE_NAME)) {
                slices
                    .entry((ns(&sl.metadata), svc.as_str()))
                    .or_default()
                    .push(sl.as_ref());
            }
        }
        let mut blocks = Blocks::default();
        for m in &s.mcis {
            if !causeway_crds::mci::class::select(m, &s.ingress_classes).is_ours() {
                // (another controller's status, if any)
                continue;
            }
            let listed = m.status.iter().flat_map(|st| &st.traffic_block_clusters);
            blocks.clusters.extend(listed.map(String::as_str));
        }
        for si in &s.service_imports {
            let Some(st) = si.status.as_ref() else {
                continue;
            };
            let withdrawing = st.conditions.iter().any(|c| {
                c.type_ == ENDPOINTS_STALE
                    && c.status == "True"
                    && c.reason == stale_reason::ENDPOINTS_WITHDRAWN
            });
            if !withdrawing {
                continue;
            }
            let key = (ns(&si.metadata), si.metadata.name.as_deref().unwrap_or(""));
            let listed: BTreeSet<&str> = st.clusters.iter().map(|c| c.cluster.as_str()).collect();
            let gone: BTreeSet<&str> = exports
                .get(&key)
                .into_iter()
                .flatten()
                .map(|es| es.spec.cluster.as_str())
                .filter(|c| !listed.contains(c))
                .collect();
            if !gone.is_empty() {
                blocks.withdrawn.insert(key, gone);
            }
        }
        Index {
            imports,
            exports,
            slices,
            blocks,
        }
    }

    /// The clusters that get none of service `ns/name`'s new requests ([`Blocks`]).
    fn blocked(&self, ns: &str, name: &str) -> Vec<String> {
        let b = &self.blocks;
        let withdrawn = b.withdrawn.get(&(ns, name)).into_iter().flatten();
        let all: BTreeSet<&str> = b.clusters.iter().chain(withdrawn).copied().collect();
        all.into_iter().map(String::from).collect()
    }
}

mod gateway;
mod resolve;
use resolve::{backend_key, resolve};

struct MciBuilder<'a> {
    idx: &'a Index<'a>,
    opts: &'a BuildOptions,
    shared: &'a Registries,
    mci: Arc<str>,
    ns: String,
    tuning: Arc<Tuning>,
    cache: HashMap<String, Target>,
    new_backends: Vec<Arc<Backend>>,
    endpoints: usize,
}

impl MciBuilder<'_> {
    fn target(&mut self, b: &IngressBackend) -> Target {
        let Some(svc) = b.service.as_ref() else {
            let why = b
                .resource
                .as_ref()
                .map(causeway_crds::mci::backend::resource_unsupported)
                .unwrap_or_else(|| "the backend names no service".to_string());
            return Target::Unavailable(why.into());
        };
        let ns = self.ns.clone();
        self.service_target(&ns, svc)
    }

    /// The target for Service `svc` of namespace `ns` (the MCI's, or an HTTPRoute
    /// backendRef's).
    fn service_target(&mut self, ns: &str, svc: &IngressServiceBackend) -> Target {
        let key = backend_key(svc);
        let key = if ns == self.ns {
            key
        } else {
            format!("{ns}/{key}")
        };
        if let Some(t) = self.cache.get(&key) {
            return t.clone();
        }
        let only = match (
            self.tuning.cluster_local,
            self.opts.local_cluster.as_deref(),
        ) {
            (false, _) => Ok(None),
            (true, Some(c)) => Ok(Some(c)),
            (true, None) => Err(format!(
                "{}: cluster-local backends need a proxy that knows its cluster (causeway-proxy --cluster)",
                causeway_crds::well_known::annotations::mci::BACKEND_SCOPE
            )),
        };
        let blocked = self.idx.blocked(ns, &svc.name);
        let t = match only.and_then(|only| {
            let found = resolve(self.idx, ns, svc, &blocked, only)?;
            match only {
                Some(c) if found.0.is_empty() && blocked.iter().any(|b| b == c) => {
                    Err(format!(
                        "this proxy's cluster {c} gets no traffic (trafficBlockClusters: a TrafficControl remedy, or not Ready past the stale-endpoints TTL), and {}: cluster-local sends nowhere else",
                        causeway_crds::well_known::annotations::mci::BACKEND_SCOPE
                    ))
                }
                Some(c) if found.0.is_empty() => Err(format!(
                    "no ready endpoints of {ns}/{} in this proxy's cluster {c} ({}: cluster-local)",
                    svc.name,
                    causeway_crds::well_known::annotations::mci::BACKEND_SCOPE
                )),
                _ => Ok(found),
            }
        }) {
            Err(reason) => Target::Unavailable(reason.into()),
            Ok((by_cluster, app_protocol)) => {
                let groups: Vec<Group> = by_cluster
                    .iter()
                    .map(|(cluster, (addrs, unready))| Group {
                        cluster: cluster.as_str().into(),
                        endpoints: addrs
                            .iter()
                            .map(|a| self.shared.endpoints.endpoint(cluster, *a))
                            .collect(),
                        unready: *unready,
                    })
                    .collect();
                self.endpoints += groups.iter().map(|g| g.endpoints.len()).sum::<usize>();
                let clusters: Vec<Arc<str>> = groups.iter().map(|g| g.cluster.clone()).collect();
                let limits = &self.tuning.limits;
                let name: Arc<str> = key.as_str().into();
                let backend = Backend {
                    mci: self.mci.clone(),
                    name: name.clone(),
                    balancer: Balancer::new(
                        self.tuning.lb,
                        groups,
                        self.opts.local_cluster.as_deref(),
                        self.tuning.cluster_weights.as_ref(),
                    ),
                    tuning: self.tuning.clone(),
                    circuit: self.shared.circuits.circuit(
                        &format!("{ns}/{}", backend_key(svc)),
                        limits.max_connections,
                    ),
                    metrics: self.shared.backend_metrics(&self.mci, &name, &clusters),
                    protocol: crate::upstream::Protocol::of(
                        self.tuning.backend_protocol,
                        app_protocol.as_deref(),
                    ),
                };
                let b = Arc::new(backend);
                self.new_backends.push(b.clone());
                Target::Backend(b)
            }
        };
        self.cache.insert(key, t.clone());
        t
    }
}

/// `objects` oldest first (those without a creation time last), then in the
/// alphabetical order of `namespace/name` (`attach::age_key`, the status controllers'
/// order too).
fn oldest_first<K: kube::Resource>(objects: &[Arc<K>]) -> Vec<&Arc<K>> {
    let mut v: Vec<&Arc<K>> = objects.iter().collect();
    v.sort_by_cached_key(|o| causeway_crds::gateway::attach::age_key(o.meta()));
    v
}

/// Builds the route table from `snapshot`.
pub fn build(snapshot: &Snapshot, opts: &BuildOptions, shared: &Registries) -> RouteTable {
    let start = Instant::now();
    let idx = Index::new(snapshot);
    // Oldest first: older MCIs win conflicts, deterministically. Who wins what (the
    // default of each host, the catch-all) and what each loses is decided once, by the
    // function the MCI controller reports with (`attach::mci_claims`).
    let mcis = oldest_first(&snapshot.mcis);
    let claims =
        causeway_crds::gateway::attach::mci_claims(&snapshot.mcis, &snapshot.ingress_classes);
    let mut table = RouteTable::default();
    for mci in mcis {
        let ns = mci.namespace().unwrap_or_default();
        let id = format!("{ns}/{}", mci.name_any());
        if mci.metadata.deletion_timestamp.is_some() {
            table.ignored.push(Ignored {
                mci: id,
                reason: "being deleted".into(),
            });
            continue;
        }
        let decision = causeway_crds::mci::class::select(mci, &snapshot.ingress_classes);
        if let Some(reason) = decision.reason() {
            tracing::debug!(mci = %id, %reason, "not serving MultiClusterIngress");
            table.ignored.push(Ignored { mci: id, reason });
            continue;
        }
        let errs = causeway_crds::mci::validate::validate(mci);
        if !errs.is_empty() {
            let reason = errs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            tracing::warn!(mci = %id, %reason, "invalid MultiClusterIngress is not served");
            table.ignored.push(Ignored { mci: id, reason });
            continue;
        }
        let (tuning, warnings) = annotations::parse(&id, mci.annotations(), &opts.defaults);
        table
            .warnings
            .extend(warnings.into_iter().map(|w| format!("{id}: {w}")));
        // what older MCIs (or its own earlier rules) take from it: its status says the
        // same (Accepted `RulesShadowed` / `Conflicted`)
        let conflict = claims.conflicts.get(&id);
        let shadowed = conflict.into_iter().flat_map(|c| &c.shadowed);
        table
            .warnings
            .extend(shadowed.map(|s| format!("{id}: {s}")));
        let tls_hosts: BTreeSet<String> = mci
            .spec
            .tls
            .iter()
            .flatten()
            .flat_map(|t| t.hosts.iter().flatten())
            .map(|h| h.to_ascii_lowercase())
            .collect();
        for t in mci.spec.tls.iter().flatten() {
            let Some(secret) = t.secret_name.clone().filter(|s| !s.is_empty()) else {
                continue;
            };
            let hosts = t.hosts.as_deref().unwrap_or_default();
            for h in hosts {
                let entry = TlsEntry {
                    host: h.to_ascii_lowercase(),
                    namespace: ns.clone(),
                    secret: secret.clone(),
                    if_covered: false,
                };
                if !table
                    .tls
                    .iter()
                    .any(|e| !e.if_covered && e.host == entry.host)
                {
                    table.tls.push(entry);
                }
            }
            if !hosts.is_empty() {
                continue;
            }
            // No hosts: the MCI's rule hosts its certificate covers (checked when the
            // Secret is read, `tls::Certs::build`).
            let rule_hosts = mci.spec.rules.iter().flatten().filter_map(|r| {
                r.host
                    .as_deref()
                    .filter(|h| !h.is_empty())
                    .map(str::to_ascii_lowercase)
            });
            for host in rule_hosts {
                let entry = TlsEntry {
                    host,
                    namespace: ns.clone(),
                    secret: secret.clone(),
                    if_covered: true,
                };
                if !table.tls.contains(&entry) {
                    table.tls.push(entry);
                }
            }
        }
        let mci_id: Arc<str> = id.as_str().into();
        let mut b = MciBuilder {
            idx: &idx,
            opts,
            shared,
            mci: mci_id.clone(),
            ns: ns.clone(),
            tuning: Arc::new(tuning),
            cache: HashMap::new(),
            new_backends: Vec::new(),
            endpoints: 0,
        };
        // The hosts this MCI's rules name, lowercase, first mention first (`None`: a
        // rule without host).
        let mut hosts: Vec<Option<String>> = Vec::new();
        for rule in mci.spec.rules.iter().flatten() {
            let host = rule.host.as_deref().filter(|h| !h.is_empty());
            let key = host.map(str::to_ascii_lowercase);
            if !hosts.contains(&key) {
                hosts.push(key);
            }
            let ssl_redirect = b.tuning.ssl_redirect
                && host.is_some_and(|h| tls_hosts.contains(&h.to_ascii_lowercase()));
            // A host is its own server from its first rule on, paths or not.
            let paths = table.router.host_mut(host);
            for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                let kind = if p.path_type == "Exact" {
                    PathKind::Exact
                } else {
                    PathKind::Prefix
                };
                let route = Arc::new(Route {
                    mci: mci_id.clone(),
                    target: b.target(&p.backend),
                    ssl_redirect,
                });
                let path = p.path.as_deref().unwrap_or("/");
                // (false: an identical rule came first; in `conflict`)
                paths.insert(kind, path, route);
            }
        }
        if let Some(d) = mci.spec.default_backend.as_ref() {
            let target = b.target(d);
            let route = |ssl_redirect: bool| {
                Arc::new(Route {
                    mci: mci_id.clone(),
                    target: target.clone(),
                    ssl_redirect,
                })
            };
            // The default of every host the MCI's rules name, where it is the oldest MCI
            // naming the host (ingress-nginx's createServers: the first Ingress to name a
            // host configures its server, with a default backend or without)...
            let decides = |h: &Option<String>| {
                claims.hosts.hosts.get(h).and_then(|e| e.default.as_deref()) == Some(&*id)
            };
            for h in hosts.iter().filter(|h| decides(h)).flatten() {
                let ssl_redirect = b.tuning.ssl_redirect && tls_hosts.contains(h);
                table
                    .router
                    .host_mut(Some(h))
                    .set_default(route(ssl_redirect));
            }
            // ...and, for the oldest MCI without rules or with rules without host, of
            // the requests whose host no rule names: the catch-all.
            if claims.hosts.catch_all.as_deref() == Some(&*id) {
                table.router.set_default(route(false));
            }
        }
        table.endpoints += b.endpoints;
        table.backends.append(&mut b.new_backends);
        table.served.push(id);
    }
    gateway::add(&idx, snapshot, opts, shared, &claims.hosts, &mut table);
    table.router.finish();
    shared.endpoints.sweep();
    shared.circuits.sweep();
    shared.sweep_metrics(&table.backends);
    table.build_time = start.elapsed();
    table
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;

/// The table crosses threads behind an `ArcSwap`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<RouteTable>();
};
