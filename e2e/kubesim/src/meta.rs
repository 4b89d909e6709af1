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

/// DNS-1123 label: lowercase alphanumerics and '-', starts and ends alphanumeric, ≤ 63.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: dot-separated labels, ≤ 253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Validates a name by rule; returns the 422 cause.
pub fn validate_name(rule: NameRule, name: &str) -> Option<Cause> {
    let msg = match rule {
        NameRule::Label if !is_dns1123_label(name) => {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        }
        NameRule::Subdomain if !is_dns1123_subdomain(name) => {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        }
        NameRule::PathSegment
            if name.is_empty()
                || name == "."
                || name == ".."
                || name.contains('/')
                || name.contains('%') =>
        {
            "may not be '.' or '..' and may not contain '/' or '%'"
        }
        _ => return None,
    };
    Some(invalid_field(
        "metadata.name",
        format!("Invalid value: \"{name}\": {msg}"),
    ))
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
            (NameRule::PathSegment, "system:controller:x", true),
            (NameRule::PathSegment, "a/b", false),
        ];
        for (rule, name, ok) in cases {
            assert_eq!(validate_name(rule, name).is_none(), ok, "{rule:?} {name}");
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
