//! The PostgreSQL backend (tokio-postgres, no TLS): a few writer connections and a few
//! readers, each reconnected on its next use after an error, statements prepared once
//! per connection. Batches are written with `unnest` arrays: three statements per batch
//! whatever its size. A cluster's batches always go to the same writer ([`WRITERS`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use super::idle::Dirty;
use super::schema;
use super::sql::{Cell, Dialect, Param, Stmt};
use super::{Record, StoreError, StoreResult};
use crate::query::QueryError;

const READERS: usize = 3;
/// Writer connections. The server does a batch's work (the rows, their index entries,
/// the JSONB) in the backend of the connection that sent it, about 87 µs per object:
/// with one writer the server's share ran on one core and capped ingest near 11.5k
/// objects/s (benches/results/search.md). A batch goes to the writer of its first
/// record's cluster (the indexer's batches are one cluster and type each), so a
/// cluster's batches are written in the order they are sent; deletes, purges and
/// types go through the first writer. The indexer awaits each write of a stream
/// before the next (`indexer::synchro`), so a delete never overtakes the batch before
/// it on another connection.
const WRITERS: usize = 2;
const CACHE: usize = 512;

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// The server's own words (message, detail, SQLSTATE), not tokio-postgres' "db error".
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let detail = db.detail().map(|d| format!(": {d}")).unwrap_or_default();
            format!(
                "PostgreSQL: {}{detail} (SQLSTATE {})",
                db.message(),
                db.code().code()
            )
        }
        None => {
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            msg
        }
    }
}

/// Whether PostgreSQL refused the data itself (SQLSTATE class 22, data exception: a NUL
/// byte, text jsonb cannot hold) or its size (class 54, program limit exceeded): the
/// same request fails again, so it is not an outage.
fn refused(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| matches!(db.code().code().get(..2), Some("22" | "54")))
}

/// A refused request is the caller's (HTTP 400), anything else an outage.
fn pg_error(e: tokio_postgres::Error) -> StoreError {
    let msg = describe(&e);
    if refused(&e) {
        StoreError::Query(QueryError(msg))
    } else {
        StoreError::Unavailable(msg)
    }
}

/// How long a statement waits for a lock another session holds.
const LOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long any statement may run.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one call (connecting included) may wait for the server before its connection
/// is dropped: a little over STATEMENT_TIMEOUT, for a network cut silently (no FIN, no
/// RST), where the server's own timeouts never reach the client.
const CALL_TIMEOUT: Duration = Duration::from_secs(70);

/// How long the connection of a background VACUUM may take to open.
const VACUUM_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Keepalive probes start after this much idle time; a socket whose sent data stays
/// unacknowledged for TCP_USER_TIMEOUT is closed by the kernel.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection with its prepared statements.
struct Live {
    client: Client,
    prepared: HashMap<String, Statement>,
}

