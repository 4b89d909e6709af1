//! Kubernetes Ingress matching (MCI-5), generic over the route value.
//!
//! - `Exact`: case-sensitive full match of the path.
//! - `Prefix` (and `ImplementationSpecific`, which Causeway treats as Prefix):
//!   element-wise on `/`; `/foo` matches `/foo`, `/foo/` and `/foo/bar`, not `/foobar`;
//!   a trailing slash in the rule is ignored; `/` matches everything.
//! - The longest match wins; on a tie Exact beats Prefix; identical rules: the first
//!   inserted wins (callers insert the oldest MCI first).
//! - Hosts: an exact host beats a wildcard `*.foo.com` (exactly one label), which
//!   beats rules without a host. A host with rules is its own server (as in
//!   ingress-nginx): a path none of its rules match goes to that host's default
//!   backend (or 404), never to a less specific host's rules nor to the catch-all
//!   default; only a request whose host has no rules of its own falls to the rules
//!   without a host, then to the catch-all default backend (or 404).
//! - Gateway API wildcard hosts (HTTPRoute, [`crate::gateway`]) match one or more
//!   labels; they come after the Ingress hosts, the longest suffix first. HTTPRoute
//!   rules are also inserted at `/` under the MCI hosts they cover (HR-9), so a host
//!   both front ends serve is one server: MCI paths, then the routes' rules, then the
//!   host's default ([`Router::exact_inheriting_mut`] for a route's exact host under an
//!   Ingress wildcard).

use std::collections::HashMap;

/// How a path rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathKind {
    /// Full, case-sensitive match.
    Exact,
    /// Element-wise prefix.
    Prefix,
}

#[derive(Clone, Debug)]
struct PathRule<T> {
    kind: PathKind,
    /// Exact: the path; Prefix: the path without trailing slashes (`/` → ``).
    path: Box<str>,
    value: T,
}

/// Whether a rule of `kind` matches path `p`: `rule` is the rule's path as stored
/// ([`rule_path`]: without trailing slashes for a prefix).
#[inline]
pub fn path_matches(kind: PathKind, rule: &str, p: &str) -> bool {
    match kind {
        PathKind::Exact => rule == p,
        PathKind::Prefix => {
            rule.is_empty()
                || (p.starts_with(rule)
                    && (p.len() == rule.len() || p.as_bytes()[rule.len()] == b'/'))
        }
    }
}

/// A rule's path as matched: a prefix without its trailing slashes (`/` → ``).
pub fn rule_path(kind: PathKind, path: &str) -> Box<str> {
    match kind {
        PathKind::Exact => path.into(),
        PathKind::Prefix => path.trim_end_matches('/').into(),
    }
}

impl<T> PathRule<T> {
    fn matches(&self, p: &str) -> bool {
        path_matches(self.kind, &self.path, p)
    }
}

/// The path rules of one host, longest first, and the host's default backend.
#[derive(Clone, Debug)]
pub struct Paths<T> {
    rules: Vec<PathRule<T>>,
    default: Option<T>,
}

impl<T> Default for Paths<T> {
    fn default() -> Self {
        Paths {
            rules: Vec::new(),
            default: None,
        }
    }
}

impl<T> Paths<T> {
    /// Adds a rule; a rule identical to an earlier one is dropped (returns false).
    pub fn insert(&mut self, kind: PathKind, path: &str, value: T) -> bool {
        let path = rule_path(kind, path);
        if self.rules.iter().any(|r| r.kind == kind && r.path == path) {
            return false;
        }
        self.rules.push(PathRule { kind, path, value });
        true
    }

    /// Orders rules for lookup (call once after the inserts).
    pub fn finish(&mut self) {
        // Stable: among equal keys the earlier insert stays first.
        self.rules
            .sort_by_key(|r| (std::cmp::Reverse(r.path.len()), r.kind == PathKind::Prefix));
    }

    /// The best rule for `path` (the request path without the query).
    pub fn find(&self, path: &str) -> Option<&T> {
        self.rules
            .iter()
            .find(|r| r.matches(path))
            .map(|r| &r.value)
    }

    /// Sets the default backend of this host (what none of its rules match) unless
    /// one is set (returns false then).
    pub fn set_default(&mut self, value: T) -> bool {
        if self.default.is_some() {
            return false;
        }
        self.default = Some(value);
        true
    }

