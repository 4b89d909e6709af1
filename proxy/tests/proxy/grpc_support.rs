//! gRPC test parts: a hand-written prost message (no protoc), a real tonic server
//! (`tonic::server::Grpc` with `ProstCodec`) on hyper's HTTP/2 server (h2c, or TLS with
//! ALPN h2) that counts the connections it accepts, and a real tonic client
//! (`tonic::client::Grpc`) on one h2c connection to the proxy. Self-contained: the
//! end-to-end tests (`e2e/tests/e2e/mci_grpc.rs`) include this file too, and use part
//! of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::uri::PathAndQuery;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

/// The port every gRPC test pod listens on.
pub const GRPC_PORT: u16 = 18090;

/// The one message type: what to echo, and how to answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Echo {
    /// Echoed back, prefixed with the pod's name.
    #[prost(string, tag = "1")]
    pub text: String,
    /// Server streaming: how many messages.
    #[prost(uint32, tag = "2")]
    pub count: u32,
    /// Answer with this gRPC status code (0: succeed).
    #[prost(uint32, tag = "3")]
    pub code: u32,
    /// Sleep this long before answering (streams: between messages).
    #[prost(uint64, tag = "4")]
    pub sleep_ms: u64,
}

impl Echo {
    pub fn text(t: &str) -> Echo {
        Echo {
            text: t.into(),
            ..Default::default()
        }
    }
}

type Codec = ProstCodec<Echo, Echo>;
type Replies = Pin<Box<dyn Stream<Item = Result<Echo, Status>> + Send>>;

/// A gRPC backend pod: `/test.Echo/Unary`, `/Stream` (server streaming, ending with
/// an `x-served-by` trailer), `/Bidi` (one answer per message, as it comes), and
/// plain HTTP/2: `GET /plain` answering its name, `GET /healthz` answering `health`.
pub struct GrpcPod {
    pub addr: SocketAddr,
    /// Connections accepted.
    pub conns: Arc<AtomicU64>,
    /// Calls served.
    pub calls: Arc<AtomicU64>,
    /// When non-zero, every call is answered with this status code.
    pub fail_with: Arc<AtomicU32>,
    /// The HTTP status of `/healthz`.
    pub health: Arc<AtomicU16>,
    /// `/healthz` requests.
    pub checks: Arc<AtomicU64>,
    /// The `grpc-timeout` of every call, as it arrived (empty when it had none).
    pub timeouts: Arc<std::sync::Mutex<Vec<String>>>,
    /// Milliseconds every unary call takes more than it asks for.
    pub delay_ms: Arc<AtomicU64>,
    drain: tokio::sync::watch::Sender<u64>,
    stop: CancellationToken,
}

#[derive(Clone)]
struct PodState {
    name: Arc<str>,
    calls: Arc<AtomicU64>,
    fail_with: Arc<AtomicU32>,
    health: Arc<AtomicU16>,
    checks: Arc<AtomicU64>,
    timeouts: Arc<std::sync::Mutex<Vec<String>>>,
    delay_ms: Arc<AtomicU64>,
    /// The HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` it announces (None: hyper's).
    max_streams: Option<u32>,
}

impl PodState {
    /// The status to answer a call with instead of serving it, if any.
    fn failing(&self, asked: u32) -> Option<Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let code = match self.fail_with.load(Ordering::Relaxed) {
            0 => asked,
            c => c,
        };
        let mut md = MetadataMap::new();
        md.insert("x-served-by", self.name.parse().ok()?);
        (code != 0).then(|| {
            Status::with_metadata(
                Code::from(code as i32),
                format!("{} said no", self.name),
                md,
            )
        })
    }

    fn reply(&self, text: &str) -> Echo {
        Echo::text(&format!("{}:{text}", self.name))
    }
}

impl GrpcPod {
    /// A plain-text (h2c) pod.
    pub async fn start(ip: [u8; 4], name: &str) -> anyhow::Result<GrpcPod> {
        Self::start_tls(ip, name, None).await
    }

