//! The work applier end to end (federation.md §8 E, F, G, H.54): Works written on the
//! hub as the renderer writes them, the controller's per-member appliers, assertions on
//! the member objects, the Work status and the member's write counter.

use std::time::Duration;

use causeway_controllers::clusters::status::ready_of;
use causeway_controllers::propagation::applier::{self, Applier};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::work::{ResourceHealth, Work, WorkStatus, conditions};
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::{annotations, finalizers, labels};
use causeway_e2e::{Clusterset, Controller, MANAGER, Options, client};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::mcs_support::{consistently, eventually};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "demo";

struct Env {
    cs: Clusterset,
    ctl: Option<Controller>,
    hub: kube::Client,
    member: kube::Client,
}

impl Env {
    /// A hub and `members` (the first one is the one the tests write to), joined,
    /// Ready, the controller running, namespace `demo` everywhere.
    async fn start(members: &[&str]) -> Env {
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
        cs.join_all().await.unwrap();
        cs.create_namespace_everywhere(NS).await.unwrap();
        let hub = client(&cs.hub).await.unwrap();
        let member = client(&cs.members[0]).await.unwrap();
        let ctl = cs.start_controller().await.unwrap();
        for m in members {
            cluster_ready(&hub, m, true).await;
        }
        Env {
            cs,
            ctl: Some(ctl),
            hub,
            member,
        }
    }

    fn writes(&self) -> u64 {
        self.cs.members[0].write_requests()
    }
}

async fn cluster_ready(hub: &kube::Client, name: &str, ready: bool) {
    let api: Api<Cluster> = Api::all(hub.clone());
    let want = if ready { "True" } else { "False" };
    eventually(&format!("cluster {name} Ready={want}"), WAIT, || {
        let api = api.clone();
        async move {
            let c = api.get_opt(name).await.ok().flatten()?;
            (ready_of(&c)?.status == want).then_some(())
        }
    })
    .await;
}

/// Writes Work `name` for `cluster` as the hub's renderer does (finalizer, cluster
/// label), with `spec` merged over the manifests.
async fn put_work(hub: &kube::Client, cluster: &str, name: &str, manifests: &[Value], spec: Value) {
    let es = execution_namespace(cluster);
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(hub.clone());
    ns_api
        .patch(
            &es,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": es}}),
            ),
        )
        .await
        .unwrap();
    let mut body = json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
        "metadata": {"name": name, "namespace": es, "finalizers": [finalizers::WORK],
                     "labels": {labels::CLUSTER: cluster}},
        "spec": {"workload": {"manifests": manifests}},
    });
    if let (Some(s), Some(extra)) = (body["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    Api::<Work>::namespaced(hub.clone(), &es)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .unwrap();
}

fn condition<'a>(s: &'a WorkStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

async fn work_where(
    hub: &kube::Client,
    cluster: &str,
    name: &str,
    what: &str,
    f: impl Fn(&Work, &WorkStatus) -> bool,
) -> Work {
    let api: Api<Work> = Api::namespaced(hub.clone(), &execution_namespace(cluster));
    eventually(what, WAIT, || {
        let api = api.clone();
        let f = &f;
        async move {
            let w = api.get_opt(name).await.ok().flatten()?;
            let ok = w.status.as_ref().is_some_and(|s| f(&w, s));
            ok.then_some(w)
        }
    })
    .await
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data})
}

fn deployment(image: &str, tier: Option<&str>) -> Value {
    let mut labels = json!({"app": "web", labels::RETAIN_REPLICAS: "true"});
    if let Some(t) = tier {
        labels["tier"] = json!(t);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": NS, "labels": labels,
                        "annotations": {annotations::TEMPLATE_GENERATION: "3"}},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": image}]}}}})
}

