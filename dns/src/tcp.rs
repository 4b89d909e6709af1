//! DNS over TCP (RFC 7766): the accept loop with its connection limits, and one task
//! per connection reading length-prefixed queries.
//!
//! Limits:
//! - at most `max_total` connections, and at most `max_per_client` from one client
//!   address. A new connection over either limit makes room by closing the
//!   connection that has been idle between queries the longest (one of the same
//!   client's first; RFC 7766 §6.2.3 lets a server close idle connections under
//!   pressure); only when no connection is idle is the new one closed at once. A
//!   connection that has not sent its first query yet counts as idle only once it has
//!   been open for the query timeout (it took a place: it gets the time to use it).
//!   So connections held idle (CoreDNS pods reusing theirs, a slowloris) never lock
//!   anyone out of TCP, the only way to get an answer that was truncated over UDP.
//!   Nor do connections kept busy (a query always begun, each finished within the
//!   query timeout): over the total limit with none idle, a new connection from a
//!   client holding at least two fewer than the client holding the most closes that
//!   client's oldest connection, busy or not, as long as it keeps more than
//!   [`MIN_KEPT_PER_CLIENT`] (§6.2.3 again: under pressure a server may close any);
//! - a connection silent between queries is closed after the idle timeout;
//! - once a query has begun (its first length byte), the rest of it must arrive
//!   within the query timeout, and its answer must be written within it too (Knot's
//!   `tcp-io-timeout`): half-sent queries cannot hold connections for long.
//!
//! Queries on one connection are read in sequence. Answers from the zone are written
//! at once; forwarded ones (`--forward`) when the upstream answers, so a slow upstream
//! does not hold back the queries pipelined behind them (RFC 7766 §6.2.1.1: answers
//! may come out of order). At most [`MAX_PIPELINED_FORWARDS`] per connection wait for
//! the upstream; past that, the connection's next query is read when one is answered.
//!
//! Memory: a query's buffer grows with the bytes that arrive, not to the length its
//! prefix announces (two bytes `ff ff` do not take 64 KiB); a reply is written with its
//! length prefix in one vectored write (no second copy), and the query and reply
//! buffers go back to [`KEPT_CAPACITY`] after a larger message, so idle connections
//! hold little whatever they were asked before.
//!
//! The UDP hot path never touches any of this.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::answer::{Outcome, Transport, rcode};
use crate::server::{ServerState, forward_tcp};

/// Capacity a connection's query and reply buffers keep between messages; a larger
/// message's buffer is given back once it is answered.
pub const KEPT_CAPACITY: usize = 4096;

/// Connections a client keeps whatever the pressure: over the total limit with none
/// idle, a busy connection is closed to make room only from a client holding more.
pub const MIN_KEPT_PER_CLIENT: usize = 2;

/// Most forwarded queries of one connection waiting for the upstream at once.
pub const MAX_PIPELINED_FORWARDS: usize = 16;

/// A connection's state, as one number: a query is begun, being answered or
/// forwarded...
const BUSY: u64 = 0;
/// ...it was closed to make room...
const EVICTED: u64 = u64::MAX;
// ...or anything else: idle since then (nanoseconds since `Slots::epoch`, plus one).

/// The open connections, with their limits in total and per client address.
#[derive(Debug)]
pub struct Slots {
    max_total: usize,
    max_per_client: usize,
    /// How long a new connection that has sent nothing is not counted as idle.
    grace: Duration,
    epoch: Instant,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    conns: HashMap<u64, Entry>,
    per_client: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Entry {
    client: IpAddr,
    conn: Arc<ConnState>,
}

/// What the table and a connection's task share.
#[derive(Debug)]
struct ConnState {
    /// [`BUSY`], [`EVICTED`] or idle since.
    state: AtomicU64,
    /// Cancelled when the connection is closed to make room.
    close: CancellationToken,
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `max_total` connections are open and none is idle.
    Full,
    /// This client address has `max_per_client` connections open and none is idle.
    ClientFull,
}

/// One open connection's place in the table; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    conn: Arc<ConnState>,
}

impl Slots {
    /// Limits of `max_total` connections, `max_per_client` of them from one address;
    /// a new connection counts as idle (may be closed to make room) once it has sent
    /// nothing for `grace`.
    pub fn new(max_total: usize, max_per_client: usize, grace: Duration) -> Slots {
        Slots {
            max_total,
            max_per_client,
            grace,
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
        }
    }

