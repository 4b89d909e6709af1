//! Table tests of the pure detector: fixtures as JSON, one hub state per case.

use std::collections::HashMap;

use super::*;
use causeway_crds::well_known::labels;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn obj<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn t(s: i64) -> Time {
    Time(jiff::Timestamp::from_second(s).unwrap())
}

fn deployment(name: &str, replicas: i64) -> Arc<DynamicObject> {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "web", "uid": format!("uid-{name}"),
                     "resourceVersion": "7", "labels": {"app": name}},
        "spec": {"replicas": replicas}
    }))
}

fn cluster(name: &str, extra: Value) -> Arc<Cluster> {
    let mut c = json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"}});
    if let Value::Object(m) = extra {
        c["spec"].as_object_mut().unwrap().extend(m);
    }
    obj(c)
}

fn fleet() -> Vec<Arc<Cluster>> {
    ["a", "b", "c"].map(|n| cluster(n, json!({}))).to_vec()
}

fn pp(name: &str, kind: &str, extra: Value) -> Arc<PropagationPolicy> {
    let mut spec = json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": kind}]});
    if let Value::Object(m) = extra {
        spec.as_object_mut().unwrap().extend(m);
    }
    obj(json!({"metadata": {"name": name, "namespace": "web"}, "spec": spec}))
}

/// Runs the detector with no ClusterPropagationPolicies nor ClusterResourceBindings.
fn run(
    templates: &[Arc<DynamicObject>],
    policies: &[Arc<PropagationPolicy>],
    clusters: &[Arc<Cluster>],
    bindings: &[Arc<ResourceBinding>],
) -> Desired {
    run_seen(templates, policies, clusters, bindings, &|_| true)
}

/// [`run`] with only the kinds `seen` says are listed.
fn run_seen(
    templates: &[Arc<DynamicObject>],
    policies: &[Arc<PropagationPolicy>],
    clusters: &[Arc<Cluster>],
    bindings: &[Arc<ResourceBinding>],
    seen: &dyn Fn(&ResourceReference) -> bool,
) -> Desired {
    desired(
        templates,
        policies,
        &[],
        clusters,
        bindings,
        &[],
        &HashMap::new(),
        &t(100),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        seen,
    )
}

fn names(clusters: &[TargetCluster]) -> Vec<String> {
    clusters.iter().map(|c| c.name.clone()).collect()
}

fn scheduled(status: &Option<BindingStatus>) -> &Condition {
    let conds = &status.as_ref().unwrap().conditions;
    conds
        .iter()
        .find(|c| c.type_ == conditions::SCHEDULED)
        .unwrap()
}

#[test]
fn deployment_claimed_by_a_policy_is_duplicated_to_every_cluster() {
    let d = run(
        &[deployment("api", 2)],
        &[pp("all", "Deployment", json!({}))],
        &fleet(),
        &[],
    );
    assert_eq!(d.bindings.len(), 1, "{d:?}");
    let b = &d.bindings[0];
    assert_eq!(b.metadata.name.as_deref(), Some("api-deployment"));
    assert_eq!(b.metadata.namespace.as_deref(), Some("web"));
    let want_labels = BTreeMap::from([
        (labels::POLICY_NAME.to_string(), "all".to_string()),
        (labels::POLICY_NAMESPACE.to_string(), "web".to_string()),
    ]);
    assert_eq!(b.metadata.labels.as_ref(), Some(&want_labels));
    let spec = &b.spec.0;
    assert_eq!(
        spec.resource,
        ResourceReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("web".into()),
            name: "api".into(),
            uid: Some("uid-api".into()),
            resource_version: None,
        }
    );
    assert_eq!(spec.replicas, Some(2));
    let want: Vec<(String, Option<i32>)> = ["a", "b", "c"]
        .iter()
        .map(|n| (n.to_string(), Some(2)))
        .collect();
    let got: Vec<(String, Option<i32>)> = spec
        .clusters
        .iter()
        .map(|c| (c.name.clone(), c.replicas))
        .collect();
    assert_eq!(got, want);
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "Success")
    );
    assert_eq!(cond.last_transition_time, t(100));
    assert!(d.delete_bindings.is_empty() && d.invalid_policies.is_empty());
}

#[test]
fn configmap_has_no_replicas() {
    let cm = obj(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "web"}, "data": {"k": "v"}
    }));
    let policy = obj(json!({
        "metadata": {"name": "cm", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["b"]}}}
    }));
    let d = run(&[cm], &[policy], &fleet(), &[]);
    let spec = &d.bindings[0].spec.0;
    assert_eq!(
        d.bindings[0].metadata.name.as_deref(),
        Some("settings-configmap")
    );
    assert_eq!(spec.replicas, None);
    assert_eq!(names(&spec.clusters), ["b"]);
    assert_eq!(spec.clusters[0].replicas, None);
    assert!(
        spec.placement.cluster_affinity.is_some(),
        "placement copied"
    );
}

#[test]
fn cluster_scoped_template_gets_a_cluster_resource_binding() {
    let role = obj(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:reader", "uid": "r1"}, "rules": []
    }));
    let cpp: Arc<ClusterPropagationPolicy> = obj(json!({
        "metadata": {"name": "roles"},
        "spec": {"resourceSelectors": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}]}
    }));
    let d = desired(
        &[role],
        &[],
        &[cpp],
        &fleet(),
        &[],
        &[],
        &HashMap::new(),
        &t(1),
        &mut evictions::Evictions::default(),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    assert!(d.bindings.is_empty());
    assert_eq!(d.cluster_bindings.len(), 1);
    let b = &d.cluster_bindings[0];
    assert_eq!(
        b.metadata.name.as_deref(),
        Some("system.reader-clusterrole")
    );
    assert_eq!(b.metadata.namespace, None);
    let want = BTreeMap::from([(labels::POLICY_NAME.to_string(), "roles".to_string())]);
    assert_eq!(b.metadata.labels.as_ref(), Some(&want));
    assert_eq!(names(&b.spec.0.clusters), ["a", "b", "c"]);
}

#[test]
fn tainted_cluster_is_rejected_with_its_reason() {
    let mut clusters = fleet();
    clusters.push(cluster(
        "d",
        json!({"taints": [{"key": "cluster.causeway.io/not-ready", "effect": "NoSchedule"}]}),
    ));
    let d = run(
        &[deployment("api", 1)],
        &[pp("all", "Deployment", json!({}))],
        &clusters,
        &[],
    );
    let b = &d.bindings[0];
    assert_eq!(names(&b.spec.0.clusters), ["a", "b", "c"]);
    let reasons = &b.status.as_ref().unwrap().scheduling_reasons;
    assert_eq!(reasons.len(), 1);
    assert_eq!(reasons[0].cluster, "d");
    assert_eq!(
        reasons[0].reason,
        "taint cluster.causeway.io/not-ready:NoSchedule not tolerated"
    );
}

/// J.58: a cluster that goes not-ready (tainted NoSchedule by the registry) keeps what
/// is already there; only a NoExecute taint takes it away.
#[test]
fn a_noschedule_taint_keeps_what_is_already_placed() {
    let policy = pp("all", "Deployment", json!({}));
    let before = run(
        &[deployment("api", 1)],
        std::slice::from_ref(&policy),
        &fleet(),
        &[],
    );
    let existing: Vec<Arc<ResourceBinding>> =
        before.bindings.iter().cloned().map(Arc::new).collect();
    let taint = |effect: &str| {
        let mut clusters = fleet();
        clusters[2] = cluster(
            "c",
            json!({"taints": [{"key": "cluster.causeway.io/not-ready", "effect": effect}]}),
        );
        clusters
    };
    let d = run(
        &[deployment("api", 1)],
        std::slice::from_ref(&policy),
        &taint("NoSchedule"),
        &existing,
    );
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b", "c"]);
    // a new workload does not go there
    let d = run(
        &[deployment("api", 1), deployment("web", 1)],
        std::slice::from_ref(&policy),
        &taint("NoSchedule"),
        &existing,
    );
    let web = d
        .bindings
        .iter()
        .find(|b| b.name_any() == "web-deployment")
        .unwrap();
    assert_eq!(names(&web.spec.0.clusters), ["a", "b"]);
    let d = run(
        &[deployment("api", 1)],
        &[policy],
        &taint("NoExecute"),
        &existing,
    );
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b"]);
}

#[test]
fn no_cluster_fits_and_scheduler_errors_are_scheduled_false() {
    let only_x = pp(
        "x",
        "Deployment",
        json!({"placement": {"clusterAffinity": {"clusterNames": ["x"]}}}),
    );
    let d = run(&[deployment("api", 1)], &[only_x], &fleet(), &[]);
    let b = &d.bindings[0];
    assert!(b.spec.0.clusters.is_empty());
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "NoClusterFit")
    );
    assert_eq!(b.status.as_ref().unwrap().scheduling_reasons.len(), 3);

    // an invalid placement keeps the clusters already scheduled and says what to fix
    let existing = run(
        &[deployment("api", 1)],
        &[pp("all", "Deployment", json!({}))],
        &fleet(),
        &[],
    );
    let bad = pp(
        "all",
        "Deployment",
        json!({"placement": {"clusterAffinity": {"clusterNames": ["a"]},
                             "clusterAffinities": [{"affinityName": "g"}]}}),
    );
    let previous = Arc::new(existing.bindings[0].clone());
    let d = run(&[deployment("api", 1)], &[bad], &fleet(), &[previous]);
    let b = &d.bindings[0];
    assert_eq!(names(&b.spec.0.clusters), ["a", "b", "c"]);
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "SchedulerError")
    );
    assert!(
        cond.message.contains("clusterAffinities"),
        "{}",
        cond.message
    );
    // the template scaled meanwhile: the kept clusters of a Duplicated placement run
    // the new count (a Divided one keeps its shares until it can divide again)
    let bad = pp(
        "all",
        "Deployment",
        json!({"placement": {"clusterAffinity": {"clusterNames": ["a"]},
                             "clusterAffinities": [{"affinityName": "g"}]}}),
    );
    let d = run(
        &[deployment("api", 5)],
        &[bad],
        &fleet(),
        &[Arc::new(existing.bindings[0].clone())],
    );
    let kept: Vec<Option<i32>> = d.bindings[0]
        .spec
        .0
        .clusters
        .iter()
        .map(|t| t.replicas)
        .collect();
    assert_eq!(kept, [Some(5), Some(5), Some(5)]);
}

