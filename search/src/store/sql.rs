//! The one SQL builder for both dialects: placeholders (`?N` / `$N`), JSON path
//! expressions (`json_extract` / `jsonb #>>`), the schema, and the search query (filters,
//! label and field selectors, scope, keyset order and paging). The backends only run
//! what it builds.

use k8s_validation::selector::Requirement;

use super::fields::{FieldOp, FieldTerm};
use super::{Gvr, Key, Scope};
use crate::query::{Query, QueryError, SortField, SortKey};

/// Which SQL the builder writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite 3.45 (bundled).
    Sqlite,
    /// PostgreSQL 12+.
    Postgres,
}

impl Dialect {
    /// The most parameters one statement may bind (SQLITE_MAX_VARIABLE_NUMBER; the
    /// PostgreSQL wire protocol's 16-bit count).
    pub(crate) fn max_params(self) -> usize {
        match self {
            Dialect::Sqlite => 32_766,
            Dialect::Postgres => 65_535,
        }
    }

    /// `"sqlite"` or `"postgres"`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
        }
    }
}

/// A bound value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Param {
    /// Text.
    Text(String),
    /// A 64-bit integer.
    Int(i64),
    /// A JSON path (SQLite: `$."a"."b"`; PostgreSQL: `text[]`).
    Path(Vec<String>),
}

/// A statement and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stmt {
    /// The SQL text.
    pub sql: String,
    /// Its parameters, `?1`/`$1` first.
    pub params: Vec<Param>,
}

/// One result cell.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cell {
    /// NULL.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(String),
}

impl Cell {
    /// The text, or "" for anything else.
    pub fn text(self) -> String {
        match self {
            Cell::Text(s) => s,
            Cell::Int(i) => i.to_string(),
            Cell::Null => String::new(),
        }
    }

    /// The text, borrowed; "" for anything else.
    pub fn as_str(&self) -> &str {
        match self {
            Cell::Text(s) => s,
            _ => "",
        }
    }

    /// The integer, or 0.
    pub fn int(&self) -> i64 {
        match self {
            Cell::Int(i) => *i,
            Cell::Text(s) => s.parse().unwrap_or(0),
            Cell::Null => 0,
        }
    }
}

/// Builds one statement: SQL text with numbered placeholders.
pub(crate) struct Builder {
    d: Dialect,
    params: Vec<Param>,
}

impl Builder {
    pub fn new(d: Dialect) -> Builder {
        Builder {
            d,
            params: Vec::new(),
        }
    }

    /// Binds a parameter and returns its placeholder (usable more than once).
    pub fn bind(&mut self, p: Param) -> String {
        self.params.push(p);
        match self.d {
            Dialect::Sqlite => format!("?{}", self.params.len()),
            Dialect::Postgres => format!("${}", self.params.len()),
        }
    }

    pub fn text(&mut self, s: &str) -> String {
        self.bind(Param::Text(s.to_string()))
    }

    pub fn int(&mut self, i: i64) -> String {
        self.bind(Param::Int(i))
    }

    /// `(?1, ?2, …)` for a non-empty list.
    pub fn list<'a>(&mut self, items: impl IntoIterator<Item = &'a String>) -> String {
        let ps: Vec<String> = items.into_iter().map(|s| self.text(s)).collect();
        format!("({})", ps.join(", "))
    }

    /// The text at a JSON path of `object` (strings unquoted, numbers and booleans as
    /// JSON writes them, NULL when absent or null).
    pub fn json_text(&mut self, path: &[String]) -> String {
        let p = self.bind(Param::Path(path.to_vec()));
        match self.d {
            Dialect::Sqlite => format!(
                "(CASE json_type(object, {p}) WHEN 'text' THEN json_extract(object, {p}) WHEN 'null' THEN NULL ELSE object -> {p} END)"
            ),
            Dialect::Postgres => format!("(object #>> {p})"),
        }
    }

    pub fn finish(self, sql: String) -> Stmt {
        Stmt {
            sql,
            params: self.params,
        }
    }
}

/// The SQLite rendering of a JSON path: `$."metadata"."annotations"."a.b/c"`.
pub(crate) fn sqlite_path(path: &[String]) -> String {
    let mut s = String::from("$");
    for seg in path {
        s.push_str(".\"");
        s.push_str(&seg.replace('\\', "\\\\").replace('"', "\\\""));
        s.push('"');
    }
    s
}

