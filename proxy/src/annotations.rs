//! MultiClusterIngress tuning annotations (`causeway.io/*`, see
//! `causeway_crds::well_known::annotations::mci`), parsed by the crate shared with the
//! MCI controller. A value that does not parse keeps the default and logs a warning
//! naming the MCI, the key and the value.

use std::collections::BTreeMap;
use std::time::Duration;

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
    /// Longest wait for the next bytes of a response body from the upstream (nginx's
    /// `proxy_read_timeout`): an upstream silent longer has the response cut off. Set
    /// by `--read-timeout` only (no annotation).
    pub read_timeout: Duration,
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
            // Below common backends' keep-alive timeouts (Node.js and Apache 5 s).
            idle_timeout: Duration::from_secs(4),
            // nginx's proxy_read_timeout.
            read_timeout: Duration::from_secs(60),
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
    /// Request headers with `_` in their names are forwarded (default: dropped).
    pub underscores_in_headers: bool,
    /// Protocols a request may upgrade to (lowercase; default `websocket`).
    pub allowed_upgrades: Vec<String>,
    /// How to speak to the backends (None: from the port's `appProtocol`).
    pub backend_protocol: Option<crate::upstream::Protocol>,
    /// gRPC status codes a gRPC call is retried after: bit `n` for code `n` (0: none).
    pub grpc_retry_on: u32,
    /// Only the endpoints of the proxy's own cluster serve (MCI-4).
    pub cluster_local: bool,
}

/// Parses the annotations of the MCI `mci` (`ns/name`, for warnings) over `defaults`
/// with the parser the MCI controller also uses (it reports bad values on the MCI);
/// returns the tuning and one message per bad value (logged as warnings here).
pub fn parse(
    mci: &str,
    ann: &BTreeMap<String, String>,
    defaults: &Defaults,
) -> (Tuning, Vec<String>) {
    use crate::upstream::Protocol;
    use causeway_crds::mci::tuning::{self, BackendProtocol, Balancer};
    let (p, errs) = tuning::parse(ann);
    let warnings: Vec<String> = errs
        .iter()
        .map(|e| {
            let msg = format!("{e}; using the default");
            // Every rebuild sees it again; the MCI controller reports it once, on the
            // MCI's Accepted condition and in an Event.
            tracing::debug!(mci, "{msg}");
            msg
        })
        .collect();
    let lb = match p.balancer {
        Balancer::PeakEwma => LbPolicy::PeakEwma,
        Balancer::RoundRobin => LbPolicy::RoundRobin,
        Balancer::LeastRequest => LbPolicy::LeastRequest,
        Balancer::ConsistentHash => LbPolicy::ConsistentHash,
    };
    let hash_on = p.hash_on.and_then(|h| match h {
        tuning::HashOn::Header(n) => http::HeaderName::from_bytes(n.as_bytes())
            .ok()
            .map(HashOn::Header),
        tuning::HashOn::Cookie(c) => Some(HashOn::Cookie(c)),
    });
    let d = defaults;
    let t = Tuning {
        // A hash key that is not a valid header name (cannot happen with the shared
        // parser's token check) falls back to the default balancer.
        lb: if lb == LbPolicy::ConsistentHash && hash_on.is_none() {
            LbPolicy::PeakEwma
        } else {
            lb
        },
        hash_on,
        cluster_weights: (!p.cluster_weights.is_empty()).then_some(p.cluster_weights),
        limits: Defaults {
            connect_timeout: p.connect_timeout.unwrap_or(d.connect_timeout),
            request_timeout: p.request_timeout.unwrap_or(d.request_timeout),
            idle_timeout: p.idle_timeout.unwrap_or(d.idle_timeout),
            read_timeout: d.read_timeout,
            retries: p.retries.unwrap_or(d.retries),
            max_connections: p.max_connections.unwrap_or(d.max_connections),
            max_pending_requests: p.max_pending_requests.unwrap_or(d.max_pending_requests),
            max_requests: p.max_requests.unwrap_or(d.max_requests),
        },
        ssl_redirect: p.ssl_redirect,
        health_check: p.health_check_path.map(|path| {
            let interval = p
                .health_check_interval
                .unwrap_or(Duration::from_secs(5))
                .max(Duration::from_millis(100));
            (path, interval)
        }),
        underscores_in_headers: p.underscores_in_headers,
        allowed_upgrades: p
            .allowed_upgrades
            .unwrap_or_else(|| vec!["websocket".to_string()]),
        backend_protocol: p.backend_protocol.map(|b| match b {
            BackendProtocol::Http1 => Protocol::Http1,
            BackendProtocol::H2c => Protocol::H2c,
            BackendProtocol::H2 => Protocol::H2Tls,
        }),
        grpc_retry_on: p.grpc_retry_on,
        cluster_local: p.cluster_local,
    };
    (t, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_crds::well_known::annotations::mci as keys;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
                (keys::UNDERSCORES_IN_HEADERS, "true"),
                (keys::ALLOWED_UPGRADES, "WebSocket,h2c"),
                (keys::BACKEND_PROTOCOL, "h2"),
                (keys::GRPC_RETRY_ON, "unavailable"),
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
        assert!(t.underscores_in_headers);
        assert_eq!(t.allowed_upgrades, ["websocket", "h2c"]);
        assert_eq!(t.backend_protocol, Some(crate::upstream::Protocol::H2Tls));
        assert_eq!(t.grpc_retry_on, 1 << 14);
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
                (keys::MAX_REQUESTS, "-1"),
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
        // Defaults: underscored headers dropped, WebSocket the only upgrade.
        assert!(!t.underscores_in_headers);
        assert_eq!(t.allowed_upgrades, ["websocket"]);
        let (t, w) = parse(
            "ns/a",
            &ann(&[(keys::LOAD_BALANCER, "consistent-hash")]),
            &d,
        );
        assert_eq!((t.lb, w.len()), (LbPolicy::PeakEwma, 1));
    }
}
