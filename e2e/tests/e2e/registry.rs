//! The cluster registry end to end (federation.md §8 A): Push health with flap damping
//! and taints, a Pull member's agent with its lease, lease expiry → Unknown, the agent's
//! least-privilege hub identity, and refused re-registration of the same cluster.

use std::time::Duration;

use causeway_controllers::clusters::options::Timing;
use causeway_controllers::clusters::register::{RegisterOptions, register};
use causeway_crds::federation::cluster::{Cluster, taints};
use causeway_e2e::{Clusterset, Options, access, client, hub_endpoint};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::mcs_support::eventually;

const WAIT: Duration = Duration::from_secs(30);

async fn start(members: &[&str]) -> Clusterset {
    let cs = Clusterset::start(
        &Options {
            members: members.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        },
        |_| {},
    )
    .await
    .unwrap();
    cs.install_crds().await.unwrap();
    cs
}

fn ready(c: &Cluster) -> Option<(String, String)> {
    let r = causeway_controllers::clusters::status::ready_of(c)?;
    Some((r.status.clone(), r.reason.clone()))
}

fn taint_keys(c: &Cluster) -> Vec<String> {
    c.spec.taints.iter().map(|t| t.key.clone()).collect()
}

async fn cluster_where(
    hub: &kube::Client,
    name: &str,
    what: &str,
    f: impl Fn(&Cluster) -> bool,
) -> Cluster {
    let api: Api<Cluster> = Api::all(hub.clone());
    eventually(what, WAIT, || {
        let api = api.clone();
        let f = &f;
        async move { api.get_opt(name).await.ok().flatten().filter(|c| f(c)) }
    })
    .await
}

/// A.1, A.3, A.5 on a Push member: Ready with version and no taints; cut off → after
/// the failure threshold Ready=False/ClusterNotReachable and the not-ready taint, with a
/// transition time that then stays put; back → Ready, taints gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_member_goes_not_ready_is_tainted_and_recovers() {
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let c = cluster_where(&hub, "east", "east Ready without taints", |c| {
        ready(c).is_some_and(|r| r.0 == "True") && c.spec.taints.is_empty()
    })
    .await;
    assert_eq!(ready(&c).unwrap().1, "ClusterReady");
    assert!(c.status.as_ref().unwrap().kubernetes_version.is_some());
    // A.8: APIs, node and resource summaries, topology from the nodes' labels
    let c = cluster_where(&hub, "east", "east's status content", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.resource_summary.is_some() && !s.api_enablements.is_empty())
    })
    .await;
    let st = c.status.clone().unwrap();
    let complete = st
        .conditions
        .iter()
        .find(|c| c.type_ == "CompleteAPIEnablements")
        .expect("CompleteAPIEnablements");
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("True", "Complete")
    );
    assert!(
        st.api_enablements
            .iter()
            .any(|e| e.group_version == "apps/v1"
                && e.resources
                    .iter()
                    .any(|r| r.name == "deployments" && r.kind == "Deployment")),
        "{:?}",
        st.api_enablements
    );
    let nodes = st.node_summary.unwrap();
    assert_eq!((nodes.total_num, nodes.ready_num), (1, 1));
    assert_eq!(st.resource_summary.unwrap().allocatable["cpu"].0, "8");
    assert_eq!(st.region.as_deref(), Some("local"));
    assert_eq!(st.zones, vec!["east-a".to_string()]);
    assert_eq!(st.provider.as_deref(), Some("kubesim"));
    assert!(
        c.finalizers()
            .iter()
            .any(|f| f == "causeway.io/cluster-controller"),
        "A.6: the cluster finalizer"
    );
    // the nodes no longer say their region: neither does the status
    let member = client(cs.member("east").unwrap()).await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(member);
    let label_region = |region: Option<&'static str>| {
        let nodes = nodes.clone();
        async move {
            for n in nodes.list(&Default::default()).await.unwrap() {
                let label =
                    json!({"metadata": {"labels": {"topology.kubernetes.io/region": region}}});
                nodes
                    .patch(
                        &n.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&label),
                    )
                    .await
                    .unwrap();
            }
        }
    };
    label_region(None).await;
    cluster_where(
        &hub,
        "east",
        "east's region gone with the nodes' label",
        |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.region.is_none() && s.zones == ["east-a"])
        },
    )
    .await;
    label_region(Some("local")).await;
    cluster_where(&hub, "east", "east's region back", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.region.as_deref() == Some("local"))
    })
    .await;

    let cut = std::time::Instant::now();
    cs.member("east")
        .unwrap()
        .faults()
        .set_drop_connections(true);
    let c = cluster_where(&hub, "east", "east not ready and tainted", |c| {
        ready(c).is_some_and(|r| r.0 == "False") && taint_keys(c) == [taints::NOT_READY]
    })
    .await;
    assert_eq!(ready(&c).unwrap().1, "ClusterNotReachable");
    assert!(
        cut.elapsed() >= Timing::fast().failure_threshold,
        "A.2: damped for the failure threshold, went False after {:?}",
        cut.elapsed()
    );
    let since = causeway_controllers::clusters::status::ready_of(&c)
        .unwrap()
        .last_transition_time
        .clone();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let api: Api<Cluster> = Api::all(hub.clone());
    let later = api.get("east").await.unwrap();
    assert_eq!(
        causeway_controllers::clusters::status::ready_of(&later)
            .unwrap()
            .last_transition_time,
        since,
        "A.3: probes that agree do not move lastTransitionTime"
    );
    // the hub restarted during the outage: its new worker, which has reached nothing
    // yet, keeps what placements read (region, zones, APIs, summaries, version)
    ctl.stop().await;
    let ctl = cs.start_controller().await.unwrap();
    tokio::time::sleep(3 * Timing::fast().status_interval).await;
    let st = api.get("east").await.unwrap().status.unwrap();
    assert_eq!(
        (
            st.region.as_deref(),
            st.zones.as_slice(),
            st.provider.as_deref()
        ),
        (
            Some("local"),
            ["east-a".to_string()].as_slice(),
            Some("kubesim")
        ),
        "the topology outlives a restart during an outage"
    );
    assert!(
        st.kubernetes_version.is_some()
            && !st.api_enablements.is_empty()
            && st.node_summary.is_some()
            && st.resource_summary.is_some(),
        "{st:?}"
    );

    cs.member("east")
        .unwrap()
        .faults()
        .set_drop_connections(false);
    cluster_where(&hub, "east", "east Ready again, untainted", |c| {
        ready(c).is_some_and(|r| r.0 == "True") && c.spec.taints.is_empty()
    })
    .await;
    ctl.stop().await;
    cs.shutdown();
}