fn gvr_cond(b: &mut Builder, gvr: &Gvr) -> String {
    format!(
        "grp = {} AND version = {} AND resource = {}",
        b.text(&gvr.group),
        b.text(&gvr.version),
        b.text(&gvr.resource)
    )
}

/// Deletes objects and their labels (two statements: labels first), by their full
/// keys as one row-value list.
pub(crate) fn delete_keys(d: Dialect, keys: &[Key]) -> [Stmt; 2] {
    let cond = |b: &mut Builder| {
        let rows: Vec<String> = keys
            .iter()
            .map(|k| {
                let cols = [
                    &k.gvr.group,
                    &k.gvr.version,
                    &k.gvr.resource,
                    &k.cluster,
                    &k.namespace,
                    &k.name,
                ];
                b.list(cols)
            })
            .collect();
        format!(
            "(grp, version, resource, cluster, namespace, name) IN ({})",
            rows.join(", ")
        )
    };
    let mut b = Builder::new(d);
    let c = cond(&mut b);
    let labels = b.finish(format!(
        "DELETE FROM labels WHERE rid IN (SELECT id FROM resources WHERE {c})"
    ));
    let mut b = Builder::new(d);
    let c = cond(&mut b);
    [labels, b.finish(format!("DELETE FROM resources WHERE {c}"))]
}

/// The ids of at most `limit` objects of a cluster: a purge's next batch.
pub(crate) fn cluster_ids(d: Dialect, cluster: &str, limit: usize) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    let n = b.int(i64::try_from(limit).unwrap_or(i64::MAX));
    b.finish(format!(
        "SELECT id FROM resources WHERE cluster = {c} LIMIT {n}"
    ))
}

/// Deletes the objects of `ids` and their labels (labels first).
pub(crate) fn delete_ids(d: Dialect, ids: &[i64]) -> [Stmt; 2] {
    let statement = |sql: &str| {
        let mut b = Builder::new(d);
        let ps: Vec<String> = ids.iter().map(|i| b.int(*i)).collect();
        b.finish(sql.replace("{}", &ps.join(", ")))
    };
    [
        statement("DELETE FROM labels WHERE rid IN ({})"),
        statement("DELETE FROM resources WHERE id IN ({})"),
    ]
}

/// (namespace, name, resource_version, uid) of one cluster and type.
pub(crate) fn versions(d: Dialect, cluster: &str, gvr: &Gvr) -> Stmt {
    let mut b = Builder::new(d);
    let g = gvr_cond(&mut b, gvr);
    let c = b.text(cluster);
    b.finish(format!(
        "SELECT namespace, name, resource_version, uid FROM resources WHERE {g} AND cluster = {c}"
    ))
}

/// Which file each cluster's objects are in (a SQLite store's first file).
pub(crate) fn placements(d: Dialect) -> Stmt {
    Builder::new(d).finish("SELECT cluster, part, purged FROM placements".into())
}

/// Records a cluster's file, live; a cluster placed already keeps its own (and is live
/// again if it was purged).
pub(crate) fn place(d: Dialect, cluster: &str, part: usize) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    let p = b.int(i64::try_from(part).unwrap_or(i64::MAX));
    b.finish(format!(
        "INSERT INTO placements (cluster, part) VALUES ({c}, {p}) ON CONFLICT (cluster) DO UPDATE SET purged = 0"
    ))
}

/// Whether any object of a cluster is stored (1) or none (0).
pub(crate) fn has_objects(d: Dialect, cluster: &str) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    b.finish(format!(
        "SELECT EXISTS (SELECT 1 FROM resources WHERE cluster = {c})"
    ))
}

/// Marks a cluster's placement purged (its objects are gone; it keeps its file).
pub(crate) fn mark_purged(d: Dialect, cluster: &str) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    b.finish(format!(
        "UPDATE placements SET purged = 1 WHERE cluster = {c}"
    ))
}

/// The file a cluster is placed in (none: no row).
pub(crate) fn placement_of(d: Dialect, cluster: &str) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    b.finish(format!("SELECT part FROM placements WHERE cluster = {c}"))
}

pub(crate) fn clusters(d: Dialect) -> Stmt {
    Builder::new(d).finish("SELECT DISTINCT cluster FROM resources ORDER BY cluster".into())
}

