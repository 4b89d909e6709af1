//! Table tests for [`super::build`]: class selection, validation, MCI-4 resolution,
//! MCI-5 precedence across MCIs, and state that survives rebuilds. The helpers are
//! shared with the HTTPRoute tables (`gateway_table_tests.rs`).

use super::*;
use serde_json::{Value, json};

fn class(name: &str, controller: &str, default: bool) -> IngressClass {
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": if default {
            json!({"ingressclass.kubernetes.io/is-default-class": "true"})
        } else { json!({}) }},
        "spec": {"controller": controller}
    }))
    .unwrap()
}

pub(super) fn mci(name: &str, created: &str, spec: Value) -> Arc<MultiClusterIngress> {
    mci_ann(name, created, spec, json!({}))
}

pub(super) fn mci_ann(
    name: &str,
    created: &str,
    spec: Value,
    ann: Value,
) -> Arc<MultiClusterIngress> {
    mci_in("ns", name, created, spec, ann)
}

fn mci_in(
    ns: &str,
    name: &str,
    created: &str,
    spec: Value,
    ann: Value,
) -> Arc<MultiClusterIngress> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "networking.karmada.io/v1alpha1",
            "kind": "MultiClusterIngress",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created, "annotations": ann},
            "spec": spec
        }))
        .unwrap(),
    )
}

pub(super) fn backend(svc: &str, port: Value) -> Value {
    json!({"service": {"name": svc, "port": port}})
}

pub(super) fn import(svc: &str, ports: Value) -> Arc<ServiceImport> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": svc, "namespace": "ns"},
            "spec": {"type": "ClusterSetIP", "ports": ports}
        }))
        .unwrap(),
    )
}

pub(super) fn export(svc: &str, cluster: &str, ports: Value) -> Arc<ExportedService> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "ExportedService",
            "metadata": {"name": format!("{svc}.{cluster}"), "namespace": "ns"},
            "spec": {"cluster": cluster, "service": svc, "ports": ports}
        }))
        .unwrap(),
    )
}

pub(super) fn slice(
    svc: &str,
    cluster: &str,
    ports: Value,
    endpoints: Value,
) -> Arc<EndpointSlice> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("{svc}-{cluster}"), "namespace": "ns", "labels": {
                SERVICE_NAME: svc, SOURCE_CLUSTER: cluster}},
            "addressType": "IPv4",
            "ports": ports,
            "endpoints": endpoints
        }))
        .unwrap(),
    )
}

pub(super) fn ep(ip: &str, ready: Option<bool>, terminating: bool) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": ready, "terminating": terminating}})
}

/// Service `web` (ports http/80 and admin/9000) exported by east, west and north;
/// north does not export `admin`.
pub(super) fn services() -> Snapshot {
    let ports = json!([{"name": "http", "protocol": "TCP", "port": 80}, {"name": "admin", "protocol": "TCP", "port": 9000}]);
    let eps = json!([{"name": "http", "protocol": "TCP", "port": 8080}, {"name": "admin", "protocol": "TCP", "port": 9090}]);
    Snapshot {
        ingress_classes: vec![class(
            "causeway",
            causeway_crds::well_known::INGRESS_CONTROLLER,
            true,
        )],
        service_imports: vec![import("web", ports.clone())],
        exported_services: vec![
            export("web", "east", ports.clone()),
            export("web", "west", ports.clone()),
            export(
                "web",
                "north",
                json!([{"name": "http", "protocol": "TCP", "port": 80}]),
            ),
        ],
        endpoint_slices: vec![
            slice(
                "web",
                "east",
                eps.clone(),
                json!([
                    ep("10.1.0.1", Some(true), false),
                    ep("10.1.0.2", None, false)
                ]),
            ),
            slice(
                "web",
                "west",
                eps.clone(),
                json!([
                    ep("10.2.0.1", Some(true), false),
                    ep("10.2.0.2", Some(false), false),
                    ep("10.2.0.3", Some(true), true)
                ]),
            ),
            slice(
                "web",
                "north",
                eps,
                json!([ep("10.3.0.1", Some(true), false)]),
            ),
            // A cluster that has slices but no ExportedService serves nothing.
            slice(
                "web",
                "south",
                json!([{"name": "http", "port": 8080}]),
                json!([ep("10.4.0.1", Some(true), false)]),
            ),
        ],
        ..Default::default()
    }
}

