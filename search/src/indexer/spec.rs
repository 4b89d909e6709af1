//! Which resource types the indexer copies, from which members, and how much of each
//! object: one [`ResourceSpec`] per flag value.
//!
//! The syntax of a value is
//!
//! ```text
//! [GROUP/]VERSION/RESOURCE[:metadata][@CLUSTER[,CLUSTER…]]
//! ```
//!
//! - `apps/v1/deployments`: Deployments of every member, whole objects;
//! - `v1/configmaps:metadata`: core ConfigMaps, names only (apiVersion, kind and
//!   metadata are stored, not `data`);
//! - `v1/secrets:metadata@east,west`: Secrets' metadata, from members `east` and
//!   `west` only.
//!
//! The resource is the plural, lowercase name (`kubectl api-resources` NAME column).
//! A type may be given more than once only for disjoint sets of members.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::store::Gvr;

/// The form of a value, quoted in every error.
const FORM: &str = "[GROUP/]VERSION/RESOURCE[:metadata][@CLUSTER[,CLUSTER…]], e.g. apps/v1/deployments, v1/configmaps:metadata or v1/secrets:metadata@east,west";

/// One resource type to index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    /// The type.
    pub gvr: Gvr,
    /// Store only apiVersion, kind and metadata (e.g. ConfigMaps: names, not contents).
    pub metadata_only: bool,
    /// Only these members; `None` = every member.
    pub clusters: Option<BTreeSet<String>>,
}

/// A resource spec that cannot be used: what is wrong and the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {value:?}: {why}; the form is {FORM}")]
pub struct SpecError {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

impl ResourceSpec {
    /// Whether members named `cluster` index this type.
    pub fn applies_to(&self, cluster: &str) -> bool {
        self.clusters.as_ref().is_none_or(|c| c.contains(cluster))
    }

    /// Whether `self` and `other` index the same type in some member.
    fn overlaps(&self, other: &ResourceSpec) -> bool {
        self.gvr == other.gvr
            && match (&self.clusters, &other.clusters) {
                (Some(a), Some(b)) => !a.is_disjoint(b),
                _ => true,
            }
    }
}

impl FromStr for ResourceSpec {
    type Err = SpecError;

    fn from_str(value: &str) -> Result<ResourceSpec, SpecError> {
        let fail = |why: String| SpecError {
            value: value.to_string(),
            why,
        };
        let (rest, clusters) = match value.split_once('@') {
            Some((rest, list)) => (rest, Some(clusters(list).map_err(fail)?)),
            None => (value, None),
        };
        let (path, metadata_only) = match rest.split_once(':') {
            None => (rest, false),
            Some((path, "metadata")) => (path, true),
            Some((_, other)) => {
                return Err(fail(format!(
                    "unknown option `:{other}`: the only option is `:metadata` (store names and metadata, not contents)"
                )));
            }
        };
        let gvr = gvr(path).map_err(fail)?;
        Ok(ResourceSpec {
            gvr,
            metadata_only,
            clusters,
        })
    }
}

impl fmt::Display for ResourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&gvr_text(&self.gvr))?;
        if self.metadata_only {
            f.write_str(":metadata")?;
        }
        if let Some(c) = &self.clusters {
            let list: Vec<&str> = c.iter().map(String::as_str).collect();
            write!(f, "@{}", list.join(","))?;
        }
        Ok(())
    }
}

/// `[group/]version/resource`.
pub(crate) fn gvr_text(gvr: &Gvr) -> String {
    if gvr.group.is_empty() {
        format!("{}/{}", gvr.version, gvr.resource)
    } else {
        format!("{}/{}/{}", gvr.group, gvr.version, gvr.resource)
    }
}

