//! Multi-Cluster Services: exporter (member → hub), aggregator (hub), importer (hub → member).

pub mod aggregator;
pub mod exporter;
pub mod importer;
pub mod relay;
pub mod stale;

use causeway_crds::exported_service::ExportedService;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::labels;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use causeway_runtime::reflect::{Managed, Reflector};

use crate::watch::by_service;

/// The hub caches every MCS loop reads, watched once and shared (not once per member).
pub struct HubCaches {
    /// Hub ServiceImports written by the aggregator.
    pub imports: Reflector<ServiceImport>,
    /// Hub MCS EndpointSlices (every source cluster; not the outboxes of Pull members,
    /// which only the relay reads).
    pub slices: Reflector<EndpointSlice>,
    /// Every ExportedService but those in outboxes.
    pub exported: Reflector<ExportedService>,
    /// Every Cluster (registration, and readiness for stale endpoints, EPS-7); a
    /// change asks for a full round.
    pub clusters: Reflector<Cluster>,
}

impl HubCaches {
    /// Starts the hub watches.
    pub fn start(hub: &kube::Client, stop: &CancellationToken) -> HubCaches {
        let managed = watcher::Config::default().labels(&format!(
            "{}={}",
            labels::MANAGED,
            labels::MANAGED_VALUE
        ));
        HubCaches {
            // (the labels and annotations Causeway's applies hold kept: one the
            // export stops setting goes)
            imports: Reflector::start_keeping(
                Api::all(hub.clone()),
                managed,
                stop.clone(),
                "hub serviceimports",
                by_service(),
                Managed::OwnMetadata,
            ),
            slices: Reflector::start(
                Api::all(hub.clone()),
                watcher::Config::default().labels(&format!(
                    "{},!{}",
                    labels::SOURCE_CLUSTER,
                    labels::OUTBOX
                )),
                stop.clone(),
                "hub endpointslices",
                by_service(),
            ),
            exported: Reflector::start_keeping(
                Api::all(hub.clone()),
                watcher::Config::default().labels(&format!("!{}", labels::OUTBOX)),
                stop.clone(),
                "hub exportedservices",
                by_service(),
                Managed::OwnMetadata,
            ),
            clusters: Reflector::start(
                Api::all(hub.clone()),
                watcher::Config::default(),
                stop.clone(),
                "hub clusters",
                None,
            ),
        }
    }
}

/// What a member that leaves the clusterset keeps of MCS: nothing imported (its
/// ServiceImports, derived Services and MCS EndpointSlices go) and no export that says
/// it is exported (each ServiceExport's `Ready` turns False, its `Conflict` goes).
/// Returns how many objects went or were rewritten.
/// Both halves are attempted whatever the other's outcome; the error says which failed.
pub async fn leave(member: &kube::Client) -> anyhow::Result<usize> {
    use anyhow::Context;
    let withdrawn = importer::withdraw_all(member)
        .await
        .context("withdrawing the imports (ServiceImports, derived Services, MCS EndpointSlices)");
    let marked = exporter::mark_left(member)
        .await
        .context("marking the ServiceExports no longer exported");
    match (withdrawn, marked) {
        (Ok(a), Ok(b)) => Ok(a + b),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(anyhow::anyhow!("{a:#}; and {b:#}")),
    }
}

/// `Valid=False` reason of a ServiceExport in a namespace nothing is exported from
/// (see [`reserved_namespace`]).
pub const RESERVED_NAMESPACE: &str = "ReservedNamespace";

/// Pure: why nothing is exported from namespace `ns` (None: Services there may be).
/// Exports land in the hub namespace of the same name (NS-1): not in Causeway's own
/// (`causeway-system`, the outboxes `causeway-es-*`), nor in Kubernetes' (`kube-*`),
/// where the hub's own components (kube-proxy, CoreDNS) act on what is written. The
/// exporter refuses these for Push members and Pull members' agents alike (a
/// `Valid=False` condition on the ServiceExport), and the relay refuses them as origins
/// of outbox objects, so a lying agent cannot publish there either.
pub fn reserved_namespace(ns: &str) -> Option<String> {
    use causeway_crds::well_known::{
        EXECUTION_NAMESPACE_PREFIX, KUBERNETES_NAMESPACE_PREFIX, SYSTEM_NAMESPACE,
    };
    if ns == SYSTEM_NAMESPACE || ns.starts_with(EXECUTION_NAMESPACE_PREFIX) {
        return Some(format!(
            "namespace {ns:?} is Causeway's own: nothing is exported from it to the clusterset; export the Service from another namespace"
        ));
    }
    if ns.starts_with(KUBERNETES_NAMESPACE_PREFIX) {
        return Some(format!(
            "namespace {ns:?} is reserved for Kubernetes' own ({KUBERNETES_NAMESPACE_PREFIX}*), where the hub's own components would act on what is exported: nothing is exported from it to the clusterset; export the Service from another namespace"
        ));
    }
    None
}

/// The source cluster of a hub or member MCS EndpointSlice ("" without the label).
pub fn source_cluster(s: &EndpointSlice) -> &str {
    use kube::ResourceExt;
    s.labels()
        .get(labels::SOURCE_CLUSTER)
        .map_or("", String::as_str)
}

/// How many services a part of an MCS round covers (see
/// `causeway_runtime::reflect::Dirty::parts`): a loop holds the desired objects of
/// this many services at once, not those of every changed service (with 1,000
/// services, the importers' and exporters' rounds held ~80 MB of desired slices at
/// once through their writes; benches/results/mcs.md).
pub(crate) const ROUND_PART: usize = 100;

/// The service keys of cached objects, for a full round's parts.
pub(crate) fn service_keys<K: kube::ResourceExt>(
    items: &[std::sync::Arc<K>],
) -> Vec<crate::watch::ServiceKey> {
    items
        .iter()
        .filter_map(|o| crate::watch::service_key(o.as_ref()))
        .collect()
}
