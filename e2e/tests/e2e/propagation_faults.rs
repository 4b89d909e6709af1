//! Propagation when members refuse or cannot take part (federation.md §8 F.40, G.48):
//! the user sees why on the hub, with real kubectl.

use std::time::Duration;

use crate::mcs_support::eventually;
use crate::propagation::{
    WAIT, configmap, demo_events, fleet_of, get, member_has, member_value, policy,
};

/// F.40 through the whole pipeline: a ConfigMap that already exists in east and is not
/// Causeway's is left as it is (Abort, the default), the other clusters get the
/// template, and a Warning Event on the template says which cluster refused and what to
/// do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_in_one_member_is_reported_on_the_template() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok_in(
        "east",
        &[
            "apply",
            "-f",
            &env.file("theirs.yaml", &configmap("owned", "theirs")),
        ],
    )
    .await;
    let cm = env.file("cm.yaml", &configmap("owned", "ours"));
    let pp = env.file("pp.yaml", &policy("owned", ""));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    member_has(&env, "west", "owned", Some("ours")).await;
    let events = eventually("an ApplyFailed Event naming east", WAIT, || async {
        let out = demo_events(&env, "involvedObject.name=owned").await;
        (out.contains("ApplyFailed") && out.contains("east")).then_some(out)
    })
    .await;
    assert!(
        events.contains("Overwrite"),
        "says how to adopt it: {events}"
    );
    assert_eq!(
        member_value(&env, "east", "owned").await.as_deref(),
        Some("theirs")
    );
    let rb = get(&env, "hub", &["rb", "owned-configmap", "-n", "demo"])
        .await
        .unwrap();
    let fully = rb.pointer("/status/conditions").unwrap().to_string();
    assert!(fully.contains("FullyAppliedFailed"), "{fully}");
    // the template deleted and made again: the same refusal is told again, on the new
    // template (what was told of the old one is forgotten with it)
    env.ok(&["delete", "-f", &cm]).await;
    eventually("the binding gone", WAIT, || async {
        get(&env, "hub", &["rb", "owned-configmap", "-n", "demo"])
            .await
            .is_none()
            .then_some(())
    })
    .await;
    env.ok(&["apply", "-f", &cm]).await;
    let uid = get(&env, "hub", &["configmap", "owned", "-n", "demo"])
        .await
        .and_then(|o| o.pointer("/metadata/uid")?.as_str().map(str::to_string))
        .unwrap();
    eventually("an ApplyFailed Event on the new template", WAIT, || async {
        let out = demo_events(&env, &format!("involvedObject.uid={uid}")).await;
        (out.contains("ApplyFailed") && out.contains("east")).then_some(())
    })
    .await;
}