pub(crate) fn namespaces(d: Dialect, gvr: &Gvr, clusters: &[String]) -> Stmt {
    let mut b = Builder::new(d);
    let mut c = gvr_cond(&mut b, gvr);
    if !clusters.is_empty() {
        c.push_str(&format!(" AND cluster IN {}", b.list(clusters)));
    }
    b.finish(format!(
        "SELECT DISTINCT namespace FROM resources WHERE {c} AND namespace <> '' ORDER BY namespace"
    ))
}

pub(crate) fn set_type(d: Dialect, t: &super::TypeInfo) -> Stmt {
    let mut b = Builder::new(d);
    let (g, v, r) = (
        b.text(&t.gvr.group),
        b.text(&t.gvr.version),
        b.text(&t.gvr.resource),
    );
    let (k, n) = (b.text(&t.kind), b.int(i64::from(t.namespaced)));
    b.finish(format!(
        "INSERT INTO types (grp, version, resource, kind, namespaced) VALUES ({g}, {v}, {r}, {k}, {n})
         ON CONFLICT (grp, version, resource) DO UPDATE SET kind = excluded.kind, namespaced = excluded.namespaced"
    ))
}

pub(crate) fn types(d: Dialect) -> Stmt {
    Builder::new(d).finish(
        "SELECT grp, version, resource, kind, namespaced FROM types ORDER BY grp, version, resource"
            .into(),
    )
}

/// (group, resource) of `deployments.apps` or `nodes`.
fn split_group_resource(gr: &str) -> (&str, &str) {
    gr.split_once('.').map_or(("", gr), |(r, g)| (g, r))
}

/// The versions recorded for a group-resource in `types`, each with its namespaced flag.
pub(crate) fn type_versions(d: Dialect, group_resource: &str) -> Stmt {
    let (group, resource) = split_group_resource(group_resource);
    let mut b = Builder::new(d);
    let (g, r) = (b.text(group), b.text(resource));
    b.finish(format!(
        "SELECT version, namespaced FROM types WHERE grp = {g} AND resource = {r}"
    ))
}

/// The uids of the owner named by name and group-resource in one cluster.
///
/// `versions` (the type's versions the indexer recorded, if any) lets the unique index
/// be used past the group; without them the group's rows are scanned.
pub(crate) fn owner_uids_by_name(
    d: Dialect,
    cluster: &str,
    name: &str,
    group_resource: &str,
    namespaces: &[String],
    versions: &[String],
) -> Stmt {
    let (group, resource) = split_group_resource(group_resource);
    let mut b = Builder::new(d);
    let mut c = format!("grp = {}", b.text(group));
    if !versions.is_empty() {
        c.push_str(&format!(" AND version IN {}", b.list(versions)));
    }
    c.push_str(&format!(
        " AND resource = {} AND cluster = {} AND name = {}",
        b.text(resource),
        b.text(cluster),
        b.text(name)
    ));
    if !namespaces.is_empty() {
        c.push_str(&format!(" AND namespace IN {}", b.list(namespaces)));
    }
    b.finish(format!("SELECT DISTINCT uid FROM resources WHERE {c}"))
}

/// The uids of the objects owned by any of `owners` in one cluster (one level down).
pub(crate) fn owned_uids(d: Dialect, cluster: &str, owners: &[String]) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    let l = b.list(owners);
    b.finish(format!(
        "SELECT DISTINCT uid FROM resources WHERE cluster = {c} AND owner_uid IN {l}"
    ))
}

fn column(f: SortField) -> &'static str {
    match f {
        SortField::Cluster => "cluster",
        SortField::Namespace => "namespace",
        SortField::Name => "name",
        SortField::CreatedAt => "created_at",
        SortField::ResourceVersion => "rv_num",
    }
}

fn numeric(f: SortField) -> bool {
    matches!(f, SortField::CreatedAt | SortField::ResourceVersion)
}

