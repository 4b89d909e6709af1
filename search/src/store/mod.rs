//! The index's storage: one query layer over an embedded SQLite database (the default,
//! one file, nothing to install) and PostgreSQL (`postgres://…`). Both hold the same
//! versioned schema: a `resources` table keyed by (group, version, resource, cluster,
//! namespace, name) with indexes on labels (a `labels` table), owner uid and creation
//! time, and a `types` table the indexer fills and the API's discovery reads.
//!
//! SQL is built at run time by one builder ([`sql`]) for both dialects; the backends only
//! run it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::query::{Owner, Query, QueryError};

pub mod fields;
mod idle;
mod placement;
mod postgres;
mod record;
pub use record::{Listed, resource_version_of, stored_version};
pub(crate) use record::{annotate, cut};
mod schema;
pub(crate) mod sql;
mod sqlite;
mod versions;
use versions::Builder as VersionsBuilder;
pub use versions::Versions;
pub mod testing;
#[cfg(test)]
mod tests;

use k8s_validation::selector::Requirement;
use sql::{Cell, Dialect, Drive, Search, Stmt};

/// A resource type: group (`""` for core), version, plural resource name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group, `""` for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `deployments`.
    pub resource: String,
}

impl Gvr {
    /// `apps/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// What discovery needs to serve a type; the indexer records it when it resolves the
/// type on a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// The type.
    pub gvr: Gvr,
    /// Its kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

/// One object to store, as the indexer hands it over.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Member cluster name.
    pub cluster: String,
    /// Its type.
    pub gvr: Gvr,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// The stored version: `metadata.resourceVersion` (opaque; ordered numerically when
    /// it is a number), suffixed for names-only copies ([`stored_version`]).
    pub resource_version: String,
    /// The uid of the controller owner reference (else the first owner reference).
    pub owner_uid: Option<String>,
    /// `metadata.creationTimestamp`, Unix milliseconds.
    pub created_at: Option<i64>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// The object as JSON text, without `managedFields`.
    pub object: String,
}

impl Record {
    /// Its [`Key`], borrowed: compares as the key does.
    fn ordering(&self) -> (&str, &Gvr, &str, &str) {
        (&self.cluster, &self.gvr, &self.namespace, &self.name)
    }
}

/// Which object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Member cluster name.
    pub cluster: String,
    /// Its type.
    pub gvr: Gvr,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows inserted or updated.
    pub written: u64,
    /// Records whose stored resourceVersion and uid were already the same: not written.
    pub unchanged: u64,
}

/// What a caller may see (hub RBAC): `None` means no restriction on that dimension.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these clusters.
    pub clusters: Option<BTreeSet<String>>,
    /// Only these namespaces.
    pub namespaces: Option<BTreeSet<String>>,
}

/// One page of results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// The objects, each annotated with its cluster ([`crate::CLUSTER_ANNOTATION`]).
    pub items: Vec<Value>,
    /// The keyset continue token, when the page was full and more may follow.
    pub continue_token: Option<String>,
    /// Objects left after this page (`withRemainingCount`).
    pub remaining: Option<i64>,
}

/// A store error: an outage (retry later) or a bad query (the caller's fault, HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or refused the write; the indexer pauses and
    /// relists after recovery.
    #[error("the search store is unavailable: {0}")]
    Unavailable(String),
    /// The request cannot be run as given.
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// Whether `spec` is a libpq keyword/value string (`host=db dbname=x`), which would
/// otherwise be taken for a SQLite file name.
fn is_conninfo(spec: &str) -> bool {
    spec.split_whitespace().any(|w| {
        [
            "host=",
            "hostaddr=",
            "dbname=",
            "user=",
            "port=",
            "password=",
        ]
        .iter()
        .any(|k| w.starts_with(k))
    })
}

/// A store result.
pub type StoreResult<T> = Result<T, StoreError>;

/// One database: PostgreSQL, or one of the SQLite store's files.
enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(Box<postgres::Postgres>),
}

