//! Kubernetes' own validation of names, label and annotation keys and label values
//! (`k8s.io/apimachinery/pkg/util/validation`), with kube-apiserver's messages, so
//! Causeway refuses or reports what a real API server would refuse, before it writes.

/// The regular expression of a qualified name's name part and of a label value.
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";

/// The most a label value or a qualified name's name part may hold.
pub const LABEL_VALUE_MAX: usize = 63;
/// The most all annotations of one object may hold, keys and values together.
pub const TOTAL_ANNOTATION_SIZE_MAX: usize = 256 * 1024;

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the whole string.
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` for every dot-separated part.
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|l| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

/// `IsDNS1123Subdomain`: the errors of `s` as a DNS subdomain (empty when valid).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
        ));
    }
    errs
}

/// `IsDNS1035Label`: the errors of `s` as a DNS-1035 label, the rule for Service
/// names (empty when valid).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[b.len() - 1] != b'-';
    if !ok {
        errs.push(format!(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '{DNS1035_LABEL_FMT}')"
        ));
    }
    errs
}

/// `IsQualifiedName`: the errors of a label or annotation key (empty when valid): an
/// optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
pub fn qualified_name(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            name
        }
        _ => {
            errs.push(format!(
                "a qualified name {QUALIFIED_NAME_ERR} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_VALUE_MAX {
        errs.push(format!(
            "name part must be no more than {LABEL_VALUE_MAX} characters"
        ));
    }
    if !name.is_empty() && !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {QUALIFIED_NAME_ERR} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"
        ));
    }
    errs
}

/// `IsValidLabelValue`: the errors of a label value (empty when valid; the empty
/// string is a valid value).
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > LABEL_VALUE_MAX {
        errs.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !v.is_empty() && !matches_qualified_name_part(v) {
        errs.push(format!(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '({QUALIFIED_NAME_FMT})?')"
        ));
    }
    errs
}

/// One field error, as kube-apiserver words it: `<field>: Invalid value: "<v>": <why>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `metadata.labels` or `spec.exportedLabels`.
    pub field: String,
    /// The offending value (a key or a value).
    pub value: String,
    /// Why it is refused.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: Invalid value: {:?}: {}",
            self.field, self.value, self.message
        )
    }
}

/// `ValidateLabels`: every key a qualified name, every value a label value.
pub fn labels<'a>(
    field: &str,
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (k, v) in labels {
        for message in qualified_name(k) {
            out.push(FieldError {
                field: field.to_string(),
                value: k.clone(),
                message,
            });
        }
        for message in label_value(v) {
            out.push(FieldError {
                field: field.to_string(),
                value: v.clone(),
                message,
            });
        }
    }
    out
}

