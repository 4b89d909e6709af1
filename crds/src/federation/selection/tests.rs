use super::*;
use crate::federation::propagation::PreemptionBehavior::{Always, Never};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

mod matching;
mod properties;
mod validation;

/// An owned policy, for building [`PolicyRef`]s.
#[derive(Clone, Debug)]
struct P {
    namespace: Option<String>,
    name: String,
    spec: PropagationSpec,
}

impl P {
    fn as_ref(&self) -> PolicyRef<'_> {
        PolicyRef {
            namespace: self.namespace.as_deref(),
            name: &self.name,
            spec: &self.spec,
            spec_changed: None,
        }
    }
}

fn spec(
    priority: i32,
    preemption: Option<PreemptionBehavior>,
    sels: Vec<ResourceSelector>,
) -> PropagationSpec {
    PropagationSpec {
        resource_selectors: sels,
        priority: Some(priority),
        preemption,
        ..Default::default()
    }
}

/// A PropagationPolicy in `demo`.
fn pp(
    name: &str,
    priority: i32,
    preemption: Option<PreemptionBehavior>,
    sels: Vec<ResourceSelector>,
) -> P {
    P {
        namespace: Some("demo".into()),
        name: name.into(),
        spec: spec(priority, preemption, sels),
    }
}

/// A ClusterPropagationPolicy.
fn cpp(
    name: &str,
    priority: i32,
    preemption: Option<PreemptionBehavior>,
    sels: Vec<ResourceSelector>,
) -> P {
    P {
        namespace: None,
        name: name.into(),
        spec: spec(priority, preemption, sels),
    }
}

fn kind_only() -> Vec<ResourceSelector> {
    vec![ResourceSelector {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        ..Default::default()
    }]
}

fn by_name(name: &str) -> Vec<ResourceSelector> {
    vec![ResourceSelector {
        name: Some(name.into()),
        ..kind_only().remove(0)
    }]
}

fn label_selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        match_expressions: None,
    }
}

fn by_label(key: &str, value: &str) -> Vec<ResourceSelector> {
    vec![ResourceSelector {
        label_selector: Some(label_selector(key, value)),
        ..kind_only().remove(0)
    }]
}

fn template(namespace: Option<&str>, name: &str) -> TemplateMeta {
    TemplateMeta {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: namespace.map(str::to_string),
        name: name.into(),
        labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
    }
}

/// demo/web, labelled app=web.
fn web() -> TemplateMeta {
    template(Some("demo"), "web")
}

/// The holder of a claim, and the policy it preempted.
type Outcome = Option<(PolicyId, Option<PolicyId>)>;

/// One row of the claim table: case, policies, current claim, template, outcome.
type ClaimCase = (
    &'static str,
    Vec<P>,
    Option<PolicyId>,
    TemplateMeta,
    Outcome,
);

fn run(t: &TemplateMeta, policies: &[P], current: Option<&PolicyId>) -> Outcome {
    let refs: Vec<_> = policies.iter().map(P::as_ref).collect();
    claim(t, &refs, current)
        .unwrap()
        .map(|c| (c.policy, c.preempted))
}

fn ns(name: &str) -> PolicyId {
    PolicyId::namespaced("demo", name)
}

fn cl(name: &str) -> PolicyId {
    PolicyId::cluster(name)
}

