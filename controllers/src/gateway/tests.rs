//! Table tests for [`desired`]: the spec's conditions and reasons on GatewayClasses,
//! Gateways and HTTPRoutes.

use super::*;
use causeway_crds::well_known::{SYSTEM_NAMESPACE, annotations};
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

fn obj<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap()
}

struct Fixture {
    classes: Vec<Arc<GatewayClass>>,
    gateways: Vec<Arc<Gateway>>,
    routes: Vec<Arc<HTTPRoute>>,
    grants: Vec<Arc<ReferenceGrant>>,
    imports: BTreeMap<(String, String), Arc<ServiceImport>>,
    proxies: Vec<Arc<Lease>>,
    mesh_previous: BTreeMap<causeway_crds::gateway::mesh::MeshParent, u16>,
    status_ours: BTreeSet<(String, String)>,
    mcis: Vec<Arc<MultiClusterIngress>>,
    ingress_classes: Vec<IngressClass>,
}

impl Fixture {
    /// Classes `causeway` (ours) and `other`; Gateway `infra/gw` (ours) with listeners
    /// `http` (all namespaces, `*.example.com`), `same` (its namespace only) and `tls`
    /// (HTTPS); Gateway `infra/theirs` of `other`; ServiceImport `app/web`; one live proxy.
    fn new() -> Self {
        let class = |name: &str, ctl: &str| {
            obj(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": name, "generation": 2}, "spec": {"controllerName": ctl}}),
            )
        };
        let gateway = |name: &str, class: &str| {
            obj(
                json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": name, "namespace": "infra", "generation": 3},
                "spec": {"gatewayClassName": class, "listeners": [
                    {"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
                     "allowedRoutes": {"namespaces": {"from": "All"}}},
                    {"name": "same", "port": 81, "protocol": "HTTP"},
                    {"name": "tls", "port": 443, "protocol": "HTTPS"},
                ]}}),
            )
        };
        let import = obj(
            json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "app"},
            "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]}}),
        );
        let renewed = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now());
        let lease = obj(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "causeway-proxy-a", "namespace": SYSTEM_NAMESPACE, "annotations": {
                annotations::PROXY_ADDRESSES: "10.0.0.7", annotations::PROXY_PORTS: "80/http"}},
            "spec": {"leaseDurationSeconds": 15, "renewTime": renewed}}),
        );
        Fixture {
            classes: vec![
                class("causeway", CONTROLLER_NAME),
                class("other", "example.com/other"),
            ],
            gateways: vec![gateway("gw", "causeway"), gateway("theirs", "other")],
            routes: Vec::new(),
            grants: Vec::new(),
            imports: BTreeMap::from([(("app".to_string(), "web".to_string()), import)]),
            proxies: vec![lease],
            mesh_previous: BTreeMap::new(),
            status_ours: BTreeSet::new(),
            mcis: Vec::new(),
            ingress_classes: Vec::new(),
        }
    }

    /// The live proxy serves mesh traffic on `range` (`<ip>:<first>-<last>`).
    fn serve_mesh(&mut self, range: &str) {
        let mut lease = (*self.proxies[0]).clone();
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                causeway_crds::gateway::mesh::PROXY_MESH.into(),
                range.into(),
            );
        self.proxies = vec![Arc::new(lease)];
    }

    fn route(&mut self, name: &str, spec: Value) {
        self.routes.push(obj(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "app", "generation": 5}, "spec": spec}),
        ));
    }

    fn desired(&self) -> Desired {
        let ns = BTreeMap::new();
        desired(&World {
            classes: &self.classes,
            gateways: &self.gateways,
            routes: &self.routes,
            grants: &self.grants,
            imports: &self.imports,
            namespaces: &ns,
            mcis: &self.mcis,
            ingress_classes: &self.ingress_classes,
            proxies: &crate::mci::ProxyLease::read_all(&self.proxies),
            mesh_previous: &self.mesh_previous,
            mesh_reserved: &Default::default(),
            status_ours: &self.status_ours,
            now: now(),
        })
    }
}

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

/// `(type, status, reason)` of a condition.
type Said = (String, String, String);

