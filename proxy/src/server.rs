//! Downstream listeners: HTTP/1.1 and HTTP/2 (h2c prior knowledge on the plain port,
//! ALPN on TLS) through hyper-util's auto builder, a header size limit and a
//! header-read timeout against slowloris (also on choosing the protocol), and graceful
//! draining on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::forward::RespBody;
use crate::h1;
use crate::pipeline::{Conn, Drain, Limits, Proxy};
use crate::wake::Stop;

/// Concurrent streams an HTTP/2 client may open on one connection (nginx's
/// `http2_max_concurrent_streams`).
pub const MAX_STREAMS: u32 = 128;
/// Receive window of each client stream: how much of a request body the client may
/// send ahead of its upstream taking it.
pub const STREAM_WINDOW: u32 = 1024 * 1024;
/// Receive window of each client connection: room for sixteen streams' full windows,
/// so an upload whose upstream reads slowly (or not at all) holds its own stream's
/// window, not the connection's (hyper's default, 1 MiB for both, let a single such
/// upload stall the client's other calls on the connection; sixteen of them still do,
/// on that client's own connection only). Memory: what the proxy holds of request
/// bodies its upstreams have not taken is at most this per client connection; a window
/// of every stream's full share (128 MiB) would let one connection make the proxy hold
/// that much.
pub const CONNECTION_WINDOW: u32 = 16 * STREAM_WINDOW;

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    // a peer gone silent under an open stream (a laptop asleep, a NAT that forgot the
    // flow) is noticed by its unanswered PING: an open stream keeps the connection from
    // counting as idle, so nothing else would end it
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.header_read_timeout))
        .keep_alive_timeout(limits.header_read_timeout)
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(limits.max_header_bytes as u32);
    b
}

/// Accepts connections until `stop`, then drains them for up to `drain_timeout`.
/// `mesh`: the listener is this mesh port's (GW-4), its requests routed by the mesh
/// routes captured there.
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mesh: Option<u16>,
    proxy: Arc<Proxy>,
    limits: Limits,
    stop: CancellationToken,
) {
    // Every connection's task: shutdown waits on them for up to the drain time, then
    // cuts those still open.
    let conns = Drain::default();
    let builder = Arc::new(builder(&limits));
    let https = tls.is_some();
    loop {
        let Some((tcp, remote)) = causeway_runtime::net::accept(&listener, &stop, "proxy").await
        else {
            break;
        };
        let _ = tcp.set_nodelay(true);
        let mut conn = Conn::new(remote, https);
        conn.mesh = mesh;
        let gauge = proxy.metrics.downstream_open.clone();
        gauge.inc();
        let open = OpenConn(gauge);
        let (proxy, builder, stop, limits) =
            (proxy.clone(), builder.clone(), stop.clone(), limits.clone());
        match &tls {
            None => {
                conns.spawn(async move {
                    let _open = open;
                    // Boxed: the connection's state (both engines' futures, several
                    // KiB) would otherwise be copied with this task's future each time
                    // it is moved on its way into the runtime.
                    Box::pin(connection(
                        tcp, false, &proxy, conn, &limits, &builder, &stop,
                    ))
                    .await;
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    let _open = open;
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(tcp));
                    let tls = tokio::select! {
                        r = handshake => match r {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, %remote, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%remote, "TLS handshake timed out");
                                return;
                            }
                        },
                        _ = stop.cancelled() => return,
                    };
                    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                    Box::pin(connection(tls, h2, &proxy, conn, &limits, &builder, &stop)).await;
                });
            }
        }
    }
    drop(listener);
    conns.finish(limits.drain_timeout, "connections").await;
}

/// Serves one accepted connection: HTTP/1.1 on the engine in [`h1`] (when
/// `limits.own_http1`), which hands hyper the connections it does not serve (HTTP/2,
/// upgrades, chunked uploads...), with the bytes it read so far.
async fn connection<T>(
    mut io: T,
    h2: bool,
    proxy: &Arc<Proxy>,
    conn: Conn,
    limits: &Limits,
    builder: &auto::Builder<TokioExecutor>,
    stop: &CancellationToken,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !limits.own_http1 || h2 {
        return hyper_connection(io, Bytes::new(), proxy, conn, limits, builder, stop).await;
    }
    let mut buf = BytesMut::with_capacity(8192);
    match h1::serve(&mut io, &mut buf, proxy, &conn, limits, stop).await {
        h1::End::Closed => {}
        h1::End::Handoff => {
            hyper_connection(io, buf.freeze(), proxy, conn, limits, builder, stop).await;
        }
    }
}

