//! Tests of the exporter's pure parts: conditions, Events.
use super::*;

fn c(t: &str, s: &str, r: &str) -> Condition {
    Condition {
        type_: t.into(),
        status: s.into(),
        reason: r.into(),
        message: format!("{r} msg"),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

#[test]
fn events_only_on_transitions() {
    let ok = vec![
        c("Valid", "True", "Valid"),
        c("Ready", "True", "Exported"),
        c("Conflict", "False", "NoConflicts"),
    ];
    assert!(events_for(&ok, &ok).is_empty(), "steady state is silent");
    let conflict = vec![
        c("Valid", "True", "Valid"),
        c("Ready", "True", "Exported"),
        c("Conflict", "True", "PortConflict"),
    ];
    let ev = events_for(&ok, &conflict);
    assert_eq!(
        ev,
        vec![ExportEvent {
            warning: true,
            reason: "PortConflict".into(),
            note: "PortConflict msg".into()
        }]
    );
    assert!(events_for(&conflict, &conflict).is_empty());
    assert_eq!(events_for(&conflict, &ok)[0].reason, "ConflictResolved");
    let failed = vec![c("Valid", "True", "Valid"), c("Ready", "False", "Failed")];
    assert_eq!(events_for(&ok, &failed)[0].reason, "ExportFailed");
    assert!(events_for(&failed, &failed).is_empty());
    let invalid = vec![
        c("Valid", "False", "NoService"),
        c("Ready", "False", "Pending"),
    ];
    assert_eq!(events_for(&[], &invalid)[0].reason, "NoService");
    assert_eq!(
        events_for(&[], &ok)
            .iter()
            .map(|e| e.reason.as_str())
            .collect::<Vec<_>>(),
        vec!["Exported"]
    );
}

fn export(name: &str) -> Arc<ServiceExport> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": "demo"},
        }))
        .unwrap(),
    )
}

#[test]
fn a_name_no_service_can_have_is_called_invalid_not_missing() {
    let now = Time(jiff::Timestamp::UNIX_EPOCH);
    let want = desired(
        "east",
        &[export("no.such.service"), export("missing")],
        &[],
        &[],
        &[],
        &now,
    );
    let valid = |name: &str| {
        want.conditions[&("demo".to_string(), name.to_string())]
            .iter()
            .find(|c| c.type_ == "Valid")
            .cloned()
            .unwrap()
    };
    let invalid = valid("no.such.service");
    assert_eq!(invalid.status, "False");
    assert!(
        invalid
            .message
            .starts_with("\"no.such.service\" is not a valid Service name (a DNS-1035 label must"),
        "{}",
        invalid.message
    );
    assert!(
        !invalid.message.contains("create it"),
        "{}",
        invalid.message
    );
    let missing = valid("missing");
    assert_eq!(missing.reason, "NoService");
    assert!(missing.message.contains("create it"), "{}", missing.message);
    assert!(want.exported.is_empty());
}

#[test]
fn a_failed_hub_write_turns_ready_into_failed_with_the_reason() {
    let desired = vec![
        c("Valid", "True", "Valid"),
        c("Ready", "True", "Exported"),
        c("Conflict", "False", "NoConflicts"),
    ];
    // (failure, Ready as (status, reason, message))
    type Case<'a> = (Option<&'a str>, (&'a str, &'a str, &'a str));
    let table: &[Case] = &[
        (None, ("True", "Exported", "Exported msg")),
        (
            Some("exportedservices is forbidden"),
            (
                "False",
                "Failed",
                "exporting to the hub failed (retrying): exportedservices is forbidden",
            ),
        ),
    ];
    for (failure, (status, reason, message)) in table {
        let got = with_write_failure(desired.clone(), *failure);
        let ready = got.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            (*status, *reason, *message),
            "{failure:?}"
        );
        // the other conditions are untouched
        assert_eq!(got[0], desired[0]);
        assert_eq!(got[2], desired[2]);
    }
}

