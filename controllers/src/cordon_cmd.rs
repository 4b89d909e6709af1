//! `causeway cordon | drain | uncordon <cluster>`: a member's maintenance window, as
//! `kubectl cordon`/`drain` are a node's (Karmada has `karmadactl cordon`, no drain).
//!
//! - `cordon` taints the Cluster `cluster.causeway.io/unschedulable:NoSchedule`: no new
//!   workload is placed there, what runs there stays.
//! - `drain` adds the same key with NoExecute: the scheduler leaves the cluster out of
//!   every placement that does not tolerate it, so its workloads move to the others
//!   (their replicas leave only as the others run them, for the kinds the
//!   make-before-break guard covers). First it prints where each workload scheduled
//!   there would go ([`plan`], the detector's scheduler, nothing written with
//!   `--dry-run`), and it refuses when one would be left with no cluster at all, which
//!   would remove it from the fleet, unless `--force`.
//! - `uncordon` removes both taints; `cordon` on a drained cluster removes the
//!   NoExecute one (the drain is lifted) and keeps it cordoned.
//!
//! The taints are written with the Cluster's resourceVersion (the registry's monitor
//! writes its own taints too), again on a conflict.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use causeway_controllers::clusters::status::is_ready;
use causeway_crds::federation::binding::BindingSpec;
use causeway_crds::federation::cluster::{Cluster, taints as cluster_taints};
use causeway_crds::federation::schedule::{Workload, schedule};
use causeway_runtime::client::HubArgs;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::failover_cmd::{
    Row, binding_specs, clusters_naming, hub_bindings, rows_table, targets, workload_of,
};

/// What to do to a cluster's scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// No new workload goes there.
    Cordon,
    /// No workload stays there.
    Drain,
    /// Back to normal.
    Uncordon,
}

/// Arguments of `causeway cordon` and `causeway uncordon`.
#[derive(Debug, clap::Args)]
pub struct CordonArgs {
    /// The member cluster (its Cluster's name on the hub).
    cluster: String,
    #[command(flatten)]
    hub: HubArgs,
}

/// Arguments of `causeway drain`.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// The member cluster (its Cluster's name on the hub).
    cluster: String,
    /// Print where each workload would go, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Drain even when a workload has no other cluster to go to (it is then removed
    /// from the fleet until the cluster is uncordoned).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    hub: HubArgs,
}

/// Pure: `taints` with the cordon taints `action` wants (others kept, in order); a
/// NoExecute taint added now carries `timeAdded` (as kube-apiserver gives a Node's),
/// from which a placement's `tolerationSeconds` count.
pub fn taints_for(taints: &[Taint], action: Action, now: &Time) -> Vec<Taint> {
    let key = cluster_taints::UNSCHEDULABLE;
    let mut out: Vec<Taint> = taints.iter().filter(|t| t.key != key).cloned().collect();
    let effects: &[&str] = match action {
        Action::Cordon => &["NoSchedule"],
        Action::Drain => &["NoSchedule", "NoExecute"],
        Action::Uncordon => &[],
    };
    // a cordoned cluster being drained keeps its NoSchedule taint (and its time)
    for effect in effects {
        let kept = taints
            .iter()
            .find(|t| t.key == key && t.effect == *effect)
            .cloned()
            // a NoExecute taint written undated (by hand, or an older causeway) is
            // dated now: tolerationSeconds count from it
            .map(|mut t| {
                if t.effect == "NoExecute" && t.time_added.is_none() {
                    t.time_added = Some(now.clone());
                }
                t
            });
        out.push(kept.unwrap_or_else(|| Taint {
            key: key.into(),
            effect: (*effect).into(),
            time_added: (*effect == "NoExecute").then(|| now.clone()),
            ..Taint::default()
        }));
    }
    out
}

