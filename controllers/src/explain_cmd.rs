//! `causeway explain <kind>/<name>`: why each member cluster's copy of a propagated
//! resource template is what it is. Reads the hub only: the template, its binding,
//! the binding's Works and the Clusters; [`explain`] turns them into a [`Report`]
//! (pure), printed as text or JSON.

use std::collections::BTreeSet;

use anyhow::Context;
use causeway_crds::federation::binding::{
    BindingSpec, BindingStatus, ClusterResourceBinding, ResourceBinding, binding_name,
    conditions as binding_conditions,
};
use causeway_crds::federation::cluster::Cluster;
use causeway_crds::federation::interpreter;
use causeway_crds::federation::propagation::{ClusterPropagationPolicy, PropagationPolicy};
use causeway_crds::federation::selection::{PolicyId, PolicyRef, TemplateMeta, claim};
use causeway_crds::federation::work::{Work, conditions as work_conditions};
use causeway_crds::names::cluster_of_execution_namespace;
use causeway_crds::well_known::{annotations, labels};
use causeway_runtime::client::HubArgs;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta};
use serde::Serialize;
use serde_json::Value;

pub(crate) mod diff;
pub(crate) mod target;
#[cfg(test)]
mod tests;

use diff::{Change, diff, provenance_of, shown};
use target::Kind;

/// Arguments of `causeway explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The resource template on the hub, as <kind>/<name>: the kind as kubectl takes it
    /// (deployment, deployments, Deployment, deployments.apps).
    target: String,
    /// Namespace of the template (default: the hub kubeconfig context's namespace,
    /// else "default"); ignored for cluster-scoped kinds.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// text: one block per member cluster, for people; json: the same report as one
    /// JSON object, for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(flatten)]
    hub: HubArgs,
}

/// Output formats of the commands that print a report (`explain`, `failover plan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    Text,
    Json,
}

/// Everything `explain` reads, fetched from the hub.
pub(crate) struct Inputs<'a> {
    /// The template (whole object as JSON).
    pub template: &'a Value,
    /// How it is named in messages: `Deployment demo/shop`.
    pub describe: String,
    /// `ResourceBinding demo/shop-deployment`.
    pub binding_ref: String,
    /// The binding's labels (the claiming policy).
    pub binding_labels: &'a std::collections::BTreeMap<String, String>,
    /// The binding's spec and status.
    pub spec: &'a BindingSpec,
    /// The binding's status.
    pub status: Option<&'a BindingStatus>,
    /// The binding's Works.
    pub works: &'a [Work],
    /// Names of the Clusters on the hub.
    pub clusters: &'a [String],
}

/// What `causeway explain` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    /// `Deployment demo/shop`.
    pub template: String,
    /// `ResourceBinding demo/shop-deployment`.
    pub binding: String,
    /// `PropagationPolicy demo/shop`, if the binding names one.
    pub policy: Option<String>,
    /// The binding's Scheduled and FullyApplied conditions (and any other).
    pub conditions: Vec<ConditionLine>,
    /// One entry per cluster, sorted by name.
    pub clusters: Vec<ClusterReport>,
}

/// One condition of the binding.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConditionLine {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// One member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterReport {
    pub name: String,
    /// Whether the binding schedules the template there.
    pub chosen: bool,
    /// Why it was not chosen (binding status.schedulingReasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Replicas it runs (binding spec.clusters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `causeway-es-east/demo.shop-deployment`, when the Work exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<String>,
    /// Template → member manifest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Whether the member applied it (the Work's status).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_message: Option<String>,
    /// Healthy, Unhealthy or Unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Anything else to know (no Work yet, a Work left for a cluster not chosen, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Pure: the report for one propagated template.