/// `(type, status, reason)` of each condition.
fn conds(c: &[Condition]) -> Vec<Said> {
    c.iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn c(t: &str, s: &str, r: &str) -> Said {
    (t.into(), s.into(), r.into())
}

#[test]
fn classes_and_gateways_of_ours_get_status() {
    let mut f = Fixture::new();
    f.route(
        "r",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    );
    let d = f.desired();
    assert_eq!(d.classes.keys().collect::<Vec<_>>(), [&key("", "causeway")]);
    let cs = &d.classes[&key("", "causeway")].conditions;
    assert_eq!(conds(cs), [c("Accepted", "True", "Accepted")]);
    assert_eq!(cs[0].observed_generation, Some(2));
    assert_eq!(d.gateways.keys().collect::<Vec<_>>(), [&key("infra", "gw")]);
    let g = &d.gateways[&key("infra", "gw")];
    assert_eq!(
        conds(&g.conditions),
        [
            c("Accepted", "True", "Accepted"),
            c("Programmed", "True", "Programmed")
        ]
    );
    assert_eq!(
        g.addresses,
        [GatewayAddress {
            type_: Some("IPAddress".into()),
            value: "10.0.0.7".into()
        }]
    );
    let l: Vec<(&str, i32, usize)> = g
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.attached_routes, l.supported_kinds.len()))
        .collect();
    // The route attaches to the listener that allows its namespace only.
    assert_eq!(l, [("http", 1, 1), ("same", 0, 1), ("tls", 0, 0)]);
    assert_eq!(
        conds(&g.listeners[2].conditions),
        [
            c("Accepted", "False", "UnsupportedProtocol"),
            c("Programmed", "False", "Invalid"),
            c("ResolvedRefs", "True", "ResolvedRefs"),
            c("Conflicted", "False", "NoConflicts")
        ]
    );
    // No live proxy: not Programmed, no address.
    f.proxies.clear();
    let g = &f.desired().gateways[&key("infra", "gw")];
    assert_eq!(conds(&g.conditions)[1], c("Programmed", "False", "Pending"));
    assert!(g.addresses.is_empty());
}

#[test]
fn route_conditions_per_parent_table() {
    let parent = |extra: Value| {
        let mut p = json!({"name": "gw", "namespace": "infra"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let web = json!([{"name": "web", "port": 80}]);
    let cases: Vec<(&str, Value, [Said; 2])> = vec![
        (
            "ok",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": web}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "si",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [
            {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "section",
            json!({"parentRefs": [parent(json!({"sectionName": "nope"}))], "rules": [{"backendRefs": web}]}),
            [
                c("Accepted", "False", "NoMatchingParent"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "ns",
            json!({"parentRefs": [parent(json!({"sectionName": "same"}))], "rules": [{"backendRefs": web}]}),
            [
                c("Accepted", "False", "NotAllowedByListeners"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "host",
            json!({"parentRefs": [parent(json!({"sectionName": "http"}))], "hostnames": ["a.org"], "rules": [{"backendRefs": web}]}),
            [
                c("Accepted", "False", "NoMatchingListenerHostname"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "regex",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "/.*"}}], "backendRefs": web}]}),
            [
                c("Accepted", "False", "UnsupportedValue"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "missing",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [{"name": "nope", "port": 80}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "BackendNotFound"),
            ],
        ),
        // web has port 80 only: the proxy cannot serve 8080 (finding: ResolvedRefs
        // was True for it)
        (
            "wrong-port",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "BackendNotFound"),
            ],
        ),
        (
            "si-wrong-port",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [
            {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 8080}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "BackendNotFound"),
            ],
        ),
        // the Gateway API: port is required for a Service
        (
            "no-port",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [{"name": "web"}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "UnsupportedValue"),
            ],
        ),
        // a ServiceImport's port may be left out when it has one
        (
            "si-no-port",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [
            {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web"}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "True", "ResolvedRefs"),
            ],
        ),
        (
            "kind",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [{"kind": "ConfigMap", "name": "web"}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "InvalidKind"),
            ],
        ),
        (
            "cross",
            json!({"parentRefs": [parent(json!({}))], "rules": [{"backendRefs": [{"name": "web", "namespace": "other", "port": 80}]}]}),
            [
                c("Accepted", "True", "Accepted"),
                c("ResolvedRefs", "False", "RefNotPermitted"),
            ],
        ),
    ];
    let mut f = Fixture::new();
    for (name, spec, _) in &cases {
        f.route(name, spec.clone());
    }
    // A route of another controller's Gateway only: no status of ours.
    f.route(
        "theirs",
        json!({"parentRefs": [{"name": "theirs", "namespace": "infra"}]}),
    );
    // One that was ours, its parentRef now another controller's Gateway: our entry
    // goes, the other controller's stays.
    f.route(
        "moved",
        json!({"parentRefs": [{"name": "theirs", "namespace": "infra"}]}),
    );
    let theirs = json!({"parentRef": {"name": "theirs", "namespace": "infra"}, "controllerName": "example.com/other", "conditions": []});
    let ours = json!({"parentRef": {"name": "gw", "namespace": "infra"}, "controllerName": CONTROLLER_NAME, "conditions": []});
    let moved = f.routes.last_mut().unwrap();
    Arc::make_mut(moved).status =
        Some(serde_json::from_value(json!({"parents": [ours, theirs.clone()]})).unwrap());
    let d = f.desired();
    assert!(!d.routes.contains_key(&key("app", "theirs")));
    assert_eq!(
        serde_json::to_value(&d.routes[&key("app", "moved")]).unwrap(),
        json!({"parents": [theirs]}),
        "only the other controller's entry is left"
    );
    for (name, _, want) in &cases {
        let s = &d.routes[&key("app", name)];
        assert_eq!(s.parents.len(), 1, "{name}");
        let p = &s.parents[0];
        assert_eq!(p.controller_name, CONTROLLER_NAME);
        assert_eq!(p.parent_ref.name, "gw");
        assert_eq!(
            conds(&p.conditions),
            want.to_vec(),
            "{name}: {:?}",
            p.conditions
        );
        assert!(
            p.conditions
                .iter()
                .all(|c| c.observed_generation == Some(5) && !c.message.is_empty())
        );
    }
}

