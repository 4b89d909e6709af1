//! Kubernetes' own validation of object names, label and annotation keys and label
//! values (`k8s.io/apimachinery/pkg/util/validation`), with kube-apiserver's messages.
//! One place for everything that must refuse what a real API server refuses: kubesim
//! (the test API server) and Causeway's controllers, before they write; and for the
//! requests kube-apiserver reads one way (label selectors, impersonation headers), so
//! kubesim and Causeway's search API read them alike.

pub mod impersonation;
pub mod selector;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// The most a label value, a qualified name's name part or a DNS label may hold.
pub const LABEL_MAX: usize = 63;
/// The most a DNS subdomain may hold.
pub const SUBDOMAIN_MAX: usize = 253;
/// The most all annotations of one object may hold, keys and values together, in bytes.
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

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the whole string.
fn label_shape(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the whole string.
fn qualified_shape(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(s.chars().next())
        && alnum(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `IsDNS1123Label`: why `s` is not a DNS-1123 label (lowercase alphanumerics and '-',
/// at most 63); empty when it is one. Namespace names, most cluster-scoped names.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > LABEL_MAX {
        out.push(max_len(LABEL_MAX));
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

/// `IsDNS1123Subdomain`: why `s` is not a DNS-1123 subdomain (dot-separated labels, at
/// most 253 in all); empty when it is one. Most object names, custom resources included.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        out.push(max_len(SUBDOMAIN_MAX));
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

/// `IsDNS1035Label`: why `s` is not a DNS-1035 label (a DNS-1123 label that starts with
/// a letter); empty when it is one. Service names.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > LABEL_MAX {
        out.push(max_len(LABEL_MAX));
    }
    if !(label_shape(s) && s.starts_with(|c: char| c.is_ascii_lowercase())) {
        out.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    out
}

/// `IsQualifiedName`: why `s` is not a qualified name (label and annotation keys: an
/// optional DNS-subdomain prefix and '/', then a name of at most 63); empty when it is one.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    dns1123_subdomain(prefix)
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
    } else if name.len() > LABEL_MAX {
        out.push(format!("name part {}", max_len(LABEL_MAX)));
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

/// `IsValidLabelValue`: why `s` is not a label value (empty, or a qualified name's name
/// part of at most 63); empty when it is one.
pub fn label_value(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > LABEL_MAX {
        out.push(max_len(LABEL_MAX));
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

/// Whether `s` is a DNS-1123 label.
pub fn is_dns1123_label(s: &str) -> bool {
    dns1123_label(s).is_empty()
}

/// Whether `s` is a DNS-1123 subdomain.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    dns1123_subdomain(s).is_empty()
}

/// One field error, as kube-apiserver words it: `<field>: Invalid value: "<v>": <why>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `metadata.labels` or `spec.exportedLabels`.
    pub field: String,
    /// The offending value (a key or a value); empty for a size error.
    pub value: String,
    /// Why it is refused.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() && self.message.starts_with("Too long") {
            return write!(f, "{}: {}", self.field, self.message);
        }
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

/// `ValidateAnnotations`: every key a qualified name (checked lower-cased, as
/// kube-apiserver does), and all keys and values together at most 256 KiB.
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
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(FieldError {
            field: field.to_string(),
            value: String::new(),
            message: too_long_annotations(),
        });
    }
    out
}

/// kube-apiserver's message for annotations over [`TOTAL_ANNOTATION_SIZE_LIMIT`].
pub fn too_long_annotations() -> String {
    format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")
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
            "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT),
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
