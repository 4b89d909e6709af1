//! A CustomResourceDefinition and its custom resources propagated together, as an
//! operator's CRDs and objects are: one `kubectl apply` on the hub puts the CRD in every
//! member, then the objects of its kind; a new version of the CRD's schema reaches the
//! members, and deleting the object removes its copies. A CRD rolled out in waves keeps
//! its generations as revisions for a cluster that joins a held wave.

use crate::mcs_support::eventually;
use crate::propagation::{WAIT, fleet_of, get};

/// A namespaced CRD `<plural>.example.com` of kind `kind`, whose spec has a `size`.
fn crd(kind: &str, plural: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.example.com}}
spec:
  group: example.com
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {singular}}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
"#
    )
}

const WIDGETS: &str = r#"---
apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: widget-crd}
spec:
  resourceSelectors:
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: widgets.example.com}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: demo}
spec: {size: 3}
---
apiVersion: causeway.io/v1alpha1
kind: PropagationPolicy
metadata: {name: widgets, namespace: demo}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Widget}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_and_its_objects_propagate_together() {
    let (env, _ctl) = fleet_of(&["east", "west"]).await;
    let file = env.file("widgets.yaml", &(crd("Widget", "widgets") + WIDGETS));
    // the hub serves the kind only once its CRD is established: apply until it is
    eventually(
        "the CRD and the Widget applied on the hub",
        WAIT,
        || async {
            env.run("hub", &["apply", "-f", &file])
                .await
                .status
                .success()
                .then_some(())
        },
    )
    .await;
    for c in ["east", "west"] {
        eventually(&format!("Widget w1 in {c}"), WAIT, || async {
            let w = get(&env, c, &["widget", "w1", "-n", "demo"]).await?;
            (w.pointer("/spec/size") == Some(&3.into())).then_some(())
        })
        .await;
    }
    eventually("FullyApplied", WAIT, || async {
        let rb = get(&env, "hub", &["rb", "w1-widget", "-n", "demo"]).await?;
        let applied = crate::propagation::fully_applied(&rb);
        applied.then_some(())
    })
    .await;
    // a new generation of the object, which `causeway rollout status` waits for in
    // every cluster (no waves: all at once)
    env.ok(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "demo",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":4}}"#,
    ])
    .await;
    let args = [
        "rollout",
        "status",
        "widget/w1",
        "-n",
        "demo",
        "--timeout",
        "40s",
    ];
    let said = crate::propagation_cli::ok(&env, &args).await;
    assert!(
        said.ends_with(
            "Widget demo/w1: every cluster (2) runs template generation 2, applied and healthy\n"
        ),
        "{said}"
    );
    for c in ["east", "west"] {
        let w = get(&env, c, &["widget", "w1", "-n", "demo"])
            .await
            .expect("w1");
        assert_eq!(w.pointer("/spec/size"), Some(&4.into()), "{c}");
    }
    // the CRD's next schema reaches the members
    add_color(&env, "widgets").await;
    for c in ["east", "west"] {
        eventually(&format!("the new schema in {c}"), WAIT, || async {
            let crd = get(&env, c, &["crd", "widgets.example.com"]).await?;
            let p = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color/type";
            (crd.pointer(p) == Some(&"string".into())).then_some(())
        })
        .await;
    }
    env.ok(&["delete", "widget", "w1", "-n", "demo"]).await;
    for c in ["east", "west"] {
        eventually(&format!("Widget w1 gone from {c}"), WAIT, || async {
            get(&env, c, &["widget", "w1", "-n", "demo"])
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
}

const GADGETS_IN_WAVES: &str = r#"---
apiVersion: causeway.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: gadgets}
spec:
  resourceSelectors:
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: gadgets.example.com}
  placement:
    clusterAffinity:
      labelSelector: {matchLabels: {gadgets: "yes"}}
  rollout:
    waves:
    - {name: canary, clusterNames: [east]}
"#;

/// The CRD `<plural>.example.com`'s next schema on the hub: `spec.color` as well.
async fn add_color(env: &crate::support::Env, plural: &str) {
    let crd = format!("{plural}.example.com");
    let path = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color";
    let patch = format!(r#"[{{"op": "add", "path": "{path}", "value": {{"type": "string"}}}}]"#);
    env.ok(&["patch", "crd", &crd, "--type=json", "-p", &patch])
        .await;
}

/// Whether member `c`'s Gadget CRD has the `color` field (the second generation).
async fn has_color(env: &crate::support::Env, c: &str) -> Option<bool> {
    let crd = get(env, c, &["crd", "gadgets.example.com"]).await?;
    let p = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    Some(crd.pointer(p)?.get("color").is_some())
}

/// R.6 for a cluster-scoped template (a ClusterResourceBinding): the hub keeps its
/// generations as ControllerRevisions in causeway-system, and a cluster that joins the
/// placement while its wave is held runs the generation that wave runs, not nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scoped_template_keeps_its_revisions_for_a_held_wave() {
    let (env, _ctl) = fleet_of(&["east", "west", "north"]).await;
    for c in ["east", "west"] {
        env.ok(&["label", "cluster", c, "gadgets=yes"]).await;
    }
    let file = env.file(
        "gadgets.yaml",
        &(crd("Gadget", "gadgets") + GADGETS_IN_WAVES),
    );
    env.ok(&["apply", "-f", &file]).await;
    for c in ["east", "west"] {
        eventually(&format!("generation 1 in {c}"), WAIT, || async {
            (!has_color(&env, c).await?).then_some(())
        })
        .await;
    }
    // the canary stops taking changes (its copy labelled managed=false): generation 2
    // stays there, held from the later wave
    env.ok_in(
        "east",
        &[
            "label",
            "crd",
            "gadgets.example.com",
            "causeway.io/managed=false",
            "--overwrite",
        ],
    )
    .await;
    add_color(&env, "gadgets").await;
    eventually("the rollout held at the canary", WAIT, || async {
        let crb = get(
            &env,
            "hub",
            &["crb", "gadgets.example.com-customresourcedefinition"],
        )
        .await?;
        let held = crb
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .any(|c| c["type"] == "RolledOut" && c["status"] == "False");
        held.then_some(())
    })
    .await;
    // north joins the held wave: it runs generation 1, from the kept revision
    env.ok(&["label", "cluster", "north", "gadgets=yes"]).await;
    eventually("north runs generation 1", WAIT, || async {
        (!has_color(&env, "north").await?).then_some(())
    })
    .await;
    assert_eq!(has_color(&env, "west").await, Some(false), "west is held");
    let revisions = env
        .ok(&[
            "get",
            "controllerrevisions",
            "-n",
            "causeway-system",
            "-l",
            "causeway.io/cluster-binding=true",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await;
    assert_eq!(
        revisions,
        "gadgets.example.com-customresourcedefinition-cg1 gadgets.example.com-customresourcedefinition-cg2"
    );
}
