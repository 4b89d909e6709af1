//! What a workload depends on: the ConfigMaps, Secrets, ServiceAccount and PVCs its
//! pod template references (federation.md §8 I.56, §1.9).
//!
//! Pure: [`dependencies`] reads the template's pod spec (Deployment, ReplicaSet,
//! StatefulSet, DaemonSet and Job: `spec.template.spec`; CronJob:
//! `spec.jobTemplate.spec.template.spec`; Pod: `spec`) and lists what it names:
//! - ConfigMaps and Secrets from volumes (`configMap`, `secret`, and the sources of
//!   `projected` volumes), from `env[].valueFrom.configMapKeyRef/secretKeyRef`, from
//!   `envFrom[]`, and (Secrets) from `imagePullSecrets`, over `containers`,
//!   `initContainers` and `ephemeralContainers`;
//! - the ServiceAccount (`serviceAccountName`, else the deprecated `serviceAccount`);
//! - PersistentVolumeClaims from `persistentVolumeClaim` volumes;
//!
//! never what every cluster keeps in every namespace itself (the `default`
//! ServiceAccount, the `kube-root-ca.crt` ConfigMap a projected token volume names:
//! [`super::selection::PUBLISHED_BY_EVERY_CLUSTER`]). Services are not dependencies (karmada-io/karmada#4285), nor is anything of other
//! kinds.

use std::collections::BTreeSet;

use serde_json::Value;

/// One object a workload template depends on, in the template's namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dependency {
    /// `v1` for all four kinds.
    pub api_version: String,
    /// `ConfigMap`, `Secret`, `ServiceAccount` or `PersistentVolumeClaim`.
    pub kind: String,
    /// The template's namespace (empty when the template has none).
    pub namespace: String,
    /// The referenced name.
    pub name: String,
}

const CONFIG_MAP: &str = "ConfigMap";
const SECRET: &str = "Secret";
const SERVICE_ACCOUNT: &str = "ServiceAccount";
const PVC: &str = "PersistentVolumeClaim";

/// The JSON pointer of the pod spec of the built-in kind `group`/`kind`, for the kinds
/// that have one (by group too: a custom kind named Job is not a Job).
fn pod_spec_pointer(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            Some("/spec/template/spec")
        }
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template/spec"),
        ("", "Pod") => Some("/spec"),
        _ => None,
    }
}

/// The ConfigMaps, Secrets, ServiceAccount and PVCs the pod template of `template`
/// references, sorted and without duplicates; none for kinds without a pod template
/// and for a template whose pod spec is missing or malformed (a field of the wrong
/// type is skipped, never a panic). `pod_specs` are the pod specs of a kind Causeway
/// knows none of (its ResourceInterpreter's `dependencies.podSpecs`, JSON pointers).
pub fn dependencies(template: &Value, pod_specs: &[String]) -> Vec<Dependency> {
    let text = |k: &str| template.get(k).and_then(Value::as_str).unwrap_or("");
    let group = super::group_of(text("apiVersion"));
    let pointers: Vec<&str> = match pod_spec_pointer(group, text("kind")) {
        Some(p) => vec![p],
        None => pod_specs.iter().map(String::as_str).collect(),
    };
    let mut found: BTreeSet<(&'static str, &str)> = BTreeSet::new();
    for spec in pointers.iter().filter_map(|p| template.pointer(p)) {
        pod_spec_refs(spec, &mut found);
    }
    let namespace = template
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    found.retain(|(kind, name)| !super::selection::is_published_by_every_cluster("v1", kind, name));
    found
        .into_iter()
        .map(|(kind, name)| Dependency {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        })
        .collect()
}

/// What one pod spec references, into `found`.
fn pod_spec_refs<'a>(spec: &'a Value, found: &mut BTreeSet<(&'static str, &'a str)>) {
    for volume in items(spec, "volumes") {
        volume_refs(volume, found);
    }
    for field in ["containers", "initContainers", "ephemeralContainers"] {
        for container in items(spec, field) {
            container_refs(container, found);
        }
    }
    for secret in items(spec, "imagePullSecrets") {
        add(found, SECRET, secret.get("name"));
    }
    let account = ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|f| text(spec.get(*f)));
    if let Some(sa) = account {
        found.insert((SERVICE_ACCOUNT, sa));
    }
}

/// The references of one volume.
fn volume_refs<'a>(volume: &'a Value, found: &mut BTreeSet<(&'static str, &'a str)>) {
    add(found, CONFIG_MAP, volume.pointer("/configMap/name"));
    add(found, SECRET, volume.pointer("/secret/secretName"));
    add(
        found,
        PVC,
        volume.pointer("/persistentVolumeClaim/claimName"),
    );
    if let Some(projected) = volume.get("projected") {
        for source in items(projected, "sources") {
            add(found, CONFIG_MAP, source.pointer("/configMap/name"));
            add(found, SECRET, source.pointer("/secret/name"));
        }
    }
}

/// The references of one container: `env[].valueFrom` and `envFrom[]`.
fn container_refs<'a>(container: &'a Value, found: &mut BTreeSet<(&'static str, &'a str)>) {
    for env in items(container, "env") {
        add(
            found,
            CONFIG_MAP,
            env.pointer("/valueFrom/configMapKeyRef/name"),
        );
        add(found, SECRET, env.pointer("/valueFrom/secretKeyRef/name"));
    }
    for from in items(container, "envFrom") {
        add(found, CONFIG_MAP, from.pointer("/configMapRef/name"));
        add(found, SECRET, from.pointer("/secretRef/name"));
    }
}

/// Records `name` as a `kind` dependency when it is a non-empty string.
fn add<'a>(
    found: &mut BTreeSet<(&'static str, &'a str)>,
    kind: &'static str,
    name: Option<&'a Value>,
) {
    if let Some(name) = text(name) {
        found.insert((kind, name));
    }
}

/// A non-empty string value.
fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The elements of the array `field` of `v` (none when absent or not an array).
fn items<'a>(v: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    v.get(field).and_then(Value::as_array).into_iter().flatten()
}

#[cfg(test)]
mod tests;
