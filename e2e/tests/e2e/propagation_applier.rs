//! The work applier end to end (federation.md §8 E, F, G, H.54): Works written on the
//! hub as the renderer writes them, the controller's per-member appliers, assertions on
//! the member objects, the Work status and the member's write counter. Not Ready,
//! suspension, deletion, timeouts and Pull members are in
//! `propagation_applier_lifecycle.rs`.

use std::time::Duration;

use causeway_controllers::clusters::status::ready_of;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::work::{ResourceHealth, Work, WorkStatus, conditions};
use causeway_crds::names::execution_namespace;
use causeway_crds::well_known::{annotations, finalizers, labels};
use causeway_e2e::{Clusterset, Controller, MANAGER, Options, client};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::mcs_support::eventually;

pub(crate) const WAIT: Duration = Duration::from_secs(30);
pub(crate) const NS: &str = "demo";

pub(crate) struct Env {
    pub(crate) cs: Clusterset,
    pub(crate) ctl: Option<Controller>,
    pub(crate) hub: kube::Client,
    pub(crate) member: kube::Client,
}

/// A hub and `members` on kubesim with the CRDs and namespace `demo` everywhere
/// (nothing joined).
pub(crate) async fn clusterset(members: &[&str]) -> Clusterset {
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
    cs.create_namespace_everywhere(NS).await.unwrap();
    cs
}

impl Env {
    /// A hub and `members` (the first one is the one the tests write to), joined,
    /// Ready, the controller running, namespace `demo` everywhere.
    pub(crate) async fn start(members: &[&str]) -> Env {
        let cs = clusterset(members).await;
        cs.join_all().await.unwrap();
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

    pub(crate) fn writes(&self) -> u64 {
        self.cs.members[0].write_requests()
    }
}

pub(crate) async fn cluster_ready(hub: &kube::Client, name: &str, ready: bool) {
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
pub(crate) async fn put_work(
    hub: &kube::Client,
    cluster: &str,
    name: &str,
    manifests: &[Value],
    spec: Value,
) {
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

pub(crate) fn condition<'a>(s: &'a WorkStatus, type_: &str) -> Option<(&'a str, &'a str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

pub(crate) async fn work_where(
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

pub(crate) fn config_map(name: &str, data: Value) -> Value {
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
pub(crate) async fn edit<K>(api: &Api<K>, name: &str, patch: Value)
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
/// dropped from the member; a restarted controller writes nothing to the member, even
/// for quantities kube-apiserver wrote back in canonical form (`pods: 10` as "10",
/// "0.5Gi" as "512Mi").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_only_what_the_member_lacks_and_keeps_member_fields() {
    let mut env = Env::start(&["east"]).await;
    let cm = config_map("web-config", json!({"a": "1"}));
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
                       "metadata": {"name": "web", "namespace": NS},
                       "spec": {"hard": {"pods": 10, "configmaps": "1e1", "requests.storage": "0.5Gi"}}});
    put_work(
        &env.hub,
        "east",
        "web",
        &[
            deployment("nginx:1", Some("front")),
            cm.clone(),
            quota.clone(),
        ],
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
        &[deployment("nginx:2", None), cm.clone(), quota.clone()],
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

/// A manifest that names no namespace for a namespaced kind lands in "default", and one
/// that names a namespace for a cluster-scoped kind lands without it (as the API server
/// places them): the objects the member holds are the ones the manifests name, applied
/// once and kept (not taken for leftovers of their own Work, deleted and created again
/// every round), and the Work is Applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_placed_by_the_member_are_the_ones_kept() {
    let env = Env::start(&["east"]).await;
    let no_namespace = json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "nowhere"}, "data": {"a": "1"}});
    let cluster_scoped = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                "metadata": {"name": "reader", "namespace": NS},
                                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    put_work(
        &env.hub,
        "east",
        "placed",
        &[no_namespace, cluster_scoped],
        json!({}),
    )
    .await;
    work_where(&env.hub, "east", "placed", "placed applied", |w, s| {
        condition(s, conditions::APPLIED) == Some(("True", conditions::REASON_APPLIED_SUCCESSFUL))
            && s.conditions[0].observed_generation == w.metadata.generation
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), "default");
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(env.member.clone());
    let uids = || async {
        (
            cms.get("nowhere").await.unwrap().metadata.uid,
            roles.get("reader").await.unwrap().metadata.uid,
        )
    };
    let first = uids().await;
    let before = env.writes();
    // several applier rounds
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(uids().await, first, "neither object deleted and made again");
    assert_eq!(env.writes(), before, "no member write once converged");
}

