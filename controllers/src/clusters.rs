//! Member clusters: registration (`join`/`unjoin`) and the registry the controller follows.

pub mod finalize;
pub mod health;
pub mod join;
pub mod lease;
pub mod monitor;
pub mod options;
pub mod register;
pub mod registry;
pub mod status;
pub mod summary;
