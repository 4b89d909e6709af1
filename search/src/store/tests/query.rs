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
