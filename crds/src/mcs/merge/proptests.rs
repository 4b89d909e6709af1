//! Property tests: random sets of 1–5 exports drawn from small value pools, so
//! that equal values, clashes and creation-time ties are common.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ClientIPConfig, SessionAffinityConfig};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use proptest::sample::select;

use super::*;
use crate::exported_service::ExportedServicePort;

fn opt_str(pool: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![Just(None), select(pool).prop_map(|s| Some(s.to_owned()))]
}

fn exported_port() -> impl Strategy<Value = ExportedServicePort> {
    (
        opt_str(&["", "tcp", "udp", "http"]),
        opt_str(&["TCP", "UDP", "SCTP"]),
        prop_oneof![4 => Just(None), 1 => Just(Some("h2c".to_owned()))],
        select(&[42, 43, 80][..]),
        prop_oneof![
            Just(None),
            Just(Some(IntOrString::Int(8080))),
            Just(Some(IntOrString::String("web".into()))),
        ],
    )
        .prop_map(
            |(name, protocol, app_protocol, port, target_port)| ExportedServicePort {
                name,
                protocol,
                app_protocol,
                port,
                target_port,
            },
        )
}

fn affinity_config() -> impl Strategy<Value = Option<SessionAffinityConfig>> {
    prop_oneof![
        Just(None),
        Just(Some(SessionAffinityConfig { client_ip: None })),
        select(&[10, 20][..]).prop_map(|t| Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(t)
            })
        })),
    ]
}

fn string_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(select(&["a", "b"][..]), select(&["1", "2"][..]), 0..=1).prop_map(
        |m| {
            m.into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        },
    )
}