#[test]
fn a_reference_grant_permits_the_cross_namespace_backend() {
    let mut f = Fixture::new();
    f.imports
        .insert(key("other", "web"), f.imports[&key("app", "web")].clone());
    f.route(
        "cross",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
        "rules": [{"backendRefs": [{"name": "web", "namespace": "other", "port": 80}]}]}),
    );
    f.grants.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "g", "namespace": "other"},
        "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "app"}],
                 "to": [{"group": "", "kind": "Service"}]}}),
    ));
    let d = f.desired();
    let p = &d.routes[&key("app", "cross")].parents[0];
    assert_eq!(
        conds(&p.conditions)[1],
        c("ResolvedRefs", "True", "ResolvedRefs")
    );
}

#[test]
fn transition_times_stay_while_the_status_does() {
    let mut f = Fixture::new();
    f.route(
        "r",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    );
    let mut first = f.desired().routes[&key("app", "r")].clone();
    let old = Time(jiff::Timestamp::UNIX_EPOCH);
    for c in &mut first.parents[0].conditions {
        c.last_transition_time = old.clone();
    }
    let mut r = (*f.routes[0]).clone();
    r.status = Some(first);
    f.routes[0] = Arc::new(r);
    let again = f.desired().routes[&key("app", "r")].clone();
    assert!(
        again.parents[0]
            .conditions
            .iter()
            .all(|c| c.last_transition_time == old)
    );
}

