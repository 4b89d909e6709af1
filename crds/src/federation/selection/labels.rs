//! Kubernetes label selectors (`metav1.LabelSelector`): matching a set of labels, and
//! the validation `metav1.LabelSelectorAsSelector` does, with kube-apiserver's field
//! paths.
//!
//! A selector that does not validate matches nothing ([`matches`] returns false), the
//! way Karmada treats a selector it cannot parse; [`validate`] says why.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_validation::FieldError;

/// The operators of `matchExpressions`.
const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

/// Whether `labels` satisfy `sel`: every `matchLabels` pair and every
/// `matchExpressions` requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`). An empty
/// selector matches everything; an invalid one (see [`validate`]) matches nothing.
pub fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if !validate(sel, "labelSelector").is_empty() {
        return false;
    }
    let pairs_hold = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs_hold
        && sel.match_expressions.iter().flatten().all(|req| {
            let value = labels.get(&req.key);
            let values = req.values.as_deref().unwrap_or_default();
            match req.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                // "DoesNotExist": validate admits no other operator.
                _ => value.is_none(),
            }
        })
}

/// Why `sel` is not a valid label selector, as field errors under `field` (for
/// example `spec.resourceSelectors[0].labelSelector`); empty when it is valid.
pub fn validate(sel: &LabelSelector, field: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut push = |field: String, value: &str, message: String| {
        out.push(FieldError {
            field,
            value: value.to_string(),
            message,
        })
    };
    for (k, v) in sel.match_labels.iter().flatten() {
        let at = format!("{field}.matchLabels");
        for m in k8s_validation::qualified_name(k) {
            push(at.clone(), k, m);
        }
        for m in k8s_validation::label_value(v) {
            push(at.clone(), v, m);
        }
    }
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        for m in k8s_validation::qualified_name(&req.key) {
            push(format!("{at}.key"), &req.key, m);
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => push(
                format!("{at}.values"),
                "[]",
                "for 'In', 'NotIn' operators, values set can't be empty".into(),
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => push(
                format!("{at}.values"),
                &values.join(","),
                "values set must be empty for 'Exists' and 'DoesNotExist' operators".into(),
            ),
            op if !OPERATORS.contains(&op) => push(
                format!("{at}.operator"),
                op,
                format!(
                    "not a valid label selector operator: use one of {}",
                    OPERATORS.join(", ")
                ),
            ),
            _ => {}
        }
        for v in values {
            for m in k8s_validation::label_value(v) {
                push(format!("{at}.values"), v, m);
            }
        }
    }
    out
}

