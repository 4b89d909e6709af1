//! The schema, as versioned migrations for each dialect, and statistics upkeep.

use super::sql::{Builder, Dialect, Stmt};

/// The schema migrations, in order; `schema_version` records how many ran.
pub(crate) fn migrations(d: Dialect) -> Vec<&'static str> {
    match d {
        Dialect::Sqlite => vec![
            "CREATE TABLE resources (
                id INTEGER PRIMARY KEY,
                grp TEXT NOT NULL, version TEXT NOT NULL, resource TEXT NOT NULL,
                cluster TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
                uid TEXT NOT NULL, resource_version TEXT NOT NULL, rv_num INTEGER NOT NULL,
                owner_uid TEXT, created_at INTEGER NOT NULL, object TEXT NOT NULL,
                UNIQUE (grp, version, resource, cluster, namespace, name));
             CREATE INDEX resources_owner ON resources (cluster, owner_uid);
             CREATE INDEX resources_created ON resources
                (grp, version, resource, created_at, cluster, namespace, name);
             CREATE INDEX resources_rv ON resources
                (grp, version, resource, rv_num, cluster, namespace, name);
             CREATE TABLE labels (rid INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                PRIMARY KEY (rid, key)) WITHOUT ROWID;
             CREATE INDEX labels_kv ON labels (key, value);
             CREATE TABLE types (grp TEXT NOT NULL, version TEXT NOT NULL, resource TEXT NOT NULL,
                kind TEXT NOT NULL, namespaced INTEGER NOT NULL,
                PRIMARY KEY (grp, version, resource));",
            // 2: a namespace-first index (a namespace filter in the default order walks
            // one namespace, not every cluster's), and a trigram index of names for fuzzy
            // search (FTS5, its own copy of the names: a LIKE it answers re-reads only
            // that small table), kept by triggers (names never change in place: they
            // are part of the key)
            "CREATE INDEX resources_ns ON resources (grp, version, resource, namespace, cluster, name);
             CREATE VIRTUAL TABLE resources_names USING fts5(name, tokenize = 'trigram', detail = 'none');
             INSERT INTO resources_names (rowid, name) SELECT id, name FROM resources;
             CREATE TRIGGER resources_names_insert AFTER INSERT ON resources BEGIN
                INSERT INTO resources_names (rowid, name) VALUES (new.id, new.name); END;
             CREATE TRIGGER resources_names_delete AFTER DELETE ON resources BEGIN
                DELETE FROM resources_names WHERE rowid = old.id; END;
             CREATE TRIGGER resources_names_update AFTER UPDATE OF name ON resources BEGIN
                UPDATE resources_names SET name = new.name WHERE rowid = old.id; END;",
            // 3: the writer indexes a new row's name itself (`sqlite::upsert` says why)
            "DROP TRIGGER resources_names_insert",
            // 4: which of the store's files holds each cluster (read in the first file,
            // `placement`); a store of one file holds every cluster it has in it
            "CREATE TABLE placements (cluster TEXT PRIMARY KEY, part INTEGER NOT NULL);
             INSERT INTO placements (cluster, part) SELECT DISTINCT cluster, 0 FROM resources;",
            // 5: a purged cluster keeps its file but no longer counts when a new one is
            // placed (`placement`)
            "ALTER TABLE placements ADD COLUMN purged INTEGER NOT NULL DEFAULT 0",
            // 6: names-only copies stored with their annotations (`record`'s "/metadata"
            // suffix: last-applied-configuration held whole Secrets) lose them now, not
            // at a relist that a member not Ready never gets
            NAMES_ONLY_WITHOUT_ANNOTATIONS_SQLITE,
        ],
        Dialect::Postgres => vec![
            r#"CREATE TABLE resources (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                grp TEXT COLLATE "C" NOT NULL, version TEXT COLLATE "C" NOT NULL,
                resource TEXT COLLATE "C" NOT NULL, cluster TEXT COLLATE "C" NOT NULL,
                namespace TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
                uid TEXT NOT NULL, resource_version TEXT NOT NULL, rv_num BIGINT NOT NULL,
                owner_uid TEXT COLLATE "C", created_at BIGINT NOT NULL, object JSONB NOT NULL,
                UNIQUE (grp, version, resource, cluster, namespace, name));
             CREATE INDEX resources_owner ON resources (cluster, owner_uid);
             CREATE INDEX resources_created ON resources
                (grp, version, resource, created_at, cluster, namespace, name);
             CREATE INDEX resources_rv ON resources
                (grp, version, resource, rv_num, cluster, namespace, name);
             CREATE TABLE labels (rid BIGINT NOT NULL, key TEXT COLLATE "C" NOT NULL,
                value TEXT COLLATE "C" NOT NULL, PRIMARY KEY (rid, key));
             CREATE INDEX labels_kv ON labels (key, value);
             CREATE TABLE types (grp TEXT COLLATE "C" NOT NULL, version TEXT COLLATE "C" NOT NULL,
                resource TEXT COLLATE "C" NOT NULL, kind TEXT NOT NULL, namespaced BIGINT NOT NULL,
                PRIMARY KEY (grp, version, resource));"#,
            // 2: see the SQLite migration; the trigram index needs pg_trgm, which a
            // database owner may lack, so it is made outside the migrations
            // ([`trigram_index`])
            "CREATE INDEX resources_ns ON resources (grp, version, resource, namespace, cluster, name)",
            // 3: the labels' primary key carries their values (SQLite's WITHOUT ROWID table
            // is its key already): a walk of an order index probes each row's labels,
            // and with the value in the key a probe is an index-only scan (on pages
            // [`VACUUM`] marked all-visible), not a heap page read per label
            "ALTER TABLE labels DROP CONSTRAINT labels_pkey,
                ADD CONSTRAINT labels_pkey PRIMARY KEY (rid, key) INCLUDE (value)",
            // 4: see the SQLite migration 6
            NAMES_ONLY_WITHOUT_ANNOTATIONS_POSTGRES,
        ],
    }
}

