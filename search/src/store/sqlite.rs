//! The SQLite backend: one file in WAL mode, a writer connection and a few readers, all
//! used from blocking threads. A short busy timeout makes a locked or broken database
//! an [`StoreError::Unavailable`] rather than a hang.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, params_from_iter};

use super::idle::Dirty;
use super::schema;
use super::sql::{self, Cell, Dialect, Param, Stmt};
use super::{Record, StoreError, StoreResult};

const READERS: usize = 3;

/// WAL pages between two checkpoints of a store's writers, shared by its files (see
/// [`connect`] and [`writing`]).
const WAL_PAGES: i64 = 40_000;

/// WAL pages between two checkpoints of one file's writer, however many files.
const MIN_WAL_PAGES: i64 = 10_000;

/// SQLite VM steps between two calls of the progress handler (deadline and budget).
const PROGRESS_STEPS: u64 = 10_000;

/// How long one read may run before SQLite interrupts it (a field selector over a
/// large type parses every row's JSON): a reader is never held for longer, whoever asks.
pub(crate) const READ_DEADLINE: Duration = Duration::from_secs(30);

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

pub(crate) struct Sqlite {
    writer: Arc<Mutex<Connection>>,
    /// Batches waiting for the writer: the first blocking call to get the writer
    /// writes every one of them in one transaction (group commit).
    pending: Arc<Mutex<Vec<Pending>>>,

    readers: Vec<Arc<Mutex<Reader>>>,
    /// The file and the readers' page cache (KiB), to open a reader again.
    path: std::path::PathBuf,
    reader_cache: i64,
    /// Statistics refreshes (ANALYZE) the writer has made: a reader that has seen fewer
    /// is opened again before its next read. SQLite loads the planner's statistics
    /// when a connection reads the schema, and another connection's ANALYZE does not
    /// reload them, so a reader opened on an empty file planned with none for its life.
    analyzed: Arc<std::sync::atomic::AtomicU64>,
    next: AtomicUsize,
    /// When the writer last committed, if it has not checkpointed since
    /// ([`idle_checkpoint`]).
    committed: Dirty,
    /// [`READ_DEADLINE`], shorter in tests.
    pub(crate) read_deadline: parking_lot::Mutex<Duration>,
}

/// Page cache of a writer, KiB.
const WRITER_CACHE_KIB: i64 = 16_384;

/// Page cache of the readers of a store of one file, KiB each; a store of several
/// files gives each file's readers their share.
const READER_CACHE_KIB: i64 = 16_384;

fn connect(path: &Path, cache_kib: i64) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(1))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "NORMAL")?;
    // 16 MiB for a writer and 3 readers of one file: the OS page cache holds the
    // rest; 64 MiB each took the indexer past 300 MiB RSS after queries at 1M
    // objects, and so did 16 MiB for each reader of 4 files (288 MiB)
    c.pragma_update(None, "cache_size", -cache_kib)?;
    // ANALYZE reads every index entry (about 3 CPU-seconds at 1.2M objects, once per
    // doubling of the table): a limit samples each index from its start, which at
    // 1,000 entries said an owner owns a thousand objects (the owner index starts with
    // the objects that have none) and the planner walked a cluster for an owner search
    c.pragma_update(None, "analysis_limit", 0)?;
    // a checkpoint every 40,000 WAL pages (160 MiB of WAL at most), not 1,000: a page
    // the indexer's batches keep changing is copied back to the database file once per
    // checkpoint, not once per batch (in a writer-only run, not kept as a bench, the
    // writer took 72 us per object at 10,000 pages, 62 at 50,000, 57 with none; the
    // whole indexer's figures are in benches/results/search.md)
    c.pragma_update(None, "wal_autocheckpoint", WAL_PAGES)?;
    Ok(c)
}

