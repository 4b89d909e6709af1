//! Object metadata rules: names, timestamps, uids, generation.

use serde_json::Value;

use crate::error::{Cause, invalid_field};
use crate::state::registry::NameRule;
use k8s_validation::{
    TOTAL_ANNOTATION_SIZE_LIMIT, dns1123_label, dns1123_subdomain, label_value, qualified_name,
    too_long_annotations,
};

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

fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// Validates a name by rule; returns the 422 causes (none when valid).
pub fn validate_name(rule: NameRule, name: &str) -> Vec<Cause> {
    let msgs = match rule {
        NameRule::Label => dns1123_label(name),
        NameRule::Subdomain => dns1123_subdomain(name),
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
        for m in qualified_name(k) {
            out.push(invalid_field(
                "metadata.labels",
                format!("Invalid value: {k:?}: {m}"),
            ));
        }
        let msgs = match v.as_str() {
            Some(s) => label_value(s),
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
        for m in qualified_name(&k.to_lowercase()) {
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
            message: too_long_annotations(),
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

/// True when two objects' annotations differ; none and an empty map are the same, as
/// apimachinery's semantic equality holds them.
pub fn annotations_changed(old: &Value, new: &Value) -> bool {
    let of = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    of(old) != of(new)
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
