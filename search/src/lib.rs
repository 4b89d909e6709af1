//! Search across clusters (issue 15, federation.md §8 K): an indexer streams objects of
//! the member clusters ([`indexer`]) into a store ([`store`]: SQLite by default,
//! PostgreSQL by one flag), and a kubectl-compatible API ([`api`]) serves lists across
//! every member, filtered by what the caller may list on the hub. [`query`] is the pure
//! query model: validated parameters, a stable total order, keyset continue tokens.

pub mod api;
pub mod cli;
pub mod indexer;
pub mod positions;
pub mod query;
pub mod store;

/// The annotation each result carries: the member cluster it came from.
pub const CLUSTER_ANNOTATION: &str = "search.causeway.io/cluster";
