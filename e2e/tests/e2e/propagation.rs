//! Propagation end to end (issue 14, federation.md §8 B, D, G, H): a hub and three
//! members (east in us-east, west in us-west, north in eu-north, workloads simulated in
//! the members), the hub controller, and the user's steps with real kubectl.

use std::time::Duration;

use causeway_e2e::{Options, demo_regions};
use serde_json::Value;

use crate::mcs_support::eventually;
use crate::support::Env;

pub(crate) const WAIT: Duration = Duration::from_secs(45);
const MEMBERS: [&str; 3] = ["east", "west", "north"];

/// The clusterset of `members` with the controller running, namespace `demo`
/// everywhere, and every member Ready with its region known (placements and overrides
/// read it; east is in us-east, west in us-west, north in eu-north).
pub(crate) async fn fleet_of(members: &[&str]) -> (Env, causeway_e2e::Controller) {
    let members: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    let env = Env::start_with(Options {
        topology: demo_regions(&members),
        members: members.clone(),
        ..Options::default()
    })
    .await;
    env.cs.create_namespace_everywhere("demo").await.unwrap();
    env.cs.join_all().await.unwrap();
    let ctl = env.cs.start_controller().await.unwrap();
    eventually("every member Ready with its region", WAIT, || async {
        let out = env
            .ok(&[
                "get",
                "clusters",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.region}/{.status.conditions[?(@.type==\"Ready\")].status} {end}",
            ])
            .await;
        let regions = demo_regions(&members);
        members
            .iter()
            .all(|m| out.contains(&format!("{m}={}/True", regions[m].0)))
            .then_some(())
    })
    .await;
    (env, ctl)
}

async fn fleet() -> (Env, causeway_e2e::Controller) {
    fleet_of(&MEMBERS).await
}

/// kubectl get -o json in a context; None when it fails (not there yet).
pub(crate) async fn get(env: &Env, context: &str, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = env.run(context, &all).await;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The replicas of Deployment `name` in east, west and north (None: not there).
pub(crate) async fn replicas(env: &Env, name: &str) -> Vec<Option<i64>> {
    let mut out = Vec::new();
    for c in ["east", "west", "north"] {
        let d = get(env, c, &["deployment", name, "-n", "demo"]).await;
        out.push(d.and_then(|d| d.pointer("/spec/replicas").and_then(Value::as_i64)));
    }
    out
}

/// Whether `cluster`'s execution namespace holds a Work of the binding of `name`, not
/// being deleted (a Work the hub deleted stays until the member's applier has removed
/// the copies it made).
pub(crate) async fn has_work(env: &Env, cluster: &str, name: &str) -> bool {
    let ns = format!("causeway-es-{cluster}");
    let works = get(env, "hub", &["works", "-n", &ns]).await;
    works
        .and_then(|w| w["items"].as_array().cloned())
        .is_some_and(|items| {
            items.iter().any(|w| {
                w["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(name)
                    && w["metadata"]["deletionTimestamp"].is_null()
            })
        })
}

/// `kubectl get events -n demo --field-selector <selector>` on the hub.
pub(crate) async fn demo_events(env: &Env, selector: &str) -> String {
    env.ok(&["get", "events", "-n", "demo", "--field-selector", selector])
        .await
}

/// Whether binding `b` (`kubectl get rb -o json`) is FullyApplied=True.
pub(crate) fn fully_applied(b: &Value) -> bool {
    b.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "FullyApplied" && c["status"] == "True")
}

/// The binding's condition of `type_` (kubectl get rb -o json), if it has one.
pub(crate) async fn binding_condition(env: &Env, rb: &str, type_: &str) -> Option<Value> {
    let rb = get(env, "hub", &["rb", rb, "-n", "demo"]).await?;
    rb.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

fn image_and_replicas(d: &Value) -> (String, i64) {
    (
        d.pointer("/spec/template/spec/containers/0/image")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        d.pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(-1),
    )
}

async fn member_shop(env: &Env, cluster: &str, want: (&str, i64)) {
    eventually(
        &format!("{cluster}: deployment shop {want:?}"),
        WAIT,
        || async {
            let d = get(env, cluster, &["deployment", "shop", "-n", "demo"]).await?;
            let got = image_and_replicas(&d);
            (got.0 == want.0 && got.1 == want.1).then_some(())
        },
    )
    .await;
}

/// The README's federation demo: the templates, the policy and the overrides applied
/// with kubectl on the hub put the Deployment (overridden per region), its ConfigMap
/// and the Service in every member (B.9, D.27–29 by region, C.17 Duplicated); `kubectl
/// get rb` shows the binding Scheduled and FullyApplied (H.52); the hub Deployment's
/// status sums the members' with observedGeneration = generation (H.53); a template
/// change reaches every member with the overrides kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federation_demo_propagates_with_overrides_and_aggregated_status() {
    let (env, _ctl) = fleet().await;
    env.ok(&["apply", "-f", "examples/federation-demo/"]).await;
    member_shop(
        &env,
        "east",
        ("mirror.us.example.com/library/nginx:1.27", 3),
    )
    .await;
    member_shop(
        &env,
        "west",
        ("mirror.us.example.com/library/nginx:1.27", 3),
    )
    .await;
    member_shop(
        &env,
        "north",
        ("mirror.eu.example.com/library/nginx:1.27", 1),
    )
    .await;
    for m in MEMBERS {
        eventually(&format!("{m}: configmap and service"), WAIT, || async {
            get(&env, m, &["configmap", "shop-config", "-n", "demo"]).await?;
            let svc = get(&env, m, &["service", "shop", "-n", "demo"]).await?;
            // the member allocated its own clusterIP: Causeway never owned it (E.35)
            svc.pointer("/spec/clusterIP")?
                .as_str()
                .filter(|ip| !ip.is_empty())?;
            Some(())
        })
        .await;
    }
    // the Service stays (the MCS importer leaves propagated Services alone), with the
    // clusterIP its member allocated (E.35)
    let ip_of = |v: Value| {
        v.pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .map(String::from)
    };
    let before = get(&env, "east", &["service", "shop", "-n", "demo"])
        .await
        .and_then(ip_of);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = get(&env, "east", &["service", "shop", "-n", "demo"])
        .await
        .and_then(ip_of);
    assert!(before.is_some());
    assert_eq!(
        before, after,
        "the member's Service was recreated or lost its clusterIP"
    );
    let rb = eventually(
        "kubectl get rb: Scheduled and Fully-Applied",
        WAIT,
        || async {
            let out = env.ok(&["get", "rb", "-n", "demo"]).await;
            let line = out
                .lines()
                .find(|l| l.starts_with("shop-deployment"))?
                .to_string();
            let cols: Vec<&str> = line.split_whitespace().collect();
            // NAME KIND TEMPLATE POLICY SCHEDULED FULLY-APPLIED AGE
            (cols.get(1..6)? == ["Deployment", "shop", "shop", "True", "True"]).then_some(out)
        },
    )
    .await;
    assert!(rb.contains("shop-config-configmap"), "{rb}");
    assert!(rb.contains("shop-service"), "{rb}");
    // H.53: 3 + 3 + 1 ready replicas, and the generation observed everywhere
    eventually("hub deployment status aggregated", WAIT, || async {
        let d = get(&env, "hub", &["deployment", "shop", "-n", "demo"]).await?;
        let ready = d.pointer("/status/readyReplicas")?.as_i64()?;
        let observed = d.pointer("/status/observedGeneration")?.as_i64()?;
        let generation = d.pointer("/metadata/generation")?.as_i64()?;
        (ready == 7 && observed == generation).then_some(())
    })
    .await;
    // E.33 at the hub too: a full round (a Cluster changed) with nothing to change
    // writes nothing, in the hub or in any member, besides the label itself
    let writes = |env: &Env| -> Vec<u64> { env.cs.all().map(|s| s.write_requests()).collect() };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = writes(&env);
    env.ok(&["label", "cluster", "north", "touched=yes"]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = writes(&env);
    assert_eq!(
        after[0],
        before[0] + 1,
        "hub writes: {before:?} → {after:?}"
    );
    assert_eq!(
        after[1..],
        before[1..],
        "member writes: {before:?} → {after:?}"
    );
    // a template change: every member follows, the overrides still applied
    env.ok(&[
        "set",
        "image",
        "deployment/shop",
        "shop=docker.io/library/nginx:1.28",
        "-n",
        "demo",
    ])
    .await;
    member_shop(
        &env,
        "east",
        ("mirror.us.example.com/library/nginx:1.28", 3),
    )
    .await;
    member_shop(
        &env,
        "north",
        ("mirror.eu.example.com/library/nginx:1.28", 1),
    )
    .await;
}

pub(crate) fn policy(name: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {name}
  namespace: demo
spec:
  resourceSelectors:
  - apiVersion: v1
    kind: ConfigMap
    name: {name}
{extra}"#
    )
}

pub(crate) fn configmap(name: &str, value: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: demo
data:
  key: "{value}"
"#
    )
}

pub(crate) async fn member_value(env: &Env, cluster: &str, name: &str) -> Option<String> {
    let cm = get(env, cluster, &["configmap", name, "-n", "demo"]).await?;
    cm.pointer("/data/key")?.as_str().map(String::from)
}

pub(crate) async fn member_has(env: &Env, cluster: &str, name: &str, want: Option<&str>) {
    eventually(
        &format!("{cluster}: configmap {name} = {want:?}"),
        WAIT,
        || async { (member_value(env, cluster, name).await.as_deref() == want).then_some(()) },
    )
    .await;
}

/// B.16 ★ and G.51: a cluster that starts to match a label placement gets the existing
/// templates with no user action; one that stops matching has its copy removed; the
/// binding says why each cluster was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_entering_and_leaving_the_placement() {
    let (env, _ctl) = fleet().await;
    let placement = "  placement:\n    clusterAffinity:\n      labelSelector:\n        matchLabels:\n          env: prod\n";
    env.ok(&["label", "cluster", "east", "env=prod"]).await;
    let cm = env.file("cm.yaml", &configmap("settings", "v1"));
    let pp = env.file("pp.yaml", &policy("settings", placement));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    member_has(&env, "east", "settings", Some("v1")).await;
    let rb = get(&env, "hub", &["rb", "settings-configmap", "-n", "demo"])
        .await
        .unwrap();
    let reasons = rb.pointer("/status/schedulingReasons").unwrap().to_string();
    assert!(
        reasons.contains("west") && reasons.contains("env=prod"),
        "{reasons}"
    );
    assert_eq!(member_value(&env, "west", "settings").await, None);
    // west starts matching: it gets the copy
    env.ok(&["label", "cluster", "west", "env=prod"]).await;
    member_has(&env, "west", "settings", Some("v1")).await;
    // east stops matching: its copy goes, west keeps its own
    env.ok(&["label", "cluster", "east", "env-"]).await;
    member_has(&env, "east", "settings", None).await;
    member_has(&env, "west", "settings", Some("v1")).await;
}

/// B.13: spread constraints with real kubectl: two regions of three, one cluster each;
/// the third region's cluster is told why it is left out; an invalid constraint says
/// what to fix; more regions than there are is Unschedulable and the copies stay where
/// they are; asking for two again schedules again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_constraints_span_the_regions_asked_for() {
    let (env, _ctl) = fleet().await;
    let spread = |min: u32| {
        format!(
            "  placement:\n    spreadConstraints:\n    - spreadByField: region\n      minGroups: {min}\n      maxGroups: 2\n    - spreadByField: cluster\n      maxGroups: 2\n"
        )
    };
    let cm = env.file("cm.yaml", &configmap("spread", "v1"));
    let pp = env.file("pp.yaml", &policy("spread", &spread(2)));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    // regions eu-north and us-east (by name: one cluster each), not us-west
    member_has(&env, "north", "spread", Some("v1")).await;
    member_has(&env, "east", "spread", Some("v1")).await;
    let rb = get(&env, "hub", &["rb", "spread-configmap", "-n", "demo"])
        .await
        .unwrap();
    let reasons = rb.pointer("/status/schedulingReasons").unwrap().to_string();
    assert!(
        reasons.contains("west")
            && reasons.contains("region us-west is not among the 2 region(s) chosen"),
        "{reasons}"
    );
    assert_eq!(member_value(&env, "west", "spread").await, None);
    // three regions wanted with at most two: invalid, and the policy says so
    let bad = env.file("pp.yaml", &policy("spread", &spread(3)));
    env.ok(&["apply", "-f", &bad]).await;
    let scheduled = eventually("Scheduled=False with the reason", WAIT, || async {
        binding_condition(&env, "spread-configmap", "Scheduled")
            .await
            .filter(|c| c["status"] == "False")
    })
    .await;
    assert!(
        scheduled["message"]
            .as_str()
            .unwrap_or_default()
            .contains("spreadConstraints[0].maxGroups: Invalid value: \"2\": must be greater than or equal to minGroups"),
        "{scheduled}"
    );
    // the copies stay where they were meanwhile
    assert_eq!(
        member_value(&env, "north", "spread").await.as_deref(),
        Some("v1")
    );
    // four regions of three: Unschedulable, and nothing is taken away
    let four = env.file(
        "pp.yaml",
        &policy(
            "spread",
            &spread(4).replace("maxGroups: 2\n    -", "maxGroups: 4\n    -"),
        ),
    );
    env.ok(&["apply", "-f", &four]).await;
    eventually("Scheduled=False Unschedulable", WAIT, || async {
        binding_condition(&env, "spread-configmap", "Scheduled")
            .await
            .filter(|c| c["reason"] == "Unschedulable")
    })
    .await;
    let unschedulable = get(&env, "hub", &["rb", "spread-configmap", "-n", "demo"])
        .await
        .unwrap();
    let reasons = unschedulable
        .pointer("/status/schedulingReasons")
        .unwrap()
        .to_string();
    assert!(
        reasons.contains("spreadConstraints need at least 4 regions, and only 3"),
        "{reasons}"
    );
    assert_eq!(
        member_value(&env, "north", "spread").await.as_deref(),
        Some("v1")
    );
    assert_eq!(
        member_value(&env, "east", "spread").await.as_deref(),
        Some("v1")
    );
    // two again: scheduled
    let two = env.file("pp.yaml", &policy("spread", &spread(2)));
    env.ok(&["apply", "-f", &two]).await;
    eventually("Scheduled=True", WAIT, || async {
        binding_condition(&env, "spread-configmap", "Scheduled")
            .await
            .filter(|c| c["status"] == "True")
    })
    .await;
}

