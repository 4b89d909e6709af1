//! `<kind>/<name>` on the command line of `causeway explain` and `causeway promote`,
//! and the resource type it names, resolved through discovery like kubectl does
//! (`deployment`, `deployments`, `Deployment`, `deployments.apps`,
//! `deployments.v1.apps`).

use anyhow::Context;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery::{Discovery, Scope};

/// A `<kind>/<name>` argument, split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// The resource type as typed (`deployment`, `deployments.apps`, ...).
    pub kind: String,
    /// The object's name.
    pub name: String,
}

impl Target {
    /// Parses `<kind>/<name>`.
    pub(crate) fn parse(arg: &str) -> Result<Target, String> {
        match arg.split_once('/') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Target {
                    kind: kind.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "{arg:?} is not <kind>/<name>: write it like deployment/shop or deployments.apps/shop"
            )),
        }
    }
}

/// A resource type the cluster serves.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Kind {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

impl Kind {
    /// A kind for tests: `group/version`, `kind`, `plural`.
    #[cfg(test)]
    pub(crate) fn new(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
    ) -> Kind {
        let api_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Kind {
            resource: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version,
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced,
        }
    }

    /// The API of this kind in `namespace` (ignored for a cluster-scoped kind).
    pub(crate) fn api(&self, client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
        if self.namespaced {
            Api::namespaced_with(client.clone(), namespace, &self.resource)
        } else {
            Api::all_with(client.clone(), &self.resource)
        }
    }

    /// `Deployment demo/shop` or `ClusterRole admin`, for messages.
    pub(crate) fn describe(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{} {namespace}/{name}", self.resource.kind)
        } else {
            format!("{} {name}", self.resource.kind)
        }
    }
}

/// Pure: the served type that `query` names, among `served` (each group's preferred
/// version, in discovery order). A name served by several groups resolves to the core
/// group's, else the first; `plural.group` picks one.
pub(crate) fn resolve(query: &str, served: &[Kind]) -> Result<Kind, String> {
    let q = query.to_ascii_lowercase();
    let matches = |k: &&Kind| {
        let r = &k.resource;
        let names = [r.kind.to_ascii_lowercase(), r.plural.to_ascii_lowercase()];
        names.iter().any(|n| {
            q == *n
                || (!r.group.is_empty() && q == format!("{n}.{}", r.group))
                || q == format!("{n}.{}.{}", r.version, r.group).trim_end_matches('.')
        }) || causeway_runtime::table::columns::short_names(&r.group, &r.plural)
            .contains(&q.as_str())
    };
    let found: Vec<&Kind> = served.iter().filter(matches).collect();
    found
        .iter()
        .find(|k| k.resource.group.is_empty())
        .or(found.first())
        .map(|k| (*k).clone())
        .ok_or_else(|| {
            format!(
                "the cluster serves no resource type {query:?}: use a kind (Deployment), its plural (deployments), its short name (deploy) or plural.group (deployments.apps); `kubectl api-resources` lists them"
            )
        })
}

/// Every type `client`'s cluster serves (preferred versions), through discovery.
pub(crate) async fn served(client: &kube::Client, which: &str) -> anyhow::Result<Vec<Kind>> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .with_context(|| format!("discovering the resource types of the {which}"))?;
    Ok(discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(resource, caps)| Kind {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        })
        .collect())
}

/// The type `query` names on `client`'s cluster (`which`: "hub", "member east").
pub(crate) async fn kind_on(
    client: &kube::Client,
    query: &str,
    which: &str,
) -> anyhow::Result<Kind> {
    let served = served(client, which).await?;
    resolve(query, &served).map_err(|e| anyhow::anyhow!("on the {which}: {e}"))
}

/// The common start of `explain` and `promote`: the parsed `<kind>/<name>`, the hub
/// client and the namespace (`-n`, else the hub context's, else "default").
pub(crate) async fn start(
    arg: &str,
    hub: &causeway_runtime::client::HubArgs,
    namespace: Option<&str>,
) -> anyhow::Result<(Target, kube::Client, String)> {
    let target = Target::parse(arg).map_err(anyhow::Error::msg)?;
    let hub = hub.client().await?;
    let namespace = namespace.map_or_else(|| hub.default_namespace().to_string(), str::to_string);
    Ok((target, hub, namespace))
}
