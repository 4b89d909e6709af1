//! `causeway failover plan --cluster east`: a dry run of cluster failover (federation.md
//! §9.1 ★ "dry-run output"). For every binding scheduled on the named clusters it
//! prints where the workload would run if those clusters failed over now, with the
//! scheduler the detector runs ([`plan`] is pure: the bindings and Clusters read from
//! the hub, the named clusters taken as NotReady since long ago), how long the policy
//! tolerates the failure first, and how the old copy would go. Nothing is written.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use causeway_crds::federation::binding::{
    BindingSpec, BindingStatus, ClusterResourceBinding, ResourceBinding,
};
use causeway_crds::federation::cluster::{Cluster, conditions};
use causeway_crds::federation::propagation::PurgeMode;
use causeway_crds::federation::schedule::{Workload, failover, schedule};
use causeway_crds::federation::state_preservation;
use causeway_crds::federation::work::Work;
use causeway_crds::well_known::labels;
use causeway_runtime::client::HubArgs;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// Arguments of `causeway failover`.
#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    #[command(subcommand)]
    command: FailoverCommand,
}

#[derive(Debug, clap::Subcommand)]
enum FailoverCommand {
    /// Where every workload scheduled on the given clusters would go if they failed
    /// over now (nothing is changed).
    Plan(PlanArgs),
}

/// Arguments of `causeway failover plan`.
#[derive(Debug, clap::Args)]
struct PlanArgs {
    /// A member cluster to fail (repeat, or comma-separate, for several).
    #[arg(long = "cluster", value_delimiter = ',', required = true)]
    clusters: Vec<String>,
    /// text: a table, for people; json: one object per binding, for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    hub: HubArgs,
}

use crate::explain_cmd::Output;

/// What failing the clusters would do to one binding.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// `namespace/name` of the ResourceBinding, or the ClusterResourceBinding's name.
    pub binding: String,
    /// Its clusters now, with their replicas.
    pub now: BTreeMap<String, Option<i32>>,
    /// Its clusters once the named ones failed over.
    pub after: BTreeMap<String, Option<i32>>,
    /// What happens, for people.
    pub verdict: String,
    /// The labels `failover.cluster.statePreservation` would give the copies in the
    /// clusters that take over (read from what the failing clusters' copies reported
    /// last).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub preserved_labels: BTreeMap<String, String>,
}

/// What each binding's copy in each cluster reported last (its `.status`), by binding
/// id and cluster.
pub type Reported = BTreeMap<(String, String), serde_json::Value>;

/// What the scheduler is given for `spec`, as the detector gives it for a binding
/// that exists: its count, the template's uid, what a replica requests, its clusters now (what a steady
/// division keeps) and the clusters application failover moved it away from.
pub(crate) fn workload_of(spec: &BindingSpec) -> Workload {
    Workload {
        replicas: spec.replicas,
        uid: spec.resource.uid.clone().unwrap_or_default(),
        request: spec
            .replica_requirements
            .as_ref()
            .map(|r| r.resource_request.clone())
            .unwrap_or_default(),
        previous: spec
            .clusters
            .iter()
            .map(|t| (t.name.clone(), t.replicas.unwrap_or(0)))
            .collect(),
        evicted: spec
            .evictions
            .iter()
            .map(|e| (e.cluster.clone(), e.reason.clone()))
            .collect(),
        ..Workload::default()
    }
}

/// The binding's clusters as a map.
pub(crate) fn targets(spec: &BindingSpec) -> BTreeMap<String, Option<i32>> {
    spec.clusters
        .iter()
        .map(|t| (t.name.clone(), t.replicas))
        .collect()
}