#[test]
fn nothing_is_exported_from_kubernetes_or_causeway_namespaces() {
    // the relay refuses these origins for Pull members: a Push member's exporter (and a
    // Pull member's agent, which runs this same function) refuses them too, and says so
    // on the ServiceExport rather than waiting forever
    let now = Time(jiff::Timestamp::UNIX_EPOCH);
    let in_ns = |ns: &str| -> (Arc<ServiceExport>, Arc<Service>) {
        let meta = json!({"name": "web", "namespace": ns});
        (
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                    "metadata": meta,
                }))
                .unwrap(),
            ),
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": meta,
                    "spec": {"ports": [{"name": "http", "port": 80}]},
                }))
                .unwrap(),
            ),
        )
    };
    // (namespace, refused)
    let table = [
        ("kube-system", true),
        ("kube-public", true),
        ("causeway-system", true),
        ("causeway-es-west", true),
        ("demo", false),
        ("kubeflow", false),
    ];
    for (ns, refused) in table {
        let (ex, svc) = in_ns(ns);
        let want = desired("east", &[ex], &[svc], &[], &[], &now);
        let conds = &want.conditions[&(ns.to_string(), "web".to_string())];
        let get = |t: &str| conds.iter().find(|c| c.type_ == t).unwrap();
        if refused {
            assert!(want.exported.is_empty(), "{ns}: {:?}", want.exported);
            let (valid, ready) = (get("Valid"), get("Ready"));
            assert_eq!(
                (valid.status.as_str(), valid.reason.as_str()),
                ("False", crate::mcs::RESERVED_NAMESPACE),
                "{ns}"
            );
            assert!(
                valid.message.contains(&format!("{ns:?}"))
                    && valid
                        .message
                        .contains("export the Service from another namespace"),
                "{ns}: {}",
                valid.message
            );
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", "Failed"),
                "{ns}"
            );
        } else {
            assert_eq!(want.exported.len(), 1, "{ns}");
            assert_eq!(get("Valid").status, "True", "{ns}");
        }
    }
}

/// A cluster that left the clusterset: its exports keep `Valid`, say `Ready=False`
/// (`NotInClusterSet`) and lose `Conflict`.
#[test]
fn a_cluster_that_left_says_nothing_is_exported() {
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
    let before = [
        c(cond::VALID, "True", cond::reason::VALID),
        c(cond::READY, "True", cond::reason::EXPORTED),
        c(cond::CONFLICT, "True", cond::reason::PORT_CONFLICT),
    ];
    let after = left_conditions(&before, Some(3), &now);
    assert_eq!(
        after[1].observed_generation,
        Some(3),
        "Ready is for the export now"
    );
    let got: Vec<(&str, &str, &str)> = after
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (cond::VALID, "True", cond::reason::VALID),
            (cond::READY, "False", NOT_IN_CLUSTER_SET)
        ]
    );
    assert_eq!(after[1].last_transition_time, now, "Ready changed now");
    assert_eq!(after[0], before[0], "Valid as it was");
}