/// `[GROUP/]VERSION/RESOURCE`.
fn gvr(path: &str) -> Result<Gvr, String> {
    let parts: Vec<&str> = path.split('/').collect();
    let (group, version, resource) = match parts.as_slice() {
        [v, r] => ("", *v, *r),
        [g, v, r] => (*g, *v, *r),
        _ => {
            return Err(format!(
                "`{path}` has {} part(s) separated by '/'; give VERSION/RESOURCE for the core group (v1/pods) or GROUP/VERSION/RESOURCE (apps/v1/deployments)",
                parts.len()
            ));
        }
    };
    let check = |what: &str, s: &str, errs: Vec<String>| {
        if s.is_empty() {
            Err(format!("the {what} is empty"))
        } else if errs.is_empty() {
            Ok(())
        } else {
            Err(format!("the {what} `{s}` is invalid: {}", errs.join("; ")))
        }
    };
    if parts.len() == 3 {
        check("group", group, k8s_validation::dns1123_subdomain(group))?;
    }
    check("version", version, k8s_validation::dns1035_label(version))?;
    check(
        "resource",
        resource,
        k8s_validation::dns1035_label(resource),
    )?;
    Ok(Gvr {
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
    })
}

/// `CLUSTER[,CLUSTER…]` after `@`.
fn clusters(list: &str) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    for c in list.split(',') {
        if c.is_empty() {
            return Err(format!(
                "the cluster list `{list}` after '@' has an empty name; give names separated by commas"
            ));
        }
        let errs = k8s_validation::dns1123_label(c);
        if !errs.is_empty() {
            return Err(format!(
                "the cluster name `{c}` is invalid: {}",
                errs.join("; ")
            ));
        }
        out.insert(c.to_string());
    }
    Ok(out)
}

/// The specs of a repeated flag, or [`default_resources`] when none is given. A type
/// given twice for the same member is refused (which of the two would win?).
pub fn parse_all<S: AsRef<str>>(values: &[S]) -> Result<Vec<ResourceSpec>, SpecError> {
    if values.is_empty() {
        return Ok(default_resources());
    }
    let mut out: Vec<ResourceSpec> = Vec::new();
    for v in values {
        let spec: ResourceSpec = v.as_ref().parse()?;
        if let Some(prev) = out.iter().find(|p| p.overlaps(&spec)) {
            return Err(SpecError {
                value: v.as_ref().to_string(),
                why: format!(
                    "it indexes a member that `{prev}` already indexes; give each type once, or for disjoint @cluster lists"
                ),
            });
        }
        out.push(spec);
    }
    Ok(out)
}

