//! Object metadata rules: names, timestamps, uids, generation.

use serde_json::Value;

use crate::error::{Cause, invalid_field};
use crate::registry::NameRule;

/// Now as RFC 3339 with second precision, as Kubernetes writes timestamps.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A fresh uid.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A uid derived from a seed (stable across restarts).
pub fn stable_uid(seed: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(seed.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    uuid::Builder::from_random_bytes(b).into_uuid().to_string()
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
/// Largest total size of a object's annotations (keys and values), in bytes.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// apimachinery's `MaxLenError`.
fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// apimachinery's `RegexError`, with its double space after each example.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn label_shape(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn qualified_shape(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Why `s` is not a DNS-1123 label (lowercase alphanumerics and '-', ≤ 63), as
/// kube-apiserver words it; empty when it is one.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    if !label_shape(s) {
        out.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    out
}

/// Why `s` is not a DNS-1123 subdomain (dot-separated labels, ≤ 253 in all); empty when it is one.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(max_len(253));
    }
    if !s.split('.').all(label_shape) {
        out.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    out
}

/// Why `s` is not a qualified name (label and annotation keys: an optional DNS subdomain
/// prefix and '/', then a name of ≤ 63); empty when it is one.
pub fn qualified_name_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        out.push(format!("name part {}", max_len(63)));
    }
    if !qualified_shape(name) {
        out.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    out
}

/// Why `s` is not a label value (empty, or a qualified name part of ≤ 63); empty when it is one.
pub fn label_value_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    if !s.is_empty() && !qualified_shape(s) {
        out.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    out
}

/// DNS-1123 label: lowercase alphanumerics and '-', starts and ends alphanumeric, ≤ 63.
pub fn is_dns1123_label(s: &str) -> bool {
    dns1123_label_errors(s).is_empty()
}

/// DNS-1123 subdomain: dot-separated labels, ≤ 253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    dns1123_subdomain_errors(s).is_empty()
}

fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// Validates a name by rule; returns the 422 causes (none when valid).
pub fn validate_name(rule: NameRule, name: &str) -> Vec<Cause> {
    let msgs = match rule {
        NameRule::Label => dns1123_label_errors(name),
        NameRule::Subdomain => dns1123_subdomain_errors(name),
        NameRule::PathSegment
            if name.is_empty()
                || name == "."
                || name == ".."
                || name.contains('/')
                || name.contains('%') =>
        {
            vec!["may not be '.' or '..' and may not contain '/' or '%'".to_string()]
        }
        NameRule::PathSegment => vec![],
    };
    msgs.into_iter()
        .map(|m| invalid_field("metadata.name", format!("Invalid value: \"{name}\": {m}")))
        .collect()
}

/// kube-apiserver's `ValidateObjectMeta` for an object about to be stored: the name by
/// `rule`, label keys and values, annotation keys and their total size.
pub fn validate_metadata(rule: NameRule, obj: &Value) -> Vec<Cause> {
    let md = obj.get("metadata");
    let name = md
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut out = validate_name(rule, name);
    let map = |k: &str| {
        md.and_then(|m| m.get(k))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    for (k, v) in &map("labels") {
        for m in qualified_name_errors(k) {
            out.push(invalid_field(
                "metadata.labels",
                format!("Invalid value: {k:?}: {m}"),
            ));
        }
        let msgs = match v.as_str() {
            Some(s) => label_value_errors(s),
            None => vec!["must be a string".into()],
        };
        for m in msgs {
            out.push(invalid_field(
                "metadata.labels",
                format!("Invalid value: {}: {m}", quoted(v)),
            ));
        }
    }
    let annotations = map("annotations");
    let mut size = 0;
    for (k, v) in &annotations {
        // keys are qualified names, except that case does not matter
        for m in qualified_name_errors(&k.to_lowercase()) {
            out.push(invalid_field(
                "metadata.annotations",
                format!("Invalid value: {k:?}: {m}"),
            ));
        }
        match v.as_str() {
            Some(s) => size += k.len() + s.len(),
            None => out.push(invalid_field(
                "metadata.annotations",
                format!("Invalid value: {}: must be a string", quoted(v)),
            )),
        }
    }
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
            field: "metadata.annotations".into(),
        });
    }
    out
}

/// A random suffix for `generateName` (5 chars, as kube-apiserver).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let u = uuid::Uuid::new_v4();
    u.as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// True when two objects differ outside `metadata` (and outside `status` when
/// the kind has a status subresource): the rule for bumping `generation`.
pub fn spec_changed(old: &Value, new: &Value, ignore_status: bool) -> bool {
    let (Value::Object(a), Value::Object(b)) = (old, new) else {
        return old != new;
    };
    let skip = |k: &str| k == "metadata" || (ignore_status && k == "status");
    let keys: std::collections::BTreeSet<&String> =
        a.keys().chain(b.keys()).filter(|k| !skip(k)).collect();
    keys.into_iter().any(|k| a.get(k) != b.get(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_rules_table() {
        let cases = [
            (NameRule::Label, "web-1", true),
            (NameRule::Label, "Web", false),
            (NameRule::Label, "a.b", false),
            (NameRule::Label, "-a", false),
            (NameRule::Label, &"a".repeat(64), false),
            (NameRule::Subdomain, "a.b-c.d", true),
            (NameRule::Subdomain, "a..b", false),
            (NameRule::Subdomain, "a_b", false),
            (NameRule::Subdomain, &"a".repeat(100), true),
            (NameRule::Subdomain, &"a".repeat(254), false),
            (NameRule::PathSegment, "system:controller:x", true),
            (NameRule::PathSegment, "a/b", false),
        ];
        for (rule, name, ok) in cases {
            assert_eq!(validate_name(rule, name).is_empty(), ok, "{rule:?} {name}");
        }
    }

    #[test]
    fn generation_rule() {
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"y": 1}});
        let mut b = a.clone();
        b["metadata"]["labels"]["a"] = json!("2");
        b["status"]["y"] = json!(2);
        assert!(!spec_changed(&a, &b, true));
        assert!(spec_changed(&a, &b, false));
        b["spec"]["x"] = json!(2);
        assert!(spec_changed(&a, &b, true));
    }

    #[test]
    fn stable_uid_is_stable() {
        assert_eq!(stable_uid("east"), stable_uid("east"));
        assert_ne!(stable_uid("east"), stable_uid("west"));
        assert_eq!(name_suffix().len(), 5);
    }
}
