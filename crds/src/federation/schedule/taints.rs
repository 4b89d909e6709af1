//! Cluster taints against placement tolerations, with Kubernetes' semantics
//! (`Toleration.ToleratesTaint`), and the validation of the tolerations.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use k8s_validation::FieldError;

use super::affinity::unsupported;

/// The first taint (in the Cluster's order) with effect NoSchedule (unless the workload
/// is already `placed` there) or NoExecute that no toleration tolerates at `now`,
/// written as kubectl writes taints (`key=value:Effect`). PreferNoSchedule taints never
/// keep a cluster out. A NoExecute taint tolerated for `tolerationSeconds` is no longer
/// tolerated once they have passed since its `timeAdded` ([`tolerated_until`]); with no
/// `now`, as long as a toleration matches.
pub(super) fn untolerated_taint(
    taints: &[Taint],
    tolerations: &[Toleration],
    placed: bool,
    now: Option<Timestamp>,
) -> Option<String> {
    taints
        .iter()
        .filter(|t| t.effect == "NoExecute" || (t.effect == "NoSchedule" && !placed))
        .find(|t| match tolerated_until(t, tolerations) {
            Tolerated::No => true,
            Tolerated::Forever => false,
            Tolerated::Until(until) => now.is_some_and(|now| now >= until),
        })
        .map(render_taint)
}

/// How long `tolerations` tolerate a taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tolerated {
    /// Not at all.
    No,
    /// As long as it stays.
    Forever,
    /// Until then (a NoExecute taint).
    Until(Timestamp),
}

/// How long `tolerations` tolerate `taint`, as Kubernetes' taint manager counts for
/// NoExecute (`getMinTolerationTime`): the least `tolerationSeconds` of the matching
/// tolerations that set one (0 or less: not at all), from the taint's `timeAdded`
/// (`causeway drain` sets it); forever when none sets seconds, or the taint has no
/// `timeAdded` to count from, or the sum does not fit a time.
pub fn tolerated_until(taint: &Taint, tolerations: &[Toleration]) -> Tolerated {
    let matching: Vec<&Toleration> = tolerations
        .iter()
        .filter(|tol| tolerates(tol, taint))
        .collect();
    if matching.is_empty() {
        return Tolerated::No;
    }
    if taint.effect != "NoExecute" {
        return Tolerated::Forever;
    }
    let Some(seconds) = matching.iter().filter_map(|t| t.toleration_seconds).min() else {
        return Tolerated::Forever;
    };
    if seconds <= 0 {
        return Tolerated::No;
    }
    let Some(added) = taint.time_added.as_ref() else {
        return Tolerated::Forever;
    };
    match added.0.checked_add(SignedDuration::from_secs(seconds)) {
        Ok(until) => Tolerated::Until(until),
        Err(_) => Tolerated::Forever,
    }
}

/// The earliest time after `now` that a NoExecute taint of `taints` stops being
/// tolerated: when the scheduler must look again.
pub fn next_taint_deadline(
    taints: &[Taint],
    tolerations: &[Toleration],
    now: Timestamp,
) -> Option<Timestamp> {
    taints
        .iter()
        .filter_map(|t| match tolerated_until(t, tolerations) {
            Tolerated::Until(until) if until > now => Some(until),
            _ => None,
        })
        .min()
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
