//! The markdown report: the figures against their goals, the setup, the command to
//! reproduce, and what bounds each figure.

use std::time::Duration;

use causeway_benches::{commit, machine, mib, ms, p50_p99_max, pct, reproduce};

use crate::Args;
use crate::controller::{Quiet, Stats};

/// Karmada's published push-mode propagation P99.
const KARMADA_P99: Duration = Duration::from_millis(1300);
/// Part 2's goal.
const GOAL_P99: Duration = Duration::from_millis(300);
/// Part 4's goal, KiB.
const GOAL_RSS_KIB: u64 = 250 * 1024;

/// Part 1: the policy → every copy.
pub struct Part1 {
    /// The policy's creation → the last copy seen in a member.
    pub copies: Duration,
    /// The policy's creation → the last binding seen FullyApplied.
    pub applied: Duration,
    /// The policy's creation → the controller quiet.
    pub settled: Quiet,
    /// Controller CPU seconds from the policy's creation to settled.
    pub cpu: f64,
    /// Controller CPU seconds before the policy (start, caches, member workers).
    pub startup_cpu: f64,
    /// Write requests from the policy's creation to settled (hub, then members).
    pub writes: Vec<u64>,
}

/// Part 2: template changes.
pub struct Part2 {
    /// Per change: the hub write → the last member's watch delivering it.
    pub last: Vec<Duration>,
    /// Per change and member.
    pub each: Vec<Duration>,
    /// Controller CPU seconds over the part.
    pub cpu: f64,
}

/// Part 3: a restart with nothing changed.
pub struct Part3 {
    /// Before the restart (after part 2): quiet again.
    pub before_restart: Quiet,
    /// Start → quiet.
    pub settled: Quiet,
    /// Write requests from the start to quiet, or to giving up (hub, then members).
    pub to_settled: Vec<u64>,
    /// Controller CPU seconds from the start to quiet.
    pub settled_cpu: f64,
    /// The whole window's length.
    pub window: Duration,
    /// Write requests over the window (hub, then members).
    pub in_window: Vec<u64>,
    /// Changes stored over the window (resourceVersion moves; hub, then members).
    pub changed: Vec<u64>,
    /// The restarted process at the end of the window.
    pub stats: Stats,
}

