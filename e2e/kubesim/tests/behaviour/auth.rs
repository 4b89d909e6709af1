//! Authentication (bearer tokens, anonymous) and RBAC authorization.

use std::io::Write;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn requests_without_a_valid_token_are_401() {
    let env = start().await;
    for (what, token) in [
        ("no token", None),
        ("unknown token", Some("not-a-real-token")),
    ] {
        let c = client_with(
            &env,
            Creds {
                token,
                ..Default::default()
            },
        )
        .await;
        let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
        let e = api.list(&ListParams::default()).await.unwrap_err();
        assert_eq!(
            (code(&e), reason(&e).as_str()),
            (401, "Unauthorized"),
            "{what}"
        );
        let r = raw(&c, "GET", "/api", None, vec![]).await;
        assert_eq!(r.code, 401, "{what}: discovery needs authentication too");
        // health endpoints are public
        let r = raw(&c, "GET", "/healthz", None, vec![]).await;
        assert_eq!(r.code, 200, "{what}");
    }
}

#[tokio::test]
async fn anonymous_requests_are_let_in_only_when_allowed_and_still_subject_to_rbac() {
    let mut cfg = kubesim::Config::new("t");
    cfg.allow_anonymous = true;
    let env = start_with(cfg).await;
    let c = client_with(&env, Creds::default()).await;
    let api: Api<ConfigMap> = Api::namespaced(c, "default");
    let e = api.list(&ListParams::default()).await.unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 403);
    assert!(s.message.contains("system:anonymous"), "{}", s.message);
}

#[tokio::test]
async fn token_file_user_needs_rbac_then_gets_exactly_what_is_granted() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "# static tokens\nalice-token,alice,1001,\"devs,qa\"").unwrap();
    let mut cfg = kubesim::Config::new("t");
    cfg.tokens =
        kubesim::http::auth::parse_token_file(&std::fs::read_to_string(file.path()).unwrap())
            .unwrap();
    let env = start_with(cfg).await;
    let admin = env.client.clone();
    let alice = client_with(
        &env,
        Creds {
            token: Some("alice-token"),
            ..Default::default()
        },
    )
    .await;
    let alice_cms: Api<ConfigMap> = Api::namespaced(alice.clone(), "default");

    let e = alice_cms.list(&ListParams::default()).await.unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(
        s.message
            .contains("User \"alice\" cannot list resource \"configmaps\""),
        "{}",
        s.message
    );

    // grant: a Role in default for configmaps, bound to the user
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "cm-rw", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-cm", "namespace": "default"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "Role", "name": "cm-rw", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();

    alice_cms
        .list(&ListParams::default())
        .await
        .expect("list is granted");
    alice_cms
        .create(&PostParams::default(), &cm("mine", json!({}), json!({})))
        .await
        .expect("create is granted");
    alice_cms.get("mine").await.expect("get is granted");
    let e = alice_cms
        .delete("mine", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), 403, "delete was not granted");
    let e = Api::<ConfigMap>::namespaced(alice.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), 403, "the RoleBinding only covers its namespace");
    let alice_secrets: Api<Secret> = Api::all(alice.clone());
    assert_eq!(
        code(
            &alice_secrets
                .list(&ListParams::default())
                .await
                .unwrap_err()
        ),
        403
    );

    // grant through a group: a ClusterRole bound cluster-wide to "devs"
    let cr: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "secret-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &cr)
        .await
        .unwrap();
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "devs-read-secrets"},
        "subjects": [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "ClusterRole", "name": "secret-reader", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &crb)
        .await
        .unwrap();
    alice_secrets
        .list(&ListParams::default())
        .await
        .expect("the group binding grants list on secrets everywhere");

    // revoking the binding takes the permission away again
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .delete("alice-cm", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        code(&alice_cms.list(&ListParams::default()).await.unwrap_err()),
        403
    );
}

