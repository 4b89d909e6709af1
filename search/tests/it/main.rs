//! Search end to end: kubesim members, real stores (SQLite in a temp dir and the
//! PostgreSQL server named by `CAUSEWAY_TEST_POSTGRES`), real kubectl.

#[macro_use]
mod support;
mod api;
mod indexer;