    /// `at` as a state number (never [`BUSY`] or [`EVICTED`]).
    fn stamp(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).unwrap_or(EVICTED - 2).min(EVICTED - 2) + 1
    }

    /// Takes a place for a connection from `client`. Over a limit, the connection
    /// idle the longest (the same client's first) is closed to make room: the second
    /// value says whether one was. Over the total limit with none idle, the oldest
    /// connection of the client holding the most is closed, busy or not, when that
    /// client holds at least two more than `client` and more than
    /// [`MIN_KEPT_PER_CLIENT`]. Refused otherwise.
    pub fn take(self: &Arc<Self>, client: IpAddr) -> Result<(Slot, bool), Refused> {
        // IPv4 clients of a dual-stack socket arrive as ::ffff:a.b.c.d.
        let client = client.to_canonical();
        let now = Instant::now();
        let idle_by = self.stamp(now);
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut evicted = false;
        if t.per_client.get(&client).copied().unwrap_or(0) >= self.max_per_client {
            if !t.evict(idle_by, Some(client)) {
                return Err(Refused::ClientFull);
            }
            evicted = true;
        }
        if t.conns.len() >= self.max_total {
            if !(t.evict(idle_by, Some(client))
                || t.evict(idle_by, None)
                || t.evict_from_the_largest(client))
            {
                return Err(Refused::Full);
            }
            evicted = true;
        }
        let id = t.next_id;
        t.next_id += 1;
        let conn = Arc::new(ConnState {
            state: AtomicU64::new(self.stamp(now + self.grace)),
            close: CancellationToken::new(),
        });
        t.conns.insert(
            id,
            Entry {
                client,
                conn: conn.clone(),
            },
        );
        *t.per_client.entry(client).or_default() += 1;
        Ok((
            Slot {
                slots: self.clone(),
                id,
                conn,
            },
            evicted,
        ))
    }

    /// Open connections (for tests and diagnostics).
    pub fn open(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .conns
            .len()
    }
}

impl Table {
    /// Closes the connection (of `client`, or anyone's) idle the longest, idle since
    /// `idle_by` at the latest; whether there was one.
    fn evict(&mut self, idle_by: u64, client: Option<IpAddr>) -> bool {
        let mut idle: Vec<(u64, u64)> = self
            .conns
            .iter()
            .filter(|(_, e)| client.is_none_or(|c| e.client == c))
            .filter_map(|(id, e)| {
                let s = e.conn.state.load(Ordering::SeqCst);
                (s != BUSY && s != EVICTED && s <= idle_by).then_some((s, *id))
            })
            .collect();
        idle.sort_unstable();
        for (since, id) in idle {
            let Some(e) = self.conns.get(&id) else {
                continue;
            };
            // Lost to the connection itself when a query began meanwhile.
            if e.conn
                .state
                .compare_exchange(since, EVICTED, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                e.conn.close.cancel();
                self.remove(id);
                return true;
            }
        }
        false
    }

    /// Closes the oldest connection (busy or idle) of the client holding the most,
    /// when `client` (about to open one more) holds at least two fewer, so the
    /// connections move toward an even share and never back and forth, and that
    /// client keeps more than [`MIN_KEPT_PER_CLIENT`]; whether one was closed.
    fn evict_from_the_largest(&mut self, client: IpAddr) -> bool {
        let mine = self.per_client.get(&client).copied().unwrap_or(0);
        let Some((&largest, &most)) = self.per_client.iter().max_by_key(|(_, n)| **n) else {
            return false;
        };
        if most <= MIN_KEPT_PER_CLIENT || mine + 1 >= most {
            return false;
        }
        let Some(id) = self
            .conns
            .iter()
            .filter(|(_, e)| e.client == largest)
            .map(|(id, _)| *id)
            .min()
        else {
            return false;
        };
        let Some(e) = self.conns.get(&id) else {
            return false;
        };
        e.conn.state.store(EVICTED, Ordering::SeqCst);
        e.conn.close.cancel();
        self.remove(id);
        true
    }