/// A drain's verdict for a workload left with no cluster.
const NO_CLUSTER: &str = "NO CLUSTER LEFT";
/// A drain's verdict for a workload left only with clusters that are not Ready.
const NO_READY_CLUSTER: &str = "NO READY CLUSTER LEFT";

/// Pure: where each workload scheduled on `cluster` would go once it is drained
/// (`bindings` as [`binding_specs`] gives them; dependencies follow their requirers and
/// are left out), sorted by binding.
pub fn plan(
    bindings: &[(String, &BindingSpec, bool)],
    clusters: &[Cluster],
    cluster: &str,
) -> Vec<Row> {
    let drained: Vec<Cluster> = clusters
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c.name_any() == cluster {
                // (drained long ago: what the placements' tolerationSeconds lead to)
                let then = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
                c.spec.taints = taints_for(&c.spec.taints, Action::Drain, &then);
            }
            c
        })
        .collect();
    let mut out: Vec<Row> = bindings
        .iter()
        .filter(|(_, spec, _)| {
            spec.required_by.is_empty() && spec.clusters.iter().any(|t| t.name == cluster)
        })
        .map(|(id, spec, frozen)| {
            let now = targets(spec);
            let row = |after: BTreeMap<String, Option<i32>>, verdict: String| Row {
                binding: id.clone(),
                now: now.clone(),
                after,
                verdict,
                preserved_labels: BTreeMap::new(),
            };
            if *frozen {
                return row(
                    now.clone(),
                    "stays: the binding is frozen (no policy claims the template any more, or the one holding it is invalid: its Scheduled condition says which)".into(),
                );
            }
            let workload = Workload {
                now: Some(k8s_openapi::jiff::Timestamp::MAX),
                ..workload_of(spec)
            };
            match schedule(&spec.placement, &drained, &workload) {
                Err(e) => row(now.clone(), format!("unknown: {e}")),
                // spread constraints no longer met: the detector keeps the clusters it
                // had, the drained one included
                Ok(d) if d.unmet_spread() => row(
                    now.clone(),
                    format!("stays on {cluster}: its spread constraints cannot be met without it (Scheduled=False until they can)"),
                ),
                Ok(d) => {
                    let after = d.shares();
                    let ready = |name: &String| {
                        clusters.iter().any(|c| c.name_any() == *name && is_ready(c))
                    };
                    let verdict = if after.is_empty() {
                        format!("{NO_CLUSTER}: removed from the fleet until the cluster is uncordoned (its placement allows no other cluster, or none fits)")
                    } else if !after.keys().any(ready) {
                        format!(
                            "{NO_READY_CLUSTER}: only to {}, not Ready (its replicas would be held in {cluster}, or its copy removed)",
                            after.keys().cloned().collect::<Vec<_>>().join(", ")
                        )
                    } else if after.contains_key(cluster) {
                        format!("stays: its placement tolerates {}:NoExecute", cluster_taints::UNSCHEDULABLE)
                    } else {
                        format!("moves away from {cluster}")
                    };
                    row(after, verdict)
                }
            }
        })
        .collect();
    out.sort_by(|a, b| a.binding.cmp(&b.binding));
    out
}

/// The plan as a table.
fn text(rows: &[Row], cluster: &str) -> String {
    if rows.is_empty() {
        return format!("no workload is scheduled on {cluster}\n");
    }
    rows_table(rows, format!("ONCE {cluster} IS DRAINED"))
}

