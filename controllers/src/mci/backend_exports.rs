//! MCI-11, behind `causeway controller --export-mci-backends`: Karmada's
//! `serviceexportpropagation`. A Service template on the hub that a MultiClusterIngress
//! Causeway serves names as a backend gets a ServiceExport next to it and a
//! PropagationPolicy `propagate-service-<name>` that places that export on the clusters
//! the Service's ResourceBinding schedules it to, so the members export what the MCI
//! routes to without anyone writing an export by hand. Both are owned by the Service
//! (deleting it deletes them) and labelled `causeway.io/mci-backend`; once no MCI names
//! the Service they are deleted, and with them the members' exports.
//!
//! Unlike Karmada's, it never touches what it did not make: a ServiceExport template the
//! user wrote for the Service is left to the user's own policy (no second policy
//! competes for it), and a PropagationPolicy of that name that is not Causeway's is not
//! replaced (a Warning Event on the MCI says so).
//!
//! Watches (MCIs, IngressClasses, hub Services, ResourceBindings, hub ServiceExports,
//! the policies it made) → the pure [`desired`] → the shared applier.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use causeway_crds::federation::binding::{ResourceBinding, binding_name};
use causeway_crds::federation::propagation::PropagationPolicy;
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mci::class::select;
use causeway_crds::mcs::v1beta1::ServiceExport;
use causeway_runtime::apply;
use causeway_runtime::events::Notes;
use causeway_runtime::reflect::{Dirty, Reflector, Wake};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The label on what this loop made.
pub const LABEL: &str = "causeway.io/mci-backend";
/// Prefix of the PropagationPolicy of a backend Service's export (Karmada's name).
pub const POLICY_PREFIX: &str = "propagate-service-";

/// The name of the policy that places the export of Service `name`: at most 63
/// characters (a policy's name is a label value on its bindings), shortened with a hash
/// past that (a Service name may be 63 long).
pub fn policy_name(name: &str) -> String {
    causeway_crds::names::label_value(&format!("{POLICY_PREFIX}{name}"))
}

/// One backend Service to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The Service's uid (the owner of what is made for it).
    pub uid: String,
    /// The clusters its binding schedules it to, sorted; empty: not (yet) scheduled,
    /// so no policy.
    pub clusters: Vec<String>,
}

/// What the hub holds that the exports depend on.
pub struct World<'a> {
    /// Every MultiClusterIngress.
    pub mcis: &'a [Arc<MultiClusterIngress>],
    /// Every IngressClass (which MCIs are Causeway's).
    pub classes: &'a [IngressClass],
    /// The hub's Services (the templates).
    pub services: &'a [Arc<Service>],
    /// The hub's ResourceBindings (where each template is scheduled).
    pub bindings: &'a [Arc<ResourceBinding>],
    /// The hub's ServiceExports, Causeway's and the users'.
    pub exports: &'a [Arc<ServiceExport>],
}

fn ours<K: Resource>(o: &K) -> bool {
    o.meta()
        .labels
        .as_ref()
        .is_some_and(|l| l.get(LABEL).is_some_and(|v| v == "true"))
}

/// Pure: the clusters the ResourceBinding of Service `namespace/name` schedules it to
/// (its clusters and those its dependents require); `None` when it has no binding.
pub(crate) fn scheduled_to(
    bindings: &[Arc<ResourceBinding>],
    namespace: &str,
    name: &str,
) -> Option<BTreeSet<String>> {
    let binding = binding_name("Service", name);
    let b = bindings.iter().find(|b| {
        b.namespace().as_deref() == Some(namespace)
            && b.name_any() == binding
            && b.spec.resource.kind == "Service"
            && b.spec.resource.name == name
    })?;
    let clusters = b.spec.clusters.iter().map(|c| c.name.clone());
    let required = b.spec.required_by.iter();
    Some(
        clusters
            .chain(required.flat_map(|r| r.clusters.iter().map(|c| c.name.clone())))
            .collect(),
    )
}

