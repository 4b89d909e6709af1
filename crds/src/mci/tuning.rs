//! MultiClusterIngress tuning annotations (`causeway.io/*`, see
//! [`annotations::mci`](crate::well_known::annotations::mci)): one parser shared by the
//! controller, which reports bad values on the MCI, and causeway-proxy, which uses the
//! defaults for them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::validate::FieldError;
use crate::well_known::annotations::mci as a;

/// Load-balancing algorithm of a MultiClusterIngress's backends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Balancer {
    /// Power of two choices over peak-EWMA latency (linkerd2-proxy's default).
    #[default]
    PeakEwma,
    /// Round robin.
    RoundRobin,
    /// Power of two choices over in-flight requests.
    LeastRequest,
    /// Consistent hashing on [`Tuning::hash_on`].
    ConsistentHash,
}

/// What `consistent-hash` hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashOn {
    /// A request header (name lowercased).
    Header(String),
    /// A cookie.
    Cookie(String),
}

/// How causeway-proxy speaks to a backend's endpoints
/// ([`annotations::mci::BACKEND_PROTOCOL`](crate::well_known::annotations::mci::BACKEND_PROTOCOL)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendProtocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 in cleartext (prior knowledge).
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2,
}

/// gRPC status codes by their names in `causeway.io/grpc-retry-on` (the code is the
/// index: 0 is OK, which is never retried).
pub const GRPC_CODES: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid-argument",
    "deadline-exceeded",
    "not-found",
    "already-exists",
    "permission-denied",
    "resource-exhausted",
    "failed-precondition",
    "aborted",
    "out-of-range",
    "unimplemented",
    "internal",
    "unavailable",
    "data-loss",
    "unauthenticated",
];

/// Parsed tuning; `None` means "the proxy's default".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    pub balancer: Balancer,
    pub hash_on: Option<HashOn>,
    /// Per-cluster weight; clusters not listed weigh 1.
    pub cluster_weights: BTreeMap<String, u32>,
    pub connect_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub retries: Option<u32>,
    pub ssl_redirect: bool,
    pub health_check_path: Option<String>,
    pub health_check_interval: Option<Duration>,
    pub max_connections: Option<u32>,
    pub max_pending_requests: Option<u32>,
    pub max_requests: Option<u32>,
    /// Forward request headers with `_` in their names.
    pub underscores_in_headers: bool,
    /// Protocols a request may upgrade to, lowercase (`None`: the proxy's default).
    pub allowed_upgrades: Option<Vec<String>>,
    /// `None`: from the port's `appProtocol`.
    pub backend_protocol: Option<BackendProtocol>,
    /// gRPC status codes retried: bit `n` set retries code `n` (0: none).
    pub grpc_retry_on: u32,
    /// Only the proxy's own cluster's endpoints (`causeway.io/backend-scope:
    /// cluster-local`).
    pub cluster_local: bool,
}

