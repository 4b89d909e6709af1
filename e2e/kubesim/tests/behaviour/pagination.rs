//! limit/continue pagination: every page comes from the snapshot of the first.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn pages_stay_consistent_while_writes_happen() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let initial: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    for n in &initial {
        api.create(&pp, &cm(n, json!({}), json!({"v": "orig"})))
            .await
            .unwrap();
    }

    let mut seen: Vec<(String, String)> = Vec::new();
    let mut token: Option<String> = None;
    let mut list_rv: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(3);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 3);
        let rv = page.metadata.resource_version.clone().unwrap();
        match &list_rv {
            None => list_rv = Some(rv),
            Some(first) => assert_eq!(
                &rv, first,
                "every page reports the first page's resourceVersion"
            ),
        }
        seen.extend(page.items.iter().map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.data
                    .as_ref()
                    .and_then(|d| d.get("v"))
                    .cloned()
                    .unwrap_or_default(),
            )
        }));
        if pages == 1 {
            // 11 in the snapshot: the ten and the namespace's kube-root-ca.crt
            assert_eq!(page.metadata.remaining_item_count, Some(8));
            // writes between pages
            api.delete("p04", &DeleteParams::default()).await.unwrap();
            api.patch(
                "p05",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": "changed"}})),
            )
            .await
            .unwrap();
            api.create(&pp, &cm("p03a", json!({}), json!({"v": "new"})))
                .await
                .unwrap();
            api.create(&pp, &cm("p99", json!({}), json!({"v": "new"})))
                .await
                .unwrap();
            api.delete("p00", &DeleteParams::default()).await.unwrap();
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 4);
    let names = own(seen.iter().map(|(n, _)| n.clone()));
    assert_eq!(
        names, initial,
        "exactly the objects of the first page's snapshot, each once"
    );
    assert!(
        seen.iter().all(|(n, v)| n == ROOT_CA || v == "orig"),
        "values as of the snapshot: {seen:?}"
    );

    // a fresh list sees the writes
    let now: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(
        own(now),
        vec![
            "p01", "p02", "p03", "p03a", "p05", "p06", "p07", "p08", "p09", "p99"
        ]
    );
}

#[tokio::test]
async fn pagination_honours_selectors_and_bad_tokens_are_400() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for i in 0..7 {
        let labels = if i % 2 == 0 {
            json!({"even": "yes"})
        } else {
            json!({})
        };
        api.create(
            &PostParams::default(),
            &cm(&format!("c{i}"), labels, json!({})),
        )
        .await
        .unwrap();
    }
    let first = api
        .list(&ListParams::default().labels("even").limit(2))
        .await
        .unwrap();
    let n1: Vec<String> = first
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(n1, vec!["c0", "c2"]);
    let tok = first.metadata.continue_.unwrap();
    let second = api
        .list(
            &ListParams::default()
                .labels("even")
                .limit(2)
                .continue_token(&tok),
        )
        .await
        .unwrap();
    let n2: Vec<String> = second
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(n2, vec!["c4", "c6"]);
    assert!(second.metadata.continue_.unwrap_or_default().is_empty());

    let e = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token("not-a-token!"),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 400);
}