pub(crate) fn explain(inp: &Inputs<'_>) -> Report {
    let policy = PolicyId::from_labels(inp.binding_labels).map(|p| p.to_string());
    let conditions = inp
        .status
        .map(|s| s.conditions.iter().map(condition_line).collect())
        .unwrap_or_default();
    let work_of = |cluster: &str| {
        inp.works.iter().find(|w| {
            w.namespace()
                .as_deref()
                .and_then(cluster_of_execution_namespace)
                == Some(cluster)
        })
    };
    let mut names: BTreeSet<&str> = inp.clusters.iter().map(String::as_str).collect();
    names.extend(inp.spec.clusters.iter().map(|c| c.name.as_str()));
    names.extend(inp.works.iter().filter_map(|w| {
        w.metadata
            .namespace
            .as_deref()
            .and_then(cluster_of_execution_namespace)
    }));
    let clusters = names
        .into_iter()
        .map(|name| {
            let target = inp.spec.clusters.iter().find(|c| c.name == name);
            let mut out = ClusterReport {
                name: name.to_string(),
                chosen: target.is_some(),
                replicas: target.and_then(|t| t.replicas),
                ..ClusterReport::default()
            };
            if !inp.clusters.iter().any(|c| c == name) {
                out.notes.push("there is no Cluster of this name on the hub".into());
            }
            if target.is_none() {
                out.reason = Some(
                    inp.status
                        .and_then(|s| s.scheduling_reasons.iter().find(|r| r.cluster == name))
                        .map(|r| r.reason.clone())
                        .unwrap_or_else(|| "not in the binding's scheduling result (no reason recorded)".into()),
                );
            }
            // the hub's verdict (overrides failed, cluster not Ready, applier behind)
            let hub_says = inp
                .status
                .and_then(|s| s.aggregated_status.iter().find(|a| a.cluster_name == name))
                .filter(|a| !a.applied && target.is_some())
                .and_then(|a| a.applied_message.clone());
            match work_of(name) {
                Some(work) => member(&mut out, inp, work, target.is_some_and(|t| t.replicas.is_some())),
                None if target.is_some() && hub_says.is_none() && rolling_out(inp) => out.notes.push(
                    "no Work yet: the ordered rollout (spec.rollout) has not reached this cluster's wave; the binding's RolledOut condition says which cluster it waits for".into(),
                ),
                None if target.is_some() && hub_says.is_none() => out.notes.push(
                    "no Work yet: the hub has not rendered the template for this cluster (is `causeway controller` running? see the binding's conditions)".into(),
                ),
                None => {}
            }
            if let Some(why) = hub_says {
                out.notes.push(format!("the binding says it is not applied: {why}"));
            }
            out
        })
        .collect();
    Report {
        template: inp.describe.clone(),
        binding: inp.binding_ref.clone(),
        policy,
        conditions,
        clusters,
    }
}

fn condition_line(c: &Condition) -> ConditionLine {
    ConditionLine {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
    }
}

/// Whether the binding's ordered rollout is under way (`RolledOut=False`).
fn rolling_out(inp: &Inputs<'_>) -> bool {
    inp.spec
        .rollout
        .as_ref()
        .is_some_and(|r| !r.waves.is_empty())
        && inp.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == binding_conditions::ROLLED_OUT && c.status == "False")
        })
}

/// A note for a member copy that runs more replicas than its share (none, when the
/// cluster is not chosen) while the other clusters start theirs (make-before-break);
/// `at` is where the kind keeps its replica count.
fn held_by_redistribution(
    inp: &Inputs<'_>,
    out: &ClusterReport,
    manifest: &Value,
    at: &str,
) -> Option<String> {
    use causeway_crds::federation::redistribution::holds;
    // the guard's decision, as the binding's condition records it
    let held = inp.status.is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == binding_conditions::REDISTRIBUTED
                && c.status == "False"
                && holds(&c.message, &out.name)
        })
    });
    if !held {
        return None;
    }
    let runs = manifest.pointer(at)?.as_i64()?;
    let share = match (out.chosen, out.replicas) {
        (false, _) => 0,
        (true, Some(n)) => i64::from(n),
        (true, None) => inp.template.pointer(at)?.as_i64()?,
    };
    (runs > share).then(|| {
        format!(
            "keeps {runs} replica(s), {} more than its share, until the other clusters run \
             them available (make-before-break, spec.redistribution); the binding's \
             Redistributed condition says what it waits for",
            runs - share
        )
    })
}

