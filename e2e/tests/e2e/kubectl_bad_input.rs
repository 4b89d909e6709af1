//! Bad input through real kubectl: each gets the Status error kube-apiserver would give,
//! the server keeps serving, and nothing acknowledged before is lost.

use crate::support::Env;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_the_right_status_and_lose_nothing() {
    let env = Env::start().await;
    let keep = env.file("keep.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  namespace: default\ndata:\n  k: v\n");
    env.ok(&["apply", "-f", &keep]).await;
    let rv_before = env
        .ok(&[
            "get",
            "cm",
            "keep",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ])
        .await;

    let big = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"a\":\"{}\"}}}}",
        "x".repeat(3 * 1024 * 1024 + 10)
    );
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "malformed JSON",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}"#.into(),
            "BadRequest",
        ),
        ("not an object", "[1,2,3]".into(), "BadRequest"),
        (
            "wrong kind",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.into(),
            "does not match the expected kind",
        ),
        (
            "wrong apiVersion",
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.into(),
            "does not match the expected API version",
        ),
        (
            "missing kind",
            r#"{"apiVersion":"v1","metadata":{"name":"x"}}"#.into(),
            "Kind",
        ),
        (
            "namespace mismatch",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}"#
                .into(),
            "does not match the namespace",
        ),
        (
            "invalid name",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#.into(),
            "metadata.name: Invalid value",
        ),
        (
            "missing name",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#.into(),
            "metadata.name: Required value",
        ),
        (
            "duplicate",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"keep"}}"#.into(),
            "AlreadyExists",
        ),
        ("oversized body", big, "RequestEntityTooLarge"),
    ];
    for (what, body, want) in cases {
        let f = env.file("body.json", &body);
        let err = env.fails(&["create", "--raw", CMS, "-f", &f]).await;
        assert!(err.contains(want), "{what}: expected {want:?} in {err}");
    }
    // missing namespace and unknown resource
    let f = env.file(
        "ok.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fine"}}"#,
    );
    let err = env
        .fails(&[
            "create",
            "--raw",
            "/api/v1/namespaces/nowhere/configmaps",
            "-f",
            &f,
        ])
        .await;
    assert!(err.contains("NotFound") && err.contains("nowhere"), "{err}");
    let err = env
        .fails(&["get", "--raw", "/apis/nope.example.com/v1/things"])
        .await;
    assert!(err.contains("NotFound"), "{err}");
    // a malformed YAML file never reaches the server and kubectl says where it is wrong
    let y = env.file(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y\n",
    );
    let err = env.fails(&["apply", "-f", &y]).await;
    assert!(err.contains("yaml") || err.contains("YAML"), "{err}");
    // an unknown field in a custom resource is refused by strict field validation
    env.ok(&["apply", "-f", "examples/00-namespace.yaml"]).await;
    let bogus = env.file("bogus.yaml", "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceExport\nmetadata:\n  name: b\n  namespace: demo\nspec:\n  bogus: true\n");
    let err = env.fails(&["apply", "-f", &bogus]).await;
    assert!(
        err.contains("unknown field") && err.contains("spec.bogus"),
        "{err}"
    );
    // an invalid enum value is refused with the field named
    let inv = env.file("inv.yaml", "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata:\n  name: i\n  namespace: demo\nspec:\n  type: Sideways\n");
    let err = env.fails(&["apply", "-f", &inv]).await;
    assert!(
        err.contains("spec.type") && err.contains("Unsupported value"),
        "{err}"
    );

    // the server still answers and the earlier write is intact
    let data = env
        .ok(&[
            "get",
            "cm",
            "keep",
            "-o",
            "jsonpath={.data.k} {.metadata.resourceVersion}",
        ])
        .await;
    assert_eq!(data, format!("v {rv_before}"));
    // (kube-root-ca.crt is the cluster's own, there in every namespace)
    let names = env.ok(&["get", "cm", "-o", "name"]).await;
    assert_eq!(
        names.trim().replace("\nconfigmap/kube-root-ca.crt", ""),
        "configmap/keep",
        "no bad request left an object behind"
    );
}
