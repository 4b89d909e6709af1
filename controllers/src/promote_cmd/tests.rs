use serde_json::json;

use super::*;

fn kind(group: &str, kind: &str, plural: &str, namespaced: bool) -> Kind {
    Kind::new(group, "v1", kind, plural, namespaced)
}

#[test]
fn a_member_object_becomes_a_template_without_what_the_member_set() {
    let deployment = kind("apps", "Deployment", "deployments", true);
    let service = kind("", "Service", "services", true);
    let job = kind("batch", "Job", "jobs", true);
    let cases = [
        (
            "server metadata, status and the member's own annotations go; the rest stays",
            &deployment,
            json!({"metadata": {"name": "shop", "namespace": "demo", "uid": "u", "resourceVersion": "9",
                    "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{}],
                    "ownerReferences": [{}], "finalizers": ["x"],
                    "labels": {"app": "shop", "causeway.io/managed": "true"},
                    "annotations": {"deployment.kubernetes.io/revision": "2", "team": "shop",
                        "causeway.io/work": "causeway-es-east/demo.shop-deployment", "causeway.io/template-generation": "4"}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
                "status": {"readyReplicas": 2}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "shop", "namespace": "demo", "labels": {"app": "shop"},
                    "annotations": {"team": "shop", "causeway.io/conflict-resolution": "overwrite"}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
        ),
        (
            "no labels or annotations: the conflict-resolution annotation alone",
            &deployment,
            json!({"metadata": {"name": "a", "labels": {"causeway.io/managed": "true"}}, "spec": {}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "a", "annotations": {"causeway.io/conflict-resolution": "overwrite"}}, "spec": {}}),
        ),
        (
            "a Service's allocated cluster IPs stay the member's",
            &service,
            json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "ports": [{"port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "s", "annotations": {"causeway.io/conflict-resolution": "overwrite"}}, "spec": {"ports": [{"port": 80}]}}),
        ),
        (
            "a headless Service keeps None",
            &service,
            json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "s", "annotations": {"causeway.io/conflict-resolution": "overwrite"}},
                "spec": {"clusterIP": "None", "clusterIPs": ["None"]}}),
        ),
        (
            "a Job's generated selector and uid labels go",
            &job,
            json!({"metadata": {"name": "j"}, "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u", "controller-uid": "u", "app": "j"}}}}}),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "annotations": {"causeway.io/conflict-resolution": "overwrite"}},
                "spec": {"template": {"metadata": {"labels": {"app": "j"}}}}}),
        ),
        (
            "a Job with manualSelector keeps its selector",
            &job,
            json!({"metadata": {"name": "j"}, "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}}),
            json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "annotations": {"causeway.io/conflict-resolution": "overwrite"}},
                "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}}),
        ),
    ];
    for (what, kind, live, want) in cases {
        assert_eq!(template_from_member(&live, kind), want, "{what}");
    }
}

#[test]
fn the_policy_places_the_template_on_its_cluster_and_takes_the_object_over() {
    let deployment = kind("apps", "Deployment", "deployments", true);
    let p = policy_for(&deployment, "demo", "shop", "east");
    assert_eq!(
        p,
        json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "shop-deployment", "namespace": "demo"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"}],
                "placement": {"clusterAffinity": {"clusterNames": ["east"]}},
                "conflictResolution": "Overwrite",
                "preserveResourcesOnDeletion": true,
            },
        })
    );
    // it is a valid policy that claims the template (what the detector will do)
    let typed: PropagationPolicy = serde_json::from_value(p).unwrap();
    let template: kube::api::DynamicObject =
        serde_json::from_value(json!({"apiVersion": "apps/v1",
        "kind": "Deployment", "metadata": {"name": "shop", "namespace": "demo"}}))
        .unwrap();
    let pref = causeway_crds::federation::selection::PolicyRef::from_pp(&typed);
    causeway_crds::federation::selection::validate_policy(&pref).unwrap();
    let meta = causeway_crds::federation::selection::TemplateMeta::from_object(&template).unwrap();
    let held = causeway_crds::federation::selection::claim(&meta, &[pref], None).unwrap();
    assert_eq!(held.unwrap().policy.name, "shop-deployment");

    let role = kind(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        false,
    );
    let c = policy_for(&role, "ignored", "Admin", "west");
    assert_eq!(c["kind"], "ClusterPropagationPolicy");
    assert_eq!(c["metadata"], json!({"name": "admin-clusterrole"}));
    assert_eq!(
        c["spec"]["placement"]["clusterAffinity"]["clusterNames"],
        json!(["west"])
    );
    serde_json::from_value::<ClusterPropagationPolicy>(c).unwrap();
}

