//! Propagation (issue 14): resource templates on the hub are claimed by a
//! PropagationPolicy or ClusterPropagationPolicy, scheduled onto member clusters and
//! recorded in a ResourceBinding (namespaced templates) or ClusterResourceBinding
//! (cluster-scoped templates).
//!
//! - [`detector`]: the pure step of the detector, from templates, policies, clusters
//!   and the current bindings to the bindings that should exist.

pub mod detector;