#[test]
fn sticky_claim_is_kept_against_higher_priority_without_preemption() {
    let low = pp("low", "Deployment", json!({"priority": 1}));
    let first = run(
        &[deployment("api", 1)],
        std::slice::from_ref(&low),
        &fleet(),
        &[],
    );
    let existing = Arc::new(first.bindings[0].clone());
    let policy_of = |d: &Desired| {
        let labels = d.bindings[0].metadata.labels.clone().unwrap_or_default();
        labels.get(labels::POLICY_NAME).cloned()
    };
    let high = pp("high", "Deployment", json!({"priority": 9}));
    let d = run(
        &[deployment("api", 1)],
        &[low.clone(), high],
        &fleet(),
        std::slice::from_ref(&existing),
    );
    assert_eq!(policy_of(&d).as_deref(), Some("low"));
    // with preemption the higher priority takes it over
    let preempting = pp(
        "high",
        "Deployment",
        json!({"priority": 9, "preemption": "Always"}),
    );
    let d = run(
        &[deployment("api", 1)],
        &[low, preempting],
        &fleet(),
        &[existing],
    );
    assert_eq!(policy_of(&d).as_deref(), Some("high"));
}

#[test]
fn deleted_template_has_its_binding_deleted_and_an_unclaimed_one_is_kept_frozen() {
    let policy = pp("all", "Deployment", json!({}));
    let first = run(
        &[deployment("api", 1), deployment("web", 1)],
        std::slice::from_ref(&policy),
        &fleet(),
        &[],
    );
    let existing: Vec<Arc<ResourceBinding>> =
        first.bindings.iter().cloned().map(Arc::new).collect();
    // "web" is gone from the hub
    let d = run(&[deployment("api", 1)], &[policy], &fleet(), &existing);
    assert_eq!(d.bindings.len(), 1);
    assert_eq!(
        d.delete_bindings,
        [("web".to_string(), "web-deployment".to_string())]
    );
    // no policy claims anything any more (G.47): the template that is still there keeps
    // its binding, frozen with Scheduled=False PolicyRemoved and the same clusters; the
    // gone template's binding goes
    let d = run(&[deployment("api", 1)], &[], &fleet(), &existing);
    assert_eq!(names_of(&d.bindings), ["api-deployment"]);
    assert_eq!(d.bindings[0].spec.clusters, existing[0].spec.clusters);
    let scheduled = &d.bindings[0].status.as_ref().unwrap().conditions[0];
    assert_eq!(
        (scheduled.status.as_str(), scheduled.reason.as_str()),
        ("False", conditions::REASON_POLICY_REMOVED)
    );
    assert!(scheduled.message.contains("kept"), "{}", scheduled.message);
    assert_eq!(
        d.delete_bindings,
        [("web".to_string(), "web-deployment".to_string())]
    );
    // a template being deleted: no binding, and its binding is left alone
    let mut deleting = (*deployment("api", 1)).clone();
    deleting.metadata.deletion_timestamp = Some(t(5));
    let d = run(
        &[Arc::new(deleting), deployment("web", 1)],
        &[pp("all", "Deployment", json!({}))],
        &fleet(),
        &existing,
    );
    assert_eq!(names_of(&d.bindings), ["web-deployment"]);
    assert!(d.delete_bindings.is_empty(), "{:?}", d.delete_bindings);
}

fn names_of(bindings: &[ResourceBinding]) -> Vec<String> {
    bindings.iter().map(|b| b.name_any()).collect()
}

#[test]
fn invalid_policy_claims_nothing_and_is_reported() {
    let invalid: Arc<PropagationPolicy> = obj(json!({
        "metadata": {"name": "bad", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": ""}]}
    }));
    let d = run(&[deployment("api", 1)], &[invalid], &fleet(), &[]);
    assert!(d.bindings.is_empty());
    assert_eq!(d.invalid_policies.len(), 1);
    let (id, err) = &d.invalid_policies[0];
    assert_eq!(*id, PolicyId::namespaced("web", "bad"));
    assert!(
        err.to_string().contains("spec.resourceSelectors[0].kind"),
        "{err}"
    );
}

#[test]
fn late_joining_matching_cluster_appears_in_spec_clusters() {
    let prod = pp(
        "prod",
        "Deployment",
        json!({"placement": {"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}}}),
    );
    let labelled = |name: &str| -> Arc<Cluster> {
        obj(
            json!({"metadata": {"name": name, "labels": {"env": "prod"}},
                   "spec": {"syncMode": "Push"}}),
        )
    };
    let mut clusters = fleet();
    clusters.push(labelled("p1"));
    let first = run(
        &[deployment("api", 1)],
        std::slice::from_ref(&prod),
        &clusters,
        &[],
    );
    assert_eq!(names(&first.bindings[0].spec.0.clusters), ["p1"]);
    clusters.push(labelled("p2"));
    let existing = Arc::new(first.bindings[0].clone());
    let (templates, policies) = ([deployment("api", 1)], [prod]);
    let d = desired(
        &templates,
        &policies,
        &[],
        &clusters,
        &[existing],
        &[],
        &HashMap::new(),
        &t(200),
        &mut evictions::Evictions::default(),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["p1", "p2"]);
    // Scheduled stayed True, so its transition time is kept
    assert_eq!(
        scheduled(&d.bindings[0].status).last_transition_time,
        t(100)
    );
}

#[test]
fn template_without_a_name_is_reported() {
    let nameless = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"namespace": "web"}}));
    let d = run(
        &[nameless],
        &[pp("all", "Deployment", json!({}))],
        &fleet(),
        &[],
    );
    assert!(d.bindings.is_empty());
    assert_eq!(d.invalid_templates.len(), 1);
    assert!(d.invalid_templates[0].to_string().contains("metadata.name"));
}

fn using(name: &str, config: &str, secret: &str) -> Arc<DynamicObject> {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "web", "uid": format!("uid-{name}")},
        "spec": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": secret}}]}],
            "volumes": [{"name": "v", "configMap": {"name": config}}]
        }}}
    }))
}

fn core(kind: &str, name: &str) -> Arc<DynamicObject> {
    obj(json!({"apiVersion": "v1", "kind": kind,
               "metadata": {"name": name, "namespace": "web", "uid": format!("uid-{name}")}}))
}

fn placed(names: &[&str]) -> Value {
    json!({"propagateDeps": true, "placement": {"clusterAffinity": {"clusterNames": names}}})
}

/// I.56–57: the ConfigMap and Secret a Deployment uses get attached bindings that go
/// where their requirers go (the union), with requiredBy; the most permissive conflict
/// setting wins; a dependency missing on the hub is skipped until it exists; a
/// dependency claimed by its own policy keeps it (F.43 ★); when the requirers go, the
/// attached binding is deleted.
/// A requirer whose kind is not listed yet (a restart whose Deployment list is slow,
/// discovery failing) is not in the round: its dependencies keep their bindings and
/// clusters (the hub would otherwise withdraw its ConfigMaps, Secrets and PVCs from
/// every member), and follow it again once its kind is seen.
#[test]
fn dependencies_of_a_requirer_not_listed_yet_stay() {
    let templates = [
        using("api", "shared", "api-secret"),
        core("ConfigMap", "shared"),
        core("Secret", "api-secret"),
    ];
    let policy: Arc<PropagationPolicy> = obj(
        json!({"metadata": {"name": "api", "namespace": "web"}, "spec": {
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}],
        "propagateDeps": true, "placement": {"clusterAffinity": {"clusterNames": ["a", "b"]}}}}),
    );
    let before = run(&templates, std::slice::from_ref(&policy), &fleet(), &[]);
    let existing: Vec<Arc<ResourceBinding>> =
        before.bindings.iter().cloned().map(Arc::new).collect();
    // the Deployments are not listed: no Deployment template this round
    let unlisted = |r: &ResourceReference| r.kind != "Deployment";
    let d = run_seen(
        &templates[1..],
        std::slice::from_ref(&policy),
        &fleet(),
        &existing,
        &unlisted,
    );
    for dep in ["shared-configmap", "api-secret-secret"] {
        assert!(
            !d.delete_bindings.iter().any(|k| k.1 == dep),
            "{dep} withdrawn: {:?}",
            d.delete_bindings
        );
        let b = d.bindings.iter().find(|b| b.name_any() == dep).unwrap();
        assert_eq!(names(&b.spec.0.clusters), ["a", "b"], "{dep}");
        assert_eq!(b.spec.0.required_by[0].name, "api-deployment");
    }
    // the requirer's own binding is the hub's to keep (its kind is not seen)
    assert!(d.delete_bindings.iter().any(|k| k.1 == "api-deployment"));
    // a dependency being deleted on the hub is not kept
    let mut doomed = (*templates[1]).clone();
    doomed.metadata.deletion_timestamp = Some(t(90));
    let deleting = [Arc::new(doomed), templates[2].clone()];
    let d = run_seen(
        &deleting,
        std::slice::from_ref(&policy),
        &fleet(),
        &existing,
        &unlisted,
    );
    // (its binding is left to the hub's deletion of the template: not made again)
    let made = |name: &str| d.bindings.iter().any(|b| b.name_any() == name);
    assert!(!made("shared-configmap") && made("api-secret-secret"));
    // once listed, and gone for real, its dependencies go
    let gone = run(
        &templates[1..],
        std::slice::from_ref(&policy),
        &fleet(),
        &existing,
    );
    assert!(
        gone.delete_bindings
            .iter()
            .any(|k| k.1 == "shared-configmap")
    );
}

