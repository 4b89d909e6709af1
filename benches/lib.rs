//! What the benchmarks share: percentiles, and CPU time and memory read from /proc
//! (of this process, one of its threads, or a child process).

use std::time::Duration;

use anyhow::Context;

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
                let t = std::time::Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_millis(100) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                let _ = wait.recv();
                x
            })
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while threads_cpu_seconds("bench-spin").unwrap() < 0.05 {
            assert!(
                std::time::Instant::now() < deadline,
                "the spinning thread's CPU time never showed"
            );
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
}