/// A.1 `/readyz` failing (not unreachable) → ClusterNotReady.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_readyz_is_not_ready_rather_than_unreachable() {
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    cluster_where(&hub, "east", "east Ready", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    cs.member("east").unwrap().faults().set_not_ready(true);
    cluster_where(&hub, "east", "east ClusterNotReady", |c| {
        ready(c).is_some_and(|r| r.1 == "ClusterNotReady")
    })
    .await;
    ctl.stop().await;
    cs.shutdown();
}

/// A.7 ★: the same physical cluster cannot be registered twice under two names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_cluster_cannot_join_twice() {
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let c: Cluster = Api::all(hub.clone()).get("east").await.unwrap();
    assert_eq!(
        c.spec.kube_system_uid.as_deref(),
        Some(cs.member("east").unwrap().kube_system_uid().as_str())
    );
    let err = causeway_controllers::clusters::join::join(
        hub.clone(),
        "east-again",
        &access(cs.member("east").unwrap()),
        Some("other-id"),
    )
    .await
    .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("already registered as \"east\""), "{msg}");
    cs.shutdown();
}

/// A.6 ★: a joined Cluster carries the cleanup finalizer from creation, so a member
/// unjoined before any controller ran is not let go at once: unjoin says what is not
/// cleaned up yet, and the controller, once it runs, deletes the member's hub
/// credentials and its clusterset.k8s.io before the Cluster goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_unjoined_before_any_controller_ran_is_cleaned_up_once_one_runs() {
    use causeway_controllers::clusters::join::unjoin;
    use k8s_openapi::api::core::v1::Secret;
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let c = clusters.get("east").await.unwrap();
    assert_eq!(c.finalizers(), ["causeway.io/cluster-controller"]);
    let e = unjoin(hub.clone(), "east", false, Duration::from_secs(1))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("cluster \"east\" is marked for removal but still there after 1 s")
            && e.contains("its imports are not withdrawn and its credentials not deleted yet"),
        "{e}"
    );
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), "causeway-system");
    assert!(secrets.get_opt("east-credentials").await.unwrap().is_some());
    let member = client(cs.member("east").unwrap()).await.unwrap();
    assert!(
        causeway_e2e::cluster_properties(&member)
            .await
            .contains_key("clusterset.k8s.io")
    );
    let ctl = cs.start_controller().await.unwrap();
    eventually("the Cluster gone", WAIT, || async {
        clusters.get_opt("east").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(secrets.get_opt("east-credentials").await.unwrap().is_none());
    assert!(
        !causeway_e2e::cluster_properties(&member)
            .await
            .contains_key("clusterset.k8s.io")
    );
    ctl.stop().await;
    cs.shutdown();
}

/// CID-5: a Cluster made by hand with the cluster id of another (`west` has none, so
/// its id is its name) is not a member: the newer one is Ready=False naming the id and
/// the Cluster using it, the older one stays Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cluster_with_a_taken_id_is_not_a_member() {
    let cs = start(&["west"]).await;
    cs.join_all().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let west = clusters.get("west").await.unwrap();
    // the same member's endpoint and credentials: only the id keeps it out
    let mut spec = west.spec.clone();
    spec.id = Some("west".into());
    spec.kube_system_uid = None;
    // creation times count in seconds: east is the newer one (not told apart by name)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    clusters
        .create(&Default::default(), &Cluster::new("east", spec))
        .await
        .unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let east = cluster_where(&hub, "east", "east not ready", |c| {
        ready(c).is_some_and(|r| r.0 == "False")
    })
    .await;
    let message = causeway_controllers::clusters::status::ready_of(&east)
        .map(|r| r.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("cluster id \"west\" is already used by Cluster \"west\"")
            && message.contains("give this Cluster another spec.id"),
        "{message}"
    );
    cluster_where(&hub, "west", "west ready", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    ctl.stop().await;
    cs.shutdown();
}

pub(crate) async fn agent_client(kubeconfig: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// A.4, A.5 on a Pull member: the agent posts Ready and renews its lease; when it goes
/// silent, the hub marks the cluster Unknown after the grace period and taints it
/// unreachable; a new agent brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_agent_makes_its_cluster_unknown_and_a_new_one_recovers_it() {
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let done = register(
        hub.clone(),
        hub_endpoint(&cs.hub),
        "west",
        &causeway_e2e::member(cs.member("west").unwrap()).await,
        &RegisterOptions {
            token_seconds: 3600,
            region: Some("eu-west".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let timing = Timing::fast();
    let member = client(cs.member("west").unwrap()).await.unwrap();
    let run_agent = |stop: tokio_util::sync::CancellationToken| {
        let (member, kubeconfig, timing) = (
            member.clone(),
            done.agent_kubeconfig.clone(),
            timing.clone(),
        );
        async move {
            let hub = agent_client(&kubeconfig).await;
            let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
            causeway_controllers::agent::run(hub, member, "west".into(), timing, metrics, stop)
                .await
        }
    };
    let stop1 = tokio_util::sync::CancellationToken::new();
    let first = tokio::spawn(run_agent(stop1.clone()));
    let c = cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True") && c.spec.taints.is_empty()
    })
    .await;
    assert_eq!(
        c.spec.sync_mode,
        causeway_crds::federation::cluster::ClusterSyncMode::Pull
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(hub.clone(), "causeway-system");
    let lease = leases.get("cluster-west").await.unwrap();
    assert!(
        lease.spec.unwrap().renew_time.is_some(),
        "the agent renews its lease"
    );

    // the agent goes silent (a partition, or its pod is gone)
    stop1.cancel();
    first.await.unwrap().unwrap();
    let silent = std::time::Instant::now();
    let c = cluster_where(&hub, "west", "west Unknown and unreachable", |c| {
        ready(c).is_some_and(|r| r.0 == "Unknown") && taint_keys(c) == [taints::UNREACHABLE]
    })
    .await;
    assert_eq!(ready(&c).unwrap().1, "ClusterStatusUnknown");
    assert!(
        silent.elapsed() >= timing.monitor_grace_period - Duration::from_secs(1),
        "not before the grace period: {:?}",
        silent.elapsed()
    );

    let stop2 = tokio_util::sync::CancellationToken::new();
    let second = tokio::spawn(run_agent(stop2.clone()));
    cluster_where(&hub, "west", "west Ready again", |c| {
        ready(c).is_some_and(|r| r.0 == "True") && c.spec.taints.is_empty()
    })
    .await;
    stop2.cancel();
    second.await.unwrap().unwrap();
    ctl.stop().await;
    cs.shutdown();
}

/// ★ Least privilege: the agent's hub identity writes its own Cluster status and Lease
/// and its execution namespace, and nothing of another cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_touch_another_clusters_objects() {
    let cs = start(&["east", "west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let mut agents = Vec::new();
    for name in ["east", "west"] {
        let done = register_pull(&cs, &hub, name).await;
        agents.push(agent_client(&done.agent_kubeconfig).await);
    }
    let west = &agents[1];
    let status = |name: &str| {
        json!({"apiVersion": "causeway.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name},
               "status": {"kubernetesVersion": "v0.0.0-spoofed"}})
    };
    let clusters: Api<Cluster> = Api::all(west.clone());
    let pp = PatchParams::apply("test").force();
    clusters
        .patch_status("west", &pp, &Patch::Apply(status("west")))
        .await
        .expect("its own Cluster's status");
    let denied = |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(
        denied(
            clusters
                .patch_status("east", &pp, &Patch::Apply(status("east")))
                .await
                .map(|_| ())
        ),
        "east's status"
    );
    assert!(
        denied(
            clusters
                .delete("east", &Default::default())
                .await
                .map(|_| ())
        ),
        "deleting a Cluster"
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(west.clone(), "causeway-system");
    let renew = json!({"spec": {"holderIdentity": "x"}});
    leases
        .patch(
            "cluster-west",
            &PatchParams::default(),
            &Patch::Merge(&renew),
        )
        .await
        .expect("its own lease");
    assert!(
        denied(
            leases
                .patch(
                    "cluster-east",
                    &PatchParams::default(),
                    &Patch::Merge(&renew)
                )
                .await
                .map(|_| ())
        ),
        "east's lease"
    );
    // MCS objects: only in its own execution namespace
    let slice = |ns: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "web.east", "namespace": ns,
                            "labels": {"multicluster.kubernetes.io/source-cluster": "east"}},
               "addressType": "IPv4", "endpoints": []})
    };
    let in_ns = |ns: &str| {
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(west.clone(), ns)
    };
    for ns in ["default", "causeway-es-east"] {
        assert!(
            denied(
                in_ns(ns)
                    .patch("web.east", &pp, &Patch::Apply(slice(ns)))
                    .await
                    .map(|_| ())
            ),
            "a slice in {ns}"
        );
    }
    in_ns("causeway-es-west")
        .patch("web.east", &pp, &Patch::Apply(slice("causeway-es-west")))
        .await
        .expect("its outbox");
    cs.shutdown();
}

/// A Pull member end to end: its agent exports through its outbox (relayed by the
/// hub) and imports like any member, next to Push members; applied with real kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_member_exports_and_imports_through_its_agent() {
    let cs = start(&["east", "west", "north"]).await;
    let hub = client(&cs.hub).await.unwrap();
    for m in ["east", "north"] {
        causeway_controllers::clusters::join::join(
            hub.clone(),
            m,
            &access(cs.member(m).unwrap()),
            None,
        )
        .await
        .unwrap();
    }
    cs.create_namespace_everywhere("demo").await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let agent = cs
        .start_pull_member("west", Timing::fast(), false)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let merged = cs.write_kubeconfigs(dir.path()).unwrap();
    let repo = crate::support::repo();
    for c in ["east", "west"] {
        let o = std::process::Command::new(crate::support::kubectl_bin())
            .env("KUBECONFIG", &merged)
            .args(["--context", c, "apply", "-f"])
            .arg(repo.join(format!("examples/mcs-demo/{c}.yaml")))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let imported = |member: &'static str| {
        let cs = &cs;
        async move {
            let c = client(cs.member(member).unwrap()).await.unwrap();
            let api: Api<causeway_crds::mcs::v1beta1::ServiceImport> = Api::namespaced(c, "demo");
            eventually(
                &format!("demo imported in {member} from east and west"),
                WAIT,
                || {
                    let api = api.clone();
                    async move {
                        let si = api.get_opt("demo").await.ok().flatten()?;
                        let clusters: Vec<String> =
                            si.status?.clusters.into_iter().map(|c| c.cluster).collect();
                        (clusters == ["east", "west"]).then_some(())
                    }
                },
            )
            .await
        }
    };
    imported("north").await; // west's export reached the hub through its outbox
    imported("west").await; // and west's agent imports like any member
    // the agent keeps west's KEP-2149 membership properties
    let west = client(cs.member("west").unwrap()).await.unwrap();
    eventually("west's membership properties", WAIT, || {
        let west = west.clone();
        async move {
            let p = causeway_e2e::cluster_properties(&west).await;
            (p.contains_key("clusterset.k8s.io")
                && p.get("cluster.clusterset.k8s.io").map(String::as_str) == Some("west"))
            .then_some(())
        }
    })
    .await;
    let outbox: Api<causeway_crds::exported_service::ExportedService> =
        Api::namespaced(hub.clone(), "causeway-es-west");
    assert_eq!(
        outbox.list(&Default::default()).await.unwrap().items.len(),
        1
    );

    // unregister: the agent withdraws what it imported, tells the hub, and stops; the
    // hub cleans up and lets the Cluster go; west's export leaves the clusterset
    let said = causeway_controllers::clusters::register::unregister(
        hub.clone(),
        "west",
        None,
        false,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(said.contains("unregistered"), "{said}");
    let west_imports: Api<causeway_crds::mcs::v1beta1::ServiceImport> =
        Api::namespaced(west.clone(), "demo");
    assert!(
        west_imports.get_opt("demo").await.unwrap().is_none(),
        "the agent withdrew west's import before the Cluster went"
    );
    assert_eq!(
        causeway_e2e::cluster_properties(&west)
            .await
            .get("clusterset.k8s.io"),
        None,
        "the agent deleted west's clusterset.k8s.io as it left"
    );
    let north = client(cs.member("north").unwrap()).await.unwrap();
    let north_imports: Api<causeway_crds::mcs::v1beta1::ServiceImport> =
        Api::namespaced(north, "demo");
    eventually("north imports demo from east only", WAIT, || {
        let api = north_imports.clone();
        async move {
            let si = api.get_opt("demo").await.ok().flatten()?;
            let clusters: Vec<String> =
                si.status?.clusters.into_iter().map(|c| c.cluster).collect();
            (clusters == ["east"]).then_some(())
        }
    })
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    eventually("west's execution namespace gone", WAIT, || {
        let api = namespaces.clone();
        async move {
            let ns = api.get_opt("causeway-es-west").await.ok()?;
            ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some())
                .then_some(())
        }
    })
    .await;
    agent.stop.cancel();
    ctl.stop().await;
    cs.shutdown();
}

