//! The markdown report: the figures of each store against their goals, the setup, the
//! command to reproduce, and what bounds each figure.

use std::fmt::Write as _;
use std::time::Duration;

use causeway_benches::process::Stats;
use causeway_benches::{commit, machine, mib, ms, p50_p99_max, pct, reproduce};

use crate::Args;
use crate::indexer::Kind;
use crate::objects::Shape;
use crate::queries::{DEEP_PAGE, Timings};

/// Ingest goal, objects per second.
const GOAL_RATE: f64 = 20_000.0;
/// Peak RSS goal, KiB.
const GOAL_RSS_KIB: u64 = 300 * 1024;
/// Query p99 goal.
const GOAL_P99: Duration = Duration::from_millis(50);

/// One store's figures.
pub struct Backend {
    /// "sqlite" or "postgres".
    pub name: String,
    /// Objects the members hold (of the indexed types).
    pub expected: u64,
    /// Indexer start → every object written.
    pub ingest: Duration,
    /// The indexer at that point.
    pub ingested: Stats,
    /// CPU seconds of the bench process (the members and hub) over the ingest.
    pub ingest_members_cpu: f64,
    /// (path, counted through the API, expected).
    pub counted: Vec<(&'static str, u64, u64)>,
    /// Query timings.
    pub timings: Timings,
    /// The indexer after the queries.
    pub queried: Stats,
    /// Restart → every object compared (written + unchanged = expected).
    pub relist: Duration,
    /// Store writes of the restarted indexer's relist.
    pub relist_written: u64,
    /// Store deletes of the relist.
    pub relist_deleted: u64,
    /// Objects purged by the restarted indexer (members it took for gone).
    pub relist_purged: u64,
    /// The restarted process.
    pub restarted: Stats,
    /// CPU seconds of the bench process (the members and hub) over the relist.
    pub relist_members_cpu: f64,
    /// Which indexer ran.
    pub kind: Kind,
}

/// The whole run.
pub struct Report {
    /// Each member's objects.
    pub shape: Shape,
    /// The members.
    pub members: Vec<String>,
    /// Journals written and the clusterset restarted on them.
    pub populate: Duration,
    /// Per store, in the order measured.
    pub backends: Vec<Backend>,
    /// The whole run.
    pub total: Duration,
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

fn sorted(v: &[Duration]) -> Vec<Duration> {
    let mut v = v.to_vec();
    v.sort();
    v
}

impl Backend {
    fn rate(&self) -> f64 {
        self.expected as f64 / self.ingest.as_secs_f64()
    }

    fn p99(v: &[Duration]) -> Duration {
        pct(&sorted(v), 0.99)
    }

    /// p50 of page `i` (0-based) over the deep walks that reached it, and how many did.
    fn deep_page(&self, i: usize) -> (Duration, usize) {
        let at: Vec<Duration> = self
            .timings
            .deep
            .iter()
            .filter_map(|w| w.get(i).copied())
            .collect();
        (pct(&sorted(&at), 0.5), at.len())
    }