/// Escapes `\`, `%` and `_` for `LIKE … ESCAPE '\'`.
pub(crate) fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What a selective search is driven from: the rows one label requirement or the
/// fuzzy name selects are fetched first and the page sorted from them. Otherwise the
/// planner walks an order index and tests each row (per-row probes of the labels
/// primary key), which finds a page quickly when matches are common.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drive {
    /// The label requirement at this index (a positive one).
    Label(usize),
    /// The fuzzy name, through the trigram index (SQLite: `resources_names`): the
    /// names holding the two trigrams at these indexes of [`trigrams`] (its rarest),
    /// tested with `LIKE`; without them, the index's own `LIKE`, which intersects the
    /// names of every trigram of the pattern.
    Name(Option<[usize; 2]>),
    /// The owner search's owned objects, through the owner index (SQLite): its
    /// statistics, sampled from the start of the index, do not show how selective an
    /// owner is, and the planner walked the cluster's objects instead.
    Owner,
}

/// What a search selects, before paging.
#[derive(Clone, Copy)]
pub(crate) struct Search<'a> {
    pub gvr: &'a Gvr,
    pub q: &'a Query,
    pub scope: &'a Scope,
    pub labels: &'a [Requirement],
    pub fields: &'a [FieldTerm],
    /// The owner uids the objects must have (owner search), if any.
    pub owners: Option<&'a [String]>,
    /// What drives the query, if it is selective ([`label_counts`], [`fts_pattern`]).
    pub drive: Option<Drive>,
}

fn in_or_none(b: &mut Builder, col: &str, items: &[String]) -> String {
    if items.is_empty() {
        "1 = 0".into()
    } else {
        format!("{col} IN {}", b.list(items))
    }
}

/// The key and values a positive requirement selects through labels_kv.
fn positive(r: &Requirement) -> Option<(&String, Option<&[String]>)> {
    match r {
        Requirement::Eq(k, v) => Some((k, Some(std::slice::from_ref(v)))),
        Requirement::In(k, vs) => Some((k, Some(vs))),
        Requirement::Exists(k) => Some((k, None)),
        _ => None,
    }
}

fn label_values(b: &mut Builder, vals: Option<&[String]>) -> String {
    match vals {
        None => String::new(),
        Some(v) => format!(" AND value IN {}", b.list(v)),
    }
}

/// At most this many positive requirements are counted to choose a driver.
const COUNTED: usize = 4;

/// For each positive requirement (the first [`COUNTED`]), its index and a statement
/// counting the objects it selects, to `cap` at most (an index-only count on labels_kv).
pub(crate) fn label_counts(d: Dialect, labels: &[Requirement], cap: i64) -> Vec<(usize, Stmt)> {
    labels
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, positive(r)?)))
        .take(COUNTED)
        .map(|(i, (k, vals))| {
            let mut b = Builder::new(d);
            let k = b.text(k);
            let v = label_values(&mut b, vals);
            let cap = b.int(cap);
            let sql = format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM labels WHERE key = {k}{v} LIMIT {cap}) t"
            );
            (i, b.finish(sql))
        })
        .collect()
}

/// Counts, to `cap` at most, the objects of `cluster` owned by `owners` (an index-only
/// count on the owner index).
pub(crate) fn owned_count(d: Dialect, cluster: &str, owners: &[String], cap: i64) -> Stmt {
    let mut b = Builder::new(d);
    let c = b.text(cluster);
    let owned = in_or_none(&mut b, "owner_uid", owners);
    let cap = b.int(cap);
    b.finish(format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM resources WHERE cluster = {c} AND {owned} LIMIT {cap}) t"
    ))
}

/// The `LIKE` pattern the SQLite trigram index can answer for a fuzzy name: at least
/// three characters (one trigram) and no wildcard or escape character (the index's LIKE
/// takes no ESCAPE clause; names with them are matched by the scan).
pub(crate) fn fts_pattern(fuzzy: &str) -> Option<String> {
    (fuzzy.chars().count() >= 3 && !fuzzy.contains(['%', '_', '\\'])).then(|| format!("%{fuzzy}%"))
}

/// At most this many of a fuzzy name's trigrams (its last) are counted to choose its
/// drivers (each count reads up to [`trigram_counts`]'s cap of names, about 1 ms).
const TRIGRAMS: usize = 8;