fn strings(pool: &'static [&'static [&'static str]]) -> impl Strategy<Value = Vec<String>> {
    select(pool).prop_map(|v| v.iter().map(|s| (*s).to_owned()).collect())
}

fn spec() -> impl Strategy<Value = ExportedServiceSpec> {
    (
        (
            prop::collection::vec(exported_port(), 0..4),
            prop_oneof![4 => Just(false), 1 => Just(true)],
            opt_str(&["ClusterIP", "NodePort", "LoadBalancer"]),
            opt_str(&["None", "ClientIP"]),
            affinity_config(),
        ),
        (
            opt_str(&["Cluster", "Local"]),
            opt_str(&["PreferClose"]),
            strings(&[
                &[],
                &["IPv4"],
                &["IPv6"],
                &["IPv4", "IPv6"],
                &["IPv6", "IPv4"],
                &["IPv4", "IPv4"],
                &["bogus"],
            ]),
            strings(&[&[], &["10.0.0.1"], &["fd00::1"]]),
            string_map(),
            string_map(),
        ),
    )
        .prop_map(
            |(
                (ports, headless, service_type, session_affinity, session_affinity_config),
                (itp, td, ip_families, cluster_ips, exported_labels, exported_annotations),
            )| ExportedServiceSpec {
                ports,
                headless,
                service_type,
                session_affinity,
                session_affinity_config,
                internal_traffic_policy: itp,
                traffic_distribution: td,
                ip_families,
                cluster_ips,
                exported_labels,
                exported_annotations,
                ..Default::default()
            },
        )
}

fn created() -> impl Strategy<Value = Option<Time>> {
    prop_oneof![
        1 => Just(None),
        4 => (0i64..3).prop_map(|s| Some(Time(Timestamp::from_second(1_700_000_000 + s).expect("valid")))),
    ]
}

/// 1–5 exports from distinct clusters.
fn exports() -> impl Strategy<Value = Vec<(String, Option<Time>, ExportedServiceSpec)>> {
    prop::sample::subsequence(vec!["c0", "c1", "c2", "c3", "c4", "c5"], 1..=5).prop_flat_map(
        |clusters| {
            let n = clusters.len();
            (
                Just(clusters),
                prop::collection::vec((created(), spec()), n),
            )
                .prop_map(|(clusters, rest)| {
                    clusters
                        .into_iter()
                        .zip(rest)
                        .map(|(cluster, (created, mut spec))| {
                            spec.cluster = cluster.to_owned();
                            spec.export_creation_timestamp = created.clone();
                            (cluster.to_owned(), created, spec)
                        })
                        .collect()
                })
        },
    )
}

/// 1–5 exports whose cluster ids may repeat (a caller bug that must not panic
/// nor make the result order-dependent).
fn exports_with_repeats() -> impl Strategy<Value = Vec<(String, Option<Time>, ExportedServiceSpec)>>
{
    prop::collection::vec((select(&["c0", "c1"][..]), created(), spec()), 1..=5).prop_map(|v| {
        v.into_iter()
            .map(|(c, t, s)| (c.to_owned(), t, s))
            .collect()
    })
}

/// Which fields of an export come from the alternative spec (bit per field);
/// mostly none or exactly one.
fn field_mask() -> impl Strategy<Value = u16> {
    prop_oneof![2 => Just(0u16), 5 => (0u16..13).prop_map(|bit| 1 << bit)]
}

/// `base` with the fields selected by `mask` taken from `alt` (bits 11 and 12
/// reorder the ports and change their targetPorts, which must never conflict).
fn mixed(base: &ExportedServiceSpec, alt: &ExportedServiceSpec, mask: u16) -> ExportedServiceSpec {
    let mut s = base.clone();
    let take = |bit: u16| mask & (1 << bit) != 0;
    if take(0) {
        s.ports = alt.ports.clone();
    }
    if take(1) {
        s.headless = alt.headless;
    }
    if take(2) {
        s.service_type = alt.service_type.clone();
    }
    if take(3) {
        s.session_affinity = alt.session_affinity.clone();
    }
    if take(4) {
        s.session_affinity_config = alt.session_affinity_config.clone();
    }
    if take(5) {
        s.internal_traffic_policy = alt.internal_traffic_policy.clone();
    }
    if take(6) {
        s.traffic_distribution = alt.traffic_distribution.clone();
    }
    if take(7) {
        s.ip_families = alt.ip_families.clone();
    }
    if take(8) {
        s.cluster_ips = alt.cluster_ips.clone();
    }
    if take(9) {
        s.exported_labels = alt.exported_labels.clone();
    }
    if take(10) {
        s.exported_annotations = alt.exported_annotations.clone();
    }
    if take(11) {
        s.ports.reverse();
    }
    if take(12) {
        for p in &mut s.ports {
            p.target_port = Some(IntOrString::Int(9000 + p.port));
        }
    }
    s
}

/// 1–5 exports from distinct clusters, each a base spec with at most one field
/// replaced (so that all-equal and single-difference sets are common).
fn near_identical_exports()
-> impl Strategy<Value = Vec<(String, Option<Time>, ExportedServiceSpec)>> {
    (
        spec(),
        spec(),
        prop::sample::subsequence(vec!["c0", "c1", "c2", "c3", "c4", "c5"], 1..=5),
    )
        .prop_flat_map(|(base, alt, clusters)| {
            let n = clusters.len();
            let each = prop::collection::vec((created(), field_mask()), n);
            (Just(base), Just(alt), Just(clusters), each)
        })
        .prop_map(|(base, alt, clusters, each)| {
            clusters
                .into_iter()
                .zip(each)
                .map(|(cluster, (created, mask))| {
                    let mut spec = mixed(&base, &alt, mask);
                    spec.cluster = cluster.to_owned();
                    spec.export_creation_timestamp = created.clone();
                    (cluster.to_owned(), created, spec)
                })
                .collect()
        })
}

fn run(input: &[(String, Option<Time>, ExportedServiceSpec)]) -> Option<Merged> {
    let exports: Vec<Export<'_>> = input
        .iter()
        .map(|(cluster, created, spec)| Export::new(cluster, created.as_ref(), spec))
        .collect();
    merge(&exports)
}

/// The reference notion of "same global properties", written independently
/// of the implementation from the module docs' table.
fn same_global_properties(specs: &[&ExportedServiceSpec]) -> bool {
    type Key = (
        BTreeSet<(Option<String>, String, i32, Option<String>)>,
        bool,
        String,
        Option<SessionAffinityConfig>,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
        String,
        Option<String>,
    );
    fn or(v: &Option<String>, default: &str) -> String {
        v.clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| default.to_owned())
    }
    fn key(s: &ExportedServiceSpec) -> Key {
        let ports = s
            .ports
            .iter()
            .map(|p| {
                let name = p.name.clone().filter(|n| !n.is_empty());
                let app = p.app_protocol.clone().filter(|n| !n.is_empty());
                (name, or(&p.protocol, "TCP"), p.port, app)
            })
            .collect();
        let sac = s
            .session_affinity_config
            .clone()
            .filter(|c| c.client_ip.is_some());
        let td = s.traffic_distribution.clone().filter(|t| !t.is_empty());
        (
            ports,
            s.headless,
            or(&s.session_affinity, "None"),
            sac,
            s.exported_labels.clone(),
            s.exported_annotations.clone(),
            or(&s.internal_traffic_policy, "Cluster"),
            td,
        )
    }
    fn families(s: &ExportedServiceSpec) -> Option<BTreeSet<String>> {
        let valid: BTreeSet<String> = s
            .ip_families
            .iter()
            .filter(|f| *f == "IPv4" || *f == "IPv6")
            .cloned()
            .collect();
        let set = if valid.is_empty() {
            s.cluster_ips
                .iter()
                .filter_map(|ip| ip.parse::<IpAddr>().ok())
                .map(|ip| if ip.is_ipv4() { "IPv4" } else { "IPv6" }.to_owned())
                .collect()
        } else {
            valid
        };
        (!set.is_empty()).then_some(set)
    }
    let keys: Vec<Key> = specs.iter().map(|s| key(s)).collect();
    let known: Vec<BTreeSet<String>> = specs.iter().filter_map(|s| families(s)).collect();
    keys.windows(2).all(|w| w[0] == w[1]) && known.windows(2).all(|w| w[0] == w[1])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// (a) any permutation gives the same result; (b) repeated runs agree.
    #[test]
    fn independent_of_input_order(
        (input, shuffled) in exports().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let merged = run(&input);
        prop_assert!(merged.is_some());
        prop_assert_eq!(&run(&shuffled), &merged);
        prop_assert_eq!(&run(&input), &merged);
    }

    /// Repeated cluster ids: still order-independent, one entry per cluster.
    #[test]
    fn repeated_clusters_are_order_independent(
        (input, shuffled) in exports_with_repeats().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
    ) {
        let merged = run(&input).expect("non-empty");
        prop_assert_eq!(run(&shuffled), Some(merged.clone()));
        let distinct: BTreeSet<&str> = input.iter().map(|(c, _, _)| c.as_str()).collect();
        prop_assert_eq!(merged.clusters.len(), distinct.len());
    }

    /// (c)–(f) and the other invariants, on unrelated exports.
    #[test]
    fn invariants_hold(input in exports()) {
        check_invariants(&input)?;
    }

    /// The same on near-identical exports (each differs from a base in at most
    /// one field), where (f) hinges on a single property.
    #[test]
    fn invariants_hold_for_near_identical_exports(input in near_identical_exports()) {
        check_invariants(&input)?;
    }
}