impl Live {
    async fn prepare(&mut self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await?;
        if self.prepared.len() >= CACHE {
            self.prepared.clear();
        }
        self.prepared.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// A connection slot, (re)connected when used.
struct Conn {
    config: Config,
    live: Mutex<Option<Live>>,
    /// [`CALL_TIMEOUT`], shorter in tests.
    limit: Duration,
}

type Call<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

impl Conn {
    /// Runs `f` on this connection, (re)connecting first. A call the server does not
    /// answer within `limit` drops the connection and is Unavailable, so a silently cut
    /// network cannot hold the connection's lock (the writer's: every write) forever.
    async fn call<T>(&self, f: impl for<'a> FnOnce(&'a mut Live) -> Call<'a, T>) -> StoreResult<T> {
        let mut g = self.live.lock().await;
        let r = tokio::time::timeout(self.limit, async {
            let live = self.connected(&mut g).await?;
            f(live).await
        })
        .await;
        r.unwrap_or_else(|_| {
            *g = None;
            Err(unavailable(format!(
                "PostgreSQL did not answer within {}s; the connection is dropped and reopened on next use",
                self.limit.as_secs_f32()
            )))
        })
    }

    async fn connected<'a>(&self, g: &'a mut Option<Live>) -> StoreResult<&'a mut Live> {
        if g.as_ref().is_none_or(|l| l.client.is_closed()) {
            *g = None;
            let (client, connection) = self.config.connect(NoTls).await.map_err(pg_error)?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "search store: PostgreSQL connection closed");
                }
            });
            // statements are prepared once, but a generic plan (chosen after five runs)
            // does not know how selective a label or the keyset bound is: plan each run
            // a lock held elsewhere (a migration, an operator's LOCK TABLE) fails a write
            // after LOCK_TIMEOUT, as an outage the indexer pauses for, instead of hanging
            // it; a runaway query ends after STATEMENT_TIMEOUT; no JIT: compiling costs
            // 40-60 ms whenever a plan's estimate passes jit_above_cost, more than
            // these queries take
            client
                .batch_execute(&format!(
                    "SET jit = off; SET plan_cache_mode = force_custom_plan; SET lock_timeout = {}; SET statement_timeout = {}",
                    LOCK_TIMEOUT.as_millis(),
                    STATEMENT_TIMEOUT.as_millis()
                ))
                .await
                .map_err(pg_error)?;
            *g = Some(Live {
                client,
                prepared: HashMap::new(),
            });
        }
        g.as_mut().ok_or_else(|| unavailable("not connected"))
    }
}

pub(crate) struct Postgres {
    /// The first also runs migrations and [`Postgres::execute`] (deletes, types).
    writers: Vec<Conn>,
    /// Each cluster's writer ([`Postgres::writer_for`]).
    assigned: parking_lot::Mutex<HashMap<String, usize>>,
    readers: Vec<Conn>,
    next: AtomicUsize,
    pub(super) vacuums: Arc<Vacuums>,
    /// When the writers last wrote, if no VACUUM has covered it: one does once they
    /// have been quiet for [`super::idle::IDLE`] (the end of a bulk ingest;
    /// [`Vacuums::when_quiet`]).
    written: Dirty,
}

/// Objects written between two VACUUMs while writes go on: a bulk ingest's pages are
/// marked all-visible as it goes (a 100,000-object share is ~20,000 heap pages of
/// `resources` and ~3,500 of `labels`), so the VACUUM when it ends, which the first
/// searches may meet, has that much left at most. With only the quiet one, a
/// 1.2M-object ingest left all of `labels` to it (3 s, searches' label probes reading
/// heap pages meanwhile: 63 ms at p50, against 9 ms once it was done).
const VACUUM_EVERY: u64 = 100_000;

/// How long after a failed VACUUM the quiet writers' upkeep tries again.
const VACUUM_RETRY: Duration = Duration::from_secs(30);

/// The store's VACUUMs ([`schema::VACUUM`]): one at a time, each on a connection of its
/// own.
pub(super) struct Vacuums {
    config: Config,
    pub(super) running: AtomicBool,
    /// Objects written since the last one started.
    since: AtomicU64,
    /// [`VACUUM_EVERY`], fewer in tests.
    pub(super) every: AtomicU64,
    /// When the last VACUUM that completed started, and when the last one failed.
    done: parking_lot::Mutex<(Option<Instant>, Option<Instant>)>,
}

/// Clears [`Vacuums::running`] when a VACUUM's task ends, however it ends.
struct Running(Arc<Vacuums>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}

