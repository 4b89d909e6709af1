//! The indexer against kubesim members.
