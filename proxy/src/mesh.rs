//! Mesh listeners (GW-4): with `--listen-mesh <ip>:<first>-<last>`, the proxy listens
//! on `<ip>:<port>` for every mesh port of the route table in that range (the ports the
//! Gateway API controller gave the ServiceImport ports mesh routes capture, which the
//! members' importers point the clusterset IPs at). A connection there is routed by
//! the mesh routes of its port ([`crate::pipeline::Conn::mesh`]). Listeners follow the
//! table: opened when a port appears, drained when it goes; a port that cannot be
//! bound is retried every few seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::pipeline::{Limits, Proxy};
use crate::table::RouteTable;

/// How often a mesh port that could not be bound is tried again.
const RETRY: Duration = Duration::from_secs(3);

/// Keeps a listener on each mesh port of the current table until `stop`.
pub(crate) async fn run(
    table: Arc<ArcSwap<RouteTable>>,
    mut built: tokio::sync::watch::Receiver<u64>,
    (ip, range): (IpAddr, RangeInclusive<u16>),
    proxy: Arc<Proxy>,
    limits: Limits,
    stop: CancellationToken,
) {
    let mut open: BTreeMap<u16, (CancellationToken, JoinHandle<()>)> = BTreeMap::new();
    // listeners of ports no longer captured, draining; shutdown waits for them too
    let mut draining = tokio::task::JoinSet::new();
    loop {
        let want: BTreeSet<u16> = table
            .load()
            .mesh
            .keys()
            .copied()
            .filter(|p| range.contains(p))
            .collect();
        let gone: Vec<u16> = open.keys().filter(|p| !want.contains(p)).copied().collect();
        for port in gone {
            if let Some((s, task)) = open.remove(&port) {
                tracing::info!(port, "mesh port no longer captured: draining its listener");
                s.cancel();
                draining.spawn(async move {
                    let _ = task.await;
                });
            }
        }
        while draining.try_join_next().is_some() {}
        let mut failed = false;
        let new: Vec<u16> = want
            .iter()
            .filter(|p| !open.contains_key(p))
            .copied()
            .collect();
        for port in new {
            let addr = SocketAddr::new(ip, port);
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    tracing::info!(%addr, "serving mesh port");
                    let s = stop.child_token();
                    let task = tokio::spawn(crate::server::serve(
                        l,
                        None,
                        Some(port),
                        proxy.clone(),
                        limits.clone(),
                        s.clone(),
                    ));
                    open.insert(port, (s, task));
                }
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "cannot listen on a mesh port (is something else holding it? free it, or give --listen-mesh a range of its own); retrying");
                    failed = true;
                }
            }
        }
        let retry = async {
            if failed {
                tokio::time::sleep(RETRY).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            changed = built.changed() => if changed.is_err() { break },
            _ = retry => {}
            _ = stop.cancelled() => break,
        }
    }
    for (_, (s, task)) in open {
        s.cancel();
        let _ = task.await;
    }
    while draining.join_next().await.is_some() {}
}