/// Serves a connection with hyper (HTTP/1.1 or HTTP/2, told apart by the first bytes),
/// `pre` being the bytes read from it already.
async fn hyper_connection<T>(
    io: T,
    pre: Bytes,
    proxy: &Arc<Proxy>,
    conn: Conn,
    limits: &Limits,
    builder: &auto::Builder<TokioExecutor>,
    stop: &CancellationToken,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let remote = conn.remote;
    let activity = Arc::new(Activity::default());
    let act = activity.clone();
    let p = proxy.clone();
    let svc = service_fn(move |req| -> ServiceFuture {
        let proxy = p.clone();
        let conn = conn.clone();
        let busy = act.start();
        // Boxed whole, request and all: hyper moves each HTTP/2 stream's service future
        // into the task it spawns for it (and tokio moves it again). Since the gRPC and
        // upstream HTTP/2 paths, `handle`'s state is large enough that those copies were
        // 96k of the 149k instructions per h2 request (instructions.sh, callgrind);
        // boxing only `handle` still left them the request, the connection's details
        // and the box to move, about 0.4 KiB per stream.
        Box::pin(async move {
            let resp = proxy.handle(req, conn).await;
            Ok(resp.map(|body| Held { body, busy }))
        })
    });
    let idle = limits.header_read_timeout;
    let io = TokioIo::new(Detect::new(io, pre, idle));
    let c = builder.serve_connection_with_upgrades(io, svc);
    drive(c, remote, &activity, (idle, limits.send_timeout), stop).await;
}

/// What the service gives hyper for a request (see [`hyper_connection`]).
type ServiceFuture = Pin<Box<dyn Future<Output = Result<http::Response<Held>, Infallible>> + Send>>;

/// A response body that keeps its request [`Busy`] until hyper has sent all of it (or
/// dropped it): a connection streaming a response (a gRPC server stream or bidi call,
/// server-sent events, a slow download) is not idle, and is not closed as if it were.
///
/// It also tells when hyper holds a frame of it that the client has no room for: hyper
/// polls a body for its next frame only once the last one is sent, so a body that
/// gave a frame and is not polled again waits on the client (an HTTP/2 stream whose
/// flow-control window the client keeps shut, an HTTP/1.1 socket it does not read).
/// [`drive`] closes a connection with a response waiting so for the send timeout
/// (nginx's `send_timeout`): such a client would otherwise hold its upstream
/// connection and circuit slot for as long as it stays connected, answering PINGs.
struct Held {
    body: RespBody,
    busy: Busy,
}

