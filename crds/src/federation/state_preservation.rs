//! `failover.application.statePreservation` and `failover.cluster.statePreservation`
//! (Karmada's): when application failover moves a workload away from a cluster, or
//! cluster failover away from a failed cluster, each rule reads one value of the failed
//! copy's
//! `.status` (the JSONPath starts there, as Karmada's does: `{.jobStatus.id}`, not
//! `{.status.jobStatus.id}`) and the replacement copies in the clusters that did not
//! run it before get it as the label `aliasLabelName` — a Flink job resuming from the
//! failed copy's checkpoint, say.
//!
//! The JSONPath subset is the one such rules use: fields (`.a.b`, after an optional `$`)
//! and list indexes (`[0]`), in Kubernetes' template braces. A value must be a string,
//! number or bool and a valid label value; a rule whose value is missing or unfit
//! preserves nothing and says why in the eviction, and a rule outside the subset is
//! ignored and named in the policy's `Valid` message (not fatal: the policy stays in
//! force). The labels go to the clusters that take over and stay while the move is
//! recorded: an application failover's eviction until the template's next generation,
//! a cluster failover's ([`cluster_failovers`]) while the cluster stays failed over.
//! For a failed cluster the value is the one its copy last reported before the
//! cluster went down. They are set after the overrides, so they win over a label of
//! the same name.

use std::collections::BTreeMap;

use k8s_validation as validation;
use serde_json::Value;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::federation::binding::ClusterFailover;
use crate::federation::propagation::StatePreservationRule;
use crate::federation::work::Work;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

/// Parses `{.a.b[0].c}` (braces and surrounding spaces optional).
fn parse(path: &str) -> Result<Vec<Step>, String> {
    let bad = |why: &str| {
        format!(
            "{path:?} is not a JSONPath this supports ({why}): write fields and list indexes, e.g. {{.jobStatus.id}} or {{.conditions[0].reason}}"
        )
    };
    let p = path.trim();
    let p = match (p.strip_prefix('{'), p.ends_with('}')) {
        (Some(inner), true) => inner[..inner.len() - 1].trim(),
        (None, false) => p,
        _ => return Err(bad("unbalanced braces")),
    };
    // `$` is the root, as in kubectl's templates
    let p = p.strip_prefix('$').unwrap_or(p);
    if !p.starts_with('.') && !p.starts_with('[') {
        return Err(bad("it must start with a dot"));
    }
    let mut steps = Vec::new();
    let mut rest = p;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            if field.is_empty() {
                return Err(bad("an empty field name"));
            }
            if !field
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-'))
            {
                return Err(bad("filters, wildcards and quoted names are not supported"));
            }
            steps.push(Step::Field(field.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| bad("an unclosed ["))?;
            let i = r[..end]
                .trim()
                .parse()
                .map_err(|_| bad("an index must be a number"))?;
            steps.push(Step::Index(i));
            rest = &r[end + 1..];
        } else {
            return Err(bad("unexpected characters"));
        }
    }
    if steps.is_empty() {
        return Err(bad("it names nothing"));
    }
    Ok(steps)
}

/// What the rules are wrong about, as (field, value, message), for the policy's `Valid`
/// condition; `at` is the rules' field path.
pub fn validate(rules: &[StatePreservationRule], at: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let problems = validation::qualified_name(&r.alias_label_name);
        if !problems.is_empty() {
            out.push((
                format!("{at}[{i}].aliasLabelName"),
                r.alias_label_name.clone(),
                format!("not a label name: {}", problems.join("; ")),
            ));
        }
        if let Err(e) = parse(&r.json_path) {
            out.push((format!("{at}[{i}].jsonPath"), r.json_path.clone(), e));
        }
    }
    out
}

/// The `.status` a Work's member reported last for its workload (the first manifest).
pub fn copy_status(work: &Work) -> Option<&Value> {
    let m = &work.status.as_ref()?.manifest_statuses;
    m.iter()
        .find(|m| m.identifier.ordinal == 0)
        .or(m.first())?
        .status
        .as_ref()
}

