//! Table tests of rendering: a binding, its template and the overrides → Works.

use super::*;
use causeway_crds::federation::binding::TargetCluster;
use causeway_crds::federation::work::Work;
use serde::de::DeserializeOwned;
use serde_json::json;

fn obj<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture parses"))
}

fn cluster(name: &str) -> Arc<Cluster> {
    obj(json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"}}))
}

/// A Deployment template as the hub serves it (server-set fields included).
fn template() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "demo", "labels": {"app": "web"},
            "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "o"}],
            "finalizers": ["causeway.io/propagation"],
            "deletionGracePeriodSeconds": 30, "selfLink": "/apis/apps/v1/x",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "team": "shop",
            },
        },
        "spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}},
        "status": {"replicas": 4},
    })
}

fn spec(clusters: &[(&str, Option<i32>)]) -> BindingSpec {
    BindingSpec {
        clusters: clusters
            .iter()
            .map(|(n, r)| TargetCluster {
                name: n.to_string(),
                replicas: *r,
            })
            .collect(),
        ..BindingSpec::default()
    }
}

/// An OverridePolicy in `demo` whose rule sets the image registry, in `targets` only
/// (every cluster when empty).
fn registry(name: &str, registry: &str, targets: &[&str]) -> Arc<OverridePolicy> {
    let mut rule = json!({"overriders": {"imageOverrider": [
        {"component": "Registry", "operator": "replace", "value": registry}]}});
    if !targets.is_empty() {
        rule["targetCluster"] = json!({"clusterNames": targets});
    }
    obj(json!({"metadata": {"name": name, "namespace": "demo"}, "spec": {"overrideRules": [rule]}}))
}

struct Hub {
    template: Value,
    spec: BindingSpec,
    overrides: Vec<Arc<OverridePolicy>>,
    cluster_overrides: Vec<Arc<ClusterOverridePolicy>>,
    clusters: Vec<Arc<Cluster>>,
    interpreters: Interpreters,
}

impl Hub {
    fn new(spec: BindingSpec) -> Self {
        Hub {
            template: template(),
            spec,
            overrides: Vec::new(),
            cluster_overrides: Vec::new(),
            clusters: ["east", "west"].map(cluster).to_vec(),
            interpreters: Interpreters::default(),
        }
    }

    fn render(&self) -> Rendered {
        render(&RenderInput {
            binding_namespace: Some("demo"),
            binding_name: "web-deployment",
            spec: &self.spec,
            template: &self.template,
            overrides: &self.overrides,
            cluster_overrides: &self.cluster_overrides,
            clusters: &self.clusters,
            interpreters: &self.interpreters,
        })
    }
}

fn manifest(w: &Work) -> &Value {
    &w.spec.workload.manifests[0].0
}

fn work_of<'a>(out: &'a Rendered, cluster: &str) -> &'a Work {
    out.works
        .iter()
        .find(|w| w.labels().get(labels::CLUSTER).map(String::as_str) == Some(cluster))
        .unwrap_or_else(|| panic!("no Work for {cluster}: {out:?}"))
}

