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
//! page ([`Step::Init`] again), after a backoff unless the member answered 410 Gone, and
//! that wait comes before the `Init`. So a consumer that gives its share of the lists
//! back when a list fails (the synchro's list permit and the stored versions it
//! compares with) does not hold it while the member keeps failing (a CRD whose
//! conversion webhook answers 500 fails every list of its type, for good).
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

/// Objects per list page (kube-runtime's watcher default).
const PAGE: u32 = 500;
/// A watch is opened again after this long (kube-rs refuses 295 s and more).
const WATCH_TIMEOUT: u32 = 290;
/// The wait after a failed call, doubled up to the max.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// One step of a member's type.
#[derive(Debug)]
pub(crate) enum Step {
    /// A (re)list starts.
    Init,
    /// An object of the list, as JSON text.
    InitApply(Box<RawValue>),
    /// The list is complete, read at this resourceVersion.
    InitDone(String),
    /// An object was added or changed.
    Apply(Value),
    /// An object was deleted.
    Delete(Value),
    /// A bookmark: nothing else of this type changed up to this resourceVersion.
    Progress(String),
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
}

/// Lists and watches `api` until dropped. Errors are yielded (for the log); a failed
/// watch is opened again with backoff, a failed list starts again from its first page
/// (with backoff unless 410), and a 410 of the watch relists.
pub(crate) fn list_watch(
    client: kube::Client,
    resource: &kube::api::ApiResource,
) -> impl Stream<Item = Result<Step, kube::Error>> + Send {
    let url = kube::api::Api::<kube::api::DynamicObject>::all_with(client.clone(), resource)
        .resource_url()
        .to_string();
    let m = Machine {
        client,
        request: kube::core::Request::new(url),
        state: State::Relist,
        backoff: None,
    };
    futures::stream::unfold(m, |mut m| async move {
        let item = m.step().await;
        Some((item, m))
    })
}

/// Whether `e` is 410 Gone (an expired resourceVersion or continue token): relisted
/// at once, with no backoff.
pub(crate) fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

/// After a failed watch call: 410 Gone relists; anything else waits out a longer
/// backoff before the watch is opened again (a failed list: [`list_failed`]).
fn failed(state: &mut State, backoff: &mut Option<Duration>, e: kube::Error) -> kube::Error {
    if gone(&e) {
        *state = State::Relist;
    } else {
        slower(backoff);
    }
    e
}

/// After a failed list call: the list starts again from its first page ([`Step::Init`]),
/// after a longer backoff unless the member answered 410 Gone (the continue token
/// expired: listing again at once is the fix). A page is not retried in place: the
/// consumer gives its list permit back when a list fails, so the next try is a new list.
fn list_failed(state: &mut State, backoff: &mut Option<Duration>, e: kube::Error) -> kube::Error {
    if !gone(&e) {
        slower(backoff);
    }
    *state = State::Relist;
    e
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
    async fn step(&mut self) -> Result<Step, kube::Error> {
        loop {
            if let Some(wait) = self.backoff.filter(|_| self.calling()) {
                tokio::time::sleep(wait).await;
            }
            match &mut self.state {
                State::Relist => {
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
                            return Ok(Step::InitDone(rv));
                        }
                        Some(Some(t)) => Some(t.clone()),
                        None => None,
                    };
                    let mut lp = ListParams::default().limit(PAGE);
                    if let Some(t) = &token {
                        lp = lp.continue_token(t);
                    }
                    match list(&self.client, &self.request, &lp).await {
                        Ok(list) => {
                            self.backoff = None;
                            // a later page's resourceVersion is the first's
                            if token.is_none() {
                                *rv = list.metadata.resource_version.unwrap_or_default();
                            }
                            *next = Some(list.metadata.continue_.filter(|c| !c.is_empty()));
                            page.extend(list.items);
                        }
                        // listed again from the start (410: the continue token expired)
                        Err(e) => {
                            return Err(list_failed(&mut self.state, &mut self.backoff, e));
                        }
                    }
                }
                State::Watching { rv, stream, quiet } => {
                    let events = match stream {
                        Some(s) => s,
                        None => {
                            let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT);
                            wp.bookmarks = true;
                            match watch(&self.client, &self.request, &wp, rv).await {
                                Ok(s) => {
                                    *quiet = true;
                                    stream.insert(s.boxed())
                                }
                                Err(e) => {
                                    return Err(failed(&mut self.state, &mut self.backoff, e));
                                }
                            }
                        }
                    };
                    let object_rv = |o: &Value| meta(o, "resourceVersion").map(String::from);
                    let next = events.next().await;
                    if matches!(&next, Some(Ok(e)) if !matches!(e, WatchEvent::Error(_))) {
                        *quiet = false;
                        self.backoff = None;
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
                            let e = kube::Error::Api(s);
                            return Err(failed(&mut self.state, &mut self.backoff, e));
                        }
                        Some(Err(e)) => {
                            *stream = None;
                            return Err(failed(&mut self.state, &mut self.backoff, e));
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

    /// Whether the next step waits out a backoff first: a (re)list before its
    /// [`Step::Init`] (the consumer takes its list permit at `Init`, so it does not hold
    /// one through the wait), a watch before it is opened. A list's pages never wait: a
    /// failed page relists ([`list_failed`]), and the backoff is reset by each page read.
    fn calling(&self) -> bool {
        match &self.state {
            State::Relist => true,
            State::Listing { .. } => false,
            State::Watching { stream, .. } => stream.is_none(),
        }
    }
}
