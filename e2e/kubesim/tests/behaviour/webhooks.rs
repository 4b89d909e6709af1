//! Validating admission webhooks: a real HTTPS webhook on 127.0.0.1, configured with a
//! ValidatingWebhookConfiguration, sees CREATE, UPDATE and DELETE and can deny them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::helpers::*;
use kubesim::testing::Webhook;

type Answer = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// Starts a webhook answering each review's request with `answer(request)` after `delay`.
async fn webhook(delay: Duration, answer: Answer) -> Webhook {
    Webhook::start(Arc::new(move |req: &Value| (delay, answer(req))))
        .await
        .unwrap()
}

/// Allows everything.
fn allow_all() -> Answer {
    Arc::new(|_: &Value| json!({"allowed": true}))
}

/// Denies the DELETE of whatever carries the label `protected=yes`.
fn deny_protected() -> Answer {
    Arc::new(|req: &Value| {
        let labels = &req["oldObject"]["metadata"]["labels"];
        if req["operation"] == "DELETE" && labels["protected"] == "yes" {
            json!({"allowed": false, "status": {"message": "it is protected"}})
        } else {
            json!({"allowed": true})
        }
    })
}

fn config_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    );
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "validatingwebhookconfigurations"),
    )
}

/// Creates a configuration with one webhook `hook` (rules and policy from `extra`).
async fn configure(client: &kube::Client, ca_pem: &str, url: &str, extra: Value) {
    let cfg: DynamicObject =
        serde_json::from_value(kubesim::testing::configuration(ca_pem, url, extra)).unwrap();
    config_api(client)
        .create(&PostParams::default(), &cfg)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_webhook_denies_the_delete_of_a_selected_object_until_its_label_is_removed() {
    let env = start().await;
    let hook = webhook(Duration::ZERO, deny_protected()).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"objectSelector": {"matchLabels": {"protected": "yes"}}, "failurePolicy": "Fail"}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &cm("keep", json!({"protected": "yes"}), json!({})),
    )
    .await
    .expect("the webhook allows the create");
    cms.create(&PostParams::default(), &cm("free", json!({}), json!({})))
        .await
        .unwrap();

    let err = cms
        .delete("keep", &DeleteParams::default())
        .await
        .expect_err("the webhook denies the delete");
    assert_eq!(code(&err), 400, "the default code: {err}");
    assert_eq!(
        message(&err),
        "admission webhook \"check.example.com\" denied the request: it is protected"
    );
    assert!(
        !is_gone(&cms, "keep").await,
        "a denied delete keeps the object"
    );

    let before = hook.seen.lock().len();
    cms.delete("free", &DeleteParams::default())
        .await
        .expect("an object outside the objectSelector is not sent");
    assert_eq!(hook.seen.lock().len(), before, "not sent to the webhook");

    let review = hook.seen.lock().last().cloned().unwrap();
    let req = &review["request"];
    assert_eq!(req["operation"], "DELETE");
    assert_eq!(req["name"], "keep");
    assert_eq!(req["namespace"], "default");
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(req["resource"]["resource"], "configmaps");
    assert_eq!(req["oldObject"]["metadata"]["name"], "keep");
    assert!(req["object"].is_null());
    assert!(!req["uid"].as_str().unwrap_or("").is_empty());
    assert!(
        !req["userInfo"]["username"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    );

    // removing the label takes it out of the selector: the delete goes through
    let unlabel = json!({"metadata": {"labels": {"protected": null}}});
    cms.patch("keep", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    cms.delete("keep", &DeleteParams::default())
        .await
        .expect("the unlabelled object can be deleted");
    assert!(is_gone(&cms, "keep").await);
}

#[tokio::test]
async fn a_denial_carries_the_webhooks_code_and_create_and_update_are_sent_with_wildcard_rules() {
    let env = start().await;
    let answer: Answer = Arc::new(|req: &Value| {
        if req["object"]["data"]["bad"] == "1" {
            json!({"allowed": false, "status": {"code": 403, "message": "no bad data"}})
        } else if req["object"]["data"]["bad"] == "2" {
            json!({"allowed": false})
        } else {
            json!({"allowed": true})
        }
    });
    let hook = webhook(Duration::ZERO, answer).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}]}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let err = cms
        .create(
            &PostParams::default(),
            &cm("x", json!({}), json!({"bad": "1"})),
        )
        .await
        .expect_err("denied");
    assert_eq!(code(&err), 403);
    assert_eq!(
        message(&err),
        "admission webhook \"check.example.com\" denied the request: no bad data"
    );
    let created = cms
        .create(
            &PostParams::default(),
            &cm("x", json!({}), json!({"bad": "0"})),
        )
        .await
        .unwrap();
    let mut changed = created.clone();
    changed.data = Some([("bad".to_string(), "2".to_string())].into());
    let err = cms
        .replace("x", &PostParams::default(), &changed)
        .await
        .expect_err("the update is denied");
    assert_eq!(code(&err), 400, "no code: 400");
    assert_eq!(
        message(&err),
        "admission webhook \"check.example.com\" denied the request without explanation"
    );
    let last = hook.seen.lock().last().cloned().unwrap();
    assert_eq!(last["request"]["operation"], "UPDATE");
    assert_eq!(last["request"]["oldObject"]["data"]["bad"], "0");
    // a cluster-scoped create is outside `scope: Namespaced`
    let seen = hook.seen.lock().len();
    namespace(&env.client, "other").await;
    assert_eq!(hook.seen.lock().len(), seen, "namespaces are not sent");
}

