//! MultiClusterIngress controller (hub): decides which MCIs Causeway serves (IngressClass,
//! MCI-3), validates them with Karmada's rules (MCI-2) and reports the verdict as the
//! `Accepted` condition plus an Event (naming the rules an older MCI serves instead:
//! `RulesShadowed`, or `Conflicted` when it takes them all), and keeps the status Karmada
//! users read:
//! `loadBalancer` from the live causeway-proxy Leases (MCI-10), `serviceLocations` from
//! the hub ServiceImports' `status.clusters` (MCI-9), and `trafficBlockClusters` from the
//! clusters serving its backends that ask for `TrafficControl` (MCI-8) or stayed not
//! Ready past the stale-endpoints TTL (EPS-7; within it, their last known endpoints keep
//! serving and the `EndpointsStale` condition says so).
//! A finalizer clears the published addresses when an MCI is deleted.
//!
//! The pure part ([`desired`]) maps the hub caches to the status of one MCI; [`run`] is the
//! loop that diffs and writes.

pub mod backend_exports;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_crds::federation::cluster::Cluster;
use causeway_crds::gateway::attach::{MciConflict, mci_claims};
use causeway_crds::mci::class::{Decision, select};
use causeway_crds::mci::lease as proxy_lease;
use causeway_crds::mci::tuning;
use causeway_crds::mci::validate::{FieldError, validate};
use causeway_crds::mci::{
    ACCEPTED, BACKEND_NOT_FOUND, MultiClusterIngress, MultiClusterIngressStatus, RESOLVED_REFS,
    ServiceLocation,
};
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::{annotations, finalizers, labels};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::networking::v1::{
    IngressBackend, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus,
    IngressPortStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::mcs::stale::{ExpiryTimer, Staleness};
use crate::metrics::Metrics;
use causeway_crds::federation::cluster::remedy_actions::TRAFFIC_CONTROL;
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use causeway_runtime::apply::StatusMemo;
use causeway_runtime::reflect::cache;
use causeway_runtime::reflect::{Dirty, Wake};

/// What the hub holds that an MCI's status depends on.
pub struct World<'a> {
    /// Every IngressClass.
    pub classes: &'a [IngressClass],
    /// Hub ServiceImports by (namespace, name).
    pub imports: &'a BTreeMap<(String, String), Arc<ServiceImport>>,
    /// Registered clusters by cluster id.
    pub clusters: &'a BTreeMap<String, Arc<Cluster>>,
    /// The hub's ResourceBindings: where a backend Service propagated from the hub is
    /// scheduled (MCI-9 takes its locations from there when it has one).
    pub bindings: &'a [Arc<causeway_crds::federation::binding::ResourceBinding>],
    /// The clusters exporting each service, by (namespace, name): they serve it even
    /// while withdrawn from its ServiceImport's `status.clusters`.
    pub exporters: &'a BTreeMap<(String, String), BTreeSet<String>>,
    /// Which clusters are stale or withdrawn.
    pub stale: &'a Staleness,
    /// causeway-proxy Leases in the system namespace, read ([`ProxyLease::read_all`]).
    pub proxies: &'a [ProxyLease],
    /// What each served MCI loses to an older one, by `namespace/name`
    /// (`causeway_crds::gateway::attach::mci_claims`, what causeway-proxy serves by).
    pub conflicts: &'a BTreeMap<String, MciConflict>,
    /// Now, for Lease expiry.
    pub now: jiff::Timestamp,
}

/// The controller's verdict on one MCI.
#[derive(Debug, PartialEq)]
pub enum Desired {
    /// Not Causeway's (another controller's class, or no class): leave it alone.
    NotOurs(Decision),
    /// Causeway's: the status it should have, and what is wrong with it, if anything.
    Ours {
        status: MultiClusterIngressStatus,
        errors: Vec<FieldError>,
        warnings: Vec<FieldError>,
    },
}

/// The Accepted reason (and Warning Event) of an MCI served while a proxy serves the
/// default certificate for one of its TLS Secrets (MCI-10).
pub const TLS_SECRET_UNUSABLE: &str = "TLSSecretUnusable";

