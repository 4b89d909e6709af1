//! The work applier's lifecycle end to end (federation.md §8 E.37–39, G): nothing
//! written while the member is not Ready or dispatching is suspended, deletion and
//! orphaning, bounded calls, and a Pull member's agent. Helpers in
//! `propagation_applier.rs`.

use std::time::Duration;

use causeway_controllers::propagation::applier::{self, Applier};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::work::{ResourceHealth, Work, conditions};
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::{annotations, labels};
use causeway_e2e::{MANAGER, client};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::mcs_support::{consistently, eventually};
use crate::propagation_applier::{
    Env, NS, WAIT, cluster_ready, clusterset, condition, config_map, edit, put_work, work_where,
};

/// E.38–39: while the member's Cluster is not Ready nothing is written
/// (Applied=False ClusterNotReady); with suspendDispatching nothing is written either,
/// the status is still reported and Dispatching=False SuspendDispatching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_and_suspended_members_are_not_written() {
    let env = Env::start(&["east"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    put_work(
        &env.hub,
        "east",
        "cfg",
        &[config_map("cfg", json!({"v": "1"}))],
        json!({}),
    )
    .await;
    work_where(&env.hub, "east", "cfg", "cfg applied", |_, s| {
        condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    let data = |cms: Api<ConfigMap>| async move {
        cms.get("cfg")
            .await
            .ok()
            .and_then(|c| c.data)
            .and_then(|d| d.get("v").cloned())
    };

    // suspended: status still reported, nothing written
    let before = env.writes();
    put_work(
        &env.hub,
        "east",
        "cfg",
        &[config_map("cfg", json!({"v": "2"}))],
        json!({"suspendDispatching": true}),
    )
    .await;
    let w = work_where(&env.hub, "east", "cfg", "Dispatching=False", |_, s| {
        condition(s, conditions::DISPATCHING)
            == Some(("False", conditions::REASON_SUSPEND_DISPATCHING))
    })
    .await;
    let m = &w.status.unwrap().manifest_statuses[0];
    assert_eq!(
        m.reason.as_deref(),
        Some(conditions::REASON_SUSPEND_DISPATCHING)
    );
    assert_eq!(
        m.health,
        Some(ResourceHealth::Healthy),
        "status still collected"
    );
    consistently(
        "suspended: the member keeps v=1",
        Duration::from_secs(3),
        || {
            let cms = cms.clone();
            async move { data(cms).await.as_deref() == Some("1") }
        },
    )
    .await;

    assert_eq!(env.writes(), before, "suspended: no member write");
    // not Ready: nothing written
    env.cs.members[0].faults().set_not_ready(true);
    cluster_ready(&env.hub, "east", false).await;
    let before = env.writes();
    put_work(
        &env.hub,
        "east",
        "cfg",
        &[config_map("cfg", json!({"v": "3"}))],
        json!({"suspendDispatching": false}),
    )
    .await;
    work_where(
        &env.hub,
        "east",
        "cfg",
        "Applied=False ClusterNotReady",
        |_, s| {
            condition(s, conditions::APPLIED)
                == Some(("False", conditions::REASON_CLUSTER_NOT_READY))
        },
    )
    .await;
    consistently(
        "not Ready: the member keeps v=1",
        Duration::from_secs(3),
        || {
            let cms = cms.clone();
            async move { data(cms).await.as_deref() == Some("1") }
        },
    )
    .await;

    assert_eq!(env.writes(), before, "not Ready: no member write");
    // Ready again: applied
    env.cs.members[0].faults().set_not_ready(false);
    eventually("v=3 once Ready", WAIT, || {
        let cms = cms.clone();
        async move { (data(cms).await.as_deref() == Some("3")).then_some(()) }
    })
    .await;
}

/// G: a manifest removed from a Work has its object deleted; deleting a Work deletes
/// its objects (never one Causeway did not manage), waits while one is terminating
/// (WaitingForRemoval), then releases the finalizer; with preserveResourcesOnDeletion
/// the objects stay, stripped of Causeway's label and annotations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_works_removes_or_orphans_member_objects() {
    let env = Env::start(&["east"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    let works: Api<Work> = Api::namespaced(env.hub.clone(), &execution_namespace("east"));
    let theirs: ConfigMap =
        serde_json::from_value(config_map("theirs", json!({"who": "member"}))).unwrap();
    cms.create(&PostParams::default(), &theirs).await.unwrap();
    let manifests = [
        config_map("a", json!({})),
        config_map("b", json!({})),
        config_map("theirs", json!({})),
    ];
    put_work(&env.hub, "east", "gone", &manifests, json!({})).await;
    let exists = |name: &'static str, want: bool| {
        let cms = cms.clone();
        async move {
            eventually(&format!("{name} exists={want}"), WAIT, || {
                let cms = cms.clone();
                async move { (cms.get_opt(name).await.ok()?.is_some() == want).then_some(()) }
            })
            .await
        }
    };
    exists("a", true).await;
    exists("b", true).await;

    // b leaves the Work: deleted
    put_work(
        &env.hub,
        "east",
        "gone",
        &[manifests[0].clone(), manifests[2].clone()],
        json!({}),
    )
    .await;
    exists("b", false).await;

    // a is held by a member finalizer: the Work waits for it
    edit(
        &cms,
        "a",
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .await;
    works
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    work_where(&env.hub, "east", "gone", "WaitingForRemoval", |_, s| {
        s.manifest_statuses
            .first()
            .and_then(|m| m.reason.as_deref())
            == Some(conditions::REASON_WAITING_FOR_REMOVAL)
    })
    .await;
    edit(&cms, "a", json!({"metadata": {"finalizers": null}})).await;
    exists("a", false).await;
    eventually("the Work released", WAIT, || {
        let works = works.clone();
        async move { works.get_opt("gone").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert_eq!(
        cms.get("theirs").await.unwrap().data.unwrap()["who"],
        "member",
        "never Causeway's"
    );

    // preserveResourcesOnDeletion: orphaned
    put_work(
        &env.hub,
        "east",
        "kept",
        &[config_map("kept", json!({"k": "v"}))],
        json!({"preserveResourcesOnDeletion": true}),
    )
    .await;
    exists("kept", true).await;
    works
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the preserving Work released", WAIT, || {
        let works = works.clone();
        async move { works.get_opt("kept").await.ok()?.is_none().then_some(()) }
    })
    .await;
    let kept = cms.get("kept").await.unwrap();
    assert_eq!(kept.labels().get(labels::MANAGED), None);
    assert_eq!(kept.annotations().get(annotations::WORK), None);
    assert_eq!(kept.annotations().get(annotations::APPLIED_HASH), None);
    assert_eq!(kept.data.unwrap()["k"], "v");
}

/// E.37: every member call is bounded: a member that stops answering gets
/// CreationTimedOut on its Work, and another member's applier (a separate task) is not
/// held up. The appliers run here with a 1 s call limit (the controller's is 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_member_times_out_and_others_carry_on() {
    let cs = clusterset(&["east", "west"]).await;
    cs.join_all().await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    // Ready as the status loop would say (no controller runs here)
    for name in ["east", "west"] {
        let status = json!({"apiVersion": "causeway.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        Api::<Cluster>::all(hub.clone())
            .patch_status(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(status),
            )
            .await
            .unwrap();
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let caches = std::sync::Arc::new(causeway_controllers::mcs::HubCaches::start(&hub, &stop));
    let metrics = std::sync::Arc::new(causeway_controllers::metrics::Metrics::default());
    for m in &cs.members {
        let a = Applier {
            cluster: m.name().to_string(),
            member: client(m).await.unwrap(),
            hub: hub.clone(),
            limit: Duration::from_secs(1),
        };
        tokio::spawn(applier::run(
            a,
            caches.clone(),
            metrics.clone(),
            stop.clone(),
        ));
    }
    // both converge once (discovery and watches of ConfigMaps in place)
    for c in ["east", "west"] {
        put_work(
            &hub,
            c,
            "first",
            &[config_map("first", json!({}))],
            json!({}),
        )
        .await;
        work_where(&hub, c, "first", "first applied", |_, s| {
            condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
        })
        .await;
    }
    // west stops answering in time
    cs.member("west")
        .unwrap()
        .faults()
        .set_latency(Duration::from_secs(3));
    for c in ["west", "east"] {
        put_work(
            &hub,
            c,
            "second",
            &[config_map("second", json!({}))],
            json!({}),
        )
        .await;
    }
    let east_cms: Api<ConfigMap> = Api::namespaced(client(&cs.members[0]).await.unwrap(), NS);
    work_where(
        &hub,
        "east",
        "second",
        "east applies the second Work",
        |_, s| condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True"),
    )
    .await;
    assert!(east_cms.get_opt("second").await.unwrap().is_some());
    let w = work_where(
        &hub,
        "west",
        "second",
        "west's second Work timed out",
        |_, s| {
            condition(s, conditions::APPLIED)
                == Some(("False", conditions::REASON_CREATION_TIMED_OUT))
        },
    )
    .await;
    let msg = &w.status.unwrap().conditions[0].message;
    assert!(
        msg.contains("cluster west") && msg.contains("no answer within 1000 ms"),
        "{msg}"
    );
    // an update, and a deletion, time out as such
    put_work(
        &hub,
        "west",
        "first",
        &[config_map("first", json!({"v": "2"}))],
        json!({}),
    )
    .await;
    work_where(&hub, "west", "first", "west's update timed out", |_, s| {
        condition(s, conditions::APPLIED) == Some(("False", conditions::REASON_UPDATE_TIMED_OUT))
    })
    .await;
    Api::<Work>::namespaced(hub.clone(), &execution_namespace("west"))
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    work_where(
        &hub,
        "west",
        "first",
        "west's deletion timed out",
        |_, s| {
            condition(s, conditions::APPLIED)
                == Some(("False", conditions::REASON_DELETION_TIMED_OUT))
        },
    )
    .await;
    stop.cancel();
}

/// Pull member `west` with its agent running and Work `cfg` (ConfigMap `pulled`)
/// applied by it.
async fn pull_member_with_a_work() -> (
    causeway_e2e::Clusterset,
    kube::Client,
    causeway_e2e::Controller,
    causeway_e2e::pull::Agent,
) {
    let cs = clusterset(&["west"]).await;
    let hub = client(&cs.hub).await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let agent = cs
        .start_pull_member(
            "west",
            causeway_controllers::clusters::options::Timing::fast(),
            false,
        )
        .await
        .unwrap();
    cluster_ready(&hub, "west", true).await;
    put_work(
        &hub,
        "west",
        "cfg",
        &[config_map("pulled", json!({"v": "1"}))],
        json!({}),
    )
    .await;
    work_where(&hub, "west", "cfg", "applied by the agent", |_, s| {
        condition(s, conditions::APPLIED) == Some(("True", conditions::REASON_APPLIED_SUCCESSFUL))
    })
    .await;
    (cs, hub, ctl, agent)
}

/// A Pull member's Works are applied by its agent with its least-privilege hub
/// identity: it reads its Works, reports their status and releases their finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_members_agent_applies_its_works() {
    let (cs, hub, ctl, agent) = pull_member_with_a_work().await;
    let cms: Api<ConfigMap> = Api::namespaced(client(&cs.members[0]).await.unwrap(), NS);
    assert_eq!(cms.get("pulled").await.unwrap().data.unwrap()["v"], "1");
    let works: Api<Work> = Api::namespaced(hub.clone(), &execution_namespace("west"));
    works.delete("cfg", &DeleteParams::default()).await.unwrap();
    eventually(
        "the agent removed the object and released the Work",
        WAIT,
        || {
            let (works, cms) = (works.clone(), cms.clone());
            async move {
                let gone = works.get_opt("cfg").await.ok()?.is_none()
                    && cms.get_opt("pulled").await.ok()?.is_none();
                gone.then_some(())
            }
        },
    )
    .await;
    agent.stop.cancel();
    ctl.stop().await;
}

/// A Pull member whose API server fails its readiness checks (Ready=False,
/// ClusterNotReady) still has a live agent renewing its lease: when it is unregistered
/// the hub waits for that agent, which deletes what its Works put there before they are
/// released (not only a silent agent, Ready=Unknown, is given up on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_ready_pull_members_agent_still_cleans_up_as_it_leaves() {
    let (cs, hub, ctl, agent) = pull_member_with_a_work().await;
    cs.members[0].faults().set_not_ready(true);
    cluster_ready(&hub, "west", false).await;
    let said = causeway_controllers::clusters::register::unregister(
        hub.clone(),
        "west",
        None,
        false,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(said.contains("unregistered"), "{said}");
    let cms: Api<ConfigMap> = Api::namespaced(client(&cs.members[0]).await.unwrap(), NS);
    assert!(
        cms.get_opt("pulled").await.unwrap().is_none(),
        "the agent deleted the Work's copy before the hub let the Cluster go"
    );
    agent.stop.cancel();
    ctl.stop().await;
}