/// `cluster` as if it had failed `now` (nothing else about it changed): Ready Unknown
/// for a Pull member (its agent's lease runs out: the `unreachable` taint), False for a
/// Push member (the hub's probe fails: `not-ready`).
fn failed(cluster: &Cluster, now: Timestamp) -> Cluster {
    let mut c = cluster.clone();
    let pull = c.spec.sync_mode == causeway_crds::federation::cluster::ClusterSyncMode::Pull;
    let st = c.status.get_or_insert_with(Default::default);
    st.conditions.retain(|x| x.type_ != conditions::READY);
    st.conditions.push(Condition {
        type_: conditions::READY.into(),
        status: if pull { "Unknown" } else { "False" }.into(),
        reason: "FailoverPlan".into(),
        message: "failed for the dry run".into(),
        observed_generation: None,
        last_transition_time: Time(now),
    });
    c.spec.taints.clear();
    c
}

/// Long enough for any finite toleration to have run out.
const LONG_AFTER: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_hours(24 * 365 * 100);

/// Pure: what failing `failing` would do to each binding scheduled on one of them
/// (`bindings`: id and spec; bindings of dependencies follow their requirers and are
/// left out), sorted by binding.
pub fn plan(
    bindings: &[(String, &BindingSpec, bool)],
    clusters: &[Cluster],
    failing: &BTreeSet<String>,
    reported: &Reported,
    now: Timestamp,
) -> Vec<Row> {
    let hypothetical: Vec<Cluster> = clusters
        .iter()
        .map(|c| {
            if failing.contains(&c.name_any()) {
                failed(c, now)
            } else {
                c.clone()
            }
        })
        .collect();
    // what the detector would say: most of the fleet failing at once holds failover
    let held = causeway_controllers::propagation::detector::failover::disruption(&hypothetical);
    let later = now.checked_add(LONG_AFTER).unwrap_or(now);
    let mut out = Vec::new();
    for (id, spec, frozen) in bindings {
        if !spec.required_by.is_empty() || !spec.clusters.iter().any(|t| failing.contains(&t.name))
        {
            continue;
        }
        let now_at = targets(spec);
        let stays = |verdict: String| Row {
            binding: id.clone(),
            after: now_at.clone(),
            now: now_at.clone(),
            verdict,
            preserved_labels: BTreeMap::new(),
        };
        if *frozen {
            out.push(stays(
                "stays: the binding is frozen (no policy claims the template any more, or the one holding it is invalid: its Scheduled condition says which)".into(),
            ));
            continue;
        }
        if let Some(why) = held
            .as_ref()
            .filter(|_| spec.failover.as_ref().is_some_and(|f| f.cluster.is_some()))
        {
            out.push(stays(format!("stays: {why}")));
            continue;
        }
        let Some(cluster_failover) = spec.failover.as_ref().and_then(|f| f.cluster.as_ref()) else {
            out.push(stays(
                "stays: the policy has no failover.cluster (a NotReady member keeps what it runs)"
                    .into(),
            ));
            continue;
        };
        let workload = Workload {
            failover_at: Some(later),
            now: Some(later),
            ..workload_of(spec)
        };
        let mut preserved_labels = BTreeMap::new();
        let verdict_and_after = match schedule(&spec.placement, &hypothetical, &workload) {
            Err(e) => (format!("unknown: {e}"), now_at.clone()),
            Ok(d) => {
                let after = d.shares();
                let staying: Vec<&String> =
                    failing.iter().filter(|c| after.contains_key(*c)).collect();
                let leaving: Vec<&String> = failing
                    .iter()
                    .filter(|c| now_at.contains_key(*c) && !after.contains_key(*c))
                    .collect();
                let tolerated: Vec<String> = leaving
                    .iter()
                    .filter_map(|c| {
                        let cluster = hypothetical.iter().find(|x| x.name_any() == **c)?;
                        let (since, deadline) =
                            failover::failing(cluster, &spec.placement.cluster_tolerations)?;
                        Some(format!(
                            "{c} after {}s",
                            deadline.duration_since(since).as_secs()
                        ))
                    })
                    .collect();
                let purge = match cluster_failover.purge_mode.unwrap_or(PurgeMode::Gracefully) {
                    PurgeMode::Gracefully => gracefully(),
                    PurgeMode::Directly => "its copy purged at once".to_string(),
                    PurgeMode::Never => "its copy kept while it is not Ready".to_string(),
                };
                // statePreservation: what the failing copies reported last, for the
                // copies in the clusters that did not run the workload
                let rules = cluster_failover
                    .state_preservation
                    .as_ref()
                    .map(|p| p.rules.as_slice())
                    .unwrap_or_default();
                let before: Vec<String> = now_at.keys().cloned().collect();
                let failed: Vec<(String, Timestamp)> =
                    leaving.iter().map(|c| ((*c).clone(), now)).collect();
                let records =
                    state_preservation::cluster_failovers(rules, &[], &before, &failed, &|c| {
                        reported.get(&(id.clone(), c.to_string()))
                    });
                let receivers: Vec<&String> =
                    after.keys().filter(|c| !now_at.contains_key(*c)).collect();
                let mut kept = String::new();
                if !records.is_empty() {
                    let what: Vec<String> = records
                        .iter()
                        .map(|r| {
                            let reason = r
                                .reason
                                .trim_start_matches("failed over: statePreservation ");
                            format!("from {}: {reason}", r.cluster)
                        })
                        .collect();
                    let what = what.join("; ");
                    let labels: BTreeMap<String, String> = records
                        .iter()
                        .flat_map(|r| r.preserved_label_state.clone())
                        .collect();
                    kept = match (receivers.is_empty(), labels.is_empty()) {
                        (true, _) => format!(
                            "; statePreservation labels no copy ({what}; every cluster that takes over ran it already)"
                        ),
                        (false, true) => format!("; statePreservation labels no copy ({what})"),
                        (false, false) => {
                            preserved_labels = labels;
                            format!(
                                "; {}'s copy labelled by statePreservation ({what})",
                                join(&receivers)
                            )
                        }
                    };
                }
                let verdict = if leaving.is_empty() {
                    format!(
                        "stays on {}: tolerated forever, or no other cluster fits",
                        join(&staying)
                    )
                } else if staying.is_empty() {
                    format!(
                        "moves away from {} ({}), {purge}",
                        join(&leaving),
                        tolerated.join(", ")
                    )
                } else {
                    format!(
                        "moves away from {} ({}), {purge}; stays on {}",
                        join(&leaving),
                        tolerated.join(", "),
                        join(&staying)
                    )
                };
                (format!("{verdict}{kept}"), after)
            }
        };
        out.push(Row {
            binding: id.clone(),
            now: now_at,
            after: verdict_and_after.1,
            verdict: verdict_and_after.0,
            preserved_labels,
        });
    }
    out.sort_by(|a, b| a.binding.cmp(&b.binding));
    out
}

