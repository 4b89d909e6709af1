//! Names derived from other names: derived Services, execution namespaces,
//! ExportedServices, and the DNS-1123 checks they must pass.

use sha2::{Digest, Sha256};

use crate::well_known::EXECUTION_NAMESPACE_PREFIX;

/// Prefix of every derived Service name.
pub const DERIVED_SERVICE_PREFIX: &str = "derived-";

/// How many base32hex characters of the hash a derived Service name keeps.
pub const DERIVED_SERVICE_HASH_LEN: usize = 10;

/// RFC 4648 §7 "base32hex" alphabet, lower-cased.
const BASE32HEX_LOWER: &[u8; 32] = b"0123456789abcdefghijklmnopqrstuv";

/// Encodes `bytes` as lower-case base32hex (RFC 4648 "extended hex" alphabet
/// `0-9a-v`) without padding.
pub fn base32hex_lower(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(5) * 8);
    let mut buffer: u16 = 0;
    let mut bits: u32 = 0;
    for &byte in bytes {
        buffer = (buffer << 8) | u16::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(
                BASE32HEX_LOWER[usize::from((buffer >> bits) & 0x1f)],
            ));
        }
        buffer &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(
            BASE32HEX_LOWER[usize::from((buffer << (5 - bits)) & 0x1f)],
        ));
    }
    out
}

/// The name of the derived Service that backs the ServiceImport `<namespace>/<name>`
/// in a member: `derived-` + the first 10 characters of the lower-case, unpadded
/// base32hex encoding of `sha256("<namespace>/<name>")` (the mcs-api reference
/// controller's convention). Always an 18-character DNS-1123 label.
pub fn derived_service_name(namespace: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    let encoded = base32hex_lower(&digest);
    format!(
        "{DERIVED_SERVICE_PREFIX}{}",
        &encoded[..DERIVED_SERVICE_HASH_LEN]
    )
}

/// The hub namespace that holds the `Work` objects of member `cluster`:
/// `causeway-es-<cluster>`.
pub fn execution_namespace(cluster: &str) -> String {
    format!("{EXECUTION_NAMESPACE_PREFIX}{cluster}")
}

/// The member cluster whose execution namespace `namespace` is, if it is one.
pub fn cluster_of_execution_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(EXECUTION_NAMESPACE_PREFIX)
        .filter(|cluster| !cluster.is_empty())
}

/// The hub Lease (in `causeway-system`) that the agent of Pull member `cluster` renews:
/// `cluster-<cluster>`.
pub fn cluster_lease_name(cluster: &str) -> String {
    format!("cluster-{cluster}")
}

/// The name of the `ExportedService` that member `cluster` publishes to the hub for
/// its Service `service`: `<service>.<cluster>` (in the Service's namespace).
pub fn exported_service_name(service: &str, cluster: &str) -> String {
    format!("{service}.{cluster}")
}

/// The first `bytes` bytes of the SHA-256 of `s`, in lowercase hex.
fn short_hash(s: &str, bytes: usize) -> String {
    Sha256::digest(s.as_bytes())[..bytes]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The value of a label that names object `name` (a DNS-1123 subdomain): the name
/// when it fits a label value (63 characters), else a prefix of it, `-` and a hash of
/// the whole. Selectors use the same value; the full name goes in an annotation of
/// the same key ([`named_by`] reads it back).
pub fn label_value(name: &str) -> String {
    const MAX: usize = 63;
    if name.len() <= MAX {
        return name.to_string();
    }
    let mut cut = MAX - 9;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = name[..cut].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{head}-{}", short_hash(name, 4))
}

/// The object an object's label `key` names ([`label_value`]): the annotation of the
/// same key when the name was too long for the label, else the label.
pub fn named_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .or_else(|| meta.labels.as_ref()?.get(key))
        .cloned()
}

