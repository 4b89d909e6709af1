//! `causeway rollout status <kind>/<name>`: waits for a propagated template's current
//! generation to reach its clusters, as `kubectl rollout status` waits for one
//! cluster's, so a pipeline can wait on a multi-cluster rollout. With ordered rollouts
//! (`spec.rollout`) it follows the binding's `RolledOut` condition wave by wave, printing
//! each change; otherwise it waits for `FullyApplied` and every cluster's Work to run the
//! template's generation as a wave waits for it (applied, healthy, its own rollout done). Exit status: 0 once rolled out;
//! 1 when the rollout is past its progress deadline (`ProgressDeadlineExceeded`), when
//! `--timeout` passes first, or when the template is not propagated.

use std::time::Duration;

use anyhow::bail;
use causeway_crds::federation::binding::{BindingStatus, conditions};
use causeway_crds::federation::rollout;
use causeway_crds::federation::work::Work;
use causeway_crds::names::execution_namespace;
use causeway_runtime::client::HubArgs;

use crate::explain_cmd::{binding_of, target, template_of, works_of};

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
    #[arg(short = 'w', long, default_value_t = true, action = clap::ArgAction::Set)]
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
    /// order, with nothing to wait for): the message.
    Done(String),
    /// Past its progress deadline: the message.
    Stuck(String),
    /// Still going: the message.
    Going(String),
}

/// Pure: where the rollout of `generation` stands from its binding's `status`, whether
/// the binding has an ordered rollout (`ordered`), and, without one, the `clusters` it
/// is scheduled to and their `works`: each must run the generation, applied and
/// healthy, its own rollout finished (what a wave waits for).
pub(crate) fn standing(
    status: Option<&BindingStatus>,
    ordered: bool,
    generation: Option<i64>,
    clusters: &[String],
    works: &[Work],
) -> Standing {
    let find = |type_: &str| status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
    if ordered {
        let Some(c) = find(conditions::ROLLED_OUT) else {
            return Standing::Going("waiting for the hub to start the rollout".into());
        };
        let current = generation.is_none() || c.observed_generation >= generation;
        if !current {
            let g = generation.unwrap_or_default();
            return Standing::Going(format!(
                "waiting for the hub to roll out template generation {g}"
            ));
        }
        return match (c.status.as_str(), c.reason.as_str()) {
            ("True", _) | ("Unknown", conditions::REASON_NO_GENERATION) => {
                Standing::Done(c.message.clone())
            }
            (_, conditions::REASON_PROGRESS_DEADLINE_EXCEEDED) => {
                Standing::Stuck(c.message.clone())
            }
            _ => Standing::Going(c.message.clone()),
        };
    }
    let fully = match find(conditions::FULLY_APPLIED) {
        Some(c) if c.status == "True" => c,
        Some(c) => return Standing::Going(c.message.clone()),
        None => return Standing::Going("waiting for the members to apply it".into()),
    };
    let Some(generation) = generation else {
        return Standing::Done(fully.message.clone());
    };
    let work_of = |c: &str| {
        works
            .iter()
            .find(|w| w.metadata.namespace.as_deref() == Some(execution_namespace(c).as_str()))
    };
    let pending: Vec<String> = clusters
        .iter()
        .filter_map(|c| {
            let why = rollout::settled_at(work_of(c), generation).err()?;
            Some(format!("{c}: {why}"))
        })
        .collect();
    if pending.is_empty() {
        Standing::Done(format!(
            "every cluster ({}) runs template generation {generation}, applied and healthy",
            clusters.len()
        ))
    } else {
        Standing::Going(format!(
            "template generation {generation} is rolling out, waiting for {}",
            pending.join("; ")
        ))
    }
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
    loop {
        let template = template_of(&hub, &kind, &namespace, &target.name).await?;
        let generation = template.metadata.generation;
        let binding = binding_of(&hub, &kind, &namespace, &target.name).await?;
        let Some((_, _, spec, status)) = binding else {
            bail!(
                "{describe} is not propagated: it has no binding; `causeway explain {} -n {namespace}` says why",
                args.target
            );
        };
        let ordered = spec.rollout.as_ref().is_some_and(|r| !r.waves.is_empty());
        let works = match ordered {
            true => Vec::new(),
            false => works_of(&hub, &kind, &namespace, &target.name).await?,
        };
        let clusters: Vec<String> = spec.clusters.iter().map(|c| c.name.clone()).collect();
        match standing(status.as_ref(), ordered, generation, &clusters, &works) {
            Standing::Done(m) => {
                println!("{describe}: {m}");
                return Ok(());
            }
            Standing::Stuck(m) => bail!("{describe}: {m}"),
            Standing::Going(m) => {
                if m != said {
                    println!("{describe}: {m}");
                    said = m;
                }
                if !args.watch {
                    return Ok(());
                }
            }
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            bail!(
                "timed out after {:?} waiting for {describe} to roll out: {said}",
                args.timeout
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