#[test]
fn claim_table_b14() {
    let ks = || kind_only();
    // (case, policies, current claim, template, want (holder, preempted))
    let table: Vec<ClaimCase> = vec![
        ("no policy", vec![], None, web(), None),
        (
            "only a non-matching policy",
            vec![pp("a", 0, None, by_name("db"))],
            None,
            web(),
            None,
        ),
        (
            "higher priority wins",
            vec![pp("low", 1, None, ks()), pp("high", 5, None, ks())],
            None,
            web(),
            Some((ns("high"), None)),
        ),
        (
            "negative priority loses to the default",
            vec![
                pp("neg", -1, None, by_name("web")),
                pp("zero", 0, None, ks()),
            ],
            None,
            web(),
            Some((ns("zero"), None)),
        ),
        (
            "priority beats specificity",
            vec![
                pp("named", 0, None, by_name("web")),
                pp("kind", 1, None, ks()),
            ],
            None,
            web(),
            Some((ns("kind"), None)),
        ),
        (
            "equal priority: name beats labelSelector",
            vec![
                pp("a-label", 0, None, by_label("app", "web")),
                pp("z-name", 0, None, by_name("web")),
            ],
            None,
            web(),
            Some((ns("z-name"), None)),
        ),
        (
            "equal priority: labelSelector beats kind only",
            vec![
                pp("a-kind", 0, None, ks()),
                pp("z-label", 0, None, by_label("app", "web")),
            ],
            None,
            web(),
            Some((ns("z-label"), None)),
        ),
        (
            "equal priority: name beats kind only",
            vec![
                pp("a-kind", 0, None, ks()),
                pp("z-name", 0, None, by_name("web")),
            ],
            None,
            web(),
            Some((ns("z-name"), None)),
        ),
        (
            "full tie: smaller name wins",
            vec![
                pp("b", 3, None, ks()),
                pp("a", 3, None, ks()),
                pp("c", 3, None, ks()),
            ],
            None,
            web(),
            Some((ns("a"), None)),
        ),
        (
            "tie by name is lexicographic, not numeric",
            vec![pp("p10", 0, None, ks()), pp("p9", 0, None, ks())],
            None,
            web(),
            Some((ns("p10"), None)),
        ),
        (
            "a policy counts its most specific selector",
            vec![
                pp("a-kind", 0, None, ks()),
                pp("z-both", 0, None, [ks(), by_name("web")].concat()),
            ],
            None,
            web(),
            Some((ns("z-both"), None)),
        ),
        (
            "a policy without selectors matches nothing",
            vec![pp("empty", 9, None, vec![])],
            None,
            web(),
            None,
        ),
        // PropagationPolicy vs ClusterPropagationPolicy.
        (
            "PP beats a CPP of higher priority",
            vec![
                cpp("cluster", 100, None, by_name("web")),
                pp("local", 0, None, ks()),
            ],
            None,
            web(),
            Some((ns("local"), None)),
        ),
        (
            "CPP when no PP matches",
            vec![
                cpp("cluster", 0, None, ks()),
                pp("local", 0, None, by_name("db")),
            ],
            None,
            web(),
            Some((cl("cluster"), None)),
        ),
        (
            "CPPs rank by priority",
            vec![cpp("a", 0, None, ks()), cpp("b", 2, None, ks())],
            None,
            web(),
            Some((cl("b"), None)),
        ),
        (
            "CPPs rank by specificity",
            vec![
                cpp("a", 0, None, ks()),
                cpp("b", 0, None, by_label("app", "web")),
            ],
            None,
            web(),
            Some((cl("b"), None)),
        ),
        (
            "PP of another namespace never matches",
            vec![
                P {
                    namespace: Some("other".into()),
                    ..pp("other", 50, None, ks())
                },
                cpp("cluster", 0, None, ks()),
            ],
            None,
            web(),
            Some((cl("cluster"), None)),
        ),
        (
            "PP never matches a cluster-scoped template",
            vec![pp("local", 0, None, ks())],
            None,
            template(None, "web"),
            None,
        ),
        (
            "CPP matches a cluster-scoped template",
            vec![cpp("cluster", 0, None, ks())],
            None,
            template(None, "web"),
            Some((cl("cluster"), None)),
        ),
        // B.15: reserved namespaces.
        (
            "CPP never matches an add-on's kube-* namespace (Karmada skips kube-.*)",
            vec![cpp("c", 0, None, ks())],
            None,
            template(Some("kube-flannel"), "web"),
            None,
        ),
        (
            "CPP matches kubernetes-dashboard (not kube-*)",
            vec![cpp("c", 0, None, ks())],
            None,
            template(Some("kubernetes-dashboard"), "web"),
            Some((cl("c"), None)),
        ),
        (
            "CPP naming kube-system explicitly still never matches",
            vec![cpp(
                "c",
                0,
                None,
                vec![ResourceSelector {
                    namespace: Some("kube-system".into()),
                    ..ks().remove(0)
                }],
            )],
            None,
            template(Some("kube-system"), "web"),
            None,
        ),
        (
            "CPP never matches the Namespace object kube-system",
            vec![cpp(
                "c",
                0,
                None,
                vec![ResourceSelector {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    ..Default::default()
                }],
            )],
            None,
            TemplateMeta {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                name: "kube-system".into(),
                ..Default::default()
            },
            None,
        ),
        (
            "PP in kube-system may select there",
            vec![P {
                namespace: Some("kube-system".into()),
                ..pp("sys", 0, None, ks())
            }],
            None,
            template(Some("kube-system"), "web"),
            Some((PolicyId::namespaced("kube-system", "sys"), None)),
        ),
        // Claims and preemption.
        (
            "a claim sticks against a higher priority without preemption",
            vec![
                pp("old", 0, None, ks()),
                pp("new", 10, Some(Never), by_name("web")),
            ],
            Some(ns("old")),
            web(),
            Some((ns("old"), None)),
        ),
        (
            "a claim sticks when preemption is unset",
            vec![pp("old", 0, None, ks()), pp("new", 10, None, ks())],
            Some(ns("old")),
            web(),
            Some((ns("old"), None)),
        ),
        (
            "higher priority with Always preempts",
            vec![pp("old", 0, None, ks()), pp("new", 10, Some(Always), ks())],
            Some(ns("old")),
            web(),
            Some((ns("new"), Some(ns("old")))),
        ),
        (
            "Always at equal priority does not preempt",
            vec![
                pp("old", 5, None, ks()),
                pp("a-new", 5, Some(Always), by_name("web")),
            ],
            Some(ns("old")),
            web(),
            Some((ns("old"), None)),
        ),
        (
            "Always at lower priority does not preempt",
            vec![
                pp("old", 5, None, ks()),
                pp("new", 4, Some(Always), by_name("web")),
            ],
            Some(ns("old")),
            web(),
            Some((ns("old"), None)),
        ),
        (
            "a holder with Always keeps its own claim",
            vec![
                pp("old", 9, Some(Always), ks()),
                pp("a", 0, None, by_name("web")),
            ],
            Some(ns("old")),
            web(),
            Some((ns("old"), None)),
        ),
        (
            "of several preempters the best-ranked wins",
            vec![
                pp("old", 0, None, ks()),
                pp("mid", 5, Some(Always), by_name("web")),
                pp("top", 7, Some(Always), ks()),
                pp("never", 9, None, ks()),
            ],
            Some(ns("old")),
            web(),
            Some((ns("top"), Some(ns("old")))),
        ),
        (
            "PP with Always preempts a CPP of higher priority",
            vec![
                cpp("cluster", 100, None, ks()),
                pp("local", 0, Some(Always), ks()),
            ],
            Some(cl("cluster")),
            web(),
            Some((ns("local"), Some(cl("cluster")))),
        ),
        (
            "PP without Always leaves a CPP's claim",
            vec![
                cpp("cluster", 0, None, ks()),
                pp("local", 100, None, by_name("web")),
            ],
            Some(cl("cluster")),
            web(),
            Some((cl("cluster"), None)),
        ),
        (
            "CPP with Always and higher priority preempts a CPP",
            vec![cpp("old", 0, None, ks()), cpp("new", 1, Some(Always), ks())],
            Some(cl("old")),
            web(),
            Some((cl("new"), Some(cl("old")))),
        ),
        (
            "CPP never preempts a PP",
            vec![
                pp("local", 0, None, ks()),
                cpp("cluster", 100, Some(Always), by_name("web")),
            ],
            Some(ns("local")),
            web(),
            Some((ns("local"), None)),
        ),
        (
            "PP preempter beats a higher-priority CPP preempter",
            vec![
                cpp("old", 0, None, ks()),
                cpp("big", 50, Some(Always), ks()),
                pp("local", 0, Some(Always), ks()),
            ],
            Some(cl("old")),
            web(),
            Some((ns("local"), Some(cl("old")))),
        ),
        (
            "a deleted holder's claim is ranked afresh",
            vec![pp("a", 0, None, ks()), pp("b", 1, None, ks())],
            Some(ns("gone")),
            web(),
            Some((ns("b"), None)),
        ),
        (
            "a holder that no longer matches loses the claim",
            vec![pp("old", 9, None, by_name("db")), pp("b", 0, None, ks())],
            Some(ns("old")),
            web(),
            Some((ns("b"), None)),
        ),
        (
            "a holder that no longer matches, and nothing else",
            vec![pp("old", 9, None, by_label("app", "db"))],
            Some(ns("old")),
            web(),
            None,
        ),
        (
            "a claim naming the right name in another scope is not the holder",
            vec![pp("x", 0, None, ks()), cpp("x", 5, None, ks())],
            Some(cl("x")),
            web(),
            Some((cl("x"), None)),
        ),
    ];
    for (case, policies, current, t, want) in table {
        assert_eq!(run(&t, &policies, current.as_ref()), want, "{case}");
    }
}

