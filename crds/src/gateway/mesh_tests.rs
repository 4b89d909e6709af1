use super::*;
use serde_json::json;

fn route(parents: serde_json::Value, extra: serde_json::Value) -> HTTPRoute {
    let mut spec = json!({"parentRefs": parents});
    if let serde_json::Value::Object(m) = extra {
        spec.as_object_mut().unwrap().extend(m);
    }
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": "app"}, "spec": spec,
    }))
    .unwrap()
}

fn imports() -> BTreeMap<(String, String), Arc<ServiceImport>> {
    let si = |name: &str, type_: &str, ports: serde_json::Value| {
        (
            ("app".to_string(), name.to_string()),
            Arc::new(
                serde_json::from_value::<ServiceImport>(json!({
                    "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                    "metadata": {"name": name, "namespace": "app"},
                    "spec": {"type": type_, "ports": ports},
                }))
                .unwrap(),
            ),
        )
    };
    [
        si(
            "store",
            "ClusterSetIP",
            json!([{"name": "http", "port": 8080, "protocol": "TCP"},
                   {"name": "admin", "port": 9090},
                   {"name": "dns", "port": 53, "protocol": "UDP"}]),
        ),
        si("db", "Headless", json!([{"port": 5432}])),
    ]
    .into()
}

fn parent(v: serde_json::Value) -> serde_json::Value {
    let mut p = json!({"group": "multicluster.x-k8s.io", "kind": "ServiceImport"});
    p.as_object_mut()
        .unwrap()
        .extend(v.as_object().unwrap().clone());
    json!([p])
}

/// What a row says: the case, the parentRefs, more of the spec, and the ports captured
/// or the reason it does not attach.
type Row = (
    &'static str,
    serde_json::Value,
    serde_json::Value,
    Result<Vec<MeshParent>, &'static str>,
);

