//! HTTP/2 clients' plain requests to HTTP/1.1 backends, on the raw upstream pool of
//! the HTTP/1.1 engine ([`upstream::raw`]): the request, its body at hand, is written
//! to a pooled socket as bytes, the response head parsed into the stream's header map
//! and the body read from the socket as the client's stream takes it. No hyper client
//! connection, task or channel per request, and an idle upstream connection holds no
//! buffer.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use http::{HeaderMap, Method, Response, StatusCode};
use http_body_util::BodyExt;

use super::{AtEnd, ReadTimeout, RespBody, Watched};
use crate::circuit::Permit;
use crate::endpoint::InFlight;
use crate::gateway::Rule;
use crate::pipeline::account::head_arrived;
use crate::pipeline::{Attempts, Pick, Proxy, idempotent};
use crate::table::Backend;
use crate::upstream;
use crate::upstream::raw::{self, Fields, RawBody, Rewrite, exchange};

/// An HTTP/2 client's request for the raw pool, with its whole body: its header map
/// either as the hyper path rewrote it (HTTPRoute filters, header-hashed backends) or
/// as the client sent it, `rw` saying what [`raw::write_request`] changes as it writes.
pub(super) struct Req<'a> {
    pub(super) method: &'a Method,
    /// Path and query.
    pub(super) target: &'a str,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: &'a [u8],
    /// The consistent-hash key.
    pub(super) key: Option<u64>,
    /// What the proxy changes in it as it writes it.
    pub(super) rw: Rewrite<'a>,
}

/// What a response body on the raw pool holds until it is dropped: the request's
/// in-flight mark and its circuit slot (the connection itself goes back to its pool
/// from the body as soon as the body has ended).
struct Held {
    _guards: (InFlight, Permit),
}

impl AtEnd for Held {
    fn ended(&mut self) {}
}

impl Proxy {
    /// Sends `req` to backend `b` (HTTP/1.1), retrying on other endpoints as the
    /// pipeline allows (its body is at hand), and answers with the upstream's response
    /// (edited by the HTTPRoute `rule`, if any) or the proxy's own.
    pub(super) async fn forward_raw(
        &self,
        b: &Arc<Backend>,
        req: Req<'_>,
        permit: Permit,
        rule: Option<&Arc<Rule>>,
    ) -> Response<RespBody> {
        let limits = &b.tuning.limits;
        let settings = upstream::Settings {
            connect_timeout: limits.connect_timeout,
            idle_timeout: limits.idle_timeout,
            max_idle: limits.max_connections as usize,
        };
        let idem = idempotent(req.method.as_str().as_bytes());
        let head_request = req.method == Method::HEAD;
        let mut bytes = Vec::with_capacity(512 + req.body.len());
        let headers = req
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        raw::write_request(
            req.method.as_str().as_bytes(),
            req.target.as_bytes(),
            headers,
            None,
            |_| false,
            &req.rw,
            req.body,
            &mut bytes,
        );
        let mut attempts = Attempts::new(self, b, req.key, true);
        let mut ubuf = BytesMut::with_capacity(raw::HEAD_BUFFER);
        let mut head = Fields::default();
        loop {
            let Pick {
                ep,
                mut inflight,
                at,
                now,
            } = match attempts.pick() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(why) => return self.refuse(why),
            };
            let until = at + limits.request_timeout;
            let ex = exchange(
                &ep,
                now,
                &bytes,
                idem,
                head_request,
                settings,
                &self.metrics,
                &mut ubuf,
                &mut head,
            );
            match tokio::time::timeout_at(until, ex).await {
                Err(_) => return self.refuse(self.timed_out(b, &ep)),
                Ok(Err(e)) => attempts.failed(&ep, &e, idem, true),
                Ok(Ok((conn, resp))) => {
                    head_arrived(b, &mut inflight);
                    ubuf.advance(resp.len);
                    // Counted once: as the 502 the client gets when the body was
                    // invalid before anything reached it, else as the upstream's status.
                    let body = match RawBody::new(conn, ubuf, &resp, ep.clone(), settings) {
                        Ok(body) => body,
                        Err(why) => {
                            let msg = self.failed(b, &ep, &format!("invalid response body: {why}"));
                            return self.error(StatusCode::BAD_GATEWAY, "upstream_failed", msg);
                        }
                    };
                    self.answered(b, &ep, resp.status);
                    if let Some(rule) = rule {
                        rule.edit_response(&mut head.headers);
                    }
                    let body = Watched {
                        inner: ReadTimeout::new(body, limits.read_timeout),
                        at_end: Held {
                            _guards: (inflight, permit),
                        },
                    };
                    let mut r = Response::new(body.boxed_unsync());
                    *r.status_mut() = head.status;
                    *r.headers_mut() = head.headers;
                    return r;
                }
            }
        }
        self.refuse(attempts.exhausted())
    }
}