/// G.47, D.32 ★ and G.45: deleting the PropagationPolicy together with its
/// OverridePolicy leaves the members' overridden copies alone (never the
/// un-overridden template); the binding says PolicyRemoved; deleting the template then
/// removes every copy and the binding, and the template goes once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_deletion_keeps_copies_and_template_deletion_cascades() {
    let (env, ctl) = fleet().await;
    let cm = env.file("cm.yaml", &configmap("flags", "plain"));
    let op = env.file(
        "op.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: OverridePolicy
metadata:
  name: flags
  namespace: demo
spec:
  resourceSelectors:
  - apiVersion: v1
    kind: ConfigMap
    name: flags
  overrideRules:
  - overriders:
      plaintext:
      - path: /data/key
        operator: replace
        value: overridden
"#,
    );
    let pp = env.file(
        "pp.yaml",
        &policy("flags", "  dependentOverrides: [flags]\n"),
    );
    env.ok(&["apply", "-f", &cm, "-f", &op, "-f", &pp]).await;
    for m in MEMBERS {
        member_has(&env, m, "flags", Some("overridden")).await;
    }
    // the override goes first, then the policy: dependentOverrides blocks the render
    env.ok(&["delete", "-f", &op, "-f", &pp]).await;
    eventually("binding frozen with PolicyRemoved", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "flags-configmap", "-n", "demo"]).await?;
        let conds = rb.pointer("/status/conditions")?.to_string();
        conds.contains("PolicyRemoved").then_some(())
    })
    .await;
    // a restart (or a new leader) with no policy selecting ConfigMaps any more: the
    // template is still watched through its binding, so nothing looks gone
    ctl.stop().await;
    let _ctl = env.cs.start_controller().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in MEMBERS {
        assert_eq!(
            member_value(&env, m, "flags").await.as_deref(),
            Some("overridden")
        );
    }
    // deleting the template removes every copy, then the binding, then the template
    env.ok(&["delete", "-f", &cm, "--wait=false"]).await;
    for m in MEMBERS {
        member_has(&env, m, "flags", None).await;
    }
    eventually("binding and template gone", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "flags-configmap", "-n", "demo"]).await;
        let t = get(&env, "hub", &["configmap", "flags", "-n", "demo"]).await;
        (rb.is_none() && t.is_none()).then_some(())
    })
    .await;
}

