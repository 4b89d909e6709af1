//! Cross-cluster watch (K.73): `kubectl get pods -A -w` through the search server.
//!
//! A list's resourceVersion is a [`Cursor`]: the member resourceVersion the store holds
//! each member's type at ([`crate::positions`]). A watch from it opens one watch per
//! member the caller may see, each from that member's own resourceVersion, and merges
//! their events into one stream. Each event's object is what a list returns (the
//! cluster annotation, no managedFields, names only where the type is stored so) with,
//! as its resourceVersion, the cursor after that event: a client that resumes from the
//! last object it got resumes every member where it was. A member that compacted past
//! its part of the cursor ends the watch with 410 Gone (list again), as kube-apiserver
//! does; a member that cannot be reached is retried while the others stream.
//!
//! Watches go to the members, not to the store: an event reaches the client as fast as
//! the member sends it, and the store is not polled.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use causeway_runtime::table::{IncludeObject, columns, table};
use futures::stream::BoxStream;
use futures::{StreamExt, future};
use http::StatusCode;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};

use crate::indexer::listwatch::meta;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::Shared;
use crate::api::auth::{Access, Caller};
use crate::api::list::{cluster_column, params_for, set_type};
use crate::api::route::Target;
use crate::api::status::{Reply, failure, status_object};
use crate::positions::{Cursor, Indexed, Positions, UNKNOWN, advance};
use crate::query::Query;
use crate::store::{Gvr, TypeInfo, annotate, cut};
use std::sync::Arc;

/// Parameters a watch takes; anything else is a 400 that lists these. (`timeout`,
/// which `kubectl --request-timeout` adds, bounds requests that are not watches, as in
/// kube-apiserver: it is taken and not used.)
const PARAMS: &[&str] = &[
    "watch",
    "timeout",
    "resourceVersion",
    "resourceVersionMatch",
    "timeoutSeconds",
    "allowWatchBookmarks",
    "labelSelector",
    "fieldSelector",
    "clusters",
    "namespaces",
    "includeObject",
];

/// A watch that does not ask for a `timeoutSeconds` ends after a random time between
/// this and twice this by default (`--min-request-timeout`, as kube-apiserver's: 30 to 60
/// minutes, spread so that watches opened together do not all come back together);
/// clients watch again from the last event.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1800);

/// A member watch is opened again after this long at most (kube-rs refuses 295 s and
/// more); the merged watch goes on.
const MEMBER_TIMEOUT: u32 = 290;

/// Cross-cluster watches open at once, at most, by default (`--max-watches`); more
/// are 429.
pub const MAX_WATCHES: usize = 512;

/// Cross-cluster watches one user may hold open at once, by default; more are 429.
/// Watches that show the user nothing count too (they hold no member watch, so they
/// take no place among [`MAX_WATCHES`], but they hold a connection until their timeout).
pub const MAX_WATCHES_PER_USER: usize = 64;

/// How long an event may wait for a client that stopped reading (every buffer between
/// is full) before its watch is ended, by default. kube-apiserver likewise ends a
/// watcher that does not keep up; the client watches again from the last event it read,
/// and the watch's place and member watches are not held until its timeout.
pub const STALLED_AFTER: Duration = Duration::from_secs(10);

/// What cross-cluster watches may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Watches open at once, at most (`--max-watches`, [`MAX_WATCHES`]).
    pub max: usize,
    /// A watch whose client has not taken an event for this long is ended
    /// ([`STALLED_AFTER`]).
    pub stalled_after: Duration,
    /// A watch that names no timeout ends after between this and twice this
    /// ([`MIN_TIMEOUT`]); zero: it does not end. A `timeoutSeconds` above twice this is
    /// cut to it.
    pub min_timeout: Duration,
    /// Watches one user (by the hub's user name) may hold open at once
    /// ([`MAX_WATCHES_PER_USER`]).
    pub per_user: usize,
}

impl Limits {
    /// How long a watch asking for `asked` (`timeoutSeconds`) runs: what it asks, at
    /// most twice `min_timeout` (the longest the server gives a watch that names none: 60
    /// minutes by default; kube-apiserver takes any), else the server's choice.
    fn timeout_for(&self, asked: Option<Duration>) -> Duration {
        match asked {
            Some(t) if self.min_timeout.is_zero() => t,
            Some(t) => t.min(self.min_timeout.saturating_mul(2)),
            None => self.timeout(),
        }
    }

    /// The timeout of a watch that names none: `min_timeout` plus a random part of it.
    fn timeout(&self) -> Duration {
        use std::hash::{BuildHasher, Hasher};
        if self.min_timeout.is_zero() {
            // as kube-apiserver with --min-request-timeout=0: no end
            return Duration::MAX;
        }
        // a fresh RandomState is randomly keyed: enough to spread timeouts, no crate
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let part = (r >> 11) as f64 / (1u64 << 53) as f64;
        self.min_timeout
            .saturating_add(self.min_timeout.mul_f64(part))
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max: MAX_WATCHES,
            stalled_after: STALLED_AFTER,
            min_timeout: MIN_TIMEOUT,
            per_user: MAX_WATCHES_PER_USER,
        }
    }
}

