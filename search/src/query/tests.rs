//! Table tests of the search query (K.65–70) and property tests of the continue token.

use super::*;
use proptest::prelude::*;

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse(pairs: &[(&str, &str)]) -> Result<Query, QueryError> {
    Query::parse(&params(pairs), None)
}

fn key(field: SortField, desc: bool) -> SortKey {
    SortKey { field, desc }
}

#[test]
fn filters_are_lists_sorted_and_deduplicated_k65() {
    let q = parse(&[
        ("clusters", "west, east"),
        ("clusters", "east"),
        ("namespaces", "shop"),
        ("labelSelector", "app=web"),
        ("fuzzy-name", "ngin"),
    ])
    .unwrap();
    assert_eq!(q.clusters, ["east", "west"]);
    assert_eq!(q.namespaces, ["shop"]);
    assert_eq!(q.label_selector.as_deref(), Some("app=web"));
    assert_eq!(q.fuzzy_name.as_deref(), Some("ngin"));
    // the path's cluster is the only one; a different clusters= is refused
    let q = Query::parse(&params(&[]), Some("east")).unwrap();
    assert_eq!(q.clusters, ["east"]);
    let e = Query::parse(&params(&[("clusters", "west")]), Some("east")).unwrap_err();
    assert!(e.0.contains("one or the other"), "{e}");
}