    fn remove(&mut self, id: u64) {
        let Some(e) = self.conns.remove(&id) else {
            return;
        };
        if let Some(n) = self.per_client.get_mut(&e.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&e.client);
            }
        }
    }
}

impl Slot {
    /// A query begins: the connection may not be closed to make room. False when it
    /// already was (its place is gone: the connection must end).
    fn busy(&self) -> bool {
        self.conn
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s != EVICTED).then_some(BUSY)
            })
            .is_ok()
    }

    /// Nothing is begun or waiting: the connection is idle from now on.
    fn idle(&self) {
        let now = self.slots.stamp(Instant::now());
        let _ = self
            .conn
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s != EVICTED).then_some(now)
            });
    }

    /// Resolves when the connection is closed to make room.
    async fn evicted(&self) {
        self.conn.close.cancelled().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.slots.table.lock().unwrap_or_else(|e| e.into_inner());
        t.remove(self.id);
    }
}

/// Accepts TCP connections until the task is aborted.
pub async fn accept(listener: TcpListener, shared: Arc<ServerState>) {
    let never = CancellationToken::new();
    loop {
        let Some((mut stream, peer)) =
            causeway_runtime::net::accept(&listener, &never, "dns tcp").await
        else {
            return;
        };
        let slot = match shared.tcp_slots.take(peer.ip()) {
            Ok((slot, evicted)) => {
                if evicted {
                    tracing::debug!(%peer, "closed the connection idle the longest to make room");
                    shared.metrics.tcp_evicted();
                }
                slot
            }
            Err(why) => {
                tracing::debug!(%peer, ?why, "TCP connection refused by the limits (none idle); closing");
                shared.metrics.tcp_refused();
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let mut bufs = Buffers::default();
            if let End::TimedOut = serve(&mut stream, &shared, &slot, &mut bufs).await {
                shared.metrics.tcp_timeout();
            }
            drop(stream);
            drop(slot);
        });
    }
}

/// Why a connection ends.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The client closed it, an I/O error occurred, or it was closed to make room.
    Closed,
    /// A timeout expired (counted in the metrics).
    TimedOut,
}

/// A connection's buffers: the query being read and the reply being written.
#[derive(Debug)]
struct Buffers {
    reader: Reader,
    out: Vec<u8>,
}

impl Default for Buffers {
    fn default() -> Buffers {
        Buffers {
            reader: Reader::default(),
            out: Vec::with_capacity(512),
        }
    }
}

/// One length-prefixed message, read a piece at a time (each step is one read, so
/// it can be interrupted between steps without losing bytes).
///
/// The buffer grows with the bytes that arrive, not to the length announced: two
/// bytes `ff ff` take a little over [`FIRST_READ`] bytes, not 64 KiB (else every
/// connection could hold 64 KiB for two bytes sent, renewed by reconnecting).
#[derive(Debug, Default)]
struct Reader {
    len: [u8; 2],
    /// Bytes of `len` read.
    got: usize,
    /// The message read so far (whole once it is `want` bytes long).
    buf: Vec<u8>,
    /// The message's length (once `len` is read).
    want: usize,
    /// When the message's first byte arrived.
    begun: Option<Instant>,
}

/// Room made for the first read of a message's body; each further read when the
/// buffer is full makes as much room again as was read (at most what is missing), so
/// the buffer stays within twice the bytes received (plus this).
const FIRST_READ: usize = 512;

