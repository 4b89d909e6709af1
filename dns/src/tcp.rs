//! DNS over TCP (RFC 7766): the accept loop with its connection limits, and one task
//! per connection reading length-prefixed queries in sequence.
//!
//! Limits, checked at accept (a refused connection is closed at once):
//! - at most `max_total` connections, and at most `max_per_client` from one client
//!   address, so one client holding idle connections cannot lock the others out of
//!   TCP (the only way to get an answer that was truncated over UDP);
//! - a connection silent between queries is closed after the idle timeout;
//! - once a query has begun (its first length byte), the rest of it must arrive
//!   within the query timeout, and its answer must be written within it too (Knot's
//!   `tcp-io-timeout`): half-sent queries cannot hold connections for long.
//!
//! The UDP hot path never touches any of this.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::answer::{Outcome, Transport, rcode};
use crate::server::{ServerState, forward_tcp};

/// Connection counts, total and per client address.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_client: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `max_total` connections are open.
    Full,
    /// This client address has `max_per_client` connections open.
    ClientFull,
}

/// One open connection's place in the counts; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    client: IpAddr,
}

impl Slots {
    /// Limits of `max_total` connections, `max_per_client` of them from one address.
    pub fn new(max_total: usize, max_per_client: usize) -> Slots {
        Slots {
            max_total,
            max_per_client,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Takes a slot for a connection from `client`, if both limits allow it.
    pub fn take(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refused> {
        // IPv4 clients of a dual-stack socket arrive as ::ffff:a.b.c.d.
        let client = client.to_canonical();
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if c.total >= self.max_total {
            return Err(Refused::Full);
        }
        let mine = c.per_client.entry(client).or_default();
        if *mine >= self.max_per_client {
            return Err(Refused::ClientFull);
        }
        *mine += 1;
        c.total += 1;
        Ok(Slot {
            slots: self.clone(),
            client,
        })
    }

    /// Open connections (for tests and diagnostics).
    pub fn open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.slots.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                c.per_client.remove(&self.client);
            }
        }
    }
}

/// Accepts TCP connections until the task is aborted.
pub async fn accept(listener: TcpListener, shared: Arc<ServerState>) {
    let never = tokio_util::sync::CancellationToken::new();
    loop {
        let Some((stream, peer)) =
            causeway_runtime::net::accept(&listener, &never, "dns tcp").await
        else {
            return;
        };
        let slot = match shared.tcp_slots.take(peer.ip()) {
            Ok(s) => s,
            Err(why) => {
                tracing::debug!(%peer, ?why, "TCP connection refused by the limits; closing");
                shared.metrics.tcp_refused();
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            serve(stream, &shared).await;
        });
    }
}

/// Why a connection ends.
enum End {
    /// The client closed it or an I/O error occurred.
    Closed,
    /// A timeout expired (counted in the metrics).
    TimedOut,
}

/// Reads one length-prefixed message into `buf`: up to the idle timeout for its first
/// byte, then up to the query timeout for the rest.
async fn read_message(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    shared: &ServerState,
) -> Result<(), End> {
    let mut len = [0u8; 2];
    let first = match tokio::time::timeout(shared.tcp_idle_timeout, stream.read(&mut len)).await {
        Ok(Ok(0)) | Ok(Err(_)) => return Err(End::Closed),
        Ok(Ok(n)) => n,
        Err(_) => return Err(End::TimedOut),
    };
    let rest = async {
        if first < 2 {
            stream.read_exact(&mut len[first..]).await?;
        }
        buf.resize(u16::from_be_bytes(len) as usize, 0);
        stream.read_exact(buf).await?;
        Ok::<_, std::io::Error>(())
    };
    match tokio::time::timeout(shared.tcp_query_timeout, rest).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(End::Closed),
        Err(_) => Err(End::TimedOut),
    }
}

/// Relays a query to the upstream over TCP: its answer, or `None` with the error
/// answer in `out` (REFUSED over the limit of concurrent forwards, SERVFAIL when the
/// upstream gives no answer in time).
async fn forward(query: &[u8], shared: &ServerState, out: &mut Vec<u8>) -> Option<Vec<u8>> {
    let Some(_permit) = shared.forward_permit() else {
        shared.forward_error(query, rcode::REFUSED, out);
        return None;
    };
    if let Some(up) = shared.forward
        && let Some(r) = forward_tcp(up, query, shared.forward_timeout).await
    {
        return Some(r);
    }
    shared.metrics.forward_failed();
    shared.forward_error(query, rcode::SERVFAIL, out);
    None
}

/// Serves one connection: length-prefixed queries in sequence until the client
/// closes it or a timeout expires.
async fn serve(mut stream: TcpStream, shared: &ServerState) {
    let mut out = Vec::with_capacity(512);
    let mut buf = Vec::new();
    let end = loop {
        if let Err(end) = read_message(&mut stream, &mut buf, shared).await {
            break end;
        }
        let reply: Vec<u8> = match shared.handle(&buf, Transport::Tcp, &mut out) {
            Outcome::Reply { .. } => std::mem::take(&mut out),
            Outcome::Forward { .. } => match forward(&buf, shared, &mut out).await {
                Some(r) => r,
                None => std::mem::take(&mut out),
            },
            Outcome::Drop => break End::Closed,
        };
        if reply.is_empty() {
            // No answer could be made (never for a query that parsed).
            out = reply;
            continue;
        }
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&(reply.len() as u16).to_be_bytes());
        framed.extend_from_slice(&reply);
        out = reply;
        match tokio::time::timeout(shared.tcp_query_timeout, stream.write_all(&framed)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break End::Closed,
            Err(_) => break End::TimedOut,
        }
    };
    if let End::TimedOut = end {
        shared.metrics.tcp_timeout();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_limit_per_client_and_in_total_and_come_back() {
        let slots = Arc::new(Slots::new(3, 2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = slots.take(a).unwrap();
        let _a2 = slots.take(a).unwrap();
        assert_eq!(slots.take(a).unwrap_err(), Refused::ClientFull);
        // The same client over a dual-stack socket counts as the same client.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(slots.take(mapped).unwrap_err(), Refused::ClientFull);
        let _b1 = slots.take(b).unwrap();
        assert_eq!(slots.take(b).unwrap_err(), Refused::Full);
        drop(a1);
        assert_eq!(slots.open(), 2);
        let _b2 = slots.take(b).unwrap();
        assert_eq!(slots.open(), 3);
    }
}