/// Labels `key` = [`label_value`] of `name` into `labels`, and when the name had to be
/// shortened, the full name into `annotations` under the same key.
pub fn label_naming(
    key: &str,
    name: &str,
    labels: &mut std::collections::BTreeMap<String, String>,
    annotations: &mut std::collections::BTreeMap<String, String>,
) {
    let value = label_value(name);
    if value != name {
        annotations.insert(key.to_string(), name.to_string());
    }
    labels.insert(key.to_string(), value);
}

/// `joined` when it is a valid length for a name (253), else a prefix of it and a hash
/// of the whole, cut on a character boundary and never leaving a '.' or '-' before the
/// hash's '.', so the result stays a DNS-1123 subdomain.
pub(crate) fn bounded(joined: String) -> String {
    if joined.len() <= 253 {
        return joined;
    }
    let mut cut = 200;
    while !joined.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = joined[..cut].trim_end_matches(['.', '-']);
    format!("{head}.{}", short_hash(&joined, 8))
}

/// Name of the revision that keeps generation `generation` of the template of binding
/// `binding` (a ControllerRevision next to the binding): `<binding>-g<generation>`
/// for a ResourceBinding, `<binding>-cg<generation>` for a ClusterResourceBinding (whose
/// revisions are kept in causeway-system, next to that namespace's ResourceBindings:
/// the first form always ends in `-g<digits>` and the second never does, so the two
/// never take each other's name); hashed when too long.
pub fn revision_name(binding: &str, cluster_binding: bool, generation: i64) -> String {
    let form = if cluster_binding { "cg" } else { "g" };
    bounded(format!("{binding}-{form}{generation}"))
}

/// Name of the hub copy of a member slice: `<slice>.<cluster>`, hashed when too long.
pub fn hub_slice_name(slice: &str, cluster: &str) -> String {
    bounded(format!("{slice}.{cluster}"))
}

/// Name of an object of namespace `namespace` in a Pull member's outbox (its execution
/// namespace on the hub): `<namespace>.<name>`, so that objects of different namespaces
/// cannot collide; over 253 characters, a prefix of it and a hash of the whole.
pub fn outbox_name(namespace: &str, name: &str) -> String {
    bounded(format!("{namespace}.{name}"))
}

/// Name of the `Work` (in a member's execution namespace) rendered from a binding:
/// `<namespace>.<binding>` for a ResourceBinding, `<binding>` for a
/// ClusterResourceBinding; over 253 characters, a prefix and a hash of the whole.
pub fn work_name(binding_namespace: Option<&str>, binding: &str) -> String {
    match binding_namespace {
        Some(ns) if !ns.is_empty() => bounded(format!("{ns}.{binding}")),
        _ => bounded(binding.to_string()),
    }
}

/// Name of the Work that creates namespace `namespace` in a member. A binding's Work
/// name always ends in `-<kind>` (its last dot-separated part has a dash); this one's
/// last part is `namespace`, so the two never meet.
pub fn namespace_work_name(namespace: &str) -> String {
    format!("{namespace}.namespace")
}

