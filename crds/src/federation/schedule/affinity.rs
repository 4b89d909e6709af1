//! Matching one Cluster against a [`ClusterAffinity`]: the label selector on the
//! Cluster object's labels, the field selector on its effective provider, region and
//! zones, `clusterNames` and `exclude`; and the validation of both selectors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_validation::FieldError;

use super::Reason;
use crate::federation::cluster::Cluster;
use crate::federation::selection::labels as label_selector;
use crate::federation::{ClusterAffinity, field_selector_keys};

/// Why `affinity` does not select `cluster` (exclude, clusterNames, labelSelector,
/// fieldSelector, in that order); `None` when it does. Requirements that do not
/// validate (see [`validate_affinity`]) match no cluster.
pub fn affinity_rejects(affinity: &ClusterAffinity, cluster: &Cluster) -> Option<Reason> {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    if affinity.exclude.iter().any(|n| n == name) {
        return Some(Reason::Excluded);
    }
    if !affinity.cluster_names.is_empty() && !affinity.cluster_names.iter().any(|n| n == name) {
        return Some(Reason::NotInClusterNames(sorted(&affinity.cluster_names)));
    }
    if let Some(selector) = &affinity.label_selector {
        let empty = BTreeMap::new();
        let labels = cluster.metadata.labels.as_ref().unwrap_or(&empty);
        let unmet = unmet_label_requirements(selector, labels);
        if !unmet.is_empty() {
            return Some(Reason::LabelSelector(unmet));
        }
    }
    let fields = affinity.field_selector.iter();
    fields
        .flat_map(|f| &f.match_expressions)
        .find_map(|req| unmet_field_requirement(req, cluster))
        .map(Reason::FieldSelector)
}

/// The requirements of `selector` that `labels` do not meet, each in kubectl's
/// syntax (`env=prod`, `tier in (a,b)`, `gpu`, `!spot`); empty when the labels match.
/// An empty selector matches everything.
pub fn unmet_label_requirements(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Vec<String> {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| LabelSelector {
            match_labels: Some(BTreeMap::from([(k.clone(), v.clone())])),
            match_expressions: None,
        });
    let exprs = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|req| LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req.clone()]),
        });
    pairs
        .chain(exprs)
        .filter(|one| !label_selector::matches(one, labels))
        .map(|one| label_selector::display(&one))
        .collect()
}

/// The Cluster's effective provider, region and zones: status (what the registry
/// observed, itself spec first) when set, else spec.
pub(super) fn effective_fields(cluster: &Cluster) -> (Option<&str>, Option<&str>, Vec<&str>) {
    let status = cluster.status.as_ref();
    let spec = &cluster.spec;
    let provider = status
        .and_then(|s| s.provider.as_deref())
        .or(spec.provider.as_deref());
    let region = status
        .and_then(|s| s.region.as_deref())
        .or(spec.region.as_deref());
    let mut zones: Vec<&str> = match status.map(|s| &s.zones) {
        Some(z) if !z.is_empty() => z.iter().map(String::as_str).collect(),
        _ if !spec.zones.is_empty() => spec.zones.iter().map(String::as_str).collect(),
        _ => spec.zone.as_deref().into_iter().collect(),
    };
    zones.sort_unstable();
    zones.dedup();
    (provider, region, zones)
}

/// Why `cluster` fails one field selector requirement (already validated); `None`
/// when it meets it.
fn unmet_field_requirement(req: &NodeSelectorRequirement, cluster: &Cluster) -> Option<String> {
    let values = sorted(req.values.as_deref().unwrap_or_default());
    let list = format!("[{}]", values.join(", "));
    let (provider, region, zones) = effective_fields(cluster);
    let key = req.key.as_str();
    let in_op = match req.operator.as_str() {
        "In" => true,
        "NotIn" => false,
        op => return Some(format!("fieldSelector operator {op} is not supported")),
    };
    if key == field_selector_keys::ZONE {
        // Karmada's matchZones: In wants every zone of the cluster in the list, NotIn
        // wants none of them in it; a cluster with no zone never matches In.
        let zs = format!("[{}]", zones.join(", "));
        return match (in_op, zones.is_empty()) {
            (true, true) => Some(format!("zone unknown, not in {list}")),
            (true, false) if zones.iter().any(|z| !values.iter().any(|v| v == z)) => {
                Some(format!("zones {zs} not all in {list}"))
            }
            (false, _) if zones.iter().any(|z| values.iter().any(|v| v == z)) => {
                Some(format!("zones {zs} meet excluded {list}"))
            }
            _ => None,
        };
    }
    let have = match key {
        field_selector_keys::PROVIDER => provider,
        field_selector_keys::REGION => region,
        _ => return Some(format!("fieldSelector key {key} is not supported")),
    };
    match (in_op, have) {
        (true, None) => Some(format!("{key} unknown, not in {list}")),
        (true, Some(v)) if !values.iter().any(|x| x == v) => {
            Some(format!("{key} {v} not in {list}"))
        }
        (false, Some(v)) if values.iter().any(|x| x == v) => {
            Some(format!("{key} {v} in excluded {list}"))
        }
        _ => None,
    }
}

/// `names`, sorted and without duplicates.
fn sorted(names: &[String]) -> Vec<String> {
    let mut out = names.to_vec();
    out.sort_unstable();
    out.dedup();
    out
}

fn invalid(field: String, value: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field,
        value: value.to_string(),
        message: message.into(),
    }
}

/// kube-apiserver's wording for a value outside a fixed set.
pub(super) fn unsupported(field: String, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    invalid(
        field,
        value,
        format!("supported values: {}", list.join(", ")),
    )
}

/// Every validation error of `affinity`, with field paths under `at` (e.g.
/// `spec.placement.clusterAffinity`).
pub fn validate_affinity(affinity: &ClusterAffinity, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(selector) = &affinity.label_selector {
        errs.extend(label_selector::validate(
            selector,
            &format!("{at}.labelSelector"),
        ));
    }
    let fields = affinity
        .field_selector
        .iter()
        .flat_map(|f| &f.match_expressions);
    for (i, req) in fields.enumerate() {
        let at = format!("{at}.fieldSelector.matchExpressions[{i}]");
        let keys = [
            field_selector_keys::PROVIDER,
            field_selector_keys::REGION,
            field_selector_keys::ZONE,
        ];
        if !keys.contains(&req.key.as_str()) {
            errs.push(unsupported(format!("{at}.key"), &req.key, &keys));
        }
        if req.operator != "In" && req.operator != "NotIn" {
            errs.push(unsupported(
                format!("{at}.operator"),
                &req.operator,
                &["In", "NotIn"],
            ));
        } else if req.values.as_deref().unwrap_or_default().is_empty() {
            errs.push(invalid(
                format!("{at}.values"),
                "",
                "must be specified when `operator` is 'In' or 'NotIn'",
            ));
        }
    }
    errs
}

/// Whether `affinity` selects `cluster` (see [`affinity_rejects`] for why not).
pub fn affinity_matches(affinity: &ClusterAffinity, cluster: &Cluster) -> bool {
    affinity_rejects(affinity, cluster).is_none()
}
