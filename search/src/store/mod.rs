//! The index's storage: one query layer over an embedded SQLite database (the default,
//! one file, nothing to install) and PostgreSQL (`postgres://…`). Both hold the same
//! versioned schema: a `resources` table keyed by (group, version, resource, cluster,
//! namespace, name) with indexes on labels (a `labels` table), owner uid and creation
//! time, and a `types` table the indexer fills and the API's discovery reads.
//!
//! SQL is built at run time by one builder ([`sql`]) for both dialects; the backends only
//! run it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::query::{Query, QueryError};

/// A resource type: group (`""` for core), version, plural resource name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group, `""` for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `deployments`.
    pub resource: String,
}

/// What discovery needs to serve a type; the indexer records it when it resolves the
/// type on a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// The type.
    pub gvr: Gvr,
    /// Its kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

/// One object to store, as the indexer hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Member cluster name.
    pub cluster: String,
    /// Its type.
    pub gvr: Gvr,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion` (opaque; ordered numerically when it is a number).
    pub resource_version: String,
    /// The uid of the controller owner reference (else the first owner reference).
    pub owner_uid: Option<String>,
    /// `metadata.creationTimestamp`, Unix milliseconds.
    pub created_at: Option<i64>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The object as JSON text, without `managedFields`.
    pub object: String,
}

/// Which object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Member cluster name.
    pub cluster: String,
    /// Its type.
    pub gvr: Gvr,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows inserted or updated.
    pub written: u64,
    /// Records whose stored resourceVersion was already the same: not written.
    pub unchanged: u64,
}

/// What a caller may see (hub RBAC): `None` means no restriction on that dimension.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these clusters.
    pub clusters: Option<BTreeSet<String>>,
    /// Only these namespaces.
    pub namespaces: Option<BTreeSet<String>>,
}

/// One page of results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The objects, each annotated with its cluster ([`crate::CLUSTER_ANNOTATION`]).
    pub items: Vec<Value>,
    /// The keyset continue token, when the page was full and more may follow.
    pub continue_token: Option<String>,
    /// Objects left after this page (`withRemainingCount`).
    pub remaining: Option<i64>,
}

/// A store error: an outage (retry later) or a bad query (the caller's fault, HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or refused the write; the indexer pauses and
    /// relists after recovery.
    #[error("the search store is unavailable: {0}")]
    Unavailable(String),
    /// The request cannot be run as given.
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// A store result.
pub type StoreResult<T> = Result<T, StoreError>;

/// The store's keys of one cluster and type, with their resourceVersions.
pub type Versions = BTreeMap<(String, String), String>;

/// For the labels/BTreeSet imports until the backends land.
#[allow(dead_code)]
fn _unused(_: &Query) {}
