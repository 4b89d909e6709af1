//! The hub controller as an operator runs it: the real `causeway controller` binary in
//! a child process, so /proc gives its own CPU time and peak RSS (VmHWM).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use causeway_benches::process::Process;
pub use causeway_benches::process::Stats;

/// A running `causeway controller`.
pub struct Controller {
    process: Process,
}

impl Controller {
    /// Starts `bin controller` against the hub in `kubeconfig`, its log (warnings and
    /// errors) going to `log`. One replica, so no leader election (whose Lease renewal
    /// would be a hub write every 2 s).
    pub fn start(bin: &Path, kubeconfig: &Path, log: &Path) -> anyhow::Result<Controller> {
        let mut cmd = Command::new(bin);
        cmd.args(["controller", "--metrics", "127.0.0.1:0", "--log", "warn"])
            .arg("--leader-elect=false")
            .arg("--hub-kubeconfig")
            .arg(kubeconfig);
        Ok(Controller {
            process: Process::start(cmd, "the controller", log)?,
        })
    }

    /// Its process id.
    #[cfg(test)]
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Its CPU time and peak RSS so far.
    pub fn stats(&mut self) -> anyhow::Result<Stats> {
        self.process.stats()
    }

    /// Stops it (SIGTERM, then SIGKILL after
    /// [`causeway_benches::process::STOP_GRACE`]); returns its figures read
    /// just before.
    pub async fn stop(self) -> anyhow::Result<Stats> {
        self.process.stop().await
    }

    /// Waits until it has been quiet for `quiet`: `writes()` (per server) unchanged and
    /// its CPU under [`QUIET_CPU`] of a core. Gives up `limit` after `since` with what
    /// it was still doing; fails only when the process has exited.
    pub async fn settle(
        &mut self,
        since: Instant,
        quiet: Duration,
        limit: Duration,
        writes: impl Fn() -> Vec<u64>,
    ) -> anyhow::Result<Quiet> {
        let mut mark = (Instant::now(), self.stats()?.cpu, writes());
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = (Instant::now(), self.stats()?.cpu, writes());
            let span = now.0 - mark.0;
            let busy = now.1 - mark.1 > QUIET_CPU * span.as_secs_f64().max(1.0);
            if now.2 != mark.2 || busy {
                mark = now;
            } else if span >= quiet {
                return Ok(Quiet::After(mark.0 - since));
            }
            if since.elapsed() > limit {
                // what it is doing: one more second's writes and CPU
                let (cpu, before) = (self.stats()?.cpu, writes());
                tokio::time::sleep(Duration::from_secs(1)).await;
                let after = writes();
                return Ok(Quiet::Never {
                    limit,
                    writes_per_second: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
                    cpu: self.stats()?.cpu - cpu,
                });
            }
        }
    }
}

/// How a wait for the controller to go quiet ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Quiet {
    /// Quiet from this long after the start of the wait.
    After(Duration),
    /// Still busy at the limit, doing this over one more second.
    Never {
        limit: Duration,
        /// Write requests per second to each server.
        writes_per_second: Vec<u64>,
        /// Share of a core.
        cpu: f64,
    },
}

/// The share of a core under which the controller counts as quiet.
pub const QUIET_CPU: f64 = 0.05;

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_benches::process::STOP_GRACE;
    use std::path::PathBuf;

    /// The `causeway` binary of this profile: target/<profile>/deps/<test> →
    /// target/<profile>/causeway.
    fn causeway() -> PathBuf {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap();
        let bin = dir.join(format!("causeway{}", std::env::consts::EXE_SUFFIX));
        causeway_benches::causeway_bin(Some(&bin), "cargo build -p causeway-controllers").unwrap()
    }

    /// The real binary against a kubesim hub: it runs, has figures, settles when
    /// nothing is written, and stops on SIGTERM.
    #[tokio::test]
    async fn the_controller_process_runs_settles_and_stops() {
        let hub = kubesim::Server::start(kubesim::Config::new("hub"))
            .await
            .unwrap();
        causeway_e2e::install_crds(&causeway_e2e::client(&hub).await.unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("hub.kubeconfig");
        std::fs::write(&kubeconfig, hub.kubeconfig()).unwrap();
        let mut ctl =
            Controller::start(&causeway(), &kubeconfig, &dir.path().join("c.log")).unwrap();
        let started = Instant::now();
        let s = ctl.stats().unwrap();
        assert!(s.peak_kib > 0, "{s:?}");
        // a write count that moves keeps it from settling; one that stays lets it
        let count = std::sync::atomic::AtomicU64::new(0);
        let moving = || vec![7, count.fetch_add(1, std::sync::atomic::Ordering::Relaxed)];
        let busy = ctl
            .settle(
                started,
                Duration::from_secs(1),
                Duration::from_secs(2),
                moving,
            )
            .await
            .unwrap();
        // the last second's writes are read twice: the counter moved once
        assert_eq!(
            busy,
            Quiet::Never {
                limit: Duration::from_secs(2),
                writes_per_second: vec![0, 1],
                cpu: match busy {
                    Quiet::Never { cpu, .. } => cpu,
                    Quiet::After(_) => panic!("quiet while writing: {busy:?}"),
                },
            }
        );
        let settled = ctl
            .settle(
                Instant::now(),
                Duration::from_secs(1),
                Duration::from_secs(60),
                || vec![7, 3],
            )
            .await
            .unwrap();
        assert!(
            matches!(settled, Quiet::After(d) if d < Duration::from_secs(59)),
            "{settled:?}"
        );
        let pid = ctl.pid();
        let stopped = Instant::now();
        ctl.stop().await.unwrap();
        assert!(
            stopped.elapsed() < STOP_GRACE,
            "stopped on SIGTERM, not killed"
        );
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        hub.shutdown();
    }

    /// A controller that cannot start says so, with its log.
    #[tokio::test]
    async fn a_controller_that_exits_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no.kubeconfig");
        let mut ctl = Controller::start(&causeway(), &missing, &dir.path().join("c.log")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let err = loop {
            match ctl.stats() {
                Err(e) => break e,
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Ok(_) => panic!("a controller without a kubeconfig still runs"),
            }
        };
        let text = err.to_string();
        assert!(text.starts_with("the controller exited"), "{text}");
        assert!(
            text.contains("no.kubeconfig"),
            "the log names the file: {text}"
        );
    }
}