/// kubesim as a cluster with capacity: a member runs a Deployment's Pods on its nodes
/// until allocatable runs out (its Cluster status counts them), the hub runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_run_workloads_on_their_nodes_and_the_hub_runs_none() {
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let east = client(cs.member("east").unwrap()).await.unwrap();
    // one node of 8 cpu: 10 replicas of 1 cpu → 8 placed, 2 Pending
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "web",
                                       "resources": {"requests": {"cpu": "1"}}}]}}}});
    let pp = PatchParams::apply("test");
    for c in [&hub, &east] {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(c.clone(), "default");
        api.patch("web", &pp, &Patch::Apply(&deploy)).await.unwrap();
    }
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(east.clone(), "default");
    eventually("8 of 10 replicas ready in east", WAIT, || async {
        let d = deployments.get("web").await.ok()?;
        (d.status?.ready_replicas == Some(8)).then_some(())
    })
    .await;
    let c = cluster_where(&hub, "east", "east's allocated and allocating", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.resource_summary.as_ref())
            .is_some_and(|r| {
                r.allocated.get("cpu").map(|q| q.0.as_str()) == Some("8")
                    && r.allocating.get("cpu").map(|q| q.0.as_str()) == Some("2")
            })
    })
    .await;
    assert!(c.status.is_some());
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(hub.clone(), "default");
    assert!(
        pods.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "the hub runs no pods"
    );
    ctl.stop().await;
    cs.shutdown();
}

