//! Part 3: Pull members whose agent is cut off from the hub. Each is registered with
//! `causeway register` (its agent gets a least-privilege hub token), its agent runs in
//! this process until every one is `Ready=True`, then the agents are stopped one after
//! another (the lease is no longer renewed, the status no longer posted) and the hub's
//! monitor has to turn each Cluster `Ready=Unknown` and taint it `unreachable`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use causeway_controllers::clusters::join::{client_for, member_access};
use causeway_controllers::clusters::options::Timing;
use causeway_controllers::clusters::register::{RegisterOptions, register};
use causeway_controllers::metrics::Metrics;
use kubesim::Server;
use tokio_util::sync::CancellationToken;

use crate::marks::Marks;

/// Cut → first sighting, per member, in cut order.
pub struct Cuts {
    /// `register` returned → `Ready=True` (the agent's first status), per member.
    pub ready: Vec<Duration>,
    /// Cut → `Ready=Unknown`.
    pub unknown: Vec<Duration>,
    /// Cut → the `unreachable` taint.
    pub tainted: Vec<Duration>,
}

/// Registers every one of `members` in pull mode, runs their agents until all are
/// Ready, then cuts them off `gap` apart and waits for the monitor's verdicts.
pub async fn cut_off(
    hub: &Server,
    hub_client: &kube::Client,
    members: &[Server],
    marks: &Marks,
    timing: &Timing,
    gap: Duration,
) -> anyhow::Result<Cuts> {
    let dir = tempfile::tempdir()?;
    let opts = RegisterOptions {
        token_seconds: 3600,
        ..Default::default()
    };
    let hub_endpoint = causeway_e2e::hub_endpoint(hub);
    let mut names = Vec::new();
    let mut agents = Vec::new();
    let mut registered = Vec::new();
    for m in members {
        let name = m.name().to_string();
        let done = register(
            hub_client.clone(),
            hub_endpoint.clone(),
            &name,
            &causeway_e2e::member(m).await,
            &opts,
        )
        .await
        .with_context(|| format!("registering {name} in pull mode"))?;
        registered.push(Instant::now());
        // the agent reads its hub credentials as `causeway agent` would: from a kubeconfig
        let path = dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, &done.agent_kubeconfig)
            .with_context(|| format!("writing {}", path.display()))?;
        let agent_hub = client_for(&member_access(&path, None)?).await?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(causeway_controllers::agent::run(
            agent_hub,
            causeway_e2e::client(m).await?,
            name.clone(),
            timing.clone(),
            Arc::new(Metrics::default()),
            stop.clone(),
        ));
        names.push(name);
        agents.push((stop, task));
    }
    let limit = Duration::from_secs(60) + timing.status_interval;
    let ready = match marks
        .wait_all(&names, |m| m.ready, "Ready=True", limit)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            // an agent that ended early says why
            for (name, (_, task)) in names.iter().zip(&mut agents) {
                if task.is_finished() {
                    let ended = task.await;
                    tracing::error!(cluster = %name, result = ?ended, "the agent ended before its cluster was Ready");
                }
            }
            return Err(e);
        }
    };
    let ready = ready
        .iter()
        .zip(&registered)
        .map(|(r, at)| r.saturating_duration_since(*at))
        .collect();
    let mut cut_at = Vec::new();
    for (stop, _) in &agents {
        tokio::time::sleep(gap).await;
        cut_at.push(Instant::now());
        stop.cancel();
    }
    let limit = 2 * timing.monitor_grace_period + Duration::from_secs(30);
    let unknown = marks
        .wait_all(&names, |m| m.unknown, "Ready=Unknown", limit)
        .await?;
    let tainted = marks
        .wait_all(&names, |m| m.tainted, "tainted unreachable", limit)
        .await?;
    for (_, task) in agents {
        task.await
            .context("an agent task panicked")?
            .context("an agent failed")?;
    }
    let since_cut = |seen: Vec<Instant>| {
        seen.iter()
            .zip(&cut_at)
            .map(|(s, c)| s.saturating_duration_since(*c))
            .collect()
    };
    Ok(Cuts {
        ready,
        unknown: since_cut(unknown),
        tainted: since_cut(tainted),
    })
}
