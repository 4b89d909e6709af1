//! Multi-Cluster Services traffic (DP-1, IMP-4; conformance CONF-19, CONF-24 to CONF-27,
//! and DNS-13), with kubesim carrying Service traffic as kube-proxy does and answering
//! `cluster.local` as the cluster DNS does (`Options::service_proxy`: loopback service
//! CIDRs, so a ClusterIP or clusterset IP is a real address here). The pods are real TCP and UDP servers on
//! 127.42.x.y that answer with their name. The Service ports are 5042 rather than the
//! conformance suite's 42, so that no test needs the privilege to bind a port below 1024.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::mcs_support::{Mcs, PRESENT, eventually};

/// The pods' port (the Services' targetPort).
const POD_PORT: u16 = 6042;

/// A pod: answers every TCP connection and UDP datagram on `ip`:[`POD_PORT`] with
/// `name`.
async fn pod(ip: &str, name: &str) {
    let addr: SocketAddr = (ip.parse::<IpAddr>().unwrap(), POD_PORT).into();
    let tcp = tokio::net::TcpListener::bind(addr).await.unwrap();
    let udp = tokio::net::UdpSocket::bind(addr).await.unwrap();
    let name = name.to_string();
    let answer = name.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = tcp.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = c.write_all(answer.as_bytes()).await;
            });
        }
    });
    tokio::spawn(async move {
        let mut buf = [0u8; 64];
        while let Ok((_, from)) = udp.recv_from(&mut buf).await {
            let _ = udp.send_to(name.as_bytes(), from).await;
        }
    });
}