#[test]
fn one_work_per_scheduled_cluster_that_exists_named_labelled_and_finalized() {
    let out = Hub::new(spec(&[("east", None), ("gone", None), ("west", None)])).render();
    assert_eq!(out.failed, []);
    assert_eq!(out.blocked, None);
    let places: Vec<_> = out
        .works
        .iter()
        .map(|w| (w.namespace().unwrap(), w.name_any()))
        .collect();
    assert_eq!(
        places,
        [
            (
                "causeway-es-east".to_string(),
                "demo.web-deployment".to_string()
            ),
            (
                "causeway-es-west".to_string(),
                "demo.web-deployment".to_string()
            ),
        ]
    );
    let w = work_of(&out, "east");
    assert_eq!(
        w.labels(),
        &BTreeMap::from([
            (
                labels::BINDING_NAME.to_string(),
                "web-deployment".to_string()
            ),
            (labels::BINDING_NAMESPACE.to_string(), "demo".to_string()),
            (labels::CLUSTER.to_string(), "east".to_string()),
        ])
    );
    assert_eq!(w.finalizers(), [finalizers::WORK.to_string()]);
    assert_eq!(w.annotations()[annotations::PROVENANCE], r#"{"0":{}}"#);
}

#[test]
fn cluster_resource_bindings_have_no_namespace_label() {
    let mut t = template();
    t["kind"] = json!("ClusterRole");
    t["metadata"].as_object_mut().unwrap().remove("namespace");
    let spec = spec(&[("east", None)]);
    let out = render(&RenderInput {
        binding_namespace: None,
        binding_name: "web-clusterrole",
        spec: &spec,
        template: &t,
        overrides: &[],
        cluster_overrides: &[],
        clusters: &[cluster("east")],
        interpreters: &Interpreters::default(),
    });
    let w = &out.works[0];
    assert_eq!(w.name_any(), "web-clusterrole");
    assert_eq!(w.labels().get(labels::BINDING_NAMESPACE), None);
}

#[test]
fn the_manifest_is_the_template_without_server_fields_plus_the_template_generation() {
    let out = Hub::new(spec(&[("east", None)])).render();
    assert_eq!(
        manifest(&out.works[0]),
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "demo", "labels": {"app": "web"},
                "annotations": {"team": "shop", annotations::TEMPLATE_GENERATION: "3"},
            },
            "spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}},
        })
    );
    // no generation on the template: 0
    let mut hub = Hub::new(spec(&[("east", None)]));
    hub.template["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generation");
    hub.template["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let out = hub.render();
    assert_eq!(
        manifest(&out.works[0])["metadata"]["annotations"],
        json!({annotations::TEMPLATE_GENERATION: "0"})
    );
}

#[test]
fn replicas_are_the_clusters_share_when_the_template_has_replicas() {
    let out = Hub::new(spec(&[("east", Some(3)), ("west", None)])).render();
    assert_eq!(manifest(work_of(&out, "east"))["spec"]["replicas"], 3);
    assert_eq!(
        manifest(work_of(&out, "west"))["spec"]["replicas"],
        4,
        "no share: the template's"
    );
    let mut hub = Hub::new(spec(&[("east", Some(3))]));
    hub.template["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let out = hub.render();
    assert_eq!(
        manifest(&out.works[0])["spec"].get("replicas"),
        None,
        "never added"
    );
}

#[test]
fn overrides_apply_per_cluster_with_provenance() {
    let mut hub = Hub::new(spec(&[("east", None), ("west", None)]));
    hub.overrides = vec![
        registry("eu", "mirror.eu.example.com", &["west"]),
        // another namespace's policy never applies
        obj(
            json!({"metadata": {"name": "other", "namespace": "elsewhere"}, "spec": {"overrideRules": [
            {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"x": "y"}}]}}]}}),
        ),
    ];
    hub.cluster_overrides = vec![obj(
        json!({"metadata": {"name": "tier"}, "spec": {"overrideRules": [
        {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"tier": "gold"}}]}}]}}),
    )];
    let out = hub.render();
    let east = manifest(work_of(&out, "east"));
    let west = manifest(work_of(&out, "west"));
    let image = "/spec/template/spec/containers/0/image";
    assert_eq!(east.pointer(image), Some(&json!("nginx:1.27")));
    assert_eq!(
        west.pointer(image),
        Some(&json!("mirror.eu.example.com/nginx:1.27"))
    );
    assert_eq!(
        east["metadata"]["labels"],
        json!({"app": "web", "tier": "gold"})
    );
    let prov: Value =
        serde_json::from_str(&work_of(&out, "west").annotations()[annotations::PROVENANCE])
            .unwrap();
    assert_eq!(
        prov,
        json!({"0": {
            image: "OverridePolicy demo/eu rule 0 (image)",
            "/metadata/labels/tier": "ClusterOverridePolicy tier rule 0 (labels)",
        }})
    );
}

