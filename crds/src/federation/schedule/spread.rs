//! Spread constraints (federation.md §8 B.13, Karmada's `spreadConstraints`): after
//! affinity and taints, the chosen clusters are cut down so that they span between
//! `minGroups` and `maxGroups` values of one Cluster field (region, zone or provider)
//! and number between the `cluster` constraint's `minGroups` and `maxGroups`.
//!
//! The choice is deterministic and stable, so a workload does not move while the
//! fleet stays the same: groups are ranked by how many of their clusters already run
//! the workload, then by how many clusters fit, then by name; the first `maxGroups`
//! groups are taken (fewer than `minGroups` fitting groups: nothing is chosen, and each
//! cluster's reason says so, which the binding reports as `NoClusterFit`). Clusters are
//! then taken a group at a time in turn (those already running the workload first, then
//! by name) up to the `cluster` constraint's `maxGroups`, so every taken group keeps at
//! least one cluster. A cluster whose field is unknown belongs to no group and is not
//! chosen. Replicas are divided over what remains.
//!
//! Validation (the same rules as Karmada's webhook): each constraint names
//! `spreadByField` or `spreadByLabel`, not both; a field at most once; `maxGroups` at
//! least `minGroups`; a field other than `cluster` needs a `cluster` constraint too.
//! Not implemented, and refused as such: `spreadByLabel`, and two fields other than
//! `cluster` at once.

use std::collections::{BTreeMap, BTreeSet};

use k8s_validation::FieldError;

use super::affinity::effective_fields;
use super::{Decision, PlacementError, Reason, Workload};
use crate::federation::cluster::Cluster;
use crate::federation::propagation::{SpreadByField, SpreadConstraint};

fn field_name(f: SpreadByField) -> &'static str {
    match f {
        SpreadByField::Cluster => "cluster",
        SpreadByField::Region => "region",
        SpreadByField::Zone => "zone",
        SpreadByField::Provider => "provider",
    }
}

/// The validation errors of `constraints` (at `spec.placement.spreadConstraints`).
pub(super) fn validate(constraints: &[SpreadConstraint], at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut push = |field: String, value: String, message: &str| {
        errs.push(FieldError {
            field,
            value,
            message: message.into(),
        })
    };
    let mut seen: Vec<SpreadByField> = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let at = format!("{at}[{i}]");
        match (c.spread_by_field, &c.spread_by_label) {
            (Some(_), Some(label)) => push(
                format!("{at}.spreadByLabel"),
                label.clone(),
                "spreadByLabel and spreadByField cannot both be set; keep one",
            ),
            (None, None) => push(
                at.clone(),
                String::new(),
                "give spreadByField (cluster, region, zone or provider) or spreadByLabel",
            ),
            _ => {}
        }
        if let Some(f) = c.spread_by_field {
            if seen.contains(&f) {
                push(
                    format!("{at}.spreadByField"),
                    field_name(f).into(),
                    "is constrained by an earlier entry; give each field once",
                );
            }
            seen.push(f);
        }
        let min = c.min_groups.unwrap_or(1);
        if min < 0 {
            push(
                format!("{at}.minGroups"),
                min.to_string(),
                "must be greater than or equal to 0",
            );
        }
        if let Some(max) = c.max_groups.filter(|m| *m > 0)
            && max < min
        {
            push(
                format!("{at}.maxGroups"),
                max.to_string(),
                "must be greater than or equal to minGroups",
            );
        }
    }
    if seen.iter().any(|f| *f != SpreadByField::Cluster) && !seen.contains(&SpreadByField::Cluster)
    {
        push(
            at.to_string(),
            String::new(),
            "a spreadByField other than cluster needs a spreadByField: cluster constraint too (how many clusters in all)",
        );
    }
    errs
}

