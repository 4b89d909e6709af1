//! The HTTP layer: the server (TLS, HTTP/1.1 and HTTP/2, fault knobs), routing and
//! content negotiation, authentication and RBAC, discovery and OpenAPI, watch streams,
//! TokenRequest and `/metrics`. It parses requests into what the verbs
//! ([`crate::verbs`]) need and writes their answers back.

pub mod api;
pub mod auth;
pub mod cluster_dns;
pub mod context;
pub mod discovery;
pub mod impersonate;
pub mod metrics;
pub mod openapi;
pub mod path;
pub mod protobuf;
pub mod response;
pub mod reviews;
pub mod server;
pub mod service_proxy;
pub mod tls;
pub mod tokens;
pub mod watch;
pub mod webhooks;
