//! `bench-proxy-table`: how long `causeway_proxy::table::build` takes to turn a hub
//! snapshot of 1,000 MultiClusterIngresses and 10,000 endpoints (3 clusters) into a
//! route table, and how much memory the snapshot and the table take.
//!
//! Run: `cargo build --profile bench-fast -p causeway-benches --bin bench-proxy-table &&
//! taskset -c 1 target/bench-fast/bench-proxy-table` (benches/proxy/run.sh runs it too).
//! Nothing is served and no address is dialed: the endpoints are 127.x loopback
//! addresses that only exist in the snapshot.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use causeway_crds::exported_service::{ExportedService, ExportedServicePort, ExportedServiceSpec};
use causeway_crds::mci::{MultiClusterIngress, MultiClusterIngressSpec};
use causeway_crds::mcs::v1beta1::{ServiceImport, ServiceImportSpec};
use causeway_crds::mcs::{ServiceImportType, ServicePort};
use causeway_crds::well_known::labels::{SERVICE_NAME, SOURCE_CLUSTER};
use causeway_proxy::metrics::Metrics;
use causeway_proxy::table::{BuildOptions, Registries, RouteTable, Snapshot, Target, build};
use clap::Parser;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, IngressBackend, IngressClass, IngressClassSpec,
    IngressRule, IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use kube::api::ObjectMeta;

/// Route-table rebuild time for N MultiClusterIngresses / M endpoints across C clusters.
#[derive(Parser, Debug)]
#[command(name = "bench-proxy-table")]
struct Args {
    /// MultiClusterIngresses (one Service each, one host with two Prefix paths).
    #[arg(long, default_value_t = 1000)]
    mcis: usize,
    /// Ready endpoints in total, spread over the services and clusters.
    #[arg(long, default_value_t = 10_000)]
    endpoints: usize,
    /// Clusters exporting every Service.
    #[arg(long, default_value_t = 3)]
    clusters: usize,
    /// Namespaces the MCIs and Services are spread over.
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// Timed rebuilds (the median is reported).
    #[arg(long, default_value_t = 21)]
    runs: usize,
    /// Also write the markdown section to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

const CLUSTERS: [&str; 8] = ["east", "west", "north", "south", "c4", "c5", "c6", "c7"];

fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..Default::default()
    }
}