#[test]
fn two_policies_writing_one_path_are_reported_per_cluster() {
    let mut hub = Hub::new(spec(&[("east", None), ("west", None)]));
    // a registry mirror for west, and a pinned image for every cluster: the pin applies
    // after the mirror (D.28's order), so in west it overrides the mirror
    hub.overrides = vec![
        registry("eu", "mirror.eu.example.com", &["west"]),
        obj(
            json!({"metadata": {"name": "pin", "namespace": "demo"}, "spec": {"overrideRules": [
            {"overriders": {"plaintext": [{"path": "/spec/template/spec/containers/0/image",
                "operator": "replace", "value": "nginx:1.28"}]}}]}}),
        ),
    ];
    let out = hub.render();
    let said = "spec.template.spec.containers[0].image: OverridePolicy demo/pin rule 0 \
                (plaintext) overrides OverridePolicy demo/eu rule 0 (image)";
    assert_eq!(out.overlaps, vec![("west".to_string(), said.to_string())]);
    let west = work_of(&out, "west").annotations();
    assert_eq!(
        serde_json::from_str::<Vec<String>>(&west[annotations::OVERRIDE_OVERLAPS]).unwrap(),
        vec![said.to_string()]
    );
    // written when there are none too, so that one that goes leaves no stale note
    assert_eq!(
        work_of(&out, "east").annotations()[annotations::OVERRIDE_OVERLAPS],
        "[]"
    );
}

#[test]
fn an_override_that_fails_fails_that_cluster_only() {
    let mut hub = Hub::new(spec(&[("east", None), ("west", None)]));
    hub.overrides = vec![obj(
        json!({"metadata": {"name": "bad", "namespace": "demo"}, "spec": {"overrideRules": [{
        "targetCluster": {"clusterNames": ["west"]},
        "overriders": {"plaintext": [{"path": "/spec/nothing/here", "operator": "replace", "value": 1}]}}]}}),
    )];
    let out = hub.render();
    assert_eq!(out.works.len(), 1);
    work_of(&out, "east");
    assert_eq!(out.failed.len(), 1);
    let (cluster, message) = &out.failed[0];
    assert_eq!(cluster, "west");
    assert!(
        message.starts_with(
            "OverridePolicy demo/bad rule 0, plaintext[0]: cannot replace /spec/nothing/here"
        ),
        "{message}"
    );
}

#[test]
fn missing_dependent_overrides_block_every_work() {
    let mut hub = Hub::new(spec(&[("east", None)]));
    hub.spec.dependent_overrides = vec!["zeta".into(), "eu".into(), "alpha".into()];
    hub.overrides = vec![
        registry("eu", "mirror.eu.example.com", &[]),
        registry("alpha", "x.example.com", &[]),
    ];
    // alpha exists, but in another namespace
    hub.overrides[1] = {
        let mut p = (*hub.overrides[1]).clone();
        p.metadata.namespace = Some("elsewhere".into());
        Arc::new(p)
    };
    let out = hub.render();
    assert_eq!(out.works, []);
    let why = out.blocked.expect("blocked");
    assert_eq!(why.reason, DEPENDENT_OVERRIDES_MISSING);
    let why = why.message;
    assert!(why.contains("namespace demo: alpha, zeta;"), "{why}");
    // once they exist, it renders with them
    hub.overrides
        .push(registry("alpha", "x.example.com", &["none"]));
    hub.overrides
        .push(registry("zeta", "x.example.com", &["none"]));
    let out = hub.render();
    assert_eq!(out.blocked, None);
    assert_eq!(
        manifest(&out.works[0]).pointer("/spec/template/spec/containers/0/image"),
        Some(&json!("mirror.eu.example.com/nginx:1.27"))
    );
}

#[test]
fn suspension_is_per_cluster() {
    let mut s = spec(&[("east", None), ("west", None)]);
    let cases = [
        (json!(null), [false, false]),
        (json!({"dispatching": true}), [true, true]),
        (
            json!({"dispatching": false, "dispatchingOnClusters": {"clusterNames": ["west"]}}),
            [false, true],
        ),
    ];
    for (suspension, want) in cases {
        s.suspension = serde_json::from_value(suspension.clone()).unwrap();
        let out = Hub::new(s.clone()).render();
        let got = ["east", "west"].map(|c| work_of(&out, c).spec.suspend_dispatching);
        assert_eq!(got, want.map(Some), "{suspension}");
    }
}

