//! Member clusters: registration (`join`/`unjoin`) and the registry the controller follows.

pub mod join;
pub mod registry;
