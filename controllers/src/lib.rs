//! Causeway's control plane: the member registry, the Multi-Cluster Services
//! controllers (exporter, aggregator, importer), the MultiClusterIngress controller,
//! the per-member worker list ([`member`]), and MCS keys over the shared caches.
//! The `causeway` binary (src/main.rs) wires them to the command line.

pub mod agent;
pub mod clusters;
pub mod condition;
pub mod controller;
pub mod gateway;
pub mod mci;
pub mod mcs;
pub mod member;
pub mod metrics;
pub mod propagation;
pub mod search;
pub mod watch;
pub mod webhook;