impl Reader {
    /// One read: whether the message is now whole. An error at end of stream.
    async fn step<S: AsyncRead + Unpin>(&mut self, s: &mut S) -> std::io::Result<bool> {
        if self.got < 2 {
            let n = s.read(&mut self.len[self.got..]).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if self.got == 0 {
                self.begun = Some(Instant::now());
            }
            self.got += n;
            if self.got < 2 {
                return Ok(false);
            }
            self.buf.clear();
            self.want = usize::from(u16::from_be_bytes(self.len));
        }
        let missing = self.want - self.buf.len();
        if missing > 0 {
            if self.buf.len() == self.buf.capacity() {
                self.buf
                    .reserve_exact(missing.min(self.buf.len().max(FIRST_READ)));
            }
            // Into the spare capacity (no zeroing), never past this message: the next
            // pipelined one stays in the socket.
            let n = s.read_buf(&mut (&mut self.buf).limit(missing)).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(self.buf.len() == self.want)
    }

    /// The whole message (once [`Reader::step`] said so).
    fn message(&self) -> &[u8] {
        &self.buf
    }

    /// The message is handled: ready for the next, with a small buffer again.
    fn done(&mut self) {
        self.got = 0;
        self.want = 0;
        self.begun = None;
        self.buf.clear();
        self.buf.shrink_to(KEPT_CAPACITY);
    }
}

/// A forwarded query's answer: the upstream's, else SERVFAIL (empty when there is
/// no answer to make).
type Pending<'a> = Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>>;

/// Relays a query to the upstream over TCP: its answer, or SERVFAIL when the upstream
/// gives none in time.
async fn forward(query: Vec<u8>, permit: OwnedSemaphorePermit, shared: &ServerState) -> Vec<u8> {
    let _permit = permit;
    if let Some(up) = shared.forward
        && let Some(r) = forward_tcp(up, &query, shared.forward_timeout).await
    {
        return r;
    }
    shared.metrics.forward_failed();
    let mut out = Vec::new();
    shared.forward_error(&query, rcode::SERVFAIL, &mut out);
    out
}

/// Writes one reply with its length prefix (one vectored write, no copy), within the
/// query timeout.
async fn write_reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    reply: &[u8],
    timeout: Duration,
) -> Result<(), End> {
    if reply.is_empty() {
        // No answer could be made (never for a query that parsed).
        return Ok(());
    }
    let Ok(len) = u16::try_from(reply.len()) else {
        // Never: answers are cut to 65535 bytes, upstream ones are read with a u16.
        tracing::warn!(len = reply.len(), "TCP answer over 65535 bytes; closing");
        return Err(End::Closed);
    };
    let prefix = len.to_be_bytes();
    let mut framed = Buf::chain(&prefix[..], reply);
    match tokio::time::timeout(timeout, stream.write_all_buf(&mut framed)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(End::Closed),
        Err(_) => Err(End::TimedOut),
    }
}

