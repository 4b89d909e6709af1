//! The kubectl-compatible search API (in progress).