/// D.32 ★ without `dependentOverrides`: `kubectl delete -f app/` deletes
/// `override.yaml`, then `propagation.yaml`, one request after the other. The hub holds
/// the re-render of a binding whose copies hold an override that went (`hub/settle.rs`),
/// so the policy's deletion freezes the binding first: the members never see the
/// un-overridden value. An override deleted alone reaches the members once the hold
/// is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_deleted_with_its_override_in_one_command_never_pushes_the_template() {
    let (env, _ctl) = fleet().await;
    let cm = env.file("cm.yaml", &configmap("flags", "plain"));
    let app = env.dir.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    let op = r#"apiVersion: causeway.io/v1alpha1
kind: OverridePolicy
metadata:
  name: flags
  namespace: demo
spec:
  resourceSelectors:
  - apiVersion: v1
    kind: ConfigMap
    name: flags
  overrideRules:
  - overriders:
      plaintext:
      - path: /data/key
        operator: replace
        value: overridden
"#;
    std::fs::write(app.join("override.yaml"), op).unwrap();
    std::fs::write(app.join("propagation.yaml"), policy("flags", "")).unwrap();
    let app = app.display().to_string();
    env.ok(&["apply", "-f", &cm, "-f", &app]).await;
    for m in MEMBERS {
        member_has(&env, m, "flags", Some("overridden")).await;
    }
    // sample every member while the command runs and well past the hub's hold
    let sample = async {
        let started = std::time::Instant::now();
        let mut seen = Vec::new();
        while started.elapsed() < Duration::from_secs(10) {
            for m in MEMBERS {
                seen.push((m, member_value(&env, m, "flags").await));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        seen
    };
    let delete = ["delete", "-f", &app];
    let (_, seen) = tokio::join!(env.ok(&delete), sample);
    assert!(seen.len() >= 3 * 3, "{seen:?}");
    let wrong: Vec<_> = seen
        .iter()
        .filter(|(_, v)| v.as_deref() != Some("overridden"))
        .collect();
    assert!(wrong.is_empty(), "members saw {wrong:?}");
    let rb = get(&env, "hub", &["rb", "flags-configmap", "-n", "demo"])
        .await
        .unwrap();
    let conds = rb.pointer("/status/conditions").unwrap().to_string();
    assert!(conds.contains("PolicyRemoved"), "{conds}");
    // the override deleted alone goes to the members, once the hold is over
    env.ok(&["apply", "-f", &app]).await;
    eventually("binding claimed again", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "flags-configmap", "-n", "demo"]).await?;
        let conds = rb.pointer("/status/conditions")?.to_string();
        (!conds.contains("PolicyRemoved")).then_some(())
    })
    .await;
    let op = format!("{app}/override.yaml");
    env.ok(&["delete", "-f", &op]).await;
    for m in MEMBERS {
        member_has(&env, m, "flags", Some("plain")).await;
    }
}

