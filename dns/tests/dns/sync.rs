//! SERVFAIL until the first sync; /healthz, /readyz and /metrics.

use hickory_proto::rr::RecordType;

use crate::support::{Env, eventually, http_get, install_crds};

#[tokio::test]
async fn servfail_until_the_first_sync_then_ready() {
    let mut env = Env::bare().await;
    // No CRDs yet: the ServiceImport watch cannot list, so the zone is not synced.
    env.start_dns(|_| {}).await;
    let metrics = env.dns().metrics.expect("metrics address");
    let r = env
        .udp("hello.demo.svc.clusterset.local.", RecordType::A)
        .await;
    assert_eq!(r.rcode, 2, "SERVFAIL before the first sync: {r:?}");
    let r = env
        .tcp("dns-version.clusterset.local.", RecordType::TXT)
        .await;
    assert_eq!(r.rcode, 2);
    assert_eq!(http_get(metrics, "/healthz").await.0, 200);
    assert_eq!(http_get(metrics, "/readyz").await.0, 503);
    assert!(!env.dns().ready());

    install_crds(&env.client).await;
    let dns = env.dns();
    eventually("first sync after the CRDs appear", || async { dns.ready() }).await;
    assert_eq!(http_get(metrics, "/readyz").await.0, 200);
    let r = env
        .udp("hello.demo.svc.clusterset.local.", RecordType::A)
        .await;
    assert_eq!(r.rcode, 3, "synced: a missing service is NXDOMAIN");
    let (status, body) = http_get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    for counted in ["NXDOMAIN", "SERVFAIL"] {
        let key = format!("causeway_dns_queries_total{{qtype=\"A\",rcode=\"{counted}\"}} ");
        let value = body
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(value.is_some_and(|v| v >= 1), "{key} not counted:\n{body}");
    }
    for needle in [
        "causeway_dns_index_swaps_total",
        "causeway_dns_index_build_seconds",
        "causeway_dns_index_records",
        "causeway_dns_query_duration_seconds",
    ] {
        assert!(body.contains(needle), "/metrics lacks {needle}:\n{body}");
    }
    assert_eq!(http_get(metrics, "/nope").await.0, 404);
}
