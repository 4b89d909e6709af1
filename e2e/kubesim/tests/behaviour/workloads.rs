//! Workload simulation (`simulate_workloads`): Deployments make ReplicaSets make Pods,
//! Pods are placed on nodes with room for their requests or stay Pending as
//! Unschedulable, and workload status counts only placed, ready Pods.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::helpers::*;

/// A simulating server with `nodes` nodes of `cpu` cpus each, zones z1, z2 round-robin.
pub async fn sim(nodes: usize, cpu: &str) -> Env {
    let mut cfg = kubesim::Config::new("sim");
    cfg.simulate_workloads = true;
    cfg.nodes = nodes;
    cfg.node_capacity.cpu = cpu.into();
    cfg.region = "eu".into();
    cfg.zones = vec!["z1".into(), "z2".into()];
    start_with(cfg).await
}

/// A pod template asking for `cpu` (no resources when empty), with extra pod spec.
pub fn template(app: &str, cpu: &str, extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "app:1"});
    if !cpu.is_empty() {
        c["resources"] = json!({"requests": {"cpu": cpu}});
    }
    let mut spec = json!({"containers": [c]});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({"metadata": {"labels": {"app": app}}, "spec": spec})
}

pub fn deployment(name: &str, replicas: i32, template: Value) -> Deployment {
    serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": template["metadata"]["labels"]}, "template": template}}),
    )
    .unwrap()
}

/// Creates a Deployment.
pub async fn create(api: &Api<Deployment>, name: &str, replicas: i32, template: Value) {
    api.create(
        &PostParams::default(),
        &deployment(name, replicas, template),
    )
    .await
    .unwrap();
}

/// Sets `spec.replicas` of a Deployment or StatefulSet.
pub async fn scale<K>(api: &Api<K>, name: &str, replicas: i32)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap();
}

/// The pods whose names start with `prefix`.
pub async fn pods_of(api: &Api<Pod>, prefix: &str) -> Vec<Pod> {
    let mut v: Vec<Pod> = api.list(&ListParams::default()).await.unwrap().items;
    v.retain(|p| p.metadata.name.as_deref().unwrap_or("").starts_with(prefix));
    v
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn condition<'a>(p: &'a Pod, t: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

/// Waits until the Deployment's status reports `ready` ready replicas for its generation.
pub async fn ready_replicas(api: &Api<Deployment>, name: &str, ready: i32) -> Deployment {
    eventually(&format!("{name} readyReplicas {ready}"), || async {
        let d = api.get(name).await.ok()?;
        let s = d.status.as_ref()?;
        (s.observed_generation == d.metadata.generation
            && s.ready_replicas.unwrap_or(0) == ready
            && s.replicas.unwrap_or(0) >= ready)
            .then_some(d)
    })
    .await
}

pub fn available(d: &Deployment) -> (String, String) {
    let c = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"))
        .expect("an Available condition");
    (c.status.clone(), c.reason.clone().unwrap_or_default())
}

#[tokio::test]
async fn capacity_fills_then_pending_is_unschedulable_and_scale_down_removes_it_first() {
    let env = sim(2, "2").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    create(&deps, "web", 5, template("web", "1", json!({}))).await;
    let d = ready_replicas(&deps, "web", 4).await;
    assert_eq!(
        available(&d),
        ("False".into(), "MinimumReplicasUnavailable".into())
    );
    let s = d.status.unwrap();
    assert_eq!(
        (s.replicas, s.available_replicas, s.unavailable_replicas),
        (Some(5), Some(4), Some(1))
    );
    let all = eventually("5 pods, 4 running", || async {
        let v = pods_of(&pods, "web-").await;
        (v.len() == 5 && v.iter().filter(|p| phase(p) == "Running").count() == 4).then_some(v)
    })
    .await;
    let mut per_node = std::collections::BTreeMap::new();
    for p in all.iter().filter(|p| phase(p) == "Running") {
        *per_node.entry(node_of(p).unwrap().to_string()).or_insert(0) += 1;
        assert_eq!(condition(p, "Ready").unwrap().status, "True");
        let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
        assert!(
            ip.starts_with("10.244."),
            "pod IP from the node's range: {ip}"
        );
    }
    assert_eq!(
        per_node,
        [("sim-node-0".to_string(), 2), ("sim-node-1".to_string(), 2)].into()
    );
    let pending = all.iter().find(|p| phase(p) == "Pending").unwrap();
    assert_eq!(node_of(pending), None);
    let c = condition(pending, "PodScheduled").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        (
            "False",
            Some("Unschedulable"),
            Some("0/2 nodes are available: 2 Insufficient cpu.")
        )
    );
    let pending_name = pending.metadata.name.clone().unwrap();

    // scale down by one: the Pending pod goes, not a running one
    scale(&deps, "web", 4).await;
    let d = eventually("web Available with 4", || async {
        let d = ready_replicas(&deps, "web", 4).await;
        (d.status.as_ref()?.replicas == Some(4) && available(&d).0 == "True").then_some(d)
    })
    .await;
    assert_eq!(available(&d).1, "MinimumReplicasAvailable");
    eventually("the pending pod deleted", || async {
        let v = pods_of(&pods, "web-").await;
        (v.len() == 4
            && v.iter().all(|p| {
                phase(p) == "Running" && p.metadata.name.as_deref() != Some(pending_name.as_str())
            }))
        .then_some(())
    })
    .await;

    // scale down to 1: three running pods go, and their cpu is free again
    scale(&deps, "web", 1).await;
    eventually("1 pod left", || async {
        (pods_of(&pods, "web-").await.len() == 1).then_some(())
    })
    .await;
    create(&deps, "more", 3, template("more", "1", json!({}))).await;
    ready_replicas(&deps, "more", 3).await;
}

