//! kube-rs behaviour tests for kubesim: every test starts its own server on a free
//! port, talks to it over TLS with a real `kube::Client`, and checks what a user of
//! kube-apiserver would see.

mod helpers;

mod auth;
mod binary;
mod crd;
mod crud;
mod errors;
mod events;
mod faults;
mod finalizers;
mod gc;
mod immutable;
mod nodes;
mod pagination;
mod patch;
mod pod_update;
mod priority;
mod quota;
mod reviews;
mod scale;
mod selectors;
mod services;
mod ssa;
mod status;
mod tls;
mod tokens;
mod tolerations;
mod validation;
mod watch;
mod webhooks;
mod workload_status;
mod workloads;
mod writes;
