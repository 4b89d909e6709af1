//! The request pipeline: the phases both request paths share, written once. The two
//! engines only move bytes: the HTTP/1.1 engine ([`crate::h1`]) parses and writes
//! them itself, the hyper path ([`crate::forward`]) takes and gives `http` types. Each
//! runs a request through these phases in this order:
//!
//! 1. **route**: `route` looks up host and path in the table (after the engine's
//!    request checks in [`crate::target`]): a backend, an https redirect, or a
//!    `Refusal` (404 no route, 503 unresolved backend);
//! 2. **read body**: the engine reads a body of up to `MAX_REPLAY` bytes whole,
//!    within the request timeout (`body_timeout` when it does not arrive);
//! 3. **hash key**: `hash_key` over the engine's request `Head`;
//! 4. **admit**: `admit` takes a circuit slot (503 when open);
//! 5. **pick** and **retry**: `Attempts` picks an endpoint per attempt, skipping
//!    those tried, within the attempts and the retry budget (503 no endpoints, 502
//!    when they are used up);
//! 6. **respond** and **account**: the engine writes the answer; [`Proxy`]'s
//!    accounting (`account`) records latency, outlier state, per-cluster counts
//!    and the answers the proxy makes itself.
//!
//! Dependencies run one way: listener ([`crate::server`]) → engines ([`crate::h1`],
//! [`crate::forward`]) → pipeline → table, balance, circuit, upstream, headers. The
//! pipeline never calls an engine or the listener, and neither engine calls the other
//! (the listener hands a connection from one to the other). The hot path allocates
//! nothing here: plain functions and one small struct, generic over the engine's head.

pub(crate) mod account;
mod drain;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};

pub use drain::Drain;

use crate::annotations::HashOn;
use crate::balance::maglev::hash_bytes;
use crate::circuit::Permit;
use crate::clock::nanos_at;
use crate::endpoint::{Endpoint, InFlight};
use crate::headers;
use crate::health::Outlier;
use crate::metrics::Metrics;
use crate::retry::Budget;
use crate::table::{Backend, RouteTable, Target};
use crate::upstream;

/// Request bodies up to this size are buffered, so they can go to another endpoint:
/// after any failure for idempotent methods, after a refused connect for the others.
pub(crate) const MAX_REPLAY: u64 = 64 * 1024;

/// Forwarding state shared by all connections.
pub struct Proxy {
    /// The current route table.
    pub table: Arc<ArcSwap<RouteTable>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Passive outlier ejection.
    pub outlier: Outlier,
    /// Retry budget.
    pub budget: Budget,
    /// The https port for ssl-redirect Locations (None: no https listener).
    pub https_port: Option<u16>,
    /// Open WebSocket/Upgrade tunnels. hyper is done with a connection once it has
    /// switched protocols, so the listeners' drain does not see them; shutdown waits
    /// for these, then cuts them.
    pub tunnels: Drain,
}

/// The downstream connection a request came on.
#[derive(Clone, Debug)]
pub struct Conn {
    /// Client address.
    pub remote: SocketAddr,
    /// The client's IP as an `X-Forwarded-For` element (rendered once per connection).
    pub remote_ip: HeaderValue,
    /// Came over TLS.
    pub https: bool,
    /// Came to this mesh port (GW-4): routed by the mesh routes captured there, not
    /// by host and path.
    pub mesh: Option<u16>,
}

impl Conn {
    /// A connection from `remote`.
    pub fn new(remote: SocketAddr, https: bool) -> Self {
        Conn {
            remote,
            remote_ip: headers::client_ip_value(remote.ip()),
            https,
            mesh: None,
        }
    }
}

/// Downstream connection limits (the listener's, read by both engines).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Time a client has to send the request head (and the TLS handshake, and the
    /// first bytes that show its protocol); also how long an idle keep-alive
    /// connection (HTTP/1.1 or HTTP/2) stays open.
    pub header_read_timeout: Duration,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// How long shutdown waits for open connections.
    pub drain_timeout: Duration,
    /// How long a response may wait on a client that takes none of it (an HTTP/2
    /// stream whose window it keeps shut, a socket it does not read) before its
    /// connection is closed, as nginx's `send_timeout`. The proxy's own HTTP/1.1
    /// engine uses the route's read timeout for this.
    pub send_timeout: Duration,
    /// Serve HTTP/1.1 requests on the proxy's own engine ([`crate::h1`]); false: hyper
    /// serves every connection.
    pub own_http1: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            drain_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            own_http1: true,
        }
    }
}

pub(crate) use crate::refusal::Refusal;

/// Where the route phase sends a request.
pub(crate) enum Routed {
    /// To this backend.
    Backend(Arc<Backend>),
    /// To https (the route wants TLS and the request came in plain).
    Redirect,
    /// To HTTPRoute rules, decided on the whole request ([`crate::gateway::decide`]).
    Gateway(Arc<crate::gateway::HostRules>),
    /// Nowhere: answered by the proxy.
    Refused(Refusal),
}