/// F.40–42: an object Causeway did not create is left alone (ResourceConflict, with
/// what to do) until conflictResolution is Overwrite, which adopts it; one labelled
/// `causeway.io/managed: "false"` is never touched, even with Overwrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_abort_overwrite_and_managed_false() {
    let env = Env::start(&["east"]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.member.clone(), NS);
    let theirs = |name: &str, managed: Option<&str>| {
        let mut o = config_map(name, json!({"who": "member", "kept": "same"}));
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
        config_map("taken", json!({"who": "causeway", "kept": "same"})),
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
    // a kind the member does not serve is reported, with what to do
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": NS}});
    put_work(&env.hub, "east", "widget", &[widget], json!({})).await;
    let w = work_where(
        &env.hub,
        "east",
        "widget",
        "the unknown kind reported",
        |_, s| {
            condition(s, conditions::APPLIED) == Some(("False", conditions::REASON_APPLIED_FAILED))
        },
    )
    .await;
    let msg = w.status.unwrap().manifest_statuses[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        msg.contains("cluster east does not serve Widget in example.com/v1")
            && msg.contains("install its CRD"),
        "{msg}"
    );
    assert_eq!(hands_off.data.as_ref().unwrap()["who"], "member");
    assert_eq!(
        hands_off.labels().get(labels::MANAGED).map(String::as_str),
        Some("false")
    );
    // E.35 for what was taken over: a key the template loses goes from the member,
    // also one the member's maker had set to the same value (the forced apply left it
    // owned by both; taking over leaves it Causeway's alone)
    let manifests = [
        config_map("taken", json!({"who": "causeway"})),
        config_map("hands-off", json!({"who": "causeway"})),
    ];
    put_work(
        &env.hub,
        "east",
        "cfg",
        &manifests,
        json!({"conflictResolution": "Overwrite"}),
    )
    .await;
    eventually("the key the template lost removed", WAIT, || {
        let cms = cms.clone();
        async move {
            let data = cms.get("taken").await.ok()?.data?;
            (!data.contains_key("kept")).then_some(())
        }
    })
    .await;
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

/// E.35: a count retained (`causeway.io/retain-replicas`) from a read older than the
/// object is not put back. The apply carries the read's resourceVersion, the member
/// refuses it (409), and the applier reads the count again and applies once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retained_count_read_before_an_autoscaler_changed_it_is_not_put_back() {
    use causeway_controllers::propagation::applier::{plan, write};
    let cs = clusterset(&["east"]).await;
    let member = client(&cs.members[0]).await.unwrap();
    let manifest = deployment("nginx:1", None);
    let dynamic = kube::api::ApiResource::erase::<Deployment>(&());
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(member.clone(), NS, &dynamic);
    let obj = plan::ObjRef::of(&manifest);
    let write = |body: Value, exists: bool, retained: Option<&'static str>| {
        let (api, obj) = (api.clone(), obj.clone());
        async move {
            write::apply(write::Apply {
                api: &api,
                obj: &obj,
                body: &body,
                exists,
                dry_run_first: true,
                recreate: false,
                retained,
                adopt: false,
                cluster: "east",
                limit: Duration::from_secs(10),
            })
            .await
        }
    };
    // created with the template's count
    write(
        plan::body(&manifest, "w", None, "/spec/replicas"),
        false,
        None,
    )
    .await
    .unwrap();
    let deploys: Api<Deployment> = Api::namespaced(member.clone(), NS);
    let read = serde_json::to_value(deploys.get("web").await.unwrap()).unwrap();
    // an autoscaler scales it after that read, and the member's controllers settle
    // (their status writes change the resourceVersion too)
    edit(&deploys, "web", json!({"spec": {"replicas": 6}})).await;
    eventually("the scaled Deployment settled", WAIT, || {
        let deploys = deploys.clone();
        async move {
            let d = deploys.get("web").await.ok()?;
            let st = d.status.as_ref()?;
            (st.observed_generation == d.metadata.generation && st.ready_replicas == Some(6))
                .then_some(())
        }
    })
    .await;
    // the template changes; the body is built from the stale read (2 replicas)
    let changed = deployment("nginx:2", None);
    let stale = plan::body(&changed, "w", Some(&read), "/spec/replicas");
    assert_eq!(stale["spec"]["replicas"], 2);
    // the precondition: as such, it is refused
    let refused = write(stale.clone(), true, None).await.unwrap_err();
    assert!(
        refused.message.contains("the object has been modified"),
        "{refused:?}"
    );
    let applied = write(stale, true, Some("/spec/replicas")).await.unwrap();
    assert_eq!(
        applied["spec"]["replicas"], 6,
        "the autoscaler's count stays"
    );
    let d = deploys.get("web").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(6));
    let image = d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("nginx:2"), "the change is applied");
    cs.shutdown();
}

