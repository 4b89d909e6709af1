//! Admission checks of an OverridePolicy or ClusterOverridePolicy spec (D.26), with
//! kube-apiserver's field paths and wording, so that the controller can put them in
//! the policy's `Valid` condition.

use std::collections::BTreeSet;

use k8s_validation::FieldError;
use serde_json::Value;

use super::ops::forbidden;
use super::pointer;
use crate::federation::overrides::{ImageComponent, OverrideSpec, OverriderOperator, Overriders};
use crate::federation::schedule::validate_affinity;
use crate::federation::selection::labels as label_selector;

/// Every validation error of `spec` (field paths start at `spec`); empty when it is
/// valid.
pub fn validate(spec: &OverrideSpec) -> Vec<FieldError> {
    let mut errs = Errs::default();
    for (i, sel) in spec.resource_selectors.iter().enumerate() {
        if let Some(ls) = &sel.label_selector {
            let at = format!("spec.resourceSelectors[{i}].labelSelector");
            errs.0.extend(label_selector::validate(ls, &at));
        }
    }
    for (i, rule) in spec.override_rules.iter().enumerate() {
        let at = format!("spec.overrideRules[{i}]");
        if let Some(aff) = &rule.target_cluster {
            let at = format!("{at}.targetCluster");
            errs.0.extend(validate_affinity(aff, &at));
            let mut seen = BTreeSet::new();
            for name in aff.cluster_names.iter().filter(|n| !seen.insert(*n)) {
                errs.push(
                    format!("{at}.clusterNames"),
                    name,
                    "Duplicate value: list each cluster once",
                );
            }
        }
        overriders(&rule.overriders, &format!("{at}.overriders"), &mut errs);
    }
    errs.0
}

#[derive(Default)]
struct Errs(Vec<FieldError>);

impl Errs {
    fn push(&mut self, field: impl Into<String>, value: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        });
    }

    /// A JSON pointer that must parse and must not touch a derived field.
    fn path(&mut self, field: String, path: &str) {
        let problem = pointer::parse(path).err().or_else(|| forbidden(path));
        if let Some(p) = problem {
            self.push(field, path, p.to_string());
        }
    }

    /// A value that add and replace need and remove must not have.
    fn value(&mut self, field: String, op: OverriderOperator, present: bool) {
        match (op, present) {
            (OverriderOperator::Remove, true) => {
                self.push(field, "", "must not be set when operator is remove")
            }
            (OverriderOperator::Add | OverriderOperator::Replace, false) => {
                self.push(field, "", "Required value: add and replace need a value")
            }
            _ => {}
        }
    }
}

fn overriders(o: &Overriders, at: &str, errs: &mut Errs) {
    let mut paths = BTreeSet::new();
    for (j, p) in o.plaintext.iter().enumerate() {
        let at = format!("{at}.plaintext[{j}]");
        errs.path(format!("{at}.path"), &p.path);
        if !paths.insert(&p.path) {
            errs.push(
                format!("{at}.path"),
                &p.path,
                "Duplicate value: a path may be patched once per rule; merge the operations",
            );
        }
        errs.value(format!("{at}.value"), p.operator, p.value.is_some());
    }
    for (j, x) in o.image_overrider.iter().enumerate() {
        let at = format!("{at}.imageOverrider[{j}]");
        if let Some(p) = &x.predicate {
            errs.path(format!("{at}.predicate.path"), &p.path);
        }
        let present = x.value.as_deref().is_some_and(|v| !v.is_empty());
        errs.value(format!("{at}.value"), x.operator, present);
        if (x.component, x.operator) == (ImageComponent::Repository, OverriderOperator::Remove) {
            errs.push(
                format!("{at}.operator"),
                "remove",
                "the Repository of an image cannot be removed; use replace",
            );
        }
    }
    for (name, list) in [
        ("commandOverrider", &o.command_overrider),
        ("argsOverrider", &o.args_overrider),
    ] {
        for (j, x) in list.iter().enumerate() {
            let at = format!("{at}.{name}[{j}]");
            if x.container_name.is_empty() {
                errs.push(
                    format!("{at}.containerName"),
                    "",
                    "Required value: name the container to change",
                );
            }
            if x.operator == OverriderOperator::Replace {
                errs.push(
                    format!("{at}.operator"),
                    "replace",
                    "Unsupported value: supported values: \"add\", \"remove\"",
                );
            }
        }
    }
    for (j, x) in o.labels_overrider.iter().enumerate() {
        let at = format!("{at}.labelsOverrider[{j}].value");
        for (k, v) in &x.value {
            for m in k8s_validation::qualified_name(k) {
                errs.push(&at, k, m);
            }
            // remove ignores the values.
            if x.operator != OverriderOperator::Remove {
                for m in k8s_validation::label_value(v) {
                    errs.push(&at, v, m);
                }
            }
        }
    }
    for (j, x) in o.annotations_overrider.iter().enumerate() {
        let at = format!("{at}.annotationsOverrider[{j}].value");
        errs.0.extend(k8s_validation::annotations(&at, &x.value));
    }
    for (j, f) in o.field_overrider.iter().enumerate() {
        let at = format!("{at}.fieldOverrider[{j}]");
        errs.path(format!("{at}.fieldPath"), &f.field_path);
        match (f.json.is_empty(), f.yaml.is_empty()) {
            (true, true) => errs.push(&at, "", "Required value: set json or yaml operations"),
            (false, false) => errs.push(
                &at,
                "",
                "json and yaml are mutually exclusive: the field holds one or the other",
            ),
            _ => {}
        }
        let json = f.json.iter().map(|o| (&o.sub_path, o.operator, &o.value));
        let yaml = f.yaml.iter().map(|o| (&o.sub_path, o.operator, &o.value));
        for (format, ops) in [("json", json.collect::<Vec<_>>()), ("yaml", yaml.collect())] {
            for (k, (sub_path, op, value)) in ops.into_iter().enumerate() {
                let at = format!("{at}.{format}[{k}]");
                if let Err(p) = pointer::parse(sub_path) {
                    errs.push(format!("{at}.subPath"), sub_path, p.to_string());
                }
                let present = value.as_ref().is_some_and(|v| *v != Value::Null);
                errs.value(format!("{at}.value"), op, present);
            }
        }
    }
}
