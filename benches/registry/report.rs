//! The markdown report: a table of the figures, the machine, the command to reproduce,
//! and what bounds each figure.

use std::time::Duration;

use causeway_benches::{commit, machine, mib, p50_p99_max, pct, reproduce};
use causeway_controllers::clusters::lease::renew_interval;
use causeway_controllers::clusters::options::Timing;

use crate::Args;
use crate::pull::Cuts;

/// CPU and memory over one window.
pub struct Window {
    /// This process's CPU seconds (all threads).
    pub process_cpu: f64,
    /// The controller runtime's threads' CPU seconds.
    pub controller_cpu: f64,
    /// The window's real length.
    pub elapsed: Duration,
    /// VmRSS when it began, KiB.
    pub rss_before_kib: u64,
    /// VmRSS when it ended, KiB.
    pub rss_after_kib: u64,
}

impl Window {
    fn percent(&self, cpu: f64) -> f64 {
        100.0 * cpu / self.elapsed.as_secs_f64()
    }
}

/// Everything measured.
pub struct Report {
    /// The timing the controller and agents ran with.
    pub timing: Timing,
    /// All joins, one after another.
    pub joins: Duration,
    /// Per member: join returned → first seen Ready=True.
    pub to_ready: Vec<Duration>,
    /// First join returned → the last member Ready.
    pub all_ready: Option<Duration>,
    /// The API servers alone.
    pub floor: Window,
    /// With the controller, at steady state.
    pub steady: Window,
    /// Part 3, unless skipped.
    pub cuts: Option<Cuts>,
    /// The whole run.
    pub total: Duration,
}

/// p50 / p99 / max of `v` minus `grace`, signed, in ms.
fn minus_grace(v: &[Duration], grace: Duration) -> String {
    let mut v = v.to_vec();
    v.sort();
    let d = |p: f64| {
        format!(
            "{:+.0} ms",
            (pct(&v, p).as_secs_f64() - grace.as_secs_f64()) * 1000.0
        )
    };
    format!("{} / {} / {}", d(0.5), d(0.99), d(1.0))
}