/// The Accepted reason (status False) of an MCI an older one takes everything from: each
/// of its path rules, its defaultBackend's hosts and catch-all (the proxy serves the
/// oldest MCI's; a Warning Event says so too).
pub const CONFLICTED: &str = "Conflicted";

/// The Accepted reason (status True) of an MCI served in part: older MCIs (or earlier
/// rules of its own) take some of its rules; the message names them and who serves
/// them (a Warning Event says so too).
pub const RULES_SHADOWED: &str = "RulesShadowed";

/// The verdict on `mci`.
pub fn desired(mci: &MultiClusterIngress, world: &World<'_>) -> Desired {
    let decision = select(mci, world.classes);
    if !decision.is_ours() {
        return Desired::NotOurs(decision);
    }
    let errors = validate(mci);
    let warnings = tuning::parse(mci.annotations()).1;
    let ns = mci.namespace().unwrap_or_default();
    let service_locations: Vec<ServiceLocation> = backend_services(mci)
        .into_iter()
        .filter_map(|name| {
            // MCI-9: the Service's ResourceBinding when it has one, else its
            // ServiceImport's clusters
            let clusters: BTreeSet<String> =
                match backend_exports::scheduled_to(world.bindings, &ns, &name) {
                    Some(scheduled) => scheduled,
                    None => {
                        let import = world.imports.get(&(ns.clone(), name.clone()))?;
                        let status = import.status.as_ref();
                        status
                            .map(|s| s.clusters.iter().map(|c| c.cluster.clone()).collect())
                            .unwrap_or_default()
                    }
                };
            Some(ServiceLocation {
                name,
                clusters: clusters.into_iter().collect(),
            })
        })
        .collect();
    // every cluster serving a backend, withdrawn ones included
    let serving: BTreeSet<&str> = service_locations
        .iter()
        .flat_map(|l| l.clusters.iter())
        .chain(
            backend_services(mci)
                .into_iter()
                .filter_map(|name| world.exporters.get(&(ns.clone(), name)))
                .flatten(),
        )
        .map(String::as_str)
        .collect();
    let traffic_block_clusters: Vec<String> = serving
        .iter()
        .filter(|c| {
            world
                .clusters
                .get(**c)
                .is_some_and(|c| blocks_traffic(c, world.stale))
        })
        .map(|c| c.to_string())
        .collect();
    // what older MCIs take from it (an invalid MCI is not served at all: none)
    let conflict = world
        .conflicts
        .get(&format!("{ns}/{}", mci.name_any()))
        .filter(|_| errors.is_empty());
    let shadowed = |c: &MciConflict| {
        c.shadowed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (reason, message, ok) = if !errors.is_empty() {
        (
            "Invalid",
            format!(
                "not served: {}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            false,
        )
    } else if let Some(c) = conflict.filter(|c| c.all_shadowed()) {
        (
            CONFLICTED,
            format!(
                "not served: causeway-proxy serves everything it asks for from older MultiClusterIngresses: {}; give its rules other hosts or paths",
                shadowed(c)
            ),
            false,
        )
    } else if !warnings.is_empty() {
        (
            "InvalidAnnotations",
            format!(
                "served with defaults for: {}",
                warnings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            true,
        )
    } else {
        let class = match &decision {
            Decision::Ours { class } => class.clone(),
            _ => String::new(),
        };
        (
            "Accepted",
            format!("served by causeway-proxy (IngressClass {class})"),
            true,
        )
    };
    // served in part: the rules older MCIs take, said in the condition
    let (reason, message) = match conflict.filter(|c| !c.all_shadowed()) {
        Some(c) => (
            if reason == "Accepted" {
                RULES_SHADOWED
            } else {
                reason
            },
            format!(
                "{message}; not served: {} (give those rules other hosts or paths)",
                shadowed(c)
            ),
        ),
        None => (reason, message),
    };
    // served, but with the default certificate for some hosts: said in the condition
    let tls = if ok {
        tls_notes(mci, world.proxies, world.now)
    } else {
        Vec::new()
    };
    let (reason, message) = match (tls.is_empty(), reason) {
        (true, r) => (r, message),
        (false, "Accepted") => (
            TLS_SECRET_UNUSABLE,
            format!("{message}; {}", tls.join("; ")),
        ),
        (false, r) => (r, format!("{message}; {}", tls.join("; "))),
    };
    let load_balancer = ok.then(|| load_balancer(world.proxies, world.now, &tls_secrets(mci)));
    let status_word = if ok { "True" } else { "False" };
    let prev: &[Condition] = mci
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut conditions = vec![Condition {
        type_: ACCEPTED.into(),
        status: status_word.into(),
        reason: reason.into(),
        message: message.chars().take(32 * 1024).collect(),
        observed_generation: mci.metadata.generation,
        last_transition_time: crate::condition::since(
            prev,
            ACCEPTED,
            status_word,
            &Time(world.now),
        ),
    }];
    let unresolved = unresolved_backends(mci, world);
    let (refs_ok, refs_reason, refs_message) = if unresolved.is_empty() {
        (
            "True",
            RESOLVED_REFS,
            "every backend names a port of its ServiceImport".to_string(),
        )
    } else {
        (
            "False",
            BACKEND_NOT_FOUND,
            format!(
                "causeway-proxy answers 503 for: {}",
                unresolved.into_iter().collect::<Vec<_>>().join("; ")
            ),
        )
    };
    conditions.push(Condition {
        type_: RESOLVED_REFS.into(),
        status: refs_ok.into(),
        reason: refs_reason.into(),
        message: refs_message.chars().take(32 * 1024).collect(),
        observed_generation: mci.metadata.generation,
        last_transition_time: crate::condition::since(
            prev,
            RESOLVED_REFS,
            refs_ok,
            &Time(world.now),
        ),
    });
    conditions.extend(
        world
            .stale
            .condition(serving.iter().copied(), prev)
            .map(|c| Condition {
                observed_generation: mci.metadata.generation,
                ..c
            }),
    );
    let status = MultiClusterIngressStatus {
        load_balancer,
        traffic_block_clusters,
        service_locations,
        conditions,
    };
    Desired::Ours {
        status,
        errors,
        warnings,
    }
}

/// What is wrong with each backend of `mci` that causeway-proxy cannot resolve: no hub
/// ServiceImport of its name, or no port of it that the backend names (the lookup the
/// proxy serves with, `causeway_crds::mci::backend::service_port`), or a `resource`
/// backend (the proxy serves Services only); sorted, once each.
fn unresolved_backends(mci: &MultiClusterIngress, world: &World<'_>) -> BTreeSet<String> {
    let ns = mci.namespace().unwrap_or_default();
    let mut out = BTreeSet::new();
    let rules = mci.spec.rules.as_deref().unwrap_or_default();
    let backends = mci.spec.default_backend.iter().chain(
        rules
            .iter()
            .flat_map(|r| r.http.iter().flat_map(|h| h.paths.iter()))
            .map(|p| &p.backend),
    );
    for b in backends {
        let Some(svc) = b.service.as_ref() else {
            // (validation: a backend without a service has a resource)
            if let Some(r) = &b.resource {
                out.insert(causeway_crds::mci::backend::resource_unsupported(r));
            }
            continue;
        };
        let port = svc.port.as_ref();
        let named = port
            .and_then(|p| p.name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| port.and_then(|p| p.number).map(|n| n.to_string()));
        let what = match &named {
            Some(p) => format!("backend {} port {p}", svc.name),
            None => format!("backend {}", svc.name),
        };
        match world.imports.get(&(ns.clone(), svc.name.clone())) {
            None => {
                out.insert(format!(
                    "{what}: no ServiceImport {ns}/{} on the hub (export the Service from a member cluster)",
                    svc.name
                ));
            }
            Some(si) => {
                if let Err(e) = causeway_crds::mci::backend::service_port(si, port) {
                    out.insert(format!("{what}: {}", e.message(&ns, &svc.name)));
                }
            }
        }
    }
    out
}

/// The Service names an MCI's rules and default backend refer to, sorted.
pub fn backend_services(mci: &MultiClusterIngress) -> Vec<String> {
    let mut names = BTreeSet::new();
    let mut add = |b: &IngressBackend| {
        if let Some(s) = &b.service {
            names.insert(s.name.clone());
        }
    };
    if let Some(b) = &mci.spec.default_backend {
        add(b);
    }
    for rule in mci.spec.rules.as_deref().unwrap_or_default() {
        for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
            add(&p.backend);
        }
    }
    names.into_iter().collect()
}

/// Whether MCI load balancing must skip `cluster`: a `TrafficControl` remedy, or not
/// Ready for longer than the stale-endpoints TTL (within it, its last known endpoints
/// keep serving; endpoints that are really dead are ejected by the proxy).
pub fn blocks_traffic(cluster: &Cluster, stale: &Staleness) -> bool {
    let remedy = cluster
        .status
        .as_ref()
        .is_some_and(|st| st.remedy_actions.iter().any(|a| a == TRAFFIC_CONTROL));
    remedy || stale.withdrawn(&cluster_id(cluster))
}

/// A Cluster's id: `spec.id`, else its name.
fn cluster_id(c: &Cluster) -> String {
    c.cluster_id()
        .map(String::from)
        .unwrap_or_else(|| c.name_any())
}

/// `status.loadBalancer` from the causeway-proxy Leases that are still held at `now`:
/// one ingress per published address (IP or hostname) with the proxy's ports, sorted.
/// An HTTPS port carries an `error` (MCI-10, `causeway.io/<reason>`) when a proxy at
/// that address serves the default certificate for one of `tls_secrets`
/// (`namespace/name`, the MCI's `spec.tls[].secretName`).
pub fn load_balancer(
    proxies: &[ProxyLease],
    now: jiff::Timestamp,
    tls_secrets: &BTreeSet<String>,
) -> IngressLoadBalancerStatus {
    let mut by_address: BTreeMap<String, BTreeMap<i32, Option<String>>> = BTreeMap::new();
    for ProxyLease {
        lease,
        ports,
        problems,
        ..
    } in proxies
    {
        if !lease_held(lease, now) {
            continue;
        }
        let ann = lease.annotations();
        let tls_error = tls_secrets
            .iter()
            .find_map(|s| problems.get(s))
            .map(|p| format!("causeway.io/{}", p.reason));
        for addr in ann
            .get(annotations::PROXY_ADDRESSES)
            .into_iter()
            .flat_map(|a| a.split(','))
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            let entry = by_address.entry(addr.to_string()).or_default();
            for p in ports {
                let error = p.https.then(|| tls_error.clone()).flatten();
                let e = entry.entry(p.port).or_default();
                // one proxy's problem at this address is the port's
                if e.is_none() {
                    *e = error;
                }
            }
        }
    }
    let ingress: Vec<IngressLoadBalancerIngress> = by_address
        .into_iter()
        .map(|(addr, ports)| {
            let is_ip = addr.parse::<IpAddr>().is_ok();
            IngressLoadBalancerIngress {
                ip: is_ip.then(|| addr.clone()),
                hostname: (!is_ip).then_some(addr),
                ports: (!ports.is_empty()).then(|| {
                    ports
                        .into_iter()
                        .map(|(port, error)| IngressPortStatus {
                            port,
                            protocol: "TCP".into(),
                            error,
                        })
                        .collect()
                }),
            }
        })
        .collect();
    IngressLoadBalancerStatus {
        ingress: (!ingress.is_empty()).then_some(ingress),
    }
}

/// A causeway-proxy's Lease with what its annotations say, read once per pass rather
/// than once per MCI.
pub struct ProxyLease {
    /// The Lease.
    pub lease: Arc<Lease>,
    /// Its ports (`causeway.io/proxy-ports`).
    ports: Vec<proxy_lease::Port>,
    /// The TLS problems it reports (none when the annotation does not parse).
    problems: proxy_lease::TlsProblems,
    /// Where it serves mesh traffic (`causeway.io/proxy-mesh`, GW-4), or why that
    /// annotation does not parse; `None` when it serves none.
    pub mesh: Option<Result<(std::net::IpAddr, std::ops::RangeInclusive<u16>), String>>,
}

impl ProxyLease {
    /// Reads each Lease's annotations.
    pub fn read_all(leases: &[Arc<Lease>]) -> Vec<ProxyLease> {
        leases
            .iter()
            .map(|lease| {
                let ann = lease.annotations();
                let ports = ann
                    .get(annotations::PROXY_PORTS)
                    .map(|p| proxy_lease::parse_ports(p))
                    .unwrap_or_default();
                let problems = ann
                    .get(annotations::PROXY_TLS_PROBLEMS)
                    .map(|text| {
                        proxy_lease::parse_tls_problems(text).unwrap_or_else(|e| {
                            tracing::debug!(lease = %lease.name_any(), error = %e, "unreadable TLS problems annotation");
                            Default::default()
                        })
                    })
                    .unwrap_or_default();
                let mesh = ann
                    .get(causeway_crds::gateway::mesh::PROXY_MESH)
                    .map(|v| causeway_crds::gateway::mesh::parse_proxy_mesh(v));
                ProxyLease {
                    lease: lease.clone(),
                    ports,
                    problems,
                    mesh,
                }
            })
            .collect()
    }
}

/// The MCI's TLS Secrets (`namespace/name`).
fn tls_secrets(mci: &MultiClusterIngress) -> BTreeSet<String> {
    let ns = mci.namespace().unwrap_or_default();
    mci.spec
        .tls
        .iter()
        .flatten()
        .filter_map(|t| t.secret_name.as_deref().filter(|s| !s.is_empty()))
        .map(|s| proxy_lease::secret_key(&ns, s))
        .collect()
}

/// What the live proxies report about the MCI's TLS Secrets, for people: one sentence
/// per Secret (the first report by Lease name), naming the hosts that get the default
/// certificate; empty when every proxy serves them.
fn tls_notes(
    mci: &MultiClusterIngress,
    proxies: &[ProxyLease],
    now: jiff::Timestamp,
) -> Vec<String> {
    let ns = mci.namespace().unwrap_or_default();
    let mut problems: Vec<(String, &proxy_lease::TlsProblems)> = proxies
        .iter()
        .filter(|p| !p.problems.is_empty() && lease_held(&p.lease, now))
        .map(|p| (p.lease.name_any(), &p.problems))
        .collect();
    problems.sort_by(|a, b| a.0.cmp(&b.0));
    // the hosts of every tls[] entry naming each Secret
    let mut hosts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in mci.spec.tls.iter().flatten() {
        if let Some(secret) = t.secret_name.as_deref() {
            hosts
                .entry(proxy_lease::secret_key(&ns, secret))
                .or_default()
                .extend(t.hosts.iter().flatten().cloned());
        }
    }
    hosts
        .into_iter()
        .filter_map(|(key, hosts)| {
            let (lease, p) = problems
                .iter()
                .find_map(|(name, found)| Some((name, found.get(&key)?)))?;
            let who = if hosts.is_empty() {
                "its hosts get".to_string()
            } else {
                format!("{} get", hosts.join(", "))
            };
            Some(format!(
                "TLS Secret {key}: {} ({}, reported by {lease}); {who} the proxy's default certificate",
                p.message, p.reason
            ))
        })
        .collect()
}

/// Whether a Lease is held at `now`: renewed (or acquired) less than its duration ago.
pub fn lease_held(lease: &Lease, now: jiff::Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let Some(last) = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0)
    else {
        return false;
    };
    let duration = spec.lease_duration_seconds.unwrap_or(15).max(1);
    // a renewal so late that its end is past the last representable time ends after
    // any `now` (a Lease is anyone's to write: no panic on it)
    match last.checked_add(jiff::SignedDuration::from_secs(duration.into())) {
        Ok(end) => end > now,
        Err(_) => true,
    }
}

