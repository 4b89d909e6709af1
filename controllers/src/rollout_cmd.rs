//! `causeway rollout status <kind>/<name>`: waits for a propagated template's current
//! generation to reach its clusters, as `kubectl rollout status` waits for one
//! cluster's, so a pipeline can wait on a multi-cluster rollout. With ordered rollouts
//! (`spec.rollout`) it follows the binding's `RolledOut` condition wave by wave, printing
//! each change; otherwise it waits for `FullyApplied` and every cluster's Work to run the
//! template's generation as a wave waits for it (applied, healthy, its own rollout done),
//! and for a new replica count to be divided first. Exit status: 0 once rolled out;
//! 1 when the rollout is past its progress deadline (`ProgressDeadlineExceeded`), when
//! it is scheduled to no cluster, when `--timeout` passes first, or when the template is
//! not propagated. A hub that does not answer is asked again (until `--timeout`).

use std::time::Duration;

use anyhow::bail;
use causeway_crds::federation::binding::{BindingStatus, conditions};
use causeway_crds::federation::interpreter;
use causeway_crds::federation::rollout;
use causeway_crds::federation::work::Work;
use causeway_crds::names::execution_namespace;
use causeway_runtime::client::HubArgs;

use crate::explain_cmd::{binding_of, target, template_opt, works_of};

#[cfg(test)]
mod tests;

/// Arguments of `causeway rollout`.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RolloutCommand {
    /// Wait until the template's current generation runs in every cluster its policy
    /// places it on (wave by wave with `spec.rollout`); exit 1 if the rollout passes its
    /// progress deadline or `--timeout` passes first.
    Status(StatusArgs),
}

/// Arguments of `causeway rollout status`.
#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// The resource template on the hub, as <kind>/<name>: the kind as kubectl takes it
    /// (deployment, deployments, Deployment, deployments.apps).
    target: String,
    /// Namespace of the template (default: the hub kubeconfig context's namespace,
    /// else "default"); ignored for cluster-scoped kinds.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Wait (true) or print where the rollout stands once and exit (false: exit 0 even
    /// while it is still going, 1 only if it is past its progress deadline).
    #[arg(short = 'w', long, default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    watch: bool,
    /// Give up after this long (e.g. 30s, 10m; 0s: wait for as long as it takes).
    #[arg(long, default_value = "0s", value_parser = causeway_controllers::clusters::options::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    hub: HubArgs,
}

/// Where a rollout stands, from its binding.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Every cluster runs the current generation (or the kind keeps no generation to
    /// follow, and every cluster applied it): the message.
    Done(String),
    /// It will not get there by waiting: past its progress deadline, or scheduled to no
    /// cluster. The message.
    Failed(String),
    /// Still going: the message.
    Going(String),
}

/// What one look at the hub found.
pub(crate) struct Seen<'a> {
    /// The binding's status.
    pub status: Option<&'a BindingStatus>,
    /// The binding has rollout waves.
    pub ordered: bool,
    /// The template's `metadata.generation`.
    pub generation: Option<i64>,
    /// The template's replica count (`spec.replicas`, or its interpreter's path), and
    /// the binding's (what the hub divides).
    pub replicas: (Option<i64>, Option<i64>),
    /// The clusters the binding is scheduled to.
    pub clusters: &'a [String],
    /// Its Works (read only without waves).
    pub works: &'a [Work],
}

/// Pure: where the rollout of the template's current generation stands. With waves,
/// the binding's `RolledOut` condition at that generation; without, every scheduled
/// cluster's Work must run it, applied and healthy, its own rollout finished (what a
/// wave waits for).
pub(crate) fn standing(seen: &Seen<'_>) -> Standing {
    let find = |type_: &str| {
        seen.status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
    };
    // a placement that cannot be met now (spread constraints, a scheduler error) keeps
    // the clusters chosen before, and the rollout goes on there
    let kept = |c: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
        matches!(
            c.reason.as_str(),
            conditions::REASON_UNSCHEDULABLE | conditions::REASON_SCHEDULER_ERROR
        ) && !seen.clusters.is_empty()
    };
    if let Some(c) = find(conditions::SCHEDULED).filter(|c| c.status == "False" && !kept(c)) {
        return Standing::Failed(format!("not scheduled: {}", c.message));
    }
    if seen.clusters.is_empty() {
        return Standing::Failed("scheduled to no cluster".into());
    }
    if let (Some(want), Some(divided)) = seen.replicas
        && want != divided
    {
        return Standing::Going(format!(
            "waiting for the hub to divide the new replica count ({want})"
        ));
    }
    // with waves, the binding's RolledOut says where the rollout stands, unless the
    // kind keeps no generation (nothing to order): then, as without waves, the
    // members must have applied it
    let no_generation = find(conditions::ROLLED_OUT)
        .is_some_and(|c| c.status == "Unknown" && c.reason == conditions::REASON_NO_GENERATION);
    if seen.ordered && !no_generation {
        let Some(c) = find(conditions::ROLLED_OUT) else {
            return Standing::Going("waiting for the hub to start the rollout".into());
        };
        if seen.generation.is_some() && c.observed_generation != seen.generation {
            let g = seen.generation.unwrap_or_default();
            return Standing::Going(format!(
                "waiting for the hub to roll out template generation {g}"
            ));
        }
        return match (c.status.as_str(), c.reason.as_str()) {
            ("True", _) => Standing::Done(c.message.clone()),
            (_, conditions::REASON_PROGRESS_DEADLINE_EXCEEDED) => {
                Standing::Failed(c.message.clone())
            }
            _ => Standing::Going(c.message.clone()),
        };
    }
    let fully = match find(conditions::FULLY_APPLIED) {
        Some(c) if c.status == "True" => c,
        Some(c) => return Standing::Going(c.message.clone()),
        None => return Standing::Going("waiting for the members to apply it".into()),
    };
    let Some(generation) = seen.generation else {
        return Standing::Done(format!(
            "{}; its kind keeps no metadata.generation, so which change the clusters run cannot be told",
            fully.message
        ));
    };
    let work_of = |c: &str| {
        seen.works
            .iter()
            .find(|w| w.metadata.namespace.as_deref() == Some(execution_namespace(c).as_str()))
    };
    let pending: Vec<String> = seen
        .clusters
        .iter()
        .filter_map(|c| {
            let why = rollout::settled_at(work_of(c), generation).err()?;
            Some(format!("{c}: {why}"))
        })
        .collect();
    if pending.is_empty() {
        Standing::Done(format!(
            "every cluster ({}) runs template generation {generation}, applied and healthy",
            seen.clusters.len()
        ))
    } else {
        Standing::Going(format!(
            "template generation {generation} is rolling out, waiting for {}",
            pending.join("; ")
        ))
    }
}

