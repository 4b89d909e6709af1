//! A cluster DNS for a cluster with the service proxy (`Config::service_proxy`): the
//! part of CoreDNS's `kubernetes` plugin that Services need, over UDP on 127.0.0.1
//! ([`crate::Server::dns_addr`]). `<service>.<namespace>.svc.cluster.local` answers A
//! (and AAAA) with the Service's ClusterIPs, or for a headless Service its ready
//! endpoints' addresses; another record type of an existing name is NODATA; an unknown
//! name under `cluster.local` is NXDOMAIN; any other name is REFUSED (it resolves
//! nothing else). TTL 5 s, as CoreDNS's default.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use serde_json::Value;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::http::context::Inner;
use crate::state::cluster::State;
use crate::state::registry::gr;

/// The cluster domain.
const DOMAIN: &str = "cluster.local.";

/// Whether `name` (absolute, lowercase) is the cluster domain or under it.
fn in_domain(name: &str) -> bool {
    name == DOMAIN || name.ends_with(&format!(".{DOMAIN}"))
}

/// The addresses `name` (absolute, any case) has in this cluster: `None` when the
/// name does not exist; empty for a name with nothing of its own but names below it
/// (`svc.cluster.local.`, `<namespace>.svc.cluster.local.`), as CoreDNS answers NODATA.
pub fn addresses(st: &State, name: &str) -> Option<Vec<IpAddr>> {
    let name = name.to_ascii_lowercase();
    if !in_domain(&name) {
        return None;
    }
    let rest = name.strip_suffix(DOMAIN)?.trim_end_matches('.');
    let labels: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('.').collect()
    };
    let (svc, ns) = match labels.as_slice() {
        [] | ["svc"] => return Some(Vec::new()),
        [ns, "svc"] => {
            return st
                .store
                .get(&gr("", "namespaces"), "", ns)
                .map(|_| Vec::new());
        }
        [svc, ns, "svc"] => (*svc, *ns),
        _ => return None,
    };
    let service = st.store.get(&gr("", "services"), ns, svc)?;
    let spec = &service.value["spec"];
    let ips = crate::http::service_proxy::cluster_ips(spec);
    if !ips.is_empty() {
        return Some(ips);
    }
    if spec["clusterIP"] != "None" {
        return Some(Vec::new());
    }
    // headless: the ready endpoints
    let mut out: Vec<IpAddr> = crate::http::service_proxy::slices_by_service(st, Some(ns))
        .remove(&(ns.to_string(), svc.to_string()))
        .unwrap_or_default()
        .iter()
        .map(|s| &s.value)
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|ep| ep.pointer("/conditions/ready") != Some(&Value::Bool(false)))
        .flat_map(|ep| ep["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str()?.parse().ok())
        .collect();
    out.sort();
    out.dedup();
    Some(out)
}

/// The response to a query packet (None: not a query worth answering).
pub fn respond(st: &State, packet: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(packet).ok()?;
    if req.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    let Some(q) = req
        .queries
        .first()
        .filter(|_| req.metadata.op_code == OpCode::Query)
    else {
        resp.metadata.response_code = ResponseCode::NotImp;
        return resp.to_vec().ok();
    };
    resp.add_query(q.clone());
    let name = q.name().to_ascii();
    if !in_domain(&name.to_ascii_lowercase()) {
        resp.metadata.response_code = ResponseCode::Refused;
        return resp.to_vec().ok();
    }
    resp.metadata.authoritative = true;
    match addresses(st, &name) {
        None => resp.metadata.response_code = ResponseCode::NXDomain,
        Some(ips) => {
            for ip in ips {
                let data = match (ip, q.query_type()) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
                    _ => continue,
                };
                resp.add_answer(Record::from_rdata(q.name().clone(), 5, data));
            }
        }
    }
    // what fits the client's buffer (512 bytes without EDNS); else TC, so it asks again
    // over TCP (not served here: a stub then fails, as with any UDP-only server)
    let limit = req
        .edns
        .as_ref()
        .map(|e| usize::from(e.max_payload()).max(512))
        .unwrap_or(512);
    let out = resp.to_vec().ok()?;
    if out.len() <= limit {
        return Some(out);
    }
    resp.answers.clear();
    resp.metadata.truncation = true;
    resp.to_vec().ok()
}

