//! Gateway API HTTPRoutes as served: the second front end of the one route table.
//!
//! [`crate::table`] converts every accepted HTTPRoute (`table/gateway.rs`) into one
//! [`HostRules`] per hostname, inserted in the same [`crate::matching::Router`] as the
//! MultiClusterIngress rules, whose backends resolve and balance exactly as an MCI's.
//! A request routed to a `HostRules` is decided here ([`decide`]): the first [`Rule`]
//! whose path, method, headers and query parameters all match (rules are sorted by the
//! spec's precedence: hostname, exact path, longest prefix, method, most headers, most
//! query parameters, oldest route, `namespace/name`, rule order), then its redirect
//! (answered by the proxy) or a backend picked by weight. [`Rule::edit_request`] and
//! [`Rule::edit_response`] apply the header modifiers and the URL rewrite.

use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

use crate::clock::rand_u64;
use crate::matching::{PathKind, path_matches};
use crate::refusal::Refusal;
use crate::table::{Backend, Route, Target};

/// The rules of one hostname (its own, then those of less specific hostnames that
/// cover it; only those of the most specific listener matching it among every causeway
/// Gateway's, `table/gateway.rs`), in precedence order.
#[derive(Debug, Default)]
pub struct HostRules {
    /// Rules, the first matching one wins.
    pub rules: Vec<Arc<Rule>>,
    /// What a request none of them match gets instead of a 404 (HR-9): the default
    /// backend of the MultiClusterIngress host these rules share (the catch-all
    /// defaultBackend for the rules of routes without hostname).
    pub fallback: Option<Fallback>,
}

/// A MultiClusterIngress default backend behind HTTPRoute rules ([`HostRules::fallback`]).
#[derive(Debug)]
pub struct Fallback {
    /// The MCI's default route.
    pub route: Arc<Route>,
    /// A rule that edits nothing (what [`Decided::Forward`] carries).
    rule: Arc<Rule>,
}

impl Fallback {
    /// The fallback to `route`, an MCI's default backend.
    pub fn new(route: Arc<Route>) -> Fallback {
        let rule = Rule {
            route: route.mci.clone(),
            path_kind: PathKind::Prefix,
            path: "".into(),
            method: None,
            headers: Vec::new(),
            query: Vec::new(),
            listener_port: 80,
            action: Arc::new(Action::default()),
        };
        Fallback {
            route,
            rule: Arc::new(rule),
        }
    }

    /// What a request gets from the MCI default backend: as the route phase decides for
    /// an MCI route (the MCI's redirect to HTTPS for a TLS host with ssl-redirect), a
    /// 503 for a backend that did not resolve.
    fn decide(&self, r: &Request<'_>) -> Decided {
        let route = &self.route;
        if route.ssl_redirect && !r.https {
            return Decided::SslRedirect;
        }
        match &route.target {
            Target::Backend(b) => Decided::Forward(b.clone(), self.rule.clone()),
            Target::Unavailable(why) => Decided::Refused(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend_unresolved",
                format!("backend of {} unavailable: {why}", route.mci),
            )),
            Target::Gateway(_) => Decided::Refused(no_rule(r)),
        }
    }
}

/// One match of one HTTPRoute rule.
#[derive(Debug)]
pub struct Rule {
    /// `namespace/name` of the HTTPRoute.
    pub route: Arc<str>,
    /// Path match kind.
    pub path_kind: PathKind,
    /// The path as matched ([`crate::matching::rule_path`]).
    pub path: Box<str>,
    /// Method match.
    pub method: Option<Method>,
    /// Exact header matches.
    pub headers: Vec<(HeaderName, Box<str>)>,
    /// Exact query parameter matches.
    pub query: Vec<(Box<str>, Box<str>)>,
    /// The port of the listener the route attached to (redirects without a port).
    pub listener_port: u16,
    /// What the rule does (shared by its matches).
    pub action: Arc<Action>,
}

