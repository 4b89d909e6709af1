//! One cluster's mutable state: its objects, the types it serves and its address
//! allocations, kept together behind the server's one lock.

use crate::state::ipam::Ipam;
use crate::state::registry::Registry;
use crate::state::store::Store;

/// The mutable state of one server.
pub struct State {
    /// Objects.
    pub store: Store,
    /// Served types.
    pub registry: Registry,
    /// Address allocations.
    pub ipam: Ipam,
    /// The CA that signs the server's certificate (PEM; `None` without TLS): what every
    /// namespace's `kube-root-ca.crt` ConfigMap publishes.
    pub root_ca: Option<String>,
}