pub(super) fn table(s: &Snapshot) -> (RouteTable, Registries) {
    let shared = Registries::new(Arc::new(Metrics::new()));
    (build(s, &BuildOptions::default(), &shared), shared)
}

pub(super) fn addrs(t: &RouteTable, host: &str, path: &str) -> Result<Vec<String>, String> {
    match &t.route(host, path).ok_or("404")?.target {
        Target::Unavailable(r) => Err(r.to_string()),
        Target::Gateway(_) => Err("HTTPRoute rules".into()),
        Target::Backend(b) => {
            let mut v: Vec<String> = b
                .balancer
                .endpoints()
                .iter()
                .map(|e| format!("{}={}", e.cluster, e.addr))
                .collect();
            v.sort();
            Ok(v)
        }
    }
}

#[test]
fn resolves_ready_endpoints_of_serving_clusters() {
    let mut s = services();
    s.mcis = vec![mci(
        "a",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"name": "http"}))},
            {"path": "/admin", "pathType": "Prefix", "backend": backend("web", json!({"number": 9000}))},
        ]}}]}),
    )];
    let (t, _) = table(&s);
    assert_eq!(t.served, vec!["ns/a"]);
    assert_eq!(
        addrs(&t, "x", "/").unwrap(),
        vec![
            "east=10.1.0.1:8080",
            "east=10.1.0.2:8080",
            "north=10.3.0.1:8080",
            "west=10.2.0.1:8080"
        ]
    );
    // Port by number, target port from the slice; north does not serve admin.
    assert_eq!(
        addrs(&t, "x", "/admin/x").unwrap(),
        vec![
            "east=10.1.0.1:9090",
            "east=10.1.0.2:9090",
            "west=10.2.0.1:9090"
        ]
    );
    assert_eq!(t.endpoints, 7);
}

