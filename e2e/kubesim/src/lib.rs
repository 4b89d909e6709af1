//! kubesim: a Kubernetes API server for tests and local runs.
//!
//! It speaks the Kubernetes REST API (JSON, watches, the four patch types,
//! server-side apply, discovery, OpenAPI, Tables) closely enough that kube-rs and
//! kubectl cannot tell it from kube-apiserver for what Causeway and its users do.
//! Objects are kept as JSON, in memory (optionally journaled to disk), behind one
//! global resourceVersion.
//!
//! Three layers, each using only the ones below it:
//! - [`http`]: the server, routing, content negotiation, authentication and RBAC,
//!   discovery and OpenAPI, watch streams;
//! - [`verbs`]: get, list, create, update, patch, delete and watch semantics;
//! - [`state`]: the object store, watch history, served types, and the rules
//!   (validation, defaulting, SSA, finalizers, GC), as plain Rust over JSON values.
//!
//! [`error`] (API errors as `metav1.Status`) is shared by all three; [`kubeconfig`]
//! writes files for clients.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubesim::StartError> {
//! let hub = kubesim::Server::start(kubesim::Config::new("hub")).await?;
//! std::fs::write("/tmp/hub.kubeconfig", hub.kubeconfig()).ok();
//! # Ok(()) }
//! ```

pub mod error;
pub mod http;
pub mod kubeconfig;
pub mod state;
pub mod testing;
pub mod verbs;

pub use http::auth::User;
pub use http::context::{Config, Faults};
pub use http::server::{Server, StartError};
pub use state::ipam::Cidr;
pub use state::sim::nodes::NodeCapacity;
