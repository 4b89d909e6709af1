//! The hyper path, the engine for everything the HTTP/1.1 engine ([`crate::h1`])
//! leaves (HTTP/2, upgrades, chunked and large uploads, HTTP/1.0, redirects...): it
//! runs a hyper request through the phases of [`crate::pipeline`] (route, read body,
//! hash key, admit, pick and retry, account) and moves the bytes: the request to the
//! pooled upstream client, its response back (answers the proxy makes itself with a
//! status and a short reason: 404 no route, 503 no endpoints or circuit open, 502
//! upstream failed, 504 upstream timeout, 408 and 400 when the client's body is too
//! slow or breaks off). WebSocket/`Upgrade` requests are tunnelled after both sides
//! switched protocols. An HTTP/2 client's request to an HTTP/1.1 backend whose body is
//! at hand (no body, or one read whole) goes out on the raw upstream pool of the
//! HTTP/1.1 engine ([`raw`]); the others on hyper's client. Backends spoken to over
//! HTTP/2 ([`upstream::Protocol`]) get their requests on shared connections
//! ([`upstream::h2`]), with trailers and both bodies streamed; gRPC calls get gRPC answers, deadlines and retries ([`grpc`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;

use crate::annotations::HashOn;
use crate::circuit::Permit;
use crate::endpoint::InFlight;
use crate::gateway::{self, Decided};
use crate::grpc;
use crate::headers;
use crate::matching::normalize_host;
use crate::pipeline::{
    self, Attempts, Conn, MAX_REPLAY, Pick, Proxy, Refusal, Routed, admit, body_timeout,
    deadline_exceeded, hash_key, idempotent,
};
use crate::target;
use crate::upstream::raw::{BoxError, Rewrite};
use crate::upstream::{self, Lease, Protocol, ReadTimedOut};

mod raw;

/// Response body to clients.
pub type RespBody = UnsyncBoxBody<Bytes, BoxError>;