/// A status decided on a stale read never lands: `post_status` carries the Cluster's
/// resourceVersion, and the hub refuses it (409) once the Cluster changed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_decided_on_a_stale_read_is_refused() {
    use causeway_controllers::clusters::status::post_status;
    let cs = start(&["east"]).await;
    cs.join_all().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let api: Api<Cluster> = Api::all(hub.clone());
    let read = api.get("east").await.unwrap();
    // somebody writes the Cluster after the read
    let label = json!({"metadata": {"labels": {"causeway-test/touched": "yes"}}});
    api.patch("east", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let body = json!({"kubernetesVersion": "v0.0.0-stale"});
    let err = post_status(&api, "causeway-test", &read, &body, &[])
        .await
        .unwrap_err();
    assert!(err.contains("the object has been modified"), "{err}");
    let now = api.get("east").await.unwrap();
    let version = now
        .status
        .as_ref()
        .and_then(|s| s.kubernetes_version.clone());
    assert_ne!(version.as_deref(), Some("v0.0.0-stale"), "nothing landed");
    // from a fresh read it lands
    post_status(&api, "causeway-test", &now, &body, &[])
        .await
        .unwrap();
    let after = api.get("east").await.unwrap();
    let version = after
        .status
        .as_ref()
        .and_then(|s| s.kubernetes_version.clone());
    assert_eq!(version.as_deref(), Some("v0.0.0-stale"));
    cs.shutdown();
}

/// An unregister that gives up waiting (no controller lets the Cluster go) says that
/// the agent's hub identity stays and how to finish; run again once the Cluster is
/// gone, it removes that identity instead of saying there is nothing registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregister_that_gave_up_waiting_is_finished_by_running_it_again() {
    use causeway_controllers::clusters::register::unregister;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    register_pull(&cs, &hub, "west").await;
    // the controller puts its finalizer on the Cluster, then is stopped: nothing
    // lets the Cluster go
    let ctl = cs.start_controller().await.unwrap();
    cluster_where(&hub, "west", "west held by the cluster finalizer", |c| {
        c.finalizers()
            .iter()
            .any(|f| f == "causeway.io/cluster-controller")
    })
    .await;
    ctl.stop().await;
    let e = unregister(hub.clone(), "west", None, false, Duration::from_secs(1))
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("the agent's hub identity stays until the Cluster is gone: run `causeway unregister west` again to finish"),
        "{e}"
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), "causeway-system");
    assert!(
        accounts
            .get_opt("causeway-agent-west")
            .await
            .unwrap()
            .is_some()
    );
    let ctl = cs.start_controller().await.unwrap();
    let clusters: Api<Cluster> = Api::all(hub.clone());
    eventually("the Cluster gone", WAIT, || async {
        clusters.get_opt("west").await.ok()?.is_none().then_some(())
    })
    .await;
    let said = unregister(hub.clone(), "west", None, false, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(said.contains("its leftover agent identity"), "{said}");
    assert!(
        accounts
            .get_opt("causeway-agent-west")
            .await
            .unwrap()
            .is_none()
    );
    let e = unregister(hub.clone(), "west", None, false, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("no cluster \"west\" is registered"),
        "{e:#}"
    );
    ctl.stop().await;
    cs.shutdown();
}