/// Every condition of a ServiceExport says which `metadata.generation` it is for: what
/// the exporter decides itself is for the export as it is; a verdict copied from the
/// hub (`Conflict`, `Valid=False` on exported metadata) is for it only once the hub
/// holds what is exported now, else it keeps the generation it was last set for.
#[test]
fn every_condition_carries_the_generation_it_is_for() {
    use causeway_crds::exported_service::ExportedServiceStatus;
    let now = Time(jiff::Timestamp::UNIX_EPOCH);
    let at = |generation: i64, labels: Value, prev: Value| -> Arc<ServiceExport> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                "metadata": {"name": "web", "namespace": "demo", "generation": generation},
                "spec": {"exportedLabels": labels},
                "status": {"conditions": prev},
            }))
            .unwrap(),
        )
    };
    let svc: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        }))
        .unwrap(),
    );
    let generations = |want: &Desired| -> Vec<(String, Option<i64>)> {
        want.conditions[&("demo".to_string(), "web".to_string())]
            .iter()
            .map(|c| (c.type_.clone(), c.observed_generation))
            .collect()
    };
    // no hub object yet: Valid and Ready are the exporter's own
    let ex = at(4, json!({"a": "1"}), json!([]));
    let (ex, svc) = ([ex], [svc]);
    let first = desired("east", &ex, &svc, &[], &[], &now);
    assert_eq!(
        generations(&first),
        [("Valid".into(), Some(4)), ("Ready".into(), Some(4))]
    );
    // the hub holds what is exported now, judged at the hub object's generation 7
    let verdict = |t: &str, s: &str, r: &str| Condition {
        observed_generation: Some(7),
        ..c(t, s, r)
    };
    let judged = |spec: ExportedServiceSpec| -> Arc<ExportedService> {
        let mut hub = first.exported[0].clone();
        hub.spec = spec;
        hub.metadata.generation = Some(7);
        hub.status = Some(ExportedServiceStatus {
            observed_generation: Some(7),
            conditions: vec![
                verdict("Conflict", "True", "PortConflict"),
                verdict("Valid", "False", "InvalidExportedMetadata"),
            ],
            ..Default::default()
        });
        Arc::new(hub)
    };
    let current = judged(first.exported[0].spec.clone());
    let want = desired("east", &ex, &svc, &[], &[current], &now);
    assert_eq!(
        generations(&want),
        [
            ("Valid".into(), Some(4)),
            ("Ready".into(), Some(4)),
            ("Conflict".into(), Some(4))
        ]
    );
    // a verdict for another generation of the hub object is not for this export
    let mut other = (*judged(first.exported[0].spec.clone())).clone();
    other.metadata.generation = Some(8);
    let want = desired("east", &ex, &svc, &[], &[Arc::new(other)], &now);
    assert_eq!(
        generations(&want),
        [
            ("Valid".into(), None),
            ("Ready".into(), Some(4)),
            ("Conflict".into(), None)
        ]
    );
    // the export changed (generation 5) and the hub still holds what generation 4
    // exported: the copied verdicts keep the generation they were set for
    let prev = json!([
        {"type": "Valid", "status": "False", "reason": "InvalidExportedMetadata", "message": "m",
         "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 4},
        {"type": "Ready", "status": "True", "reason": "Exported", "message": "m",
         "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 4},
        {"type": "Conflict", "status": "True", "reason": "PortConflict", "message": "m",
         "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 4},
    ]);
    let stale = judged(first.exported[0].spec.clone());
    let changed = at(5, json!({"a": "2"}), prev);
    let want = desired("east", &[changed], &svc, &[], &[stale], &now);
    assert_eq!(
        generations(&want),
        [
            ("Valid".into(), Some(4)),
            ("Ready".into(), Some(5)),
            ("Conflict".into(), Some(4))
        ]
    );
    // a failed hub write keeps the generation it is for
    let failed = with_write_failure(
        want.conditions[&("demo".to_string(), "web".to_string())].clone(),
        Some("forbidden"),
    );
    assert_eq!(failed[1].reason, "Failed");
    assert_eq!(failed[1].observed_generation, Some(5));
    // exports that are not exported say so for the generation they are at
    let missing = desired("east", &[at(6, json!({}), json!([]))], &[], &[], &[], &now);
    assert_eq!(
        generations(&missing),
        [("Valid".into(), Some(6)), ("Ready".into(), Some(6))]
    );
}

/// A Pull member's export is published by the relay with its `exportCreationTimestamp`
/// clamped up to its Cluster's registration: a hub object that holds what is exported
/// now but for a later creation time carries a verdict for the export as it is now.
/// One with an earlier time is an earlier export's (a recreated ServiceExport): its
/// verdict is not for this one.
#[test]
fn a_verdict_on_an_export_the_relay_dated_later_is_for_the_export_now() {
    use causeway_crds::exported_service::ExportedServiceStatus;
    let now = Time(jiff::Timestamp::UNIX_EPOCH);
    let created = "2026-01-01T00:00:00Z";
    let ex: Arc<ServiceExport> = Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": "web", "namespace": "demo", "generation": 3,
                         "creationTimestamp": created},
            "status": {"conditions": [
                {"type": "Conflict", "status": "True", "reason": "PortConflict", "message": "m",
                 "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 2}]},
        }))
        .unwrap(),
    );
    let svc: Arc<Service> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        }))
        .unwrap(),
    );
    let (ex, svc) = ([ex], [svc]);
    let first = desired("east", &ex, &svc, &[], &[], &now);
    assert_eq!(
        first.exported[0].spec.export_creation_timestamp,
        Some(Time(created.parse().unwrap()))
    );
    let conflict = |hub_created: &str| -> Option<i64> {
        let mut hub = first.exported[0].clone();
        hub.spec.export_creation_timestamp = Some(Time(hub_created.parse().unwrap()));
        hub.metadata.generation = Some(7);
        hub.status = Some(ExportedServiceStatus {
            observed_generation: Some(7),
            conditions: vec![Condition {
                observed_generation: Some(7),
                ..c("Conflict", "True", "PortConflict")
            }],
            ..Default::default()
        });
        let want = desired("east", &ex, &svc, &[], &[Arc::new(hub)], &now);
        want.conditions[&("demo".to_string(), "web".to_string())]
            .iter()
            .find(|c| c.type_ == "Conflict")
            .unwrap()
            .observed_generation
    };
    // (the hub object's exportCreationTimestamp, the Conflict's observedGeneration)
    let table = [
        (created, Some(3)),
        // the Cluster registered after the ServiceExport was created: clamped later
        ("2026-03-01T12:00:00Z", Some(3)),
        // an earlier export of the same name: the verdict is still about that one
        ("2025-06-01T00:00:00Z", Some(2)),
    ];
    for (hub_created, generation) in table {
        assert_eq!(
            conflict(hub_created),
            generation,
            "hub object created {hub_created}"
        );
    }
}
