//! Property tests over random fleets (up to 8 clusters drawn from small pools of
//! labels, regions, zones and taints, some being deleted) and random valid
//! placements, so that matches, misses and ties are all common.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use proptest::sample::{select, subsequence};

use super::*;
use crate::federation::FieldSelector;
use crate::federation::cluster::{ClusterSpec, ClusterStatus};

const NAMES: [&str; 8] = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"];
const KEYS: [&str; 3] = ["env", "tier", "gpu"];
const VALUES: [&str; 3] = ["a", "b", "c"];
const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-south"];
const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const TAINT_KEYS: [&str; 2] = ["cluster.causeway.io/not-ready", "dedicated"];
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn strings(pool: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<String>> {
    subsequence(pool, 0..=max).prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn opt(pool: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![Just(None), select(pool).prop_map(|s| Some(s.to_owned()))]
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(select(&KEYS[..]), select(&VALUES[..]), 0..=3).prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    })
}

fn taint() -> impl Strategy<Value = Taint> {
    (select(&TAINT_KEYS[..]), opt(&VALUES), select(&EFFECTS[..])).prop_map(|(k, value, e)| Taint {
        key: k.into(),
        value,
        effect: e.into(),
        time_added: None,
    })
}

fn cluster(name: String) -> impl Strategy<Value = Cluster> {
    (
        labels(),
        (opt(&REGIONS), opt(&REGIONS), opt(&["aws", "gcp"])),
        (strings(&ZONES, 2), strings(&ZONES, 2)),
        prop::collection::vec(taint(), 0..=2),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            move |(
                labels,
                (region, status_region, provider),
                (zones, status_zones),
                taints,
                gone,
            )| {
                let mut c = Cluster::new(
                    &name,
                    ClusterSpec {
                        region,
                        provider,
                        zones,
                        taints,
                        ..ClusterSpec::default()
                    },
                );
                c.metadata.labels = Some(labels);
                c.metadata.deletion_timestamp = gone.then_some(Time(Timestamp::UNIX_EPOCH));
                c.status = Some(ClusterStatus {
                    region: status_region,
                    zones: status_zones,
                    ..ClusterStatus::default()
                });
                c
            },
        )
}

/// 0–8 clusters with distinct names.
fn fleet() -> impl Strategy<Value = Vec<Cluster>> {
    subsequence(&NAMES[..], 0..=NAMES.len()).prop_flat_map(|names| {
        names
            .into_iter()
            .map(|n| cluster(n.to_owned()))
            .collect::<Vec<_>>()
    })
}

fn label_requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        select(&KEYS[..]),
        select(&["In", "NotIn", "Exists", "DoesNotExist"][..]),
        strings(&VALUES, 2),
    )
        .prop_map(|(key, op, mut values)| {
            let listed = op == "In" || op == "NotIn";
            if listed && values.is_empty() {
                values.push(VALUES[0].to_owned());
            }
            LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: listed.then_some(values),
            }
        })
}

fn label_selector() -> impl Strategy<Value = LabelSelector> {
    (labels(), prop::collection::vec(label_requirement(), 0..=2)).prop_map(|(l, e)| LabelSelector {
        match_labels: Some(l),
        match_expressions: Some(e),
    })
}

fn field_requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        select(&["provider", "region", "zone"][..]),
        select(&["In", "NotIn"][..]),
        subsequence(&["aws", "gcp", "us-east", "eu-west", "z1", "z2"][..], 1..=3),
    )
        .prop_map(|(key, op, values)| NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.into_iter().map(str::to_owned).collect()),
        })
}

fn affinity() -> impl Strategy<Value = ClusterAffinity> {
    (
        prop::option::of(label_selector()),
        prop::option::of(prop::collection::vec(field_requirement(), 0..=2)),
        strings(&NAMES, 5),
        strings(&NAMES, 3),
    )
        .prop_map(
            |(label_selector, fields, cluster_names, exclude)| ClusterAffinity {
                label_selector,
                field_selector: fields.map(|match_expressions| FieldSelector { match_expressions }),
                cluster_names,
                exclude,
            },
        )
}

