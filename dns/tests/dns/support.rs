//! Test plumbing: a kubesim API server with the MCS CRDs, causeway-dns watching it,
//! and a small DNS client over real UDP and TCP sockets on 127.0.0.1.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_dns::{Config, Running};
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Upper bound for anything a test waits for (CI is slow and busy).
pub const DEADLINE: Duration = Duration::from_secs(20);
/// Test namespace.
pub const NS: &str = "demo";
const MANAGER: &str = "dns-test";

/// kubesim + causeway-dns.
pub struct Env {
    pub sim: kubesim::Server,
    pub client: kube::Client,
    pub dns: Option<Running>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.sim.shutdown();
    }
}

impl Env {
    /// kubesim with the CRDs and the namespace, and causeway-dns started and synced.
    pub async fn start() -> Env {
        Env::start_with(|_| {}).await
    }

    /// Like [`Env::start`], with a tweaked DNS config.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Env {
        let mut env = Env::bare().await;
        install_crds(&env.client).await;
        apply_ns(&env.client).await;
        env.start_dns(tweak).await;
        let dns = env.dns.as_ref().unwrap();
        eventually("first sync", || async { dns.ready() }).await;
        env
    }

    /// kubesim only (no CRDs, no DNS).
    pub async fn bare() -> Env {
        init_tracing();
        let sim = kubesim::Server::start(kubesim::Config::new("member"))
            .await
            .expect("kubesim starts");
        let kc = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig()).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        Env {
            sim,
            client,
            dns: None,
        }
    }

    /// Starts causeway-dns on 127.0.0.1:0.
    pub async fn start_dns(&mut self, tweak: impl FnOnce(&mut Config)) {
        let mut cfg = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            metrics: Some("127.0.0.1:0".parse().unwrap()),
            ..Config::default()
        };
        tweak(&mut cfg);
        self.dns = Some(
            causeway_dns::start(self.client.clone(), cfg)
                .await
                .expect("dns starts"),
        );
    }

    pub fn dns(&self) -> &Running {
        self.dns.as_ref().unwrap()
    }

    /// Server-side applies a ServiceImport.
    pub async fn import(&self, name: &str, type_: &str, ips: &[&str], ports: Value) {
        let api: Api<ServiceImport> = Api::namespaced(self.client.clone(), NS);
        let body = json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"type": type_, "ips": ips, "ports": ports}
        });
        api.patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .expect("apply ServiceImport");
    }

    pub async fn delete_import(&self, name: &str) {
        let api: Api<ServiceImport> = Api::namespaced(self.client.clone(), NS);
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete ServiceImport");
    }

    /// Server-side applies an MCS EndpointSlice `<svc>-<cluster>[-<family>]`.
    /// `endpoints`: (address, hostname, ready (None: unset)).
    pub async fn slice(
        &self,
        svc: &str,
        cluster: &str,
        family: &str,
        endpoints: &[(&str, Option<&str>, Option<bool>)],
        ports: Value,
    ) {
        let name = format!("{svc}-{cluster}-{}", family.to_ascii_lowercase());
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(ip, host, ready)| {
                let mut e = json!({"addresses": [ip]});
                if let Some(h) = host {
                    e["hostname"] = json!(h);
                }
                if let Some(r) = ready {
                    e["conditions"] = json!({"ready": r});
                }
                e
            })
            .collect();
        let body = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NS, "labels": {
                "multicluster.kubernetes.io/service-name": svc,
                "multicluster.kubernetes.io/source-cluster": cluster,
            }},
            "addressType": family, "endpoints": eps, "ports": ports
        });
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), NS);
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .expect("apply EndpointSlice");
    }

    pub async fn delete_slice(&self, name: &str) {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), NS);
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete EndpointSlice");
    }

    pub async fn udp(&self, name: &str, qtype: RecordType) -> Reply {
        ask_udp(self.dns().udp, name, qtype, Some(4096)).await
    }

    pub async fn tcp(&self, name: &str, qtype: RecordType) -> Reply {
        ask_tcp(self.dns().tcp, name, qtype).await
    }

    /// Polls until the UDP answer for `name`/`qtype` satisfies `ok`.
    pub async fn until(
        &self,
        what: &str,
        name: &str,
        qtype: RecordType,
        ok: impl Fn(&Reply) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let r = self.udp(name, qtype).await;
            if ok(&r) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("{what}: {name} {qtype} still answers {r:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Applies every Causeway CRD and waits until each is Established.
pub async fn install_crds(client: &kube::Client) {
    causeway_runtime::crds::install(
        client,
        &causeway_crds::crdgen::all_crds(),
        MANAGER,
        std::time::Duration::from_secs(10),
    )
    .await
    .expect("CRDs installed");
}

async fn apply_ns(client: &kube::Client) {
    let api: Api<Namespace> = Api::all(client.clone());
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    api.patch(NS, &PatchParams::apply(MANAGER), &Patch::Apply(&body))
        .await
        .expect("namespace");
}

/// Polls `f` until true or the deadline.
pub async fn eventually<F, Fut>(what: &str, f: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !f().await {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A decoded response.
#[derive(Debug)]
pub struct Reply {
    pub rcode: u16,
    /// Answers as text, sorted.
    pub answers: Vec<String>,
    pub soa: bool,
    pub tc: bool,
    pub aa: bool,
    pub msg: Message,
}

pub fn render(data: &RData) -> String {
    match data {
        RData::A(a) => format!("A {}", a.0),
        RData::AAAA(a) => format!("AAAA {}", a.0),
        RData::SRV(s) => format!("SRV {} {}", s.port, s.target),
        RData::TXT(t) => format!("TXT {t}"),
        RData::NS(n) => format!("NS {}", n.0),
        RData::SOA(s) => format!("SOA {}", s.mname),
        other => format!("{other:?}"),
    }
}

pub fn decode(bytes: &[u8]) -> Reply {
    let msg = Message::from_vec(bytes).expect("a response hickory can decode");
    let mut answers: Vec<String> = msg.answers.iter().map(|r| render(&r.data)).collect();
    answers.sort();
    Reply {
        rcode: u16::from(msg.metadata.response_code),
        soa: msg
            .authorities
            .iter()
            .any(|r| r.record_type() == RecordType::SOA),
        tc: msg.metadata.truncation,
        aa: msg.metadata.authoritative,
        answers,
        msg,
    }
}

pub fn query(name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0x1234;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(p) = edns {
        let mut e = Edns::new();
        e.set_max_payload(p);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

/// Sends a raw packet over UDP and returns the raw answer (retries lost datagrams).
pub async fn udp_raw(addr: SocketAddr, pkt: &[u8]) -> Vec<u8> {
    let local = if addr.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let sock = UdpSocket::bind(local).await.unwrap();
    let mut buf = vec![0u8; 65535];
    for _ in 0..10 {
        sock.send_to(pkt, addr).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf)).await
        {
            return buf[..n].to_vec();
        }
    }
    panic!("no UDP answer from {addr}");
}

/// Sends a raw packet over TCP (length-prefixed) and returns the raw answer.
pub async fn tcp_raw(addr: SocketAddr, pkt: &[u8]) -> Vec<u8> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut framed = (pkt.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(pkt);
        s.write_all(&framed).await.unwrap();
        let len = s.read_u16().await.unwrap() as usize;
        let mut resp = vec![0u8; len];
        s.read_exact(&mut resp).await.unwrap();
        resp
    };
    tokio::time::timeout(DEADLINE, fut)
        .await
        .expect("TCP answer")
}

pub async fn ask_udp(addr: SocketAddr, name: &str, qtype: RecordType, edns: Option<u16>) -> Reply {
    decode(&udp_raw(addr, &query(name, qtype, edns)).await)
}

pub async fn ask_tcp(addr: SocketAddr, name: &str, qtype: RecordType) -> Reply {
    decode(&tcp_raw(addr, &query(name, qtype, None)).await)
}

/// GET on the metrics listener: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        text
    };
    let text = tokio::time::timeout(DEADLINE, fut)
        .await
        .expect("HTTP answer");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
