use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use causeway_crds::federation::cluster::{Cluster, ClusterStatus};
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_crds::well_known::{INGRESS_CONTROLLER, annotations};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};

use super::*;

fn yaml<T: serde::de::DeserializeOwned>(s: &str) -> T {
    serde_saphyr::from_str(s).unwrap()
}

fn classes() -> Vec<IngressClass> {
    vec![
        yaml(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: causeway}}\nspec: {{controller: {INGRESS_CONTROLLER}}}"
        )),
        yaml(
            "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nginx}\nspec: {controller: k8s.io/ingress-nginx}",
        ),
    ]
}

fn mci(class: &str, extra: &str) -> MultiClusterIngress {
    yaml(&format!(
        "apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {{name: demo, namespace: demo, generation: 3{extra}}}
spec:
  ingressClassName: {class}
  defaultBackend: {{service: {{name: fallback, port: {{number: 80}}}}}}
  rules:
  - host: demo.example.com
    http:
      paths:
      - {{path: /web, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
      - {{path: /api, pathType: Exact, backend: {{service: {{name: api, port: {{number: 8080}}}}}}}}
"
    ))
}

fn import(name: &str, clusters: &[&str]) -> Arc<ServiceImport> {
    let list: Vec<String> = clusters
        .iter()
        .map(|c| format!("{{cluster: {c}}}"))
        .collect();
    Arc::new(yaml(&format!(
        "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: {name}, namespace: demo}}\nspec: {{type: ClusterSetIP, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{clusters: [{}]}}",
        list.join(", ")
    )))
}

fn cluster(name: &str, ready: Option<&str>, remedy: &[&str]) -> Arc<Cluster> {
    let mut c: Cluster = yaml(&format!(
        "apiVersion: causeway.io/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{syncMode: Push, apiEndpoint: 'https://127.0.0.1:1'}}"
    ));
    c.status = Some(ClusterStatus {
        conditions: ready
            .map(|s| {
                vec![Condition {
                    type_: "Ready".into(),
                    status: s.into(),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                }]
            })
            .unwrap_or_default(),
        remedy_actions: remedy.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    Arc::new(c)
}

fn lease(addresses: &str, ports: &str, renewed_secs_ago: i64, now: jiff::Timestamp) -> Arc<Lease> {
    let mut l = Lease::default();
    l.metadata.annotations = Some(BTreeMap::from([
        (
            annotations::PROXY_ADDRESSES.to_string(),
            addresses.to_string(),
        ),
        (annotations::PROXY_PORTS.to_string(), ports.to_string()),
    ]));
    l.spec = Some(LeaseSpec {
        lease_duration_seconds: Some(15),
        renew_time: Some(MicroTime(
            now - jiff::SignedDuration::from_secs(renewed_secs_ago),
        )),
        ..Default::default()
    });
    Arc::new(l)
}

struct Fixture {
    classes: Vec<IngressClass>,
    imports: BTreeMap<(String, String), Arc<ServiceImport>>,
    clusters: BTreeMap<String, Arc<Cluster>>,
    exporters: BTreeMap<(String, String), BTreeSet<String>>,
    bindings: Vec<Arc<causeway_crds::federation::binding::ResourceBinding>>,
    ttl: std::time::Duration,
    proxies: Vec<Arc<Lease>>,
    /// Every MCI on the hub (what an MCI may lose to an older one).
    mcis: Vec<Arc<MultiClusterIngress>>,
    now: jiff::Timestamp,
}

impl Fixture {
    fn new() -> Self {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let imports = [
            import("web", &["west", "east", "north"]),
            import("api", &["east"]),
        ]
        .into_iter()
        .map(|i| (crate::watch::key(i.as_ref()), i))
        .collect();
        let clusters = [
            ("east", cluster("east", Some("True"), &[])),
            ("west", cluster("west", Some("False"), &[])),
            ("north", cluster("north", Some("True"), &[TRAFFIC_CONTROL])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Fixture {
            classes: classes(),
            imports,
            clusters,
            exporters: BTreeMap::new(),
            bindings: Vec::new(),
            ttl: crate::mcs::stale::tests::TTL,
            proxies: vec![
                lease("127.0.0.1", "8080/http,8443/https", 1, now),
                lease("proxy.example.com, 127.0.0.1", "8080/http", 3, now),
                lease("10.9.9.9", "80/http", 60, now), // expired
            ],
            mcis: Vec::new(),
            now,
        }
    }

    fn verdict(&self, m: &MultiClusterIngress) -> Desired {
        let all: Vec<Arc<Cluster>> = self.clusters.values().cloned().collect();
        let claims = mci_claims(&self.mcis, &self.classes);
        desired(
            m,
            &World {
                classes: &self.classes,
                imports: &self.imports,
                clusters: &self.clusters,
                bindings: &self.bindings,
                exporters: &self.exporters,
                stale: &Staleness::new(&all, self.ttl, self.now),
                proxies: &crate::mci::ProxyLease::read_all(&self.proxies),
                conflicts: &claims.conflicts,
                now: self.now,
            },
        )
    }
}

#[test]
fn serves_its_class_and_fills_the_karmada_status() {
    let f = Fixture::new();
    let Desired::Ours {
        status,
        errors,
        warnings,
    } = f.verdict(&mci("causeway", ""))
    else {
        panic!("should be ours")
    };
    assert!(errors.is_empty() && warnings.is_empty());
    // serviceLocations: sorted by name, clusters sorted; `fallback` has no ServiceImport.
    let locations: Vec<(String, Vec<String>)> = status
        .service_locations
        .iter()
        .map(|l| (l.name.clone(), l.clusters.clone()))
        .collect();
    assert_eq!(
        locations,
        vec![
            ("api".into(), vec!["east".into()]),
            (
                "web".into(),
                vec!["east".into(), "north".into(), "west".into()]
            ),
        ]
    );
    // west is not Ready, north asks for TrafficControl.
    assert_eq!(status.traffic_block_clusters, vec!["north", "west"]);
    // MCI-9: a backend propagated from the hub is where its ResourceBinding schedules
    // it (and what its dependents require), exported yet or not; `fallback` too
    let mut f = Fixture::new();
    let binding = |name: &str, clusters: &[&str], required: &[&str]| {
        Arc::new(yaml::<causeway_crds::federation::binding::ResourceBinding>(
            &format!(
                "apiVersion: causeway.io/v1alpha1\nkind: ResourceBinding\nmetadata: {{name: {name}-service, namespace: demo}}\nspec: {{resource: {{apiVersion: v1, kind: Service, namespace: demo, name: {name}}}, clusters: [{}], requiredBy: [{{name: app, namespace: demo, clusters: [{}]}}]}}",
                clusters
                    .iter()
                    .map(|c| format!("{{name: {c}}}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                required
                    .iter()
                    .map(|c| format!("{{name: {c}}}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        ))
    };
    f.bindings = vec![
        binding("api", &["west"], &["north"]),
        binding("fallback", &["east"], &[]),
    ];
    let Desired::Ours { status, .. } = f.verdict(&mci("causeway", "")) else {
        panic!("should be ours")
    };
    let locations: Vec<(String, Vec<String>)> = status
        .service_locations
        .iter()
        .map(|l| (l.name.clone(), l.clusters.clone()))
        .collect();
    assert_eq!(
        locations,
        vec![
            ("api".into(), vec!["north".into(), "west".into()]),
            ("fallback".into(), vec!["east".into()]),
            (
                "web".into(),
                vec!["east".into(), "north".into(), "west".into()]
            ),
        ]
    );
    // Live proxies only, one ingress per address, ports merged and sorted.
    let lb = serde_json::to_value(status.load_balancer.unwrap()).unwrap();
    assert_eq!(
        lb,
        serde_json::json!({"ingress": [
            {"ip": "127.0.0.1", "ports": [{"port": 8080, "protocol": "TCP"}, {"port": 8443, "protocol": "TCP"}]},
            {"hostname": "proxy.example.com", "ports": [{"port": 8080, "protocol": "TCP"}]},
        ]})
    );
    let c = &status.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Accepted", "True", "Accepted")
    );
    assert_eq!(c.observed_generation, Some(3));
}

#[test]
fn other_classes_are_left_alone() {
    let f = Fixture::new();
    assert!(matches!(
        f.verdict(&mci("nginx", "")),
        Desired::NotOurs(Decision::OtherController { .. })
    ));
    assert!(matches!(
        f.verdict(&mci("missing", "")),
        Desired::NotOurs(Decision::ClassNotFound { .. })
    ));
}

#[test]
fn invalid_spec_is_not_served_and_says_why() {
    let f = Fixture::new();
    let mut m = mci("causeway", "");
    m.spec.rules.as_mut().unwrap()[0].host = Some("10.0.0.1".into());
    let Desired::Ours { status, errors, .. } = f.verdict(&m) else {
        panic!()
    };
    assert_eq!(errors.len(), 1);
    assert_eq!(status.load_balancer, None, "an invalid MCI gets no address");
    let c = &status.conditions[0];
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Invalid"));
    assert!(
        c.message.contains("spec.rules[0].host") && c.message.contains("not an IP address"),
        "{}",
        c.message
    );
}

#[test]
fn bad_annotations_are_served_with_defaults_and_reported() {
    let f = Fixture::new();
    let m = mci(
        "causeway",
        ", annotations: {causeway.io/connect-timeout: soon}",
    );
    let Desired::Ours {
        status, warnings, ..
    } = f.verdict(&m)
    else {
        panic!()
    };
    assert_eq!(warnings.len(), 1);
    assert!(status.load_balancer.is_some());
    let c = &status.conditions[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "InvalidAnnotations")
    );
    assert!(
        c.message.contains("causeway.io/connect-timeout"),
        "{}",
        c.message
    );
}

/// A lease that reports problems with TLS Secrets (`namespace/name`, reason).
fn with_tls_problems(lease: Arc<Lease>, name: &str, problems: &[(&str, &str)]) -> Arc<Lease> {
    let mut l = (*lease).clone();
    l.metadata.name = Some(name.into());
    let p: proxy_lease::TlsProblems = problems
        .iter()
        .map(|(k, r)| {
            (
                k.to_string(),
                proxy_lease::TlsProblem {
                    reason: r.to_string(),
                    message: "not found".into(),
                },
            )
        })
        .collect();
    l.metadata.annotations.get_or_insert_default().insert(
        annotations::PROXY_TLS_PROBLEMS.into(),
        proxy_lease::tls_problems_text(&p).unwrap_or_default(),
    );
    Arc::new(l)
}

#[test]
fn an_https_port_says_when_a_proxy_serves_the_default_certificate() {
    let mut f = Fixture::new();
    let mut m = mci("causeway", "");
    m.spec.tls = Some(vec![
        yaml("{hosts: [demo.example.com, www.example.com], secretName: demo-cert}"),
        yaml("{hosts: [api.example.com], secretName: demo-cert}"),
    ]);
    let ports = |status: &MultiClusterIngressStatus| -> Vec<(Option<String>, i32, Option<String>)> {
        status
            .load_balancer
            .as_ref()
            .and_then(|lb| lb.ingress.clone())
            .unwrap_or_default()
            .into_iter()
            .flat_map(|i| {
                let addr = i.ip.or(i.hostname);
                i.ports
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |p| (addr.clone(), p.port, p.error))
            })
            .collect()
    };
    let verdict = |f: &Fixture, m: &MultiClusterIngress| match f.verdict(m) {
        Desired::Ours { status, .. } => status,
        other => panic!("{other:?}"),
    };
    // every proxy serves the certificate: no error, the usual reason
    let s = verdict(&f, &m);
    assert!(ports(&s).iter().all(|p| p.2.is_none()), "{:?}", ports(&s));
    assert_eq!(s.conditions[0].reason, "Accepted");

    // the proxy at 127.0.0.1 with an HTTPS port cannot find the Secret; another
    // MCI's Secret and an expired proxy's report change nothing
    f.proxies[0] = with_tls_problems(
        f.proxies[0].clone(),
        "causeway-proxy-b",
        &[
            ("demo/demo-cert", proxy_lease::SECRET_NOT_FOUND),
            ("other/x", proxy_lease::SECRET_INVALID),
        ],
    );
    f.proxies[2] = with_tls_problems(
        f.proxies[2].clone(),
        "causeway-proxy-old",
        &[("demo/demo-cert", proxy_lease::SECRET_INVALID)],
    );
    let s = verdict(&f, &m);
    assert_eq!(
        ports(&s),
        [
            (Some("127.0.0.1".into()), 8080, None),
            (
                Some("127.0.0.1".into()),
                8443,
                Some("causeway.io/TLSSecretNotFound".into())
            ),
            (Some("proxy.example.com".into()), 8080, None),
        ],
        "only the HTTPS port of the proxy that reports it"
    );
    let c = &s.conditions[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", TLS_SECRET_UNUSABLE),
        "still served"
    );
    for part in [
        "TLS Secret demo/demo-cert: not found",
        "TLSSecretNotFound",
        "causeway-proxy-b",
        "demo.example.com, www.example.com, api.example.com get the proxy's default certificate",
    ] {
        assert!(c.message.contains(part), "{part:?} in {}", c.message);
    }
    assert!(!c.message.contains("other/x"), "{}", c.message);

    // an MCI without that Secret is not concerned
    let s = verdict(&f, &mci("causeway", ""));
    assert!(ports(&s).iter().all(|p| p.2.is_none()));
    assert_eq!(s.conditions[0].reason, "Accepted");

    // a report the controller cannot read is no report
    let mut l = (*f.proxies[0]).clone();
    l.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(annotations::PROXY_TLS_PROBLEMS.into(), "{not json".into());
    f.proxies[0] = Arc::new(l);
    assert_eq!(verdict(&f, &m).conditions[0].reason, "Accepted");
}

#[test]
fn leases_expire_after_their_duration() {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    assert!(lease_held(&lease("a", "80", 14, now), now));
    assert!(!lease_held(&lease("a", "80", 15, now), now));
    assert!(!lease_held(&Lease::default(), now));
    // a renewal at the end of time: held, and no overflow
    let mut late = (*lease("a", "80", 0, now)).clone();
    if let Some(spec) = late.spec.as_mut() {
        spec.renew_time = Some(MicroTime(jiff::Timestamp::MAX));
        spec.lease_duration_seconds = Some(i32::MAX);
    }
    assert!(lease_held(&late, now));
}

#[test]
fn accepted_keeps_its_transition_time_while_the_status_stays() {
    let f = Fixture::new();
    let mut m = mci("causeway", "");
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!()
    };
    let mut old = status.clone();
    old.conditions[0].last_transition_time = Time(jiff::Timestamp::UNIX_EPOCH);
    m.status = Some(old);
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!()
    };
    assert_eq!(
        status.conditions[0].last_transition_time,
        Time(jiff::Timestamp::UNIX_EPOCH)
    );
    // Turning invalid is a transition: the time is now.
    m.spec.rules.as_mut().unwrap()[0].host = Some("10.0.0.1".into());
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!()
    };
    assert_eq!(status.conditions[0].last_transition_time, Time(f.now));
}

#[test]
fn a_cluster_not_ready_keeps_serving_until_the_ttl_then_is_blocked() {
    use crate::mcs::stale::tests::{cluster as stale_cluster, stale_condition, stale_true, t};
    // (west's Ready condition (status, since), now, west still in the import's
    // status.clusters, blocked clusters, EndpointsStale (status, reason), fragment)
    type Case = (
        (&'static str, i64),
        i64,
        bool,
        &'static [&'static str],
        Option<(&'static str, &'static str)>,
        &'static str,
    );
    let table: &[Case] = &[
        // ready: served, no condition
        (("True", 0), 1100, true, &["north"], None, ""),
        // not Ready within the TTL: still served, said stale
        (
            ("False", 1000),
            1100,
            true,
            &["north"],
            Some(("True", "ClusterNotReady")),
            "cluster west is not Ready since 1970-01-01T00:16:40Z: its last known endpoints are served until 1970-01-01T00:21:40Z",
        ),
        // Unknown is not Ready either
        (
            ("Unknown", 1000),
            1299,
            true,
            &["north"],
            Some(("True", "ClusterNotReady")),
            "cluster west",
        ),
        // past the TTL: blocked, even once the aggregator has left it out of the
        // ServiceImport (it still exports the service)
        (
            ("False", 1000),
            1300,
            false,
            &["north", "west"],
            Some(("True", "EndpointsWithdrawn")),
            "its endpoints are withdrawn since 1970-01-01T00:21:40Z",
        ),
    ];
    for (ready, now, listed, blocked, cond, fragment) in table {
        let mut f = Fixture::new();
        f.now = t(*now).0;
        f.clusters
            .insert("west".into(), stale_cluster("west", Some(*ready)));
        let web: &[&str] = if *listed {
            &["west", "east", "north"]
        } else {
            &["east", "north"]
        };
        f.imports
            .insert(("demo".into(), "web".into()), import("web", web));
        f.exporters.insert(
            ("demo".into(), "web".into()),
            ["west", "east", "north"].map(String::from).into(),
        );
        let Desired::Ours { status, .. } = f.verdict(&mci("causeway", "")) else {
            panic!("should be ours")
        };
        assert_eq!(
            &status.traffic_block_clusters, blocked,
            "{ready:?} at {now}"
        );
        let got = stale_condition(&status.conditions);
        assert_eq!(
            got.as_ref().map(|(s, r, _)| (s.as_str(), r.as_str())),
            *cond,
            "{ready:?} at {now}"
        );
        if let Some((_, _, msg)) = got {
            assert!(msg.contains(fragment), "{msg:?} lacks {fragment:?}");
        }
        assert_eq!(status.conditions[0].type_, ACCEPTED, "Accepted stays first");
        // both conditions say which generation of the spec they are about
        for c in &status.conditions {
            assert_eq!(c.observed_generation, Some(3), "{}", c.type_);
        }
    }
    // Ready again: no longer blocked, the condition turns False.
    let mut f = Fixture::new();
    f.clusters
        .insert("west".into(), stale_cluster("west", Some(("True", 0))));
    let mut m = mci("causeway", "");
    m.status = Some(MultiClusterIngressStatus {
        conditions: vec![stale_true("EndpointsWithdrawn", 1000)],
        ..Default::default()
    });
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!()
    };
    assert_eq!(status.traffic_block_clusters, vec!["north"]);
    assert_eq!(
        stale_condition(&status.conditions).map(|(s, r, _)| (s, r)),
        Some(("False".into(), "ClustersReady".into()))
    );
}

/// A backend whose ServiceImport has no port of the backend's name or number (the
/// proxy's lookup, `causeway_crds::mci::backend::service_port`) gets 503s from the
/// proxy: `ResolvedRefs` says which, while the MCI stays served.
#[test]
fn backends_naming_no_port_of_their_service_import_are_reported() {
    let mut f = Fixture::new();
    let refs = |f: &Fixture| {
        let Desired::Ours { status, .. } = f.verdict(&mci("causeway", "")) else {
            panic!("should be ours")
        };
        assert_eq!(status.conditions[0].type_, ACCEPTED, "Accepted stays first");
        assert_eq!(status.conditions[0].status, "True", "still served");
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == RESOLVED_REFS)
            .expect("a ResolvedRefs condition")
            .clone();
        assert_eq!(c.observed_generation, Some(3));
        c
    };
    // web's port has no name (the MCI asks for `http`), api's is 80 (it asks for 8080),
    // fallback is not exported
    let c = refs(&f);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", BACKEND_NOT_FOUND)
    );
    assert_eq!(
        c.message,
        "causeway-proxy answers 503 for: \
         backend api port 8080: ServiceImport demo/api has no TCP port 8080; \
         backend fallback port 80: no ServiceImport demo/fallback on the hub (export the Service from a member cluster); \
         backend web port http: ServiceImport demo/web has no TCP port http"
    );
    // the ports they name
    let with_ports = |name: &str, ports: &str| -> Arc<ServiceImport> {
        Arc::new(yaml(&format!(
            "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata: {{name: {name}, namespace: demo}}\nspec: {{type: ClusterSetIP, ports: {ports}}}"
        )))
    };
    for si in [
        with_ports(
            "web",
            "[{name: metrics, port: 9090}, {name: http, port: 80}]",
        ),
        with_ports("api", "[{port: 8080, protocol: TCP}]"),
        with_ports("fallback", "[{port: 80}]"),
    ] {
        f.imports.insert(crate::watch::key(si.as_ref()), si);
    }
    let c = refs(&f);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", RESOLVED_REFS)
    );
    // a typo in a port name, and a UDP port of that number, are not ports the proxy serves
    f.imports.insert(
        ("demo".into(), "api".into()),
        with_ports("api", "[{port: 8080, protocol: UDP}, {port: 80}]"),
    );
    let mut m = mci("causeway", "");
    m.spec.rules.as_mut().unwrap()[0]
        .http
        .as_mut()
        .unwrap()
        .paths[0]
        .backend
        .service
        .as_mut()
        .unwrap()
        .port = Some(yaml("{name: htp}"));
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!("should be ours")
    };
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == RESOLVED_REFS)
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.message.as_str()),
        (
            "False",
            "causeway-proxy answers 503 for: \
             backend api port 8080: ServiceImport demo/api has no TCP port 8080; \
             backend web port htp: ServiceImport demo/web has no TCP port htp"
        )
    );
}

