//! Multi-Cluster Services: exporter (member → hub), aggregator (hub), importer (hub → member).

pub mod aggregator;
pub mod exporter;
pub mod importer;