/// Another policy that would take the promoted template from promote's own (a higher
/// priority) is named before anything is written; a broader one of the same priority
/// loses to promote's name selector; with --no-policy, the one that will claim it is
/// said.
#[test]
fn promote_refuses_when_another_policy_would_claim_the_template() {
    let deployment = kind("apps", "Deployment", "deployments", true);
    let ours = policy_for(&deployment, "demo", "shop", "east");
    let template = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "demo"}});
    let every_deployment = |priority: i32| -> PropagationPolicy {
        serde_json::from_value(json!({"apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "all-deployments", "namespace": "demo"},
            "spec": {"priority": priority,
                     "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                     "placement": {"clusterAffinity": {"clusterNames": ["east", "west", "north"]}}}}))
        .unwrap()
    };
    let got = claimant(&template, &[], &[], Some(&ours)).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("PropagationPolicy demo/shop-deployment")
    );
    let got = claimant(&template, &[every_deployment(0)], &[], Some(&ours)).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("PropagationPolicy demo/shop-deployment"),
        "a name selector is more specific than a kind-wide one"
    );
    let e = claimant(&template, &[every_deployment(10)], &[], Some(&ours)).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "PropagationPolicy demo/all-deployments selects this template too and would claim it before promote's PropagationPolicy demo/shop-deployment"
        ),
        "{e}"
    );
    let got = claimant(&template, &[every_deployment(10)], &[], None).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("PropagationPolicy demo/all-deployments")
    );
    assert_eq!(claimant(&template, &[], &[], None).unwrap(), None);
    // promote's own policy already on the hub (a promote that did not finish) is ours
    let kept: PropagationPolicy = serde_json::from_value(ours.clone()).unwrap();
    let got = claimant(&template, &[kept], &[], Some(&ours)).unwrap();
    assert_eq!(
        got.as_deref(),
        Some("PropagationPolicy demo/shop-deployment")
    );
}

/// A member object opted out with `causeway.io/managed: "false"` is refused before
/// anything is written, with what to do; `true` or no label is adoptable.
#[test]
fn an_opted_out_object_is_not_promoted() {
    let labelled =
        |v: &str| json!({"metadata": {"name": "shop", "labels": {"causeway.io/managed": v}}});
    let e = check_adoptable(&labelled("false"), "Deployment demo/shop", "east").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Deployment demo/shop in member east is labelled causeway.io/managed=false, which keeps Causeway from ever taking it over, so promote would write a template that adopts nothing; remove the label in member east (kubectl label <kind>/<name> causeway.io/managed-) and run promote again"
    );
    assert!(check_adoptable(&labelled("true"), "Deployment demo/shop", "east").is_ok());
    assert!(check_adoptable(&json!({"metadata": {"name": "shop"}}), "x", "east").is_ok());
}

/// The policy promote wrote, read back from the hub (with the server's metadata), is
/// promote's: a second run keeps it; another spec or kind is not.
#[test]
fn promote_keeps_only_its_own_policy() {
    let deployment = kind("apps", "Deployment", "deployments", true);
    let ours = policy_for(&deployment, "demo", "shop", "east");
    let mut stored: PropagationPolicy = serde_json::from_value(ours.clone()).unwrap();
    stored.metadata.uid = Some("u-1".into());
    stored.metadata.resource_version = Some("12".into());
    let stored = serde_json::to_value(&stored).unwrap();
    assert!(same_policy(&stored, &ours));
    let mut other = stored.clone();
    other["spec"]["placement"]["clusterAffinity"]["clusterNames"] = json!(["east", "west"]);
    assert!(!same_policy(&other, &ours));
    let cluster_scoped = policy_for(
        &kind("", "Namespace", "namespaces", false),
        "",
        "shop",
        "east",
    );
    assert!(!same_policy(&stored, &cluster_scoped));
}
