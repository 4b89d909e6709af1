//! Cluster failover (federation.md §8 J.59–J.62) with real kubectl: a Deployment
//! divided over east, west and north, with `failover.cluster` and a 2 s NoExecute
//! toleration of `cluster.causeway.io/not-ready`. East goes NotReady: two seconds
//! later its replicas move to west and north, the binding says why east is left out,
//! and east's Work goes once west and north run the template healthy (purgeMode
//! Gracefully). East Ready again takes its share back.

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get, has_work, replicas};

const APP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: demo}
spec:
  replicas: 6
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: nginx:1.27
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: api}]
  placement:
    clusterTolerations:
    - {key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
    replicaScheduling: {replicaSchedulingType: Divided}
  failover:
    cluster: {purgeMode: Gracefully}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cluster_hands_its_replicas_over_and_takes_them_back() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    let f = env.file("api.yaml", APP);
    env.ok(&["apply", "-f", &f]).await;
    eventually("2 replicas in each member", WAIT, || async {
        (replicas(&env, "api").await == vec![Some(2), Some(2), Some(2)]).then_some(())
    })
    .await;

    // the dry run says what failing east would do, and changes nothing
    let plan = crate::propagation_cli::ok(&env, &["failover", "plan", "--cluster", "east"]).await;
    assert!(
        plan.contains("demo/api-deployment")
            && plan.contains("east:2 north:2 west:2   north:3 west:3")
            && plan.contains("moves away from east (east after 2s), its copy purged once the others run it healthy"),
        "{plan}"
    );
    let json = crate::propagation_cli::ok(
        &env,
        &["failover", "plan", "--cluster", "east", "-o", "json"],
    )
    .await;
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(rows[0]["after"], serde_json::json!({"north": 3, "west": 3}));
    let bad =
        crate::propagation_cli::fails(&env, &["failover", "plan", "--cluster", "south"]).await;
    assert!(bad.contains("no Cluster \"south\" on the hub"), "{bad}");
    assert_eq!(replicas(&env, "api").await, vec![Some(2), Some(2), Some(2)]);

    // east NotReady: after the 2 s tolerated, west and north run all 6
    env.cs.member("east").unwrap().faults().set_not_ready(true);
    eventually("west and north run 3 each", WAIT, || async {
        let r = replicas(&env, "api").await;
        (r[1] == Some(3) && r[2] == Some(3)).then_some(())
    })
    .await;
    let rb = get(&env, "hub", &["rb", "api-deployment", "-n", "demo"])
        .await
        .unwrap();
    let reasons = rb.pointer("/status/schedulingReasons").unwrap().to_string();
    assert!(
        reasons.contains("east")
            && reasons.contains("Ready has been False since")
            && reasons
                .contains("longer than the 2s tolerated: failover.cluster moved the workload away"),
        "{reasons}"
    );
    // purged gracefully: once west and north run it healthy, east's Work goes
    eventually("east's Work purged", WAIT, || async {
        (!has_work(&env, "east", "api").await).then_some(())
    })
    .await;

    // J.62: east Ready again takes its share back
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    eventually("2 replicas in each member again", WAIT, || async {
        let r = replicas(&env, "api").await;
        (r[1] == Some(2) && r[2] == Some(2) && has_work(&env, "east", "api").await).then_some(())
    })
    .await;
}

