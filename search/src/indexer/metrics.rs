//! The indexer's metrics (Prometheus), registered into the caller's registry under
//! `search_indexer_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels: a member and a resource type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabels {
    /// Member name.
    pub cluster: String,
    /// The type as `[group/]version/resource`.
    pub resource: String,
}

/// What the indexer did and where it stands; cheap to clone (every clone counts into
/// the same series).
#[derive(Clone, Debug, Default)]
pub struct IndexerMetrics {
    pub(crate) written: Counter,
    pub(crate) unchanged: Counter,
    pub(crate) deleted: Counter,
    pub(crate) outages: Counter,
    pub(crate) store_up: Gauge,
    pub(crate) synchros: Gauge,
    pub(crate) synced: Gauge,
    pub(crate) backlog: Gauge,
    pub(crate) listing: Gauge,
    pub(crate) unserved: Family<TypeLabels, Gauge>,
    pub(crate) refused: Family<TypeLabels, Gauge>,
    pub(crate) purged: Counter,
}

impl IndexerMetrics {
    /// The metrics, registered into `registry` (prefix `search_indexer`).
    pub fn new(registry: &mut Registry) -> IndexerMetrics {
        let m = IndexerMetrics::default();
        let r = registry.sub_registry_with_prefix("search_indexer");
        r.register(
            "objects_written",
            "Objects inserted or updated in the store",
            m.written.clone(),
        );
        r.register(
            "objects_unchanged",
            "Objects listed or watched whose resourceVersion the store already had: not written",
            m.unchanged.clone(),
        );
        r.register(
            "objects_deleted",
            "Objects deleted from the store (watched deletions, and stored objects a relist no longer found)",
            m.deleted.clone(),
        );
        r.register(
            "store_outages",
            "Times the store failed writes after retries: every watch paused until it answered again, then relisted",
            m.outages.clone(),
        );
        r.register(
            "store_up",
            "1 while the store takes writes, 0 during an outage",
            m.store_up.clone(),
        );
        r.register(
            "synchros",
            "Sessions (one per member and resource type) listing or watching into the store, or retrying a list that failed (see refused)",
            m.synchros.clone(),
        );
        r.register(
            "synced",
            "Synchros whose last list is complete in the store and whose watch is not failing (what the store holds of their member and type is current)",
            m.synced.clone(),
        );
        r.register(
            "backlog",
            "Changes read from members and not yet written to the store (bounded: about 500 per watch)",
            m.backlog.clone(),
        );
        r.register(
            "listing",
            "Synchros comparing a full list with the store now (at most 4 at once: each holds its stored keys in memory)",
            m.listing.clone(),
        );
        r.register(
            "unserved",
            "1 while a member does not serve a configured resource type (retried)",
            m.unserved.clone(),
        );
        r.register(
            "refused",
            "1 while a member refuses (401, 403) to list a configured resource type to the indexer's credentials (retried with a backoff growing to 5 min)",
            m.refused.clone(),
        );
        r.register(
            "objects_purged",
            "Objects removed because their member left the fleet, or (at start) because no resource spec covers their type for their member any more",
            m.purged.clone(),
        );
        m
    }
}