/// Each namespace may cost a review on the hub: a request names at most
/// [`MAX_NAMESPACES`] (counted once each), else a 400 that says so.
#[test]
fn a_request_names_at_most_so_many_namespaces() {
    let names = |n: usize| {
        (0..n)
            .map(|i| format!("ns-{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let q = parse(&[("namespaces", &names(MAX_NAMESPACES))]).unwrap();
    assert_eq!(q.namespaces.len(), MAX_NAMESPACES);
    // the same name twice counts once
    let twice = format!("{},{}", names(MAX_NAMESPACES), names(MAX_NAMESPACES));
    assert!(parse(&[("namespaces", &twice)]).is_ok());
    let e = parse(&[("namespaces", &names(MAX_NAMESPACES + 1))]).unwrap_err();
    assert!(
        e.0.contains("namespaces= names 101 namespaces; at most 100"),
        "{e}"
    );
    // repeated parameters add up
    let half = names(MAX_NAMESPACES);
    let other: String = (0..10).map(|i| format!("x-{i},")).collect();
    assert!(parse(&[("namespaces", &half), ("namespaces", &other)]).is_err());
}

#[test]
fn order_is_from_an_allowlist_and_always_total_k66() {
    use SortField::*;
    let cases: [(&str, Result<Vec<SortKey>, &str>); 8] = [
        (
            "",
            Ok(vec![
                key(Cluster, false),
                key(Namespace, false),
                key(Name, false),
            ]),
        ),
        (
            "namespace desc,cluster",
            Ok(vec![
                key(Namespace, true),
                key(Cluster, false),
                key(Name, false),
            ]),
        ),
        (
            "created_at_desc",
            Ok(vec![
                key(CreatedAt, true),
                key(Cluster, false),
                key(Namespace, false),
                key(Name, false),
            ]),
        ),
        (
            "creationTimestamp asc",
            Ok(vec![
                key(CreatedAt, false),
                key(Cluster, false),
                key(Namespace, false),
                key(Name, false),
            ]),
        ),
        (
            "name desc, resource_version",
            Ok(vec![
                key(Name, true),
                key(ResourceVersion, false),
                key(Cluster, false),
                key(Namespace, false),
            ]),
        ),
        (
            "uid",
            Err("use one of cluster, namespace, name, created_at, resource_version"),
        ),
        (
            "name; drop table",
            Err("write `field`, `field desc` or `field_desc`"),
        ),
        ("name,name desc", Err("twice")),
    ];
    for (orderby, want) in cases {
        let got = parse(&[("orderby", orderby)]);
        match (got, want) {
            (Ok(q), Ok(w)) => assert_eq!(q.order, w, "{orderby}"),
            (Err(e), Err(w)) => assert!(e.0.contains(w), "{orderby}: {e}"),
            (got, want) => panic!("{orderby}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn creation_window_accepts_every_documented_form_k68() {
    let at = |s: &str| parse_time("since", s).unwrap().to_string();
    assert_eq!(at("1704067200"), "2024-01-01T00:00:00Z");
    assert_eq!(at("1704067200500"), "2024-01-01T00:00:00.5Z");
    assert_eq!(at("2024-01-01"), "2024-01-01T00:00:00Z");
    assert_eq!(at("2024-01-01 12:30:00"), "2024-01-01T12:30:00Z");
    assert_eq!(at("2024-01-01T12:30:00+02:00"), "2024-01-01T10:30:00Z");
    for bad in ["yesterday", "12345", "2024-13-01"] {
        let e = parse_time("since", bad).unwrap_err();
        assert!(e.0.contains("Unix seconds"), "{bad}: {e}");
    }
    let q = parse(&[("since", "2024-01-01"), ("before", "2024-01-02")]).unwrap();
    assert!(q.since < q.before);
    let e = parse(&[("since", "2024-01-02"), ("before", "2024-01-01")]).unwrap_err();
    assert!(e.0.contains("empty"), "{e}");
}

#[test]
fn owner_search_needs_one_cluster_and_uid_wins_k70() {
    let q = Query::parse(
        &params(&[
            ("ownerName", "web"),
            ("ownerGR", "deployments.apps"),
            ("ownerSeniority", "1"),
        ]),
        Some("east"),
    )
    .unwrap();
    assert_eq!(
        q.owner,
        Some(OwnerQuery {
            owner: Owner::Name {
                name: "web".into(),
                group_resource: "deployments.apps".into()
            },
            seniority: 1
        })
    );
    let q = parse(&[
        ("clusters", "east"),
        ("ownerUID", "u-1"),
        ("ownerName", "ignored"),
    ])
    .unwrap();
    assert_eq!(q.owner.unwrap().owner, Owner::Uid("u-1".into()));
    let cases = [
        (vec![("ownerUID", "u")], "exactly one cluster"),
        (
            vec![("clusters", "a,b"), ("ownerUID", "u")],
            "exactly one cluster",
        ),
        (
            vec![("clusters", "a"), ("ownerName", "web")],
            "needs ownerGR",
        ),
        (
            vec![("clusters", "a"), ("ownerGR", "deployments.apps")],
            "needs ownerName",
        ),
        (
            vec![
                ("clusters", "a"),
                ("ownerUID", "u"),
                ("ownerSeniority", "-1"),
            ],
            "ownerSeniority",
        ),
        (
            vec![
                ("clusters", "a"),
                ("ownerUID", "u"),
                ("ownerSeniority", "9"),
            ],
            "ownerSeniority=9: at most 8 levels",
        ),
    ];
    for (pairs, want) in cases {
        let e = parse(&pairs).unwrap_err();
        assert!(e.0.contains(want), "{pairs:?}: {e}");
    }
    let deepest = parse(&[
        ("clusters", "a"),
        ("ownerUID", "u"),
        ("ownerSeniority", "8"),
    ]);
    assert_eq!(deepest.unwrap().owner.map(|o| o.seniority), Some(8));
}

#[test]
fn paging_parameters_k67() {
    let q = parse(&[("limit", "5"), ("withRemainingCount", "true")]).unwrap();
    assert_eq!(q.limit, Some(5));
    assert!(q.with_remaining_count && q.with_continue);
    assert_eq!(parse(&[("limit", "0")]).unwrap().limit, None);
    assert!(!parse(&[("withContinue", "false")]).unwrap().with_continue);
    assert!(
        parse(&[("limit", "-1")])
            .unwrap_err()
            .0
            .contains("whole number")
    );
}

#[test]
fn a_continue_token_resumes_its_own_query_only() {
    let base = [("clusters", "east"), ("orderby", "created_at desc")];
    let q = parse(&base).unwrap();
    let last = vec![
        "2024-01-01T00:00:00Z".to_string(),
        "east".into(),
        "shop".into(),
        "web-1".into(),
    ];
    let token = q.continue_after(last.clone());
    let mut next = base.to_vec();
    next.push(("continue", &token));
    next.push(("limit", "7")); // the page size may change
    assert_eq!(parse(&next).unwrap().after, Some(last.clone()));
    assert_eq!(parse(&next).unwrap().snapshot, None);
    // the first page's resourceVersion rides in the token to every later page (K.73)
    let mut q = parse(&base).unwrap();
    q.snapshot = Some("c1.e30".into());
    let token = q.continue_after(last);
    let mut with_rv = base.to_vec();
    with_rv.push(("continue", &token));
    assert_eq!(parse(&with_rv).unwrap().snapshot.as_deref(), Some("c1.e30"));
    // another filter or order: refused, with what to do
    let mut other = next.clone();
    other[1] = ("orderby", "name");
    let e = parse(&other).unwrap_err();
    assert!(e.0.contains("another query"), "{e}");
    let e = parse(&[("continue", "not-a-token")]).unwrap_err();
    assert!(e.0.contains("without continue"), "{e}");
}

proptest! {
    #[test]
    fn tokens_round_trip_and_garbage_never_panics(
        after in proptest::collection::vec(".{0,20}", 0..5),
        rv in proptest::option::of(".{0,20}"),
        junk in ".{0,64}",
    ) {
        let t = ContinueToken { query: "abc".into(), after, rv };
        prop_assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        let _ = ContinueToken::decode(&junk);
        let _ = Query::parse(&[("continue".to_string(), junk.clone()), ("orderby".to_string(), junk)], None);
    }
}

/// A repeated `orderby` adds its keys; of another parameter given twice the first
/// counts, as in kube-apiserver (before, the last replaced the first).
#[test]
fn repeated_parameters_add_up_or_the_first_counts() {
    let q = parse(&[("orderby", "namespace"), ("orderby", "name desc")]).unwrap();
    assert_eq!(
        q.order,
        [
            key(SortField::Namespace, false),
            key(SortField::Name, true),
            key(SortField::Cluster, false)
        ]
    );
    let e = parse(&[("orderby", "name"), ("orderby", "name desc")]).unwrap_err();
    assert!(e.0.contains("orderby names"), "{}", e.0);
    let q = parse(&[("labelSelector", "app=a"), ("labelSelector", "app=b")]).unwrap();
    assert_eq!(q.label_selector.as_deref(), Some("app=a"));
    let q = parse(&[("limit", "5"), ("limit", "50")]).unwrap();
    assert_eq!(q.limit, Some(5));
}

/// Every requirement is a condition the store evaluates (SQLite refuses an expression
/// deeper than 1000, a 503): more than [`MAX_REQUIREMENTS`] label or field requirements
/// are a 400 that says what to do, and so is a fuzzy-name no Kubernetes name can hold.
#[test]
fn selectors_and_fuzzy_names_are_bounded() {
    let many = |term: &str, n: usize| vec![term; n].join(",");
    assert!(parse(&[("labelSelector", &many("app", MAX_REQUIREMENTS))]).is_ok());
    assert!(
        parse(&[(
            "fieldSelector",
            &many("status.phase=Running", MAX_REQUIREMENTS)
        )])
        .is_ok()
    );
    let e = parse(&[("labelSelector", &many("a", 1000))]).unwrap_err();
    assert!(
        e.0.starts_with("labelSelector has 1000 requirements; at most 100 are taken"),
        "{e}"
    );
    let e = parse(&[("labelSelector", &many("app=web", MAX_REQUIREMENTS + 1))]).unwrap_err();
    assert!(e.0.contains("has 101 requirements"), "{e}");
    let e = parse(&[("fieldSelector", &many("metadata.name=web", 1000))]).unwrap_err();
    assert!(
        e.0.starts_with("fieldSelector has 1000 requirements; at most 100 are taken"),
        "{e}"
    );
    // a bad selector is left to the store, which says what is wrong with it
    assert!(parse(&[("labelSelector", "app in (")]).is_ok());
    let longest = "a".repeat(MAX_NAME_LEN);
    assert!(parse(&[("fuzzy-name", &longest)]).is_ok());
    let e = parse(&[("fuzzy-name", &format!("{longest}b"))]).unwrap_err();
    assert!(
        e.0.starts_with("fuzzy-name is 254 characters long; a Kubernetes name is at most 253"),
        "{e}"
    );
}

/// A continue token names its resource: a token of pods is refused on deployments, as
/// kube-apiserver refuses one of another resource's key.
#[test]
fn a_continue_token_is_good_for_its_own_resource_only() {
    let pods = Query::parse_for(&params(&[]), None, "/v1/pods").unwrap();
    let token = pods.continue_after(vec!["east".into(), "shop".into(), "web".into()]);
    let next = params(&[("continue", &token)]);
    assert!(Query::parse_for(&next, None, "/v1/pods").is_ok());
    for other in ["apps/v1/deployments", "/v1/configmaps", "/v2/pods"] {
        let e = Query::parse_for(&next, None, other).unwrap_err();
        assert!(e.0.contains("another query"), "{other}: {e}");
    }
    // the path's cluster is part of the query too
    let e = Query::parse_for(&next, Some("east"), "/v1/pods").unwrap_err();
    assert!(e.0.contains("another query"), "{e}");
}
