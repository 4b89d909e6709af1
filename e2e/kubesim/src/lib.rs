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
pub mod discovery;
pub mod error;
pub mod kubeconfig;
pub mod metrics;
pub mod openapi;
pub mod protobuf;
pub mod server;
pub mod state;
pub mod tls;
pub mod tokens;
pub mod verbs;
pub mod watch;

pub use auth::User;
pub use server::{Config, Faults, Server, StartError};
pub use state::ipam::Cidr;