/// `sel` in kubectl's `-l` syntax (`app=web,tier in (a,b),!canary`), for messages.
pub fn display(sel: &LabelSelector) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in sel.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            "DoesNotExist" => format!("!{}", req.key),
            op => format!("{} {op} ({values})", req.key),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn sel(pairs: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: (!pairs.is_empty()).then(|| labels(pairs)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    #[test]
    fn matching_table() {
        let web_prod = labels(&[("app", "web"), ("env", "prod")]);
        let none = labels(&[]);
        // (case, selector, labels, matches)
        let table = [
            (
                "empty selector matches all",
                sel(&[], vec![]),
                &web_prod,
                true,
            ),
            (
                "empty selector matches no labels",
                sel(&[], vec![]),
                &none,
                true,
            ),
            (
                "matchLabels hit",
                sel(&[("app", "web")], vec![]),
                &web_prod,
                true,
            ),
            (
                "matchLabels wrong value",
                sel(&[("app", "db")], vec![]),
                &web_prod,
                false,
            ),
            (
                "matchLabels missing key",
                sel(&[("tier", "x")], vec![]),
                &web_prod,
                false,
            ),
            (
                "all matchLabels must hold",
                sel(&[("app", "web"), ("env", "dev")], vec![]),
                &web_prod,
                false,
            ),
            (
                "In hit",
                sel(&[], vec![expr("env", "In", &["dev", "prod"])]),
                &web_prod,
                true,
            ),
            (
                "In miss",
                sel(&[], vec![expr("env", "In", &["dev"])]),
                &web_prod,
                false,
            ),
            (
                "In on a missing key",
                sel(&[], vec![expr("tier", "In", &["a"])]),
                &web_prod,
                false,
            ),
            (
                "NotIn hit",
                sel(&[], vec![expr("env", "NotIn", &["dev"])]),
                &web_prod,
                true,
            ),
            (
                "NotIn miss",
                sel(&[], vec![expr("env", "NotIn", &["prod"])]),
                &web_prod,
                false,
            ),
            (
                "NotIn on a missing key",
                sel(&[], vec![expr("tier", "NotIn", &["a"])]),
                &web_prod,
                true,
            ),
            (
                "Exists",
                sel(&[], vec![expr("app", "Exists", &[])]),
                &web_prod,
                true,
            ),
            (
                "Exists missing",
                sel(&[], vec![expr("tier", "Exists", &[])]),
                &web_prod,
                false,
            ),
            (
                "DoesNotExist",
                sel(&[], vec![expr("tier", "DoesNotExist", &[])]),
                &web_prod,
                true,
            ),
            (
                "DoesNotExist present",
                sel(&[], vec![expr("app", "DoesNotExist", &[])]),
                &web_prod,
                false,
            ),
            (
                "labels and expressions ANDed",
                sel(&[("app", "web")], vec![expr("env", "In", &["dev"])]),
                &web_prod,
                false,
            ),
            (
                "invalid: In without values",
                sel(&[], vec![expr("env", "In", &[])]),
                &web_prod,
                false,
            ),
            (
                "invalid: unknown operator",
                sel(&[], vec![expr("env", "Gt", &["1"])]),
                &web_prod,
                false,
            ),
            (
                "invalid: NotIn without values matches nothing",
                sel(&[], vec![expr("x", "NotIn", &[])]),
                &none,
                false,
            ),
        ];
        for (case, s, l, want) in table {
            assert_eq!(matches(&s, l), want, "{case}");
        }
    }

    #[test]
    fn validation_names_the_field_and_the_fix() {
        let at = "spec.resourceSelectors[0].labelSelector";
        let table = [
            (
                sel(&[], vec![expr("env", "In", &[])]),
                vec![format!(
                    "{at}.matchExpressions[0].values: Invalid value: \"[]\": for 'In', 'NotIn' operators, values set can't be empty"
                )],
            ),
            (
                sel(&[], vec![expr("env", "Exists", &["a"])]),
                vec![format!(
                    "{at}.matchExpressions[0].values: Invalid value: \"a\": values set must be empty for 'Exists' and 'DoesNotExist' operators"
                )],
            ),
            (
                sel(&[], vec![expr("env", "Gt", &["1"])]),
                vec![format!(
                    "{at}.matchExpressions[0].operator: Invalid value: \"Gt\": not a valid label selector operator: use one of In, NotIn, Exists, DoesNotExist"
                )],
            ),
            (
                sel(&[("bad key!", "v")], vec![]),
                vec![format!(
                    "{at}.matchLabels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                )],
            ),
            (
                sel(&[("app", "web")], vec![expr("env", "NotIn", &["a"])]),
                vec![],
            ),
        ];
        for (s, want) in table {
            let got: Vec<String> = validate(&s, at).iter().map(ToString::to_string).collect();
            assert_eq!(got, want, "{}", display(&s));
        }
    }

    #[test]
    fn display_is_kubectl_syntax() {
        let s = sel(
            &[("app", "web")],
            vec![
                expr("env", "In", &["a", "b"]),
                expr("x", "NotIn", &["c"]),
                expr("y", "Exists", &[]),
                expr("z", "DoesNotExist", &[]),
            ],
        );
        assert_eq!(display(&s), "app=web,env in (a,b),x notin (c),y,!z");
    }
}