/// G: an object of a Work that no manifest names any more, whose removal the member
/// refuses (here a deletion-protection webhook), stays in the Work's status (ordinal
/// -1, Applied=False saying why), so that its kind stays watched: once the member
/// allows it, it is removed, after a restart of the controller too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_the_member_refused_is_remembered_and_done_once_allowed() {
    use causeway_e2e::webhook::{DELETION_PROTECTION, Webhook};
    use k8s_openapi::api::core::v1::Secret;
    let mut env = Env::start(&["east"]).await;
    let hook = Webhook::start().await.unwrap();
    hook.install(
        &env.member,
        DELETION_PROTECTION,
        causeway_controllers::webhook::PATH,
    )
    .await
    .unwrap();
    let cm = config_map("kept", json!({"a": "1"}));
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "dropped", "namespace": NS,
                     "labels": {"causeway.io/deletion-protected": "Always"}},
        "stringData": {"k": "v"}});
    put_work(&env.hub, "east", "web", &[cm.clone(), secret], json!({})).await;
    work_where(&env.hub, "east", "web", "both applied", |_, s| {
        condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
    })
    .await;
    // the Secret leaves the Work; the member refuses its deletion
    put_work(&env.hub, "east", "web", &[cm], json!({})).await;
    let w = work_where(
        &env.hub,
        "east",
        "web",
        "the refused removal said",
        |_, s| {
            condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "False")
                && s.manifest_statuses
                    .iter()
                    .any(|m| m.identifier.ordinal == -1 && m.identifier.name == "dropped")
        },
    )
    .await;
    let st = w.status.unwrap();
    let removal = st
        .manifest_statuses
        .iter()
        .find(|m| m.identifier.ordinal == -1)
        .unwrap();
    assert_eq!(
        (removal.identifier.kind.as_str(), removal.applied),
        ("Secret", Some(false))
    );
    let message = removal.message.clone().unwrap_or_default();
    assert!(
        message.contains("no manifest names it any more") && message.contains("deletion-protected"),
        "{message}"
    );
    // a restart, then the member allows it: removed, and the status forgets it
    env.ctl.take().unwrap().stop().await;
    let secrets: Api<Secret> = Api::namespaced(env.member.clone(), NS);
    edit(
        &secrets,
        "dropped",
        json!({"metadata": {"labels": {"causeway.io/deletion-protected": null}}}),
    )
    .await;
    env.ctl = Some(env.cs.start_controller().await.unwrap());
    eventually("the Secret removed after the restart", WAIT, || {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt("dropped")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    work_where(
        &env.hub,
        "east",
        "web",
        "applied, the removal forgotten",
        |_, s| {
            condition(s, conditions::APPLIED).is_some_and(|c| c.0 == "True")
                && s.manifest_statuses
                    .iter()
                    .all(|m| m.identifier.ordinal >= 0)
        },
    )
    .await;
    hook.stop().await;
}