/// Pure: the Services to export, by (namespace, name).
pub fn desired(w: &World) -> BTreeMap<(String, String), Want> {
    let mut named: BTreeSet<(String, String)> = BTreeSet::new();
    for mci in w.mcis {
        if mci.metadata.deletion_timestamp.is_some() || !select(mci, w.classes).is_ours() {
            continue;
        }
        let ns = mci.namespace().unwrap_or_default();
        for svc in super::backend_services(mci) {
            named.insert((ns.clone(), svc));
        }
    }
    let users_own: BTreeSet<(String, String)> = w
        .exports
        .iter()
        .filter(|e| !ours(e.as_ref()))
        .map(|e| (e.namespace().unwrap_or_default(), e.name_any()))
        .collect();
    let mut out = BTreeMap::new();
    for s in w.services {
        let key = (s.namespace().unwrap_or_default(), s.name_any());
        if !named.contains(&key)
            || users_own.contains(&key)
            || s.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let Some(uid) = s.metadata.uid.clone() else {
            continue;
        };
        let clusters = scheduled_to(w.bindings, &key.0, &key.1).unwrap_or_default();
        out.insert(
            key.clone(),
            Want {
                namespace: key.0,
                name: key.1,
                uid,
                clusters: clusters.into_iter().collect(),
            },
        );
    }
    out
}

fn metadata(w: &Want, name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "namespace": w.namespace,
        "labels": {LABEL: "true"},
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Service", "name": w.name, "uid": w.uid,
            "controller": true, "blockOwnerDeletion": true,
        }],
    })
}

/// Pure: the ServiceExport template for `w`.
pub fn export_for(w: &Want) -> ServiceExport {
    serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": metadata(w, &w.name),
    }))
    .expect("a ServiceExport with metadata only is valid")
}

