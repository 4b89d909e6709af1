//! `causeway promote <kind>/<name> --cluster c` (federation.md §8 F.44, karmadactl
//! promote): adopts an object that already runs in a member. Its live copy becomes the
//! hub's resource template (server-set fields and status stripped, annotation
//! `causeway.io/conflict-resolution: overwrite`) and, unless `--no-policy`, a
//! PropagationPolicy (ClusterPropagationPolicy for a cluster-scoped kind) places it on
//! that cluster alone, with conflictResolution Overwrite and
//! preserveResourcesOnDeletion, so the member object is taken over with no change.

use std::path::PathBuf;

use anyhow::Context;
use causeway_controllers::clusters::{join, registry};
use causeway_controllers::propagation::render::SERVER_METADATA;
use causeway_crds::federation::binding::binding_name;
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::propagation::{
    ClusterPropagationPolicy, ClusterPropagationPolicySpec, Placement, PropagationPolicy,
    PropagationPolicySpec, PropagationSpec,
};
use causeway_crds::federation::prune::prune_allocated;
use causeway_crds::federation::{ClusterAffinity, ConflictResolution, ResourceSelector};
use causeway_crds::well_known::{FIELD_MANAGER, annotations, labels};
use causeway_runtime::client::{HubArgs, Source};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Map, Value};

use crate::explain_cmd::call;
use crate::explain_cmd::target::{self, Kind};

#[cfg(test)]
mod tests;

/// Arguments of `causeway promote`.
#[derive(Debug, clap::Args)]
pub struct PromoteArgs {
    /// The object in the member to adopt, as <kind>/<name>: the kind as kubectl takes it
    /// (deployment, deployments, Deployment, deployments.apps).
    target: String,
    /// Namespace of the object (default: the hub kubeconfig context's namespace, else
    /// "default"); ignored for cluster-scoped kinds. The namespace must exist on the hub.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// The member cluster (the name of its Cluster on the hub) whose live object becomes
    /// the template; the policy places the template on this cluster only.
    #[arg(long)]
    cluster: String,
    /// kubeconfig of the member (default: the credentials the hub holds for a Push
    /// member; required for a Pull member).
    #[arg(long)]
    member_kubeconfig: Option<PathBuf>,
    /// Context in the member kubeconfig (default: its current context).
    #[arg(long)]
    member_context: Option<String>,
    /// Create only the template, no PropagationPolicy (write your own policy to place it).
    #[arg(long)]
    no_policy: bool,
    /// Print the template and the policy that would be created (YAML) and write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    hub: HubArgs,
}

/// Annotations a member's controllers or Causeway's applier set on the member copy.
const MEMBER_ANNOTATIONS: [&str; 4] = [
    "deployment.kubernetes.io/revision",
    annotations::WORK,
    annotations::APPLIED_HASH,
    annotations::TEMPLATE_GENERATION,
];

/// Pure: the hub template for a member's live object: apiVersion, kind, metadata
/// (name, namespace, labels, annotations, minus what the member set) and the rest
/// without status and without what the member allocated ([`prune_allocated`]: a
/// Service's cluster IPs, a Job's generated selector, ...). Annotated `causeway.io/conflict-resolution: overwrite` so the
/// first apply takes the member object over.
pub(crate) fn template_from_member(live: &Value, kind: &Kind) -> Value {
    let mut t = live.as_object().cloned().unwrap_or_default();
    t.remove("status");
    t.insert(
        "apiVersion".into(),
        kind.resource.api_version.clone().into(),
    );
    t.insert("kind".into(), kind.resource.kind.clone().into());
    let meta = t
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        for f in SERVER_METADATA {
            meta.remove(f);
        }
        if let Some(Value::Object(l)) = meta.get_mut("labels") {
            l.remove(labels::MANAGED);
        }
        let a = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(a) = a {
            for k in MEMBER_ANNOTATIONS {
                a.remove(k);
            }
            a.insert(annotations::CONFLICT_RESOLUTION.into(), "overwrite".into());
        }
        if meta
            .get("labels")
            .is_some_and(|l| l.as_object().is_some_and(Map::is_empty))
        {
            meta.remove("labels");
        }
    }
    let mut t = Value::Object(t);
    prune_allocated(&kind.resource.kind, &mut t);
    t
}

