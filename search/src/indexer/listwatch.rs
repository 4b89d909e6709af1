//! A member's type as a stream of steps: a paged list, then a watch from the list's
//! resourceVersion, relisted on 410 Gone — what kube-runtime's `watcher` does, plus the
//! two things it keeps to itself and cross-cluster watches need (K.73): the
//! resourceVersion a list was read at, and the watch's bookmarks, which move the
//! position of a type in which nothing changes (without them a quiet type's position
//! would fall out of the member's watch window and every watch from it get 410).
//!
//! The stream is pulled: nothing is read from the member while the consumer is busy
//! (the synchro writes a batch), so memory stays bounded by one list page.
//!
//! A list that fails is not retried in place: the stream starts it again from its first
//! call, after a backoff unless the member answered a first 410 Gone in a row (a
//! continue token expired), and that wait comes before the [`Step::Init`]. A list's
//! first call asks for one object, and `Init` comes only once it is answered: so a
//! consumer that takes its share of the lists at `Init` and gives it back when a list
//! fails (the synchro's list permit and the stored versions it compares with) does not
//! hold it while the member keeps failing (a CRD whose conversion webhook answers 500
//! fails every list of its type, for good), nor for a list the member refuses (401,
//! 403: retried after a backoff growing from 2 s to 5 min).
//!
//! Every call is bounded in time (kube's client has no read timeout, and a connection
//! that died silently would be waited on for good): a list page or a watch's headers
//! within 60 s, each event of a watch within its `timeoutSeconds` and a margin. A
//! watch that keeps failing relists after a while, and one whose resourceVersion is
//! ahead of the member (504 `ResourceVersionTooLarge`, after an etcd restore) at once,
//! as client-go does.
//!
//! A list's objects are JSON text, each item of a page copied out unread: kube's
//! `ObjectList` and `DynamicObject` take their type fields with `#[serde(flatten)]`,
//! which buffers a whole page into serde's `Content` and reads it again (and each item
//! once more), and the indexer wants little more than the JSON back
//! ([`crate::store::Record::from_json`] reads only the metadata). A watch's objects are
//! JSON values (a watch brings few).

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;

/// Objects per list page (kube-runtime's watcher default).
const PAGE: u32 = 500;
/// A watch is opened again after this long (kube-rs refuses 295 s and more).
const WATCH_TIMEOUT: u32 = 290;
/// A list page (or a watch's response headers) not come within this long fails: the
/// API server's own request timeout is 60 s, and kube's client has no read timeout, so
/// a connection that died silently (a load balancer or NAT that lost its flow, a
/// tunnelling proxy with a dead upstream) would otherwise be waited on for good.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// A watch that brings nothing for its timeout and this long after is dead (the member
/// ends every watch at its `timeoutSeconds`): it is dropped and opened again.
const WATCH_MARGIN: Duration = Duration::from_secs(15);
/// A watch that keeps failing (anything but 410 Gone) is given up and the type relisted
/// once it has failed at least [`WATCH_FAILURES`] times in a row over this long with
/// nothing read in between (a watch the member's RBAC no longer allows, a member whose
/// watch cache cannot serve the position).
const WATCH_FAILING: Duration = Duration::from_secs(120);
const WATCH_FAILURES: u32 = 3;
/// The wait after a failed call, doubled up to the max.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The wait after a list the member refuses (401, 403), doubled up to the max, until
/// one is answered: a type a member's credentials may not list is asked for every
/// 5 min, not every few seconds.
const REFUSED_FIRST: Duration = Duration::from_secs(2);
const REFUSED_MAX: Duration = Duration::from_secs(300);
/// Lists ended by 410 Gone (their continue token expired) in a row before the next
/// waits out a backoff (and the consumer gives its list permit back meanwhile): a list
/// longer than the member's compaction window would otherwise start again at once,
/// for good, holding its permit.
const GONE_IN_A_ROW: u32 = 2;

/// One step of a member's type.
#[derive(Debug)]
pub(crate) enum Step {
    /// A (re)list starts: the member answered its first call.
    Init,
    /// An object of the list, as JSON text.
    InitApply(Box<RawValue>),
    /// The list is complete, read at this resourceVersion.
    InitDone(String),
    /// A watch was opened (the member answered it).
    Watching,
    /// An object was added or changed.
    Apply(Value),
    /// An object was deleted.
    Delete(Value),
    /// A bookmark: nothing else of this type changed up to this resourceVersion.
    Progress(String),
}