/// The trigrams of a fuzzy name that choose its drivers, as SQLite's trigram tokenizer
/// folds them: every third (they cover every character; the rest overlap them) and
/// the last, distinct, the last [`TRIGRAMS`] of them; none when the index cannot answer
/// the name ([`fts_pattern`]) or it is not ASCII (the tokenizer's Unicode folding is
/// left to the index's own `LIKE`).
pub(crate) fn trigrams(fuzzy: &str) -> Option<Vec<String>> {
    fts_pattern(fuzzy)?;
    if !fuzzy.is_ascii() {
        return None;
    }
    let lower = fuzzy.to_ascii_lowercase();
    let last = lower.len() - 3;
    let mut out: Vec<String> = Vec::new();
    for i in (0..=last).step_by(3).chain([last]) {
        let t = &lower[i..i + 3];
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    let skip = out.len().saturating_sub(TRIGRAMS);
    out.drain(..skip);
    Some(out)
}

/// One row: how many names hold each trigram, each to `cap` at most (SQLite's names
/// index; counting reads the trigram's list of names, hence the cap).
pub(crate) fn trigram_counts(trigrams: &[String], cap: i64) -> Stmt {
    let mut b = Builder::new(Dialect::Sqlite);
    let counts: Vec<String> = trigrams
        .iter()
        .map(|t| {
            let m = b.text(&fts_all(&[t]));
            let cap = b.int(cap);
            format!(
                "(SELECT COUNT(*) FROM (SELECT 1 FROM resources_names WHERE resources_names MATCH {m} LIMIT {cap}))"
            )
        })
        .collect();
    let sql = format!("SELECT {}", counts.join(", "));
    b.finish(sql)
}

/// An FTS5 query for the names holding every one of `terms` (each a phrase).
fn fts_all(terms: &[&str]) -> String {
    let phrases: Vec<String> = terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect();
    phrases.join(" AND ")
}

/// A label requirement as a condition on `resources`. The driving one selects ids
/// from labels_kv; the others are per-row probes of the labels primary key. On
/// PostgreSQL `OFFSET 0` keeps a probe from being pulled up into a semi-join, which
/// hashes every label row of the key (seconds at a million objects) where the walk of
/// an order index needs only the page's rows tested.
fn label_cond(b: &mut Builder, r: &Requirement, drive: bool) -> String {
    let barrier = if b.d == Dialect::Postgres {
        " OFFSET 0"
    } else {
        ""
    };
    let has = |b: &mut Builder, k: &String, vals: Option<&[String]>| {
        let k = b.text(k);
        let v = label_values(b, vals);
        if drive {
            // PostgreSQL (SQLite's driver is the join of [`source`]): an array, not a
            // semi-join, so the rows are fetched and sorted instead of the order index
            // being walked in the hope of early matches
            format!("id = ANY(ARRAY(SELECT rid FROM labels WHERE key = {k}{v}))")
        } else {
            format!(
                "EXISTS (SELECT 1 FROM labels WHERE rid = resources.id AND key = {k}{v}{barrier})"
            )
        }
    };
    let lacks = |b: &mut Builder, k: &String, vals: Option<&[String]>| {
        let k = b.text(k);
        let v = label_values(b, vals);
        format!(
            "NOT EXISTS (SELECT 1 FROM labels WHERE rid = resources.id AND key = {k}{v}{barrier})"
        )
    };
    match r {
        Requirement::Eq(k, v) => has(b, k, Some(std::slice::from_ref(v))),
        Requirement::NotEq(k, v) => lacks(b, k, Some(std::slice::from_ref(v))),
        Requirement::In(k, vs) => has(b, k, Some(vs)),
        Requirement::NotIn(k, vs) => lacks(b, k, Some(vs)),
        Requirement::Exists(k) => has(b, k, None),
        Requirement::NotExists(k) => lacks(b, k, None),
    }
}

fn field_cond(b: &mut Builder, t: &FieldTerm) -> String {
    let col = match t.path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["metadata", "name"] => "name".to_string(),
        ["metadata", "namespace"] => "namespace".to_string(),
        ["metadata", "uid"] => "uid".to_string(),
        _ => b.json_text(&t.path),
    };
    // an absent (or null) field equals the empty string, as kube-apiserver compares
    // one; spelt out, not COALESCE'd, so the name and namespace indexes still serve
    let empty = |vs: &[String]| vs.iter().any(String::is_empty);
    // a cluster-scoped object's namespace column holds '': it has no namespace field
    let stored_empty = col == "namespace";
    match &t.op {
        FieldOp::Exists if stored_empty => format!("{col} <> ''"),
        FieldOp::NotExists if stored_empty => format!("{col} = ''"),
        FieldOp::Exists => format!("{col} IS NOT NULL"),
        FieldOp::NotExists => format!("{col} IS NULL"),
        FieldOp::Eq(v) if v.is_empty() => format!("({col} IS NULL OR {col} = '')"),
        FieldOp::Eq(v) => format!("{col} = {}", b.text(v)),
        FieldOp::NotEq(v) if v.is_empty() => format!("({col} IS NOT NULL AND {col} <> '')"),
        FieldOp::NotEq(v) => format!("({col} IS NULL OR {col} <> {})", b.text(v)),
        FieldOp::In(vs) if empty(vs) => format!("({col} IS NULL OR {col} IN {})", b.list(vs)),
        FieldOp::In(vs) => format!("{col} IN {}", b.list(vs)),
        FieldOp::NotIn(vs) if empty(vs) => {
            format!("({col} IS NOT NULL AND {col} NOT IN {})", b.list(vs))
        }
        FieldOp::NotIn(vs) => format!("({col} IS NULL OR {col} NOT IN {})", b.list(vs)),
    }
}