/// What cluster failover records of the clusters it moved a template away from, for
/// `failover.cluster.statePreservation` (`rules`): for each cluster failed over now
/// (`failed_over`, with the deadline it passed), the record made when it failed over
/// (`recorded`), or, for one the template ran in (`before`, the binding's clusters), a
/// new one with what `rules` read from its copy's last reported status (`status_of`),
/// timed at the deadline (so that computing it again gives the same record). A
/// cluster no longer failed over (Ready again, or gone) loses its record, and so the
/// replacements their labels; without rules nothing is recorded. The records keep
/// their order, new ones after them by name (a label two records set is the later's).
pub fn cluster_failovers<'a>(
    rules: &[StatePreservationRule],
    recorded: &[ClusterFailover],
    before: &[String],
    failed_over: &[(String, Timestamp)],
    status_of: &dyn Fn(&str) -> Option<&'a Value>,
) -> Vec<ClusterFailover> {
    if rules.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<ClusterFailover> = recorded
        .iter()
        .filter(|r| failed_over.iter().any(|(c, _)| *c == r.cluster))
        .cloned()
        .collect();
    let mut new: Vec<&(String, Timestamp)> = failed_over
        .iter()
        .filter(|(c, _)| !recorded.iter().any(|r| r.cluster == *c))
        // it never ran here: nothing to carry
        .filter(|(c, _)| before.contains(c))
        .collect();
    new.sort();
    for (c, deadline) in new {
        let (labels, problems) = preserve(rules, status_of(c));
        let mut reason = if labels.is_empty() {
            "failed over: statePreservation kept nothing".to_string()
        } else {
            let kept: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("failed over: statePreservation kept {}", kept.join(", "))
        };
        if !problems.is_empty() {
            reason = format!("{reason}; nothing for {}", problems.join("; "));
        }
        out.push(ClusterFailover {
            cluster: c.clone(),
            reason,
            failed_over_at: Time(*deadline),
            preserved_label_state: labels,
            clusters_before_failover: before.to_vec(),
        });
    }
    out
}

