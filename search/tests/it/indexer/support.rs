//! What the indexer tests share: stores of both kinds, kubesim members, a running
//! indexer with its metrics, polling.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use causeway_search::indexer::{self, Fleet, IndexerMetrics, Member, ResourceSpec};
use causeway_search::query::Query;
use causeway_search::store::{Gvr, Scope, Store};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any expected state may take to appear.
pub const DEADLINE: Duration = Duration::from_secs(40);

pub use crate::support::{Backend, Cluster, cluster, cluster_with, database};

impl Cluster {
    pub fn member(&self) -> Member {
        Member {
            client: self.client.clone(),
            fingerprint: self.server.url(),
        }
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Server-side applies a ConfigMap in `default` (so it has managedFields).
    pub async fn apply_configmap(&self, name: &str, labels: Value, data: Value) {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels},
            "data": data,
        });
        self.configmaps()
            .patch(name, &PatchParams::apply("test"), &Patch::Apply(cm))
            .await
            .unwrap();
    }

    pub async fn delete_configmap(&self, name: &str) {
        self.configmaps()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// `(namespace, name) → resourceVersion` of every object of a type in the member.
    pub async fn versions(&self, gvr: &Gvr, kind: &str) -> BTreeMap<(String, String), String> {
        let gvk = GroupVersionKind::gvk(&gvr.group, &gvr.version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, &gvr.resource);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let list = api.list(&Default::default()).await.unwrap();
        list.items
            .into_iter()
            .map(|o| {
                let m = o.metadata;
                (
                    (m.namespace.unwrap_or_default(), m.name.unwrap_or_default()),
                    m.resource_version.unwrap_or_default(),
                )
            })
            .collect()
    }
}

