//! Causeway API types, well-known names, and the CRD generator.
//!
//! - [`about`]: `about.k8s.io` ClusterProperty (KEP-2149 cluster id and clusterset membership).
//! - [`mcs`]: `multicluster.x-k8s.io` ServiceExport / ServiceImport (v1beta1 and v1alpha1).
//! - [`mci`]: `networking.karmada.io/v1alpha1` MultiClusterIngress.
//! - [`gateway`]: Gateway API `gateway.networking.k8s.io` GatewayClass, Gateway,
//!   HTTPRoute (v1) and ReferenceGrant (v1beta1), the subset causeway-proxy serves.
//! - [`exported_service`]: `causeway.io/v1alpha1` ExportedService (exporter → hub).
//! - [`federation`]: `causeway.io/v1alpha1` Cluster, PropagationPolicy,
//!   ClusterPropagationPolicy, OverridePolicy, ClusterOverridePolicy, Work.
//! - [`well_known`]: label, annotation and finalizer keys and other fixed names.
//! - [`names`]: derived names (derived Services, execution namespaces, ...).
//! - [`crdgen`]: [`crdgen::all_crds`] and YAML rendering for `deploy/crds`.
//! - [`quantity`]: resource quantities read exactly (cluster summaries, replica estimates).

// kube-derive's `printcolumn(name = .., type_ = .., json_path = ..)` repeats the same
// keys once per column, which this lint mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]
// Doc comments of API fields become the CRD field descriptions, which keep the
// upstream (mcs-api, Kubernetes) wording, bare URLs included.
#![allow(rustdoc::bare_urls)]

pub mod about;
pub mod cel;
pub mod crdgen;
pub mod exported_service;
pub mod federation;
pub mod gateway;
pub mod mci;
pub mod mcs;
pub mod names;
pub mod quantity;
mod schema;
pub mod well_known;