    /// A pod; with `tls`, over TLS (ALPN h2) with that server configuration.
    pub async fn start_tls(
        ip: [u8; 4],
        name: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> anyhow::Result<GrpcPod> {
        Self::start_with(ip, name, tls, None).await
    }

    /// A plain-text pod that lets each connection carry at most `max_streams` streams
    /// at once (clients queue the others).
    pub async fn start_limited(
        ip: [u8; 4],
        name: &str,
        max_streams: u32,
    ) -> anyhow::Result<GrpcPod> {
        Self::start_with(ip, name, None, Some(max_streams)).await
    }

    async fn start_with(
        ip: [u8; 4],
        name: &str,
        tls: Option<Arc<rustls::ServerConfig>>,
        max_streams: Option<u32>,
    ) -> anyhow::Result<GrpcPod> {
        let l = TcpListener::bind(SocketAddr::new(IpAddr::from(ip), GRPC_PORT))
            .await
            .with_context(|| format!("binding gRPC pod {name} on {ip:?}:{GRPC_PORT}"))?;
        let addr = l.local_addr()?;
        let stop = CancellationToken::new();
        let state = PodState {
            name: name.into(),
            calls: Arc::new(AtomicU64::new(0)),
            fail_with: Arc::new(AtomicU32::new(0)),
            health: Arc::new(AtomicU16::new(200)),
            checks: Arc::new(AtomicU64::new(0)),
            timeouts: Default::default(),
            delay_ms: Default::default(),
            max_streams,
        };
        let conns = Arc::new(AtomicU64::new(0));
        let (drain_tx, drained) = tokio::sync::watch::channel(0u64);
        let pod = GrpcPod {
            addr,
            conns: conns.clone(),
            calls: state.calls.clone(),
            fail_with: state.fail_with.clone(),
            health: state.health.clone(),
            checks: state.checks.clone(),
            timeouts: state.timeouts.clone(),
            delay_ms: state.delay_ms.clone(),
            drain: drain_tx,
            stop: stop.clone(),
        };
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let (tcp, _) = tokio::select! {
                    r = l.accept() => match r { Ok(x) => x, Err(_) => continue },
                    _ = stop.cancelled() => break,
                };
                conns.fetch_add(1, Ordering::Relaxed);
                let (state, acceptor) = (state.clone(), acceptor.clone());
                // Drained from now on only by a later `drain`.
                let mut drain = drained.clone();
                drain.borrow_and_update();
                tasks.spawn(async move {
                    match acceptor {
                        None => serve_h2(tcp, state, drain).await,
                        Some(a) => {
                            if let Ok(s) = a.accept(tcp).await {
                                serve_h2(s, state, drain).await;
                            }
                        }
                    }
                });
            }
            // Killed: every open connection dies with the process.
            tasks.abort_all();
        });
        Ok(pod)
    }

    /// Closes the open connections gracefully (HTTP/2 GOAWAY: their streams finish,
    /// no new ones), and keeps listening: a rolling restart's old connections.
    pub fn drain(&self) {
        self.drain.send_modify(|g| *g += 1);
    }

    /// Stops listening and cuts every open connection.
    pub fn kill(&self) {
        self.stop.cancel();
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn conns(&self) -> u64 {
        self.conns.load(Ordering::Relaxed)
    }

    /// The `grpc-timeout` of every call so far.
    pub fn timeouts(&self) -> Vec<String> {
        self.timeouts.lock().unwrap().clone()
    }
}

/// A `grpc-timeout` value as a duration (None: malformed).
pub fn grpc_timeout(v: &str) -> Option<Duration> {
    let unit = v.chars().last()?;
    let n: u64 = v[..v.len() - 1].parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n * 3600),
        'M' => Duration::from_secs(n * 60),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

