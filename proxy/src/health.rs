//! Endpoint health: passive outlier ejection (consecutive connect errors and 5xx,
//! Envoy-style growing ejection time, capped share of a backend) and the optional
//! active HTTP health check (`causeway.io/health-check-path`; over HTTP/2 to backends
//! spoken to that way).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_nanos;
use crate::endpoint::Endpoint;
use crate::metrics::Metrics;
use crate::upstream::{self, Protocol};

/// Outlier-ejection settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Outlier {
    /// Consecutive failures that eject an endpoint.
    pub consecutive_failures: u32,
    /// Ejection time of the first ejection; the n-th lasts n times as long.
    pub base_ejection: Duration,
    /// Longest ejection.
    pub max_ejection: Duration,
    /// Never eject more than this share of a backend's endpoints.
    pub max_ejected_share: f64,
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            consecutive_failures: 5,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
            max_ejected_share: 0.5,
        }
    }
}

impl Outlier {
    /// Records a failure of `ep` among `all` (its backend's endpoints); true when it
    /// was ejected now.
    pub fn failure(&self, ep: &Endpoint, all: &[Arc<Endpoint>]) -> bool {
        if ep.record_failure() < self.consecutive_failures {
            return false;
        }
        let now = now_nanos();
        let ejected = all.iter().filter(|e| e.is_ejected(now)).count();
        let allowed = (all.len() as f64 * self.max_ejected_share).floor() as usize;
        if ejected + 1 > allowed {
            return false;
        }
        let done = ep.eject(now, self.base_ejection, self.max_ejection);
        if done {
            tracing::info!(endpoint = %ep.addr, cluster = %ep.cluster, ejections = ep.ejections(), "endpoint ejected after consecutive failures");
        }
        done
    }
}

/// Runs active health checks for backends that ask for them, until `stop`.
pub async fn run_active(
    table: Arc<arc_swap::ArcSwap<crate::table::RouteTable>>,
    metrics: Arc<Metrics>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut last: HashMap<SocketAddr, tokio::time::Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let t = table.load_full();
        let now = tokio::time::Instant::now();
        for b in &t.backends {
            let Some((path, interval)) = b.tuning.health_check.clone() else {
                continue;
            };
            for ep in b.balancer.endpoints() {
                if last
                    .get(&ep.addr)
                    .is_some_and(|l| now.duration_since(*l) < interval)
                {
                    continue;
                }
                last.insert(ep.addr, now);
                let ep = ep.clone();
                let path = path.clone();
                let timeout = b.tuning.limits.connect_timeout.max(Duration::from_secs(1));
                let (protocol, metrics) = (b.protocol, metrics.clone());
                tokio::spawn(async move {
                    let ok = match protocol {
                        Protocol::Http1 => probe(ep.addr, &path, timeout).await,
                        p => {
                            probe_h2(ep.addr, p == Protocol::H2Tls, &path, timeout, &metrics).await
                        }
                    };
                    if ok == ep.is_unhealthy() {
                        tracing::info!(endpoint = %ep.addr, healthy = ok, "active health check changed");
                    }
                    ep.set_unhealthy(!ok);
                });
            }
        }
        if last.len() > 100_000 {
            last.clear();
        }
    }
}

/// One HTTP/1.1 GET: healthy on 2xx/3xx within `timeout`.
async fn probe(addr: SocketAddr, path: &str, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: causeway-proxy-health\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await.ok()?;
        let head = std::str::from_utf8(&buf[..n]).ok()?;
        let code: u16 = head.split(' ').nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    matches!(tokio::time::timeout(timeout, fut).await, Ok(Some(true)))
}

/// One HTTP/2 GET on a connection of its own (h2c, or TLS when `tls`): healthy on
/// 2xx/3xx within `timeout`.
async fn probe_h2(
    addr: SocketAddr,
    tls: bool,
    path: &str,
    timeout: Duration,
    metrics: &Metrics,
) -> bool {
    use http_body_util::{BodyExt, Empty};
    let fut = async {
        let mut tx = upstream::h2::connect(addr, tls, timeout, metrics)
            .await
            .ok()?;
        let scheme = if tls { "https" } else { "http" };
        let req = http::Request::get(format!("{scheme}://{addr}{path}"))
            .header(http::header::USER_AGENT, "causeway-proxy-health")
            .body(
                Empty::new()
                    .map_err(|never: std::convert::Infallible| match never {})
                    .boxed_unsync(),
            )
            .ok()?;
        let s = tx.send_request(req).await.ok()?.status();
        Some(s.is_success() || s.is_redirection())
    };
    matches!(tokio::time::timeout(timeout, fut).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(n: usize) -> Vec<Arc<Endpoint>> {
        (0..n)
            .map(|i| {
                Arc::new(Endpoint::new(
                    format!("10.0.0.{i}:80").parse().unwrap(),
                    "c".into(),
                ))
            })
            .collect()
    }

    #[test]
    fn ejects_after_consecutive_failures_up_to_the_max_share() {
        let o = Outlier::default();
        let all = eps(4);
        for _ in 0..4 {
            assert!(!o.failure(&all[0], &all));
        }
        assert!(o.failure(&all[0], &all));
        // A success resets the count.
        for _ in 0..4 {
            o.failure(&all[1], &all);
        }
        all[1].record_success();
        assert!(!o.failure(&all[1], &all));
        for _ in 0..5 {
            o.failure(&all[2], &all);
        }
        let now = now_nanos();
        assert!(all[2].is_ejected(now));
        // 2 of 4 ejected: the third is refused (50%).
        for _ in 0..10 {
            assert!(!o.failure(&all[3], &all));
        }
        assert!(!all[3].is_ejected(now));
        // A single endpoint is never ejected.
        let one = eps(1);
        for _ in 0..10 {
            assert!(!o.failure(&one[0], &one));
        }
    }
}
