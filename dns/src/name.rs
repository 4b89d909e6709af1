//! Domain names in lowercase wire format (RFC 1035 §3.1), the index's key type.
//!
//! The index stores every owner name as its lowercase wire encoding
//! (`\x03svc\x02ns\x03svc\x09clusterset\x05local\x00`), so a query needs only to
//! lowercase its question name into a stack buffer to look it up: no parsing into
//! label vectors, no allocation.

use thiserror::Error;

/// Longest name in wire format, root label included (RFC 1035 §2.3.4).
pub const MAX_WIRE_LEN: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// Why a dotted name could not be turned into a DNS name.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// An empty label (`a..b`, or a leading dot).
    #[error("name {0:?} has an empty label")]
    EmptyLabel(String),
    /// A label longer than 63 bytes.
    #[error("name {0:?} has a label longer than 63 characters")]
    LabelTooLong(String),
    /// More than 255 bytes in wire format (about 253 characters).
    #[error("name {0:?} is longer than 253 characters")]
    TooLong(String),
    /// A character that is not a letter, digit, `-` or `_`.
    #[error("name {0:?} contains {1:?}; only letters, digits, '-' and '_' are allowed")]
    BadChar(String, char),
    /// A label that starts with `-` (hickory-proto, which encodes the SRV, SOA and NS
    /// names, refuses those too, as RFC 952 host names do).
    #[error("name {0:?} has a label starting with '-'")]
    LeadingHyphen(String),
}

/// Encodes a dotted name (`a.b.c` or `a.b.c.`; `.` or the empty string is the root)
/// as lowercase wire format. Labels may hold letters, digits, `-` and `_` (service
/// ports are `_http._tcp`), but may not start with `-`: whatever this accepts,
/// hickory-proto's `Name::from_ascii` accepts too.
pub fn to_wire(dotted: &str) -> Result<Vec<u8>, NameError> {
    let trimmed = dotted.strip_suffix('.').unwrap_or(dotted);
    let mut out = Vec::with_capacity(trimmed.len() + 2);
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            push_label(&mut out, label, dotted)?;
        }
    }
    out.push(0);
    if out.len() > MAX_WIRE_LEN {
        return Err(NameError::TooLong(dotted.to_string()));
    }
    Ok(out)
}

/// Appends one label (length byte + lowercase bytes) after validating it.
fn push_label(out: &mut Vec<u8>, label: &str, whole: &str) -> Result<(), NameError> {
    if label.is_empty() {
        return Err(NameError::EmptyLabel(whole.to_string()));
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(NameError::LabelTooLong(whole.to_string()));
    }
    if let Some(c) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(NameError::BadChar(whole.to_string(), c));
    }
    if label.starts_with('-') {
        return Err(NameError::LeadingHyphen(whole.to_string()));
    }
    out.push(label.len() as u8);
    out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    Ok(())
}

/// Joins `prefix` (a dotted name of at least one label) in front of the wire name
/// `suffix`. An empty prefix is an error, not the suffix itself: an empty
/// `source-cluster` label must not put endpoints one level up.
pub fn prepend(prefix: &str, suffix: &[u8]) -> Result<Vec<u8>, NameError> {
    if prefix.is_empty() || prefix == "." {
        return Err(NameError::EmptyLabel(prefix.to_string()));
    }
    let mut out = to_wire(prefix)?;
    out.pop();
    out.extend_from_slice(suffix);
    if out.len() > MAX_WIRE_LEN {
        return Err(NameError::TooLong(format!(
            "{prefix}.{}",
            to_dotted(suffix)
        )));
    }
    Ok(out)
}

/// The parent of a wire name (`None` for the root).
pub fn parent(wire: &[u8]) -> Option<&[u8]> {
    let len = *wire.first()? as usize;
    if len == 0 {
        return None;
    }
    wire.get(1 + len..)
}

/// Whether `name` is `apex` or below it (both lowercase wire names).
pub fn is_within(name: &[u8], apex: &[u8]) -> bool {
    let mut cur = name;
    loop {
        if cur == apex {
            return true;
        }
        match parent(cur) {
            Some(p) => cur = p,
            None => return false,
        }
    }
}

