//! Fields kube-apiserver refuses to change once set: 422 Invalid worded as it words
//! them, the same through PUT, every PATCH type, server-side apply and dry runs, with
//! nothing stored.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::helpers::*;

const IMMUTABLE_SET: &str = "Forbidden: field is immutable when `immutable` is set";

fn cause(reason: &str, field: &str, message: &str) -> Cause {
    (reason.into(), field.into(), message.into())
}

/// Creates `obj` and returns its Api.
async fn create<K>(env: &Env, obj: Value) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(env.client.clone(), "default");
    let o: K = serde_json::from_value(obj).expect("a valid object");
    api.create(&PostParams::default(), &o)
        .await
        .expect("create");
    api
}

/// The causes of the 422 a merge patch of `name` gets.
async fn merge_refused<K>(api: &Api<K>, name: &str, patch: Value) -> Vec<Cause>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let e = api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect_err("the patch is refused");
    causes(&e)
}

#[tokio::test]
async fn a_deployment_selector_is_refused_by_put_every_patch_apply_and_dry_run() {
    let env = start().await;
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web", "v": "2"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let api: Api<Deployment> = create(&env, dep.clone()).await;
    let before = api.get("web").await.unwrap();
    let want = vec![cause(
        "FieldValueInvalid",
        "spec.selector",
        r#"Invalid value: {"matchLabels":{"app":"web","v":"2"}}: field is immutable"#,
    )];
    let new_selector = json!({"matchLabels": {"app": "web", "v": "2"}});

    let mut put = before.clone();
    put.spec.as_mut().unwrap().selector = serde_json::from_value(new_selector.clone()).unwrap();
    let e = api
        .replace("web", &PostParams::default(), &put)
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "PUT");
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    assert_eq!(
        s.message,
        format!(
            "Deployment.apps \"web\" is invalid: spec.selector: {}",
            want[0].2
        )
    );

    let pp = PatchParams::default();
    let patches = [
        (
            "merge",
            Patch::Merge(json!({"spec": {"selector": new_selector}})),
        ),
        (
            "strategic",
            Patch::Strategic(json!({"spec": {"selector": new_selector}})),
        ),
        (
            "json",
            Patch::Json(
                serde_json::from_value(
                    json!([{"op": "add", "path": "/spec/selector/matchLabels/v", "value": "2"}]),
                )
                .unwrap(),
            ),
        ),
    ];
    for (what, p) in patches {
        let e = api.patch("web", &pp, &p).await.unwrap_err();
        assert_eq!(causes(&e), want, "{what} patch");
    }
    let mut applied = dep.clone();
    applied["spec"]["selector"] = new_selector;
    let e = api
        .patch(
            "web",
            &PatchParams::apply("causeway").force(),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "server-side apply");
    let e = api
        .patch(
            "web",
            &PatchParams::apply("causeway").force().dry_run(),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap_err();
    assert_eq!(causes(&e), want, "dry-run apply");

    let after = api.get("web").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "nothing stored"
    );
    // everything else still changes
    let scaled = api
        .patch("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn a_statefulset_spec_changes_only_in_its_mutable_fields() {
    let env = start().await;
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
    let api: Api<StatefulSet> = create(&env, sts.clone()).await;
    let pp = PatchParams::apply("causeway").force();
    let mut ok = sts.clone();
    ok["spec"]["replicas"] = json!(3);
    ok["spec"]["minReadySeconds"] = json!(5);
    ok["spec"]["template"]["spec"]["containers"][0]["image"] = json!("i:2");
    api.patch("db", &pp, &Patch::Apply(&ok))
        .await
        .expect("mutable fields change");

    let forbidden = cause(
        "FieldValueForbidden",
        "spec",
        "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
    );
    let mut claims = ok.clone();
    claims["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    let e = api
        .patch("db", &pp, &Patch::Apply(&claims))
        .await
        .unwrap_err();
    assert_eq!(causes(&e), vec![forbidden.clone()], "volumeClaimTemplates");
    assert_eq!(
        merge_refused(
            &api,
            "db",
            json!({"spec": {"selector": {"matchLabels": {"app": "db2"}}}})
        )
        .await,
        vec![forbidden],
        "selector"
    );
}

#[tokio::test]
async fn a_job_keeps_its_selector_completions_and_template() {
    let env = start().await;
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"completions": 3, "parallelism": 1,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}}});
    let api: Api<Job> = create(&env, job).await;
    let pp = PatchParams::default();
    assert_eq!(
        merge_refused(&api, "j", json!({"spec": {"completions": 4}})).await,
        vec![cause(
            "FieldValueInvalid",
            "spec.completions",
            "Invalid value: 4: field is immutable"
        )]
    );
    let e = api
        .patch(
            "j",
            &pp,
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}}})),
        )
        .await
        .unwrap_err();
    let c = causes(&e);
    assert_eq!((c.len(), c[0].1.as_str()), (1, "spec.template"), "{c:?}");
    assert!(
        c[0].2.starts_with("Invalid value: {")
            && c[0].2.contains(r#""image":"i:2""#)
            && c[0].2.ends_with("}]}}: field is immutable"),
        "{c:?}"
    );
    assert_eq!(
        merge_refused(
            &api,
            "j",
            json!({"spec": {"selector": {"matchLabels": {"x": "y"}}}})
        )
        .await,
        vec![cause(
            "FieldValueInvalid",
            "spec.selector",
            r#"Invalid value: {"matchLabels":{"x":"y"}}: field is immutable"#
        )]
    );
    // parallelism is not among them
    api.patch("j", &pp, &Patch::Merge(json!({"spec": {"parallelism": 2}})))
        .await
        .expect("parallelism changes");
}