#[test]
fn cluster_policies_never_claim_in_reserved_namespaces() {
    let policies = [cpp("c", 0, Some(Always), kind_only())];
    for namespace in [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "causeway-system",
        "causeway-es-member1",
    ] {
        let t = template(Some(namespace), "web");
        assert_eq!(run(&t, &policies, None), None, "{namespace}");
        assert!(is_reserved_namespace(namespace), "{namespace}");
    }
    // an add-on's kube-* namespace too (Karmada's default skipped namespaces: kube-.*)
    let t = template(Some("kube-flannel"), "web");
    assert_eq!(run(&t, &policies, None), None);
    assert!(is_reserved_namespace("kube-flannel"));
    assert!(!is_reserved_namespace("kubernetes-dashboard"));
    assert!(!is_reserved_namespace("causeway"));
}

/// What every cluster keeps in every namespace itself is claimed by no policy, however
/// it selects: `kube-root-ca.crt` and the `default` ServiceAccount.
#[test]
fn no_policy_claims_what_every_cluster_publishes_itself() {
    let of = |kind: &str, name: &str| TemplateMeta {
        api_version: "v1".into(),
        kind: kind.into(),
        ..template(Some("demo"), name)
    };
    let kind = |k: &str| ResourceSelector {
        api_version: "v1".into(),
        kind: k.into(),
        ..Default::default()
    };
    let policies = [
        pp(
            "all-cms",
            0,
            None,
            vec![kind("ConfigMap"), kind("ServiceAccount")],
        ),
        cpp(
            "all",
            5,
            Some(Always),
            vec![kind("ConfigMap"), kind("ServiceAccount")],
        ),
    ];
    for (k, name) in [
        ("ConfigMap", "kube-root-ca.crt"),
        ("ServiceAccount", "default"),
    ] {
        assert_eq!(run(&of(k, name), &policies, None), None, "{k} {name}");
        assert!(is_published_by_every_cluster("v1", k, name));
    }
    // their neighbours are claimed as usual
    assert_eq!(
        run(&of("ConfigMap", "settings"), &policies, None),
        Some((ns("all-cms"), None))
    );
    assert_eq!(
        run(&of("ServiceAccount", "robot"), &policies, None),
        Some((ns("all-cms"), None))
    );
}