/// A failed call of the stream, and what the stream does next.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: kube::Error,
    /// A list call failed: the stream lists again from the start (a new [`Step::Init`]).
    pub(crate) listing: bool,
    /// The list starts again at once, with no wait (its continue token expired for
    /// the first time in a row); otherwise it waits out a backoff first.
    pub(crate) at_once: bool,
}

enum State {
    Relist,
    Listing {
        page: VecDeque<Box<RawValue>>,
        /// None before the first page.
        next: Option<Option<String>>,
        rv: String,
    },
    Watching {
        rv: String,
        stream: Option<BoxStream<'static, kube::Result<WatchEvent<Value>>>>,
        /// Nothing came since the watch was opened.
        quiet: bool,
    },
}

/// A list page as the indexer reads it (no flattened fields: see the module's doc).
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default, deserialize_with = "null_as_empty")]
    items: Vec<Box<RawValue>>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Box<RawValue>>, D::Error> {
    Ok(Option::<Vec<Box<RawValue>>>::deserialize(d)?.unwrap_or_default())
}

/// A string of an object's metadata (`name`, `namespace`, `resourceVersion`, …).
pub(crate) fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

struct Machine {
    client: kube::Client,
    /// The type's collection, as kube's `Request` takes it (`/api/v1/pods`).
    request: kube::core::Request,
    state: State,
    /// The wait before the next call, after a failure.
    backoff: Option<Duration>,
    /// Lists refused (401, 403) in a row.
    refused: u32,
    /// Lists ended by 410 Gone in a row, since the last complete one.
    gone: u32,
    /// Relists the watch forced (410, a too large resourceVersion, a watch failing for
    /// long) with nothing read from a watch in between: from the second on, each waits
    /// out a growing backoff (a watch that 410s at once after every list would
    /// otherwise relist in a tight loop).
    forced: u32,
    /// Watch failures since a watch last brought something, and when the first was.
    watch_failures: u32,
    failing_since: Option<Instant>,
}

/// Lists and watches `api` until dropped. Errors are yielded (for the log); a failed
/// watch is opened again with backoff, a failed list starts again from its first page
/// (with backoff unless 410), and a 410 of the watch relists.
pub(crate) fn list_watch(
    client: kube::Client,
    resource: &kube::api::ApiResource,
) -> impl Stream<Item = Result<Step, Failure>> + Send {
    let url = kube::api::Api::<kube::api::DynamicObject>::all_with(client.clone(), resource)
        .resource_url()
        .to_string();
    let m = Machine {
        client,
        request: kube::core::Request::new(url),
        state: State::Relist,
        backoff: None,
        refused: 0,
        gone: 0,
        forced: 0,
        watch_failures: 0,
        failing_since: None,
    };
    futures::stream::unfold(m, |mut m| async move {
        let item = m.step().await;
        Some((item, m))
    })
}

/// Whether `e` is 410 Gone (an expired resourceVersion or continue token).
pub(crate) fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

/// Whether `e` is the member refusing the indexer's credentials (401, 403).
pub(crate) fn refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Whether `e` says the watch's resourceVersion is ahead of the member (504 with cause
/// `ResourceVersionTooLarge`, or its message on servers that send no cause): the
/// member went back in time (etcd restored from a backup), and what happened between
/// its restore point and that version would never be watched. Relisted, as client-go
/// does (`isTooLargeResourceVersionError`).
pub(crate) fn too_large(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 504 && (
        s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "ResourceVersionTooLarge"))
            || s.message.contains("Too large resource version")
    ))
}

/// A call that did not answer within its time.
fn timed_out(what: &str, after: Duration) -> kube::Error {
    kube::Error::Service(Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what}: no answer within {after:?}"),
    )))
}

/// `first` doubled `n` times, at most `max`.
fn grown(first: Duration, max: Duration, n: u32) -> Duration {
    first.saturating_mul(1 << n.min(20)).min(max)
}

/// A longer wait before the next call.
fn slower(backoff: &mut Option<Duration>) {
    *backoff = Some(backoff.map_or(BACKOFF_FIRST, |b| (b * 2).min(BACKOFF_MAX)));
}