    fn deepest(&self) -> usize {
        self.timings.deep.iter().map(Vec::len).max().unwrap_or(0)
    }
}

impl Report {
    /// The report.
    pub fn markdown(&self, args: &Args) -> String {
        let objects = self.shape.objects() * self.members.len() as u64;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# Search benchmark: {} members × {} Pods ({objects} objects)\n",
            self.members.len(),
            self.shape.pods
        );
        let _ = writeln!(
            s,
            "Command: `cargo build --release -p causeway-controllers && {}`\n",
            reproduce("bench-search")
        );
        let _ = writeln!(
            s,
            "Date: {} (commit {}, working tree shared with engineers' uncommitted work). Machine: {}.\n",
            jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
            commit(),
            machine()
        );
        let indexer = match self.backends.first().map(|b| b.kind) {
            Some(Kind::Child) => {
                "the indexer of `causeway-search` alone (`bench-search indexer`, `--indexer child`: `causeway search serve` was not available), in its own process; queries go straight to the store (`Store::search`, no HTTP)"
            }
            _ => {
                "the `causeway search serve` binary in its own process (`--log warn`); queries through its HTTPS API with the hub admin's bearer token, one keep-alive client, one request at a time"
            }
        };
        let _ = writeln!(
            s,
            "Setup: a kubesim hub and {} kubesim members in the bench process, **workload simulation off**. Each member holds {} Pods, {} ReplicaSets and {} Deployments (Pod → ReplicaSet → Deployment owner references, ~10 Pods per ReplicaSet) in {} namespaces, labelled app, team, tier, pod-template-hash and version; written straight into the members' kubesim journals, which they replay at start ({:.1} s for all). The members are joined with `causeway join` and their Clusters marked Ready=True on the hub by the bench (no hub controller runs: its member watches would compete for the cores). Indexed types: Deployments, ReplicaSets, Pods (whole objects). The indexer: {indexer}. PostgreSQL: PostgreSQL 15 from `scripts/postgres start`, **fsync=off, synchronous_commit=off, full_page_writes=off** (non-durable), shared_buffers=256MB, a fresh database per run; SQLite: {} in a temp dir (WAL, synchronous=NORMAL; `CAUSEWAY_SEARCH_SQLITE_FILES` sets how many). The whole run took {:.0} s.\n",
            self.members.len(),
            self.shape.pods,
            self.shape.deployments(),
            self.shape.deployments(),
            self.shape.namespaces(),
            self.populate.as_secs_f64(),
            match sqlite_files() {
                1 => "one file".to_string(),
                n => format!("{n} files, each with its own writer"),
            },
            self.total.as_secs_f64()
        );
        let names: Vec<&str> = self
            .backends
            .iter()
            .map(|b| match b.name.as_str() {
                "sqlite" => "SQLite",
                "postgres" => "PostgreSQL",
                other => other,
            })
            .collect();
        let _ = writeln!(s, "| measurement | {} | goal |", names.join(" | "));
        let _ = writeln!(s, "|---|{}---|", "---|".repeat(names.len()));
        let mut row = |what: &str, f: &dyn Fn(&Backend) -> String, goal: &str| {
            let cells: Vec<String> = self.backends.iter().map(f).collect();
            let _ = writeln!(s, "| {what} | {} | {goal} |", cells.join(" | "));
        };
        row(
            &format!("ingest: start → all {objects} objects stored"),
            &|b| format!("{:.1} s", b.ingest.as_secs_f64()),
            "",
        );
        row(
            "ingest rate",
            &|b| format!("{:.0} objects/s ({})", b.rate(), met(b.rate() >= GOAL_RATE)),
            "≥ 20,000/s",
        );
        row(
            "indexer peak RSS (VmHWM) at every object stored",
            &|b| {
                format!(
                    "{} ({})",
                    mib(b.ingested.peak_kib as i64),
                    met(b.ingested.peak_kib < GOAL_RSS_KIB)
                )
            },
            "< 300 MiB",
        );
        row(
            "CPU, start → every object stored: indexer / the members (kubesim, bench process)",
            &|b| format!("{:.1} s / {:.1} s", b.ingested.cpu, b.ingest_members_cpu),
            "",
        );
        row(
            "objects the API counts (Deployments, ReplicaSets, Pods)",
            &|b| {
                if b.counted.is_empty() {
                    "not counted (no API)".into()
                } else {
                    let all_ok = b.counted.iter().all(|(_, n, want)| n == want);
                    let ns: Vec<String> = b.counted.iter().map(|(_, n, _)| n.to_string()).collect();
                    format!(
                        "{} ({})",
                        ns.join(" + "),
                        if all_ok { "all" } else { "**missing some**" }
                    )
                }
            },
            "",
        );
        let q = |v: fn(&Timings) -> &Vec<Duration>| {
            move |b: &Backend| {
                let v = v(&b.timings);
                format!("{} ({})", p50_p99_max(v), met(Backend::p99(v) < GOAL_P99))
            }
        };
        let n = |v: fn(&Timings) -> &Vec<Duration>| {
            self.backends.first().map_or(0, |b| v(&b.timings).len())
        };
        row(
            &format!(
                "label + namespace (`tier=…,version in (v1,v2,v3)` in one namespace, every member), limit 100, up to 5 pages by continue token: p50 / p99 / max per page ({} pages)",
                n(|t| &t.label_pages)
            ),
            &q(|t| &t.label_pages),
            "p99 < 50 ms",
        );
        row(
            &format!(
                "owner search (`ownerName=<deployment>&ownerGR=deployments.apps&ownerSeniority=1&clusters=<one>`, 10 Pods): p50 / p99 / max ({})",
                n(|t| &t.owner)
            ),
            &q(|t| &t.owner),
            "p99 < 50 ms",
        );
        row(
            &format!(
                "fuzzy name (`fuzzyName=<deployment name>`, every member), limit 100: p50 / p99 / max ({})",
                n(|t| &t.fuzzy)
            ),
            &q(|t| &t.fuzzy),
            "p99 < 50 ms",
        );
        row(
            "deep keyset paging (`tier=…` in every member, limit 100): page 1 / page 10 / deepest page, p50 over 5 walks",
            &|b| {
                let (p1, _) = b.deep_page(0);
                let (p10, _) = b.deep_page(9.min(b.deepest().saturating_sub(1)));
                let last = b.deepest();
                let (pl, walks) = b.deep_page(last.saturating_sub(1));
                format!(
                    "{} / {} / {} (page {last}, {walks} walks)",
                    ms(p1),
                    ms(p10),
                    ms(pl)
                )
            },
            &format!("page {DEEP_PAGE} ≈ page 1"),
        );
        row(
            "answers not matching what the members hold",
            &|b| {
                if b.timings.wrong.is_empty() {
                    "0".into()
                } else {
                    format!(
                        "**{}**: {}",
                        b.timings.wrong.len(),
                        b.timings
                            .wrong
                            .iter()
                            .take(3)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                }
            },
            "0",
        );
        row(
            "indexer peak RSS after the queries / CPU over the queries",
            &|b| {
                format!(
                    "{} / {:.1} s",
                    mib(b.queried.peak_kib as i64),
                    b.queried.cpu - b.ingested.cpu
                )
            },
            "",
        );
        row(
            "restart on the same store → every object compared (relist)",
            &|b| format!("{:.1} s", b.relist.as_secs_f64()),
            "",
        );
        row(
            "store writes of the restart's relist (written / deleted / purged)",
            &|b| {
                format!(
                    "{} / {} / {} ({})",
                    b.relist_written,
                    b.relist_deleted,
                    b.relist_purged,
                    met(b.relist_written + b.relist_deleted + b.relist_purged == 0)
                )
            },
            "0 (K.71)",
        );
        row(
            "restarted indexer: peak RSS / CPU to relisted; the members' CPU over the relist",
            &|b| {
                format!(
                    "{} / {:.1} s; {:.1} s",
                    mib(b.restarted.peak_kib as i64),
                    b.restarted.cpu,
                    b.relist_members_cpu
                )
            },
            "",
        );
        let _ = args;
        s.push_str(BOUNDS);
        s
    }
}

const BOUNDS: &str = "
## What bounds each figure

- **Ingest.** From the start of the indexer process to its `search_indexer_objects_written_total`
  reaching the number of objects the members hold (read every 100 ms). It includes the process
  start, reading the hub's Clusters, discovery on each member, the members' paged lists (kubesim
  in the bench process serializes every object, on the same 2 cores) and the store's batched
  upserts. The API's count (`limit=1&withRemainingCount=true` per type) checks that every object
  is there.
- **RSS and CPU.** /proc of the indexer process (VmHWM; user + system). The members, the hub and
  the bench's client run in the bench process and are not counted.
- **Queries.** Wall time of one request, sent when the previous one has been answered, through
  one keep-alive HTTPS connection (kube-rs client, as kubectl), including JSON encoding and
  decoding of up to 100 Pods. The label + namespace search walks up to 5 pages by continue token;
  each page is a sample. Every answer is checked (namespace and tier of each item, 10 Pods per
  owner search, at least one Pod per member for a fuzzy name); mismatches are listed above.
- **Deep paging.** Continue tokens are keysets (the last row's sort key), so page 50 costs an
  index seek, not an offset scan of 4,900 rows.
- **Restart.** The same database and data directory; the relist compares each listed object's
  resourceVersion with the stored one (K.71), so nothing changed means no write: the figure is
  `search_indexer_objects_written_total` + `…_deleted_total` + `…_purged_total` of the restarted
  process when written + unchanged covers every object.

## Reference points

- Clusterpedia publishes no ingest or query figures; its owner queries are known to degrade past
  about 40,000 events (clusterpedia#488).
";

/// How many files a SQLite store of the bench is made of: `CAUSEWAY_SEARCH_SQLITE_FILES`
/// (which `causeway search serve` and the child indexer read), else the default.
pub fn sqlite_files() -> usize {
    std::env::var("CAUSEWAY_SEARCH_SQLITE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(causeway_search::store::DEFAULT_SQLITE_FILES)
}