#[tokio::test]
async fn an_unreachable_untrusted_or_slow_webhook_fails_the_request_unless_the_policy_is_ignore() {
    let env = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let hook = webhook(Duration::from_secs(5), deny_protected()).await;
    let other_ca = kubesim::http::tls::Pki::generate("other", &["127.0.0.1".into()]).unwrap();
    let cases = [
        (
            "unreachable",
            hook.ca_pem.clone(),
            "https://127.0.0.1:1/x",
            json!({}),
        ),
        (
            "untrusted",
            other_ca.ca_pem.clone(),
            hook.url.as_str(),
            json!({}),
        ),
        (
            "slow",
            hook.ca_pem.clone(),
            hook.url.as_str(),
            json!({"timeoutSeconds": 1}),
        ),
    ];
    for (what, ca, url, extra) in cases {
        for policy in ["Fail", "Ignore"] {
            let mut extra = extra.clone();
            extra["failurePolicy"] = json!(policy);
            configure(&env.client, &ca, url, extra).await;
            let name = format!("{what}-{}", policy.to_lowercase());
            let res = cms
                .create(&PostParams::default(), &cm(&name, json!({}), json!({})))
                .await;
            match (policy, res) {
                ("Fail", Err(e)) => {
                    assert_eq!(code(&e), 500, "{what}: {e}");
                    assert!(
                        message(&e).contains("failed calling webhook \"check.example.com\""),
                        "{what}: {e}"
                    );
                }
                ("Ignore", Ok(_)) => {}
                (p, r) => panic!("{what} with failurePolicy {p}: {r:?}"),
            }
            config_api(&env.client)
                .delete("check", &DeleteParams::default())
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn a_namespace_selector_picks_the_namespaces_whose_objects_are_sent() {
    let env = start().await;
    let hook = webhook(Duration::ZERO, deny_protected()).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"namespaceSelector": {"matchExpressions": [{"key": "guarded", "operator": "Exists"}]}}),
    )
    .await;
    namespace(&env.client, "open").await;
    let guarded = json!({"metadata": {"labels": {"guarded": "1"}}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .patch("default", &PatchParams::default(), &Patch::Merge(&guarded))
        .await
        .unwrap();
    for ns in ["open", "default"] {
        let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), ns);
        cms.create(
            &PostParams::default(),
            &cm("keep", json!({"protected": "yes"}), json!({})),
        )
        .await
        .unwrap();
        let res = cms.delete("keep", &DeleteParams::default()).await;
        match ns {
            "open" => assert!(res.is_ok(), "not selected: {res:?}"),
            _ => assert_eq!(code(&res.expect_err("selected: denied")), 400),
        }
    }
}