/// The route phase: the backend for normalised `host` and `path` of a request on
/// `conn` (the mesh routes of its mesh port, if it came to one).
#[inline]
pub(crate) fn route(table: &RouteTable, host: &str, path: &str, conn: &Conn) -> Routed {
    let found = match conn.mesh {
        None => table.route(host, path),
        Some(port) => table.mesh_route(port),
    };
    match found {
        None if conn.mesh.is_some() => Routed::Refused(Refusal::new(
            StatusCode::NOT_FOUND,
            "no_route",
            "no ServiceImport names this mesh port any more".to_string(),
        )),
        None => Routed::Refused(Refusal::new(
            StatusCode::NOT_FOUND,
            "no_route",
            format!("no MultiClusterIngress rule matches host {host:?} and path {path:?}"),
        )),
        Some(route) if route.ssl_redirect && !conn.https => Routed::Redirect,
        Some(route) => match &route.target {
            Target::Backend(b) => Routed::Backend(b.clone()),
            Target::Unavailable(why) => Routed::Refused(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "backend_unresolved",
                format!("backend of {} unavailable: {why}", route.mci),
            )),
            Target::Gateway(rules) => Routed::Gateway(rules.clone()),
        },
    }
}

/// The answer when a request body did not arrive within `within` (the request
/// timeout).
pub(crate) fn body_timeout(within: Duration) -> Refusal {
    Refusal::new(
        StatusCode::REQUEST_TIMEOUT,
        "client_body_timeout",
        format!("the request body did not arrive within {within:?}"),
    )
}

/// The answer when a gRPC call's own deadline (its `grpc-timeout`, `within`) passed
/// before the response head.
pub(crate) fn deadline_exceeded(within: Duration) -> Refusal {
    Refusal::new(
        StatusCode::GATEWAY_TIMEOUT,
        "grpc_deadline",
        format!(
            "the call's deadline (grpc-timeout {within:?}) passed before the upstream answered"
        ),
    )
}

/// Idempotent methods (RFC 9110 section 9.2.2): retried after any failure. Both request
/// paths ask this one list (the engine with the method's bytes).
#[inline]
pub(crate) fn idempotent(method: &[u8]) -> bool {
    matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"PUT" | b"DELETE" | b"TRACE"
    )
}

/// A request head as an engine holds it: what the hash key reads.
pub(crate) trait Head {
    /// The first value of header `name`.
    fn header(&self, name: &HeaderName) -> Option<&[u8]>;
    /// The value of cookie `name` in the `Cookie` headers.
    fn cookie(&self, name: &str) -> Option<&str>;
}

impl Head for HeaderMap {
    #[inline]
    fn header(&self, name: &HeaderName) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }

    #[inline]
    fn cookie(&self, name: &str) -> Option<&str> {
        headers::cookie(self, name)
    }
}

/// The hash key phase: the consistent-hash key of a request to a backend that hashes
/// `on` a header or a cookie (None: it does not, or the request has none).
#[inline]
pub(crate) fn hash_key(on: Option<&HashOn>, head: &impl Head) -> Option<u64> {
    match on? {
        HashOn::Header(h) => head.header(h).map(hash_bytes),
        HashOn::Cookie(c) => head.cookie(c).map(|v| hash_bytes(v.as_bytes())),
    }
}

/// The admit phase: a circuit slot for a request to `b` (503 when refused).
pub(crate) async fn admit(b: &Backend) -> Result<Permit, Refusal> {
    let l = &b.tuning.limits;
    b.circuit
        .acquire(
            l.max_requests,
            l.max_pending_requests,
            l.max_connections,
            l.request_timeout,
        )
        .await
        .map_err(|open| {
            Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "circuit_open",
                format!("circuit open for backend {} of {}: {open}", b.name, b.mci),
            )
        })
}

/// An endpoint picked for one attempt, with the request marked in flight on it.
pub(crate) struct Pick {
    /// The endpoint.
    pub ep: Arc<Endpoint>,
    /// The request in flight on it (its latency sample).
    pub inflight: InFlight,
    /// When it was picked: the attempt's timers start here (one clock read per attempt).
    pub at: tokio::time::Instant,
    /// The same instant in [`crate::clock::now_nanos`]'s terms (for the upstream pool).
    pub now: u64,
}

/// The pick and retry phases of one request: an endpoint per attempt, each attempt
/// after the first within the retry budget, none tried twice.
pub(crate) struct Attempts<'a> {
    proxy: &'a Proxy,
    b: &'a Backend,
    key: Option<u64>,
    /// Attempts allowed.
    total: u32,
    /// Attempts started.
    started: u32,
    /// The last failure may not be retried.
    stop: bool,
    /// Endpoints tried (allocated on the first failure only).
    tried: Vec<usize>,
    /// The last failure's message.
    last: Option<String>,
    /// The retry budget was already drawn for the next attempt.
    prepaid: bool,
}

