//! `causeway explain` and `causeway promote` (issue 14 item 8, F.44) as an operator runs
//! them: the real `causeway` binary against a kubesim hub and members.
//!
//! The binary is the one `cargo test --workspace` builds next to this test
//! (target/<profile>/causeway), or `$CAUSEWAY_BIN`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use causeway_crds::federation::binding::ResourceBinding;
use causeway_crds::federation::propagation::PropagationPolicy;
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::{annotations, labels};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::Env;

mod pipeline;

const WAIT: Duration = Duration::from_secs(45);

/// The `causeway` binary.
pub(crate) fn causeway_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("CAUSEWAY_BIN") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-<hash> → target/<profile>/causeway
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join(format!("causeway{}", std::env::consts::EXE_SUFFIX)))
        .expect("test executable in target/<profile>/deps");
    assert!(
        bin.exists(),
        "{} not found: build it first (`cargo build -p causeway-controllers --bin causeway`; `cargo test --workspace` and scripts/test build it), or set CAUSEWAY_BIN",
        bin.display()
    );
    bin
}

/// Runs `causeway <args>` against the hub of `env` (blocking, in a blocking task).
pub(crate) async fn causeway(env: &Env, args: &[&str]) -> Output {
    let mut cmd = Command::new(causeway_bin());
    cmd.args(args)
        .arg("--hub-kubeconfig")
        .arg(&env.kubeconfig)
        .args(["--hub-context", "hub"])
        .env_remove("KUBECONFIG");
    tokio::task::spawn_blocking(move || cmd.output().expect("causeway runs"))
        .await
        .expect("join")
}

/// `causeway <args>`, which must succeed; its stdout.
pub(crate) async fn ok(env: &Env, args: &[&str]) -> String {
    let out = causeway(env, args).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "causeway {args:?} failed:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `causeway <args>`, which must fail; its stderr.
pub(crate) async fn fails(env: &Env, args: &[&str]) -> String {
    let out = causeway(env, args).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "causeway {args:?} should have failed; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// `causeway <args>` fails, saying `why`.
async fn refused(env: &Env, args: &[&str], why: &str) {
    let e = fails(env, args).await;
    assert!(e.contains(why), "causeway {args:?}: no {why:?} in:\n{e}");
}

/// Hub and members east and west, joined (push), namespace demo everywhere.
async fn clusterset() -> Env {
    let env = Env::start_with(causeway_e2e::Options {
        members: vec!["east".into(), "west".into()],
        ..causeway_e2e::Options::default()
    })
    .await;
    env.cs.create_namespace_everywhere("demo").await.unwrap();
    env.cs.join_all().await.unwrap();
    env
}

/// `causeway promote` of Deployment demo/shop from east.
const PROMOTE_EAST: [&str; 6] = [
    "promote",
    "deployment/shop",
    "-n",
    "demo",
    "--cluster",
    "east",
];

const SHOP: &str = r#"{"apiVersion": "apps/v1", "kind": "Deployment",
 "metadata": {"name": "shop", "namespace": "demo", "labels": {"app": "shop"}},
 "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "shop"}},
  "template": {"metadata": {"labels": {"app": "shop"}},
   "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}"#;

/// Creates PropagationPolicy demo/`name` selecting Deployment demo/`selects`, placing
/// it on `clusters` (all clusters when empty).
async fn deployment_policy(hub: &kube::Client, name: &str, selects: &str, clusters: &[&str]) {
    let mut spec = json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": selects}]});
    if !clusters.is_empty() {
        spec["placement"] = json!({"clusterAffinity": {"clusterNames": clusters}});
    }
    let pp: PropagationPolicy = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "demo"}, "spec": spec}))
    .unwrap();
    Api::<PropagationPolicy>::namespaced(hub.clone(), "demo")
        .create(&PostParams::default(), &pp)
        .await
        .unwrap();
}

