//! Watches: ADDED/MODIFIED/DELETED/BOOKMARK in resourceVersion order, selector
//! transitions, streaming lists (`sendInitialEvents`), 410 for compacted versions.
//! The frames are the JSON lines of kube-apiserver's watch stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, ApiResult};
use crate::state::cluster::State;
use crate::state::convert;
use crate::state::registry::{GroupResource, ResourceType};
use crate::state::selectors::{FieldSelector, LabelSelector, Term};
use crate::state::stored::{Event, EventType, StoredObj};
use crate::verbs::output::{partial, render};
use crate::verbs::request::Req;
use causeway_runtime::table;

struct Filter {
    ns: Option<String>,
    ls: LabelSelector,
    fs: FieldSelector,
}

impl Filter {
    fn matches(&self, o: &StoredObj) -> bool {
        self.ns.as_deref().is_none_or(|n| n == o.namespace())
            && self.ls.matches(o.value.pointer("/metadata/labels"))
            && self.fs.matches(&o.value)
    }
}

fn frame(kind: &str, obj: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(obj.len() + 32);
    b.extend_from_slice(b"{\"type\":\"");
    b.extend_from_slice(kind.as_bytes());
    b.extend_from_slice(b"\",\"object\":");
    b.extend_from_slice(obj);
    b.extend_from_slice(b"}\n");
    Bytes::from(b)
}

fn error_frame(e: &ApiError) -> Bytes {
    frame(
        "ERROR",
        &serde_json::to_vec(&e.to_status()).unwrap_or_default(),
    )
}

struct Encoder {
    rt: Arc<ResourceType>,
    /// Where `rt`'s objects are stored.
    gr: GroupResource,
    table: Option<causeway_runtime::table::IncludeObject>,
    metadata_only: bool,
}

impl Encoder {
    fn object(&self, o: &StoredObj) -> Bytes {
        if self.metadata_only && self.table.is_none() {
            return Bytes::from(serde_json::to_vec(&partial(&o.value)).unwrap_or_default());
        }
        if let Some(include) = self.table {
            let rv = o
                .value
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            Bytes::from(
                serde_json::to_vec(&table::table(
                    &[],
                    &self.rt.columns,
                    &[&o.value],
                    rv,
                    None,
                    include,
                ))
                .unwrap_or_default(),
            )
        } else {
            render(&self.rt, o)
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": md});
        frame("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default())
    }

    /// The frame a committed event becomes for this watcher (selector transitions included).
    fn event(&self, e: &Event, f: &Filter) -> Option<Bytes> {
        if e.gr != self.gr {
            return None;
        }
        let now = f.matches(&e.obj);
        let before = e.prev.as_ref().is_some_and(|p| f.matches(p));
        let kind = match e.kind {
            EventType::Added if now => "ADDED",
            EventType::Modified => match (before, now) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            },
            EventType::Deleted if before => "DELETED",
            _ => return None,
        };
        Some(frame(kind, &self.object(&e.obj)))
    }
}

/// A started watch: the frames to send at once, and what keeps it going.
pub struct Watch {
    /// Initial events (or history since the requested resourceVersion), bookmark.
    pub initial: Vec<Bytes>,
    /// None when the watch ends after `initial` (an ERROR frame: 410 Gone).
    pub live: Option<Live>,
}

/// The running part of a watch.
pub struct Live {
    /// The type's end (its CRD deleted): the watch ends.
    removed: tokio_util::sync::CancellationToken,
    enc: Encoder,
    filter: Filter,
    rx: broadcast::Receiver<Arc<Event>>,
    start_rv: u64,
    bookmarks: bool,
    timeout: Duration,
}

/// Starts a watch of `rt` in `ns` (or all namespaces), of one object when `name` is given.
pub fn start(
    state: &Mutex<State>,
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<&str>,
    r: &Req,
) -> ApiResult<Watch> {
    // the request's options decoded first, its field labels checked after, as
    // kube-apiserver does: of two errors, the same one is reported
    let timeout = match r.q("timeoutSeconds") {
        Some(t) => Duration::from_secs(t.parse().map_err(|_| {
            ApiError::bad_request(format!("timeoutSeconds must be an integer, got \"{t}\""))
        })?),
        None => Duration::from_secs(1800 + (uuid::Uuid::new_v4().as_u128() % 1800) as u64),
    };
    let ls = LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?;
    FieldSelector::parse(r.q("fieldSelector").unwrap_or(""))?;
    crate::verbs::read::validate_list_options(r, true)?;
    let mut fs = convert::field_selector(&rt, r.q("fieldSelector").unwrap_or(""))?;
    if let Some(name) = name {
        // kube-apiserver's list handler, for a watch that names its object: a field
        // selector, if any, must pin that same name
        if !fs.0.is_empty() && fs.pinned_name() != Some(name) {
            return Err(ApiError::bad_request(
                "fieldSelector metadata.name doesn't match requested name",
            ));
        }
        fs.0.push(Term::on("metadata.name", true, name));
    }
    let filter = Filter { ns, ls, fs };
    let bookmarks = r.flag("allowWatchBookmarks");
    let send_initial = r.flag("sendInitialEvents");
    let rv_param = r.q("resourceVersion").unwrap_or("").to_string();
    let enc = Encoder {
        rt: rt.clone(),
        gr: rt.group_resource(),
        table: r.table,
        metadata_only: r.metadata_only,
    };

    let mut initial: Vec<Bytes> = Vec::new();
    let (rx, start_rv) = {
        let st = state.lock();
        let gr = rt.group_resource();
        let current = st.store.rv();
        if send_initial || rv_param.is_empty() || rv_param == "0" {
            for o in st.store.list(&gr, filter.ns.as_deref()) {
                if filter.matches(&o) {
                    initial.push(frame("ADDED", &enc.object(&o)));
                }
            }
            if send_initial {
                initial.push(enc.bookmark(current, true));
            }
            (st.store.subscribe(), current)
        } else {
            let rv: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version \"{rv_param}\""))
            })?;
            match st.store.history_since(rv) {
                Ok(events) => {
                    initial.extend(events.iter().filter_map(|e| enc.event(e, &filter)));
                    (st.store.subscribe(), current.max(rv))
                }
                Err(e) => {
                    initial.push(error_frame(&e));
                    return Ok(Watch {
                        initial,
                        live: None,
                    });
                }
            }
        }
    };
    Ok(Watch {
        initial,
        live: Some(Live {
            removed: rt.removed.clone(),
            enc,
            filter,
            rx,
            start_rv,
            bookmarks,
            timeout,
        }),
    })
}

