//! What kube-proxy does, for a cluster whose service CIDR is on loopback
//! (`Config::service_proxy`, e.g. 127.101.0.0/16): every Service with a ClusterIP on
//! 127.0.0.0/8 gets, for each TCP and UDP port, a real socket at `clusterIP:port` that
//! forwards each connection (TCP) or client flow (UDP) to a ready endpoint of the
//! EndpointSlices labelled `kubernetes.io/service-name: <service>` in its namespace,
//! on the slice port of the same name and protocol (kube-proxy's port mapping).
//! Endpoints are taken in turn; `sessionAffinity: ClientIP` keeps a client IP on its
//! endpoint for `timeoutSeconds`. A port that cannot be bound (another process has it,
//! or a port below 1024 without the privilege) is logged and retried at the next change.
//! Headless Services and other CIDRs get nothing, as no traffic can reach them here.
//!
//! [`routes`] is the pure part: the table from the store; [`run`] keeps the sockets.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::http::context::Inner;
use crate::state::cluster::State;
use crate::state::registry::gr;
use crate::state::stored::StoredObj;

/// A socket kube-proxy serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frontend {
    /// `clusterIP:port`.
    pub addr: SocketAddr,
    /// TCP (true) or UDP.
    pub tcp: bool,
}

/// Where a frontend's traffic goes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// Ready endpoints (`address:targetPort`), sorted.
    pub endpoints: Vec<SocketAddr>,
    /// `sessionAffinity: ClientIP` and its timeout.
    pub affinity: Option<Duration>,
}

/// The EndpointSlices of `namespace` (every namespace: `None`) by the Service they
/// are labelled for (`kubernetes.io/service-name`), keyed (namespace, service).
pub(crate) fn slices_by_service(
    st: &State,
    namespace: Option<&str>,
) -> HashMap<(String, String), Vec<Arc<StoredObj>>> {
    let mut out: HashMap<(String, String), Vec<Arc<StoredObj>>> = HashMap::new();
    for s in st
        .store
        .list(&gr("discovery.k8s.io", "endpointslices"), namespace)
    {
        let svc = s
            .value
            .pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str);
        if let Some(svc) = svc {
            out.entry((s.namespace().to_string(), svc.to_string()))
                .or_default()
                .push(s.clone());
        }
    }
    out
}

/// A Service's ClusterIPs (`clusterIPs`, else `clusterIP`; "None" is none).
pub(crate) fn cluster_ips(spec: &Value) -> Vec<IpAddr> {
    let listed = spec["clusterIPs"].as_array().filter(|a| !a.is_empty());
    let one = std::slice::from_ref(&spec["clusterIP"]);
    listed
        .map(Vec::as_slice)
        .unwrap_or(one)
        .iter()
        .filter_map(|ip| ip.as_str()?.parse().ok())
        .collect()
}

