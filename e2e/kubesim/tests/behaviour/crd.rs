//! CustomResourceDefinitions: establishing, discovery, serving, schema handling, removal.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::discovery::Scope;
use kube::{Api, Discovery};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_crd_becomes_established_served_and_discoverable() {
    let env = start().await;
    let client = env.client.clone();
    let before = Discovery::new(client.clone()).run().await.unwrap();
    assert!(!before.has_group(WIDGET_GROUP));

    let widgets = install_widgets(&client, "default").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get("widgets.test.causeway.io").await.unwrap();
    let status = crd.status.unwrap();
    let conds = status.conditions.unwrap();
    for t in ["NamesAccepted", "Established"] {
        assert!(
            conds.iter().any(|c| c.type_ == t && c.status == "True"),
            "{t} condition: {conds:?}"
        );
    }
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    assert_eq!(status.accepted_names.unwrap().kind, "Widget");

    let disc = eventually("widgets discoverable", || async {
        let d = Discovery::new(client.clone()).run().await.ok()?;
        d.has_group(WIDGET_GROUP).then_some(d)
    })
    .await;
    let (ar, caps) = disc
        .resolve_gvk(&GroupVersionKind::gvk(WIDGET_GROUP, "v1", "Widget"))
        .expect("Widget resolvable through discovery");
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps.operations.iter().any(|o| o == "watch"));
    let subs: Vec<String> = caps
        .subresources
        .iter()
        .map(|(s, _)| s.plural.clone())
        .collect();
    assert_eq!(
        subs,
        vec!["status"],
        "the status subresource is discoverable"
    );
    // aggregated discovery knows it too
    let agg = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(
        agg.resolve_gvk(&GroupVersionKind::gvk(WIDGET_GROUP, "v1", "Widget"))
            .is_some()
    );

    // serving through the discovered ApiResource
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    api.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn schema_prunes_unknown_fields_and_validates_types() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let mut w = widget("w", json!({"size": 1, "bogus": "x"}));
    w.data["extra"] = json!({"a": 1});
    let out = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(
        out.data["spec"],
        json!({"size": 1, "color": "blue"}),
        "unknown fields pruned"
    );
    assert!(out.data.get("extra").is_none());

    let e = api
        .create(
            &PostParams::default(),
            &widget("bad", json!({"size": "big"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(s.message.contains("spec.size"), "{}", s.message);
}

/// A null where the schema does not allow one (`color: ~` in a user's YAML) is pruned
/// and then defaulted, as apiextensions-apiserver does (PruneNonNullableNullsWithoutDefaults);
/// a controller reading the object sees the default, not a null.
#[tokio::test]
async fn nulls_the_schema_does_not_allow_are_pruned_then_defaulted() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let out = api
        .create(
            &PostParams::default(),
            &widget("w", json!({"size": null, "color": null})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["spec"], json!({"color": "blue"}));
}

/// A write of `/status` is pruned and validated against the schema too, as
/// kube-apiserver's status strategy does: a status field of the wrong type is a 422
/// naming it (an aggregator that writes an integer where the schema wants a string
/// must hear so), an unknown one is dropped.
#[tokio::test]
async fn status_writes_are_pruned_and_validated_by_the_schema() {
    use kube::api::{Patch, PatchParams};
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    api.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    let pp = PatchParams::default();
    let e = api
        .patch_status("w", &pp, &Patch::Merge(json!({"status": {"ready": 5}})))
        .await
        .unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        s.message.contains("status.ready") && s.message.contains("must be of type boolean"),
        "{}",
        s.message
    );
    let out = api
        .patch_status(
            "w",
            &pp,
            &Patch::Merge(json!({"status": {"ready": true, "bogus": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(
        out.data["status"],
        json!({"ready": true}),
        "unknown field pruned"
    );
    // fieldValidation=Strict refuses it instead
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let e = api
        .patch_status("w", &strict, &Patch::Merge(json!({"status": {"bogus": 1}})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 400 && s.message.contains("unknown field \"status.bogus\"")),
        "{e:?}"
    );
    // a PUT of /status too
    let mut w = api.get("w").await.unwrap();
    w.data["status"] = json!({"observed": "x"});
    let e = api
        .replace_status("w", &PostParams::default(), &w)
        .await
        .unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 422), "{e:?}");
}

/// A server-side apply converts the applied configuration to the schema's types
/// first: a field the schema does not declare fails it, as kube-apiserver does, where
/// a create or a merge patch prunes it.
#[tokio::test]
async fn an_apply_of_a_field_the_schema_does_not_declare_fails() {
    use kube::api::{Patch, PatchParams};
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let pp = PatchParams::apply("test").force();
    let mut w = widget("w", json!({"size": 1, "bogus": "x"}));
    w.types = Some(kube::api::TypeMeta {
        api_version: format!("{WIDGET_GROUP}/v1"),
        kind: "Widget".into(),
    });
    let e = api.patch("w", &pp, &Patch::Apply(&w)).await.unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 500, "{s:?}");
    assert_eq!(
        s.message,
        format!(
            "failed to create typed patch object (default/w; {WIDGET_GROUP}/v1, Kind=Widget): .spec.bogus: field not declared in schema"
        )
    );
    w.data["spec"] = json!({"size": 1});
    api.patch("w", &pp, &Patch::Apply(&w)).await.unwrap();
    // the status too
    let status = json!({"apiVersion": format!("{WIDGET_GROUP}/v1"), "kind": "Widget",
        "metadata": {"name": "w"}, "status": {"ready": true, "observedGeneration": 1}});
    let e = api
        .patch_status("w", &pp, &Patch::Apply(&status))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(".status.observedGeneration: field not declared in schema"),
        "{e}"
    );
}

#[tokio::test]
async fn deleting_a_crd_stops_serving_it() {
    let env = start().await;
    let client = env.client.clone();
    let api = install_widgets(&client, "default").await;
    api.create(&PostParams::default(), &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.test.causeway.io", &DeleteParams::default())
        .await
        .unwrap();
    eventually("CRD gone", || async {
        is_gone(&crds, "widgets.test.causeway.io")
            .await
            .then_some(())
    })
    .await;
    eventually("widgets no longer served", || async {
        match api.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    let e = api.get("w").await.unwrap_err();
    assert_eq!(code(&e), 404);
    let disc = Discovery::new(client.clone()).run().await.unwrap();
    assert!(!disc.has_group(WIDGET_GROUP), "the group left discovery");

    // re-creating the CRD starts empty
    let api = install_widgets(&client, "default").await;
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// The custom resource and CustomResourceDefinition strategies do not allow
/// unconditional updates: a PUT without `metadata.resourceVersion` is a 422 from
/// kube-apiserver's store (which names the resource); built-in kinds that allow them
/// (ConfigMaps) still take it.
#[tokio::test]
async fn a_put_without_resource_version_is_refused_for_custom_resources_and_crds() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = start().await;
    let client = env.client.clone();
    let widgets = install_widgets(&client, "default").await;
    let pp = PostParams::default();
    widgets
        .create(&pp, &widget("w", json!({"size": 1})))
        .await
        .unwrap();
    let e = widgets
        .replace("w", &pp, &widget("w", json!({"size": 2})))
        .await
        .unwrap_err();
    assert_eq!(
        message(&e),
        "widgets.test.causeway.io \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    assert_eq!(
        causes(&e),
        [(
            "FieldValueInvalid".to_string(),
            "metadata.resourceVersion".to_string(),
            "Invalid value: 0x0: must be specified for an update".to_string()
        )]
    );
    let kube::Error::Api(s) = &e else {
        unreachable!()
    };
    let d = s.details.as_ref().unwrap();
    assert_eq!(
        (d.kind.as_str(), d.group.as_str()),
        ("widgets", WIDGET_GROUP)
    );
    // the status subresource too
    let mut st = widget("w", json!({"size": 1}));
    st.data["status"] = json!({"ready": true});
    let e = widgets.replace_status("w", &pp, &st).await.unwrap_err();
    assert_eq!(code(&e), 422, "{e}");
    assert_eq!(widgets.get("w").await.unwrap().data["spec"]["size"], 1);
    // with the resourceVersion it goes through
    let mut cur = widgets.get("w").await.unwrap();
    cur.data["spec"]["size"] = json!(2);
    assert_eq!(
        widgets.replace("w", &pp, &cur).await.unwrap().data["spec"]["size"],
        2
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crds.get("widgets.test.causeway.io").await.unwrap();
    crd.metadata.resource_version = None;
    let e = crds
        .replace("widgets.test.causeway.io", &pp, &crd)
        .await
        .unwrap_err();
    assert_eq!(
        message(&e),
        "customresourcedefinitions.apiextensions.k8s.io \"widgets.test.causeway.io\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&pp, &cm("c", json!({}), json!({"a": "1"})))
        .await
        .unwrap();
    let out = cms
        .replace("c", &pp, &cm("c", json!({}), json!({"a": "2"})))
        .await
        .expect("a ConfigMap takes an unconditional update");
    assert_eq!(out.data.unwrap()["a"], "2");
}