/// Pure: the policy placing `w`'s export on its Service's clusters (None while the
/// Service is scheduled nowhere).
pub fn policy_for(w: &Want) -> Option<PropagationPolicy> {
    if w.clusters.is_empty() {
        return None;
    }
    Some(
        serde_json::from_value(json!({
            "apiVersion": "causeway.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": metadata(w, &policy_name(&w.name)),
            "spec": {
                "resourceSelectors": [{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport", "name": w.name}],
                "placement": {"clusterAffinity": {"clusterNames": w.clusters}},
            },
        }))
        .expect("the policy's fields are all valid"),
    )
}

/// Runs until `stop`.
pub async fn run(hub: kube::Client, stop: CancellationToken) {
    let wake = Wake::new();
    let start = |what: &'static str| (watcher::Config::default(), stop.clone(), what);
    let (c, s, w) = start("hub multiclusteringresses (backend exports)");
    let mcis = Reflector::start(Api::<MultiClusterIngress>::all(hub.clone()), c, s, w, None)
        .subscribe(wake.clone());
    let (c, s, w) = start("hub ingressclasses (backend exports)");
    let classes = Reflector::start(Api::<IngressClass>::all(hub.clone()), c, s, w, None)
        .subscribe(wake.clone());
    let (c, s, w) = start("hub services (backend exports)");
    let services =
        Reflector::start(Api::<Service>::all(hub.clone()), c, s, w, None).subscribe(wake.clone());
    let (c, s, w) = start("hub resourcebindings (backend exports)");
    let bindings = Reflector::start(Api::<ResourceBinding>::all(hub.clone()), c, s, w, None)
        .subscribe(wake.clone());
    let (c, s, w) = start("hub serviceexports (backend exports)");
    let exports = Reflector::start(Api::<ServiceExport>::all(hub.clone()), c, s, w, None)
        .subscribe(wake.clone());
    let policies = Reflector::start(
        Api::<PropagationPolicy>::all(hub.clone()),
        watcher::Config::default(),
        stop.clone(),
        "hub propagationpolicies (backend exports)",
        None,
    )
    .subscribe(wake.clone());
    for ready in [
        mcis.wait_until_ready().await,
        classes.wait_until_ready().await,
        services.wait_until_ready().await,
        bindings.wait_until_ready().await,
        exports.wait_until_ready().await,
        policies.wait_until_ready().await,
    ] {
        if ready.is_err() {
            return;
        }
    }
    tracing::info!("MultiClusterIngress backend exports running (--export-mci-backends)");
    let recorder = Notes::new(
        hub.clone(),
        Reporter {
            controller: "causeway-mci-backend-exports".into(),
            instance: None,
        },
    );
    // policies of another owner already told about
    let mut told: HashSet<(String, String)> = HashSet::new();
    let mut dirty = Dirty::full();
    loop {
        let (m, c, s, b, e, p) = (
            mcis.state(),
            classes.state(),
            services.state(),
            bindings.state(),
            exports.state(),
            policies.state(),
        );
        let class_list: Vec<IngressClass> = c.iter().map(|c| c.as_ref().clone()).collect();
        let want = desired(&World {
            mcis: &m,
            classes: &class_list,
            services: &s,
            bindings: &b,
            exports: &e,
        });
        let mut failed = HashSet::new();
        let mut keep_exports = BTreeSet::new();
        let mut keep_policies = BTreeSet::new();
        for (key, w) in &want {
            keep_exports.insert(key.clone());
            let export = export_for(w);
            let actual = e.iter().find(|x| {
                x.namespace().as_deref() == Some(key.0.as_str()) && x.name_any() == key.1
            });
            let api: Api<ServiceExport> = Api::namespaced(hub.clone(), &key.0);
            if let Err(err) = apply::ensure(&api, &export, actual.map(|a| a.as_ref())).await {
                tracing::warn!(namespace = %key.0, service = %key.1, error = %err, "cannot write the backend's ServiceExport; retrying");
                failed.insert(key.clone());
            }
            let Some(policy) = policy_for(w) else {
                continue;
            };
            let pname = policy_name(&key.1);
            let actual = p.iter().find(|x| {
                x.namespace().as_deref() == Some(key.0.as_str()) && x.name_any() == pname
            });
            if let Some(a) = actual
                && !ours(a.as_ref())
            {
                // someone else's policy of that name: left alone, and said once
                if told.insert((key.0.clone(), pname.clone())) {
                    tell_foreign_policy(&recorder, &m, &key.0, &key.1, &pname).await;
                }
                continue;
            }
            keep_policies.insert((key.0.clone(), pname));
            let api: Api<PropagationPolicy> = Api::namespaced(hub.clone(), &key.0);
            if let Err(err) = apply::ensure(&api, &policy, actual.map(|a| a.as_ref())).await {
                tracing::warn!(namespace = %key.0, service = %key.1, error = %err, "cannot write the backend's PropagationPolicy; retrying");
                failed.insert(key.clone());
            }
        }
        told.retain(|k| {
            p.iter().any(|x| {
                (x.namespace().unwrap_or_default(), x.name_any()) == *k && !ours(x.as_ref())
            })
        });
        let made_exports: Vec<Arc<ServiceExport>> =
            e.iter().filter(|x| ours(x.as_ref())).cloned().collect();
        let made_policies: Vec<Arc<PropagationPolicy>> =
            p.iter().filter(|x| ours(x.as_ref())).cloned().collect();
        let h = hub.clone();
        for (key, err) in apply::remove_all_but(
            |ns| Api::<ServiceExport>::namespaced(h.clone(), ns),
            &made_exports,
            &keep_exports,
            |o| Some(crate::watch::key(o)),
        )
        .await
        {
            tracing::warn!(namespace = %key.0, name = %key.1, error = %err, "cannot delete a ServiceExport no MCI needs; retrying");
            failed.insert(key);
        }
        for (key, err) in apply::remove_all_but(
            |ns| Api::<PropagationPolicy>::namespaced(h.clone(), ns),
            &made_policies,
            &keep_policies,
            |o| Some(crate::watch::key(o)),
        )
        .await
        {
            tracing::warn!(namespace = %key.0, name = %key.1, error = %err, "cannot delete a PropagationPolicy no MCI needs; retrying");
            failed.insert(key);
        }
        dirty = match wake.after_round(&dirty, &failed, &stop).await {
            Some(d) => d,
            None => return,
        };
    }
}

/// A Warning Event on each MCI naming Service `svc`: the policy of its export is
/// someone else's.
async fn tell_foreign_policy(
    recorder: &Notes,
    mcis: &[Arc<MultiClusterIngress>],
    ns: &str,
    svc: &str,
    policy: &str,
) {
    let ev = Event {
        type_: EventType::Warning,
        reason: "BackendNotExported".into(),
        note: Some(format!(
            "--export-mci-backends: PropagationPolicy {ns}/{policy} exists and is not Causeway's (no label {LABEL}=true), so the ServiceExport of backend Service {svc} is not placed by Causeway; rename that policy, or place the export with it"
        )),
        action: "Export".into(),
        secondary: None,
    };
    for mci in mcis {
        if mci.namespace().as_deref() == Some(ns)
            && super::backend_services(mci).iter().any(|s| s == svc)
            && let Err(e) = recorder.publish(&ev, &mci.object_ref(&())).await
        {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn mci(name: &str, class: &str, backends: &[&str], deleting: bool) -> Arc<MultiClusterIngress> {
        let paths: Vec<_> = backends
            .iter()
            .map(|b| json!({"path": format!("/{b}"), "pathType": "Prefix", "backend": {"service": {"name": b, "port": {"number": 80}}}}))
            .collect();
        let mut meta = json!({"name": name, "namespace": "demo"});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            meta["finalizers"] = json!(["x"]);
        }
        obj(
            json!({"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterIngress",
            "metadata": meta, "spec": {"ingressClassName": class, "rules": [{"http": {"paths": paths}}]}}),
        )
    }

    fn service(name: &str) -> Arc<Service> {
        obj(json!({"metadata": {"name": name, "namespace": "demo", "uid": format!("uid-{name}")}}))
    }

    fn binding(name: &str, clusters: &[&str], required_by: &[&str]) -> Arc<ResourceBinding> {
        let c: Vec<_> = clusters.iter().map(|c| json!({"name": c})).collect();
        let r: Vec<_> = required_by.iter().map(|c| json!({"name": c})).collect();
        obj(
            json!({"apiVersion": "causeway.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": binding_name("Service", name), "namespace": "demo"},
            "spec": {"resource": {"apiVersion": "v1", "kind": "Service", "namespace": "demo", "name": name},
                     "clusters": c,
                     "requiredBy": if r.is_empty() { json!([]) } else { json!([{"namespace": "demo", "name": "app-deployment", "clusters": r}]) }}}),
        )
    }

    fn export(name: &str, made_here: bool) -> Arc<ServiceExport> {
        let labels = if made_here {
            json!({LABEL: "true"})
        } else {
            json!({})
        };
        obj(
            json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": "demo", "labels": labels}}),
        )
    }

    /// A backend Service's name may be 63 long: the policy made for it still is a valid
    /// policy the admission webhook takes (its name at most 63, a label value), one per
    /// Service.
    #[test]
    fn the_policy_of_a_long_backend_name_is_admitted() {
        let long = "s".repeat(63);
        let other = format!("{}t", "s".repeat(62));
        let want = |name: &str| Want {
            namespace: "demo".into(),
            name: name.into(),
            uid: "uid-x".into(),
            clusters: vec!["east".into()],
        };
        let policy = policy_for(&want(&long)).unwrap();
        let name = policy.metadata.name.clone().unwrap();
        assert!(
            name.len() <= 63 && name.starts_with(POLICY_PREFIX),
            "{name}"
        );
        assert_ne!(name, policy_name(&other));
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "namespace": "demo",
                "kind": {"group": "causeway.io", "version": "v1alpha1", "kind": "PropagationPolicy"},
                "object": serde_json::to_value(&policy).unwrap()}});
        let answer = crate::webhook::policies::review_response(&review);
        assert_eq!(answer["response"]["allowed"], true, "{answer}");
    }

    #[test]
    fn which_backends_are_exported_and_where() {
        let classes: Vec<IngressClass> = vec![
            serde_json::from_value(json!({"metadata": {"name": "causeway"}, "spec": {"controller": causeway_crds::well_known::INGRESS_CONTROLLER}})).unwrap(),
            serde_json::from_value(json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}})).unwrap(),
        ];
        let mcis = vec![
            mci("shop", "causeway", &["web", "api", "gone", "own"], false),
            mci("other", "nginx", &["theirs"], false),
            mci("leaving", "causeway", &["old"], true),
        ];
        let services: Vec<_> = ["web", "api", "own", "theirs", "old", "unused"]
            .into_iter()
            .map(service)
            .collect();
        let bindings = vec![
            binding("web", &["east", "west"], &[]),
            binding("api", &["east"], &["north", "east"]),
        ];
        let exports = vec![export("own", false), export("web", true)];
        let want = desired(&World {
            mcis: &mcis,
            classes: &classes,
            services: &services,
            bindings: &bindings,
            exports: &exports,
        });
        let got: Vec<(&str, Vec<&str>)> = want
            .values()
            .map(|w| {
                (
                    w.name.as_str(),
                    w.clusters.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        // api: its binding's clusters and those it is required in; web: already ours;
        // not: a missing Service (gone), the user's own export (own), another class's
        // MCI (theirs), a deleted MCI (old), a Service no MCI names (unused)
        assert_eq!(
            got,
            vec![
                ("api", vec!["east", "north"]),
                ("web", vec!["east", "west"])
            ]
        );
        let web = &want[&("demo".to_string(), "web".to_string())];
        assert_eq!(web.uid, "uid-web");
        let policy = policy_for(web).unwrap();
        assert_eq!(
            policy.metadata.name.as_deref(),
            Some("propagate-service-web")
        );
        let e = export_for(web);
        let owner = &e.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Service", "uid-web")
        );
        assert!(ours(&e) && ours(&policy));
        // a Service scheduled nowhere yet: its export, but no policy
        let unscheduled = Want {
            clusters: vec![],
            ..web.clone()
        };
        assert!(policy_for(&unscheduled).is_none());
    }
}