#[test]
fn preserve_is_the_policys_or_the_templates_per_cluster() {
    let cases = [
        (None, None, [false, false]),
        (Some(true), None, [true, true]),
        (None, Some(" west , north"), [false, true]),
        (Some(false), Some("east"), [true, false]),
    ];
    for (policy, annotation, want) in cases {
        let mut hub = Hub::new(spec(&[("east", None), ("west", None)]));
        hub.spec.preserve_resources_on_deletion = policy;
        if let Some(a) = annotation {
            hub.template["metadata"]["annotations"][annotations::PRESERVE_ON_CLUSTERS] = json!(a);
        }
        let out = hub.render();
        let got = ["east", "west"].map(|c| work_of(&out, c).spec.preserve_resources_on_deletion);
        assert_eq!(got, want.map(Some), "{policy:?} {annotation:?}");
    }
}

/// F.43, G.46 ★: a dependency's copies are also kept where a workload that needs it
/// keeps its own (`preserveResourcesOnClusters`, which the detector fills from the
/// requirers), whatever the dependency's own settings say.
#[test]
fn a_dependency_is_preserved_where_its_requirers_are() {
    let mut hub = Hub::new(spec(&[("east", None), ("west", None)]));
    hub.spec.preserve_resources_on_clusters = vec!["west".into(), "north".into()];
    let out = hub.render();
    let got = ["east", "west"].map(|c| work_of(&out, c).spec.preserve_resources_on_deletion);
    assert_eq!(got, [Some(false), Some(true)]);
    // with the template's own annotation too: either keeps the copy
    hub.template["metadata"]["annotations"][annotations::PRESERVE_ON_CLUSTERS] = json!("east");
    let out = hub.render();
    let got = ["east", "west"].map(|c| work_of(&out, c).spec.preserve_resources_on_deletion);
    assert_eq!(got, [Some(true), Some(true)]);
}

#[test]
fn conflict_resolution_annotation_wins_over_the_policy() {
    use ConflictResolution::{Abort, Overwrite};
    let cases = [
        (None, None, Abort, false),
        (Some(Overwrite), None, Overwrite, false),
        (Some(Overwrite), Some("abort"), Abort, false),
        (None, Some("Overwrite"), Overwrite, false),
        (Some(Abort), Some("OVERWRITE"), Overwrite, false),
        (Some(Overwrite), Some("yes please"), Overwrite, true),
        (None, Some(""), Abort, true),
    ];
    for (policy, annotation, want, warned) in cases {
        let mut hub = Hub::new(spec(&[("east", None)]));
        hub.spec.conflict_resolution = policy;
        if let Some(a) = annotation {
            hub.template["metadata"]["annotations"][annotations::CONFLICT_RESOLUTION] = json!(a);
        }
        let out = hub.render();
        assert_eq!(
            out.works[0].spec.conflict_resolution,
            Some(want),
            "{policy:?} {annotation:?}"
        );
        assert_eq!(
            out.warnings.len(),
            usize::from(warned),
            "{:?}",
            out.warnings
        );
        if warned {
            assert!(
                out.warnings[0].contains("allowed values are overwrite and abort"),
                "{:?}",
                out.warnings
            );
        }
    }
}

#[test]
fn overrides_cannot_remove_the_template_generation() {
    let mut hub = Hub::new(spec(&[("east", None)]));
    hub.overrides = vec![obj(
        json!({"metadata": {"name": "strip", "namespace": "demo"}, "spec": {"overrideRules": [
        {"overriders": {"plaintext": [{"path": "/metadata/annotations", "operator": "remove"}]}}]}}),
    )];
    let out = hub.render();
    assert_eq!(
        manifest(&out.works[0])["metadata"]["annotations"],
        json!({annotations::TEMPLATE_GENERATION: "3"})
    );
}