/// kube-apiserver admits a PATCH as an UPDATE of the stored object to the patched one
/// (merge, JSON and strategic patches and server-side apply), an apply that creates as
/// a CREATE, and sends `<resource>/status` writes with `subResource: status` only to
/// webhooks whose rules name the subresource.
#[tokio::test]
async fn patches_and_status_writes_are_admitted_as_updates_and_creates() {
    let env = start().await;
    let answer: Answer = Arc::new(|req: &Value| {
        if req["object"]["data"]["bad"] == "1" || req["object"]["status"]["bad"] == "1" {
            json!({"allowed": false, "status": {"code": 403, "message": "no bad data"}})
        } else {
            json!({"allowed": true})
        }
    });
    let hook = webhook(Duration::ZERO, answer).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps", "namespaces/status"], "operations": ["CREATE", "UPDATE"]}]}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &cm("x", json!({}), json!({"bad": "0"})),
    )
    .await
    .unwrap();
    let bad = json!({"data": {"bad": "1"}});
    for (what, patch) in [
        ("merge", Patch::Merge(bad.clone())),
        ("strategic", Patch::Strategic(bad.clone())),
        (
            "json",
            Patch::Json(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/data/bad", "value": "1"}]),
                )
                .unwrap(),
            ),
        ),
        (
            "apply",
            Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"bad": "1"}}),
            ),
        ),
    ] {
        let pp = match patch {
            Patch::Apply(_) => PatchParams::apply("tester").force(),
            _ => PatchParams::default(),
        };
        let err = cms.patch("x", &pp, &patch).await.expect_err(what);
        assert_eq!(
            (code(&err), message(&err).as_str()),
            (
                403,
                "admission webhook \"check.example.com\" denied the request: no bad data"
            ),
            "{what}"
        );
        let last = hook.seen.lock().last().cloned().unwrap();
        assert_eq!(last["request"]["operation"], "UPDATE", "{what}");
        assert_eq!(last["request"]["oldObject"]["data"]["bad"], "0", "{what}");
        assert!(
            last["request"]
                .get("subResource")
                .is_none_or(Value::is_null),
            "{what}"
        );
    }
    assert_eq!(
        cms.get("x").await.unwrap().data.unwrap()["bad"],
        "0",
        "nothing written"
    );
    // an allowed patch goes through; an apply that creates is a CREATE
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"bad": "0", "ok": "1"}})),
    )
    .await
    .unwrap();
    let pp = PatchParams::apply("tester");
    let err = cms
        .patch("new", &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}, "data": {"bad": "1"}})))
        .await
        .expect_err("the create is denied");
    assert_eq!(code(&err), 403);
    let last = hook.seen.lock().last().cloned().unwrap();
    assert_eq!(last["request"]["operation"], "CREATE");
    assert!(last["request"]["oldObject"].is_null());
    assert!(cms.get_opt("new").await.unwrap().is_none());

    // a status write: sent to a rule naming the subresource, with subResource
    namespace(&env.client, "other").await;
    let seen = hook.seen.lock().len();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    nss.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        hook.seen.lock().len(),
        seen,
        "a namespace itself is not sent"
    );
    nss.patch_status(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Active"}})),
    )
    .await
    .unwrap();
    let last = hook.seen.lock().last().cloned().unwrap();
    assert_eq!(hook.seen.lock().len(), seen + 1);
    assert_eq!(
        (
            &last["request"]["operation"],
            &last["request"]["subResource"]
        ),
        (&json!("UPDATE"), &json!("status"))
    );
}

