//! causeway-runtime: what every Causeway binary shares, written once.
//!
//! - [`client`]: the Kubernetes client from `--kubeconfig` / `--context` (or a
//!   binary's own names for them), else the inferred configuration, with one
//!   behaviour everywhere.
//! - [`crds`]: installing CRDs and waiting until they are Established.
//! - [`net`]: accepting connections with one retry behaviour.
//! - [`signal`]: SIGINT and SIGTERM end the process cleanly.
//! - [`log`]: `tracing` to stderr as text or JSON, coloured only on a terminal.
//! - [`apply`]: the one applier (server-side apply of typed or dynamic objects, status,
//!   deletion and pruning by owner labels, finalizers, per-key failures).
//! - [`https`]: TLS configs from PEM files and the HTTPS accept loop.
//! - [`admin`]: the admin listener: `/metrics`, `/healthz`, `/livez`, `/readyz`.
//! - [`reflect`]: shared reflectors that wake reconcile loops with what changed.
//! - [`leader`]: leader election on a Lease, so a component runs as several replicas.
//! - [`table`]: `Table` responses with kubectl's printer columns (kubesim, search).

pub mod admin;
pub mod apply;
pub mod client;
pub mod crds;
pub mod discovery;
pub mod events;
pub mod files;
pub mod https;
pub mod leader;
pub mod log;
pub mod net;
pub mod reflect;
pub mod say;
pub mod signal;
pub mod table;