/// The table kube-proxy would program from the store.
pub fn routes(st: &State) -> BTreeMap<Frontend, Route> {
    let mut out = BTreeMap::new();
    // indexed once: each Service looks its slices up, not through every slice
    let slices = slices_by_service(st, None);
    for svc in st.store.list(&gr("", "services"), None) {
        let v = &svc.value;
        let ns = v
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let spec = &v["spec"];
        if spec["type"] == "ExternalName" {
            continue;
        }
        let mut ips = cluster_ips(spec);
        ips.retain(|ip| ip.is_ipv4() && ip.is_loopback());
        if ips.is_empty() {
            continue;
        }
        let affinity = (spec["sessionAffinity"] == "ClientIP").then(|| {
            Duration::from_secs(
                spec.pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(10_800),
            )
        });
        let own: Vec<&Value> = slices
            .get(&(ns.to_string(), name.to_string()))
            .into_iter()
            .flatten()
            .map(|s| &s.value)
            .collect();
        for port in spec["ports"].as_array().into_iter().flatten() {
            let Some(number) = port["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            let proto = port["protocol"].as_str().unwrap_or("TCP");
            let tcp = match proto {
                "TCP" => true,
                "UDP" => false,
                _ => continue,
            };
            let pname = port["name"].as_str().unwrap_or("");
            let (mut endpoints, mut serving): (Vec<SocketAddr>, Vec<SocketAddr>) =
                Default::default();
            for s in &own {
                let Some(target) = s["ports"].as_array().into_iter().flatten().find_map(|p| {
                    (p["name"].as_str().unwrap_or("") == pname
                        && p["protocol"].as_str().unwrap_or("TCP") == proto)
                        .then(|| p["port"].as_u64().and_then(|n| u16::try_from(n).ok()))
                        .flatten()
                }) else {
                    continue;
                };
                for ep in s["endpoints"].as_array().into_iter().flatten() {
                    let c = |k: &str| {
                        ep.pointer(&format!("/conditions/{k}"))
                            .and_then(Value::as_bool)
                    };
                    // ready unless said otherwise; a terminating endpoint that still
                    // serves is used only when none is ready (KEP-1669)
                    let to = if c("terminating") == Some(true) {
                        if c("serving") == Some(false) {
                            continue;
                        }
                        &mut serving
                    } else if c("ready") == Some(false) {
                        continue;
                    } else {
                        &mut endpoints
                    };
                    to.extend(
                        ep["addresses"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|a| a.as_str()?.parse::<IpAddr>().ok())
                            // the frontends are IPv4: an IPv6 slice serves another family
                            .filter(IpAddr::is_ipv4)
                            .map(|ip| SocketAddr::new(ip, target)),
                    );
                }
            }
            if endpoints.is_empty() {
                endpoints = serving;
            }
            endpoints.sort();
            endpoints.dedup();
            for ip in &ips {
                out.insert(
                    Frontend {
                        addr: SocketAddr::new(*ip, number),
                        tcp,
                    },
                    Route {
                        endpoints: endpoints.clone(),
                        affinity,
                    },
                );
            }
        }
    }
    out
}

/// A frontend's route and its balancing state, shared with its socket's task.
#[derive(Default)]
struct Shared {
    route: RwLock<Route>,
    next: AtomicUsize,
    /// client IP → (endpoint, last used)
    sticky: Mutex<HashMap<IpAddr, (SocketAddr, Instant)>>,
}

impl Shared {
    /// The endpoint for a new connection or flow from `client`.
    fn pick(&self, client: IpAddr) -> Option<SocketAddr> {
        let route = self.route.read();
        if route.endpoints.is_empty() {
            return None;
        }
        let now = Instant::now();
        let mut sticky = self.sticky.lock();
        if let Some(ttl) = route.affinity
            && let Some((ep, at)) = sticky.get_mut(&client)
            && now.duration_since(*at) < ttl
            && route.endpoints.contains(ep)
        {
            *at = now;
            return Some(*ep);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % route.endpoints.len();
        let ep = route.endpoints[i];
        if let Some(ttl) = route.affinity {
            sticky.retain(|_, (_, at)| now.duration_since(*at) < ttl);
            sticky.insert(client, (ep, now));
        }
        Some(ep)
    }
}

/// Keeps a socket per frontend of [`routes`] until `stop`, following the store.
pub async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    let mut serving: HashMap<Frontend, (Arc<Shared>, CancellationToken)> = HashMap::new();
    // frontends that could not be bound, said once each
    let mut unbound: std::collections::HashSet<Frontend> = Default::default();
    let mut seen = u64::MAX;
    loop {
        let (rv, table) = {
            let st = inner.state.lock();
            let rv = st.store.rv();
            (rv, (rv != seen).then(|| routes(&st)))
        };
        if let Some(table) = table {
            seen = rv;
            serving.retain(|f, (_, cancel)| {
                let keep = table.contains_key(f);
                if !keep {
                    cancel.cancel();
                }
                keep
            });
            for (f, route) in table {
                if let Some((shared, _)) = serving.get(&f) {
                    *shared.route.write() = route;
                    continue;
                }
                let shared = Arc::new(Shared {
                    route: RwLock::new(route),
                    ..Default::default()
                });
                let cancel = stop.child_token();
                let bound = if f.tcp {
                    TcpListener::bind(f.addr)
                        .await
                        .map(|l| tokio::spawn(serve_tcp(l, shared.clone(), cancel.clone())))
                } else {
                    UdpSocket::bind(f.addr)
                        .await
                        .map(|s| tokio::spawn(serve_udp(s, shared.clone(), cancel.clone())))
                };
                match bound {
                    Ok(_) => {
                        unbound.remove(&f);
                        serving.insert(f, (shared, cancel));
                    }
                    // tried again at the next change of the store
                    Err(e) if unbound.insert(f) => {
                        tracing::warn!(frontend = %f.addr, tcp = f.tcp, error = %e, "service proxy: cannot bind this Service's port (no traffic for it)");
                    }
                    Err(_) => {}
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => break,
        }
    }
    for (_, (_, cancel)) in serving {
        cancel.cancel();
    }
}

async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let (mut client, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // e.g. out of file descriptors: do not spin
                    tracing::debug!(error = %e, "service proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let Some(ep) = shared.pick(peer.ip()) else {
            // no endpoint: kube-proxy rejects the connection
            drop(client);
            continue;
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let upstream =
                tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(ep)).await;
            let Ok(Ok(mut upstream)) = upstream else {
                return;
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

/// How long a UDP flow without traffic keeps its upstream socket.
const UDP_IDLE: Duration = Duration::from_secs(30);

async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>, stop: CancellationToken) {
    let socket = Arc::new(socket);
    let mut flows: HashMap<SocketAddr, (Arc<UdpSocket>, CancellationToken)> = HashMap::new();
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, client) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!(error = %e, "service proxy: UDP receive failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        flows.retain(|_, (_, done)| !done.is_cancelled());
        let up = match flows.get(&client) {
            Some((up, _)) => up.clone(),
            None => {
                let Some(flow) = open_flow(&shared, &socket, client, &stop).await else {
                    continue;
                };
                let up = flow.0.clone();
                flows.insert(client, flow);
                up
            }
        };
        let _ = up.send(&buf[..n]).await;
    }
}

/// A new UDP flow from `client`: a socket connected to its endpoint, whose replies go
/// back to the client from the Service's socket until the flow is idle.
async fn open_flow(
    shared: &Shared,
    front: &Arc<UdpSocket>,
    client: SocketAddr,
    stop: &CancellationToken,
) -> Option<(Arc<UdpSocket>, CancellationToken)> {
    let ep = shared.pick(client.ip())?;
    let local = match ep {
        SocketAddr::V4(_) => SocketAddr::from(([127, 0, 0, 1], 0)),
        SocketAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0)),
    };
    let up = UdpSocket::bind(local).await.ok()?;
    up.connect(ep).await.ok()?;
    let up = Arc::new(up);
    let done = stop.child_token();
    tokio::spawn(relay_back(up.clone(), front.clone(), client, done.clone()));
    Some((up, done))
}

/// Replies of one UDP flow's endpoint, back to its client, until idle.
async fn relay_back(
    up: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    done: CancellationToken,
) {
    let mut buf = vec![0u8; 65_535];
    loop {
        tokio::select! {
            r = tokio::time::timeout(UDP_IDLE, up.recv(&mut buf)) => match r {
                Ok(Ok(n)) => {
                    let _ = front.send_to(&buf[..n], client).await;
                }
                _ => break,
            },
            _ = done.cancelled() => break,
        }
    }
    done.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> State {
        State {
            store: crate::state::store::Store::new(100),
            registry: crate::state::registry::Registry::builtin(),
            ipam: crate::state::ipam::Ipam::new(vec!["127.101.0.0/16".parse().unwrap()]),
            root_ca: None,
        }
    }

    fn eps_of(t: &BTreeMap<Frontend, Route>, f: &Frontend) -> Vec<String> {
        t[f].endpoints.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_table_maps_loopback_cluster_ips_to_ready_endpoints_by_port_name() {
        let mut st = state();
        let svc = |name: &str, ip: &str, extra: Value| {
            let mut v = json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": "demo"},
                "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [
                    {"name": "tcp", "port": 42, "protocol": "TCP"},
                    {"name": "udp", "port": 42, "protocol": "UDP"},
                    {"name": "sctp", "port": 43, "protocol": "SCTP"}]}});
            for (k, x) in extra.as_object().unwrap() {
                v["spec"][k] = x.clone();
            }
            v
        };
        st.store.put(&gr("", "services"), svc("hello", "127.101.0.10", json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}}})));
        st.store
            .put(&gr("", "services"), svc("far", "10.96.0.10", json!({})));
        st.store
            .put(&gr("", "services"), svc("headless", "None", json!({})));
        let slice = |name: &str, svc: &str, ports: Value, eps: Value| {
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "demo", "labels": {"kubernetes.io/service-name": svc}},
                "addressType": "IPv4", "ports": ports, "endpoints": eps})
        };
        let ports = json!([{"name": "tcp", "port": 5042, "protocol": "TCP"}, {"name": "udp", "port": 6042, "protocol": "UDP"}]);
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            slice(
                "hello-a",
                "hello",
                ports.clone(),
                json!([
            {"addresses": ["127.0.9.1"], "conditions": {"ready": true}},
            {"addresses": ["127.0.9.2"], "conditions": {"ready": false}},
            {"addresses": ["127.0.9.3"]}]),
            ),
        );
        // another cluster's slice for the same Service (an MCS slice), and one of another Service
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            slice(
                "hello-b",
                "hello",
                json!([{"name": "tcp", "port": 7042, "protocol": "TCP"}]),
                json!([{"addresses": ["127.0.9.4"]}]),
            ),
        );
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            slice("other", "far", ports, json!([{"addresses": ["127.0.9.9"]}])),
        );
        let t = routes(&st);
        let tcp = Frontend {
            addr: "127.101.0.10:42".parse().unwrap(),
            tcp: true,
        };
        let udp = Frontend {
            addr: "127.101.0.10:42".parse().unwrap(),
            tcp: false,
        };
        assert_eq!(
            t.keys().copied().collect::<Vec<_>>(),
            vec![udp, tcp],
            "loopback IPs, TCP and UDP only"
        );
        let eps = |f: &Frontend| {
            t[f].endpoints
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            eps(&tcp),
            ["127.0.9.1:5042", "127.0.9.3:5042", "127.0.9.4:7042"]
        );
        assert_eq!(eps(&udp), ["127.0.9.1:6042", "127.0.9.3:6042"]);
        assert_eq!(t[&tcp].affinity, Some(Duration::from_secs(10)));

        // a terminating endpoint that still serves takes the traffic only while no
        // endpoint is ready; an IPv6 slice is another family's
        st.store
            .put(&gr("", "services"), svc("drain", "127.101.0.11", json!({})));
        let tcp_only = json!([{"name": "tcp", "port": 5042, "protocol": "TCP"}]);
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            slice(
                "drain-a",
                "drain",
                tcp_only.clone(),
                json!([
                    {"addresses": ["127.0.9.5"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                    {"addresses": ["127.0.9.6"], "conditions": {"ready": false, "serving": false, "terminating": true}},
                    {"addresses": ["::1"]}]),
            ),
        );
        let drain = Frontend {
            addr: "127.101.0.11:42".parse().unwrap(),
            tcp: true,
        };
        let t = routes(&st);
        assert_eq!(eps_of(&t, &drain), ["127.0.9.5:5042"]);
        st.store.put(
            &gr("discovery.k8s.io", "endpointslices"),
            slice(
                "drain-b",
                "drain",
                tcp_only,
                json!([{"addresses": ["127.0.9.7"]}]),
            ),
        );
        assert_eq!(eps_of(&routes(&st), &drain), ["127.0.9.7:5042"]);
    }

    #[test]
    fn endpoints_are_taken_in_turn_and_client_ip_affinity_sticks() {
        let a: SocketAddr = "127.0.9.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.9.2:1".parse().unwrap();
        let s = Shared::default();
        *s.route.write() = Route {
            endpoints: vec![a, b],
            affinity: None,
        };
        let c: IpAddr = "127.0.0.1".parse().unwrap();
        let picks: Vec<_> = (0..4).map(|_| s.pick(c).unwrap()).collect();
        assert_eq!(picks, [a, b, a, b]);
        *s.route.write() = Route {
            endpoints: vec![a, b],
            affinity: Some(Duration::from_secs(10)),
        };
        let first = s.pick(c).unwrap();
        assert!((0..5).all(|_| s.pick(c) == Some(first)));
        // the endpoint left: a new one
        let other = if first == a { b } else { a };
        *s.route.write() = Route {
            endpoints: vec![other],
            affinity: Some(Duration::from_secs(10)),
        };
        assert_eq!(s.pick(c), Some(other));
        *s.route.write() = Route::default();
        assert_eq!(s.pick(c), None);
    }
}