/// How long a member may take to answer a watch before it is retried in the background.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// First and longest wait before a member that could not be reached is tried again.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a watch asks for, validated.
#[derive(Debug, PartialEq)]
struct Ask {
    cursor: Cursor,
    /// `None`: the server's choice ([`Limits::timeout`]).
    timeout: Option<Duration>,
    bookmarks: bool,
    labels: String,
    fields: String,
    clusters: BTreeSet<String>,
    namespaces: Vec<String>,
}

/// Reads a watch's parameters (the path's namespace, cluster and name included). What
/// it selects is read by the list's rules ([`Query::parse`]: lists add up, of another
/// parameter given twice the first counts, a path cluster that `clusters=` contradicts
/// is refused), and so are its own parameters.
fn ask(t: &Target, params: &[(String, String)]) -> Result<Ask, String> {
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    if let Some((k, _)) = params.iter().find(|(k, _)| !PARAMS.contains(&k.as_str())) {
        return Err(format!(
            "{k} is not supported on a watch: a watch takes {}",
            PARAMS.join(", ")
        ));
    }
    if let Some(m) = get("resourceVersionMatch").filter(|m| !m.is_empty()) {
        return Err(format!(
            "resourceVersionMatch={m} is not supported on a watch across clusters (it goes with sendInitialEvents, which is not served): list, then watch from the list's resourceVersion"
        ));
    }
    let cursor = Cursor::decode(get("resourceVersion").unwrap_or(""))?;
    let timeout = match get("timeoutSeconds") {
        None | Some("") => None,
        // 0: the server's choice, as in kube-apiserver
        Some(s) => match s.parse::<u64>() {
            Ok(0) => None,
            Ok(n) => Some(Duration::from_secs(n)),
            Err(_) => {
                return Err(format!(
                    "timeoutSeconds must be a whole number of seconds, got \"{s}\""
                ));
            }
        },
    };
    let q = Query::parse(&params_for(t, params.to_vec()), t.cluster.as_deref()).map_err(|e| e.0)?;
    let mut fields = q.field_selector.unwrap_or_default();
    if let Some(name) = &t.name {
        if !fields.is_empty() {
            fields.push(',');
        }
        // escaped as kube's fields.EscapeValue: the name is one value
        let name = name
            .replace('\\', r"\\")
            .replace(',', r"\,")
            .replace('=', r"\=");
        fields.push_str(&format!("metadata.name={name}"));
    }
    Ok(Ask {
        cursor,
        timeout,
        bookmarks: matches!(get("allowWatchBookmarks"), Some("true" | "1")),
        labels: q.label_selector.unwrap_or_default(),
        fields,
        clusters: q.clusters.into_iter().collect(),
        namespaces: q.namespaces,
    })
}

/// What a member's watch sends to the merge.
enum Item {
    Event {
        cluster: String,
        kind: &'static str,
        object: Box<Value>,
        /// The member's type is stored as metadata only: the event is cut the same way.
        names_only: bool,
    },
    Bookmark {
        cluster: String,
        rv: String,
    },
    /// The watch cannot go on (410 Gone: list again).
    Fail(Value),
}

/// One member's part of a watch.
struct Part {
    cluster: String,
    indexed: Indexed,
    /// Watch one namespace on the member (the caller sees only it).
    namespace: Option<String>,
    rv: String,
}

impl Part {
    fn api(&self) -> Api<DynamicObject> {
        let i = &self.indexed;
        match (&self.namespace, i.namespaced) {
            (Some(ns), true) => Api::namespaced_with(i.client.clone(), ns, &i.resource),
            _ => Api::all_with(i.client.clone(), &i.resource),
        }
    }

    /// Opens the member's watch from its resourceVersion.
    async fn open(
        &self,
        wp: &WatchParams,
    ) -> kube::Result<BoxStream<'static, kube::Result<WatchEvent<Value>>>> {
        // JSON values, as the indexer reads them: a DynamicObject would be parsed twice
        // (its flattened fields) and serialised back into a value for every event
        let request = kube::core::Request::new(self.api().resource_url());
        let events = crate::indexer::listwatch::watch(&self.indexed.client, &request, wp, &self.rv);
        Ok(events.await?.boxed())
    }
}

/// A place among the `--max-watches` open watches (the `watches` gauge), given back when
/// dropped.
struct Slot(prometheus_client::metrics::gauge::Gauge);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The watches each user has open ([`Limits::per_user`]).
#[derive(Default)]
pub(crate) struct PerUser(parking_lot::Mutex<std::collections::HashMap<String, usize>>);