/// ClusterRoles that aggregate each other settle on the union of their sources and
/// stay there (no rewrite every pass), as kube-controller-manager's aggregation does.
#[tokio::test]
async fn clusterroles_aggregating_each_other_settle() {
    let env = start().await;
    let api: Api<ClusterRole> = Api::all(env.client.clone());
    let pp = PostParams::default();
    let role = |v: serde_json::Value| serde_json::from_value::<ClusterRole>(v).unwrap();
    for (name, labels, selects, verb) in [
        (
            "ring-a",
            json!({"ring": "a", "to-b": "true"}),
            "to-a",
            "get",
        ),
        (
            "ring-b",
            json!({"ring": "b", "to-a": "true"}),
            "to-b",
            "list",
        ),
    ] {
        api.create(
            &pp,
            &role(json!({"metadata": {"name": name, "labels": labels},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selects: "true"}}]}})),
        )
        .await
        .unwrap();
        api.create(
            &pp,
            &role(
                json!({"metadata": {"name": format!("{name}-src"), "labels": {selects: "true"}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": [verb]}]}),
            ),
        )
        .await
        .unwrap();
    }
    let verbs = |r: &ClusterRole| {
        let mut v: Vec<String> = r
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.verbs.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let settled = eventually("both rings hold get and list", || async {
        let (a, b) = (api.get("ring-a").await.ok()?, api.get("ring-b").await.ok()?);
        (verbs(&a) == ["get", "list"] && verbs(&b) == ["get", "list"]).then_some((
            a.metadata.resource_version.unwrap(),
            b.metadata.resource_version.unwrap(),
        ))
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (a, b) = (
        api.get("ring-a").await.unwrap(),
        api.get("ring-b").await.unwrap(),
    );
    assert_eq!(
        (
            a.metadata.resource_version.unwrap(),
            b.metadata.resource_version.unwrap()
        ),
        settled,
        "no rewrite once settled"
    );
}

/// A ServiceAccount subject without a namespace in a RoleBinding is one of the
/// binding's namespace, as kube's RBAC reads it.
#[tokio::test]
async fn a_service_account_subject_defaults_to_the_bindings_namespace() {
    let env = start().await;
    namespace(&env.client, "ns1").await;
    let pp = PostParams::default();
    let roles: Api<Role> = Api::namespaced(env.client.clone(), "ns1");
    roles
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let rbs: Api<RoleBinding> = Api::namespaced(env.client.clone(), "ns1");
    rbs.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "robot-reads"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    env.server.add_token(
        "robot-token",
        kubesim::User {
            name: "system:serviceaccount:ns1:robot".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let robot = client_with(&env, token_creds("robot-token")).await;
    let cms: Api<ConfigMap> = Api::namespaced(robot, "ns1");
    cms.list(&ListParams::default())
        .await
        .expect("robot may list in ns1");
}

/// As kube-apiserver: a server-side apply that creates its object is authorized as
/// `patch` and as `create`; one that changes an existing object needs `patch` only.
#[tokio::test]
async fn an_apply_that_creates_needs_create_permission_too() {
    let mut cfg = kubesim::Config::new("t");
    cfg.tokens = kubesim::http::auth::parse_token_file("bob-token,bob,1002,\"\"").unwrap();
    let env = start_with(cfg).await;
    let admin = env.client.clone();
    let grant = |verbs: serde_json::Value| {
        let admin = admin.clone();
        async move {
            let role: Role = serde_json::from_value(json!({
                "metadata": {"name": "cm", "namespace": "default"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
            }))
            .unwrap();
            let pp = kube::api::PatchParams::apply("test").force();
            Api::<Role>::namespaced(admin, "default")
                .patch("cm", &pp, &kube::api::Patch::Apply(&role))
                .await
                .unwrap();
        }
    };
    grant(json!(["get", "patch"])).await;
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bob-cm", "namespace": "default"},
        "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "Role", "name": "cm", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
    let bob = client_with(
        &env,
        Creds {
            token: Some("bob-token"),
            ..Default::default()
        },
    )
    .await;
    let bobs: Api<ConfigMap> = Api::namespaced(bob, "default");
    let apply = |name: &'static str, v: &'static str| {
        let bobs = bobs.clone();
        async move {
            let pp = kube::api::PatchParams::apply("bob");
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": v}});
            bobs.patch(name, &pp, &kube::api::Patch::Apply(&body)).await
        }
    };
    let e = apply("new", "1").await.unwrap_err();
    let kube::Error::Api(s) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(s.code, 403);
    assert!(
        s.message
            .contains("User \"bob\" cannot create resource \"configmaps\""),
        "{}",
        s.message
    );
    assert!(
        Api::<ConfigMap>::namespaced(admin.clone(), "default")
            .get_opt("new")
            .await
            .unwrap()
            .is_none(),
        "nothing was created"
    );
    // an existing object: patch is enough
    Api::<ConfigMap>::namespaced(admin.clone(), "default")
        .create(&PostParams::default(), &cm("old", json!({}), json!({})))
        .await
        .unwrap();
    apply("old", "2").await.expect("patch is granted");
    // with create granted, the apply creates
    grant(json!(["get", "patch", "create"])).await;
    apply("new", "1").await.expect("create is granted");
}

/// kube-apiserver's `RequestInfoFactory` makes the name a list or watch selects
/// (`fieldSelector=metadata.name=x`) the request's name, so a Role's `resourceNames`
/// cover such a list or watch (kubectl get cm/x -w, kube-rs `watch_object`); and a
/// watch that names its object in the path with another name in the selector is a 400.
#[tokio::test]
async fn resource_names_cover_lists_and_watches_that_select_that_name() {
    let mut cfg = kubesim::Config::new("t");
    cfg.tokens = kubesim::http::auth::parse_token_file("bob-token,bob,1002").unwrap();
    let env = start_with(cfg).await;
    let admin = env.client.clone();
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    for n in ["mine", "theirs"] {
        cms.create(&pp, &cm(n, json!({}), json!({}))).await.unwrap();
    }
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "just-mine", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get", "list", "watch"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), "default")
        .create(&pp, &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bob-mine", "namespace": "default"},
        "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"kind": "Role", "name": "just-mine", "apiGroup": "rbac.authorization.k8s.io"},
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), "default")
        .create(&pp, &rb)
        .await
        .unwrap();
    let bob = client_with(&env, token_creds("bob-token")).await;
    let bob_cms: Api<ConfigMap> = Api::namespaced(bob.clone(), "default");

    let mine = bob_cms
        .list(&ListParams::default().fields("metadata.name=mine"))
        .await
        .expect("a list selecting the granted name");
    assert_eq!(mine.items.len(), 1);
    let path = "/api/v1/namespaces/default/configmaps";
    let r = raw(
        &bob,
        "GET",
        &format!("{path}?watch=true&fieldSelector=metadata.name%3Dmine&timeoutSeconds=1"),
        None,
        vec![],
    )
    .await;
    assert_eq!(
        r.code, 200,
        "a watch selecting the granted name: {}",
        r.body
    );
    for sel in ["metadata.name=theirs", "metadata.name!=theirs", ""] {
        let e = bob_cms
            .list(&ListParams::default().fields(sel))
            .await
            .unwrap_err();
        assert_eq!(code(&e), 403, "{sel:?}");
    }
    let e = bob_cms
        .list(&ListParams::default().fields("metadata.name=theirs"))
        .await
        .unwrap_err();
    assert!(
        message(&e).starts_with("configmaps \"theirs\" is forbidden: User \"bob\" cannot list"),
        "{}",
        message(&e)
    );

    // a watch of one object by its path: a selector must pin that same name
    let named = "/api/v1/watch/namespaces/default/configmaps/mine";
    for sel in ["metadata.name%3Dtheirs", "metadata.namespace%3Ddefault"] {
        let r = raw(
            &admin,
            "GET",
            &format!("{named}?fieldSelector={sel}&timeoutSeconds=1"),
            None,
            vec![],
        )
        .await;
        assert_eq!(
            (r.code, r.body["message"].as_str()),
            (
                400,
                Some("fieldSelector metadata.name doesn't match requested name")
            ),
            "{sel}: {}",
            r.body
        );
    }
    let r = raw(
        &admin,
        "GET",
        &format!("{named}?fieldSelector=metadata.name%3Dmine&timeoutSeconds=1"),
        None,
        vec![],
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
}