#[test]
fn serving_terminating_endpoints_only_when_none_is_ready() {
    let mut s = services();
    s.mcis = vec![mci(
        "a",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": backend("web", json!({"name": "http"}))}),
    )];
    let eps = json!([{"name": "http", "protocol": "TCP", "port": 8080}]);
    let draining = |ip: &str, serving: bool| json!({"addresses": [ip], "conditions": {"ready": false, "serving": serving, "terminating": true}});
    // A ready endpoint somewhere: terminating ones (serving or not) get nothing.
    s.endpoint_slices = vec![
        slice(
            "web",
            "east",
            eps.clone(),
            json!([draining("10.1.0.9", true)]),
        ),
        slice(
            "web",
            "west",
            eps.clone(),
            json!([ep("10.2.0.1", Some(true), false)]),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "x", "/").unwrap(), vec!["west=10.2.0.1:8080"]);
    // None ready: the serving terminating endpoints, in every cluster, take the
    // traffic; terminating ones that stopped serving still get nothing.
    s.endpoint_slices = vec![
        slice(
            "web",
            "east",
            eps.clone(),
            json!([draining("10.1.0.9", true), draining("10.1.0.8", false)]),
        ),
        slice(
            "web",
            "west",
            eps.clone(),
            json!([draining("10.2.0.9", true)]),
        ),
        slice(
            "web",
            "north",
            eps.clone(),
            json!([ep("10.3.0.1", Some(false), false)]),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(
        addrs(&t, "x", "/").unwrap(),
        vec!["east=10.1.0.9:8080", "west=10.2.0.9:8080"]
    );
    // None serving either: 503.
    s.endpoint_slices = vec![slice(
        "web",
        "east",
        eps,
        json!([draining("10.1.0.8", false)]),
    )];
    let (t, _) = table(&s);
    assert!(addrs(&t, "x", "/").unwrap().is_empty());
}

#[test]
fn traffic_block_clusters_get_nothing() {
    let mut s = services();
    let mut m = (*mci(
        "a",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": backend("web", json!({"name": "http"}))}),
    ))
    .clone();
    m.status = Some(causeway_crds::mci::MultiClusterIngressStatus {
        traffic_block_clusters: vec!["east".into(), "north".into()],
        ..Default::default()
    });
    s.mcis = vec![Arc::new(m)];
    let (t, _) = table(&s);
    assert_eq!(addrs(&t, "any", "/x").unwrap(), vec!["west=10.2.0.1:8080"]);
}

#[test]
fn unresolvable_backends_and_no_route() {
    let mut s = services();
    s.mcis = vec![mci(
        "a",
        "2026-01-01T00:00:00Z",
        json!({"rules": [{"host": "foo.com", "http": {"paths": [
            {"path": "/missing", "pathType": "Prefix", "backend": backend("nope", json!({"number": 80}))},
            {"path": "/badport", "pathType": "Prefix", "backend": backend("web", json!({"name": "grpc"}))},
            {"path": "/ok", "pathType": "Exact", "backend": backend("web", json!({"number": 80}))},
        ]}}]}),
    )];
    let (t, _) = table(&s);
    assert!(
        addrs(&t, "foo.com", "/missing")
            .unwrap_err()
            .contains("no ServiceImport ns/nope")
    );
    assert!(
        addrs(&t, "foo.com", "/badport")
            .unwrap_err()
            .contains("no TCP port grpc")
    );
    assert_eq!(addrs(&t, "foo.com", "/ok").unwrap().len(), 4);
    assert_eq!(addrs(&t, "foo.com", "/ok/").unwrap_err(), "404");
    assert_eq!(addrs(&t, "bar.com", "/ok").unwrap_err(), "404");
}

#[test]
fn classes_and_validation_decide_what_is_served() {
    let mut s = services();
    s.ingress_classes
        .push(class("nginx", "k8s.io/ingress-nginx", false));
    let good = json!({"defaultBackend": backend("web", json!({"number": 80}))});
    let mut other = good.clone();
    other["ingressClassName"] = json!("nginx");
    let mut missing = good.clone();
    missing["ingressClassName"] = json!("gone");
    let invalid = json!({"rules": [{"host": "1.2.3.4", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}}]});
    s.mcis = vec![
        mci("good", "2026-01-02T00:00:00Z", good),
        mci("other", "2026-01-01T00:00:00Z", other),
        mci("missing", "2026-01-01T00:00:00Z", missing),
        mci("invalid", "2026-01-01T00:00:00Z", invalid),
    ];
    let (t, _) = table(&s);
    assert_eq!(t.served, vec!["ns/good"]);
    let ignored: Vec<&str> = t.ignored.iter().map(|i| i.mci.as_str()).collect();
    assert_eq!(ignored, vec!["ns/invalid", "ns/missing", "ns/other"]);
    assert!(addrs(&t, "x", "/").is_ok());
}

#[test]
fn oldest_mci_wins_conflicts_and_the_default() {
    let mut s = services();
    s.service_imports.push(import("api", json!([{"port": 80}])));
    let rule = |svc: &str| json!({"rules": [{"host": "foo.com", "http": {"paths": [{"path": "/x", "pathType": "Prefix", "backend": backend(svc, json!({"number": 80}))}]}}], "defaultBackend": backend(svc, json!({"number": 80}))});
    s.mcis = vec![
        mci("young", "2026-02-01T00:00:00Z", rule("web")),
        mci("old", "2026-01-01T00:00:00Z", rule("api")),
    ];
    let (t, _) = table(&s);
    let r = t.route("foo.com", "/x").unwrap();
    assert_eq!(&*r.mci, "ns/old");
    // The host's default is the oldest MCI's with a rule for it; both MCIs have rules,
    // so neither is the catch-all.
    assert_eq!(&*t.route("foo.com", "/other").unwrap().mci, "ns/old");
    assert!(t.route("zzz", "/").is_none());
    // said as the MCI controller says it on the younger one (`attach::mci_claims`)
    assert_eq!(
        t.warnings,
        [
            "ns/young: path /x (Prefix) of host foo.com is served by the older MultiClusterIngress ns/old",
            "ns/young: defaultBackend does not serve host foo.com: the older MultiClusterIngress ns/old names it first and decides its default",
        ]
    );
    // Rule-less MCIs: the oldest one's default is the catch-all, the others warned.
    s.mcis = vec![
        mci(
            "young",
            "2026-02-01T00:00:00Z",
            json!({"defaultBackend": backend("web", json!({"number": 80}))}),
        ),
        mci(
            "old",
            "2026-01-01T00:00:00Z",
            json!({"defaultBackend": backend("api", json!({"number": 80}))}),
        ),
    ];
    let (t, _) = table(&s);
    assert_eq!(&*t.route("zzz", "/").unwrap().mci, "ns/old");
    assert_eq!(
        t.warnings,
        [
            "ns/young: defaultBackend is not the catch-all for hosts no rule names: the older MultiClusterIngress ns/old provides it"
        ]
    );
}

/// A `resource` backend (Karmada's validation accepts one) gets a 503 that says what to
/// use instead, the words of the MCI's `ResolvedRefs`.
#[test]
fn resource_backends_get_a_503_that_says_why() {
    let mut s = services();
    s.mcis = vec![mci(
        "r",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": {"resource": {"kind": "Bucket", "name": "b"}}}),
    )];
    let (t, _) = table(&s);
    assert_eq!(
        addrs(&t, "x", "/").unwrap_err(),
        "resource backend Bucket/b: resource backends are not supported (causeway-proxy serves Service backends only): use a service backend"
    );
}

/// An MCI's defaultBackend is the default of the hosts its rules name (rules with or
/// without http paths), as ingress-nginx does; only an MCI without rules (or with
/// rules without host) provides the catch-all for hosts no rule names.
#[test]
fn a_default_backend_serves_its_own_mcis_hosts() {
    let mut s = services();
    let paths = |path: &str, svc: &str| json!({"paths": [{"path": path, "pathType": "Prefix", "backend": backend(svc, json!({"number": 80}))}]});
    let fallback = |svc: &str| backend(svc, json!({"number": 80}));
    s.mcis = vec![
        mci_in(
            "team-b",
            "b",
            "2026-01-02T00:00:00Z",
            json!({"rules": [{"host": "b.ex", "http": paths("/api", "b-api")}], "defaultBackend": fallback("b-fallback")}),
            json!({}),
        ),
        mci_in(
            "team-a",
            "a",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"host": "a.ex", "http": paths("/", "a-web")}], "defaultBackend": fallback("a-fallback")}),
            json!({}),
        ),
        mci_in(
            "team-c",
            "c",
            "2026-01-03T00:00:00Z",
            json!({"rules": [{"host": "c.ex"}], "defaultBackend": fallback("c-fallback")}),
            json!({}),
        ),
        mci_in(
            "team-d",
            "d",
            "2026-01-04T00:00:00Z",
            json!({"rules": [{"host": "d.ex", "http": paths("/d", "d-web")}]}),
            json!({}),
        ),
    ];
    // The backend a request goes to (none of these Services exist: the reason names it).
    let to = |t: &RouteTable, host: &str, path: &str| match addrs(t, host, path) {
        Err(why) => why.split_whitespace().nth(2).unwrap_or(&why).to_string(),
        Ok(v) => format!("{v:?}"),
    };
    let (t, _) = table(&s);
    assert_eq!(to(&t, "b.ex", "/api/x"), "team-b/b-api");
    assert_eq!(to(&t, "b.ex", "/other"), "team-b/b-fallback");
    assert_eq!(to(&t, "a.ex", "/other"), "team-a/a-web");
    assert_eq!(to(&t, "c.ex", "/x"), "team-c/c-fallback");
    assert_eq!(to(&t, "d.ex", "/x"), "404");
    assert_eq!(to(&t, "zzz", "/"), "404");
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    // A rule-less MCI's default catches hosts no rule names, and only those.
    s.mcis.push(mci_in(
        "team-e",
        "e",
        "2026-01-05T00:00:00Z",
        json!({"defaultBackend": fallback("e-fallback")}),
        json!({}),
    ));
    // A younger MCI with rules for b.ex does not change its default.
    s.mcis.push(mci_in(
        "team-f",
        "f",
        "2026-01-06T00:00:00Z",
        json!({"rules": [{"host": "b.ex", "http": paths("/f", "f-web")}], "defaultBackend": fallback("f-fallback")}),
        json!({}),
    ));
    let (t, _) = table(&s);
    assert_eq!(to(&t, "zzz", "/"), "team-e/e-fallback");
    assert_eq!(to(&t, "d.ex", "/x"), "404");
    assert_eq!(to(&t, "b.ex", "/other"), "team-b/b-fallback");
    assert_eq!(to(&t, "b.ex", "/f"), "team-f/f-web");
    assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
    assert!(
        t.warnings[0].contains("team-f/f: defaultBackend does not serve host b.ex"),
        "{:?}",
        t.warnings
    );
}

