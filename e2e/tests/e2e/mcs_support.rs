//! Fixtures for the Multi-Cluster Services scenarios: a hub and members on kubesim,
//! members joined, the controller running in-process, the conformance `hello` Service.

use std::future::Future;
use std::time::Duration;

use causeway_crds::mcs::v1beta1::{ServiceExport, ServiceImport};
use causeway_e2e::{Clusterset, Controller, Options};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Conformance timeouts.
pub const PRESENT: Duration = Duration::from_secs(20);
/// "Consistently" window.
pub const CONSISTENT: Duration = Duration::from_secs(5);

/// A running clusterset with MCS.
pub struct Mcs {
    /// Servers.
    pub cs: Clusterset,
    /// The controller (None while stopped).
    pub ctl: Option<Controller>,
    /// Test namespace (exists in every member).
    pub ns: String,
    /// Member clients, by index.
    pub members: Vec<kube::Client>,
    /// Hub client.
    pub hub: kube::Client,
}

impl Mcs {
    /// Hub + `names` members, joined, controller running, namespace in every member.
    pub async fn start(names: &[&str], dual_stack: bool) -> Mcs {
        let opts = Options {
            members: names.iter().map(|s| s.to_string()).collect(),
            dual_stack,
            ..Options::default()
        };
        Mcs::start_with(opts, names.len()).await
    }

    /// Like [`Mcs::start`] with full options; only the first `join` members are joined.
    pub async fn start_with(opts: Options, join: usize) -> Mcs {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_test_writer()
            .try_init();
        let cs = Clusterset::start(&opts, |_| {}).await.expect("clusterset");
        cs.install_crds().await.expect("crds");
        let hub = causeway_e2e::client(&cs.hub).await.unwrap();
        for m in cs.members.iter().take(join) {
            causeway_controllers::clusters::join::join(
                hub.clone(),
                m.name(),
                &causeway_e2e::access(m),
                None,
            )
            .await
            .expect("join");
        }
        let mut members = Vec::new();
        for m in &cs.members {
            members.push(causeway_e2e::client(m).await.unwrap());
        }
        let ns = format!("mcs-conformance-{}", &uuid_like()[..6]);
        for c in &members {
            create_ns(c, &ns).await;
        }
        let ctl = cs.start_controller().await.expect("controller");
        Mcs {
            cs,
            ctl: Some(ctl),
            ns,
            members,
            hub,
        }
    }

    /// Member client.
    pub fn c(&self, i: usize) -> kube::Client {
        self.members[i].clone()
    }