/// Parses the tuning annotations; every value that does not parse is reported (with what
/// is expected) and left at its default.
pub fn parse(annotations: &BTreeMap<String, String>) -> (Tuning, Vec<FieldError>) {
    let mut t = Tuning::default();
    let mut errs = Vec::new();
    let mut bad = |key: &str, value: &str, expected: &str| {
        errs.push(FieldError {
            field: format!("metadata.annotations[{key}]"),
            message: format!("{value:?} is not valid: expected {expected}"),
        })
    };
    let get = |k: &str| annotations.get(k).map(|v| v.trim());
    if let Some(v) = get(a::LOAD_BALANCER) {
        match v {
            "peak-ewma" => t.balancer = Balancer::PeakEwma,
            "round-robin" => t.balancer = Balancer::RoundRobin,
            "least-request" => t.balancer = Balancer::LeastRequest,
            "consistent-hash" => t.balancer = Balancer::ConsistentHash,
            _ => bad(
                a::LOAD_BALANCER,
                v,
                "peak-ewma, round-robin, least-request or consistent-hash",
            ),
        }
    }
    if let Some(v) = get(a::HASH_ON) {
        let parsed = match v.split_once(':') {
            Some(("header", h)) if is_token(h) => Some(HashOn::Header(h.to_ascii_lowercase())),
            Some(("cookie", c)) if is_token(c) => Some(HashOn::Cookie(c.to_string())),
            _ => None,
        };
        match parsed {
            Some(h) => t.hash_on = Some(h),
            None => bad(a::HASH_ON, v, "header:<name> or cookie:<name>"),
        }
    }
    if t.balancer == Balancer::ConsistentHash && t.hash_on.is_none() {
        bad(
            a::LOAD_BALANCER,
            "consistent-hash",
            "a key to hash in causeway.io/hash-on (header:<name> or cookie:<name>); using peak-ewma",
        );
        t.balancer = Balancer::PeakEwma;
    }
    if let Some(v) = get(a::CLUSTER_WEIGHTS) {
        match parse_weights(v) {
            Some(w) => t.cluster_weights = w,
            None => bad(
                a::CLUSTER_WEIGHTS,
                v,
                "cluster=weight pairs separated by commas, weights 0..=1000, e.g. east=3,west=1",
            ),
        }
    }
    for (key, slot) in [
        (a::CONNECT_TIMEOUT, &mut t.connect_timeout),
        (a::REQUEST_TIMEOUT, &mut t.request_timeout),
        (a::IDLE_TIMEOUT, &mut t.idle_timeout),
        (a::HEALTH_CHECK_INTERVAL, &mut t.health_check_interval),
    ] {
        if let Some(v) = get(key) {
            match parse_duration(v) {
                Some(d) if !d.is_zero() => *slot = Some(d),
                _ => bad(
                    key,
                    v,
                    "a duration more than 0 and at most 24h, such as 500ms, 2s or 1m",
                ),
            }
        }
    }
    for (key, slot, max) in [
        (a::RETRIES, &mut t.retries, 10),
        (a::MAX_CONNECTIONS, &mut t.max_connections, 1_000_000),
        (
            a::MAX_PENDING_REQUESTS,
            &mut t.max_pending_requests,
            1_000_000,
        ),
        (a::MAX_REQUESTS, &mut t.max_requests, 1_000_000),
    ] {
        if let Some(v) = get(key) {
            match v.parse::<u32>() {
                Ok(n) if n <= max => *slot = Some(n),
                _ => bad(key, v, &format!("a whole number from 0 to {max}")),
            }
        }
    }
    if let Some(v) = get(a::SSL_REDIRECT) {
        match v {
            "true" => t.ssl_redirect = true,
            "false" => t.ssl_redirect = false,
            _ => bad(a::SSL_REDIRECT, v, "\"true\" or \"false\""),
        }
    }
    if let Some(v) = get(a::UNDERSCORES_IN_HEADERS) {
        match v {
            "true" => t.underscores_in_headers = true,
            "false" => t.underscores_in_headers = false,
            _ => bad(a::UNDERSCORES_IN_HEADERS, v, "\"true\" or \"false\""),
        }
    }
    if let Some(v) = get(a::ALLOWED_UPGRADES) {
        let protocols: Vec<&str> = v
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if protocols.iter().all(|p| is_token(p)) {
            t.allowed_upgrades = Some(protocols.iter().map(|p| p.to_ascii_lowercase()).collect());
        } else {
            bad(
                a::ALLOWED_UPGRADES,
                v,
                "protocol names separated by commas, e.g. websocket,h2c (empty: none)",
            );
        }
    }
    if let Some(v) = get(a::BACKEND_PROTOCOL) {
        match v {
            "http1" => t.backend_protocol = Some(BackendProtocol::Http1),
            "h2c" => t.backend_protocol = Some(BackendProtocol::H2c),
            "h2" => t.backend_protocol = Some(BackendProtocol::H2),
            _ => bad(
                a::BACKEND_PROTOCOL,
                v,
                "h2 (HTTP/2 over TLS), h2c (HTTP/2 in cleartext) or http1",
            ),
        }
    }
    if let Some(v) = get(a::GRPC_RETRY_ON) {
        let codes: Option<u32> = v
            .split(',')
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty())
            .try_fold(0u32, |set, c| {
                let i = GRPC_CODES.iter().skip(1).position(|n| *n == c)? + 1;
                Some(set | 1 << i)
            });
        match codes {
            Some(set) => t.grpc_retry_on = set,
            None => bad(
                a::GRPC_RETRY_ON,
                v,
                "gRPC status names separated by commas, e.g. unavailable,resource-exhausted",
            ),
        }
    }
    if let Some(v) = get(a::BACKEND_SCOPE) {
        match v {
            "clusterset" => t.cluster_local = false,
            "cluster-local" => t.cluster_local = true,
            _ => bad(
                a::BACKEND_SCOPE,
                v,
                "clusterset (every exporting cluster's endpoints) or cluster-local (the proxy's own cluster's)",
            ),
        }
    }
    if let Some(v) = get(a::HEALTH_CHECK_PATH) {
        if v.starts_with('/') && !v.contains(char::is_whitespace) {
            t.health_check_path = Some(v.to_string());
        } else {
            bad(a::HEALTH_CHECK_PATH, v, "an absolute path such as /healthz");
        }
    }
    (t, errs)
}

