//! The state layer: one cluster's objects and the rules kube-apiserver's storage and
//! registry apply to them, as plain Rust over `serde_json` values (no HTTP here).
//! The verbs ([`crate::verbs`]) are built on it.
//!
//! - [`store`] keeps objects behind one global resourceVersion with a bounded event
//!   history ([`stored`] has the units it keeps); [`persist`] journals it to disk.
//! - [`registry`] and [`crd`] say which types are served and how (printer columns:
//!   `causeway_runtime::table::columns`).
//! - [`meta`], [`kinds`], [`crd`] and [`ssa`] / [`patch`] are the admission-like rules:
//!   metadata, per-kind defaulting and allocation ([`ipam`]), fields kept on update
//!   ([`immutable`]), schemas, field ownership.
//! - [`deletion`] and [`controllers`] are finalizers and garbage collection.
//! - [`convert`] and [`selectors`] are how objects are shown and filtered (Tables:
//!   `causeway_runtime::table`).
//! - [`cluster`] ties it together; [`bootstrap`] fills a new or restored cluster.

pub mod bootstrap;
pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod crd;
pub mod defaults;
pub mod deletion;
pub mod immutable;
pub mod ipam;
pub mod kinds;
pub mod limits;
pub mod match_conditions;
pub mod meta;
pub mod patch;
pub mod persist;
pub mod pod_update;
pub mod priority;
pub mod quantity;
pub mod quota;
pub mod rbac;
pub mod registry;
pub mod selectors;
pub mod sim;
pub mod ssa;
pub mod store;
pub mod stored;
pub mod tolerations;