/// What a matched rule does.
#[derive(Debug, Default)]
pub struct Action {
    /// RequestHeaderModifier.
    pub request_headers: Option<HeaderEdit>,
    /// ResponseHeaderModifier.
    pub response_headers: Option<HeaderEdit>,
    /// RequestRedirect: answered by the proxy, no backend.
    pub redirect: Option<Redirect>,
    /// URLRewrite.
    pub rewrite: Option<Rewrite>,
    /// Backends by cumulative weight: `(upper bound, target)`.
    pub backends: Vec<(u64, Target)>,
}

/// Header set, add and remove.
#[derive(Debug, Default)]
pub struct HeaderEdit {
    /// Replace (or add) these.
    pub set: Vec<(HeaderName, HeaderValue)>,
    /// Append these.
    pub add: Vec<(HeaderName, HeaderValue)>,
    /// Remove these.
    pub remove: Vec<HeaderName>,
}

impl HeaderEdit {
    /// Applies the edit to `h`.
    pub fn apply(&self, h: &mut HeaderMap) {
        for (n, v) in &self.set {
            h.insert(n.clone(), v.clone());
        }
        for (n, v) in &self.add {
            h.append(n.clone(), v.clone());
        }
        for n in &self.remove {
            h.remove(n);
        }
    }
}

/// A path replacement (redirects and rewrites).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathModifier {
    /// ReplaceFullPath.
    Full(String),
    /// ReplacePrefixMatch.
    Prefix(String),
}

/// RequestRedirect.
#[derive(Debug)]
pub struct Redirect {
    /// Scheme (None: the request's).
    pub scheme: Option<String>,
    /// Hostname (None: the request's).
    pub hostname: Option<String>,
    /// Path (None: the request's).
    pub path: Option<PathModifier>,
    /// Port (None: derived as the spec says).
    pub port: Option<u16>,
    /// 301 or 302.
    pub status: StatusCode,
}

/// URLRewrite.
#[derive(Debug)]
pub struct Rewrite {
    /// The Host header to send.
    pub hostname: Option<HeaderValue>,
    /// The path to send.
    pub path: Option<PathModifier>,
}

/// The request, as the rules read it.
pub struct Request<'a> {
    /// Method.
    pub method: &'a Method,
    /// Normalised host (lowercase, no port).
    pub host: &'a str,
    /// Normalised path, without the query.
    pub path: &'a str,
    /// The raw query (without `?`).
    pub query: Option<&'a str>,
    /// Headers.
    pub headers: &'a HeaderMap,
    /// Came over TLS.
    pub https: bool,
}

/// What to do with a request.
pub(crate) enum Decided {
    /// Forward to this backend, then edit as `rule` says.
    Forward(Arc<Backend>, Arc<Rule>),
    /// Answer with a redirect.
    Redirect(StatusCode, HeaderValue),
    /// Answer with the MCI's redirect to HTTPS (ssl-redirect), as the route phase
    /// does: to the proxy's HTTPS port, which the caller knows.
    SslRedirect,
    /// Answer with an error.
    Refused(Refusal),
}

fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

impl Rule {
    /// Whether the request satisfies every condition of this match.
    pub fn matches(&self, r: &Request<'_>) -> bool {
        path_matches(self.path_kind, &self.path, r.path)
            && self.method.as_ref().is_none_or(|m| m == r.method)
            && self.headers.iter().all(|(n, v)| {
                r.headers
                    .get(n)
                    .is_some_and(|h| h.as_bytes() == v.as_bytes())
            })
            && self
                .query
                .iter()
                .all(|(n, v)| query_value(r.query, n) == Some(v))
    }

    /// `path` with this rule's matched prefix replaced (ReplacePrefixMatch), or
    /// replaced whole.
    pub fn modify_path(&self, m: &PathModifier, path: &str) -> String {
        match m {
            PathModifier::Full(p) => p.clone(),
            PathModifier::Prefix(p) => {
                let rest = match self.path_kind {
                    PathKind::Prefix => path.get(self.path.len()..).unwrap_or(""),
                    PathKind::Exact => "",
                };
                let out = format!("{}{rest}", p.trim_end_matches('/'));
                if out.is_empty() { "/".into() } else { out }
            }
        }
    }