/// statePreservation: a cluster that did not run the template when application failover
/// moved it away gets the preserved labels; one that did does not.
#[test]
fn preserved_state_labels_the_new_clusters_copies() {
    let mut s = spec(&[("west", Some(2)), ("east", Some(2))]);
    s.evictions = vec![causeway_crds::federation::binding::Eviction {
        cluster: "north".into(),
        reason: "unhealthy".into(),
        evicted_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ),
        template_generation: Some(3),
        preserved_label_state: BTreeMap::from([(
            "example.com/job".to_string(),
            "job-42".to_string(),
        )]),
        clusters_before_failover: vec!["north".into(), "west".into()],
    }];
    let out = Hub::new(s).render();
    let labels = |c: &str| manifest(work_of(&out, c))["metadata"]["labels"].clone();
    assert_eq!(
        labels("east"),
        json!({"app": "web", "example.com/job": "job-42"})
    );
    assert_eq!(labels("west"), json!({"app": "web"}));
    // a cluster failover's record too, its labels under the eviction's (later wins)
    let mut s = spec(&[("west", Some(2)), ("east", Some(2))]);
    s.cluster_failovers = vec![causeway_crds::federation::binding::ClusterFailover {
        cluster: "south".into(),
        reason: "failed over".into(),
        failed_over_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ),
        preserved_label_state: BTreeMap::from([
            ("example.com/job".to_string(), "job-7".to_string()),
            ("example.com/epoch".to_string(), "3".to_string()),
        ]),
        clusters_before_failover: vec!["south".into(), "east".into()],
    }];
    let out = Hub::new(s).render();
    let labels = |c: &str| manifest(work_of(&out, c))["metadata"]["labels"].clone();
    assert_eq!(
        labels("west"),
        json!({"app": "web", "example.com/job": "job-7", "example.com/epoch": "3"})
    );
    assert_eq!(labels("east"), json!({"app": "web"}));
}

#[test]
fn an_interpreted_kind_gets_its_share_where_its_interpreter_says_and_carries_the_rule() {
    use causeway_crds::federation::interpreter::{ResourceInterpreter, resolve};
    let gadgets: ResourceInterpreter = serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "ResourceInterpreter",
        "metadata": {"name": "gadgets"},
        "spec": {"target": {"apiVersion": "example.com/v1", "kind": "Gadget"},
                 "replicas": {"path": "/spec/workers/count"},
                 "health": {"healthy": "object.status.ready"}}}))
    .unwrap();
    let mut hub = Hub::new(spec(&[("east", Some(3)), ("west", Some(1))]));
    hub.template = json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "demo", "generation": 1},
        "spec": {"replicas": 9, "workers": {"count": 4}},
    });
    hub.interpreters = resolve(&[&gadgets]).0;
    let out = hub.render();
    for (c, n) in [("east", 3), ("west", 1)] {
        let w = work_of(&out, c);
        let m = manifest(w);
        assert_eq!(m.pointer("/spec/workers/count"), Some(&json!(n)), "{c}");
        // `spec.replicas` is not this kind's replica count: left as the template has it
        assert_eq!(m.pointer("/spec/replicas"), Some(&json!(9)), "{c}");
        assert_eq!(w.spec.interpretations.len(), 1);
        assert_eq!(
            w.spec.interpretations[0].healthy.as_deref(),
            Some("object.status.ready")
        );
    }
    // other kinds carry nothing
    let plain = Hub::new(spec(&[("east", Some(3))])).render();
    assert!(work_of(&plain, "east").spec.interpretations.is_empty());
    // an interpreter broken by an edit: nothing rendered (the Works stay), rather than
    // the defaults, which would give every cluster the whole count
    let mut broken = gadgets;
    broken.spec.replicas.as_mut().unwrap().path = "spec.workers.count".into();
    hub.interpreters = resolve(&[&broken]).0;
    let out = hub.render();
    assert_eq!(out.works, []);
    let why = out.blocked.expect("blocked");
    assert_eq!(why.reason, INTERPRETER_INVALID);
    assert!(
        why.message.starts_with("ResourceInterpreter gadgets is invalid: spec.replicas.path")
            && why.message.ends_with("nothing is rendered for Gadget until it is fixed (or every interpreter of the kind is deleted): the members keep what they run"),
        "{}",
        why.message
    );
}