/// Answers on `socket` until `stop`.
pub async fn run(inner: Arc<Inner>, socket: UdpSocket, stop: CancellationToken) {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "cluster DNS: receive failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let answer = respond(&inner.state.lock(), &buf[..n]);
        if let Some(a) = answer {
            let _ = socket.send_to(&a, from).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use serde_json::json;

    fn state() -> State {
        let mut st = State {
            store: crate::state::store::Store::new(100),
            registry: crate::state::registry::Registry::builtin(),
            ipam: crate::state::ipam::Ipam::new(vec!["127.101.0.0/16".parse().unwrap()]),
            root_ca: None,
        };
        let svc = |name: &str, ips: Value| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo"},
                "spec": {"clusterIP": ips[0], "clusterIPs": ips, "ports": [{"port": 80}]}})
        };
        st.store.put(
            &gr("", "services"),
            svc("web", json!(["127.101.0.10", "fd00::10"])),
        );
        st.store
            .put(&gr("", "services"), svc("db", json!(["None"])));
        st.store.put(
            &gr("", "namespaces"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
        );
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "db-1", "namespace": "demo", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4", "endpoints": [
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.0.0.1"]},
                    {"addresses": ["10.0.0.3"], "conditions": {"ready": false}}]}),
        );
        st
    }

    fn ask(st: &State, name: &str, t: RecordType) -> (ResponseCode, Vec<String>) {
        let mut m = Message::query();
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        let out = Message::from_vec(&respond(st, &m.to_vec().unwrap()).unwrap()).unwrap();
        assert_eq!(out.metadata.id, m.metadata.id);
        let data = out.answers.iter().map(|r| r.data.to_string()).collect();
        (out.metadata.response_code, data)
    }

    #[test]
    fn services_resolve_under_cluster_local_and_nothing_else_does() {
        let st = state();
        let cases: &[(&str, RecordType, ResponseCode, &[&str])] = &[
            (
                "web.demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NoError,
                &["127.101.0.10"],
            ),
            (
                "WEB.Demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NoError,
                &["127.101.0.10"],
            ),
            (
                "web.demo.svc.cluster.local.",
                RecordType::AAAA,
                ResponseCode::NoError,
                &["fd00::10"],
            ),
            (
                "web.demo.svc.cluster.local.",
                RecordType::TXT,
                ResponseCode::NoError,
                &[],
            ),
            (
                "db.demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NoError,
                &["10.0.0.1", "10.0.0.2"],
            ),
            (
                "nope.demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NXDomain,
                &[],
            ),
            (
                "web.other.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NXDomain,
                &[],
            ),
            (
                "demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NoError,
                &[],
            ),
            (
                "svc.cluster.local.",
                RecordType::A,
                ResponseCode::NoError,
                &[],
            ),
            ("cluster.local.", RecordType::A, ResponseCode::NoError, &[]),
            (
                "nons.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NXDomain,
                &[],
            ),
            (
                "foocluster.local.",
                RecordType::A,
                ResponseCode::Refused,
                &[],
            ),
            (
                "web.demo.pod.cluster.local.",
                RecordType::A,
                ResponseCode::NXDomain,
                &[],
            ),
            (
                "a.web.demo.svc.cluster.local.",
                RecordType::A,
                ResponseCode::NXDomain,
                &[],
            ),
            (
                "web.demo.svc.clusterset.local.",
                RecordType::A,
                ResponseCode::Refused,
                &[],
            ),
            ("example.com.", RecordType::A, ResponseCode::Refused, &[]),
        ];
        for (name, t, rcode, want) in cases {
            let (got_rcode, got) = ask(&st, name, *t);
            assert_eq!(
                (got_rcode, got.as_slice()),
                (
                    *rcode,
                    &want.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..]
                ),
                "{name} {t:?}"
            );
        }
        assert_eq!(respond(&st, b"junk"), None);
    }

    #[test]
    fn an_answer_larger_than_the_clients_buffer_is_truncated() {
        let mut st = state();
        let eps: Vec<Value> = (1..=60)
            .map(|i| json!({"addresses": [format!("10.1.0.{i}")]}))
            .collect();
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "db-2", "namespace": "demo", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4", "endpoints": eps}),
        );
        let ask = |edns: Option<u16>| {
            let mut m = Message::query();
            m.add_query(Query::query(
                Name::from_ascii("db.demo.svc.cluster.local.").unwrap(),
                RecordType::A,
            ));
            if let Some(size) = edns {
                let mut e = hickory_proto::op::Edns::new();
                e.set_max_payload(size);
                m.set_edns(e);
            }
            let raw = respond(&st, &m.to_vec().unwrap()).unwrap();
            let out = Message::from_vec(&raw).unwrap();
            (raw.len(), out.metadata.truncation, out.answers.len())
        };
        let (len, tc, n) = ask(None);
        assert!(len <= 512 && tc && n == 0, "{len} {tc} {n}");
        let (_, tc, n) = ask(Some(4096));
        assert_eq!((tc, n), (false, 62));
    }
}
