//! A control-plane outage is not a data-plane outage (EPS-7): when a member's API
//! server drops every connection, its Cluster goes not Ready, yet causeway-dns (in
//! another member) and causeway-proxy keep its last known endpoints while the
//! ServiceImports and the MultiClusterIngress say they are stale and since when. After
//! `--stale-endpoints-ttl` they are withdrawn everywhere; they return as soon as the
//! member is Ready again. Endpoints that are really dead while the control plane is up
//! are the proxy's passive ejection's business: `mci_proxy.rs`,
//! `proxy_reaches_every_cluster_and_follows_endpoint_health` ("a backend killed under
//! load").

use std::time::Duration;

use causeway_controllers::clusters::options::Timing;
use causeway_controllers::controller::Options;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::mci::{ENDPOINTS_STALE, MultiClusterIngress};
use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_dns::client::{RecordType, Via};
use causeway_e2e::demo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use serde_json::json;

use crate::dns::{ask, ips};
use crate::mci_proxy::{Fixture, clusters, spray};
use crate::mcs_support::{PRESENT, eventually};

/// The stale-endpoints TTL of this test: long enough to look around within it.
const TTL: Duration = Duration::from_secs(8);

/// The hub Cluster `name`'s Ready condition.
pub(crate) async fn cluster_ready(hub: &kube::Client, name: &str) -> Option<Condition> {
    let c = Api::<Cluster>::all(hub.clone())
        .get_opt(name)
        .await
        .ok()??;
    c.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
}

fn stale_condition(conditions: &[Condition]) -> Option<Condition> {
    conditions
        .iter()
        .find(|c| c.type_ == ENDPOINTS_STALE)
        .cloned()
}

async fn hub_import(f: &Fixture, name: &str) -> Option<ServiceImport> {
    Api::<ServiceImport>::namespaced(f.mcs.hub.clone(), &f.mcs.ns)
        .get_opt(name)
        .await
        .ok()?
}

async fn mci(f: &Fixture) -> Option<MultiClusterIngress> {
    Api::<MultiClusterIngress>::namespaced(f.mcs.hub.clone(), demo::NAMESPACE)
        .get_opt(demo::SERVICE)
        .await
        .ok()?
}

