//! Legacy discovery (`/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`) from the types the
//! indexer recorded: verbs get, list and watch, the built-in kinds' short names (so
//! `kubectl get deploy` works) and categories (so `kubectl get all` does). kubectl falls back to it from aggregated discovery when
//! the response is plain `application/json`. Pure.

use std::collections::BTreeMap;

use causeway_runtime::discovery::{categories, version_priority};
use causeway_runtime::table::columns::short_names;
use serde_json::{Value, json};

use crate::api::route::GROUP_VERSION;
use crate::store::TypeInfo;

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// `/api`: `v1` while a core type is indexed. With none, `/api/v1` is a 404, and a
/// version listed here that 404s makes kubectl warn "couldn't get resource list for
/// v1" on every call; no version is what client-go's discovery expects of a server
/// without the legacy group.
pub fn core_versions(types: &[TypeInfo]) -> Value {
    let versions: Vec<&str> = if types.iter().any(|t| t.gvr.group.is_empty()) {
        vec!["v1"]
    } else {
        vec![]
    };
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [],
    })
}

/// The versions of each non-core group, in Kubernetes' priority order (GA, beta, alpha;
/// higher first): the first is the preferred one.
fn groups_of(types: &[TypeInfo]) -> BTreeMap<&str, Vec<&str>> {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in types.iter().filter(|t| !t.gvr.group.is_empty()) {
        let versions = groups.entry(&t.gvr.group).or_default();
        if !versions.contains(&t.gvr.version.as_str()) {
            versions.push(&t.gvr.version);
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    groups
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(name, v), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0]})
}

/// `/apis`.
pub fn groups(types: &[TypeInfo]) -> Value {
    let groups: Vec<Value> = groups_of(types)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if any type is in it.
pub fn group(types: &[TypeInfo], name: &str) -> Option<Value> {
    let groups = groups_of(types);
    let vs = groups.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// `/api/v1` or `/apis/<group>/<version>`, if any type is in it.
pub fn resources(types: &[TypeInfo], group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = types
        .iter()
        .filter(|t| t.gvr.group == group && t.gvr.version == version)
        .map(|t| {
            json!({
                "name": t.gvr.resource,
                "singularName": t.kind.to_lowercase(),
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "list", "watch"],
                "shortNames": short_names(group, &t.gvr.resource),
                "categories": categories(group, &t.gvr.resource),
            })
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    }))
}

/// `/apis/search.causeway.io/v1alpha1`: what an APIService on a hub points at.
pub fn search_group() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [{
            "name": "resources",
            "singularName": "resource",
            "namespaced": false,
            "kind": "Resources",
            "verbs": ["get", "list"],
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Gvr;

    fn t(group: &str, version: &str, resource: &str, kind: &str, namespaced: bool) -> TypeInfo {
        TypeInfo {
            gvr: Gvr {
                group: group.into(),
                version: version.into(),
                resource: resource.into(),
            },
            kind: kind.into(),
            namespaced,
        }
    }

    #[test]
    fn discovery_lists_the_recorded_types() {
        let types = [
            t("", "v1", "pods", "Pod", true),
            t("", "v1", "nodes", "Node", false),
            t("apps", "v1", "deployments", "Deployment", true),
            t("example.io", "v1beta1", "gadgets", "Gadget", true),
            t("example.io", "v1", "widgets", "Widget", true),
            t(
                "autoscaling",
                "v1",
                "horizontalpodautoscalers",
                "HorizontalPodAutoscaler",
                true,
            ),
            t(
                "autoscaling",
                "v2",
                "horizontalpodautoscalers",
                "HorizontalPodAutoscaler",
                true,
            ),
        ];
        let g = groups(&types);
        let names: Vec<&str> = g["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["apps", "autoscaling", "example.io"]);
        // the preferred version is the highest by Kubernetes' priority, not the first
        // seen nor the first in alphabetical order
        assert_eq!(g["groups"][1]["preferredVersion"]["version"], "v2");
        assert_eq!(
            g["groups"][2]["versions"],
            json!([{"groupVersion": "example.io/v1", "version": "v1"}, {"groupVersion": "example.io/v1beta1", "version": "v1beta1"}])
        );
        assert_eq!(g["groups"][2]["preferredVersion"]["version"], "v1");
        assert_eq!(group(&types, "apps").unwrap()["kind"], "APIGroup");
        assert!(group(&types, "batch").is_none());

        let core = resources(&types, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        assert_eq!(
            core["resources"][0],
            json!({"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                   "verbs": ["get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]})
        );
        assert_eq!(core["resources"][1]["namespaced"], false);
        assert_eq!(core["resources"][1]["shortNames"], json!(["no"]));
        assert_eq!(core["resources"][1]["categories"], json!([]));
        let apps = resources(&types, "apps", "v1").unwrap();
        assert_eq!(apps["resources"][0]["shortNames"], json!(["deploy"]));
        let widgets = resources(&types, "example.io", "v1").unwrap();
        assert_eq!(widgets["resources"][0]["shortNames"], json!([]));
        assert!(resources(&types, "apps", "v2").is_none());
        assert_eq!(core_versions(&types)["versions"], json!(["v1"]));

        // apps types only: /api lists no version, so kubectl does not ask /api/v1
        let apps_only = [
            t("apps", "v1", "deployments", "Deployment", true),
            t("apps", "v1", "statefulsets", "StatefulSet", true),
        ];
        assert_eq!(core_versions(&apps_only)["versions"], json!([]));
        assert_eq!(core_versions(&apps_only)["kind"], "APIVersions");
        assert!(resources(&apps_only, "", "v1").is_none());
        let g = groups(&apps_only);
        assert_eq!(g["groups"][0]["name"], "apps");
        assert_eq!(g["groups"].as_array().unwrap().len(), 1);
    }
}
