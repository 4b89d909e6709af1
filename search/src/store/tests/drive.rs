//! What drives a search (a selective label requirement, the trigram index of names, or
//! the walk of an order index) changes its speed, never its answer: every driver of
//! each query gives the objects a plain filter of the records selects, in order, page
//! after page, on both backends.

use serde_json::json;

use super::*;
use crate::store::sql::{Drive, Search};

const OBJECTS: usize = 60;
const WORDS: [&str; 3] = ["nginx", "redis", "envoy"];
const TIERS: [&str; 3] = ["front", "back", "cache"];

/// Object `i`: (cluster, namespace, name) and its labels (no version label when
/// `i % 5 == 0`).
fn shape(
    i: usize,
) -> (
    &'static str,
    &'static str,
    String,
    Vec<(&'static str, String)>,
) {
    let mut labels = vec![
        ("app", format!("app{}", i % 6)),
        ("tier", TIERS[(i / 3) % 3].to_string()),
    ];
    if !i.is_multiple_of(5) {
        labels.push(("version", format!("v{}", 1 + i % 4)));
    }
    (
        ["a", "b"][i % 2],
        ["ns1", "ns2"][(i / 2) % 2],
        format!("{}-{i:02}", WORDS[i % 3]),
        labels,
    )
}

async fn fill(s: &Store) {
    let records: Vec<Record> = (0..OBJECTS)
        .map(|i| {
            let (cluster, ns, name, labels) = shape(i);
            let labels: serde_json::Map<String, serde_json::Value> = labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
            record(
                cluster,
                ns,
                &name,
                &(i + 1).to_string(),
                json!({"metadata": {"labels": labels}}),
            )
        })
        .collect();
    s.upsert(records).await.unwrap();
}

type Want = fn(usize) -> bool;

fn label(i: usize, key: &str) -> Option<String> {
    shape(i)
        .3
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The queries, and which objects each selects.
fn cases() -> Vec<(&'static str, Want)> {
    vec![
        ("labelSelector=app%3Dapp1", |i| i % 6 == 1),
        (
            "labelSelector=tier%3Dfront,version in (v1,v2)&namespaces=ns1",
            |i| {
                label(i, "tier").as_deref() == Some("front")
                    && matches!(label(i, "version").as_deref(), Some("v1" | "v2"))
                    && shape(i).1 == "ns1"
            },
        ),
        (
            "labelSelector=tier in (front,back),app!%3Dapp2,!version",
            |i| {
                label(i, "tier").as_deref() != Some("cache")
                    && label(i, "app").as_deref() != Some("app2")
                    && label(i, "version").is_none()
            },
        ),
        ("labelSelector=version&fuzzy-name=NGIN", |i| {
            label(i, "version").is_some() && i % 3 == 0
        }),
        ("fuzzy-name=redis&clusters=b", |i| i % 3 == 1 && i % 2 == 1),
        ("fuzzy-name=redis&orderby=name%20desc", |i| i % 3 == 1),
        // one trigram
        ("fuzzy-name=S-0", |i| i % 3 == 1 && i < 10),
        ("fuzzy-name=nvoy-1&orderby=name%20desc", |i| {
            i % 3 == 2 && (10..20).contains(&i)
        }),
        (
            "labelSelector=app in (app1,app3),tier%3Dback&orderby=name%20desc",
            |i| matches!(i % 6, 1 | 3) && label(i, "tier").as_deref() == Some("back"),
        ),
    ]
}

/// Every driver that applies to a query: none, each positive requirement, the names.
fn drivers(
    s: &Store,
    q: &Query,
    labels: &[k8s_validation::selector::Requirement],
) -> Vec<Option<Drive>> {
    let mut out = vec![None];
    out.extend(
        sql::label_counts(s.dialect(), labels, 1)
            .into_iter()
            .map(|(i, _)| Some(Drive::Label(i))),
    );
    let fuzzy = q.fuzzy_name.as_deref().unwrap_or_default();
    if s.backend() == "sqlite" && sql::fts_pattern(fuzzy).is_some() {
        out.push(Some(Drive::Name(None)));
        // every pair of the name's trigrams (the store drives from its rarest two)
        let n = sql::trigrams(fuzzy).map_or(0, |t| t.len());
        for i in 0..n {
            for j in i..n {
                out.push(Some(Drive::Name(Some([i, j]))));
            }
        }
    }
    out
}

/// Every page of `qs` (pages of 4), each read by `one` from its query string.
async fn paged<F, Fut>(qs: &str, mut one: F) -> Vec<String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Page>,
{
    let mut got = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..OBJECTS {
        let page_qs = match &token {
            Some(t) => format!("{qs}&limit=4&continue={t}"),
            None => format!("{qs}&limit=4"),
        };
        let page = one(page_qs).await;
        got.extend(names(&page));
        token = page.continue_token;
        if token.is_none() {
            return got;
        }
    }
    panic!("{qs}: more than {OBJECTS} pages");
}

/// Every page of `qs` (pages of 4) with `drive`.
async fn walk(s: &Store, qs: &str, drive: Option<Drive>) -> Vec<String> {
    paged(qs, |page_qs| async move {
        let q = query(&page_qs);
        let labels = label_requirements(&q);
        let (gvr, scope) = (deployments(), Scope::default());
        let search = Search {
            gvr: &gvr,
            q: &q,
            scope: &scope,
            labels: &labels,
            fields: &[],
            owners: None,
            drive,
        };
        s.page_of(&search).await.unwrap()
    })
    .await
}

fn expected(qs: &str, want: Want) -> Vec<String> {
    let mut rows: Vec<(String, String, String)> = (0..OBJECTS)
        .filter(|i| want(*i))
        .map(|i| {
            let (c, ns, name, _) = shape(i);
            (c.to_string(), ns.to_string(), name)
        })
        .collect();
    if qs.contains("orderby=name%20desc") {
        rows.sort_by(|a, b| b.2.cmp(&a.2));
    } else {
        rows.sort();
    }
    rows.into_iter()
        .map(|(c, ns, n)| format!("{c}/{ns}/{n}"))
        .collect()
}

both!(
    every_driver_gives_the_same_pages,
    |s: Store, _spec| async move {
        fill(&s).await;
        for (qs, want) in cases() {
            let want = expected(qs, want);
            assert!(
                !want.is_empty(),
                "{qs} selects nothing: the case tests nothing"
            );
            let q = query(qs);
            let labels = label_requirements(&q);
            for drive in drivers(&s, &q, &labels) {
                assert_eq!(walk(&s, qs, drive).await, want, "{qs} driven by {drive:?}");
            }
            // and as the store chooses, from the trigram index at once on SQLite; with
            // a low cap on what a driver may fetch (PostgreSQL's fuzzy page from its
            // matches, then the planner's when there are more), whole and page by page
            for (steps, cap) in [
                (super::super::NAME_WALK_STEPS, super::super::DRIVE_MAX),
                (0, super::super::DRIVE_MAX),
                (super::super::NAME_WALK_STEPS, 3),
            ] {
                let relaxed = std::sync::atomic::Ordering::Relaxed;
                s.inner.name_walk_steps.store(steps, relaxed);
                s.inner.drive_max.store(cap, relaxed);
                let how = format!("{qs}, name walk budget {steps}, cap {cap}");
                assert_eq!(all(&s, qs).await, want, "{how}");
                let pages = paged(qs, |page_qs| {
                    let s = s.clone();
                    async move {
                        let q = query(&page_qs);
                        s.search(&deployments(), &q, &Scope::default())
                            .await
                            .unwrap()
                    }
                })
                .await;
                assert_eq!(pages, want, "{how}, pages of 4");
            }
        }
    }
);

/// SQLite: the trigram index of names follows every write, delete and purge.
async fn names_indexed(s: &Store) -> (i64, i64) {
    let count = |table: &str| sql::Stmt {
        sql: format!("SELECT COUNT(*) FROM {table}"),
        params: vec![],
    };
    (
        s.sum(count("resources")).await.unwrap(),
        s.sum(count("resources_names")).await.unwrap(),
    )
}

#[tokio::test]
async fn the_names_index_follows_writes_deletes_and_purges() {
    let f = open("sqlite").await;
    let s = f.store.clone();
    s.inner
        .name_walk_steps
        .store(0, std::sync::atomic::Ordering::Relaxed);
    fill(&s).await;
    assert_eq!(names_indexed(&s).await, (OBJECTS as i64, OBJECTS as i64));
    assert_eq!(all(&s, "fuzzy-name=nginx-00").await, ["a/ns1/nginx-00"]);
    // a trigram no name holds, a quote in a phrase: nothing, no error
    assert!(all(&s, "fuzzy-name=zzzz").await.is_empty());
    assert!(all(&s, "fuzzy-name=ng%22inx").await.is_empty());
    s.delete(vec![key("a", "ns1", "nginx-00")]).await.unwrap();
    assert!(all(&s, "fuzzy-name=nginx-00").await.is_empty());
    // the newest row deleted and written again (its id may be reused): indexed again
    let newest = s.rows(sql::Stmt {
        sql: "SELECT cluster, namespace, name FROM resources ORDER BY id DESC LIMIT 1".into(),
        params: vec![],
    });
    let newest: Vec<String> = newest.await.unwrap()[0]
        .iter()
        .map(|c| c.clone().text())
        .collect();
    s.delete(vec![key(&newest[0], &newest[1], &newest[2])])
        .await
        .unwrap();
    s.upsert(vec![record(
        &newest[0],
        &newest[1],
        &newest[2],
        "1000",
        json!({}),
    )])
    .await
    .unwrap();
    assert_eq!(
        all(&s, &format!("fuzzy-name={}", newest[2])).await,
        [newest.join("/")]
    );
    // an update (new resourceVersion) keeps one entry
    let (c, ns, name, _) = shape(3);
    s.upsert(vec![record(c, ns, &name, "999", json!({}))])
        .await
        .unwrap();
    assert_eq!(
        all(&s, &format!("fuzzy-name={name}")).await,
        [format!("{c}/{ns}/{name}")]
    );
    assert_eq!(
        names_indexed(&s).await,
        (OBJECTS as i64 - 1, OBJECTS as i64 - 1)
    );
    s.purge_cluster("b").await.unwrap();
    assert_eq!(
        names_indexed(&s).await,
        (OBJECTS as i64 / 2 - 1, OBJECTS as i64 / 2 - 1)
    );
    assert!(all(&s, "fuzzy-name=redis&clusters=b").await.is_empty());
}

#[tokio::test]
async fn a_read_over_its_budget_is_none_not_an_error() {
    // one file: every object in the one read
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_with(dir.path().join("s.db").to_str().unwrap(), 1)
        .await
        .unwrap();
    fill(&s).await;
    let Backend::Sqlite(b) = &s.inner.parts[0].db else {
        unreachable!("an SQLite store")
    };
    // a scan of every name, joined with itself: far more than one progress interval
    let scan = || {
        sql::Stmt {
        sql: "SELECT COUNT(*) FROM resources r1, resources r2 WHERE r1.name LIKE '%x%' OR r2.name LIKE '%y%'".into(),
        params: vec![],
    }
    };
    assert_eq!(b.rows_within(scan(), 1).await.unwrap(), None);
    assert!(b.rows_within(scan(), u64::MAX / 2).await.unwrap().is_some());
    assert!(
        b.rows(scan()).await.is_ok(),
        "the budget does not outlive its read"
    );
}

#[tokio::test]
async fn a_version_1_database_gains_the_names_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);")
            .unwrap();
        c.execute_batch(schema::migrations(Dialect::Sqlite)[0])
            .unwrap();
        c.execute(
            r#"INSERT INTO resources (grp, version, resource, cluster, namespace, name, uid, resource_version, rv_num, created_at, object)
             VALUES ('apps', 'v1', 'deployments', 'a', 'ns', 'payments-api-7', 'u', '1', 1, 0,
                     '{"metadata": {"name": "payments-api-7", "namespace": "ns"}}')"#,
            [],
        )
        .unwrap();
    }
    let s = Store::open(path.to_str().unwrap()).await.unwrap();
    s.inner
        .name_walk_steps
        .store(0, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(names_indexed(&s).await, (1, 1));
    assert_eq!(all(&s, "fuzzy-name=API-7").await, ["a/ns/payments-api-7"]);
    // the upgraded store's writer indexes the names of the rows it adds
    s.upsert(vec![record("a", "ns", "checkout-web-3", "2", json!({}))])
        .await
        .unwrap();
    assert_eq!(names_indexed(&s).await, (2, 2));
    assert_eq!(all(&s, "fuzzy-name=web-3").await, ["a/ns/checkout-web-3"]);
}