/// Who answers a TCP connection to `addr` (None: refused, reset or silent for 2 s).
async fn tcp_ask(addr: SocketAddr) -> Option<String> {
    let ask = async {
        let mut c = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut s = String::new();
        c.read_to_string(&mut s).await.ok()?;
        (!s.is_empty()).then_some(s)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()?
}

/// Who answers a UDP datagram to `addr` (None: no answer within 2 s).
async fn udp_ask(addr: SocketAddr) -> Option<String> {
    let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    s.send_to(b"who", addr).await.ok()?;
    let mut buf = [0u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), s.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `hello` in member `i` with TCP and UDP port 5042 (targetPort [`POD_PORT`]) served by `pods`.
async fn hello(m: &Mcs, i: usize, ports: serde_json::Value, pods: &[&str]) {
    m.service(
        i,
        "hello",
        json!({"selector": {"app": "hello"}, "ports": ports}),
        pods,
    )
    .await;
}

fn tcp_and_udp(name: &str, port: u16) -> serde_json::Value {
    json!([{"name": name, "port": port, "protocol": "TCP", "targetPort": POD_PORT},
           {"name": format!("{name}-udp"), "port": port, "protocol": "UDP", "targetPort": POD_PORT}])
}

/// The clusterset IP of `hello` in member `i`, once imported.
async fn clusterset_ip(m: &Mcs, i: usize) -> IpAddr {
    let si = eventually(
        &format!("hello imported in member {i}"),
        PRESENT,
        || async { m.si(i, "hello").await.filter(|s| !s.spec.ips.is_empty()) },
    )
    .await;
    si.spec.ips[0].parse().unwrap()
}

/// DP-1, IMP-4, CONF-24, CONF-25, DNS-13: from every member, TCP and UDP to the clusterset
/// IP reach the exporting cluster's pods, every one of them in turn; a member with the
/// same Service unexported is not reached through it, while its own ClusterIP still
/// reaches only its own pod; unexporting takes the clusterset IP away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterset_ips_carry_tcp_and_udp_to_the_exporting_pods() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        service_proxy: true,
        ..Default::default()
    };
    let m = Mcs::start_with(opts, 2).await;
    for (ip, name) in [
        ("127.42.0.1", "c0/hello-0"),
        ("127.42.0.2", "c0/hello-1"),
        ("127.42.1.1", "c1/hello-0"),
    ] {
        pod(ip, name).await;
    }
    hello(
        &m,
        0,
        tcp_and_udp("tcp", 5042),
        &["127.42.0.1", "127.42.0.2"],
    )
    .await;
    // c1 has the same Service, not exported (CONF-25)
    hello(&m, 1, tcp_and_udp("tcp", 5042), &["127.42.1.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    for i in [0, 1] {
        let ip = clusterset_ip(&m, i).await;
        let at = SocketAddr::new(ip, 5042);
        // the derived Service's port is served as soon as its slices are imported
        let first = eventually(&format!("TCP to {at} from member {i}"), PRESENT, || {
            tcp_ask(at)
        })
        .await;
        assert!(first.starts_with("c0/"), "{first}");
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..10 {
            let who = tcp_ask(at).await.expect("answered");
            assert!(
                who.starts_with("c0/"),
                "only the exporting cluster's pods: {who}"
            );
            seen.insert(who);
        }
        assert_eq!(seen.len(), 2, "every exporting pod is reached: {seen:?}");
        let who = eventually(&format!("UDP to {at} from member {i}"), PRESENT, || {
            udp_ask(at)
        })
        .await;
        assert!(who.starts_with("c0/"), "{who}");
    }
    // DP-1 by name: causeway-dns in c1 resolves hello.<ns>.svc.clusterset.local, and a
    // connection to that name's address reaches the exporting pods
    let dns = causeway_dns::start(
        m.c(1),
        causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..causeway_dns::Config::default()
        },
    )
    .await
    .expect("causeway-dns starts");
    let name = format!("hello.{}.svc.clusterset.local", m.ns);
    let resolved = eventually(&format!("{name} resolves"), PRESENT, || async {
        let a = causeway_dns::client::lookup(
            dns.udp,
            causeway_dns::client::Via::Udp,
            &name,
            causeway_dns::client::RecordType::A,
            Duration::from_secs(2),
        )
        .await
        .ok()?;
        a.addresses.first().copied()
    })
    .await;
    assert_eq!(resolved, clusterset_ip(&m, 1).await);
    let who = tcp_ask(SocketAddr::new(resolved, 5042))
        .await
        .expect("answered by name");
    assert!(who.starts_with("c0/"), "{who}");
    // CONF-19, DNS-13: in each member `hello.<ns>.svc.cluster.local` is still its own
    // Service's ClusterIP, never the clusterset IP
    for i in [0, 1] {
        let svc: k8s_openapi::api::core::v1::Service = kube::Api::namespaced(m.c(i), &m.ns)
            .get("hello")
            .await
            .unwrap();
        let own: IpAddr = svc.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
        let dns = m.cs.members[i].dns_addr().expect("the cluster DNS");
        let name = format!("hello.{}.svc.cluster.local", m.ns);
        let a = causeway_dns::client::lookup(
            dns,
            causeway_dns::client::Via::Udp,
            &name,
            causeway_dns::client::RecordType::A,
            Duration::from_secs(2),
        )
        .await
        .unwrap();
        assert_eq!(
            (a.rcode, a.addresses),
            (0, vec![own]),
            "{name} in member {i}"
        );
        assert_ne!(own, clusterset_ip(&m, i).await);
    }
    // DNS-13's cluster.local side: c1's own Service still reaches only c1's pod
    let own = m.c(1).clone();
    let svc: k8s_openapi::api::core::v1::Service = kube::Api::namespaced(own, &m.ns)
        .get("hello")
        .await
        .unwrap();
    let local: IpAddr = svc.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
    let at = SocketAddr::new(local, 5042);
    let who = eventually("c1's own ClusterIP", PRESENT, || tcp_ask(at)).await;
    assert_eq!(who, "c1/hello-0");
    for _ in 0..5 {
        assert_eq!(tcp_ask(at).await.as_deref(), Some("c1/hello-0"));
    }

    // unexported: the import and its clusterset IP go
    let ip = clusterset_ip(&m, 1).await;
    m.unexport(0, "hello").await;
    eventually("no import in c1", PRESENT, || async {
        m.si(1, "hello").await.is_none().then_some(())
    })
    .await;
    eventually("the clusterset IP no longer answers", PRESENT, || async {
        tcp_ask(SocketAddr::new(ip, 5042))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    dns.shutdown().await;
}

/// CONF-27 (StrictPortConflict): c1 exports the Service with a differently named port
/// `tcp2` 4242: port 5042 reaches only c0's pod, port 4242 only c1's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_port_reaches_only_the_clusters_that_serve_it() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        service_proxy: true,
        ..Default::default()
    };
    let m = Mcs::start_with(opts, 2).await;
    pod("127.42.2.1", "c0/hello-0").await;
    pod("127.42.3.1", "c1/hello-0").await;
    hello(
        &m,
        0,
        json!([{"name": "tcp", "port": 5042, "protocol": "TCP", "targetPort": POD_PORT}]),
        &["127.42.2.1"],
    )
    .await;
    m.export(0, "hello", "dummy-label").await;
    let _ = clusterset_ip(&m, 1).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    hello(
        &m,
        1,
        json!([{"name": "tcp2", "port": 4242, "protocol": "TCP", "targetPort": POD_PORT}]),
        &["127.42.3.1"],
    )
    .await;
    m.export(1, "hello", "dummy-label").await;
    for i in [0, 1] {
        let ip = clusterset_ip(&m, i).await;
        let (p1, p2) = (SocketAddr::new(ip, 5042), SocketAddr::new(ip, 4242));
        eventually(
            &format!("both ports served in member {i}"),
            PRESENT,
            || async { (tcp_ask(p1).await.is_some() && tcp_ask(p2).await.is_some()).then_some(()) },
        )
        .await;
        for _ in 0..10 {
            assert_eq!(
                tcp_ask(p1).await.as_deref(),
                Some("c0/hello-0"),
                "member {i}"
            );
            assert_eq!(
                tcp_ask(p2).await.as_deref(),
                Some("c1/hello-0"),
                "member {i}"
            );
        }
    }
}