#[test]
fn other_controllers_parent_entries_are_kept() {
    let mut f = Fixture::new();
    f.route(
        "r",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}, {"name": "theirs", "namespace": "infra"}],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
    );
    let theirs: RouteParentStatus = serde_json::from_value(json!({
        "parentRef": {"name": "theirs", "namespace": "infra"},
        "controllerName": "example.com/other",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
            "message": "theirs", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
    .unwrap();
    let mut r = (*f.routes[0]).clone();
    r.status = Some(HTTPRouteStatus {
        parents: vec![theirs.clone()],
    });
    f.routes[0] = Arc::new(r);
    let status = f.desired().routes[&key("app", "r")].clone();
    let ours: Vec<_> = status
        .parents
        .iter()
        .filter(|p| p.controller_name == CONTROLLER_NAME)
        .map(|p| p.parent_ref.name.clone())
        .collect();
    assert_eq!(ours, ["gw"], "only our Gateway gets our entry");
    assert!(
        status.parents.contains(&theirs),
        "the other controller's entry stays: {:?}",
        status.parents
    );
}

/// GW-4: a route whose parent is ServiceImport app/web is Pending until a causeway-proxy
/// serves mesh traffic; then Accepted, its port gets a mesh port of the proxy's range,
/// written with the proxy's address on the hub ServiceImport; a port the full range
/// cannot give waits; a route gone takes the annotations away.
#[test]
fn mesh_routes_get_mesh_ports_from_the_proxies() {
    use causeway_crds::gateway::mesh::{MESH_ADDRESSES, MESH_PORTS};
    let mut f = Fixture::new();
    let mesh_route = json!({
        "parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web"}],
        "rules": [{"backendRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}]}]});
    f.route("canary", mesh_route.clone());
    let accepted = |d: &Desired, route: &str| {
        let st = &d.routes[&key("app", route)].parents[0];
        let a = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Accepted")
            .unwrap();
        (a.status.clone(), a.reason.clone(), a.message.clone())
    };
    // no proxy serves mesh traffic: Pending, and no annotation
    let d = f.desired();
    let (status, reason, message) = accepted(&d, "canary");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Pending"));
    assert!(message.contains("--listen-mesh"), "{message}");
    assert!(d.mesh.is_empty());
    // a proxy with a range of one port
    f.serve_mesh("127.0.0.9:15000-15000");
    let d = f.desired();
    assert_eq!(
        accepted(&d, "canary"),
        (
            "True".to_string(),
            "Accepted".to_string(),
            "captures the traffic to ServiceImport app/web port 80 (mesh port 15000) through causeway-proxy at 127.0.0.9".to_string()
        )
    );
    let want = &d.mesh[&key("app", "web")];
    assert_eq!(want[MESH_PORTS].as_deref(), Some("80=15000"));
    assert_eq!(want[MESH_ADDRESSES].as_deref(), Some("127.0.0.9"));
    // written: nothing more to change
    let mut si = (*f.imports[&key("app", "web")]).clone();
    si.metadata.annotations = Some(
        want.iter()
            .map(|(k, v)| (k.clone(), v.clone().unwrap()))
            .collect(),
    );
    f.imports.insert(key("app", "web"), Arc::new(si.clone()));
    assert!(f.desired().mesh.is_empty());
    // a second ServiceImport captured: the one port is taken, it waits
    let mut api = si.clone();
    api.metadata.name = Some("api".into());
    api.metadata.annotations = None;
    f.imports.insert(key("app", "api"), Arc::new(api));
    let mut other = mesh_route.clone();
    other["parentRefs"][0]["name"] = json!("api");
    f.route("api", other);
    let d = f.desired();
    let (status, reason, message) = accepted(&d, "api");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Pending"));
    assert!(message.contains("widen it"), "{message}");
    assert_eq!(accepted(&d, "canary").0, "True", "the first keeps its port");
    // the routes gone: the annotations go
    f.routes.clear();
    let d = f.desired();
    assert_eq!(
        d.mesh[&key("app", "web")],
        BTreeMap::from([
            (MESH_ADDRESSES.to_string(), None),
            (MESH_PORTS.to_string(), None)
        ])
    );
}

/// GW-4: the ports this controller gave last win over annotations that have not caught
/// up with its writes, so a new route never takes a port an older one still has.
#[test]
fn mesh_ports_given_last_stay_with_their_services() {
    use causeway_crds::gateway::mesh::MESH_PORTS;
    let mut f = Fixture::new();
    f.serve_mesh("127.0.0.9:15000-15001");
    let mut api = (*f.imports[&key("app", "web")]).clone();
    api.metadata.name = Some("api".into());
    f.imports.insert(key("app", "api"), Arc::new(api));
    for name in ["web", "api"] {
        f.route(
            name,
            json!({"parentRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": name}],
                   "rules": [{"backendRefs": [{"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "web", "port": 80}]}]}),
        );
    }
    // web was given 15001 last round; its annotation has not come back yet
    f.mesh_previous = BTreeMap::from([(("app".to_string(), "web".to_string(), 80), 15001)]);
    let d = f.desired();
    assert_eq!(
        d.mesh[&key("app", "web")][MESH_PORTS].as_deref(),
        Some("80=15001")
    );
    assert_eq!(
        d.mesh[&key("app", "api")][MESH_PORTS].as_deref(),
        Some("80=15000")
    );
    assert_eq!(d.mesh_allocated.unwrap().len(), 2);
}

/// A mesh port given up is reserved for a minute, then free; one given again is not.
#[test]
fn released_mesh_ports_are_reserved_for_a_minute() {
    let p = |n: &str| ("app".to_string(), n.to_string(), 80);
    let t = |s: i64| jiff::Timestamp::from_second(s).unwrap();
    let previous = BTreeMap::from([(p("a"), 15000), (p("b"), 15001)]);
    let allocated = BTreeMap::from([(p("b"), 15001)]);
    let r = mesh::release(&previous, &allocated, BTreeMap::new(), t(100));
    assert_eq!(r, BTreeMap::from([(15000, t(100))]));
    // still reserved 59 s later (not released again), free after 60 s
    let r2 = mesh::release(&allocated, &allocated, r.clone(), t(159));
    assert_eq!(r2, r);
    assert!(mesh::release(&allocated, &allocated, r.clone(), t(160)).is_empty());
    // given again: no longer reserved
    let back = BTreeMap::from([(p("c"), 15000), (p("b"), 15001)]);
    assert!(mesh::release(&allocated, &back, r, t(120)).is_empty());
}

/// A listener's `supportedKinds` are the route kinds it lists that causeway serves
/// (HTTPRoute when it lists none); a listed kind causeway does not serve makes its
/// `ResolvedRefs` False with `InvalidRouteKinds` (conformance GatewayInvalidRouteKind).
#[test]
fn a_listener_lists_the_route_kinds_it_supports_and_says_which_it_cannot() {
    let rows: [(Value, &[&str], &[&str]); 6] = [
        (json!([]), &["HTTPRoute"], &[]),
        (json!([{"kind": "HTTPRoute"}]), &["HTTPRoute"], &[]),
        (
            json!([{"kind": "InvalidRoute"}]),
            &[],
            &["gateway.networking.k8s.io/InvalidRoute"],
        ),
        (
            json!([{"kind": "HTTPRoute"}, {"kind": "TCPRoute"}]),
            &["HTTPRoute"],
            &["gateway.networking.k8s.io/TCPRoute"],
        ),
        (
            json!([{"group": "example.com", "kind": "HTTPRoute"}]),
            &[],
            &["example.com/HTTPRoute"],
        ),
        (
            json!([{"kind": "HTTPRoute"}, {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}]),
            &["HTTPRoute"],
            &[],
        ),
    ];
    for (kinds, supported, unsupported) in rows {
        let l: causeway_crds::gateway::Listener = serde_json::from_value(json!({
            "name": "l", "port": 80, "protocol": "HTTP", "allowedRoutes": {"kinds": kinds}
        }))
        .unwrap();
        let (s, u) = route_kinds(&l);
        assert_eq!(
            s.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(),
            supported,
            "{kinds}"
        );
        assert_eq!(u, unsupported, "{kinds}");
    }
    // in the Gateway's status
    let mut f = Fixture::new();
    let gw = Arc::make_mut(&mut f.gateways[0]);
    gw.spec.listeners[1].allowed_routes = Some(
        serde_json::from_value(json!({"kinds": [{"kind": "HTTPRoute"}, {"kind": "TCPRoute"}]}))
            .unwrap(),
    );
    let g = &f.desired().gateways[&key("infra", "gw")];
    let same = &g.listeners[1];
    assert_eq!(same.supported_kinds, [http_route_kind()]);
    assert_eq!(
        conds(&same.conditions)[2],
        c("ResolvedRefs", "False", "InvalidRouteKinds")
    );
    assert!(
        same.conditions[2]
            .message
            .contains("not gateway.networking.k8s.io/TCPRoute")
    );
}

/// A listener's `attachedRoutes` counts every route its allowedRoutes let in through a
/// parentRef that selects it, hostnames or the route's own support aside (the Gateway
/// API: "solely on AllowedRoutes and ParentRefs", routes not Accepted included), and a
/// route whose two parentRefs reach one listener once.
#[test]
fn attached_routes_count_by_parent_refs_and_allowed_routes_only() {
    let mut f = Fixture::new();
    // a TCP listener taking routes from everywhere: an HTTPRoute is not its kind
    let mut gw = (*f.gateways[0]).clone();
    gw.spec.listeners.push(
        serde_json::from_value(json!({"name": "tcp", "port": 9000, "protocol": "TCP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}))
        .unwrap(),
    );
    f.gateways[0] = Arc::new(gw);
    let web = json!([{"name": "web", "port": 80}]);
    f.route(
        "other-host",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "http"}],
        "hostnames": ["a.org"], "rules": [{"backendRefs": web}]}),
    );
    f.route(
        "twice",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "http"},
            {"name": "gw", "namespace": "infra", "port": 80}],
        "rules": [{"backendRefs": web}]}),
    );
    let d = f.desired();
    let g = &d.gateways[&key("infra", "gw")];
    let l: Vec<(&str, i32)> = g
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.attached_routes))
        .collect();
    assert_eq!(l, [("http", 2), ("same", 0), ("tls", 0), ("tcp", 0)]);
    // the route whose hostname no listener has is counted, and still not Accepted
    let r = &d.routes[&key("app", "other-host")];
    assert_eq!(
        conds(&r.parents[0].conditions)[0],
        c("Accepted", "False", "NoMatchingListenerHostname")
    );
}

/// `spec.addresses`: one no proxy serves at leaves the Gateway not Programmed
/// (AddressNotAssigned), an unsupported type not Accepted (UnsupportedAddress); the
/// proxies' own address is Programmed.
#[test]
fn requested_addresses_are_checked_against_the_proxies() {
    let cases: [(Value, [Said; 2]); 5] = [
        (
            json!([{"value": "10.0.0.7"}]),
            [
                c("Accepted", "True", "Accepted"),
                c("Programmed", "True", "Programmed"),
            ],
        ),
        // the type counts: no proxy has the hostname "10.0.0.7"
        (
            json!([{"type": "Hostname", "value": "10.0.0.7"}]),
            [
                c("Accepted", "True", "Accepted"),
                c("Programmed", "False", "AddressNotAssigned"),
            ],
        ),
        (
            json!([{"type": "IPAddress", "value": "10.0.0.7"}]),
            [
                c("Accepted", "True", "Accepted"),
                c("Programmed", "True", "Programmed"),
            ],
        ),
        (
            json!([{"type": "IPAddress", "value": "203.0.113.9"}]),
            [
                c("Accepted", "True", "Accepted"),
                c("Programmed", "False", "AddressNotAssigned"),
            ],
        ),
        (
            json!([{"type": "example.com/pool", "value": "blue"}]),
            [
                c("Accepted", "False", "UnsupportedAddress"),
                c("Programmed", "False", "Invalid"),
            ],
        ),
    ];
    for (addresses, want) in cases {
        let mut f = Fixture::new();
        let mut gw = (*f.gateways[0]).clone();
        gw.spec.addresses = serde_json::from_value(addresses.clone()).unwrap();
        f.gateways[0] = Arc::new(gw);
        let g = &f.desired().gateways[&key("infra", "gw")];
        assert_eq!(conds(&g.conditions), want, "{addresses}");
    }
    let mut f = Fixture::new();
    let mut gw = (*f.gateways[0]).clone();
    gw.spec.addresses = serde_json::from_value(json!([{"value": "203.0.113.9"}])).unwrap();
    f.gateways[0] = Arc::new(gw);
    let g = &f.desired().gateways[&key("infra", "gw")];
    assert_eq!(
        g.conditions[1].message,
        "spec.addresses asks for IPAddress 203.0.113.9, which no causeway-proxy serves at (they serve at 10.0.0.7): name addresses of the proxies, or leave spec.addresses empty"
    );
}

/// HTTP listeners that cannot be told apart (GatewaySpec.listeners: distinct by port,
/// protocol and hostname) are `Conflicted`, both of each pair, and not served: a route
/// through one of them is not Accepted, and says why; the rest of the Gateway is, and
/// a listener of a protocol causeway-proxy does not serve takes no other offline.
#[test]
fn conflicting_listeners_are_said_and_not_served() {
    let mut f = Fixture::new();
    let gw = Arc::make_mut(&mut f.gateways[0]);
    gw.spec.listeners = serde_json::from_value(json!([
        {"name": "a", "port": 80, "protocol": "HTTP", "hostname": "app.example.com",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "b", "port": 80, "protocol": "HTTP", "hostname": "APP.example.com",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "c", "port": 80, "protocol": "HTTP", "hostname": "other.example.com",
         "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "d", "port": 81, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "e", "port": 81, "protocol": "HTTPS"},
        {"name": "f", "port": 82, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        {"name": "g", "port": 82, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
    ]))
    .unwrap();
    for (name, section) in [("through-a", "a"), ("through-c", "c"), ("through-d", "d")] {
        f.route(
            name,
            json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": section}],
                   "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}),
        );
    }
    let d = f.desired();
    let g = &d.gateways[&key("infra", "gw")];
    let said: Vec<(&str, Said, Said)> = g
        .listeners
        .iter()
        .map(|l| {
            let cs = conds(&l.conditions);
            (l.name.as_str(), cs[1].clone(), cs[3].clone())
        })
        .collect();
    let conflicted = |r: &str| c("Conflicted", "True", r);
    let invalid = c("Programmed", "False", "Invalid");
    assert_eq!(
        said,
        [
            ("a", invalid.clone(), conflicted("HostnameConflict")),
            ("b", invalid.clone(), conflicted("HostnameConflict")),
            (
                "c",
                c("Programmed", "True", "Programmed"),
                c("Conflicted", "False", "NoConflicts")
            ),
            // an HTTPS listener (not served) takes the HTTP one on its port offline no
            // more than a UDP one would: it is refused on its own
            (
                "d",
                c("Programmed", "True", "Programmed"),
                c("Conflicted", "False", "NoConflicts")
            ),
            (
                "e",
                invalid.clone(),
                c("Conflicted", "False", "NoConflicts")
            ),
            ("f", invalid.clone(), conflicted("HostnameConflict")),
            ("g", invalid, conflicted("HostnameConflict")),
        ]
    );
    // the message names both listeners, the same on each, and says what to do
    let message = |i: usize| g.listeners[i].conditions[3].message.clone();
    assert_eq!(message(0), message(1));
    assert_eq!(
        message(0),
        "listeners a and b both take HTTP requests for app.example.com on port 80; give one of them another hostname or port"
    );
    assert!(
        message(5).contains("for any hostname on port 82"),
        "{}",
        message(5)
    );
    // a conflicted listener is still Accepted (it is valid by itself) unless its
    // protocol is not served
    assert_eq!(
        conds(&g.listeners[0].conditions)[0],
        c("Accepted", "True", "Accepted")
    );
    assert_eq!(
        conds(&g.listeners[4].conditions)[0],
        c("Accepted", "False", "UnsupportedProtocol")
    );
    // routes: through a not Accepted, saying why; through c and d Accepted
    let accepted = |route: &str| {
        let p = &d.routes[&key("app", route)].parents[0];
        let a = p.conditions.iter().find(|c| c.type_ == "Accepted").unwrap();
        (a.status.clone(), a.reason.clone(), a.message.clone())
    };
    let (status, reason, message) = accepted("through-a");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NotAllowedByListeners")
    );
    assert!(
        message.contains("not served: listeners a and b both take HTTP requests"),
        "{message}"
    );
    assert_eq!(accepted("through-d").0, "True");
    assert_eq!(accepted("through-c").0, "True");
}

/// A requested address matches a proxy's by value: IPs as IPs (IPv6 in any of its
/// spellings), hostnames without regard to case.
#[test]
fn addresses_match_by_value() {
    let cases = [
        ("10.0.0.7", "10.0.0.7", true),
        ("10.0.0.7", "10.0.0.8", false),
        (
            "2001:db8::1",
            "2001:0db8:0000:0000:0000:0000:0000:0001",
            true,
        ),
        ("2001:db8::1", "2001:DB8::1", true),
        ("2001:db8::1", "2001:db8::2", false),
        // an IPv4-mapped IPv6 address is another address
        ("::ffff:10.0.0.7", "10.0.0.7", false),
        ("GW.Example.com", "gw.example.com", true),
        ("gw.example.com", "gw.example.org", false),
    ];
    for (a, b, want) in cases {
        assert_eq!(same_address(a, b), want, "{a} against {b}");
        assert_eq!(same_address(b, a), want, "{b} against {a}");
    }
}

/// A backendRef's port is looked up as causeway-proxy serves it: one the ServiceImport
/// lacks is `BackendNotFound`, none given when it has several TCP ports (the proxy would
/// not guess) `UnsupportedValue`, and the messages say which.
#[test]
fn backend_ref_ports_must_be_ports_of_the_service_import() {
    let mut f = Fixture::new();
    f.imports.insert(
        key("app", "multi"),
        obj(
            json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "multi", "namespace": "app"},
            "spec": {"type": "ClusterSetIP", "ports": [
                {"name": "metrics", "port": 9090, "protocol": "TCP"},
                {"name": "http", "port": 80, "protocol": "TCP"}]}}),
        ),
    );
    let si = |port: Value| {
        let mut b =
            json!({"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "multi"});
        if !port.is_null() {
            b["port"] = port;
        }
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}], "rules": [{"backendRefs": [b]}]})
    };
    f.route("by-number", si(json!(80)));
    f.route("unknown", si(json!(8080)));
    f.route("ambiguous", si(Value::Null));
    // the second rule's backendRef is the bad one
    f.route(
        "second",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra"}], "rules": [
            {"backendRefs": [{"name": "web", "port": 80}]},
            {"backendRefs": [{"name": "web", "port": 8080, "weight": 3}]}]}),
    );
    let d = f.desired();
    let resolved = |route: &str| {
        let p = &d.routes[&key("app", route)].parents[0];
        let r = p
            .conditions
            .iter()
            .find(|c| c.type_ == "ResolvedRefs")
            .unwrap();
        (r.status.clone(), r.reason.clone(), r.message.clone())
    };
    assert_eq!(
        resolved("by-number"),
        (
            "True".into(),
            "ResolvedRefs".into(),
            "every backendRef resolved".into()
        )
    );
    assert_eq!(
        resolved("unknown"),
        (
            "False".into(),
            "BackendNotFound".into(),
            "backendRef app/multi: ServiceImport app/multi has no TCP port 8080".into()
        )
    );
    assert_eq!(
        resolved("ambiguous"),
        (
            "False".into(),
            "UnsupportedValue".into(),
            "backendRef app/multi: no port given and ServiceImport app/multi has 2 TCP ports: name one".into()
        )
    );
    assert_eq!(
        resolved("second"),
        (
            "False".into(),
            "BackendNotFound".into(),
            "backendRef app/web: ServiceImport app/web has no TCP port 8080".into()
        )
    );
}