/// G.48: while east is not Ready, deleting the template removes the other clusters'
/// copies but keeps the template (its finalizer) and east's copy, and an Event says the
/// deletion waits for east; once east is back, its copy goes and so does the template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_waits_for_a_member_that_is_not_ready() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let cm = env.file("cm.yaml", &configmap("pending", "v1"));
    let pp = env.file("pp.yaml", &policy("pending", ""));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    member_has(&env, "east", "pending", Some("v1")).await;
    member_has(&env, "west", "pending", Some("v1")).await;
    env.cs.member("east").unwrap().faults().set_not_ready(true);
    eventually("east not Ready", WAIT, || async {
        let out = env
            .ok(&[
                "get",
                "cluster",
                "east",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .await;
        (out.trim() == "False").then_some(())
    })
    .await;
    env.ok(&["delete", "-f", &cm, "--wait=false"]).await;
    member_has(&env, "west", "pending", None).await;
    eventually("a WaitingForRemoval Event naming east", WAIT, || async {
        let out = demo_events(&env, "involvedObject.name=pending").await;
        (out.contains("WaitingForRemoval") && out.contains("east")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        get(&env, "hub", &["configmap", "pending", "-n", "demo"])
            .await
            .is_some()
    );
    assert_eq!(
        member_value(&env, "east", "pending").await.as_deref(),
        Some("v1")
    );
    env.cs.member("east").unwrap().faults().set_not_ready(false);
    member_has(&env, "east", "pending", None).await;
    eventually("the template gone", WAIT, || async {
        get(&env, "hub", &["configmap", "pending", "-n", "demo"])
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// B.15 and bad input: a policy says whether it is in force. One that selects a kind
/// the hub does not serve, or a reserved namespace from a ClusterPropagationPolicy, is
/// `Valid=False` with what to fix; a good one is `Valid=True`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_say_whether_they_are_in_force() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    let pps = env.file(
        "pps.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: widgets, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: example.com/v1, kind: Widget}]
---
apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: system}
spec:
  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, namespace: kube-system}]
"#,
    );
    let good = env.file("good.yaml", &policy("fine", ""));
    let failover = env.file(
        "failover.yaml",
        &policy(
            "moving",
            "  failover:\n    application:\n      statePreservation:\n        rules:\n        - aliasLabelName: job\n          jsonPath: \"{.items[*].id}\"\n    cluster:\n      purgeMode: Gracefully\n      statePreservation:\n        rules:\n        - aliasLabelName: replicas\n          jsonPath: \"{ .replicas }\"\n        - aliasLabelName: bad\n          jsonPath: \"replicas\"\n",
        ),
    );
    env.ok(&["apply", "-f", &pps, "-f", &good, "-f", &failover])
        .await;
    let valid = |kind: &'static str, name: &'static str, ns: Option<&'static str>| {
        let env = &env;
        async move {
            let mut args = vec![
                "get",
                kind,
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Valid\")].status} {.status.conditions[?(@.type==\"Valid\")].message}",
            ];
            if let Some(ns) = ns {
                args.extend(["-n", ns]);
            }
            let out = env.ok(&args).await;
            (!out.trim().is_empty()).then_some(out)
        }
    };
    let widgets = eventually("widgets' Valid condition", WAIT, || {
        valid("pp", "widgets", Some("demo"))
    })
    .await;
    assert!(
        widgets.starts_with("False") && widgets.contains("Widget"),
        "{widgets}"
    );
    assert!(widgets.contains("CRD"), "says what to do: {widgets}");
    let system = eventually("system's Valid condition", WAIT, || {
        valid("cpp", "system", None)
    })
    .await;
    assert!(
        system.starts_with("False") && system.contains("kube-system"),
        "{system}"
    );
    let fine = eventually("fine's Valid condition", WAIT, || {
        valid("pp", "fine", Some("demo"))
    })
    .await;
    assert!(fine.starts_with("True"), "{fine}");
    assert_eq!(fine.trim(), "True the policy is in force");
    // in force, and saying which statePreservation rules it ignores
    let moving = eventually("moving's Valid condition", WAIT, || {
        valid("pp", "moving", Some("demo"))
    })
    .await;
    assert!(
        moving.starts_with("True")
            && moving.contains(
                "these statePreservation rules are ignored: spec.failover.application.statePreservation.rules[0].jsonPath"
            )
            && moving.contains("; spec.failover.cluster.statePreservation.rules[1].jsonPath: \"replicas\"")
            && !moving.contains("rules[0].jsonPath: \"{ .replicas }\""),
        "{moving}"
    );
}

/// A PriorityClass travels with the workloads that use it: created on the hub with
/// `kubectl create priorityclass`, placed on every member by a ClusterPropagationPolicy
/// next to a Deployment that names it; each member's Pods get its value (kubesim's
/// Priority admission), and `kubectl get pc` there shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_class_travels_with_the_workloads_that_use_it() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&[
        "create",
        "priorityclass",
        "shop-critical",
        "--value=100000",
        "--description=the shop's front end",
    ])
    .await;
    let file = env.file(
        "shop.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: priority-classes}
spec:
  resourceSelectors: [{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, name: shop-critical}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: front, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: front}}
  template:
    metadata: {labels: {app: front}}
    spec:
      priorityClassName: shop-critical
      containers: [{name: web, image: nginx:1.27}]
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: front, namespace: demo}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: front}]
"#,
    );
    env.ok(&["apply", "-f", &file]).await;
    for member in ["east", "west"] {
        let priorities = eventually(
            &format!("{member}: front's Pod with its priority"),
            WAIT,
            || async {
                let out = env
                    .ok_in(
                        member,
                        &[
                            "get",
                            "pods",
                            "-n",
                            "demo",
                            "-l",
                            "app=front",
                            "-o",
                            "jsonpath={.items[*].spec.priority}",
                        ],
                    )
                    .await;
                (!out.trim().is_empty()).then_some(out)
            },
        )
        .await;
        assert_eq!(priorities.trim(), "100000", "{member}");
        let table = env.ok_in(member, &["get", "pc", "shop-critical"]).await;
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
        );
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            (row[0], row[1], row[2], row[4]),
            ("shop-critical", "100000", "false", "PreemptLowerPriority"),
            "{member}: {table}"
        );
    }
}