#[test]
fn dependencies_follow_their_workloads() {
    let templates = [
        using("api", "shared", "api-secret"),
        using("web", "shared", "missing"),
        core("ConfigMap", "shared"),
        core("Secret", "api-secret"),
    ];
    let by_name_policy = |name: &str, extra: Value| -> Arc<PropagationPolicy> {
        let mut spec = json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}]});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        obj(json!({"metadata": {"name": name, "namespace": "web"}, "spec": spec}))
    };
    let mut web_extra = placed(&["b", "c"]);
    web_extra["conflictResolution"] = json!("Overwrite");
    let policies = vec![
        by_name_policy("api", placed(&["a", "b"])),
        by_name_policy("web", web_extra),
    ];
    let d = run(&templates, &policies, &fleet(), &[]);
    let by_name: BTreeMap<String, &ResourceBinding> =
        d.bindings.iter().map(|b| (b.name_any(), b)).collect();
    assert_eq!(
        by_name.keys().collect::<Vec<_>>(),
        [
            "api-deployment",
            "api-secret-secret",
            "shared-configmap",
            "web-deployment"
        ]
    );
    let shared = &by_name["shared-configmap"].spec.0;
    assert_eq!(names(&shared.clusters), ["a", "b", "c"]);
    let requirers: Vec<&str> = shared.required_by.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(requirers, ["api-deployment", "web-deployment"]);
    assert_eq!(
        shared.conflict_resolution,
        Some(causeway_crds::federation::ConflictResolution::Overwrite)
    );
    assert!(
        by_name["shared-configmap"].metadata.labels.is_none(),
        "no policy claims it"
    );
    let secret = &by_name["api-secret-secret"].spec.0;
    assert_eq!(names(&secret.clusters), ["a", "b"]);
    assert_eq!(secret.conflict_resolution, None);

    // a policy of its own for the ConfigMap: it is claimed, not attached
    let own = obj(
        json!({"metadata": {"name": "cm", "namespace": "web"}, "spec": {
        "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "shared"}],
        "placement": {"clusterAffinity": {"clusterNames": ["c"]}}}}),
    );
    let mut with_own = policies.clone();
    with_own.push(own);
    let d2 = run(&templates, &with_own, &fleet(), &[]);
    let shared = d2
        .bindings
        .iter()
        .find(|b| b.name_any() == "shared-configmap")
        .unwrap();
    // still its policy's, with its policy's settings, and also where api and web go
    // (I.56): its own cluster and theirs
    assert_eq!(
        shared.metadata.labels.as_ref(),
        Some(&PolicyId::namespaced("web", "cm").labels())
    );
    assert_eq!(shared.spec.conflict_resolution, None);
    assert_eq!(shared.spec.required_by.len(), 2);
    assert_eq!(names(&shared.spec.clusters), ["a", "b", "c"]);

    // the ConfigMap's own policy goes while api and web still need it: it keeps the
    // clusters it had (G.47) and goes on following them (rendered: Scheduled=True)
    let existing2: Vec<Arc<ResourceBinding>> = d2.bindings.iter().cloned().map(Arc::new).collect();
    let d4 = run(&templates, &policies, &fleet(), &existing2);
    let shared = d4
        .bindings
        .iter()
        .find(|b| b.name_any() == "shared-configmap")
        .unwrap();
    assert_eq!(names(&shared.spec.clusters), ["a", "b", "c"]);
    assert_eq!(shared.spec.required_by.len(), 2);
    assert_eq!(scheduled(&shared.status).status, "True");
    // api's policy goes: api is frozen where it is, and its dependencies stay with it
    let d5 = run(&templates, &policies[1..], &fleet(), &existing2);
    let secret = d5
        .bindings
        .iter()
        .find(|b| b.name_any() == "api-secret-secret")
        .unwrap();
    assert_eq!(names(&secret.spec.clusters), ["a", "b"]);
    assert!(
        !d5.delete_bindings
            .iter()
            .any(|k| k.1 == "api-secret-secret")
    );

    // the requirers go: the attached bindings are deleted, not frozen
    let existing: Vec<Arc<ResourceBinding>> = d.bindings.iter().cloned().map(Arc::new).collect();
    let d3 = run(&templates[2..], &[], &fleet(), &existing);
    assert!(d3.bindings.is_empty(), "{:?}", names_of(&d3.bindings));
    let mut gone = d3.delete_bindings.clone();
    gone.sort();
    assert_eq!(
        gone.iter().map(|k| k.1.as_str()).collect::<Vec<_>>(),
        [
            "api-deployment",
            "api-secret-secret",
            "shared-configmap",
            "web-deployment"
        ]
    );
}

/// A dependency with a policy of its own (F.43 ★, G.47, I.56): Deployment web
/// (propagateDeps) on [a] mounts ConfigMap cfg, which ClusterPropagationPolicy configs
/// places on [a, b, c]. Deleting configs leaves cfg where it is (the detector does not
/// shrink it to web's [a], which would delete the copies in b and c), and while configs
/// places cfg on [c] only, web's cluster a gets it too.
#[test]
fn a_dependency_with_its_own_policy_keeps_its_clusters_and_follows_its_requirer() {
    let templates = [using("web", "cfg", "none"), core("ConfigMap", "cfg")];
    let web: Arc<PropagationPolicy> = obj(json!({"metadata": {"name": "web", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                 "propagateDeps": true,
                 "placement": {"clusterAffinity": {"clusterNames": ["a"]}}}}));
    let configs = |on: &[&str]| -> Arc<ClusterPropagationPolicy> {
        obj(json!({"metadata": {"name": "configs"},
            "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                     "placement": {"clusterAffinity": {"clusterNames": on}}}}))
    };
    let go = |cpps: &[Arc<ClusterPropagationPolicy>], bindings: &[Arc<ResourceBinding>]| {
        desired(
            &templates,
            std::slice::from_ref(&web),
            cpps,
            &fleet(),
            bindings,
            &[],
            &HashMap::new(),
            &t(100),
            &mut evictions::Evictions::new(1e9, 1e9),
            &|_, _| true,
            &Interpreters::default(),
            &|_| true,
        )
    };
    let cfg = |d: &Desired| -> ResourceBinding {
        assert!(
            !d.delete_bindings.iter().any(|k| k.1 == "cfg-configmap"),
            "cfg withdrawn: {:?}",
            d.delete_bindings
        );
        d.bindings
            .iter()
            .find(|b| b.name_any() == "cfg-configmap")
            .cloned()
            .expect("cfg's binding")
    };
    let existing = |d: &Desired| -> Vec<Arc<ResourceBinding>> {
        d.bindings.iter().cloned().map(Arc::new).collect()
    };

    // A) configs places cfg everywhere; web needs it in a
    let d1 = go(&[configs(&["a", "b", "c"])], &[]);
    let b1 = cfg(&d1);
    assert_eq!(names(&b1.spec.clusters), ["a", "b", "c"]);
    assert_eq!(
        b1.metadata.labels.as_ref(),
        Some(&PolicyId::cluster("configs").labels())
    );
    // configs is deleted: cfg keeps b and c (nothing is withdrawn from them) and
    // stays where web is, round after round
    let mut now = existing(&d1);
    for round in 0..3 {
        let d = go(&[], &now);
        let b = cfg(&d);
        assert_eq!(names(&b.spec.clusters), ["a", "b", "c"], "round {round}");
        let requirers: Vec<&str> = b.spec.required_by.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(requirers, ["web-deployment"], "round {round}");
        now = existing(&d);
    }
    // web goes too: cfg's binding is kept, frozen where it is (G.47)
    let gone = desired(
        &templates[1..],
        &[],
        &[],
        &fleet(),
        &now,
        &[],
        &HashMap::new(),
        &t(100),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    let b = cfg(&gone);
    assert_eq!(names(&b.spec.clusters), ["a", "b", "c"]);
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", conditions::REASON_POLICY_REMOVED)
    );

    // B) configs places cfg in c only: web's a gets it as well (I.56)
    let d = go(&[configs(&["c"])], &[]);
    let b = cfg(&d);
    assert_eq!(names(&b.spec.clusters), ["a", "c"]);
    assert_eq!(
        b.metadata.labels.as_ref(),
        Some(&PolicyId::cluster("configs").labels())
    );
    assert_eq!(scheduled(&b.status).status, "True");
    // web leaves: cfg is where configs places it
    let d = desired(
        &templates[1..],
        &[],
        &[configs(&["c"])],
        &fleet(),
        &existing(&d),
        &[],
        &HashMap::new(),
        &t(100),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    let b = cfg(&d);
    assert_eq!(names(&b.spec.clusters), ["c"]);
    assert!(b.spec.required_by.is_empty());
}

/// Whether each Work rendered from `b` (the binding of `template`) keeps its member
/// copy when deleted, by cluster.
fn preserved_by_render(b: &ResourceBinding, template: &DynamicObject) -> Vec<(String, bool)> {
    use crate::propagation::render::{RenderInput, render};
    let value = serde_json::to_value(template).unwrap();
    let out = render(&RenderInput {
        binding_namespace: b.metadata.namespace.as_deref(),
        binding_name: &b.name_any(),
        spec: &b.spec.0,
        template: &value,
        overrides: &[],
        cluster_overrides: &[],
        clusters: &fleet(),
        interpreters: &Interpreters::default(),
    });
    let mut got: Vec<(String, bool)> = out
        .works
        .iter()
        .map(|w| {
            (
                w.labels().get(labels::CLUSTER).cloned().unwrap_or_default(),
                w.spec.preserve_resources_on_deletion == Some(true),
            )
        })
        .collect();
    got.sort();
    got
}

/// F.43, G.46 ★: Deployment web (propagateDeps) on [a, c], annotated
/// causeway.io/preserve-resources-on-clusters: c, mounts PVC data and ConfigMap cfg. The
/// dependencies' Works in c keep their copies too when deleted (the Deployment's copy
/// there is kept when it is deleted: its PVC and ConfigMap must not go under it); in a
/// they do not. Also for a dependency a policy of its own places (on b), and while the
/// Deployment's kind is not listed.
#[test]
fn a_dependency_is_kept_where_its_requirer_keeps_its_copies() {
    let web = obj::<DynamicObject>(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "web", "uid": "uid-web",
                     "annotations": {annotations::PRESERVE_ON_CLUSTERS: "c"}},
        "spec": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "v", "configMap": {"name": "cfg"}},
                        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
        }}}
    }));
    let cfg = core("ConfigMap", "cfg");
    let data = core("PersistentVolumeClaim", "data");
    let templates = [web, cfg.clone(), data.clone()];
    let policy = pp("web", "Deployment", placed(&["a", "c"]));
    let d = run(&templates, std::slice::from_ref(&policy), &fleet(), &[]);
    let find = |d: &Desired, name: &str| -> ResourceBinding {
        d.bindings
            .iter()
            .find(|b| b.name_any() == name)
            .cloned()
            .unwrap_or_else(|| panic!("no binding {name}: {:?}", names_of(&d.bindings)))
    };
    let want = |a: bool, b: Option<bool>, c: bool| -> Vec<(String, bool)> {
        let mut v = vec![("a".to_string(), a)];
        if let Some(b) = b {
            v.push(("b".to_string(), b));
        }
        v.push(("c".to_string(), c));
        v
    };
    for (name, t) in [
        ("cfg-configmap", &cfg),
        ("data-persistentvolumeclaim", &data),
    ] {
        let b = find(&d, name);
        assert_eq!(
            preserved_by_render(&b, t),
            want(false, None, true),
            "{name}"
        );
    }
    // the Deployment's kind is not listed a round: what its bindings asked for stays
    let existing: Vec<Arc<ResourceBinding>> = d.bindings.iter().cloned().map(Arc::new).collect();
    let unlisted = |r: &ResourceReference| r.kind != "Deployment";
    let later = run_seen(
        &templates[1..],
        std::slice::from_ref(&policy),
        &fleet(),
        &existing,
        &unlisted,
    );
    let b = find(&later, "cfg-configmap");
    assert_eq!(preserved_by_render(&b, &cfg), want(false, None, true));
    // the ConfigMap has a policy of its own (on b, copies not kept): in c, where web
    // keeps its copy, the ConfigMap's is kept too
    let own = obj(
        json!({"metadata": {"name": "cm", "namespace": "web"}, "spec": {
        "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg"}],
        "placement": {"clusterAffinity": {"clusterNames": ["b"]}}}}),
    );
    let d = run(&templates, &[policy.clone(), own], &fleet(), &[]);
    let b = find(&d, "cfg-configmap");
    assert_eq!(
        preserved_by_render(&b, &cfg),
        want(false, Some(false), true)
    );
    // web's policy keeps copies everywhere: so does the dependency, where web is
    let mut everywhere = placed(&["a", "c"]);
    everywhere["preserveResourcesOnDeletion"] = json!(true);
    let d = run(
        &templates,
        &[pp("web", "Deployment", everywhere)],
        &fleet(),
        &[],
    );
    let b = find(&d, "data-persistentvolumeclaim");
    assert_eq!(preserved_by_render(&b, &data), want(true, None, true));
}