impl Backend {
    fn dialect(&self) -> Dialect {
        match self {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// A statement with more parameters than the database takes is a bad request (HTTP
    /// 400), refused before it is sent (SQLite: an error; PostgreSQL: a broken
    /// connection).
    fn check_params(&self, stmt: &Stmt) -> StoreResult<()> {
        let (n, max) = (stmt.params.len(), self.dialect().max_params());
        if n > max {
            return Err(StoreError::Query(QueryError(format!(
                "the query needs {n} values, more than the {} store takes ({max}): give fewer names=, namespaces= or clusters= values, or a narrower owner search",
                self.dialect().name()
            ))));
        }
        Ok(())
    }

    async fn rows(&self, stmt: Stmt) -> StoreResult<Vec<Vec<Cell>>> {
        self.check_params(&stmt)?;
        match self {
            Backend::Sqlite(b) => b.rows(stmt).await,
            Backend::Postgres(b) => b.rows(stmt).await,
        }
    }

    /// Folds the rows of a read into `acc` one by one, never holding them all.
    async fn fold<T: Send + 'static>(
        &self,
        stmt: Stmt,
        acc: T,
        f: fn(&mut T, Vec<Cell>),
    ) -> StoreResult<T> {
        self.check_params(&stmt)?;
        match self {
            Backend::Sqlite(b) => b.fold(stmt, acc, f).await,
            Backend::Postgres(b) => b.fold(stmt, acc, f).await,
        }
    }

    /// Runs statements in one transaction; the rows each changed.
    async fn execute(&self, stmts: Vec<Stmt>) -> StoreResult<Vec<u64>> {
        for s in &stmts {
            self.check_params(s)?;
        }
        match self {
            Backend::Sqlite(b) => b.execute(stmts).await,
            Backend::Postgres(b) => b.execute(stmts).await,
        }
    }

    async fn texts(&self, stmt: Stmt) -> StoreResult<Vec<String>> {
        let rows = self.rows(stmt).await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().map(Cell::text))
            .collect())
    }

    /// The first cell of the first row, as a number (0 without one).
    async fn int(&self, stmt: Stmt) -> StoreResult<i64> {
        let rows = self.rows(stmt).await?;
        Ok(rows.first().and_then(|r| r.first()).map_or(0, Cell::int))
    }
}

/// One database of the store and when its planner statistics are refreshed.
struct Part {
    db: Backend,
    stats: parking_lot::Mutex<Stats>,
}

struct Inner {
    dialect: Dialect,
    /// PostgreSQL: one; SQLite: one per file, the first also holding `types` and
    /// `placements`.
    parts: Vec<Part>,
    /// Which SQLite file holds each cluster (none for PostgreSQL: one database).
    placement: Option<placement::Placement>,
    writes: AtomicU64,
    /// [`NAME_WALK_STEPS`]; 0 drives every fuzzy name from the trigram index (tests).
    name_walk_steps: AtomicU64,
    /// [`DRIVE_MAX`] (tests lower it to take the paths of many matches on few rows).
    drive_max: std::sync::atomic::AtomicI64,
}

/// SQLite files a store is made with unless told ([`Store::open_with`]). More ingest
/// faster (on 2 cores, 1.2M objects at 11.8-13.8k/s with one file, 17.5-20.8k/s with
/// four). Searches right after a large ingest into four files were slow until the
/// readers reloaded the planner's statistics ([`sqlite`]); the two runs since met every
/// goal (benches/results/search.md).
pub const DEFAULT_SQLITE_FILES: usize = 4;

/// The most SQLite files a store may be made with.
pub const MAX_SQLITE_FILES: usize = 64;

/// The path of a SQLite store's file `i`: the path given for the first, then
/// `index.1.db`, `index.2.db`… beside it for `index.db`.
fn sqlite_file(path: &str, i: usize) -> String {
    if i == 0 {
        return path.to_string();
    }
    let p = std::path::Path::new(path);
    let name = match (p.file_stem(), p.extension()) {
        (Some(stem), Some(ext)) => {
            format!("{}.{i}.{}", stem.to_string_lossy(), ext.to_string_lossy())
        }
        _ => format!(
            "{}.{i}",
            p.file_name().unwrap_or_default().to_string_lossy()
        ),
    };
    p.with_file_name(name).display().to_string()
}

/// The files of the SQLite store whose first file is `path`, those that exist (a copy
/// of the store copies them all).
pub fn sqlite_files(path: &str) -> Vec<String> {
    (0..MAX_SQLITE_FILES)
        .map(|i| sqlite_file(path, i))
        .filter(|f| std::path::Path::new(f).exists())
        .collect()
}

/// The placements recorded in a SQLite store's first file.
async fn placements(first: &Backend) -> StoreResult<Vec<(String, placement::Placed)>> {
    let rows = first.rows(sql::placements(first.dialect())).await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let part = r.get(1).map_or(0, Cell::int);
            let purged = r.get(2).is_some_and(|c| c.int() != 0);
            let cluster = r.into_iter().next().map(Cell::text).unwrap_or_default();
            let file = usize::try_from(part).unwrap_or(0);
            (cluster, placement::Placed { file, purged })
        })
        .collect())
}

/// The placements as the files say: a cluster is purged when its file holds none of
/// its objects (a store from before migration 5 recorded no purge; a purge whose mark
/// was not written) and live when it holds some (a cluster written again by another
/// handle that had not seen the purge). Corrected rows are written back.
async fn reconcile(
    parts: &[Part],
    placed: Vec<(String, placement::Placed)>,
) -> StoreResult<Vec<(String, placement::Placed)>> {
    let Some(first) = parts.first().map(|p| &p.db) else {
        return Ok(placed);
    };
    let d = first.dialect();
    let mut out = Vec::with_capacity(placed.len());
    for (cluster, mut p) in placed {
        if let Some(part) = parts.get(p.file) {
            let purged = part.db.int(sql::has_objects(d, &cluster)).await? == 0;
            if purged != p.purged {
                let fix = if purged {
                    sql::mark_purged(d, &cluster)
                } else {
                    sql::place(d, &cluster, p.file)
                };
                first.execute(vec![fix]).await?;
                p.purged = purged;
            }
        }
        out.push((cluster, p));
    }
    Ok(out)
}

