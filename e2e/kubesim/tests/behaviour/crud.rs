//! Create, get, list, replace and delete of built-in kinds and of a CRD's objects.

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn configmap_crud_round_trip() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let created = api
        .create(
            &PostParams::default(),
            &cm("settings", json!({"app": "web"}), json!({"k": "v"})),
        )
        .await
        .unwrap();
    let md = &created.metadata;
    assert!(md.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(md.creation_timestamp.is_some());
    let rv1: u64 = md.resource_version.as_deref().unwrap().parse().unwrap();
    assert_eq!(md.namespace.as_deref(), Some("default"));

    let got = api.get("settings").await.unwrap();
    assert_eq!(got.data.as_ref().unwrap()["k"], "v");
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let again = api
        .create(
            &PostParams::default(),
            &cm("settings", json!({}), json!({})),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (code(&again), reason(&again).as_str()),
        (409, "AlreadyExists")
    );

    let mut changed = got.clone();
    changed.data = Some([("k".to_string(), "v2".to_string())].into());
    let replaced = api
        .replace("settings", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "resourceVersion must grow: {rv1} -> {rv2}");
    assert_eq!(api.get("settings").await.unwrap().data.unwrap()["k"], "v2");

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        own(list.items.iter().map(|c| c.metadata.name.clone().unwrap())),
        vec!["settings"]
    );
    let list_rv: u64 = list
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(list_rv >= rv2);

    api.delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let e = api.get("settings").await.unwrap_err();
    assert_eq!((code(&e), reason(&e).as_str()), (404, "NotFound"));
    let e = api
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), 404);
    assert!(
        own(api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| c.metadata.name.unwrap()))
        .is_empty()
    );
}

#[tokio::test]
async fn generate_name_gets_a_unique_suffix() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let mut c = cm("", json!({}), json!({}));
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let a = api.create(&PostParams::default(), &c).await.unwrap();
    let b = api.create(&PostParams::default(), &c).await.unwrap();
    let (a, b) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(a.starts_with("gen-") && a.len() == "gen-".len() + 5, "{a}");
    assert_ne!(a, b);
}

#[tokio::test]
async fn service_crud_round_trip() {
    let env = start().await;
    let api: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &svc).await.unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let port = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );

    let mut upd = api.get("web").await.unwrap();
    upd.spec.as_mut().unwrap().selector = Some([("app".to_string(), "web2".to_string())].into());
    let replaced = api
        .replace("web", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.as_ref().unwrap().selector.as_ref().unwrap()["app"],
        "web2"
    );
    assert_eq!(
        replaced.spec.as_ref().unwrap().cluster_ip,
        created.spec.as_ref().unwrap().cluster_ip,
        "the ClusterIP survives an update"
    );
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| s.metadata.name.unwrap())
        .collect();
    assert_eq!(names, vec!["kubernetes", "web"]);

    api.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(is_gone(&api, "web").await);
}

#[tokio::test]
async fn endpointslice_crud_round_trip() {
    let env = start().await;
    let api: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "default");
    let es: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .unwrap();
    api.create(&PostParams::default(), &es).await.unwrap();
    let mut got = api.get("web-abc").await.unwrap();
    assert_eq!(got.address_type, "IPv4");
    assert_eq!(got.endpoints[0].addresses, vec!["10.1.0.5"]);
    got.endpoints
        .push(serde_json::from_value(json!({"addresses": ["10.1.0.6"]})).unwrap());
    api.replace("web-abc", &PostParams::default(), &got)
        .await
        .unwrap();
    let list = api
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].endpoints.len(), 2);
    api.delete("web-abc", &DeleteParams::default())
        .await
        .unwrap();
    assert!(is_gone(&api, "web-abc").await);
}