/// A note for a member copy the ordered rollout holds at an older template generation.
fn held_by_rollout(inp: &Inputs<'_>, manifest: &Value) -> Option<String> {
    let generation = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_i64);
    let template = generation(inp.template, "/metadata/generation")?;
    let runs: i64 = manifest
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotations::TEMPLATE_GENERATION))
        .and_then(Value::as_str)?
        .parse()
        .ok()?;
    (rolling_out(inp) && runs < template).then(|| {
        format!(
            "held by the ordered rollout (spec.rollout) at template generation {runs} (the template is at {template}): the differences above are the older generation's; its wave starts once the waves before it run the new one (the binding's RolledOut condition says which cluster it waits for)"
        )
    })
}

/// The Work's part of a cluster's report: the diff of the template's manifest and its
/// applied and health status.
fn member(out: &mut ClusterReport, inp: &Inputs<'_>, work: &Work, divided: bool) {
    out.work = Some(format!(
        "{}/{}",
        work.namespace().unwrap_or_default(),
        work.name_any()
    ));
    let kind = inp.template.get("kind");
    let name = inp.template.pointer("/metadata/name");
    let manifests = &work.spec.workload.manifests;
    let found = manifests
        .iter()
        .position(|m| m.0.get("kind") == kind && m.0.pointer("/metadata/name") == name);
    let held = found.and_then(|i| {
        let m = &manifests[i].0;
        held_by_redistribution(inp, out, m, interpreter::replicas_pointer(work, m))
    });
    match held {
        Some(note) => out.notes.push(note),
        None if !out.chosen => out.notes.push(
            "its Work is still there: the member copy is being removed (or kept, with preserveResourcesOnDeletion)".into(),
        ),
        None => {}
    }
    let Some(ordinal) = found else {
        out.notes.push(format!(
            "the Work holds no manifest of this template ({} manifest(s))",
            manifests.len()
        ));
        return;
    };
    let prov = provenance_of(
        work.annotations()
            .get(annotations::PROVENANCE)
            .map(String::as_str),
        ordinal,
    )
    .unwrap_or_else(|e| {
        out.notes.push(format!("override provenance unknown: {e}"));
        Default::default()
    });
    let replicas_at = interpreter::replicas_pointer(work, &manifests[ordinal].0);
    out.changes = diff(
        inp.template,
        &manifests[ordinal].0,
        &prov,
        divided.then_some(replicas_at),
    );
    // §9.5 ★: two override policies writing one path (the later wins)
    if let Some(raw) = work.annotations().get(annotations::OVERRIDE_OVERLAPS) {
        match serde_json::from_str::<Vec<String>>(raw) {
            Ok(overlaps) => out.notes.extend(
                overlaps
                    .into_iter()
                    .map(|o| format!("two override policies write one path: {o}")),
            ),
            Err(e) => out.notes.push(format!(
                "the Work's {} annotation is not a JSON list of strings: {e}",
                annotations::OVERRIDE_OVERLAPS
            )),
        }
    }
    if let Some(note) = held_by_rollout(inp, &manifests[ordinal].0) {
        out.notes.push(note);
    }
    let status = work.status.as_ref();
    let ms = status.and_then(|s| {
        let ordinal = i32::try_from(ordinal).ok()?;
        s.manifest_statuses
            .iter()
            .find(|m| m.identifier.ordinal == ordinal)
    });
    let applied = status.and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == work_conditions::APPLIED)
    });
    out.applied = ms
        .and_then(|m| m.applied)
        .or(applied.map(|c| c.status == "True"));
    if out.applied == Some(false) {
        out.applied_reason = ms
            .and_then(|m| m.reason.clone())
            .or(applied.map(|c| c.reason.clone()));
        out.applied_message = ms
            .and_then(|m| m.message.clone())
            .or(applied.map(|c| c.message.clone()));
    }
    let aggregated = inp.status.and_then(|s| {
        s.aggregated_status
            .iter()
            .find(|a| a.cluster_name == out.name)
    });
    out.health = ms
        .and_then(|m| m.health)
        .or(aggregated.and_then(|a| a.health))
        .map(|h| format!("{h:?}"));
    if out.applied.is_none() {
        out.notes
            .push("the member has not reported on its Work yet".into());
    }
}