#[tokio::test]
async fn owner_references_chain_and_cascade_delete_and_a_new_template_makes_a_new_replicaset() {
    let env = sim(1, "8").await;
    let deps: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let d = deps
        .create(
            &PostParams::default(),
            &deployment("web", 2, template("web", "", json!({}))),
        )
        .await
        .unwrap();
    ready_replicas(&deps, "web", 2).await;
    let rs_list = rss.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(rs_list.len(), 1);
    let rs = &rs_list[0];
    let rs_name = rs.metadata.name.clone().unwrap();
    let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(rs_name, format!("web-{hash}"));
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            &owner.uid,
            owner.controller,
            owner.block_owner_deletion
        ),
        (
            "Deployment",
            "web",
            d.metadata.uid.as_ref().unwrap(),
            Some(true),
            Some(true)
        )
    );
    for p in pods_of(&pods, "web-").await {
        let name = p.metadata.name.clone().unwrap();
        let suffix = name
            .strip_prefix(&format!("{rs_name}-"))
            .expect("pod named <rs>-<suffix>");
        assert_eq!(suffix.len(), 5, "{name}");
        let o = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.controller),
            ("ReplicaSet", rs_name.as_str(), Some(true))
        );
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["pod-template-hash"],
            hash
        );
    }

    // a new template: a new ReplicaSet at 2, the old one at 0
    deps.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}})))
        .await
        .unwrap();
    let (new_rs, pods_now) = eventually("rolled to the new ReplicaSet", || async {
        let list = rss.list(&ListParams::default()).await.ok()?.items;
        let new = list
            .iter()
            .find(|r| r.metadata.name.as_deref() != Some(rs_name.as_str()))?
            .clone();
        let old = list
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(rs_name.as_str()))?;
        let p = pods_of(&pods, "web-").await;
        (old.spec.as_ref()?.replicas == Some(0)
            && p.len() == 2
            && p.iter().all(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .unwrap()
                    .starts_with(new.metadata.name.as_deref().unwrap())
            }))
        .then_some((new, p))
    })
    .await;
    assert_eq!(new_rs.spec.as_ref().unwrap().replicas, Some(2));
    assert!(
        pods_now
            .iter()
            .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("app:2"))
    );
    let d = ready_replicas(&deps, "web", 2).await;
    assert_eq!(d.status.unwrap().updated_replicas, Some(2));

    // deleting the Deployment removes its ReplicaSets and Pods
    deps.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("ReplicaSets and Pods collected", || async {
        (rss.list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            && pods_of(&pods, "web-").await.is_empty())
        .then_some(())
    })
    .await;
}

#[tokio::test]
async fn statefulset_pods_are_ordinals_and_scale_down_from_the_top() {
    let env = sim(2, "8").await;
    let sts: Api<StatefulSet> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let s: StatefulSet = serde_json::from_value(
        json!({"metadata": {"name": "db"}, "spec": {"replicas": 3, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}}, "template": template("db", "", json!({}))}}),
    )
    .unwrap();
    sts.create(&PostParams::default(), &s).await.unwrap();
    let ready = |n: i32| {
        let sts = sts.clone();
        async move {
            eventually(&format!("db ready {n}"), || async {
                let s = sts.get("db").await.ok()?.status?;
                (s.ready_replicas == Some(n) && s.replicas == n).then_some(())
            })
            .await
        }
    };
    ready(3).await;
    let mut names: Vec<String> = pods_of(&pods, "db-")
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["db-0", "db-1", "db-2"]);
    let p = pods.get("db-1").await.unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.hostname.as_deref(), spec.subdomain.as_deref()),
        (Some("db-1"), Some("db"))
    );
    scale(&sts, "db", 1).await;
    ready(1).await;
    let names: Vec<String> = pods_of(&pods, "db-")
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["db-0"]);
}

