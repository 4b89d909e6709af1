//! The Gateway API conformance setup on a Causeway clusterset: a hub and two members
//! (east, west) with the MCS controllers and the Gateway API status controller running,
//! the conformance backends as real echo servers published as Services in the members
//! and exported (so a backendRef resolves through the hub ServiceImport), the
//! conformance GatewayClass and Gateways applied with real kubectl, and causeway-proxy
//! watching the hub with the deploy/rbac/proxy.yaml identity.
//!
//! Ported from kubernetes-sigs/gateway-api `conformance/base/manifests.yaml`: the same
//! namespaces, Service names and Gateways; Services listen on port 80 (the demo
//! backends' Service port) where upstream uses 8080.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use causeway_crds::gateway::HTTPRoute;
use causeway_crds::mcs::v1beta1::{ServiceExport, ServiceImport};
use causeway_e2e::backends::{Backend, publish, start_pods};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::api::{Api, Patch, PatchParams};

use crate::mci::Kubectl;
use crate::mcs_support::{Mcs, PRESENT, create_ns, eventually};

/// Namespaces of the conformance suite.
pub const INFRA: &str = "gateway-conformance-infra";
pub const WEB: &str = "gateway-conformance-web-backend";
pub const APP: &str = "gateway-conformance-app-backend";

/// The conformance base: class, Gateways, and the web-backend namespace's label.
const BASE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: causeway
spec:
  controllerName: causeway.io/gateway-controller
---
apiVersion: v1
kind: Namespace
metadata:
  name: gateway-conformance-web-backend
  labels:
    gateway-conformance: backend
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: same-namespace
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: causeway
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Same
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: all-namespaces
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: causeway
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: All
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: backend-namespaces
  namespace: gateway-conformance-infra
spec:
  gatewayClassName: causeway
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      namespaces:
        from: Selector
        selector:
          matchLabels:
            gateway-conformance: backend
"#;

/// (namespace, Service, member indexes exporting it).
const SERVICES: &[(&str, &str, &[usize])] = &[
    (INFRA, "infra-backend-v1", &[0, 1]),
    (INFRA, "infra-backend-v2", &[0]),
    (INFRA, "infra-backend-v3", &[1]),
    (WEB, "web-backend", &[0]),
    (APP, "app-backend-v1", &[0]),
    (APP, "app-backend-v2", &[1]),
];

pub type Http = Client<HttpConnector, Full<Bytes>>;

/// The running setup.
pub struct Gateway {
    pub mcs: Mcs,
    pub kubectl: Kubectl,
    pub proxy: causeway_proxy::Running,
    pub client: Http,
    _backends: Vec<Backend>,
    dir: tempfile::TempDir,
}

/// What a request got.
#[derive(Debug)]
pub struct Got {
    pub status: u16,
    /// The Service of the backend that answered (its pod name without `-1`).
    pub backend: Option<String>,
    /// The member cluster that answered.
    pub cluster: Option<String>,
    pub headers: http::HeaderMap,
    /// What the backend saw: path and query, Host, headers.
    pub seen_target: Option<String>,
    pub seen_host: Option<String>,
    pub seen_headers: BTreeMap<String, String>,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// An accepted route with every reference resolved, as (type, status, reason).
pub const ACCEPTED: [(&str, &str, &str); 2] = [
    ("Accepted", "True", "Accepted"),
    ("ResolvedRefs", "True", "ResolvedRefs"),
];

/// Request headers (name, value).
pub type Headers<'a> = &'a [(&'a str, &'a str)];

/// A request: method, Host, target (path and query) and headers.
#[derive(Clone, Debug)]
pub struct Req<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub target: &'a str,
    pub headers: Headers<'a>,
}

/// GET `target` with Host `host`.
pub fn get<'a>(host: &'a str, target: &'a str) -> Req<'a> {
    Req {
        method: "GET",
        host,
        target,
        headers: &[],
    }
}