#[tokio::test]
async fn a_continue_token_older_than_the_history_is_410() {
    let mut cfg = kubesim::Config::new("t");
    cfg.history_limit = 5;
    let env = start_with(cfg).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    for i in 0..4 {
        api.create(
            &PostParams::default(),
            &cm(&format!("c{i}"), json!({}), json!({})),
        )
        .await
        .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let tok = first.metadata.continue_.unwrap();
    for i in 0..10 {
        api.patch(
            "c3",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let e = api
        .list(&ListParams::default().limit(2).continue_token(&tok))
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (410, "Expired"));
}

/// Pages across namespaces one of whose names is a prefix of another's ("team",
/// "team-a"): every object once, whatever the page size; a page after writes in
/// another namespace still shows the first page's snapshot; remainingItemCount only
/// without selectors, as kube-apiserver.
#[tokio::test]
async fn pages_across_namespaces_with_prefixed_names_miss_nothing() {
    let env = start().await;
    let pp = PostParams::default();
    let mut want = Vec::new();
    for ns in ["team", "team-a", "team0"] {
        namespace(&env.client, ns).await;
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        for i in 0..5 {
            let name = format!("c{i}");
            api.create(&pp, &cm(&name, json!({"i": i.to_string()}), json!({})))
                .await
                .unwrap();
            want.push(format!("{ns}/{name}"));
        }
    }
    // and the kube-root-ca.crt every namespace holds
    for ns in [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "team",
        "team-a",
        "team0",
    ] {
        want.push(format!("{ns}/{ROOT_CA}"));
    }
    want.sort();
    let all: Api<ConfigMap> = Api::all(env.client.clone());
    let key = |c: &ConfigMap| {
        format!(
            "{}/{}",
            c.metadata.namespace.clone().unwrap(),
            c.metadata.name.clone().unwrap()
        )
    };
    for limit in [1, 2, 4, 7, 15, 16] {
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for page_no in 0..30 {
            let mut lp = ListParams::default().limit(limit);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = all.list(&lp).await.unwrap();
            seen.extend(page.items.iter().map(key));
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            match &token {
                Some(_) => assert_eq!(
                    page.metadata.remaining_item_count,
                    Some((want.len() - seen.len()) as i64),
                    "limit {limit}, page {page_no}"
                ),
                None => break,
            }
            if page_no == 0 {
                // a write after the first page is not seen by the next ones
                let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "team-a");
                api.create(&pp, &cm(&format!("late{limit}"), json!({}), json!({})))
                    .await
                    .unwrap();
            }
        }
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(sorted, want, "limit {limit}: every object once: {seen:?}");
        // clean the late object (if a second page was asked) away for the next round
        let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "team-a");
        if (limit as usize) < want.len() {
            api.delete(&format!("late{limit}"), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    // with a selector: the matching objects, in pages, no remaining count
    let first = all
        .list(&ListParams::default().labels("i in (1,3)").limit(4))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 4);
    assert_eq!(first.metadata.remaining_item_count, None);
    let rest = all
        .list(
            &ListParams::default()
                .labels("i in (1,3)")
                .limit(4)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 2);
}

/// kube-apiserver's `ValidateListOptions`, for lists and watches: a 422 for
/// `ListOptions.meta.k8s.io` naming each broken rule. What kube-rs sends (lists with
/// limit/continue, watches with and without streaming lists) stays valid.
#[tokio::test]
async fn list_and_watch_options_are_validated_as_kube_apiserver_does() {
    let env = start().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    const RVM: &str = "resourceVersionMatch";
    let forbidden = |field: &'static str, detail: &str| {
        ("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    };
    let not_supported = |value: &str, supported: &str| {
        (
            "FieldValueNotSupported",
            RVM,
            format!("Unsupported value: \"{value}\": supported values: {supported}"),
        )
    };
    let cases = vec![
        (
            "resourceVersionMatch=NotOlderThan",
            vec![forbidden(
                RVM,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )],
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            vec![forbidden(
                RVM,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )],
        ),
        (
            "resourceVersion=5&resourceVersionMatch=NotOlderThan&continue=abc",
            vec![forbidden(
                RVM,
                "resourceVersionMatch is forbidden when continue is provided",
            )],
        ),
        (
            "resourceVersion=1&resourceVersionMatch=Newest",
            vec![not_supported("Newest", "\"Exact\", \"NotOlderThan\", \"\"")],
        ),
        (
            "sendInitialEvents=true",
            vec![forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ),
        (
            "watch=true&sendInitialEvents=true&timeoutSeconds=1",
            vec![forbidden(
                RVM,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ),
        (
            "watch=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
            vec![forbidden(
                RVM,
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ),
        (
            "watch=true&sendInitialEvents=false&resourceVersionMatch=Exact&timeoutSeconds=1",
            vec![
                forbidden(
                    RVM,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ),
                not_supported("Exact", "\"NotOlderThan\""),
            ],
        ),
    ];
    for (query, want) in cases {
        let r = raw(&env.client, "GET", &format!("{cms}?{query}"), None, vec![]).await;
        assert_eq!(
            (r.code, r.body["reason"].as_str()),
            (422, Some("Invalid")),
            "{query}: {}",
            r.body
        );
        assert_eq!(
            (&r.body["details"]["kind"], &r.body["details"]["group"]),
            (&json!("ListOptions"), &json!("meta.k8s.io")),
            "{query}"
        );
        let got: Vec<Value> = r.body["details"]["causes"].as_array().unwrap().clone();
        let want_causes: Vec<Value> = want
            .iter()
            .map(|(reason, field, message)| {
                json!({"reason": reason, "field": field, "message": message})
            })
            .collect();
        assert_eq!(got, want_causes, "{query}");
        if let [(_, field, message)] = want.as_slice() {
            assert_eq!(
                r.body["message"],
                format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: {message}"),
                "{query}"
            );
        }
    }
    // valid: a streaming list without bookmarks (upstream leaves allowWatchBookmarks
    // unchecked), and lists at a version
    for query in [
        "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
        "resourceVersion=0&resourceVersionMatch=NotOlderThan",
        "resourceVersion=1&resourceVersionMatch=NotOlderThan",
    ] {
        let r = raw(&env.client, "GET", &format!("{cms}?{query}"), None, vec![]).await;
        assert_eq!(r.code, 200, "{query}: {}", r.body);
    }
    // kube-rs: a paginated list (continue without resourceVersion)
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    for n in ["a", "b", "c"] {
        api.create(&pp, &cm(n, json!({}), json!({}))).await.unwrap();
    }
    let page = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = page.metadata.continue_.expect("a continue token");
    api.list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect("the next page");
}