/// Pure: refuses a member object labelled `causeway.io/managed: "false"`: the applier
/// never touches such an object (F.42), so a template and policy for it would adopt
/// nothing. `what` names the object, `cluster` the member.
pub(crate) fn check_adoptable(live: &Value, what: &str, cluster: &str) -> anyhow::Result<()> {
    if live["metadata"]["labels"][labels::MANAGED] == "false" {
        anyhow::bail!(
            "{what} in member {cluster} is labelled {}=false, which keeps Causeway from ever taking it over, so promote would write a template that adopts nothing; remove the label in member {cluster} (kubectl label <kind>/<name> {}-) and run promote again",
            labels::MANAGED,
            labels::MANAGED
        );
    }
    Ok(())
}

/// Pure: whether `existing` (a policy on the hub with promote's name) is the one promote
/// writes (`ours`): a promote interrupted between the policy and the template is run
/// again by keeping it.
pub(crate) fn same_policy(existing: &Value, ours: &Value) -> bool {
    existing["kind"] == ours["kind"] && existing["spec"] == ours["spec"]
}

/// Pure: the name of the policy promote writes: `<name>-<kind>` lowercased, the same
/// name as the template's binding.
pub(crate) fn policy_name(kind: &Kind, name: &str) -> String {
    // (at most 63 characters: a policy's name is a label value on its bindings)
    causeway_crds::names::label_value(&binding_name(&kind.resource.kind, name))
}

/// Pure: the policy that places the promoted template on `cluster` alone, taking the
/// member object over and keeping it if the template is ever deleted.
pub(crate) fn policy_for(kind: &Kind, namespace: &str, name: &str, cluster: &str) -> Value {
    let spec = PropagationSpec {
        resource_selectors: vec![ResourceSelector {
            api_version: kind.resource.api_version.clone(),
            kind: kind.resource.kind.clone(),
            name: Some(name.to_string()),
            ..ResourceSelector::default()
        }],
        placement: Placement {
            cluster_affinity: Some(ClusterAffinity {
                cluster_names: vec![cluster.to_string()],
                ..ClusterAffinity::default()
            }),
            ..Placement::default()
        },
        conflict_resolution: Some(ConflictResolution::Overwrite),
        preserve_resources_on_deletion: Some(true),
        ..PropagationSpec::default()
    };
    let metadata = |namespace: Option<&str>| ObjectMeta {
        name: Some(policy_name(kind, name)),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    };
    let policy = if kind.namespaced {
        serde_json::to_value(PropagationPolicy {
            metadata: metadata(Some(namespace)),
            spec: PropagationPolicySpec(spec),
            status: None,
        })
    } else {
        serde_json::to_value(ClusterPropagationPolicy {
            metadata: metadata(None),
            spec: ClusterPropagationPolicySpec(spec),
            status: None,
        })
    };
    let mut policy = policy.expect("policies serialize");
    let (api_version, kind_name) = if kind.namespaced {
        ("causeway.io/v1alpha1", "PropagationPolicy")
    } else {
        ("causeway.io/v1alpha1", "ClusterPropagationPolicy")
    };
    policy["apiVersion"] = api_version.into();
    policy["kind"] = kind_name.into();
    policy
}

/// The member's client: from `--member-kubeconfig`/`--member-context`, else the
/// credentials the hub holds for Push member `cluster`.
async fn member_client(
    args: &PromoteArgs,
    hub: &kube::Client,
    cluster: &Cluster,
) -> anyhow::Result<kube::Client> {
    if args.member_kubeconfig.is_some() || args.member_context.is_some() {
        let source = Source {
            kubeconfig: args.member_kubeconfig.as_deref(),
            context: args.member_context.as_deref(),
            kubeconfig_flag: "--member-kubeconfig",
            context_flag: "--member-context",
        };
        return source.client().await;
    }
    let c = &args.cluster;
    let secret = match &cluster.spec.secret_ref {
        Some(r) => {
            let api = Api::<Secret>::namespaced(hub.clone(), &r.namespace);
            call(api.get_opt(&r.name), || {
                format!("reading the credentials of member {c} on the hub")
            })
            .await?
        }
        None => None,
    };
    let spec = registry::member_spec(cluster, secret.as_slice()).map_err(|why| {
        anyhow::anyhow!(
            "the hub holds no usable credentials for member {c} ({why}; a Pull member's never are): pass --member-kubeconfig"
        )
    })?;
    join::client_for(&spec.access).await
}

