//! What the benchmarks share: percentiles and their formatting, CPU time and memory
//! read from /proc (of this process, one of its threads, or a child process), the
//! `causeway` binary run as a child process, and the report's machine and commit lines.

pub mod process;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::{Context, bail};

/// The `p` quantile (0.0–1.0) of `sorted` (nearest rank); zero when empty.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// User plus system CPU seconds from a /proc `stat` file: `/proc/<pid>/stat` for a
/// process (all its threads, dead ones included), `/proc/self/task/<tid>/stat` for one
/// thread.
pub fn cpu_seconds(stat_path: &str) -> anyhow::Result<f64> {
    let stat =
        std::fs::read_to_string(stat_path).with_context(|| format!("reading {stat_path}"))?;
    // the command name may hold spaces and parentheses: fields count from the last ')'
    let after = stat
        .rsplit_once(')')
        .with_context(|| format!("{stat_path} has no ')' after the command name"))?
        .1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize, name: &str| -> anyhow::Result<f64> {
        f.get(i)
            .with_context(|| format!("{stat_path} has no {name} field"))?
            .parse::<f64>()
            .with_context(|| format!("{stat_path}: {name} is not a number"))
    };
    Ok((field(11, "utime")? + field(12, "stime")?) / TICKS_PER_SECOND)
}

/// CPU seconds of this process's live threads whose name starts with `prefix` (names
/// are set with `tokio::runtime::Builder::thread_name`; the kernel keeps 15 bytes).
pub fn threads_cpu_seconds(prefix: &str) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for task in std::fs::read_dir("/proc/self/task").context("listing /proc/self/task")? {
        let dir = task?.path();
        // a thread may end between the listing and the reads: skip it
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim_end().starts_with(prefix)
            && let Ok(s) = cpu_seconds(&dir.join("stat").to_string_lossy())
        {
            total += s;
        }
    }
    Ok(total)
}

/// A `kB` field of `/proc/<pid>/status` (`pid` may be `self`), e.g. `VmRSS:` or
/// `VmHWM:`; 0 when the process or the field is gone.
pub fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `d` in whole milliseconds: "27 ms".
pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// p50 / p99 / max of `v` (any order) in whole milliseconds.
pub fn p50_p99_max(v: &[Duration]) -> String {
    let mut v = v.to_vec();
    v.sort();
    format!(
        "{} / {} / {}",
        ms(pct(&v, 0.5)),
        ms(pct(&v, 0.99)),
        ms(pct(&v, 1.0))
    )
}

/// KiB as MiB with one decimal: "1.5 MiB".
pub fn mib(kib: i64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// CPU seconds and peak RSS (VmHWM, KiB) of process `pid`.
pub fn process_stats(pid: u32) -> anyhow::Result<(f64, u64)> {
    Ok((
        cpu_seconds(&format!("/proc/{pid}/stat"))?,
        status_kib(&pid.to_string(), "VmHWM:"),
    ))
}

/// A child process, killed and reaped when dropped (so a failing bench leaves none behind).
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `causeway` binary: `given`, else the one next to this executable (cargo puts
/// every binary of a profile in one directory); `build` says how to build it when it is
/// missing.
pub fn causeway_bin(given: Option<&Path>, build: &str) -> anyhow::Result<PathBuf> {
    let bin = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating this executable")?
            .parent()
            .context("this executable has no directory")?
            .join(format!("causeway{}", std::env::consts::EXE_SUFFIX)),
    };
    if !bin.exists() {
        bail!(
            "{} not found: build it with `{build}` or pass --causeway",
            bin.display()
        );
    }
    Ok(bin)
}

/// The command that reproduces this run of `bin` (with this run's arguments).
pub fn reproduce(bin: &str) -> String {
    let given: Vec<String> = std::env::args().skip(1).collect();
    format!(
        "cargo run --release -p causeway-benches --bin {bin} --{}{}",
        if given.is_empty() { "" } else { " " },
        given.join(" ")
    )
}

/// Runs a bench's `run` future on a 2-worker runtime (stopped without waiting for the
/// servers' tasks once it is done).
pub fn block_on<T>(run: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the bench's runtime")?;
    let out = rt.block_on(run);
    rt.shutdown_background();
    out
}

/// Prints a report and writes it to `out` (unless `out` is "-").
pub fn publish(text: &str, out: &str) -> anyhow::Result<()> {
    println!("{text}");
    if out != "-" {
        std::fs::write(out, text).with_context(|| format!("writing {out}"))?;
    }
    Ok(())
}

/// The machine a report was measured on: cores, CPU model, RAM.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<i64>().ok())
        })
        .unwrap_or(0);
    format!(
        "{cores} cores ({cpu}), {} RAM, shared with other builds and tests",
        mib(total)
    )
}

