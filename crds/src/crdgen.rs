//! The CustomResourceDefinitions of every kind in this crate, and their YAML
//! rendering for `deploy/crds` (`causeway crds write --dir deploy/crds`).
//!
//! kube-derive produces one single-version CRD per Rust type; the MCS kinds are
//! served in two versions, so [`merge_versions`] combines their CRDs after
//! checking that the schemas are identical.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::core::crd::{MergeError, merge_crds};
use thiserror::Error;

use crate::about;
use crate::exported_service::ExportedService;
use crate::federation::binding::{ClusterResourceBinding, ResourceBinding};
use crate::federation::cluster::Cluster;
use crate::federation::interpreter::ResourceInterpreter;
use crate::federation::overrides::{ClusterOverridePolicy, OverridePolicy};
use crate::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use crate::federation::work::Work;
use crate::gateway::{Gateway, GatewayClass, HTTPRoute, ReferenceGrant};
use crate::mci::MultiClusterIngress;
use crate::mcs::{v1alpha1, v1beta1};
use crate::well_known::{MCS_CRD_SCHEMA_REVISION, MCS_RELEASE_VERSION, labels};

pub mod install;
pub mod structural;

/// First line of every rendered CRD file; `causeway crds write` only ever
/// removes files that start with it.
pub const GENERATED_HEADER: &str = "# Generated from the Rust types in crds/ by `causeway crds write --dir deploy/crds`; do not edit.\n";

/// Errors while building or rendering CRDs.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CrdError {
    /// kube refused to merge the per-version CRDs of one kind.
    #[error("cannot merge the versions of CRD {name}: {source}")]
    Merge {
        /// The CRD's name.
        name: String,
        /// Why kube refused.
        #[source]
        source: MergeError,
    },
    /// Two versions of one kind differ in something other than their name.
    #[error(
        "versions {storage} and {other} of CRD {name} differ in {what}; served versions must be identical because there is no conversion webhook"
    )]
    VersionMismatch {
        /// The CRD's name.
        name: String,
        /// The storage version.
        storage: String,
        /// The differing version.
        other: String,
        /// Which part differs (schema, printer columns, subresources).
        what: &'static str,
    },
    /// serde-saphyr could not render a CRD.
    #[error("cannot render CRD {name} as YAML: {message}")]
    Render {
        /// The CRD's name.
        name: String,
        /// The serializer's message.
        message: String,
    },
}

/// Merges single-version CRDs of one kind into one CRD that serves all of their
/// versions, with `storage` (a version name) as the storage version. Fails if the
/// versions differ in schema, printer columns or subresources. Versions are listed
/// in name order.
pub fn merge_versions(
    crds: Vec<CustomResourceDefinition>,
    storage: &str,
) -> Result<CustomResourceDefinition, CrdError> {
    let name = crds
        .first()
        .and_then(|c| c.metadata.name.clone())
        .unwrap_or_default();
    let mut merged = merge_crds(crds, storage).map_err(|source| CrdError::Merge {
        name: name.clone(),
        source,
    })?;
    let versions = &mut merged.spec.versions;
    let reference = versions[0].clone();
    for v in versions.iter().skip(1) {
        let differs = |what| CrdError::VersionMismatch {
            name: name.clone(),
            storage: reference.name.clone(),
            other: v.name.clone(),
            what,
        };
        if v.schema != reference.schema {
            return Err(differs("schema"));
        }
        if v.additional_printer_columns != reference.additional_printer_columns {
            return Err(differs("printer columns"));
        }
        if v.subresources != reference.subresources {
            return Err(differs("subresources"));
        }
    }
    versions.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(merged)
}

/// The ServiceExport and ServiceImport CRDs: v1beta1 (storage) and v1alpha1, both
/// served, with the mcs-api release labels (API-8).
pub fn mcs_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let mut export = merge_versions(
        vec![
            v1beta1::ServiceExport::crd(),
            v1alpha1::ServiceExport::crd(),
        ],
        "v1beta1",
    )?;
    // mcs-api: a ServiceExport's spec is optional (an export with only metadata
    // is the common case).
    optional_spec(&mut export);
    let import = merge_versions(
        vec![
            v1beta1::ServiceImport::crd(),
            v1alpha1::ServiceImport::crd(),
        ],
        "v1beta1",
    )?;
    let mut crds = vec![export, import];
    for crd in &mut crds {
        let labels = crd.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(
            labels::MCS_RELEASE_VERSION.into(),
            MCS_RELEASE_VERSION.into(),
        );
        labels.insert(
            labels::MCS_CRD_SCHEMA_REVISION.into(),
            MCS_CRD_SCHEMA_REVISION.into(),
        );
    }
    Ok(crds)
}

