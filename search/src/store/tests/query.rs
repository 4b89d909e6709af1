//! Search behaviour (federation.md §8 K.65–70), on both backends.

use serde_json::json;

use super::*;

/// Search with a scope.
async fn scoped(s: &Store, qs: &str, scope: Scope) -> Vec<String> {
    names(&s.search(&deployments(), &query(qs), &scope).await.unwrap())
}

both!(
    filters_and_cluster_annotation,
    |s: Store, _spec| async move {
        // K.65
        let app = |v: &str| json!({"metadata": {"labels": {"app": v}}});
        s.upsert(vec![
            record("a", "ns", "x1", "1", app("x")),
            record("b", "ns", "x2", "2", app("x")),
            record("c", "ns", "x3", "3", app("x")),
            record("a", "other", "x4", "4", app("x")),
            record("a", "ns", "y1", "5", app("y")),
        ])
        .await
        .unwrap();
        let page = s
            .search(
                &deployments(),
                &query("clusters=a,b&namespaces=ns&labelSelector=app%3Dx"),
                &Scope::default(),
            )
            .await
            .unwrap();
        assert_eq!(names(&page), ["a/ns/x1", "b/ns/x2"]);
        for (item, cluster) in page.items.iter().zip(["a", "b"]) {
            assert_eq!(
                item["metadata"]["annotations"][crate::CLUSTER_ANNOTATION],
                cluster
            );
            assert_eq!(item["metadata"]["labels"]["app"], "x");
        }
        assert_eq!(all(&s, "names=x1,y1").await, ["a/ns/x1", "a/ns/y1"]);
        // other types are not mixed in
        let pods = Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "pods".into(),
        };
        assert!(
            s.search(&pods, &query(""), &Scope::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }
);

both!(
    order_as_requested_and_by_default,
    |s: Store, _spec| async move {
        // K.66
        s.upsert(vec![
            record("b", "ns1", "n1", "1", json!({})),
            record("a", "ns2", "n2", "2", json!({})),
            record("b", "ns2", "n3", "3", json!({})),
            record("a", "ns1", "n4", "4", json!({})),
            record("a", "ns1", "n0", "5", json!({})),
        ])
        .await
        .unwrap();
        assert_eq!(
            all(&s, "orderby=namespace%20desc,cluster").await,
            ["a/ns2/n2", "b/ns2/n3", "a/ns1/n0", "a/ns1/n4", "b/ns1/n1"]
        );
        assert_eq!(
            all(&s, "").await,
            ["a/ns1/n0", "a/ns1/n4", "a/ns2/n2", "b/ns1/n1", "b/ns2/n3"]
        );
        // resourceVersion compares as a number: 10 after 9
        s.upsert(vec![
            record("a", "ns1", "n0", "10", json!({})),
            record("a", "ns1", "n4", "9", json!({})),
        ])
        .await
        .unwrap();
        assert_eq!(
            all(&s, "orderby=resource_version_desc").await,
            ["a/ns1/n0", "a/ns1/n4", "b/ns2/n3", "a/ns2/n2", "b/ns1/n1"]
        );
    }
);

both!(
    keyset_pages_with_remaining_counts,
    |s: Store, _spec| async move {
        // K.67: 12 objects, limit 5 → 5, 5, 2 with 7, 2, 0 remaining
        let recs: Vec<Record> = (0..12)
            .map(|i| record(["a", "b"][i % 2], "ns", &format!("n{i:02}"), "1", json!({})))
            .collect();
        s.upsert(recs).await.unwrap();
        let pages = pages(&s, "limit=5&withRemainingCount=true").await;
        let shape: Vec<_> = pages
            .iter()
            .map(|p| (p.items.len(), p.remaining, p.continue_token.is_some()))
            .collect();
        assert_eq!(
            shape,
            [(5, Some(7), true), (5, Some(2), true), (2, Some(0), false)]
        );
        let seen: Vec<String> = pages.iter().flat_map(names).collect();
        assert_eq!(seen, all(&s, "").await);
        assert_eq!(seen.len(), 12);
        // withContinue=false: a full page, no token
        let page = s
            .search(
                &deployments(),
                &query("limit=5&withContinue=false"),
                &Scope::default(),
            )
            .await
            .unwrap();
        assert_eq!((page.items.len(), page.continue_token), (5, None));
    }
);

/// Every page of a query, following continue tokens (at most 100 pages).
async fn pages(s: &Store, qs: &str) -> Vec<Page> {
    let mut out: Vec<Page> = Vec::new();
    while out.len() < 100 {
        let mut q = qs.to_string();
        if let Some(t) = out.last().and_then(|p| p.continue_token.as_ref()) {
            q.push_str(&format!("&continue={t}"));
        }
        let page = s
            .search(&deployments(), &query(&q), &Scope::default())
            .await
            .unwrap();
        let more = page.continue_token.is_some();
        out.push(page);
        if !more {
            return out;
        }
    }
    panic!("{qs}: paging does not end after 100 pages");
}

/// A tiny deterministic generator (xorshift) for the random paging check.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

both!(
    random_paging_equals_the_sorted_list,
    |s: Store, _spec| async move {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut recs = Vec::new();
        for i in 0..60 {
            let created = format!("2024-01-0{}T00:00:00Z", 1 + rng.next(3));
            let rec = record(
                ["a", "b", "c"][rng.next(3) as usize],
                ["ns1", "ns2", ""][rng.next(3) as usize],
                &format!("o{}", rng.next(1000) + i * 1000),
                &rng.next(20).to_string(),
                json!({"metadata": {"creationTimestamp": created}}),
            );
            recs.push(rec);
        }
        s.upsert(recs).await.unwrap();
        let orders = [
            "",
            "orderby=namespace%20desc,cluster",
            "orderby=created_at_desc,name",
            "orderby=resource_version,namespace_desc",
            "orderby=name%20desc",
        ];
        for case in 0..15 {
            let order = orders[case % orders.len()];
            let full = all(&s, order).await;
            assert_eq!(full.len(), 60);
            let limit = 1 + rng.next(13);
            let pages = pages(
                &s,
                &format!("{order}&limit={limit}&withRemainingCount=true"),
            )
            .await;
            let mut seen = Vec::new();
            for p in &pages {
                seen.extend(names(p));
                let left = (full.len() - seen.len()) as i64;
                assert_eq!(p.remaining, Some(left), "{order} limit {limit}");
            }
            assert_eq!(seen, full, "{order} limit {limit}");
        }
    }
);

both!(creation_window_is_half_open, |s: Store, _spec| async move {
    // K.68
    let at = |t: &str| json!({"metadata": {"creationTimestamp": t}});
    s.upsert(vec![
        record("a", "ns", "before", "1", at("2023-12-31T23:59:59Z")),
        record("a", "ns", "start", "1", at("2024-01-01T00:00:00Z")),
        record("a", "ns", "inside", "1", at("2024-01-01T12:00:00Z")),
        record("a", "ns", "end", "1", at("2024-01-02T00:00:00Z")),
    ])
    .await
    .unwrap();
    assert_eq!(
        all(&s, "since=2024-01-01&before=2024-01-02").await,
        ["a/ns/inside", "a/ns/start"]
    );
    assert_eq!(
        all(&s, "since=1704067200&before=1704153600000").await,
        ["a/ns/inside", "a/ns/start"]
    );
    assert_eq!(all(&s, "before=2024-01-01").await, ["a/ns/before"]);
});

both!(fuzzy_name_escapes_wildcards, |s: Store, _spec| async move {
    // K.69
    s.upsert(vec![
        record("a", "ns", "nginx-1", "1", json!({})),
        record("a", "ns", "redis", "1", json!({})),
        record("a", "ns", "a_b", "1", json!({})),
        record("a", "ns", "axb", "1", json!({})),
        record("a", "ns", "p%q", "1", json!({})),
    ])
    .await
    .unwrap();
    assert_eq!(all(&s, "fuzzy-name=ngin").await, ["a/ns/nginx-1"]);
    assert_eq!(all(&s, "fuzzy-name=NGIN").await, ["a/ns/nginx-1"]);
    assert_eq!(all(&s, "fuzzy-name=a_b").await, ["a/ns/a_b"]);
    assert_eq!(all(&s, "fuzzy-name=%25").await, ["a/ns/p%q"]);
});

both!(
    scope_limits_clusters_and_namespaces,
    |s: Store, _spec| async move {
        s.upsert(vec![
            record("a", "ns1", "w", "1", json!({})),
            record("b", "ns1", "w", "1", json!({})),
            record("a", "ns2", "w", "1", json!({})),
        ])
        .await
        .unwrap();
        let set = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
        let sc = |c, n| Scope {
            clusters: c,
            namespaces: n,
        };
        assert_eq!(
            scoped(&s, "", sc(set(&["a"]), None)).await,
            ["a/ns1/w", "a/ns2/w"]
        );
        assert_eq!(
            scoped(&s, "", sc(None, set(&["ns1"]))).await,
            ["a/ns1/w", "b/ns1/w"]
        );
        assert_eq!(
            scoped(&s, "clusters=b", sc(set(&["a"]), None)).await,
            Vec::<String>::new()
        );
        assert_eq!(
            scoped(&s, "", sc(set(&[]), None)).await,
            Vec::<String>::new()
        );
        assert_eq!(
            scoped(
                &s,
                "namespaces=ns2",
                sc(set(&["a", "b"]), set(&["ns1", "ns2"]))
            )
            .await,
            ["a/ns2/w"]
        );
    }
);

/// A store of several SQLite files answers as one of one file: the same objects, pages,
/// continue tokens and remaining counts, for every order, filter, page size and scope.
#[tokio::test]
async fn several_files_answer_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = Vec::new();
    for (i, files) in [1, 2, 4, 4].into_iter().enumerate() {
        let path = dir.path().join(format!("s{i}.db"));
        let s = Store::open_with(path.to_str().unwrap(), files)
            .await
            .unwrap();
        assert_eq!(s.files(), files);
        stores.push(s);
    }
    // the last drives every fuzzy name from the trigram index in each file
    stores[3]
        .inner
        .name_walk_steps
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut recs = Vec::new();
    for i in 0..150 {
        let created = format!("2024-01-0{}T00:00:00Z", 1 + rng.next(4));
        let (app, tier) = (
            ["web", "db", "cache"][rng.next(3) as usize],
            ["x", "y"][rng.next(2) as usize],
        );
        let labels = json!({"app": app, "tier": tier});
        let owners = json!([{"uid": format!("owner-{}", i % 3), "controller": true}]);
        recs.push(record(
            ["a", "b", "c", "d", "e"][rng.next(5) as usize],
            ["ns1", "ns2", "ns3"][rng.next(3) as usize],
            &format!("o{}-{}", rng.next(50), i),
            &rng.next(30).to_string(),
            json!({"metadata": {"creationTimestamp": created, "labels": labels, "ownerReferences": owners}}),
        ));
    }
    // batches of mixed clusters, as tests and tools write them
    for s in &stores {
        for batch in recs.chunks(40) {
            s.upsert(batch.to_vec()).await.unwrap();
        }
        s.delete(vec![
            key("c", "ns1", "nothing"),
            recs[3].key(),
            recs[77].key(),
        ])
        .await
        .unwrap();
    }
    // the clusters are spread over the files
    let all5 = ["a", "b", "c", "d", "e"].map(String::from);
    let placement = stores[2].inner.placement.as_ref().unwrap();
    assert_eq!(placement.files_of(&all5), [0, 1, 2, 3]);
    let queries = [
        "",
        "orderby=namespace%20desc,cluster",
        "orderby=created_at_desc,name",
        "orderby=resource_version,namespace_desc",
        "labelSelector=app%3Dweb",
        "labelSelector=app%20in%20(db,cache),tier!%3Dx&orderby=created_at",
        "clusters=a,c",
        "clusters=e&namespaces=ns2",
        "clusters=nowhere",
        "fuzzy-name=o1",
        "fuzzy-name=o1-1",
        "fuzzy-name=-10&orderby=name_desc",
        "clusters=a&ownerUID=owner-1",
        "clusters=c&ownerUID=owner-2&orderby=created_at_desc",
    ];
    let scopes = [
        Scope::default(),
        Scope {
            clusters: Some(["a", "b"].map(String::from).into()),
            namespaces: Some(["ns1", "ns3"].map(String::from).into()),
        },
        Scope {
            clusters: Some(Default::default()),
            namespaces: None,
        },
    ];
    for qs in queries {
        for limit in ["&limit=1", "&limit=7", ""] {
            for scope in &scopes {
                let mut answers = Vec::new();
                for s in &stores {
                    let mut got = Vec::new();
                    let mut token: Option<String> = None;
                    for _ in 0..200 {
                        let mut q = format!("{qs}{limit}&withRemainingCount=true");
                        if let Some(t) = &token {
                            q.push_str(&format!("&continue={t}"));
                        }
                        let p = s.search(&deployments(), &query(&q), scope).await.unwrap();
                        got.push((names(&p), p.remaining, p.continue_token.clone()));
                        token = p.continue_token;
                        if token.is_none() {
                            break;
                        }
                    }
                    answers.push(got);
                }
                assert!(
                    answers.iter().all(|a| a == &answers[0]),
                    "{qs} limit {limit} {scope:?}: {answers:#?}"
                );
            }
        }
    }
    // and the rest of the store's reads
    for s in &stores[1..] {
        assert_eq!(
            s.clusters().await.unwrap(),
            stores[0].clusters().await.unwrap()
        );
        for clusters in [vec![], vec!["b".to_string(), "d".to_string()]] {
            assert_eq!(
                s.namespaces(&deployments(), &clusters).await.unwrap(),
                stores[0]
                    .namespaces(&deployments(), &clusters)
                    .await
                    .unwrap()
            );
        }
        let v = |s: &Store| {
            let s = s.clone();
            async move {
                let v = s.versions("d", &deployments()).await.unwrap();
                let mut all: Vec<String> = v
                    .iter()
                    .map(|(ns, n, rv)| format!("{ns}/{n}@{rv}"))
                    .collect();
                all.sort();
                all
            }
        };
        assert_eq!(v(s).await, v(&stores[0]).await);
    }
    // reopened with fewer files: every file a placement names is kept
    let again = Store::open_with(dir.path().join("s2.db").to_str().unwrap(), 1)
        .await
        .unwrap();
    assert_eq!(again.files(), 4);
    for qs in queries {
        assert_eq!(all(&again, qs).await, all(&stores[0], qs).await, "{qs}");
    }
    let mut purged = Vec::new();
    for s in &stores {
        purged.push(s.purge_cluster("b").await.unwrap());
        assert!(!s.clusters().await.unwrap().contains(&"b".to_string()));
    }
    assert!(
        purged[0] > 0 && purged.iter().all(|n| *n == purged[0]),
        "{purged:?}"
    );
}