#[tokio::test]
async fn postgres_has_a_trigram_index_of_names() {
    let f = open("postgres").await;
    let def = pg_text(
        &f.store,
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'resources_name_trgm'",
    )
    .await;
    assert!(def.contains("gin_trgm_ops"), "{def}");
    testing::drop_postgres_db(&f.spec).await;
}

#[test]
fn a_fuzzy_names_trigrams_are_folded_spread_and_capped() {
    let t = |s: &str| sql::trigrams(s);
    assert_eq!(t("NGINX").unwrap(), ["ngi", "inx"]);
    assert_eq!(t("NGINX-1").unwrap(), ["ngi", "nx-", "x-1"]);
    assert_eq!(t("aaaa").unwrap(), ["aaa"]);
    assert_eq!(t("abc").unwrap(), ["abc"]);
    // too short, a wildcard, not ASCII: the index's own LIKE or the scan
    for none in ["ab", "a%bc", "a_bc", "caf\u{e9}s"] {
        assert_eq!(t(none), None, "{none}");
    }
    // a long name: every third and the last, the last 8 of them
    let long = t("abcdefghijklmnopqrstuvwxyz").unwrap();
    assert_eq!(
        long,
        ["def", "ghi", "jkl", "mno", "pqr", "stu", "vwx", "xyz"].map(String::from)[..]
    );
    let longer = t(&"abcdefghijklmnopqrstuvwxyz".repeat(2)).unwrap();
    assert_eq!((longer.len(), longer[7].as_str()), (8, "xyz"));
}