/// The longest duration [`parse_duration`] takes: 24h.
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// `500ms`, `2s`, `1.5s`, `1m`, `1h`; at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse_duration_or_why(s).ok()
}

/// [`parse_duration_or_why`] for an interval, which must be more than 0.
pub fn parse_interval_or_why(s: &str) -> Result<Duration, String> {
    match parse_duration_or_why(s)? {
        d if d.is_zero() => Err(format!("{s:?} must be more than 0, e.g. 500ms, 10s or 1m")),
        d => Ok(d),
    }
}

/// [`parse_duration`], saying why a value is refused (for flags' errors): not a
/// duration, or longer than [`MAX_DURATION`].
pub fn parse_duration_or_why(s: &str) -> Result<Duration, String> {
    let not = || {
        format!(
            "{s:?} is not a duration: use a number and a unit (ms, s, m or h), e.g. 500ms, 10s or 1m"
        )
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(not)?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| not())?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(not()),
    };
    if !secs.is_finite() || secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("{s:?} is too long: at most 24h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_weights(s: &str) -> Option<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (c, w) = pair.split_once('=')?;
        let w: u32 = w.trim().parse().ok().filter(|w| *w <= 1000)?;
        let c = c.trim();
        if c.is_empty() {
            return None;
        }
        out.insert(c.to_string(), w);
    }
    (!out.is_empty()).then_some(out)
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> (Tuning, Vec<String>) {
        let m = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (t, e) = parse(&m);
        (t, e.into_iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn defaults_without_annotations() {
        assert_eq!(p(&[]), (Tuning::default(), vec![]));
    }

    #[test]
    fn every_annotation_parses() {
        let (t, e) = p(&[
            (a::LOAD_BALANCER, "consistent-hash"),
            (a::HASH_ON, "header:X-User"),
            (a::CLUSTER_WEIGHTS, "east=3, west=1"),
            (a::CONNECT_TIMEOUT, "500ms"),
            (a::REQUEST_TIMEOUT, "1.5s"),
            (a::IDLE_TIMEOUT, "1m"),
            (a::RETRIES, "2"),
            (a::SSL_REDIRECT, "true"),
            (a::HEALTH_CHECK_PATH, "/healthz"),
            (a::HEALTH_CHECK_INTERVAL, "5s"),
            (a::MAX_CONNECTIONS, "100"),
            (a::MAX_PENDING_REQUESTS, "10"),
            (a::MAX_REQUESTS, "1000"),
            (a::UNDERSCORES_IN_HEADERS, "true"),
            (a::ALLOWED_UPGRADES, "websocket, H2C"),
            (a::BACKEND_PROTOCOL, "h2"),
            (a::GRPC_RETRY_ON, "unavailable, Resource-Exhausted"),
            (a::BACKEND_SCOPE, "cluster-local"),
        ]);
        assert_eq!(e, Vec::<String>::new());
        assert_eq!(t.balancer, Balancer::ConsistentHash);
        assert_eq!(t.hash_on, Some(HashOn::Header("x-user".into())));
        assert_eq!(
            t.cluster_weights,
            BTreeMap::from([("east".into(), 3), ("west".into(), 1)])
        );
        assert_eq!(t.connect_timeout, Some(Duration::from_millis(500)));
        assert_eq!(t.request_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(t.idle_timeout, Some(Duration::from_secs(60)));
        assert_eq!(t.retries, Some(2));
        assert!(t.ssl_redirect);
        assert_eq!(t.health_check_path.as_deref(), Some("/healthz"));
        assert_eq!(t.health_check_interval, Some(Duration::from_secs(5)));
        assert_eq!(
            (t.max_connections, t.max_pending_requests, t.max_requests),
            (Some(100), Some(10), Some(1000))
        );
        assert!(t.underscores_in_headers);
        assert_eq!(
            t.allowed_upgrades,
            Some(vec!["websocket".to_string(), "h2c".to_string()])
        );
        assert_eq!(t.backend_protocol, Some(BackendProtocol::H2));
        assert_eq!(t.grpc_retry_on, 1 << 14 | 1 << 8);
        assert!(t.cluster_local);
        let (t, e) = p(&[(a::BACKEND_SCOPE, "clusterset")]);
        assert_eq!((t.cluster_local, e.len()), (false, 0));
        for (v, want) in [
            ("h2c", BackendProtocol::H2c),
            ("http1", BackendProtocol::Http1),
        ] {
            let (t, e) = p(&[(a::BACKEND_PROTOCOL, v)]);
            assert_eq!((t.backend_protocol, e.len()), (Some(want), 0), "{v}");
        }
        // None at all.
        let (t, e) = p(&[(a::ALLOWED_UPGRADES, "")]);
        assert_eq!((t.allowed_upgrades, e.len()), (Some(vec![]), 0));
    }

    #[test]
    fn bad_values_are_reported_and_defaulted() {
        let cases: &[(&str, &str)] = &[
            (a::LOAD_BALANCER, "random"),
            (a::HASH_ON, "ip"),
            (a::HASH_ON, "header:"),
            (a::CLUSTER_WEIGHTS, "east"),
            (a::CLUSTER_WEIGHTS, "east=-1"),
            (a::CONNECT_TIMEOUT, "5"),
            (a::CONNECT_TIMEOUT, "0s"),
            (a::REQUEST_TIMEOUT, "soon"),
            (a::RETRIES, "many"),
            (a::RETRIES, "11"),
            (a::SSL_REDIRECT, "yes"),
            (a::HEALTH_CHECK_PATH, "healthz"),
            (a::MAX_REQUESTS, "-1"),
            (a::UNDERSCORES_IN_HEADERS, "yes"),
            (a::ALLOWED_UPGRADES, "web socket"),
            (a::BACKEND_PROTOCOL, "grpc"),
            (a::BACKEND_PROTOCOL, "HTTP/2"),
            (a::GRPC_RETRY_ON, "unavailable,busy"),
            (a::GRPC_RETRY_ON, "ok"),
            (a::GRPC_RETRY_ON, "14"),
            (a::BACKEND_SCOPE, "local"),
            (a::BACKEND_SCOPE, "Cluster-Local"),
        ];
        for (k, v) in cases {
            let (t, e) = p(&[(k, v)]);
            assert_eq!(e.len(), 1, "{k}={v}: {e:?}");
            assert!(
                e[0].starts_with(&format!("metadata.annotations[{k}]: ")),
                "{e:?}"
            );
            assert!(e[0].contains("expected"), "{e:?}");
            assert_eq!(t, Tuning::default(), "{k}={v}");
        }
    }

    #[test]
    fn consistent_hash_needs_a_key() {
        let (t, e) = p(&[(a::LOAD_BALANCER, "consistent-hash")]);
        assert_eq!(t.balancer, Balancer::PeakEwma);
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("causeway.io/hash-on"), "{e:?}");
    }

    #[test]
    fn durations() {
        for (s, want) in [
            ("1ms", 1),
            ("250ms", 250),
            ("2s", 2000),
            ("0.5s", 500),
            ("2m", 120_000),
        ] {
            assert_eq!(parse_duration(s), Some(Duration::from_millis(want)), "{s}");
        }
        for s in ["", "s", "1", "1d", "-1s", "1 s", "99999h"] {
            assert_eq!(parse_duration(s), None, "{s}");
        }
        // the refusals say which rule was broken
        assert_eq!(parse_duration_or_why("24h"), Ok(MAX_DURATION));
        assert_eq!(
            parse_duration_or_why("48h").unwrap_err(),
            "\"48h\" is too long: at most 24h"
        );
        assert_eq!(
            parse_duration_or_why("1d").unwrap_err(),
            "\"1d\" is not a duration: use a number and a unit (ms, s, m or h), e.g. 500ms, 10s or 1m"
        );
    }
}