/// What is valid but not implemented.
pub(super) fn unsupported(constraints: &[SpreadConstraint], at: &str) -> Option<PlacementError> {
    if let Some(i) = constraints.iter().position(|c| c.spread_by_label.is_some()) {
        return Some(PlacementError::Unsupported {
            field: format!("{at}[{i}].spreadByLabel"),
            what: "spreading by a cluster label".into(),
            instead: "spread by a field (region, zone or provider), or select the clusters with a labelSelector".into(),
        });
    }
    let fields: Vec<&SpreadConstraint> = constraints
        .iter()
        .filter(|c| {
            c.spread_by_field
                .is_some_and(|f| f != SpreadByField::Cluster)
        })
        .collect();
    (fields.len() > 1).then(|| PlacementError::Unsupported {
        field: at.to_string(),
        what: "spreading by two fields at once".into(),
        instead: "keep one of region, zone and provider (with the cluster constraint)".into(),
    })
}

/// A cluster's value of `field`: its region, provider or (first) zone; its name for
/// `cluster`.
fn group_of(cluster: &Cluster, field: SpreadByField) -> Option<String> {
    let (provider, region, zones) = effective_fields(cluster);
    match field {
        SpreadByField::Cluster => cluster.metadata.name.clone(),
        SpreadByField::Region => region.map(str::to_string),
        SpreadByField::Zone => zones.first().map(|z| z.to_string()),
        SpreadByField::Provider => provider.map(str::to_string),
    }
}