/// The writer's own settings, for a file of a store of `files`. Its log is
/// checkpointed every [`WAL_PAGES`]` / files` pages (at least [`MIN_WAL_PAGES`]): a
/// reader looks each page up in the log's index, so the logs of a search's files
/// together stay near one file's 160 MiB. Statement journals (a statement's undo, while
/// a batch's transaction is open) stay in memory rather than in a temporary file. The
/// planner does not plan by bound values (STAT4): a statement it planned so, such as
/// the labels' `DELETE … WHERE rid = ?1` or FTS5's own, was prepared again at every new
/// value.
fn writing(c: &Connection, files: usize) -> rusqlite::Result<()> {
    let pages = (WAL_PAGES / files.max(1) as i64).max(MIN_WAL_PAGES);
    c.pragma_update(None, "wal_autocheckpoint", pages)?;
    c.pragma_update(None, "temp_store", "MEMORY")?;
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// A write transaction: it takes the write lock at once, so a busy database is waited
/// for (the busy timeout); a deferred one that reads first (the upsert does) would get
/// SQLITE_BUSY at once, without waiting, on upgrading to a writer.
fn begin_write(c: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

fn migrate(c: &mut Connection) -> rusqlite::Result<()> {
    let tx = c.transaction()?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let done: i64 = tx.query_row(
        "SELECT COALESCE(MAX(version), 0) FROM schema_version",
        [],
        |r| r.get(0),
    )?;
    let mut migrated = false;
    for (i, m) in schema::migrations(Dialect::Sqlite).iter().enumerate() {
        let v = i as i64 + 1;
        if v > done {
            tx.execute_batch(m)?;
            tx.execute("INSERT INTO schema_version (version) VALUES (?1)", [v])?;
            migrated = true;
        }
    }
    tx.commit()?;
    if migrated && done > 0 {
        // an upgraded store's new indexes have no statistics until the next refresh
        // (when the table doubles): without them the planner took the namespace-first
        // index for a page in the default order and sorted every row of the type
        c.execute_batch("ANALYZE")?;
    }
    Ok(())
}

fn params(ps: &[Param]) -> impl Iterator<Item = SqlValue> + '_ {
    ps.iter().map(|p| match p {
        Param::Text(s) => SqlValue::Text(s.clone()),
        Param::Int(i) => SqlValue::Integer(*i),
        Param::Path(p) => SqlValue::Text(sql::sqlite_path(p)),
    })
}

fn cell(v: ValueRef<'_>) -> Cell {
    match v {
        ValueRef::Null => Cell::Null,
        ValueRef::Integer(i) => Cell::Int(i),
        ValueRef::Real(f) => Cell::Text(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Cell::Text(String::from_utf8_lossy(t).into()),
    }
}

const UPSERT: &str = "INSERT INTO resources (grp, version, resource, cluster, namespace, name, uid,
        resource_version, rv_num, owner_uid, created_at, object)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
    ON CONFLICT (grp, version, resource, cluster, namespace, name) DO UPDATE SET
        uid = excluded.uid, resource_version = excluded.resource_version,
        rv_num = excluded.rv_num, owner_uid = excluded.owner_uid,
        created_at = excluded.created_at, object = excluded.object
    WHERE resources.resource_version <> excluded.resource_version OR resources.uid <> excluded.uid
    RETURNING id";

/// Writes batches in one transaction, returning how many rows of each were written.
/// The new rows' names go to the trigram index
/// (`resources_names`) at the end, one single-row statement each, not by a trigger:
/// FTS5 flushes its pending terms to disk (a segment, and merge work) at every
/// statement savepoint once it takes part in a transaction, and SQLite opens one for
/// each upsert (a statement that may abort after a first write): with the trigger, that
/// was a flush per object, a fifth of the writer's CPU; now it is one per transaction.
/// Row ids are the table's largest plus one (SQLite's rule while it is below
/// `i64::MAX`), so an id above the largest at the start is a new row: it has no labels
/// to clear and its name is not indexed yet (once: two batches may hold one object).
fn upsert(c: &mut Connection, batches: &[&[Record]]) -> rusqlite::Result<Vec<u64>> {
    let tx = begin_write(c)?;
    let mut counts = Vec::with_capacity(batches.len());
    {
        let last: i64 = tx
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM resources")?
            .query_row([], |r| r.get(0))?;
        let mut up = tx.prepare_cached(UPSERT)?;
        let mut clear = tx.prepare_cached("DELETE FROM labels WHERE rid = ?1")?;
        let mut label =
            tx.prepare_cached("INSERT INTO labels (rid, key, value) VALUES (?1, ?2, ?3)")?;
        let mut names = std::collections::BTreeMap::new();
        for records in batches {
            let mut written = 0;
            for r in records.iter() {
                let id: Option<i64> = up
                    .query_row(
                        rusqlite::params![
                            r.gvr.group,
                            r.gvr.version,
                            r.gvr.resource,
                            r.cluster,
                            r.namespace,
                            r.name,
                            r.uid,
                            r.resource_version,
                            r.rv_num(),
                            r.owner_uid,
                            r.created_at.unwrap_or(0),
                            r.object,
                        ],
                        |row| row.get(0),
                    )
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        e => Err(e),
                    })?;
                let Some(id) = id else { continue };
                written += 1;
                // a new row's second write in this transaction (another batch) has
                // labels to clear and its name indexed already
                if id > last && !names.contains_key(&id) {
                    names.insert(id, &r.name);
                } else {
                    clear.execute([id])?;
                }
                for (k, v) in &r.labels {
                    label.execute(rusqlite::params![id, k, v])?;
                }
            }
            counts.push(written);
        }
        // last: once FTS5 is part of the transaction, every statement savepoint flushes it
        let mut name =
            tx.prepare_cached("INSERT INTO resources_names (rowid, name) VALUES (?1, ?2)")?;
        for (id, n) in names {
            name.execute(rusqlite::params![id, n])?;
        }
    }
    tx.commit()?;
    Ok(counts)
}

