//! The indexer: for every Ready member and every configured resource type
//! ([`ResourceSpec`]), a list+watch that streams the member's objects into the store.

mod spec;

pub use spec::{ResourceSpec, SpecError, default_resources, parse_all};