    /// Creates a Service (JSON spec) and its EndpointSlice (as the endpoint controller would).
    pub async fn service(&self, i: usize, name: &str, spec: Value, endpoints: &[&str]) {
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"dummy-svc": "dummy"}, "annotations": {"dummy-svc": "dummy"}}, "spec": spec})).unwrap();
        let api: Api<Service> = Api::namespaced(self.c(i), &self.ns);
        let created = api
            .create(&PostParams::default(), &svc)
            .await
            .expect("service created");
        if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
            return;
        }
        let ports: Vec<Value> = created
            .spec
            .unwrap()
            .ports
            .unwrap_or_default()
            .iter()
            .map(|p| json!({"name": p.name, "port": match &p.target_port { Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => *n, _ => p.port }, "protocol": p.protocol}))
            .collect();
        let v6 = endpoints.first().is_some_and(|a| a.contains(':'));
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-abc12"), "labels": {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": if v6 { "IPv6" } else { "IPv4" },
            "ports": ports,
            "endpoints": endpoints.iter().enumerate().map(|(n, a)| json!({"addresses": [a], "hostname": format!("{name}-{n}"), "conditions": {"ready": true, "serving": true, "terminating": false}})).collect::<Vec<_>>(),
        }))
        .unwrap();
        Api::<EndpointSlice>::namespaced(self.c(i), &self.ns)
            .create(&PostParams::default(), &slice)
            .await
            .expect("slice created");
    }

    /// The conformance `hello` Service (tcp/42, udp/42, ClientIP affinity 10 s, PreferDualStack).
    pub async fn hello(&self, i: usize, endpoints: &[&str]) {
        self.service(
            i,
            "hello",
            json!({"selector": {"app": "hello"}, "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "udp", "port": 42, "protocol": "UDP"}],
                   "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}}, "ipFamilyPolicy": "PreferDualStack",
                   "internalTrafficPolicy": "Cluster", "trafficDistribution": "PreferClose"}),
            endpoints,
        )
        .await;
    }

    /// Exports `name` from member `i` with the conformance exported labels/annotations.
    pub async fn export(&self, i: usize, name: &str, label: &str) {
        let ex: ServiceExport = serde_json::from_value(json!({"metadata": {"name": name, "labels": {"dummy-svcexport": "dummy"}, "annotations": {"dummy-svcexport": "dummy"}},
            "spec": {"exportedLabels": {label: "true"}, "exportedAnnotations": {label.replace("label", "annotation"): "true"}}}))
        .unwrap();
        Api::<ServiceExport>::namespaced(self.c(i), &self.ns)
            .create(&PostParams::default(), &ex)
            .await
            .expect("export created");
    }

    /// Deletes the ServiceExport `name` in member `i`.
    pub async fn unexport(&self, i: usize, name: &str) {
        Api::<ServiceExport>::namespaced(self.c(i), &self.ns)
            .delete(name, &DeleteParams::default())
            .await
            .expect("export deleted");
    }

    /// The ServiceImport `name` in member `i`.
    pub async fn si(&self, i: usize, name: &str) -> Option<ServiceImport> {
        Api::<ServiceImport>::namespaced(self.c(i), &self.ns)
            .get_opt(name)
            .await
            .unwrap()
    }

    /// A ServiceExport's condition (status, reason, message).
    pub async fn export_condition(
        &self,
        i: usize,
        name: &str,
        type_: &str,
    ) -> Option<(String, String, String)> {
        let ex = Api::<ServiceExport>::namespaced(self.c(i), &self.ns)
            .get_opt(name)
            .await
            .unwrap()?;
        ex.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status, c.reason, c.message))
    }

    /// MCS EndpointSlices of `svc` in member `i`.
    pub async fn mcs_slices(&self, i: usize, svc: &str) -> Vec<EndpointSlice> {
        Api::<EndpointSlice>::namespaced(self.c(i), &self.ns)
            .list(
                &ListParams::default()
                    .labels(&format!("multicluster.kubernetes.io/service-name={svc}")),
            )
            .await
            .unwrap()
            .items
    }

    /// Stops the controller.
    pub async fn stop_controller(&mut self) {
        if let Some(c) = self.ctl.take() {
            c.stop().await;
        }
    }

    /// Starts the controller again.
    pub async fn restart_controller(&mut self) {
        self.stop_controller().await;
        self.ctl = Some(self.cs.start_controller().await.unwrap());
    }
}

impl Drop for Mcs {
    fn drop(&mut self) {
        if let Some(c) = &self.ctl {
            c.stop.cancel();
        }
        self.cs.shutdown();
    }
}

/// Creates a namespace.
pub async fn create_ns(c: &kube::Client, ns: &str) {
    let api: Api<Namespace> = Api::all(c.clone());
    api.patch(
        ns,
        &PatchParams::apply("test").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
    )
    .await
    .unwrap();
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
    .chars()
    .rev()
    .collect()
}

/// Polls `f` every 100 ms until it returns Some, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts `f` stays true for `window`, polling every 200 ms.
pub async fn consistently<F, Fut>(what: &str, window: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        assert!(f().await, "no longer true: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits 1.1 s so the next export's creationTimestamp is strictly later (conformance driver).
pub async fn tick() {
    tokio::time::sleep(Duration::from_millis(1100)).await;
}
