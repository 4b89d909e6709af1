//! Propagation (issue 14): resource templates on the hub are claimed by a
//! PropagationPolicy or ClusterPropagationPolicy, scheduled onto member clusters and
//! recorded in a ResourceBinding (namespaced templates) or ClusterResourceBinding
//! (cluster-scoped templates); each binding is rendered, with its overrides, into one
//! `Work` per cluster, which the member's work applier server-side applies.
//!
//! - [`detector`]: the pure step of the detector, from templates, policies, clusters
//!   and the current bindings to the bindings that should exist.
//! - [`render`]: binding + template + overrides → Works.
//! - [`status`]: Works → the binding's aggregated status and the template's `.status`.
//! - [`applier`]: a member's Works → objects in the member, and their status.
//! - [`hub`]: the hub's loop that runs the detector, renders and aggregates; [`kinds`]
//!   its watches of templates of any kind.

pub mod applier;
pub mod detector;
pub mod hub;
pub mod kinds;
pub mod render;
pub mod status;
