//! Hub watches (kube-runtime reflectors) → debounced rebuild of the route table and the
//! SNI certificate map → `arc-swap`. Requests already running keep the table they
//! loaded. Ready once every cache has listed and the first table is in place.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use causeway_crds::exported_service::ExportedService;
use causeway_crds::gateway::{Gateway, GatewayClass, HTTPRoute, ReferenceGrant};
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mci::lease::TlsProblems;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::labels::{OUTBOX, SERVICE_NAME};
use causeway_runtime::reflect::{Cache, Reflector, Wake, cache};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::table::{self, BuildOptions, Registries, RouteTable, Snapshot};
use crate::tls::{Certs, Resolver};

fn is_tls(s: &Secret) -> bool {
    s.type_.as_deref() == Some("kubernetes.io/tls")
}

/// The hub caches.
pub struct Caches {
    mcis: Cache<MultiClusterIngress>,
    classes: Cache<IngressClass>,
    imports: Cache<ServiceImport>,
    exports: Cache<ExportedService>,
    slices: Cache<EndpointSlice>,
    /// Only with an HTTPS listener (no Secret access needed otherwise).
    secrets: Option<Cache<Secret>>,
    /// Gateway API: the HTTPRoute front end of the same table.
    gateway: GatewayCaches,
    /// Woken by any change (a change to a non-TLS Secret does not count).
    wake: Arc<Wake>,
}

impl Caches {
    /// Starts every watch (all namespaces); TLS Secrets only with `tls`.
    pub fn start(client: &Client, stop: &CancellationToken, tls: bool) -> Caches {
        let wake = Wake::new();
        let all = watcher::Config::default;
        let w = || wake.clone();
        let s = || stop.clone();
        Caches {
            mcis: cache(
                Api::all(client.clone()),
                all(),
                w(),
                s(),
                "multiclusteringresses",
                None,
            ),
            classes: cache(
                Api::all(client.clone()),
                all(),
                w(),
                s(),
                "ingressclasses",
                None,
            ),
            imports: cache(
                Api::all(client.clone()),
                all(),
                w(),
                s(),
                "serviceimports",
                None,
            ),
            exports: cache(
                Api::all(client.clone()),
                all().labels(&format!("!{OUTBOX}")), // not Pull members' outboxes
                w(),
                s(),
                "exportedservices",
                None,
            ),
            slices: cache(
                Api::all(client.clone()),
                all().labels(&format!("{SERVICE_NAME},!{OUTBOX}")),
                w(),
                s(),
                "endpointslices",
                None,
            ),
            secrets: tls.then(|| {
                Reflector::start_filtered(Api::all(client.clone()), all(), s(), "secrets", is_tls)
                    .subscribe(w())
            }),
            gateway: GatewayCaches {
                classes: cache(
                    Api::all(client.clone()),
                    all(),
                    w(),
                    s(),
                    "gatewayclasses",
                    None,
                ),
                gateways: cache(Api::all(client.clone()), all(), w(), s(), "gateways", None),
                routes: cache(
                    Api::all(client.clone()),
                    all(),
                    w(),
                    s(),
                    "httproutes",
                    None,
                ),
                grants: cache(
                    Api::all(client.clone()),
                    all(),
                    w(),
                    s(),
                    "referencegrants",
                    None,
                ),
                namespaces: cache(
                    Api::all(client.clone()),
                    all(),
                    w(),
                    s(),
                    "namespaces",
                    None,
                ),
            },
            wake,
        }
    }

    async fn wait_ready(&self) -> bool {
        let g = &self.gateway;
        if g.classes.wait_until_ready().await.is_err()
            || g.gateways.wait_until_ready().await.is_err()
            || g.routes.wait_until_ready().await.is_err()
            || g.grants.wait_until_ready().await.is_err()
            || g.namespaces.wait_until_ready().await.is_err()
        {
            return false;
        }
        self.mcis.wait_until_ready().await.is_ok()
            && self.classes.wait_until_ready().await.is_ok()
            && self.imports.wait_until_ready().await.is_ok()
            && self.exports.wait_until_ready().await.is_ok()
            && self.slices.wait_until_ready().await.is_ok()
            && match &self.secrets {
                Some(s) => s.wait_until_ready().await.is_ok(),
                None => true,
            }
    }

    /// The current objects.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            mcis: self.mcis.state(),
            ingress_classes: self.classes.state().iter().map(|c| (**c).clone()).collect(),
            service_imports: self.imports.state(),
            exported_services: self.exports.state(),
            endpoint_slices: self.slices.state(),
            gateway_classes: self.gateway.classes.state(),
            gateways: self.gateway.gateways.state(),
            http_routes: self.gateway.routes.state(),
            reference_grants: self.gateway.grants.state(),
            namespaces: self
                .gateway
                .namespaces
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
        }
    }
}

