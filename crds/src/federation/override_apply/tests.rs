//! Table and property tests of override application (D.26–31).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::federation::overrides::{ClusterOverridePolicy, OverridePolicy, Overriders};

mod apply_tables;
mod image_tables;
mod selection_tables;

fn rule(ns: &str, name: &str, rule: usize) -> RuleId {
    RuleId {
        policy: PolicyId {
            kind: PolicyKind::OverridePolicy,
            namespace: Some(ns.into()),
            name: name.into(),
        },
        rule,
    }
}

fn overriders(v: Value) -> Overriders {
    serde_json::from_value(v).expect("test overriders parse")
}

/// Applies one rule (`prod/registry` rule 0) made of `o` to `manifest`.
fn apply_one(manifest: &Value, o: Value) -> Result<(Value, Provenance), OverrideError> {
    let o = overriders(o);
    apply(manifest, &[(rule("prod", "registry", 0), &o)])
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "template": {"spec": {
                "initContainers": [{"name": "init", "image": "busybox:1.36"}],
                "containers": [
                    {"name": "app", "image": "nginx:1.19", "command": ["nginx"], "args": ["-g", "daemon off;"]},
                    {"name": "sidecar", "image": "host:10443/a/b:1.2"}
                ]
            }}
        }
    })
}

/// Every JSON pointer to a scalar or empty container in `v`, and to every container.
fn all_pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                all_pointers(x, format!("{at}/{}", pointer::escape(k)), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                all_pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A manifest with random content under `spec` and `metadata.labels`.
fn manifest() -> impl Strategy<Value = Value> {
    (
        json_value(),
        prop::collection::btree_map("[a-c]{1,2}", "[a-c]{0,2}", 0..3),
    )
        .prop_map(|(spec, labels)| {
            json!({"apiVersion": "v1", "kind": "Thing",
                   "metadata": {"name": "t", "namespace": "ns", "labels": labels},
                   "spec": spec})
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Applying no rules returns the manifest unchanged, with no provenance.
    #[test]
    fn no_rules_is_the_identity(m in manifest()) {
        let (out, prov) = apply(&m, &[]).expect("nothing to fail");
        prop_assert_eq!(out, m);
        prop_assert!(prov.is_empty());
    }

    /// Whatever the operations (on existing paths, new ones, labels), every path the
    /// provenance names holds a value different from the input's, and every changed
    /// leaf path is named by the provenance or lies under a path it names.
    #[test]
    fn provenance_names_exactly_the_changed_paths(
        m in manifest(),
        picks in prop::collection::vec((0usize..64, 0usize..3, json_leaf(), "[a-c]{1,2}"), 1..6),
    ) {
        let mut paths = Vec::new();
        all_pointers(&m, String::new(), &mut paths);
        paths.retain(|p| p.starts_with("/spec") || p.starts_with("/metadata/labels"));
        let ops: Vec<Value> = picks.iter().map(|(i, op, value, key)| {
            let base = &paths[i % paths.len()];
            match op {
                0 => json!({"path": base, "operator": "replace", "value": value}),
                1 => json!({"path": format!("{base}/{key}"), "operator": "add", "value": value}),
                _ => json!({"path": base, "operator": "remove"}),
            }
        }).collect();
        let labels: Vec<Value> = picks.iter().map(|(_, _, _, key)| {
            json!({"operator": "add", "value": {key.clone(): "x"}})
        }).collect();
        // Run the operations one by one so that a failing one is skipped, not fatal.
        let mut rules = Vec::new();
        let mut doc = m.clone();
        for (i, op) in ops.iter().enumerate() {
            let o = overriders(json!({"plaintext": [op], "labelsOverrider": [labels[i]]}));
            if let Ok((next, _)) = apply(&doc, &[(rule("ns", "p", i), &o)]) {
                doc = next;
                rules.push(o);
            }
        }
        let list: Vec<(RuleId, &Overriders)> =
            rules.iter().enumerate().map(|(i, o)| (rule("ns", "p", i), o)).collect();
        let (out, prov) = apply(&m, &list).expect("each rule applied alone");
        prop_assert_eq!(&out, &doc);
        for (p, _) in prov.iter() {
            prop_assert_ne!(m.pointer(p), out.pointer(p), "{} is named but unchanged", p);
        }
        let mut leaves = Vec::new();
        all_pointers(&out, String::new(), &mut leaves);
        for p in leaves.iter().filter(|p| m.pointer(p) != out.pointer(p)) {
            let covered = prov.iter().any(|(q, _)| p == q || p.starts_with(&format!("{q}/")));
            let parent_changed = prov.iter().any(|(q, _)| q.starts_with(&format!("{p}/")));
            prop_assert!(covered || parent_changed, "{} changed but not named in {}", p, prov);
        }
    }
}
