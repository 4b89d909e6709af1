//! Installing CRDs into a cluster (tests, causeway-local): server-side apply of each,
//! then wait until each is `Established`. The CRDs themselves come from the caller
//! (Causeway's from `causeway_crds::crdgen::all_crds`), so the API crate stays pure.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use thiserror::Error;

/// Why the CRDs could not be installed.
#[derive(Debug, Error)]
pub enum InstallError {
    /// The API server refused a CRD.
    #[error("applying CRD {name}: {source}")]
    Apply { name: String, source: kube::Error },
    /// A CRD did not become Established in time.
    #[error("CRD {name} was not Established within {} s; is the API server serving apiextensions.k8s.io?", .timeout.as_secs())]
    NotEstablished { name: String, timeout: Duration },
    /// Watching a CRD failed.
    #[error("waiting for CRD {name}: {source}")]
    Wait {
        name: String,
        source: kube::runtime::wait::Error,
    },
}

/// Server-side applies `crds` as `manager` and waits (up to `timeout` each) until each
/// is Established.
pub async fn install(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    manager: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(crd),
        )
        .await
        .map_err(|source| InstallError::Apply {
            name: name.clone(),
            source,
        })?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(timeout, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => return Err(InstallError::Wait { name, source }),
            Err(_) => return Err(InstallError::NotEstablished { name, timeout }),
        }
    }
    Ok(())
}