#[tokio::test]
async fn immutable_configmaps_and_secrets_keep_their_data() {
    let env = start().await;
    let cms: Api<ConfigMap> = create(
        &env,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}, "immutable": true}),
    )
    .await;
    let pp = PatchParams::default();
    assert_eq!(
        merge_refused(&cms, "c", json!({"data": {"a": "2"}})).await,
        vec![cause("FieldValueForbidden", "data", IMMUTABLE_SET)]
    );
    assert_eq!(
        merge_refused(&cms, "c", json!({"immutable": null})).await,
        vec![cause("FieldValueForbidden", "immutable", IMMUTABLE_SET)]
    );
    // metadata still changes
    cms.patch(
        "c",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("labels change");

    let secrets: Api<Secret> = create(
        &env,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}, "immutable": true}),
    )
    .await;
    let s = secrets.get("s").await.unwrap();
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(s.data.unwrap()["k"].0, b"v", "stringData is stored as data");
    assert_eq!(
        merge_refused(&secrets, "s", json!({"stringData": {"k": "w"}})).await,
        vec![cause("FieldValueForbidden", "data", IMMUTABLE_SET)]
    );
    assert_eq!(
        merge_refused(&secrets, "s", json!({"type": "kubernetes.io/tls"})).await,
        vec![cause(
            "FieldValueInvalid",
            "type",
            r#"Invalid value: "kubernetes.io/tls": field is immutable"#
        )]
    );
}

#[tokio::test]
async fn a_service_cluster_ip_and_a_claim_spec_stay() {
    let env = start().await;
    let svcs: Api<Service> = create(
        &env,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await;
    let ip = svcs
        .get("web")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let other = if ip.ends_with(".99") {
        "10.96.0.98"
    } else {
        "10.96.0.99"
    };
    let pp = PatchParams::default();
    assert_eq!(
        merge_refused(&svcs, "web", json!({"spec": {"clusterIP": other}})).await,
        vec![cause(
            "FieldValueInvalid",
            "spec.clusterIPs[0]",
            &format!("Invalid value: [\"{other}\"]: may not change once set")
        )],
        "clusterIP alone"
    );
    let both = merge_refused(
        &svcs,
        "web",
        json!({"spec": {"clusterIP": other, "clusterIPs": [other]}}),
    )
    .await;
    assert_eq!(both[0].1, "spec.clusterIPs[0]", "both");
    assert_eq!(
        svcs.get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .cluster_ip
            .as_deref(),
        Some(ip.as_str())
    );

    let pvcs: Api<PersistentVolumeClaim> = create(
        &env,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    pvcs.patch(
        "data",
        &pp,
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
    )
    .await
    .expect("requests grow");
    assert_eq!(
        merge_refused(
            &pvcs,
            "data",
            json!({"spec": {"accessModes": ["ReadWriteMany"]}})
        )
        .await,
        vec![cause(
            "FieldValueForbidden",
            "spec",
            "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
        )]
    );
}