impl Vacuums {
    /// Starts a VACUUM unless one is running: it takes no lock writes or reads wait
    /// for, and the writers go on meanwhile. A failure is logged (autovacuum gets there
    /// later). Returns the task, if started.
    fn start(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        if self.running.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.since.store(0, Ordering::Relaxed);
        let (mut config, running) = (self.config.clone(), Running(self.clone()));
        // in the background: a busy server may take longer to accept than a caller waits
        config.connect_timeout(VACUUM_CONNECT_TIMEOUT);
        let started = Instant::now();
        Some(tokio::spawn(async move {
            let done = async {
                let (client, connection) = config.connect(NoTls).await?;
                let connection = tokio::spawn(connection);
                let r = client.batch_execute(schema::VACUUM).await;
                drop(client);
                let _ = connection.await;
                r
            };
            let r = done.await;
            let mut last = running.0.done.lock();
            match r {
                Ok(()) => last.0 = Some(started),
                Err(e) => {
                    last.1 = Some(Instant::now());
                    tracing::warn!(error = %describe(&e), "search store: VACUUM failed; tried again when the writers are next quiet (autovacuum also marks the new pages all-visible, later; until then label filters read more pages)");
                }
            }
        }))
    }

    /// `n` objects were written: a VACUUM starts after each [`VACUUM_EVERY`].
    fn wrote(self: &Arc<Self>, n: u64) {
        if self.since.fetch_add(n, Ordering::Relaxed) + n >= self.every.load(Ordering::Relaxed) {
            self.start();
        }
    }

    /// The upkeep when the writers have been quiet since `at` ([`Postgres::written`]):
    /// done once a VACUUM that started after `at` has completed; one that started
    /// before (at a refresh, or [`VACUUM_EVERY`]) runs to its end first, and one that
    /// failed is tried again [`VACUUM_RETRY`] later.
    async fn when_quiet(self: Arc<Self>, written: Dirty, at: Instant) {
        let (ok, failed) = *self.done.lock();
        if ok.is_some_and(|started| started >= at) {
            written.done(at);
            return;
        }
        if failed.is_some_and(|t| t.elapsed() < VACUUM_RETRY) {
            return;
        }
        if let Some(task) = self.start() {
            let _ = task.await;
            if self.done.lock().0.is_some_and(|started| started >= at) {
                written.done(at);
            }
        }
    }
}

fn boxed(ps: Vec<Param>) -> Vec<Box<dyn ToSql + Sync + Send>> {
    ps.into_iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::Text(s) => Box::new(s),
                Param::Int(i) => Box::new(i),
                Param::Path(p) => Box::new(p),
            }
        })
        .collect()
}

fn refs(ps: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    ps.iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

fn cells(row: &Row) -> Result<Vec<Cell>, tokio_postgres::Error> {
    (0..row.len())
        .map(|i| {
            Ok(match *row.columns()[i].type_() {
                Type::INT8 => row
                    .try_get::<_, Option<i64>>(i)?
                    .map_or(Cell::Null, Cell::Int),
                // decoded from binary jsonb here, not cast to text by the server for
                // every row it sorts
                Type::JSONB => row
                    .try_get::<_, Option<serde_json::Value>>(i)?
                    .map_or(Cell::Null, |v| Cell::Text(v.to_string())),
                Type::INT4 => row
                    .try_get::<_, Option<i32>>(i)?
                    .map_or(Cell::Null, |v| Cell::Int(v.into())),
                _ => row
                    .try_get::<_, Option<String>>(i)?
                    .map_or(Cell::Null, Cell::Text),
            })
        })
        .collect()
}

const UPSERT: &str = "INSERT INTO resources (grp, version, resource, cluster, namespace, name,
        uid, resource_version, rv_num, owner_uid, created_at, object)
    SELECT g, v, r, c, ns, n, u, rv, rvn, o, ca, obj::jsonb
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::bigint[], $10::text[], $11::bigint[], $12::text[])
        AS t(g, v, r, c, ns, n, u, rv, rvn, o, ca, obj)
    ON CONFLICT (grp, version, resource, cluster, namespace, name) DO UPDATE SET
        uid = excluded.uid, resource_version = excluded.resource_version,
        rv_num = excluded.rv_num, owner_uid = excluded.owner_uid,
        created_at = excluded.created_at, object = excluded.object
    WHERE resources.resource_version <> excluded.resource_version OR resources.uid <> excluded.uid
    RETURNING id, grp, version, resource, cluster, namespace, name";