/// Checkpoints the WAL once the writer has been idle for [`super::idle::IDLE`] after a commit
/// ([`Dirty::upkeep`]). Between the automatic checkpoints ([`WAL_PAGES`]) the log
/// holds up to 160 MiB, and a reader looks each page it reads up in the log's index
/// (with a 465 MB log, fuzzy names took 19 s: benches/results/search.md). A complete
/// checkpoint lets readers bypass the log until the next write; an incomplete one (a
/// reader holds an old snapshot) is tried again half a second later.
async fn idle_checkpoint(
    writer: std::sync::Weak<Mutex<Connection>>,
    committed: Dirty,
    at: tokio::time::Instant,
) {
    let Some(writer) = writer.upgrade() else {
        return;
    };
    let done = tokio::task::spawn_blocking(move || {
        let c = writer.lock();
        // (busy, log frames, frames checkpointed); a write since the check waits
        let (busy, log, done): (i64, i64, i64) =
            c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if busy == 0 && log == done {
            committed.done(at);
        }
        Ok::<_, rusqlite::Error>(())
    })
    .await;
    if let Ok(Err(e)) = done {
        tracing::debug!(error = %e, "search store: an idle checkpoint failed; tried again later");
    }
}

/// A reader connection and the statistics refreshes it has loaded.
struct Reader {
    conn: Connection,
    seen: u64,
}

/// A batch waiting for the writer, and where its count goes.
struct Pending {
    records: Arc<[Record]>,
    done: tokio::sync::oneshot::Sender<StoreResult<u64>>,
}