impl Body for Held {
    type Data = Bytes;
    type Error = crate::upstream::raw::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        this.busy.fed();
        let r = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = r {
            this.busy.waits();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's requests: how many have started (high 32 bits of `requests`) and
/// how many are in progress (low 32 bits), in one word so a request costs one atomic
/// add at its start and one at its end, and no clock read.
///
/// And its responses waiting on the client (see [`Held`]), counted by the tick of
/// [`drive`]'s send-timeout clock in which they began to wait: a tick is a quarter of
/// the send timeout, so a count left in the slot of the tick five ticks back is a
/// response that has waited at least the whole timeout. Six slots: a slot is checked
/// (and found empty, or the connection closed) before its tick comes round again.
#[derive(Default)]
struct Activity {
    requests: AtomicU64,
    tick: AtomicUsize,
    waiting: [AtomicU32; WAIT_SLOTS],
}

const STARTED: u64 = 1 << 32;
const IN_PROGRESS: u64 = STARTED - 1;
/// Ticks of the send-timeout clock in one send timeout.
const TICKS_PER_SEND_TIMEOUT: u32 = 4;
const WAIT_SLOTS: usize = TICKS_PER_SEND_TIMEOUT as usize + 2;

impl Activity {
    fn start(self: &Arc<Self>) -> Busy {
        self.requests.fetch_add(STARTED + 1, Ordering::Relaxed);
        Busy {
            activity: self.clone(),
            waiting: None,
        }
    }

    fn sample(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Moves the send-timeout clock a tick on: whether a response has waited on the
    /// client since the tick a whole send timeout ago (or longer).
    fn tick(&self) -> bool {
        let now = self.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let old = (now + WAIT_SLOTS - (TICKS_PER_SEND_TIMEOUT as usize + 1)) % WAIT_SLOTS;
        self.waiting[old].load(Ordering::Relaxed) > 0
    }
}

/// A request in progress on its connection (until its response body is done), and
/// the slot of [`Activity::waiting`] its response waits in, if it does.
struct Busy {
    activity: Arc<Activity>,
    waiting: Option<usize>,
}

impl Busy {
    /// The response's next frame was asked for: it does not wait on the client.
    fn fed(&mut self) {
        if let Some(slot) = self.waiting.take() {
            self.activity.waiting[slot].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The response gave a frame: until it is asked for the next, it waits on the client.
    fn waits(&mut self) {
        let slot = self.activity.tick.load(Ordering::Relaxed) % WAIT_SLOTS;
        self.activity.waiting[slot].fetch_add(1, Ordering::Relaxed);
        self.waiting = Some(slot);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.fed();
        self.activity.requests.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves one connection until it ends. On shutdown, or when it has had no request
/// start or in progress for a whole `idle` period (checked every `idle`, so it closes
/// 1–2 periods after its last request; an HTTP/2 client may keep a connection open
/// with nothing on it forever, and hyper bounds only HTTP/1.1's idle time), it is asked to close
/// gracefully (HTTP/2 GOAWAY: open streams still finish). An idle connection that has
/// not closed `idle` later (a client that never acknowledges the GOAWAY's PING) is
/// dropped; the [`Drain`] it runs in cuts the rest when the drain time is up.
///
/// A connection with a response that has waited on the client for `send_timeout`
/// (see [`Held`]; noticed within a quarter more) is dropped at once, its other
/// streams with it, as nginx closes a connection past its `send_timeout`.
async fn drive<I, S, B>(
    conn: auto::UpgradeableConnection<'_, I, S, TokioExecutor>,
    remote: std::net::SocketAddr,
    activity: &Activity,
    (idle, send_timeout): (Duration, Duration),
    stop: &CancellationToken,
) where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut conn = std::pin::pin!(conn);
    let mut seen = activity.sample();
    let check = tokio::time::sleep(idle);
    let mut check = std::pin::pin!(check);
    let tick = send_timeout / TICKS_PER_SEND_TIMEOUT;
    let sends = tokio::time::sleep(tick);
    let mut sends = std::pin::pin!(sends);
    let mut closing = false;
    let mut idle_closing = false;
    // Polled at each of the connection's wake-ups: a flag read (crate::wake).
    let mut stopped = Stop::new(stop);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, %remote, "connection ended with an error");
                }
                return;
            }
            () = &mut stopped, if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = check.as_mut(), if !closing || idle_closing => {
                if idle_closing {
                    tracing::debug!(%remote, "idle connection did not close; dropping it");
                    return;
                }
                let now = activity.sample();
                // Nothing started since the last check, and nothing in progress.
                if now == seen && now & IN_PROGRESS == 0 {
                    tracing::debug!(%remote, "idle connection closed");
                    (closing, idle_closing) = (true, true);
                    conn.as_mut().graceful_shutdown();
                }
                seen = now;
                check.as_mut().reset(tokio::time::Instant::now() + idle);
            }
            () = sends.as_mut() => {
                if activity.tick() {
                    tracing::debug!(%remote, ?send_timeout, "the client took none of a response for the send timeout; closing its connection");
                    return;
                }
                sends.as_mut().reset(tokio::time::Instant::now() + tick);
            }
        }
    }
}

/// Counts an open downstream connection until dropped.
struct OpenConn(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Gives a new connection the header-read timeout to show which protocol it speaks.
/// hyper-util's auto builder reads the first bytes without a timer (hyper#3962) and
/// hyper's own header-read timer starts after that, so without this a client that
/// connects and sends nothing, or part of the HTTP/2 preface, holds a connection
/// (and a file descriptor) forever. Once the protocol is known, reads pass through.
///
/// Reads return `pre` first: the bytes the HTTP/1.1 engine read before it handed the
/// connection to hyper.
struct Detect<T> {
    io: T,
    pre: Bytes,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    seen: usize,
}

impl<T> Detect<T> {
    fn new(io: T, pre: Bytes, within: Duration) -> Self {
        Detect {
            io,
            pre,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            seen: 0,
        }
    }
}

impl<T> Detect<T> {
    /// Follows the protocol choice through `new`, the next bytes read.
    fn decide(&mut self, new: &[u8]) {
        if self.deadline.is_none() {
            return;
        }
        let rest = &h1::H2_PREFACE[self.seen.min(h1::H2_PREFACE.len())..];
        let n = new.len().min(rest.len());
        self.seen += new.len();
        // End of stream, bytes that are not the preface, or the whole preface: the
        // protocol is decided.
        if new.is_empty() || new[..n] != rest[..n] || self.seen >= h1::H2_PREFACE.len() {
            self.deadline = None;
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Detect<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.pre.is_empty() {
            let n = this.pre.len().min(buf.remaining());
            let before = buf.filled().len();
            buf.put_slice(&this.pre.split_to(n));
            this.decide(&buf.filled()[before..]);
            return Poll::Ready(Ok(()));
        }
        if this.deadline.is_none() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.decide(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no HTTP/1.1 request or HTTP/2 preface within the header-read timeout",
                ))),
                _ => Poll::Pending,
            },
            r => r,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Detect<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