/// Names-only copies stored before they lost their annotations (stored version
/// ending "/metadata", nine characters) without them, in the new form ("/names").
const NAMES_ONLY_WITHOUT_ANNOTATIONS_SQLITE: &str = "UPDATE resources
    SET object = json_remove(object, '$.metadata.annotations'),
        resource_version = substr(resource_version, 1, length(resource_version) - 9) || '/names'
    WHERE resource_version LIKE '%/metadata'";
const NAMES_ONLY_WITHOUT_ANNOTATIONS_POSTGRES: &str = "UPDATE resources
    SET object = object #- '{metadata,annotations}',
        resource_version = left(resource_version, -9) || '/names'
    WHERE resource_version LIKE '%/metadata'";

/// PostgreSQL's trigram index of names (fuzzy search), made when the store opens if
/// pg_trgm can be used: without it fuzzy names are matched by a scan.
pub(crate) const TRIGRAM_INDEX: &str = "CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX IF NOT EXISTS resources_name_trgm ON resources USING gin (name gin_trgm_ops)";

/// PostgreSQL: marks the pages written since the last VACUUM all-visible (visibility
/// map), so the label probes of [`migrations`]' covering key are index-only scans.
/// Autovacuum does it too, but only once a fifth of a table is new: after a bulk
/// ingest the newest objects' probes read heap pages until then. A page is marked only
/// when no transaction older than its rows runs on the server (in any database), so
/// what a VACUUM leaves the next one (`postgres::VACUUM_EVERY` objects later, at a
/// statistics refresh, or when the writers go quiet) or autovacuum marks. `labels`
/// first: the probes read it, and it is a sixth of the size of `resources` (319 vs
/// 1,839 MB at 1.2M objects).
pub(crate) const VACUUM: &str = "VACUUM labels, resources";

/// Refreshes the planner's statistics.
pub(crate) fn analyze(d: Dialect) -> Vec<Stmt> {
    let stmts: &[&str] = match d {
        Dialect::Sqlite => &["ANALYZE"],
        Dialect::Postgres => &["ANALYZE resources", "ANALYZE labels"],
    };
    stmts
        .iter()
        .map(|s| Builder::new(d).finish(s.to_string()))
        .collect()
}