const CLEAR_LABELS: &str = "DELETE FROM labels WHERE rid = ANY($1::bigint[])";
const INSERT_LABELS: &str = "INSERT INTO labels (rid, key, value)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])";

type KeyCols = (String, String, String, String, String, String);

fn key_cols(r: &Record) -> KeyCols {
    (
        r.gvr.group.clone(),
        r.gvr.version.clone(),
        r.gvr.resource.clone(),
        r.cluster.clone(),
        r.namespace.clone(),
        r.name.clone(),
    )
}

impl Postgres {
    pub async fn open(url: &str) -> StoreResult<Postgres> {
        Self::open_with(url, CALL_TIMEOUT).await
    }

    /// [`Postgres::open`] with another call timeout ([`CALL_TIMEOUT`]).
    pub(crate) async fn open_with(url: &str, limit: Duration) -> StoreResult<Postgres> {
        let mut config = Config::from_str(url)
            .map_err(|e| unavailable(format!("bad PostgreSQL URL {url:?}: {e}")))?;
        config
            .connect_timeout(Duration::from_secs(2))
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3)
            .tcp_user_timeout(TCP_USER_TIMEOUT);
        let conn = || Conn {
            config: config.clone(),
            live: Mutex::new(None),
            limit,
        };
        let pg = Postgres {
            writers: (0..WRITERS).map(|_| conn()).collect(),
            assigned: parking_lot::Mutex::default(),
            readers: (0..READERS).map(|_| conn()).collect(),
            next: AtomicUsize::new(0),
            vacuums: Arc::new(Vacuums {
                config,
                running: AtomicBool::new(false),
                since: AtomicU64::new(0),
                every: AtomicU64::new(VACUUM_EVERY),
                done: parking_lot::Mutex::default(),
            }),
            written: Dirty::default(),
        };
        pg.migrate().await?;
        let vacuums = pg.vacuums.clone();
        pg.written
            .upkeep(move |written, at| vacuums.clone().when_quiet(written, at));
        Ok(pg)
    }

    /// The writer of a cluster's batches: the clusters take the writers in turn, in the
    /// order this process first writes them (a hash spread the bench's ten members 8 to
    /// 2), and keep theirs.
    fn writer_for(&self, cluster: &str) -> &Conn {
        let i = assign(&mut self.assigned.lock(), cluster, self.writers.len());
        &self.writers[i]
    }

    async fn migrate(&self) -> StoreResult<()> {
        self.writers[0]
            .call(|live| {
                Box::pin(async move {
                    let mut tx = live.client.transaction().await.map_err(pg_error)?;
                    // one migrator at a time when several processes open the store together
                    tx.batch_execute(
                        "SELECT pg_advisory_xact_lock(7401524719);
                         CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)",
                    )
                    .await
                    .map_err(pg_error)?;
                    let done: i64 = tx
                        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
                        .await
                        .map_err(pg_error)?
                        .get(0);
                    for (i, m) in schema::migrations(Dialect::Postgres).iter().enumerate() {
                        let v = i as i64 + 1;
                        if v > done {
                            tx.batch_execute(m).await.map_err(pg_error)?;
                            tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&v])
                                .await
                                .map_err(pg_error)?;
                        }
                    }
                    // best effort, in a savepoint: a failure leaves the migrations
                    // done and fuzzy search scanning
                    let sp = tx.savepoint("trigram").await.map_err(pg_error)?;
                    match sp.batch_execute(schema::TRIGRAM_INDEX).await {
                        Ok(()) => sp.commit().await.map_err(pg_error)?,
                        Err(e) => {
                            tracing::warn!(
                                error = %e,
                                "search store: no trigram index of names (pg_trgm unavailable), so fuzzy name searches scan every name; to fix, run CREATE EXTENSION pg_trgm in this database as a superuser and restart"
                            );
                            sp.rollback().await.map_err(pg_error)?;
                        }
                    }
                    tx.commit().await.map_err(pg_error)
                })
            })
            .await
    }

    pub async fn rows(&self, stmt: Stmt) -> StoreResult<Vec<Vec<Cell>>> {
        self.fold(stmt, Vec::new(), Vec::push).await
    }

    /// Folds the rows into `acc` one by one (`f`) as they arrive, never holding them all.
    pub async fn fold<T: Send + 'static>(
        &self,
        stmt: Stmt,
        acc: T,
        f: fn(&mut T, Vec<Cell>),
    ) -> StoreResult<T> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        self.readers[i]
            .call(move |live| {
                Box::pin(async move {
                    let mut acc = acc;
                    let st = live.prepare(&stmt.sql).await.map_err(pg_error)?;
                    let ps = boxed(stmt.params);
                    let rows = live
                        .client
                        .query_raw(&st, refs(&ps))
                        .await
                        .map_err(pg_error)?;
                    let mut rows = std::pin::pin!(rows);
                    while let Some(row) = futures::TryStreamExt::try_next(&mut rows)
                        .await
                        .map_err(pg_error)?
                    {
                        f(&mut acc, cells(&row).map_err(pg_error)?);
                    }
                    Ok(acc)
                })
            })
            .await
    }

    /// Starts [`schema::VACUUM`] ([`Vacuums::start`]). Returns the task, if started.
    pub fn vacuum(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.vacuums.start()
    }

    pub async fn execute(&self, stmts: Vec<Stmt>) -> StoreResult<Vec<u64>> {
        self.writers[0]
            .call(|live| {
                Box::pin(async move {
                    let mut prepared = Vec::with_capacity(stmts.len());
                    for s in stmts {
                        prepared.push((
                            live.prepare(&s.sql).await.map_err(pg_error)?,
                            boxed(s.params),
                        ));
                    }
                    let tx = live.client.transaction().await.map_err(pg_error)?;
                    let mut out = Vec::with_capacity(prepared.len());
                    for (st, ps) in &prepared {
                        out.push(tx.execute(st, &refs(ps)).await.map_err(pg_error)?);
                    }
                    tx.commit().await.map_err(pg_error)?;
                    Ok(out)
                })
            })
            .await
            .inspect(|out| {
                // deletes leave dead rows a VACUUM clears; an ANALYZE changes none
                if out.iter().any(|&n| n > 0) {
                    self.written.wrote();
                }
            })
    }

    /// Stores records in one transaction; returns (written, skipped). A batch the server
    /// refuses ([`refused`]) is retried record by record, each its own call (and time
    /// limit), and the records it still refuses are skipped with a warning: one bad
    /// object never stops the indexer.
    pub async fn upsert(&self, records: Arc<[Record]>) -> StoreResult<(u64, u64)> {
        match self.try_write(records.clone()).await? {
            Ok(n) => return Ok((n, 0)),
            Err(e) if refused(&e) && records.len() > 1 => {
                tracing::debug!(error = %describe(&e), "search store: batch refused, writing its records one by one");
            }
            Err(e) if refused(&e) => {
                skipped(&records[0], &e);
                return Ok((0, 1));
            }
            Err(e) => return Err(pg_error(e)),
        }
        let (mut written, mut skips) = (0, 0);
        for r in records.iter() {
            match self.try_write(Arc::from(std::slice::from_ref(r))).await? {
                Ok(n) => written += n,
                Err(e) if refused(&e) => {
                    skipped(r, &e);
                    skips += 1;
                }
                Err(e) => return Err(pg_error(e)),
            }
        }
        Ok((written, skips))
    }

    /// [`write`] on the writer of the batch's (first) cluster: the server's error is
    /// left to the caller.
    async fn try_write(
        &self,
        records: Arc<[Record]>,
    ) -> StoreResult<Result<u64, tokio_postgres::Error>> {
        let cluster = records.first().map_or("", |r| r.cluster.as_str());
        self.writer_for(cluster)
            .call(|live| Box::pin(async move { Ok(write(live, &records).await) }))
            .await
            .inspect(|r| {
                if let Ok(n @ 1..) = r {
                    self.written.wrote();
                    self.vacuums.wrote(*n);
                }
            })
    }
}