fn status_json(status: &MultiClusterIngressStatus) -> serde_json::Value {
    // Every field is written (empty when unset) so that server-side apply drops what
    // Causeway wrote before and no longer wants.
    json!({
        "loadBalancer": status.load_balancer.clone().unwrap_or_default(),
        "trafficBlockClusters": status.traffic_block_clusters,
        "serviceLocations": status.service_locations,
        "conditions": status.conditions,
    })
}

/// A cache of the causeway-proxy Leases in the system namespace (their addresses are
/// the MCIs' `loadBalancer` and the Gateways' `addresses`).
pub fn proxy_leases(
    hub: &kube::Client,
    wake: &Arc<Wake>,
    stop: &CancellationToken,
    what: &'static str,
) -> causeway_runtime::reflect::Cache<Lease> {
    cache(
        Api::<Lease>::namespaced(hub.clone(), SYSTEM_NAMESPACE),
        watcher::Config::default().labels(&format!(
            "{}={}",
            labels::COMPONENT,
            labels::PROXY_COMPONENT
        )),
        wake.clone(),
        stop.clone(),
        what,
        None,
    )
}

/// Runs the MCI controller until `stop`.
pub async fn run(
    hub: kube::Client,
    caches: Arc<crate::mcs::HubCaches>,
    metrics: Arc<Metrics>,
    stale_ttl: Duration,
    stop: CancellationToken,
) {
    let wake = Wake::new();
    let mcis = cache(
        Api::<MultiClusterIngress>::all(hub.clone()),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "hub multiclusteringresses",
        None,
    );
    let classes = cache(
        Api::<IngressClass>::all(hub.clone()),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "hub ingressclasses",
        None,
    );
    let clusters = caches.clusters.subscribe(wake.clone());
    let exported = caches.exported.subscribe(wake.clone());
    let proxies = proxy_leases(&hub, &wake, &stop, "hub causeway-proxy leases");
    let imports = caches.imports.subscribe(wake.clone());
    let bindings = cache(
        Api::<causeway_crds::federation::binding::ResourceBinding>::all(hub.clone()),
        watcher::Config::default(),
        wake.clone(),
        stop.clone(),
        "hub resourcebindings (MCI service locations)",
        None,
    );
    // bounded: a hub whose RBAC predates MCI-9's read of ResourceBindings still gets its
    // MCIs served (their locations from the ServiceImports)
    if tokio::time::timeout(Duration::from_secs(30), bindings.wait_until_ready())
        .await
        .is_err()
    {
        tracing::warn!(
            "cannot list ResourceBindings on the hub within 30 s: MCI serviceLocations come from the ServiceImports until they are listed (give the controller get/list/watch on resourcebindings.causeway.io, deploy/rbac/hub.yaml)"
        );
    }
    if mcis.wait_until_ready().await.is_err()
        || classes.wait_until_ready().await.is_err()
        || clusters.wait_until_ready().await.is_err()
        || proxies.wait_until_ready().await.is_err()
        || imports.wait_until_ready().await.is_err()
        || exported.wait_until_ready().await.is_err()
    {
        return;
    }
    tracing::info!("multiclusteringress controller running");
    let recorder = Recorder::new(
        hub.clone(),
        Reporter {
            controller: "causeway-mci".into(),
            instance: None,
        },
    );
    let mut memo = Memo::default();
    let mut expiry = ExpiryTimer::default();
    loop {
        let started = Instant::now();
        let now = jiff::Timestamp::now();
        let class_list: Vec<IngressClass> =
            classes.state().iter().map(|c| c.as_ref().clone()).collect();
        let imports_now = imports.state();
        let import_map = crate::watch::by_key(&imports_now)
            .into_iter()
            .map(|(k, v)| (k, v.clone()))
            .collect();
        let clusters_now = clusters.state();
        let stale = Staleness::new(&clusters_now, stale_ttl, now);
        expiry.set(&wake, stale.next_expiry());
        let cluster_map: BTreeMap<String, Arc<Cluster>> = clusters_now
            .into_iter()
            .map(|c| (cluster_id(&c), c))
            .collect();
        let mut exporters: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for e in exported.state() {
            exporters
                .entry((e.namespace().unwrap_or_default(), e.spec.service.clone()))
                .or_default()
                .insert(e.spec.cluster.clone());
        }
        let leases = ProxyLease::read_all(&proxies.state());
        let bindings_now = bindings.state();
        let mcis_now = mcis.state();
        // what each MCI loses to an older one: one look at them all, as the proxy
        let claims = mci_claims(&mcis_now, &class_list);
        let world = World {
            classes: &class_list,
            imports: &import_map,
            clusters: &cluster_map,
            bindings: &bindings_now,
            exporters: &exporters,
            stale: &stale,
            proxies: &leases,
            conflicts: &claims.conflicts,
            now,
        };
        let mut failed = std::collections::HashSet::new();
        for mci in mcis_now {
            if let Err(e) = reconcile(&hub, &recorder, &mut memo, &mci, &world).await {
                tracing::warn!(
                    namespace = %mci.namespace().unwrap_or_default(),
                    name = %mci.name_any(),
                    error = %format!("{e:#}"),
                    "multiclusteringress reconcile failed; retrying with backoff"
                );
                failed.insert(crate::watch::key(mci.as_ref()));
            }
        }
        metrics.observe_reconcile("mci", "hub", started.elapsed(), failed.len());
        // every round covers every MCI; a failed one is retried after its backoff, not
        // in a hot loop
        wake.record_failures(&Dirty::full(), &failed);
        // Leases expire without an event: look again within a renew interval.
        if wake
            .next_round(&stop, Duration::from_secs(5), Duration::from_millis(5))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// What the loop remembers between rounds.
#[derive(Default)]
struct Memo {
    status: StatusMemo,
    /// What was last said of each MCI in an Event, as (reason, message): the
    /// ambiguous default IngressClass, or the Accepted condition (a CRD whose status
    /// has no `conditions`, Karmada's, keeps none to compare with). An Event is
    /// published when this changes.
    said: std::collections::HashMap<(String, String), (String, String)>,
    /// The same for the ResolvedRefs condition (its Warning Event).
    said_refs: std::collections::HashMap<(String, String), (String, String)>,
    /// The hub's MultiClusterIngress CRD has no `status.conditions` (Karmada's): the
    /// status is written without them.
    conditions_dropped: bool,
}

async fn reconcile(
    hub: &kube::Client,
    recorder: &Recorder,
    memo: &mut Memo,
    mci: &MultiClusterIngress,
    world: &World<'_>,
) -> anyhow::Result<()> {
    let ns = mci.namespace().unwrap_or_default();
    let name = mci.name_any();
    let api: Api<MultiClusterIngress> = Api::namespaced(hub.clone(), &ns);
    let held = mci.finalizers().iter().any(|f| f == finalizers::MCI);
    let deleting = mci.metadata.deletion_timestamp.is_some();
    let verdict = desired(mci, world);
    let ours = matches!(verdict, Desired::Ours { .. });
    let key = (ns.clone(), name.clone());
    if deleting || !ours {
        memo.said_refs.remove(&key);
        if let Desired::NotOurs(Decision::AmbiguousDefault { .. }) = &verdict {
            let said = (AMBIGUOUS_CLASS.to_string(), verdict_reason(&verdict));
            if memo.said.get(&key) != Some(&said) {
                publish(recorder, mci, EventType::Warning, &said.0, &said.1).await;
                memo.said.insert(key, said);
            }
        } else {
            memo.said.remove(&key);
        }
        if held {
            // Withdraw what Causeway published (addresses, locations, conditions), then let go.
            // The status write changes the resourceVersion: the finalizer goes with a
            // JSON patch guarded by a test of the finalizer list, not by the
            // resourceVersion read before it (which would always conflict).
            write_status(&mut memo.status, &api, (&ns, &name), &json!({}), None, None).await?;
            causeway_runtime::apply::remove_finalizer(&api, mci, finalizers::MCI).await?;
            tracing::info!(namespace = %ns, name = %name, deleting, "multiclusteringress released");
        }
        return Ok(());
    }
    let Desired::Ours {
        status,
        errors,
        warnings,
    } = verdict
    else {
        return Ok(());
    };
    if !held {
        causeway_runtime::apply::add_finalizer(&api, mci, finalizers::MCI).await?;
    }
    let prev: &[Condition] = mci
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let next = &status.conditions[0];
    let said = (next.reason.clone(), next.message.clone());
    let changed = !prev
        .iter()
        .any(|p| p.type_ == next.type_ && p.reason == next.reason && p.message == next.message)
        && memo.said.get(&key) != Some(&said);
    memo.said.insert(key.clone(), said);
    // a backend the proxy cannot resolve: a Warning Event when that news changes (on
    // Karmada's CRD, without conditions, the only place it is said)
    if let Some(refs) = status.conditions.iter().find(|c| c.type_ == RESOLVED_REFS) {
        let said = (refs.reason.clone(), refs.message.clone());
        let news = refs.status == "False"
            && !prev.iter().any(|p| {
                p.type_ == refs.type_ && p.reason == refs.reason && p.message == refs.message
            })
            && memo.said_refs.get(&key) != Some(&said);
        memo.said_refs.insert(key, said);
        if news {
            publish(
                recorder,
                mci,
                EventType::Warning,
                BACKEND_NOT_FOUND,
                &refs.message,
            )
            .await;
        }
    }
    if changed {
        let (kind, reason) = if !errors.is_empty() {
            (EventType::Warning, "InvalidSpec")
        } else if !warnings.is_empty() {
            (EventType::Warning, "InvalidAnnotations")
        } else if [TLS_SECRET_UNUSABLE, CONFLICTED, RULES_SHADOWED].contains(&next.reason.as_str())
        {
            (EventType::Warning, next.reason.as_str())
        } else {
            (EventType::Normal, "Accepted")
        };
        publish(recorder, mci, kind, reason, &next.message).await;
    }
    loop {
        let dropped = memo.conditions_dropped;
        let json = |s: &MultiClusterIngressStatus| {
            let mut v = status_json(s);
            if dropped && let Some(m) = v.as_object_mut() {
                m.remove("conditions");
            }
            v
        };
        let want = json(&status);
        let actual = mci.status.as_ref().map(json).unwrap_or(json!({}));
        match write_status(
            &mut memo.status,
            &api,
            (&ns, &name),
            &want,
            mci.resource_version(),
            Some(actual),
        )
        .await
        {
            Err(e) if !dropped && conditions_undeclared(&e) => {
                tracing::warn!(
                    "the MultiClusterIngress CRD on the hub has no status.conditions (Karmada's own): Accepted is said as Events only, EndpointsStale not at all (status.trafficBlockClusters still lists the clusters withdrawn); `causeway crds install --force` installs Causeway's CRD, which has them (then restart the controller)"
                );
                memo.conditions_dropped = true;
            }
            r => {
                r?;
                return Ok(());
            }
        }
    }
}

/// The Event reason of an MCI left alone because two IngressClasses are the default.
const AMBIGUOUS_CLASS: &str = "AmbiguousIngressClass";

/// Applies `want` as the status of the MCI `api` names (`actual` its status as last
/// read, none to write without comparing), unless the memo says it is already there.
async fn write_status(
    memo: &mut StatusMemo,
    api: &Api<MultiClusterIngress>,
    (ns, name): (&str, &str),
    want: &serde_json::Value,
    rv: Option<String>,
    actual: Option<serde_json::Value>,
) -> Result<(), causeway_runtime::apply::ApplyError> {
    memo.ensure(
        api,
        ns,
        name,
        "networking.karmada.io/v1alpha1",
        "MultiClusterIngress",
        want,
        rv,
        || actual,
    )
    .await
    .map(drop)
}

/// Whether a status apply failed because the CRD's schema has no `status.conditions`
/// (server-side apply refuses a field not declared in a structural schema).
fn conditions_undeclared(e: &causeway_runtime::apply::ApplyError) -> bool {
    matches!(e, causeway_runtime::apply::ApplyError::Kube { source: kube::Error::Api(s), .. }
        if s.message.contains("not declared in schema") && s.message.contains(".status.conditions"))
}

fn verdict_reason(v: &Desired) -> String {
    match v {
        Desired::NotOurs(d) => d.reason().unwrap_or_default(),
        Desired::Ours { .. } => String::new(),
    }
}

async fn publish(
    recorder: &Recorder,
    mci: &MultiClusterIngress,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &mci.object_ref(&())).await {
        tracing::debug!(error = %e, "could not publish an Event");
    }
}

#[cfg(test)]
mod tests;