impl Drop for GrpcPod {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves one connection until it ends, or closes it gracefully when `drain` changes.
async fn serve_h2<I>(io: I, state: PodState, mut drain: tokio::sync::watch::Receiver<u64>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let max_streams = state.max_streams;
    let svc = hyper::service::service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(serve(state, req).await) }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    if let Some(n) = max_streams {
        builder.max_concurrent_streams(n);
    }
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = drain.changed() => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

type Resp = http::Response<tonic::body::Body>;

async fn serve(state: PodState, req: http::Request<Incoming>) -> Resp {
    if req.uri().path().starts_with("/test.Echo/") {
        let t = req.headers().get("grpc-timeout");
        let t = t.and_then(|v| v.to_str().ok()).unwrap_or_default();
        state.timeouts.lock().unwrap().push(t.to_string());
    }
    let mut grpc = tonic::server::Grpc::new(Codec::default());
    match req.uri().path() {
        "/test.Echo/Unary" => {
            let svc = tower::service_fn(move |r: tonic::Request<Echo>| {
                let state = state.clone();
                async move {
                    let m = r.into_inner();
                    // Counted as it arrives.
                    let failing = state.failing(m.code);
                    let delay = state.delay_ms.load(Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(m.sleep_ms + delay)).await;
                    match failing {
                        Some(s) => Err(s),
                        None => Ok(tonic::Response::new(state.reply(&m.text))),
                    }
                }
            });
            grpc.unary(svc, req).await
        }
        "/test.Echo/Stream" => {
            let svc = tower::service_fn(move |r: tonic::Request<Echo>| {
                let state = state.clone();
                async move {
                    let m = r.into_inner();
                    if let Some(s) = state.failing(m.code) {
                        return Err(s);
                    }
                    let text = m.text.clone();
                    let replies = (0..m.count).map(move |i| format!("{text}-{i}"));
                    let pause = Duration::from_millis(m.sleep_ms);
                    let st = state.clone();
                    let messages = futures::stream::iter(replies).then(move |t| {
                        let st = st.clone();
                        async move {
                            // (A zero sleep would still wait for the timer's next tick.)
                            if !pause.is_zero() {
                                tokio::time::sleep(pause).await;
                            }
                            Ok(st.reply(&t))
                        }
                    });
                    // Ends with trailing metadata (status OK).
                    let mut md = MetadataMap::new();
                    md.insert("x-served-by", state.name.parse().unwrap());
                    let end = futures::stream::once(async move {
                        Err(Status::with_metadata(Code::Ok, "", md))
                    });
                    Ok(tonic::Response::new(
                        Box::pin(messages.chain(end)) as Replies
                    ))
                }
            });
            grpc.server_streaming(svc, req).await
        }
        "/test.Echo/Bidi" => {
            let svc = tower::service_fn(move |r: tonic::Request<tonic::Streaming<Echo>>| {
                let state = state.clone();
                async move {
                    if let Some(s) = state.failing(0) {
                        return Err(s);
                    }
                    let st = state.clone();
                    let replies = r.into_inner().map(move |m| m.map(|m| st.reply(&m.text)));
                    Ok(tonic::Response::new(Box::pin(replies) as Replies))
                }
            });
            grpc.streaming(svc, req).await
        }
        "/plain" => http::Response::new(tonic::body::Body::new(
            Full::new(Bytes::from(state.name.to_string())).map_err(|e| match e {}),
        )),
        "/healthz" => {
            state.checks.fetch_add(1, Ordering::Relaxed);
            let mut r = http::Response::new(tonic::body::Body::empty());
            *r.status_mut() = http::StatusCode::from_u16(state.health.load(Ordering::Relaxed))
                .unwrap_or(http::StatusCode::OK);
            r
        }
        _ => Status::unimplemented("no such method").into_http(),
    }
}

/// A tonic client on one HTTP/2 (h2c) connection to the proxy; calls carry
/// `:authority` `host`.
#[derive(Clone)]
pub struct GrpcClient {
    grpc: tonic::client::Grpc<H2>,
}

/// One client HTTP/2 connection as a tower service.
#[derive(Clone)]
pub struct H2(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tower::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let fut = self.0.send_request(req);
        Box::pin(fut)
    }
}

