//! A scripted upstream on raw sockets (it answers with the request exactly as it
//! arrived), raw client connections, and sites routed to it: what reaches the
//! upstream, byte for byte.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::*;

/// An upstream on raw sockets that answers by path:
/// - `/chunked`: a chunked body with an extension and a trailer;
/// - `/trailers`: a chunked body whose trailers are end-to-end (`x-checksum`, twice
///   `x-other`), hop-by-hop (`connection`, `te`) and framing ones (`content-length`);
///   `/badtrailer`: one whose trailer line is not a field (`/badtrailer-late`: sent
///   50 ms after the first chunk; `/trailers-late`: a valid last chunk and trailer
///   sent then);
/// - `/close`: a body delimited by closing the connection;
/// - `/interim`: a 103 Early Hints, then 200;
/// - `/nocontent`: 204;
/// - `/badchunk`: a chunked body with an invalid chunk size (`/badchunk-late`: sent
///   50 ms after the first chunk);
/// - `/hop`: hop-by-hop response headers;
/// - `/slow`: answers after 3 s, unless the proxy closes the connection first;
/// - `/delay`: the echo, after 300 ms;
/// - `/short`: a head announcing 10 bytes, 2 of them, then the connection closes;
/// - `/drop`: the connection closes with no answer;
/// - `/stall`: a head announcing 10 bytes and 2 of them, then 5 s of silence before
///   the connection closes (`/stall-chunked`: a chunked body's first chunk, then the
///   same);
/// - `/trickle`: a head announcing 10 bytes, then one `x` every 100 ms
///   (`/trickle-chunked`: ten one-byte chunks, then the last chunk);
/// - `/big`: 1 MiB of `x`;
/// - `/bighead`: a 10,000-byte `x-big` header;
/// - anything else: 200 with the request exactly as received (head and body).
///
/// Request bodies framed by Content-Length or chunked are read.
pub struct Scripted {
    pub addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    /// `/slow` requests whose connection the proxy closed before the answer.
    pub abandoned: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Length of `/big`'s body.
pub const BIG: usize = 1 << 20;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where the request at the start of `buf` ends, if it is all there.
fn request_end(buf: &[u8]) -> Option<usize> {
    let head = find(buf, b"\r\n\r\n")? + 4;
    let lower = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    if lower.contains("transfer-encoding: chunked") {
        return find(&buf[head..], b"0\r\n\r\n").map(|e| head + e + 5);
    }
    let len: usize = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    (buf.len() >= head + len).then_some(head + len)
}

impl Scripted {
    pub async fn start(ip: [u8; 4]) -> anyhow::Result<Scripted> {
        let l = TcpListener::bind(SocketAddr::new(IpAddr::from(ip), POD_PORT)).await?;
        let addr = l.local_addr()?;
        let accepted = Arc::new(AtomicU64::new(0));
        let abandoned = Arc::new(AtomicU64::new(0));
        let n = accepted.clone();
        let gone = abandoned.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::Relaxed);
                let gone = gone.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                        while let Some(end) = request_end(&buf) {
                            let req: Vec<u8> = buf.drain(..end).collect();
                            let line = String::from_utf8_lossy(&req);
                            let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                            let resp: Vec<u8> = match path.as_str() {
                                "/chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\n".to_vec(),
                                "/trailers" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc\r\nconnection: close\r\nte: trailers\r\ncontent-length: 11\r\nx-other: 1\r\nX-Other: 2\r\n\r\n".to_vec(),
                                "/badtrailer" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nnot a field\r\n\r\n".to_vec(),
                                "/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec(),
                                "/interim" => b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                                "/nocontent" => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
                                "/badchunk" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n".to_vec(),
                                "/short" => b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok".to_vec(),
                                "/drop" => return,
                                "/big" => {
                                    let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {BIG}\r\n\r\n").into_bytes();
                                    r.resize(r.len() + BIG, b'x');
                                    r
                                }
                                "/bighead" => format!("HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 2\r\n\r\nok", "y".repeat(10_000)).into_bytes(),
                                "/hop" => b"HTTP/1.1 200 OK\r\nconnection: x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\nx-kept: 1\r\ncontent-length: 2\r\n\r\nok".to_vec(),
                                _ => {
                                    let mut r = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", req.len()).into_bytes();
                                    r.extend_from_slice(&req);
                                    r
                                }
                            };
                            if let Some(first) = match path.as_str() {
                                "/stall" => Some(&b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok"[..]),
                                "/stall-chunked" => Some(&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n"[..]),
                                _ => None,
                            } {
                                let _ = s.write_all(first).await;
                                tokio::time::sleep(Duration::from_secs(5)).await;
                                return;
                            }
                            if path == "/trickle" || path == "/trickle-chunked" {
                                let chunked = path == "/trickle-chunked";
                                let head: &[u8] = if chunked {
                                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                                } else {
                                    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"
                                };
                                if s.write_all(head).await.is_err() {
                                    return;
                                }
                                for _ in 0..10 {
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                    let one: &[u8] = if chunked { b"1\r\nx\r\n" } else { b"x" };
                                    if s.write_all(one).await.is_err() {
                                        return;
                                    }
                                }
                                if chunked && s.write_all(b"0\r\n\r\n").await.is_err() {
                                    return;
                                }
                                continue;
                            }
                            if path == "/delay" {
                                tokio::time::sleep(Duration::from_millis(300)).await;
                            }
                            if path == "/slow" {
                                let mut one = [0u8; 1];
                                tokio::select! {
                                    () = tokio::time::sleep(Duration::from_secs(3)) => {}
                                    r = s.read(&mut one) => {
                                        if matches!(r, Ok(0) | Err(_)) {
                                            gone.fetch_add(1, Ordering::Relaxed);
                                        }
                                        return;
                                    }
                                }
                            }
                            let late: Option<&[u8]> = match path.as_str() {
                                "/badchunk-late" => Some(b"zz\r\n"),
                                "/badtrailer-late" => Some(b"0\r\nnot a field\r\n\r\n"),
                                "/trailers-late" => Some(b"0\r\nx-checksum: abc\r\n\r\n"),
                                _ => None,
                            };
                            if let Some(late) = late {
                                let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
                                let _ = s.write_all(head).await;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                let _ = s.write_all(late).await;
                                // A broken body ends the connection; a whole one does not.
                                if path == "/trailers-late" {
                                    continue;
                                }
                                return;
                            }
                            if s.write_all(&resp).await.is_err() {
                                return;
                            }
                            if path == "/close" || path == "/badchunk" || path == "/short" {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Ok(Scripted {
            addr,
            accepted,
            abandoned,
            task,
        })
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `bytes` on a new connection and reads until the proxy closes it.
pub async fn raw(proxy: SocketAddr, bytes: &[u8]) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(proxy).await?;
    s.write_all(bytes).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .context("the proxy did not close the connection")??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A scripted upstream on `ip` behind Service `svc`, routed from `host` by an MCI.
pub async fn site(hub: &Hub, ip: [u8; 4], svc: &str, host: &str) -> anyhow::Result<Scripted> {
    let spec = json!({"rules": [rule(Some(host), "/", "Prefix", svc)]});
    site_with(hub, ip, svc, spec, json!({})).await
}

/// A scripted upstream on `ip` behind Service `svc`, served by an MCI `svc` with this
/// spec and these annotations.
pub async fn site_with(
    hub: &Hub,
    ip: [u8; 4],
    svc: &str,
    spec: serde_json::Value,
    annotations: serde_json::Value,
) -> anyhow::Result<Scripted> {
    let up = Scripted::start(ip).await?;
    hub.import(svc).await?;
    hub.export(svc, "east", &[(up.addr, true)]).await?;
    hub.mci(svc, spec, annotations).await?;
    Ok(up)
}

/// Waits until the proxy routes `host` to a live upstream.
pub async fn routed(p: &causeway_proxy::Running, host: &str) -> anyhow::Result<()> {
    let c = client();
    answers(&c, p.http, (host, "/"), 200, Duration::from_secs(10)).await
}

pub fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}
