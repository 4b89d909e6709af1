//! The verbs layer: get, list, create, update, patch, delete, deletecollection and
//! watch with kube-apiserver's metadata, concurrency and status rules, on top of the
//! state layer ([`crate::state`]) and below HTTP ([`crate::http::api`] routes to them).
//!
//! A verb takes the cluster's state, the resource type, the object's place and the
//! request's facts ([`request::Req`]) and answers with a status code and body
//! ([`output`]); writes check their input first ([`admit`]).

pub mod admit;
pub mod binding;
pub mod create;
pub mod delete;
pub mod output;
pub mod patch;
pub mod read;
pub mod request;
pub mod scale;
pub mod update;
pub mod watch;