/// The hub refusing a Pull agent's identity for a moment (its ClusterRoleBinding
/// deleted and applied again, as a GitOps sync may) does not make the agent leave: the
/// member keeps its clusterset.k8s.io and the agent carries on. A refusal that lasts a
/// lease (the identity really revoked) does, and no sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_leaves_only_when_the_hub_refuses_it_for_a_lease() {
    use causeway_controllers::clusters::register::agent_rbac;
    use kube::api::{DeleteParams, DynamicObject, PostParams};
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let timing = Timing::fast();
    let agent = cs
        .start_pull_member("west", timing.clone(), false)
        .await
        .unwrap();
    let west = client(cs.member("west").unwrap()).await.unwrap();
    let in_clusterset = || {
        let west = west.clone();
        async move {
            causeway_e2e::cluster_properties(&west)
                .await
                .contains_key("clusterset.k8s.io")
        }
    };
    eventually("west in the clusterset", WAIT, || async {
        in_clusterset().await.then_some(())
    })
    .await;
    let binding = agent_rbac("west")
        .into_iter()
        .find(|o| o["kind"] == "ClusterRoleBinding")
        .unwrap();
    let name = binding["metadata"]["name"].as_str().unwrap().to_string();
    let ar = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        "clusterrolebindings",
    );
    let bindings: Api<DynamicObject> = Api::all_with(hub.clone(), &ar);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(hub.clone(), "causeway-system");
    let renewed = || async {
        leases
            .get("cluster-west")
            .await
            .unwrap()
            .spec
            .unwrap()
            .renew_time
            .unwrap()
            .0
    };

    // refused for half a lease, then allowed again: the agent stays
    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(timing.lease_duration() / 2).await;
    let obj: DynamicObject = serde_json::from_value(binding.clone()).unwrap();
    bindings.create(&PostParams::default(), &obj).await.unwrap();
    tokio::time::sleep(timing.lease_duration()).await;
    assert!(
        in_clusterset().await,
        "a refusal shorter than a lease made the agent leave"
    );
    let before = renewed().await;
    eventually("the agent renews its lease again", WAIT, || async {
        (renewed().await > before).then_some(())
    })
    .await;

    // refused for good: the agent leaves once a lease has passed
    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let refused = std::time::Instant::now();
    eventually("west out of the clusterset", WAIT, || async {
        (!in_clusterset().await).then_some(())
    })
    .await;
    assert!(
        refused.elapsed() >= timing.lease_duration(),
        "left after {:?}, before a lease",
        refused.elapsed()
    );
    agent.stop.cancel();
    ctl.stop().await;
    cs.shutdown();
}

/// Whether `member` carries the KEP-2149 `clusterset.k8s.io` ClusterProperty.
async fn in_clusterset(member: &kube::Client) -> bool {
    causeway_e2e::cluster_properties(member)
        .await
        .contains_key("clusterset.k8s.io")
}

/// A.4 with the hub RBAC of deploy/ (hub.yaml alone, applied with kubectl, the hub
/// controller running as the ServiceAccount it binds): a Pull member's Lease deleted
/// on the hub is made again by the cluster monitor (a server-side apply: `patch` on
/// leases), and the agent's renewals carry on on it, so the Cluster never goes Unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_member_lease_is_made_again_with_the_hub_rbac_of_deploy() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = crate::support::Env::start_with(Options {
        members: vec!["west".into()],
        ..Default::default()
    })
    .await;
    env.ok(&["apply", "-f", "deploy/rbac/hub.yaml"]).await;
    let cs = &env.cs;
    cs.hub.add_token(
        "hub-controller-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-controller".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    let restricted = causeway_controllers::clusters::join::client_for(
        &causeway_controllers::clusters::join::MemberAccess {
            token: "hub-controller-token".into(),
            ..access(&cs.hub)
        },
    )
    .await
    .unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let ctl = cs.start_controller_as(restricted).unwrap();
    let timing = Timing::fast();
    let agent = cs
        .start_pull_member("west", timing.clone(), false)
        .await
        .unwrap();
    cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "causeway-system");
    let renewed = || async {
        leases
            .get_opt("cluster-west")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0)
    };
    eventually("the lease renewed", WAIT, || async { renewed().await }).await;
    leases
        .delete("cluster-west", &Default::default())
        .await
        .unwrap();
    let deleted = k8s_openapi::jiff::Timestamp::now();
    // three leases: the agent's renewals (404 while the Lease is missing) must land
    // again long before the monitor's grace period ends
    let until = std::time::Instant::now() + 3 * timing.lease_duration();
    let mut back = false;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    while std::time::Instant::now() < until {
        let c = clusters.get("west").await.unwrap();
        assert_ne!(
            ready(&c).map(|r| r.0).as_deref(),
            Some("Unknown"),
            "west went Unknown after its Lease was deleted: {:?}",
            causeway_controllers::clusters::status::ready_of(&c)
        );
        back |= renewed().await.is_some_and(|t| t > deleted);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(back, "the Lease was not made again and renewed");
    agent.stop.cancel();
    ctl.stop().await;
    cs.shutdown();
}

