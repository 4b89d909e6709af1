//! Fault knobs: failing readiness, dropped connections, added latency.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn not_ready_fails_readyz_only() {
    let env = start().await;
    let c = &env.client;
    assert_eq!(raw(c, "GET", "/readyz", None, vec![]).await.code, 200);
    env.server.faults().set_not_ready(true);
    let r = raw(c, "GET", "/readyz", None, vec![]).await;
    assert_eq!(r.code, 500, "{}", r.body);
    assert_eq!(
        raw(c, "GET", "/livez", None, vec![]).await.code,
        200,
        "still live"
    );
    assert_eq!(raw(c, "GET", "/healthz", None, vec![]).await.code, 200);
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    api.list(&ListParams::default())
        .await
        .expect("the API still answers");
    env.server.faults().set_not_ready(false);
    assert_eq!(raw(c, "GET", "/readyz", None, vec![]).await.code, 200);
}

#[tokio::test]
async fn dropped_connections_fail_requests_until_reset() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.create(&PostParams::default(), &cm("before", json!({}), json!({})))
        .await
        .unwrap();

    env.server.faults().set_drop_connections(true);
    // both the pooled connection and fresh clients fail
    for attempt in 0..3 {
        let r = within(
            "a dropped request to fail",
            api.list(&ListParams::default()),
        )
        .await;
        let e = r.expect_err("requests must fail while connections are dropped");
        assert!(
            !matches!(e, kube::Error::Api(_)),
            "attempt {attempt}: no API answer expected: {e:?}"
        );
    }
    let fresh = client_from_yaml(&env.server.kubeconfig()).await;
    let e = within(
        "a fresh client to fail",
        Api::<ConfigMap>::namespaced(fresh, "default").list(&ListParams::default()),
    )
    .await
    .expect_err("a new connection is dropped too");
    assert!(!matches!(e, kube::Error::Api(_)), "{e:?}");
    let e = within(
        "a write to fail",
        api.create(&PostParams::default(), &cm("during", json!({}), json!({}))),
    )
    .await
    .expect_err("writes fail too");
    assert!(!matches!(e, kube::Error::Api(_)), "{e:?}");

    env.server.faults().set_drop_connections(false);
    let names = eventually("requests succeed again", || async {
        api.list(&ListParams::default()).await.ok().map(|l| {
            l.items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect::<Vec<_>>()
        })
    })
    .await;
    assert_eq!(
        own(names),
        vec!["before"],
        "nothing was written while dropping"
    );
}

#[tokio::test]
async fn latency_delays_every_request() {
    let env = start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    api.list(&ListParams::default()).await.unwrap();
    env.server.faults().set_latency(Duration::from_millis(300));
    let t = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    env.server.faults().set_latency(Duration::ZERO);
    let t = Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}