/// MCIs of one age go in the alphabetical order of `namespace/name` (the Gateway API's
/// tie-break, the one the status controllers use): `team-b/api` before `team/web`.
#[test]
fn mcis_of_one_age_go_by_namespace_slash_name() {
    let mut s = services();
    let t = "2026-01-01T00:00:00Z";
    let spec = |svc: &str| json!({"rules": [{"host": "a.ex", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend(svc, json!({"number": 80}))}]}}]});
    s.mcis = vec![
        mci_in("team", "web", t, spec("web"), json!({})),
        mci_in("team-b", "api", t, spec("web"), json!({})),
    ];
    let (t, _) = table(&s);
    assert_eq!(t.served, vec!["team-b/api", "team/web"]);
    assert_eq!(&*t.route("a.ex", "/").unwrap().mci, "team-b/api");
}

#[test]
fn host_precedence_across_mcis() {
    let mut s = services();
    let r = |host: &str, path: &str, kind: &str| json!({"rules": [{"host": host, "http": {"paths": [{"path": path, "pathType": kind, "backend": backend("web", json!({"number": 80}))}]}}]});
    s.mcis = vec![
        mci(
            "exact",
            "2026-01-03T00:00:00Z",
            r("a.foo.com", "/", "Prefix"),
        ),
        mci(
            "wild",
            "2026-01-01T00:00:00Z",
            r("*.foo.com", "/", "ImplementationSpecific"),
        ),
        mci("ex2", "2026-01-02T00:00:00Z", r("a.foo.com", "/p", "Exact")),
    ];
    let (t, _) = table(&s);
    let who = |h: &str, p: &str| t.route(h, p).map(|r| r.mci.to_string());
    assert_eq!(who("a.foo.com", "/p").as_deref(), Some("ns/ex2"));
    assert_eq!(who("a.foo.com", "/q").as_deref(), Some("ns/exact"));
    assert_eq!(who("b.foo.com", "/q").as_deref(), Some("ns/wild"));
    assert_eq!(who("foo.com", "/q"), None);
    assert_eq!(who("x.b.foo.com", "/q"), None);
}

