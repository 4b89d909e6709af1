//! What the tests of the `causeway` binary share: its log, its admin endpoints.
#![allow(dead_code)] // each test binary uses only some of these

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use causeway_crds::mcs::v1beta1::ServiceExport;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use serde_json::json;

/// Waits for `needle` in the log file at `log` (30 s at most); returns the log.
pub fn wait_for_log(log: &std::path::Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while !text.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} line within 30 s; log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
        text.clear();
        std::fs::File::open(log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
    text
}

/// The admin address a `causeway` process logged ("serving /metrics ... addr=...").
pub fn admin_addr(log: &str) -> String {
    log.split("addr=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the admin address in the log")
        .to_string()
}

/// One plain HTTP GET; the whole response (empty when nothing listens).
pub fn get(addr: &str, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// One plain HTTP GET; the status line.
pub fn status(addr: &str, path: &str) -> String {
    get(addr, path)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Kills the processes when the test ends, however it ends.
pub struct Replicas(pub Vec<Option<std::process::Child>>);
impl Drop for Replicas {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub async fn client(s: &kubesim::Server) -> kube::Client {
    s.client().await
}

/// Polls `f` every 100 ms until it gives `Some` (at most `within`).
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Service with one endpoint, its EndpointSlice (as the endpoint controller would
/// write it), and its ServiceExport.
pub async fn export(member: &kube::Client, ns: &str, name: &str, ip: &str) {
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))
    .unwrap();
    Api::<Service>::namespaced(member.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-abc12"), "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]}))
    .unwrap();
    Api::<EndpointSlice>::namespaced(member.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap();
    let ex: ServiceExport = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceExport>::namespaced(member.clone(), ns)
        .create(&PostParams::default(), &ex)
        .await
        .unwrap();
}

/// Applies every object of a multi-document YAML file of the repository (e.g.
/// `deploy/rbac/hub.yaml`), as `kubectl apply --server-side -f` would.
pub async fn apply_file(admin: &kube::Client, path: &str) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let path = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for doc in docs {
        let obj: DynamicObject = serde_json::from_value(doc).unwrap();
        let tm = obj.types.clone().unwrap();
        let (group, version) = tm
            .api_version
            .split_once('/')
            .unwrap_or(("", &tm.api_version));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &tm.kind));
        let api: Api<DynamicObject> = match &obj.metadata.namespace {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &ar),
            None => Api::all_with(admin.clone(), &ar),
        };
        let name = obj.metadata.name.clone().unwrap();
        let pp = kube::api::PatchParams::apply("test").force();
        api.patch(&name, &pp, &kube::api::Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("applying {} {name} from {path}: {e}", tm.kind));
    }
}

/// A client for `server` as `user` (a token added to the server for it).
pub async fn client_as(server: &kubesim::Server, user: &str, groups: &[&str]) -> kube::Client {
    let token = format!("token-{}", user.replace(':', "-"));
    server.add_token(
        &token,
        kubesim::User {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        },
    );
    let yaml = kubesim::kubeconfig::single(server.name(), &server.url(), server.ca_pem(), &token);
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// Starts a `causeway` replica (`args` then fast leader election as `id`, a 1 s status
/// interval, a free admin port); returns it with its admin address. Its log goes to
/// `<dir>/<id>.log`.
pub fn start_replica(
    dir: &std::path::Path,
    id: &str,
    args: &[&std::ffi::OsStr],
) -> (std::process::Child, String) {
    let log = dir.join(format!("{id}.log"));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(args)
        .args(["--metrics", "127.0.0.1:0"])
        .args([
            "--leader-elect-lease-duration",
            "3s",
            "--leader-elect-renew-deadline",
            "2s",
            "--leader-elect-retry-period",
            "500ms",
            "--leader-elect-identity",
            id,
            "--cluster-status-update-frequency",
            "1s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("causeway starts");
    (child, admin_addr(&wait_for_log(&log, "serving /metrics")))
}