#[tokio::test]
async fn daemonset_runs_one_pod_per_ready_matching_node() {
    let env = sim(3, "8").await;
    let dss: Api<DaemonSet> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let ds: DaemonSet = serde_json::from_value(json!({"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}}, "template": template("agent", "", json!({"nodeSelector": {"topology.kubernetes.io/zone": "z1"}}))}}))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let status = |want: i32| {
        let dss = dss.clone();
        async move {
            eventually(&format!("agent ready on {want}"), || async {
                let s = dss.get("agent").await.ok()?.status?;
                (s.desired_number_scheduled == want
                    && s.number_ready == want
                    && s.current_number_scheduled == want)
                    .then_some(())
            })
            .await
        }
    };
    // z1 is nodes 0 and 2
    status(2).await;
    let mut on: Vec<String> = pods_of(&pods, "agent-")
        .await
        .iter()
        .map(|p| node_of(p).unwrap().to_string())
        .collect();
    on.sort();
    assert_eq!(on, ["sim-node-0", "sim-node-2"]);
    env.server.set_node_ready("sim-node-2", false).unwrap();
    status(1).await;
    env.server.set_node_ready("sim-node-2", true).unwrap();
    status(2).await;
    assert_eq!(
        pods_of(&pods, "agent-").await.len(),
        2,
        "one pod per node, no duplicate"
    );
}

#[tokio::test]
async fn job_runs_parallelism_pods_until_completions_succeed() {
    let env = sim(1, "8").await;
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let j: Job = serde_json::from_value(
        json!({"metadata": {"name": "batch"}, "spec": {"parallelism": 2, "completions": 5,
        "template": template("batch", "", json!({"restartPolicy": "Never"}))}}),
    )
    .unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    let s = eventually("batch Complete", || async {
        let s = jobs.get("batch").await.ok()?.status?;
        s.conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True")
            .then_some(s)
    })
    .await;
    assert_eq!((s.succeeded, s.active), (Some(5), Some(0)));
    assert!(s.completion_time.is_some() && s.start_time.is_some());
    // the field label `status.successful` reads status.succeeded (kube-apiserver's Job)
    let by = |sel: &'static str| {
        let jobs = jobs.clone();
        async move {
            jobs.list(&ListParams::default().fields(sel))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(
        (
            by("status.successful=5").await,
            by("status.successful=0").await
        ),
        (1, 0)
    );
    let ps = pods_of(&pods, "batch-").await;
    assert_eq!(ps.len(), 5);
    assert!(
        ps.iter()
            .all(|p| phase(p) == "Succeeded" && node_of(p) == Some("sim-node-0"))
    );
    assert_eq!(ps[0].metadata.labels.as_ref().unwrap()["job-name"], "batch");
}

/// kube-apiserver's defaults are applied on create and on every update: a field a
/// client leaves out (or takes away) reads back at its default.
#[tokio::test]
async fn defaults_are_applied_on_create_and_on_every_update() {
    let env = start().await;
    let deploys: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "bare"},
        "spec": {"selector": {"matchLabels": {"app": "bare"}},
            "template": {"metadata": {"labels": {"app": "bare"}},
                "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}]}}}}))
    .unwrap();
    let created = deploys.create(&PostParams::default(), &d).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(
        (
            spec.replicas,
            spec.revision_history_limit,
            spec.progress_deadline_seconds
        ),
        (Some(1), Some(10), Some(600))
    );
    let c = &spec.template.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        c.ports.as_ref().unwrap()[0].protocol.as_deref(),
        Some("TCP")
    );
    // an update that takes the strategy away gets it back
    let mut v = serde_json::to_value(deploys.get("bare").await.unwrap()).unwrap();
    v["spec"].as_object_mut().unwrap().remove("strategy");
    v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    v["spec"]["template"]["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("imagePullPolicy");
    let updated = deploys
        .replace(
            "bare",
            &PostParams::default(),
            &serde_json::from_value(v).unwrap(),
        )
        .await
        .unwrap();
    let spec = updated.spec.unwrap();
    let strategy = spec.strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert!(strategy.rolling_update.is_some());
    assert_eq!(
        spec.template.spec.unwrap().containers[0]
            .image_pull_policy
            .as_deref(),
        Some("IfNotPresent"),
        "a tagged image, defaulted again"
    );
    // a Job whose Pods would restart Always is refused
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let j: Job = serde_json::from_value(json!({"metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}))
    .unwrap();
    let e = jobs.create(&PostParams::default(), &j).await.unwrap_err();
    assert_eq!(code(&e), 422);
    assert!(
        message(&e).ends_with(r#"spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never""#),
        "{}",
        message(&e)
    );
}
