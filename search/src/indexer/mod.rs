//! The indexer (in progress).