/// What is indexed without configuration: Deployments, StatefulSets, DaemonSets,
/// ReplicaSets, Pods, Services, ConfigMaps (names only), Nodes and Namespaces, from
/// every member. ReplicaSets are there for owner search: a Pod's owner is a ReplicaSet,
/// whose owner is the Deployment, so `ownerName=web&ownerGR=deployments.apps&
/// ownerSeniority=1` walks Pod → ReplicaSet → Deployment through the stored ReplicaSets.
pub fn default_resources() -> Vec<ResourceSpec> {
    [
        "apps/v1/deployments",
        "apps/v1/statefulsets",
        "apps/v1/daemonsets",
        "apps/v1/replicasets",
        "v1/pods",
        "v1/services",
        "v1/configmaps:metadata",
        "v1/nodes",
        "v1/namespaces",
    ]
    .iter()
    .map(|s| s.parse().expect("the default resources are valid specs"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvr(g: &str, v: &str, r: &str) -> Gvr {
        Gvr {
            group: g.into(),
            version: v.into(),
            resource: r.into(),
        }
    }

    fn set(names: &[&str]) -> Option<BTreeSet<String>> {
        Some(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn valid_specs_parse_and_print_back() {
        let cases: [(&str, Gvr, bool, Option<BTreeSet<String>>); 6] = [
            (
                "apps/v1/deployments",
                gvr("apps", "v1", "deployments"),
                false,
                None,
            ),
            ("v1/pods", gvr("", "v1", "pods"), false, None),
            (
                "v1/configmaps:metadata",
                gvr("", "v1", "configmaps"),
                true,
                None,
            ),
            (
                "v1/secrets:metadata@east,west",
                gvr("", "v1", "secrets"),
                true,
                set(&["east", "west"]),
            ),
            (
                "example.com/v1beta1/widgets@one",
                gvr("example.com", "v1beta1", "widgets"),
                false,
                set(&["one"]),
            ),
            (
                "batch/v1/cronjobs@b,a",
                gvr("batch", "v1", "cronjobs"),
                false,
                set(&["a", "b"]),
            ),
        ];
        for (value, gvr, metadata_only, clusters) in cases {
            let want = ResourceSpec {
                gvr,
                metadata_only,
                clusters,
            };
            let got: ResourceSpec = value.parse().unwrap_or_else(|e| panic!("{value}: {e}"));
            assert_eq!(got, want, "{value}");
            let printed = got.to_string();
            assert_eq!(printed.parse::<ResourceSpec>().unwrap(), want, "{printed}");
        }
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let cases = [
            ("", "has 1 part(s)"),
            ("pods", "has 1 part(s)"),
            ("a/b/c/d", "has 4 part(s)"),
            ("v1/", "the resource is empty"),
            ("/v1/pods", "the group is empty"),
            ("apps//deployments", "the version is empty"),
            ("Apps/v1/deployments", "the group `Apps` is invalid"),
            ("apps/1/deployments", "the version `1` is invalid"),
            ("v1/Pods", "the resource `Pods` is invalid"),
            ("v1/pods:data", "unknown option `:data`"),
            ("v1/pods@", "has an empty name"),
            ("v1/pods@a,,b", "has an empty name"),
            ("v1/pods@East", "the cluster name `East` is invalid"),
            ("v1/pods@a@b", "the cluster name `a@b` is invalid"),
        ];
        for (value, why) in cases {
            let err = value.parse::<ResourceSpec>().unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(why), "{value:?}: {msg}");
            assert!(msg.contains("the form is [GROUP/]VERSION"), "{msg}");
            assert!(msg.starts_with(&format!("resource {value:?}: ")), "{msg}");
        }
    }

    #[test]
    fn applies_to_members() {
        let all: ResourceSpec = "v1/pods".parse().unwrap();
        let some: ResourceSpec = "v1/pods@east,west".parse().unwrap();
        for (spec, cluster, want) in [
            (&all, "east", true),
            (&all, "north", true),
            (&some, "east", true),
            (&some, "west", true),
            (&some, "north", false),
        ] {
            assert_eq!(spec.applies_to(cluster), want, "{spec} {cluster}");
        }
    }

    #[test]
    fn parse_all_defaults_and_refuses_overlaps() {
        let none: [&str; 0] = [];
        assert_eq!(parse_all(&none).unwrap(), default_resources());
        let cases: [(&[&str], Result<usize, &str>); 6] = [
            (&["v1/pods", "apps/v1/deployments"], Ok(2)),
            (&["v1/secrets:metadata@east", "v1/secrets@west"], Ok(2)),
            (&["v1/pods", "v1/pods:metadata"], Err("already indexes")),
            (&["v1/pods@a,b", "v1/pods@b"], Err("already indexes")),
            (&["v1/pods@a", "v1/pods"], Err("already indexes")),
            (&["v1/pods", "x"], Err("has 1 part(s)")),
        ];
        for (values, want) in cases {
            match (parse_all(values), want) {
                (Ok(specs), Ok(n)) => assert_eq!(specs.len(), n, "{values:?}"),
                (Err(e), Err(why)) => assert!(e.to_string().contains(why), "{values:?}: {e}"),
                (got, want) => panic!("{values:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn defaults_cover_the_issue_and_owner_search() {
        let specs = default_resources();
        let names: Vec<String> = specs.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "apps/v1/deployments",
                "apps/v1/statefulsets",
                "apps/v1/daemonsets",
                "apps/v1/replicasets",
                "v1/pods",
                "v1/services",
                "v1/configmaps:metadata",
                "v1/nodes",
                "v1/namespaces",
            ]
        );
        assert!(specs.iter().all(|s| s.clusters.is_none()));
    }
}