fn toleration() -> impl Strategy<Value = Toleration> {
    (
        opt(&TAINT_KEYS),
        prop::bool::ANY,
        opt(&VALUES),
        opt(&EFFECTS),
    )
        .prop_map(|(key, exists, value, effect)| Toleration {
            operator: Some(
                if exists || key.is_none() {
                    "Exists"
                } else {
                    "Equal"
                }
                .into(),
            ),
            value: value.filter(|_| !exists && key.is_some()),
            key,
            effect,
            toleration_seconds: None,
        })
}

fn placement() -> impl Strategy<Value = Placement> {
    (
        prop::option::of(affinity()),
        prop::collection::vec(toleration(), 0..=2),
    )
        .prop_map(|(cluster_affinity, cluster_tolerations)| Placement {
            cluster_affinity,
            cluster_tolerations,
            ..Placement::default()
        })
}

fn chosen_names(d: &Decision) -> BTreeSet<String> {
    d.chosen.iter().map(|t| t.cluster.clone()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every cluster is either chosen or rejected, never both; the chosen run the
    /// workload's replicas; excluded and deleted clusters are never chosen.
    #[test]
    fn every_cluster_is_chosen_or_rejected(
        clusters in fleet(),
        placement in placement(),
        replicas in prop::option::of(0..5i32),
    ) {
        let d = schedule(&placement, &clusters, &Workload { replicas, ..Default::default() }).unwrap();
        let chosen = chosen_names(&d);
        prop_assert_eq!(chosen.len(), d.chosen.len(), "a cluster chosen twice");
        let rejected: BTreeSet<String> = d.rejected.keys().cloned().collect();
        prop_assert!(chosen.is_disjoint(&rejected));
        let all: BTreeSet<String> = clusters.iter().filter_map(|c| c.metadata.name.clone()).collect();
        let union: BTreeSet<String> = chosen.union(&rejected).cloned().collect();
        prop_assert_eq!(union, all);
        prop_assert!(d.chosen.iter().all(|t| t.replicas == replicas));
        for c in &clusters {
            let name = c.metadata.name.as_deref().unwrap();
            let excluded = placement.cluster_affinity.as_ref().is_some_and(|a| a.exclude.iter().any(|e| e == name));
            if excluded || c.metadata.deletion_timestamp.is_some() {
                prop_assert!(!chosen.contains(name), "{} chosen", name);
            }
        }
    }

    /// The decision does not depend on the order the clusters come in.
    #[test]
    fn order_does_not_matter(
        (clusters, shuffled) in fleet().prop_flat_map(|f| (Just(f.clone()), Just(f).prop_shuffle())),
        placement in placement(),
    ) {
        let w = Workload { replicas: Some(2), ..Default::default() };
        prop_assert_eq!(
            schedule(&placement, &clusters, &w).unwrap(),
            schedule(&placement, &shuffled, &w).unwrap()
        );
    }

    /// Giving a cluster a label its selector's matchLabels ask for never removes a
    /// cluster from the chosen ones.
    #[test]
    fn adding_a_wanted_label_is_monotonic(
        clusters in fleet().prop_filter("no clusters", |f| !f.is_empty()),
        mut placement in placement(),
        (key, value) in (select(&KEYS[..]), select(&VALUES[..])),
        which in any::<prop::sample::Index>(),
    ) {
        let (key, value) = (key.to_owned(), value.to_owned());
        placement
            .cluster_affinity
            .get_or_insert_default()
            .label_selector
            .get_or_insert_default()
            .match_labels
            .get_or_insert_default()
            .insert(key.clone(), value.clone());
        let w = Workload::default();
        let before = chosen_names(&schedule(&placement, &clusters, &w).unwrap());
        let mut relabelled = clusters.clone();
        let labels = which.get_mut(&mut relabelled).metadata.labels.get_or_insert_default();
        labels.insert(key, value);
        let after = chosen_names(&schedule(&placement, &relabelled, &w).unwrap());
        prop_assert!(before.is_subset(&after), "before {:?}, after {:?}", before, after);
    }
}
