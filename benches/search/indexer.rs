//! The indexer under test, either way it can run: `causeway search serve` (the real
//! binary: indexer + API, metrics on its /metrics) or `bench-search indexer` (the
//! indexer alone, metrics in a file, queries then go straight to the store). Both are
//! child processes, so their CPU and peak RSS are their own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use causeway_benches::process::{Process, Stats};

use crate::server::{Api, Serve, metric};

/// Which indexer to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `causeway search serve`: indexer and API; queries over HTTPS.
    Serve,
    /// The indexer alone in a child process; queries go straight to the store.
    Child,
}

/// Where a run keeps its files and reaches the hub and members.
pub struct Setup<'a> {
    /// The `causeway` binary.
    pub causeway: &'a Path,
    /// Holds `<cluster>.kubeconfig` of the hub and every member.
    pub kubeconfigs: &'a Path,
    /// The hub's name.
    pub hub: &'a str,
    /// The members' names.
    pub members: &'a [String],
    /// The hub admin's token (for the API).
    pub token: &'a str,
}

/// A running indexer.
pub enum Running {
    /// `causeway search serve` and a client of its API.
    Serve(Serve, Api),
    /// The indexer alone and its metrics file.
    Child(Process, PathBuf),
}

impl Running {
    /// Starts an indexer of `kind` storing into `storage`, its files under `dir`
    /// (`log` its log).
    pub async fn start(
        kind: Kind,
        setup: &Setup<'_>,
        storage: &str,
        dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Running> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        match kind {
            Kind::Serve => {
                let hub = setup.kubeconfigs.join(format!("{}.kubeconfig", setup.hub));
                let serve = Serve::start(setup.causeway, &hub, storage, dir, log)?;
                let api = Api::new(serve.addr, setup.token).await?;
                Ok(Running::Serve(serve, api))
            }
            Kind::Child => {
                let file = dir.join("metrics.txt");
                let _ = std::fs::remove_file(&file);
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.args(["indexer", "--storage", storage])
                    .arg("--kubeconfigs")
                    .arg(setup.kubeconfigs)
                    .arg("--members")
                    .arg(setup.members.join(","))
                    .arg("--metrics-file")
                    .arg(&file)
                    .env("RUST_LOG", "warn");
                Ok(Running::Child(
                    Process::start(cmd, "the indexer", log)?,
                    file,
                ))
            }
        }
    }

    /// Its CPU time and peak RSS so far (fails when it exited).
    pub fn stats(&mut self) -> anyhow::Result<Stats> {
        match self {
            Running::Serve(s, _) => s.process.stats(),
            Running::Child(p, _) => p.stats(),
        }
    }

    /// The end of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        match self {
            Running::Serve(s, _) => s.process.log_tail(lines),
            Running::Child(p, _) => p.log_tail(lines),
        }
    }

    /// Stops it; its figures just before.
    pub async fn stop(self) -> anyhow::Result<Stats> {
        match self {
            Running::Serve(s, _) => s.process.stop().await,
            Running::Child(p, _) => p.stop().await,
        }
    }

    /// The value of metric `name` (summed over label sets); `None` while the metrics
    /// cannot be read yet.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        match self {
            // the server registers its metrics under its `causeway_` prefix
            Running::Serve(_, api) => api.metric(&format!("causeway_{name}")).await.ok(),
            Running::Child(_, file) => {
                let text = std::fs::read_to_string(file).ok()?;
                Some(metric(&text, name))
            }
        }
    }

    /// Waits until `done(metrics)` holds for the metrics named in `names`, reading them
    /// every 100 ms; returns the time from `since` and the last values. Fails when the
    /// process exits or `limit` passes.
    pub async fn until(
        &mut self,
        since: Instant,
        names: &[&str],
        limit: Duration,
        done: impl Fn(&[f64]) -> bool,
    ) -> anyhow::Result<(Duration, Vec<f64>)> {
        let mut last_log = Instant::now();
        let mut values = vec![0.0; names.len()];
        loop {
            self.stats()?;
            let mut read = Vec::new();
            for n in names {
                match self.metric(n).await {
                    Some(v) => read.push(v),
                    None => break,
                }
            }
            if read.len() == names.len() {
                values = read;
                if done(&values) {
                    return Ok((since.elapsed(), values));
                }
            }
            if last_log.elapsed() > Duration::from_secs(5) {
                last_log = Instant::now();
                let s = self.stats()?;
                tracing::info!(
                    seconds = since.elapsed().as_secs(),
                    ?names,
                    ?values,
                    peak_mib = s.peak_kib / 1024,
                    cpu = s.cpu,
                    "waiting"
                );
            }
            if since.elapsed() > limit {
                bail!(
                    "not done within {} s ({names:?} = {values:?}); the end of its log:\n{}",
                    limit.as_secs(),
                    self.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
