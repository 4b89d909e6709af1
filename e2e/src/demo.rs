//! causeway-local's MultiClusterIngress demo: two demo HTTP backends ("pods") per member
//! behind a `web` Service in namespace `demo`, exported from every member
//! (`examples/mci-demo/member.yaml`), and the hub's IngressClass plus a
//! MultiClusterIngress that sends every request to it (`examples/mci-demo/hub.yaml`).

use anyhow::Context;
use causeway_crds::mci::MultiClusterIngress;
use causeway_crds::mcs::v1beta1::ServiceExport;
use k8s_openapi::api::networking::v1::IngressClass;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::backends::{Backend, publish, start_pods};
use crate::{Clusterset, MANAGER, client};

/// The hub side of the demo.
pub const HUB_YAML: &str = include_str!("../../examples/mci-demo/hub.yaml");
/// What every member applies.
pub const MEMBER_YAML: &str = include_str!("../../examples/mci-demo/member.yaml");
/// Namespace of the demo.
pub const NAMESPACE: &str = "demo";
/// Name of the demo Service, ServiceExport and MultiClusterIngress.
pub const SERVICE: &str = "web";

/// Starts `pods` backends per member, publishes them as the member's `web` Service and
/// exports it, and applies the hub's IngressClass and MultiClusterIngress. The backends
/// stop when the returned values are dropped.
pub async fn web(cs: &Clusterset, pods: usize) -> anyhow::Result<Vec<Backend>> {
    let mut all = Vec::new();
    for (i, m) in cs.members.iter().enumerate() {
        let c = client(m).await?;
        let backends = start_pods(i + 1, m.name(), SERVICE, pods).await?;
        publish(&c, NAMESPACE, SERVICE, &backends).await?;
        apply_all(&c, MEMBER_YAML).await?;
        all.extend(backends);
    }
    apply_all(&client(&cs.hub).await?, HUB_YAML).await?;
    Ok(all)
}

/// Server-side applies every document of `yaml` (IngressClass, MultiClusterIngress or
/// ServiceExport).
pub async fn apply_all(c: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).context("parsing demo YAML")?;
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        match doc["kind"].as_str().unwrap_or_default() {
            "IngressClass" => apply::<IngressClass>(c, doc).await?,
            "MultiClusterIngress" => apply::<MultiClusterIngress>(c, doc).await?,
            "ServiceExport" => apply::<ServiceExport>(c, doc).await?,
            other => anyhow::bail!("the demo has no {other:?} documents"),
        }
    }
    Ok(())
}

async fn apply<K>(c: &kube::Client, doc: serde_json::Value) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    // Typed first, so a demo file that does not match the API fails with a clear error.
    let obj: K = serde_json::from_value(doc).context("demo object")?;
    let ar = ApiResource::erase::<K>(&());
    let name = obj.name_any();
    let api: Api<DynamicObject> = match obj.namespace() {
        Some(ns) => Api::namespaced_with(c.clone(), &ns, &ar),
        None => Api::all_with(c.clone(), &ar),
    };
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {name}", ar.kind))?;
    Ok(())
}