/// Pure: which policy will claim the promoted `template`, given the policies on the hub
/// (`pps` in its namespace, `cpps`) and promote's own (`ours`, none with `--no-policy`):
/// `Ok` names it (or `None`: no policy selects it); `Err` says which other policy would
/// take the template from promote's, which the hub would then place by that policy's
/// rules (to every cluster it selects, with Overwrite).
pub(crate) fn claimant(
    template: &Value,
    pps: &[PropagationPolicy],
    cpps: &[ClusterPropagationPolicy],
    ours: Option<&Value>,
) -> anyhow::Result<Option<String>> {
    use causeway_crds::federation::selection::{PolicyRef, TemplateMeta, claim, validate_policy};
    let ours_pp = ours
        .filter(|p| p["kind"] == "PropagationPolicy")
        .map(|p| serde_json::from_value::<PropagationPolicy>(p.clone()))
        .transpose()?;
    let ours_cpp = ours
        .filter(|p| p["kind"] == "ClusterPropagationPolicy")
        .map(|p| serde_json::from_value::<ClusterPropagationPolicy>(p.clone()))
        .transpose()?;
    let ours_id = ours_pp
        .as_ref()
        .map(|p| PolicyRef::from_pp(p).id())
        .or_else(|| ours_cpp.as_ref().map(|p| PolicyRef::from_cpp(p).id()));
    // the hub's copy of promote's own policy (kept from a promote that did not finish)
    // is promote's
    let theirs = |p: &PolicyRef<'_>| Some(p.id()) != ours_id;
    let refs: Vec<PolicyRef<'_>> = pps
        .iter()
        .map(PolicyRef::from_pp)
        .filter(theirs)
        .chain(ours_pp.iter().map(PolicyRef::from_pp))
        .chain(cpps.iter().map(PolicyRef::from_cpp).filter(theirs))
        .chain(ours_cpp.iter().map(PolicyRef::from_cpp))
        .filter(|p| validate_policy(p).is_ok())
        .collect();
    let object: kube::api::DynamicObject = serde_json::from_value(template.clone())?;
    let meta = TemplateMeta::from_object(&object)?;
    let held = claim(&meta, &refs, None)?.map(|c| c.policy);
    match (held, ours_id) {
        (Some(other), Some(ours)) if other != ours => anyhow::bail!(
            "{other} selects this template too and would claim it before promote's {ours} (a higher priority, or a more specific selector), placing it by its own rules; change that policy so it does not select it, or pass --no-policy to let it"
        ),
        (held, _) => Ok(held.map(|p| p.to_string())),
    }
}

