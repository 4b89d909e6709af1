use super::*;
use crate::clusters::summary::tests::member;

fn enablement(gv: &str, resources: &[(&str, &str)]) -> ApiEnablement {
    ApiEnablement {
        group_version: gv.into(),
        resources: resources
            .iter()
            .map(|(name, kind)| ApiResourceRef {
                name: (*name).into(),
                kind: (*kind).into(),
            })
            .collect(),
    }
}

#[test]
fn the_condition_says_complete_partial_or_empty() {
    let some = vec![enablement("v1", &[("pods", "Pod")])];
    let broken = vec![(
        "metrics.k8s.io/v1beta1".to_string(),
        "503 service unavailable".to_string(),
    )];
    // (enablements, failures, status, reason, words in the message)
    type Case = (
        Vec<ApiEnablement>,
        Vec<(String, String)>,
        &'static str,
        &'static str,
        &'static str,
    );
    let table: Vec<Case> = vec![
        (
            some.clone(),
            vec![],
            "True",
            "Complete",
            "collected all 1 group versions",
        ),
        (
            some.clone(),
            broken.clone(),
            "False",
            "Partial",
            "discovery failed for metrics.k8s.io/v1beta1: 503 service unavailable",
        ),
        (vec![], vec![], "False", "Empty", "found no APIs"),
        (
            vec![],
            broken.clone(),
            "False",
            "Empty",
            "metrics.k8s.io/v1beta1",
        ),
    ];
    for (enablements, failed, status, reason, words) in table {
        let apis = Apis {
            enablements,
            failed,
        };
        let (s, r, m) = apis.verdict();
        assert_eq!((s, r), (status, reason), "{apis:?}");
        assert!(m.contains(words), "{m:?} should contain {words:?}");
    }
}

#[test]
fn an_aggregated_answer_skips_subresources_and_names_stale_versions() {
    let list: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
                {"resource": "deployments", "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                 "subresources": [{"subresource": "status", "responseKind": {"kind": "Deployment"}}]}]}]},
            {"metadata": {"name": "metrics.k8s.io"}, "versions": [{"version": "v1beta1", "freshness": "Stale", "resources": []}]},
        ]
    }))
    .unwrap();
    let mut apis = Apis::default();
    from_aggregated(list, &mut apis);
    assert_eq!(
        apis.enablements,
        vec![enablement("apps/v1", &[("deployments", "Deployment")])]
    );
    assert_eq!(apis.failed.len(), 1);
    assert_eq!(apis.failed[0].0, "metrics.k8s.io/v1beta1");
    assert_eq!(apis.verdict().1, "Partial");
}

#[test]
fn a_resource_list_drops_subresources() {
    let list: APIResourceList = serde_json::from_value(serde_json::json!({
        "groupVersion": "apps/v1", "resources": [
            {"name": "deployments", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": []},
            {"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": []},
            {"name": "deployments/scale", "singularName": "", "namespaced": true, "kind": "Scale", "verbs": []},
        ]
    }))
    .unwrap();
    assert_eq!(
        from_resource_list("apps/v1".into(), list),
        enablement("apps/v1", &[("deployments", "Deployment")])
    );
}

/// Looks up one group version's resource in a discovery result.
fn kind_of(apis: &Apis, gv: &str, resource: &str) -> Option<String> {
    apis.enablements
        .iter()
        .find(|e| e.group_version == gv)?
        .resources
        .iter()
        .find(|r| r.name == resource)
        .map(|r| r.kind.clone())
}

#[tokio::test]
async fn discovery_of_a_kubesim_member_is_complete_either_way() {
    let (_server, client) = member(kubesim::Config::new("apis")).await;
    let apis = discover(&client).await;
    assert_eq!(apis.verdict().1, "Complete", "{:?}", apis.failed);
    assert_eq!(
        kind_of(&apis, "apps/v1", "deployments").as_deref(),
        Some("Deployment")
    );
    assert_eq!(kind_of(&apis, "v1", "pods").as_deref(), Some("Pod"));
    assert!(
        apis.enablements
            .iter()
            .flat_map(|e| &e.resources)
            .all(|r| !r.name.contains('/')),
        "no subresources"
    );
    assert!(
        apis.enablements
            .is_sorted_by(|a, b| a.group_version < b.group_version)
    );
    // The classic walk (servers without aggregated discovery) finds the same.
    assert_eq!(classic(&client).await.sort(), apis);
}

#[tokio::test]
async fn an_unreachable_member_gives_empty_with_the_error() {
    let (server, client) = member(kubesim::Config::new("gone")).await;
    server.shutdown();
    server.stopped().await;
    let apis = discover(&client).await;
    let (status, reason, message) = apis.verdict();
    assert_eq!((status, reason), ("False", "Empty"));
    assert!(message.contains("/api"), "{message}");
}