const PRIMARY_BACKUP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: job, namespace: demo}
spec:
  replicas: 2
  selector: {matchLabels: {app: job}}
  template:
    metadata: {labels: {app: job}}
    spec:
      containers:
      - name: job
        image: flink:1.20
        resources: {requests: {cpu: 50m, memory: 32Mi}}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: job, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: job}]
  placement:
    clusterAffinities:
    - {affinityName: primary, clusterNames: [east]}
    - {affinityName: backup, clusterNames: [west]}
    clusterTolerations:
    - {key: cluster.causeway.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
  failover:
    cluster:
      purgeMode: Directly
      statePreservation:
        rules:
        - {aliasLabelName: example.com/ready-before, jsonPath: "{.readyReplicas}"}
"#;

/// `failover.cluster.statePreservation`: east (the primary) fails, the job moves to
/// west (the backup, which never ran it), and west's copy is labelled with what east's
/// copy reported last; the binding records it while east stays failed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clusters_state_labels_the_copy_that_takes_over() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&["apply", "-f", &env.file("job.yaml", PRIMARY_BACKUP)])
        .await;
    let ready_in = |c: &'static str| {
        let env = &env;
        async move {
            let d = get(env, c, &["deployment", "job", "-n", "demo"]).await?;
            d.pointer("/status/readyReplicas")?.as_i64()
        }
    };
    eventually("east runs the job, ready", WAIT, || async {
        (ready_in("east").await == Some(2)).then_some(())
    })
    .await;

    // the dry run says what west's copy would carry
    let plan = eventually("the dry run says what state moves", WAIT, || async {
        let plan =
            crate::propagation_cli::ok(&env, &["failover", "plan", "--cluster", "east"]).await;
        plan.contains("west's copy labelled by statePreservation (from east: kept example.com/ready-before=2)")
            .then_some(plan)
    })
    .await;
    assert!(plan.contains("east:2   west:2"), "{plan}");

    env.cs.member("east").unwrap().faults().set_not_ready(true);
    let label = eventually("west's copy carries east's state", WAIT, || async {
        let d = get(&env, "west", &["deployment", "job", "-n", "demo"]).await?;
        d.pointer("/metadata/labels/example.com~1ready-before")
            .and_then(|v| v.as_str())
            .map(String::from)
    })
    .await;
    assert_eq!(label, "2");
    let rb = get(&env, "hub", &["rb", "job-deployment", "-n", "demo"])
        .await
        .unwrap();
    let record = rb.pointer("/spec/clusterFailovers/0").unwrap();
    assert_eq!(record["cluster"], "east");
    assert_eq!(
        record["reason"],
        "failed over: statePreservation kept example.com/ready-before=2"
    );
    assert_eq!(
        record["clustersBeforeFailover"],
        serde_json::json!(["east"])
    );

    // east Ready again: the job goes back to the primary, and the record goes
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    eventually("the record goes once east is Ready", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "job-deployment", "-n", "demo"]).await?;
        // the field goes (server-side apply leaves no empty list behind)
        rb.pointer("/spec/clusterFailovers").is_none().then_some(())
    })
    .await;
}

/// Deployment `name` with `replicas`, placed by its own policy with `placement`.
fn app(name: &str, replicas: i64, placement: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: demo}}\n\
         spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    \
         metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - name: {name}\n        \
         image: nginx:1.27\n        resources: {{requests: {{cpu: 50m, memory: 32Mi}}}}\n---\n\
         apiVersion: causeway.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: {name}, namespace: demo}}\n\
         spec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: {name}}}]\n  \
         placement: {placement}\n"
    )
}