impl PerUser {
    /// A place among `user`'s watches, if they have fewer than `max` open.
    fn take(self: &Arc<Self>, user: &str, max: usize) -> Option<UserSlot> {
        let mut m = self.0.lock();
        let n = m.entry(user.to_string()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(UserSlot(self.clone(), user.to_string()))
    }

    #[cfg(test)]
    fn open(&self, user: &str) -> usize {
        self.0.lock().get(user).copied().unwrap_or_default()
    }
}

/// A place among one user's watches, given back when dropped.
struct UserSlot(Arc<PerUser>, String);

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut m = (self.0).0.lock();
        if let Some(n) = m.get_mut(&self.1) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

/// Answers a watch of `ty`.
pub async fn objects(
    shared: &Arc<Shared>,
    caller: &Caller,
    t: &Target,
    ty: &TypeInfo,
    params: &[(String, String)],
    as_table: Option<IncludeObject>,
) -> Reply {
    let ask = match ask(t, params) {
        Ok(a) => a,
        Err(e) => return failure(StatusCode::BAD_REQUEST, e),
    };
    let timeout = shared.watches.timeout_for(ask.timeout);
    // a place among the caller's own watches first (taken before anything is awaited,
    // so two watches at once cannot both take the last one): whatever they may see, a
    // user cannot hold more than their share of the server
    let user = caller.user.username.as_deref().unwrap_or_default();
    let per_user = shared.watches.per_user;
    let Some(user_slot) = shared.per_user.take(user, per_user) else {
        return failure(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "user {user:?} has {per_user} cross-cluster watches open, as many as the search server allows one user: end one, or watch fewer types"
            ),
        );
    };
    let access = Access {
        gvr: &ty.gvr,
        namespaced: ty.namespaced,
        verb: "watch",
        name: "",
        namespaces: &ask.namespaces,
    };
    let scope = match shared.auth.scope(caller, &shared.store, &access).await {
        Ok(s) => s,
        Err(e) => return e.reply(),
    };
    // the namespaces the caller asked for and may see; None: all. A caller who may see
    // some namespaces only and named none gets the others reviewed as they appear
    let restricted = scope.as_ref().and_then(|s| s.namespaces.clone());
    let dynamic = restricted.is_some() && ask.namespaces.is_empty();
    let namespaces: Option<BTreeSet<String>> = match (restricted, ask.namespaces.is_empty()) {
        (Some(allowed), true) => Some(allowed),
        (Some(allowed), false) => Some(
            ask.namespaces
                .iter()
                .filter(|n| allowed.contains(*n))
                .cloned()
                .collect(),
        ),
        (None, true) => None,
        (None, false) => Some(ask.namespaces.iter().cloned().collect()),
    };
    let visible = |c: &String| {
        scope.as_ref().is_some_and(|s| {
            s.clusters.as_ref().is_none_or(|cs| cs.contains(c))
                && (ask.clusters.is_empty() || ask.clusters.contains(c))
        })
    };
    let one_namespace = namespaces
        .as_ref()
        .filter(|n| n.len() == 1 && !dynamic)
        .and_then(|n| n.first().cloned());
    let nothing = namespaces.as_ref().is_some_and(BTreeSet::is_empty) && !dynamic;
    let mut parts: Vec<Part> = Vec::new();
    for (cluster, indexed) in shared.positions.of(&ty.gvr) {
        if nothing || !visible(&cluster) {
            continue;
        }
        let rv = ask.cursor.0.get(&cluster).cloned().unwrap_or_default();
        // the list was read while the store held this member at no known position:
        // what changed since cannot be told apart, so list again
        if rv == UNKNOWN {
            return gone(expired(
                &cluster,
                "its objects were not yet indexed (or it was not Ready) when this resourceVersion was read",
            ));
        }
        parts.push(Part {
            rv,
            cluster,
            indexed,
            namespace: one_namespace.clone(),
        });
    }
    // a place among the --max-watches only for a watch that holds member watches: the
    // caller's rights are known by now, so a caller who may see nothing (an empty watch,
    // as a list answers them an empty list) never takes one from those who may
    let slot = if parts.is_empty() {
        None
    } else {
        let max = shared.watches.max;
        let slot = Slot(shared.metrics.watches.clone());
        if slot.0.inc() >= i64::try_from(max).unwrap_or(i64::MAX) {
            return failure(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the search server has {max} cross-cluster watches open, its --max-watches (each holds one watch per member): try again later, watch fewer types, or raise --max-watches"
                ),
            );
        }
        Some(slot)
    };
    let wp = {
        let secs = timeout.as_secs().clamp(1, u64::from(MEMBER_TIMEOUT));
        let mut wp = WatchParams::default()
            .timeout(u32::try_from(secs).unwrap_or(MEMBER_TIMEOUT))
            .labels(&ask.labels)
            .fields(&ask.fields);
        wp.bookmarks = true;
        wp
    };
    // open every member's watch before answering, so a selector a member refuses is
    // this request's 400, as kube-apiserver answers it; a member that does not answer
    // soon is retried while the others stream
    let opened = future::join_all(
        parts
            .iter()
            .map(|p| async { tokio::time::timeout(OPEN_TIMEOUT, p.open(&wp)).await }),
    )
    .await;
    let mut streams = Vec::with_capacity(parts.len());
    for (p, o) in parts.iter().zip(opened) {
        match o {
            Ok(Ok(s)) => streams.push(Some(s)),
            Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                return gone(expired(&p.cluster, &s.message));
            }
            Ok(Err(kube::Error::Api(s))) if matches!(s.code, 401 | 403) => {
                return failure(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "cluster {} refused the search server's own watch (its member credentials, not your rights): {}",
                        p.cluster, s.message
                    ),
                );
            }
            Ok(Err(kube::Error::Api(s))) if (400..500).contains(&s.code) => {
                return failure(
                    StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_REQUEST),
                    format!("cluster {} refused the watch: {}", p.cluster, s.message),
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(cluster = %p.cluster, error = %e, "cross-cluster watch: member not reachable; retrying");
                streams.push(None);
            }
            Err(_) => {
                tracing::warn!(cluster = %p.cluster, "cross-cluster watch: member did not answer within {OPEN_TIMEOUT:?}; retrying");
                streams.push(None);
            }
        }
    }
    let (out, body) = mpsc::channel::<Bytes>(64);
    let (tx, rx) = mpsc::channel::<Item>(256);
    let stop = CancellationToken::new();
    for (p, s) in parts.into_iter().zip(streams) {
        let indexed = (shared.positions.clone(), ty.gvr.clone());
        tokio::spawn(follow(p, wp.clone(), s, tx.clone(), indexed, stop.clone()));
    }
    drop(tx);
    let merge = Merge {
        ty: ty.clone(),
        namespaces,
        cursor: ask.cursor,
        table: as_table,
        bookmarks: ask.bookmarks,
        grant: dynamic.then(|| (shared.clone(), caller.clone())),
        stalled: (shared.watches.stalled_after, shared.metrics.stalled.clone()),
        cut_off: CancellationToken::new(),
    };
    let cut_off = merge.cut_off.clone();
    let stopping = shared.stopping.clone();
    tokio::spawn(async move {
        let (_stop, _slot, _user_slot) = (stop.drop_guard(), slot, user_slot);
        // the server stopping ends the watch, as kube-apiserver's shutdown does (the
        // client watches again, from its last event, on the server that answers)
        tokio::select! {
            () = merge.run(rx, out, timeout) => {}
            () = stopping.cancelled() => {}
        }
    });
    causeway_runtime::https::json_stream_until(body, cut_off)
}