/// The objects the hub controller writes for template demo/shop scheduled to east
/// (west left out), rendered with an image override and applied there, as the detector,
/// the renderer and the applier write them.
async fn propagated_by_hand(hub: &kube::Client) {
    let ns: Api<Namespace> = Api::all(hub.clone());
    let es =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "causeway-es-east"}});
    ns.patch(
        "causeway-es-east",
        &PatchParams::apply("test"),
        &Patch::Apply(&es),
    )
    .await
    .unwrap();
    let rbs: Api<ResourceBinding> = Api::namespaced(hub.clone(), "demo");
    let rb: ResourceBinding = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "ResourceBinding",
        "metadata": {"name": "shop-deployment", "namespace": "demo",
            "labels": {labels::POLICY_NAME: "shop", labels::POLICY_NAMESPACE: "demo"}},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "demo", "name": "shop"},
            "replicas": 3, "clusters": [{"name": "east", "replicas": 3}]},
    }))
    .unwrap();
    rbs.create(&PostParams::default(), &rb).await.unwrap();
    let status = json!({"status": {
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "Success", "message": "scheduled to 1 cluster(s)", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "FullyApplied", "status": "True", "reason": "FullyAppliedSuccess", "message": "applied in every scheduled cluster", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "schedulingReasons": [{"cluster": "west", "reason": "not in clusterNames [east]"}]}});
    rbs.patch_status(
        "shop-deployment",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
    let mut manifest: Value = serde_json::from_str(SHOP).unwrap();
    // rendered from the template as the hub stores it (defaulted), as Causeway renders it
    let stored: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(hub.clone(), "demo");
    manifest["spec"] = serde_json::to_value(stored.get("shop").await.unwrap().spec).unwrap();
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("mirror.us.example.com/nginx:1.27");
    manifest["metadata"]["annotations"] = json!({annotations::TEMPLATE_GENERATION: "1"});
    let provenance = json!({"0": {"/spec/template/spec/containers/0/image": "OverridePolicy demo/registry rule 0 (image)"}});
    let works: Api<Work> = Api::namespaced(hub.clone(), "causeway-es-east");
    let work: Work = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "demo.shop-deployment", "namespace": "causeway-es-east",
            "labels": {labels::BINDING_NAME: "shop-deployment", labels::BINDING_NAMESPACE: "demo", labels::CLUSTER: "east"},
            "annotations": {annotations::PROVENANCE: provenance.to_string()}},
        "spec": {"workload": {"manifests": [manifest]}},
    }))
    .unwrap();
    works.create(&PostParams::default(), &work).await.unwrap();
    let status = json!({"status": {"manifestStatuses": [{
        "identifier": {"ordinal": 0, "group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments", "namespace": "demo", "name": "shop"},
        "applied": true, "health": "Healthy", "generation": 1, "templateGeneration": 1}]}});
    works
        .patch_status(
            "demo.shop-deployment",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
}

/// explain answers "why is each cluster's copy like this": chosen or why not, the
/// replicas, each field that differs from the template with the override that set it
/// (or what Causeway added), applied and health, the policy and the binding's
/// conditions; the kind is taken as kubectl takes it; --output json says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_prints_reasons_overrides_and_status_per_cluster() {
    let env = clusterset().await;
    let hub = env.hub_client().await;
    env.ok(&["apply", "-f", &env.file("shop.json", SHOP)]).await;
    propagated_by_hand(&hub).await;
    let want = [
        "Deployment demo/shop",
        "  binding: ResourceBinding demo/shop-deployment, claimed by PropagationPolicy demo/shop",
        "  Scheduled: True (Success): scheduled to 1 cluster(s)",
        "  FullyApplied: True (FullyAppliedSuccess): applied in every scheduled cluster",
        "east: chosen, 3 replica(s)",
        "  work: causeway-es-east/demo.shop-deployment",
        "  spec.template.spec.containers[0].image: \"nginx:1.27\" → \"mirror.us.example.com/nginx:1.27\"  (set by OverridePolicy demo/registry rule 0 (image))",
        "  metadata.annotations[\"causeway.io/template-generation\"]: <none> → \"1\"  (added by Causeway: the template generation it was rendered from)",
        "  applied: yes, health: Healthy",
        "west: not chosen: not in clusterNames [east]",
    ];
    for kind in ["deployment", "deployments.apps", "Deployment"] {
        let out = ok(&env, &["explain", &format!("{kind}/shop"), "-n", "demo"]).await;
        for line in want {
            assert!(
                out.lines().any(|l| l == line),
                "{kind}: no line {line:?} in:\n{out}"
            );
        }
        // only the fields that differ: the server's metadata and status are not diffs
        assert_eq!(out.matches(" → ").count(), 2, "{out}");
    }
    let json: Value = serde_json::from_str(
        &ok(
            &env,
            &["explain", "deployment/shop", "-n", "demo", "-o", "json"],
        )
        .await,
    )
    .unwrap();
    assert_eq!(json["clusters"][0]["name"], "east");
    assert_eq!(json["clusters"][0]["health"], "Healthy");
    let change = &json["clusters"][0]["changes"][1];
    assert_eq!(change["pointer"], "/spec/template/spec/containers/0/image");
    assert_eq!(change["template"], "nginx:1.27");
    assert_eq!(json["clusters"][1]["reason"], "not in clusterNames [east]");
}