/// kube-apiserver admits the object it writes: a PATCH whose object changes while the
/// webhooks decide is admitted again on the new version and written on it (never over
/// that change), and a status PUT is shown to webhooks with the stored spec, as it will
/// be written.
#[tokio::test]
async fn a_patch_is_admitted_on_the_version_it_writes_and_a_status_put_shows_the_stored_spec() {
    let env = start().await;
    let hook = webhook(Duration::from_millis(600), allow_all()).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps", "namespaces/status"], "operations": ["UPDATE"]}],
            "objectSelector": {"matchExpressions": [{"key": "checked", "operator": "NotIn", "values": ["no"]}]},
        }),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &cm("race", json!({"checked": "yes"}), json!({})),
    )
    .await
    .unwrap();
    let slow = {
        let cms = cms.clone();
        tokio::spawn(async move {
            cms.patch(
                "race",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "1"}})),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // not sent to the webhook (the new object is checked=no): written at once
    cms.patch(
        "race",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"checked": "no"}}})),
    )
    .await
    .unwrap();
    // admitted again on the new version (which this webhook does not select), then
    // written on it: both changes are there
    let patched = slow.await.unwrap().expect("admitted again and written");
    assert_eq!(patched.data.unwrap_or_default()["a"], "1");
    assert_eq!(
        patched.metadata.labels.unwrap()["checked"],
        "no",
        "the other write is kept"
    );
    assert_eq!(
        hook.seen.lock().len(),
        1,
        "the webhook was asked about the first version only"
    );

    // a status PUT that also carries another spec: the webhook sees the stored spec
    namespace(&env.client, "other").await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let mut ns = nss.get("other").await.unwrap();
    ns.spec = Some(k8s_openapi::api::core::v1::NamespaceSpec {
        finalizers: Some(vec![]),
    });
    nss.replace_status("other", &PostParams::default(), &ns)
        .await
        .unwrap();
    let last = hook.seen.lock().last().cloned().unwrap();
    assert_eq!(last["request"]["subResource"], "status");
    assert_eq!(
        last["request"]["object"]["spec"]["finalizers"],
        json!(["kubernetes"])
    );
}

/// A webhook's warnings come back as `Warning` headers (`299 - "<text>"`, quotes and
/// backslashes escaped, UTF-8 kept, each text once), which kubectl prints as
/// `Warning: <text>`; a denial carries them too.
#[tokio::test]
async fn a_webhooks_warnings_are_warning_headers() {
    let env = start().await;
    let answer: Answer = Arc::new(|req: &Value| {
        let warnings = json!([
            "mind the \"gap\"",
            "and this",
            "and this",
            "ünïcode \\ back"
        ]);
        if req["object"]["data"]["bad"] == "1" {
            json!({"allowed": false, "warnings": ["refused, and said so"], "status": {"code": 403, "message": "no"}})
        } else {
            json!({"allowed": true, "warnings": warnings})
        }
    });
    let hook = webhook(Duration::ZERO, answer).await;
    configure(&env.client, &hook.ca_pem, &hook.url, json!({})).await;
    let create = |name: &str, bad: &str| {
        let body = serde_json::to_vec(&cm(name, json!({}), json!({"bad": bad}))).unwrap();
        http::Request::builder()
            .method("POST")
            .uri("/api/v1/namespaces/default/configmaps")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(body))
            .unwrap()
    };
    let warnings = |resp: &http::Response<_>| -> Vec<String> {
        resp.headers()
            .get_all(http::header::WARNING)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    };
    let resp = env.client.send(create("w", "0")).await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(
        warnings(&resp),
        [
            "299 - \"mind the \\\"gap\\\"\"",
            "299 - \"and this\"",
            "299 - \"ünïcode \\\\ back\""
        ]
    );
    let resp = env.client.send(create("x", "1")).await.unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(warnings(&resp), ["299 - \"refused, and said so\""]);
}