/// J.61: failover.cluster with nowhere else to go keeps the workload on the failed
/// cluster, and the Scheduled condition says so (it used to read as any schedule).
#[test]
fn failover_with_nowhere_to_go_says_it_stays() {
    let policy = pp(
        "only-c",
        "Deployment",
        json!({"placement": {"clusterAffinity": {"clusterNames": ["c"]}}, "failover": {"cluster": {}}}),
    );
    let apps = [deployment("a1", 1)];
    let mut clusters = fleet();
    clusters[2] = obj(
        json!({"metadata": {"name": "c"}, "spec": {"syncMode": "Push"},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ClusterNotReady",
                                    "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}),
    );
    let round = |clusters: &[Arc<Cluster>]| {
        desired(
            &apps,
            std::slice::from_ref(&policy),
            &[],
            clusters,
            &[],
            &[],
            &HashMap::new(),
            &t(1000),
            &mut evictions::Evictions::new(1e9, 1e9),
            &|_, _| true,
            &Interpreters::default(),
            &|_| true,
        )
    };
    let d = round(&clusters);
    let b = &d.bindings[0];
    assert_eq!(names(&b.spec.0.clusters), ["c"]);
    let s = scheduled(&b.status);
    assert_eq!(s.status, "True");
    assert!(
        s.message.ends_with(
            "; failover.cluster would move it from c, but no other cluster fits: it stays"
        ),
        "{}",
        s.message
    );
    // c Ready: nothing to say
    let d = round(&fleet());
    let s = scheduled(&d.bindings[0].status);
    assert!(!s.message.contains(failover::NOWHERE_ELSE), "{}", s.message);
}

/// J.59, J.63: with failover.cluster, three workloads on a cluster NotReady for long
/// leave it one at a time: the eviction rate limit lets one go now, the others wait (and
/// say so) until the bucket refills.
/// Three Deployments a1..a3 under a policy with failover.cluster, their bindings on
/// a, b and c, and the fleet with c NotReady since the epoch.
struct OnFailedC {
    policy: Arc<PropagationPolicy>,
    apps: [Arc<DynamicObject>; 3],
    existing: Vec<Arc<ResourceBinding>>,
    clusters: Vec<Arc<Cluster>>,
}

impl OnFailedC {
    fn new() -> Self {
        let policy = pp("all", "Deployment", json!({"failover": {"cluster": {}}}));
        let apps = [
            deployment("a1", 1),
            deployment("a2", 1),
            deployment("a3", 1),
        ];
        let before = run(&apps, std::slice::from_ref(&policy), &fleet(), &[]);
        let existing = before.bindings.iter().cloned().map(Arc::new).collect();
        let mut clusters = fleet();
        clusters[2] = obj(
            json!({"metadata": {"name": "c"}, "spec": {"syncMode": "Push"},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ClusterNotReady",
                                        "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}),
        );
        OnFailedC {
            policy,
            apps,
            existing,
            clusters,
        }
    }

    /// A detector round at `now` writing the bindings `written` says.
    fn round(
        &self,
        now: i64,
        existing: &[Arc<ResourceBinding>],
        budget: &mut evictions::Evictions,
        written: &dyn Fn(&str, &str) -> bool,
    ) -> Desired {
        desired(
            &self.apps,
            std::slice::from_ref(&self.policy),
            &[],
            &self.clusters,
            existing,
            &[],
            &HashMap::new(),
            &t(now),
            budget,
            written,
            &Interpreters::default(),
            &|_| true,
        )
    }
}

/// Which of the bindings still run on c.
fn on_c(d: &Desired) -> Vec<bool> {
    d.bindings
        .iter()
        .map(|b| names(&b.spec.0.clusters).contains(&"c".to_string()))
        .collect()
}

#[test]
fn failing_over_is_rate_limited() {
    let f = OnFailedC::new();
    let existing = &f.existing;
    let mut budget = evictions::Evictions::new(0.5, 1.0);
    let round = |now: i64, existing: &[Arc<ResourceBinding>], budget: &mut evictions::Evictions| {
        f.round(now, existing, budget, &|_, _| true)
    };
    let d = round(1000, existing, &mut budget);
    assert_eq!(on_c(&d), [false, true, true], "one leaves now");
    let waiting = &d.bindings[1].status.as_ref().unwrap().conditions[0].message;
    assert!(
        waiting
            .ends_with("; failing over from c waits for the eviction rate limit (0.5 per second)"),
        "{waiting}"
    );
    assert_eq!(d.next_due, Some(t(1002).0));
    // two seconds later (the bindings written) the next one goes
    let written: Vec<Arc<ResourceBinding>> = d.bindings.iter().cloned().map(Arc::new).collect();
    let d = round(1002, &written, &mut budget);
    assert_eq!(on_c(&d), [false, false, true]);
}

/// J.63: a round that does not write a binding (a partial round, woken by another
/// binding's Work) spends nothing from the rate limit on it: the full round that
/// writes it finds the token still there. Before, every partial round spent the token
/// on a move it did not make, and a busy fleet could hold a failover back for ever.
#[test]
fn a_round_spends_the_rate_limit_only_on_the_bindings_it_writes() {
    let f = OnFailedC::new();
    let mut budget = evictions::Evictions::new(0.5, 1.0);
    // a round that writes none of them: every binding keeps c, and is due as soon as
    // the bucket lets one go (now)
    let d = f.round(1000, &f.existing, &mut budget, &|_, _| false);
    assert_eq!(on_c(&d), [true, true, true]);
    assert_eq!(d.next_due, Some(t(1000).0));
    // the same again: still nothing spent
    let d = f.round(1000, &f.existing, &mut budget, &|_, _| false);
    assert_eq!(on_c(&d), [true, true, true]);
    // a round that writes a3 only: a3 takes the token
    let d = f.round(1000, &f.existing, &mut budget, &|_, n| n == "a3-deployment");
    assert_eq!(on_c(&d), [true, true, false]);
    // a full round at once finds the bucket empty: the others wait for its refill
    let d = f.round(1000, &f.existing, &mut budget, &|_, n| n != "a3-deployment");
    assert_eq!(on_c(&d), [true, true, true]);
    assert_eq!(d.next_due, Some(t(1002).0));
    // the full round two seconds later moves the first of the others
    let d = f.round(1002, &f.existing, &mut budget, &|_, _| true);
    assert_eq!(on_c(&d), [false, true, true]);
}

/// A Work of binding `web/<name>-deployment` in `cluster`, running template generation
/// 4, Degraded as `degraded` says since t(0).
fn degraded_work(name: &str, cluster: &str, degraded: bool) -> Arc<Work> {
    obj(json!({
        "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
        "metadata": {"name": format!("web.{name}-deployment"), "namespace": format!("causeway-es-{cluster}"),
                     "generation": 1,
                     "labels": {labels::CLUSTER: cluster, labels::BINDING_NAMESPACE: "web",
                                labels::BINDING_NAME: format!("{name}-deployment")}},
        "spec": {},
        "status": {"conditions": [{"type": "Degraded", "status": if degraded { "True" } else { "False" },
                                   "reason": "R", "message": "", "observedGeneration": 1,
                                   "lastTransitionTime": "1970-01-01T00:00:00Z"}],
                   "manifestStatuses": [{"identifier": {"ordinal": 0, "group": "apps", "version": "v1",
                                                        "kind": "Deployment", "resource": "deployments",
                                                        "namespace": "web", "name": name},
                                         "applied": true, "templateGeneration": 4,
                                         "health": if degraded { "Unhealthy" } else { "Healthy" }}]}
    }))
}

/// J.64: a workload unhealthy in a cluster for longer than tolerated leaves it and the
/// binding records the eviction, which keeps the cluster out in the next rounds (its
/// Work gone) until the template's next generation; a move that would leave the
/// workload nowhere does not happen, and the Scheduled condition says why.
#[test]
fn application_failover_moves_a_workload_and_keeps_it_away() {
    let failover =
        json!({"failover": {"application": {"decisionConditions": {"tolerationSeconds": 10}}}});
    let mut divided = failover.clone();
    divided["placement"] = json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}});
    let policy = pp("all", "Deployment", divided);
    let mut app = (*deployment("api", 6)).clone();
    app.metadata.generation = Some(4);
    let apps = [Arc::new(app)];
    let round = |existing: &[Arc<ResourceBinding>], works: &[Arc<Work>], now: i64| {
        let works: HashMap<(String, String), Vec<Arc<Work>>> = [(
            ("web".to_string(), "api-deployment".to_string()),
            works.to_vec(),
        )]
        .into();
        desired(
            &apps,
            std::slice::from_ref(&policy),
            &[],
            &fleet(),
            existing,
            &[],
            &works,
            &t(now),
            &mut evictions::Evictions::new(1e9, 1e9),
            &|_, _| true,
            &Interpreters::default(),
            &|_| true,
        )
    };
    let first = round(&[], &[], 5);
    let existing: Vec<Arc<ResourceBinding>> =
        first.bindings.iter().cloned().map(Arc::new).collect();
    let works = [
        degraded_work("api", "a", true),
        degraded_work("api", "b", false),
        degraded_work("api", "c", false),
    ];
    // before the toleration ends: nothing moves, and the loop is told when to look again
    let d = round(&existing, &works, 5);
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b", "c"]);
    assert_eq!(d.next_due, Some(t(10).0));
    // after: a leaves, b and c run 3 each, and the binding says why
    let d = round(&existing, &works, 10);
    let spec = &d.bindings[0].spec.0;
    assert_eq!(
        spec.clusters
            .iter()
            .map(|c| (c.name.as_str(), c.replicas))
            .collect::<Vec<_>>(),
        [("b", Some(3)), ("c", Some(3))]
    );
    assert_eq!(spec.evictions.len(), 1);
    assert_eq!(
        (
            spec.evictions[0].cluster.as_str(),
            spec.evictions[0].template_generation
        ),
        ("a", Some(4))
    );
    let reasons = &d.bindings[0].status.as_ref().unwrap().scheduling_reasons;
    assert_eq!(reasons[0].cluster, "a");
    assert_eq!(reasons[0].reason, spec.evictions[0].reason);
    // a's Work gone: it stays out
    let evicted: Vec<Arc<ResourceBinding>> = d.bindings.iter().cloned().map(Arc::new).collect();
    let d = round(&evicted, &works[1..], 20);
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["b", "c"]);
    assert_eq!(d.bindings[0].spec.0.evictions.len(), 1);
    // the next generation is tried there again
    let mut next = (*apps[0]).clone();
    next.metadata.generation = Some(5);
    let d = desired(
        &[Arc::new(next)],
        std::slice::from_ref(&policy),
        &[],
        &fleet(),
        &evicted,
        &[],
        &HashMap::new(),
        &t(30),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b", "c"]);
    assert!(d.bindings[0].spec.0.evictions.is_empty());

    // only a can run it (clusterNames [a]): nowhere else to go, it stays
    let mut only_a = failover.clone();
    only_a["placement"] = json!({"clusterAffinity": {"clusterNames": ["a"]}});
    let policy = pp("all", "Deployment", only_a);
    let on_a = run(&apps, std::slice::from_ref(&policy), &fleet(), &[]);
    let on_a: Vec<Arc<ResourceBinding>> = on_a.bindings.iter().cloned().map(Arc::new).collect();
    let d = desired(
        &apps,
        std::slice::from_ref(&policy),
        &[],
        &fleet(),
        &on_a,
        &[],
        &[(
            ("web".to_string(), "api-deployment".to_string()),
            works[..1].to_vec(),
        )]
        .into(),
        &t(100),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    let b = &d.bindings[0];
    assert_eq!(names(&b.spec.0.clusters), ["a"]);
    assert!(b.spec.0.evictions.is_empty());
    let message = &scheduled(&b.status).message;
    assert!(
        message.ends_with("; application failover held back: a: unhealthy for longer than failover.application tolerates, but no other cluster can take it: it stays"),
        "{message}"
    );
}

/// J.63 for J.64: two workloads unhealthy in the same cluster leave it one at a time.
#[test]
fn application_failover_is_rate_limited() {
    let policy = pp(
        "all",
        "Deployment",
        json!({"failover": {"application": {"decisionConditions": {"tolerationSeconds": 10}}}}),
    );
    let apps: Vec<Arc<DynamicObject>> = ["api", "web"]
        .iter()
        .map(|n| {
            let mut d = (*deployment(n, 1)).clone();
            d.metadata.generation = Some(4);
            Arc::new(d)
        })
        .collect();
    let existing: Vec<Arc<ResourceBinding>> =
        run(&apps, std::slice::from_ref(&policy), &fleet(), &[])
            .bindings
            .into_iter()
            .map(Arc::new)
            .collect();
    let works: HashMap<(String, String), Vec<Arc<Work>>> = ["api", "web"]
        .iter()
        .map(|n| {
            (
                ("web".to_string(), format!("{n}-deployment")),
                vec![
                    degraded_work(n, "a", true),
                    degraded_work(n, "b", false),
                    degraded_work(n, "c", false),
                ],
            )
        })
        .collect();
    let mut bucket = evictions::Evictions::new(0.5, 1.0);
    let d = desired(
        &apps,
        std::slice::from_ref(&policy),
        &[],
        &fleet(),
        &existing,
        &[],
        &works,
        &t(100),
        &mut bucket,
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    let on_a: Vec<bool> = d
        .bindings
        .iter()
        .map(|b| names(&b.spec.0.clusters).contains(&"a".to_string()))
        .collect();
    assert_eq!(on_a, [false, true], "one leaves now");
    assert!(
        d.bindings[1].spec.0.evictions.is_empty(),
        "not recorded yet"
    );
    let waiting = &scheduled(&d.bindings[1].status).message;
    assert!(
        waiting
            .ends_with("; failing over from a waits for the eviction rate limit (0.5 per second)"),
        "{waiting}"
    );
    assert_eq!(d.next_due, Some(t(102).0));
}

/// ★ More than 55% of the clusters not Ready at once looks like the hub losing its
/// network: cluster failover holds, and the binding says why.
#[test]
fn cluster_failover_holds_when_most_clusters_fail_at_once() {
    let policy = pp(
        "all",
        "Deployment",
        json!({"failover": {"cluster": {}},
               "placement": {"clusterTolerations": [{"key": "cluster.causeway.io/not-ready",
                   "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]}}),
    );
    let apps = [deployment("a1", 3)];
    let before = run(&apps, std::slice::from_ref(&policy), &fleet(), &[]);
    let existing: Vec<Arc<ResourceBinding>> =
        before.bindings.iter().cloned().map(Arc::new).collect();
    let status = |name: &str, ready: &str| {
        obj(
            json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "R",
                                        "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}),
        )
    };
    let clusters = vec![
        status("a", "True"),
        status("b", "False"),
        status("c", "Unknown"),
    ];
    let d = run(&apps, std::slice::from_ref(&policy), &clusters, &existing);
    let b = &d.bindings[0];
    assert_eq!(names(&b.spec.0.clusters), ["a", "b", "c"], "nothing moves");
    let m = &scheduled(&b.status).message;
    assert!(
        m.ends_with("; cluster failover holds: 2 of 3 clusters stopped being Ready at once (b, c), which looks like the hub losing its network rather than the members failing"),
        "{m}"
    );
    // not at once: c failed an hour after b, so c's failure is c's own
    let mut later = (*status("c", "False")).clone();
    later.status.as_mut().unwrap().conditions[0].last_transition_time =
        Time("1970-01-01T01:00:00Z".parse().unwrap());
    let at_once = |b: Arc<Cluster>, c: Cluster| {
        super::failover::disruption(&[(*status("a", "True")).clone(), (*b).clone(), c])
    };
    assert_eq!(at_once(status("b", "False"), later), None);
    assert!(at_once(status("b", "False"), (*status("c", "False")).clone()).is_some());
    // a member that never reported is not counted
    let never = obj(
        json!({"metadata": {"name": "b"}, "spec": {"syncMode": "Pull"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "ClusterStatusNeverUpdated",
                                    "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}),
    );
    assert_eq!(at_once(never, (*status("c", "False")).clone()), None);
    // b, c and d failed together and stay down; e fails an hour later on its own:
    // that does not end the hold (before, only failures near the latest counted)
    let at = |name: &str, when: &str| {
        let mut c = (*status(name, "False")).clone();
        c.status.as_mut().unwrap().conditions[0].last_transition_time = Time(when.parse().unwrap());
        c
    };
    let five = |d: Cluster, e: Cluster| {
        super::failover::disruption(&[
            (*status("a", "True")).clone(),
            at("b", "1970-01-01T00:00:00Z"),
            at("c", "1970-01-01T00:03:00Z"),
            d,
            e,
        ])
    };
    let held = five(
        at("d", "1970-01-01T00:09:00Z"),
        (*status("e", "True")).clone(),
    )
    .unwrap();
    assert!(
        held.contains(": 3 of 5 clusters stopped being Ready at once (b, c, d)"),
        "{held}"
    );
    let held = five(
        at("d", "1970-01-01T00:09:00Z"),
        at("e", "1970-01-01T01:00:00Z"),
    )
    .unwrap();
    assert!(
        held.contains(": 3 of 5 clusters stopped being Ready at once (b, c, d)"),
        "{held}"
    );
    // not at once: b and d are 11 minutes apart, so at most two of five failed together
    assert_eq!(
        five(
            at("d", "1970-01-01T00:11:00Z"),
            (*status("e", "True")).clone()
        ),
        None
    );
    // one of three: it fails over
    let clusters = vec![
        status("a", "True"),
        status("b", "True"),
        status("c", "False"),
    ];
    let d = run(&apps, std::slice::from_ref(&policy), &clusters, &existing);
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b"]);
}

/// A cluster that is not Ready reports no fresh Work status: application failover does
/// not move a workload away on its stale report.
#[test]
fn application_failover_does_not_judge_a_cluster_that_is_not_ready() {
    let policy = pp(
        "all",
        "Deployment",
        json!({"failover": {"application": {"decisionConditions": {"tolerationSeconds": 10}}}}),
    );
    let mut app = (*deployment("api", 6)).clone();
    app.metadata.generation = Some(4);
    let apps = [Arc::new(app)];
    let existing: Vec<Arc<ResourceBinding>> =
        run(&apps, std::slice::from_ref(&policy), &fleet(), &[])
            .bindings
            .into_iter()
            .map(Arc::new)
            .collect();
    let mut clusters = fleet();
    clusters[0] = obj(
        json!({"metadata": {"name": "a"}, "spec": {"syncMode": "Push"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "R",
                                    "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]}}),
    );
    let works: HashMap<(String, String), Vec<Arc<Work>>> = [(
        ("web".to_string(), "api-deployment".to_string()),
        vec![
            degraded_work("api", "a", true),
            degraded_work("api", "b", false),
            degraded_work("api", "c", false),
        ],
    )]
    .into();
    let d = desired(
        &apps,
        std::slice::from_ref(&policy),
        &[],
        &clusters,
        &existing,
        &[],
        &works,
        &t(100),
        &mut evictions::Evictions::new(1e9, 1e9),
        &|_, _| true,
        &Interpreters::default(),
        &|_| true,
    );
    assert_eq!(names(&d.bindings[0].spec.0.clusters), ["a", "b", "c"]);
    assert!(d.bindings[0].spec.0.evictions.is_empty());
}

/// A requirer's dependencies are also those of the manifest each cluster's Work holds:
/// an ordered rollout's held cluster still runs the older generation, which mounts the
/// old ConfigMap, so that ConfigMap stays there (and only there) while it does.
#[test]
fn a_held_older_generation_keeps_the_configmap_it_mounts() {
    let templates = [
        using("api", "new-config", "api-secret"),
        core("ConfigMap", "new-config"),
        core("ConfigMap", "old-config"),
        core("Secret", "api-secret"),
    ];
    let policy: Arc<PropagationPolicy> = obj(
        json!({"metadata": {"name": "api", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"}],
                 "propagateDeps": true, "placement": {"clusterAffinity": {"clusterNames": ["a", "b"]}}}}),
    );
    // a runs the new generation; b is held at the old one (the Work's manifest)
    let work = |cluster: &str, config: &str| -> Arc<Work> {
        let manifest = serde_json::to_value(using("api", config, "api-secret").as_ref()).unwrap();
        obj(json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "web.api-deployment", "namespace": format!("causeway-es-{cluster}"),
                         "labels": {labels::CLUSTER: cluster, labels::BINDING_NAMESPACE: "web",
                                    labels::BINDING_NAME: "api-deployment"}},
            "spec": {"workload": {"manifests": [manifest]}}
        }))
    };
    // the detector's bindings when a and b hold these configs
    let round = |a: &str, b: &str| {
        let works: HashMap<(String, String), Vec<Arc<Work>>> = [(
            ("web".to_string(), "api-deployment".to_string()),
            vec![work("a", a), work("b", b)],
        )]
        .into();
        desired(
            &templates,
            std::slice::from_ref(&policy),
            &[],
            &fleet(),
            &[],
            &[],
            &works,
            &t(100),
            &mut evictions::Evictions::new(1e9, 1e9),
            &|_, _| true,
            &Interpreters::default(),
            &|_| true,
        )
    };
    let d = round("new-config", "old-config");
    let clusters_of = |name: &str| {
        let b = d.bindings.iter().find(|b| b.name_any() == name);
        b.map(|b| names(&b.spec.0.clusters))
    };
    assert_eq!(
        clusters_of("new-config-configmap"),
        Some(names_str(&["a", "b"]))
    );
    assert_eq!(clusters_of("old-config-configmap"), Some(names_str(&["b"])));
    assert_eq!(
        clusters_of("api-secret-secret"),
        Some(names_str(&["a", "b"]))
    );
    // b rolled out too: the old ConfigMap is needed nowhere, and goes
    let d = round("new-config", "new-config");
    assert!(
        !d.bindings
            .iter()
            .any(|b| b.name_any() == "old-config-configmap")
    );
}

fn names_str(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_lazy_policys_edits_wait_for_the_template_to_change() {
    let lazy = |clusters: Value, failover: Value| {
        pp(
            "all",
            "Deployment",
            json!({"activationPreference": "Lazy",
                "placement": {"clusterAffinity": {"clusterNames": clusters}},
                "failover": failover}),
        )
    };
    let existing = |d: &Desired| -> Vec<Arc<ResourceBinding>> {
        d.bindings.iter().cloned().map(Arc::new).collect()
    };
    let api = deployment("api", 2);
    let first = run(
        std::slice::from_ref(&api),
        &[lazy(json!(["a"]), Value::Null)],
        &fleet(),
        &[],
    );
    let b = &first.bindings[0];
    assert_eq!(names(&b.spec.clusters), ["a"]);
    let hash = |b: &ResourceBinding| {
        b.metadata.annotations.as_ref().unwrap()[annotations::ACTIVATED_TEMPLATE].clone()
    };
    // the policy adds b and cluster failover: the binding keeps its snapshot, and says so
    let edited = lazy(
        json!(["a", "b"]),
        json!({"cluster": {"purgeMode": "Directly"}}),
    );
    let second = run(
        std::slice::from_ref(&api),
        std::slice::from_ref(&edited),
        &fleet(),
        &existing(&first),
    );
    let b2 = &second.bindings[0];
    assert_eq!(names(&b2.spec.clusters), ["a"]);
    assert_eq!(b2.spec.failover, None, "the failover setting waits too");
    assert_eq!(hash(b2), hash(b));
    assert!(
        scheduled(&b2.status).message.ends_with(
            "; the changes of PropagationPolicy web/all since wait for the template to change (activationPreference: Lazy)"
        ),
        "{:?}",
        scheduled(&b2.status)
    );
    // the template changes: the policy's spec now
    let mut changed = (*api).clone();
    changed.metadata.labels = Some([("app".to_string(), "api2".to_string())].into());
    let third = run(
        &[Arc::new(changed)],
        std::slice::from_ref(&edited),
        &fleet(),
        &existing(&second),
    );
    let b3 = &third.bindings[0];
    assert_eq!(names(&b3.spec.clusters), ["a", "b"]);
    assert!(b3.spec.failover.is_some());
    assert_ne!(hash(b3), hash(b));
    assert_eq!(scheduled(&b3.status).message, "scheduled to 2 cluster(s)");
}

#[test]
fn a_lazy_policy_leaves_a_template_from_before_it_until_it_changes() {
    let mut policy = (*pp("all", "Deployment", json!({"activationPreference": "Lazy"}))).clone();
    policy.metadata.creation_timestamp = Some(t(50));
    let policy = Arc::new(policy);
    let mut old = (*deployment("api", 2)).clone();
    old.metadata.creation_timestamp = Some(t(40));
    let old = Arc::new(old);
    let d = run(
        std::slice::from_ref(&old),
        std::slice::from_ref(&policy),
        &fleet(),
        &[],
    );
    let b = &d.bindings[0];
    assert!(b.spec.clusters.is_empty(), "nothing propagated");
    assert_eq!(b.spec.resource.uid.as_deref(), Some("uid-api"));
    let c = scheduled(&b.status);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", conditions::REASON_ACTIVATION_PENDING)
    );
    assert!(
        c.message
            .contains("kubectl annotate deployment api -n web causeway.io/activate=now"),
        "{}",
        c.message
    );
    let pending: Vec<Arc<ResourceBinding>> = d.bindings.iter().cloned().map(Arc::new).collect();
    // unchanged: still pending
    let again = run(
        std::slice::from_ref(&old),
        std::slice::from_ref(&policy),
        &fleet(),
        &pending,
    );
    assert!(again.bindings[0].spec.clusters.is_empty());
    // the policy goes: the pending binding goes with it (it propagated nothing)
    let gone = run(std::slice::from_ref(&old), &[], &fleet(), &pending);
    assert!(gone.bindings.is_empty());
    assert_eq!(
        gone.delete_bindings,
        [("web".to_string(), "api-deployment".to_string())]
    );
    // the template changes: propagated, and the pending mark goes
    let mut changed = (*old).clone();
    changed.metadata.labels = Some([("tier".to_string(), "x".to_string())].into());
    let now = run(
        &[Arc::new(changed)],
        std::slice::from_ref(&policy),
        &fleet(),
        &pending,
    );
    let b = &now.bindings[0];
    assert_eq!(names(&b.spec.clusters), ["a", "b", "c"]);
    let annotations = b.metadata.annotations.as_ref().unwrap();
    assert!(annotations.contains_key(annotations::ACTIVATED_TEMPLATE));
    assert!(!annotations.contains_key(annotations::ACTIVATION_PENDING));
}

/// A ConfigMap a Lazy policy leaves pending (it was there before the policy) that a
/// workload needs still follows the workload as its dependency.
#[test]
fn a_dependency_a_lazy_policy_leaves_pending_still_follows_its_requirer() {
    let mut cm = (*core("ConfigMap", "shared")).clone();
    cm.metadata.creation_timestamp = Some(t(40));
    let mut lazy: PropagationPolicy = serde_json::from_value(json!({
        "metadata": {"name": "configs", "namespace": "web"},
        "spec": {"activationPreference": "Lazy",
            "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
            "placement": {"clusterAffinity": {"clusterNames": ["c"]}}}}))
    .unwrap();
    lazy.metadata.creation_timestamp = Some(t(50));
    let api = pp("api", "Deployment", placed(&["a", "b"]));
    let lazy = Arc::new(lazy);
    // the first round, and the rounds after it while the ConfigMap does not change
    let mut existing: Vec<Arc<ResourceBinding>> = Vec::new();
    for _ in 0..4 {
        let again = run(
            &[using("api", "shared", "none"), Arc::new(cm.clone())],
            &[api.clone(), lazy.clone()],
            &fleet(),
            &existing,
        );
        let shared = again
            .bindings
            .iter()
            .find(|b| b.name_any() == "shared-configmap")
            .unwrap();
        assert_eq!(names(&shared.spec.clusters), ["a", "b"]);
        assert_eq!(shared.spec.required_by.len(), 1);
        existing = again.bindings.iter().cloned().map(Arc::new).collect();
    }
}

/// A hash recorded under a Lazy policy is cleared while the policy is not Lazy, so the
/// template changing meanwhile does not make a policy that turns Lazy again apply its
/// edits at once.
#[test]
fn a_policy_that_turns_lazy_again_keeps_what_the_binding_has() {
    let policy = |lazy: bool, clusters: Value| {
        let mut extra = json!({"placement": {"clusterAffinity": {"clusterNames": clusters}}});
        if lazy {
            extra["activationPreference"] = json!("Lazy");
        }
        pp("all", "Deployment", extra)
    };
    let bindings = |d: &Desired| -> Vec<Arc<ResourceBinding>> {
        d.bindings.iter().cloned().map(Arc::new).collect()
    };
    let hash = |d: &Desired| {
        d.bindings[0]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::ACTIVATED_TEMPLATE).cloned())
    };
    let api = deployment("api", 2);
    let lazy = run(
        std::slice::from_ref(&api),
        &[policy(true, json!(["a"]))],
        &fleet(),
        &[],
    );
    assert!(hash(&lazy).is_some_and(|h| !h.is_empty()));
    // not Lazy: no hash (the hub's applier removes the one recorded: `runtime::apply`)
    let eager = run(
        std::slice::from_ref(&api),
        &[policy(false, json!(["a"]))],
        &fleet(),
        &bindings(&lazy),
    );
    assert_eq!(hash(&eager), None);
    let eager_again = run(
        std::slice::from_ref(&api),
        &[policy(false, json!(["a"]))],
        &fleet(),
        &bindings(&eager),
    );
    assert_eq!(hash(&eager_again), None, "stays without");
    // the template changes, then the policy turns Lazy with another placement: kept
    let mut changed = (*api).clone();
    changed.metadata.labels = Some([("app".to_string(), "api2".to_string())].into());
    let relazy = run(
        &[Arc::new(changed)],
        &[policy(true, json!(["a", "b"]))],
        &fleet(),
        &bindings(&eager_again),
    );
    assert_eq!(names(&relazy.bindings[0].spec.clusters), ["a"]);
    assert!(hash(&relazy).is_some_and(|h| !h.is_empty()));
}

/// A binding frozen when its Lazy policy goes keeps the hash it recorded (a Lazy policy
/// that claims the template again applies its own spec at once if the template changed
/// meanwhile) and carries only the hub's own labels, not what others labelled it with.
#[test]
fn a_frozen_binding_keeps_its_lazy_hash_and_only_the_hubs_labels() {
    let lazy = pp(
        "all",
        "Deployment",
        json!({"activationPreference": "Lazy", "placement": {"clusterAffinity": {"clusterNames": ["a"]}}}),
    );
    let api = deployment("api", 2);
    let claimed = run(std::slice::from_ref(&api), &[lazy], &fleet(), &[]);
    let mut existing = claimed.bindings[0].clone();
    let hash =
        existing.metadata.annotations.as_ref().unwrap()[annotations::ACTIVATED_TEMPLATE].clone();
    existing
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "pay".into());
    // the policy is deleted: the binding is frozen
    let frozen = run(
        std::slice::from_ref(&api),
        &[],
        &fleet(),
        &[Arc::new(existing)],
    );
    let b = &frozen.bindings[0];
    assert_eq!(
        b.metadata
            .annotations
            .as_ref()
            .map(|a| &a[annotations::ACTIVATED_TEMPLATE]),
        Some(&hash)
    );
    let labels = b.metadata.labels.clone().unwrap_or_default();
    assert!(!labels.contains_key("team"), "{labels:?}");
    assert_eq!(
        PolicyId::from_labels(&labels).map(|p| p.name),
        Some("all".to_string())
    );
    assert_eq!(names(&b.spec.clusters), ["a"]);
}

/// C.23: a division by available replicas keeps its assignment (Steady) until
/// `spec.rescheduleTriggeredAt` is later than `status.lastScheduledTime`: then it is
/// computed anew from the clusters' capacity (Fresh), and the time is recorded, so the
/// next rounds are Steady again.
#[test]
fn a_reschedule_trigger_divides_the_replicas_anew_once() {
    let with_cpu = |name: &str, cpu: &str| {
        obj::<Cluster>(
            json!({"metadata": {"name": name}, "spec": {"syncMode": "Push"},
            "status": {"resourceSummary": {"allocatable": {"cpu": cpu, "pods": "110"}}}}),
        )
    };
    let clusters = vec![with_cpu("a", "6"), with_cpu("b", "12"), with_cpu("c", "18")];
    let template: Arc<DynamicObject> = obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "web", "uid": "uid-api", "resourceVersion": "7"},
        "spec": {"replicas": 12, "template": {"spec": {"containers": [
            {"name": "api", "image": "api", "resources": {"requests": {"cpu": "1"}}}]}}}
    }));
    let policy = pp(
        "dynamic",
        "Deployment",
        json!({"placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
            "weightPreference": {"dynamicWeight": "AvailableReplicas"}}}}),
    );
    let counts = |b: &ResourceBinding| -> Vec<(String, i32)> {
        let c = b.spec.0.clusters.iter();
        c.map(|t| (t.name.clone(), t.replicas.unwrap_or(0)))
            .collect()
    };
    let pairs = |v: &[(&str, i32)]| -> Vec<(String, i32)> {
        v.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    };
    let first = run(
        std::slice::from_ref(&template),
        std::slice::from_ref(&policy),
        &clusters,
        &[],
    );
    assert_eq!(
        counts(&first.bindings[0]),
        pairs(&[("a", 2), ("b", 4), ("c", 6)])
    );
    // skewed (as an earlier fleet left it): kept while nothing asks otherwise
    let mut skewed = first.bindings[0].clone();
    for (t, r) in skewed.spec.0.clusters.iter_mut().zip([10, 1, 1]) {
        t.replicas = Some(r);
    }
    let again = |b: &ResourceBinding| {
        run(
            std::slice::from_ref(&template),
            std::slice::from_ref(&policy),
            &clusters,
            &[Arc::new(b.clone())],
        )
    };
    let steady = again(&skewed);
    assert_eq!(
        counts(&steady.bindings[0]),
        pairs(&[("a", 10), ("b", 1), ("c", 1)])
    );
    assert_eq!(
        steady.bindings[0]
            .status
            .as_ref()
            .unwrap()
            .last_scheduled_time,
        None
    );
    // a reschedule asked for: divided anew by each cluster's room plus what it runs of
    // the workload now (16 / 13 / 19), and carried out at the round's time
    skewed.spec.0.reschedule_triggered_at = Some(t(50));
    let fresh = again(&skewed);
    assert_eq!(
        counts(&fresh.bindings[0]),
        pairs(&[("a", 4), ("b", 3), ("c", 5)])
    );
    assert_eq!(
        fresh.bindings[0]
            .status
            .as_ref()
            .unwrap()
            .last_scheduled_time,
        Some(t(100))
    );
    // carried out: Steady again (the skew, were it back, stays)
    let mut done = skewed.clone();
    done.status = fresh.bindings[0].status.clone();
    let later = again(&done);
    assert_eq!(
        counts(&later.bindings[0]),
        pairs(&[("a", 10), ("b", 1), ("c", 1)])
    );
    assert_eq!(
        later.bindings[0]
            .status
            .as_ref()
            .unwrap()
            .last_scheduled_time,
        Some(t(100)),
        "kept"
    );
}

/// A user's `rescheduleTriggeredAt` (kubectl patch) stays on a dependency's binding and
/// on a Lazy policy's pending binding: the spec is the detector's whole, so one it left
/// out would be applied away every round.
#[test]
fn a_reschedule_request_stays_on_dependency_and_pending_bindings() {
    let asked = |d: &Desired, name: &str| {
        d.bindings
            .iter()
            .find(|b| b.name_any() == name)
            .unwrap_or_else(|| panic!("binding {name}"))
            .spec
            .reschedule_triggered_at
            .clone()
    };
    let with_request = |d: &Desired, name: &str| -> Vec<Arc<ResourceBinding>> {
        d.bindings
            .iter()
            .map(|b| {
                let mut b = b.clone();
                if b.name_any() == name {
                    b.spec.0.reschedule_triggered_at = Some(t(60));
                }
                Arc::new(b)
            })
            .collect()
    };
    // a dependency: the ConfigMap a Deployment uses
    let templates = [using("api", "shared", "none"), core("ConfigMap", "shared")];
    let policies = [pp("api", "Deployment", placed(&["a", "b"]))];
    let first = run(&templates, &policies, &fleet(), &[]);
    assert_eq!(asked(&first, "shared-configmap"), None);
    let existing = with_request(&first, "shared-configmap");
    let again = run(&templates, &policies, &fleet(), &existing);
    assert_eq!(asked(&again, "shared-configmap"), Some(t(60)));

    // a pending binding: a template from before a Lazy policy
    let mut policy = (*pp("all", "Deployment", json!({"activationPreference": "Lazy"}))).clone();
    policy.metadata.creation_timestamp = Some(t(50));
    let policy = Arc::new(policy);
    let mut old = (*deployment("api", 2)).clone();
    old.metadata.creation_timestamp = Some(t(40));
    let old = Arc::new(old);
    let pending = run(
        std::slice::from_ref(&old),
        std::slice::from_ref(&policy),
        &fleet(),
        &[],
    );
    assert!(
        pending.bindings[0].spec.clusters.is_empty(),
        "still pending"
    );
    let existing = with_request(&pending, "api-deployment");
    let again = run(
        std::slice::from_ref(&old),
        std::slice::from_ref(&policy),
        &fleet(),
        &existing,
    );
    assert!(again.bindings[0].spec.clusters.is_empty(), "still pending");
    assert_eq!(asked(&again, "api-deployment"), Some(t(60)));
}

#[test]
fn a_policy_that_becomes_invalid_keeps_what_it_holds_frozen() {
    let team = |extra: Value| {
        let mut spec = json!({"placement": {"clusterAffinity": {"clusterNames": ["a", "b"]}}});
        if let (Value::Object(s), Value::Object(e)) = (&mut spec, extra) {
            s.extend(e);
        }
        pp("team", "Deployment", spec)
    };
    let platform: Arc<ClusterPropagationPolicy> = obj(json!({
        "metadata": {"name": "platform"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "placement": {"clusterAffinity": {"clusterNames": ["c"]}}}
    }));
    let go = |policy: &Arc<PropagationPolicy>, bindings: &[Arc<ResourceBinding>]| {
        desired(
            &[deployment("api", 2)],
            std::slice::from_ref(policy),
            std::slice::from_ref(&platform),
            &fleet(),
            bindings,
            &[],
            &HashMap::new(),
            &t(100),
            &mut evictions::Evictions::new(1e9, 1e9),
            &|_, _| true,
            &Interpreters::default(),
            &|_| true,
        )
    };
    let good = team(json!({}));
    let first = go(&good, &[]);
    assert_eq!(names_of(&first.bindings), ["api-deployment"]);
    let held = Arc::new(first.bindings[0].clone());
    assert_eq!(names(&held.spec.clusters), ["a", "b"]);
    let team_labels = PolicyId::namespaced("web", "team").labels();
    assert_eq!(held.metadata.labels.as_ref(), Some(&team_labels));
    // the team's policy is edited into an invalid one (a count as a string without %)
    let bad = team(json!({"redistribution": {"maxUnavailable": "1"}}));
    let d = go(&bad, std::slice::from_ref(&held));
    assert_eq!(d.invalid_policies.len(), 1, "{:?}", d.invalid_policies);
    assert_eq!(names_of(&d.bindings), ["api-deployment"]);
    let b = &d.bindings[0];
    // still the team's, with the spec it had (no cluster change), frozen
    assert_eq!(b.metadata.labels.as_ref(), Some(&team_labels));
    assert_eq!(b.spec, held.spec);
    assert!(d.delete_bindings.is_empty(), "{:?}", d.delete_bindings);
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", conditions::REASON_POLICY_INVALID)
    );
    assert!(
        cond.message.contains("PropagationPolicy web/team")
            && cond.message.contains("spec.redistribution.maxUnavailable"),
        "{}",
        cond.message
    );
    let status = b.status.as_ref().unwrap();
    assert!(status.policy_removed() && status.policy_invalid());
    // frozen again the next round (the binding as written)
    let frozen = Arc::new(b.clone());
    let d = go(&bad, std::slice::from_ref(&frozen));
    assert_eq!(d.bindings[0].metadata.labels.as_ref(), Some(&team_labels));
    assert_eq!(d.bindings[0].spec, held.spec);
    // fixed: the team's policy schedules it again, and it is still the team's
    let d = go(&good, std::slice::from_ref(&frozen));
    assert!(d.invalid_policies.is_empty());
    let b = &d.bindings[0];
    assert_eq!(b.metadata.labels.as_ref(), Some(&team_labels));
    assert_eq!(names(&b.spec.clusters), ["a", "b"]);
    let cond = scheduled(&b.status);
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", conditions::REASON_SUCCESS)
    );
}