#[tokio::test]
async fn custom_object_crud_round_trip() {
    let env = start().await;
    let api = install_widgets(&env.client, "default").await;
    let created = api
        .create(&PostParams::default(), &widget("w1", json!({"size": 3})))
        .await
        .unwrap();
    assert_eq!(
        created.types.as_ref().unwrap().api_version,
        "test.causeway.io/v1"
    );
    assert_eq!(created.data["spec"]["size"], 3);
    assert_eq!(
        created.data["spec"]["color"], "blue",
        "schema default applied"
    );
    assert_eq!(created.metadata.generation, Some(1));

    let mut got = api.get("w1").await.unwrap();
    got.data["spec"]["size"] = json!(5);
    let replaced = api
        .replace("w1", &PostParams::default(), &got)
        .await
        .unwrap();
    assert_eq!(replaced.data["spec"]["size"], 5);
    assert_eq!(replaced.metadata.generation, Some(2));

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].data["spec"]["size"], 5);

    api.delete("w1", &DeleteParams::default()).await.unwrap();
    assert!(is_gone(&api, "w1").await);
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let rv = env.quiet().await;
    let out = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", json!({}), json!({"k": "v"})),
        )
        .await
        .unwrap();
    assert_eq!(out.data.unwrap()["k"], "v");
    assert!(
        is_gone(&api, "dry").await,
        "a dry-run create stores nothing"
    );
    assert_eq!(env.server.resource_version(), rv);

    api.create(&PostParams::default(), &cm("real", json!({}), json!({})))
        .await
        .unwrap();
    api.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        !is_gone(&api, "real").await,
        "a dry-run delete deletes nothing"
    );
}

#[tokio::test]
async fn delete_preconditions_and_delete_collection() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let pp = PostParams::default();
    let c = api
        .create(&pp, &cm("c", json!({"app": "x"}), json!({})))
        .await
        .unwrap();
    let stale = kube::api::Preconditions {
        resource_version: Some("1".into()),
        uid: None,
    };
    let e = api
        .delete("c", &DeleteParams::default().preconditions(stale))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
    let wrong_uid = kube::api::Preconditions {
        resource_version: None,
        uid: Some("not-the-uid".into()),
    };
    let e = api
        .delete("c", &DeleteParams::default().preconditions(wrong_uid))
        .await
        .unwrap_err();
    assert_eq!(code(&e), 409);
    assert!(!is_gone(&api, "c").await);
    let right = kube::api::Preconditions {
        resource_version: c.metadata.resource_version.clone(),
        uid: c.metadata.uid.clone(),
    };
    api.delete("c", &DeleteParams::default().preconditions(right))
        .await
        .unwrap();
    assert!(is_gone(&api, "c").await);

    for (n, app) in [("a1", "x"), ("a2", "x"), ("b1", "y")] {
        api.create(&pp, &cm(n, json!({"app": app}), json!({})))
            .await
            .unwrap();
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=x"),
    )
    .await
    .unwrap();
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(own(left), vec!["b1"]);
}

/// What kube-controller-manager keeps in every namespace: the `default` ServiceAccount
/// and `kube-root-ca.crt` holding the server's CA, recreated when deleted, its data put
/// back when changed, and gone with the namespace.
#[tokio::test]
async fn every_namespace_has_its_default_service_account_and_root_ca() {
    let env = start().await;
    namespace(&env.client, "fresh").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "fresh");
    let ca = env.server.ca_pem().unwrap().to_string();
    let data = |c: ConfigMap| c.data.unwrap_or_default().get("ca.crt").cloned();
    assert_eq!(data(cms.get(ROOT_CA).await.unwrap()), Some(ca.clone()));
    cms.patch(
        ROOT_CA,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"ca.crt": "not the CA"}})),
    )
    .await
    .unwrap();
    eventually("the CA bundle put back", || async {
        (data(cms.get(ROOT_CA).await.ok()?) == Some(ca.clone())).then_some(())
    })
    .await;
    cms.delete(ROOT_CA, &DeleteParams::default()).await.unwrap();
    eventually("the CA bundle recreated", || async {
        cms.get_opt(ROOT_CA).await.ok()?
    })
    .await;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.client.clone(), "fresh");
    sas.delete("default", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the default ServiceAccount recreated", || async {
        sas.get_opt("default").await.ok()?
    })
    .await;
}