/// A template whose binding name (`<name>-<kind>`) is longer than a label value (63)
/// is propagated and its deletion completes: the Works' binding label holds a
/// shortened value, the full name is in the annotation of the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_with_a_long_name_is_propagated_and_deleted() {
    let (env, _ctl) = fleet().await;
    // 55 characters: the binding's name is 65
    let name = "prometheus-kube-prometheus-stack-prometheus-rulefiles-0";
    let cm = env.file("cm.yaml", &configmap(name, "v1"));
    let pp = env.file(
        "pp.yaml",
        &policy("rulefiles", "").replace("    name: rulefiles\n", &format!("    name: {name}\n")),
    );
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    for m in MEMBERS {
        member_has(&env, m, name, Some("v1")).await;
    }
    let rb = format!("{name}-configmap");
    let works = get(
        &env,
        "hub",
        &[
            "works",
            "-A",
            "-l",
            &format!(
                "causeway.io/binding-name={}",
                causeway_crds::names::label_value(&rb)
            ),
        ],
    )
    .await
    .unwrap();
    let items = works["items"].as_array().unwrap();
    assert_eq!(items.len(), MEMBERS.len(), "{works}");
    for w in items {
        assert_eq!(
            w.pointer("/metadata/annotations/causeway.io~1binding-name"),
            Some(&Value::from(rb.clone()))
        );
    }
    env.ok(&["delete", "-f", &cm, "--wait=false"]).await;
    for m in MEMBERS {
        member_has(&env, m, name, None).await;
    }
    eventually("binding and template gone", WAIT, || async {
        let b = get(&env, "hub", &["rb", &rb, "-n", "demo"]).await;
        let t = get(&env, "hub", &["configmap", name, "-n", "demo"]).await;
        (b.is_none() && t.is_none()).then_some(())
    })
    .await;
}