fn snapshot(a: &Args) -> Snapshot {
    let mut s = Snapshot {
        ingress_classes: vec![IngressClass {
            metadata: ObjectMeta {
                name: Some("causeway".into()),
                ..Default::default()
            },
            spec: Some(IngressClassSpec {
                controller: Some("causeway.io/ingress-controller".into()),
                parameters: None,
            }),
        }],
        ..Default::default()
    };
    let mut ep_serial = 0usize;
    for i in 0..a.mcis {
        let ns = format!("ns{}", i % a.namespaces);
        let svc = format!("svc{i}");
        s.service_imports.push(Arc::new(ServiceImport {
            metadata: meta(&ns, &svc, &[]),
            spec: ServiceImportSpec {
                type_: ServiceImportType::ClusterSetIP,
                ports: vec![ServicePort {
                    name: Some("http".into()),
                    protocol: Some("TCP".into()),
                    port: 80,
                    ..Default::default()
                }],
                ..Default::default()
            },
            status: None,
        }));
        // endpoints of this service: an even share of the total, split over the clusters
        let eps = a.endpoints / a.mcis + usize::from(i < a.endpoints % a.mcis);
        for (c, &cluster) in CLUSTERS.iter().enumerate().take(a.clusters) {
            s.exported_services.push(Arc::new(ExportedService {
                metadata: meta(&ns, &format!("{svc}.{cluster}"), &[]),
                spec: ExportedServiceSpec {
                    cluster: cluster.into(),
                    service: svc.clone(),
                    ports: vec![ExportedServicePort {
                        name: Some("http".into()),
                        protocol: Some("TCP".into()),
                        port: 80,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                status: None,
            }));
            let n = eps / a.clusters + usize::from(c < eps % a.clusters);
            let endpoints = (0..n)
                .map(|_| {
                    ep_serial += 1;
                    // loopback only: 127.<cluster+1>.<hi>.<lo>
                    let addr = format!("127.{}.{}.{}", c + 1, ep_serial / 250, ep_serial % 250 + 1);
                    Endpoint {
                        addresses: vec![addr],
                        conditions: Some(EndpointConditions {
                            ready: Some(true),
                            serving: Some(true),
                            terminating: Some(false),
                        }),
                        ..Default::default()
                    }
                })
                .collect();
            s.endpoint_slices.push(Arc::new(EndpointSlice {
                metadata: meta(
                    &ns,
                    &format!("{svc}-{cluster}"),
                    &[(SERVICE_NAME, svc.as_str()), (SOURCE_CLUSTER, cluster)],
                ),
                address_type: "IPv4".into(),
                endpoints,
                ports: Some(vec![EndpointPort {
                    name: Some("http".into()),
                    port: Some(8080),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                }]),
            }));
        }
        let backend = IngressBackend {
            service: Some(IngressServiceBackend {
                name: svc.clone(),
                port: Some(ServiceBackendPort {
                    number: Some(80),
                    name: None,
                }),
            }),
            resource: None,
        };
        let path = |p: &str| HTTPIngressPath {
            path: Some(p.into()),
            path_type: "Prefix".into(),
            backend: backend.clone(),
        };
        s.mcis.push(Arc::new(MultiClusterIngress {
            metadata: meta(&ns, &format!("mci{i}"), &[]),
            spec: MultiClusterIngressSpec(IngressSpec {
                ingress_class_name: Some("causeway".into()),
                rules: Some(vec![IngressRule {
                    host: Some(format!("{svc}.{ns}.example.com")),
                    http: Some(HTTPIngressRuleValue {
                        paths: vec![path("/"), path("/api")],
                    }),
                }]),
                ..Default::default()
            }),
            status: None,
        }));
    }
    s
}

/// (VmRSS, VmHWM) of this process in KiB.
fn rss() -> (u64, u64) {
    (
        causeway_benches::status_kib("self", "VmRSS:"),
        causeway_benches::status_kib("self", "VmHWM:"),
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn check(t: &RouteTable, a: &Args) -> anyhow::Result<()> {
    ensure!(
        t.served.len() == a.mcis,
        "served {} of {} MCIs (ignored: {:?})",
        t.served.len(),
        a.mcis,
        t.ignored.first()
    );
    ensure!(
        t.endpoints == a.endpoints,
        "{} endpoints attached, want {}",
        t.endpoints,
        a.endpoints
    );
    let last = a.mcis - 1;
    let host = format!("svc{last}.ns{}.example.com", last % a.namespaces);
    let route = t
        .route(&host, "/api/v1/x")
        .with_context(|| format!("no route for {host}/api/v1/x"))?;
    ensure!(
        matches!(route.target, Target::Backend(_)),
        "{host}: route has no backend: {:?}",
        route.target
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    ensure!(
        a.clusters >= 1 && a.clusters <= CLUSTERS.len(),
        "--clusters must be 1..={}",
        CLUSTERS.len()
    );
    ensure!(
        a.mcis >= 1 && a.namespaces >= 1 && a.runs >= 1,
        "counts must be positive"
    );
    // The upstream pools are hyper clients on the tokio executor; building them needs no
    // I/O, but keep a runtime entered as the proxy does.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _guard = rt.enter();

    let (rss0, _) = rss();
    let t = Instant::now();
    let snap = snapshot(&a);
    let gen_time = t.elapsed();
    let (rss1, _) = rss();

    let opts = BuildOptions {
        local_cluster: Some("east".into()),
        ..Default::default()
    };
    let shared = Registries::new(Arc::new(Metrics::new()));
    // first build: empty endpoint/circuit registries and metric families
    let t = Instant::now();
    let first = build(&snap, &opts, &shared);
    let cold = t.elapsed();
    check(&first, &a)?;
    let (rss2, _) = rss();

    // rebuilds as the proxy does them: Registries kept, the previous table alive until swapped
    let mut prev = first;
    let mut times = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        let t = Instant::now();
        let next = build(&snap, &opts, &shared);
        times.push(t.elapsed());
        check(&next, &a)?;
        prev = next;
    }
    let (rss3, hwm) = rss();
    times.sort();
    let median = times[times.len() / 2];
    let (min, max) = (times[0], times[times.len() - 1]);

    let md = format!(
        "## Route-table rebuild (`causeway_proxy::table::build`)\n\n\
         Snapshot: {mcis} MultiClusterIngresses in {nss} namespaces (one host, two Prefix paths each: \
         {routes} path rules), {mcis} ServiceImports, {exps} ExportedServices, {slices} EndpointSlices \
         with {eps} ready endpoints across {cl} clusters (local cluster `east`). \
         Command: `taskset -c 1 bench-proxy-table --mcis {mcis} --endpoints {eps} --clusters {cl} --runs {runs}` \
         (profile bench-fast, one thread).\n\n\
         | measurement | result |\n|---|---|\n\
         | rebuild, median of {runs} (min – max) | **{median}** ({min} – {max}) |\n\
         | first build (empty endpoint/circuit/metric registries) | {cold} |\n\
         | per MCI / per endpoint (median rebuild) | {per_mci:.1} µs / {per_ep:.2} µs |\n\
         | snapshot objects in memory (RSS growth while generating them, {gen}) | {snap_mem} |\n\
         | first table + shared registries (RSS growth) | {table_mem} |\n\
         | RSS after {runs} rebuilds (two tables alive at a swap) / peak (VmHWM) | {rss_end} / {hwm} |\n",
        mcis = a.mcis,
        nss = a.namespaces,
        routes = prev.routes(),
        exps = snap.exported_services.len(),
        slices = snap.endpoint_slices.len(),
        eps = a.endpoints,
        cl = a.clusters,
        runs = a.runs,
        median = ms(median),
        min = ms(min),
        max = ms(max),
        cold = ms(cold),
        per_mci = median.as_secs_f64() * 1e6 / a.mcis as f64,
        per_ep = median.as_secs_f64() * 1e6 / a.endpoints.max(1) as f64,
        gen = ms(gen_time),
        snap_mem = mib(rss1.saturating_sub(rss0)),
        table_mem = mib(rss2.saturating_sub(rss1)),
        rss_end = mib(rss3),
        hwm = mib(hwm),
    );
    print!("{md}");
    if let Some(p) = &a.markdown {
        std::fs::write(p, &md).with_context(|| format!("writing {}", p.display()))?;
    }
    drop(prev);
    Ok(())
}