/// What `Gracefully` does with a failed cluster's copy.
fn gracefully() -> String {
    format!(
        "its copy purged once the others run it healthy (at most {} s later)",
        causeway_crds::federation::schedule::app_failover::DEFAULT_GRACE_PERIOD_SECONDS
    )
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn placement_text(m: &BTreeMap<String, Option<i32>>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    m.iter()
        .map(|(c, r)| match r {
            Some(r) => format!("{c}:{r}"),
            None => c.clone(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `rows` as a table: BINDING, NOW, `after` (the column of where they would run),
/// WHAT HAPPENS.
pub(crate) fn rows_table(rows: &[Row], after: String) -> String {
    let head = vec![
        "BINDING".to_string(),
        "NOW".to_string(),
        after,
        "WHAT HAPPENS".to_string(),
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.binding.clone(),
                placement_text(&r.now),
                placement_text(&r.after),
                r.verdict.clone(),
            ]
        })
        .collect();
    causeway_search::cli::table(&head, &body)
}

/// The rows as a table, with a note on the eviction rate limit when several move.
pub fn text(rows: &[Row], failing: &BTreeSet<String>) -> String {
    let names: Vec<&String> = failing.iter().collect();
    if rows.is_empty() {
        return format!("no workload is scheduled on {}\n", join(&names));
    }
    let after = format!(
        "IF {} FAIL{}",
        join(&names),
        if names.len() == 1 { "S" } else { "" }
    );
    let mut out = rows_table(rows, after);
    let moving = rows
        .iter()
        .filter(|r| r.verdict.starts_with("moves"))
        .count();
    if moving > 1 {
        out.push_str(&format!(
            "(workloads leave a failed cluster one every {:.0} s, the eviction rate limit: the last of these {moving} about {:.0} s after its toleration ends)\n",
            1.0 / causeway_controllers::propagation::detector::evictions::RATE,
            (moving - 1) as f64 / causeway_controllers::propagation::detector::evictions::RATE
        ));
    }
    out
}

/// The hub's Clusters, refusing any of `named` it has not (`flag` names where they
/// were given).
pub(crate) async fn clusters_naming(
    hub: &kube::Client,
    named: &BTreeSet<String>,
    flag: &str,
) -> anyhow::Result<Vec<Cluster>> {
    let clusters: Vec<Cluster> = Api::<Cluster>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing the Clusters on the hub")?
        .items;
    let known: BTreeSet<String> = clusters.iter().map(|c| c.name_any()).collect();
    if let Some(unknown) = named.iter().find(|c| !known.contains(*c)) {
        anyhow::bail!(
            "no Cluster {unknown:?} on the hub (its Clusters: {}): check {flag}",
            known.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(clusters)
}

/// The hub's ResourceBindings and ClusterResourceBindings.
pub(crate) async fn hub_bindings(
    hub: &kube::Client,
) -> anyhow::Result<(Vec<ResourceBinding>, Vec<ClusterResourceBinding>)> {
    let rbs = Api::<ResourceBinding>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing the ResourceBindings on the hub")?
        .items;
    let crbs = Api::<ClusterResourceBinding>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing the ClusterResourceBindings on the hub")?
        .items;
    Ok((rbs, crbs))
}

/// Each binding's id (`namespace/name`, or the name of a ClusterResourceBinding), spec
/// and whether it is frozen (no policy claims its template any more, or the one holding
/// it is invalid).
pub(crate) fn binding_specs<'a>(
    rbs: &'a [ResourceBinding],
    crbs: &'a [ClusterResourceBinding],
) -> Vec<(String, &'a BindingSpec, bool)> {
    let frozen = |st: Option<&BindingStatus>| st.is_some_and(BindingStatus::policy_removed);
    rbs.iter()
        .map(|b| {
            (
                format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any()),
                &b.spec.0,
                frozen(b.status.as_ref()),
            )
        })
        .chain(
            crbs.iter()
                .map(|b| (b.name_any(), &b.spec.0, frozen(b.status.as_ref()))),
        )
        .collect()
}

/// Runs `causeway failover`.
pub async fn run(args: FailoverArgs) -> anyhow::Result<()> {
    let FailoverCommand::Plan(args) = args.command;
    let hub = args.hub.client().await?;
    let failing: BTreeSet<String> = args.clusters.iter().map(|c| c.trim().to_string()).collect();
    let clusters = clusters_naming(&hub, &failing, "--cluster").await?;
    let (rbs, crbs) = hub_bindings(&hub).await?;
    let bindings = binding_specs(&rbs, &crbs);
    // what each copy reported last, for statePreservation
    let works = Api::<Work>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .context("listing the Works on the hub")?
        .items;
    let reported: Reported = works
        .iter()
        .filter_map(|w| {
            let l = w.labels();
            let name = &causeway_crds::names::named_by(&w.metadata, labels::BINDING_NAME)?;
            let id = match l.get(labels::BINDING_NAMESPACE) {
                Some(ns) => format!("{ns}/{name}"),
                None => name.clone(),
            };
            let status = state_preservation::copy_status(w)?.clone();
            Some(((id, l.get(labels::CLUSTER)?.clone()), status))
        })
        .collect();
    let rows = plan(&bindings, &clusters, &failing, &reported, Timestamp::now());
    match args.output {
        Output::Text => print!("{}", text(&rows, &failing)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