/// G.46 with ★ per cluster: `causeway.io/preserve-resources-on-clusters: north` keeps
/// north's copy when the template is deleted (no longer managed: its managed label is
/// gone), while east and west lose theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_on_deletion_for_one_cluster() {
    let (env, _ctl) = fleet().await;
    let cm = configmap("keep", "v1").replace(
        "  namespace: demo\n",
        "  namespace: demo\n  annotations:\n    causeway.io/preserve-resources-on-clusters: north\n",
    );
    let cm = env.file("cm.yaml", &cm);
    let pp = env.file("pp.yaml", &policy("keep", ""));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    for m in MEMBERS {
        member_has(&env, m, "keep", Some("v1")).await;
    }
    env.ok(&["delete", "-f", &cm]).await;
    member_has(&env, "east", "keep", None).await;
    member_has(&env, "west", "keep", None).await;
    let kept = get(&env, "north", &["configmap", "keep", "-n", "demo"])
        .await
        .unwrap();
    let labels = kept
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_default();
    assert!(labels.get("causeway.io/managed").is_none(), "{labels}");
}

/// I.56–57: with `propagateDeps`, the ConfigMap, Secret (env and imagePullSecrets),
/// ServiceAccount and PVC a Deployment uses appear in every cluster it is placed in and
/// move with it; a dependency deleted and created again is propagated again; when the
/// Deployment goes, so do the dependencies' bindings and copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_follow_the_deployment() {
    let (env, _ctl) = fleet().await;
    let app = env.file(
        "app.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: app-config, namespace: demo}
data: {mode: "fast"}
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret, namespace: demo}
stringData: {token: "s3cret"}
---
apiVersion: v1
kind: Secret
metadata: {name: registry-creds, namespace: demo}
stringData: {auth: "x"}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: app-sa, namespace: demo}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: app-data, namespace: demo}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      serviceAccountName: app-sa
      imagePullSecrets: [{name: registry-creds}]
      containers:
      - name: app
        image: app:1
        env:
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: app-secret, key: token}}
        volumeMounts: [{name: config, mountPath: /etc/app}, {name: data, mountPath: /data}]
      volumes:
      - {name: config, configMap: {name: app-config}}
      - {name: data, persistentVolumeClaim: {claimName: app-data}}