#[test]
fn ssl_redirect_only_for_tls_hosts_and_tls_entries() {
    let mut s = services();
    s.mcis = vec![mci_ann(
        "a",
        "2026-01-01T00:00:00Z",
        json!({
        "tls": [{"hosts": ["secure.foo.com"], "secretName": "cert"}],
        "rules": [
            {"host": "secure.foo.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}},
            {"host": "plain.foo.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}}
        ]}),
        json!({"causeway.io/ssl-redirect": "true", "causeway.io/retries": "many"}),
    )];
    let (t, _) = table(&s);
    assert!(t.route("secure.foo.com", "/").unwrap().ssl_redirect);
    assert!(!t.route("plain.foo.com", "/").unwrap().ssl_redirect);
    assert_eq!(
        t.tls,
        vec![TlsEntry {
            host: "secure.foo.com".into(),
            namespace: "ns".into(),
            secret: "cert".into(),
            if_covered: false,
        }]
    );
    assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
}

/// A `tls[]` entry without hosts names the MCI's rule hosts, to be served if its
/// certificate covers them (`tls::Certs::build` checks); an older MCI's entry without
/// hosts does not keep a younger one's `tls[].hosts` out.
#[test]
fn tls_entries_without_hosts_name_the_rule_hosts() {
    let mut s = services();
    let rule = |h: &str| json!({"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"number": 80}))}]}});
    s.mcis = vec![
        mci(
            "old",
            "2026-01-01T00:00:00Z",
            json!({"tls": [{"secretName": "ex-tls"}], "rules": [rule("app.ex.com"), rule("*.w.ex.com"), rule("app.ex.com")]}),
        ),
        mci(
            "young",
            "2026-01-02T00:00:00Z",
            json!({"tls": [{"hosts": ["app.ex.com"], "secretName": "app-tls"}], "rules": [rule("app.ex.com")]}),
        ),
    ];
    let (t, _) = table(&s);
    let e = |host: &str, secret: &str, if_covered: bool| TlsEntry {
        host: host.into(),
        namespace: "ns".into(),
        secret: secret.into(),
        if_covered,
    };
    assert_eq!(
        t.tls,
        vec![
            e("app.ex.com", "ex-tls", true),
            e("*.w.ex.com", "ex-tls", true),
            e("app.ex.com", "app-tls", false),
        ]
    );
}

#[test]
fn endpoint_state_survives_rebuilds() {
    let mut s = services();
    s.mcis = vec![mci(
        "a",
        "2026-01-01T00:00:00Z",
        json!({"defaultBackend": backend("web", json!({"number": 80}))}),
    )];
    let shared = Registries::new(Arc::new(Metrics::new()));
    let t1 = build(&s, &BuildOptions::default(), &shared);
    let t2 = build(&s, &BuildOptions::default(), &shared);
    let first = |t: &RouteTable| match &t.route("x", "/").unwrap().target {
        Target::Backend(b) => (b.balancer.endpoints()[0].clone(), b.circuit.clone()),
        t => panic!("{t:?}"),
    };
    let (e1, c1) = first(&t1);
    let (e2, c2) = first(&t2);
    assert!(Arc::ptr_eq(&e1, &e2));
    assert!(Arc::ptr_eq(&c1, &c2));
}

#[test]
fn metric_series_leave_with_their_backend_or_cluster() {
    let mut s = services();
    let spec = |svc: &str| json!({"defaultBackend": backend(svc, json!({"number": 80}))});
    s.mcis = vec![mci("a", "2026-01-01T00:00:00Z", spec("web"))];
    let metrics = Arc::new(Metrics::new());
    let shared = Registries::new(metrics.clone());
    let series = |cluster: &str| {
        metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("causeway_proxy_requests_total{")
                    && l.contains(&format!("cluster=\"{cluster}\""))
            })
            .count()
    };
    let _t = build(&s, &BuildOptions::default(), &shared);
    // Port 80 is served by east, west and north: five status classes each.
    assert_eq!((series("east"), series("west"), series("north")), (5, 5, 5));
    assert!(
        metrics
            .encode()
            .contains("causeway_proxy_request_duration_seconds_count{mci=\"ns/a\"")
    );
    // west stops exporting: its series go, the others stay.
    s.exported_services.retain(|e| e.spec.cluster != "west");
    let _t = build(&s, &BuildOptions::default(), &shared);
    assert_eq!((series("east"), series("west"), series("north")), (5, 0, 5));
    // The MCI goes: all of its series go.
    s.mcis.clear();
    let _t = build(&s, &BuildOptions::default(), &shared);
    let text = metrics.encode();
    assert!(!text.contains("mci=\"ns/a\""), "{text}");
}

#[test]
fn builds_many_mcis_quickly_enough() {
    // 200 MCIs × 10 endpoints (the bench does 1,000 × 10,000 in release).
    let mut s = Snapshot {
        ingress_classes: vec![class(
            "causeway",
            causeway_crds::well_known::INGRESS_CONTROLLER,
            true,
        )],
        ..Default::default()
    };
    for i in 0..200 {
        let svc = format!("svc{i}");
        s.service_imports
            .push(import(&svc, json!([{"name": "http", "port": 80}])));
        s.exported_services
            .push(export(&svc, "east", json!([{"name": "http", "port": 80}])));
        let eps: Vec<Value> = (0..10)
            .map(|j| {
                ep(
                    &format!("10.{}.{}.{j}", i / 200, i % 200),
                    Some(true),
                    false,
                )
            })
            .collect();
        s.endpoint_slices.push(slice(
            &svc,
            "east",
            json!([{"name": "http", "port": 8080}]),
            json!(eps),
        ));
        s.mcis.push(mci(&format!("m{i}"), "2026-01-01T00:00:00Z", json!({"rules": [{"host": format!("h{i}.foo.com"), "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend(&svc, json!({"name": "http"}))}]}}]})));
    }
    let (t, _) = table(&s);
    assert_eq!((t.served.len(), t.endpoints, t.routes()), (200, 2000, 200));
    assert!(t.route("h7.foo.com", "/").is_some());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Arbitrary (mostly invalid) MCIs and annotation values never make a build panic,
    /// and every request finds a route or none without panicking.
    #[test]
    fn arbitrary_input_never_panics(
        rules in proptest::collection::vec(
            ("[a-z*.]{0,8}", "[/a-z.%]{0,8}", "(Exact|Prefix|ImplementationSpecific|Bogus)", "[a-z]{0,4}", 0i32..100_000),
            0..6,
        ),
        ann in proptest::collection::vec(("(load-balancer|hash-on|cluster-weights|connect-timeout|retries|ssl-redirect|health-check-path|max-requests)", "\\PC{0,12}"), 0..4),
        probe in ("[a-z.]{0,10}", "[/a-z]{0,10}"),
    ) {
        let mut s = services();
        let paths: Vec<Value> = rules
            .iter()
            .map(|(host, path, kind, port_name, port)| {
                let port = if port_name.is_empty() { json!({"number": port}) } else { json!({"name": port_name}) };
                json!({"host": host, "http": {"paths": [{"path": path, "pathType": kind, "backend": backend("web", port)}]}})
            })
            .collect();
        let annotations: serde_json::Map<String, Value> = ann
            .iter()
            .map(|(k, v)| (format!("causeway.io/{k}"), json!(v)))
            .collect();
        s.mcis = vec![
            mci_ann("fuzz", "2026-01-01T00:00:00Z", json!({"rules": paths}), Value::Object(annotations)),
            mci("ok", "2026-01-02T00:00:00Z", json!({"defaultBackend": backend("web", json!({"number": 80}))})),
        ];
        let (t, _) = table(&s);
        proptest::prop_assert!(t.served.contains(&"ns/ok".to_string()));
        let _ = t.route(&probe.0, &probe.1);
    }
}

#[test]
fn cluster_local_backends_use_only_the_proxys_cluster() {
    let mut s = services();
    let local = |scope: &str| {
        mci_ann(
            "a",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend("web", json!({"name": "http"}))},
                {"path": "/admin", "pathType": "Prefix", "backend": backend("web", json!({"name": "admin"}))},
            ]}}]}),
            json!({"causeway.io/backend-scope": scope}),
        )
    };
    let build_at = |s: &Snapshot, cluster: Option<&str>| {
        let shared = Registries::new(Arc::new(Metrics::new()));
        let opts = BuildOptions {
            local_cluster: cluster.map(String::from),
            ..Default::default()
        };
        build(s, &opts, &shared)
    };
    s.mcis = vec![local("cluster-local")];
    // a proxy in east: east's endpoints only
    let t = build_at(&s, Some("east"));
    assert_eq!(
        addrs(&t, "x", "/").unwrap(),
        vec!["east=10.1.0.1:8080", "east=10.1.0.2:8080"]
    );
    // a proxy in north, which does not export the admin port: 503 saying why
    let t = build_at(&s, Some("north"));
    assert_eq!(addrs(&t, "x", "/").unwrap(), vec!["north=10.3.0.1:8080"]);
    let why = addrs(&t, "x", "/admin").unwrap_err();
    assert!(
        why.contains("no ready endpoints of ns/web in this proxy's cluster north"),
        "{why}"
    );
    // a cluster that has slices but exports nothing serves nothing, locally either
    let t = build_at(&s, Some("south"));
    assert!(addrs(&t, "x", "/").is_err());
    // a proxy that does not know its cluster cannot pick: 503 naming the flag
    let t = build_at(&s, None);
    let why = addrs(&t, "x", "/").unwrap_err();
    assert!(why.contains("causeway-proxy --cluster"), "{why}");
    // the proxy's cluster blocked (TrafficControl): said so
    let mut blocked = (*local("cluster-local")).clone();
    blocked.status = Some(causeway_crds::mci::MultiClusterIngressStatus {
        traffic_block_clusters: vec!["east".into()],
        ..Default::default()
    });
    s.mcis = vec![Arc::new(blocked)];
    let why = addrs(&build_at(&s, Some("east")), "x", "/").unwrap_err();
    assert!(
        why.contains("this proxy's cluster east gets no traffic (trafficBlockClusters"),
        "{why}"
    );
    // clusterset (the default, or said): every exporting cluster, whatever the proxy's
    s.mcis = vec![local("clusterset")];
    assert_eq!(
        addrs(&build_at(&s, Some("east")), "x", "/").unwrap().len(),
        4
    );
}
