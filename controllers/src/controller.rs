//! `causeway controller` (hub, push mode): follows the member registry and runs the
//! aggregator on the hub plus an exporter and an importer per reachable member.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use causeway_crds::federation::cluster::Cluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clusters::join::{SYSTEM_NAMESPACE, client_for};
use crate::clusters::registry::{MemberSpec, members};
use crate::mcs::{aggregator, exporter, importer};
use crate::metrics::Metrics;
use crate::watch::{cache, next_round};

struct Running {
    fingerprint: String,
    stop: CancellationToken,
}

/// Runs every hub-side controller until `stop`.
pub async fn run(
    hub: kube::Client,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    tokio::spawn(aggregator::run(
        hub.clone(),
        metrics.clone(),
        stop.child_token(),
    ));
    let notify = Arc::new(Notify::new());
    let clusters = cache(
        Api::<Cluster>::all(hub.clone()),
        watcher::Config::default(),
        notify.clone(),
        stop.clone(),
        "hub clusters",
    );
    let secrets = cache(
        Api::<Secret>::namespaced(hub.clone(), SYSTEM_NAMESPACE),
        watcher::Config::default(),
        notify.clone(),
        stop.clone(),
        "hub member credentials",
    );
    tokio::time::timeout(Duration::from_secs(30), async {
        let _ = clusters.wait_until_ready().await;
        let _ = secrets.wait_until_ready().await;
    })
    .await
    .map_err(|_| anyhow::anyhow!("could not list Clusters and Secrets on the hub within 30 s (are the CRDs installed and the credentials right?)"))?;
    metrics.set_ready(true);
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    loop {
        let cl: Vec<Cluster> = clusters
            .state()
            .iter()
            .map(|c| c.as_ref().clone())
            .collect();
        let se: Vec<Secret> = secrets.state().iter().map(|s| s.as_ref().clone()).collect();
        let (want, unusable) = members(&cl, &se);
        for u in &unusable {
            tracing::warn!(cluster = %u.name, reason = %u.reason, "cluster not usable yet");
        }
        running.retain(|name, r| {
            let keep = want.get(name).is_some_and(|m| m.fingerprint == r.fingerprint);
            if !keep {
                tracing::info!(cluster = %name, "stopping member workers (removed or credentials changed)");
                r.stop.cancel();
            }
            keep
        });
        for (name, m) in &want {
            if running.contains_key(name) {
                continue;
            }
            let token = stop.child_token();
            start_member(m.clone(), hub.clone(), metrics.clone(), token.clone());
            running.insert(
                name.clone(),
                Running {
                    fingerprint: m.fingerprint.clone(),
                    stop: token,
                },
            );
        }
        metrics.set_members(running.len() as i64);
        if !next_round(
            &notify,
            &stop,
            Duration::from_secs(30),
            Duration::from_millis(5),
        )
        .await
        {
            return Ok(());
        }
    }
}

fn start_member(m: MemberSpec, hub: kube::Client, metrics: Arc<Metrics>, stop: CancellationToken) {
    tokio::spawn(async move {
        let client = match client_for(&m.access).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(cluster = %m.name, error = %e, "cannot build a client for the member");
                return;
            }
        };
        tracing::info!(cluster = %m.name, id = %m.id, server = %m.access.server, "member workers starting");
        tokio::spawn(exporter::run(
            m.id.clone(),
            client.clone(),
            hub.clone(),
            metrics.clone(),
            stop.clone(),
        ));
        tokio::spawn(importer::run(m.id.clone(), client, hub, metrics, stop));
    });
}
