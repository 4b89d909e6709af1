//! Bad input: invalid policies (B.15), incomplete templates, duplicate policies;
//! and the policy labels of bindings.

use super::*;

#[test]
fn claim_refuses_bad_input_with_clear_errors() {
    let twice = [pp("a", 0, None, kind_only()), pp("a", 1, None, kind_only())];
    let refs: Vec<_> = twice.iter().map(P::as_ref).collect();
    assert_eq!(
        claim(&web(), &refs, None).unwrap_err().to_string(),
        "PropagationPolicy demo/a is listed twice: pass each policy once (a PropagationPolicy is identified by namespace and name, a ClusterPropagationPolicy by name)"
    );
    let no_kind = TemplateMeta {
        kind: String::new(),
        ..web()
    };
    assert_eq!(
        claim(&no_kind, &[], None).unwrap_err().to_string(),
        "resource template \" demo/web\" has no kind: only complete objects (apiVersion, kind, metadata.name) can be propagated"
    );
}

#[test]
fn template_from_a_dynamic_object() {
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
    }))
    .unwrap();
    assert_eq!(TemplateMeta::from_object(&obj).unwrap(), web());
    let nameless: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "demo"},
    }))
    .unwrap();
    assert!(matches!(
        TemplateMeta::from_object(&nameless),
        Err(SelectionError::InvalidTemplate {
            field: "metadata.name",
            ..
        })
    ));
}

#[test]
fn policy_ids_round_trip_through_binding_labels() {
    for id in [ns("web"), cl("web")] {
        assert_eq!(PolicyId::from_labels(&id.labels()), Some(id.clone()));
    }
    assert_eq!(
        ns("web").labels(),
        BTreeMap::from([
            ("causeway.io/policy-name".to_string(), "web".to_string()),
            (
                "causeway.io/policy-namespace".to_string(),
                "demo".to_string()
            ),
        ])
    );
    assert_eq!(PolicyId::from_labels(&BTreeMap::new()), None);
}