/// The writer of `cluster`: the one it has, or the next in turn.
fn assign(assigned: &mut HashMap<String, usize>, cluster: &str, writers: usize) -> usize {
    if let Some(&i) = assigned.get(cluster) {
        return i;
    }
    let i = assigned.len() % writers.max(1);
    assigned.insert(cluster.to_string(), i);
    i
}

fn skipped(r: &Record, e: &tokio_postgres::Error) {
    tracing::warn!(
        cluster = %r.cluster,
        namespace = %r.namespace,
        name = %r.name,
        resource = %r.gvr.resource,
        error = %describe(e),
        "search store: PostgreSQL refused an object; it is not indexed"
    );
}

/// Writes records and their labels in one transaction; the rows written.
async fn write(live: &mut Live, records: &[Record]) -> Result<u64, tokio_postgres::Error> {
    let up = live.prepare(UPSERT).await?;
    let clear = live.prepare(CLEAR_LABELS).await?;
    let insert = live.prepare(INSERT_LABELS).await?;
    let col = |f: fn(&Record) -> String| records.iter().map(f).collect::<Vec<String>>();
    let (g_, v, r, c) = (
        col(|r| r.gvr.group.clone()),
        col(|r| r.gvr.version.clone()),
        col(|r| r.gvr.resource.clone()),
        col(|r| r.cluster.clone()),
    );
    let (ns, n, u, rv) = (
        col(|r| r.namespace.clone()),
        col(|r| r.name.clone()),
        col(|r| r.uid.clone()),
        col(|r| r.resource_version.clone()),
    );
    let rvn: Vec<i64> = records.iter().map(Record::rv_num).collect();
    let owner: Vec<Option<String>> = records.iter().map(|r| r.owner_uid.clone()).collect();
    let created: Vec<i64> = records.iter().map(|r| r.created_at.unwrap_or(0)).collect();
    let obj = col(|r| r.object.clone());
    let tx = live.client.transaction().await?;
    let rows = tx
        .query(
            &up,
            &[
                &g_, &v, &r, &c, &ns, &n, &u, &rv, &rvn, &owner, &created, &obj,
            ],
        )
        .await?;
    let by_key: HashMap<KeyCols, &Record> = records.iter().map(|r| (key_cols(r), r)).collect();
    let (mut ids, mut lr, mut lk, mut lv) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for row in &rows {
        let id: i64 = row.get(0);
        ids.push(id);
        let key = (
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
            row.get(6),
        );
        for (k, val) in by_key.get(&key).map(|r| &r.labels).into_iter().flatten() {
            lr.push(id);
            lk.push(k.clone());
            lv.push(val.clone());
        }
    }
    if !ids.is_empty() {
        tx.execute(&clear, &[&ids]).await?;
    }
    if !lr.is_empty() {
        tx.execute(&insert, &[&lr, &lk, &lv]).await?;
    }
    tx.commit().await?;
    Ok(rows.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_take_the_writers_in_turn_and_keep_theirs() {
        let mut assigned = HashMap::new();
        let order = ["east", "west", "north", "east", "south", "west", "edge"];
        let got: Vec<usize> = order.iter().map(|c| assign(&mut assigned, c, 2)).collect();
        assert_eq!(got, [0, 1, 0, 0, 1, 1, 0]);
        // the bench's ten members: five each
        let mut assigned = HashMap::new();
        let mut counts = [0usize; WRITERS];
        for i in 1..=10 {
            counts[assign(&mut assigned, &format!("member-{i}"), WRITERS)] += 1;
        }
        assert_eq!(counts, [5; WRITERS]);
        assert_eq!(assign(&mut HashMap::new(), "any", 0), 0);
    }
}