/// A Gateway whose GatewayClass is deleted, or changed to another controller's class,
/// gets what Causeway wrote withdrawn: an empty status applied as Causeway's manager
/// (which keeps the other controller's fields), only when Causeway's status apply holds
/// fields there; a Gateway Causeway never wrote is not touched.
#[test]
fn a_gateway_whose_class_is_no_longer_ours_gets_its_status_withdrawn() {
    let mut f = Fixture::new();
    // served: a status of ours
    let ours = f.desired().gateways[&key("infra", "gw")].clone();
    assert!(!ours.conditions.is_empty() && !ours.addresses.is_empty());
    let gw = Arc::make_mut(&mut f.gateways[0]);
    gw.status = Some(ours);
    // Causeway's apply holds fields of infra/gw (and of infra/theirs, another
    // controller's Gateway Causeway served before it moved)
    f.status_ours = BTreeSet::from([key("infra", "gw"), key("infra", "theirs")]);
    let d = f.desired();
    assert_eq!(
        d.gateways[&key("infra", "theirs")],
        GatewayStatus::default(),
        "moved to another controller's class: withdrawn"
    );
    assert_eq!(
        serde_json::to_value(&d.gateways[&key("infra", "theirs")]).unwrap(),
        json!({}),
        "applied as an empty status"
    );
    assert!(
        !d.gateways[&key("infra", "gw")].conditions.is_empty(),
        "still ours: served"
    );
    // the class deleted: withdrawn too
    f.classes.retain(|c| c.name_any() != "causeway");
    let d = f.desired();
    assert_eq!(d.gateways[&key("infra", "gw")], GatewayStatus::default());
    assert!(d.classes.is_empty());
    // a Gateway of another controller Causeway never wrote: left alone
    f.status_ours.clear();
    assert!(f.desired().gateways.is_empty());
}