/// A watch that ends at once with `status` (an ERROR event), as kube-apiserver answers
/// a watch from a resourceVersion it no longer has.
fn gone(status: Value) -> Reply {
    let (out, body) = mpsc::channel::<Bytes>(1);
    let _ = out.try_send(frame("ERROR", &status));
    causeway_runtime::https::json_stream(body)
}

/// Streams one member's events into the merge, opening its watch again (from the
/// last resourceVersion it sent, with the member's current client) when it ends or
/// fails, until `stop`. A member whose type is no longer indexed (it left, or is not
/// Ready) ends the whole watch with 410 at its next event, bookmark or reopen: what the
/// store holds of it changes without events (purged, or relisted later), so the client
/// lists again.
async fn follow(
    mut p: Part,
    wp: WatchParams,
    mut stream: Option<BoxStream<'static, kube::Result<WatchEvent<Value>>>>,
    tx: mpsc::Sender<Item>,
    indexed: (Positions, Gvr),
    stop: CancellationToken,
) {
    let mut wait = RETRY_FIRST;
    // a watch that ends or fails before any event waits before the next open
    let mut quiet = false;
    let left = |cluster: &str| {
        let why = "it is no longer indexed (it left the fleet or is not Ready)";
        Item::Fail(expired(cluster, why))
    };
    loop {
        let mut events = match stream.take() {
            Some(s) => s,
            None => {
                if quiet {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = stop.cancelled() => return,
                    }
                    wait = (wait * 2).min(RETRY_MAX);
                }
                let Some(now) = indexed.0.get(&p.cluster, &indexed.1) else {
                    let _ = tx.send(left(&p.cluster)).await;
                    return;
                };
                p.indexed = now;
                let opened = tokio::select! {
                    o = p.open(&wp) => o,
                    _ = stop.cancelled() => return,
                };
                match opened {
                    Ok(s) => s,
                    Err(kube::Error::Api(s)) if s.code == 410 => {
                        let _ = tx.send(Item::Fail(expired(&p.cluster, &s.message))).await;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %p.cluster, error = %e, "cross-cluster watch: member watch failed; retrying in {wait:?}");
                        quiet = true;
                        continue;
                    }
                }
            }
        };
        quiet = true;
        loop {
            let next = tokio::select! {
                n = events.next() => n,
                _ = stop.cancelled() => return,
            };
            let item = match next {
                Some(Ok(WatchEvent::Added(o))) => event(&mut p, "ADDED", o),
                Some(Ok(WatchEvent::Modified(o))) => event(&mut p, "MODIFIED", o),
                Some(Ok(WatchEvent::Deleted(o))) => event(&mut p, "DELETED", o),
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    p.rv = advance(&p.rv, &b.metadata.resource_version);
                    Item::Bookmark {
                        cluster: p.cluster.clone(),
                        rv: p.rv.clone(),
                    }
                }
                Some(Ok(WatchEvent::Error(e))) if e.code == 410 => {
                    let _ = tx.send(Item::Fail(expired(&p.cluster, &e.message))).await;
                    return;
                }
                Some(Ok(WatchEvent::Error(e))) => {
                    tracing::warn!(cluster = %p.cluster, code = e.code, message = %e.message, "cross-cluster watch: member watch error; watching again");
                    break;
                }
                Some(Err(e)) => {
                    tracing::warn!(cluster = %p.cluster, error = %e, "cross-cluster watch: member watch broke; watching again");
                    break;
                }
                // the member's timeout: watch again from where it was
                None => break,
            };
            quiet = false;
            wait = RETRY_FIRST;
            if !indexed.0.has(&p.cluster, &indexed.1) {
                let _ = tx.send(left(&p.cluster)).await;
                return;
            }
            if tx.send(item).await.is_err() {
                return;
            }
        }
    }
}