    /// The request edits (header modifier, URL rewrite) on `headers`; the
    /// path-and-query to send upstream.
    pub fn edit_request(
        &self,
        headers: &mut HeaderMap,
        path: &str,
        query: Option<&str>,
    ) -> Option<String> {
        let a = &self.action;
        if let Some(e) = &a.request_headers {
            e.apply(headers);
        }
        let rw = a.rewrite.as_ref()?;
        if let Some(h) = &rw.hostname {
            headers.insert(header::HOST, h.clone());
        }
        let p = rw.path.as_ref()?;
        let p = self.modify_path(p, path);
        Some(match query {
            Some(q) => format!("{p}?{q}"),
            None => p,
        })
    }

    /// The response edits (header modifier).
    pub fn edit_response(&self, headers: &mut HeaderMap) {
        if let Some(e) = &self.action.response_headers {
            e.apply(headers);
        }
    }

    fn redirect(&self, rd: &Redirect, r: &Request<'_>) -> HeaderValue {
        let well_known = |s: &str| match s {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        };
        let (scheme, port) = match (rd.scheme.as_deref(), rd.port) {
            // A scheme: the port given, else the scheme's well-known one (the spec).
            (Some(s), p) => (s, p.or_else(|| well_known(s)).unwrap_or(self.listener_port)),
            (None, Some(p)) => (if r.https { "https" } else { "http" }, p),
            // Neither: over plain HTTP the listener's port (the spec); over TLS (the
            // proxy serves routes of HTTP listeners on its TLS port too) https on its
            // well-known port, never the HTTP listener's port with https (the proxy's
            // own TLS socket port may not be the one clients reach it on)
            (None, None) if r.https => ("https", 443),
            (None, None) => ("http", self.listener_port),
        };
        // The scheme's default port is left out.
        let port = if well_known(scheme) == Some(port) {
            String::new()
        } else {
            format!(":{port}")
        };
        // (an IPv6 literal request host comes without its brackets: `normalize_host`)
        let host = match rd.hostname.as_deref() {
            Some(h) => h.to_string(),
            None if r.host.contains(':') => format!("[{}]", r.host),
            None => r.host.to_string(),
        };
        let path = match &rd.path {
            Some(m) => self.modify_path(m, r.path),
            None => r.path.to_string(),
        };
        let query = r.query.map(|q| format!("?{q}")).unwrap_or_default();
        let loc = format!("{scheme}://{host}{port}{path}{query}");
        HeaderValue::from_str(&loc).unwrap_or_else(|_| HeaderValue::from_static("/"))
    }
}

fn no_rule(r: &Request<'_>) -> Refusal {
    Refusal::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!(
            "no HTTPRoute rule matches host {:?}, path {:?}, method {} and the request's headers and query",
            r.host, r.path, r.method
        ),
    )
}

/// The first rule of `rules` matching `r` (else its fallback), and what to do with the request.
pub(crate) fn decide(rules: &HostRules, r: &Request<'_>) -> Decided {
    let Some(rule) = rules.rules.iter().find(|rule| rule.matches(r)) else {
        return match &rules.fallback {
            Some(f) => f.decide(r),
            None => Decided::Refused(no_rule(r)),
        };
    };
    let a = &rule.action;
    if let Some(rd) = &a.redirect {
        return Decided::Redirect(rd.status, rule.redirect(rd, r));
    }
    let invalid = |why: &str| {
        Decided::Refused(Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "backend_invalid",
            format!("HTTPRoute {}: {why}", rule.route),
        ))
    };
    let total = a.backends.last().map_or(0, |(w, _)| *w);
    if total == 0 {
        return invalid("the rule has no backendRef with a weight above 0");
    }
    let at = rand_u64() % total;
    match a
        .backends
        .iter()
        .find(|(upper, _)| at < *upper)
        .map(|(_, t)| t)
    {
        Some(Target::Backend(b)) => Decided::Forward(b.clone(), rule.clone()),
        Some(Target::Unavailable(why)) => invalid(why),
        _ => invalid("no backend"),
    }
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
