//! Cluster taints against placement tolerations, with Kubernetes' semantics
//! (`Toleration.ToleratesTaint`), and the validation of the tolerations.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_validation::FieldError;

use super::affinity::unsupported;

/// The first taint (in the Cluster's order) with effect NoSchedule (unless the workload
/// is already `placed` there) or NoExecute that no toleration tolerates, written as
/// kubectl writes taints (`key=value:Effect`). PreferNoSchedule taints never keep a
/// cluster out.
pub(super) fn untolerated_taint(
    taints: &[Taint],
    tolerations: &[Toleration],
    placed: bool,
) -> Option<String> {
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute" || (t.effect == "NoSchedule" && !placed))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .map(render_taint)
}

/// `Toleration.ToleratesTaint`: an empty effect matches every effect, an empty key
/// (with Exists) every key; Equal (the default) compares values, Exists ignores them.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// `key=value:Effect`, or `key:Effect` without a value.
fn render_taint(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", taint.key, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}

/// `ValidateTolerations`, plus Karmada's rule that cluster tolerations may not use
/// the Lt and Gt operators. Field paths start at `at`.
pub fn validate_tolerations(tolerations: &[Toleration], at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, tol) in tolerations.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let key = tol.key.as_deref().unwrap_or_default();
        let operator = tol.operator.as_deref().unwrap_or_default();
        let value = tol.value.as_deref().unwrap_or_default();
        let err = |field: &str, value: &str, message: &str| FieldError {
            field: format!("{at}.{field}"),
            value: value.to_string(),
            message: message.to_string(),
        };
        if !key.is_empty() {
            for message in k8s_validation::qualified_name(key) {
                errs.push(err("key", key, &message));
            }
        } else if operator != "Exists" {
            errs.push(err(
                "operator",
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        match operator {
            "" | "Equal" => {
                for message in k8s_validation::label_value(value) {
                    errs.push(err("value", value, &message));
                }
            }
            "Exists" if !value.is_empty() => errs.push(err(
                "value",
                value,
                "value must be empty when `operator` is 'Exists'",
            )),
            "Exists" => {}
            "Lt" | "Gt" => errs.push(err(
                "operator",
                operator,
                "the operators Lt and Gt are not allowed in cluster tolerations; use Equal or Exists",
            )),
            op => errs.push(unsupported(
                format!("{at}.operator"),
                op,
                &["Equal", "Exists"],
            )),
        }
        let effect = tol.effect.as_deref().unwrap_or_default();
        let effects = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
        if !effect.is_empty() && !effects.contains(&effect) {
            errs.push(unsupported(format!("{at}.effect"), effect, &effects));
        }
        if tol.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(err(
                "effect",
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
    }
    errs
}