/// The Gateway API objects the table reads.
struct GatewayCaches {
    classes: Cache<GatewayClass>,
    gateways: Cache<Gateway>,
    routes: Cache<HTTPRoute>,
    grants: Cache<ReferenceGrant>,
    /// Namespace labels, for listeners that select route namespaces.
    namespaces: Cache<Namespace>,
}

/// What the rebuild loop updates.
pub struct Targets {
    /// The served route table.
    pub table: Arc<ArcSwap<RouteTable>>,
    /// SNI certificates (when TLS is on).
    pub resolver: Option<Arc<Resolver>>,
    /// Set after the first build.
    pub ready: Arc<AtomicBool>,
    /// The TLS Secrets served the default certificate instead, for the Lease (`None`
    /// until the first build: the Lease waits for it).
    pub tls_problems: tokio::sync::watch::Sender<Option<TlsProblems>>,
    /// Bumped after each table is stored (the mesh listeners follow the table).
    pub built: tokio::sync::watch::Sender<u64>,
}

/// The warnings of a new table (`now`: bad annotations, MCI and HTTPRoute conflicts)
/// that the last one had not (`said`, which becomes `now`'s): each is logged when it
/// appears, not at every rebuild (one that goes and comes back is logged again).
fn new_warnings<'a>(
    said: &mut std::collections::BTreeSet<String>,
    now: &'a [String],
) -> Vec<&'a str> {
    let news: Vec<&str> = now
        .iter()
        .filter(|w| !said.contains(*w))
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    *said = now.iter().cloned().collect();
    news
}

/// Rebuilds on every change (after `debounce`) until `stop`.
pub async fn run(
    caches: Caches,
    opts: BuildOptions,
    shared: Arc<Registries>,
    targets: Targets,
    debounce: Duration,
    stop: CancellationToken,
) {
    tokio::select! {
        ok = caches.wait_ready() => if !ok { return },
        _ = stop.cancelled() => return,
    }
    tracing::info!("hub caches synced");
    // the table's warnings last logged
    let mut said = std::collections::BTreeSet::new();
    loop {
        let snap = caches.snapshot();
        let t = table::build(&snap, &opts, &shared);
        let m = &shared.metrics;
        m.rebuilds.inc();
        m.build_seconds.observe(t.build_time.as_secs_f64());
        m.routes.set(t.routes() as i64);
        m.endpoints.set(t.endpoints as i64);
        m.mcis.set(t.served.len() as i64);
        tracing::debug!(
            served = t.served.len(),
            ignored = t.ignored.len(),
            routes = t.routes(),
            endpoints = t.endpoints,
            took = ?t.build_time,
            "route table rebuilt"
        );
        for w in new_warnings(&mut said, &t.warnings) {
            tracing::warn!("{w}");
        }
        let mut problems = TlsProblems::new();
        if let (Some(r), Some(secrets)) = (&targets.resolver, &caches.secrets) {
            let secrets: Vec<Arc<Secret>> = secrets.state();
            let (certs, found) = Certs::build(&t.tls, &secrets);
            r.certs.store(Arc::new(certs));
            problems = found;
        }
        targets.tls_problems.send_if_modified(|p| {
            let changed = p.as_ref() != Some(&problems);
            *p = Some(problems);
            changed
        });
        targets.table.store(Arc::new(t));
        targets.built.send_modify(|n| *n += 1);
        targets.ready.store(true, Ordering::Relaxed);
        // the whole table is rebuilt on any change: what changed does not matter here
        if caches
            .wake
            .next_round(&stop, Duration::from_secs(3600), debounce)
            .await
            .is_none()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warning is logged once when it appears, not at every rebuild; one that goes
    /// and comes back is logged again.
    #[test]
    fn each_warning_is_logged_when_it_appears() {
        let v = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let mut said = std::collections::BTreeSet::new();
        assert_eq!(new_warnings(&mut said, &v(&["a", "b", "a"])), ["a", "b"]);
        assert!(new_warnings(&mut said, &v(&["b", "a"])).is_empty());
        assert_eq!(new_warnings(&mut said, &v(&["a", "c"])), ["c"]);
        assert!(new_warnings(&mut said, &v(&["a"])).is_empty());
        assert!(new_warnings(&mut said, &[]).is_empty());
        assert_eq!(new_warnings(&mut said, &v(&["c", "a"])), ["a", "c"]);
    }
}
