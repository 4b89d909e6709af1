//! A Pod's spec is fixed once created except for images, activeDeadlineSeconds,
//! tolerations and scheduling gates: other changes get kube-apiserver's 422, through
//! PUT, server-side apply and real `kubectl apply`, and nothing is stored; status
//! writes and the allowed changes go through.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

const REFUSAL: &str = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn manifest(image: &str, port: i64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": image, "ports": [{"containerPort": port}]}]}})
}

#[tokio::test]
async fn a_pod_spec_changes_only_where_kube_apiserver_allows() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(manifest("nginx:1", 80)).unwrap(),
        )
        .await
        .unwrap();

    // PUT of a new image: allowed
    let mut put = created.clone();
    put.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
    let updated = pods
        .replace("web", &PostParams::default(), &put)
        .await
        .expect("an image may change");

    // PUT of a new port: 422 on spec, the message as kube-apiserver words it
    let mut put = updated.clone();
    put.spec.as_mut().unwrap().containers[0]
        .ports
        .as_mut()
        .unwrap()[0]
        .container_port = 8080;
    let e = pods
        .replace("web", &PostParams::default(), &put)
        .await
        .expect_err("a port may not change");
    assert_eq!(code(&e), 422);
    let c = causes(&e);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].0.as_str(), c[0].1.as_str()),
        ("FieldValueForbidden", "spec")
    );
    assert!(c[0].2.starts_with(REFUSAL), "{}", c[0].2);
    assert!(c[0].2.ends_with("(changed: spec.containers)"), "{}", c[0].2);
    assert!(
        message(&e).starts_with(&format!("Pod \"web\" is invalid: spec: {REFUSAL}")),
        "{}",
        message(&e)
    );

    // server-side apply of the same change, dry run or not: refused, nothing stored
    let apply = PatchParams::apply("tester").force();
    for dry in [true, false] {
        let mut pp = apply.clone();
        pp.dry_run = dry;
        let e = pods
            .patch("web", &pp, &Patch::Apply(manifest("nginx:2", 8080)))
            .await
            .expect_err("apply of a new port is refused");
        assert_eq!(code(&e), 422, "dry run {dry}");
    }
    let now = pods.get("web").await.unwrap();
    assert_eq!(
        now.spec.as_ref().unwrap().containers[0]
            .ports
            .as_ref()
            .unwrap()[0]
            .container_port,
        80
    );
    assert_eq!(
        now.metadata.resource_version,
        updated.metadata.resource_version
    );

    // a toleration added, activeDeadlineSeconds set, by merge patch: allowed
    pods.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 600,
            "tolerations": [{"key": "k", "operator": "Exists"}]}})),
    )
    .await
    .expect("tolerations may be added");
    // ...raised: refused
    let e = pods
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"activeDeadlineSeconds": 900}})),
        )
        .await
        .expect_err("activeDeadlineSeconds may not rise");
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueInvalid".to_string(),
            "spec.activeDeadlineSeconds".to_string(),
            "Invalid value: 900: must be less than or equal to previous value".to_string()
        )]
    );

    // a status write never touches the spec
    let mut st = pods.get_status("web").await.unwrap();
    st.status.as_mut().unwrap().message = Some("hello".into());
    pods.replace_status("web", &PostParams::default(), &st)
        .await
        .expect("a status write passes");

    // real kubectl apply of a changed port prints kube-apiserver's refusal
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, env.server.kubeconfig()).unwrap();
    let file = dir.path().join("pod.json");
    std::fs::write(&file, manifest("nginx:2", 9090).to_string()).unwrap();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["apply", "-f"])
        .arg(&file)
        .output();
    let out = within("kubectl apply", out)
        .await
        .unwrap_or_else(|e| panic!("run {kubectl} (install kubectl or set KUBECTL): {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kubectl apply succeeded: {err}");
    assert!(
        err.contains("The Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than"),
        "{err}"
    );
}

/// The binding subresource sets a Pod's node (the one write that may), once.
#[tokio::test]
async fn a_pod_is_bound_once_through_its_binding_subresource() {
    let env = start().await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    pods.create(
        &pp,
        &serde_json::from_value(manifest("nginx:1", 80)).unwrap(),
    )
    .await
    .unwrap();
    let bind = |kind: &str, node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": "web", "annotations": {"example.com/by": "test"}},
            "target": {"kind": kind, "name": node}})
    };

    // a bad target: 422 with both causes
    let e = pods
        .create_subresource::<_, serde_json::Value>("binding", "web", &pp, &bind("Pod", ""))
        .await
        .expect_err("a Binding to a Pod is refused");
    assert_eq!(code(&e), 422);
    assert_eq!(
        causes(&e),
        vec![
            (
                "FieldValueInvalid".to_string(),
                "target.kind".to_string(),
                "Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\"".to_string()
            ),
            (
                "FieldValueRequired".to_string(),
                "target.name".to_string(),
                "Required value".to_string()
            ),
        ]
    );

    // bound: 201 Success, the node, the annotation and PodScheduled=True
    let out: serde_json::Value = pods
        .create_subresource("binding", "web", &pp, &bind("Node", "n1"))
        .await
        .expect("bound");
    assert_eq!(out["status"], "Success");
    let p = pods.get("web").await.unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(
        p.metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("example.com/by")
            .map(String::as_str),
        Some("test")
    );
    let scheduled = p.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert!(
        scheduled
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
        "{scheduled:?}"
    );

    // a second binding: 409, and the node stays
    let e = pods
        .create_subresource::<_, serde_json::Value>("binding", "web", &pp, &bind("Node", "n2"))
        .await
        .expect_err("a bound Pod is not bound again");
    assert_eq!(code(&e), 409);
    assert_eq!(
        message(&e),
        "Operation cannot be fulfilled on pods/binding \"web\": pod web is already assigned to node \"n1\""
    );
    let p = pods.get("web").await.unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n1"));

    // a Pod that still has scheduling gates cannot be bound
    let mut gated = manifest("nginx:1", 80);
    gated["metadata"]["name"] = json!("gated");
    gated["spec"]["schedulingGates"] = json!([{"name": "example.com/wait"}]);
    pods.create(&pp, &serde_json::from_value(gated).unwrap())
        .await
        .unwrap();
    let mut b = bind("Node", "n1");
    b["metadata"]["name"] = json!("gated");
    let e = pods
        .create_subresource::<_, serde_json::Value>("binding", "gated", &pp, &b)
        .await
        .expect_err("a gated Pod is not bound");
    assert_eq!(code(&e), 409);
    assert!(
        message(&e).ends_with("pod gated has non-empty .spec.schedulingGates"),
        "{}",
        message(&e)
    );
}