/// A `resource` backend passes Karmada's validation, but causeway-proxy answers 503 for
/// it: `ResolvedRefs` says so, each once, with what to use instead.
#[test]
fn resource_backends_are_reported_unresolved() {
    let f = Fixture::new();
    let m: MultiClusterIngress = yaml(
        "apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {name: demo, namespace: demo, generation: 1}
spec:
  ingressClassName: causeway
  defaultBackend: {resource: {kind: Bucket, name: b}}
  rules:
  - host: demo.example.com
    http:
      paths:
      - {path: /a, pathType: Prefix, backend: {resource: {apiGroup: storage.example.com, kind: Bucket, name: a}}}
      - {path: /b, pathType: Prefix, backend: {resource: {kind: Bucket, name: b}}}
",
    );
    let Desired::Ours { status, .. } = f.verdict(&m) else {
        panic!("should be ours")
    };
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == RESOLVED_REFS)
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        (
            "False",
            BACKEND_NOT_FOUND,
            "causeway-proxy answers 503 for: \
             resource backend Bucket.storage.example.com/a: resource backends are not supported (causeway-proxy serves Service backends only): use a service backend; \
             resource backend Bucket/b: resource backends are not supported (causeway-proxy serves Service backends only): use a service backend"
        )
    );
}

/// A younger MCI whose rules an older one serves is told: `RulesShadowed` (still
/// Accepted) naming each rule and who serves it, or, when the older ones take
/// everything, `Accepted=False` `Conflicted` (and no addresses: it serves nothing).
#[test]
fn an_mci_that_loses_a_conflict_is_told() {
    let mut f = Fixture::new();
    let with = |name: &str, created: &str, spec: &str| -> Arc<MultiClusterIngress> {
        Arc::new(yaml(&format!(
            "apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {{name: {name}, namespace: demo, generation: 1, creationTimestamp: '{created}'}}
spec:
  ingressClassName: causeway
{spec}"
        )))
    };
    let old = with(
        "old",
        "2026-01-01T00:00:00Z",
        "  rules:
  - host: demo.example.com
    http:
      paths:
      - {path: /web/, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
",
    );
    let mut young = mci("causeway", ", creationTimestamp: '2026-02-01T00:00:00Z'");
    young.spec.default_backend = None;
    let young = Arc::new(young);
    let copy = with(
        "copy",
        "2026-03-01T00:00:00Z",
        "  defaultBackend: {service: {name: web, port: {number: 80}}}
  rules:
  - host: demo.example.com
    http:
      paths:
      - {path: /api, pathType: Exact, backend: {service: {name: api, port: {number: 80}}}}
",
    );
    f.mcis = vec![copy.clone(), young.clone(), old.clone()];
    let accepted = |f: &Fixture, m: &MultiClusterIngress| {
        let Desired::Ours { status, .. } = f.verdict(m) else {
            panic!("should be ours")
        };
        let c = &status.conditions[0];
        assert_eq!(c.type_, ACCEPTED);
        (
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            status.load_balancer.is_some(),
        )
    };
    // the oldest keeps everything, and is not told of the others
    assert_eq!(accepted(&f, &old).1, "Accepted");
    // demo/demo: /web is old's, /api (Exact) its own
    assert_eq!(
        accepted(&f, &young),
        (
            "True".into(),
            RULES_SHADOWED.into(),
            "served by causeway-proxy (IngressClass causeway); not served: path /web (Prefix) of host demo.example.com is served by the older MultiClusterIngress demo/old (give those rules other hosts or paths)".into(),
            true
        )
    );
    // demo/copy: its one path is demo/demo's, and demo/old names its host first
    assert_eq!(
        accepted(&f, &copy),
        (
            "False".into(),
            CONFLICTED.into(),
            "not served: causeway-proxy serves everything it asks for from older MultiClusterIngresses: path /api (Exact) of host demo.example.com is served by the older MultiClusterIngress demo/demo; defaultBackend does not serve host demo.example.com: the older MultiClusterIngress demo/old names it first and decides its default; give its rules other hosts or paths".into(),
            false
        )
    );
    // once the older ones are gone, nothing is said
    f.mcis = vec![copy.clone()];
    assert_eq!(accepted(&f, &copy).1, "Accepted");
}