/// `(namespace, name) → (resourceVersion, uid)` of every object of a type in the
/// member.
pub async fn identities(
    member: &Cluster,
    gvr: &Gvr,
    kind: &str,
) -> BTreeMap<(String, String), (String, String)> {
    let gvk = GroupVersionKind::gvk(&gvr.group, &gvr.version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &gvr.resource);
    let api: Api<DynamicObject> = Api::all_with(member.client.clone(), &ar);
    let list = api.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|o| {
            let m = o.metadata;
            (
                (m.namespace.unwrap_or_default(), m.name.unwrap_or_default()),
                (
                    m.resource_version.unwrap_or_default(),
                    m.uid.unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// The same of what the store holds of `cluster`'s type.
pub async fn stored_identities(
    store: &Store,
    gvr: &Gvr,
    cluster: &str,
) -> BTreeMap<(String, String), (String, String)> {
    stored(store, gvr, Some(cluster))
        .await
        .into_values()
        .map(|o| {
            let m = &o["metadata"];
            let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (
                (s("namespace"), s("name")),
                (s("resourceVersion"), s("uid")),
            )
        })
        .collect()
}

pub fn gvr(group: &str, version: &str, resource: &str) -> Gvr {
    Gvr {
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
    }
}

pub fn configmaps() -> Gvr {
    gvr("", "v1", "configmaps")
}

pub fn specs(values: &[&str]) -> Vec<ResourceSpec> {
    indexer::parse_all(values).unwrap()
}

/// A fleet: `ready` members, and the names of the registered ones.
pub fn fleet(ready: &[(&str, &Cluster)], registered: &[&str]) -> Fleet {
    Fleet {
        ready: ready
            .iter()
            .map(|(n, c)| (n.to_string(), c.member()))
            .collect(),
        registered: registered.iter().map(|s| s.to_string()).collect(),
    }
}

/// A running indexer and its metrics.
pub struct Indexer {
    registry: Registry,
    /// Where the store is in each member's types (K.73).
    pub positions: causeway_search::positions::Positions,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Indexer {
    pub fn start(
        store: &Store,
        resources: Vec<ResourceSpec>,
        fleet: watch::Receiver<Fleet>,
    ) -> Indexer {
        let mut registry = Registry::default();
        let metrics = IndexerMetrics::new(&mut registry);
        let stop = CancellationToken::new();
        let positions = causeway_search::positions::Positions::default();
        let task = tokio::spawn(indexer::run(
            store.clone(),
            resources,
            fleet,
            metrics,
            positions.clone(),
            stop.clone(),
        ));
        Indexer {
            registry,
            positions,
            stop,
            task,
        }
    }

    /// The value of a series as the registry encodes it, e.g. `search_indexer_synced`
    /// or `search_indexer_unserved{cluster="a",resource="v1/pods"}` (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        self.text()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Every metric, as text.
    pub fn text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text
    }

    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the indexer stops")
            .unwrap();
    }
}

/// The search API over a store, reviewing its callers on a kubesim hub, with a client of
/// it as the hub's admin; stopped when dropped.
pub struct SearchApi {
    pub client: kube::Client,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for SearchApi {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl SearchApi {
    /// Serves `store`; callers are reviewed by `hub` (a kubesim: its admin token is a
    /// `system:masters` one); watches go to the members `positions` shows.
    pub async fn start(
        store: &Store,
        hub: &Cluster,
        positions: causeway_search::positions::Positions,
    ) -> SearchApi {
        use causeway_search::api::{Options, Server};
        let dir = tempfile::tempdir().unwrap();
        let server = Server::bind(&Options {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            tls: None,
            requestheader_ca: None,
            requestheader_allowed_names: Vec::new(),
            watches: Default::default(),
        })
        .await
        .expect("the search API binds");
        let mut cfg = kube::Config::new(format!("https://{}", server.addr).parse().unwrap());
        cfg.root_cert = Some(vec![
            rustls_pki_types::pem::PemObject::from_pem_slice(server.ca_pem.as_bytes())
                .map(|c: rustls_pki_types::CertificateDer| c.to_vec())
                .unwrap(),
        ]);
        cfg.auth_info.token = Some(hub.server.admin_token().to_string().into());
        cfg.default_retry = false;
        let client = kube::Client::try_from(cfg).unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(server.serve(
            store.clone(),
            hub.client.clone(),
            positions,
            Registry::default(),
            stop.clone(),
        ));
        SearchApi {
            client,
            stop,
            _dir: dir,
        }
    }

    /// The body of a GET of `path` under the search prefix.
    pub async fn get(&self, path: &str) -> String {
        let path = format!("{}{path}", causeway_search::api::route::PREFIX);
        let req = http::Request::get(&path).body(Vec::new()).unwrap();
        self.client
            .request_text(req)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}

/// Polls `check` until it returns true (every 20 ms, at most [`DEADLINE`]).
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    causeway_search::store::testing::eventually(what, DEADLINE, check).await
}

/// Every stored object of a type (in `cluster`, if given), through the search API of
/// the store, by `(cluster, namespace, name)`.
pub async fn stored(store: &Store, gvr: &Gvr, cluster: Option<&str>) -> BTreeMap<String, Value> {
    let mut params = Vec::new();
    if let Some(c) = cluster {
        params.push(("clusters".to_string(), c.to_string()));
    }
    let q = Query::parse(&params, None).unwrap();
    let page = store.search(gvr, &q, &Scope::default()).await.unwrap();
    page.items
        .into_iter()
        .map(|o| {
            let m = &o["metadata"];
            let c = m["annotations"][causeway_search::CLUSTER_ANNOTATION]
                .as_str()
                .unwrap_or_default();
            let ns = m["namespace"].as_str().unwrap_or_default();
            let name = m["name"].as_str().unwrap_or_default();
            (format!("{c}/{ns}/{name}"), o.clone())
        })
        .collect()
}

/// Whether the store holds exactly the member's objects of a type, at their versions.
pub async fn in_sync(store: &Store, member: &Cluster, name: &str, gvr: &Gvr, kind: &str) -> bool {
    match store.versions(name, gvr).await {
        Ok(v) => {
            let stored: BTreeMap<_, _> = v
                .iter()
                .map(|(ns, name, rv)| {
                    (
                        (ns.to_string(), name.to_string()),
                        causeway_search::store::resource_version_of(rv).to_string(),
                    )
                })
                .collect();
            stored == member.versions(gvr, kind).await
        }
        Err(_) => false,
    }
}