/// A ResourceQuota made with `kubectl create quota` on the hub reaches every member;
/// each member counts its own use (`kubectl get quota`) and holds a Deployment placed
/// after it to the quota's Pods, as a real cluster's admission does (a quota never
/// evicts: Pods made before it arrived stay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_quota_holds_each_members_pods() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    env.ok(&[
        "-n",
        "demo",
        "create",
        "quota",
        "team",
        "--hard=pods=2,services=5",
    ])
    .await;
    let policy = env.file(
        "policy.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: team, namespace: demo}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ResourceQuota, name: team}
  - {apiVersion: apps/v1, kind: Deployment, name: batch}
"#,
    );
    env.ok(&["apply", "-f", &policy]).await;
    for member in ["east", "west"] {
        eventually(&format!("{member}: the quota, counted"), WAIT, || async {
            let out = env
                .run(member, &["-n", "demo", "get", "quota", "team"])
                .await;
            String::from_utf8_lossy(&out.stdout)
                .contains("pods: 0/2, services: 0/5")
                .then_some(())
        })
        .await;
    }
    let deployment = env.file("batch.yaml", &busybox_deployment("batch"));
    env.ok(&["apply", "-f", &deployment]).await;
    for member in ["east", "west"] {
        let table = eventually(
            &format!("{member}: the quota full with 2 Pods"),
            WAIT,
            || async {
                let out = env
                    .ok_in(member, &["-n", "demo", "get", "quota", "team"])
                    .await;
                out.contains("pods: 2/2").then_some(out)
            },
        )
        .await;
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGE", "REQUEST", "LIMIT"], "{table}");
        assert!(table.contains("pods: 2/2, services: 0/5"), "{table}");
        let pods = env
            .ok_in(
                member,
                &["-n", "demo", "get", "pods", "-l", "app=batch", "-o", "name"],
            )
            .await;
        assert_eq!(pods.lines().count(), 2, "{member}: {pods}");
    }
}

/// A LimitRange and a quota on `requests.cpu` travel together: each member's
/// LimitRanger gives the propagated Deployment's Pods (which ask for nothing) the
/// default request, so the quota admits them and counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_range_gives_each_members_pods_what_its_quota_needs() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let objects = env.file(
        "limits.yaml",
        r#"apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: demo}
spec:
  limits:
  - {type: Container, default: {cpu: 200m}, defaultRequest: {cpu: 100m}}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: cpu, namespace: demo}
spec:
  hard: {requests.cpu: "1"}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: limits, namespace: demo}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: LimitRange, name: defaults}
  - {apiVersion: v1, kind: ResourceQuota, name: cpu}
  - {apiVersion: apps/v1, kind: Deployment, name: plain}
"#,
    );
    env.ok(&["apply", "-f", &objects]).await;
    // the workload after its limits are in every member (else its first Pods could
    // come before them, with nothing to count)
    for member in ["east", "west"] {
        eventually(
            &format!("{member}: the limits and the quota"),
            WAIT,
            || async {
                let out = env
                    .run(
                        member,
                        &["-n", "demo", "get", "limits/defaults", "quota/cpu"],
                    )
                    .await;
                out.status.success().then_some(())
            },
        )
        .await;
    }
    let deployment = env.file("plain.yaml", &busybox_deployment("plain"));
    env.ok(&["apply", "-f", &deployment]).await;
    for member in ["east", "west"] {
        eventually(
            &format!("{member}: three Pods, quota used"),
            WAIT,
            || async {
                let out = env
                    .run(member, &["-n", "demo", "get", "quota", "cpu"])
                    .await;
                String::from_utf8_lossy(&out.stdout)
                    .contains("requests.cpu: 300m/1")
                    .then_some(())
            },
        )
        .await;
        let requests = env
            .ok_in(
                member,
                &[
                    "-n",
                    "demo",
                    "get",
                    "pods",
                    "-l",
                    "app=plain",
                    "-o",
                    "jsonpath={.items[*].spec.containers[0].resources.requests.cpu}",
                ],
            )
            .await;
        assert_eq!(requests.trim(), "100m 100m 100m", "{member}");
        let table = env.ok_in(member, &["-n", "demo", "get", "limits"]).await;
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "CREATED", "AT"], "{table}");
        assert!(table.contains("defaults"), "{table}");
    }
}

/// A Deployment of three busybox Pods in `demo`, labelled app=<name>.
fn busybox_deployment(name: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: demo}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: work, image: busybox:1.36}}]
"#
    )
}