/// The Cluster not found for a moment (deleted and made again, as a GitOps sync may)
/// does not make the agent leave: the member keeps its clusterset.k8s.io. Not found
/// for a lease, it does, and no sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_leaves_only_when_its_cluster_is_gone_for_a_lease() {
    use kube::api::{DeleteParams, PostParams};
    // no hub controller: nothing puts a finalizer on the Cluster, a delete is at once
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let timing = Timing::fast();
    let agent = cs
        .start_pull_member("west", timing.clone(), false)
        .await
        .unwrap();
    let west = client(cs.member("west").unwrap()).await.unwrap();
    eventually("west in the clusterset", WAIT, || async {
        in_clusterset(&west).await.then_some(())
    })
    .await;
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let spec = clusters.get("west").await.unwrap().spec;

    // `causeway register` puts the cleanup finalizer on the Cluster: without it, the
    // Cluster goes at once (a deleted Cluster that waits is left at once, rightly)
    let no_finalizer = json!({"metadata": {"finalizers": null}});
    let pp = PatchParams::default();
    clusters
        .patch("west", &pp, &Patch::Merge(&no_finalizer))
        .await
        .unwrap();
    // not found for half a lease, then back: the agent stays
    clusters
        .delete("west", &DeleteParams::default())
        .await
        .unwrap();
    assert!(clusters.get_opt("west").await.unwrap().is_none());
    tokio::time::sleep(timing.lease_duration() / 2).await;
    clusters
        .create(&PostParams::default(), &Cluster::new("west", spec))
        .await
        .unwrap();
    tokio::time::sleep(timing.lease_duration()).await;
    assert!(
        in_clusterset(&west).await,
        "a Cluster missing for less than a lease made the agent leave"
    );

    // gone for good: the agent leaves once a lease has passed
    clusters
        .patch("west", &pp, &Patch::Merge(&no_finalizer))
        .await
        .unwrap();
    clusters
        .delete("west", &DeleteParams::default())
        .await
        .unwrap();
    let gone = std::time::Instant::now();
    eventually("west out of the clusterset", WAIT, || async {
        (!in_clusterset(&west).await).then_some(())
    })
    .await;
    assert!(
        gone.elapsed() >= timing.lease_duration(),
        "left after {:?}, before a lease",
        gone.elapsed()
    );
    agent.stop.cancel();
    cs.shutdown();
}

/// A.6 for a Pull member whose agent restarts in the middle of `causeway unregister`:
/// the new agent finds its Cluster being deleted and waiting for it, and cleans up the
/// member (the propagated objects, the imports, clusterset.k8s.io) instead of
/// refusing to start; unregister then reports an ordinary removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restarted_during_unregister_cleans_up_the_member() {
    use causeway_controllers::clusters::register::unregister;
    use causeway_crds::mcs::v1beta1::ServiceImport;
    use k8s_openapi::api::core::v1::ConfigMap;
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let done = register_pull(&cs, &hub, "west").await;
    let ctl = cs.start_controller().await.unwrap();
    let member = client(cs.member("west").unwrap()).await.unwrap();
    let run_agent = |stop: tokio_util::sync::CancellationToken| {
        let (member, kubeconfig) = (member.clone(), done.agent_kubeconfig.clone());
        async move {
            let hub = agent_client(&kubeconfig).await;
            let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
            causeway_controllers::agent::run(
                hub,
                member,
                "west".into(),
                Timing::fast(),
                metrics,
                stop,
            )
            .await
        }
    };
    let stop1 = tokio_util::sync::CancellationToken::new();
    let first = tokio::spawn(run_agent(stop1.clone()));
    cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    // a propagated object: a Work as the hub renders it, which the agent applies
    use causeway_crds::well_known::{finalizers, labels};
    let work = json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "settings", "namespace": "causeway-es-west",
                     "finalizers": [finalizers::WORK],
                     "labels": {labels::CLUSTER: "west"}},
        "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": "fast"}}]}},
    });
    Api::<causeway_crds::federation::work::Work>::namespaced(hub.clone(), "causeway-es-west")
        .patch("settings", &PatchParams::apply("test"), &Patch::Apply(work))
        .await
        .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(member.clone(), "default");
    eventually("the propagated ConfigMap in west", WAIT, || async {
        configmaps.get_opt("settings").await.ok().flatten()
    })
    .await;
    eventually("west in the clusterset", WAIT, || async {
        in_clusterset(&member).await.then_some(())
    })
    .await;
    // the agent stops (its pod is rescheduled, say) ...
    stop1.cancel();
    first.await.unwrap().unwrap();
    // ... with an import of Causeway's in the member
    let import = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "web", "namespace": "default", "labels": {"causeway.io/managed": "true"}},
        "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]}});
    let imports: Api<ServiceImport> = Api::namespaced(member.clone(), "default");
    imports
        .patch("web", &PatchParams::apply("test"), &Patch::Apply(import))
        .await
        .unwrap();
    // ... unregister starts meanwhile, and the agent comes back in the middle of it
    let h = hub.clone();
    let unregistering = tokio::spawn(async move { unregister(h, "west", None, false, WAIT).await });
    cluster_where(&hub, "west", "west being deleted", |c| {
        c.metadata.deletion_timestamp.is_some()
    })
    .await;
    let stop2 = tokio_util::sync::CancellationToken::new();
    let second = tokio::spawn(run_agent(stop2.clone()));
    let said = unregistering.await.unwrap().unwrap();
    assert!(said.starts_with("cluster \"west\" unregistered"), "{said}");
    assert!(!said.contains("never confirmed"), "{said}");
    tokio::time::timeout(WAIT, second)
        .await
        .expect("the restarted agent stops once it cleaned up")
        .unwrap()
        .unwrap();
    assert!(
        configmaps.get_opt("settings").await.unwrap().is_none(),
        "the propagated ConfigMap deleted"
    );
    assert!(
        imports.get_opt("web").await.unwrap().is_none(),
        "the import withdrawn"
    );
    assert!(!in_clusterset(&member).await, "clusterset.k8s.io deleted");
    ctl.stop().await;
    cs.shutdown();
}

