//! Requests read as kube-apiserver reads them: bounds on what the store is asked (a
//! 400, not a 503), continue tokens good on their own resource only, a path's name
//! taken whole, a watch's parameters read by the list's rules, and a namespace got by
//! a user bound in it.

use causeway_search::api::route::PREFIX;
use serde_json::Value;

use super::env::{Backend, k, keys, rows, start};

/// A request the store could not evaluate (SQLite: "Expression tree is too large", a
/// 503) is a 400 saying what the limit is and what to do.
async fn selectors_past_the_limits_are_a_400(backend: Backend) {
    let env = start(backend).await;
    let get = |q: String| {
        let env = &env;
        async move {
            env.https(
                &format!("{PREFIX}/apis/apps/v1/deployments?{q}"),
                Some("alice-token"),
            )
            .await
        }
    };
    let labels = vec!["app"; 1000].join(",");
    let (code, body) = get(format!("labelSelector={labels}")).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("labelSelector has 1000 requirements; at most 100"),
        "{body}"
    );
    let fields = vec!["metadata.name%3Dweb"; 1000].join(",");
    let (code, body) = get(format!("fieldSelector={fields}")).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("fieldSelector has 1000 requirements; at most 100"),
        "{body}"
    );
    let (code, body) = get(format!("fuzzy-name={}", "a".repeat(254))).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("fuzzy-name is 254 characters long; a Kubernetes name is at most 253"),
        "{body}"
    );
    // a watch is held to the same bounds
    let (code, body) = get(format!(
        "watch=true&timeoutSeconds=1&labelSelector={labels}"
    ))
    .await;
    assert_eq!(code, 400, "{body}");
    // at the limits, still a request
    let labels = vec!["app"; 100].join(",");
    let (code, body) = get(format!("labelSelector={labels}")).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(format!("fuzzy-name={}", "a".repeat(253))).await;
    assert_eq!(code, 200, "{body}");
}
both!(selectors_past_the_limits_are_a_400);

/// A continue token of one resource is refused on another (kube-apiserver's tokens
/// name their resource's key), and on another cluster's path.
async fn a_continue_token_is_good_on_its_own_resource_only(backend: Backend) {
    let env = start(backend).await;
    let list = |path: String| {
        let env = &env;
        async move {
            env.https(&format!("{PREFIX}{path}"), Some("alice-token"))
                .await
        }
    };
    let (code, body) = list("/api/v1/pods?limit=1".into()).await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let token = v["metadata"]["continue"].as_str().unwrap().to_string();
    // its own resource: the rest
    let (code, body) = list(format!("/api/v1/pods?limit=1&continue={token}")).await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(keys(&v), [k("east", "shop", "web-7c9-b")]);
    for other in [
        format!("/apis/apps/v1/deployments?limit=1&continue={token}"),
        format!("/apis/apps/v1/replicasets?limit=1&continue={token}"),
    ] {
        let (code, body) = list(other.clone()).await;
        assert_eq!(code, 400, "{other}: {body}");
        assert!(
            body.contains("the continue token belongs to another query")
                && body.contains("list again without continue"),
            "{other}: {body}"
        );
    }
    // a token of every cluster is not one of a cluster's
    let (code, body) = list(format!(
        "/clusters/east/api/v1/pods?limit=1&continue={token}"
    ))
    .await;
    assert_eq!(code, 400, "{body}");
}
both!(a_continue_token_is_good_on_its_own_resource_only);

/// A get's name is one name: `web,nope` is no Deployment (before, it was split on its
/// comma and web was answered).
async fn a_name_in_the_path_is_taken_whole(backend: Backend) {
    let env = start(backend).await;
    let get = |name: &str| {
        let path =
            format!("{PREFIX}/clusters/east/apis/apps/v1/namespaces/shop/deployments/{name}");
        let env = &env;
        async move { env.https(&path, Some("alice-token")).await }
    };
    let (code, body) = get("web").await;
    assert_eq!(code, 200, "{body}");
    for name in ["web,nope", "nope,web", "web,"] {
        let (code, body) = get(name).await;
        assert_eq!(code, 404, "{name}: {body}");
        assert!(
            body.contains(&format!("deployments.apps \"{name}\" not found")),
            "{name}: {body}"
        );
    }
    // names= on a get does not widen it either
    let (code, body) = env
        .https(
            &format!(
                "{PREFIX}/clusters/east/apis/apps/v1/namespaces/shop/deployments/nope?names=web"
            ),
            Some("alice-token"),
        )
        .await;
    assert_eq!(code, 404, "{body}");
}
both!(a_name_in_the_path_is_taken_whole);

/// A watch reads its parameters by the list's rules: a path cluster that clusters=
/// contradicts is a 400 (before, an empty watch), and of a repeated parameter the
/// first counts.
async fn a_watch_reads_its_parameters_as_a_list_does(backend: Backend) {
    let env = start(backend).await;
    let both = |q: &str| {
        let env = &env;
        let q = q.to_string();
        async move {
            let mut out = Vec::new();
            for watch in ["", "watch=true&timeoutSeconds=1&"] {
                let path = format!("{PREFIX}/clusters/east/apis/apps/v1/deployments?{watch}{q}");
                out.push(env.https(&path, Some("alice-token")).await);
            }
            out
        }
    };
    for (code, body) in both("clusters=west").await {
        assert_eq!(code, 400, "{body}");
        assert!(
            body.contains("the path names cluster \"east\" and clusters= names [\"west\"]"),
            "{body}"
        );
    }
    for (code, body) in both("clusters=east").await {
        assert_eq!(code, 200, "{body}");
    }
    // the first labelSelector counts on both: a bad second one is not read
    for (code, body) in both("labelSelector=app%3Dweb&labelSelector=app%20in%20(").await {
        assert_eq!(code, 200, "{body}");
    }
}
both!(a_watch_reads_its_parameters_as_a_list_does);

/// kube-apiserver authorizes a get of namespaces/<ns> in namespace <ns>: bob, bound in
/// shop only, may get the Namespace shop (not ops), and still not list namespaces.
async fn a_user_bound_in_a_namespace_may_get_it(backend: Backend) {
    let env = start(backend).await;
    let out = env.ok("bob-token", &["get", "ns", "shop"]).await;
    let r = rows(&out);
    let got: Vec<(&str, &str)> = r[1..].iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(got, [("east", "shop"), ("west", "shop")], "{out}");
    let one = env
        .ok_at(
            "bob-token",
            "/clusters/east",
            &["get", "ns", "shop", "-o", "json"],
        )
        .await;
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["metadata"]["uid"], "east-shop", "{one}");
    let e = env.fails("bob-token", &["get", "ns", "ops"]).await;
    assert!(e.contains("\"ops\" not found"), "{e}");
    let v = env.json("bob-token", &["get", "ns", "-o", "json"]).await;
    assert_eq!(keys(&v), [], "{v}");
    // carol, bound nowhere, gets nothing
    let e = env.fails("carol-token", &["get", "ns", "shop"]).await;
    assert!(e.contains("\"shop\" not found"), "{e}");
}
both!(a_user_bound_in_a_namespace_may_get_it);
