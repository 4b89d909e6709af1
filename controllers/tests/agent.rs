//! `causeway agent` as two replicas in a Pull member (leader election on a Lease in the
//! member): exactly one works; when it is killed with SIGKILL the standby takes over
//! within the lease duration, keeps the Cluster Ready and the hub lease renewed, and
//! exports go on into the member's outbox with nothing written twice.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use causeway_controllers::clusters::join::MemberAccess;
use causeway_controllers::clusters::register::{HubEndpoint, RegisterOptions, register};
use causeway_crds::exported_service::ExportedService;
use causeway_crds::federation::cluster::Cluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use serde_json::json;

mod support;
use support::{Replicas, client, eventually, export, status};

const LEASE: Duration = Duration::from_secs(3);

fn access(s: &kubesim::Server) -> MemberAccess {
    MemberAccess {
        server: s.url(),
        ca_pem: s.ca_pem().map(String::from),
        token: s.admin_token().into(),
    }
}

fn endpoint(s: &kubesim::Server) -> HubEndpoint {
    HubEndpoint {
        server: s.url(),
        ca_pem: s.ca_pem().map(String::from),
        tls_server_name: None,
    }
}

fn start(dir: &std::path::Path, id: &str) -> (Child, String) {
    let (hub, member) = (
        dir.join("agent-hub.kubeconfig"),
        dir.join("west.kubeconfig"),
    );
    support::start_replica(
        dir,
        id,
        &[
            "agent".as_ref(),
            "--cluster".as_ref(),
            "west".as_ref(),
            "--hub-kubeconfig".as_ref(),
            hub.as_os_str(),
            "--kubeconfig".as_ref(),
            member.as_os_str(),
        ],
    )
}

async fn outbox(hub: &kube::Client) -> Vec<String> {
    let mut names: Vec<String> =
        Api::<ExportedService>::namespaced(hub.clone(), "causeway-es-west")
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.metadata.name)
            .collect();
    names.sort();
    names
}

async fn renewed(hub: &kube::Client) -> Option<String> {
    let l = Api::<Lease>::namespaced(hub.clone(), "causeway-system")
        .get("cluster-west")
        .await
        .ok()?;
    l.spec?.renew_time.map(|t| t.0.to_string())
}

/// A hub and a member `west` registered in pull mode (namespace `shop` in west).
struct Pull {
    hub: kubesim::Server,
    west: kubesim::Server,
    h: kube::Client,
    w: kube::Client,
    done: causeway_controllers::clusters::register::Registered,
}