    /// The host's default backend.
    pub fn default_value(&self) -> Option<&T> {
        self.default.as_ref()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// No rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Hosts → paths (each with its own default backend), plus the catch-all default
/// backend of the requests whose host has no rules of its own.
#[derive(Clone, Debug)]
pub struct Router<T> {
    exact: HashMap<Box<str>, Paths<T>>,
    /// `*.foo.com` stored as `foo.com`.
    wildcard: HashMap<Box<str>, Paths<T>>,
    /// Gateway API wildcards (`*.foo.com` matches any number of labels before
    /// `.foo.com`), stored as `foo.com`.
    deep: HashMap<Box<str>, Paths<T>>,
    /// The rules without host; their `default` is unused ([`Router::default`] is the
    /// catch-all).
    any: Paths<T>,
    default: Option<T>,
}

impl<T> Default for Router<T> {
    fn default() -> Self {
        Router {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            deep: HashMap::new(),
            any: Paths::default(),
            default: None,
        }
    }
}

impl<T> Router<T> {
    /// The path table of a rule host (`None`/empty: any host), for inserts.
    pub fn host_mut(&mut self, host: Option<&str>) -> &mut Paths<T> {
        match host.map(|h| h.to_ascii_lowercase()) {
            None => &mut self.any,
            Some(h) if h.is_empty() => &mut self.any,
            Some(h) => match h.strip_prefix("*.") {
                Some(suffix) => self.wildcard.entry(suffix.into()).or_default(),
                None => self.exact.entry(h.into()).or_default(),
            },
        }
    }

    /// The path table of a Gateway API wildcard host `*.<suffix>`, which matches hosts
    /// with one or more labels before `.<suffix>` (an Ingress wildcard matches one).
    pub fn deep_wildcard_mut(&mut self, suffix: &str) -> &mut Paths<T> {
        self.deep
            .entry(suffix.to_ascii_lowercase().into())
            .or_default()
    }

    /// Sets the catch-all default backend (requests whose host has no rules of its
    /// own) unless one is set (returns false then).
    pub fn set_default(&mut self, value: T) -> bool {
        if self.default.is_some() {
            return false;
        }
        self.default = Some(value);
        true
    }

    /// The exact hosts with rules of their own (inserted so far).
    pub fn exact_hosts(&self) -> impl Iterator<Item = &str> {
        self.exact.keys().map(|h| &**h)
    }

    /// The suffixes of the Ingress wildcard hosts (`*.<suffix>`) with rules.
    pub fn wildcard_suffixes(&self) -> impl Iterator<Item = &str> {
        self.wildcard.keys().map(|h| &**h)
    }

    /// The catch-all default backend.
    pub fn default_value(&self) -> Option<&T> {
        self.default.as_ref()
    }

    /// The path table of exact host `host` (lowercase), for another front end's
    /// inserts: a host without one gets a copy of the Ingress wildcard table that
    /// serves it, its rules and default (so the rules that served it still do, first),
    /// else an empty table.
    pub fn exact_inheriting_mut(&mut self, host: &str) -> &mut Paths<T>
    where
        T: Clone,
    {
        if !self.exact.contains_key(host) {
            let inherited = host
                .split_once('.')
                .filter(|(first, _)| !first.is_empty())
                .and_then(|(_, suffix)| self.wildcard.get(suffix))
                .cloned()
                .unwrap_or_default();
            self.exact.insert(host.into(), inherited);
        }
        self.exact.entry(host.into()).or_default()
    }

    /// Orders all path tables (call once after the inserts).
    pub fn finish(&mut self) {
        self.exact.values_mut().for_each(Paths::finish);
        self.wildcard.values_mut().for_each(Paths::finish);
        self.deep.values_mut().for_each(Paths::finish);
        self.any.finish();
    }

    /// The route for `host` (lowercase, no port) and `path`: the paths of the most
    /// specific host with rules (exact, else wildcard, else the Gateway API wildcard
    /// with the longest suffix), else that host's default backend; for a host without
    /// rules of its own, the rules without host, else the catch-all default backend.
    pub fn route(&self, host: &str, path: &str) -> Option<&T> {
        let wildcard = || {
            // (No wildcard rule, no search for the host's suffix.)
            if self.wildcard.is_empty() {
                return None;
            }
            let (first, suffix) = host.split_once('.')?;
            (!first.is_empty()).then(|| self.wildcard.get(suffix))?
        };
        let deep = || {
            if self.deep.is_empty() || host.starts_with('.') {
                return None;
            }
            host.match_indices('.')
                .find_map(|(i, _)| self.deep.get(&host[i + 1..]))
        };
        match self.exact.get(host).or_else(wildcard).or_else(deep) {
            Some(paths) => paths.find(path).or(paths.default.as_ref()),
            None => self.any.find(path).or(self.default.as_ref()),
        }
    }

    /// Number of path rules.
    pub fn len(&self) -> usize {
        self.exact.values().map(Paths::len).sum::<usize>()
            + self.wildcard.values().map(Paths::len).sum::<usize>()
            + self.deep.values().map(Paths::len).sum::<usize>()
            + self.any.len()
    }

    /// No rules and no default.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
            && self.default.is_none()
            && self
                .exact
                .values()
                .chain(self.wildcard.values())
                .all(|p| p.default.is_none())
    }
}

/// The request's host: Host header or authority, lowercase, without the port.
pub fn normalize_host(h: &str) -> std::borrow::Cow<'_, str> {
    let h = if let Some(rest) = h.strip_prefix('[') {
        // IPv6 literal: keep the brackets' content.
        rest.split(']').next().unwrap_or(rest)
    } else {
        // A port: the digits (if any) after the last `:`. One backward scan over the
        // bytes (a host is short: a generic `rsplit_once` cost twice as much).
        let b = h.as_bytes();
        let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
        match b.len() - digits {
            colon if colon > 0 && b[colon - 1] == b':' => &h[..colon - 1],
            _ => h,
        }
    };
    let dots = h.bytes().rev().take_while(|&c| c == b'.').count();
    let h = &h[..h.len() - dots];
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        h.to_ascii_lowercase().into()
    } else {
        h.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Kubernetes docs' path-matching table, plus ties and precedence.
    #[test]
    fn kubernetes_path_table() {
        type Case<'a> = (&'a [(PathKind, &'a str)], &'a str, Option<usize>);
        let cases: &[Case<'_>] = &[
            (&[(PathKind::Prefix, "/")], "/anything", Some(0)),
            (&[(PathKind::Exact, "/foo")], "/foo", Some(0)),
            (&[(PathKind::Exact, "/foo")], "/bar", None),
            (&[(PathKind::Exact, "/foo")], "/foo/", None),
            (&[(PathKind::Exact, "/foo/")], "/foo", None),
            (&[(PathKind::Prefix, "/foo")], "/foo", Some(0)),
            (&[(PathKind::Prefix, "/foo")], "/foo/", Some(0)),
            (&[(PathKind::Prefix, "/foo/")], "/foo", Some(0)),
            (&[(PathKind::Prefix, "/foo/")], "/foo/", Some(0)),
            (&[(PathKind::Prefix, "/aaa/bb")], "/aaa/bbb", None),
            (&[(PathKind::Prefix, "/aaa/bbb")], "/aaa/bbb", Some(0)),
            (&[(PathKind::Prefix, "/aaa/bbb/")], "/aaa/bbb", Some(0)),
            (&[(PathKind::Prefix, "/aaa/bbb")], "/aaa/bbb/", Some(0)),
            (&[(PathKind::Prefix, "/aaa/bbb")], "/aaa/bbb/ccc", Some(0)),
            (&[(PathKind::Prefix, "/aaa/bbb")], "/aaa/bbbxyz", None),
            (
                &[(PathKind::Prefix, "/"), (PathKind::Prefix, "/aaa")],
                "/aaa/ccc",
                Some(1),
            ),
            (
                &[(PathKind::Prefix, "/aaa"), (PathKind::Prefix, "/")],
                "/aaa/ccc",
                Some(0),
            ),
            (
                &[(PathKind::Prefix, "/"), (PathKind::Prefix, "/aaa")],
                "/ccc",
                Some(0),
            ),
            (&[(PathKind::Prefix, "/aaa")], "/ccc", None),
            (
                &[(PathKind::Prefix, "/..."), (PathKind::Prefix, "/")],
                "/.../",
                Some(0),
            ),
            (
                &[(PathKind::Prefix, "/foo"), (PathKind::Exact, "/foo")],
                "/foo",
                Some(1),
            ),
            (
                &[(PathKind::Exact, "/foo"), (PathKind::Prefix, "/foo")],
                "/foo/x",
                Some(1),
            ),
            (&[(PathKind::Exact, "/Foo")], "/foo", None),
            (
                &[(PathKind::Prefix, "/a"), (PathKind::Prefix, "/a/b")],
                "/a/b/c",
                Some(1),
            ),
        ];
        for (rules, path, want) in cases {
            let mut p = Paths::default();
            for (i, (k, r)) in rules.iter().enumerate() {
                p.insert(*k, r, i);
            }
            p.finish();
            assert_eq!(p.find(path).copied(), *want, "{rules:?} {path}");
        }
    }

    #[test]
    fn identical_rules_first_wins() {
        let mut p = Paths::default();
        assert!(p.insert(PathKind::Prefix, "/a", "old"));
        assert!(!p.insert(PathKind::Prefix, "/a/", "new"));
        p.finish();
        assert_eq!(p.find("/a"), Some(&"old"));
    }

    #[test]
    fn hosts() {
        let mut r = Router::default();
        r.host_mut(Some("foo.bar.com"))
            .insert(PathKind::Prefix, "/", "exact");
        r.host_mut(Some("*.bar.com"))
            .insert(PathKind::Prefix, "/", "wild");
        r.host_mut(Some("*.bar.com"))
            .insert(PathKind::Prefix, "/w", "wild-w");
        r.host_mut(None).insert(PathKind::Prefix, "/any", "any");
        r.host_mut(Some("only.bar.com"))
            .insert(PathKind::Prefix, "/only", "only");
        r.finish();
        assert_eq!(r.route("foo.bar.com", "/w"), Some(&"exact"));
        // An exact host is its own server: no fall-through to the wildcard or to the
        // rules without host.
        assert_eq!(r.route("only.bar.com", "/only/1"), Some(&"only"));
        assert_eq!(r.route("only.bar.com", "/w"), None);
        assert_eq!(r.route("only.bar.com", "/any"), None);
        assert_eq!(r.route("baz.bar.com", "/x"), Some(&"wild"));
        assert_eq!(r.route("baz.bar.com", "/w/1"), Some(&"wild-w"));
        assert_eq!(r.route("bar.com", "/x"), None);
        assert_eq!(r.route("a.baz.bar.com", "/x"), None);
        assert_eq!(r.route("a.baz.bar.com", "/any"), Some(&"any"));
        assert_eq!(r.route("other", "/any/1"), Some(&"any"));
        assert_eq!(r.route("other", "/"), None);
        assert!(r.set_default("default"));
        assert!(!r.set_default("second"));
        assert_eq!(r.route("other", "/"), Some(&"default"));
    }

    /// A host's unmatched paths go to its own default backend (or nowhere), never to
    /// the catch-all default, which serves only hosts without rules of their own.
    #[test]
    fn host_defaults() {
        let mut r = Router::default();
        r.host_mut(Some("a.ex")).insert(PathKind::Prefix, "/a", "a");
        assert!(r.host_mut(Some("a.ex")).set_default("a-default"));
        assert!(!r.host_mut(Some("a.ex")).set_default("second"));
        r.host_mut(Some("b.ex")).insert(PathKind::Prefix, "/b", "b");
        // A host with no paths at all, only a default.
        r.host_mut(Some("c.ex")).set_default("c-default");
        r.host_mut(Some("*.w.ex")).set_default("w-default");
        r.host_mut(None).insert(PathKind::Prefix, "/any", "any");
        assert!(r.set_default("catch-all"));
        r.finish();
        assert_eq!(r.route("a.ex", "/a/1"), Some(&"a"));
        assert_eq!(r.route("a.ex", "/other"), Some(&"a-default"));
        assert_eq!(r.route("a.ex", "/any"), Some(&"a-default"));
        assert_eq!(r.route("b.ex", "/other"), None);
        assert_eq!(r.route("c.ex", "/x"), Some(&"c-default"));
        assert_eq!(r.route("x.w.ex", "/x"), Some(&"w-default"));
        assert_eq!(r.route("zzz", "/any/1"), Some(&"any"));
        assert_eq!(r.route("zzz", "/x"), Some(&"catch-all"));
        assert_eq!(r.route("", "/x"), Some(&"catch-all"));
        let mut only = Router::default();
        only.host_mut(Some("c.ex")).set_default("c-default");
        assert!(!only.is_empty());
        assert!(Router::<()>::default().is_empty());
    }

    /// Gateway API wildcards match any number of labels; the longest suffix wins, and
    /// Ingress hosts (exact, one-label wildcard) come first.
    #[test]
    fn deep_wildcards() {
        let mut r = Router::default();
        r.deep_wildcard_mut("example.com")
            .insert(PathKind::Prefix, "/", "deep");
        r.deep_wildcard_mut("b.example.com")
            .insert(PathKind::Prefix, "/", "deeper");
        r.host_mut(Some("*.c.example.com"))
            .insert(PathKind::Prefix, "/", "ingress-wild");
        r.host_mut(None).insert(PathKind::Prefix, "/", "any");
        r.finish();
        assert_eq!(r.route("a.example.com", "/"), Some(&"deep"));
        assert_eq!(r.route("x.y.example.com", "/"), Some(&"deep"));
        assert_eq!(r.route("a.b.example.com", "/"), Some(&"deeper"));
        assert_eq!(r.route("z.a.b.example.com", "/"), Some(&"deeper"));
        assert_eq!(r.route("x.c.example.com", "/"), Some(&"ingress-wild"));
        assert_eq!(r.route("example.com", "/"), Some(&"any"));
        assert_eq!(r.route(".example.com", "/"), Some(&"any"));
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn host_normalization() {
        assert_eq!(normalize_host("Foo.COM:8080"), "foo.com");
        assert_eq!(normalize_host("foo.com."), "foo.com");
        assert_eq!(normalize_host("[::1]:80"), "::1");
        assert_eq!(normalize_host("foo.com"), "foo.com");
        // The port is the digits after the last colon, empty or not.
        assert_eq!(normalize_host("foo:"), "foo");
        assert_eq!(normalize_host("a:b:80"), "a:b");
        assert_eq!(normalize_host("foo:8x"), "foo:8x");
        assert_eq!(normalize_host("1234"), "1234");
        assert_eq!(normalize_host(":80"), "");
        assert_eq!(normalize_host("Foo.com..:443"), "foo.com");
        assert_eq!(normalize_host("[::1]"), "::1");
        assert_eq!(normalize_host("127.0.0.1:18283"), "127.0.0.1");
    }

    proptest! {
        /// Prefix `/a/b` matches exactly the paths that are `/a/b` or start with `/a/b/`.
        #[test]
        fn prefix_is_element_wise(rule in "(/[ab]{1,2}){1,3}/?", path in "(/[ab]{0,2}){1,4}/?") {
            let mut p = Paths::default();
            p.insert(PathKind::Prefix, &rule, ());
            p.finish();
            let r = rule.trim_end_matches('/');
            let rs: Vec<&str> = r.split('/').collect();
            let ps: Vec<&str> = path.split('/').collect();
            let want = ps.len() >= rs.len() && rs.iter().zip(&ps).all(|(a, b)| a == b);
            // `/a/` splits into ["", "a", ""]: a trailing empty element still matches.
            prop_assert_eq!(p.find(&path).is_some(), want, "{} {}", rule, path);
        }

        /// The chosen rule always matches and no longer matching rule exists.
        #[test]
        fn longest_match_wins(rules in proptest::collection::vec(("(/[ab]){1,3}", any::<bool>()), 1..6), path in "(/[ab]){0,4}") {
            let mut p = Paths::default();
            for (i, (r, exact)) in rules.iter().enumerate() {
                p.insert(if *exact { PathKind::Exact } else { PathKind::Prefix }, r, i);
            }
            p.finish();
            if let Some(&i) = p.find(&path) {
                let (r, _) = &rules[i];
                let ok = path == *r || path.starts_with(&format!("{r}/"));
                prop_assert!(ok);
                for (r2, exact2) in &rules {
                    let m = if *exact2 { path == *r2 } else { path == *r2 || path.starts_with(&format!("{r2}/")) };
                    prop_assert!(!m || r2.len() <= r.len());
                }
            }
        }
    }
}