impl Live {
    /// Sends `initial`, then the events as they are committed (and bookmarks every
    /// `bookmark_interval` when asked for), until the timeout, shutdown, a 410 for a
    /// watcher that fell behind, or the client going away.
    pub async fn run(
        self,
        initial: Vec<Bytes>,
        tx: mpsc::Sender<Bytes>,
        bookmark_interval: Duration,
        shutdown: CancellationToken,
    ) {
        let Live {
            removed,
            enc,
            filter,
            mut rx,
            start_rv,
            bookmarks,
            timeout,
        } = self;
        for f in initial {
            if tx.send(f).await.is_err() {
                return;
            }
        }
        let mut last_rv = start_rv;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(bookmark_interval);
        tick.tick().await;
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(e) => {
                        if e.rv <= last_rv {
                            continue;
                        }
                        last_rv = e.rv;
                        if let Some(f) = enc.event(&e, &filter)
                            && tx.send(f).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(missed = n, "watcher fell behind; ending it with 410");
                        let _ = tx.send(error_frame(&ApiError::gone(format!("too old resource version: {last_rv} (watcher fell {n} events behind)")))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    if tx.send(enc.bookmark(last_rv, false)).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => return,
                _ = shutdown.cancelled() => return,
                _ = removed.cancelled() => {
                    // what was committed before the type went (its objects' deletions)
                    // is sent first
                    loop {
                        match rx.try_recv() {
                            Ok(e) => {
                                if e.rv > last_rv
                                    && let Some(f) = enc.event(&e, &filter)
                                    && tx.send(f).await.is_err()
                                {
                                    return;
                                }
                                last_rv = last_rv.max(e.rv);
                            }
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                let _ = tx.send(error_frame(&ApiError::gone(format!("too old resource version: {last_rv} (watcher fell {n} events behind)")))).await;
                                return;
                            }
                            Err(_) => return,
                        }
                    }
                }
                _ = tx.closed() => return,
            }
        }
    }
}
