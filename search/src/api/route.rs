//! Which request a path is: the search API serves a whole Kubernetes API under
//! [`PREFIX`] (a kubeconfig's `server` ends with it), optionally narrowed to one member
//! cluster by `…/clusters/<cluster>/…` (K.70), plus the search group's own discovery for
//! an APIService. Pure.

/// The search group and version.
pub const GROUP_VERSION: &str = "search.causeway.io/v1alpha1";

/// Everything kubectl asks for lives under this path.
pub const PREFIX: &str = "/apis/search.causeway.io/v1alpha1/resources";

/// A routed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/apis/search.causeway.io/v1alpha1`: the search group's APIResourceList.
    SearchGroup,
    /// `<prefix>/api`: the core APIVersions.
    CoreVersions,
    /// `<prefix>/apis`: the APIGroupList.
    Groups,
    /// `<prefix>/apis/<group>`: one APIGroup.
    Group(String),
    /// `<prefix>/api/v1`, `<prefix>/apis/<group>/<version>`: an APIResourceList.
    Resources {
        /// `""` for core.
        group: String,
        /// Version.
        version: String,
    },
    /// A list or a get by name.
    Objects(Target),
    /// Anything else, with what was not understood.
    NotFound,
}

/// The objects a list or get names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// `…/clusters/<cluster>/…`.
    pub cluster: Option<String>,
    /// `""` for core.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// `…/namespaces/<ns>/<resource>`.
    pub namespace: Option<String>,
    /// `…/<resource>/<name>`.
    pub name: Option<String>,
}

/// Routes a request path (without the query).
pub fn route(path: &str) -> Route {
    let path = path.trim_end_matches('/');
    if path == PREFIX.trim_end_matches("/resources") {
        return Route::SearchGroup;
    }
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Route::NotFound;
    };
    let mut segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let mut cluster = None;
    if segs.first() == Some(&"clusters") {
        if segs.len() < 2 {
            return Route::NotFound;
        }
        cluster = Some(segs[1].to_string());
        segs.drain(..2);
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api"] => return Route::CoreVersions,
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::NotFound,
    };
    let target = |namespace: Option<&str>, resource: &str, name: Option<&str>| {
        Route::Objects(Target {
            cluster: cluster.clone(),
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
            namespace: namespace.map(String::from),
            name: name.map(String::from),
        })
    };
    match rest {
        [] => Route::Resources {
            group: group.to_string(),
            version: version.to_string(),
        },
        [res] => target(None, res, None),
        ["namespaces", ns, res] => target(Some(ns), res, None),
        ["namespaces", ns, res, name] => target(Some(ns), res, Some(name)),
        [res, name] => target(None, res, Some(name)),
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(
        cluster: Option<&str>,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Route {
        Route::Objects(Target {
            cluster: cluster.map(String::from),
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            namespace: namespace.map(String::from),
            name: name.map(String::from),
        })
    }

    #[test]
    fn paths_route_as_kubectl_sends_them() {
        let p = |s: &str| format!("{PREFIX}{s}");
        let cases = [
            (
                "/apis/search.causeway.io/v1alpha1".to_string(),
                Route::SearchGroup,
            ),
            (
                "/apis/search.causeway.io/v1alpha1/".to_string(),
                Route::SearchGroup,
            ),
            (p("/api"), Route::CoreVersions),
            (p("/apis"), Route::Groups),
            (p("/apis/apps"), Route::Group("apps".into())),
            (p("/clusters/east/api"), Route::CoreVersions),
            (
                p("/api/v1"),
                Route::Resources {
                    group: "".into(),
                    version: "v1".into(),
                },
            ),
            (
                p("/apis/apps/v1"),
                Route::Resources {
                    group: "apps".into(),
                    version: "v1".into(),
                },
            ),
            (p("/api/v1/pods"), objects(None, "", "pods", None, None)),
            (
                p("/api/v1/namespaces/shop/pods"),
                objects(None, "", "pods", Some("shop"), None),
            ),
            (
                p("/api/v1/namespaces/shop/pods/web-1"),
                objects(None, "", "pods", Some("shop"), Some("web-1")),
            ),
            // a Namespace by name, and the Namespace list
            (
                p("/api/v1/namespaces/shop"),
                objects(None, "", "namespaces", None, Some("shop")),
            ),
            (
                p("/api/v1/namespaces"),
                objects(None, "", "namespaces", None, None),
            ),
            (
                p("/api/v1/nodes/n1"),
                objects(None, "", "nodes", None, Some("n1")),
            ),
            (
                p("/apis/apps/v1/deployments"),
                objects(None, "apps", "deployments", None, None),
            ),
            (
                p("/clusters/east/apis/apps/v1/namespaces/shop/deployments/web"),
                objects(
                    Some("east"),
                    "apps",
                    "deployments",
                    Some("shop"),
                    Some("web"),
                ),
            ),
            (p("/clusters"), Route::NotFound),
            (p(""), Route::NotFound),
            (
                p("/api/v1/namespaces/shop/pods/web-1/status"),
                Route::NotFound,
            ),
            ("/api/v1/pods".to_string(), Route::NotFound),
            ("/healthz".to_string(), Route::NotFound),
        ];
        for (path, want) in cases {
            assert_eq!(route(&path), want, "{path}");
        }
    }
}