/// `ValidateAnnotations`: every key a qualified name (lower-cased, as kube-apiserver
/// checks them), and all keys and values together at most 256 KiB.
pub fn annotations<'a>(
    field: &str,
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut total = 0;
    for (k, v) in annotations {
        total += k.len() + v.len();
        for message in qualified_name(&k.to_lowercase()) {
            out.push(FieldError {
                field: field.to_string(),
                value: k.clone(),
                message,
            });
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_MAX {
        out.push(FieldError {
            field: field.to_string(),
            value: String::new(),
            message: format!(
                "Too long: may not be more than {TOTAL_ANNOTATION_SIZE_MAX} bytes (all keys and values together are {total})"
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn qualified_names_table() {
        // (key, valid) — the cases of apimachinery's TestIsQualifiedName
        let table = [
            ("simple", true),
            ("now-with-dashes", true),
            ("1-starts-with-num", true),
            ("1234", true),
            ("simple/simple", true),
            ("now-with-dashes/simple", true),
            ("now-with-dashes/now-with-dashes", true),
            ("now.with.dots/now-with-dashes", true),
            ("now-with.dashes-and.dots/now-with-dashes", true),
            ("now.with.dots/now.with.dots", true),
            ("1.2.3.4/5678", true),
            ("Uppercase_Is_OK_123", true),
            ("example.com/Uppercase_Is_OK_123", true),
            ("requests.storage-foo", true),
            (&*format!("{}/{}", "a".repeat(253), "b".repeat(63)), true),
            ("", false),
            ("nospecialchars%^=@", false),
            ("cantendwithadash-", false),
            ("-cantstartwithadash-", false),
            ("only/one/slash", false),
            ("Example.com/abc", false),
            ("example_com/abc", false),
            ("example.com/", false),
            ("/simple", false),
            ("a b", false),
            (&*"a".repeat(64), false),
            (&*format!("{}/b", "a".repeat(254)), false),
            ("Transfer_Encoding", true),
        ];
        for (key, valid) in table {
            assert_eq!(
                qualified_name(key).is_empty(),
                valid,
                "{key:?}: {:?}",
                qualified_name(key)
            );
        }
    }

    #[test]
    fn messages_are_kube_apiservers() {
        assert_eq!(
            qualified_name("a b"),
            vec![
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
        assert_eq!(qualified_name("/x"), vec!["prefix part must be non-empty"]);
        assert_eq!(
            label_value("-x"),
            vec![
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ]
        );
        assert_eq!(
            dns1035_label("no.such.service")[0],
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        );
        let l = std::collections::BTreeMap::from([("a b".to_string(), "ok".to_string())]);
        assert_eq!(
            labels("spec.exportedLabels", &l)[0].to_string(),
            "spec.exportedLabels: Invalid value: \"a b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
    }

    #[test]
    fn label_values_and_dns_names_table() {
        for (v, valid) in [
            ("", true),
            ("a", true),
            ("A_b.c-1", true),
            ("-a", false),
            ("a-", false),
            ("a b", false),
            (&*"a".repeat(63), true),
            (&*"a".repeat(64), false),
        ] {
            assert_eq!(label_value(v).is_empty(), valid, "{v:?}");
        }
        for (v, valid) in [
            ("web", true),
            ("web-1", true),
            ("1web", false),
            ("no.such.service", false),
            ("Web", false),
            ("", false),
            (&*"a".repeat(64), false),
        ] {
            assert_eq!(dns1035_label(v).is_empty(), valid, "{v:?}");
        }
        for (v, valid) in [
            ("a.b-c.d", true),
            (&*format!("{}.b", "a".repeat(70)), true),
            ("a..b", false),
            ("", false),
            (&*"a".repeat(254), false),
        ] {
            assert_eq!(dns1123_subdomain(v).is_empty(), valid, "{v:?}");
        }
    }

    #[test]
    fn annotations_are_limited_in_total_size() {
        let big = std::collections::BTreeMap::from([(
            "example.com/big".to_string(),
            "x".repeat(TOTAL_ANNOTATION_SIZE_MAX),
        )]);
        let errs = annotations("metadata.annotations", &big);
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.starts_with("Too long"), "{errs:?}");
        // keys are checked lower-cased, as kube-apiserver does
        let upper =
            std::collections::BTreeMap::from([("Example.COM/Key".to_string(), String::new())]);
        assert!(annotations("metadata.annotations", &upper).is_empty());
    }

    proptest! {
        #[test]
        fn a_key_matching_the_grammar_is_valid(
            prefix in proptest::option::of("[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?){0,3}"),
            name in "[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?",
        ) {
            let key = match prefix { Some(p) => format!("{p}/{name}"), None => name };
            prop_assert!(qualified_name(&key).is_empty(), "{}", key);
        }

        #[test]
        fn a_key_with_a_character_outside_the_grammar_is_invalid(
            name in "[a-z]{1,10}",
            bad in "[ %^=@:;,!~*]",
        ) {
            let key = format!("{name}{bad}{name}");
            prop_assert!(!qualified_name(&key).is_empty(), "{}", key);
        }
    }
}