/// The labels `rules` take from `status` (the failed copy's `.status`), and why the
/// others give nothing.
pub fn preserve(
    rules: &[StatePreservationRule],
    status: Option<&Value>,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut labels = BTreeMap::new();
    let mut problems = Vec::new();
    for r in rules {
        // a rule the policy's Valid condition says is ignored is: its label would make
        // the member refuse every copy that takes over
        let bad_name = validation::qualified_name(&r.alias_label_name);
        if !bad_name.is_empty() {
            problems.push(format!(
                "{:?} is not a label name ({}): the rule is ignored",
                r.alias_label_name,
                bad_name.join("; ")
            ));
            continue;
        }
        let found = parse(&r.json_path).and_then(|steps| {
            let mut v = status.ok_or("the failed copy reported no status")?;
            for s in &steps {
                v = match s {
                    Step::Field(f) => v.get(f),
                    Step::Index(i) => v.get(*i),
                }
                .ok_or_else(|| {
                    format!("{} finds nothing in the failed copy's status", r.json_path)
                })?;
            }
            match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(format!(
                    "{} is not a string, number or bool in the failed copy's status",
                    r.json_path
                )),
            }
        });
        match found {
            Ok(value) if validation::label_value(&value).is_empty() => {
                labels.insert(r.alias_label_name.clone(), value);
            }
            Ok(value) => problems.push(format!(
                "{}: {value:?} is not a label value",
                r.alias_label_name
            )),
            Err(e) => problems.push(format!("{}: {e}", r.alias_label_name)),
        }
    }
    (labels, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(alias: &str, path: &str) -> StatePreservationRule {
        StatePreservationRule {
            alias_label_name: alias.into(),
            json_path: path.into(),
        }
    }

    #[test]
    fn values_are_read_from_the_status() {
        let status = json!({"jobStatus": {"id": "job-42", "state": "RUNNING"},
            "replicas": 3, "ready": true, "conditions": [{"reason": "Up"}],
            "tags": ["a"], "long": "x".repeat(70), "spaced": "a b"});
        let rules = [
            rule("flink/job-id", "{ .jobStatus.id }"),
            rule("replicas", "{.replicas}"),
            rule("ready", ".ready"),
            rule("reason", "{$.conditions[0].reason}"),
            rule("missing", "{.nope.id}"),
            rule("list", "{.tags}"),
            rule("long", "{.long}"),
            rule("spaced", "{.spaced}"),
            rule("job id", "{ .jobStatus.id }"),
        ];
        let (labels, problems) = preserve(&rules, Some(&status));
        assert_eq!(
            labels,
            BTreeMap::from(
                [
                    ("flink/job-id", "job-42"),
                    ("ready", "true"),
                    ("reason", "Up"),
                    ("replicas", "3")
                ]
                .map(|(k, v)| (k.to_string(), v.to_string()))
            )
        );
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems[4].starts_with("\"job id\" is not a label name (")
                && problems[4].ends_with("): the rule is ignored"),
            "an invalid alias never becomes a label: {problems:?}"
        );
        assert!(
            problems[0].starts_with("missing: {.nope.id} finds nothing"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("is not a string, number or bool"),
            "{problems:?}"
        );
        assert!(problems[2].contains("is not a label value"), "{problems:?}");
        let (none, why) = preserve(&rules[..1], None);
        assert!(none.is_empty());
        assert_eq!(why, ["flink/job-id: the failed copy reported no status"]);
    }

    #[test]
    fn cluster_failovers_are_recorded_once_and_kept_while_they_last() {
        use serde_json::json;
        let rules = [rule("example.com/epoch", "{.observedGeneration}")];
        let deadline: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let failed = |v: &[&str]| {
            v.iter()
                .map(|s| (s.to_string(), deadline))
                .collect::<Vec<_>>()
        };
        let statuses = [
            ("east", json!({"observedGeneration": 4})),
            ("west", json!({"observedGeneration": 5})),
        ];
        let status_of = |c: &str| statuses.iter().find(|(n, _)| *n == c).map(|(_, s)| s);
        // east fails over: recorded with what its copy reported last, at the deadline
        let first = cluster_failovers(
            &rules,
            &[],
            &names(&["east", "west"]),
            &failed(&["gone", "east"]),
            &status_of,
        );
        assert_eq!(first.len(), 1, "gone never ran the workload: {first:?}");
        let f = &first[0];
        assert_eq!(f.cluster, "east");
        assert_eq!(
            f.preserved_label_state,
            BTreeMap::from([("example.com/epoch".to_string(), "4".to_string())])
        );
        assert_eq!(f.clusters_before_failover, names(&["east", "west"]));
        assert_eq!(f.failed_over_at, Time(deadline));
        assert_eq!(
            f.reason,
            "failed over: statePreservation kept example.com/epoch=4"
        );
        // computed again (the same inputs): the same record
        assert_eq!(
            cluster_failovers(
                &rules,
                &[],
                &names(&["east", "west"]),
                &failed(&["east"]),
                &status_of
            ),
            first
        );
        // later rounds keep the record as it was; a new one goes after it, whatever
        // the order the clusters come in
        let none = |_: &str| None;
        let again = cluster_failovers(
            &rules,
            &first,
            &names(&["west", "north"]),
            &failed(&["west", "east"]),
            &status_of,
        );
        assert_eq!(again[0], first[0]);
        assert_eq!(again[1].cluster, "west");
        // east Ready again (no longer failed over): its record goes
        let back = cluster_failovers(&rules, &again, &names(&["west"]), &failed(&["west"]), &none);
        assert_eq!(back, vec![again[1].clone()]);
        // no rules: nothing recorded
        assert!(
            cluster_failovers(&[], &first, &names(&["east"]), &failed(&["east"]), &none).is_empty()
        );
        // nothing to read: recorded, saying why
        let empty = cluster_failovers(&rules, &[], &names(&["east"]), &failed(&["east"]), &none);
        assert!(empty[0].preserved_label_state.is_empty());
        assert_eq!(
            empty[0].reason,
            "failed over: statePreservation kept nothing; nothing for example.com/epoch: the \
             failed copy reported no status"
        );
    }

    #[test]
    fn bad_rules_are_refused_with_what_to_write() {
        let errs = validate(
            &[
                rule("ok/name", "{.a.b[1]}"),
                rule("bad name!", "{.a}"),
                rule("x", "{.items[?(@.a)]}"),
                rule("y", "status.a"),
                rule("z", "{.a[x]}"),
                rule("w", "{.a"),
            ],
            "spec.failover.application.statePreservation.rules",
        );
        let fields: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.failover.application.statePreservation.rules[1].aliasLabelName",
                "spec.failover.application.statePreservation.rules[2].jsonPath",
                "spec.failover.application.statePreservation.rules[3].jsonPath",
                "spec.failover.application.statePreservation.rules[4].jsonPath",
                "spec.failover.application.statePreservation.rules[5].jsonPath",
            ]
        );
        assert!(errs[1].2.contains("e.g. {.jobStatus.id}"), "{}", errs[1].2);
        assert!(errs[4].2.contains("unbalanced braces"), "{}", errs[4].2);
    }
}