#[test]
fn a_fuzzy_name_is_driven_from_its_rarest_trigrams_or_walked() {
    use super::super::NameDrivers::{self, *};
    let over = super::super::DRIVE_MAX + 1;
    let cases: [(&[i64], NameDrivers); 7] = [
        (&[], Unknown),
        (&[5], Rare([0, 0])),
        (&[over, 0, 7], Rare([1, 1])),
        (&[over, 300, 20, over], Rare([2, 1])),
        (&[over, over, 9, 9], Rare([2, 3])),
        (&[over], Common([0, 0])),
        (&[over, over, over], Common([0, 2])),
    ];
    for (counts, want) in cases {
        assert_eq!(
            NameDrivers::choose(counts, super::super::DRIVE_MAX),
            want,
            "{counts:?}"
        );
    }
}

/// A version-1 store with the statistics ANALYZE left at 1.2M objects (the bench's):
/// the version-2 index has none until the store refreshes them.
fn version_1_store_with_statistics(path: &std::path::Path) {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);")
        .unwrap();
    c.execute_batch(schema::migrations(Dialect::Sqlite)[0])
        .unwrap();
    c.execute_batch(
        "ANALYZE sqlite_schema;
         INSERT INTO sqlite_stat1 VALUES
            ('labels', 'labels_kv', '5800000 1160000 53'),
            ('labels', 'labels', '5800000 5 1'),
            ('resources', 'resources_rv', '1200000 600000 600000 400000 10 1 1 1'),
            ('resources', 'resources_created', '1200000 600000 600000 400000 10 1 1 1'),
            ('resources', 'resources_owner', '1200000 120000 6'),
            ('resources', 'sqlite_autoindex_resources_1', '1200000 600000 600000 400000 40000 800 1');",
    )
    .unwrap();
}

