//! The HTTP side of a watch: a chunked `application/json` stream of the frames
//! [`crate::verbs::watch`] produces, counted in the `/metrics` watcher gauge.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tokio::sync::mpsc;

use crate::error::ApiResult;
use crate::http::context::Inner;
use crate::http::path::ResPath;
use crate::http::response::Body;
use crate::state::registry::ResourceType;
use crate::verbs::request::Req;

/// Starts a watch and returns the streaming response.
pub fn serve(
    inner: Arc<Inner>,
    rt: Arc<ResourceType>,
    rp: ResPath,
    r: Req,
) -> ApiResult<Response<Body>> {
    let w = crate::verbs::watch::start(&inner.state, rt, rp.ns.clone(), rp.name.as_deref(), &r)?;
    let Some(live) = w.live else {
        let (tx, rx) = mpsc::channel::<Bytes>(w.initial.len() + 1);
        for f in w.initial {
            let _ = tx.try_send(f);
        }
        drop(tx);
        return Ok(stream_response(rx));
    };
    let (tx, out_rx) = mpsc::channel::<Bytes>(256);
    inner.metrics.watchers.inc();
    tokio::spawn(async move {
        let shutdown = inner.shutdown.clone();
        live.run(w.initial, tx, inner.cfg.bookmark_interval, shutdown)
            .await;
        inner.metrics.watchers.dec();
    });
    Ok(stream_response(out_rx))
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<Body> {
    causeway_runtime::https::json_stream(rx)
}