#[test]
fn validate_policy_table_b15() {
    let sel = |f: fn(&mut ResourceSelector)| {
        let mut s = kind_only().remove(0);
        f(&mut s);
        vec![s]
    };
    let reserved = "a ClusterPropagationPolicy never selects resources in the reserved namespaces (kube-*, causeway-system, causeway-es-*): propagate from another namespace, or with a PropagationPolicy in that namespace";
    // (case, policy, expected errors)
    let table: Vec<(&str, P, Vec<String>)> = vec![
        ("PP by kind", pp("a", 0, None, kind_only()), vec![]),
        ("PP naming its own namespace", pp("a", 0, None, sel(|s| s.namespace = Some("demo".into()))), vec![]),
        ("CPP in an ordinary namespace", cpp("a", 0, None, sel(|s| s.namespace = Some("demo".into()))), vec![]),
        ("PP in a reserved namespace is allowed", P { namespace: Some("kube-system".into()), ..pp("a", 0, None, kind_only()) }, vec![]),
        (
            "no selectors",
            pp("a", 0, None, vec![]),
            vec!["spec.resourceSelectors: Invalid value: \"[]\": at least one resource selector is required (there is no select-all, so that nothing, Secrets included, is propagated by accident): give the apiVersion and kind, and a name or labelSelector, of the resources to propagate".into()],
        ),
        (
            "no apiVersion nor kind",
            cpp("a", 0, None, vec![ResourceSelector::default()]),
            vec![
                "spec.resourceSelectors[0].apiVersion: Invalid value: \"\": required: the API version of the resources to propagate, e.g. apps/v1".into(),
                "spec.resourceSelectors[0].kind: Invalid value: \"\": required: the kind of the resources to propagate, e.g. Deployment".into(),
            ],
        ),
        (
            "naming the CA bundle every cluster publishes",
            pp("a", 0, None, sel(|s| {
                s.api_version = "v1".into();
                s.kind = "ConfigMap".into();
                s.name = Some("kube-root-ca.crt".into());
            })),
            vec!["spec.resourceSelectors[0].name: Invalid value: \"kube-root-ca.crt\": every cluster keeps its own ConfigMap \"kube-root-ca.crt\" in every namespace (its own kube-controller-manager writes it), so it is never propagated: remove this selector".into()],
        ),
        (
            "PP naming another namespace",
            pp("a", 0, None, sel(|s| s.namespace = Some("other".into()))),
            vec!["spec.resourceSelectors[0].namespace: Invalid value: \"other\": a PropagationPolicy selects only resources in its own namespace \"demo\": leave namespace empty or set it to \"demo\", or use a ClusterPropagationPolicy".into()],
        ),
        ("CPP in kube-system", cpp("a", 0, None, sel(|s| s.namespace = Some("kube-system".into()))), vec![format!("spec.resourceSelectors[0].namespace: Invalid value: \"kube-system\": {reserved}")]),
        ("CPP in kube-public", cpp("a", 0, None, sel(|s| s.namespace = Some("kube-public".into()))), vec![format!("spec.resourceSelectors[0].namespace: Invalid value: \"kube-public\": {reserved}")]),
        ("CPP in kube-node-lease", cpp("a", 0, None, sel(|s| s.namespace = Some("kube-node-lease".into()))), vec![format!("spec.resourceSelectors[0].namespace: Invalid value: \"kube-node-lease\": {reserved}")]),
        ("CPP in causeway-system", cpp("a", 0, None, sel(|s| s.namespace = Some("causeway-system".into()))), vec![format!("spec.resourceSelectors[0].namespace: Invalid value: \"causeway-system\": {reserved}")]),
        ("CPP in causeway-es-m1", cpp("a", 0, None, sel(|s| s.namespace = Some("causeway-es-m1".into()))), vec![format!("spec.resourceSelectors[0].namespace: Invalid value: \"causeway-es-m1\": {reserved}")]),
        (
            "CPP selecting the Namespace kube-system",
            cpp("a", 0, None, vec![ResourceSelector { api_version: "v1".into(), kind: "Namespace".into(), name: Some("kube-system".into()), ..Default::default() }]),
            vec![format!("spec.resourceSelectors[0].name: Invalid value: \"kube-system\": {reserved}")],
        ),
        (
            "invalid labelSelector",
            pp("a", 0, None, sel(|s| s.label_selector = Some(LabelSelector { match_labels: Some(BTreeMap::from([("app".to_string(), "bad value!".to_string())])), match_expressions: None }))),
            vec!["spec.resourceSelectors[0].labelSelector.matchLabels: Invalid value: \"bad value!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into()],
        ),
        (
            "a rollout wave that selects no cluster, and one with a bad selector",
            {
                let mut p = pp("a", 0, None, kind_only());
                p.spec.rollout = Some(crate::federation::rollout::Rollout {
                    waves: vec![
                        Default::default(),
                        crate::federation::rollout::RolloutWave {
                            label_selector: Some(LabelSelector { match_labels: Some(BTreeMap::from([("bad key!".to_string(), "x".to_string())])), match_expressions: None }),
                            ..Default::default()
                        },
                    ],
                    progress_deadline_seconds: Some(0),
                });
                p
            },
            vec![
                "spec.rollout.waves[0]: Invalid value: \"\": a wave selects no cluster: give clusterNames or a labelSelector (clusters no wave selects go last, in a wave of their own)".into(),
                "spec.rollout.waves[1].labelSelector.matchLabels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into(),
                "spec.rollout.progressDeadlineSeconds: Invalid value: \"0\": must be at least 1 (seconds a wave may take); leave it out for no deadline".into(),
            ],
        ),
        (
            "a hold's progress deadline below 1",
            {
                let mut p = pp("a", 0, None, kind_only());
                p.spec.redistribution = Some(crate::federation::redistribution::Redistribution {
                    max_unavailable: None,
                    progress_deadline_seconds: Some(-5),
                });
                p
            },
            vec![
                "spec.redistribution.progressDeadlineSeconds: Invalid value: \"-5\": must be at least 1 (seconds a hold may go without a replica moving); leave it out for no deadline".into(),
            ],
        ),
    ];
    for (case, policy, want) in table {
        let got = match validate_policy(&policy.as_ref()) {
            Ok(()) => vec![],
            Err(SelectionError::InvalidPolicy { policy: id, errors }) => {
                assert_eq!(id, policy.as_ref().id(), "{case}");
                errors.iter().map(ToString::to_string).collect()
            }
            Err(other) => panic!("{case}: {other}"),
        };
        assert_eq!(got, want, "{case}");
    }
    // a name too long for the label that names the policy on its bindings
    let long = "p".repeat(64);
    let err = validate_policy(&cpp(&long, 0, None, vec![]).as_ref()).unwrap_err();
    assert!(
        err.to_string().contains("metadata.name") && err.to_string().contains("64 characters"),
        "{err}"
    );
    let err = validate_policy(&cpp("wide", 0, None, vec![]).as_ref()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("ClusterPropagationPolicy wide is invalid: spec.resourceSelectors: "),
        "{err}"
    );
}