/// The classification `run` feeds [`World::status_ours`] with: fields of the status
/// held by Causeway's apply, not another manager's, not an update's, not an empty set.
#[test]
fn causeways_status_fields_are_told_by_their_manager() {
    let gw = |fields: Value| -> Gateway {
        serde_json::from_value(
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "g", "namespace": "infra", "managedFields": fields},
            "spec": {"gatewayClassName": "x", "listeners": []}}),
        )
        .unwrap()
    };
    let entry = |manager: &str, op: &str, sub: Option<&str>, f: Value| {
        let mut e = json!({"manager": manager, "operation": op, "apiVersion": "gateway.networking.k8s.io/v1",
            "fieldsType": "FieldsV1", "fieldsV1": f});
        if let Some(s) = sub {
            e["subresource"] = json!(s);
        }
        e
    };
    let status = json!({"f:status": {"f:conditions": {}}});
    assert!(status_applied_by_causeway(&gw(json!([entry(
        "causeway",
        "Apply",
        Some("status"),
        status.clone()
    )]))));
    for fields in [
        json!([entry("other", "Apply", Some("status"), status.clone())]),
        json!([entry("causeway", "Update", Some("status"), status.clone())]),
        json!([entry(
            "causeway",
            "Apply",
            None,
            json!({"f:metadata": {"f:labels": {}}})
        )]),
        json!([entry(
            "causeway",
            "Apply",
            Some("status"),
            json!({"f:status": {}})
        )]),
        json!([]),
    ] {
        assert!(!status_applied_by_causeway(&gw(fields.clone())), "{fields}");
    }
}

