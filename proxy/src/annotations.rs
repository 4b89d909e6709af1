//! MultiClusterIngress tuning annotations (`causeway.io/*`, see
//! `causeway_crds::well_known::annotations::mci`). A value that does not parse keeps
//! the default and logs a warning naming the MCI, the key and the value.

use std::collections::BTreeMap;
use std::time::Duration;

use causeway_crds::well_known::annotations::mci as keys;

/// Which balancer a backend uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LbPolicy {
    /// Power of two choices over peak-EWMA latency × (pending + 1) (default).
    #[default]
    PeakEwma,
    /// Round robin over available endpoints.
    RoundRobin,
    /// Power of two choices over requests in flight.
    LeastRequest,
    /// Maglev consistent hashing on a header or cookie.
    ConsistentHash,
}

/// The hash key of `consistent-hash`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HashOn {
    /// A request header (lowercase name).
    Header(http::HeaderName),
    /// A cookie by name.
    Cookie(String),
}

/// Defaults the CLI sets and annotations override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Defaults {
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Until the response head.
    pub request_timeout: Duration,
    /// Pooled upstream connections idle longer are closed.
    pub idle_timeout: Duration,
    /// Retries on another endpoint.
    pub retries: u32,
    /// Circuit breaker: concurrent upstream connections (requests) per backend.
    pub max_connections: u32,
    /// Circuit breaker: requests waiting for a connection per backend.
    pub max_pending_requests: u32,
    /// Circuit breaker: concurrent requests per backend.
    pub max_requests: u32,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
            retries: 2,
            max_connections: 1024,
            max_pending_requests: 1024,
            max_requests: 1024,
        }
    }
}

/// Parsed tuning of one MCI.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Balancer.
    pub lb: LbPolicy,
    /// Hash key for [`LbPolicy::ConsistentHash`].
    pub hash_on: Option<HashOn>,
    /// Per-cluster weights (None: no locality weighting, endpoints pooled).
    pub cluster_weights: Option<BTreeMap<String, u32>>,
    /// Timeouts, retries, circuit limits.
    pub limits: Defaults,
    /// 308 plain-HTTP requests for `tls[]` hosts to https.
    pub ssl_redirect: bool,
    /// Active health check path and interval.
    pub health_check: Option<(String, Duration)>,
}

/// Parses `2s`, `500ms`, `1m`, `1h`, `1.5s` (a bare number is seconds).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

fn parse_weights(s: &str) -> Option<BTreeMap<String, u32>> {
    let mut m = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=')?;
        let k = k.trim();
        if k.is_empty() {
            return None;
        }
        m.insert(k.to_string(), v.trim().parse().ok()?);
    }
    (!m.is_empty()).then_some(m)
}

fn parse_hash_on(s: &str) -> Option<HashOn> {
    let (kind, name) = s.trim().split_once(':')?;
    let name = name.trim();
    match kind.trim() {
        "header" => http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .ok()
            .map(HashOn::Header),
        "cookie" if !name.is_empty() => Some(HashOn::Cookie(name.to_string())),
        _ => None,
    }
}