/// An unregister whose agent never confirmed its cleanup (it is down: the Cluster went
/// Unknown, so the hub does not wait for it) says so, and what may be left in the
/// member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregister_says_when_the_agent_never_confirmed_its_cleanup() {
    use causeway_controllers::clusters::register::unregister;
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let agent = cs
        .start_pull_member("west", Timing::fast(), false)
        .await
        .unwrap();
    cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    agent.stop.cancel();
    cluster_where(&hub, "west", "west Unknown", |c| {
        ready(c).is_some_and(|r| r.0 == "Unknown")
    })
    .await;
    let said = unregister(hub.clone(), "west", None, false, WAIT)
        .await
        .unwrap();
    assert!(said.starts_with("cluster \"west\" unregistered"), "{said}");
    assert!(
        said.contains(
            "warning: the agent of \"west\" never confirmed that it cleaned up the member"
        ) && said.contains("clusterset.k8s.io")
            && said.contains("delete them there by hand"),
        "{said}"
    );
    let west = client(cs.member("west").unwrap()).await.unwrap();
    assert!(
        in_clusterset(&west).await,
        "nobody cleaned up west, as unregister says"
    );
    ctl.stop().await;
    cs.shutdown();
}

/// An outage of a Pull member's API server, its agent under leader election (the
/// leader Lease lives in the member): the leader cannot renew that Lease, steps down
/// after the renew deadline and exits — and first posts Ready=False
/// ClusterNotReachable on the hub, at once (no replica can lead while the member does
/// not answer, so nobody else would, and the hub would only see the lease go silent).
/// The thresholds here are long: neither the status loop's damping nor the hub's
/// monitor would say anything within the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_loses_its_member_says_so_before_stepping_down() {
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let done = register_pull(&cs, &hub, "west").await;
    let timing = Timing {
        failure_threshold: Duration::from_secs(120),
        monitor_grace_period: Duration::from_secs(120),
        startup_grace_period: Duration::from_secs(120),
        ..Timing::fast()
    };
    let ctl = cs
        .start_controller_with(
            hub.clone(),
            causeway_controllers::controller::Options {
                timing: timing.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    let member = client(cs.member("west").unwrap()).await.unwrap();
    let elector = causeway_runtime::leader::Elector::new(
        member.clone(),
        "causeway-system",
        "causeway-agent",
        "agent-a",
        causeway_runtime::leader::Timings {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(300),
        },
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let agent = tokio::spawn(causeway_controllers::agent::run_elected(
        Some(elector),
        agent_client(&done.agent_kubeconfig).await,
        member,
        "west".into(),
        timing.clone(),
        std::sync::Arc::new(causeway_controllers::metrics::Metrics::default()),
        std::sync::Arc::new(causeway_controllers::clusters::lease::Renewals::default()),
        stop.clone(),
    ));
    cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;

    cs.member("west")
        .unwrap()
        .faults()
        .set_drop_connections(true);
    let cut = std::time::Instant::now();
    let c = cluster_where(&hub, "west", "west ClusterNotReachable", |c| {
        ready(c).is_some_and(|r| r.0 == "False")
    })
    .await;
    let r = causeway_controllers::clusters::status::ready_of(&c).unwrap();
    assert_eq!(r.reason, "ClusterNotReachable", "{r:?}");
    assert!(
        r.message
            .contains("the causeway agent lost its leader Lease in the member"),
        "{}",
        r.message
    );
    assert!(
        cut.elapsed() < timing.failure_threshold / 4,
        "posted after {:?}",
        cut.elapsed()
    );
    let ended = tokio::time::timeout(WAIT, agent).await.unwrap().unwrap();
    let e = format!("{:#}", ended.unwrap_err());
    assert!(e.contains("lost the leader Lease"), "{e}");
    cs.member("west")
        .unwrap()
        .faults()
        .set_drop_connections(false);
    ctl.stop().await;
    cs.shutdown();
}

/// Token rotation under a running agent: the member's Secret keeps the agent's hub
/// token in its own key, and its kubeconfig reads it from the file deploy/agent/ mounts
/// it as. Here the agent runs on a token the hub then revokes, while `causeway
/// register` runs again and its new token lands in that file (as the kubelet would
/// write it): the agent's client reads the file again (within a minute) and goes on
/// with the new token; it neither leaves nor lets the Cluster go Unknown. (The
/// lease is long: kube-rs re-reads a token file only once a minute.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_agent_token_is_read_again_from_its_file() {
    use causeway_controllers::clusters::register::{AGENT_SECRET, AGENT_TOKEN_FILE};
    use k8s_openapi::api::core::v1::Secret;
    let cs = start(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let registering = || register_pull(&cs, &hub, "west");
    registering().await;
    let member = client(cs.member("west").unwrap()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(member.clone(), "causeway-system");
    let key =
        |s: &Secret, k: &str| String::from_utf8(s.data.as_ref().unwrap()[k].0.clone()).unwrap();
    let secret = secrets.get(AGENT_SECRET).await.unwrap();
    let mut kc: serde_json::Value = serde_json::from_str(&key(&secret, "kubeconfig")).unwrap();
    assert_eq!(
        kc["users"][0]["user"],
        json!({ "tokenFile": AGENT_TOKEN_FILE }),
        "the Secret's kubeconfig reads its token from the file deploy/agent/ mounts"
    );
    let first = key(&secret, "token");
    assert!(!first.is_empty());

    // the Deployment's volume, here a directory of the test; the agent starts on a
    // token the hub can revoke alone (one for its ServiceAccount)
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let write = |token: &str| {
        // as the kubelet updates a Secret volume: the new file replaces the old at once
        let tmp = dir.path().join("token.new");
        std::fs::write(&tmp, token).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    cs.hub.add_token(
        "old-agent-token",
        kubesim::User {
            name: "system:serviceaccount:causeway-system:causeway-agent-west".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            ..Default::default()
        },
    );
    write("old-agent-token");
    kc["users"][0]["user"]["tokenFile"] = json!(file.display().to_string());
    let kc: kube::config::Kubeconfig = serde_json::from_value(kc).unwrap();
    let agent_hub = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    // leases long enough for the agent's client to read its file again (kube-rs: once
    // a minute) before the hub would miss it; the hub's grace period the same
    let timing = Timing {
        monitor_grace_period: Duration::from_secs(150),
        ..Timing::fast()
    };
    let ctl = cs
        .start_controller_with(
            hub.clone(),
            causeway_controllers::controller::Options {
                timing: timing.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let agent = tokio::spawn(causeway_controllers::agent::run(
        agent_hub,
        member.clone(),
        "west".into(),
        timing.clone(),
        std::sync::Arc::new(causeway_controllers::metrics::Metrics::default()),
        stop.clone(),
    ));
    cluster_where(&hub, "west", "west Ready through its agent", |c| {
        ready(c).is_some_and(|r| r.0 == "True")
    })
    .await;
    eventually("west in the clusterset", WAIT, || async {
        in_clusterset(&member).await.then_some(())
    })
    .await;

    // registered again: a new token in the Secret, then in the file; the old revoked
    registering().await;
    let renewed = key(&secrets.get(AGENT_SECRET).await.unwrap(), "token");
    assert_ne!(renewed, first, "registering again renews the token");
    write(&renewed);
    cs.hub.revoke_token("old-agent-token");
    // a change only the agent writes: the region, into its Cluster's status
    let clusters: Api<Cluster> = Api::all(hub.clone());
    clusters
        .patch(
            "west",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"region": "eu-rotated"}})),
        )
        .await
        .unwrap();
    let api = clusters.clone();
    let c = eventually(
        "the agent writes with its renewed token",
        Duration::from_secs(100),
        || {
            let api = api.clone();
            async move {
                let c = api.get("west").await.ok()?;
                (c.status.as_ref()?.region.as_deref() == Some("eu-rotated")).then_some(c)
            }
        },
    )
    .await;
    assert_eq!(ready(&c).map(|r| r.0).as_deref(), Some("True"));
    assert!(in_clusterset(&member).await, "the agent stayed");
    assert!(!agent.is_finished(), "the agent runs on");
    stop.cancel();
    agent.await.unwrap().unwrap();
    ctl.stop().await;
    cs.shutdown();
}

/// The hub cannot be its own member: a join whose member is the hub (its kube-system
/// uid) is refused with what to do, and writes no Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_is_not_its_own_member() {
    let cs = Clusterset::start(
        &Options {
            members: vec!["east".into()],
            ..Default::default()
        },
        |_| {},
    )
    .await
    .unwrap();
    cs.install_crds().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let e = causeway_controllers::clusters::join::join(hub.clone(), "self", &access(&cs.hub), None)
        .await
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.contains("this cluster is the hub itself") && e.contains("join that one"),
        "{e}"
    );
    let clusters: Api<Cluster> = Api::all(hub);
    assert!(clusters.get_opt("self").await.unwrap().is_none());
}

