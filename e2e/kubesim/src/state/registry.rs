//! The resource types a server serves: built-in kinds and those added by CRDs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use causeway_runtime::table::columns::{self, Column};

/// One served resource at one group/version.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group ("" for core).
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// The version objects are stored at (several served versions share storage).
    pub storage_version: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    /// `metadata.generation` is maintained.
    pub generation: bool,
    /// Name rule.
    pub name_rule: NameRule,
    /// Printer columns for Table output (`additionalPrinterColumns` shape).
    pub columns: Vec<Column>,
    /// Structural schema of a CRD version (None: built-in, no pruning).
    pub schema: Option<Arc<Value>>,
    /// The CRD that defines this resource, by name.
    pub crd: Option<String>,
    /// Another resource whose objects these are, converted on the way in and out
    /// (events.k8s.io Events are core Events, as in kube-apiserver; see [`crate::state::convert`]).
    pub stored_as: Option<GroupResource>,
    /// Serves the `scale` subresource, with these paths.
    pub scale: Option<ScalePaths>,
    /// Cancelled when the type stops being served (its CRD deleted): its open watches
    /// end, as kube-apiserver's do when it tears the CRD's storage down.
    pub removed: tokio_util::sync::CancellationToken,
}

/// Where a type's Scale reads and writes (a CRD's `subresources.scale`): `.a.b` paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas (`.spec.replicas`).
    pub spec_replicas: String,
    /// The observed replicas (`.status.replicas`).
    pub status_replicas: String,
    /// A string field holding the label selector; `None`: `.spec.selector`, a
    /// LabelSelector (the built-in kinds).
    pub label_selector: Option<String>,
}

/// How object names are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain.
    Subdomain,
    /// DNS-1123 label.
    Label,
    /// Any path segment (RBAC names such as `system:foo`).
    PathSegment,
}

impl ResourceType {
    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// The storage key: group + plural, or the resource these objects are stored as.
    pub fn group_resource(&self) -> GroupResource {
        match &self.stored_as {
            Some(gr) => gr.clone(),
            None => GroupResource {
                group: self.group.clone(),
                resource: self.plural.clone(),
            },
        }
    }

    /// TokenReview and the access reviews: create-only, answered and never stored.
    pub fn is_review(&self) -> bool {
        matches!(
            (self.group.as_str(), self.plural.as_str()),
            (
                "authentication.k8s.io",
                "tokenreviews" | "selfsubjectreviews"
            ) | (
                "authorization.k8s.io",
                "subjectaccessreviews" | "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            )
        )
    }

    /// Verbs served on this resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.is_review() {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// `group/version` or bare `version` for the core group.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Storage identity of a resource, across versions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group.
    pub group: String,
    /// Plural.
    pub resource: String,
}

/// A [`GroupResource`].
pub fn gr(group: &str, resource: &str) -> GroupResource {
    GroupResource {
        group: group.to_string(),
        resource: resource.to_string(),
    }
}

/// All resource types of a server, by group → version → plural.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    types: BTreeMap<(String, String, String), Arc<ResourceType>>,
    /// Group preferred versions (first registered wins unless a CRD says otherwise).
    group_order: Vec<String>,
}

impl Registry {
    /// A registry with the built-in kinds Causeway and kubectl use.
    pub fn builtin() -> Self {
        let mut r = Registry::default();
        for b in BUILTINS {
            let (group, version, plural, kind, namespaced, status, cats) = *b;
            let singular = kind.to_lowercase();
            let name_rule = match plural {
                "namespaces" | "services" => NameRule::Label,
                _ if group == "rbac.authorization.k8s.io" => NameRule::PathSegment,
                _ => NameRule::Subdomain,
            };
            let generation = !matches!(
                plural,
                "configmaps"
                    | "secrets"
                    | "namespaces"
                    | "events"
                    | "serviceaccounts"
                    | "endpoints"
                    | "leases"
                    | "services"
                    | "nodes"
                    | "pods"
                    // their strategies set no generation either (kube-apiserver keeps
                    // none: a rollout keyed by generation takes another path for them)
                    | "resourcequotas"
                    | "limitranges"
                    | "persistentvolumeclaims"
                    | "controllerrevisions"
                    | "priorityclasses"
            ) && group != "rbac.authorization.k8s.io";
            r.insert(ResourceType {
                removed: Default::default(),
                group: group.into(),
                version: version.into(),
                storage_version: version.into(),
                plural: plural.into(),
                singular,
                kind: kind.into(),
                list_kind: format!("{kind}List"),
                namespaced,
                short_names: columns::short_names(group, plural)
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                categories: cats
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                status_subresource: status,
                generation,
                name_rule,
                columns: columns::builtin(group, plural),
                schema: None,
                crd: None,
                stored_as: (group == "events.k8s.io").then(|| GroupResource {
                    group: String::new(),
                    resource: "events".into(),
                }),
                scale: crate::verbs::scale::builtin(group, plural),
            });
        }
        r
    }

