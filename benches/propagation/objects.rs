//! The hub objects the bench writes: labelled Deployment and ConfigMap templates in
//! namespace [`NS`], and the PropagationPolicy that selects both kinds by that label
//! for every member.

use causeway_crds::federation::propagation::PropagationPolicy;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

/// The namespace of every template (on the hub) and copy (in the members).
pub const NS: &str = "bench";
/// The label (key and value) the templates carry and the policy selects.
pub const LABEL: (&str, &str) = ("bench", "propagation");
/// The policy's name.
pub const POLICY: &str = "bench";
/// The container of every Deployment.
pub const CONTAINER: &str = "app";

/// The name of Deployment `i` (and of ConfigMap `i`).
pub fn name(i: usize) -> String {
    format!("app-{i:05}")
}

/// The image of a Deployment template at `version` (0 when created, k after change k).
pub fn image(version: usize) -> String {
    format!("registry.example/bench/app:v{version}")
}

/// Deployment template `i`: one replica of [`image`]`(0)`.
pub fn deployment(i: usize) -> Deployment {
    let name = name(i);
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {LABEL.0: LABEL.1, "app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": CONTAINER, "image": image(0)}]}
            }
        }
    }))
    .expect("a valid Deployment")
}

/// ConfigMap template `i`, with a few hundred bytes of data.
pub fn config_map(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name(i), "namespace": NS, "labels": {LABEL.0: LABEL.1}},
        "data": {
            "settings.yaml": format!("index: {i}\nlog: info\nfeatures: [a, b, c]\n{}", "# padding\n".repeat(20)),
        }
    }))
    .expect("a valid ConfigMap")
}

/// The merge patch that sets Deployment template `i`'s image to [`image`]`(version)`
/// (a merge patch replaces the containers list whole, so it names the container).
pub fn image_patch(version: usize) -> serde_json::Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": CONTAINER, "image": image(version)}]}}}})
}

/// The PropagationPolicy selecting every template labelled [`LABEL`] of both kinds,
/// for every member cluster (no affinity), replicas duplicated.
pub fn policy() -> PropagationPolicy {
    let selector = json!({"matchLabels": {LABEL.0: LABEL.1}});
    serde_json::from_value(json!({
        "apiVersion": "causeway.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": POLICY, "namespace": NS},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": selector},
                {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": selector},
            ],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Duplicated"}}
        }
    }))
    .expect("a valid PropagationPolicy")
}

/// The image of `d`'s container [`CONTAINER`].
pub fn image_of(d: &Deployment) -> Option<&str> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .as_deref()
}

/// A kubesim server with namespace [`NS`], and an admin client (for tests).
#[cfg(test)]
pub async fn test_cluster(name: &str) -> (kubesim::Server, kube::Client) {
    use kube::api::{Api, PostParams};
    let s = kubesim::Server::start(kubesim::Config::new(name))
        .await
        .unwrap();
    let c = causeway_e2e::client(&s).await.unwrap();
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    (s, c)
}

#[cfg(test)]
mod tests {
    use causeway_crds::federation::selection::labels::matches;
    use kube::ResourceExt;

    use super::*;

    #[test]
    fn the_policy_selects_every_template_and_nothing_unlabelled() {
        let p = policy();
        let selectors = &p.spec.0.resource_selectors;
        assert_eq!(
            selectors
                .iter()
                .map(|s| (s.api_version.as_str(), s.kind.as_str()))
                .collect::<Vec<_>>(),
            [("apps/v1", "Deployment"), ("v1", "ConfigMap")]
        );
        let d = deployment(7);
        let c = config_map(7);
        for s in selectors {
            let sel = s.label_selector.as_ref().unwrap();
            assert!(matches(sel, d.labels()), "{sel:?} vs {:?}", d.labels());
            assert!(matches(sel, c.labels()), "{sel:?} vs {:?}", c.labels());
            assert!(!matches(sel, &Default::default()));
        }
    }

    #[test]
    fn templates_are_named_by_index() {
        for (i, want) in [(0, "app-00000"), (42, "app-00042"), (99_999, "app-99999")] {
            assert_eq!(deployment(i).name_any(), want);
            assert_eq!(config_map(i).name_any(), want);
            assert_eq!(deployment(i).namespace().as_deref(), Some(NS));
        }
    }

    /// The patch as an API server applies it: only the image changes.
    #[tokio::test]
    async fn the_image_patch_changes_only_the_image() {
        use kube::api::{Api, Patch, PatchParams, PostParams};
        let (server, client) = test_cluster("objects").await;
        let api: Api<Deployment> = Api::namespaced(client, NS);
        let created = api
            .create(&PostParams::default(), &deployment(3))
            .await
            .unwrap();
        assert_eq!(image_of(&created), Some(image(0).as_str()));
        let patched = api
            .patch(
                &name(3),
                &PatchParams::default(),
                &Patch::Merge(image_patch(5)),
            )
            .await
            .unwrap();
        assert_eq!(image_of(&patched), Some(image(5).as_str()));
        let mut want = created.spec.clone().unwrap();
        want.template.spec.as_mut().unwrap().containers[0].image = Some(image(5));
        assert_eq!(patched.spec.unwrap(), want);
        server.shutdown();
    }
}
