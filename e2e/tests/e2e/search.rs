//! Search end to end (issue 15): a hub with members east and west (workloads simulated),
//! the hub controller, and `causeway search serve` following the registry — on SQLite and
//! on PostgreSQL — used the way a user does: plain kubectl with a `search` context, and
//! the `causeway search` CLI.

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::mcs_support::eventually;
use crate::propagation::fleet_of;
use crate::propagation_cli::causeway_bin;
use crate::support::Env;

const WAIT: Duration = Duration::from_secs(45);

const SHOP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: demo
  labels: {app: shop}
spec:
  replicas: 3
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop, team: pay}
    spec:
      containers:
        - name: shop
          image: nginx:1.27
"#;

/// `causeway search <args>` against the `search` context of the env's kubeconfig.
pub(crate) fn cli_command(env: &Env, args: &[&str]) -> Command {
    let mut cmd = Command::new(causeway_bin());
    cmd.arg("search")
        .args(args)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .env_remove("KUBECONFIG");
    cmd
}

/// [`cli_command`], run to its end.
pub(crate) async fn cli(env: &Env, args: &[&str]) -> Output {
    let mut cmd = cli_command(env, args);
    tokio::task::spawn_blocking(move || cmd.output().expect("causeway runs"))
        .await
        .expect("join")
}

/// The clusters of the rows of a printed table (first column), header excluded.
fn clusters_of(table: &str) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `kubectl --context search get <args> -o json` items, or None while it fails.
async fn items(env: &Env, args: &[&str]) -> Option<Vec<Value>> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = env.run("search", &all).await;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get("items").and_then(Value::as_array).cloned()
}