/// A merge patch by another field manager (a person, an HPA, another controller).
async fn edit<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// E.33–35, H.54: applied once (managed label, Work annotation), status with health and
/// generations; a hand edit of a field Causeway set is reverted; fields the member set
/// (labels, annotations, finalizers, an HPA's replicas with RETAIN_REPLICAS) survive a
/// template change; a label dropped from the template is
/// dropped from the member; a restarted controller writes nothing to the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_only_what_the_member_lacks_and_keeps_member_fields() {
    let mut env = Env::start(&["east"]).await;
    let cm = config_map("web-config", json!({"a": "1"}));
    put_work(
        &env.hub,
        "east",
        "web",
        &[deployment("nginx:1", Some("front")), cm.clone()],
        json!({}),
    )
    .await;
    let w = work_where(
        &env.hub,
        "east",
        "web",
        "web applied and available",
        |_, s| {
            condition(s, conditions::APPLIED)
                == Some(("True", conditions::REASON_APPLIED_SUCCESSFUL))
                && condition(s, conditions::AVAILABLE)
                    == Some(("True", conditions::REASON_RESOURCES_AVAILABLE))
        },
    )
    .await;
    let st = w.status.unwrap();
    let d = &st.manifest_statuses[0];
    assert_eq!(
        (d.identifier.kind.as_str(), d.identifier.resource.as_str()),
        ("Deployment", "deployments")
    );
    assert_eq!(
        (d.applied, d.health, d.template_generation),
        (Some(true), Some(ResourceHealth::Healthy), Some(3))
    );
    assert!(
        d.generation.is_some() && d.status.as_ref().is_some_and(|s| s["replicas"] == 2),
        "{d:?}"
    );
    assert_eq!(
        condition(&st, conditions::DISPATCHING).map(|c| c.0),
        Some("True")
    );

    let deploys: Api<Deployment> = Api::namespaced(env.member.clone(), NS);
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    let dep = deploys.get("web").await.unwrap();
    assert_eq!(
        dep.labels().get(labels::MANAGED).map(String::as_str),
        Some("true")
    );
    assert_eq!(
        dep.annotations().get(annotations::WORK).map(String::as_str),
        Some("causeway-es-east/web")
    );

    // the member's own changes
    edit(&deploys, "web", json!({"metadata": {"labels": {"team": "member"}, "annotations": {"note": "x"}}, "spec": {"replicas": 5}})).await;
    edit(
        &cms,
        "web-config",
        json!({"metadata": {"finalizers": ["example.com/keep"]}}),
    )
    .await;
    // a hand edit of what Causeway set is reverted
    edit(&cms, "web-config", json!({"data": {"a": "changed"}})).await;
    eventually("the hand edit reverted", WAIT, || {
        let cms = cms.clone();
        async move {
            let c = cms.get("web-config").await.ok()?;
            (c.data?.get("a")? == "1").then_some(())
        }
    })
    .await;

    // a template change: new image, label tier dropped
    put_work(
        &env.hub,
        "east",
        "web",
        &[deployment("nginx:2", None), cm.clone()],
        json!({}),
    )
    .await;
    let dep = eventually("the new image in the member", WAIT, || {
        let deploys = deploys.clone();
        async move {
            let d = deploys.get("web").await.ok()?;
            let image = d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
                .image
                .clone();
            (image.as_deref() == Some("nginx:2")).then_some(d)
        }
    })
    .await;
    assert_eq!(
        dep.labels().get("tier"),
        None,
        "dropped from the template, released"
    );
    assert_eq!(dep.labels().get("team").map(String::as_str), Some("member"));
    assert_eq!(dep.annotations().get("note").map(String::as_str), Some("x"));
    assert_eq!(
        dep.spec.unwrap().replicas,
        Some(5),
        "RETAIN_REPLICAS keeps the member's"
    );
    let c = cms.get("web-config").await.unwrap();
    assert_eq!(c.finalizers(), ["example.com/keep"]);

    // converged: a restarted controller (a full round from scratch) writes nothing
    work_where(&env.hub, "east", "web", "web applied again", |w, s| {
        condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
            && s.conditions[0].observed_generation == w.metadata.generation
    })
    .await;
    env.ctl.take().unwrap().stop().await;
    let before = env.writes();
    let ctl = env.cs.start_controller().await.unwrap();
    let metrics = ctl.metrics.clone();
    eventually("a full applier round after the restart", WAIT, || {
        let text = metrics.encode();
        async move {
            text.lines()
                .any(|l| {
                    l.contains("count")
                        && l.contains("work-applier")
                        && l.contains("east")
                        && !l.ends_with(" 0")
                })
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        env.writes(),
        before,
        "no member write after a restart of a converged Work"
    );
    env.ctl = Some(ctl);
    edit(
        &cms,
        "web-config",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
}

/// F.40–42: an object Causeway did not create is left alone (ResourceConflict, with
/// what to do) until conflictResolution is Overwrite, which adopts it; one labelled
/// `causeway.io/managed: "false"` is never touched, even with Overwrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_abort_overwrite_and_managed_false() {
    let env = Env::start(&["east"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    let theirs = |name: &str, managed: Option<&str>| {
        let mut o = config_map(name, json!({"who": "member"}));
        if let Some(v) = managed {
            o["metadata"]["labels"] = json!({labels::MANAGED: v});
        }
        serde_json::from_value::<ConfigMap>(o).unwrap()
    };
    cms.create(&PostParams::default(), &theirs("taken", None))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &theirs("hands-off", Some("false")))
        .await
        .unwrap();
    let manifests = [
        config_map("taken", json!({"who": "causeway"})),
        config_map("hands-off", json!({"who": "causeway"})),
    ];
    put_work(&env.hub, "east", "cfg", &manifests, json!({})).await;
    let w = work_where(&env.hub, "east", "cfg", "conflicts reported", |_, s| {
        s.manifest_statuses.len() == 2
            && s.manifest_statuses.iter().all(|m| m.applied == Some(false))
    })
    .await;
    let st = w.status.unwrap();
    assert_eq!(
        st.manifest_statuses[0].reason.as_deref(),
        Some(conditions::REASON_CONFLICT)
    );
    assert_eq!(
        st.manifest_statuses[0].message.as_deref(),
        Some(
            "ConfigMap demo/taken already exists in cluster east and is not managed by Causeway; set conflictResolution: Overwrite on the policy or annotate the template causeway.io/conflict-resolution=overwrite to adopt it"
        )
    );
    assert_eq!(
        st.manifest_statuses[1].reason.as_deref(),
        Some(conditions::REASON_MANAGED_LABEL_FALSE)
    );
    assert_eq!(
        condition(&st, conditions::APPLIED),
        Some(("False", conditions::REASON_CONFLICT))
    );
    let applied_msg = &st.conditions[0].message;
    assert!(
        applied_msg.contains("manifest 0") && applied_msg.contains("manifest 1"),
        "{applied_msg}"
    );
    for n in ["taken", "hands-off"] {
        assert_eq!(
            cms.get(n).await.unwrap().data.unwrap()["who"],
            "member",
            "{n} untouched"
        );
    }

    put_work(
        &env.hub,
        "east",
        "cfg",
        &manifests,
        json!({"conflictResolution": "Overwrite"}),
    )
    .await;
    let taken = eventually("taken adopted", WAIT, || {
        let cms = cms.clone();
        async move {
            let c = cms.get("taken").await.ok()?;
            (c.labels().get(labels::MANAGED).map(String::as_str) == Some("true")).then_some(c)
        }
    })
    .await;
    assert_eq!(taken.data.unwrap()["who"], "causeway");
    let w = work_where(&env.hub, "east", "cfg", "taken applied", |_, s| {
        s.manifest_statuses
            .first()
            .is_some_and(|m| m.applied == Some(true))
    })
    .await;
    let st = w.status.unwrap();
    assert_eq!(
        st.manifest_statuses[1].reason.as_deref(),
        Some(conditions::REASON_MANAGED_LABEL_FALSE)
    );
    let hands_off = cms.get("hands-off").await.unwrap();
    assert_eq!(hands_off.data.as_ref().unwrap()["who"], "member");
    assert_eq!(
        hands_off.labels().get(labels::MANAGED).map(String::as_str),
        Some("false")
    );
}

/// E.36: a change refused as immutable is caught by the dry run and reported
/// (ImmutableFieldChange, the server's message, what to do) with nothing written; with
/// RECREATE_ON_IMMUTABLE the object is deleted and created again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_changes_are_reported_or_recreated() {
    let env = Env::start(&["east"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    let frozen = |v: &str, recreate: bool| {
        let mut o = config_map("frozen", json!({"a": v}));
        o["immutable"] = json!(true);
        if recreate {
            o["metadata"]["annotations"] = json!({annotations::RECREATE_ON_IMMUTABLE: "true"});
        }
        o
    };
    put_work(&env.hub, "east", "frozen", &[frozen("1", false)], json!({})).await;
    work_where(&env.hub, "east", "frozen", "frozen applied", |_, s| {
        condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    let uid = cms.get("frozen").await.unwrap().uid();

    put_work(&env.hub, "east", "frozen", &[frozen("2", false)], json!({})).await;
    let w = work_where(
        &env.hub,
        "east",
        "frozen",
        "the immutable change reported",
        |_, s| {
            condition(s, conditions::APPLIED) == Some(("False", conditions::REASON_IMMUTABLE_FIELD))
        },
    )
    .await;
    let m = &w.status.unwrap().manifest_statuses[0];
    let msg = m.message.clone().unwrap_or_default();
    assert!(
        msg.contains("immutable") && msg.contains(annotations::RECREATE_ON_IMMUTABLE),
        "{msg}"
    );
    let now = cms.get("frozen").await.unwrap();
    assert_eq!(
        (now.uid(), now.data.unwrap()["a"].as_str()),
        (uid.clone(), "1"),
        "nothing half-applied"
    );

    put_work(&env.hub, "east", "frozen", &[frozen("2", true)], json!({})).await;
    let again = eventually("frozen recreated with the new data", WAIT, || {
        let cms = cms.clone();
        async move {
            let c = cms.get("frozen").await.ok()?;
            (c.data.as_ref()?.get("a")? == "2").then_some(c)
        }
    })
    .await;
    assert_ne!(again.uid(), uid, "deleted and created, not updated");
    work_where(
        &env.hub,
        "east",
        "frozen",
        "frozen applied again",
        |_, s| condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True"),
    )
    .await;
}

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
    let cs = Clusterset::start(
        &Options {
            members: vec!["east".into(), "west".into()],
            ..Default::default()
        },
        |_| {},
    )
    .await
    .unwrap();
    cs.install_crds().await.unwrap();
    cs.join_all().await.unwrap();
    cs.create_namespace_everywhere(NS).await.unwrap();
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
    stop.cancel();
}

/// A Pull member's Works are applied by its agent with its least-privilege hub
/// identity: it reads its Works, reports their status and releases their finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_members_agent_applies_its_works() {
    let cs = Clusterset::start(
        &Options {
            members: vec!["west".into()],
            ..Default::default()
        },
        |_| {},
    )
    .await
    .unwrap();
    cs.install_crds().await.unwrap();
    cs.create_namespace_everywhere(NS).await.unwrap();
    let hub = client(&cs.hub).await.unwrap();
    let ctl = cs.start_controller().await.unwrap();
    let agent = cs
        .start_pull_member(
            "west",
            causeway_controllers::clusters::options::Timing::fast(),
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
