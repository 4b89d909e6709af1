use super::*;
use crate::clusters::summary::tests::member;
use serde_json::json;
use std::time::Duration;

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
    let apis = discover(&client, DISCOVERY_TIMEOUT).await;
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
    assert_eq!(classic(&client, DISCOVERY_TIMEOUT).await.sort(), apis);
}

#[tokio::test]
async fn an_unreachable_member_gives_empty_with_the_error() {
    let (server, client) = member(kubesim::Config::new("gone")).await;
    server.shutdown();
    server.stopped().await;
    let apis = discover(&client, DISCOVERY_TIMEOUT).await;
    let (status, reason, message) = apis.verdict();
    assert_eq!((status, reason), ("False", "Empty"));
    assert!(message.contains("/api"), "{message}");
}

/// kubesim (plain HTTP) behind a proxy that refuses aggregated discovery (406, as a
/// server older than 1.26 would) and answers 503 for `broken`, as for an aggregated API
/// server that is down. Returns the client, through the proxy, and what to keep alive.
async fn member_with_a_broken_group_version(
    broken: &'static str,
) -> (kube::Client, kubesim::Server, tokio_util::sync::DropGuard) {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let mut cfg = kubesim::Config::new("partial");
    cfg.tls = false;
    let server = kubesim::Server::start(cfg).await.expect("kubesim starts");
    let upstream = server.url();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let forward = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let serve = stop.clone();
    tokio::spawn(async move {
        while let Some((tcp, _)) =
            causeway_runtime::net::accept(&listener, &serve, "discovery proxy").await
        {
            let (forward, upstream) = (forward.clone(), upstream.clone());
            let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let (forward, upstream) = (forward.clone(), upstream.clone());
                async move {
                    let path = req.uri().path().to_string();
                    let aggregated = req.headers().get(http::header::ACCEPT).is_some_and(|a| {
                        a.to_str().unwrap_or("").contains("APIGroupDiscoveryList")
                    });
                    let refuse = |code: u16| {
                        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "code": code, "message": format!("{path} refused by the test proxy")});
                        http::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(Full::from(status.to_string()))
                    };
                    if aggregated && (path == "/api" || path == "/apis") {
                        return refuse(406);
                    }
                    if path == format!("/apis/{broken}") {
                        return refuse(503);
                    }
                    let (mut parts, body) = req.into_parts();
                    parts.uri = format!("{upstream}{}", parts.uri).parse().unwrap();
                    let body = body.collect().await.unwrap().to_bytes();
                    let answer = forward
                        .request(http::Request::from_parts(parts, Full::new(body)))
                        .await
                        .unwrap();
                    let (parts, body) = answer.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    Ok::<_, http::Error>(http::Response::from_parts(parts, Full::new(body)))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    let mut cfg = kube::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.auth_info.token = Some(server.admin_token().to_string().into());
    (
        kube::Client::try_from(cfg).unwrap(),
        server,
        stop.drop_guard(),
    )
}

#[tokio::test]
async fn a_failing_group_version_is_named_and_the_rest_still_collected() {
    let (client, _server, _proxy) = member_with_a_broken_group_version("apps/v1").await;
    // kube retries the 503 for minutes; discovery gives up on it after its limit.
    let limit = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let apis = discover(&client, limit).await;
    assert!(
        started.elapsed() < 5 * limit,
        "took {:?}",
        started.elapsed()
    );
    let (status, reason, message) = apis.verdict();
    assert_eq!((status, reason), ("False", "Partial"), "{message}");
    assert!(
        message.contains("apps/v1: no answer within 1000 ms"),
        "{message}"
    );
    assert_eq!(
        apis.failed
            .iter()
            .map(|(gv, _)| gv.as_str())
            .collect::<Vec<_>>(),
        ["apps/v1"]
    );
    assert_eq!(kind_of(&apis, "v1", "pods").as_deref(), Some("Pod"));
    assert!(
        kind_of(&apis, "rbac.authorization.k8s.io/v1", "clusterroles").is_some(),
        "{apis:?}"
    );
    assert!(kind_of(&apis, "apps/v1", "deployments").is_none());
}