/// Two handles on one store (two processes): a cluster one placed is written where the
/// first file records it, whatever the other would have chosen, and both find it.
#[tokio::test]
async fn two_handles_agree_where_a_cluster_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db").display().to_string();
    let one = Store::open_with(&path, 4).await.unwrap();
    let two = Store::open_with(&path, 4).await.unwrap();
    one.upsert(vec![record("a", "ns", "a1", "1", json!({}))])
        .await
        .unwrap();
    one.upsert(vec![record("b", "ns", "b1", "1", json!({}))])
        .await
        .unwrap();
    // `two` would place b in the first file (it holds none there): it is in the second
    two.upsert(vec![record("b", "ns", "b2", "1", json!({}))])
        .await
        .unwrap();
    two.upsert(vec![record("c", "ns", "c1", "1", json!({}))])
        .await
        .unwrap();
    for s in [&one, &two] {
        assert_eq!(
            all(s, "").await,
            ["a/ns/a1", "b/ns/b1", "b/ns/b2", "c/ns/c1"]
        );
        assert_eq!(all(s, "clusters=b").await, ["b/ns/b1", "b/ns/b2"]);
        assert_eq!(s.versions("b", &deployments()).await.unwrap().len(), 2);
        assert_eq!(s.versions("c", &deployments()).await.unwrap().len(), 1);
    }
    let placement = one.inner.placement.as_ref().unwrap();
    let b = placement.of("b").unwrap();
    assert_eq!(two.inner.placement.as_ref().unwrap().of("b"), Some(b));
    assert_eq!(b, 1);
    // a delete through the handle that did not place the cluster
    assert_eq!(two.delete(vec![key("a", "ns", "a1")]).await.unwrap(), 1);
    assert!(all(&one, "clusters=a").await.is_empty());
}

