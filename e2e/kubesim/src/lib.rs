//! kubesim: a Kubernetes API server for tests and local runs.
//!
//! It speaks the Kubernetes REST API (JSON, watches, the four patch types,
//! server-side apply, discovery, OpenAPI, Tables) closely enough that kube-rs and
//! kubectl cannot tell it from kube-apiserver for what Causeway and its users do.
//! Objects are kept as JSON, in memory, behind one global resourceVersion.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubesim::StartError> {
//! let hub = kubesim::Server::start(kubesim::Config::new("hub")).await?;
//! std::fs::write("/tmp/hub.kubeconfig", hub.kubeconfig()).ok();
//! # Ok(()) }
//! ```

pub mod api;
pub mod auth;
pub mod controllers;
pub mod convert;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod ipam;
pub mod kinds;
pub mod kubeconfig;
pub mod meta;
pub mod metrics;
pub mod objects;
pub mod openapi;
pub mod patch;
pub mod persist;
pub mod protobuf;
pub mod registry;
pub mod selectors;
pub mod server;
pub mod ssa;
pub mod store;
pub mod table;
pub mod tls;
pub mod tokens;
pub mod watch;

pub use auth::User;
pub use ipam::Cidr;
pub use server::{Config, Faults, Server, StartError};
