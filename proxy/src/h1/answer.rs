//! Answers the engine makes itself (errors, refusals), rendered into the connection's
//! output buffer.

use tokio::io::AsyncWrite;

use super::{Handoff, Served, write};
use crate::pipeline::{Proxy, Refusal};

/// Renders a response the proxy makes itself (to a HEAD request: the head only).
pub(super) fn error_response(proxy: &Proxy, out: &mut Vec<u8>, why: Refusal, to: To) {
    let status = why.status;
    let body = proxy.note(status, why.reason, &why.msg);
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\ndate: ");
    out.extend_from_slice(httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes());
    if to.close {
        out.extend_from_slice(b"\r\nconnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
    if !to.head {
        out.extend_from_slice(body.as_bytes());
    }
}

/// Whom an answer goes to.
#[derive(Clone, Copy)]
pub(super) struct To {
    /// The connection closes after it.
    pub(super) close: bool,
    /// The request was HEAD: no body.
    pub(super) head: bool,
}

/// Answers with a response the proxy makes itself.
pub(super) async fn answer<T: AsyncWrite + Unpin>(
    io: &mut T,
    proxy: &Proxy,
    out: &mut Vec<u8>,
    why: Refusal,
    to: To,
) -> Result<Served, Handoff> {
    error_response(proxy, out, why, to);
    Ok(match write(io, out).await {
        Ok(()) if !to.close => Served::KeepAlive,
        _ => Served::Close,
    })
}