#[tokio::test]
async fn a_purged_cluster_frees_its_place_and_comes_back_to_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db").display().to_string();
    let s = Store::open_with(&path, 2).await.unwrap();
    let put = |s: Store, cluster: &'static str| async move {
        let name = format!("{cluster}1");
        s.upsert(vec![record(cluster, "ns", &name, "1", json!({}))])
            .await
            .unwrap();
    };
    let file_of = |s: &Store, c: &str| s.inner.placement.as_ref().unwrap().of(c);
    for c in ["a", "b", "c"] {
        put(s.clone(), c).await;
    }
    assert_eq!(
        ["a", "b", "c"].map(|c| file_of(&s, c)),
        [Some(0), Some(1), Some(0)]
    );
    assert_eq!(s.purge_cluster("a").await.unwrap(), 1);
    assert_eq!(s.purge_cluster("c").await.unwrap(), 1);
    // the first file holds no cluster now: the next one goes there, not beside b
    put(s.clone(), "d").await;
    assert_eq!(file_of(&s, "d"), Some(0));
    // a comes back to its own file (a search server's handle still looks there)
    put(s.clone(), "a").await;
    assert_eq!(file_of(&s, "a"), Some(0));
    assert_eq!(all(&s, "clusters=a").await, ["a/ns/a1"]);
    drop(s);
    // what is purged is recorded: a reopened store counts a and d in the first file
    let s = Store::open_with(&path, 2).await.unwrap();
    put(s.clone(), "e").await;
    assert_eq!(file_of(&s, "e"), Some(1));
    // 2 and 2 (c still purged): f goes to the first file (c counted: the second)
    put(s.clone(), "f").await;
    assert_eq!(file_of(&s, "f"), Some(0));
    assert_eq!(
        all(&s, "").await,
        ["a/ns/a1", "b/ns/b1", "d/ns/d1", "e/ns/e1", "f/ns/f1"]
    );
    // a store that recorded no purge (before migration 5): b's objects gone, its
    // placement still live; reopened, b no longer counts
    let b = sql::Param::Text("b".into());
    let forget = |sql: &str| sql::Stmt {
        sql: sql.into(),
        params: vec![b.clone()],
    };
    s.part(1)
        .execute(vec![forget("DELETE FROM resources WHERE cluster = ?1")])
        .await
        .unwrap();
    s.first()
        .execute(vec![forget(
            "UPDATE placements SET purged = 0 WHERE cluster = ?1",
        )])
        .await
        .unwrap();
    drop(s);
    let s = Store::open_with(&path, 2).await.unwrap();
    assert_eq!(s.inner.placement.as_ref().unwrap().live("b"), None);
    // 3 (a, d, f) and 1 (e)
    put(s.clone(), "g").await;
    assert_eq!(file_of(&s, "g"), Some(1));
}

/// A search naming a cluster this handle has not seen placed reads the placements again
/// at most once a second: one placed meanwhile by another handle is found after that.
#[tokio::test]
async fn a_search_reads_new_placements_at_most_once_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db").display().to_string();
    let (indexer, server) = (
        Store::open_with(&path, 2).await.unwrap(),
        Store::open_with(&path, 2).await.unwrap(),
    );
    assert!(all(&server, "clusters=x").await.is_empty());
    indexer
        .upsert(vec![record("x", "ns", "x1", "1", json!({}))])
        .await
        .unwrap();
    // read within the second: not read again
    assert!(all(&server, "clusters=x").await.is_empty());
    tokio::time::sleep(placement::RELOAD_EVERY).await;
    assert_eq!(all(&server, "clusters=x").await, ["x/ns/x1"]);
}
