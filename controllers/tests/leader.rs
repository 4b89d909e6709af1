//! `causeway controller` as two replicas with leader election: a real hub and two
//! members on kubesim, two `causeway` processes. Exactly one is ready and works; when
//! it is killed (SIGKILL, no clean hand-over) the standby takes over within the lease
//! duration, and MCS imports go on with nothing lost and nothing written twice. The
//! hub RBAC from deploy/ is enough for the election.

use std::process::Child;
use std::time::{Duration, Instant};

use causeway_crds::mcs::v1beta1::ServiceImport;
use causeway_runtime::leader::{Elector, Timings};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

mod support;
use support::{Replicas, client, eventually, export, get, status};

const NS: &str = "shop";
/// `--leader-elect-lease-duration` below.
const LEASE: Duration = Duration::from_secs(3);

/// The MCS EndpointSlices of `svc` in a cluster.
async fn mcs_slices(c: &kube::Client, svc: &str) -> Vec<EndpointSlice> {
    let lp =
        ListParams::default().labels(&format!("multicluster.kubernetes.io/service-name={svc}"));
    Api::<EndpointSlice>::namespaced(c.clone(), NS)
        .list(&lp)
        .await
        .unwrap()
        .items
}

/// `svc` is imported into `member`: its ServiceImport has an IP and its slice is there.
async fn imported(member: &kube::Client, svc: &str) -> Option<()> {
    let si = Api::<ServiceImport>::namespaced(member.clone(), NS)
        .get_opt(svc)
        .await
        .ok()??;
    (!si.spec.ips.is_empty() && !mcs_slices(member, svc).await.is_empty()).then_some(())
}

/// How many hub ServiceImports are called `svc` (in any namespace).
async fn hub_imports(hub: &kube::Client, svc: &str) -> usize {
    Api::<ServiceImport>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| s.metadata.name.as_deref() == Some(svc))
        .count()
}

fn start(dir: &std::path::Path, kubeconfig: &std::path::Path, id: &str) -> (Child, String) {
    support::start_replica(
        dir,
        id,
        &[
            "controller".as_ref(),
            "--hub-kubeconfig".as_ref(),
            kubeconfig.as_os_str(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_leader_is_killed() {
    let hub = kubesim::Server::start(kubesim::Config::new("hub"))
        .await
        .unwrap();
    let east = kubesim::Server::start(kubesim::Config::new("east"))
        .await
        .unwrap();
    let west = kubesim::Server::start(kubesim::Config::new("west"))
        .await
        .unwrap();
    let (h, e, w) = (client(&hub).await, client(&east).await, client(&west).await);
    for c in [&h, &e, &w] {
        causeway_runtime::crds::install(
            c,
            &causeway_crds::crdgen::all_crds(),
            "test",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
    for m in [&east, &west] {
        let access = causeway_controllers::clusters::join::MemberAccess {
            server: m.url(),
            ca_pem: m.ca_pem().map(String::from),
            token: m.admin_token().into(),
        };
        causeway_controllers::clusters::join::join(h.clone(), m.name(), &access, None)
            .await
            .unwrap();
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    for c in [&e, &w] {
        Api::<Namespace>::all(c.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("hub.kubeconfig");
    std::fs::write(&kubeconfig, hub.kubeconfig()).unwrap();
    let (a, a_addr) = start(dir.path(), &kubeconfig, "ctl-a");
    let mut replicas = Replicas(vec![Some(a)]);
    let (b, b_addr) = start(dir.path(), &kubeconfig, "ctl-b");
    replicas.0.push(Some(b));
    let addrs = [a_addr, b_addr];
    let ids = ["ctl-a", "ctl-b"];

    // exactly one is ready; the other says who leads, and stays healthy
    let leader = eventually("one ready replica", Duration::from_secs(30), || {
        let ready: Vec<usize> = (0..2)
            .filter(|&i| status(&addrs[i], "/readyz").contains(" 200"))
            .collect();
        async move { (ready.len() == 1).then(|| ready[0]) }
    })
    .await;
    let standby = 1 - leader;
    // (the standby learns who leads at its next try)
    let want = format!("not ready: not the leader (leader is {})\n", ids[leader]);
    eventually(
        "the standby names the leader",
        Duration::from_secs(5),
        || {
            let nr = get(&addrs[standby], "/readyz");
            let named = nr.starts_with("HTTP/1.1 503") && nr.ends_with(&want);
            async move { named.then_some(()) }
        },
    )
    .await;
    assert!(status(&addrs[standby], "/healthz").contains(" 200"));
    assert!(get(&addrs[leader], "/metrics").contains("\ncauseway_leader 1\n"));
    assert!(get(&addrs[standby], "/metrics").contains("\ncauseway_leader 0\n"));

    export(&e, NS, "cart", "10.0.0.1").await;
    let present = Duration::from_secs(30);
    eventually("cart imported into west", present, || imported(&w, "cart")).await;

    // SIGKILL: no release, the standby waits out the lease
    let mut killed = replicas.0[leader].take().unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    let since = Instant::now();
    eventually(
        "the standby ready",
        LEASE + Duration::from_secs(10),
        || async {
            status(&addrs[standby], "/readyz")
                .contains(" 200")
                .then_some(())
        },
    )
    .await;
    assert!(
        since.elapsed() < LEASE + Duration::from_secs(10),
        "took {:?}",
        since.elapsed()
    );
    assert!(get(&addrs[standby], "/metrics").contains("\ncauseway_leader 1\n"));

    export(&e, NS, "checkout", "10.0.0.2").await;
    eventually("checkout imported into west", present, || {
        imported(&w, "checkout")
    })
    .await;
    // nothing lost, nothing twice: one hub ServiceImport per service, one west slice per
    // source slice (checked a few times over two seconds)
    for _ in 0..4 {
        for svc in ["cart", "checkout"] {
            assert!(imported(&w, svc).await.is_some(), "{svc} still imported");
            assert_eq!(hub_imports(&h, svc).await, 1, "hub ServiceImports {svc}");
            assert_eq!(mcs_slices(&w, svc).await.len(), 1, "west slices of {svc}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_rbac_from_deploy_allows_leader_election() {
    let hub = kubesim::Server::start(kubesim::Config::new("hub"))
        .await
        .unwrap();
    let admin = client(&hub).await;
    support::apply_file(&admin, "deploy/rbac/hub.yaml").await;
    let restricted = support::client_as(
        &hub,
        "system:serviceaccount:causeway-system:causeway-controller",
        &["system:serviceaccounts", "system:authenticated"],
    )
    .await;
    let timings = Timings {
        lease_duration: LEASE,
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    };
    let elector = Elector::new(
        restricted,
        "causeway-system",
        "causeway-controller",
        "ctl-a",
        timings,
    )
    .unwrap();
    // it takes the Lease, renews it for two lease durations, and releases it at the end:
    // get, create and update are all allowed
    let stop = tokio_util::sync::CancellationToken::new();
    let run = elector.run(&stop, |_lead| async {
        tokio::time::sleep(LEASE * 2).await;
        Ok(())
    });
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("led and finished within 20 s")
        .expect("kept the Lease with the deploy/ RBAC");
    let lease = Api::<Lease>::namespaced(admin, "causeway-system")
        .get("causeway-controller")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(lease.holder_identity, None, "released");
    assert_eq!(lease.lease_transitions, Some(0));
}