fn event(p: &mut Part, kind: &'static str, o: Value) -> Item {
    if let Some(rv) = meta(&o, "resourceVersion") {
        p.rv = advance(&p.rv, rv);
    }
    Item::Event {
        cluster: p.cluster.clone(),
        kind,
        object: Box::new(o),
        names_only: p.indexed.metadata_only,
    }
}

/// The Status of a watch whose cursor one member no longer has.
fn expired(cluster: &str, message: &str) -> Value {
    status_object(
        StatusCode::GONE,
        format!(
            "cluster {cluster}: {message} (list again, and watch from the list's resourceVersion)"
        ),
    )
}

fn frame(kind: &str, object: &Value) -> Bytes {
    let mut b = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// Merges the members' events into the client's stream, keeping the cursor.
struct Merge {
    ty: TypeInfo,
    /// Only objects in these namespaces (None: all).
    namespaces: Option<BTreeSet<String>>,
    cursor: Cursor,
    table: Option<IncludeObject>,
    bookmarks: bool,
    /// Who watches, when the namespaces they may see are found as events come (they
    /// may list in some namespaces only and did not name any): a namespace new to the
    /// watch is reviewed before its first event is sent or dropped.
    grant: Option<(Arc<Shared>, Caller)>,
    /// How long an event may wait for the client ([`Limits::stalled_after`]), and the
    /// count of watches ended so.
    stalled: (Duration, prometheus_client::metrics::counter::Counter),
    /// Cancelled when the client stopped reading: the response fails, so the frames it
    /// did not take and its connection are dropped with the watch.
    cut_off: CancellationToken,
}

impl Merge {
    /// Adds an event's namespace to those shown if the caller may watch there.
    async fn review(&mut self, item: &Item) {
        let (Some((shared, caller)), Some(shown), Item::Event { object, .. }) =
            (&self.grant, &mut self.namespaces, item)
        else {
            return;
        };
        let ns = meta(object, "namespace").unwrap_or("");
        if ns.is_empty() || shown.contains(ns) {
            return;
        }
        match shared
            .auth
            .allowed_in(caller, "watch", &self.ty.gvr, ns)
            .await
        {
            Ok(true) => {
                shown.insert(ns.to_string());
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(namespace = ns, error = ?e, "cross-cluster watch: cannot review a namespace new to the watch; its events are not sent");
            }
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Item>,
        out: mpsc::Sender<Bytes>,
        timeout: Duration,
    ) {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let item = tokio::select! {
                i = rx.recv() => i,
                _ = &mut deadline => return,
                _ = out.closed() => return,
            };
            let (frame, last) = match item {
                // no member left to watch (none visible): wait for the timeout
                None => {
                    tokio::select! {
                        _ = &mut deadline => {}
                        _ = out.closed() => {}
                    }
                    return;
                }
                Some(i) => {
                    self.review(&i).await;
                    self.frame(i)
                }
            };
            if let Some(f) = frame {
                // a frame that fits is sent at once (no timer per frame); a client that
                // stops reading is let go (it watches again from the last event it
                // read), at the latest at the deadline
                let f = match out.try_send(f) {
                    Ok(()) => None,
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                    Err(mpsc::error::TrySendError::Full(f)) => Some(f),
                };
                if let Some(f) = f {
                    tokio::select! {
                        sent = out.send(f) => if sent.is_err() { return },
                        _ = tokio::time::sleep(self.stalled.0) => {
                            self.cut_off.cancel();
                            self.stalled.1.inc();
                            tracing::info!(resource = %self.ty.gvr.resource, waited = ?self.stalled.0, "cross-cluster watch: the client stopped reading; ending its watch");
                            return;
                        }
                        _ = &mut deadline => return,
                    }
                }
            }
            if last {
                return;
            }
        }
    }

    /// The frame an item becomes (None: filtered out), and whether the watch ends.
    fn frame(&mut self, item: Item) -> (Option<Bytes>, bool) {
        match item {
            Item::Fail(status) => (Some(frame("ERROR", &status)), true),
            Item::Bookmark { cluster, rv } => {
                self.advance(cluster, &rv);
                // Table watches too, when asked (kubectl does not ask; `causeway search
                // -w` does, so that a quiet watch's resourceVersion keeps up)
                if !self.bookmarks {
                    return (None, false);
                }
                let o = json!({"kind": self.ty.kind, "apiVersion": self.ty.gvr.api_version(),
                    "metadata": {"resourceVersion": self.cursor.encode()}});
                (Some(frame("BOOKMARK", &o)), false)
            }
            Item::Event {
                cluster,
                kind,
                object,
                names_only,
            } => {
                if let Some(rv) = meta(&object, "resourceVersion") {
                    self.advance(cluster.clone(), rv);
                }
                let ns = meta(&object, "namespace").unwrap_or("");
                if self.namespaces.as_ref().is_some_and(|n| !n.contains(ns)) {
                    return (None, false);
                }
                let o = self.object(&cluster, *object, names_only);
                (Some(frame(kind, &o)), false)
            }
        }
    }

    fn advance(&mut self, cluster: String, rv: &str) {
        let at = self.cursor.0.entry(cluster).or_default();
        *at = advance(at, rv);
    }

    /// The object as a list returns it (cut as the store keeps it, annotated with its
    /// cluster), at the cursor; or its Table row.
    fn object(&self, cluster: &str, mut v: Value, names_only: bool) -> Value {
        set_type(&self.ty, &mut v);
        cut(&mut v, names_only);
        annotate(&mut v, cluster);
        let cursor = self.cursor.encode();
        if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            md.insert("resourceVersion".into(), json!(cursor));
        }
        if let Some(include) = self.table {
            let cols = columns::builtin(&self.ty.gvr.group, &self.ty.gvr.resource);
            return table(&[cluster_column()], &cols, &[&v], &cursor, None, include);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn p(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_watch_takes_the_parameters_kubectl_and_informers_send() {
        let cursor = Cursor(BTreeMap::from([("east".into(), "7".into())]));
        let a = ask(
            &Target::default(),
            &p(&[
                ("watch", "true"),
                ("resourceVersion", &cursor.encode()),
                ("timeoutSeconds", "30"),
                ("allowWatchBookmarks", "true"),
                ("labelSelector", "app=web"),
                ("clusters", "east,west"),
                ("namespaces", "shop"),
            ]),
        )
        .unwrap();
        assert_eq!(a.cursor, cursor);
        assert_eq!(a.timeout, Some(Duration::from_secs(30)));
        assert!(a.bookmarks);
        assert_eq!(a.labels, "app=web");
        assert_eq!(
            a.clusters,
            BTreeSet::from(["east".to_string(), "west".to_string()])
        );
        assert_eq!(a.namespaces, ["shop"]);
        // the path's cluster, namespace and name
        let t = Target {
            cluster: Some("east".into()),
            namespace: Some("prod".into()),
            name: Some("web-1".into()),
            ..Target::default()
        };
        let a = ask(
            &t,
            &p(&[("watch", "1"), ("fieldSelector", "status.phase=Running")]),
        )
        .unwrap();
        assert_eq!(a.clusters, BTreeSet::from(["east".to_string()]));
        assert_eq!(a.namespaces, ["prod"]);
        assert_eq!(a.fields, "status.phase=Running,metadata.name=web-1");
        assert_eq!(a.timeout, None);
        assert_eq!(a.cursor, Cursor::default());
        let zero = ask(&Target::default(), &p(&[("timeoutSeconds", "0")])).unwrap();
        assert_eq!(zero.timeout, None);
        // a path cluster outside clusters= is refused, as a list refuses it
        let e = ask(&t, &p(&[("clusters", "west")])).unwrap_err();
        assert!(
            e.contains("the path names cluster \"east\" and clusters= names [\"west\"]: give one or the other"),
            "{e}"
        );
        let a = ask(&t, &p(&[("clusters", "east")])).unwrap();
        assert_eq!(a.clusters, BTreeSet::from(["east".to_string()]));
    }

    /// Of a parameter given twice the first counts, as for a list (and kube-apiserver);
    /// lists add up.
    #[test]
    fn a_watch_reads_repeated_parameters_as_a_list_does() {
        let cursor = Cursor(BTreeMap::from([("east".into(), "7".into())]));
        let a = ask(
            &Target::default(),
            &p(&[
                ("labelSelector", "app=web"),
                ("labelSelector", "app=api"),
                ("fieldSelector", "status.phase=Running"),
                ("fieldSelector", "status.phase=Failed"),
                ("timeoutSeconds", "30"),
                ("timeoutSeconds", "soon"),
                ("allowWatchBookmarks", "true"),
                ("allowWatchBookmarks", "false"),
                ("resourceVersion", &cursor.encode()),
                ("resourceVersion", "12345"),
                ("clusters", "west"),
                ("clusters", "east"),
                ("namespaces", "shop"),
                ("namespaces", "ops,shop"),
            ]),
        )
        .unwrap();
        assert_eq!(a.labels, "app=web");
        assert_eq!(a.fields, "status.phase=Running");
        assert_eq!(a.timeout, Some(Duration::from_secs(30)));
        assert!(a.bookmarks);
        assert_eq!(a.cursor, cursor);
        assert_eq!(
            a.clusters,
            BTreeSet::from(["east".to_string(), "west".to_string()])
        );
        assert_eq!(a.namespaces, ["ops", "shop"]);
        // a name with a comma is one name on the members too
        let t = Target {
            name: Some("a,b=c".into()),
            ..Target::default()
        };
        assert_eq!(ask(&t, &[]).unwrap().fields, r"metadata.name=a\,b\=c");
    }

    /// A watch that names no timeout gets one between the minimum and twice it, not the
    /// same for every watch (kube-apiserver's `--min-request-timeout`).
    #[test]
    fn the_servers_timeout_is_spread_between_the_minimum_and_twice_it() {
        let l = Limits {
            min_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let drawn: BTreeSet<Duration> = (0..50).map(|_| l.timeout()).collect();
        assert!(
            drawn
                .iter()
                .all(|t| (Duration::from_secs(60)..Duration::from_secs(120)).contains(t)),
            "{drawn:?}"
        );
        assert!(drawn.len() > 40, "spread: {drawn:?}");
        // no overflow, whatever the minimum
        let huge = Limits {
            min_timeout: Duration::MAX,
            ..Limits::default()
        };
        assert_eq!(huge.timeout(), Duration::MAX);
        let zero = Limits {
            min_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(zero.timeout(), Duration::MAX, "zero: no end");
    }

    /// A watch's own timeoutSeconds is taken up to twice the minimum (the longest the
    /// server gives one that names none), not beyond: a watch cannot hold its place
    /// for days.
    #[test]
    fn a_watchs_timeout_is_capped_at_twice_the_minimum() {
        let l = Limits::default();
        let secs = Duration::from_secs;
        assert_eq!(l.timeout_for(Some(secs(30))), secs(30));
        assert_eq!(l.timeout_for(Some(secs(3600))), secs(3600));
        assert_eq!(l.timeout_for(Some(secs(3601))), secs(3600));
        assert_eq!(l.timeout_for(Some(secs(u64::from(u32::MAX)))), secs(3600));
        let chosen = l.timeout_for(None);
        assert!((secs(1800)..secs(3600)).contains(&chosen), "{chosen:?}");
        // --min-request-timeout=0 (no end, as kube-apiserver's): the client's own is kept
        let none = Limits {
            min_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(none.timeout_for(Some(secs(86_400))), secs(86_400));
    }

    /// Each user holds at most so many watches; a place comes back when its watch ends,
    /// and other users are not counted against them.
    #[test]
    fn each_user_holds_at_most_so_many_watches() {
        let users = Arc::new(PerUser::default());
        let a = users.take("alice", 2).unwrap();
        let b = users.take("alice", 2).unwrap();
        assert!(users.take("alice", 2).is_none());
        let bob = users.take("bob", 2);
        assert!(bob.is_some());
        drop(a);
        assert_eq!(users.open("alice"), 1);
        let c = users.take("alice", 2).unwrap();
        drop((b, c, bob));
        assert_eq!((users.open("alice"), users.open("bob")), (0, 0));
        assert!(
            users.0.lock().is_empty(),
            "no entry kept for users with none open"
        );
    }

    #[test]
    fn what_a_watch_cannot_do_is_a_clear_error() {
        let t = Target::default();
        let cases = [
            (
                vec![("fuzzy-name", "web")],
                "fuzzy-name is not supported on a watch",
            ),
            (
                vec![("orderby", "name")],
                "orderby is not supported on a watch",
            ),
            (vec![("limit", "5")], "limit is not supported on a watch"),
            (
                vec![("sendInitialEvents", "true")],
                "sendInitialEvents is not supported",
            ),
            (
                vec![("resourceVersionMatch", "NotOlderThan")],
                "resourceVersionMatch=NotOlderThan is not supported",
            ),
            (
                vec![("resourceVersion", "12345")],
                "is not one of this search server's",
            ),
            (
                vec![("timeoutSeconds", "soon")],
                "timeoutSeconds must be a whole number",
            ),
        ];
        for (params, want) in cases {
            let e = ask(&t, &p(&params)).unwrap_err();
            assert!(e.contains(want), "{params:?}: {e}");
        }
    }

    fn merge(table: bool, bookmarks: bool, namespaces: Option<&[&str]>) -> Merge {
        let table = table.then_some(IncludeObject::Metadata);
        Merge {
            ty: TypeInfo {
                gvr: Gvr {
                    group: "".into(),
                    version: "v1".into(),
                    resource: "configmaps".into(),
                },
                kind: "ConfigMap".into(),
                namespaced: true,
            },
            namespaces: namespaces.map(|n| n.iter().map(|s| s.to_string()).collect()),
            cursor: Cursor(BTreeMap::from([("gone".into(), "3".into())])),
            table,
            bookmarks,
            grant: None,
            stalled: (STALLED_AFTER, Default::default()),
            cut_off: CancellationToken::new(),
        }
    }

    fn cm(ns: &str, rv: &str) -> Box<Value> {
        Box::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": ns, "resourceVersion": rv,
                "managedFields": [{"manager": "kubectl"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                    r#"{"data":{"k":"v"}}"#}},
            "data": {"k": "v"},
        }))
    }

    fn decoded(f: &Bytes) -> Value {
        assert_eq!(f.last(), Some(&b'\n'));
        serde_json::from_slice(f).unwrap()
    }

    #[test]
    fn events_carry_the_cursor_after_them_and_are_cut_as_the_store_keeps_them() {
        let mut m = merge(false, true, None);
        let (f, end) = m.frame(Item::Event {
            cluster: "east".into(),
            kind: "ADDED",
            names_only: true,
            object: cm("shop", "10"),
        });
        assert!(!end);
        let e = decoded(&f.unwrap());
        assert_eq!(e["type"], "ADDED");
        let o = &e["object"];
        assert_eq!(
            o["metadata"]["annotations"][crate::CLUSTER_ANNOTATION],
            "east"
        );
        assert!(o["metadata"].get("managedFields").is_none());
        // east stores ConfigMaps as names only (west whole): no contents, and no
        // annotation that may hold them (last-applied-configuration holds them all)
        assert!(o.get("data").is_none());
        let annotations = o["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(annotations.len(), 1, "{o}");
        let c = Cursor::decode(o["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        assert_eq!(
            c.0,
            BTreeMap::from([("east".into(), "10".into()), ("gone".into(), "3".into())])
        );
        let (f, _) = m.frame(Item::Event {
            cluster: "west".into(),
            kind: "MODIFIED",
            names_only: false,
            object: cm("shop", "4"),
        });
        let o = decoded(&f.unwrap())["object"].clone();
        assert_eq!(o["data"]["k"], "v");
        assert!(
            o["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_some()
        );
        let c = Cursor::decode(o["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        assert_eq!(c.0["east"], "10");
        assert_eq!(c.0["west"], "4");
        // a bookmark moves the cursor and says so
        let (f, _) = m.frame(Item::Bookmark {
            cluster: "east".into(),
            rv: "20".into(),
        });
        let b = decoded(&f.unwrap());
        assert_eq!(b["type"], "BOOKMARK");
        assert_eq!(b["object"]["kind"], "ConfigMap");
        let c =
            Cursor::decode(b["object"]["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        assert_eq!(c.0["east"], "20");
        // 410 ends the watch
        let (f, end) = m.frame(Item::Fail(expired(
            "east",
            "too old resource version: 1 (20)",
        )));
        assert!(end);
        let e = decoded(&f.unwrap());
        assert_eq!(e["type"], "ERROR");
        assert_eq!(e["object"]["code"], 410);
        assert!(
            e["object"]["message"]
                .as_str()
                .unwrap()
                .starts_with("cluster east: too old")
        );
    }

    #[test]
    fn namespaces_not_visible_are_filtered_but_still_move_the_cursor() {
        let mut m = merge(false, false, Some(&["shop"]));
        let (f, _) = m.frame(Item::Event {
            cluster: "west".into(),
            kind: "ADDED",
            names_only: false,
            object: cm("secret-team", "9"),
        });
        assert!(f.is_none());
        assert_eq!(m.cursor.0["west"], "9");
        // no bookmarks unless asked
        let (f, _) = m.frame(Item::Bookmark {
            cluster: "west".into(),
            rv: "11".into(),
        });
        assert!(f.is_none());
        assert_eq!(m.cursor.0["west"], "11");
    }

    #[test]
    fn a_table_watch_sends_one_row_per_event_with_the_cluster_column() {
        let mut m = merge(true, true, None);
        let (f, _) = m.frame(Item::Event {
            cluster: "west".into(),
            kind: "DELETED",
            names_only: false,
            object: cm("shop", "5"),
        });
        let e = decoded(&f.unwrap());
        assert_eq!(e["type"], "DELETED");
        assert_eq!(e["object"]["kind"], "Table");
        assert_eq!(e["object"]["columnDefinitions"][0]["name"], "Cluster");
        assert_eq!(e["object"]["rows"][0]["cells"][0], "west");
        assert_eq!(e["object"]["rows"][0]["cells"][1], "web");
        // bookmarks, when asked, carry the cursor (kubectl does not ask)
        let (f, _) = m.frame(Item::Bookmark {
            cluster: "west".into(),
            rv: "6".into(),
        });
        let e = decoded(&f.unwrap());
        assert_eq!(e["type"], "BOOKMARK");
        let rv = e["object"]["metadata"]["resourceVersion"].as_str().unwrap();
        assert_eq!(Cursor::decode(rv).unwrap().0["west"], "6");
        let mut unasked = merge(true, false, None);
        let (f, _) = unasked.frame(Item::Bookmark {
            cluster: "west".into(),
            rv: "6".into(),
        });
        assert!(f.is_none());
    }
}