    /// Adds or replaces a type.
    pub fn insert(&mut self, t: ResourceType) {
        if !self.group_order.contains(&t.group) {
            self.group_order.push(t.group.clone());
        }
        self.types.insert(
            (t.group.clone(), t.version.clone(), t.plural.clone()),
            Arc::new(t),
        );
    }

    /// The types CRD `crd_name` defines now.
    pub fn crd_types(&self, crd_name: &str) -> Vec<Arc<ResourceType>> {
        self.types
            .values()
            .filter(|t| t.crd.as_deref() == Some(crd_name))
            .cloned()
            .collect()
    }

    /// Removes every type a deleted CRD defined, ending their watches.
    pub fn delete_crd(&mut self, crd_name: &str) {
        for t in self.types.values() {
            if t.crd.as_deref() == Some(crd_name) {
                t.removed.cancel();
            }
        }
        self.remove_crd(crd_name);
    }

    /// Removes every type a CRD defined.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.types.retain(|_, t| t.crd.as_deref() != Some(crd_name));
        let groups: Vec<String> = self.types.values().map(|t| t.group.clone()).collect();
        self.group_order.retain(|g| groups.contains(g));
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Any served version of a group resource (the storage one first).
    pub fn by_group_resource(&self, gr: &GroupResource) -> Option<Arc<ResourceType>> {
        let mut found = None;
        for t in self.types.values() {
            if t.group == gr.group && t.plural == gr.resource {
                if t.version == t.storage_version {
                    return Some(t.clone());
                }
                found = Some(t.clone());
            }
        }
        found
    }

    /// The type for a kind at a group/version.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.types
            .values()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .cloned()
    }

    /// Groups in discovery order.
    pub fn groups(&self) -> Vec<String> {
        self.group_order.clone()
    }

    /// Versions of a group, preferred first.
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for t in self.types.values() {
            if t.group == group && !v.contains(&t.version) {
                v.push(t.version.clone());
            }
        }
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        v
    }

    /// Types of one group/version.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.types
            .values()
            .filter(|t| t.group == group && t.version == version)
            .cloned()
            .collect()
    }

    /// Every type.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }
}

pub use causeway_runtime::discovery::version_priority;

type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    bool,
    &'static str,
);

/// (group, version, plural, kind, namespaced, status subresource, categories); short
/// names and printer columns are `causeway_runtime::table::columns`'
const BUILTINS: &[Builtin] = &[
    ("", "v1", "namespaces", "Namespace", false, true, ""),
    ("", "v1", "services", "Service", true, true, "all"),
    ("", "v1", "endpoints", "Endpoints", true, false, ""),
    ("", "v1", "secrets", "Secret", true, false, ""),
    ("", "v1", "configmaps", "ConfigMap", true, false, ""),
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        false,
        "",
    ),
    ("", "v1", "nodes", "Node", false, true, ""),
    (
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
        false,
        "",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
        false,
        "",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
        false,
        "",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
        false,
        "",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
        false,
        "",
    ),
    ("", "v1", "pods", "Pod", true, true, "all"),
    ("", "v1", "events", "Event", true, false, ""),
    (
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        true,
        "",
    ),
    (
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
        false,
        "",
    ),
    ("events.k8s.io", "v1", "events", "Event", true, false, ""),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        false,
        "",
    ),
    ("apps", "v1", "deployments", "Deployment", true, true, "all"),
    (
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        true,
        "all",
    ),
    ("apps", "v1", "daemonsets", "DaemonSet", true, true, "all"),
    ("apps", "v1", "replicasets", "ReplicaSet", true, true, "all"),
    (
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        false,
        "",
    ),
    ("batch", "v1", "jobs", "Job", true, true, "all"),
    ("batch", "v1", "cronjobs", "CronJob", true, true, "all"),
    (
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        true,
        true,
        "",
    ),
    (
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "IngressClass",
        false,
        false,
        "",
    ),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        false,
        "",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        false,
        "",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        false,
        "",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        false,
        "",
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        false,
        "",
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        false,
        "api-extensions",
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        true,
        "api-extensions",
    ),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        true,
        "",
    ),
    ("", "v1", "resourcequotas", "ResourceQuota", true, true, ""),
    ("", "v1", "limitranges", "LimitRange", true, false, ""),
    (
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        false,
        false,
        "",
    ),
    (
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
        true,
        "all",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_have_the_kinds_causeway_needs() {
        let r = Registry::builtin();
        for (g, p) in [
            ("", "services"),
            ("discovery.k8s.io", "endpointslices"),
            ("coordination.k8s.io", "leases"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
        ] {
            assert!(r.get(g, "v1", p).is_some(), "{g}/{p}");
        }
        assert!(!r.get("", "v1", "namespaces").unwrap().namespaced);
        assert_eq!(
            r.get("", "v1", "services").unwrap().name_rule,
            NameRule::Label
        );
    }
}