/// Two `Gateway web` in one namespace, of Gateway API and of Istio, would have one
/// binding (`web-gateway`): one has it, the other is reported and gets none; the one
/// the existing binding references keeps it, whatever the order.
#[test]
fn a_kind_name_in_two_api_groups_does_not_share_a_binding() {
    let gateway = |api_version: &str| -> Arc<DynamicObject> {
        obj(json!({
            "apiVersion": api_version, "kind": "Gateway",
            "metadata": {"name": "web", "namespace": "web", "uid": format!("uid-{api_version}")},
            "spec": {}
        }))
    };
    let k8s = "gateway.networking.k8s.io/v1";
    let istio = "networking.istio.io/v1";
    let policy: Arc<PropagationPolicy> = obj(json!({
        "metadata": {"name": "gateways", "namespace": "web"},
        "spec": {"resourceSelectors": [{"apiVersion": k8s, "kind": "Gateway"},
                                       {"apiVersion": istio, "kind": "Gateway"}]}
    }));
    let templates = [gateway(k8s), gateway(istio)];
    let policies = std::slice::from_ref(&policy);
    let d = run(&templates, policies, &fleet(), &[]);
    assert_eq!(names_of(&d.bindings), ["web-gateway"]);
    assert_eq!(d.bindings[0].spec.resource.api_version, k8s);
    assert_eq!(d.invalid_templates.len(), 1, "{:?}", d.invalid_templates);
    let why = d.invalid_templates[0].to_string();
    assert!(
        matches!(
            &d.invalid_templates[0],
            SelectionError::BindingNameTaken(t)
                if t.api_version == istio && t.holder == k8s
        ),
        "{why}"
    );
    assert!(
        why.contains("Gateway web/web in networking.istio.io/v1"),
        "{why}"
    );
    // the binding references Istio's: it keeps it, listed first or last
    let mut held = d.bindings[0].clone();
    held.spec.0.resource.api_version = istio.into();
    let held = [Arc::new(held)];
    for templates in [
        [gateway(k8s), gateway(istio)],
        [gateway(istio), gateway(k8s)],
    ] {
        let d = run(&templates, policies, &fleet(), &held);
        assert_eq!(names_of(&d.bindings), ["web-gateway"]);
        assert_eq!(d.bindings[0].spec.resource.api_version, istio);
        assert_eq!(
            d.bindings[0].spec.resource.uid.as_deref(),
            Some("uid-networking.istio.io/v1")
        );
        assert!(d.delete_bindings.is_empty());
        assert!(matches!(
            &d.invalid_templates[..],
            [SelectionError::BindingNameTaken(t)] if t.api_version == k8s
        ));
    }
    // the holder's kind not listed yet (a restart): the other group's template does
    // not take the name meanwhile
    let d = run_seen(
        &[gateway(k8s)],
        policies,
        &fleet(),
        &held,
        &|r: &ResourceReference| r.api_version != istio,
    );
    assert!(d.bindings.is_empty(), "{:?}", names_of(&d.bindings));
    assert!(matches!(
        &d.invalid_templates[..],
        [SelectionError::BindingNameTaken(t)] if t.api_version == k8s && t.holder == istio
    ));
    // one object served at two versions of its group is no collision
    let twice = [gateway(k8s), gateway("gateway.networking.k8s.io/v1beta1")];
    let d = run(&twice, policies, &fleet(), &[]);
    assert_eq!(names_of(&d.bindings), ["web-gateway"]);
    assert!(d.invalid_templates.is_empty(), "{:?}", d.invalid_templates);
}
