//! Resource paths: `/api/v1/...` and `/apis/{group}/{version}/...`, with namespace,
//! name, subresource and the deprecated `/watch/` prefix.

/// Where a resource request points.
#[derive(Debug, Clone, Default)]
pub struct ResPath {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural.
    pub resource: String,
    /// Namespace from the URL.
    pub ns: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub sub: Option<String>,
    /// `/watch/` path prefix (deprecated form).
    pub legacy_watch: bool,
}

fn decode_seg(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Splits `/api/v1/...` and `/apis/g/v/...` paths.
pub fn parse_res_path(path: &str) -> Option<ResPath> {
    let segs: Vec<String> = path.trim_matches('/').split('/').map(decode_seg).collect();
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 3 => (String::new(), segs[1].clone(), &segs[2..]),
        Some("apis") if segs.len() >= 4 => (segs[1].clone(), segs[2].clone(), &segs[3..]),
        _ => return None,
    };
    let mut rest = rest.to_vec();
    let mut legacy_watch = false;
    if rest.first().map(String::as_str) == Some("watch") {
        legacy_watch = true;
        rest.remove(0);
    }
    let mut p = ResPath {
        group,
        version,
        legacy_watch,
        ..Default::default()
    };
    if rest.first().map(String::as_str) == Some("namespaces")
        && rest.len() >= 3
        && !matches!(rest[2].as_str(), "status" | "finalize")
    {
        p.ns = Some(rest[1].clone());
        rest.drain(..2);
    }
    match rest.len() {
        1 => p.resource = rest[0].clone(),
        2 => {
            p.resource = rest[0].clone();
            p.name = Some(rest[1].clone());
        }
        3 => {
            p.resource = rest[0].clone();
            p.name = Some(rest[1].clone());
            p.sub = Some(rest[2].clone());
        }
        _ => return None,
    }
    if p.resource.is_empty() || p.name.as_deref() == Some("") {
        return None;
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let p = parse_res_path("/api/v1/namespaces/demo/services/web/status").unwrap();
        assert_eq!(
            (
                p.group.as_str(),
                p.ns.as_deref(),
                p.resource.as_str(),
                p.name.as_deref(),
                p.sub.as_deref()
            ),
            ("", Some("demo"), "services", Some("web"), Some("status"))
        );
        let p = parse_res_path("/api/v1/namespaces/demo").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref(), p.ns),
            ("namespaces", Some("demo"), None)
        );
        let p = parse_res_path("/api/v1/namespaces/demo/finalize").unwrap();
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref(), p.sub.as_deref()),
            ("namespaces", Some("demo"), Some("finalize"))
        );
        let p = parse_res_path("/apis/apps/v1/deployments").unwrap();
        assert_eq!(
            (p.group.as_str(), p.resource.as_str(), p.ns),
            ("apps", "deployments", None)
        );
        let p = parse_res_path("/apis/apps/v1/watch/namespaces/x/deployments").unwrap();
        assert!(p.legacy_watch);
        assert_eq!(p.ns.as_deref(), Some("x"));
        let p = parse_res_path("/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aview")
            .unwrap();
        assert_eq!(p.name.as_deref(), Some("system:view"));
        assert!(parse_res_path("/apis/apps").is_none());
        assert!(parse_res_path("/api/v1/a/b/c/d/e/f").is_none());
    }
}