/// explain's errors say what is wrong: no such template, an unknown kind, and a
/// template no policy selects (naming the policies that exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_why_it_cannot_explain() {
    let env = clusterset().await;
    let hub = env.hub_client().await;
    env.ok(&["apply", "-f", &env.file("shop.json", SHOP)]).await;
    refused(
        &env,
        &["explain", "deployment/nope", "-n", "demo"],
        "Deployment demo/nope not found on the hub",
    )
    .await;
    refused(
        &env,
        &["explain", "widgets/shop", "-n", "demo"],
        "no resource type \"widgets\"",
    )
    .await;
    refused(
        &env,
        &["explain", "shop", "-n", "demo"],
        "is not <kind>/<name>",
    )
    .await;
    deployment_policy(&hub, "web", "web", &[]).await;
    refused(&env, &["explain", "deployment/shop", "-n", "demo"], "Deployment demo/shop is not propagated: the policies that could select it are: PropagationPolicy demo/web, and none selects it").await;
}

/// promote writes the member's live Deployment to the hub as the template (without
/// what the member's server set, with conflict-resolution overwrite) and a policy for
/// that cluster only; --dry-run writes nothing; a second promote is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_writes_the_template_and_its_policy_to_the_hub() {
    let env = clusterset().await;
    let hub = env.hub_client().await;
    env.ok_in("east", &["apply", "-f", &env.file("shop.json", SHOP)])
        .await;
    // the member's deployment controller writes its revision on it
    crate::mcs_support::eventually(
        "east's shop at revision 1",
        crate::propagation::WAIT,
        || async {
            let rev = env
                .ok_in(
                    "east",
                    &[
                        "get",
                        "deployment",
                        "shop",
                        "-n",
                        "demo",
                        "-o",
                        r"jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}",
                    ],
                )
                .await;
            (rev == "1").then_some(())
        },
    )
    .await;
    let deployments = Api::<DynamicObject>::namespaced_with(
        hub.clone(),
        "demo",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "apps",
            "v1",
            "Deployment",
        )),
    );
    let policies: Api<PropagationPolicy> = Api::namespaced(hub.clone(), "demo");

    let dry = ok(&env, &[&PROMOTE_EAST[..], &["--dry-run"]].concat()).await;
    assert!(
        dry.contains("kind: PropagationPolicy")
            && dry.contains("causeway.io/conflict-resolution: overwrite"),
        "{dry}"
    );
    assert!(
        deployments.get_opt("shop").await.unwrap().is_none(),
        "--dry-run wrote the template"
    );
    assert!(
        policies.get_opt("shop-deployment").await.unwrap().is_none(),
        "--dry-run wrote the policy"
    );

    // the member's credentials come from the hub (a Push member): no --member-kubeconfig
    let out = ok(&env, &PROMOTE_EAST).await;
    assert!(
        out.contains("created the template Deployment demo/shop on the hub from member east"),
        "{out}"
    );
    assert!(
        out.contains("created PropagationPolicy demo/shop-deployment"),
        "{out}"
    );
    let template = deployments.get("shop").await.unwrap();
    // the member's Pod template, as the member stores it (its defaults included)
    let member: Value = serde_json::from_str(
        &env.ok_in(
            "east",
            &["get", "deployment", "shop", "-n", "demo", "-o", "json"],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        template.data["spec"]["template"],
        member["spec"]["template"]
    );
    let want: Value = serde_json::from_str(SHOP).unwrap();
    assert_eq!(
        template.data["spec"]["template"]["spec"]["containers"][0]["image"],
        want["spec"]["template"]["spec"]["containers"][0]["image"]
    );
    assert_eq!(template.data["spec"]["replicas"], 3);
    assert_eq!(
        template
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::CONFLICT_RESOLUTION))
            .map(String::as_str),
        Some("overwrite")
    );
    assert!(
        !template
            .annotations()
            .contains_key("deployment.kubernetes.io/revision"),
        "the member's revision came along: {:?}",
        template.annotations()
    );
    let policy = serde_json::to_value(policies.get("shop-deployment").await.unwrap().spec).unwrap();
    assert_eq!(
        policy,
        json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"}],
            "placement": {"clusterAffinity": {"clusterNames": ["east"]}},
            "conflictResolution": "Overwrite", "preserveResourcesOnDeletion": true})
    );

    refused(
        &env,
        &PROMOTE_EAST,
        "Deployment demo/shop already exists on the hub",
    )
    .await;
    refused(
        &env,
        &[
            "promote",
            "deployment/nope",
            "-n",
            "demo",
            "--cluster",
            "east",
        ],
        "Deployment demo/nope not found in member east",
    )
    .await;
    refused(
        &env,
        &[
            "promote",
            "deployment/shop",
            "-n",
            "demo",
            "--cluster",
            "south",
        ],
        "there is no Cluster \"south\" on the hub",
    )
    .await;

    // a promote stopped between the policy and the template (here: the template
    // deleted, its member object kept by preserveResourcesOnDeletion) is finished by
    // running it again: promote's own policy is kept
    deployments
        .delete("shop", &Default::default())
        .await
        .unwrap();
    crate::mcs_support::eventually(
        "the template gone from the hub",
        crate::propagation::WAIT,
        || async {
            deployments
                .get_opt("shop")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    let out = ok(&env, &PROMOTE_EAST).await;
    assert!(
        out.contains("kept PropagationPolicy shop-deployment")
            && out
                .contains("created the template Deployment demo/shop on the hub from member east")
            && !out.contains("created PropagationPolicy"),
        "{out}"
    );
}

/// With the member's own kubeconfig (how a Pull member is reached) and --no-policy:
/// only the template is written; a policy of that name existing already refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_with_a_member_kubeconfig_and_no_policy() {
    let env = clusterset().await;
    let hub = env.hub_client().await;
    env.ok_in("west", &["apply", "-f", &env.file("shop.json", SHOP)])
        .await;
    let kc = env.kubeconfig.display().to_string();
    let policies: Api<PropagationPolicy> = Api::namespaced(hub.clone(), "demo");
    deployment_policy(&hub, "shop-deployment", "other", &[]).await;
    let args = [
        "promote",
        "deployments.apps/shop",
        "-n",
        "demo",
        "--cluster",
        "west",
        "--member-kubeconfig",
        &kc,
        "--member-context",
        "west",
    ];
    refused(
        &env,
        &args,
        "PropagationPolicy shop-deployment already exists on the hub and differs from the one promote writes: delete it, or pass --no-policy",
    )
    .await;
    let mut no_policy = args.to_vec();
    no_policy.push("--no-policy");
    let out = ok(&env, &no_policy).await;
    assert!(
        out.contains("created the template Deployment demo/shop")
            && !out.contains("created PropagationPolicy"),
        "{out}"
    );
    let spec = serde_json::to_value(policies.get("shop-deployment").await.unwrap().spec).unwrap();
    assert_eq!(
        spec["resourceSelectors"][0]["name"], "other",
        "the existing policy was changed"
    );
}
