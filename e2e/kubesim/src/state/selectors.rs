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

/// A parsed field selector: `path=value`, `path!=value`, comma separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=foo,status.phase!=Running`.
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
            out.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// True when the object satisfies every term. Any dotted path into the object works.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }

    /// The name this selector pins (`metadata.name=x`), if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, eq, _)| p == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
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