"#,
    );
    let pp = env.file(
        "pp.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: app, namespace: demo}
spec:
  propagateDeps: true
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: app}
  placement:
    clusterAffinity: {clusterNames: [east, west]}
"#,
    );
    env.ok(&["apply", "-f", &app, "-f", &pp]).await;
    let deps = [
        "configmap/app-config",
        "secret/app-secret",
        "secret/registry-creds",
        "serviceaccount/app-sa",
        "persistentvolumeclaim/app-data",
    ];
    for m in ["east", "west"] {
        for d in deps {
            eventually(&format!("{m}: {d}"), WAIT, || async {
                get(&env, m, &[d, "-n", "demo"]).await.map(|_| ())
            })
            .await;
        }
    }
    for d in deps {
        assert!(
            get(&env, "north", &[d, "-n", "demo"]).await.is_none(),
            "{d} in north"
        );
    }
    // the Deployment moves from west to north: its dependencies move with it
    let moved = std::fs::read_to_string(&pp)
        .unwrap()
        .replace("[east, west]", "[east, north]");
    let moved = env.file("pp2.yaml", &moved);
    env.ok(&["apply", "-f", &moved]).await;
    for d in deps {
        eventually(&format!("{d} moved to north"), WAIT, || async {
            let north = get(&env, "north", &[d, "-n", "demo"]).await.is_some();
            let west = get(&env, "west", &[d, "-n", "demo"]).await.is_some();
            (north && !west).then_some(())
        })
        .await;
    }
    // I.57: a dependency deleted and created again is propagated again
    env.ok(&["delete", "configmap", "app-config", "-n", "demo"])
        .await;
    eventually("app-config gone from east", WAIT, || async {
        get(&env, "east", &["configmap", "app-config", "-n", "demo"])
            .await
            .is_none()
            .then_some(())
    })
    .await;
    env.ok(&["apply", "-f", &app]).await;
    eventually("app-config back in east", WAIT, || async {
        get(&env, "east", &["configmap", "app-config", "-n", "demo"])
            .await
            .map(|_| ())
    })
    .await;
    // the owner goes: the attached bindings and the copies go
    env.ok(&["delete", "deployment", "app", "-n", "demo"]).await;
    eventually("dependency copies and bindings gone", WAIT, || async {
        let rbs = env.ok(&["get", "rb", "-n", "demo", "-o", "name"]).await;
        let copy = get(&env, "east", &["secret", "app-secret", "-n", "demo"]).await;
        (rbs.trim().is_empty() && copy.is_none()).then_some(())
    })
    .await;
}

/// I.56: a ConfigMap two Deployments mount is one binding required by both; when one
/// of them stops mounting it, the binding drops that requirer and the copies stay for
/// the other one. (That this happens in the requirer's own round, not at a later full
/// one, is `hub::tests::a_dependency_is_handled_in_its_requirers_rounds`: Cluster status
/// changes also cause full rounds here, so timing cannot show it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_dependency_drops_a_requirer_that_stops_using_it() {
    let (env, _ctl) = fleet_of(&["east"]).await;
    let deploy = |name: &str, config: &str| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: demo}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: app, image: "app:1", volumeMounts: [{{name: c, mountPath: /etc/c}}]}}]
      volumes: [{{name: c, configMap: {{name: {config}}}}}]
"#
        )
    };
    let app = env.file(
        "app.yaml",
        &format!(
            r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: shared, namespace: demo}}
data: {{mode: "fast"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: own, namespace: demo}}
data: {{mode: "slow"}}
---
{}---
{}---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: apps, namespace: demo}}
spec:
  propagateDeps: true
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: a}}
  - {{apiVersion: apps/v1, kind: Deployment, name: b}}
  placement:
    clusterAffinity: {{clusterNames: [east]}}