/// One look at the hub: where the rollout stands; an error the caller may retry (the
/// hub did not answer), or, for a template or binding that is not there, None with why.
async fn look(
    hub: &kube::Client,
    kind: &target::Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Result<Standing, String>> {
    let describe = kind.describe(namespace, name);
    let Some(template) = template_opt(hub, kind, namespace, name).await? else {
        return Ok(Err(format!(
            "{describe} not found on the hub: check the name and -n (templates live on the hub)"
        )));
    };
    let Some((_, _, spec, status)) = binding_of(hub, kind, namespace, name).await? else {
        let ns = if kind.namespaced {
            format!(" -n {namespace}")
        } else {
            String::new()
        };
        return Ok(Err(format!(
            "{describe} is not propagated: it has no binding; `causeway explain {}/{name}{ns}` says why",
            kind.resource.plural
        )));
    };
    let ordered = spec.rollout.as_ref().is_some_and(|r| !r.waves.is_empty());
    let works = match ordered {
        true => Vec::new(),
        false => works_of(hub, kind, namespace, name).await?,
    };
    let clusters: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
    // where the kind keeps its replica count, as the Works say (its interpreter's path)
    let replicas_at = works
        .first()
        .and_then(|w| Some((w, w.spec.workload.manifests.first()?)))
        .map_or(interpreter::DEFAULT_REPLICAS, |(w, m)| {
            interpreter::replicas_pointer(w, &m.0)
        });
    let template_replicas = template
        .data
        .pointer(replicas_at)
        .and_then(serde_json::Value::as_i64);
    Ok(Ok(standing(&Seen {
        status: status.as_ref(),
        ordered,
        generation: template.metadata.generation,
        replicas: (template_replicas, spec.replicas.map(i64::from)),
        clusters: &clusters,
        works: &works,
    })))
}

/// Runs `causeway rollout`.
pub async fn run(args: RolloutArgs) -> anyhow::Result<()> {
    let RolloutCommand::Status(args) = args.command;
    let (target, hub, namespace) =
        target::start(&args.target, &args.hub, args.namespace.as_deref()).await?;
    let kind = target::kind_on(&hub, &target.kind, "hub").await?;
    let describe = kind.describe(&namespace, &target.name);
    let deadline = (!args.timeout.is_zero()).then(|| tokio::time::Instant::now() + args.timeout);
    let mut said = String::new();
    let mut first = true;
    loop {
        match look(&hub, &kind, &namespace, &target.name).await {
            // the first look's failure is the answer (a wrong kubeconfig, say); later
            // ones are retried until --timeout, as kubectl retries its watch
            Err(e) if first => return Err(e),
            Err(e) => {
                let m = format!(
                    "reading the hub failed, retrying: {}",
                    causeway_runtime::say::error(&e)
                );
                if m != said {
                    eprintln!("{describe}: {m}");
                    said = m;
                }
            }
            Ok(Err(why)) => bail!("{why}"),
            Ok(Ok(Standing::Done(m))) => {
                println!("{describe}: {m}");
                return Ok(());
            }
            Ok(Ok(Standing::Failed(m))) => bail!("{describe}: {m}"),
            Ok(Ok(Standing::Going(m))) => {
                if m != said {
                    println!("{describe}: {m}");
                    said = m;
                }
                if !args.watch {
                    return Ok(());
                }
            }
        }
        first = false;
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            bail!(
                "timed out after {:?} waiting for {describe} to roll out: {said}",
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
