//! Search across clusters (issue 15, federation.md §8 K). This crate starts with the
//! pure query model of the search API ([`query`]): what a request asks for, validated
//! with errors that say what to fix, a stable total order, and opaque keyset continue
//! tokens. The indexer and its SQLite/PostgreSQL stores build on it.

pub mod query;