/// A label requirement selecting at most this many objects drives the search.
const DRIVE_MAX: i64 = 20_000;

/// PostgreSQL: a fuzzy-name page is sorted from the name's matches when there are at
/// most this many ([`sql::fuzzy_page`]). Fetching them costs up to about 30 ms at a
/// million Pods (a common string's first 2,001 matches, by a scan that stops there:
/// 12 ms); with more matches the planner's walk of the order index finds a page at
/// once.
const FUZZY_PAGE_MAX: i64 = 2_000;

/// SQLite VM steps a fuzzy-name search may walk the order index for before it is
/// driven from the trigram index instead (a page of common matches takes about 10,000;
/// a scan of a million names about 3.3 million, 90 ms).
const NAME_WALK_STEPS: u64 = 400_000;

/// The trigrams ([`sql::trigrams`], by index) a fuzzy name is driven from on SQLite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameDrivers {
    /// The two rarest, the rarer held by at most [`DRIVE_MAX`] names (or by none:
    /// nothing matches).
    Rare([usize; 2]),
    /// Every trigram is held by more: the first and the last (the farthest apart,
    /// so the least likely to come together), after a walk.
    Common([usize; 2]),
    /// The name has no trigrams the store can count: the index's own `LIKE`.
    Unknown,
}

impl NameDrivers {
    /// From each trigram's count of names, capped above `cap` (rare: at most `cap`).
    fn choose(counts: &[i64], cap: i64) -> NameDrivers {
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by_key(|&i| counts[i]);
        match order[..] {
            [] => NameDrivers::Unknown,
            [i, ..] if counts[i] == 0 => NameDrivers::Rare([i, i]),
            [i] if counts[i] <= cap => NameDrivers::Rare([i, i]),
            [i, j, ..] if counts[i] <= cap => NameDrivers::Rare([i, j]),
            _ => NameDrivers::Common([0, counts.len() - 1]),
        }
    }
}

/// Keys per DELETE statement (six parameters each).
const DELETE_CHUNK: usize = 200;
/// Objects of a cluster deleted per transaction when it is purged.
pub(crate) const PURGE_BATCH: usize = 5_000;

/// Rows written before the first statistics refresh.
const ANALYZE_AFTER: u64 = 5_000;

/// When the planner's statistics are refreshed: each time the table (roughly) doubles,
/// so the planners choose between labels_kv and the order indexes by selectivity.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Stats {
    /// Rows written since the last refresh.
    since: u64,
    /// Rows written before it.
    before: u64,
}

impl Stats {
    /// Counts `rows` written; `Some(rows since the last refresh)` when a refresh is due
    /// (counted as done: [`Stats::not_refreshed`] takes it back).
    fn wrote(&mut self, rows: u64) -> Option<u64> {
        self.since += rows;
        if self.since < ANALYZE_AFTER.max(self.before) {
            return None;
        }
        let since = std::mem::take(&mut self.since);
        self.before += since;
        Some(since)
    }

    /// The refresh [`Stats::wrote`] asked for failed: the next write asks again.
    fn not_refreshed(&mut self, since: u64) {
        self.before -= since;
        self.since += since;
    }
}

