//! kube-apiserver's metadata and Service port validation: 422 Invalid with one cause per
//! field error, worded as kube-apiserver words them, on create, update, patch and apply.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

const KEY_NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn invalid(field: &str, message: String) -> Cause {
    ("FieldValueInvalid".into(), field.into(), message)
}

fn cm_with(meta: Value) -> ConfigMap {
    let mut m = json!({"name": "x"});
    m.as_object_mut()
        .unwrap()
        .extend(meta.as_object().unwrap().clone());
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m})).unwrap()
}

#[tokio::test]
async fn label_and_annotation_keys_and_values_are_validated_on_create() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let cases: Vec<(Value, Vec<Cause>)> = vec![
        (
            json!({"labels": {"a b": "x"}}),
            vec![invalid(
                "metadata.labels",
                format!("Invalid value: \"a b\": {KEY_NAME_PART}"),
            )],
        ),
        (
            json!({"labels": {"app": "a b"}}),
            vec![invalid(
                "metadata.labels",
                format!("Invalid value: \"a b\": {LABEL_VALUE}"),
            )],
        ),
        (
            json!({"labels": {"app": "v".repeat(64)}}),
            vec![invalid(
                "metadata.labels",
                format!(
                    "Invalid value: \"{}\": must be no more than 63 characters",
                    "v".repeat(64)
                ),
            )],
        ),
        (
            json!({"labels": {"Example.com/app": "web"}}),
            vec![invalid(
                "metadata.labels",
                format!("Invalid value: \"Example.com/app\": prefix part {SUBDOMAIN}"),
            )],
        ),
        (
            json!({"labels": {"example.com/": "web"}}),
            vec![
                invalid(
                    "metadata.labels",
                    "Invalid value: \"example.com/\": name part must be non-empty".into(),
                ),
                invalid(
                    "metadata.labels",
                    format!("Invalid value: \"example.com/\": {KEY_NAME_PART}"),
                ),
            ],
        ),
        (
            json!({"annotations": {"Bad Key": "v"}}),
            vec![invalid(
                "metadata.annotations",
                format!("Invalid value: \"Bad Key\": {KEY_NAME_PART}"),
            )],
        ),
        (
            json!({"annotations": {"big": "x".repeat(256 * 1024)}}),
            vec![(
                "FieldValueTooLong".into(),
                "metadata.annotations".into(),
                "Too long: may not be more than 262144 bytes".into(),
            )],
        ),
    ];
    for (meta, want) in cases {
        let e = api.create(&pp, &cm_with(meta.clone())).await.unwrap_err();
        assert_eq!(causes(&e), want, "{meta}");
    }
    // What kube-apiserver accepts: prefixed keys, upper case annotation keys, empty values.
    api.create(
        &pp,
        &cm_with(json!({
            "labels": {"example.com/App_1.x": "My_value-1", "empty": ""},
            "annotations": {"Example.COM/Some_Key": "anything at all: {\"json\": true}"},
        })),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn labels_are_validated_on_update_patch_and_apply() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let cur = api
        .create(
            &PostParams::default(),
            &cm("x", json!({"ok": "yes"}), json!({})),
        )
        .await
        .unwrap();
    let want = vec![invalid(
        "metadata.labels",
        format!("Invalid value: \"a b\": {KEY_NAME_PART}"),
    )];
    let mut bad = cur.clone();
    bad.metadata
        .labels
        .get_or_insert_default()
        .insert("a b".into(), "x".into());
    let e = api
        .replace("x", &PostParams::default(), &bad)
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "update");
    let e = api
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a b": "x"}}})),
        )
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "merge patch");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a b": "x"}}});
    let e = api
        .patch("x", &PatchParams::apply("t"), &Patch::Apply(&applied))
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "server-side apply");
    let applied_new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y", "labels": {"a b": "x"}}});
    let e = api
        .patch("y", &PatchParams::apply("t"), &Patch::Apply(&applied_new))
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "server-side apply creating");
    assert_eq!(
        api.get("x").await.unwrap().metadata.labels,
        cur.metadata.labels,
        "nothing was stored"
    );
}

fn svc(ports: Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": ports},
    }))
    .unwrap()
}

#[tokio::test]
async fn service_port_names_must_be_unique_and_present_when_several() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let e = api
        .create(
            &pp,
            &svc(json!([{"name": "http", "port": 80}, {"name": "http", "port": 81}])),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e),
        vec![(
            "FieldValueDuplicate".into(),
            "spec.ports[1].name".into(),
            "Duplicate value: \"http\"".into()
        )]
    );
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert_eq!(
        s.message,
        "Service \"web\" is invalid: spec.ports[1].name: Duplicate value: \"http\""
    );
    let e = api
        .create(
            &pp,
            &svc(json!([{"name": "a", "port": 80}, {"port": 81}, {"port": 82}])),
        )
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e),
        vec![
            (
                "FieldValueRequired".into(),
                "spec.ports[1].name".into(),
                "Required value".into()
            ),
            (
                "FieldValueRequired".into(),
                "spec.ports[2].name".into(),
                "Required value".into()
            ),
        ]
    );
    // The same rules on update: a second port named like the first.
    api.create(&pp, &svc(json!([{"name": "http", "port": 80}])))
        .await
        .unwrap();
    let e = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(causes(&e)[0].1, "spec.ports[1].name");
}

#[tokio::test]
async fn custom_resource_names_are_dns_subdomains_up_to_253_characters() {
    let env = start().await;
    namespace(&env.client, "w").await;
    let widgets = install_widgets(&env.client, "w").await;
    let pp = PostParams::default();
    let long = "a".repeat(100);
    widgets
        .create(&pp, &widget(&long, json!({"size": 1})))
        .await
        .expect("a 100-character name without dots is a valid DNS subdomain");
    let too_long = "a".repeat(254);
    let e = widgets
        .create(&pp, &widget(&too_long, json!({"size": 1})))
        .await
        .unwrap_err();
    assert_eq!(
        causes(&e),
        vec![invalid(
            "metadata.name",
            format!("Invalid value: \"{too_long}\": must be no more than 253 characters")
        )]
    );
}