impl Report {
    /// The report as markdown.
    pub fn markdown(&self, args: &Args) -> String {
        let n = self.to_ready.len();
        let t = &self.timing;
        let (floor, steady) = (&self.floor, &self.steady);
        let ctl_pct = steady.percent(steady.controller_cpu);
        let delta_pct = steady.percent(steady.process_cpu) - floor.percent(floor.process_cpu);
        let per_member_ms_min =
            steady.controller_cpu / steady.elapsed.as_secs_f64() * 60_000.0 / n as f64;
        let rss_growth = steady.rss_after_kib as i64 - floor.rss_after_kib as i64;
        let mut out = format!(
            "# Cluster registry benchmark: {n} members\n\n\
Command: `{}`\n\n\
Date: {} (commit {}, working tree shared with engineers' uncommitted work). Machine: {}.\n\n\
Setup, all in one process: a kubesim hub and {n} kubesim members of {nodes} nodes each; the hub controller \
(`controller::run_with`, every hub-wide loop and per member the status controller, MCS exporter and importer) \
on its own 2-thread tokio runtime; status interval {si} s, failure/success thresholds {ft} s / {st} s, \
monitor grace period {g} s (leases renewed every {ri} ms), monitor interval {mi} ms. \
The whole run took {total:.0} s.\n\n\
| measurement | result | goal / reference |\n|---|---|---|\n\
| `causeway join` of {n} members, one after another | {joins:.1} s | |\n\
| join → `Ready=True`, per member, p50 / p99 / max | {ready} | Karmada: < 2 s for one cluster (resource modelling off) |\n\
| first join → every Cluster `Ready=True` | {all} | |\n\
| hub controller CPU at steady state, its threads only ({w:.0} s window) | {ctl:.2} % of a core ({pm:.1} ms CPU per member per minute) | < 2 % of a core for 100 members |\n\
| process CPU with the controller − the floor without it (adds the API servers' work for it) | {delta:.2} % of a core | |\n\
| floor: {servers} API servers alone ({w:.0} s window) | {floor_pct:.2} % of a core | |\n\
| RSS growth from the floor to the end of the controller window (controller + its watches' server side) | {growth} ({gpm} per member) | |\n\
| RSS during the controller window: start → end | {rss0} → {rss1} | flat |\n",
            reproduce("bench-registry"),
            jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
            commit(),
            machine(),
            nodes = args.nodes,
            si = t.status_interval.as_secs_f64(),
            ft = t.failure_threshold.as_secs_f64(),
            st = t.success_threshold.as_secs_f64(),
            g = t.monitor_grace_period.as_secs_f64(),
            ri = renew_interval(t.lease_duration()).as_millis(),
            mi = t.monitor_interval.as_millis(),
            total = self.total.as_secs_f64(),
            joins = self.joins.as_secs_f64(),
            ready = p50_p99_max(&self.to_ready),
            all = self
                .all_ready
                .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64())),
            w = steady.elapsed.as_secs_f64(),
            ctl = ctl_pct,
            pm = per_member_ms_min,
            delta = delta_pct,
            servers = n + 1,
            floor_pct = floor.percent(floor.process_cpu),
            growth = mib(rss_growth),
            gpm = mib(rss_growth / n as i64),
            rss0 = mib(steady.rss_before_kib as i64),
            rss1 = mib(steady.rss_after_kib as i64),
        );
        if let Some(c) = &self.cuts {
            let g = t.monitor_grace_period;
            out += &format!(
                "| Pull: `register` → `Ready=True` (agent's first status), p50 / p99 / max ({k} members) | {ready} | |\n\
| Pull: agent cut off → `Ready=Unknown`, p50 / p99 / max | {unknown} | |\n\
| … minus the grace period ({gs} s) | {unknown_g} | ≈ 0 |\n\
| Pull: agent cut off → tainted `cluster.causeway.io/unreachable`, minus the grace period | {tainted_g} | |\n",
                k = c.unknown.len(),
                ready = p50_p99_max(&c.ready),
                unknown = p50_p99_max(&c.unknown),
                gs = g.as_secs_f64(),
                unknown_g = minus_grace(&c.unknown, g),
                tainted_g = minus_grace(&c.tainted, g),
            );
        }
        out += &format!(
            "\n## What bounds each figure\n\n\
- **Join → Ready.** The controller follows Clusters and their credential Secrets by watch; a new member gets its \
workers at once and the status controller probes `/readyz` as soon as it starts, then posts `Ready=True` \
(a first condition is not damped). So the figure is watch delivery + a client and TLS handshake + one probe + \
one status write, under the load of {n} joins in a row on 2 shared cores; the status interval ({si} s) bounds it \
only when the first probe fails.\n\
- **Steady-state CPU.** Per member and status interval the controller probes `/readyz`, reads the Cluster and \
writes nothing (the status has not changed); the version is re-read every 30 rounds; the exporter and importer \
hold idle watches (kubesim sends a bookmark every 5 s on each). The controller's own figure counts only its \
runtime's threads; the process difference also counts what the API servers spend answering it. Both scale with \
members ÷ status interval.\n\
- **RSS.** Process-wide (the allocator's arenas included), so it is an upper bound for the controller's share.\n",
            si = t.status_interval.as_secs_f64(),
        );
        if self.cuts.is_some() {
            out += &format!(
                "- **Cut → Unknown.** The monitor ages a Pull member from the last lease renewal (or Ready change) \
it *observed*; the agent renews every {ri} ms (a quarter of the lease), so the cut falls up to {ri} ms after the \
last renewal, and the monitor looks every {mi} ms (and on every change). Expected cut → Unknown − grace: between \
−{ri} ms and +{mi} ms plus a watch delivery. The taint follows in the next monitor round: the Unknown status write \
moves the Cluster's resourceVersion, so the taint patch of the same round (optimistic concurrency) loses and is \
retried when the watch brings the new Cluster.\n",
                ri = renew_interval(t.lease_duration()).as_millis(),
                mi = t.monitor_interval.as_millis(),
            );
        }
        out
    }
}