/// The About API's ClusterProperty CRD: v1beta1 (storage) and v1alpha1, both served.
pub fn about_crd() -> Result<CustomResourceDefinition, CrdError> {
    merge_versions(
        vec![
            about::v1beta1::ClusterProperty::crd(),
            about::v1alpha1::ClusterProperty::crd(),
        ],
        "v1beta1",
    )
}

/// The MultiClusterIngress CRD. As in Karmada's CRD the spec is optional.
pub fn mci_crd() -> CustomResourceDefinition {
    let mut crd = MultiClusterIngress::crd();
    optional_spec(&mut crd);
    crd
}

/// Every CRD Causeway installs, in a fixed order: MCS, the About API's
/// ClusterProperty, MultiClusterIngress, the `causeway.io` kinds, then the Gateway API
/// kinds causeway-proxy serves. Each carries the `causeway.io/release-version` label
/// (see [`install`]).
pub fn try_all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let mut crds = mcs_crds()?;
    crds.push(about_crd()?);
    crds.push(mci_crd());
    crds.extend([
        Cluster::crd(),
        ExportedService::crd(),
        PropagationPolicy::crd(),
        ClusterPropagationPolicy::crd(),
        OverridePolicy::crd(),
        ClusterOverridePolicy::crd(),
        ResourceInterpreter::crd(),
        Work::crd(),
        ResourceBinding::crd(),
        ClusterResourceBinding::crd(),
        GatewayClass::crd(),
        Gateway::crd(),
        HTTPRoute::crd(),
        ReferenceGrant::crd(),
    ]);
    for crd in &mut crds {
        crd.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::RELEASE_VERSION.into(), install::RELEASE.into());
    }
    Ok(crds)
}

/// Every CRD Causeway installs (see [`try_all_crds`]).
///
/// # Panics
///
/// Only if the Rust types of two served versions of a kind have drifted apart,
/// which this crate's tests rule out.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    try_all_crds().expect("the built-in CRD versions are consistent")
}

/// The file name of a CRD in `deploy/crds`: `<plural>.<group>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.{}.yaml", crd.spec.names.plural, crd.spec.group)
}

/// Renders one CRD as a YAML document, preceded by [`GENERATED_HEADER`].
pub fn render_crd(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let yaml = serde_saphyr::to_string(crd).map_err(|e| CrdError::Render {
        name: crd.metadata.name.clone().unwrap_or_default(),
        message: e.to_string(),
    })?;
    Ok(format!("{GENERATED_HEADER}{yaml}"))
}

/// A rendered CRD file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedCrd {
    /// `<plural>.<group>.yaml`.
    pub file_name: String,
    /// The file's content.
    pub yaml: String,
}

/// Renders every CRD of [`try_all_crds`] to its `deploy/crds` file.
pub fn render_all() -> Result<Vec<RenderedCrd>, CrdError> {
    try_all_crds()?
        .iter()
        .map(|crd| {
            Ok(RenderedCrd {
                file_name: crd_file_name(crd),
                yaml: render_crd(crd)?,
            })
        })
        .collect()
}

/// Renders every CRD as one multi-document YAML stream (`causeway crds print`).
pub fn render_all_multi_doc() -> Result<String, CrdError> {
    let docs = render_all()?;
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&doc.yaml);
    }
    Ok(out)
}

/// Makes `spec` optional at the root of every version's schema (kube-derive always
/// requires it). Only for kinds whose Rust spec type decodes a missing spec as an
/// empty one.
fn optional_spec(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        if let Some(required) = root.required.as_mut() {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                root.required = None;
            }
        }
    }
}