/// The short commit of HEAD ("unknown" outside a git checkout).
pub fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        for (sorted, p, want) in [
            (ms(&[]), 0.5, 0),
            (ms(&[7]), 0.99, 7),
            (ms(&[1, 2, 3]), 0.5, 2),
            (ms(&[1, 2, 3, 4]), 0.0, 1),
            (ms(&(1..=100).collect::<Vec<_>>()), 0.99, 99),
            (ms(&(1..=100).collect::<Vec<_>>()), 1.0, 100),
        ] {
            assert_eq!(
                pct(&sorted, p),
                Duration::from_millis(want),
                "{sorted:?} p{p}"
            );
        }
    }

    #[test]
    fn this_process_has_cpu_time_memory_and_named_threads() {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let spin = std::thread::Builder::new()
            .name("bench-spin".into())
            .spawn(move || {
                // spins until told to stop (not for a wall-clock time: on a loaded box
                // 100 ms of wall time can be far less CPU time)
                let mut x = 0u64;
                while let Err(std::sync::mpsc::TryRecvError::Empty) = wait.try_recv() {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                x
            })
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while threads_cpu_seconds("bench-spin").unwrap() < 0.05 {
            if std::time::Instant::now() > deadline {
                drop(done);
                panic!("the spinning thread's CPU time never showed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(threads_cpu_seconds("no-such-thread").unwrap(), 0.0);
        assert!(cpu_seconds("/proc/self/stat").unwrap() >= 0.05);
        assert!(status_kib("self", "VmRSS:") > 0);
        assert_eq!(status_kib("self", "NoSuchField:"), 0);
        let err = cpu_seconds("/proc/self/no-such-file").unwrap_err();
        assert!(
            format!("{err:#}").contains("reading /proc/self/no-such-file"),
            "{err:#}"
        );
        drop(done);
        spin.join().unwrap();
    }

    #[test]
    fn formatted_percentiles_sort_first() {
        let v: Vec<Duration> = [30, 10, 20].map(Duration::from_millis).to_vec();
        assert_eq!(p50_p99_max(&v), "20 ms / 30 ms / 30 ms");
        assert_eq!(p50_p99_max(&[]), "0 ms / 0 ms / 0 ms");
        assert_eq!(mib(1536), "1.5 MiB");
    }

    #[test]
    fn a_child_has_stats_and_is_gone_once_dropped() {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let guard = Kill(child);
        let (cpu, peak_kib) = process_stats(pid).unwrap();
        assert!(cpu >= 0.0);
        assert!(peak_kib > 0, "VmHWM of a live child");
        drop(guard);
        // killed and reaped: no zombie left in /proc
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        let err = process_stats(pid).unwrap_err();
        assert!(
            format!("{err:#}").contains(&format!("/proc/{pid}/stat")),
            "{err:#}"
        );
    }

    #[test]
    fn a_missing_causeway_binary_says_how_to_build_it() {
        let err =
            causeway_bin(Some(Path::new("/no/such/causeway")), "cargo build -p x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/no/such/causeway not found: build it with `cargo build -p x` or pass --causeway"
        );
        let sh = causeway_bin(Some(Path::new("/bin/sh")), "-").unwrap();
        assert_eq!(sh, Path::new("/bin/sh"));
    }
}