/// A page of the list (what `kube::Api::list` does, into a [`Page`]).
async fn list(
    client: &kube::Client,
    request: &kube::core::Request,
    lp: &ListParams,
) -> kube::Result<Page> {
    let mut req = request.list(lp).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("list");
    client.request::<Page>(req).await
}

/// A watch from `rv` (what `kube::Api::watch` does, of JSON values); the cross-cluster
/// watch opens its member watches with it too.
pub(crate) async fn watch(
    client: &kube::Client,
    request: &kube::core::Request,
    wp: &WatchParams,
    rv: &str,
) -> kube::Result<impl Stream<Item = kube::Result<WatchEvent<Value>>> + Send + use<>> {
    let mut req = request.watch(wp, rv).map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("watch");
    client.request_events::<Value>(req).await
}

impl Machine {
    async fn step(&mut self) -> Result<Step, Failure> {
        loop {
            if let Some(wait) = self.backoff.filter(|_| self.calling()) {
                tokio::time::sleep(wait).await;
            }
            match &mut self.state {
                State::Relist => {
                    // one object first: a list the member refuses, fails or does not
                    // answer is known before its Init, so the consumer takes no list
                    // permit and loads no stored versions for it
                    let probe = ListParams::default().limit(1);
                    if let Err(e) = self.page(&probe).await {
                        return Err(self.list_failed(e));
                    }
                    self.refused = 0;
                    self.state = State::Listing {
                        page: VecDeque::new(),
                        next: None,
                        rv: String::new(),
                    };
                    return Ok(Step::Init);
                }
                State::Listing { page, next, rv } => {
                    if let Some(o) = page.pop_front() {
                        return Ok(Step::InitApply(o));
                    }
                    let token = match next {
                        Some(None) => {
                            let rv = std::mem::take(rv);
                            self.state = State::Watching {
                                rv: rv.clone(),
                                stream: None,
                                quiet: false,
                            };
                            self.gone = 0;
                            self.watch_failures = 0;
                            self.failing_since = None;
                            return Ok(Step::InitDone(rv));
                        }
                        Some(Some(t)) => Some(t.clone()),
                        None => None,
                    };
                    let mut lp = ListParams::default().limit(PAGE);
                    if let Some(t) = &token {
                        lp = lp.continue_token(t);
                    }
                    match self.page(&lp).await {
                        Ok(list) => {
                            self.backoff = None;
                            // (the borrow of the state ended with the call)
                            let State::Listing { page, next, rv } = &mut self.state else {
                                continue;
                            };
                            // a later page's resourceVersion is the first's
                            if token.is_none() {
                                *rv = list.metadata.resource_version.unwrap_or_default();
                            }
                            *next = Some(list.metadata.continue_.filter(|c| !c.is_empty()));
                            page.extend(list.items);
                        }
                        // listed again from the start
                        Err(e) => return Err(self.list_failed(e)),
                    }
                }
                State::Watching { rv, stream, quiet } => {
                    let Some(events) = stream else {
                        let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT);
                        wp.bookmarks = true;
                        let opened = tokio::time::timeout(
                            CALL_TIMEOUT,
                            watch(&self.client, &self.request, &wp, rv),
                        )
                        .await;
                        match opened {
                            Ok(Ok(s)) => {
                                *quiet = true;
                                *stream = Some(s.boxed());
                                return Ok(Step::Watching);
                            }
                            Ok(Err(e)) => return Err(self.watch_failed(e)),
                            Err(_) => {
                                let e = timed_out("watch", CALL_TIMEOUT);
                                return Err(self.watch_failed(e));
                            }
                        }
                    };
                    let object_rv = |o: &Value| meta(o, "resourceVersion").map(String::from);
                    // each wait for the next event is bounded (not the time between
                    // two: the consumer may take long to write a batch)
                    let idle = Duration::from_secs(WATCH_TIMEOUT.into()) + WATCH_MARGIN;
                    let Ok(next) = tokio::time::timeout(idle, events.next()).await else {
                        *stream = None;
                        let e = timed_out("watch silent", idle);
                        return Err(self.watch_failed(e));
                    };
                    if matches!(&next, Some(Ok(e)) if !matches!(e, WatchEvent::Error(_))) {
                        *quiet = false;
                        self.backoff = None;
                        self.forced = 0;
                        self.watch_failures = 0;
                        self.failing_since = None;
                    }
                    match next {
                        Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                            if let Some(v) = object_rv(&o) {
                                *rv = v;
                            }
                            return Ok(Step::Apply(o));
                        }
                        Some(Ok(WatchEvent::Deleted(o))) => {
                            if let Some(v) = object_rv(&o) {
                                *rv = v;
                            }
                            return Ok(Step::Delete(o));
                        }
                        Some(Ok(WatchEvent::Bookmark(b))) => {
                            *rv = b.metadata.resource_version;
                            return Ok(Step::Progress(rv.clone()));
                        }
                        Some(Ok(WatchEvent::Error(s))) => {
                            *stream = None;
                            return Err(self.watch_failed(kube::Error::Api(s)));
                        }
                        Some(Err(e)) => {
                            *stream = None;
                            return Err(self.watch_failed(e));
                        }
                        // the watch's timeout: open it again from where it was (after
                        // a wait if it ended before anything came)
                        None => {
                            *stream = None;
                            if *quiet {
                                slower(&mut self.backoff);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A list call (a page, or the first object before a list's Init), bounded by
    /// [`CALL_TIMEOUT`].
    async fn page(&mut self, lp: &ListParams) -> kube::Result<Page> {
        // (`&mut self`: a future holding `&self` is not Send, the watch's stream in
        // `self` not being Sync)
        let call = list(&self.client, &self.request, lp);
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .unwrap_or_else(|_| Err(timed_out("list", CALL_TIMEOUT)))
    }

    /// After a failed list call: the list starts again from its first page (a new
    /// [`Step::Init`]). Not at once (a page is not retried in place: the consumer gives
    /// its list permit back when a list fails, so the next try is a new list): after a
    /// backoff — a growing one up to [`REFUSED_MAX`] while the member refuses the list
    /// (401, 403) — except after a first 410 Gone in a row (the continue token expired:
    /// listing again at once is the fix; a second in a row waits, and gives the permit
    /// back meanwhile, or a list longer than the compaction window would hold it for
    /// good).
    fn list_failed(&mut self, error: kube::Error) -> Failure {
        self.state = State::Relist;
        let mut at_once = false;
        if gone(&error) {
            self.gone += 1;
            if self.gone < GONE_IN_A_ROW {
                self.backoff = None;
                at_once = true;
            } else {
                self.backoff = Some(grown(BACKOFF_FIRST, BACKOFF_MAX, self.gone - GONE_IN_A_ROW));
            }
        } else if refused(&error) {
            self.backoff = Some(grown(REFUSED_FIRST, REFUSED_MAX, self.refused));
            self.refused = self.refused.saturating_add(1);
        } else {
            slower(&mut self.backoff);
        }
        Failure {
            error,
            listing: true,
            at_once,
        }
    }

    /// After a failed watch call: 410 Gone and a too large resourceVersion relist (at
    /// once the first time, after a growing backoff if the watch failed so again with
    /// nothing read in between); anything else opens the watch again after a longer
    /// backoff, until it has failed [`WATCH_FAILURES`] times in a row over
    /// [`WATCH_FAILING`]: then it relists (deletes and changes the watch missed are
    /// found by the relist's diff).
    fn watch_failed(&mut self, error: kube::Error) -> Failure {
        let relist = if gone(&error) || too_large(&error) {
            true
        } else {
            self.watch_failures = self.watch_failures.saturating_add(1);
            let since = *self.failing_since.get_or_insert_with(Instant::now);
            self.watch_failures >= WATCH_FAILURES && since.elapsed() >= WATCH_FAILING
        };
        if relist {
            self.state = State::Relist;
            self.watch_failures = 0;
            self.failing_since = None;
            self.backoff =
                (self.forced > 0).then(|| grown(BACKOFF_FIRST, BACKOFF_MAX, self.forced - 1));
            self.forced = self.forced.saturating_add(1);
        } else {
            slower(&mut self.backoff);
        }
        Failure {
            error,
            listing: false,
            at_once: false,
        }
    }

    /// Whether the next step waits out a backoff first: a (re)list before its first
    /// call (the consumer takes its list permit at [`Step::Init`], after that call, so
    /// it does not hold one through the wait), a watch before it is opened. A list's
    /// pages never wait: a failed page relists ([`Machine::list_failed`]), and the
    /// backoff is reset by each page read.
    fn calling(&self) -> bool {
        match &self.state {
            State::Relist => true,
            State::Listing { .. } => false,
            State::Watching { stream, .. } => stream.is_none(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}
