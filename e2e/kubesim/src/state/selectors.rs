//! Label and field selectors, parsed as kube-apiserver parses them.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

pub use k8s_validation::selector::Requirement;

/// A parsed label selector (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),!f` (k8s-validation's parser; a bad selector is a
    /// 400 with kube-apiserver's message).
    pub fn parse(s: &str) -> ApiResult<Self> {
        k8s_validation::selector::parse(s)
            .map(LabelSelector)
            .map_err(ApiError::bad_request)
    }

    /// A `metav1.LabelSelector` object (matchLabels, matchExpressions); null or absent
    /// selects everything.
    pub fn from_json(sel: Option<&Value>) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        let Some(sel) = sel.filter(|s| !s.is_null()) else {
            return Ok(LabelSelector(reqs));
        };
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(Requirement::Eq(k.clone(), v.as_str().unwrap_or("").into()));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let values: Vec<String> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            reqs.push(match e.get("operator").and_then(Value::as_str) {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::NotExists(key),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "matchExpressions operator {other:?} is not supported: use In, NotIn, Exists or DoesNotExist"
                    )));
                }
            });
        }
        Ok(LabelSelector(reqs))
    }

    /// True when `labels` (a JSON object or null) satisfies every requirement.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }

    /// True when the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One term of a field selector: the field, `=` or `!=`, the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The field's path in the stored object (`status.phase`); `None` for a label the
    /// type accepts but whose value is always empty (kube-apiserver's `status.podIPs`).
    pub path: Option<String>,
    /// `=` (true) or `!=` (false).
    pub eq: bool,
    /// The value compared with.
    pub value: String,
    /// What the field reads as when the object lacks it (`false` for
    /// `spec.unschedulable`, as kube-apiserver formats the Go zero value).
    pub absent: &'static str,
    /// A second path read when the first is absent or empty (core Events' `source`:
    /// the reporting controller).
    pub or_path: Option<&'static str>,
}

/// A parsed field selector: `path=value`, `path!=value`, comma separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<Term>);

impl FieldSelector {
    /// Parses `metadata.name=foo,status.phase!=Running` (paths as written; which labels a
    /// type accepts is [`crate::state::convert::field_selector`]'s to check).
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut out = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            out.push(Term::on(k.trim(), eq, v.trim()));
        }
        Ok(FieldSelector(out))
    }

    /// True when the object satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        let read = |path: &str| match path.split('.').try_fold(obj, |c, seg| c.get(seg)) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::String(_) | Value::Null) | None => None,
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(other) => Some(other.to_string()),
        };
        self.0.iter().all(|t| {
            let got = t
                .path
                .as_deref()
                .and_then(read)
                .or_else(|| t.or_path.and_then(read))
                .unwrap_or_else(|| t.absent.to_string());
            (got == t.value) == t.eq
        })
    }

    /// The name this selector pins (`metadata.name=x`), if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.path.as_deref() == Some("metadata.name") && t.eq)
            .map(|t| t.value.as_str())
    }
}

impl Term {
    /// `path=value` (`eq`) or `path!=value`, on a field every object has.
    pub fn on(path: &str, eq: bool, value: &str) -> Self {
        Term {
            path: Some(path.to_string()),
            eq,
            value: value.to_string(),
            absent: "",
            or_path: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_table() {
        let labels = json!({"app": "web", "tier": "front", "env": "prod"});
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("app in (web,db),!missing,env=prod", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(Some(&labels)), want, "{sel}");
        }
        assert!(
            LabelSelector::parse("app=")
                .unwrap()
                .matches(Some(&json!({"app": ""})))
        );
    }

    #[test]
    fn bad_label_selectors_are_400() {
        for bad in ["a b=c", "app in web", "x=(", "k=v v"] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
        }
    }

    #[test]
    fn field_selector_matches_paths() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}, "spec": {"nodeName": ""}});
        let fs = FieldSelector::parse("metadata.name=a,status.phase!=Pending").unwrap();
        assert!(fs.matches(&obj));
        assert_eq!(fs.pinned_name(), Some("a"));
        assert!(
            !FieldSelector::parse("metadata.namespace=other")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("garbage").is_err());
    }
}