/// What a search reads rows from: `resources`, or on SQLite, when it is driven, the
/// driver's ids `CROSS JOIN resources` (SQLite keeps a CROSS JOIN's order: as an `IN`
/// condition its planner still walks the order index, testing each row against the
/// ids, which costs the whole type when the ids are few).
fn source(b: &mut Builder, s: &Search) -> String {
    let ids = match (s.drive, b.d) {
        (Some(Drive::Label(i)), Dialect::Sqlite) => {
            let Some((k, vals)) = s.labels.get(i).and_then(positive) else {
                return "resources".into();
            };
            let k = b.text(k);
            let v = label_values(b, vals);
            format!("SELECT rid FROM labels WHERE key = {k}{v}")
        }
        (Some(Drive::Name(terms)), Dialect::Sqlite) => {
            let fuzzy = s.q.fuzzy_name.as_deref().unwrap_or_default();
            let Some(pattern) = fts_pattern(fuzzy) else {
                return "resources".into();
            };
            let chosen = terms.and_then(|[i, j]| {
                let all = trigrams(fuzzy)?;
                let (a, b) = (all.get(i)?, all.get(j)?);
                Some(if a == b {
                    fts_all(&[a])
                } else {
                    fts_all(&[a, b])
                })
            });
            let p = b.text(&pattern);
            match chosen {
                // `+name`: tested on each name the two trigrams select, not handed to
                // the index (whose LIKE would intersect every trigram's names)
                Some(m) => {
                    let m = b.text(&m);
                    format!(
                        "SELECT rowid AS rid FROM resources_names WHERE resources_names MATCH {m} AND +name LIKE {p}"
                    )
                }
                None => format!("SELECT rowid AS rid FROM resources_names WHERE name LIKE {p}"),
            }
        }
        (Some(Drive::Owner), Dialect::Sqlite) => {
            let c = b.text(s.q.owner_cluster());
            let owned = in_or_none(b, "owner_uid", s.owners.unwrap_or_default());
            format!("SELECT id AS rid FROM resources WHERE cluster = {c} AND {owned}")
        }
        _ => return "resources".into(),
    };
    format!("({ids}) AS driver CROSS JOIN resources ON resources.id = driver.rid")
}