/// The taints of Cluster `name` on the hub, as `key:Effect`.
async fn taints(env: &crate::support::Env, name: &str) -> Vec<String> {
    let c = get(env, "hub", &["cluster", name]).await.unwrap();
    c.pointer("/spec/taints")
        .and_then(|t| t.as_array())
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    format!(
                        "{}:{}",
                        t["key"].as_str().unwrap_or_default(),
                        t["effect"].as_str().unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_cordoned_drained_and_uncordoned() {
    use crate::propagation_cli::{fails, ok};
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let divided = "{replicaScheduling: {replicaSchedulingType: Divided}}";
    let web = env.file("web.yaml", &app("web", 4, divided));
    let solo = env.file(
        "solo.yaml",
        &app("solo", 1, "{clusterAffinity: {clusterNames: [east]}}"),
    );
    env.ok(&["apply", "-f", &web, "-f", &solo]).await;
    eventually("web 2 and 2, solo in east", WAIT, || async {
        (replicas(&env, "web").await[..2] == [Some(2), Some(2)]
            && replicas(&env, "solo").await[..2] == [Some(1), None])
        .then_some(())
    })
    .await;

    // the dry run: where each would go, nothing written
    let plan = ok(&env, &["drain", "east", "--dry-run"]).await;
    assert!(
        plan.contains("ONCE east IS DRAINED")
            && plan.contains("demo/web-deployment")
            && plan.contains("west:4")
            && plan.contains("moves away from east")
            && plan.contains("NO CLUSTER LEFT")
            && plan.contains("(dry run: nothing changed)"),
        "{plan}"
    );
    assert!(
        taints(&env, "east")
            .await
            .iter()
            .all(|t| !t.contains("unschedulable"))
    );
    // solo could go nowhere else: refused
    let refused = fails(&env, &["drain", "east"]).await;
    assert!(
        refused.contains("not drained: 1 would have no Ready cluster left (demo/solo-deployment)")
            && refused.contains("--force"),
        "{refused}"
    );

    // cordoned: new workloads go elsewhere, what runs there stays
    let said = ok(&env, &["cordon", "east"]).await;
    assert!(said.contains("cluster east cordoned"), "{said}");
    assert_eq!(
        taints(&env, "east").await,
        ["cluster.causeway.io/unschedulable:NoSchedule"]
    );
    assert!(
        ok(&env, &["cordon", "east"])
            .await
            .contains("already cordoned")
    );
    // the hub's refusal (a user RBAC lets read nothing), as its message says it, not
    // kube-rs's debug form of a Status
    env.cs.hub.add_token(
        "nobody-token",
        kubesim::User {
            name: "nobody".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        },
    );
    let nobody = env.file(
        "nobody.kubeconfig",
        &kubesim::kubeconfig::single(
            "hub",
            &env.cs.hub.url(),
            env.cs.hub.ca_pem(),
            "nobody-token",
        ),
    );
    let out = std::process::Command::new(crate::propagation_cli::causeway_bin())
        .args(["cordon", "east", "--hub-kubeconfig", &nobody])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let refused = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && refused.starts_with("causeway: listing the Clusters on the hub: ")
            && refused.contains("is forbidden")
            && refused.contains("(HTTP 403, Forbidden)")
            && !refused.contains("Status {"),
        "{refused}"
    );
    let fresh = env.file("fresh.yaml", &app("fresh", 2, divided));
    env.ok(&["apply", "-f", &fresh]).await;
    eventually("fresh only in west", WAIT, || async {
        (replicas(&env, "fresh").await[..2] == [None, Some(2)]).then_some(())
    })
    .await;
    assert_eq!(replicas(&env, "web").await[..2], [Some(2), Some(2)]);

    // forced: web moves to west, solo (east alone may run it) is removed until east is
    // uncordoned
    let said = ok(&env, &["drain", "east", "--force"]).await;
    assert!(said.contains("cluster east drained"), "{said}");
    eventually("web all in west, solo nowhere", WAIT, || async {
        (replicas(&env, "web").await[..2] == [None, Some(4)]
            && replicas(&env, "solo").await[..2] == [None, None])
        .then_some(())
    })
    .await;

    // uncordoned: the division comes back
    let said = ok(&env, &["uncordon", "east"]).await;
    assert!(said.contains("cluster east uncordoned"), "{said}");
    assert!(taints(&env, "east").await.is_empty());
    eventually("web 2 and 2 again, solo back in east", WAIT, || async {
        (replicas(&env, "web").await[..2] == [Some(2), Some(2)]
            && replicas(&env, "solo").await[..2] == [Some(1), None])
        .then_some(())
    })
    .await;
    assert!(
        fails(&env, &["drain", "south"])
            .await
            .contains("no Cluster \"south\" on the hub")
    );
}

/// `cordon` writes the taints with the Cluster's resourceVersion and reads it again on
/// a conflict: a taint another writer (an admin, the registry's monitor) adds while
/// cordon's write is being admitted is kept, not replaced by cordon's list. The hub's
/// webhook holds cordon's write for 600 ms; the other write, started when the webhook
/// is asked, lands meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_written_while_a_cordon_is_admitted_is_kept() {
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    use serde_json::{Value, json};
    use std::time::Duration;
    let env = crate::support::Env::start().await;
    env.cs.join_all().await.unwrap();
    let hub = env.hub_client().await;
    let cordons = |req: &Value| {
        req["object"]["spec"]["taints"]
            .as_array()
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["key"] == "cluster.causeway.io/unschedulable")
            })
    };
    // told when cordon's write reaches the webhook: the other write lands while it waits
    let asked = std::sync::Arc::new(tokio::sync::Notify::new());
    let tell = asked.clone();
    let hook = kubesim::testing::Webhook::start(std::sync::Arc::new(move |req: &Value| {
        let delay = if cordons(req) {
            tell.notify_one();
            600
        } else {
            0
        };
        (Duration::from_millis(delay), json!({"allowed": true}))
    }))
    .await
    .unwrap();
    let cfg = hook.configuration(json!({
        "rules": [{"apiGroups": ["causeway.io"], "apiVersions": ["*"], "resources": ["clusters"], "operations": ["UPDATE"]}],
    }));
    let configs: Api<DynamicObject> = Api::all_with(
        hub.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    configs
        .create(
            &PostParams::default(),
            &serde_json::from_value(cfg).unwrap(),
        )
        .await
        .unwrap();

    let cordon = {
        let env = &env;
        async move { crate::propagation_cli::ok(env, &["cordon", "east"]).await }
    };
    let other = async {
        asked.notified().await;
        let clusters: Api<DynamicObject> = Api::all_with(
            hub.clone(),
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("causeway.io", "v1alpha1", "Cluster"),
                "clusters",
            ),
        );
        clusters
            .patch(
                "east",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [
                    {"key": "example.com/maintenance", "value": "tonight", "effect": "NoSchedule"}
                ]}})),
            )
            .await
            .unwrap();
    };
    let (said, ()) = tokio::join!(cordon, other);
    assert!(said.contains("cluster east cordoned"), "{said}");
    assert_eq!(
        taints(&env, "east").await,
        [
            "example.com/maintenance:NoSchedule",
            "cluster.causeway.io/unschedulable:NoSchedule"
        ],
        "the other writer's taint is kept"
    );
    let asked = hook
        .seen
        .lock()
        .iter()
        .filter(|r| cordons(&r["request"]))
        .count();
    assert!(
        asked >= 2,
        "cordon's write met the other one and was written again ({asked} reviews)"
    );
}