/// The causeway.io tuning annotations (the MCI parse, which causeway-proxy applies to
/// routes too): a value that does not parse is served with its default and said in the
/// route's Accepted message, which stays True.
#[test]
fn bad_tuning_annotations_on_a_route_are_said_in_its_status() {
    use causeway_crds::well_known::annotations::mci as tuning;
    let mut f = Fixture::new();
    let spec = json!({"parentRefs": [{"name": "gw", "namespace": "infra"}],
        "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]});
    f.route("good", spec.clone());
    f.route("typo", spec);
    let typo = Arc::make_mut(f.routes.last_mut().unwrap());
    typo.metadata.annotations = Some(BTreeMap::from([
        (
            tuning::LOAD_BALANCER.to_string(),
            "round-robbin".to_string(),
        ),
        (tuning::CONNECT_TIMEOUT.to_string(), "2s".to_string()),
    ]));
    let d = f.desired();
    let accepted = |route: &str| {
        let p = &d.routes[&key("app", route)].parents[0];
        let a = p.conditions.iter().find(|c| c.type_ == "Accepted").unwrap();
        (a.status.clone(), a.reason.clone(), a.message.clone())
    };
    let (status, reason, message) = accepted("typo");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Accepted"));
    assert!(
        message.starts_with(
            "attached to listener http of Gateway infra/gw; served with defaults for: "
        ),
        "{message}"
    );
    assert!(
        message.contains(tuning::LOAD_BALANCER) && message.contains("round-robbin"),
        "{message}"
    );
    assert!(!message.contains(tuning::CONNECT_TIMEOUT), "{message}");
    assert_eq!(
        accepted("good").2,
        "attached to listener http of Gateway infra/gw"
    );
}

/// HR-9: a route that a MultiClusterIngress shadows on a host (the MCI's paths come
/// first), or that takes every request from an MCI's defaultBackend, stays Accepted and
/// says so per parent (what causeway-proxy warns of, from the same function); an MCI
/// causeway does not serve (its class) overlaps nothing.
#[test]
fn mci_overlaps_are_said_on_the_route() {
    let mut f = Fixture::new();
    f.gateways.push(obj(
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "open", "namespace": "infra", "generation": 1},
        "spec": {"gatewayClassName": "causeway", "listeners": [
            {"name": "any", "port": 80, "protocol": "HTTP",
             "allowedRoutes": {"namespaces": {"from": "All"}}}]}}),
    ));
    f.ingress_classes = vec![
        serde_json::from_value(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "causeway"},
        "spec": {"controller": causeway_crds::well_known::INGRESS_CONTROLLER}}),
        )
        .unwrap(),
    ];
    let mci = |name: &str, class: &str, spec: Value| -> Arc<MultiClusterIngress> {
        let mut spec = spec;
        spec["ingressClassName"] = json!(class);
        obj(
            json!({"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
            "metadata": {"name": name, "namespace": "app", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}),
        )
    };
    let web = json!({"service": {"name": "web", "port": {"number": 80}}});
    f.mcis = vec![
        // only a defaultBackend: the catch-all
        mci("catch", "causeway", json!({"defaultBackend": web})),
        // `/` on a host the wildcard route covers, `/api` on another
        mci(
            "hosts",
            "causeway",
            json!({"rules": [
                {"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": web}]}},
                {"host": "b.example.com", "http": {"paths": [{"path": "/api", "pathType": "Prefix", "backend": web}]}}]}),
        ),
        // another controller's: not served, overlaps nothing
        mci(
            "theirs",
            "nginx",
            json!({"rules": [{"host": "c.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": web}]}}]}),
        ),
    ];
    let backend = json!([{"name": "web", "port": 80}]);
    f.route(
        "anyhost",
        json!({"parentRefs": [{"name": "open", "namespace": "infra"}],
        "rules": [{"backendRefs": backend}]}),
    );
    f.route(
        "wild",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "http"}],
        "hostnames": ["*.example.com"], "rules": [
            {"backendRefs": backend},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/api/v2"}}], "backendRefs": backend},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/apix"}}], "backendRefs": backend}]}),
    );
    f.route(
        "apart",
        json!({"parentRefs": [{"name": "gw", "namespace": "infra", "sectionName": "http"}],
        "hostnames": ["c.example.com"], "rules": [{"backendRefs": backend}]}),
    );
    let d = f.desired();
    let accepted = |name: &str| {
        let st = &d.routes[&key("app", name)];
        assert_eq!(st.parents.len(), 1, "{st:?}");
        let a = st.parents[0].conditions[0].clone();
        assert_eq!(
            (a.type_.as_str(), a.status.as_str(), a.reason.as_str()),
            ("Accepted", "True", "Accepted")
        );
        a.message
    };
    let m = accepted("anyhost");
    assert!(
        m.contains("overlaps MultiClusterIngresses")
            && m.contains("catch-all defaultBackend of MultiClusterIngress app/catch answers none"),
        "{m}"
    );
    let m = accepted("wild");
    assert!(
        // the MCI's / takes all of a.example.com; its /api only /api/v2 (not /apix)
        // of b.example.com, the route's / serving the rest
        m.contains("rules[0], rules[1], rules[2] are not served on host a.example.com: MultiClusterIngress app/hosts serves path / there first")
            && m.contains("; rules[1] is not served on host b.example.com: MultiClusterIngress app/hosts serves path /api there first")
            && m.matches("not served").count() == 2
            && !m.contains("c.example.com"),
        "{m}"
    );
    let m = accepted("apart");
    assert!(!m.contains("overlaps"), "{m}");
}
