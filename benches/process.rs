//! A component under test run as an operator runs it: a child process with its log in a
//! file, so /proc gives its own CPU time and peak RSS (VmHWM), and a failure shows the
//! end of its log.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{Kill, process_stats};

/// CPU seconds and peak RSS of a process so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// User + system CPU seconds since it started.
    pub cpu: f64,
    /// VmHWM, KiB.
    pub peak_kib: u64,
}

/// A running child process.
pub struct Process {
    child: Kill,
    log: PathBuf,
    what: String,
}

/// How long a stopped process gets to exit before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

impl Process {
    /// Starts `cmd` (`what` names it in errors: "the controller"), its stderr going to
    /// `log`; no stdin, stdout discarded, no inherited KUBECONFIG, and an error's message
    /// rather than a backtrace at the end of the log.
    pub fn start(mut cmd: Command, what: &str, log: &Path) -> anyhow::Result<Process> {
        let file = std::fs::File::create(log)
            .with_context(|| format!("creating the log of {what} {}", log.display()))?;
        let child = cmd
            .env_remove("KUBECONFIG")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {what} ({:?})", cmd.get_program()))?;
        Ok(Process {
            child: Kill(child),
            log: log.to_path_buf(),
            what: what.to_string(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Fails (with the end of its log) when the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        let what = &self.what;
        if let Some(status) = self
            .child
            .0
            .try_wait()
            .with_context(|| format!("checking {what}"))?
        {
            bail!(
                "{what} exited ({status}); the end of its log {}:\n{}",
                self.log.display(),
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its CPU time and peak RSS so far.
    pub fn stats(&mut self) -> anyhow::Result<Stats> {
        self.check_running()?;
        let (cpu, peak_kib) = process_stats(self.pid())?;
        Ok(Stats { cpu, peak_kib })
    }

    /// Stops it as an operator would (SIGTERM, then SIGKILL after [`STOP_GRACE`]);
    /// returns its figures read just before.
    pub async fn stop(mut self) -> anyhow::Result<Stats> {
        let stats = self.stats()?;
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("running kill -TERM")?;
        if !sent.success() {
            bail!("kill -TERM {pid} failed ({sent})");
        }
        let deadline = Instant::now() + STOP_GRACE;
        while self.child.0.try_wait()?.is_none() {
            if Instant::now() > deadline {
                tracing::warn!(pid, what = %self.what, "no stop on SIGTERM; killing it");
                break; // dropping the guard kills it
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(stats)
    }
}
