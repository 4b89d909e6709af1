//! Cross-cluster watch through the search server (K.73), end to end: members east and
//! west, the hub controller and `causeway search serve`; plain `kubectl get -w`, a
//! kube-rs watch resumed from the resourceVersion of its last event, and a user whose
//! hub RBAC shows one namespace.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::TryStreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::GroupVersionKind;

use crate::mcs_support::eventually;
use crate::propagation::fleet_of;
use crate::support::{Env, kubectl_bin};

const WAIT: Duration = Duration::from_secs(45);

fn deployment(name: &str, namespace: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{app: {name}}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: c
          image: nginx:1.27
"#
    )
}

fn deployments() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps", "v1", "Deployment"),
        "deployments",
    )
}

/// A kube client of the search server, as the kubeconfig's `search` context with
/// `token` (the hub admin's when None).
async fn search_client(env: &Env, token: Option<&str>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&env.kubeconfig).unwrap();
    let opts = kube::config::KubeConfigOptions {
        context: Some("search".into()),
        ..Default::default()
    };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .unwrap();
    if let Some(t) = token {
        cfg.auth_info.token = Some(t.to_string().into());
    }
    kube::Client::try_from(cfg).unwrap()
}

/// `kubectl get -w` in the background: its output lines, until killed.
struct Watching {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Watching {
    /// `kubectl --context search <args>`.
    fn start(env: &Env, args: &[&str]) -> Watching {
        let mut cmd = Command::new(kubectl_bin());
        cmd.env("KUBECONFIG", &env.kubeconfig)
            .args(["--context", "search"])
            .args(args);
        Watching::spawn(cmd)
    }

    /// `causeway search <args>` (its `search` context).
    fn cli(env: &Env, args: &[&str]) -> Watching {
        Watching::spawn(crate::search::cli_command(env, args))
    }

    /// Its stdout's lines, and its stderr's prefixed with `stderr: `.
    fn spawn(mut cmd: Command) -> Watching {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the watcher runs");
        let (tx, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let forward = |r: Box<dyn std::io::Read + Send>, prefix: &'static str| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send(format!("{prefix}{l}")).is_err() {
                        break;
                    }
                }
            });
        };
        forward(Box::new(out), "");
        forward(Box::new(err), "stderr: ");
        Watching {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits until a line has every one of `words`.
    async fn wait_for(&mut self, words: &[&str]) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            while let Ok(l) = self.lines.try_recv() {
                self.seen.push(l);
            }
            if self
                .seen
                .iter()
                .any(|l| words.iter().all(|w| l.split_whitespace().any(|x| x == *w)))
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher never printed a line with {words:?}; it printed:\n{}",
                self.seen.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Events of a watch from `rv` until `done` says the collected ones are enough.
async fn watch_from(
    api: &Api<DynamicObject>,
    rv: &str,
    done: impl Fn(&[(String, String, String)]) -> bool,
) -> (Vec<(String, String, String)>, String) {
    let mut events = Vec::new();
    let mut last = rv.to_string();
    let stream = api
        .watch(&WatchParams::default().timeout(30), rv)
        .await
        .expect("the watch opens");
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(&events) {
        let next = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("watch from {rv}: only {events:?}"))
            .expect("watch event");
        let (kind, o) = match next {
            Some(WatchEvent::Added(o)) => ("ADDED", o),
            Some(WatchEvent::Modified(o)) => ("MODIFIED", o),
            Some(WatchEvent::Deleted(o)) => ("DELETED", o),
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(WatchEvent::Error(e)) => panic!("watch error {e:?}"),
            None => panic!("watch ended with {events:?}"),
        };
        let cluster = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(causeway_search::CLUSTER_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        last = o.metadata.resource_version.clone().unwrap_or_default();
        events.push((
            kind.to_string(),
            cluster,
            o.metadata.name.unwrap_or_default(),
        ));
    }
    (events, last)
}

/// Watches from `rv` while `meanwhile` runs, until the watch ends with 410 naming
/// `cluster`; the events before it.
async fn expect_gone(
    api: &Api<DynamicObject>,
    rv: &str,
    cluster: &str,
    meanwhile: impl std::future::Future<Output = ()>,
) -> Vec<String> {
    let stream = api
        .watch(&WatchParams::default().timeout(120), rv)
        .await
        .expect("the watch answers");
    let mut stream = std::pin::pin!(stream);
    meanwhile.await;
    let mut before = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no 410 for {cluster} within {WAIT:?}: {before:?}"));
        match next {
            Ok(Some(WatchEvent::Error(e))) => {
                assert_eq!(e.code, 410, "{e:?}");
                assert_eq!(e.reason, "Expired", "{e:?}");
                let named = format!("cluster {cluster}");
                assert!(e.message.contains(&named), "{}", e.message);
                return before;
            }
            Ok(Some(e)) => before.push(format!("{e:?}")),
            other => panic!("the watch ended without 410 for {cluster}: {other:?}"),
        }
    }
}