/// (c)–(f) and the other structural invariants of one merge.
fn check_invariants(
    input: &[(String, Option<Time>, ExportedServiceSpec)],
) -> Result<(), TestCaseError> {
    let merged = run(input).expect("non-empty");

    // (c) unique names and unique (protocol, port); sorted; protocol set.
    let names: BTreeSet<&Option<String>> = merged.ports.iter().map(|p| &p.name).collect();
    prop_assert_eq!(names.len(), merged.ports.len());
    let numbers: BTreeSet<(&str, i32)> = merged
        .ports
        .iter()
        .map(|p| (p.protocol_or_default(), p.port))
        .collect();
    prop_assert_eq!(numbers.len(), merged.ports.len());
    prop_assert!(merged.ports.iter().all(|p| p.protocol.is_some()));
    prop_assert!(merged.ports.windows(2).all(|w| w[0].name < w[1].name));

    // (d) port_clusters parallel to ports; each served by a sorted,
    // non-empty set of exporting clusters.
    prop_assert_eq!(merged.port_clusters.len(), merged.ports.len());
    for (pc, port) in merged.port_clusters.iter().zip(&merged.ports) {
        prop_assert_eq!(&pc.port, port);
        prop_assert!(!pc.clusters.is_empty());
        prop_assert!(pc.clusters.windows(2).all(|w| w[0].cluster < w[1].cluster));
        for c in &pc.clusters {
            prop_assert!(merged.clusters.contains(&c.cluster));
        }
    }
    for cluster in merged.excluded_ports.keys() {
        prop_assert!(merged.clusters.contains(cluster));
    }

    // (e) ip families: 1 or 2 valid families, no duplicates.
    let families: BTreeSet<&String> = merged.ip_families.iter().collect();
    prop_assert!(!merged.ip_families.is_empty() && merged.ip_families.len() <= 2);
    prop_assert_eq!(families.len(), merged.ip_families.len());
    prop_assert!(
        merged
            .ip_families
            .iter()
            .all(|f| f == "IPv4" || f == "IPv6")
    );

    // (f) a conflict exactly when some global property differs.
    let specs: Vec<&ExportedServiceSpec> = input.iter().map(|(_, _, s)| s).collect();
    prop_assert_eq!(
        merged.conflict.is_none(),
        same_global_properties(&specs),
        "{:?}",
        merged.conflict
    );

    // The verdict is well-formed.
    if let Some(conflict) = &merged.conflict {
        prop_assert!(!conflict.reasons.is_empty());
        let ranks: Vec<usize> = conflict.reasons.iter().map(|r| reason_rank(r)).collect();
        prop_assert!(ranks.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(ranks.iter().all(|&r| r < CONFLICT_REASONS.len()));
        let quoted_winner = format!("{:?}", merged.winner);
        prop_assert!(conflict.message.contains(&quoted_winner));
    }

    // clusters: sorted, distinct, and the winner is one of them.
    prop_assert!(merged.clusters.windows(2).all(|w| w[0] < w[1]));
    prop_assert!(merged.clusters.contains(&merged.winner));

    // The winner's ports all survive, each served by the winner (when its
    // own Service has no internal clash).
    let winner = &input
        .iter()
        .find(|(c, _, _)| *c == merged.winner)
        .expect("winner")
        .2;
    let own: Vec<ServicePort> = winner.ports.iter().map(ports::normalize).collect();
    let own_names: BTreeSet<_> = own.iter().map(|p| &p.name).collect();
    let own_numbers: BTreeSet<_> = own
        .iter()
        .map(|p| (p.protocol_or_default(), p.port))
        .collect();
    if own_names.len() == own.len() && own_numbers.len() == own.len() {
        for port in &own {
            prop_assert!(merged.ports.contains(port));
            prop_assert!(
                merged
                    .clusters_for_port(port)
                    .iter()
                    .any(|c| c.cluster == merged.winner)
            );
        }
        prop_assert!(!merged.excluded_ports.contains_key(&merged.winner));
    }
    Ok(())
}