fn cluster_of(o: &Value) -> String {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(causeway_search::CLUSTER_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Starts `causeway search serve` for `env`'s hub on a fresh SQLite file or PostgreSQL
/// database, and adds its `search` context to the env's kubeconfig.
pub(crate) async fn start_search(
    env: &mut Env,
    postgres: bool,
) -> (causeway_controllers::search::Running, String) {
    start_search_with(env, postgres, Default::default()).await
}

/// [`start_search`] with the given watch limits.
pub(crate) async fn start_search_with(
    env: &mut Env,
    postgres: bool,
    watches: causeway_search::api::watch::Limits,
) -> (causeway_controllers::search::Running, String) {
    let storage = if postgres {
        causeway_search::store::testing::postgres_db().await
    } else {
        env.dir.path().join("search.db").display().to_string()
    };
    let search = env
        .cs
        .start_search_with(&storage, &env.dir.path().join("search"), watches)
        .await
        .expect("search starts");
    env.kubeconfig = env
        .cs
        .write_kubeconfigs_with(env.dir.path(), &[env.cs.search_entry(&search)])
        .unwrap();
    (search, storage)
}

async fn scenario(postgres: bool) {
    let (mut env, ctl) = fleet_of(&["east", "west"]).await;
    let shop = env.file("shop.yaml", SHOP);
    for m in ["east", "west"] {
        env.ok_in(m, &["apply", "-f", &shop]).await;
    }
    let (search, storage) = start_search(&mut env, postgres).await;
    let backend = if postgres { "postgres" } else { "sqlite" };
    assert_eq!(search.backend, backend);

    // plain kubectl lists the Pods of every member, each annotated with its cluster
    let pods = eventually("the shop Pods of east and west", WAIT, || async {
        let pods = items(&env, &["pods", "-A", "-l", "app=shop"]).await?;
        (pods.len() == 6).then_some(pods)
    })
    .await;
    let clusters: BTreeSet<String> = pods.iter().map(cluster_of).collect();
    assert_eq!(clusters, BTreeSet::from(["east".into(), "west".into()]));
    assert!(
        pods.iter()
            .all(|p| p.pointer("/metadata/managedFields").is_none()),
        "managedFields are not stored"
    );
    // the table has a CLUSTER column and the default order is (cluster, namespace, name)
    let table = env
        .ok_in("search", &["get", "pods", "-n", "demo", "-l", "app=shop"])
        .await;
    assert!(table.starts_with("CLUSTER"), "{table}");
    assert_eq!(
        clusters_of(&table),
        ["east", "east", "east", "west", "west", "west"],
        "{table}"
    );
    // `--sort-by` a field no column shows: the rows carry the objects
    // (`includeObject=Object`); the nodes of both members interleave
    let sorted = env
        .ok_in(
            "search",
            &[
                "get",
                "pods",
                "-A",
                "-l",
                "app=shop",
                "--sort-by",
                ".spec.nodeName",
                "-o",
                "wide",
            ],
        )
        .await;
    let mut lines = sorted.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let at = header.iter().position(|h| *h == "NODE").expect(&sorted);
    let nodes: Vec<&str> = lines.filter_map(|l| l.split_whitespace().nth(at)).collect();
    assert_eq!(nodes.len(), 6, "{sorted}");
    let mut want = nodes.clone();
    want.sort();
    assert_eq!(nodes, want, "{sorted}");
    // `kubectl get all`: the workloads and services of every member (the `all`
    // category in discovery)
    let all = env.ok_in("search", &["get", "all", "-n", "demo"]).await;
    for (kind, n) in [("pod/shop-", 6), ("deployment.apps/shop ", 2)] {
        assert_eq!(
            all.lines().filter(|l| l.contains(kind)).count(),
            n,
            "{kind}: {all}"
        );
    }
    // kubectl's paging (limit + continue) returns each object once
    let paged = env
        .ok_in(
            "search",
            &["get", "pods", "-A", "--chunk-size=2", "-o", "name"],
        )
        .await;
    let names: Vec<&str> = paged.lines().collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len(), "{paged}");
    assert!(names.len() >= 6, "{paged}");

    // the CLI: order, a cluster filter, and owner search through the ReplicaSet level
    let out = cli(&env, &["deploy", "--sort", "cluster desc"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout} {:?}", out.stderr);
    assert!(stdout.starts_with("CLUSTER   NAMESPACE   NAME"), "{stdout}");
    assert_eq!(clusters_of(&stdout), ["west", "east"], "{stdout}");
    let out = cli(
        &env,
        &[
            "pods",
            "--owner",
            "deployment/shop",
            "--seniority",
            "1",
            "--clusters",
            "west",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout} {:?}", out.stderr);
    assert_eq!(clusters_of(&stdout), ["west", "west", "west"], "{stdout}");
    // fuzzy name
    let out = cli(&env, &["deploy", "--name", "ho"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(clusters_of(&stdout), ["east", "west"], "{stdout}");
    let out = cli(&env, &["deploy", "--name", "nothing-like-it"]).await;
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No resources found"),
        "{out:?}"
    );
    // an owner type the server does not index is said, not an empty answer
    let out = cli(&env, &["pods", "--owner", "job/x", "--clusters", "east"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("owner search walks indexed owners only"),
        "{stderr}"
    );
    let out = cli(&env, &["pods", "--owner", "deployment/shop"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exactly one --clusters"),
        "{:?}",
        out.stderr
    );
    let out = cli(&env, &["gizmos"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(
        stderr.contains("indexes no resource named \"gizmos\"") && stderr.contains("pods"),
        "{stderr}"
    );
    // a watch takes what a watch can filter by, and says what it cannot
    let out = cli(&env, &["deploy", "-w", "--sort", "name"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(
        stderr.contains("'--watch' cannot be used with '--sort <SORT>'"),
        "{stderr}"
    );
    // an orderby outside the allowlist is a 400 that lists the allowed fields
    let out = env
        .run(
            "search",
            &["get", "--raw", "/api/v1/pods?orderby=spec.nodeName"],
        )
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(stderr.contains("created_at"), "{stderr}");

    // a restart relists every member and writes nothing: nothing changed (K.71), and
    // nothing is purged while the registry is read
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    search.shutdown().await;
    let search = env
        .cs
        .start_search(&storage, &env.dir.path().join("search"))
        .await
        .expect("search restarts");
    let mut root = env.cs.search_entry(&search);
    root.name = "search-root".into();
    root.server = format!("https://{}", search.addr);
    env.kubeconfig = env
        .cs
        .write_kubeconfigs_with(env.dir.path(), &[env.cs.search_entry(&search), root])
        .unwrap();
    let text = eventually("every watch synced after the restart", WAIT, || async {
        let out = env.run("search-root", &["get", "--raw", "/metrics"]).await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // 2 members × the 9 default types
        (metric(&text, "causeway_search_indexer_synced") == 18.0).then_some(text)
    })
    .await;
    assert_eq!(
        metric(&text, "causeway_search_indexer_objects_written_total"),
        0.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "causeway_search_indexer_objects_purged_total"),
        0.0,
        "{text}"
    );
    assert!(
        metric(&text, "causeway_search_indexer_objects_unchanged_total") >= 6.0,
        "{text}"
    );
    assert_eq!(
        items(&env, &["pods", "-A", "-l", "app=shop"])
            .await
            .map(|p| p.len()),
        Some(6)
    );

    // a deletion in a member follows
    env.ok_in("east", &["delete", "deployment", "shop", "-n", "demo"])
        .await;
    eventually("east's shop Pods gone from search", WAIT, || async {
        let pods = items(&env, &["pods", "-A", "-l", "app=shop"]).await?;
        pods.iter().all(|p| cluster_of(p) == "west").then_some(())
    })
    .await;
    // a member that leaves is purged
    causeway_controllers::clusters::join::unjoin(env.hub_client().await, "west", false, WAIT)
        .await
        .expect("west unjoins");
    eventually("west purged from search", WAIT, || async {
        let pods = items(&env, &["pods", "-A"]).await?;
        let nodes = items(&env, &["nodes"]).await?;
        (pods.iter().chain(&nodes).all(|o| cluster_of(o) == "east")).then_some(())
    })
    .await;
    search.shutdown().await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_the_cli_search_every_member_on_sqlite() {
    scenario(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_the_cli_search_every_member_on_postgres() {
    scenario(true).await;
}

/// A kube client for the search server's root that presents `cert` (PEM certificate
/// and key) and no token.
async fn front_proxy_client(
    search: &causeway_controllers::search::Running,
    cert: Option<&causeway_runtime::https::Issued>,
) -> kube::Client {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut user = serde_json::json!({});
    if let Some(c) = cert {
        user = serde_json::json!({"client-certificate-data": b64(&c.cert_pem), "client-key-data": b64(&c.key_pem)});
    }
    let kc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "s", "cluster": {"server": format!("https://{}", search.addr), "certificate-authority-data": b64(&search.ca_pem)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "s", "context": {"cluster": "s", "user": "u"}}],
        "current-context": "s",
    });
    let kc: kube::config::Kubeconfig = serde_json::from_value(kc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// GET `path` naming `user` and `groups` in the front proxy's headers; (status, body).
/// An answer (a watch's end included) not there within a minute fails the test, naming
/// the request, rather than hanging it.
async fn as_proxied(c: &kube::Client, path: &str, user: &str, groups: &[&str]) -> (u16, String) {
    let mut req = http::Request::get(path);
    req = req.header("X-Remote-User", user);
    for g in groups {
        req = req.header("X-Remote-Group", *g);
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        c.request_text(req.body(Vec::new()).unwrap()),
    )
    .await
    .unwrap_or_else(|_| panic!("GET {path} as {user} {groups:?}: no complete answer in 60 s"));
    match answer {
        Ok(body) => (200, body),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_apiservice_the_front_proxy_names_the_user() {
    // kube-apiserver's aggregator forwards over a client certificate of its requestheader
    // CA with X-Remote-User / X-Remote-Group (and no Authorization header): the search
    // server believes those headers on such a connection only. The server runs with the
    // least-privilege RBAC of deploy/search/.
    let (env, ctl) = fleet_of(&["east"]).await;
    let front = causeway_runtime::https::Authority::generate("front-proxy-ca").unwrap();
    let ca_file = env.file("requestheader-ca.crt", &front.ca_pem);
    // the search server runs with exactly deploy/search/rbac.yaml's rights on the hub
    let rbac = crate::support::repo().join("deploy/search/rbac.yaml");
    env.ok(&["apply", "-f", rbac.to_str().unwrap()]).await;
    env.cs.hub.add_token(
        "search-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-search".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let restricted = causeway_controllers::clusters::join::client_for(
        &causeway_controllers::clusters::join::MemberAccess {
            token: "search-token".into(),
            ..causeway_e2e::access(&env.cs.hub)
        },
    )
    .await
    .unwrap();
    let search = causeway_controllers::search::start(
        restricted,
        causeway_controllers::search::StartOptions {
            storage: env.dir.path().join("s.db").display().to_string(),
            sqlite_files: causeway_search::store::DEFAULT_SQLITE_FILES,
            data_dir: env.dir.path().join("search"),
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: None,
            resources: causeway_search::indexer::default_resources(),
            requestheader_ca: Some(ca_file.into()),
            requestheader_allowed_names: vec!["front-proxy-client".into()],
            watches: Default::default(),
            max_page_size: causeway_search::api::MAX_PAGE,
            max_connections: causeway_runtime::https::MAX_CONNECTIONS,
        },
    )
    .await
    .expect("search starts");
    let path = format!("{}/api/v1/nodes", causeway_search::api::route::PREFIX);
    let proxy_cert = front.client("front-proxy-client").unwrap();
    let proxy = front_proxy_client(&search, Some(&proxy_cert)).await;
    let body = eventually("east's node through the front proxy", WAIT, || async {
        let (code, body) = as_proxied(&proxy, &path, "root", &["system:masters"]).await;
        (code == 200 && body.contains("east-node-0")).then_some(body)
    })
    .await;
    assert!(body.contains(causeway_search::CLUSTER_ANNOTATION), "{body}");
    // a watch through the front proxy, from a list's cursor: the user the headers name
    // sees the member's change
    let rv = eventually("a cursor with east at a known position", WAIT, || async {
        let (code, body) = as_proxied(&proxy, &path, "root", &["system:masters"]).await;
        let list: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        let rv = list["metadata"]["resourceVersion"].as_str()?.to_string();
        let cursor = causeway_search::positions::Cursor::decode(&rv).ok()?;
        (cursor.0.get("east")? != causeway_search::positions::UNKNOWN).then_some(rv)
    })
    .await;
    let watch = |user: &'static str, groups: &'static [&'static str]| {
        let proxy = proxy.clone();
        let path = format!("{path}?watch=true&timeoutSeconds=6&resourceVersion={rv}");
        tokio::spawn(async move { as_proxied(&proxy, &path, user, groups).await })
    };
    let root = watch("root", &["system:masters"]);
    let carol = watch("carol", &["system:authenticated"]);
    env.ok_in("east", &["label", "node", "east-node-0", "watched=yes"])
        .await;
    let (code, events) = root.await.unwrap();
    assert_eq!(code, 200, "{events}");
    assert!(
        events.contains("\"MODIFIED\"") && events.contains("\"watched\":\"yes\""),
        "{events}"
    );
    // one the hub grants nothing is not shown it
    let (code, events) = carol.await.unwrap();
    assert!(
        code == 200 && !events.contains("east-node-0"),
        "{code}: {events}"
    );
    // a user the hub grants nothing sees nothing
    let (code, body) = as_proxied(&proxy, &path, "carol", &["system:authenticated"]).await;
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{body}");
    // the same headers without the front proxy's certificate are not believed
    let plain = front_proxy_client(&search, None).await;
    let (code, body) = as_proxied(&plain, &path, "root", &["system:masters"]).await;
    assert_eq!(code, 401, "{body}");
    // nor over a certificate of the same CA whose name is not an allowed one
    // (--requestheader-allowed-names front-proxy-client)
    let kubelet_cert = front.client("kubelet").unwrap();
    let kubelet = front_proxy_client(&search, Some(&kubelet_cert)).await;
    let (code, body) = as_proxied(&kubelet, &path, "root", &["system:masters"]).await;
    assert_eq!(code, 401, "{body}");
    assert!(
        body.contains("\"kubelet\" is not one of --requestheader-allowed-names"),
        "{body}"
    );
    // a certificate of another CA does not get a connection
    let other = causeway_runtime::https::Authority::generate("other").unwrap();
    let stranger_cert = other.client("mallory").unwrap();
    let stranger = front_proxy_client(&search, Some(&stranger_cert)).await;
    let (code, body) = as_proxied(&stranger, &path, "root", &["system:masters"]).await;
    assert_eq!(code, 0, "refused at the handshake: {body}");
    tokio::time::timeout(Duration::from_secs(60), search.shutdown())
        .await
        .expect("the search server stops within a minute");
    tokio::time::timeout(Duration::from_secs(60), ctl.stop())
        .await
        .expect("the controllers stop within a minute");
}

/// `kubectl auth can-i <args>` on the hub: "yes" or "no".
async fn can(env: &Env, args: &[&str]) -> String {
    let mut a = vec!["auth", "can-i"];
    a.extend_from_slice(args);
    let out = env.run("hub", &a).await;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {args:?}: {answer}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer
}

/// Whether the hub lets `user` (in `groups`) reach `path` under the search group
/// through the APIService: the SubjectAccessReview kube-apiserver's authorizer makes of
/// the request (its RequestInfo: a GET naming `…/resources/<name>/<subresource>/…` is a
/// `get` whatever follows, the bare `…/resources` a `list`, or `watch` with
/// `?watch=true`). kubectl's `auth can-i` cannot ask it: it knows the group only from
/// discovery, which the hub serves through the APIService.
async fn reaches(env: &Env, user: &str, groups: &[&str], verb: &str, path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {
                "verb": verb,
                "group": "search.causeway.io",
                "version": "v1alpha1",
                "resource": "resources",
                "name": parts.first().copied().unwrap_or_default(),
                "subresource": parts.get(1).copied().unwrap_or_default(),
            },
        },
    });
    let file = env.file("review.json", &review.to_string());
    let out = env.ok(&["create", "-f", &file, "-o", "json"]).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    v["status"]["allowed"] == true
}

/// Through the APIService, kube-apiserver authorizes each search itself before it
/// proxies it: `get` of resources.search.causeway.io with the path's next segments as
/// name and subresource (`apis`/`apps`, `api`/`v1`, `clusters`/<cluster>), `list` of
/// the bare prefix. deploy/search/rbac.yaml ships the role that grants exactly that
/// (and, apart, the right to read the server's /metrics); its commented example binding
/// applies as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_search_role_lets_users_through_the_apiservice() {
    let env = Env::start().await;
    let _ = env
        .run("hub", &["create", "namespace", "causeway-system"])
        .await;
    env.ok(&["apply", "-f", "deploy/search/rbac.yaml"]).await;
    let role: Value = serde_json::from_str(
        &env.ok(&["get", "clusterrole", "causeway-search-user", "-o", "json"])
            .await,
    )
    .unwrap();
    let rule = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["apiGroups"] == serde_json::json!(["search.causeway.io"]))
        .unwrap_or_else(|| panic!("no rule for search.causeway.io: {role}"));
    assert_eq!(rule["verbs"], serde_json::json!(["get", "list", "watch"]));

    // what kube-apiserver asks of `kubectl get deploy -A`, `get pods -w`, one
    // cluster's objects, and the bare prefix, through the APIService
    let searches = [
        ("get", "/apis/apps/v1/deployments"),
        ("get", "/api/v1/pods"),
        ("get", "/clusters/east/apis/apps/v1/deployments"),
        ("list", ""),
        ("watch", ""),
    ];
    let dev = ["system:authenticated"];
    for (verb, path) in searches {
        assert!(
            !reaches(&env, "dev", &dev, verb, path).await,
            "unbound: {verb} {path}"
        );
    }
    env.ok(&[
        "create",
        "clusterrolebinding",
        "dev-searches",
        "--clusterrole=causeway-search-user",
        "--user=dev",
    ])
    .await;
    for (verb, path) in searches {
        assert!(
            reaches(&env, "dev", &dev, verb, path).await,
            "bound: {verb} {path}"
        );
    }
    // and nothing else: what a search shows is still the user's own hub RBAC
    for other in [
        &["list", "deployments.apps", "-A"][..],
        &["get", "clusters.causeway.io"],
        &["get", "/metrics"],
    ] {
        let mut args = other.to_vec();
        args.extend_from_slice(&["--as", "dev"]);
        assert_eq!(can(&env, &args).await, "no", "{other:?}");
    }

    // the commented example binding (every authenticated user), uncommented
    let manifest =
        std::fs::read_to_string(crate::support::repo().join("deploy/search/rbac.yaml")).unwrap();
    let example: String = manifest
        .lines()
        .skip_while(|l| !l.starts_with("# Example: every authenticated user"))
        .skip(1)
        .take_while(|l| l.starts_with('#'))
        .map(|l| {
            format!(
                "{}\n",
                l.trim_start_matches('#').strip_prefix(' ').unwrap_or("")
            )
        })
        .collect();
    assert!(example.contains("kind: ClusterRoleBinding"), "{example}");
    let erin = "/apis/apps/v1/deployments";
    assert!(!reaches(&env, "erin", &dev, "get", erin).await);
    let example = env.file("search-users.yaml", &example);
    env.ok(&["apply", "-f", &example]).await;
    assert!(reaches(&env, "erin", &dev, "get", erin).await);

    // /metrics of the search server: for a scraper bound to the metrics role
    assert_eq!(can(&env, &["get", "/metrics", "--as", "prom"]).await, "no");
    env.ok(&[
        "create",
        "clusterrolebinding",
        "prom-scrapes-search",
        "--clusterrole=causeway-search-metrics-reader",
        "--user=prom",
    ])
    .await;
    assert_eq!(can(&env, &["get", "/metrics", "--as", "prom"]).await, "yes");
}