fn conditions(b: &mut Builder, s: &Search) -> Vec<String> {
    let q = s.q;
    let mut c = vec![gvr_cond(b, s.gvr)];
    if !q.clusters.is_empty() {
        c.push(format!("cluster IN {}", b.list(&q.clusters)));
    }
    if let Some(allowed) = &s.scope.clusters {
        c.push(in_or_none(
            b,
            "cluster",
            &allowed.iter().cloned().collect::<Vec<_>>(),
        ));
    }
    if !q.namespaces.is_empty() {
        c.push(format!("namespace IN {}", b.list(&q.namespaces)));
    }
    if let Some(allowed) = &s.scope.namespaces {
        c.push(in_or_none(
            b,
            "namespace",
            &allowed.iter().cloned().collect::<Vec<_>>(),
        ));
    }
    if !q.names.is_empty() {
        c.push(format!("name IN {}", b.list(&q.names)));
    }
    if let Some(f) = &q.fuzzy_name {
        let like = if b.d == Dialect::Postgres {
            "ILIKE"
        } else {
            "LIKE"
        };
        let p = b.text(&format!("%{}%", like_escape(f)));
        c.push(format!("name {like} {p} ESCAPE '\\'"));
    }
    if let Some(t) = q.since {
        c.push(format!("created_at >= {}", b.int(t.as_millisecond())));
    }
    if let Some(t) = q.before {
        c.push(format!("created_at < {}", b.int(t.as_millisecond())));
    }
    if let Some(owners) = s.owners {
        c.push(in_or_none(b, "owner_uid", owners));
    }
    let joined = match (s.drive, b.d) {
        (Some(Drive::Label(i)), Dialect::Sqlite) => Some(i),
        _ => None,
    };
    c.extend(
        s.labels
            .iter()
            .enumerate()
            .filter(|(i, _)| joined != Some(*i))
            .map(|(i, r)| label_cond(b, r, s.drive == Some(Drive::Label(i)))),
    );
    c.extend(s.fields.iter().map(|t| field_cond(b, t)));
    c
}

/// The keyset condition: rows strictly after `after` in the order `keys`.
fn after_cond(b: &mut Builder, keys: &[SortKey], after: &[String]) -> Result<String, QueryError> {
    let damaged =
        || QueryError("the continue token is damaged: list again without continue".into());
    if after.len() != keys.len() {
        return Err(damaged());
    }
    let mut vals = Vec::new();
    for (k, v) in keys.iter().zip(after) {
        vals.push(if numeric(k.field) {
            b.int(v.parse().map_err(|_| damaged())?)
        } else {
            b.text(v)
        });
    }
    let cols: Vec<&str> = keys.iter().map(|k| column(k.field)).collect();
    let op = if keys[0].desc { "<" } else { ">" };
    if keys.iter().all(|k| k.desc == keys[0].desc) {
        // one direction: a row-value comparison, which both planners turn into an index
        // range
        return Ok(format!("({}) {op} ({})", cols.join(", "), vals.join(", ")));
    }
    let mut ors = Vec::new();
    for i in 0..keys.len() {
        let mut ands: Vec<String> = (0..i)
            .map(|j| format!("{} = {}", cols[j], vals[j]))
            .collect();
        let op = if keys[i].desc { "<" } else { ">" };
        ands.push(format!("{} {op} {}", cols[i], vals[i]));
        ors.push(format!("({})", ands.join(" AND ")));
    }
    // a leading range on the first key lets the planner seek an index
    Ok(format!(
        "{} {op}= {} AND ({})",
        cols[0],
        vals[0],
        ors.join(" OR ")
    ))
}

/// The page query: objects (as JSON text) and their sort columns, `limit + 1` rows.
pub(crate) fn search_page(d: Dialect, s: &Search) -> Result<Stmt, QueryError> {
    let mut b = Builder::new(d);
    let from = source(&mut b, s);
    let c = page_conditions(&mut b, s)?;
    let order = order_by(s.q, "");
    let mut sql = format!(
        "SELECT object, cluster, namespace, name, created_at, rv_num FROM {from} WHERE {} ORDER BY {order}",
        c.join(" AND "),
    );
    if let Some(limit) = s.q.limit {
        sql.push_str(&format!(" LIMIT {}", u64::from(limit) + 1));
    }
    Ok(b.finish(sql))
}