/// The search index's storage (SQLite or PostgreSQL), cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// Opens (creating and migrating) a store: `postgres://…`/`postgresql://…` is
    /// PostgreSQL; `sqlite:PATH` or a plain path is an SQLite file (parent dirs made).
    pub async fn open(spec: &str) -> StoreResult<Store> {
        Store::open_with(spec, DEFAULT_SQLITE_FILES).await
    }

    /// [`Store::open`], a SQLite store made with `sqlite_files` files (one writer each;
    /// a store made with more keeps them). PostgreSQL ignores it.
    pub async fn open_with(spec: &str, sqlite_files: usize) -> StoreResult<Store> {
        if !(1..=MAX_SQLITE_FILES).contains(&sqlite_files) {
            return Err(StoreError::Query(QueryError(format!(
                "a SQLite store has 1 to {MAX_SQLITE_FILES} files, not {sqlite_files}"
            ))));
        }
        if is_conninfo(spec) {
            return Err(StoreError::Query(QueryError(format!(
                "{:?} looks like a PostgreSQL key=value connection string: give it as a URL, postgres://USER[:PASSWORD]@HOST[:PORT]/DB (a plain path is a SQLite file)",
                spec.split_whitespace().next().unwrap_or_default()
            ))));
        }
        let part = |db| Part {
            db,
            stats: parking_lot::Mutex::new(Stats::default()),
        };
        let (dialect, parts, placement) =
            if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
                let db = Backend::Postgres(Box::new(postgres::Postgres::open(spec).await?));
                (Dialect::Postgres, vec![part(db)], None)
            } else {
                let path = spec.strip_prefix("sqlite:").unwrap_or(spec);
                let first = Backend::Sqlite(sqlite::Sqlite::open(path, sqlite_files).await?);
                let placed = placements(&first).await?;
                let files = placement::files_needed(sqlite_files, placed.iter().map(|p| p.1.file));
                let mut parts = vec![part(first)];
                for i in 1..files {
                    let db = sqlite::Sqlite::open(&sqlite_file(path, i), files).await?;
                    parts.push(part(Backend::Sqlite(db)));
                }
                let placed = reconcile(&parts, placed).await?;
                let placement = placement::Placement::new(files, placed);
                (Dialect::Sqlite, parts, Some(placement))
            };
        Ok(Store {
            inner: Arc::new(Inner {
                dialect,
                parts,
                placement,
                writes: AtomicU64::new(0),
                name_walk_steps: AtomicU64::new(NAME_WALK_STEPS),
                drive_max: std::sync::atomic::AtomicI64::new(DRIVE_MAX),
            }),
        })
    }

    /// Files of a SQLite store (1 for PostgreSQL).
    pub fn files(&self) -> usize {
        self.inner.parts.len()
    }

    fn part(&self, i: usize) -> &Backend {
        &self.inner.parts[i].db
    }

    /// The database holding `types` and `placements`.
    fn first(&self) -> &Backend {
        self.part(0)
    }

    /// Every part's index.
    fn all_parts(&self) -> Vec<usize> {
        (0..self.inner.parts.len()).collect()
    }

    /// The parts that may hold objects of `clusters` (every part when `None`). A
    /// cluster this handle has not seen placed is looked for in the first file's
    /// placements first (another process, the indexer, may have placed it): at once
    /// when `now`, else at most once every [`placement::RELOAD_EVERY`] (a search naming
    /// a cluster that has no objects does not read them each time).
    async fn parts_of(&self, clusters: Option<&[String]>, now: bool) -> StoreResult<Vec<usize>> {
        let (Some(clusters), Some(placement)) = (clusters, &self.inner.placement) else {
            return Ok(self.all_parts());
        };
        if clusters.iter().any(|c| placement.of(c).is_none()) && (now || placement.may_reload()) {
            let beyond = placement.reload(placements(self.first()).await?);
            if beyond > 0 {
                tracing::error!(
                    clusters = beyond,
                    files = placement.files(),
                    "search store: another process placed clusters in SQLite files this one did not open; restart it to search them"
                );
            }
        }
        Ok(placement.files_of(clusters))
    }

    /// The part of a cluster's objects, if it has any stored.
    async fn part_of(&self, cluster: &str) -> StoreResult<Option<usize>> {
        let parts = self.parts_of(Some(&[cluster.to_string()]), true).await?;
        Ok(parts.first().copied())
    }

    /// The part a cluster's objects are written to: placed now if it is new, the
    /// placement written to the first file before any object.
    async fn part_to_write(&self, cluster: &str) -> StoreResult<usize> {
        let Some(placement) = &self.inner.placement else {
            return Ok(0);
        };
        if let Some(p) = placement.live(cluster) {
            return Ok(p);
        }
        let _placing = placement.placing.lock().await;
        if let Some(p) = placement.live(cluster) {
            return Ok(p);
        }
        // another handle (another process) may have placed it: the recorded file wins;
        // a purged cluster goes back to its file, live again
        let d = self.dialect();
        let chosen = placement.of(cluster).unwrap_or_else(|| placement.choose());
        self.first()
            .execute(vec![sql::place(d, cluster, chosen)])
            .await?;
        let placed = self.first().int(sql::placement_of(d, cluster)).await?;
        let p = usize::try_from(placed)
            .ok()
            .filter(|p| *p < self.inner.parts.len())
            .ok_or_else(|| {
                StoreError::Unavailable(format!(
                    "cluster {cluster:?} is placed in SQLite file {placed}, which this process did not open: restart it"
                ))
            })?;
        placement.record(cluster, p);
        Ok(p)
    }

    /// Sets how long a SQLite read may run (tests; PostgreSQL has statement_timeout).
    #[cfg(test)]
    pub(crate) fn set_read_deadline(&self, d: std::time::Duration) {
        for p in &self.inner.parts {
            if let Backend::Sqlite(b) = &p.db {
                *b.read_deadline.lock() = d;
            }
        }
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn backend(&self) -> &'static str {
        self.dialect().name()
    }

    fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// Rows inserted, updated or deleted through this handle since it was opened.
    pub fn writes(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) -> u64 {
        self.inner.writes.fetch_add(n, Ordering::Relaxed);
        n
    }

    /// Stores records; a record whose stored resourceVersion and uid are the same is not
    /// written (another uid at the same resourceVersion is another object: a member
    /// re-created under its name counts resourceVersions from 1 again). Of several records with one key, the last wins. A record PostgreSQL
    /// refuses (bad data: SQLSTATE class 22 or 54) is skipped with a warning and
    /// counted neither written nor unchanged; the others are stored. The records of
    /// one part (SQLite file) are written in one transaction, the parts in parallel.
    ///
    /// Records already in key order without repeats (the indexer's batches) are written
    /// as they are: a caller that retries keeps one copy and passes clones of the `Arc`.
    pub async fn upsert(&self, records: impl Into<Arc<[Record]>>) -> StoreResult<Written> {
        let mut records: Arc<[Record]> = records.into();
        if !records
            .windows(2)
            .all(|w| w[0].ordering() < w[1].ordering())
        {
            // out of order or with repeats: in key order, the last of each key
            let mut last: BTreeMap<Key, &Record> = BTreeMap::new();
            for r in records.iter() {
                last.insert(r.key(), r);
            }
            records = last.into_values().cloned().collect();
        }
        let total = records.len() as u64;
        if records.is_empty() {
            return Ok(Written::default());
        }
        // the runs of one cluster (the records are in key order, cluster first), each
        // with its part
        let mut runs: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let mut i = 0;
        while i < records.len() {
            let c = &records[i].cluster;
            let n = records[i..].iter().take_while(|r| &r.cluster == c).count();
            runs.push((self.part_to_write(c).await?, i..i + n));
            i += n;
        }
        let groups: Vec<(usize, Arc<[Record]>)> = if runs.iter().all(|r| r.0 == runs[0].0) {
            vec![(runs[0].0, records)]
        } else {
            let mut by_part: BTreeMap<usize, Vec<Record>> = BTreeMap::new();
            for (p, range) in runs {
                by_part
                    .entry(p)
                    .or_default()
                    .extend(records[range].iter().cloned());
            }
            by_part.into_iter().map(|(p, r)| (p, r.into())).collect()
        };
        let done =
            futures::future::try_join_all(groups.into_iter().map(|(p, r)| self.upsert_in(p, r)))
                .await?;
        let (written, skipped) = done
            .into_iter()
            .fold((0, 0), |(w, s), (w1, s1)| (w + w1, s + s1));
        Ok(Written {
            written,
            unchanged: total - written - skipped,
        })
    }

    /// Writes records to one part: (written, skipped).
    async fn upsert_in(&self, part: usize, records: Arc<[Record]>) -> StoreResult<(u64, u64)> {
        let p = &self.inner.parts[part];
        // PostgreSQL skips (and logs) objects it refuses: neither written nor unchanged
        let (written, skipped) = match &p.db {
            Backend::Sqlite(b) => (b.upsert(records).await?, 0),
            Backend::Postgres(b) => b.upsert(records).await?,
        };
        self.count(written);
        let due = p.stats.lock().wrote(written);
        if let Some(rows) = due {
            // the objects are written: a refresh that fails is tried again at the next
            // write, not reported as a failed write (the indexer would write the batch
            // again, and count it unchanged)
            match p.db.execute(schema::analyze(self.dialect())).await {
                Ok(_) => match &p.db {
                    Backend::Postgres(b) => {
                        b.vacuum();
                    }
                    Backend::Sqlite(b) => b.analyzed(),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "search store: the planner's statistics were not refreshed; the next write tries again");
                    p.stats.lock().not_refreshed(rows);
                }
            }
        }
        Ok((written, skipped))
    }

    /// Deletes objects (and their labels); returns how many were stored.
    pub async fn delete(&self, keys: impl AsRef<[Key]>) -> StoreResult<u64> {
        let keys = keys.as_ref();
        if keys.is_empty() {
            return Ok(0);
        }
        let d = self.dialect();
        // a cluster never placed has nothing stored
        let mut by_part: BTreeMap<usize, Vec<Key>> = BTreeMap::new();
        for k in keys {
            if let Some(p) = self.part_of(&k.cluster).await? {
                by_part.entry(p).or_default().push(k.clone());
            }
        }
        // one transaction per part, the parts in parallel; chunks keep each
        // statement's parameters well under the limits
        let deletes = by_part.into_iter().map(|(p, keys)| async move {
            let stmts = keys
                .chunks(DELETE_CHUNK)
                .flat_map(|c| sql::delete_keys(d, c))
                .collect();
            let done = self.part(p).execute(stmts).await?;
            Ok::<u64, StoreError>(self.count(done.iter().skip(1).step_by(2).sum()))
        });
        Ok(futures::future::try_join_all(deletes).await?.iter().sum())
    }

    /// The stored keys of one cluster and type, with their resourceVersions and uids.
    pub async fn versions(&self, cluster: &str, gvr: &Gvr) -> StoreResult<Versions> {
        let Some(p) = self.part_of(cluster).await? else {
            return Ok(VersionsBuilder::default().finish());
        };
        // row by row into one buffer: a relist of 100k objects holds that, not also
        // every row as read (the restarted indexer's peak memory)
        let v = self
            .part(p)
            .fold(
                sql::versions(self.dialect(), cluster, gvr),
                VersionsBuilder::default(),
                |v, row| {
                    let text = |i: usize| row.get(i).map(Cell::as_str).unwrap_or_default();
                    v.push(text(0), text(1), text(2), text(3));
                },
            )
            .await?;
        Ok(v.finish())
    }

    /// Deletes everything of one cluster; returns how many objects went. By batches
    /// ([`Store::purge_cluster_batch`]), each its own transaction.
    pub async fn purge_cluster(&self, cluster: &str) -> StoreResult<u64> {
        let mut n = 0;
        loop {
            let (deleted, done) = self.purge_cluster_batch(cluster).await?;
            n += deleted;
            if done {
                return Ok(n);
            }
        }
    }

    /// Deletes at most [`PURGE_BATCH`] objects of one cluster, in one transaction (a
    /// member of a million objects deleted in one would pass the store's statement
    /// timeout, and be rolled back every time); returns how many went and whether the
    /// cluster is purged. Then its placement stays, marked purged: it no longer counts
    /// when a new cluster is placed, and if it comes back its objects go to the same
    /// file.
    pub async fn purge_cluster_batch(&self, cluster: &str) -> StoreResult<(u64, bool)> {
        let Some(p) = self.part_of(cluster).await? else {
            return Ok((0, true));
        };
        let d = self.dialect();
        let ids: Vec<i64> = self
            .part(p)
            .rows(sql::cluster_ids(d, cluster, PURGE_BATCH))
            .await?
            .iter()
            .filter_map(|row| row.first().map(Cell::int))
            .collect();
        let mut n = 0;
        if !ids.is_empty() {
            let done = self
                .part(p)
                .execute(sql::delete_ids(d, &ids).to_vec())
                .await?;
            n = self.count(done.get(1).copied().unwrap_or(0));
        }
        if ids.len() == PURGE_BATCH {
            return Ok((n, false));
        }
        if let Some(placement) = &self.inner.placement {
            let _placing = placement.placing.lock().await;
            self.first()
                .execute(vec![sql::mark_purged(self.dialect(), cluster)])
                .await?;
            placement.mark_purged(cluster);
        }
        Ok((n, true))
    }

    /// The clusters with at least one stored object.
    pub async fn clusters(&self) -> StoreResult<Vec<String>> {
        self.union(self.all_parts(), sql::clusters(self.dialect()))
            .await
    }

    /// The distinct namespaces holding objects of a type (in `clusters`; empty: all).
    pub async fn namespaces(&self, gvr: &Gvr, clusters: &[String]) -> StoreResult<Vec<String>> {
        let parts = self
            .parts_of((!clusters.is_empty()).then_some(clusters), false)
            .await?;
        self.union(parts, sql::namespaces(self.dialect(), gvr, clusters))
            .await
    }

    /// The first column's values over `parts`, sorted, once each.
    async fn union(&self, parts: Vec<usize>, stmt: Stmt) -> StoreResult<Vec<String>> {
        let reads = parts.iter().map(|&p| self.part(p).texts(stmt.clone()));
        let all: BTreeSet<String> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        Ok(all.into_iter().collect())
    }

    /// Records (or updates) a type for discovery.
    pub async fn set_type(&self, t: &TypeInfo) -> StoreResult<()> {
        self.first()
            .execute(vec![sql::set_type(self.dialect(), t)])
            .await?;
        Ok(())
    }

    /// Every recorded type, by group, version, resource.
    pub async fn types(&self) -> StoreResult<Vec<TypeInfo>> {
        let rows = self.first().rows(sql::types(self.dialect())).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let namespaced = r.get(4).is_some_and(|c| c.int() != 0);
                let mut r = r.into_iter().map(Cell::text);
                let mut next = || r.next().unwrap_or_default();
                TypeInfo {
                    gvr: Gvr {
                        group: next(),
                        version: next(),
                        resource: next(),
                    },
                    kind: next(),
                    namespaced,
                }
            })
            .collect())
    }

    /// Checks every database answers (SQLite: that a write could start in each file,
    /// see [`sqlite::Sqlite::ping`]).
    pub async fn ping(&self) -> StoreResult<()> {
        let pings = self.inner.parts.iter().map(|p| async move {
            match &p.db {
                Backend::Sqlite(b) => b.ping().await,
                Backend::Postgres(_) => {
                    let one = Stmt {
                        sql: "SELECT 1".into(),
                        params: vec![],
                    };
                    p.db.rows(one).await.map(drop)
                }
            }
        });
        futures::future::try_join_all(pings).await.map(drop)
    }

    /// The owner uids an owner search selects: the owner's uid(s), then `seniority`
    /// levels down through owner_uid (each level one indexed query; no nested JSON), in
    /// the owner's cluster (`None`: its cluster has nothing stored).
    async fn owner_uids(&self, q: &Query) -> StoreResult<Option<Vec<String>>> {
        let Some(o) = &q.owner else {
            return Ok(None);
        };
        let d = self.dialect();
        let cluster = q.owner_cluster();
        let owned = self.parts_of(Some(&[cluster.to_string()]), false).await?;
        let Some(&part) = owned.first() else {
            return Ok(Some(Vec::new()));
        };
        let db = self.part(part);
        let mut uids = match &o.owner {
            Owner::Uid(u) => vec![u.clone()],
            Owner::Name {
                name,
                group_resource,
            } => {
                let rows = self
                    .first()
                    .rows(sql::type_versions(d, group_resource))
                    .await?;
                // a cluster-scoped owner (a Node) has no namespace: `namespaces=` only
                // filters the objects searched, not the owner
                let cluster_scoped = rows.iter().any(|r| r.get(1).is_some_and(|c| c.int() == 0));
                let versions: Vec<String> = rows
                    .into_iter()
                    .filter_map(|r| r.into_iter().next().map(Cell::text))
                    .collect();
                let namespaces: &[String] = if cluster_scoped { &[] } else { &q.namespaces };
                db.texts(sql::owner_uids_by_name(
                    d,
                    cluster,
                    name,
                    group_resource,
                    namespaces,
                    &versions,
                ))
                .await?
            }
        };
        // each level keeps only uids not seen on a level above: an owner cycle (A owns
        // B owns A) ends the walk instead of going round it
        let mut seen: BTreeSet<String> = uids.iter().cloned().collect();
        for _ in 0..o.seniority {
            if uids.is_empty() {
                break;
            }
            uids = db.texts(sql::owned_uids(d, cluster, &uids)).await?;
            uids.retain(|u| seen.insert(u.clone()));
        }
        Ok(Some(uids))
    }

    /// The most selective of the positive label requirements and (SQLite) the owner
    /// search's owned objects in one part, when it selects at most `cap` objects
    /// (index-only counts, each capped there; [`DRIVE_MAX`] over every file searched).
    async fn drive(
        &self,
        db: &Backend,
        q: &Query,
        labels: &[Requirement],
        owners: Option<&[String]>,
        cap: i64,
    ) -> StoreResult<Option<Drive>> {
        let d = self.dialect();
        let mut counts: Vec<(Drive, Stmt)> = sql::label_counts(d, labels, cap + 1)
            .into_iter()
            .map(|(i, count)| (Drive::Label(i), count))
            .collect();
        if let (Some(owners), Dialect::Sqlite) = (owners, d) {
            let count = sql::owned_count(d, q.owner_cluster(), owners, cap + 1);
            counts.push((Drive::Owner, count));
        }
        let mut best: Option<(i64, Drive)> = None;
        for (drive, count) in counts {
            let n = db.int(count).await?;
            if n <= cap && best.is_none_or(|(m, _)| n < m) {
                best = Some((n, drive));
            }
        }
        Ok(best.map(|(_, drive)| drive))
    }

    /// Which of a fuzzy name's trigrams ([`sql::trigrams`]) to drive it from in one
    /// part (SQLite's names index), from their counts capped above `cap`.
    async fn name_drivers(&self, db: &Backend, fuzzy: &str, cap: i64) -> StoreResult<NameDrivers> {
        let Some(trigrams) = sql::trigrams(fuzzy) else {
            return Ok(NameDrivers::Unknown);
        };
        let rows = db.rows(sql::trigram_counts(&trigrams, cap + 1)).await?;
        let counts: Vec<i64> = rows
            .into_iter()
            .next()
            .unwrap_or_default()
            .iter()
            .map(Cell::int)
            .collect();
        Ok(NameDrivers::choose(&counts, cap))
    }

    /// One page of the objects of a type that the query selects and the scope allows,
    /// in the query's order, each annotated with its cluster: each part that may hold
    /// the clusters asked for is searched with its own plan, and the pages merged.
    pub async fn search(&self, gvr: &Gvr, q: &Query, scope: &Scope) -> StoreResult<Page> {
        let labels = match &q.label_selector {
            Some(s) => k8s_validation::selector::parse(s)
                .map_err(|e| QueryError(format!("labelSelector {s:?}: {e}")))?,
            None => Vec::new(),
        };
        let fields = match &q.field_selector {
            Some(s) => fields::parse(s)?,
            None => Vec::new(),
        };
        let owners = self.owner_uids(q).await?;
        // the files of the clusters asked for, else of those the caller may see
        let clusters: Option<Vec<String>> = if q.clusters.is_empty() {
            scope.clusters.as_ref().map(|c| c.iter().cloned().collect())
        } else {
            Some(q.clusters.clone())
        };
        let search = Search {
            gvr,
            q,
            scope,
            labels: &labels,
            fields: &fields,
            owners: owners.as_deref(),
            drive: None,
        };
        let parts = self.parts_of(clusters.as_deref(), false).await?;
        // a driver fetches its rows in every file searched: together at most DRIVE_MAX
        let cap = self.inner.drive_max.load(Ordering::Relaxed) / parts.len().max(1) as i64;
        let plans = parts.into_iter().map(|p| self.plan(p, search, cap));
        let plans = futures::future::try_join_all(plans).await?;
        self.page(q, plans).await
    }

    /// How one part answers `s`: what drives it there, and its rows when a walk read
    /// them already.
    /// A driver may select at most `cap` objects there.
    async fn plan<'a>(&self, part: usize, mut s: Search<'a>, cap: i64) -> StoreResult<Plan<'a>> {
        let db = self.part(part);
        let q = s.q;
        s.drive = self.drive(db, q, s.labels, s.owners, cap).await?;
        let mut walked = None;
        if let (None, Some(fuzzy), Backend::Sqlite(b)) = (
            s.drive,
            q.fuzzy_name
                .as_deref()
                .filter(|f| sql::fts_pattern(f).is_some()),
            db,
        ) {
            // a fuzzy name with a rare trigram is driven from the trigram index at
            // once; one whose every trigram is common may match many objects, which
            // fill a page early in the order index, or few (as a combination): walk
            // with a budget, then drive from the index
            let drivers = self.name_drivers(db, fuzzy, cap).await?;
            let steps = self.inner.name_walk_steps.load(Ordering::Relaxed);
            if steps > 0 && !matches!(drivers, NameDrivers::Rare(_)) {
                let page = sql::search_page(self.dialect(), &s)?;
                db.check_params(&page)?;
                walked = b.rows_within(page, steps).await?;
            }
            if walked.is_none() {
                s.drive = Some(Drive::Name(match drivers {
                    NameDrivers::Rare(t) | NameDrivers::Common(t) => Some(t),
                    NameDrivers::Unknown => None,
                }));
            }
        }
        if let (None, Some(_), Backend::Postgres(_)) = (s.drive, &q.fuzzy_name, db) {
            // the page from the name's first `cap` matches, if there are no more (else
            // the planner's own plan: with many matches, walking the order index finds
            // a page early)
            let most = cap.min(FUZZY_PAGE_MAX);
            let page = sql::fuzzy_page(&s, most)?;
            db.check_params(&page)?;
            let mut rows = db.rows(page).await?;
            let matched = rows.first().and_then(|r| r.last()).map_or(0, Cell::int);
            if matched <= most {
                for r in &mut rows {
                    r.pop();
                }
                walked = Some(rows);
            }
        }
        Ok(Plan {
            part,
            search: s,
            rows: walked,
        })
    }

    /// The rows of a statement in the first part (tests: the schema, query plans).
    #[cfg(test)]
    pub(crate) async fn rows(&self, stmt: Stmt) -> StoreResult<Vec<Vec<Cell>>> {
        self.first().rows(stmt).await
    }

    /// The sum over every part of a statement's first cell (tests: `COUNT(*)`s).
    #[cfg(test)]
    pub(crate) async fn sum(&self, stmt: Stmt) -> StoreResult<i64> {
        let mut n = 0;
        for p in &self.inner.parts {
            n += p.db.int(stmt.clone()).await?;
        }
        Ok(n)
    }

    /// The page `s` selects, driven as it says in every part (tests of a drive).
    #[cfg(test)]
    pub(crate) async fn page_of(&self, s: &Search<'_>) -> StoreResult<Page> {
        let plans = self
            .all_parts()
            .into_iter()
            .map(|part| Plan {
                part,
                search: *s,
                rows: None,
            })
            .collect();
        self.page(s.q, plans).await
    }

    /// The page the plans select: each part's rows (read now unless a walk read them),
    /// merged in the query's order; the count after them if asked, the continue token
    /// and the annotated objects.
    async fn page(&self, q: &Query, mut plans: Vec<Plan<'_>>) -> StoreResult<Page> {
        let d = self.dialect();
        let reads = plans.iter_mut().map(|p| {
            let (part, search, walked) = (p.part, p.search, p.rows.take());
            async move {
                match walked {
                    Some(rows) => Ok(rows),
                    None => self.part(part).rows(sql::search_page(d, &search)?).await,
                }
            }
        });
        let mut rows: Vec<Vec<Cell>> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        if plans.len() > 1 {
            // each part's rows are in order: a stable sort merges the runs
            rows.sort_by(|a, b| sql::compare_rows(&q.order, a, b));
        }
        let more = q.limit.is_some_and(|l| rows.len() > l as usize);
        if more {
            rows.truncate(q.limit.unwrap_or_default() as usize);
        }
        let last = rows.last().map(|r| sql::sort_values(&q.order, r));
        let remaining = match (&last, q.with_remaining_count) {
            (Some(last), true) if more => {
                let counts = plans.iter().map(|p| async move {
                    let count = sql::count_after(d, &p.search, last)?;
                    self.part(p.part).int(count).await
                });
                Some(futures::future::try_join_all(counts).await?.iter().sum())
            }
            (_, true) => Some(0),
            (_, false) => None,
        };
        let continue_token = match last {
            Some(last) if more && q.with_continue => Some(q.continue_after(last)),
            _ => None,
        };
        let items = rows
            .into_iter()
            .map(|r| {
                let mut cells = r.into_iter();
                let object = cells.next().map(Cell::text).unwrap_or_default();
                let cluster = cells.next().map(Cell::text).unwrap_or_default();
                record::annotated(&object, &cluster)
            })
            .collect();
        Ok(Page {
            items,
            continue_token,
            remaining,
        })
    }
}

/// How one part answers a search ([`Store::plan`]).
struct Plan<'a> {
    part: usize,
    search: Search<'a>,
    /// Its rows, when the plan read them already (a budgeted walk, a fuzzy page).
    rows: Option<Vec<Vec<Cell>>>,
}