/// As kube-apiserver: a custom resource reaches the validating webhooks pruned,
/// defaulted and valid by its schema; one the schema refuses fails with the schema's
/// error, and no webhook is asked.
#[tokio::test]
async fn webhooks_see_custom_resources_after_schema_validation() {
    let env = start().await;
    let widgets = install_widgets(&env.client, "default").await;
    let hook = webhook(Duration::ZERO, allow_all()).await;
    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"rules": [{"apiGroups": [WIDGET_GROUP], "apiVersions": ["*"], "resources": ["widgets"], "operations": ["CREATE", "UPDATE"]}]}),
    )
    .await;
    let err = widgets
        .create(
            &PostParams::default(),
            &widget("bad", json!({"size": "big"})),
        )
        .await
        .expect_err("the schema refuses it");
    assert_eq!(code(&err), 422, "{}", message(&err));
    assert!(hook.seen.lock().is_empty(), "a webhook was asked");
    widgets
        .create(
            &PostParams::default(),
            &widget("good", json!({"size": 2, "shape": "round"})),
        )
        .await
        .unwrap();
    let seen = hook
        .seen
        .lock()
        .last()
        .cloned()
        .expect("the webhook was asked");
    assert_eq!(
        seen["request"]["object"]["spec"],
        json!({"size": 2, "color": "blue"}),
        "pruned and defaulted"
    );
}

/// `matchConditions` (CEL): a configuration whose expression does not compile is
/// refused naming it; a webhook is asked only when its conditions hold; a condition
/// that cannot be evaluated fails the request under `failurePolicy: Fail`.
#[tokio::test]
async fn match_conditions_decide_which_requests_a_webhook_sees() {
    let env = start().await;
    let deny_updates: Answer = Arc::new(|req: &Value| {
        if req["operation"] == "UPDATE" {
            json!({"allowed": false, "status": {"message": "no data changes"}})
        } else {
            json!({"allowed": true})
        }
    });
    let hook = webhook(Duration::ZERO, deny_updates).await;
    let bad = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{
            "name": "bad.example.com",
            "clientConfig": {"url": hook.url},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["*"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "matchConditions": [{"name": "broken", "expression": "object.data ==="}, {"name": "", "expression": "true"}],
        }],
    });
    let err = config_api(&env.client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .expect_err("an expression that does not compile is refused");
    assert_eq!(code(&err), 422, "{err}");
    let m = message(&err);
    assert!(
        m.contains("webhooks[0].matchConditions[0].expression: Invalid value: \"object.data ===\": compilation failed")
            && m.contains("webhooks[0].matchConditions[1].name: Required value"),
        "{m}"
    );

    configure(
        &env.client,
        &hook.ca_pem,
        &hook.url,
        json!({"failurePolicy": "Fail", "matchConditions": [{"name": "data-changes",
            "expression": "request.operation == 'CREATE' || object.data != oldObject.data"}]}),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &cm("c", json!({}), json!({"k": "1"})),
    )
    .await
    .expect("a create is sent and allowed");
    assert_eq!(hook.seen.lock().len(), 1);
    let relabel = json!({"metadata": {"labels": {"team": "a"}}});
    cms.patch("c", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .expect("a label change is not sent to the webhook");
    assert_eq!(hook.seen.lock().len(), 1, "not sent");
    let change = json!({"data": {"k": "2"}});
    let err = cms
        .patch("c", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect_err("a data change is sent, and denied");
    assert_eq!(
        message(&err),
        "admission webhook \"check.example.com\" denied the request: no data changes"
    );
    // a condition that cannot be evaluated: the request fails (failurePolicy: Fail)
    let mut cfg = config_api(&env.client).get("check").await.unwrap();
    cfg.data["webhooks"][0]["matchConditions"] =
        json!([{"name": "deep", "expression": "object.metadata.annotations.missing == 'x'"}]);
    config_api(&env.client)
        .replace("check", &PostParams::default(), &cfg)
        .await
        .unwrap();
    let err = cms
        .patch("c", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .expect_err("the condition's error fails the request");
    let m = message(&err);
    assert!(
        m.starts_with("Internal error occurred: admission webhook \"check.example.com\": failed to evaluate match conditions: matchCondition \"deep\" failed"),
        "{m}"
    );
}