/// Pure: the report as text.
pub(crate) fn text(r: &Report) -> String {
    let mut s = format!("{}\n  binding: {}", r.template, r.binding);
    match &r.policy {
        Some(p) => s.push_str(&format!(", claimed by {p}\n")),
        None => s.push_str(", claimed by no policy (its labels name none)\n"),
    }
    for c in &r.conditions {
        s.push_str(&format!("  {}: {} ({})", c.type_, c.status, c.reason));
        if !c.message.is_empty() {
            s.push_str(&format!(": {}", c.message));
        }
        s.push('\n');
    }
    for c in &r.clusters {
        s.push('\n');
        s.push_str(&c.name);
        if c.chosen {
            s.push_str(": chosen");
            if let Some(n) = c.replicas {
                s.push_str(&format!(", {n} replica(s)"));
            }
        } else {
            s.push_str(&format!(
                ": not chosen: {}",
                c.reason.as_deref().unwrap_or("")
            ));
        }
        s.push('\n');
        if let Some(w) = &c.work {
            s.push_str(&format!("  work: {w}\n"));
            if c.changes.is_empty() {
                s.push_str("  no differences from the template\n");
            }
        }
        for ch in &c.changes {
            s.push_str(&format!(
                "  {}: {} → {}  ({})\n",
                ch.path,
                shown(ch.template.as_ref()),
                shown(ch.member.as_ref()),
                ch.source
            ));
        }
        match c.applied {
            Some(true) => s.push_str("  applied: yes"),
            Some(false) => s.push_str(&format!(
                "  applied: no ({}: {})",
                c.applied_reason.as_deref().unwrap_or("no reason given"),
                c.applied_message.as_deref().unwrap_or("")
            )),
            None => {}
        }
        if let Some(h) = &c.health {
            s.push_str(&format!(
                "{}health: {h}",
                if c.applied.is_some() { ", " } else { "  " }
            ));
        }
        if c.applied.is_some() || c.health.is_some() {
            s.push('\n');
        }
        for n in &c.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
    }
    s
}

/// Pure: why a template has no binding, from the policies that exist.
pub(crate) fn not_propagated(
    describe: &str,
    template: &DynamicObject,
    policies: &[PropagationPolicy],
    cluster_policies: &[ClusterPropagationPolicy],
) -> String {
    let refs: Vec<PolicyRef<'_>> = policies
        .iter()
        .map(PolicyRef::from_pp)
        .chain(cluster_policies.iter().map(PolicyRef::from_cpp))
        .collect();
    let names: Vec<String> = refs.iter().map(|p| p.id().to_string()).collect();
    let listed = if names.is_empty() {
        "there is no PropagationPolicy in its namespace and no ClusterPropagationPolicy".to_string()
    } else {
        format!(
            "the policies that could select it are: {}",
            names.join(", ")
        )
    };
    let held = TemplateMeta::from_object(template)
        .map_err(|e| e.to_string())
        .and_then(|meta| claim(&meta, &refs, None).map_err(|e| e.to_string()));
    match held {
        Ok(Some(c)) => format!(
            "{describe} is not propagated yet: {} selects it but there is no binding; is `causeway controller` running on the hub?",
            c.policy
        ),
        Ok(None) => format!(
            "{describe} is not propagated: {listed}, and none selects it; create a PropagationPolicy whose resourceSelectors match it"
        ),
        Err(e) => format!("{describe} cannot be propagated: {e}"),
    }
}