"#,
            deploy("a", "shared"),
            deploy("b", "shared")
        ),
    );
    env.ok(&["apply", "-f", &app]).await;
    let required_by = || async {
        let rb = get(&env, "hub", &["rb", "shared-configmap", "-n", "demo"]).await?;
        let names: Vec<String> = rb
            .pointer("/spec/requiredBy")?
            .as_array()?
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        Some(names.join(","))
    };
    eventually("shared is required by a and b", WAIT, || async {
        (required_by().await? == "a-deployment,b-deployment").then_some(())
    })
    .await;
    let a = env.file("a.yaml", &deploy("a", "own"));
    env.ok(&["apply", "-f", &a]).await;
    eventually("shared is required by b alone", WAIT, || async {
        (required_by().await? == "b-deployment").then_some(())
    })
    .await;
    eventually("own reaches east", WAIT, || async {
        get(&env, "east", &["configmap", "own", "-n", "demo"])
            .await
            .map(|_| ())
    })
    .await;
    // b still uses shared: its copy stays (checked for a few seconds, not once)
    for _ in 0..6 {
        assert!(
            get(&env, "east", &["configmap", "shared", "-n", "demo"])
                .await
                .is_some(),
            "b still uses shared"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// D.26 and the Events: a JSON-patch `remove` of a path the template lacks fails that
/// cluster only (ApplyOverridesFailed in the binding, a Warning Event on the template);
/// the other clusters get the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_override_fails_its_cluster_only() {
    let (env, _ctl) = fleet().await;
    let cm = env.file("cm.yaml", &configmap("tuning", "v1"));
    let op = env.file(
        "op.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: OverridePolicy
metadata: {name: tuning, namespace: demo}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: tuning}
  overrideRules:
  - targetCluster: {clusterNames: [north]}
    overriders:
      plaintext:
      - {path: /data/missing, operator: remove}
"#,
    );
    let pp = env.file("pp.yaml", &policy("tuning", ""));
    env.ok(&["apply", "-f", &cm, "-f", &op, "-f", &pp]).await;
    member_has(&env, "east", "tuning", Some("v1")).await;
    member_has(&env, "west", "tuning", Some("v1")).await;
    let msg = eventually("north's aggregated status says why", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "tuning-configmap", "-n", "demo"]).await?;
        let items = rb.pointer("/status/aggregatedStatus")?.as_array()?.clone();
        let north = items.iter().find(|i| i["clusterName"] == "north")?;
        let m = north["appliedMessage"].as_str()?.to_string();
        (north["applied"] == false && m.contains("ApplyOverridesFailed")).then_some(m)
    })
    .await;
    assert!(msg.contains("/data/missing"), "{msg}");
    assert_eq!(member_value(&env, "north", "tuning").await, None);
    let events = eventually("a Warning Event on the template", WAIT, || async {
        let out = demo_events(&env, "involvedObject.name=tuning").await;
        out.contains("ApplyOverridesFailed").then_some(out)
    })
    .await;
    assert!(events.contains("north"), "{events}");
}

/// G.48–49 with ★ `unjoin --preserve`: a member that leaves has its propagated copies
/// deleted; one that leaves with --preserve keeps them, no longer managed; either way
/// its Works are released and its execution namespace goes, and the binding no longer
/// schedules to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_members_lose_or_keep_their_copies() {
    let (env, _ctl) = fleet().await;
    let cm = env.file("cm.yaml", &configmap("shared", "v1"));
    let pp = env.file("pp.yaml", &policy("shared", ""));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    for m in MEMBERS {
        member_has(&env, m, "shared", Some("v1")).await;
    }
    let hub = env.hub_client().await;
    let wait = Duration::from_secs(40);
    causeway_controllers::clusters::join::unjoin(hub.clone(), "east", false, wait)
        .await
        .unwrap();
    causeway_controllers::clusters::join::unjoin(hub, "west", true, wait)
        .await
        .unwrap();
    member_has(&env, "east", "shared", None).await;
    let kept = get(&env, "west", &["configmap", "shared", "-n", "demo"])
        .await
        .unwrap();
    assert_eq!(
        kept.pointer("/data/key").and_then(Value::as_str),
        Some("v1")
    );
    let labels = kept
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_default();
    assert!(labels.get("causeway.io/managed").is_none(), "{labels}");
    for ns in ["causeway-es-east", "causeway-es-west"] {
        eventually(&format!("{ns} gone"), WAIT, || async {
            get(&env, "hub", &["namespace", ns])
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    eventually("the binding schedules to north only", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "shared-configmap", "-n", "demo"]).await?;
        let clusters = rb.pointer("/spec/clusters")?.to_string();
        (clusters.contains("north") && !clusters.contains("east") && !clusters.contains("west"))
            .then_some(())
    })
    .await;
    member_has(&env, "north", "shared", Some("v1")).await;
}

