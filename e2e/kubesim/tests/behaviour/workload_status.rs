//! Workload status as kube-controller-manager reports it, through a spec change: the
//! counts, observedGeneration and conditions health checks (and Causeway's status
//! aggregation) read.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::helpers::*;
use crate::workloads::{deployment, sim, template};

/// `(type, status, reason)` of each condition.
fn conditions(d: &Deployment) -> Vec<(String, String, String)> {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.status, c.reason.unwrap_or_default()))
        .collect()
}

fn cond(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.into(), s.into(), r.into())
}

/// A new pod template (a new image, the rest kept) as a strategic merge patch.
fn new_image(image: &str) -> Patch<serde_json::Value> {
    Patch::Strategic(
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}),
    )
}

#[tokio::test]
async fn deployment_status_follows_spec_changes_and_capacity() {
    // one node with 1 cpu: two 400m replicas fit, a third does not
    let env = sim(1, "1").await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &deployment("web", 2, template("web", "400m", json!({}))),
    )
    .await
    .unwrap();
    let d = eventually("web available", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status.clone()?;
        (s.observed_generation == Some(1) && s.available_replicas == Some(2)).then_some(d)
    })
    .await;
    let s = d.status.clone().unwrap();
    assert_eq!(
        (
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.unavailable_replicas
        ),
        (Some(2), Some(2), Some(2), None)
    );
    assert_eq!(
        conditions(&d),
        [
            cond("Available", "True", "MinimumReplicasAvailable"),
            cond("Progressing", "True", "NewReplicaSetAvailable")
        ]
    );

    // a new template: generation 2, a new ReplicaSet takes the updated replicas
    api.patch("web", &PatchParams::default(), &new_image("app:2"))
        .await
        .unwrap();
    let d = eventually("web rolled to generation 2", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status.clone()?;
        (s.observed_generation == Some(2)
            && s.updated_replicas == Some(2)
            && s.replicas == Some(2)
            && s.available_replicas == Some(2))
        .then_some(d)
    })
    .await;
    assert_eq!(d.metadata.generation, Some(2));
    let progressing = d.status.unwrap().conditions.unwrap()[1].clone();
    let rs_name = progressing
        .message
        .unwrap()
        .split('"')
        .nth(1)
        .unwrap()
        .to_string();
    let rss: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(env.client.clone(), "default");
    let rs = rss.get(&rs_name).await.unwrap();
    assert_eq!(
        rs.spec.unwrap().template.unwrap().spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("app:2"),
        "Progressing names the new ReplicaSet"
    );

    // more replicas than fit: unavailable counted, Available False
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    let d = eventually("web short of one replica", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status.clone()?;
        (s.observed_generation == Some(3) && s.unavailable_replicas == Some(1)).then_some(d)
    })
    .await;
    let s = d.status.clone().unwrap();
    assert_eq!(
        (s.replicas, s.ready_replicas, s.available_replicas),
        (Some(3), Some(2), Some(2))
    );
    assert_eq!(
        conditions(&d)[0],
        cond("Available", "False", "MinimumReplicasUnavailable")
    );
}

#[tokio::test]
async fn statefulset_and_daemonset_status_follow_a_new_template() {
    let env = sim(2, "8").await;
    let sts: Api<StatefulSet> = Api::namespaced(env.client.clone(), "default");
    let dss: Api<DaemonSet> = Api::namespaced(env.client.clone(), "default");
    let s: StatefulSet = serde_json::from_value(
        json!({"metadata": {"name": "db"}, "spec": {"replicas": 2, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}}, "template": template("db", "", json!({}))}}),
    )
    .unwrap();
    sts.create(&PostParams::default(), &s).await.unwrap();
    let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}}, "template": template("agent", "", json!({}))}}))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();

    for generation in [1, 2] {
        if generation == 2 {
            sts.patch("db", &PatchParams::default(), &new_image("app:2"))
                .await
                .unwrap();
            dss.patch("agent", &PatchParams::default(), &new_image("app:2"))
                .await
                .unwrap();
        }
        let s = eventually(&format!("db at generation {generation}"), || async {
            let s = sts.get("db").await.ok()?.status?;
            (s.observed_generation == Some(generation)
                && s.updated_replicas == Some(2)
                && s.available_replicas == Some(2))
            .then_some(s)
        })
        .await;
        assert_eq!(
            (s.replicas, s.ready_replicas, s.current_replicas),
            (2, Some(2), Some(2))
        );
        let d = eventually(&format!("agent at generation {generation}"), || async {
            let s = dss.get("agent").await.ok()?.status?;
            (s.observed_generation == Some(generation)
                && s.updated_number_scheduled == Some(2)
                && s.number_available == Some(2))
            .then_some(s)
        })
        .await;
        assert_eq!(
            (
                d.desired_number_scheduled,
                d.current_number_scheduled,
                d.number_ready,
                d.number_unavailable.unwrap_or(0)
            ),
            (2, 2, 2, 0)
        );
    }
}