/// Waits until `deadline`, forever when there is none.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Serves one connection: length-prefixed queries until the client closes it, a
/// timeout expires or it is closed to make room.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    shared: &ServerState,
    slot: &Slot,
    bufs: &mut Buffers,
) -> End {
    let mut forwards: FuturesUnordered<Pending<'_>> = FuturesUnordered::new();
    // The end of the last query or answer (the idle timeout runs from it).
    let mut last = Instant::now();
    let mut idle = true;
    // The client closed its side between queries: answer what is forwarded, then end.
    let mut eof = false;
    loop {
        if eof && forwards.is_empty() {
            return End::Closed;
        }
        let deadline = match bufs.reader.begun {
            Some(at) => Some(at + shared.tcp_query_timeout),
            // Forwarded queries end within the forward timeout.
            None if forwards.is_empty() => Some(last + shared.tcp_idle_timeout),
            None => None,
        };
        let read_more = !eof && forwards.len() < MAX_PIPELINED_FORWARDS;
        tokio::select! {
            biased;
            () = slot.evicted() => return End::Closed,
            Some(reply) = forwards.next(), if !forwards.is_empty() => {
                if let Err(end) = write_reply(stream, &reply, shared.tcp_query_timeout).await {
                    return end;
                }
                last = Instant::now();
            }
            read = bufs.reader.step(stream), if read_more => match read {
                Err(e)
                    if e.kind() == std::io::ErrorKind::UnexpectedEof
                        && bufs.reader.begun.is_none()
                        && !forwards.is_empty() =>
                {
                    eof = true;
                }
                Err(_) => return End::Closed,
                Ok(false) => {}
                Ok(true) => {
                    // (begun and whole in one read: busy now, idle again below)
                    if idle && !slot.busy() {
                        return End::Closed;
                    }
                    idle = false;
                    let query = bufs.reader.message();
                    match shared.handle(query, Transport::Tcp, &mut bufs.out) {
                        Outcome::Reply { .. } => {}
                        Outcome::Forward { .. } => match shared.forward_permit() {
                            Some(permit) => {
                                forwards.push(Box::pin(forward(query.to_vec(), permit, shared)));
                                bufs.out.clear();
                            }
                            None => {
                                shared.forward_error(query, rcode::REFUSED, &mut bufs.out);
                            }
                        },
                        Outcome::Drop => return End::Closed,
                    }
                    bufs.reader.done();
                    let written = write_reply(stream, &bufs.out, shared.tcp_query_timeout).await;
                    bufs.out.clear();
                    bufs.out.shrink_to(KEPT_CAPACITY);
                    if let Err(end) = written {
                        return end;
                    }
                    last = Instant::now();
                }
            },
            () = until(deadline) => return End::TimedOut,
        }
        let now_idle = bufs.reader.begun.is_none() && forwards.is_empty();
        if now_idle && !idle {
            slot.idle();
        } else if !now_idle && idle && !slot.busy() {
            // Closed to make room just as a query began.
            return End::Closed;
        }
        idle = now_idle;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Settings;
    use crate::answer::tests::{decode, huge_headless_zone, query};
    use crate::index::Zone;
    use crate::metrics::Metrics;
    use arc_swap::ArcSwap;
    use hickory_proto::rr::RecordType;

    const GRACE: Duration = Duration::from_millis(50);

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn slots_limit_per_client_and_in_total_and_come_back() {
        let slots = Arc::new(Slots::new(3, 2, GRACE));
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let (a1, _) = slots.take(a).unwrap();
        let (a2, _) = slots.take(a).unwrap();
        // Both busy (a query begun): nothing to close.
        assert!(a1.busy() && a2.busy());
        assert_eq!(slots.take(a).unwrap_err(), Refused::ClientFull);
        // The same client over a dual-stack socket counts as the same client.
        assert_eq!(
            slots.take(ip("::ffff:10.0.0.1")).unwrap_err(),
            Refused::ClientFull
        );
        let (b1, _) = slots.take(b).unwrap();
        assert!(b1.busy());
        assert_eq!(slots.take(b).unwrap_err(), Refused::Full);
        drop(a1);
        assert_eq!(slots.open(), 2);
        let (_b2, evicted) = slots.take(b).unwrap();
        assert!(!evicted);
        assert_eq!(slots.open(), 3);
    }

    #[test]
    fn over_a_limit_the_longest_idle_connection_makes_room_the_clients_own_first() {
        let slots = Arc::new(Slots::new(4, 3, GRACE));
        let (a, b, c, d, e) = (
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("10.0.0.4"),
            ip("10.0.0.5"),
        );
        let (b1, _) = slots.take(b).unwrap();
        let (a1, _) = slots.take(a).unwrap();
        let (a2, _) = slots.take(a).unwrap();
        let (a3, _) = slots.take(a).unwrap();
        // New connections that sent nothing yet are not idle.
        assert_eq!(slots.take(a).unwrap_err(), Refused::ClientFull);
        for s in [&b1, &a1, &a2, &a3] {
            assert!(s.busy());
        }
        // Idle in this order: b1 (the longest), a1.
        b1.idle();
        std::thread::sleep(Duration::from_millis(2));
        a1.idle();
        // a at its own limit: a's idle a1 goes, not b's older b1.
        let (a4, evicted) = slots.take(a).unwrap();
        assert!(evicted);
        assert!(a1.conn.close.is_cancelled() && !a1.busy(), "a1 closed");
        assert!(!b1.conn.close.is_cancelled());
        assert_eq!(slots.open(), 4);
        // At the total limit, c has none: the longest idle of all goes (b1, not a2).
        std::thread::sleep(Duration::from_millis(2));
        a2.idle();
        let (c1, evicted) = slots.take(c).unwrap();
        assert!(evicted && b1.conn.close.is_cancelled() && !a2.conn.close.is_cancelled());
        // At the total limit, c's own idle connection goes before a's older a2.
        assert!(c1.busy());
        std::thread::sleep(Duration::from_millis(2));
        c1.idle();
        let (_c2, evicted) = slots.take(c).unwrap();
        assert!(evicted && c1.conn.close.is_cancelled() && !a2.conn.close.is_cancelled());
        // Nothing idle (a2 busy again, a3 busy, a4 and c2 new): a, holding three, loses
        // its oldest (a2, busy) to d, holding none...
        assert!(a2.busy());
        let (d1, evicted) = slots.take(d).unwrap();
        assert!(evicted && a2.conn.close.is_cancelled() && !a2.busy());
        // ...but no client goes below two that way.
        assert_eq!(slots.take(e).unwrap_err(), Refused::Full);
        // A new connection that sent nothing for the grace period counts as idle.
        std::thread::sleep(GRACE + Duration::from_millis(10));
        let (_e1, evicted) = slots.take(e).unwrap();
        assert!(evicted && a4.conn.close.is_cancelled() && !d1.conn.close.is_cancelled());
        assert_eq!(slots.open(), 4);
        // Dropping a closed connection's slot gives nothing back twice.
        drop((a1, a2, b1, c1, a4));
        assert_eq!(slots.open(), 4);
        drop(a3);
        assert_eq!(slots.open(), 3);
    }

    /// Over the total limit with every connection busy, the client holding the most
    /// gives up its oldest connection to a client holding at least two fewer, down to
    /// `MIN_KEPT_PER_CLIENT`, never to one that would then hold more than it.
    #[test]
    fn with_none_idle_the_client_holding_the_most_makes_room_down_to_a_floor() {
        let slots = Arc::new(Slots::new(6, 6, Duration::from_secs(60)));
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        let mine: Vec<Slot> = (0..6).map(|_| slots.take(a).unwrap().0).collect();
        // b, holding none, takes a's oldest, then its next oldest.
        let (b1, evicted) = slots.take(b).unwrap();
        assert!(evicted && mine[0].conn.close.is_cancelled());
        let (b2, evicted) = slots.take(b).unwrap();
        assert!(evicted && mine[1].conn.close.is_cancelled());
        // a holds 4, b 2: still two fewer, once more.
        let (b3, evicted) = slots.take(b).unwrap();
        assert!(evicted && mine[2].conn.close.is_cancelled());
        // a 3, b 3: b gets no more (it would only swap places with a).
        assert_eq!(slots.take(b).unwrap_err(), Refused::Full);
        // c, holding none, takes from a or b (both 3), which keep 2.
        let (_c1, evicted) = slots.take(c).unwrap();
        assert!(evicted);
        let closed = |s: &[&Slot]| s.iter().filter(|s| s.conn.close.is_cancelled()).count();
        assert_eq!(
            closed(&[&mine[3], &mine[4], &mine[5], &b1, &b2, &b3]),
            1,
            "one connection closed for c"
        );
        let (_c2, evicted) = slots.take(c).unwrap();
        assert!(evicted);
        assert_eq!(closed(&[&mine[3], &mine[4], &mine[5], &b1, &b2, &b3]), 2);
        // Now a 2, b 2, c 2 (or a and b 2 and 2 in some order): nobody goes below 2.
        assert_eq!(slots.take(ip("10.0.0.4")).unwrap_err(), Refused::Full);
        assert_eq!(slots.open(), 6);
    }

    fn state(zone: Zone) -> ServerState {
        ServerState {
            zone: ArcSwap::from_pointee(zone),
            metrics: Arc::new(Metrics::new()),
            settings: Settings {
                forward: false,
                max_udp_payload: 1232,
            },
            forward: None,
            forward_timeout: Duration::from_secs(2),
            forward_slots: Arc::new(tokio::sync::Semaphore::new(8)),
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_query_timeout: Duration::from_secs(5),
            tcp_slots: Arc::new(Slots::new(8, 8, GRACE)),
        }
    }

    async fn ask<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, pkt: &[u8]) -> Vec<u8> {
        s.write_all(&(pkt.len() as u16).to_be_bytes())
            .await
            .unwrap();
        s.write_all(pkt).await.unwrap();
        let len = s.read_u16().await.unwrap() as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.unwrap();
        resp
    }

    #[tokio::test]
    async fn buffers_shrink_back_after_a_large_query_and_a_large_answer() {
        let shared = state(huge_headless_zone());
        let (slot, _) = shared.tcp_slots.take(ip("127.0.0.1")).unwrap();
        let (mut client, mut server) = tokio::io::duplex(16 * 1024);
        let mut bufs = Buffers::default();
        let serving = serve(&mut server, &shared, &slot, &mut bufs);
        let asking = async {
            // A 65535-byte message: a question, then padding (ignored after ARCOUNT 0),
            // whose answer is close to 64 KiB.
            let mut big = query("huge.ns.svc.clusterset.local.", RecordType::SRV, None);
            big.resize(65535, 0);
            let r = ask(&mut client, &big).await;
            assert!(r.len() > 60_000, "{} bytes", r.len());
            assert_eq!(decode(&r).rcode, 0);
            let small = query("huge.ns.svc.clusterset.local.", RecordType::TXT, None);
            assert_eq!(decode(&ask(&mut client, &small).await).rcode, 0);
            drop(client);
        };
        let (end, ()) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(serving, asking)
        })
        .await
        .expect("served in time");
        assert_eq!(end, End::Closed);
        assert!(
            bufs.reader.buf.capacity() <= KEPT_CAPACITY,
            "query buffer kept {}",
            bufs.reader.buf.capacity()
        );
        assert!(
            bufs.out.capacity() <= KEPT_CAPACITY,
            "reply buffer kept {}",
            bufs.out.capacity()
        );
    }

    /// A connected pair of TCP sockets on 127.0.0.1: (client, server side).
    async fn tcp_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        (c.unwrap(), s.unwrap().0)
    }

    /// Steps `reader` until the message is whole (true) or nothing more arrives for
    /// 200 ms (false).
    async fn read_all_that_came(reader: &mut Reader, s: &mut tokio::net::TcpStream) -> bool {
        loop {
            match tokio::time::timeout(Duration::from_millis(200), reader.step(s)).await {
                Ok(Ok(true)) => return true,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => panic!("read: {e}"),
                Err(_) => return false,
            }
        }
    }

    /// A length prefix announcing 64 KiB allocates nothing like 64 KiB: the buffer
    /// grows with the bytes that arrive (so 1024 connections that each send `ff ff`
    /// hold kilobytes, not 64 MiB), and a large message still arrives whole.
    #[tokio::test]
    async fn the_query_buffer_grows_with_the_bytes_that_arrive_not_the_length_announced() {
        tokio::time::timeout(Duration::from_secs(20), async {
            let (mut client, mut server) = tcp_pair().await;
            let mut reader = Reader::default();
            client.write_all(&[0xff, 0xff]).await.unwrap();
            assert!(!read_all_that_came(&mut reader, &mut server).await);
            assert!(
                reader.buf.capacity() <= 1024,
                "2 bytes of length prefix: {} bytes allocated",
                reader.buf.capacity()
            );
            client.write_all(&[7; 100]).await.unwrap();
            assert!(!read_all_that_came(&mut reader, &mut server).await);
            assert!(
                reader.buf.capacity() <= 1024,
                "100 bytes of 65535: {} bytes allocated",
                reader.buf.capacity()
            );
            // The rest of it: whole, then the buffer shrinks back.
            let rest = vec![7; 65535 - 100];
            let (wrote, whole) = tokio::join!(
                client.write_all(&rest),
                read_all_that_came(&mut reader, &mut server)
            );
            wrote.unwrap();
            assert!(whole);
            assert!(reader.message().len() == 65535 && reader.message().iter().all(|&b| b == 7));
            reader.done();
            assert!(reader.buf.capacity() <= KEPT_CAPACITY);
            // A 60 KB message sent in pieces: the buffer follows what came, and the
            // message arrives whole, byte for byte.
            let msg: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
            client.write_all(&60_000u16.to_be_bytes()).await.unwrap();
            client.write_all(&msg[..10_000]).await.unwrap();
            assert!(!read_all_that_came(&mut reader, &mut server).await);
            assert!(
                reader.buf.capacity() <= 2 * 10_000 + 1024,
                "10000 bytes of 60000: {} bytes allocated",
                reader.buf.capacity()
            );
            let write_in_pieces = async {
                for piece in msg[10_000..].chunks(7_000) {
                    client.write_all(piece).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            let ((), whole) = tokio::join!(
                write_in_pieces,
                read_all_that_came(&mut reader, &mut server)
            );
            assert!(whole);
            assert_eq!(reader.message(), &msg[..]);
            reader.done();
            assert!(reader.buf.capacity() <= KEPT_CAPACITY);
            // A short message behind it on the same connection is read alone.
            client.write_all(&[0, 3, 1, 2, 3, 0, 1]).await.unwrap();
            assert!(read_all_that_came(&mut reader, &mut server).await);
            assert_eq!(reader.message(), &[1, 2, 3]);
        })
        .await
        .expect("done in time");
    }
}
