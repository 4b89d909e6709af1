//! Bench helper (not a test): feeds causeway-dns from a kubesim API server and measures
//! how long a ServiceImport change takes to show up in DNS answers.
//!
//! ```text
//! cargo run --release -p causeway-dns --example bench-dns-feed -- serve --spec services.json --kubeconfig-out kc.yaml
//! cargo run --release -p causeway-dns --example bench-dns-feed -- change --kubeconfig kc.yaml --dns 127.0.0.1:15357 --count 50
//! ```
//! `serve` starts kubesim in-process, installs the CRDs, creates the ServiceImports and
//! MCS EndpointSlices of `services.json` (written by `benches/dns/gen.py`), writes the
//! kubeconfig once everything exists, and runs until killed. `change` rewrites
//! `svc0.ns0`'s clusterset IP `count` times and polls the DNS server over UDP until
//! it answers the new IP; it prints the latency distribution.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use causeway_crds::mcs::v1beta1::ServiceImport;
use futures::StreamExt;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn arg(args: &[String], flag: &str) -> anyhow::Result<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .with_context(|| format!("missing {flag} <value>"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(&arg(&args, "--spec")?, &arg(&args, "--kubeconfig-out")?).await,
        Some("change") => {
            let count = arg(&args, "--count")
                .ok()
                .map(|c| c.parse())
                .transpose()?
                .unwrap_or(50);
            change(
                &arg(&args, "--kubeconfig")?,
                arg(&args, "--dns")?.parse()?,
                count,
            )
            .await
        }
        _ => bail!(
            "usage: bench-dns-feed serve --spec services.json --kubeconfig-out FILE | change --kubeconfig FILE --dns ADDR [--count N]"
        ),
    }
}

async fn client_from(yaml: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(yaml)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(cfg)?)
}

async fn serve(spec: &str, kubeconfig_out: &str) -> anyhow::Result<()> {
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(spec).with_context(|| format!("reading {spec}"))?,
    )?;
    let sim = kubesim::Server::start(kubesim::Config::new("bench")).await?;
    let client = client_from(&sim.kubeconfig()).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in causeway_crds::crdgen::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !crds
        .get("serviceimports.multicluster.x-k8s.io")
        .await?
        .status
        .and_then(|s| s.conditions)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
    {
        if Instant::now() > deadline {
            bail!("ServiceImport CRD not Established");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let imports = spec["imports"].as_array().context("spec.imports")?;
    let slices = spec["slices"].as_array().context("spec.slices")?;
    let mut namespaces: Vec<&str> = imports
        .iter()
        .filter_map(|i| i["namespace"].as_str())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let nsapi: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        nsapi
            .patch(ns, &PatchParams::apply("bench"), &Patch::Apply(&body))
            .await?;
    }
    let started = Instant::now();
    let created = futures::stream::iter(imports.iter().map(|i| {
        let client = client.clone();
        async move {
            let ns = i["namespace"].as_str().unwrap_or_default();
            let body = json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                "metadata": {"name": i["name"], "namespace": ns},
                "spec": {"type": i["type"], "ips": i["ips"], "ports": i["ports"]}
            });
            let si: ServiceImport = serde_json::from_value(body)?;
            Api::<ServiceImport>::namespaced(client, ns)
                .create(&PostParams::default(), &si)
                .await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    for (k, s) in slices.iter().enumerate() {
        let ns = s["namespace"].as_str().unwrap_or_default();
        let body = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{}-{}-{k}", s["service"].as_str().unwrap_or_default(), s["cluster"].as_str().unwrap_or_default()), "namespace": ns, "labels": {
                "multicluster.kubernetes.io/service-name": s["service"],
                "multicluster.kubernetes.io/source-cluster": s["cluster"],
            }},
            "addressType": "IPv4", "endpoints": s["endpoints"], "ports": s["ports"]
        });
        let es: EndpointSlice = serde_json::from_value(body)?;
        Api::<EndpointSlice>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &es)
            .await?;
    }
    eprintln!(
        "bench-dns-feed: {} ServiceImports and {} EndpointSlices in kubesim at {} ({:.1} s)",
        imports.len(),
        slices.len(),
        sim.url(),
        started.elapsed().as_secs_f64()
    );
    std::fs::write(kubeconfig_out, sim.kubeconfig())?;
    tokio::signal::ctrl_c().await?;
    sim.shutdown();
    Ok(())
}

fn a_query(id: u16) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.add_query(Query::query(
        Name::from_ascii("svc0.ns0.svc.clusterset.local.").unwrap(),
        RecordType::A,
    ));
    m.to_vec().unwrap_or_default()
}

async fn answers(sock: &tokio::net::UdpSocket, dns: SocketAddr, id: u16) -> Vec<Ipv4Addr> {
    let mut buf = [0u8; 1500];
    if sock.send_to(&a_query(id), dns).await.is_err() {
        return vec![];
    }
    match tokio::time::timeout(Duration::from_millis(50), sock.recv_from(&mut buf)).await {
        Ok(Ok((n, _))) => Message::from_vec(&buf[..n])
            .map(|m| {
                m.answers
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.0),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![],
    }
}

async fn change(kubeconfig: &str, dns: SocketAddr, count: usize) -> anyhow::Result<()> {
    let client = client_from(&std::fs::read_to_string(kubeconfig)?).await?;
    let api: Api<ServiceImport> = Api::namespaced(client, "ns0");
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let mut total = Vec::new();
    let mut after_write = Vec::new();
    for i in 0..count {
        let ip = Ipv4Addr::new(10, 250, (i / 250) as u8, (i % 250 + 1) as u8);
        let t0 = Instant::now();
        api.patch(
            "svc0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ips": [ip.to_string()]}})),
        )
        .await?;
        let t1 = Instant::now();
        let mut id = 0u16;
        loop {
            id = id.wrapping_add(1);
            if answers(&sock, dns, id).await.contains(&ip) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                bail!("{ip} not visible in DNS after 10 s");
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        total.push(t0.elapsed());
        after_write.push(t1.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = |v: &mut Vec<Duration>| {
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            ms(v[v.len() / 2]),
            ms(v[v.len() * 9 / 10]),
            ms(v[v.len() - 1])
        )
    };
    println!(
        "change_to_answer {} (n={count}; from the PATCH request)",
        stats(&mut total)
    );
    println!(
        "write_ack_to_answer {} (from the PATCH response)",
        stats(&mut after_write)
    );
    Ok(())
}