/// Pure: what `causeway cordon`, `drain` or `uncordon` says once it wrote (`before`:
/// the Cluster's taints before, None when nothing changed).
pub fn said(name: &str, action: Action, before: Option<&[Taint]>) -> String {
    let key = cluster_taints::UNSCHEDULABLE;
    let drained = before.is_some_and(|taints| {
        taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoExecute")
    });
    match (action, before) {
        (Action::Drain, Some(_)) => format!(
            "cluster {name} drained: taints {key}:NoSchedule and {key}:NoExecute; its workloads move as above (the replicas of Deployments, ReplicaSets and StatefulSets leave only as the other clusters run them: make-before-break); `causeway uncordon {name}` ends it"
        ),
        (Action::Drain, None) => format!("cluster {name} is already drained: nothing to do"),
        (Action::Uncordon, Some(_)) => format!(
            "cluster {name} uncordoned: taint {key} removed; workloads may be placed there again"
        ),
        (Action::Uncordon, None) => format!("cluster {name} was not cordoned: nothing to do"),
        (_, Some(_)) if drained => format!(
            "cluster {name} cordoned, its drain lifted: taint {key}:NoExecute removed, {key}:NoSchedule kept; workloads still scheduled there stop moving away and stay, no new workload is placed there (`causeway drain {name}` drains it again, `causeway uncordon {name}` ends it)"
        ),
        (_, Some(_)) => format!(
            "cluster {name} cordoned: taint {key}:NoSchedule; no new workload is placed there, what runs there stays (`causeway drain {name}` moves it, `causeway uncordon {name}` ends it)"
        ),
        (_, None) => format!("cluster {name} is already cordoned: nothing to do"),
    }
}

/// Writes the taints `action` wants on Cluster `name`, with its resourceVersion (again
/// on a conflict); the taints it had when something changed.
async fn write(
    hub: &kube::Client,
    name: &str,
    action: Action,
) -> anyhow::Result<Option<Vec<Taint>>> {
    let api = Api::<Cluster>::all(hub.clone());
    for _ in 0..5 {
        let c = api
            .get(name)
            .await
            .with_context(|| format!("reading Cluster {name} on the hub"))?;
        let want = taints_for(
            &c.spec.taints,
            action,
            &Time(k8s_openapi::jiff::Timestamp::now()),
        );
        if want == c.spec.taints {
            return Ok(None);
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": c.resource_version()},
            "spec": {"taints": want},
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(Some(c.spec.taints)),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("writing the taints of Cluster {name}"));
            }
        }
    }
    anyhow::bail!(
        "Cluster {name} kept changing while its taints were written: run the command again"
    )
}

/// `causeway cordon` or `causeway uncordon`.
pub async fn cordon(args: CordonArgs, action: Action) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let name = args.cluster.trim();
    clusters_naming(
        &hub,
        &BTreeSet::from([name.to_string()]),
        "the cluster name",
    )
    .await?;
    let before = write(&hub, name, action).await?;
    println!("{}", said(name, action, before.as_deref()));
    Ok(())
}

/// `causeway drain`.
pub async fn drain(args: DrainArgs) -> anyhow::Result<()> {
    let hub = args.hub.client().await?;
    let name = args.cluster.trim();
    let clusters = clusters_naming(
        &hub,
        &BTreeSet::from([name.to_string()]),
        "the cluster name",
    )
    .await?;
    let (rbs, crbs) = hub_bindings(&hub).await?;
    let rows = plan(&binding_specs(&rbs, &crbs), &clusters, name);
    print!("{}", text(&rows, name));
    if args.dry_run {
        println!("(dry run: nothing changed)");
        return Ok(());
    }
    let stranded: Vec<&str> = rows
        .iter()
        .filter(|r| r.verdict.starts_with(NO_CLUSTER) || r.verdict.starts_with(NO_READY_CLUSTER))
        .map(|r| r.binding.as_str())
        .collect();
    if !stranded.is_empty() && !args.force {
        anyhow::bail!(
            "not drained: {} would have no Ready cluster left ({}): let their placements take another cluster, wait for theirs to be Ready, or add --force (a workload with no cluster left is removed from the fleet)",
            stranded.len(),
            stranded.join(", ")
        );
    }
    // the taints already set (drained before): nothing written, and it says so
    let before = write(&hub, name, Action::Drain).await?;
    println!("{}", said(name, Action::Drain, before.as_deref()));
    Ok(())
}

#[cfg(test)]
mod tests;