/// The `openAPIV3Schema` of version `version` of `crd`, if present.
pub fn version_schema<'a>(
    crd: &'a CustomResourceDefinition,
    version: &str,
) -> Option<&'a JSONSchemaProps> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion;

    fn find<'a>(crds: &'a [CustomResourceDefinition], name: &str) -> &'a CustomResourceDefinition {
        crds.iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no CRD {name}"))
    }

    #[test]
    fn mcs_crds_serve_two_identical_versions_with_v1beta1_storage() {
        let crds = all_crds();
        for name in [
            "serviceexports.multicluster.x-k8s.io",
            "serviceimports.multicluster.x-k8s.io",
        ] {
            let crd = find(&crds, name);
            let versions: Vec<_> = crd
                .spec
                .versions
                .iter()
                .map(|v| (v.name.as_str(), v.served, v.storage))
                .collect();
            assert_eq!(
                versions,
                [("v1alpha1", true, false), ("v1beta1", true, true)],
                "{name}"
            );
            assert_eq!(
                crd.spec.versions[0].schema, crd.spec.versions[1].schema,
                "{name}"
            );
            let labels = crd.metadata.labels.as_ref().expect("labels");
            assert_eq!(labels[labels::MCS_RELEASE_VERSION], MCS_RELEASE_VERSION);
            assert_eq!(
                labels[labels::MCS_CRD_SCHEMA_REVISION],
                MCS_CRD_SCHEMA_REVISION
            );
            assert_eq!(crd.spec.scope, "Namespaced");
            assert!(
                crd.spec
                    .versions
                    .iter()
                    .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some()))
            );
        }
    }

    #[test]
    fn merge_rejects_differing_schemas() {
        let a = v1beta1::ServiceExport::crd();
        let mut b = v1alpha1::ServiceExport::crd();
        b.spec.versions[0].schema = v1alpha1::ServiceImport::crd().spec.versions[0]
            .schema
            .clone();
        let err = merge_versions(vec![a, b], "v1beta1").unwrap_err();
        assert!(
            matches!(err, CrdError::VersionMismatch { what: "schema", .. }),
            "{err}"
        );
    }

    #[test]
    fn mcs_names_printer_columns_and_short_names() {
        let crds = all_crds();
        let import = find(&crds, "serviceimports.multicluster.x-k8s.io");
        assert_eq!(
            import.spec.names.short_names.as_deref(),
            Some(&["svcim".to_string(), "svcimport".to_string()][..])
        );
        for v in &import.spec.versions {
            let cols: Vec<_> = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| (c.name.as_str(), c.json_path.as_str()))
                .collect();
            assert_eq!(
                cols,
                [
                    ("Type", ".spec.type"),
                    ("IP", ".spec.ips"),
                    ("Age", ".metadata.creationTimestamp")
                ]
            );
        }
        let export = find(&crds, "serviceexports.multicluster.x-k8s.io");
        assert_eq!(
            export.spec.names.short_names.as_deref(),
            Some(&["svcex".to_string(), "svcexport".to_string()][..])
        );
        for v in &export.spec.versions {
            let cols: Vec<_> = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(cols, ["Age"]);
        }
    }

    #[test]
    fn service_export_spec_is_optional_and_service_import_type_required() {
        let crds = all_crds();
        let export = version_schema(
            find(&crds, "serviceexports.multicluster.x-k8s.io"),
            "v1beta1",
        )
        .unwrap();
        assert!(
            export
                .required
                .as_ref()
                .is_none_or(|r| !r.iter().any(|f| f == "spec"))
        );
        let import = version_schema(
            find(&crds, "serviceimports.multicluster.x-k8s.io"),
            "v1beta1",
        )
        .unwrap();
        let spec = &import.properties.as_ref().unwrap()["spec"];
        assert_eq!(
            spec.required.as_deref(),
            Some(&["ports".to_string(), "type".to_string()][..])
        );
        let props = spec.properties.as_ref().unwrap();
        assert!(!props.contains_key("targetPort"));
        assert_eq!(props["ips"].max_items, Some(2));
        assert_eq!(props["ipFamilies"].max_items, Some(2));
        assert_eq!(
            props["ports"].x_kubernetes_list_type.as_deref(),
            Some("atomic")
        );
    }

    #[test]
    fn file_names_are_plural_dot_group() {
        let names: Vec<_> = render_all()
            .unwrap()
            .into_iter()
            .map(|r| r.file_name)
            .collect();
        assert!(names.contains(&"serviceimports.multicluster.x-k8s.io.yaml".to_string()));
        assert!(names.contains(&"multiclusteringresses.networking.karmada.io.yaml".to_string()));
        assert!(names.contains(&"works.causeway.io.yaml".to_string()));
        assert!(names.contains(&"resourcebindings.causeway.io.yaml".to_string()));
        assert!(names.contains(&"clusterresourcebindings.causeway.io.yaml".to_string()));
        assert!(names.contains(&"httproutes.gateway.networking.k8s.io.yaml".to_string()));
        assert!(names.contains(&"clusterproperties.about.k8s.io.yaml".to_string()));
        assert_eq!(names.len(), 18);
    }

    #[test]
    fn every_crd_is_structural() {
        let problems: Vec<String> = all_crds().iter().flat_map(structural::violations).collect();
        assert!(
            problems.is_empty(),
            "structural schema violations:\n{}",
            problems.join("\n")
        );
    }

    /// x-kubernetes-list-type and x-kubernetes-list-map-keys of an array.
    type ListSemantics = (Option<String>, Vec<String>);

    /// Every array in the schema of `version`: its path and list semantics.
    fn arrays_of(version: &CustomResourceDefinitionVersion) -> Vec<(String, ListSemantics)> {
        fn walk(schema: &serde_json::Value, path: String, out: &mut Vec<(String, ListSemantics)>) {
            if schema["type"] == "array" {
                let list_type = schema["x-kubernetes-list-type"].as_str().map(str::to_owned);
                let keys = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect();
                out.push((path.clone(), (list_type, keys)));
            }
            for (k, v) in schema["properties"].as_object().into_iter().flatten() {
                walk(v, format!("{path}.{k}"), out);
            }
            if let Some(items) = schema.get("items") {
                walk(items, format!("{path}[]"), out);
            }
            if let Some(additional) = schema.get("additionalProperties") {
                walk(additional, format!("{path}.*"), out);
            }
        }
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref());
        let mut out = Vec::new();
        walk(
            &serde_json::to_value(schema).unwrap(),
            String::new(),
            &mut out,
        );
        out
    }

    #[test]
    fn list_types_are_declared_where_merging_needs_them() {
        let map = |key: &str| (Some("map".to_string()), vec![key.to_string()]);
        let atomic = || (Some("atomic".to_string()), Vec::new());
        let mcs_import = "serviceimports.multicluster.x-k8s.io";
        let mci = "multiclusteringresses.networking.karmada.io";
        let expected: &[(&str, &str, ListSemantics)] = &[
            (mcs_import, ".spec.ports", atomic()),
            (mcs_import, ".status.clusters", map("cluster")),
            (mcs_import, ".status.conditions", map("type")),
            (
                "serviceexports.multicluster.x-k8s.io",
                ".status.conditions",
                map("type"),
            ),
            (mci, ".spec.rules", atomic()),
            (mci, ".spec.rules[].http.paths", atomic()),
            (mci, ".spec.tls", atomic()),
            (mci, ".spec.tls[].hosts", atomic()),
            (mci, ".status.loadBalancer.ingress", atomic()),
            (mci, ".status.loadBalancer.ingress[].ports", atomic()),
            ("exportedservices.causeway.io", ".spec.ports", atomic()),
            (
                "clusters.causeway.io",
                ".status.apiEnablements",
                map("groupVersion"),
            ),
        ];
        let bindings = [
            "resourcebindings.causeway.io",
            "clusterresourcebindings.causeway.io",
        ];
        let binding_lists = bindings.iter().flat_map(|crd| {
            [
                (*crd, ".spec.clusters", map("name")),
                (*crd, ".status.aggregatedStatus", map("clusterName")),
                (*crd, ".status.schedulingReasons", map("cluster")),
            ]
        });
        let expected: Vec<_> = expected.iter().cloned().chain(binding_lists).collect();
        let crds = all_crds();
        for (crd_name, path, want) in &expected {
            for v in &find(&crds, crd_name).spec.versions {
                let arrays = arrays_of(v);
                let got = arrays.iter().find(|(p, _)| p == path).map(|(_, l)| l);
                assert_eq!(got, Some(want), "{crd_name}/{} {path}", v.name);
            }
        }
        // Every `conditions` list is a map keyed by type, so that server-side apply
        // merges conditions written by different controllers.
        for crd in &crds {
            for v in &crd.spec.versions {
                for (path, list) in arrays_of(v)
                    .iter()
                    .filter(|(p, _)| p.ends_with(".conditions"))
                {
                    let name = crd.metadata.name.as_deref().unwrap_or_default();
                    assert_eq!(list, &map("type"), "{name}/{} {path}", v.name);
                }
            }
        }
    }

    #[test]
    fn rendering_is_deterministic_and_parses_back() {
        let a = render_all_multi_doc().unwrap();
        let b = render_all_multi_doc().unwrap();
        assert_eq!(a, b);
        let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&a).unwrap();
        assert_eq!(docs, all_crds());
    }
}