/// Runs `causeway promote`.
pub async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    let (target, hub, namespace) =
        target::start(&args.target, &args.hub, args.namespace.as_deref()).await?;
    let c = args.cluster.as_str();
    let cluster = call(Api::<Cluster>::all(hub.clone()).get_opt(c), || {
        format!("reading Cluster {c} on the hub")
    })
    .await?
    .with_context(|| {
        format!("there is no Cluster {c:?} on the hub: `kubectl get clusters` lists the members")
    })?;
    let kind = target::kind_on(&hub, &target.kind, "hub").await?;
    let what = kind.describe(&namespace, &target.name);
    let member = member_client(&args, &hub, &cluster).await?;
    let r = &kind.resource;
    let gvk = GroupVersionKind::gvk(&r.group, &r.version, &r.kind);
    let (member_resource, _) = call(kube::discovery::pinned_kind(&member, &gvk), || {
        format!("member {c} does not serve {} {}", r.api_version, r.kind)
    })
    .await?;
    let member_kind = Kind {
        resource: member_resource,
        namespaced: kind.namespaced,
    };
    let live = call(
        member_kind.api(&member, &namespace).get_opt(&target.name),
        || format!("reading {what} in member {c}"),
    )
    .await?
    .with_context(|| {
        format!("{what} not found in member {c}: promote adopts an object that runs there")
    })?;
    let hub_api = kind.api(&hub, &namespace);
    if call(hub_api.get_opt(&target.name), || {
        format!("reading {what} on the hub")
    })
    .await?
    .is_some()
    {
        anyhow::bail!(
            "{what} already exists on the hub: it is a template already (see `causeway explain {}/{} -n {namespace}`); promote only adopts objects the hub does not have",
            target.kind,
            target.name
        );
    }
    if kind.namespaced {
        let ns = call(
            Api::<Namespace>::all(hub.clone()).get_opt(&namespace),
            || format!("reading namespace {namespace} on the hub"),
        )
        .await?;
        if ns.is_none() {
            anyhow::bail!(
                "namespace {namespace} does not exist on the hub: create it there (kubectl create namespace {namespace}) and run promote again"
            );
        }
    }
    let live = serde_json::to_value(&live)?;
    check_adoptable(&live, &what, c)?;
    let template = template_from_member(&live, &kind);
    let mut policy = (!args.no_policy).then(|| policy_for(&kind, &namespace, &target.name, c));
    // a policy of promote's name that is exactly promote's (a promote stopped before the
    // template) is kept, so running promote again finishes it
    let mut policy_kept = false;
    if let Some(p) = &policy {
        let pname = policy_name(&kind, &target.name);
        let existing = if kind.namespaced {
            let api = Api::<PropagationPolicy>::namespaced(hub.clone(), &namespace);
            call(api.get_opt(&pname), || "reading PropagationPolicies".into())
                .await?
                .map(|e| serde_json::to_value(&e))
                .transpose()?
        } else {
            let api = Api::<ClusterPropagationPolicy>::all(hub.clone());
            call(api.get_opt(&pname), || {
                "reading ClusterPropagationPolicies".into()
            })
            .await?
            .map(|e| serde_json::to_value(&e))
            .transpose()?
        };
        match existing {
            Some(e) if same_policy(&e, p) => policy_kept = true,
            Some(_) => anyhow::bail!(
                "{} {pname} already exists on the hub and differs from the one promote writes: delete it, or pass --no-policy and let it (or another policy) select the template",
                p["kind"].as_str().unwrap_or_default()
            ),
            None => {}
        }
    }
    let pps = if kind.namespaced {
        let api = Api::<PropagationPolicy>::namespaced(hub.clone(), &namespace);
        call(api.list(&Default::default()), || {
            "listing PropagationPolicies".into()
        })
        .await?
        .items
    } else {
        Vec::new()
    };
    let cpps = call(
        Api::<ClusterPropagationPolicy>::all(hub.clone()).list(&Default::default()),
        || "listing ClusterPropagationPolicies".into(),
    )
    .await?
    .items;
    let claimed_by = claimant(&template, &pps, &cpps, policy.as_ref())?;
    if policy.is_none() {
        match &claimed_by {
            Some(p) => eprintln!(
                "{p} will claim the template and place it by its rules: with the template's annotation {}: overwrite, it takes over the same-named object in every cluster it places the template on, not only {c}",
                annotations::CONFLICT_RESOLUTION
            ),
            None => eprintln!("no policy selects the template: it stays on the hub until one does"),
        }
    }
    if args.dry_run {
        let mut out = serde_saphyr::to_string(&template)?;
        if let Some(p) = &policy {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(p)?);
        }
        print!("{out}");
        eprintln!("dry run: nothing was written");
        return Ok(());
    }
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    if policy_kept {
        println!(
            "kept {} {}: it is the policy promote writes (from a promote that did not finish)",
            policy
                .as_ref()
                .map_or("", |p| p["kind"].as_str().unwrap_or_default()),
            policy_name(&kind, &target.name)
        );
        policy = None;
    }
    // whether the hub has the policy when the template is written
    let policy_on_hub = policy_kept || policy.is_some();
    if let Some(p) = policy {
        let created = if kind.namespaced {
            let p: PropagationPolicy = serde_json::from_value(p)?;
            let api = Api::<PropagationPolicy>::namespaced(hub.clone(), &namespace);
            call(api.create(&pp, &p), || {
                "creating the PropagationPolicy".into()
            })
            .await
            .map(|_| {
                format!(
                    "PropagationPolicy {namespace}/{}",
                    policy_name(&kind, &target.name)
                )
            })
        } else {
            let p: ClusterPropagationPolicy = serde_json::from_value(p)?;
            let api = Api::<ClusterPropagationPolicy>::all(hub.clone());
            call(api.create(&pp, &p), || {
                "creating the ClusterPropagationPolicy".into()
            })
            .await
            .map(|_| {
                format!(
                    "ClusterPropagationPolicy {}",
                    policy_name(&kind, &target.name)
                )
            })
        };
        // the policy first: the template never exists without the policy that places
        // it on this cluster only
        let created = created?;
        println!(
            "created {created}: cluster {c} only, conflictResolution Overwrite, preserveResourcesOnDeletion true"
        );
    }
    let object: kube::api::DynamicObject = serde_json::from_value(template)?;
    call(hub_api.create(&pp, &object), || {
        format!("creating the template {what} on the hub")
    })
    .await
    .with_context(|| {
        if policy_on_hub {
            format!(
                "the policy {} {} was created, the template was not: fix the cause and run promote again (it keeps that policy)",
                if kind.namespaced { "PropagationPolicy" } else { "ClusterPropagationPolicy" },
                policy_name(&kind, &target.name)
            )
        } else {
            "nothing was written".to_string()
        }
    })?;
    println!(
        "created the template {what} on the hub from member {c} (annotation {}: overwrite)",
        annotations::CONFLICT_RESOLUTION
    );
    println!(
        "check the adoption with `causeway explain {}/{} -n {namespace}`",
        target.kind, target.name
    );
    Ok(())
}