impl<'a> Attempts<'a> {
    /// The attempts at a request to `b` with hash key `key`: retries (the backend's)
    /// only when the request can be sent again (`replayable`: its body is at hand).
    /// Deposits in the retry budget.
    #[inline]
    pub(crate) fn new(
        proxy: &'a Proxy,
        b: &'a Backend,
        key: Option<u64>,
        replayable: bool,
    ) -> Self {
        proxy.budget.deposit();
        let retries = if replayable {
            b.tuning.limits.retries
        } else {
            0
        };
        Attempts {
            proxy,
            b,
            key,
            total: 1 + retries,
            started: 0,
            stop: false,
            tried: Vec::new(),
            last: None,
            prepaid: false,
        }
    }

    /// The next attempt's endpoint; `Ok(None)` when no attempt is left (answer
    /// [`exhausted`](Self::exhausted)), a 503 when the backend has no endpoint to pick.
    #[inline]
    pub(crate) fn pick(&mut self) -> Result<Option<Pick>, Refusal> {
        if self.stop || self.started == self.total {
            return Ok(None);
        }
        if self.started > 0 && !std::mem::take(&mut self.prepaid) && !self.proxy.retry(self.b) {
            return Ok(None);
        }
        self.started += 1;
        let at = std::time::Instant::now();
        let now = nanos_at(at);
        let Some(ep) = self.b.balancer.pick(now, self.key, &self.tried) else {
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_endpoints",
                format!(
                    "no ready endpoints for backend {} of {}",
                    self.b.name, self.b.mci
                ),
            ));
        };
        let inflight = ep.start_at(now);
        Ok(Some(Pick {
            ep,
            inflight,
            at: at.into(),
            now,
        }))
    }

    /// Whether the attempt under way is the last one allowed.
    pub(crate) fn last(&self) -> bool {
        self.started == self.total
    }

    /// The attempt on `ep` failed with `e` (no response): accounted, and another
    /// attempt may follow after a refused connect or a request the upstream did not
    /// process (an HTTP/2 stream refused, or above a GOAWAY), or any failure when
    /// `idempotent`; none when the request cannot be sent again (`replayable` false: its
    /// streamed body went with this attempt). A connection that went away (a graceful
    /// restart, a draining pod) is no failure of the endpoint: not counted against it
    /// (outlier state, per-cluster counts), but this request's next attempts go
    /// elsewhere (a pod that sends GOAWAY at once would otherwise look fastest and take
    /// them all).
    pub(crate) fn failed(
        &mut self,
        ep: &Arc<Endpoint>,
        e: &upstream::Error,
        idempotent: bool,
        replayable: bool,
    ) {
        let connect = e.is_connect() || e.is_unprocessed();
        self.tried.push(Arc::as_ptr(ep) as usize);
        let msg = match e {
            upstream::Error::GoneAway(_) => {
                format!("upstream {} in cluster {}: {e}", ep.addr, ep.cluster)
            }
            _ => self.proxy.failed(self.b, ep, e),
        };
        let attempt = self.started - 1;
        tracing::debug!(backend = %self.b.name, attempt, connect, "{msg}");
        self.last = Some(msg);
        self.stop = !(replayable && (connect || idempotent));
    }

    /// Whether an attempt is left after the one under way (the retry budget aside).
    pub(crate) fn can_retry(&self) -> bool {
        !self.stop && self.started < self.total
    }

    /// Whether `ep`'s answer, one the backend retries (a gRPC status it lists), may be
    /// dropped for another attempt: one is left and the retry budget allows it (drawn
    /// now). `msg` says what `ep` answered, for when no later attempt gets a response.
    pub(crate) fn retry_answer(
        &mut self,
        ep: &Arc<Endpoint>,
        msg: impl FnOnce() -> String,
    ) -> bool {
        if !self.can_retry() || !self.proxy.retry(self.b) {
            return false;
        }
        let msg = msg();
        tracing::debug!(backend = %self.b.name, attempt = self.started - 1, "{msg}");
        self.prepaid = true;
        self.last = Some(msg);
        self.tried.push(Arc::as_ptr(ep) as usize);
        true
    }

    /// The 502 when no attempt got a response.
    pub(crate) fn exhausted(self) -> Refusal {
        Refusal::new(
            StatusCode::BAD_GATEWAY,
            "upstream_failed",
            self.last.unwrap_or_else(|| "upstream failed".into()),
        )
    }
}

#[cfg(test)]
#[path = "pipeline/tests.rs"]
mod tests;