#[tokio::test]
async fn a_first_page_walks_the_index_of_its_order_not_a_sort_of_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.db");
    version_1_store_with_statistics(&path);
    let s = Store::open(path.to_str().unwrap()).await.unwrap();
    fill(&s).await;
    for qs in [
        "labelSelector=tier%3Dcache",
        "fuzzy-name=ngin",
        "",
        "namespaces=ns1&labelSelector=tier%3Dcache",
        "orderby=created_at_desc",
        "orderby=resource_version",
    ] {
        let plan = plan(&s, &format!("{qs}&limit=4")).await;
        assert!(!plan.contains("TEMP B-TREE FOR ORDER BY"), "{qs}:\n{plan}");
    }
}

both!(
    an_owner_search_is_driven_from_the_owner_index_on_sqlite,
    |s: Store, _spec| async move {
        let records: Vec<Record> = (0..OBJECTS)
            .map(|i| {
                let (cluster, ns, name, _) = shape(i);
                let owner = json!({"metadata": {"ownerReferences": [
                    {"uid": format!("owner-{}", i % 4), "controller": true}]}});
                record(cluster, ns, &name, "1", owner)
            })
            .collect();
        s.upsert(records).await.unwrap();
        let qs = "clusters=a&ownerUID=owner-2";
        let q = query(qs);
        let owners = s.owner_uids(&q).await.unwrap();
        let part = s.part(s.part_of("a").await.unwrap().unwrap());
        let drive = s
            .drive(part, &q, &[], owners.as_deref(), DRIVE_MAX)
            .await
            .unwrap();
        let want_drive = (s.backend() == "sqlite").then_some(Drive::Owner);
        assert_eq!(drive, want_drive);
        let want = expected(qs, |i| i % 4 == 2 && shape(i).0 == "a");
        assert!(!want.is_empty());
        assert_eq!(all(&s, qs).await, want);
        // and page by page
        assert_eq!(walk_owned(&s, qs).await, want);
    }
);