/// Registers member `name` of `cs` in Pull mode (a one-hour agent token).
async fn register_pull(
    cs: &Clusterset,
    hub: &kube::Client,
    name: &str,
) -> causeway_controllers::clusters::register::Registered {
    register(
        hub.clone(),
        hub_endpoint(&cs.hub),
        name,
        &causeway_e2e::member(cs.member(name).unwrap()).await,
        &RegisterOptions {
            token_seconds: 3600,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// `causeway register` (pull mode) takes the member kubeconfig kind and kubeadm give an
/// admin, a client certificate: the command reaches the member with it, and the hub is
/// handed only the member's URL and CA. The agent's kubeconfig (it holds the agent's
/// token) is written for its user alone; a path it cannot be written to is refused
/// before anything changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn causeway_register_takes_a_client_certificate_kubeconfig() {
    use std::os::unix::fs::PermissionsExt;
    let cs = start(&["west"]).await;
    let west = cs.member("west").unwrap();
    let cert = west
        .issue_client_cert(&kubesim::User::admin("kubernetes-admin"))
        .unwrap();
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    let dir = tempfile::tempdir().unwrap();
    let member_kc = dir.path().join("west.kubeconfig");
    let kc = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "kind-west",
        "clusters": [{"name": "kind-west", "cluster": {
            "server": west.url(),
            "certificate-authority-data": b64(west.ca_pem().unwrap())}}],
        "users": [{"name": "kind-west", "user": {
            "client-certificate-data": b64(&cert.cert_pem),
            "client-key-data": b64(&cert.key_pem)}}],
        "contexts": [{"name": "kind-west", "context": {"cluster": "kind-west", "user": "kind-west"}}],
    });
    std::fs::write(&member_kc, kc.to_string()).unwrap();
    let hub_kc = dir.path().join("hub.kubeconfig");
    std::fs::write(
        &hub_kc,
        kubesim::kubeconfig::single("hub", &cs.hub.url(), cs.hub.ca_pem(), cs.hub.admin_token()),
    )
    .unwrap();
    let register = |out: &std::path::Path| {
        std::process::Command::new(crate::propagation_cli::causeway_bin())
            .arg("register")
            .arg("west")
            .arg("--hub-kubeconfig")
            .arg(&hub_kc)
            .arg("--kubeconfig")
            .arg(&member_kc)
            .arg("--agent-kubeconfig-out")
            .arg(out)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let hub = client(&cs.hub).await.unwrap();
    let clusters: Api<Cluster> = Api::all(hub.clone());
    let o = register(&dir.path().join("missing").join("agent.kubeconfig"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("--agent-kubeconfig-out")
            && err.contains("cannot write"),
        "{err}"
    );
    assert!(
        clusters.get_opt("west").await.unwrap().is_none(),
        "nothing registered"
    );
    let out = dir.path().join("agent.kubeconfig");
    let o = register(&out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the agent's token is its user's alone");
    let c = clusters.get("west").await.unwrap();
    assert_eq!(
        c.spec.kube_system_uid.as_deref(),
        Some(west.kube_system_uid().as_str())
    );
    // no member credentials on the hub (no --search-access)
    assert!(c.spec.secret_ref.is_none(), "{:?}", c.spec);
    cs.shutdown();
}