/// A wire name back as dotted text with a trailing dot (for logs and tests).
pub fn to_dotted(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&len) = wire.get(i) {
        if len == 0 {
            break;
        }
        let label = wire.get(i + 1..i + 1 + len as usize).unwrap_or_default();
        out.push_str(&String::from_utf8_lossy(label));
        out.push('.');
        i += 1 + len as usize;
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// A dashed IP used as the per-endpoint label when the endpoint has no hostname:
/// `10.1.2.3` → `10-1-2-3`, `fd00::1` → `fd00--1` (the CoreDNS convention).
pub fn dashed_ip(ip: &std::net::IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_lowercase_wire() {
        assert_eq!(to_wire("Ab.c").unwrap(), b"\x02ab\x01c\x00");
        assert_eq!(to_wire("ab.c.").unwrap(), b"\x02ab\x01c\x00");
        assert_eq!(to_wire(".").unwrap(), b"\x00");
        assert_eq!(to_wire("").unwrap(), b"\x00");
        assert_eq!(to_wire("_http._tcp").unwrap(), b"\x05_http\x04_tcp\x00");
    }

    #[test]
    fn rejects_bad_names() {
        type Check = fn(&NameError) -> bool;
        let table: &[(&str, Check)] = &[
            ("a..b", |e| matches!(e, NameError::EmptyLabel(_))),
            (".a", |e| matches!(e, NameError::EmptyLabel(_))),
            ("a b", |e| matches!(e, NameError::BadChar(_, ' '))),
            ("a\\.b", |e| matches!(e, NameError::BadChar(_, '\\'))),
            ("a.-b", |e| matches!(e, NameError::LeadingHyphen(_))),
            ("--ffff-10-0-0-3", |e| {
                matches!(e, NameError::LeadingHyphen(_))
            }),
        ];
        for (input, check) in table {
            let err = to_wire(input).unwrap_err();
            assert!(check(&err), "{input}: {err}");
        }
        let long_label = "x".repeat(64);
        assert!(matches!(
            to_wire(&long_label),
            Err(NameError::LabelTooLong(_))
        ));
        let long_name = vec!["abcdefghi"; 26].join(".");
        assert!(matches!(to_wire(&long_name), Err(NameError::TooLong(_))));
        // A trailing hyphen is fine (`fd00::` is `fd00--`), as for hickory-proto.
        assert!(to_wire("fd00--.c1").is_ok());
        // An empty prefix is not the suffix itself.
        let apex = to_wire("clusterset.local").unwrap();
        for empty in ["", "."] {
            assert!(
                matches!(prepend(empty, &apex), Err(NameError::EmptyLabel(_))),
                "{empty:?}"
            );
        }
        assert!(matches!(
            prepend("a..b", &apex),
            Err(NameError::EmptyLabel(_))
        ));
    }

    #[test]
    fn parents_and_zones() {
        let n = to_wire("a.b.clusterset.local").unwrap();
        let apex = to_wire("clusterset.local").unwrap();
        assert_eq!(parent(&n).unwrap(), to_wire("b.clusterset.local").unwrap());
        assert!(is_within(&n, &apex));
        assert!(is_within(&apex, &apex));
        assert!(!is_within(&to_wire("local").unwrap(), &apex));
        assert!(!is_within(&to_wire("xclusterset.local").unwrap(), &apex));
        assert_eq!(parent(b"\x00"), None);
    }

    #[test]
    fn dashes_ips() {
        assert_eq!(dashed_ip(&"10.1.2.3".parse().unwrap()), "10-1-2-3");
        assert_eq!(dashed_ip(&"fd00::1".parse().unwrap()), "fd00--1");
    }

    proptest! {
        #[test]
        fn round_trips(labels in proptest::collection::vec("[a-z0-9_][a-z0-9_-]{0,19}", 0..8)) {
            let dotted = labels.join(".");
            let wire = to_wire(&dotted).unwrap();
            let back = to_dotted(&wire);
            let expected = if dotted.is_empty() { ".".to_string() } else { format!("{dotted}.") };
            prop_assert_eq!(back, expected);
            // Every suffix reached through parent() is a valid name ending at the root.
            let mut cur: &[u8] = &wire;
            let mut steps = 0;
            while let Some(p) = parent(cur) { cur = p; steps += 1; }
            prop_assert_eq!(steps, labels.len());
            prop_assert_eq!(cur, b"\x00");
        }

        #[test]
        fn never_panics_on_any_text(s in "\\PC{0,300}") {
            let _ = to_wire(&s);
        }

        /// What `to_wire` accepts, hickory-proto accepts too (records whose names it
        /// encodes cannot fail after the name passed here), as the same name.
        #[test]
        fn hickory_accepts_what_to_wire_accepts(s in "[-_a-zA-Z0-9.]{0,80}") {
            if let Ok(wire) = to_wire(&s) {
                let n = hickory_proto::rr::Name::from_ascii(&s);
                prop_assert!(n.is_ok(), "{:?}: {:?}", s, n);
                let mut n = n.unwrap_or_default();
                n.set_fqdn(true);
                prop_assert_eq!(n.to_lowercase().to_string(), to_dotted(&wire));
            }
        }
    }
}