/// Name of a member slice for a hub slice.
pub fn member_slice_name(derived: &str, hub_slice: &str) -> String {
    format!("{derived}-{}", short_hash(hub_slice, 6))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_validation::{is_dns1123_label, is_dns1123_subdomain};
    use proptest::prelude::*;

    #[test]
    fn hub_slice_names_stay_valid() {
        assert_eq!(hub_slice_name("web-abc", "east"), "web-abc.east");
        let long = "a".repeat(250);
        let n = hub_slice_name(&long, "east");
        assert!(n.len() <= 253, "{}", n.len());
        // a '-' exactly at the cut must not end up before the hash
        let dashed = format!("{}-{}", "a".repeat(199), "b".repeat(60));
        let n = hub_slice_name(&dashed, "east");
        assert!(is_dns1123_subdomain(&n), "{n}");
        assert_ne!(hub_slice_name(&long, "east"), hub_slice_name(&long, "west"));
    }

    #[test]
    fn outbox_names_keep_namespaces_apart_and_stay_valid() {
        // (namespace, name, expected) where the name is short enough to keep
        let table = [
            ("default", "web.east", "default.web.east"),
            ("shop", "web-abc.east", "shop.web-abc.east"),
            // namespaces hold no dot, so the first dot separates namespace and name
            ("a", "b.c", "a.b.c"),
        ];
        for (ns, name, want) in table {
            assert_eq!(outbox_name(ns, name), want);
            assert!(is_dns1123_subdomain(&outbox_name(ns, name)));
        }
        assert_ne!(outbox_name("a", "web"), outbox_name("b", "web"));
        let ns = "n".repeat(63);
        for len in [190, 191, 252, 253] {
            let long = format!("{}-x", "a".repeat(len - 2));
            let n = outbox_name(&ns, &long);
            assert!(n.len() <= 253, "{}", n.len());
            assert!(is_dns1123_subdomain(&n), "{n}");
        }
        let long = "a".repeat(250);
        assert_ne!(outbox_name(&ns, &long), outbox_name("other", &long));
        assert_ne!(
            outbox_name(&ns, &long),
            outbox_name(&ns, &format!("{}b", "a".repeat(249)))
        );
    }

    #[test]
    fn revision_names_are_bounded_and_distinct() {
        assert_eq!(
            revision_name("web-deployment", false, 7),
            "web-deployment-g7"
        );
        assert_eq!(revision_name("crontabs-crd", true, 7), "crontabs-crd-cg7");
        let a = format!("{}-x", "a".repeat(260));
        let b = format!("{}-y", "a".repeat(260));
        let (ra, rb) = (revision_name(&a, false, 12), revision_name(&b, false, 12));
        assert!(ra.len() <= 253 && rb.len() <= 253, "{ra}");
        assert_ne!(ra, rb, "names that differ past the cut stay distinct");
        assert_ne!(revision_name(&a, false, 12), revision_name(&a, false, 13));
        // a ResourceBinding in causeway-system and a ClusterResourceBinding of any
        // name never want the same revision name (both are kept in that namespace)
        for (rb_name, crb_name) in [("web", "web"), ("web-c", "web"), ("web-cg1", "web-c")] {
            for (g, h) in [(1, 1), (1, 11), (11, 1)] {
                assert_ne!(
                    revision_name(rb_name, false, g),
                    revision_name(crb_name, true, h),
                    "{rb_name} {g} / {crb_name} {h}"
                );
            }
        }
        assert_ne!(revision_name(&a, false, 12), revision_name(&a, true, 12));
    }

    proptest! {
        /// Whatever the name (a subdomain of any length), the label value is valid,
        /// is the name itself when that fits, differs for names that differ, and the
        /// name comes back from the object's labels and annotations.
        #[test]
        fn label_values_are_valid_distinct_and_give_the_name_back(
            a in "[a-z0-9]([a-z0-9.-]{0,250}[a-z0-9])?",
            b in "[a-z0-9]([a-z0-9.-]{0,250}[a-z0-9])?",
        ) {
            for n in [&a, &b] {
                let v = label_value(n);
                prop_assert!(k8s_validation::label_value(&v).is_empty(), "{v}: {:?}", k8s_validation::label_value(&v));
                prop_assert_eq!(v == *n, n.len() <= 63);
                let (mut l, mut ann) = (Default::default(), Default::default());
                label_naming("causeway.io/binding-name", n, &mut l, &mut ann);
                let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    labels: Some(l),
                    annotations: Some(ann),
                    ..Default::default()
                };
                let back = named_by(&meta, "causeway.io/binding-name");
                prop_assert_eq!(back.as_deref(), Some(n.as_str()));
            }
            if a != b {
                prop_assert_ne!(label_value(&a), label_value(&b));
            }
        }
    }

    #[test]
    fn long_binding_names_fit_a_label_and_a_name() {
        let name = "prometheus-kube-prometheus-stack-prometheus-rulefiles-0";
        let b = crate::federation::binding::binding_name("ConfigMap", name);
        assert_eq!(b, format!("{name}-configmap"));
        let v = label_value(&b);
        assert!(
            v.len() <= 63 && v.starts_with("prometheus-kube-prometheus"),
            "{v}"
        );
        let huge =
            crate::federation::binding::binding_name("PersistentVolumeClaim", &"d".repeat(253));
        assert!(is_dns1123_subdomain(&huge), "{huge}");
    }

    #[test]
    fn base32hex_matches_rfc4648_test_vectors() {
        // RFC 4648 §10, lower-cased and without padding.
        let vectors = [
            ("", ""),
            ("f", "co"),
            ("fo", "cpng"),
            ("foo", "cpnmu"),
            ("foob", "cpnmuog"),
            ("fooba", "cpnmuoj1"),
            ("foobar", "cpnmuoj1e8"),
        ];
        for (input, want) in vectors {
            assert_eq!(base32hex_lower(input.as_bytes()), want, "input {input:?}");
        }
    }

    #[test]
    fn derived_service_name_matches_independent_vectors() {
        // Computed with Python:
        // base64.b32hexencode(hashlib.sha256(b"default/nginx").digest()).decode().lower()[:10]
        assert_eq!(
            derived_service_name("default", "nginx"),
            "derived-iuq6ea9f4j"
        );
        assert_eq!(derived_service_name("demo", "demo"), "derived-btqqkip9o8");
    }

    #[test]
    fn execution_namespace_round_trips() {
        assert_eq!(execution_namespace("member-1"), "causeway-es-member-1");
        assert_eq!(
            cluster_of_execution_namespace("causeway-es-member-1"),
            Some("member-1")
        );
        assert_eq!(cluster_of_execution_namespace("causeway-es-"), None);
        assert_eq!(cluster_of_execution_namespace("default"), None);
    }

    #[test]
    fn exported_service_name_is_service_dot_cluster() {
        assert_eq!(exported_service_name("web", "member-1"), "web.member-1");
        assert!(is_dns1123_subdomain(&exported_service_name(
            "web", "member-1"
        )));
    }

    #[test]
    fn dns1123_checks() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(""));
    }

    /// A straightforward bit-by-bit reference encoder to compare against.
    fn reference_base32hex(bytes: &[u8]) -> String {
        let bits: Vec<u8> = bytes
            .iter()
            .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
            .collect();
        bits.chunks(5)
            .map(|chunk| {
                let mut v = 0usize;
                for i in 0..5 {
                    v = (v << 1) | usize::from(chunk.get(i).copied().unwrap_or(0));
                }
                char::from(BASE32HEX_LOWER[v])
            })
            .collect()
    }

    proptest! {
        #[test]
        fn base32hex_agrees_with_reference(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(base32hex_lower(&bytes), reference_base32hex(&bytes));
        }

        #[test]
        fn derived_name_is_an_18_char_dns_label(ns in "[a-z0-9-]{0,63}", name in "\\PC{0,80}") {
            let derived = derived_service_name(&ns, &name);
            prop_assert_eq!(derived.len(), 18);
            prop_assert!(derived.starts_with(DERIVED_SERVICE_PREFIX));
            prop_assert!(is_dns1123_label(&derived), "{}", derived);
            prop_assert_eq!(derived_service_name(&ns, &name), derived);
        }

        #[test]
        fn derived_name_depends_on_namespace_and_name(a in "[a-z]{1,20}", b in "[a-z]{1,20}") {
            // "a/b" differs from "b/a" unless a == b.
            prop_assume!(a != b);
            prop_assert_ne!(derived_service_name(&a, &b), derived_service_name(&b, &a));
        }
    }
}