/// CONF-26 (StrictPortConflict) and CR-3: c1 exports `tcp` as 4242 (the same name,
/// another number): the oldest export's 5042 wins, and it reaches only c0's pod, though
/// c1's pod listens on the same target port; once c0 unexports, the import follows c1 on
/// the same clusterset IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_port_number_reaches_only_the_oldest_exporter() {
    let opts = causeway_e2e::Options {
        members: vec!["c0".into(), "c1".into()],
        service_proxy: true,
        ..Default::default()
    };
    let m = Mcs::start_with(opts, 2).await;
    pod("127.42.4.1", "c0/hello-0").await;
    pod("127.42.5.1", "c1/hello-0").await;
    let port =
        |n: u16| json!([{"name": "tcp", "port": n, "protocol": "TCP", "targetPort": POD_PORT}]);
    hello(&m, 0, port(5042), &["127.42.4.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    let first = [clusterset_ip(&m, 0).await, clusterset_ip(&m, 1).await];
    let ats = [
        SocketAddr::new(first[0], 5042),
        SocketAddr::new(first[1], 5042),
    ];
    for (i, at) in ats.iter().enumerate() {
        let who = eventually(&format!("5042 served in member {i}"), PRESENT, || {
            tcp_ask(*at)
        })
        .await;
        assert_eq!(who, "c0/hello-0", "member {i}");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    hello(&m, 1, port(4242), &["127.42.5.1"]).await;
    m.export(1, "hello", "dummy-label").await;
    // from c1's export on, 5042 is only ever c0's: before the aggregator's verdict as
    // after it (an importer does not give a cluster a port its export has as another)
    let only_c0 = || async {
        for (i, at) in ats.iter().enumerate() {
            assert_eq!(
                tcp_ask(*at).await.as_deref(),
                Some("c0/hello-0"),
                "5042 in member {i}"
            );
        }
    };
    eventually("c1's export reports the conflict", PRESENT, || async {
        only_c0().await;
        m.export_condition(1, "hello", "Conflict")
            .await
            .filter(|c| c.0 == "True")
    })
    .await;
    for _ in 0..10 {
        only_c0().await;
    }
    for i in [0, 1] {
        let other = SocketAddr::new(clusterset_ip(&m, i).await, 4242);
        assert_eq!(tcp_ask(other).await, None, "4242 is not part of the import");
    }

    // CR-3: the conflict clears when the oldest export leaves; Causeway then follows the
    // remaining export (the KEP allows keeping the import as it was, or this), with the
    // same clusterset IP in each member: the address clients hold keeps working
    let before = [clusterset_ip(&m, 0).await, clusterset_ip(&m, 1).await];
    assert_eq!(
        before, first,
        "the conflict kept each member's clusterset IP"
    );
    m.unexport(0, "hello").await;
    for (i, ip) in before.into_iter().enumerate() {
        let at = SocketAddr::new(ip, 4242);
        let who = eventually(&format!("4242 served in member {i}"), PRESENT, || {
            tcp_ask(at)
        })
        .await;
        assert_eq!(who, "c1/hello-0", "member {i}");
        assert_eq!(
            clusterset_ip(&m, i).await,
            ip,
            "member {i} keeps its clusterset IP"
        );
    }
}