/// The `EndpointsStale` condition of the hub import `db`, of `db` imported into north,
/// and of the demo MCI, when all three have `reason` and name west.
async fn all_say(f: &Fixture, reason: &str) -> Option<[Condition; 3]> {
    let hub = stale_condition(&hub_import(f, "db").await?.status?.conditions)?;
    let north = stale_condition(&f.mcs.si(f.member("north"), "db").await?.status?.conditions)?;
    let mci = stale_condition(&mci(f).await?.status?.conditions)?;
    [&hub, &north, &mci]
        .iter()
        .all(|c| c.status == "True" && c.reason == reason && c.message.contains("cluster west"))
        .then_some([hub, north, mci])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_of_an_unreachable_member_serve_until_the_ttl_then_leave_and_come_back() {
    let mut f = Fixture::start().await;
    // the controller again, with a TTL of seconds
    f.mcs.stop_controller().await;
    let opts = Options {
        timing: Timing {
            stale_endpoints_ttl: TTL,
            ..Timing::fast()
        },
        ..Default::default()
    };
    f.mcs.ctl = Some(
        f.mcs
            .cs
            .start_controller_with(f.mcs.hub.clone(), opts)
            .unwrap(),
    );
    let (east, west, north) = (f.member("east"), f.member("west"), f.member("north"));
    // a headless service exported by east and west, resolved by causeway-dns in north
    let headless = json!({"clusterIP": "None", "ports": [{"name": "tcp", "port": 42}]});
    f.mcs
        .service(east, "db", headless.clone(), &["10.0.1.1"])
        .await;
    f.mcs.service(west, "db", headless, &["10.0.2.1"]).await;
    f.mcs.export(east, "db", "dummy-label").await;
    f.mcs.export(west, "db", "dummy-label").await;
    let dns = causeway_dns::start(
        f.mcs.c(north),
        causeway_dns::Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..causeway_dns::Config::default()
        },
    )
    .await
    .expect("causeway-dns starts");
    let db = format!("db.{}.svc.clusterset.local.", f.mcs.ns);
    let answer = || async {
        ask(dns.udp, Via::Udp, &db, RecordType::A)
            .await
            .map(|a| a.addresses)
    };
    let proxy = f.proxy.http;
    let proxied = || async { clusters(&spray(&f.client, proxy, 30).await.0) };
    eventually(
        "db resolves to east's and west's endpoints",
        PRESENT,
        || async { (answer().await? == ips(&["10.0.1.1", "10.0.2.1"])).then_some(()) },
    )
    .await;
    eventually("the proxy serves all three clusters", PRESENT, || async {
        (proxied().await.len() == 3).then_some(())
    })
    .await;

    // west's API server drops every connection; its pods keep serving
    f.mcs.cs.members[west].faults().set_drop_connections(true);
    let since = eventually("west's Cluster is not Ready", PRESENT, || async {
        let c = cluster_ready(&f.mcs.hub, "west").await?;
        (c.status != "True").then_some(c.last_transition_time.0)
    })
    .await;
    let [hub, member, on_mci] =
        eventually("the imports and the MCI say west is stale", PRESENT, || {
            all_say(&f, "ClusterNotReady")
        })
        .await;
    let expires = since.checked_add(TTL).unwrap();
    for c in [&hub, &member, &on_mci] {
        assert!(
            c.message.contains(&format!("not Ready since {since}"))
                && c.message.contains(&format!("served until {expires}")),
            "{c:?}"
        );
    }
    // within the TTL, west's endpoints still answer and still get traffic
    assert!(
        jiff::Timestamp::now() < expires,
        "the check within the TTL came too late (since {since}); raise TTL"
    );
    assert_eq!(answer().await, Some(ips(&["10.0.1.1", "10.0.2.1"])));
    assert!(proxied().await.contains("west"));
    let st = mci(&f).await.unwrap().status.unwrap();
    assert!(
        !st.traffic_block_clusters.contains(&"west".to_string()),
        "{st:?}"
    );

    // past the TTL: withdrawn from the imports, DNS and the proxy
    eventually("west's endpoint leaves the DNS answer", PRESENT, || async {
        (answer().await? == ips(&["10.0.1.1"])).then_some(())
    })
    .await;
    assert!(
        jiff::Timestamp::now() >= expires,
        "withdrawn before the TTL"
    );
    eventually("the proxy no longer sends to west", PRESENT, || async {
        let seen = proxied().await;
        (!seen.contains("west") && seen.len() == 2).then_some(())
    })
    .await;
    let [hub, ..] = eventually("the conditions say west is withdrawn", PRESENT, || {
        all_say(&f, "EndpointsWithdrawn")
    })
    .await;
    assert!(
        hub.message.contains(&format!("withdrawn since {expires}")),
        "{hub:?}"
    );
    let listed: Vec<String> = hub_import(&f, "db")
        .await
        .unwrap()
        .status
        .unwrap()
        .clusters
        .into_iter()
        .map(|c| c.cluster)
        .collect();
    assert_eq!(listed, ["east"]);
    let st = mci(&f).await.unwrap().status.unwrap();
    assert_eq!(st.traffic_block_clusters, ["west"], "{st:?}");

    // west is back: its endpoints return everywhere
    f.mcs.cs.members[west].faults().set_drop_connections(false);
    eventually("west's endpoint answers again", PRESENT, || async {
        (answer().await? == ips(&["10.0.1.1", "10.0.2.1"])).then_some(())
    })
    .await;
    eventually("the proxy sends to west again", PRESENT, || async {
        (proxied().await.len() == 3).then_some(())
    })
    .await;
    eventually(
        "the conditions say every cluster is Ready",
        PRESENT,
        || async {
            let hub = stale_condition(&hub_import(&f, "db").await?.status?.conditions)?;
            let mci = stale_condition(&mci(&f).await?.status?.conditions)?;
            (hub.status == "False" && mci.status == "False" && hub.reason == "ClustersReady")
                .then_some(())
        },
    )
    .await;
    f.proxy.shutdown().await;
}