impl Gateway {
    pub async fn start() -> Gateway {
        let mcs = Mcs::start(&["east", "west"], false).await;
        let kubectl = Kubectl::new(&mcs);
        for ns in [INFRA, APP] {
            create_ns(&mcs.hub, ns).await;
        }
        let mut backends = Vec::new();
        let mut created = std::collections::BTreeSet::new();
        for (ns, svc, members) in SERVICES {
            for &i in *members {
                let c = mcs.c(i);
                if created.insert((i, *ns)) {
                    create_ns(&c, ns).await;
                }
                let name = ["east", "west"][i];
                let pods = start_pods(i + 1, name, svc, 1)
                    .await
                    .expect("backend starts");
                publish(&c, ns, svc, &pods)
                    .await
                    .expect("Service published");
                let export: ServiceExport = serde_json::from_value(
                    serde_json::json!({"metadata": {"name": svc, "namespace": ns}}),
                )
                .unwrap();
                Api::<ServiceExport>::namespaced(c.clone(), ns)
                    .patch(
                        svc,
                        &PatchParams::apply("test").force(),
                        &Patch::Apply(&export),
                    )
                    .await
                    .expect("ServiceExport");
                backends.extend(pods);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let gw = Gateway {
            kubectl,
            proxy: start_proxy(&mcs).await,
            mcs,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _backends: backends,
            dir,
        };
        gw.apply("base", BASE).await;
        for (ns, svc, _) in SERVICES {
            let api: Api<ServiceImport> = Api::namespaced(gw.mcs.hub.clone(), ns);
            eventually(
                &format!("hub ServiceImport {ns}/{svc}"),
                PRESENT,
                || async { api.get_opt(svc).await.ok().flatten() },
            )
            .await;
        }
        gw
    }

    /// `kubectl apply -f` of `yaml` on the hub (as a user would paste it).
    pub async fn apply(&self, name: &str, yaml: &str) {
        let file = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        self.kubectl
            .ok("hub", &["apply", "-f", file.to_str().unwrap()])
            .await;
    }

    /// `kubectl delete -f` of what [`Gateway::apply`] applied as `name`.
    pub async fn delete(&self, name: &str) {
        let file = self.dir.path().join(format!("{name}.yaml"));
        self.kubectl
            .ok(
                "hub",
                &["delete", "--wait=false", "-f", file.to_str().unwrap()],
            )
            .await;
    }

    /// The proxy's HTTP address.
    pub fn addr(&self) -> SocketAddr {
        self.proxy.http
    }

    /// Sends `r` through the proxy.
    pub async fn send(&self, r: &Req<'_>) -> Result<Got, String> {
        let mut b = http::Request::builder()
            .method(r.method)
            .uri(format!("http://{}{}", self.addr(), r.target))
            .header("host", r.host);
        for (k, v) in r.headers {
            b = b.header(*k, *v);
        }
        let resp = tokio::time::timeout(
            Duration::from_secs(10),
            self.client
                .request(b.body(Full::new(Bytes::new())).unwrap()),
        )
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let _ = resp.into_body().collect().await;
        let text = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let seen_headers = text("x-seen-headers")
            .and_then(|j| serde_json::from_str(&j).ok())
            .unwrap_or_default();
        Ok(Got {
            status,
            backend: text("x-pod").map(|p| p.trim_end_matches("-1").to_string()),
            cluster: text("x-cluster"),
            seen_target: text("x-seen-target"),
            seen_host: text("x-seen-host"),
            seen_headers,
            headers,
        })
    }

    /// Polls `r` until `ok` accepts the answer (routes take a moment to be served);
    /// panics with the last answer after [`PRESENT`].
    pub async fn expect(&self, case: &str, r: Req<'_>, ok: impl Fn(&Got) -> bool) -> Got {
        let deadline = tokio::time::Instant::now() + PRESENT;
        loop {
            let got = self.send(&r).await;
            if let Ok(g) = &got
                && ok(g)
            {
                return got.unwrap();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{case}: {r:?} got {got:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Expects `r` to reach Service `backend` with status 200.
    pub async fn expect_backend(&self, case: &str, r: Req<'_>, backend: &str) -> Got {
        self.expect(case, r, |g| {
            g.status == 200 && g.backend.as_deref() == Some(backend)
        })
        .await
    }

    /// Expects `r` to be answered with `status` by the proxy (not a backend).
    pub async fn expect_status(&self, case: &str, r: Req<'_>, status: u16) -> Got {
        self.expect(case, r, |g| g.status == status && g.backend.is_none())
            .await
    }

    /// Expects `r` to reach Service `want`, or a 404 from the proxy when None.
    pub async fn expect_served(&self, case: &str, r: Req<'_>, want: Option<&str>) -> Got {
        match want {
            Some(b) => self.expect_backend(case, r, b).await,
            None => self.expect_status(case, r, 404).await,
        }
    }

    /// [`expect_route`] on this setup's hub.
    pub async fn expect_route(
        &self,
        ns: &str,
        name: &str,
        parent: &str,
        want: &[(&str, &str, &str)],
    ) {
        expect_route(&self.mcs.hub, ns, name, parent, want).await
    }
}

/// Waits until HTTPRoute `ns/name` on `hub` says, for its parent `parent`, the
/// conditions `want` as (type, status, reason), for its current generation.
pub async fn expect_route(
    hub: &kube::Client,
    ns: &str,
    name: &str,
    parent: &str,
    want: &[(&str, &str, &str)],
) {
    let api: Api<HTTPRoute> = Api::namespaced(hub.clone(), ns);
    let mut last = String::new();
    let seen = tokio::time::timeout(PRESENT, async {
        loop {
            if let Ok(r) = api.get(name).await {
                let have: Vec<(String, String, String)> = r
                    .status
                    .iter()
                    .flat_map(|s| s.parents.iter())
                    .filter(|p| {
                        p.parent_ref.name == parent
                            && p.controller_name == causeway_crds::gateway::CONTROLLER_NAME
                    })
                    .flat_map(|p| p.conditions.iter())
                    .filter(|c| c.observed_generation == r.metadata.generation)
                    .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
                    .collect();
                if want.iter().all(|(t, s, why)| {
                    have.iter()
                        .any(|h| (h.0.as_str(), h.1.as_str(), h.2.as_str()) == (*t, *s, *why))
                }) {
                    return;
                }
                last = format!("{have:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "HTTPRoute {ns}/{name} parent {parent}: want {want:?}, last {last}"
    );
}

/// causeway-proxy with the identity deploy/rbac/proxy.yaml binds, ready.
async fn start_proxy(mcs: &Mcs) -> causeway_proxy::Running {
    let cfg = causeway_proxy::Config {
        listen_http: "127.0.0.1:0".parse().unwrap(),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        debounce: Duration::from_millis(20),
        ..Default::default()
    };
    let proxy = crate::mci_proxy::proxy_as_deployed(mcs, cfg).await;
    eventually("proxy ready", PRESENT, || async {
        proxy.ready().then_some(())
    })
    .await;
    proxy
}
