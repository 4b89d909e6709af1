//! causeway-dns end to end: services exported from one member become importer-made
//! ServiceImports and MCS EndpointSlices in another, and causeway-dns watching that
//! member answers for them over UDP and TCP; an endpoint turning not ready in the
//! exporting member leaves the answer.

use std::net::IpAddr;
use std::time::Duration;

use causeway_dns::client::{Answer, RecordType, Via, lookup};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::mcs_support::{Mcs, PRESENT, eventually};

pub(crate) async fn ask(
    server: std::net::SocketAddr,
    via: Via,
    name: &str,
    qtype: RecordType,
) -> Option<Answer> {
    lookup(server, via, name, qtype, Duration::from_secs(2))
        .await
        .ok()
}

pub(crate) fn ips(v: &[&str]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = v.iter().map(|s| s.parse().unwrap()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_on_a_member_answers_imports_and_drops_unready_endpoints() {
    let owned = Mcs::start(&["c0", "c1"], false).await;
    let m = &owned;
    let ns = m.ns.clone();
    m.hello(0, &["10.0.0.1"]).await;
    m.export(0, "hello", "dummy-label").await;
    m.service(
        0,
        "db",
        json!({"clusterIP": "None", "ports": [{"name": "tcp", "port": 42}]}),
        &["10.0.1.1", "10.0.1.2"],
    )
    .await;
    m.export(0, "db", "dummy-label").await;

    let dns = causeway_dns::start(
        m.c(1),
        causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..causeway_dns::Config::default()
        },
    )
    .await
    .expect("causeway-dns starts");

    // ClusterSetIP: A = the importer-written ServiceImport's spec.ips in c1.
    let si = eventually("hello imported with an IP in c1", PRESENT, || async {
        m.si(1, "hello").await.filter(|s| !s.spec.ips.is_empty())
    })
    .await;
    let want: Vec<IpAddr> = si.spec.ips.iter().map(|s| s.parse().unwrap()).collect();
    let hello = format!("hello.{ns}.svc.clusterset.local.");
    eventually("hello resolves to its clusterset IP", PRESENT, || async {
        let a = ask(dns.udp, Via::Udp, &hello, RecordType::A).await?;
        (a.rcode == 0 && a.addresses == want).then_some(())
    })
    .await;
    let srv = ask(dns.tcp, Via::Tcp, &hello, RecordType::SRV)
        .await
        .expect("TCP answer");
    assert_eq!(
        srv.srv,
        [(42, hello.clone())],
        "tcp/42 + udp/42: one bare-name SRV"
    );

    // Headless: the ready endpoints exported by c0, and per-endpoint names.
    let db = format!("db.{ns}.svc.clusterset.local.");
    eventually("db resolves to both endpoints", PRESENT, || async {
        let a = ask(dns.udp, Via::Udp, &db, RecordType::A).await?;
        (a.addresses == ips(&["10.0.1.1", "10.0.1.2"])).then_some(())
    })
    .await;
    let per_ep = ask(dns.tcp, Via::Tcp, &format!("db-1.c0.{db}"), RecordType::A)
        .await
        .unwrap();
    assert_eq!(per_ep.addresses, ips(&["10.0.1.2"]));
    let reserved = ask(dns.udp, Via::Udp, &format!("c0.{db}"), RecordType::A)
        .await
        .unwrap();
    // DNS-7: no records at <clusterid>.<svc>, but names exist below it: an empty
    // non-terminal, so NODATA (NOERROR, no answers), not NXDOMAIN (RFC 8020)
    assert_eq!(
        (reserved.rcode, reserved.addresses.len()),
        (0, 0),
        "<clusterid>.<svc> has no records but is not NXDOMAIN"
    );
    let missing = ask(
        dns.udp,
        Via::Udp,
        &format!("nothere.{ns}.svc.clusterset.local."),
        RecordType::A,
    )
    .await
    .unwrap();
    assert_eq!(missing.rcode, 3);

    // 10.0.1.2 turns not ready in the exporting cluster.
    let patch = json!({"endpoints": [
        {"addresses": ["10.0.1.1"], "hostname": "db-0", "conditions": {"ready": true}},
        {"addresses": ["10.0.1.2"], "hostname": "db-1", "conditions": {"ready": false}}
    ]});
    Api::<EndpointSlice>::namespaced(m.c(0), &ns)
        .patch("db-abc12", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch c0's slice");
    eventually(
        "the not-ready endpoint leaves the answer",
        PRESENT,
        || async {
            let a = ask(dns.udp, Via::Udp, &db, RecordType::A).await?;
            (a.addresses == ips(&["10.0.1.1"])).then_some(())
        },
    )
    .await;
    let gone = ask(dns.tcp, Via::Tcp, &format!("db-1.c0.{db}"), RecordType::A)
        .await
        .unwrap();
    assert_eq!(gone.rcode, 3);
    dns.shutdown().await;
}
