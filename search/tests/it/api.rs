//! The search API with real kubectl, on SQLite and on PostgreSQL: a store filled with
//! Deployments, ReplicaSets and Pods of two members, a kubesim hub answering the
//! TokenReviews and SubjectAccessReviews from its RBAC, and kubectl with a kubeconfig
//! whose server is the search prefix: lists across clusters with a CLUSTER column,
//! paging, gets by name, the search parameters through `get --raw`, and what users with
//! less RBAC (or none, or a bad token) see.

mod env;
mod requests;

use causeway_search::api::route::PREFIX;
use serde_json::{Value, json};

use env::{Backend, k, keys, rows, start, start_tuned, start_with};

async fn kubectl_lists_and_gets_across_clusters(backend: Backend) {
    let env = start(backend).await;
    // a Table with the Cluster column first, the built-in columns after Name
    let out = env
        .ok(
            "alice-token",
            &["get", "deployments", "-A", "-l", "app=web"],
        )
        .await;
    let r = rows(&out);
    assert_eq!(
        r[0],
        [
            "NAMESPACE",
            "CLUSTER",
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE"
        ],
        "{out}"
    );
    let got: Vec<(&str, &str, &str)> = r[1..].iter().map(|r| (r[0], r[1], r[2])).collect();
    assert_eq!(
        got,
        [
            ("ops", "east", "web"),
            ("shop", "east", "web"),
            ("shop", "west", "web")
        ],
        "{out}"
    );
    // short names from discovery; -o json items carry the cluster annotation and no managedFields
    let list = env
        .json(
            "alice-token",
            &["get", "deploy", "-n", "shop", "-o", "json"],
        )
        .await;
    assert_eq!(
        keys(&list),
        [
            k("east", "shop", "web"),
            k("west", "shop", "api"),
            k("west", "shop", "web")
        ]
    );
    assert_eq!(list["items"][0]["kind"], "Deployment");
    assert!(list["items"][0]["metadata"].get("managedFields").is_none());
    // kubectl's chunking: pages of 2 return everything once
    let all = env
        .json("alice-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&all).len(), 7);
    let paged = env
        .json(
            "alice-token",
            &["get", "deploy", "-A", "-o", "json", "--chunk-size=2"],
        )
        .await;
    assert_eq!(keys(&paged), keys(&all));
    let table = env
        .ok(
            "alice-token",
            &["get", "deploy", "-A", "--chunk-size=2", "--no-headers"],
        )
        .await;
    assert_eq!(table.lines().count(), 7, "{table}");
    // a name held by two clusters: both rows, but -o json asks for one cluster
    let out = env
        .ok("alice-token", &["get", "deploy", "web", "-n", "shop"])
        .await;
    assert_eq!(rows(&out).len(), 3, "{out}");
    let e = env
        .fails(
            "alice-token",
            &["get", "deploy", "web", "-n", "shop", "-o", "json"],
        )
        .await;
    assert!(e.contains("exists in 2 clusters (east, west)"), "{e}");
    assert!(e.contains("clusters/<cluster>"), "{e}");
    // …/clusters/<c>/… is one cluster (K.70)
    let one = env
        .ok_at(
            "alice-token",
            "/clusters/west",
            &["get", "deploy", "web", "-n", "shop", "-o", "json"],
        )
        .await;
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(one["metadata"]["uid"], "w-web");
    let e = env
        .fails("alice-token", &["get", "deploy", "nope", "-n", "shop"])
        .await;
    assert!(
        e.contains("NotFound") && e.contains("\"nope\" not found"),
        "{e}"
    );
}
both!(kubectl_lists_and_gets_across_clusters);

async fn search_parameters_through_get_raw(backend: Backend) {
    let env = start(backend).await;
    // kubectl get --raw paths are under the kubeconfig server's path (the prefix)
    let raw = |q: &str| format!("/apis/apps/v1/deployments?{q}");
    let names = |v: &Value| -> Vec<String> {
        keys(v)
            .into_iter()
            .map(|(c, ns, n)| format!("{c}/{ns}/{n}"))
            .collect()
    };
    let v = env
        .json(
            "alice-token",
            &["get", "--raw", &raw("orderby=created_at_desc&limit=3")],
        )
        .await;
    assert_eq!(
        names(&v),
        [
            "east/batch/batch-3",
            "east/batch/batch-2",
            "east/batch/batch-1"
        ]
    );
    assert!(
        v["metadata"]["continue"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{v}"
    );
    let v = env
        .json(
            "alice-token",
            &["get", "--raw", &raw("limit=2&withRemainingCount=true")],
        )
        .await;
    assert_eq!(v["metadata"]["remainingItemCount"], 5, "{v}");
    // an empty list of a grouped type is still an apps/v1 DeploymentList (typed
    // clients decode it by its apiVersion)
    let v = env
        .json("alice-token", &["get", "--raw", &raw("names=no-such-name")])
        .await;
    assert_eq!(
        (&v["apiVersion"], &v["kind"], &v["items"]),
        (&json!("apps/v1"), &json!("DeploymentList"), &json!([])),
        "{v}"
    );
    let v = env
        .json(
            "alice-token",
            &["get", "--raw", &raw("fuzzy-name=atch-&clusters=east")],
        )
        .await;
    assert_eq!(
        names(&v),
        [
            "east/batch/batch-1",
            "east/batch/batch-2",
            "east/batch/batch-3"
        ]
    );
    // owner search: the Pods two levels under east's shop/web
    let v = env
        .json(
            "alice-token",
            &["get", "--raw", "/clusters/east/api/v1/namespaces/shop/pods?ownerName=web&ownerGR=deployments.apps&ownerSeniority=1"],
        )
        .await;
    assert_eq!(names(&v), ["east/shop/web-7c9-a", "east/shop/web-7c9-b"]);
    let e = env
        .fails(
            "alice-token",
            &["get", "--raw", &raw("orderby=spec.replicas")],
        )
        .await;
    assert!(e.contains("BadRequest") || e.contains("400"), "{e}");
    assert!(
        e.contains("use one of cluster, namespace, name, created_at, resource_version"),
        "{e}"
    );
    let e = env
        .fails(
            "alice-token",
            &["get", "--raw", &raw("labelSelector=app%20in%20(")],
        )
        .await;
    assert!(e.contains("labelSelector"), "{e}");
    // the search group itself, for an APIService
    let (code, body) = env
        .https("/apis/search.causeway.io/v1alpha1", Some("alice-token"))
        .await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["resources"][0]["name"], "resources", "{v}");
}
both!(search_parameters_through_get_raw);

async fn hub_rbac_decides_what_each_user_sees(backend: Backend) {
    let env = start(backend).await;
    // bob may list in shop only
    let bobs = [
        k("east", "shop", "web"),
        k("west", "shop", "api"),
        k("west", "shop", "web"),
    ];
    let v = env
        .json("bob-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v), bobs);
    let v = env
        .json("bob-token", &["get", "deploy", "-n", "ops", "-o", "json"])
        .await;
    assert_eq!(keys(&v), []);
    // erin may get only the Cluster west: only west's objects
    let v = env
        .json("erin-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(
        keys(&v),
        [k("west", "shop", "api"), k("west", "shop", "web")]
    );
    // the hub's answers are cached: the same list again costs it no review
    let reviews = env.hub.write_requests();
    let again = env
        .json("erin-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&again), keys(&v));
    assert_eq!(
        env.hub.write_requests(),
        reviews,
        "TokenReviews and SubjectAccessReviews are cached"
    );
    // carol has no bindings: nothing, and not an error
    let out = env
        .kubectl(&env.kubeconfig("carol-token", ""), &["get", "deploy", "-A"])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("No resources found"));
    // kubectl --as: the hub decides whether the caller may impersonate, then the
    // impersonated user's rights decide what is seen
    let v = env
        .json(
            "alice-token",
            &["get", "deploy", "-A", "-o", "json", "--as", "bob"],
        )
        .await;
    assert_eq!(keys(&v), bobs, "alice as bob sees exactly what bob sees");
    let e = env
        .fails("alice-token", &["get", "deploy", "-A", "--as", "erin"])
        .await;
    assert!(
        e.contains(r#"users "erin" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{e}"
    );
    let e = env
        .fails(
            "alice-token",
            &[
                "get",
                "deploy",
                "-A",
                "--as",
                "bob",
                "--as-group",
                "system:masters",
            ],
        )
        .await;
    assert!(e.contains(r#"groups "system:masters" is forbidden"#), "{e}");
    let e = env
        .fails("bob-token", &["get", "deploy", "-A", "--as", "alice"])
        .await;
    assert!(e.contains(r#"User "bob" cannot impersonate"#), "{e}");
    // a token the hub does not know
    let e = env.fails("mallory-token", &["get", "deploy", "-A"]).await;
    assert!(e.contains("Unauthorized"), "{e}");
    // no token at all
    let (code, body) = env
        .https(&format!("{PREFIX}/apis/apps/v1/deployments"), None)
        .await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    // health and readiness need no token; metrics (member names, what each holds)
    // need one the hub lets `get` /metrics, as kube-apiserver's own
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            env.https(path, None).await,
            (200, "ok\n".to_string()),
            "{path}"
        );
    }
    let (code, body) = env.https("/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = env.https("/metrics", Some("alice-token")).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User "alice" cannot get path "/metrics""#),
        "{body}"
    );
    assert!(!body.contains("causeway_search"), "{body}");
    let (code, metrics) = env.https("/metrics", Some("prometheus-token")).await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("causeway_search_api_requests_total{code=\"401\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("causeway_search_api_query_seconds_count"),
        "{metrics}"
    );
    // a token new to the hub is reviewed at once
    env.hub.add_token(
        "dave-token",
        kubesim::User {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let v = env
        .json("dave-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v).len(), 7);
}
both!(hub_rbac_decides_what_each_user_sees);

/// The store or the hub down: 503 ServiceUnavailable (never an empty list), and
/// /readyz says the store is not answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_of_the_store_or_the_hub_are_503() {
    let env = start(Backend::Postgres).await;
    assert_eq!(env.https("/readyz", None).await.0, 200);
    // alice's token and reviews are cached before the hub goes
    let v = env
        .json("alice-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v).len(), 7);
    // the hub down: a token it has not reviewed yet cannot be checked
    env.hub.shutdown();
    env.hub.stopped().await;
    let e = env.fails("erin-token", &["get", "deploy", "-A"]).await;
    assert!(e.contains("ServiceUnavailable"), "{e}");
    let e = env
        .fails("erin-token", &["get", "--raw", "/apis/apps/v1/deployments"])
        .await;
    assert!(e.contains("cannot check the token with the hub"), "{e}");
    // the hub's own error (its address, the connection's failure) stays in the log
    let hub_port = env.hub.url().rsplit(':').next().unwrap().to_string();
    assert!(!e.contains(&hub_port), "{e}");
    assert!(!e.to_lowercase().contains("connect"), "{e}");
    // a token reviewed before the hub went down still lists; its reviews are cached
    let v = env
        .json("alice-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v).len(), 7);
    // the store gone: /readyz says so, within its bound
    let base = std::env::var(causeway_search::store::testing::POSTGRES_ENV).unwrap();
    let db = env.store_spec.rsplit('/').next().unwrap().to_string();
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
    let (code, body) = env.https("/readyz", None).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.starts_with("not ready: the search store"), "{body}");
    // …and no more: PostgreSQL's own error (the database, the host) is in the log only
    assert!(!body.contains(&db), "{body}");
    assert!(!body.to_lowercase().contains("database"), "{body}");
    assert!(
        !body.contains("127.0.0.1") && !body.contains("localhost"),
        "{body}"
    );
    // nor does a request's 503
    let path = format!("{PREFIX}/apis/apps/v1/deployments");
    let (code, e) = env.https(&path, Some("alice-token")).await;
    assert_eq!(code, 503, "{e}");
    assert!(e.contains("the search store is not answering"), "{e}");
    assert!(!e.contains(&db), "{e}");
    assert!(!e.to_lowercase().contains("database"), "{e}");
}

/// `--max-watches`: a watch past the cap is a 429 that says why, and a watch that ends
/// gives its place back. (A place is held by a watch of members: one with no member to
/// watch takes none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_past_the_cap_is_429_until_one_ends() {
    let limits = causeway_search::api::watch::Limits {
        max: 1,
        ..Default::default()
    };
    let env = start_with(Backend::Sqlite, limits).await;
    let west = crate::support::cluster("west").await;
    let _published = env.publish_deployments("west", west.client.clone());
    let watch =
        |secs: u32| format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds={secs}");
    let open = || async { env.metric("causeway_search_api_watches").await == 1 };
    let (long, short) = (watch(3), watch(1));
    let (first, second) = tokio::join!(env.https(&long, Some("alice-token")), async {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while !open().await {
            assert!(
                std::time::Instant::now() < until,
                "the first watch never opened"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        env.https(&short, Some("alice-token")).await
    });
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(second.0, 429, "{}", second.1);
    assert!(
        second
            .1
            .contains("1 cross-cluster watches open, its --max-watches"),
        "{}",
        second.1
    );
    // the first ended at its timeout: its place is free again
    assert!(!open().await);
    let third = env.https(&short, Some("alice-token")).await;
    assert_eq!(third.0, 200, "{}", third.1);
}

/// A member that refuses the search server's own credentials (its token revoked there):
/// a watch is a 502 that says it is the server's access, not the caller's rights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refusing_the_servers_credentials_is_a_502() {
    let env = start(Backend::Sqlite).await;
    let west = crate::support::cluster("west").await;
    let mut cfg = west.server.client_config().await;
    cfg.auth_info.token = Some("a-revoked-token".to_string().into());
    let revoked = kube::Client::try_from(cfg).unwrap();
    let _published = env.publish_deployments("west", revoked);
    let path = format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds=1");
    let (code, msg) = env.https(&path, Some("alice-token")).await;
    assert_eq!(code, 502, "{msg}");
    assert!(
        msg.contains("cluster west refused the search server's own watch (its member credentials, not your rights)"),
        "{msg}"
    );
}

/// A client that stops reading a watch is let go once an event has waited for it for
/// the stall limit: the watch's place is free again and the metric counts it, long
/// before the watch's own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_client_stops_reading_is_ended() {
    use std::time::{Duration, Instant};
    let limits = causeway_search::api::watch::Limits {
        stalled_after: Duration::from_secs(1),
        ..Default::default()
    };
    let env = start_with(Backend::Sqlite, limits).await;
    let west = crate::support::cluster("west").await;
    let _published = env.publish_deployments("west", west.client.clone());
    let metric = |name: &'static str| env.metric(name);
    let path = format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds=300");
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    // the response's head only: its events are never read
    let unread = env
        .client(Some("alice-token"))
        .request_stream(req)
        .await
        .expect("the watch opens");
    assert_eq!(metric("causeway_search_api_watches").await, 1);
    assert_eq!(metric("causeway_search_api_watches_stalled_total").await, 0);
    // events of 100 KB each until the buffers between fill and one waits past the limit
    let deployments = kube::Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        west.client.clone(),
        "default",
    );
    let filler = "x".repeat(100_000);
    let started = Instant::now();
    let mut created = 0;
    while metric("causeway_search_api_watches_stalled_total").await == 0 {
        assert!(
            created < 400 && started.elapsed() < Duration::from_secs(120),
            "the unread watch was not ended after {created} events of 100 KB"
        );
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("big-{created}"), "annotations": {"filler": filler}},
            "spec": {"selector": {"matchLabels": {"app": "big"}},
                     "template": {"metadata": {"labels": {"app": "big"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        }))
        .unwrap();
        deployments
            .create(&Default::default(), &d)
            .await
            .expect("a Deployment is created");
        created += 1;
        if created % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
    }
    assert_eq!(
        metric("causeway_search_api_watches").await,
        0,
        "its place is free"
    );
    assert!(created >= 20, "ended after {created} events only");
    // and the connection is cut: what the server still held for the client (frames
    // not sent) is dropped, not delivered as a response that ends cleanly
    let mut unread = std::pin::pin!(unread);
    let mut buf = vec![0u8; 1 << 16];
    let end = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match futures::AsyncReadExt::read(&mut unread, &mut buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .expect("the response ends once read");
    assert!(end.is_err(), "the stalled watch's response ended cleanly");
}

/// A stopping server ends its open watches at once, cleanly (the client watches again
/// from its last event), rather than holding the stop for the drain time and then
/// cutting them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_ends_its_watches() {
    use std::time::{Duration, Instant};
    let env = start(Backend::Sqlite).await;
    let west = crate::support::cluster("west").await;
    let _published = env.publish_deployments("west", west.client.clone());
    let path = format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds=300");
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let watch = env
        .client(Some("alice-token"))
        .request_stream(req)
        .await
        .expect("the watch opens");
    assert_eq!(env.metric("causeway_search_api_watches").await, 1);
    let stopped = Instant::now();
    env.stop_server();
    let mut watch = std::pin::pin!(watch);
    let mut buf = vec![0u8; 1 << 16];
    let end = tokio::time::timeout(Duration::from_secs(4), async {
        loop {
            match futures::AsyncReadExt::read(&mut watch, &mut buf).await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .expect("the watch ended before the drain time");
    assert!(end.is_ok(), "the watch was cut, not ended: {end:?}");
    assert!(stopped.elapsed() < Duration::from_secs(4));
}

/// A user with no rights at all gets an empty watch, as their list is empty: it holds
/// no member watch, so it takes no place among the `--max-watches` and does not keep
/// others out; and one user holds at most their own share of watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_see_nothing_does_not_take_the_watches_of_others() {
    let limits = causeway_search::api::watch::Limits {
        max: 1,
        per_user: 2,
        ..Default::default()
    };
    let env = start_with(Backend::Sqlite, limits).await;
    let west = crate::support::cluster("west").await;
    let _published = env.publish_deployments("west", west.client.clone());
    let watch =
        |secs: u32| format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds={secs}");
    // carol (no bindings) holds a long watch: accepted, empty, holding no place
    let open = |token: &'static str| {
        let req = http::Request::get(watch(300)).body(Vec::new()).unwrap();
        let client = env.client(Some(token));
        async move { client.request_stream(req).await }
    };
    let _carols = open("carol-token")
        .await
        .expect("carol's watch opens: empty, as her list is");
    assert_eq!(env.metric("causeway_search_api_watches").await, 0);
    // alice still gets the one place, and gives it back at her timeout
    let (code, body) = env.https(&watch(1), Some("alice-token")).await;
    assert_eq!(code, 200, "{body}");
    // carol's own share: a second watch, not a third
    let _second = open("carol-token").await.expect("carol's second watch");
    let third = open("carol-token").await;
    match third {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 429, "{}", s.message);
            assert!(
                s.message
                    .contains(r#"user "carol" has 2 cross-cluster watches open"#),
                "{}",
                s.message
            );
        }
        other => panic!("carol's third watch: {:?}", other.map(|_| "opened")),
    }
    // which is hers alone
    let (code, body) = env.https(&watch(1), Some("alice-token")).await;
    assert_eq!(code, 200, "{body}");
}

/// Each namespace a caller may not list everywhere is a review on the hub: a request
/// naming thousands is a 400 before any is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_namespaces_are_a_400_not_thousands_of_reviews() {
    let env = start(Backend::Sqlite).await;
    // bob may list in shop only: every other namespace he names is reviewed
    let v = env
        .json("bob-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v).len(), 3);
    let reviews = env.hub.write_requests();
    let many: Vec<String> = (0..10_000).map(|i| format!("n{i}")).collect();
    let many = many.join(",");
    for path in [
        format!("{PREFIX}/apis/apps/v1/deployments?namespaces={many}"),
        format!("{PREFIX}/apis/apps/v1/deployments?watch=true&timeoutSeconds=1&namespaces={many}"),
    ] {
        let (code, body) = env.https(&path, Some("bob-token")).await;
        assert_eq!(code, 400, "{body}");
        assert!(
            body.contains("namespaces= names 10000 namespaces; at most 100"),
            "{body}"
        );
    }
    assert_eq!(env.hub.write_requests(), reviews, "no review was asked");
    // a hundred is still a request
    let some: Vec<String> = (0..100).map(|i| format!("n{i}")).collect();
    let path = format!(
        "{PREFIX}/apis/apps/v1/deployments?namespaces=shop,{}",
        some[..99].join(",")
    );
    let (code, body) = env.https(&path, Some("bob-token")).await;
    assert_eq!(code, 200, "{body}");
}

/// The server's page size: a list with a larger `limit` gets that many objects and a
/// continue token, as kube-apiserver's pages, and kubectl follows the tokens and shows
/// everything; a list without a `limit` (or `limit=0`) gets everything, as from
/// kube-apiserver (clients that do not page follow no token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_paged_at_the_servers_page_size() {
    let env = start_tuned(Backend::Sqlite, Default::default(), |s| s.max_page_size(2)).await;
    let list = |q: &str| {
        let path = format!("{PREFIX}/apis/apps/v1/deployments?{q}");
        let env = &env;
        let q = q.to_string();
        async move {
            let (code, body) = env.https(&path, Some("alice-token")).await;
            assert_eq!(code, 200, "{q}: {body}");
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };
    for q in ["", "limit=0", "withContinue=false"] {
        let v = list(q).await;
        assert_eq!(keys(&v).len(), 7, "{q}: {v}");
        assert!(
            v["metadata"]["continue"].as_str().is_none_or(str::is_empty),
            "{q}: {v}"
        );
    }
    for q in ["limit=500", "limit=500&withContinue=false"] {
        let v = list(q).await;
        assert_eq!(keys(&v).len(), 2, "{q}: {v}");
        assert!(
            v["metadata"]["continue"]
                .as_str()
                .is_some_and(|c| !c.is_empty()),
            "{q}: {v}"
        );
    }
    assert_eq!(keys(&list("limit=1").await).len(), 1);
    // the tokens lead through everything, once
    let mut seen = Vec::new();
    let mut next = "limit=500".to_string();
    loop {
        let v = list(&next).await;
        seen.extend(keys(&v));
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => next = format!("limit=500&continue={c}"),
            _ => break,
        }
    }
    let all = env
        .json("alice-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&all).len(), 7, "kubectl follows the tokens");
    assert_eq!(seen, keys(&all));
    let table = env
        .ok("alice-token", &["get", "deploy", "-A", "--no-headers"])
        .await;
    assert_eq!(table.lines().count(), 7, "{table}");
    // a get by name is not a page
    let out = env
        .ok("alice-token", &["get", "deploy", "web", "-n", "shop"])
        .await;
    assert_eq!(rows(&out).len(), 3, "{out}");
}