/// Runs `causeway explain`.
pub async fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let (target, hub, namespace) =
        target::start(&args.target, &args.hub, args.namespace.as_deref()).await?;
    let kind = target::kind_on(&hub, &target.kind, "hub").await?;
    let report = fetch(&hub, &kind, &namespace, &target.name).await?;
    match args.output {
        Output::Text => print!("{}", text(&report)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(())
}

/// The resource template `name` of `kind` on the hub (an error saying so if it is not
/// there).
pub(crate) async fn template_of(
    hub: &kube::Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<DynamicObject> {
    let describe = kind.describe(namespace, name);
    template_opt(hub, kind, namespace, name)
        .await?
        .with_context(|| {
            format!(
                "{describe} not found on the hub: check the name and -n (templates live on the hub)"
            )
        })
}

/// The Works of template `name`'s binding, in the clusters' execution namespaces.
pub(crate) async fn works_of(
    hub: &kube::Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<Work>> {
    let bname = binding_name(&kind.resource.kind, name);
    let mut selector = format!(
        "{}={}",
        labels::BINDING_NAME,
        causeway_crds::names::label_value(&bname)
    );
    selector.push_str(&match kind.namespaced {
        true => format!(",{}={namespace}", labels::BINDING_NAMESPACE),
        false => format!(",!{}", labels::BINDING_NAMESPACE),
    });
    Ok(call(
        Api::<Work>::all(hub.clone()).list(&ListParams::default().labels(&selector)),
        || "listing its Works".into(),
    )
    .await?
    .items
    .into_iter()
    .filter(|w| {
        w.namespace()
            .as_deref()
            .and_then(cluster_of_execution_namespace)
            .is_some()
    })
    // (a shortened label value may name two bindings)
    .filter(|w| {
        causeway_crds::names::named_by(&w.metadata, labels::BINDING_NAME).as_deref()
            == Some(bname.as_str())
    })
    .collect())
}

/// [`template_of`], with None when it is not there.
pub(crate) async fn template_opt(
    hub: &kube::Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<DynamicObject>> {
    let describe = kind.describe(namespace, name);
    call(kind.api(hub, namespace).get_opt(name), || {
        format!("reading {describe} on the hub")
    })
    .await
}

/// The binding of template `name` (of `kind`, in `namespace` if namespaced), if it has
/// one: `ResourceBinding demo/web-deployment` (or `ClusterResourceBinding x`), its
/// metadata, spec and status.
pub(crate) async fn binding_of(
    hub: &kube::Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<(String, ObjectMeta, BindingSpec, Option<BindingStatus>)>> {
    let bname = binding_name(&kind.resource.kind, name);
    Ok(if kind.namespaced {
        let api = Api::<ResourceBinding>::namespaced(hub.clone(), namespace);
        call(api.get_opt(&bname), || "reading its ResourceBinding".into())
            .await?
            .map(|b| {
                (
                    format!("ResourceBinding {namespace}/{bname}"),
                    b.metadata,
                    b.spec.0,
                    b.status,
                )
            })
    } else {
        let api = Api::<ClusterResourceBinding>::all(hub.clone());
        call(api.get_opt(&bname), || {
            "reading its ClusterResourceBinding".into()
        })
        .await?
        .map(|b| {
            (
                format!("ClusterResourceBinding {bname}"),
                b.metadata,
                b.spec.0,
                b.status,
            )
        })
    })
}

/// Reads the hub and builds the report.
async fn fetch(
    hub: &kube::Client,
    kind: &Kind,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Report> {
    let describe = kind.describe(namespace, name);
    let mut template = template_of(hub, kind, namespace, name).await?;
    template.types = Some(kube::api::TypeMeta {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
    });
    let binding = binding_of(hub, kind, namespace, name).await?;
    let Some((binding_ref, meta, spec, status)) = binding else {
        let policies = if kind.namespaced {
            let api = Api::<PropagationPolicy>::namespaced(hub.clone(), namespace);
            call(api.list(&ListParams::default()), || {
                "listing PropagationPolicies".into()
            })
            .await?
            .items
        } else {
            Vec::new()
        };
        let api = Api::<ClusterPropagationPolicy>::all(hub.clone());
        let cluster_policies = call(api.list(&ListParams::default()), || {
            "listing ClusterPropagationPolicies".into()
        })
        .await?
        .items;
        anyhow::bail!(
            "{}",
            not_propagated(&describe, &template, &policies, &cluster_policies)
        );
    };
    let works = works_of(hub, kind, namespace, name).await?;
    let clusters: Vec<String> = call(
        Api::<Cluster>::all(hub.clone()).list(&ListParams::default()),
        || "listing the Clusters".into(),
    )
    .await?
    .items
    .iter()
    .map(ResourceExt::name_any)
    .collect();
    let template_json = serde_json::to_value(&template)?;
    let no_labels = Default::default();
    Ok(explain(&Inputs {
        template: &template_json,
        describe,
        binding_ref,
        binding_labels: meta.labels.as_ref().unwrap_or(&no_labels),
        spec: &spec,
        status: status.as_ref(),
        works: &works,
        clusters: &clusters,
    }))
}

/// One hub call, bounded, with what was being done in its error.
pub(crate) async fn call<T>(
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    what: impl FnOnce() -> String,
) -> anyhow::Result<T> {
    causeway_controllers::clusters::within(causeway_controllers::clusters::CALL_TIMEOUT, fut)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", what()))
}