/// Parses the annotations of the MCI `mci` (`ns/name`, for warnings) over `defaults`.
/// Returns the tuning and one message per bad value.
pub fn parse(
    mci: &str,
    ann: &BTreeMap<String, String>,
    defaults: &Defaults,
) -> (Tuning, Vec<String>) {
    let warnings = std::cell::RefCell::new(Vec::new());
    let bad = |key: &str, value: &str, what: &str| {
        let msg = format!("annotation {key}={value:?} is not {what}; using the default");
        tracing::warn!(mci, key, value, "{msg}");
        warnings.borrow_mut().push(msg);
    };
    let mut t = Tuning {
        lb: LbPolicy::default(),
        hash_on: None,
        cluster_weights: None,
        limits: defaults.clone(),
        ssl_redirect: false,
        health_check: None,
    };
    if let Some(v) = ann.get(keys::LOAD_BALANCER) {
        match v.trim() {
            "peak-ewma" => t.lb = LbPolicy::PeakEwma,
            "round-robin" => t.lb = LbPolicy::RoundRobin,
            "least-request" => t.lb = LbPolicy::LeastRequest,
            "consistent-hash" => t.lb = LbPolicy::ConsistentHash,
            _ => bad(
                keys::LOAD_BALANCER,
                v,
                "peak-ewma, round-robin, least-request or consistent-hash",
            ),
        }
    }
    if let Some(v) = ann.get(keys::HASH_ON) {
        match parse_hash_on(v) {
            Some(h) => t.hash_on = Some(h),
            None => bad(keys::HASH_ON, v, "header:<name> or cookie:<name>"),
        }
    }
    if t.lb == LbPolicy::ConsistentHash && t.hash_on.is_none() {
        let msg = format!(
            "{} is consistent-hash but {} is missing or invalid; using peak-ewma",
            keys::LOAD_BALANCER,
            keys::HASH_ON
        );
        tracing::warn!(mci, "{msg}");
        warnings.borrow_mut().push(msg);
        t.lb = LbPolicy::PeakEwma;
    }
    if let Some(v) = ann.get(keys::CLUSTER_WEIGHTS) {
        match parse_weights(v) {
            Some(w) => t.cluster_weights = Some(w),
            None => bad(keys::CLUSTER_WEIGHTS, v, "a list like east=3,west=1"),
        }
    }
    let durations: [(&str, &mut Duration); 3] = [
        (keys::CONNECT_TIMEOUT, &mut t.limits.connect_timeout),
        (keys::REQUEST_TIMEOUT, &mut t.limits.request_timeout),
        (keys::IDLE_TIMEOUT, &mut t.limits.idle_timeout),
    ];
    for (key, slot) in durations {
        if let Some(v) = ann.get(key) {
            match parse_duration(v) {
                Some(d) if !d.is_zero() => *slot = d,
                _ => bad(key, v, "a positive duration like 2s or 500ms"),
            }
        }
    }
    let counts: [(&str, &mut u32); 4] = [
        (keys::RETRIES, &mut t.limits.retries),
        (keys::MAX_CONNECTIONS, &mut t.limits.max_connections),
        (
            keys::MAX_PENDING_REQUESTS,
            &mut t.limits.max_pending_requests,
        ),
        (keys::MAX_REQUESTS, &mut t.limits.max_requests),
    ];
    for (key, slot) in counts {
        if let Some(v) = ann.get(key) {
            match v.trim().parse::<u32>() {
                Ok(n) if key == keys::RETRIES || n > 0 => *slot = n,
                _ => bad(key, v, "a positive integer"),
            }
        }
    }
    if let Some(v) = ann.get(keys::SSL_REDIRECT) {
        match v.trim() {
            "true" => t.ssl_redirect = true,
            "false" => {}
            _ => bad(keys::SSL_REDIRECT, v, "\"true\" or \"false\""),
        }
    }
    if let Some(p) = ann.get(keys::HEALTH_CHECK_PATH) {
        if p.starts_with('/') {
            let mut interval = Duration::from_secs(5);
            if let Some(v) = ann.get(keys::HEALTH_CHECK_INTERVAL) {
                match parse_duration(v) {
                    Some(d) if d >= Duration::from_millis(100) => interval = d,
                    _ => bad(
                        keys::HEALTH_CHECK_INTERVAL,
                        v,
                        "a duration of at least 100ms",
                    ),
                }
            }
            t.health_check = Some((p.clone(), interval));
        } else {
            bad(keys::HEALTH_CHECK_PATH, p, "an absolute path like /healthz");
        }
    }
    (t, warnings.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        for bad in ["", "s", "-1s", "2 parsecs", "1e400s", "ms5"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn good_values_parse() {
        let (t, w) = parse(
            "ns/a",
            &ann(&[
                (keys::LOAD_BALANCER, "consistent-hash"),
                (keys::HASH_ON, "header:X-User"),
                (keys::CLUSTER_WEIGHTS, "east=3, west=1"),
                (keys::CONNECT_TIMEOUT, "500ms"),
                (keys::RETRIES, "0"),
                (keys::SSL_REDIRECT, "true"),
                (keys::HEALTH_CHECK_PATH, "/healthz"),
                (keys::HEALTH_CHECK_INTERVAL, "1s"),
                (keys::MAX_REQUESTS, "10"),
            ]),
            &Defaults::default(),
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(t.lb, LbPolicy::ConsistentHash);
        assert_eq!(
            t.hash_on,
            Some(HashOn::Header(http::HeaderName::from_static("x-user")))
        );
        assert_eq!(t.cluster_weights.unwrap()["east"], 3);
        assert_eq!(t.limits.connect_timeout, Duration::from_millis(500));
        assert_eq!(t.limits.retries, 0);
        assert_eq!(t.limits.max_requests, 10);
        assert!(t.ssl_redirect);
        assert_eq!(
            t.health_check,
            Some(("/healthz".to_string(), Duration::from_secs(1)))
        );
    }

    #[test]
    fn bad_values_keep_defaults_and_warn() {
        let d = Defaults::default();
        let (t, w) = parse(
            "ns/a",
            &ann(&[
                (keys::LOAD_BALANCER, "random-ish"),
                (keys::CLUSTER_WEIGHTS, "east=x"),
                (keys::CONNECT_TIMEOUT, "soon"),
                (keys::MAX_REQUESTS, "0"),
                (keys::SSL_REDIRECT, "yes"),
                (keys::HEALTH_CHECK_PATH, "healthz"),
            ]),
            &d,
        );
        assert_eq!(w.len(), 6, "{w:?}");
        assert_eq!(t.lb, LbPolicy::PeakEwma);
        assert_eq!(t.cluster_weights, None);
        assert_eq!(t.limits, d);
        assert!(!t.ssl_redirect);
        assert_eq!(t.health_check, None);
        let (t, w) = parse(
            "ns/a",
            &ann(&[(keys::LOAD_BALANCER, "consistent-hash")]),
            &d,
        );
        assert_eq!((t.lb, w.len()), (LbPolicy::PeakEwma, 1));
    }
}