async fn pull_member() -> Pull {
    let hub = kubesim::Server::start(kubesim::Config::new("hub"))
        .await
        .unwrap();
    let west = kubesim::Server::start(kubesim::Config::new("west"))
        .await
        .unwrap();
    let (h, w) = (client(&hub).await, client(&west).await);
    for c in [&h, &w] {
        causeway_runtime::crds::install(
            c,
            &causeway_crds::crdgen::all_crds(),
            "test",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
    let done = register(
        h.clone(),
        endpoint(&hub),
        "west",
        &causeway_controllers::clusters::join::Member::from_access(&access(&west))
            .await
            .unwrap(),
        &RegisterOptions {
            token_seconds: 3600,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap();
    Api::<Namespace>::all(w.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Pull {
        hub,
        west,
        h,
        w,
        done,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_agent_takes_over_when_the_leader_is_killed() {
    let Pull {
        hub: _hub,
        west,
        h,
        w,
        done,
    } = pull_member().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agent-hub.kubeconfig"),
        &done.agent_kubeconfig,
    )
    .unwrap();
    std::fs::write(dir.path().join("west.kubeconfig"), west.kubeconfig()).unwrap();
    let (a, a_addr) = start(dir.path(), "agent-a");
    let mut replicas = Replicas(vec![Some(a)]);
    let (b, b_addr) = start(dir.path(), "agent-b");
    replicas.0.push(Some(b));
    let addrs = [a_addr, b_addr];
    let leader = eventually("one ready agent", Duration::from_secs(30), || {
        let ready: Vec<usize> = (0..2)
            .filter(|&i| status(&addrs[i], "/readyz").contains(" 200"))
            .collect();
        async move { (ready.len() == 1).then(|| ready[0]) }
    })
    .await;
    let standby = 1 - leader;
    assert!(status(&addrs[standby], "/healthz").contains(" 200"));
    let clusters: Api<Cluster> = Api::all(h.clone());
    let ready = || async {
        let c = clusters.get("west").await.ok()?;
        let r = causeway_controllers::clusters::status::ready_of(&c)?;
        (r.status == "True").then_some(())
    };
    eventually(
        "west Ready through its agent",
        Duration::from_secs(20),
        ready,
    )
    .await;
    export(&w, "shop", "cart", "10.0.0.1").await;
    eventually("cart in the outbox", Duration::from_secs(20), || async {
        (outbox(&h).await == ["shop.cart.west"]).then_some(())
    })
    .await;

    let mut killed = replicas.0[leader].take().unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    let since = Instant::now();
    eventually(
        "the standby agent ready",
        LEASE + Duration::from_secs(10),
        || async {
            status(&addrs[standby], "/readyz")
                .contains(" 200")
                .then_some(())
        },
    )
    .await;
    assert!(since.elapsed() < LEASE + Duration::from_secs(10));
    let before = renewed(&h).await;
    eventually(
        "the hub lease renewed by the new leader",
        Duration::from_secs(10),
        || async {
            let now = renewed(&h).await;
            (now.is_some() && now != before).then_some(())
        },
    )
    .await;
    export(&w, "shop", "checkout", "10.0.0.2").await;
    eventually(
        "checkout in the outbox too",
        Duration::from_secs(20),
        || async { (outbox(&h).await == ["shop.cart.west", "shop.checkout.west"]).then_some(()) },
    )
    .await;
    eventually("west still Ready", Duration::from_secs(5), ready).await;
}

/// deploy/agent/: the member RBAC is enough for everything the agent does there, and
/// every flag the Deployment passes exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_runs_with_the_member_rbac_from_deploy() {
    let Pull {
        hub: _hub,
        west,
        h,
        w,
        done,
    } = pull_member().await;
    support::apply_file(&w, "deploy/agent/rbac.yaml").await;
    let member = support::client_as(
        &west,
        "system:serviceaccount:causeway-system:causeway-agent",
        &["system:serviceaccounts", "system:authenticated"],
    )
    .await;
    let kc = kube::config::Kubeconfig::from_yaml(&done.agent_kubeconfig).unwrap();
    let agent_hub = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let elector = causeway_runtime::leader::Elector::new(
        member.clone(),
        "causeway-system",
        "causeway-agent",
        "agent-a",
        causeway_runtime::leader::Timings {
            lease_duration: LEASE,
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(300),
        },
    )
    .unwrap();
    let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
    let timing = causeway_controllers::clusters::options::Timing::fast();
    let s = stop.clone();
    let agent = tokio::spawn(async move {
        elector
            .run(&s, |lead| {
                causeway_controllers::agent::run(
                    agent_hub,
                    member,
                    "west".into(),
                    timing,
                    metrics,
                    lead,
                )
            })
            .await
    });
    let clusters: Api<Cluster> = Api::all(h.clone());
    eventually(
        "west Ready with its summaries",
        Duration::from_secs(20),
        || async {
            let c = clusters.get("west").await.ok()?;
            let r = causeway_controllers::clusters::status::ready_of(&c)?;
            let st = c.status.as_ref()?;
            (r.status == "True" && st.node_summary.is_some() && !st.api_enablements.is_empty())
                .then_some(())
        },
    )
    .await;
    export(&w, "shop", "cart", "10.0.0.1").await;
    eventually("cart in the outbox", Duration::from_secs(20), || async {
        (outbox(&h).await == ["shop.cart.west"]).then_some(())
    })
    .await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), agent)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // every flag of the Deployment is one `causeway agent` has
    let help = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["agent", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let deployment = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/agent/deployment.yaml"
    ))
    .unwrap();
    for flag in deployment
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split('=').next().unwrap())
    {
        assert!(
            help.contains(flag),
            "{flag} is not a flag of causeway agent"
        );
    }
    assert!(
        help.contains("CAUSEWAY_CLUSTER"),
        "the cluster comes from the environment"
    );
}

/// A.4: the agent's lease renewals on /metrics and /readyz. A Lease deleted on the hub
/// (and not made again: no hub controller runs) fails every renewal with 404: each is
/// counted, and once none has succeeded for a lease duration (the agent's
/// --cluster-monitor-grace-period, 2 s here) /readyz fails, saying why; the Lease back,
/// the next renewal makes it ready again and moves the last-renewal gauge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_lease_renewals_are_counted_and_fail_readyz_after_a_lease() {
    let Pull {
        hub: _hub,
        west,
        h,
        w: _w,
        done,
    } = pull_member().await;
    let dir = tempfile::tempdir().unwrap();
    let (hub_kc, member_kc) = (
        dir.path().join("agent-hub.kubeconfig"),
        dir.path().join("west.kubeconfig"),
    );
    std::fs::write(&hub_kc, &done.agent_kubeconfig).unwrap();
    std::fs::write(&member_kc, west.kubeconfig()).unwrap();
    let (a, addr) = support::start_replica(
        dir.path(),
        "agent-a",
        &[
            "agent".as_ref(),
            "--cluster".as_ref(),
            "west".as_ref(),
            "--hub-kubeconfig".as_ref(),
            hub_kc.as_os_str(),
            "--kubeconfig".as_ref(),
            member_kc.as_os_str(),
            "--cluster-monitor-grace-period".as_ref(),
            "2s".as_ref(),
        ],
    );
    let _replicas = Replicas(vec![Some(a)]);
    let lease_duration = Duration::from_secs(2);
    let metric = |name: &str| -> Option<f64> {
        let text = support::get(&addr, "/metrics");
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{cluster=\"west\"}} ")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    const LAST: &str = "causeway_cluster_lease_last_renewal_timestamp_seconds";
    const FAILURES: &str = "causeway_cluster_lease_renewal_failures_total";
    eventually("the agent ready", Duration::from_secs(20), || async {
        status(&addr, "/readyz").contains(" 200").then_some(())
    })
    .await;
    let first = eventually("a renewal on /metrics", Duration::from_secs(10), || async {
        metric(LAST)
    })
    .await;
    assert!(first > 1.7e9, "a Unix time: {first}");
    let text = support::get(&addr, "/metrics");
    assert_eq!(text.matches("# EOF").count(), 1, "one exposition: {text}");
    assert!(text.contains("causeway_leader 1"), "{text}");

    let leases: Api<Lease> = Api::namespaced(h.clone(), "causeway-system");
    leases
        .delete("cluster-west", &Default::default())
        .await
        .unwrap();
    let deleted = Instant::now();
    eventually(
        "failed renewals counted",
        Duration::from_secs(10),
        || async { metric(FAILURES).filter(|n| *n >= 1.0) },
    )
    .await;
    let why = eventually("/readyz fails", Duration::from_secs(10), || async {
        let answer = support::get(&addr, "/readyz");
        answer.contains(" 503").then_some(answer)
    })
    .await;
    // a lease from the last renewal that succeeded (one renewal interval, a quarter
    // of the lease, may have passed between it and the deletion)
    let last = metric(LAST).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        now - last >= lease_duration.as_secs_f64(),
        "not ready {:.2} s after the last renewal, before a lease",
        now - last
    );
    assert!(
        deleted.elapsed() >= lease_duration * 3 / 4,
        "not ready {:?} after the deletion",
        deleted.elapsed()
    );
    assert!(
        why.contains("the cluster's Lease has not been renewed on the hub for")
            && why.contains("(lease duration 2 s)"),
        "{why}"
    );
    let stale = last;

    // the Lease back (as register makes it): ready again
    let lease: Lease = serde_json::from_value(
        causeway_controllers::clusters::register::lease_object("west"),
    )
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    eventually("ready again", Duration::from_secs(10), || async {
        status(&addr, "/readyz").contains(" 200").then_some(())
    })
    .await;
    assert!(metric(LAST).unwrap() > stale);
}