/// One row per parentRef: the ports captured, or the reason it does not attach.
#[test]
fn which_serviceimport_ports_a_route_captures() {
    let store = |port: i32| ("app".to_string(), "store".to_string(), port);
    let rows: Vec<Row> = vec![
        (
            "every TCP port",
            parent(json!({"name": "store"})),
            json!({}),
            Ok(vec![store(8080), store(9090)]),
        ),
        (
            "one port",
            parent(json!({"name": "store", "port": 9090})),
            json!({}),
            Ok(vec![store(9090)]),
        ),
        (
            "no such port",
            parent(json!({"name": "store", "port": 1})),
            json!({}),
            Err(reasons::NO_MATCHING_PARENT),
        ),
        (
            "a UDP port",
            parent(json!({"name": "store", "port": 53})),
            json!({}),
            Err(reasons::NO_MATCHING_PARENT),
        ),
        (
            "not on the hub",
            parent(json!({"name": "cart"})),
            json!({}),
            Err(reasons::NO_MATCHING_PARENT),
        ),
        (
            "headless",
            parent(json!({"name": "db"})),
            json!({}),
            Err(reasons::UNSUPPORTED_VALUE),
        ),
        (
            "another namespace",
            parent(json!({"name": "store", "namespace": "shop"})),
            json!({}),
            Err(reasons::UNSUPPORTED_VALUE),
        ),
        (
            "sectionName",
            parent(json!({"name": "store", "sectionName": "http"})),
            json!({}),
            Err(reasons::UNSUPPORTED_VALUE),
        ),
        (
            "an unsupported filter",
            parent(json!({"name": "store"})),
            json!({"rules": [{"filters": [{"type": "RequestMirror"}]}]}),
            Err(reasons::UNSUPPORTED_VALUE),
        ),
    ];
    for (what, parents, extra, want) in rows {
        let v = mesh_parents(&route(parents, extra), &imports());
        assert_eq!(v.len(), 1, "{what}");
        match (&v[0].attached, want) {
            (Ok(got), Ok(want)) => assert_eq!(*got, want, "{what}"),
            (Err(e), Err(reason)) => {
                assert_eq!(e.reason, reason, "{what}: {}", e.message);
                assert!(!e.message.is_empty());
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
    // Gateway parents are not mesh parents
    let gw = route(json!([{"name": "gw"}]), json!({}));
    assert!(mesh_parents(&gw, &imports()).is_empty());
}

#[test]
fn errors_say_what_to_do() {
    let v = mesh_parents(
        &route(
            parent(json!({"name": "store", "namespace": "shop"})),
            json!({}),
        ),
        &imports(),
    );
    assert_eq!(
        v[0].attached.as_ref().unwrap_err().message,
        "ServiceImport shop/store is in another namespace than the route: routes that change only their own namespace's view of a service (consumer routes) are not supported; create the route in shop"
    );
    let v = mesh_parents(
        &route(parent(json!({"name": "cart"})), json!({})),
        &imports(),
    );
    assert_eq!(
        v[0].attached.as_ref().unwrap_err().message,
        "no ServiceImport app/cart on the hub: export the Service from a member cluster"
    );
}

#[test]
fn proxy_mesh_values() {
    assert_eq!(
        parse_proxy_mesh("127.0.0.1:15000-15099"),
        Ok(("127.0.0.1".parse().unwrap(), 15000..=15099))
    );
    assert_eq!(
        parse_proxy_mesh("[::1]:15000-15000"),
        Ok(("::1".parse().unwrap(), 15000..=15000))
    );
    for (ip, text) in [
        ("127.0.0.1", "127.0.0.1:15000-15099"),
        ("::1", "[::1]:15000-15099"),
    ] {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(format_proxy_mesh(ip, &(15000..=15099)), text);
        assert_eq!(parse_proxy_mesh(text), Ok((ip, 15000..=15099)));
    }
    for bad in [
        "127.0.0.1",
        "127.0.0.1:15000",
        "x:1-2",
        "127.0.0.1:0-5",
        "127.0.0.1:9-5",
        "127.0.0.1:1-70000",
        "0.0.0.0:15000-15099",
        "[::]:15000-15099",
    ] {
        let e = parse_proxy_mesh(bad).unwrap_err();
        assert!(e.contains(bad), "{e}");
    }
}

#[test]
fn ports_round_trip() {
    let p = BTreeMap::from([(8080, 15001), (80, 15000)]);
    assert_eq!(format_ports(&p), "80=15000,8080=15001");
    assert_eq!(parse_ports("80=15000, 8080=15001,junk,x=1"), p);
}

/// Allocation keeps what a parent has, gives new ones the lowest free port, never
/// hands out a port another parent still holds or one just released, and says which
/// are left without one when the range is full.
#[test]
fn mesh_ports_are_stable_and_bounded() {
    let p = |name: &str, port: i32| ("app".to_string(), name.to_string(), port);
    let wanted: BTreeSet<MeshParent> = [p("a", 80), p("b", 80), p("c", 80)].into();
    let range = 15000..=15002;
    let none = BTreeSet::new();
    let (got, full) = allocate(&wanted, &BTreeMap::new(), &range, &none);
    assert_eq!(
        got.values().copied().collect::<Vec<_>>(),
        [15000, 15001, 15002]
    );
    assert!(full.is_empty());
    // a goes away, d comes: b and c keep theirs; a's port is not d's while a still
    // holds it (its members may still send a's traffic there), nor while reserved
    let wanted: BTreeSet<MeshParent> = [p("b", 80), p("c", 80), p("d", 80)].into();
    let (again, full) = allocate(&wanted, &got, &range, &none);
    assert_eq!(again[&p("b", 80)], 15001);
    assert_eq!(again[&p("c", 80)], 15002);
    assert_eq!(full, vec![p("d", 80)]);
    let mut gone = got.clone();
    gone.remove(&p("a", 80));
    let (again, full) = allocate(&wanted, &gone, &range, &BTreeSet::from([15000]));
    assert_eq!((again.len(), full.len()), (2, 1));
    let (again, _) = allocate(&wanted, &gone, &range, &none);
    assert_eq!(again[&p("d", 80)], 15000);
    // a parent back within its reservation gets its own port again
    let (back, _) = allocate(
        &BTreeSet::from([p("a", 80)]),
        &got,
        &range,
        &BTreeSet::from([15000]),
    );
    assert_eq!(back[&p("a", 80)], 15000);
    // a port out of the range, or taken twice, is given again
    let current = BTreeMap::from([(p("b", 80), 9), (p("c", 80), 15001), (p("d", 80), 15001)]);
    let (fixed, _) = allocate(&wanted, &current, &range, &none);
    let mut ports: Vec<u16> = fixed.values().copied().collect();
    ports.sort();
    assert_eq!(ports, [15000, 15001, 15002]);
    // full: the last ones wait
    let wanted: BTreeSet<MeshParent> = [p("a", 80), p("b", 80), p("c", 80), p("d", 80)].into();
    let (got, full) = allocate(&wanted, &BTreeMap::new(), &range, &none);
    assert_eq!(got.len(), 3);
    assert_eq!(full, vec![p("d", 80)]);
}