/// A member that does not answer while it leaves keeps its copies (nothing can reach
/// them), and the hub says so: a Warning Event `MemberCleanupFailed` on its Cluster,
/// naming what to delete by hand. One whose answers take longer than any call waits
/// (packets dropped, not refused) is let go as soon as its probe says so, not after
/// every object's call has waited out its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_unreachable_as_it_leaves_keeps_its_copies_and_the_hub_says_so() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let cm = env.file("cm.yaml", &configmap("shared", "v1"));
    let pp = env.file("pp.yaml", &policy("shared", ""));
    env.ok(&["apply", "-f", &cm, "-f", &pp]).await;
    for m in ["east", "west"] {
        member_has(&env, m, "shared", Some("v1")).await;
    }
    let east = env.cs.member("east").unwrap();
    east.faults().set_latency(Duration::from_secs(30));
    let started = std::time::Instant::now();
    causeway_controllers::clusters::join::unjoin(
        env.hub_client().await,
        "east",
        false,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let said = eventually("the MemberCleanupFailed Event", WAIT, || async {
        let out = env
            .ok(&["get", "events", "-A", "--field-selector", "reason=MemberCleanupFailed", "-o", "jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name}: {.message}{end}"])
            .await;
        out.contains("Cluster/east").then_some(out)
    })
    .await;
    assert!(
        said.contains("delete the objects labelled causeway.io/managed=true there by hand"),
        "{said}"
    );
    east.faults().set_latency(Duration::ZERO);
    let kept = get(&env, "east", &["configmap", "shared", "-n", "demo"])
        .await
        .expect("the copy is still in east");
    assert_eq!(
        kept.pointer("/metadata/labels/causeway.io~1managed")
            .and_then(Value::as_str),
        Some("true")
    );
}

/// A policy for every ConfigMap and ServiceAccount of a namespace propagates the user's
/// ones and never what each cluster keeps there itself: every member keeps its own
/// `kube-root-ca.crt` (its own CA) and `default` ServiceAccount; a policy naming
/// `kube-root-ca.crt` is refused with a Valid=False condition saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_configmap_of_a_namespace_never_includes_each_clusters_own_ca_bundle() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let cm = env.file("cm.yaml", &configmap("settings", "v1"));
    let sa = env.file(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n  namespace: demo\n",
    );
    let pp = env.file(
        "pp.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: everything
  namespace: demo
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap}
  - {apiVersion: v1, kind: ServiceAccount}
"#,
    );
    env.ok(&["apply", "-f", &cm, "-f", &sa, "-f", &pp]).await;
    let ca = |ctx: &'static str| {
        let env = &env;
        async move {
            get(env, ctx, &["configmap", "kube-root-ca.crt", "-n", "demo"])
                .await
                .and_then(|c| c.pointer("/data/ca.crt")?.as_str().map(String::from))
        }
    };
    for m in ["east", "west"] {
        member_has(&env, m, "settings", Some("v1")).await;
        eventually(&format!("{m}: serviceaccount robot"), WAIT, || async {
            get(&env, m, &["serviceaccount", "robot", "-n", "demo"]).await
        })
        .await;
    }
    let hub_ca = eventually("the hub's kube-root-ca.crt in demo", WAIT, || ca("hub")).await;
    // the claims settle before anything is checked as absent
    let bindings = eventually("bindings of settings and robot", WAIT, || async {
        let rbs = env.ok(&["get", "rb", "-n", "demo", "-o", "name"]).await;
        (rbs.contains("settings-configmap") && rbs.contains("robot-serviceaccount")).then_some(rbs)
    })
    .await;
    assert!(
        !bindings.contains("kube-root-ca") && !bindings.contains("default-serviceaccount"),
        "{bindings}"
    );
    for m in ["east", "west"] {
        let own = ca(m)
            .await
            .expect("every member publishes its own CA bundle");
        assert_ne!(own, hub_ca, "{m} keeps its own CA bundle, not the hub's");
    }
    // naming it is refused, with why
    let named = env.file(
        "named.yaml",
        r#"apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: the-ca
  namespace: demo
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: kube-root-ca.crt}
"#,
    );
    env.ok(&["apply", "-f", &named]).await;
    let why = eventually("the-ca Valid=False", WAIT, || async {
        let p = get(&env, "hub", &["pp", "the-ca", "-n", "demo"]).await?;
        let c = p.pointer("/status/conditions/0")?;
        (c["status"] == "False").then(|| c["message"].as_str().unwrap_or("").to_string())
    })
    .await;
    assert!(
        why.contains(
            "every cluster keeps its own ConfigMap \"kube-root-ca.crt\" in every namespace"
        ),
        "{why}"
    );
}