impl GrpcClient {
    pub async fn connect(proxy: SocketAddr, host: &str) -> anyhow::Result<GrpcClient> {
        let tcp = tokio::net::TcpStream::connect(proxy).await?;
        let (tx, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        let origin: http::Uri = format!("http://{host}").parse()?;
        Ok(GrpcClient {
            grpc: tonic::client::Grpc::with_origin(H2(tx), origin),
        })
    }

    async fn ready(&self) -> Result<tonic::client::Grpc<H2>, Status> {
        let mut g = self.grpc.clone();
        g.ready()
            .await
            .map_err(|e| Status::unavailable(format!("client connection: {e}")))?;
        Ok(g)
    }

    /// A unary call, with a `grpc-timeout` when `timeout` is set (bounded by 10 s).
    pub async fn unary(
        &self,
        msg: Echo,
        timeout: Option<Duration>,
    ) -> Result<tonic::Response<Echo>, Status> {
        let mut g = self.ready().await?;
        let mut req = tonic::Request::new(msg);
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        let path = PathAndQuery::from_static("/test.Echo/Unary");
        tokio::time::timeout(
            Duration::from_secs(10),
            g.unary(req, path, Codec::default()),
        )
        .await
        .map_err(|_| Status::cancelled("test client gave up after 10 s"))?
    }

    /// A server-streaming call: the messages' texts and the trailing metadata.
    pub async fn stream(
        &self,
        msg: Echo,
        timeout: Option<Duration>,
    ) -> Result<(Vec<String>, MetadataMap), Status> {
        let mut g = self.ready().await?;
        let mut req = tonic::Request::new(msg);
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        let path = PathAndQuery::from_static("/test.Echo/Stream");
        let call = async {
            let mut s = g
                .server_streaming(req, path, Codec::default())
                .await?
                .into_inner();
            let mut got = Vec::new();
            while let Some(m) = s.message().await? {
                got.push(m.text);
            }
            let trailers = s.trailers().await?.unwrap_or_default();
            Ok((got, trailers))
        };
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .map_err(|_| Status::cancelled("test client gave up after 10 s"))?
    }

    /// A server-streaming call, its messages left unread: the caller reads them (or
    /// not) from what this returns once the response head has arrived.
    pub async fn open_stream(
        &self,
        msg: Echo,
        timeout: Option<Duration>,
    ) -> Result<tonic::Streaming<Echo>, Status> {
        let mut g = self.ready().await?;
        let mut req = tonic::Request::new(msg);
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        let path = PathAndQuery::from_static("/test.Echo/Stream");
        let call = g.server_streaming(req, path, Codec::default());
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .map_err(|_| Status::cancelled("test client gave up after 10 s"))?
            .map(tonic::Response::into_inner)
    }

    /// A bidi call: sends each of `texts` only after the answer to the one before has
    /// arrived (so both directions interleave on one stream); returns the answers.
    pub async fn bidi(&self, texts: &[&str]) -> Result<Vec<String>, Status> {
        let mut g = self.ready().await?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Echo>(1);
        let outbound =
            futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|m| (m, rx)) });
        let path = PathAndQuery::from_static("/test.Echo/Bidi");
        let call = async {
            let mut first = texts.iter();
            if let Some(t) = first.next() {
                let _ = tx.send(Echo::text(t)).await;
            }
            let mut s = g
                .streaming(tonic::Request::new(outbound), path, Codec::default())
                .await?
                .into_inner();
            let mut got = Vec::new();
            for t in first {
                match s.message().await? {
                    Some(m) => got.push(m.text),
                    None => return Ok(got),
                }
                let _ = tx.send(Echo::text(t)).await;
            }
            if let Some(m) = s.message().await? {
                got.push(m.text);
            }
            drop(tx);
            while s.message().await?.is_some() {}
            Ok(got)
        };
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .map_err(|_| Status::cancelled("test client gave up after 10 s"))?
    }
}
