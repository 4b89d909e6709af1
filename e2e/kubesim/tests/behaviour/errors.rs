//! Bad requests get kube-apiserver's Status errors, and never disturb stored objects.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
}

fn case(
    what: &'static str,
    method: &'static str,
    path: &str,
    content_type: Option<&'static str>,
    body: impl Into<Vec<u8>>,
    code: u16,
    reason: &'static str,
) -> Case {
    Case {
        what,
        method,
        path: path.to_string(),
        content_type,
        body: body.into(),
        code,
        reason,
    }
}

fn json_body(v: Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

#[tokio::test]
async fn bad_requests_get_the_right_status_and_lose_no_write() {
    let env = start().await;
    let client = env.client.clone();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let kept = api
        .create(
            &PostParams::default(),
            &cm("keep", json!({"a": "b"}), json!({"important": "data"})),
        )
        .await
        .unwrap();
    let keep_path = format!("{CMS}/keep");
    let big = "x".repeat(3 * 1024 * 1024 + 1024);
    let json_ct = Some("application/json");
    let cases = vec![
        case(
            "malformed JSON",
            "POST",
            CMS,
            json_ct,
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x""#,
            400,
            "BadRequest",
        ),
        case(
            "malformed YAML",
            "POST",
            CMS,
            Some("application/yaml"),
            "apiVersion: v1\nkind: [ConfigMap\n",
            400,
            "BadRequest",
        ),
        case(
            "a JSON array",
            "POST",
            CMS,
            json_ct,
            "[1, 2]",
            400,
            "BadRequest",
        ),
        case(
            "wrong kind",
            "POST",
            CMS,
            json_ct,
            json_body(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})),
            400,
            "BadRequest",
        ),
        case(
            "wrong apiVersion",
            "POST",
            CMS,
            json_ct,
            json_body(
                json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
            ),
            400,
            "BadRequest",
        ),
        case(
            "missing kind",
            "POST",
            CMS,
            json_ct,
            json_body(json!({"apiVersion": "v1", "metadata": {"name": "x"}})),
            400,
            "BadRequest",
        ),
        case(
            "namespace mismatch",
            "POST",
            CMS,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
            ),
            400,
            "BadRequest",
        ),
        case(
            "invalid name",
            "POST",
            CMS,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}),
            ),
            422,
            "Invalid",
        ),
        case(
            "no name",
            "POST",
            CMS,
            json_ct,
            json_body(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})),
            422,
            "Invalid",
        ),
        case(
            "oversized body",
            "POST",
            CMS,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"x": big}}),
            ),
            413,
            "RequestEntityTooLarge",
        ),
        case(
            "unknown content type",
            "POST",
            CMS,
            Some("text/plain"),
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
            ),
            415,
            "UnsupportedMediaType",
        ),
        case(
            "protobuf",
            "POST",
            CMS,
            Some("application/vnd.kubernetes.protobuf"),
            b"k8s\x00".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        case(
            "update: malformed JSON",
            "PUT",
            &keep_path,
            json_ct,
            "{not json",
            400,
            "BadRequest",
        ),
        case(
            "update: namespace mismatch",
            "PUT",
            &keep_path,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep", "namespace": "other"}, "data": {}}),
            ),
            400,
            "BadRequest",
        ),
        case(
            "update: name mismatch",
            "PUT",
            &keep_path,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}, "data": {}}),
            ),
            400,
            "BadRequest",
        ),
        case(
            "update: unknown content type",
            "PUT",
            &keep_path,
            Some("text/plain"),
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}, "data": {}}),
            ),
            415,
            "UnsupportedMediaType",
        ),
        case(
            "update: oversized body",
            "PUT",
            &keep_path,
            json_ct,
            json_body(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}, "data": {"x": big}}),
            ),
            413,
            "RequestEntityTooLarge",
        ),
        case(
            "patch: unknown content type",
            "PATCH",
            &keep_path,
            Some("application/json"),
            json_body(json!({"data": {"important": "lost"}})),
            415,
            "UnsupportedMediaType",
        ),
        case(
            "patch: malformed merge patch",
            "PATCH",
            &keep_path,
            Some("application/merge-patch+json"),
            "{oops",
            400,
            "BadRequest",
        ),
        case(
            "patch: stale resourceVersion",
            "PATCH",
            &keep_path,
            Some("application/merge-patch+json"),
            json_body(json!({"metadata": {"resourceVersion": "1"}, "data": {"important": "lost"}})),
            409,
            "Conflict",
        ),
        case(
            "POST to an object",
            "POST",
            &keep_path,
            json_ct,
            json_body(json!({})),
            405,
            "MethodNotAllowed",
        ),
        case(
            "unknown resource",
            "GET",
            "/api/v1/namespaces/default/nothings",
            None,
            vec![],
            404,
            "NotFound",
        ),
        case(
            "missing object",
            "GET",
            &format!("{CMS}/missing"),
            None,
            vec![],
            404,
            "NotFound",
        ),
    ];
    for c in cases {
        let r = raw(&client, c.method, &c.path, c.content_type, c.body).await;
        assert_eq!(r.code, c.code, "{}: {}", c.what, r.body);
        assert_eq!(r.body["kind"], "Status", "{}: {}", c.what, r.body);
        assert_eq!(r.body["status"], "Failure", "{}", c.what);
        assert_eq!(r.body["code"], c.code, "{}", c.what);
        assert_eq!(r.body["reason"], c.reason, "{}: {}", c.what, r.body);
        if c.what == "invalid name" || c.what == "no name" {
            assert_eq!(
                r.body["details"]["causes"][0]["field"], "metadata.name",
                "{}: {}",
                c.what, r.body
            );
        }

        // the server still answers, and the acknowledged write is intact
        let now = within("a GET after a bad request", api.get("keep"))
            .await
            .unwrap_or_else(|e| panic!("after {}: {e}", c.what));
        assert_eq!(
            now.metadata.resource_version, kept.metadata.resource_version,
            "after {}",
            c.what
        );
        assert_eq!(now.data, kept.data, "after {}", c.what);
        assert_eq!(
            now.metadata.labels, kept.metadata.labels,
            "after {}",
            c.what
        );
    }
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["keep", "kube-root-ca.crt"],
        "no bad request stored anything (kube-root-ca.crt is the cluster's own)"
    );
}

#[tokio::test]
async fn stale_resource_version_on_replace_is_409() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let v1 = api
        .create(
            &PostParams::default(),
            &cm("c", json!({}), json!({"v": "1"})),
        )
        .await
        .unwrap();
    let mut a = v1.clone();
    a.data = Some([("v".to_string(), "a".to_string())].into());
    api.replace("c", &PostParams::default(), &a).await.unwrap();

    let mut b = v1.clone();
    b.data = Some([("v".to_string(), "b".to_string())].into());
    let e = api
        .replace("c", &PostParams::default(), &b)
        .await
        .unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (409, "Conflict"));
    assert_eq!(
        api.get("c").await.unwrap().data.unwrap()["v"],
        "a",
        "the first writer wins"
    );

    // without a resourceVersion the update is unconditional
    b.metadata.resource_version = None;
    api.replace("c", &PostParams::default(), &b).await.unwrap();
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["v"], "b");
    // replace of a missing object is 404
    let mut m = b.clone();
    m.metadata.name = Some("missing".into());
    assert_eq!(
        code(
            &api.replace("missing", &PostParams::default(), &m)
                .await
                .unwrap_err()
        ),
        404
    );
}
