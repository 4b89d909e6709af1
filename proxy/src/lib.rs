//! causeway-proxy: the MultiClusterIngress L7 reverse proxy.
//!
//! Hub objects (MultiClusterIngress, IngressClass, ServiceImport, ExportedService,
//! EndpointSlice, TLS Secrets) are watched ([`watch`]) and turned by a pure function
//! ([`table::build`]) into an immutable [`table::RouteTable`], swapped in with
//! `arc-swap`. Requests match host and path ([`matching`], MCI-5), pick an endpoint
//! ([`balance`]: cluster locality, P2C over peak-EWMA, round robin, least request,
//! Maglev), and are forwarded over pooled upstream connections.

pub mod annotations;
pub mod balance;
pub mod circuit;
pub mod clock;
pub mod endpoint;
pub mod health;
pub mod matching;
pub mod metrics;
pub mod table;
pub mod upstream;