impl Sqlite {
    /// Opens one file of a store of `files` files.
    pub async fn open(path: &str, files: usize) -> StoreResult<Sqlite> {
        let reader_cache = (READER_CACHE_KIB / files.max(1) as i64).max(2_048);
        let path = Path::new(path).to_path_buf();
        tokio::task::spawn_blocking(move || {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| unavailable(format!("cannot create {}: {e}", dir.display())))?;
            }
            let open_err = |e: rusqlite::Error| unavailable(format!("{}: {e}", path.display()));
            let mut writer = connect(&path, WRITER_CACHE_KIB).map_err(open_err)?;
            writing(&writer, files).map_err(open_err)?;
            migrate(&mut writer).map_err(open_err)?;
            let readers = (0..READERS)
                .map(|_| {
                    connect(&path, reader_cache)
                        .map(|conn| Arc::new(Mutex::new(Reader { conn, seen: 0 })))
                })
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(open_err)?;
            let writer = Arc::new(Mutex::new(writer));
            let committed = Dirty::default();
            Ok(Sqlite {
                writer,
                committed,
                pending: Arc::default(),

                readers,
                path,
                reader_cache,
                analyzed: Arc::default(),
                next: AtomicUsize::new(0),
                read_deadline: parking_lot::Mutex::new(READ_DEADLINE),
            })
        })
        .await
        .map_err(unavailable)?
        .inspect(|s: &Sqlite| {
            let writer = Arc::downgrade(&s.writer);
            s.committed
                .upkeep(move |committed, at| idle_checkpoint(writer.clone(), committed, at));
        })
    }

    async fn blocking<T: Send + 'static>(
        conn: Arc<Mutex<Connection>>,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> StoreResult<T> {
        tokio::task::spawn_blocking(move || f(&mut conn.lock()))
            .await
            .map_err(unavailable)?
            .map_err(unavailable)
    }

    pub async fn rows(&self, stmt: Stmt) -> StoreResult<Vec<Vec<Cell>>> {
        self.fold(stmt, Vec::new(), Vec::push).await
    }

    /// Folds the rows into `acc` one by one (`f`), never holding them all.
    pub async fn fold<T: Send + 'static>(
        &self,
        stmt: Stmt,
        acc: T,
        f: fn(&mut T, Vec<Cell>),
    ) -> StoreResult<T> {
        let out = self.read(stmt, None, acc, f).await?;
        out.ok_or_else(|| unavailable("a read without a budget ran out of it"))
    }

    /// The rows, or None when the statement needs more than `steps` SQLite VM steps
    /// (counted in units of [`PROGRESS_STEPS`]): the caller then asks another way.
    pub async fn rows_within(&self, stmt: Stmt, steps: u64) -> StoreResult<Option<Vec<Vec<Cell>>>> {
        self.read(
            stmt,
            Some(steps.div_ceil(PROGRESS_STEPS)),
            Vec::new(),
            Vec::push,
        )
        .await
    }

    async fn read<T: Send + 'static>(
        &self,
        stmt: Stmt,
        budget: Option<u64>,
        mut acc: T,
        f: fn(&mut T, Vec<Cell>),
    ) -> StoreResult<Option<T>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        let conn = self.readers[i].clone();
        let (path, cache) = (self.path.clone(), self.reader_cache);
        let analyzed = self.analyzed.load(Ordering::Relaxed);
        let limit = *self.read_deadline.lock();
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = over.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut r = conn.lock();
            if r.seen != analyzed {
                r.conn = connect(&path, cache)?;
                r.seen = analyzed;
            }
            let c = &mut r.conn;
            let deadline = std::time::Instant::now() + limit;
            let mut calls = 0u64;
            let out = (|| -> rusqlite::Result<T> {
                c.progress_handler(
                    PROGRESS_STEPS as i32,
                    Some(move || {
                        calls += 1;
                        if budget.is_some_and(|b| calls > b) {
                            flag.store(true, Ordering::Relaxed);
                            return true;
                        }
                        std::time::Instant::now() > deadline
                    }),
                )?;
                let mut st = c.prepare_cached(&stmt.sql)?;
                let n = st.column_count();
                let mut rows = st.query(params_from_iter(params(&stmt.params)))?;
                while let Some(r) = rows.next()? {
                    f(
                        &mut acc,
                        (0..n)
                            .map(|i| r.get_ref(i).map(cell))
                            .collect::<Result<_, _>>()?,
                    );
                }
                Ok(acc)
            })();
            if let Err(e) = c.progress_handler(0, None::<fn() -> bool>) {
                tracing::warn!(error = %e, "could not clear the SQLite read deadline");
            }
            out
        })
        .await
        .map_err(unavailable)?;
        match read {
            Ok(rows) => Ok(Some(rows)),
            Err(e) => match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::OperationInterrupted) if over.load(Ordering::Relaxed) => {
                    Ok(None)
                }
                Some(rusqlite::ErrorCode::OperationInterrupted) => {
                    Err(StoreError::Query(crate::query::QueryError(format!(
                        "the search ran longer than {limit:?} and was stopped: narrow it (clusters, namespaces, labelSelector, a page limit)"
                    ))))
                }
                _ => Err(unavailable(e)),
            },
        }
    }

    /// The writer refreshed the planner's statistics: readers load them again.
    pub fn analyzed(&self) {
        self.analyzed.fetch_add(1, Ordering::Relaxed);
    }

    pub async fn execute(&self, stmts: Vec<Stmt>) -> StoreResult<Vec<u64>> {
        let committed = self.committed.clone();
        Self::blocking(self.writer.clone(), move |c| {
            let tx = begin_write(c)?;
            let mut out = Vec::with_capacity(stmts.len());
            for s in &stmts {
                let mut st = tx.prepare_cached(&s.sql)?;
                out.push(st.execute(params_from_iter(params(&s.params)))? as u64);
            }
            tx.commit()?;
            committed.wrote();
            Ok(out)
        })
        .await
    }

    /// Whether a write could start now: takes the write lock (and gives it back), so a
    /// database another process holds locked is down for the indexer too, not only for
    /// its writes.
    pub async fn ping(&self) -> StoreResult<()> {
        Self::blocking(self.writer.clone(), |c| begin_write(c)?.rollback()).await
    }

    /// Writes a batch, in one transaction with the other batches waiting for the writer
    /// then (each synchro has one at most): a commit (its WAL frames, the trigram
    /// index's flush, a checkpoint's share) costs the same for one batch or ten, and the
    /// pages several batches change are written once.
    pub async fn upsert(&self, records: Arc<[Record]>) -> StoreResult<u64> {
        let (done, count) = tokio::sync::oneshot::channel();
        self.pending.lock().push(Pending { records, done });
        let (writer, pending) = (self.writer.clone(), self.pending.clone());
        let committed = self.committed.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = writer.lock();
            // empty when an earlier call took this batch with its own
            let group = std::mem::take(&mut *pending.lock());
            if group.is_empty() {
                return;
            }
            let batches: Vec<&[Record]> = group.iter().map(|p| &*p.records).collect();
            match upsert(&mut c, &batches) {
                Ok(counts) => {
                    committed.wrote();
                    for (p, n) in group.into_iter().zip(counts) {
                        let _ = p.done.send(Ok(n));
                    }
                }
                Err(e) => {
                    let e = e.to_string();
                    for p in group {
                        let _ = p.done.send(Err(unavailable(&e)));
                    }
                }
            }
        });
        count
            .await
            .map_err(|_| unavailable("the SQLite writer stopped before writing the batch"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::idle::IDLE;
    use crate::store::tests::record;
    use serde_json::{Value, json};

    /// A store of one file, `x.db` in a new temporary directory.
    async fn temp() -> (tempfile::TempDir, Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let s = Sqlite::open(dir.path().join("x.db").to_str().unwrap(), 1)
            .await
            .unwrap();
        (dir, s)
    }

    /// After the writer refreshes the statistics, each reader is opened again before
    /// its next read (and only then), so it plans with them: on skewed data (every row
    /// has a = 1, b is unique) a reader plans `a = 1 AND b < 5` on the index of `a`
    /// without statistics and on the index of `b` with them.
    #[tokio::test]
    async fn readers_load_the_statistics_after_a_refresh() {
        let (_dir, s) = temp().await;
        let stmt = |sql: &str| sql::Builder::new(Dialect::Sqlite).finish(sql.into());
        s.execute(vec![
            stmt("CREATE TABLE t (a INTEGER NOT NULL, b INTEGER NOT NULL)"),
            stmt("CREATE INDEX t_a ON t (a)"),
            stmt("CREATE INDEX t_b ON t (b)"),
            stmt(
                "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 1999)
                 INSERT INTO t (a, b) SELECT 1, i FROM n",
            ),
        ])
        .await
        .unwrap();
        let plan = || async {
            let rows = s
                .rows(stmt(
                    "EXPLAIN QUERY PLAN SELECT * FROM t WHERE a = 1 AND b < 5",
                ))
                .await
                .unwrap();
            let detail = rows.into_iter().map(|r| r.into_iter().last().unwrap());
            detail.map(Cell::text).collect::<Vec<_>>().join("; ")
        };
        for _ in 0..READERS {
            let p = plan().await;
            assert!(p.contains("INDEX t_a"), "no statistics yet: {p}");
        }
        s.execute(vec![stmt("ANALYZE")]).await.unwrap();
        s.analyzed();
        for _ in 0..READERS {
            let p = plan().await;
            assert!(p.contains("INDEX t_b"), "with the statistics: {p}");
        }
        assert!(s.readers.iter().all(|r| r.lock().seen == 1));
    }

    /// A writer idle after a commit checkpoints the whole log (readers then bypass it).
    #[tokio::test]
    async fn an_idle_writer_checkpoints_its_log() {
        let (dir, s) = temp().await;
        assert_eq!(s.committed.since(), None);
        let records: Vec<Record> = (0..300)
            .map(|i| record("c", "ns", &format!("o{i:03}"), "1", json!({})))
            .collect();
        s.upsert(records.into()).await.unwrap();
        assert!(s.committed.since().is_some());
        let started = std::time::Instant::now();
        while s.committed.since().is_some() {
            assert!(
                started.elapsed() < IDLE * 4,
                "no checkpoint after {:?}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(started.elapsed() >= IDLE / 2, "checkpointed while not idle");
        // the whole log is in the database: a new checkpoint has nothing left to copy
        let c = connect(&dir.path().join("x.db"), 2_048).unwrap();
        let (busy, log, done): (i64, i64, i64) = c
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!((busy, log), (0, done));
        assert!(log > 0, "the log was not restarted by a reader");
    }

    /// One transaction of two batches holding one object (a synchro that restarted while
    /// its last batch waited): the second write clears the first's labels, the name is
    /// indexed once, each batch counts its own writes.
    #[tokio::test]
    async fn a_group_writes_an_object_of_two_batches_once() {
        let (_dir, s) = temp().await;
        let labels = |l: Value| json!({"metadata": {"labels": l}});
        let a = [record(
            "c",
            "ns",
            "web",
            "1",
            labels(json!({"app": "web", "old": "yes"})),
        )];
        let b = [
            record("c", "ns", "db", "2", labels(json!({"app": "db"}))),
            record("c", "ns", "web", "3", labels(json!({"app": "web"}))),
        ];
        let counts = upsert(&mut s.writer.lock(), &[&a, &b]).unwrap();
        assert_eq!(counts, [1, 2]);
        let c = s.writer.lock();
        let count = |sql: &str| c.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(count("SELECT COUNT(*) FROM resources"), 2);
        assert_eq!(count("SELECT COUNT(*) FROM labels"), 2);
        assert_eq!(count("SELECT COUNT(*) FROM labels WHERE key = 'old'"), 0);
        assert_eq!(
            count("SELECT COUNT(*) FROM resources_names WHERE name = 'web'"),
            1
        );
        assert_eq!(count("SELECT rv_num FROM resources WHERE name = 'web'"), 3);
    }
}
