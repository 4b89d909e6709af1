//! Member clusters: registration (`join`/`unjoin`) and the registry the controller follows.

pub mod health;
pub mod join;
pub mod monitor;
pub mod options;
pub mod registry;
pub mod status;
pub mod summary;
