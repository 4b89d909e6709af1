//! Watches: ADDED/MODIFIED/DELETED/BOOKMARK in resourceVersion order, selector
//! transitions, streaming lists (`sendInitialEvents`), 410 for compacted versions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::api::{Body, Req, ResPath};
use crate::error::{ApiError, ApiResult};
use crate::objects::render;
use crate::server::Inner;
use crate::state::registry::{GroupResource, ResourceType};
use crate::state::selectors::{FieldSelector, LabelSelector};
use crate::state::stored::{Event, EventType, StoredObj};
use crate::state::table;

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
    table: bool,
    metadata_only: bool,
}

impl Encoder {
    fn object(&self, o: &StoredObj) -> Bytes {
        if self.metadata_only && !self.table {
            return Bytes::from(
                serde_json::to_vec(&crate::objects::partial(&o.value)).unwrap_or_default(),
            );
        }
        if self.table {
            let rv = o
                .value
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            Bytes::from(
                serde_json::to_vec(&table::table(&self.rt, &[&o.value], rv, None))
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

/// Starts a watch and returns the streaming response.
pub fn serve(
    inner: Arc<Inner>,
    rt: Arc<ResourceType>,
    rp: ResPath,
    r: Req,
) -> ApiResult<Response<Body>> {
    let mut fs = crate::state::convert::field_selector(&rt, r.q("fieldSelector").unwrap_or(""))?;
    if let Some(name) = &rp.name {
        fs.0.push(("metadata.name".into(), true, name.clone()));
    }
    let filter = Filter {
        ns: rp.ns.clone(),
        ls: LabelSelector::parse(r.q("labelSelector").unwrap_or(""))?,
        fs,
    };
    let timeout = match r.q("timeoutSeconds") {
        Some(t) => Duration::from_secs(t.parse().map_err(|_| {
            ApiError::bad_request(format!("timeoutSeconds must be an integer, got \"{t}\""))
        })?),
        None => Duration::from_secs(1800 + (uuid::Uuid::new_v4().as_u128() % 1800) as u64),
    };
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
        let st = inner.state.lock();
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
                    let (tx, rx) = mpsc::channel::<Bytes>(initial.len() + 1);
                    for f in initial {
                        let _ = tx.try_send(f);
                    }
                    drop(tx);
                    return Ok(stream_response(rx));
                }
            }
        }
    };
    let (tx, out_rx) = mpsc::channel::<Bytes>(256);
    inner.metrics.watchers.inc();
    tokio::spawn(async move {
        run(
            inner.clone(),
            enc,
            filter,
            rx,
            tx,
            initial,
            start_rv,
            bookmarks,
            timeout,
        )
        .await;
        inner.metrics.watchers.dec();
    });
    Ok(stream_response(out_rx))
}

#[allow(clippy::too_many_arguments)]
async fn run(
    inner: Arc<Inner>,
    enc: Encoder,
    filter: Filter,
    mut rx: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Bytes>,
    initial: Vec<Bytes>,
    start_rv: u64,
    bookmarks: bool,
    timeout: Duration,
) {
    for f in initial {
        if tx.send(f).await.is_err() {
            return;
        }
    }
    let mut last_rv = start_rv;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(inner.cfg.bookmark_interval);
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
            _ = inner.shutdown.cancelled() => return,
            _ = tx.closed() => return,
        }
    }
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .map(|b| Ok::<_, std::convert::Infallible>(Frame::data(b)));
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("valid response")
}