#[test]
fn claim_reports_specificity() {
    let policies = [pp("a", 0, None, by_label("app", "web"))];
    let refs: Vec<_> = policies.iter().map(P::as_ref).collect();
    let got = claim(&web(), &refs, None).unwrap().unwrap();
    assert_eq!(got.specificity, Specificity::LabelSelector);
}

#[test]
fn a_policys_spec_changed_when_the_api_server_last_wrote_it() {
    use crate::federation::propagation::PropagationPolicy;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    let at = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
    let entry = |time: i64, subresource: Option<&str>| ManagedFieldsEntry {
        manager: Some("kubectl".into()),
        operation: Some("Update".into()),
        time: Some(at(time)),
        subresource: subresource.map(String::from),
        ..ManagedFieldsEntry::default()
    };
    let policy = |entries: Vec<ManagedFieldsEntry>| {
        let mut p = PropagationPolicy::new("web", Default::default());
        p.metadata.creation_timestamp = Some(at(10));
        p.metadata.managed_fields = (!entries.is_empty()).then_some(entries);
        p
    };
    let changed = |p: &PropagationPolicy| PolicyRef::from_pp(p).spec_changed.cloned();
    // never written since its creation (or no managedFields kept): its creation
    assert_eq!(changed(&policy(vec![])), Some(at(10)));
    // the latest write of the policy itself; a status write is not one
    let p = policy(vec![
        entry(10, None),
        entry(40, Some("")),
        entry(90, Some("status")),
    ]);
    assert_eq!(changed(&p), Some(at(40)));
    let mut none = PropagationPolicy::new("web", Default::default());
    none.metadata.creation_timestamp = None;
    assert_eq!(changed(&none), None);
}
