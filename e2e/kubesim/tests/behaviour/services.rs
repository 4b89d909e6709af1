//! Services: ClusterIP allocation from the server's CIDRs, dual-stack, headless,
//! NodePorts, and the immutable clusterIP.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

fn svc(name: &str, extra_spec: Value) -> Service {
    let mut spec = json!({"selector": {"app": name}, "ports": [{"port": 80}]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn cidr(s: &str) -> kubesim::Cidr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} is not an IP: {e}"))
}

#[tokio::test]
async fn cluster_ips_come_from_the_configured_cidr_and_are_unique() {
    let mut cfg = kubesim::Config::new("t");
    cfg.service_cidrs = vec![cidr("10.100.7.0/24")];
    let env = start_with(cfg).await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let range = cidr("10.100.7.0/24");
    let kubernetes = api.get("kubernetes").await.unwrap();
    let mut seen: HashSet<String> = HashSet::new();
    seen.insert(kubernetes.spec.unwrap().cluster_ip.unwrap());
    for i in 0..8 {
        let s = api
            .create(&PostParams::default(), &svc(&format!("s{i}"), json!({})))
            .await
            .unwrap();
        let spec = s.spec.unwrap();
        let cip = spec.cluster_ip.clone().unwrap();
        assert!(range.contains(ip(&cip)), "{cip} outside 10.100.7.0/24");
        assert!(seen.insert(cip.clone()), "{cip} allocated twice");
        assert_eq!(spec.cluster_ips, Some(vec![cip]));
        assert_eq!(spec.ip_families, Some(vec!["IPv4".to_string()]));
        assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
    }

    // a requested address is honoured when free and in range, refused otherwise
    let s = api
        .create(
            &PostParams::default(),
            &svc("fixed", json!({"clusterIP": "10.100.7.200"})),
        )
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().cluster_ip.as_deref(), Some("10.100.7.200"));
    for (name, want) in [("dup", "10.100.7.200"), ("outside", "10.200.0.1")] {
        let e = api
            .create(
                &PostParams::default(),
                &svc(name, json!({"clusterIP": want})),
            )
            .await
            .unwrap_err();
        assert_eq!((code(&e), reason(&e).as_str()), (422, "Invalid"), "{name}");
    }
    // deleting releases the address
    api.delete("fixed", &DeleteParams::default()).await.unwrap();
    let s = api
        .create(
            &PostParams::default(),
            &svc("again", json!({"clusterIP": "10.100.7.200"})),
        )
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().cluster_ip.as_deref(), Some("10.100.7.200"));
}

#[tokio::test]
async fn require_dual_stack_gets_one_address_per_family() {
    let mut cfg = kubesim::Config::new("t");
    cfg.service_cidrs = vec![cidr("10.96.0.0/16"), cidr("fd00:10:96::/112")];
    let env = start_with(cfg).await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let s = api
        .create(
            &PostParams::default(),
            &svc("dual", json!({"ipFamilyPolicy": "RequireDualStack"})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    let ips = spec.cluster_ips.clone().unwrap();
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert!(cidr("10.96.0.0/16").contains(ip(&ips[0])), "{ips:?}");
    assert!(cidr("fd00:10:96::/112").contains(ip(&ips[1])), "{ips:?}");
    assert_eq!(spec.cluster_ip.as_deref(), Some(ips[0].as_str()));
    assert_eq!(
        spec.ip_families,
        Some(vec!["IPv4".to_string(), "IPv6".to_string()])
    );
    assert_eq!(spec.ip_family_policy.as_deref(), Some("RequireDualStack"));

    // a single-stack service on the same server gets the primary family only
    let s = api
        .create(&PostParams::default(), &svc("single", json!({})))
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().cluster_ips.unwrap().len(), 1);
    // IPv6 first when asked
    let s = api
        .create(
            &PostParams::default(),
            &svc(
                "v6",
                json!({"ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack"}),
            ),
        )
        .await
        .unwrap();
    let ips = s.spec.unwrap().cluster_ips.unwrap();
    assert!(cidr("fd00:10:96::/112").contains(ip(&ips[0])), "{ips:?}");
}

#[tokio::test]
async fn require_dual_stack_is_invalid_on_a_single_stack_cluster() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let e = api
        .create(
            &PostParams::default(),
            &svc("dual", json!({"ipFamilyPolicy": "RequireDualStack"})),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), 422);
}

#[tokio::test]
async fn cluster_ip_is_immutable() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let s = api
        .create(&PostParams::default(), &svc("web", json!({})))
        .await
        .unwrap();
    let orig = s.spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    let mut changed = s.clone();
    let spec = changed.spec.as_mut().unwrap();
    spec.cluster_ip = Some("10.96.99.99".into());
    spec.cluster_ips = Some(vec!["10.96.99.99".into()]);
    let e = api
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    let kube::Error::Api(st) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((st.code, st.reason.as_str()), (422, "Invalid"));
    let causes = st
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert!(
        causes.iter().any(|c| c.field.starts_with("spec.clusterIP")),
        "causes name the clusterIP field: {causes:?}"
    );
    assert_eq!(
        api.get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .as_deref(),
        Some(orig.as_str())
    );

    // an update that leaves clusterIP out keeps the allocation
    let mut keep = api.get("web").await.unwrap();
    let spec = keep.spec.as_mut().unwrap();
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    spec.selector = Some([("app".to_string(), "other".to_string())].into());
    let out = api
        .replace("web", &PostParams::default(), &keep)
        .await
        .unwrap();
    assert_eq!(out.spec.unwrap().cluster_ip.as_deref(), Some(orig.as_str()));
}

#[tokio::test]
async fn headless_and_node_port_services() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let s = api
        .create(
            &PostParams::default(),
            &svc("headless", json!({"clusterIP": "None"})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.cluster_ips, Some(vec!["None".to_string()]));

    let s = api
        .create(
            &PostParams::default(),
            &svc("np", json!({"type": "NodePort"})),
        )
        .await
        .unwrap();
    let spec = s.spec.unwrap();
    let np = spec.ports.unwrap()[0]
        .node_port
        .expect("a NodePort is allocated");
    assert!((30000..=32767).contains(&np), "{np}");
    assert!(spec.cluster_ip.unwrap() != "None");
}
