//! An upstream response body on a raw connection, for an HTTP/2 client.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use hyper::body::{Frame, SizeHint};

use super::{Framing, READ_CHUNK, RespHead, parse_trailers};
use crate::endpoint::Endpoint;
use crate::upstream::chunked::{Chunked, Part};
use crate::upstream::{Error, Raw, Settings};

/// Errors of a response body on its way to the client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An upstream response body read from its [`Raw`] connection for an HTTP/2 client:
/// data frames as they arrive (a chunked body decoded, its trailers given as a trailers
/// frame after the data, hop-by-hop and framing fields left out: [`parse_trailers`]), one
/// read at a time (hyper polls for the next frame when the stream has room for it, so
/// the memory held is one read buffer). The connection goes back to the endpoint's
/// pool once the body has ended exactly where its framing said; dropped before that,
/// it closes.
pub(crate) struct RawBody {
    /// None once the body ended.
    conn: Option<Raw>,
    buf: BytesMut,
    /// Data taken from the buffer on creation, not yet given out.
    first: Bytes,
    framing: Framing,
    /// What is left of a `Content-Length` body.
    left: u64,
    chunked: Chunked,
    /// A chunked body's trailer section, as it arrives (at most 64 KiB: [`Chunked`]).
    section: Vec<u8>,
    /// Its trailers, once the body ended, until given out (boxed: most bodies have
    /// none, and the body is moved into its box whole).
    trailers: Option<Box<HeaderMap>>,
    /// The upstream keeps the connection open after this response.
    reusable: bool,
    ep: Arc<Endpoint>,
    settings: Settings,
}

impl RawBody {
    /// The body of the response whose `head` came on `conn`; `buf` holds what was read
    /// after the head. What it holds is framed here: a body already broken (an invalid
    /// chunk) is an error before anything reaches the client.
    pub(crate) fn new(
        conn: Raw,
        buf: BytesMut,
        head: &RespHead,
        ep: Arc<Endpoint>,
        settings: Settings,
    ) -> Result<Self, &'static str> {
        let mut body = RawBody {
            conn: Some(conn),
            buf,
            first: Bytes::new(),
            framing: head.framing,
            left: match head.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunked: Chunked::default(),
            section: Vec::new(),
            trailers: None,
            reusable: head.reusable,
            ep,
            settings,
        };
        if matches!(head.framing, Framing::Empty | Framing::Length(0)) {
            body.ended(body.buf.is_empty());
        } else if !body.buf.is_empty() {
            body.first = body.take().map_err(|e| match e {
                Error::Malformed(why) => why,
                _ => "invalid response body",
            })?;
        }
        Ok(body)
    }

    /// The body ended; `clean`: exactly where its framing said (nothing after it).
    fn ended(&mut self, clean: bool) {
        if let Some(conn) = self.conn.take()
            && clean
            && self.reusable
        {
            self.ep.pool.put_raw(conn, self.settings);
        }
        self.buf = BytesMut::new();
    }

    /// The next data from what is buffered (empty when it held none).
    fn take(&mut self) -> Result<Bytes, Error> {
        match self.framing {
            Framing::Empty => Ok(Bytes::new()),
            Framing::Length(_) => {
                let n = self.left.min(self.buf.len() as u64);
                self.left -= n;
                let data = self.buf.split_to(n as usize).freeze();
                if self.left == 0 {
                    self.ended(self.buf.is_empty());
                }
                Ok(data)
            }
            Framing::Chunked => {
                let mut data = BytesMut::new();
                let (buf, section) = (&self.buf, &mut self.section);
                let end = self
                    .chunked
                    .decode(buf, |part, r| match part {
                        Part::Data => data.extend_from_slice(&buf[r]),
                        Part::Trailers => section.extend_from_slice(&buf[r]),
                    })
                    .map_err(Error::Malformed)?;
                match end {
                    Some(n) => {
                        let trailers = parse_trailers(&std::mem::take(&mut self.section))?;
                        self.trailers = (!trailers.is_empty()).then(|| Box::new(trailers));
                        let clean = n == self.buf.len();
                        self.ended(clean);
                    }
                    None => self.buf.clear(),
                }
                Ok(data.freeze())
            }
            Framing::Close => Ok(self.buf.split().freeze()),
        }
    }
}

impl hyper::body::Body for RawBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.first.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut this.first)))));
        }
        loop {
            if !this.buf.is_empty() {
                match this.take() {
                    Ok(data) if !data.is_empty() => {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        this.conn = None;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(*t))));
            };
            if let Err(e) = ready!(conn.stream.poll_read_ready(cx)) {
                this.conn = None;
                return Poll::Ready(Some(Err(Error::Io(e).into())));
            }
            this.buf.reserve(READ_CHUNK);
            match conn.stream.try_read_buf(&mut this.buf) {
                Ok(0) if this.framing == Framing::Close => {
                    this.ended(false);
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::Malformed(
                        "the upstream closed the connection mid-body",
                    )
                    .into())));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(Error::Io(e).into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
            && self.buf.is_empty()
            && self.first.is_empty()
            && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Empty => SizeHint::with_exact(0),
            Framing::Length(_) => SizeHint::with_exact(self.left + self.first.len() as u64),
            _ => SizeHint::default(),
        }
    }
}