fn has(events: &[(String, String, String)], kind: &str, cluster: &str, name: &str) -> bool {
    events
        .iter()
        .any(|(k, c, n)| k == kind && c == cluster && n == name)
}

async fn scenario(postgres: bool) {
    let (mut env, ctl) = fleet_of(&["east", "west"]).await;
    let shop = env.file("shop.yaml", &deployment("shop", "demo"));
    env.ok_in("east", &["apply", "-f", &shop]).await;
    let (search, _) = crate::search::start_search(&mut env, postgres).await;
    let client = search_client(&env, None).await;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &deployments());
    // once both members' deployments are stored, a list's resourceVersion is a cursor
    // of both
    let listed = eventually(
        "east's shop listed with a cursor of both members",
        WAIT,
        || async {
            let l = api.list(&ListParams::default()).await.ok()?;
            let rv = l.metadata.resource_version.clone()?;
            let cursor = causeway_search::positions::Cursor::decode(&rv).ok()?;
            // both members at a known position (until then a watch from it is 410)
            let known = cursor
                .0
                .values()
                .all(|v| v != causeway_search::positions::UNKNOWN);
            (l.items.len() == 1 && cursor.0.len() == 2 && known).then_some(rv)
        },
    )
    .await;

    // plain kubectl: the list, then every member's changes, with the CLUSTER column
    let mut table = Watching::start(
        &env,
        &["get", "deployments", "-A", "-w", "--request-timeout=120s"],
    );
    table.wait_for(&["east", "demo", "shop"]).await;
    // `causeway search -w`: the list's table, then a row per change, in its columns
    let mut cli = Watching::cli(&env, &["deployments", "-w"]);
    cli.wait_for(&["CLUSTER", "NAMESPACE", "NAME"]).await;
    cli.wait_for(&["east", "demo", "shop"]).await;
    // an empty list prints no header; the first change's row brings it
    let mut none_yet = Watching::cli(&env, &["deployments", "-w", "-l", "app=web"]);
    none_yet
        .wait_for(&["stderr:", "No", "resources", "found."])
        .await;
    // a field label Deployments do not have: the search lists by it, but the members
    // refuse the watch (as kube-apiserver does), and both kubectl and the CLI say which
    let refusal = r#""spec.paused" is not a known field selector: only "metadata.name", "metadata.namespace""#;
    let out = env
        .run(
            "search",
            &[
                "get",
                "deployments",
                "-A",
                "-w",
                "--field-selector",
                "spec.paused=true",
            ],
        )
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("refused the watch") && stderr.contains(refusal),
        "kubectl: {stderr}"
    );
    let out = crate::search::cli(
        &env,
        &["deployments", "-w", "--field-selector", "spec.paused=true"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("the search server refused the watch")
            && stderr.contains(refusal)
            && stderr.contains("goes to every member"),
        "causeway search: {stderr}"
    );
    let mut events = Watching::start(
        &env,
        &[
            "get",
            "deployments",
            "-A",
            "-w",
            "--output-watch-events",
            "-o",
            r#"jsonpath={.type} {.object.metadata.annotations.search\.causeway\.io/cluster} {.object.metadata.name}{"\n"}"#,
        ],
    );
    events.wait_for(&["ADDED", "east", "shop"]).await;
    let web = env.file("web.yaml", &deployment("web", "demo"));
    env.ok_in("west", &["apply", "-f", &web]).await;
    table.wait_for(&["west", "demo", "web"]).await;
    cli.wait_for(&["west", "demo", "web"]).await;
    none_yet.wait_for(&["west", "demo", "web"]).await;
    let printed: Vec<&String> = none_yet
        .seen
        .iter()
        .filter(|l| !l.starts_with("stderr: "))
        .collect();
    assert!(
        printed[0].starts_with("CLUSTER") && printed[1].starts_with("west"),
        "{:?}",
        none_yet.seen
    );
    let header = &cli.seen[0];
    let row = cli.seen.iter().find(|l| l.starts_with("west")).unwrap();
    assert_eq!(
        row.find("web"),
        header.find("   NAME   ").map(|i| i + 3),
        "a change's row is in the list's columns:\n{}",
        cli.seen.join("\n")
    );
    events.wait_for(&["ADDED", "west", "web"]).await;
    // the pages of a list share the first page's resourceVersion, as kube-apiserver's
    // share one snapshot's: a watch from the last page's misses nothing since the first
    let first = eventually("west's web stored", WAIT, || async {
        let l = api.list(&ListParams::default().limit(1)).await.ok()?;
        l.metadata
            .continue_
            .as_ref()
            .is_some_and(|c| !c.is_empty())
            .then_some(l)
    })
    .await;
    let token = first.metadata.continue_.clone().filter(|c| !c.is_empty());
    let token = token.expect("two pages: east's shop and west's web");
    // west moves on between the pages
    env.ok_in(
        "west",
        &["label", "deployment", "web", "-n", "demo", "tier=front"],
    )
    .await;
    eventually("a fresh list at a later cursor", WAIT, || async {
        let l = api.list(&ListParams::default()).await.ok()?;
        (l.metadata.resource_version != first.metadata.resource_version).then_some(())
    })
    .await;
    let second = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        second.metadata.resource_version, first.metadata.resource_version,
        "every page carries the first page's cursor"
    );

    env.ok_in("east", &["delete", "deployment", "shop", "-n", "demo"])
        .await;
    events.wait_for(&["DELETED", "east", "shop"]).await;
    drop((table, events, cli, none_yet));

    // a watch from the list's cursor sees what happened since in both members, and
    // one from its last event's resourceVersion resumes every member where it was
    let (seen, last) = watch_from(&api, &listed, |e| {
        has(e, "ADDED", "west", "web") && has(e, "DELETED", "east", "shop")
    })
    .await;
    assert!(!has(&seen, "ADDED", "east", "shop"), "{seen:?}");
    let api_yaml = env.file("api.yaml", &deployment("api", "demo"));
    for m in ["east", "west"] {
        env.ok_in(m, &["apply", "-f", &api_yaml]).await;
    }
    let (_, after_both) = watch_from(&api, &last, |e| {
        has(e, "ADDED", "east", "api") && has(e, "ADDED", "west", "api")
    })
    .await;
    env.ok_in("west", &["delete", "deployment", "api", "-n", "demo"])
        .await;
    let (resumed, _) = watch_from(&api, &after_both, |e| has(e, "DELETED", "west", "api")).await;
    assert!(
        resumed.iter().all(|(k, _, _)| k != "ADDED"),
        "a watch resumed from its last event sees nothing again: {resumed:?}"
    );

    // what a watch cannot do is a 400 that says why; a foreign resourceVersion too
    for (path, want) in [
        (
            "/apis/apps/v1/deployments?watch=true&fuzzy-name=we",
            "fuzzy-name is not supported on a watch",
        ),
        (
            "/apis/apps/v1/deployments?watch=true&resourceVersion=12",
            "is not one of this search server's",
        ),
        (
            "/apis/apps/v1/deployments?watch=true&labelSelector=a%20in%20(",
            "cluster ",
        ),
    ] {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        match client.request_text(req).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 400, "{path}: {s:?}");
                assert!(s.message.contains(want), "{path}: {}", s.message);
            }
            other => panic!("{path}: {other:?}"),
        }
    }

    // a cursor read while a member was not yet indexed cannot be resumed: 410, list again
    let unknown = causeway_search::positions::Cursor(
        [("east", causeway_search::positions::UNKNOWN), ("west", "1")]
            .into_iter()
            .map(|(c, rv)| (c.to_string(), rv.to_string()))
            .collect(),
    );
    let events = expect_gone(&api, &unknown.encode(), "east", async {}).await;
    assert!(events.is_empty(), "410 before any event: {events:?}");

    // a user whose hub RBAC watches deployments in demo and later (empty when the watch
    // starts) sees their events and no others
    env.cs.hub.add_token(
        "dev-token",
        kubesim::User {
            name: "dev".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let rbac = env.file(
        "rbac.yaml",
        r#"apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: Namespace
metadata: {name: later}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: clusters-reader}
rules:
- {apiGroups: [causeway.io], resources: [clusters], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: dev-clusters}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: clusters-reader}
subjects: [{kind: User, name: dev}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: deployments-watcher}
rules:
- {apiGroups: [apps], resources: [deployments], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dev-deployments, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: deployments-watcher}
subjects: [{kind: User, name: dev}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dev-deployments, namespace: later}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: deployments-watcher}
subjects: [{kind: User, name: dev}]
"#,
    );
    env.ok(&["apply", "-f", &rbac]).await;
    let dev: Api<DynamicObject> =
        Api::all_with(search_client(&env, Some("dev-token")).await, &deployments());
    for ns in ["private", "later"] {
        env.ok_in("east", &["create", "namespace", ns]).await;
    }
    let now = api.list(&ListParams::default()).await.unwrap();
    let from = now.metadata.resource_version.unwrap_or_default();
    let objects = [("secret", "private"), ("open", "demo"), ("late", "later")];
    for (name, ns) in objects {
        let f = env.file(&format!("{name}.yaml"), &deployment(name, ns));
        env.ok_in("east", &["apply", "-f", &f]).await;
    }
    let (dev_seen, _) = watch_from(&dev, &from, |e| {
        has(e, "ADDED", "east", "open") && has(e, "ADDED", "east", "late")
    })
    .await;
    assert!(
        dev_seen.iter().all(|(_, _, n)| n != "secret"),
        "dev may not see namespace private: {dev_seen:?}"
    );
    let listed = dev.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = listed
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert!(!names.contains(&"secret".to_string()), "{names:?}");
    let (admin_seen, _) = watch_from(&api, &from, |e| {
        has(e, "ADDED", "east", "open") && has(e, "ADDED", "east", "secret")
    })
    .await;
    assert!(has(&admin_seen, "ADDED", "east", "secret"));

    // a member that leaves ends the watch with 410: its objects leave the store
    // without events, so the client lists again
    let now = api.list(&ListParams::default()).await.unwrap();
    let from = now.metadata.resource_version.unwrap_or_default();
    let hub = env.hub_client().await;
    let unjoin = async move {
        causeway_controllers::clusters::join::unjoin(hub, "west", false, WAIT)
            .await
            .expect("west unjoins");
    };
    expect_gone(&api, &from, "west", unjoin).await;
    search.shutdown().await;
    ctl.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_every_member_and_resumes_from_a_cursor_on_sqlite() {
    scenario(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watches_every_member_and_resumes_from_a_cursor_on_postgres() {
    scenario(true).await;
}

/// `causeway search -w` goes on when the server ends its watch at its timeout (here
/// `--min-request-timeout` 1 s: every 1 to 2 s), where kubectl stops: it watches again
/// from the last change it saw, so a change made after several such ends is printed,
/// under the one header, and the list is not printed again.
#[tokio::test]
async fn the_cli_watches_again_when_the_server_ends_its_watch() {
    let (mut env, _ctl) = fleet_of(&["east"]).await;
    let shop = env.file("shop.yaml", &deployment("shop", "demo"));
    env.ok_in("east", &["apply", "-f", &shop]).await;
    let limits = causeway_search::api::watch::Limits {
        min_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    let (_search, _) = crate::search::start_search_with(&mut env, false, limits).await;
    let client = search_client(&env, None).await;
    let api: Api<DynamicObject> = Api::all_with(client, &deployments());
    eventually(
        "east's shop listed, ready, at a known position",
        WAIT,
        || async {
            let l = api.list(&ListParams::default()).await.ok()?;
            let cursor =
                causeway_search::positions::Cursor::decode(&l.metadata.resource_version?).ok()?;
            let known = cursor
                .0
                .values()
                .all(|v| v != causeway_search::positions::UNKNOWN);
            // shop's status settled, so no later change of it is printed
            let ready = l.items.first()?.data.pointer("/status/readyReplicas") == Some(&1.into());
            (l.items.len() == 1 && cursor.0.len() == 1 && known && ready).then_some(())
        },
    )
    .await;

    // the server's timeout is in force: kubectl's watch ends, and kubectl with it
    let kubectl =
        tokio::time::timeout(WAIT, env.run("search", &["get", "deployments", "-A", "-w"]))
            .await
            .expect("kubectl get -w ends when the server ends its watch");
    assert!(
        kubectl.status.success(),
        "{}",
        String::from_utf8_lossy(&kubectl.stderr)
    );

    let mut cli = Watching::cli(&env, &["deployments", "-w"]);
    cli.wait_for(&["east", "demo", "shop"]).await;
    // several of the server's timeouts pass
    tokio::time::sleep(Duration::from_secs(5)).await;
    let web = env.file("web.yaml", &deployment("web", "demo"));
    env.ok_in("east", &["apply", "-f", &web]).await;
    cli.wait_for(&["east", "demo", "web"]).await;
    assert!(
        cli.child.try_wait().unwrap().is_none(),
        "the CLI is still watching"
    );
    // the list is not printed again after a re-watch, and no change twice
    let rows = |name: &str| {
        cli.seen
            .iter()
            .filter(|l| l.split_whitespace().nth(2) == Some(name))
            .count()
    };
    // (web's rows are its changes: created, its revision annotation, its status, as a
    // Deployment controller writes them; a replay would print shop again)
    let headers = cli.seen.iter().filter(|l| l.starts_with("CLUSTER")).count();
    assert!(
        headers == 1 && rows("shop") == 1,
        "one header, the list once: {:?}",
        cli.seen
    );
    assert!(
        !cli.seen.iter().any(|l| l.starts_with("stderr: ")),
        "{:?}",
        cli.seen
    );
}