/// Cuts `decision.chosen` down to what `constraints` allow (validated already).
pub(super) fn apply(
    decision: &mut Decision,
    constraints: &[SpreadConstraint],
    clusters: &BTreeMap<&str, &Cluster>,
    workload: &Workload,
) {
    if constraints.is_empty() || decision.chosen.is_empty() {
        return;
    }
    let per_cluster = constraints
        .iter()
        .find(|c| c.spread_by_field == Some(SpreadByField::Cluster));
    let by_field = constraints.iter().find(|c| {
        c.spread_by_field
            .is_some_and(|f| f != SpreadByField::Cluster)
    });
    let placed = |c: &str| workload.previous.contains_key(c);
    // maxGroups 0 is unset, as in Karmada
    let bounds = |c: Option<&SpreadConstraint>| match c {
        Some(c) => (
            c.min_groups.unwrap_or(1).max(0) as usize,
            c.max_groups.filter(|m| *m > 0).map(|m| m as usize),
        ),
        None => (0, None),
    };
    let (min_clusters, max_clusters) = bounds(per_cluster);
    let Some(by_field) = by_field else {
        // the cluster constraint alone: those running the workload first, then by name
        let mut names: Vec<String> = decision.chosen.iter().map(|t| t.cluster.clone()).collect();
        names.sort_by_key(|c| (!placed(c), c.clone()));
        if names.len() < min_clusters {
            let why = format!(
                "spreadConstraints need at least {min_clusters} cluster(s), and only {} fit",
                names.len()
            );
            for c in names {
                decision.rejected.insert(c, Reason::Spread(why.clone()));
            }
            decision.chosen.clear();
            return;
        }
        let max = max_clusters.unwrap_or(names.len());
        for c in names.iter().skip(max) {
            decision.rejected.insert(
                c.clone(),
                Reason::Spread(format!(
                    "cluster {c} is not among the {max} cluster(s) chosen (spreadConstraints maxGroups {max})"
                )),
            );
        }
        let kept: BTreeSet<&String> = names.iter().take(max).collect();
        decision.chosen.retain(|t| kept.contains(&t.cluster));
        return;
    };
    // groups of the chosen clusters by the field
    let field = by_field.spread_by_field.unwrap_or(SpreadByField::Cluster);
    let name = field_name(field);
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut out: BTreeMap<String, Reason> = BTreeMap::new();
    for t in &decision.chosen {
        match clusters
            .get(t.cluster.as_str())
            .and_then(|c| group_of(c, field))
        {
            Some(g) => groups.entry(g).or_default().push(t.cluster.clone()),
            None => {
                out.insert(
                    t.cluster.clone(),
                    Reason::Spread(format!(
                        "no {name} known, and spreadConstraints group clusters by {name}"
                    )),
                );
            }
        }
    }
    let (min_groups, max_groups) = bounds(Some(by_field));
    // rank the groups: already running the workload, most clusters, name
    let mut ranked: Vec<(&String, &Vec<String>)> = groups.iter().collect();
    ranked.sort_by_key(|(g, cs)| {
        (
            std::cmp::Reverse(cs.iter().filter(|c| placed(c)).count()),
            std::cmp::Reverse(cs.len()),
            (*g).clone(),
        )
    });
    let fitting: BTreeSet<&String> = groups.keys().collect();
    let fail = |why: String, decision: &mut Decision, out: &mut BTreeMap<String, Reason>| {
        for t in decision.chosen.drain(..) {
            out.entry(t.cluster)
                .or_insert_with(|| Reason::Spread(why.clone()));
        }
    };
    if fitting.len() < min_groups {
        let have: Vec<&str> = fitting.iter().map(|g| g.as_str()).collect();
        fail(
            format!(
                "spreadConstraints need at least {min_groups} {name}s, and only {} ({}) have a cluster that fits",
                have.len(),
                have.join(", ")
            ),
            decision,
            &mut out,
        );
        decision.rejected.extend(out);
        return;
    }
    if max_clusters.is_some_and(|m| m < min_groups) {
        let m = max_clusters.unwrap_or_default();
        fail(
            format!(
                "spreadConstraints want {min_groups} {name}s but at most {m} cluster(s): raise the cluster constraint's maxGroups"
            ),
            decision,
            &mut out,
        );
        decision.rejected.extend(out);
        return;
    }
    // as many groups as allowed, and no more than there may be clusters
    let take = max_groups
        .unwrap_or(ranked.len())
        .min(ranked.len())
        .min(max_clusters.unwrap_or(usize::MAX));
    // staying where the workload runs must not cost the cluster minimum: if the groups
    // taken hold too few clusters, take the largest instead
    let held =
        |r: &[(&String, &Vec<String>)]| r.iter().take(take).map(|(_, cs)| cs.len()).sum::<usize>();
    if held(&ranked) < min_clusters {
        ranked.sort_by_key(|(g, cs)| {
            (
                std::cmp::Reverse(cs.len()),
                std::cmp::Reverse(cs.iter().filter(|c| placed(c)).count()),
                (*g).clone(),
            )
        });
    }
    let (kept, dropped) = ranked.split_at(take);
    for (g, cs) in dropped {
        for c in cs.iter() {
            out.insert(
                c.clone(),
                Reason::Spread(format!(
                    "{name} {g} is not among the {take} {name}(s) chosen (spreadConstraints)"
                )),
            );
        }
    }
    // clusters a group at a time in turn, those running the workload first
    let mut queues: Vec<Vec<&String>> = kept
        .iter()
        .map(|(_, cs)| {
            let mut cs: Vec<&String> = cs.iter().collect();
            cs.sort_by_key(|c| (!placed(c), (*c).clone()));
            cs
        })
        .collect();
    let limit = max_clusters.unwrap_or(usize::MAX);
    let mut taken: BTreeSet<String> = BTreeSet::new();
    'turns: loop {
        let mut any = false;
        for q in queues.iter_mut() {
            if taken.len() >= limit {
                break 'turns;
            }
            if !q.is_empty() {
                taken.insert(q.remove(0).clone());
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    for q in queues {
        for c in q {
            out.insert(
                c.clone(),
                Reason::Spread(format!(
                    "spreadConstraints allow at most {limit} cluster(s)"
                )),
            );
        }
    }
    if taken.len() < min_clusters {
        fail(
            format!(
                "spreadConstraints need at least {min_clusters} cluster(s), and only {} fit",
                taken.len()
            ),
            decision,
            &mut out,
        );
        decision.rejected.extend(out);
        return;
    }
    decision.chosen.retain(|t| taken.contains(&t.cluster));
    decision.rejected.extend(out);
}