fn full(s: impl Into<Bytes>) -> RespBody {
    Full::new(s.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A body that runs `A` once it has ended: when it yields its last frame, or when it
/// is dropped already ended (an empty body, such as HEAD's or a 204's, may never be
/// polled).
struct Watched<B: Body, A: AtEnd> {
    inner: B,
    at_end: A,
}

/// What to do when a [`Watched`] body has ended (may run more than once).
trait AtEnd {
    fn ended(&mut self);
}

impl<B, A> Body for Watched<B, A>
where
    B: Body<Data = Bytes> + Unpin,
    A: AtEnd + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => this.at_end.ended(),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.at_end.ended(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, A: AtEnd> Drop for Watched<B, A> {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.at_end.ended();
        }
    }
}

/// A response body whose upstream may stay silent at most `timeout` between frames
/// (the read timeout, as nginx's `proxy_read_timeout`): past it the body fails, so the
/// client's connection (HTTP/1.1) or stream (HTTP/2) is cut and, dropped, the body
/// frees its circuit slot, in-flight mark and upstream connection. The timer is made
/// the first time the body has to wait (a body at hand never does), and moved later
/// with a clock read: the timer wheel is touched only when it fires.
struct ReadTimeout<B> {
    inner: B,
    timeout: Duration,
    /// Made the first time the body waits.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the upstream's silence has lasted too long.
    due: tokio::time::Instant,
    /// A frame came since `due` was set.
    progressed: bool,
}

impl<B> ReadTimeout<B> {
    fn new(inner: B, timeout: Duration) -> Self {
        ReadTimeout {
            inner,
            timeout,
            timer: None,
            due: tokio::time::Instant::now(),
            progressed: false,
        }
    }
}

impl<B> Body for ReadTimeout<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(r) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.progressed = true;
            return Poll::Ready(r);
        }
        let timer = match &mut this.timer {
            Some(t) => {
                if this.progressed {
                    this.due = tokio::time::Instant::now() + this.timeout;
                }
                t
            }
            None => {
                this.due = tokio::time::Instant::now() + this.timeout;
                this.timer
                    .insert(Box::pin(tokio::time::sleep_until(this.due)))
            }
        };
        this.progressed = false;
        loop {
            std::task::ready!(timer.as_mut().poll(cx));
            if tokio::time::Instant::now() >= this.due {
                tracing::debug!(read_timeout = ?this.timeout, "the upstream sent nothing for the read timeout mid-body");
                return Poll::Ready(Some(Err(Box::new(ReadTimedOut(this.timeout)))));
            }
            timer.as_mut().reset(this.due);
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// For a response body: keeps the endpoint's in-flight mark and the circuit slot until
/// the body is done, and gives the upstream connection back to its pool as soon as the
/// body has ended, unless the request body is still being sent on it (an upstream may
/// answer before it has read the whole upload): such a connection is not idle, and a
/// request that took it from the pool would wait for the upload.
struct Release {
    lease: Lease,
    sent: Option<Sent>,
    _guards: (InFlight, Permit),
}

impl AtEnd for Release {
    fn ended(&mut self) {
        if self.sent.as_ref().is_none_or(Sent::done) {
            self.lease.release();
        }
    }
}

/// Set when a streamed request body has been sent to its end (the [`AtEnd`] of the
/// request body).
#[derive(Clone, Default)]
struct Sent(Arc<AtomicBool>);

impl Sent {
    fn done(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl AtEnd for Sent {
    fn ended(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A gRPC call being served.
struct Call {
    /// Its `grpc-timeout` as an instant, and as given.
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
}

fn content_length(h: &http::HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

impl Proxy {
    /// A response the proxy makes itself.
    pub fn error(
        &self,
        status: StatusCode,
        reason: &'static str,
        msg: String,
    ) -> Response<RespBody> {
        let mut r = Response::new(full(self.note(status, reason, &msg)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        // A gRPC call gets this answer in gRPC's form ([`grpc::answer`]).
        r.extensions_mut().insert(grpc::Made(msg));
        r
    }

    /// The answer to a request the pipeline refused.
    fn refuse(&self, why: Refusal) -> Response<RespBody> {
        self.error(why.status, why.reason, why.msg)
    }

    /// Serves one request.
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>, conn: Conn) -> Response<RespBody> {
        if !grpc::is_grpc(req.headers()) {
            return self.forward(req, conn, None).await;
        }
        let deadline = grpc::timeout(req.headers()).map(|t| (tokio::time::Instant::now() + t, t));
        grpc::answer(self.forward(req, conn, Some(Call { deadline })).await)
    }

    /// Serves one request (`call`: a gRPC call).
    async fn forward(
        &self,
        mut req: Request<Incoming>,
        conn: Conn,
        call: Option<Call>,
    ) -> Response<RespBody> {
        // In-flight requests keep the table they started with.
        let table = self.table.load_full();
        let routing = match target::check(&req) {
            Ok(r) => r,
            Err(why) => return self.bad_request(why, req.version()),
        };
        let host_val = routing.host;
        let host = host_val
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map(normalize_host)
            .unwrap_or_default();
        let path = routing.path.as_deref().unwrap_or(req.uri().path());
        let routed = pipeline::route(&table, &host, path, &conn);
        // The path as matched, with the query: what goes upstream.
        let pq = match &routing.path {
            None => req.uri().path_and_query().cloned(),
            Some(p) => {
                let pq = match req.uri().query() {
                    Some(q) => format!("{p}?{q}"),
                    None => p.clone(),
                };
                http::uri::PathAndQuery::try_from(pq).ok()
            }
        }
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
        let (b, gateway_rule) = match routed {
            Routed::Backend(b) => (b, None),
            Routed::Redirect => return self.redirect(&host, &pq),
            Routed::Refused(why) => return self.refuse(why),
            Routed::Gateway(rules) => {
                let r = gateway::Request {
                    method: req.method(),
                    host: &host,
                    path,
                    query: req.uri().query(),
                    headers: req.headers(),
                    https: conn.https,
                };
                match gateway::decide(&rules, &r) {
                    Decided::Forward(b, rule) => (b, Some(rule)),
                    Decided::Refused(why) => return self.refuse(why),
                    Decided::SslRedirect => return self.redirect(&host, &pq),
                    Decided::Redirect(status, location) => {
                        let mut r = self.error(status, "gateway_redirect", format!("{location:?}"));
                        r.headers_mut().insert(header::LOCATION, location);
                        return r;
                    }
                }
            }
        };
        let limits = &b.tuning.limits;
        // An upgrade to a protocol the MCI does not allow is ignored: the request goes
        // up as a plain one (RFC 9110 §7.8 lets a server ignore Upgrade; nginx forwards
        // none unless configured to).
        // (Not to HTTP/2 backends: that would take extended CONNECT.)
        let upgrade = req.version() == Version::HTTP_11
            && !b.protocol.is_h2()
            && headers::is_upgrade(req.headers())
            && headers::upgrade_allowed(req.headers(), &b.tuning.allowed_upgrades);
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        // gRPC needs `TE: trailers` upstream (a hop-by-hop header, removed below).
        let te_trailers =
            b.protocol.is_h2() && (call.is_some() || grpc::wants_trailers(req.headers()));
        let (mut parts, body) = req.into_parts();
        let len = content_length(&parts.headers);
        // Read once (an HTTP/2 body's takes its connection's stream lock), so the
        // choices below are made on the same answer.
        let ended = body.is_end_stream();
        // A plain HTTP/2 request to an HTTP/1.1 backend whose body will be at hand goes
        // out on the raw upstream pool the HTTP/1.1 engine uses (no hyper client, no
        // task per connection), its header map written as the request's bytes
        // ([`raw`]); unless HTTPRoute filters edit it, or the backend hashes on a
        // header (the hash key reads the map as sent), the headers the proxy adds and
        // drops are written and skipped there, not inserted and removed here.
        let raw = parts.version == Version::HTTP_2
            && !b.protocol.is_h2()
            && call.is_none()
            && !upgrade
            && (ended || len.is_some_and(|l| l <= MAX_REPLAY));
        let direct =
            raw && gateway_rule.is_none() && !matches!(b.tuning.hash_on, Some(HashOn::Header(_)));
        if !direct {
            headers::strip_hop_by_hop(&mut parts.headers, upgrade);
            if te_trailers {
                parts
                    .headers
                    .insert(header::TE, HeaderValue::from_static("trailers"));
            }
            if !b.tuning.underscores_in_headers {
                headers::strip_underscored(&mut parts.headers);
            }
            if parts.version == Version::HTTP_2 {
                headers::join_cookies(&mut parts.headers);
            }
            // An absolute-form target's authority (HTTP/2: `:authority`) is the request's
            // host (RFC 9112 §3.2.2).
            if routing.from_target
                && let Some(h) = &host_val
            {
                parts.headers.insert(header::HOST, h.clone());
            }
            headers::add_forwarded(
                &mut parts.headers,
                &conn.remote_ip,
                conn.https,
                host_val.as_ref(),
            );
        }
        let pq = match &gateway_rule {
            Some(rule) => rule
                .edit_request(&mut parts.headers, pq.path(), pq.query())
                .and_then(|p| http::uri::PathAndQuery::try_from(p).ok())
                .unwrap_or(pq),
            None => pq,
        };
        let key = hash_key(b.tuning.hash_on.as_ref(), &parts.headers);
        let idem = idempotent(parts.method.as_str().as_bytes());
        let mut stream_body = None;
        let mut recording = None;
        let mut replay: Option<Bytes> = if upgrade {
            stream_body = Some(grpc::Upload::new(body));
            None
        } else if ended || len == Some(0) {
            Some(Bytes::new())
        } else if len.is_some_and(|l| l <= MAX_REPLAY) {
            // Read before taking a circuit slot, and within the request timeout: a
            // client that announces a body and stalls holds neither.
            match tokio::time::timeout(limits.request_timeout, body.collect()).await {
                Ok(Ok(c)) => Some(c.to_bytes()),
                Ok(Err(e)) => {
                    return self.error(
                        StatusCode::BAD_REQUEST,
                        "client_body",
                        format!("reading the request body failed: {e}"),
                    );
                }
                Err(_) => return self.refuse(body_timeout(limits.request_timeout)),
            }
        } else if call.is_some() && b.protocol.is_h2() && limits.retries > 0 {
            // Recorded as it streams, for a retry after a listed gRPC status, or after a
            // stream the upstream did not process (refused, above a GOAWAY): only where
            // a retry is possible (a streamed body to an HTTP/1.1 backend is never
            // sent again).
            let (upload, r) = grpc::Upload::recorded(body, MAX_REPLAY);
            stream_body = Some(upload);
            recording = Some(r);
            None
        } else {
            stream_body = Some(grpc::Upload::new(body));
            None
        };
        // (A body hyper will not poll, such as an upgrade's empty one, is sent already.)
        let mut sent = stream_body
            .as_ref()
            .map(|b| Sent(Arc::new(AtomicBool::new(b.is_end_stream()))));
        let permit = match admit(&b).await {
            Ok(p) => p,
            Err(why) => return self.refuse(why),
        };
        if raw && let Some(body) = &replay {
            let rw = Rewrite {
                forwarded: direct,
                client_ip: conn.remote_ip.as_bytes(),
                https: conn.https,
                host: host_val.as_ref().map(HeaderValue::as_bytes),
                host_from_target: direct && routing.from_target,
                underscores: !direct || b.tuning.underscores_in_headers,
                h2: true,
            };
            let req = raw::Req {
                method: &parts.method,
                target: pq.as_str(),
                headers: &parts.headers,
                body,
                key,
                rw,
            };
            // Not boxed: this future is itself in a box (`server.rs`), and a box of its
            // own cost more (an allocation and a copy per request, about 300
            // instructions) than the larger state it makes the other paths copy once.
            return self
                .forward_raw(&b, req, permit, gateway_rule.as_ref())
                .await;
        }
        // A request to an HTTP/2 backend keeps its streamed body until a connection is
        // up, so it too may go elsewhere after a failed connect.
        let mut attempts = Attempts::new(self, &b, key, replay.is_some() || b.protocol.is_h2());
        let mut client_upgrade = client_upgrade;
        let settings = upstream::Settings {
            connect_timeout: limits.connect_timeout,
            idle_timeout: limits.idle_timeout,
            max_idle: limits.max_connections as usize,
        };
        let tls = b.protocol == Protocol::H2Tls;
        loop {
            let Pick {
                ep,
                mut inflight,
                at,
                ..
            } = match attempts.pick() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(why) => return self.refuse(why),
            };
            // Until the response head: the request timeout, or the call's deadline when it
            // has one (the client's choice, longer or shorter; passing it is not the
            // upstream's failure).
            let call_deadline = call.as_ref().and_then(|c| c.deadline);
            let deadline_first = call_deadline.is_some();
            let until = match call_deadline {
                Some((d, t)) => {
                    if d <= tokio::time::Instant::now() {
                        return self.refuse(deadline_exceeded(t));
                    }
                    d
                }
                None => at + limits.request_timeout,
            };
            let shared = if b.protocol.is_h2() {
                let checkout = ep.pool.h2.checkout(&ep, tls, settings, &self.metrics);
                // Boxed, as the exchange below: the largest futures of this one, which
                // would otherwise be moved (copied) with it on every request.
                match Box::pin(tokio::time::timeout_at(until, checkout)).await {
                    Ok(Ok(c)) => Some(c),
                    Ok(Err(e)) => {
                        // The body is still at hand (taken below).
                        attempts.failed(&ep, &e, idem, true);
                        continue;
                    }
                    Err(_) => match call_deadline.filter(|_| deadline_first) {
                        Some((_, t)) => {
                            // Longer than the request timeout: the endpoint's failure
                            // too, though the deadline answers.
                            if at.elapsed() >= limits.request_timeout {
                                self.timed_out(&b, &ep);
                            }
                            return self.refuse(deadline_exceeded(t));
                        }
                        None => return self.refuse(self.timed_out(&b, &ep)),
                    },
                }
            } else {
                None
            };
            let body = match (&replay, stream_body.take()) {
                (Some(bytes), _) => Full::new(bytes.clone())
                    .map_err(|never: Infallible| match never {})
                    .boxed_unsync(),
                (None, Some(inner)) => Watched {
                    inner,
                    at_end: sent.clone().unwrap_or_default(),
                }
                .boxed_unsync(),
                (None, None) => break,
            };
            let mut up = Request::new(body);
            *up.method_mut() = parts.method.clone();
            *up.uri_mut() = Uri::from(pq.clone());
            // The last possible attempt takes the headers; earlier ones need a copy.
            *up.headers_mut() = if attempts.last() {
                std::mem::take(&mut parts.headers)
            } else {
                parts.headers.clone()
            };
            // The attempt carries what is left of the call's deadline (the connect may
            // have taken some, an attempt before it more); nothing left: not sent.
            if let Some((d, t)) = call_deadline {
                let Some(left) = d
                    .checked_duration_since(tokio::time::Instant::now())
                    .filter(|l| !l.is_zero())
                else {
                    return self.refuse(deadline_exceeded(t));
                };
                up.headers_mut()
                    .insert(grpc::TIMEOUT, grpc::encode_timeout(left));
            }
            let send = async {
                match shared {
                    Some(c) => upstream::h2::send(&ep, c, up, tls, settings, &self.metrics).await,
                    None => upstream::send(&ep, up, settings, &self.metrics).await,
                }
            };
            // (a call's deadline governs alone: gRPC servers hold a stream's response
            // head until its first message, so a quiet subscription waiting past the
            // request timeout is no sign of a sick pod and is not counted against it)
            let res = Box::pin(tokio::time::timeout_at(until, send)).await;
            let uploading = sent.as_ref().is_some_and(|s| !s.done());
            match res {
                Err(_) if deadline_first => {
                    let t = call_deadline.map(|(_, t)| t).unwrap_or_default();
                    return self.refuse(deadline_exceeded(t));
                }
                // The client had not finished sending its body: its delay, not the
                // upstream's.
                Err(_) if uploading => return self.refuse(body_timeout(limits.request_timeout)),
                Err(_) => return self.refuse(self.timed_out(&b, &ep)),
                // hyper could not send what the client gave (in practice its body
                // failed: it went away or broke framing mid-upload). Not the upstream.
                Ok(Err(upstream::Error::Http(e))) if e.is_user() => {
                    return self.error(
                        StatusCode::BAD_REQUEST,
                        "client_body",
                        format!("the request could not be sent upstream: {e}"),
                    );
                }
                Ok(Err(e)) => {
                    // A gRPC call the upstream did not process goes out again with its
                    // body as recorded (a plain request's is at hand, or cannot be).
                    if e.is_unprocessed()
                        && replay.is_none()
                        && attempts.can_retry()
                        && let Some(r) = &recording
                        && let Some(again) = r.finish(grpc::FINISH_WAIT).await
                    {
                        (replay, sent) = (Some(again), None);
                    }
                    // A streamed body, gone with this attempt, stops the retries.
                    attempts.failed(&ep, &e, idem, replay.is_some());
                }
                Ok(Ok((mut resp, lease))) => {
                    let status = resp.status();
                    // A gRPC call's trailers-only answer counts as the HTTP status its
                    // code stands for: a pod failing every call at once is a failing
                    // pod, not the fastest one.
                    let code = match call {
                        Some(_) => grpc::status(resp.headers()),
                        None => None,
                    };
                    let health = match code {
                        Some(_) => grpc::health_status(status, code, call_deadline.is_some()),
                        None => status.as_u16(),
                    };
                    self.responded(&b, &ep, &mut inflight, health);
                    // A trailers-only gRPC answer with a code the MCI retries, to a call
                    // whose whole body is at hand.
                    if let Some(code) = code
                        && grpc::retried(b.tuning.grpc_retry_on, code)
                        && attempts.can_retry()
                        && let Some(again) = match (&replay, &recording) {
                            (Some(bytes), _) => Some(bytes.clone()),
                            (None, Some(r)) => r.finish(grpc::FINISH_WAIT).await,
                            (None, None) => None,
                        }
                        && attempts.retry_answer(&ep, || {
                            let msg = resp.headers().get("grpc-message");
                            format!(
                                "upstream {} in cluster {} answered grpc-status {code} ({})",
                                ep.addr,
                                ep.cluster,
                                msg.and_then(|m| m.to_str().ok()).unwrap_or("")
                            )
                        })
                    {
                        (replay, sent) = (Some(again), None);
                        continue;
                    }
                    if status == StatusCode::SWITCHING_PROTOCOLS
                        && let Some(cu) = client_upgrade.take()
                    {
                        let su = hyper::upgrade::on(&mut resp);
                        self.tunnels.spawn(async move {
                            // The connection leaves the pool for good: it is a tunnel now.
                            let _guards = (inflight, permit, lease);
                            match (cu.await, su.await) {
                                (Ok(c), Ok(s)) => {
                                    let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
                                    let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                                }
                                (Err(e), _) | (_, Err(e)) => {
                                    tracing::debug!(error = %e, "upgrade failed");
                                }
                            }
                        });
                        let (parts, _) = resp.into_parts();
                        return Response::from_parts(parts, full(Bytes::new()));
                    }
                    headers::strip_hop_by_hop(resp.headers_mut(), false);
                    if let Some(rule) = &gateway_rule {
                        rule.edit_response(resp.headers_mut());
                    }
                    // The client's protocol decides (an HTTP/1.0 upstream stays hidden).
                    *resp.version_mut() = Version::HTTP_11;
                    // Only an HTTP/2 client reads trailers for sure (hyper drops them
                    // for an HTTP/1.1 one, and ends a chunked body cleanly).
                    let client_h2 = parts.version == Version::HTTP_2;
                    let (parts, body) = resp.into_parts();
                    // An HTTP/1.1 upstream's trailers as on the raw path (an HTTP/2
                    // client resets a stream whose trailers carry a hop-by-hop field).
                    let h1 = !b.protocol.is_h2();
                    let body = body.map_frame(move |f| match f.into_trailers() {
                        Ok(mut t) if h1 => {
                            upstream::raw::keep_passed_trailers(&mut t);
                            Frame::trailers(t)
                        }
                        Ok(t) => Frame::trailers(t),
                        Err(f) => f,
                    });
                    let body = body.map_err(BoxError::from);
                    let at_end = Release {
                        lease,
                        sent: sent.clone(),
                        _guards: (inflight, permit),
                    };
                    let body = match call_deadline {
                        None if call.is_none() => Watched {
                            inner: ReadTimeout::new(body, limits.read_timeout),
                            at_end,
                        }
                        .boxed_unsync(),
                        // A gRPC answer to an HTTP/2 client ends with gRPC trailers,
                        // whatever happens; a call's deadline, when it has one, bounds
                        // the stream instead of the read timeout (a quiet watch whose
                        // client allows it hours is not cut after a minute). Otherwise
                        // (an HTTP/1.1 client, a response that is not gRPC) a failure
                        // stays an error, and so does the deadline.
                        _ => {
                            // The answer stands: the upload (bidi, client streaming)
                            // need not be kept any more.
                            if let Some(r) = &recording {
                                r.discard();
                            }
                            let trailers = client_h2 && grpc::is_grpc(&parts.headers);
                            match call_deadline {
                                None if !trailers => Watched {
                                    inner: ReadTimeout::new(body, limits.read_timeout),
                                    at_end,
                                }
                                .boxed_unsync(),
                                Some((d, _)) if !trailers => grpc::Ending::erring(
                                    Watched {
                                        inner: body,
                                        at_end,
                                    },
                                    d,
                                )
                                .boxed_unsync(),
                                None => grpc::Ending::new(
                                    Watched {
                                        inner: ReadTimeout::new(body, limits.read_timeout),
                                        at_end,
                                    },
                                    None,
                                )
                                .boxed_unsync(),
                                Some((d, _)) => grpc::Ending::new(
                                    Watched {
                                        inner: body,
                                        at_end,
                                    },
                                    Some(d),
                                )
                                .boxed_unsync(),
                            }
                        }
                    };
                    return Response::from_parts(parts, body);
                }
            }
        }
        self.refuse(attempts.exhausted())
    }

    /// A 400 for a request whose host or target is invalid ([`target::check`]); an
    /// HTTP/1 connection closes after it (HTTP/2 has no `Connection` header).
    fn bad_request(&self, why: target::Bad, version: Version) -> Response<RespBody> {
        let mut r = self.error(StatusCode::BAD_REQUEST, "bad_request", why.to_string());
        if version < Version::HTTP_2 {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }

    fn redirect(&self, host: &str, pq: &http::uri::PathAndQuery) -> Response<RespBody> {
        let port = match self.https_port {
            Some(443) | None => String::new(),
            Some(p) => format!(":{p}"),
        };
        let pq = pq.as_str();
        // `host` is one of the MCI's TLS hosts (a name: Ingress hosts are never IPs).
        let loc = format!("https://{host}{port}{pq}");
        let mut r = Response::new(full(format!("308 Permanent Redirect: {loc}\n")));
        *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
        if let Ok(v) = HeaderValue::from_str(&loc) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        self.metrics.proxy_response(308, "ssl_redirect");
        r
    }
}