/// Everything measured.
pub struct Report {
    /// Member names.
    pub members: Vec<String>,
    /// Creating the templates on the hub.
    pub populate: Duration,
    pub part1: Part1,
    pub part2: Part2,
    /// The first controller process (parts 1 and 2) when it was stopped.
    pub first: Stats,
    pub part3: Part3,
    /// The whole run.
    pub total: Duration,
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// "hub 12, member-1 0, member-2 0" for counts in server order.
fn per_server(names: &[String], counts: &[u64]) -> String {
    std::iter::once("hub")
        .chain(names.iter().map(String::as_str))
        .zip(counts)
        .map(|(n, c)| format!("{n} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "12.3 s", or what the controller was still doing when the wait gave up.
fn quiet(q: &Quiet, names: &[String]) -> String {
    match q {
        Quiet::After(d) => secs(*d),
        Quiet::Never {
            limit,
            writes_per_second,
            cpu,
        } => format!(
            "**never quiet** within {}: still writing {} per second, at {:.0} % of a core",
            secs(*limit),
            per_server(names, writes_per_second),
            cpu * 100.0
        ),
    }
}

/// Member writes only (every server but the first, the hub).
fn member_total(counts: &[u64]) -> u64 {
    counts.iter().skip(1).sum()
}

impl Report {
    /// The report as markdown.
    pub fn markdown(&self, args: &Args) -> String {
        let m = self.members.len();
        let objects = (args.deployments + args.configmaps) as u64;
        let (p1, p2, p3) = (&self.part1, &self.part2, &self.part3);
        let mut last = p2.last.clone();
        last.sort();
        let p99 = pct(&last, 0.99);
        let vs_karmada = if p2.last.is_empty() {
            "-".to_string()
        } else {
            let r = KARMADA_P99.as_secs_f64() / p99.as_secs_f64().max(1e-3);
            if r >= 1.0 {
                format!("{r:.1} (ours {r:.1}× faster)")
            } else {
                format!("{r:.2} (ours {:.1}× slower)", 1.0 / r)
            }
        };
        let goal = |ok: bool| if ok { "met" } else { "**missed**" };
        let peak = self.first.peak_kib.max(p3.stats.peak_kib);
        let mut out = format!(
            "# Propagation benchmark: {d} Deployments + {c} ConfigMaps → {m} members\n\n\
Command: `cargo build --release -p causeway-controllers && {cmd}`\n\n\
Date: {date} (commit {commit}, working tree shared with engineers' uncommitted work). Machine: {machine}.\n\n\
Setup: a kubesim hub and {m} kubesim members in the bench process, **workload simulation off in the members** \
(no ReplicaSets or Pods are made, so the figures are propagation's and not kubesim's pod simulation; Deployment \
status in the members stays empty), joined with the e2e harness's `causeway join` (push mode). The hub controller \
is the `causeway controller` binary in its own process (`--log warn --leader-elect=false`: one replica), so its CPU time and peak RSS (VmHWM) are \
its own. Templates: {d} Deployments (1 replica, one container) and {c} ConfigMaps in namespace `bench`, labelled \
`bench=propagation`, created before the controller starts; one PropagationPolicy selects both kinds by that \
label for every member (Duplicated). Member copies are seen by watches on each member, stamped on receipt. \
The whole run took {total:.0} s.\n\n\
| # | measurement | result | goal / reference |\n|---|---|---|---|\n\
| | create the templates on the hub ({objects} objects, {par} at a time) | {pop} | |\n\
| 1 | policy created → every copy in every member ({copies_n} objects) | {copies} | |\n\
| 1 | policy created → every binding `FullyApplied=True` ({objects}) | {applied} | |\n\
| 1 | policy created → controller quiet ({q} s without writes, under 5 % of a core) | {settled} | |\n\
| 1 | write requests, policy → quiet | {w1} ({w1_hub:.1} per template on the hub, {w1_per:.2} per member copy) | |\n",
            d = args.deployments,
            c = args.configmaps,
            cmd = reproduce("bench-propagation"),
            date = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
            commit = commit(),
            machine = machine(),
            total = self.total.as_secs_f64(),
            par = crate::PARALLEL,
            pop = secs(self.populate),
            copies_n = objects * m as u64,
            copies = secs(p1.copies),
            applied = secs(p1.applied),
            q = args.quiet.as_secs(),
            settled = quiet(&p1.settled, &self.members),
            w1 = per_server(&self.members, &p1.writes),
            w1_hub = p1.writes[0] as f64 / objects as f64,
            w1_per = member_total(&p1.writes) as f64 / (objects * m as u64) as f64,
        );
        if !p2.last.is_empty() {
            out += &format!(
                "| 2 | template change → the last of {m} members has it, p50 / p99 / max ({k} changes) | {lastp} | p99 < 300 ms ({g2}); Karmada push P99 1.3 s |\n\
| 2 | Karmada's P99 ÷ ours | {vs} | |\n\
| 2 | template change → each member, p50 / p99 / max ({km} samples) | {eachp} | |\n",
                k = p2.last.len(),
                lastp = p50_p99_max(&p2.last),
                g2 = goal(p99 < GOAL_P99),
                vs = vs_karmada,
                km = p2.each.len(),
                eachp = p50_p99_max(&p2.each),
            );
        }
        out += &format!(
            "| 3 | before the restart (after part 2): quiet | {s2} | |\n\
| 3 | controller restart (cold start, nothing changed) → quiet | {s3} | |\n\
| 3 | member write requests, restart → quiet | {mw3} ({w3}) | 0 ({g3}) |\n\
| 3 | member write requests over {win:.0} s from the restart (holds the 60 s periodic resync) | {mw3w} ({w3w}) | 0 ({g3w}) |\n\
| 3 | hub write requests, restart → quiet / over the window | {hw3} / {hw3w} | |\n\
| 3 | changes stored over the window (resourceVersion moves) | {ch3} | |\n\
| 4 | controller peak RSS (VmHWM): parts 1–2 process / restarted process | {rss1} / {rss3} | < 250 MiB ({g4}) |\n\
| 4 | controller CPU: start + caches before the policy / part 1 / part 2 / part 3 to quiet / part 3 window | {cs:.1} s / {c1:.1} s / {c2:.1} s / {c3:.1} s / {c3w:.1} s | |\n",
            s3 = quiet(&p3.settled, &self.members),
            s2 = quiet(&p3.before_restart, &self.members),
            mw3 = member_total(&p3.to_settled),
            w3 = per_server(&self.members, &p3.to_settled),
            g3 = goal(member_total(&p3.to_settled) == 0),
            win = p3.window.as_secs_f64(),
            mw3w = member_total(&p3.in_window),
            w3w = per_server(&self.members, &p3.in_window),
            g3w = goal(member_total(&p3.in_window) == 0),
            hw3 = p3.to_settled[0],
            hw3w = p3.in_window[0],
            ch3 = per_server(&self.members, &p3.changed),
            rss1 = mib(self.first.peak_kib as i64),
            rss3 = mib(p3.stats.peak_kib as i64),
            g4 = goal(peak < GOAL_RSS_KIB),
            cs = p1.startup_cpu,
            c1 = p1.cpu,
            c2 = p2.cpu,
            c3 = p3.settled_cpu,
            c3w = p3.stats.cpu,
        );
        out += &format!(
            "\n## What bounds each figure\n\n\
- **Policy → every copy.** One detector round claims every template and writes {objects} bindings; each binding \
is rendered into {m} Works ({works} in all), and each member's applier server-side applies its Works' manifests. \
Every step is an API write on one of the {servers} API servers that share 2 cores with the controller and the \
bench's watches, so the figure is write throughput, not latency.\n\
- **Template change → members.** The hub's template watch → the detector's binding (its template resourceVersion) \
→ render → the Work's update → the member applier's Work watch → one server-side apply in each member → the \
bench's member watch. Measured from just before the hub PATCH to the arrival of the member's watch event, with \
{gap} between changes; the changes go round the Deployments ({k} of them), so no key's backoff is involved.\n\
- **Restart writes.** Write requests are kubesim's count of create/update/patch/delete requests that are not \
dry runs (`Server::write_requests`), whether they change anything or not; stored changes are resourceVersion \
moves. A cold start lists everything and runs a full round; the applier writes a member object only when the \
member's copy does not already contain the desired fields (`causeway_runtime::apply`), so a restart with \
nothing changed should send no write to a member.\n\
- **CPU and RSS.** /proc of the controller process (user + system; VmHWM); the API servers are in the bench \
process and not counted.\n",
            works = objects * m as u64,
            servers = m + 1,
            gap = ms(args.change_gap),
            k = args.deployments,
        );
        out
    }
}