/// Every page (of 4) of an owner search, as the store chooses its driver.
async fn walk_owned(s: &Store, qs: &str) -> Vec<String> {
    paged(qs, |page_qs| async move {
        s.search(&deployments(), &query(&page_qs), &Scope::default())
            .await
            .unwrap()
    })
    .await
}

/// PostgreSQL: the row of `sql`'s first column, as text.
async fn pg_text(s: &Store, sql: &str) -> String {
    let rows = s
        .rows(sql::Stmt {
            sql: sql.into(),
            params: vec![],
        })
        .await
        .unwrap();
    rows.into_iter().next().expect("a row")[0].clone().text()
}

#[tokio::test]
async fn a_label_probe_reads_only_the_labels_key_on_postgres() {
    let f = open("postgres").await;
    let s = &f.store;
    // up to the first statistics refresh, which also starts a VACUUM
    for start in (0..ANALYZE_AFTER as usize).step_by(500) {
        let batch: Vec<Record> = (start..start + 500)
            .map(|i: usize| {
                let labels = json!({"tier": TIERS[i % 3], "version": format!("v{}", i % 4)});
                record(
                    "a",
                    &format!("ns{}", i % 10),
                    &format!("obj-{i:05}"),
                    "1",
                    json!({"metadata": {"labels": labels}}),
                )
            })
            .collect();
        s.upsert(batch).await.unwrap();
    }
    // the store's VACUUM runs on a connection of its own: wait until it has run
    let deadline = std::time::Instant::now() + VACUUM_WAIT;
    vacuumed(s, "labels", 1).await;
    // a VACUUM marks a page all-visible only once no transaction older than its rows
    // runs anywhere on the server (other tests' databases too, as the server computes
    // it): VACUUM again until every page is
    let (client, conn) = tokio_postgres::connect(&f.spec, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let visible = "SELECT relallvisible || '/' || relpages FROM pg_class WHERE relname = 'labels'";
    loop {
        let state = pg_text(s, visible).await;
        if state
            .split_once('/')
            .is_some_and(|(v, all)| v == all && all != "0")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the labels' pages are not all-visible after VACUUMs (all-visible/pages: {state})"
        );
        client.batch_execute("VACUUM labels").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let p = plan(
        s,
        "namespaces=ns3&labelSelector=tier=front,version in (v1,v2)&limit=10",
    )
    .await;
    assert!(
        p.contains("Index Only Scan using labels_pkey on labels")
            && !p.contains("Index Scan using labels_pkey"),
        "each row's labels are probed in the key, not the heap:\n    {p}"
    );
    testing::drop_postgres_db(&f.spec).await;
}

/// How long a test waits for the store's VACUUMs.
const VACUUM_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// PostgreSQL: the VACUUMs (not autovacuum's) `table` has had.
async fn vacuums(s: &Store, table: &str) -> u32 {
    let sql = format!("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = '{table}'");
    pg_text(s, &sql).await.parse().unwrap()
}

/// Waits until `table` has had `count` VACUUMs ([`VACUUM_WAIT`] at most).
async fn vacuumed(s: &Store, table: &str, count: u32) {
    let deadline = std::time::Instant::now() + VACUUM_WAIT;
    while vacuums(s, table).await < count {
        assert!(
            std::time::Instant::now() < deadline,
            "{table} had fewer than {count} VACUUMs in {VACUUM_WAIT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `n` Deployments `obj-00000`… in cluster `a`, namespace `ns`, with a tier label.
fn tiered(range: std::ops::Range<usize>) -> Vec<Record> {
    range
        .map(|i| {
            let labels = json!({"tier": TIERS[i % 3]});
            record(
                "a",
                "ns",
                &format!("obj-{i:05}"),
                "1",
                json!({"metadata": {"labels": labels}}),
            )
        })
        .collect()
}

/// Writes too few for a statistics refresh (or autovacuum) still get a VACUUM once the
/// writers have been quiet for a second: the end of a bulk ingest, when searches start.
#[tokio::test]
async fn quiet_writers_start_a_vacuum_on_postgres() {
    let f = open("postgres").await;
    let s = &f.store;
    s.upsert(tiered(0..300)).await.unwrap();
    assert_eq!(vacuums(s, "labels").await, 0);
    vacuumed(s, "labels", 1).await;
    vacuumed(s, "resources", 1).await;
    // deletes leave dead rows: the next quiet period vacuums again
    let gone: Vec<Key> = (0..100)
        .map(|i| key("a", "ns", &format!("obj-{i:05}")))
        .collect();
    assert_eq!(s.delete(gone).await.unwrap(), 100);
    vacuumed(s, "labels", 2).await;
    vacuumed(s, "resources", 2).await;
    // and with nothing written since, no other
    tokio::time::sleep(crate::store::idle::IDLE * 3).await;
    assert_eq!(vacuums(s, "resources").await, 2);
    testing::drop_postgres_db(&f.spec).await;
}

/// A long ingest (writes never quiet for a second) is vacuumed as it goes, every
/// `VACUUM_EVERY` objects (500 here), so the VACUUM when it ends has little left; and
/// that one is not run when a VACUUM that started after the last write has completed.
#[tokio::test]
async fn a_long_ingest_is_vacuumed_as_it_goes_on_postgres() {
    let f = open("postgres").await;
    let s = &f.store;
    let Backend::Postgres(b) = &s.inner.parts[0].db else {
        unreachable!("a PostgreSQL store")
    };
    b.vacuums
        .every
        .store(500, std::sync::atomic::Ordering::Relaxed);
    // below the first statistics refresh (which starts one too), a batch every 50 ms
    let mut seen = 0;
    for start in (0..4_000).step_by(100) {
        s.upsert(tiered(start..start + 100)).await.unwrap();
        seen = vacuums(s, "labels").await;
        if seen >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        seen >= 2,
        "{seen} VACUUMs of labels while 4,000 objects were written"
    );
    // one started by the ingest after its last write covers it: the quiet writers'
    // upkeep finds it done and starts none
    let deadline = std::time::Instant::now() + VACUUM_WAIT;
    while b.vacuums.running.load(std::sync::atomic::Ordering::Acquire) {
        assert!(
            std::time::Instant::now() < deadline,
            "a VACUUM still running after {VACUUM_WAIT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let before = vacuums(s, "resources").await;
    s.upsert(tiered(5_000..5_500)).await.unwrap();
    vacuumed(s, "resources", before + 1).await;
    tokio::time::sleep(crate::store::idle::IDLE * 3).await;
    assert_eq!(vacuums(s, "resources").await, before + 1);
    testing::drop_postgres_db(&f.spec).await;
}

#[tokio::test]
async fn a_version_2_postgres_store_gains_the_covering_labels_key() {
    let spec = testing::postgres_db().await;
    {
        let (client, conn) = tokio_postgres::connect(&spec, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let v2 = schema::migrations(Dialect::Postgres)[..2].join(";\n");
        client
            .batch_execute(&format!(
                r#"CREATE TABLE schema_version (version BIGINT NOT NULL); INSERT INTO schema_version VALUES (2); {v2};
                 INSERT INTO resources (grp, version, resource, cluster, namespace, name, uid, resource_version, rv_num, created_at, object)
                 VALUES ('apps', 'v1', 'deployments', 'a', 'ns', 'web', 'u', '1', 1, 0,
                         '{{"metadata": {{"name": "web", "namespace": "ns"}}}}');
                 INSERT INTO labels SELECT id, 'app', 'web' FROM resources"#
            ))
            .await
            .unwrap();
    }
    let s = Store::open(&spec).await.unwrap();
    let def = pg_text(
        &s,
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'labels_pkey'",
    )
    .await;
    assert!(def.ends_with("(rid, key) INCLUDE (value)"), "{def}");
    assert_eq!(all(&s, "labelSelector=app=web").await, ["a/ns/web"]);
    drop(s);
    testing::drop_postgres_db(&spec).await;
}

/// The annotations of each object `s` lists as Deployments, by name.
async fn annotations_of(s: &Store) -> std::collections::BTreeMap<String, Vec<String>> {
    let page = s
        .search(&deployments(), &query(""), &Scope::default())
        .await
        .unwrap();
    page.items
        .iter()
        .map(|o| {
            let keys = o["metadata"]["annotations"]
                .as_object()
                .map(|a| a.keys().cloned().collect())
                .unwrap_or_default();
            (o["metadata"]["name"].as_str().unwrap().to_string(), keys)
        })
        .collect()
}

/// Rows of an older store: a names-only copy stored with its annotations ("/metadata")
/// and a whole object.
const OLD_ROWS: &str = r#"INSERT INTO resources (grp, version, resource, cluster, namespace, name, uid, resource_version, rv_num, created_at, object)
    VALUES ('apps', 'v1', 'deployments', 'a', 'ns', 'names', 'u1', '42/metadata', 42, 0,
            '{"metadata": {"name": "names", "namespace": "ns", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"secret\": 1}"}}}'),
           ('apps', 'v1', 'deployments', 'a', 'ns', 'whole', 'u2', '43', 43, 0,
            '{"metadata": {"name": "whole", "namespace": "ns", "annotations": {"note": "kept"}}}')"#;

fn stripped_as_it_opens(got: std::collections::BTreeMap<String, Vec<String>>) {
    let cluster = crate::CLUSTER_ANNOTATION.to_string();
    assert_eq!(got["names"], std::slice::from_ref(&cluster), "{got:?}");
    let mut whole = got["whole"].clone();
    whole.sort();
    let mut want = vec![cluster, "note".to_string()];
    want.sort();
    assert_eq!(whole, want);
}

/// A names-only copy an older version stored with its annotations loses them when the
/// store opens (SQLite migration 6), not at a relist a member not Ready never gets; a
/// whole object keeps them.
#[tokio::test]
async fn names_only_copies_stored_with_annotations_lose_them_on_open_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let v5 = schema::migrations(Dialect::Sqlite)[..5].join(";\n");
        c.execute_batch(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (5); {v5}; {OLD_ROWS}; INSERT INTO placements (cluster, part) VALUES ('a', 0);"
        ))
        .unwrap();
    }
    let s = Store::open(path.to_str().unwrap()).await.unwrap();
    stripped_as_it_opens(annotations_of(&s).await);
}

/// The same on PostgreSQL (migration 4).
#[tokio::test]
async fn names_only_copies_stored_with_annotations_lose_them_on_open_on_postgres() {
    let spec = testing::postgres_db().await;
    {
        let (client, conn) = tokio_postgres::connect(&spec, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let v3 = schema::migrations(Dialect::Postgres)[..3].join(";\n");
        client
            .batch_execute(&format!(
                "CREATE TABLE schema_version (version BIGINT NOT NULL); INSERT INTO schema_version VALUES (3); {v3}; {OLD_ROWS}"
            ))
            .await
            .unwrap();
    }
    let s = Store::open(&spec).await.unwrap();
    stripped_as_it_opens(annotations_of(&s).await);
    drop(s);
    testing::drop_postgres_db(&spec).await;
}