/// PostgreSQL: the page of a fuzzy-name search sorted from its first `cap + 1` matches,
/// each row with how many of them there were (a last cell; at most `cap + 1`: when it
/// is over `cap`, the page may miss rows and the caller runs [`search_page`] instead).
///
/// The planner cannot estimate how many names contain a string: it guessed 8,377 of
/// a million Pods for a name 10 contain, walked the order index for a page and read
/// every Pod (1.1 s); from the trigram index the matches took 13 ms. Here the matches
/// are selected apart from the order (the inner `LIMIT` keeps the planner from walking
/// the order index for them: it takes the trigram index), sorted by their keys only,
/// and the objects of the page's rows read last.
pub(crate) fn fuzzy_page(s: &Search, cap: i64) -> Result<Stmt, QueryError> {
    let mut b = Builder::new(Dialect::Postgres);
    let c = page_conditions(&mut b, s)?;
    let cap = b.int(cap.saturating_add(1));
    let limit =
        s.q.limit
            .map(|l| format!(" LIMIT {}", u64::from(l) + 1))
            .unwrap_or_default();
    let keys = "id, cluster, namespace, name, created_at, rv_num";
    let sql = format!(
        "SELECT r.object, m.cluster, m.namespace, m.name, m.created_at, m.rv_num, m.matched FROM \
         (SELECT {keys}, COUNT(*) OVER () AS matched FROM \
           (SELECT {keys} FROM resources WHERE {} LIMIT {cap}) AS i \
          ORDER BY {}{limit}) AS m \
         JOIN resources r ON r.id = m.id ORDER BY {}",
        c.join(" AND "),
        order_by(s.q, ""),
        order_by(s.q, "m."),
    );
    Ok(b.finish(sql))
}

/// The query's order, each column prefixed (a table alias).
fn order_by(q: &Query, prefix: &str) -> String {
    q.order
        .iter()
        .map(|k| {
            let dir = if k.desc { " DESC" } else { "" };
            format!("{prefix}{}{dir}", column(k.field))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The conditions of a page: the search's, and where the page starts.
fn page_conditions(b: &mut Builder, s: &Search) -> Result<Vec<String>, QueryError> {
    let d = b.d;
    let mut c = conditions(b, s);
    match (&s.q.after, s.q.order.first()) {
        (Some(after), _) => c.push(after_cond(b, &s.q.order, after)?),
        // the first page: SQLite takes an open range on the first sort column as a
        // reason to walk the index that starts with it (sorting only ties), as later
        // pages do, rather than another index of the type's rows and a sort of them all
        // (in the default order it took the namespace-first index: seconds at 1M Pods)
        (None, Some(k)) if d == Dialect::Sqlite => {
            // every value is in the range: text >= '', numbers >= MIN (<= MAX descending)
            let range = match (numeric(k.field), k.desc) {
                (false, _) => format!(">= {}", b.text("")),
                (true, false) => format!(">= {}", b.int(i64::MIN)),
                (true, true) => format!("<= {}", b.int(i64::MAX)),
            };
            c.push(format!("{} {range}", column(k.field)));
        }
        _ => {}
    }
    Ok(c)
}

/// Counts the rows strictly after `last` (the sort values of a page's last row).
pub(crate) fn count_after(d: Dialect, s: &Search, last: &[String]) -> Result<Stmt, QueryError> {
    let mut b = Builder::new(d);
    let from = source(&mut b, s);
    let mut c = conditions(&mut b, s);
    c.push(after_cond(&mut b, &s.q.order, last)?);
    Ok(b.finish(format!(
        "SELECT COUNT(*) FROM {from} WHERE {}",
        c.join(" AND ")
    )))
}

/// The cell of a page row (`object, cluster, namespace, name, created_at, rv_num`) a
/// sort field reads.
fn cell_of(f: SortField) -> usize {
    match f {
        SortField::Cluster => 1,
        SortField::Namespace => 2,
        SortField::Name => 3,
        SortField::CreatedAt => 4,
        SortField::ResourceVersion => 5,
    }
}

/// The sort values of a page row, one per key of the order, as continue tokens carry
/// them.
pub(crate) fn sort_values(order: &[SortKey], row: &[Cell]) -> Vec<String> {
    order
        .iter()
        .map(|k| {
            let c = &row[cell_of(k.field)];
            if numeric(k.field) {
                c.int().to_string()
            } else {
                c.as_str().to_string()
            }
        })
        .collect()
}

/// Two page rows compared as `ORDER BY` sorts them: text byte by byte (SQLite's BINARY
/// collation, PostgreSQL's "C"), numbers as numbers (merging the pages of several
/// SQLite files).
pub(crate) fn compare_rows(order: &[SortKey], a: &[Cell], b: &[Cell]) -> std::cmp::Ordering {
    for k in order {
        let i = cell_of(k.field);
        let o = if numeric(k.field) {
            a[i].int().cmp(&b[i].int())
        } else {
            a[i].as_str().cmp(b[i].as_str())
        };
        let o = if k.desc { o.reverse() } else { o };
        if o.is_ne() {
            return o;
        }
    }
    std::cmp::Ordering::Equal
}
