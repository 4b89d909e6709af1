//! Installing CRDs into a cluster (`causeway crds install`, causeway-local, tests):
//! what to do with each CRD already there is decided by
//! [`causeway_crds::crdgen::install::plan`] (never downgrade, keep another installer's
//! superset); then server-side apply of each one to write, then wait until each is
//! `Established`. The CRDs themselves come from the caller (Causeway's from
//! `causeway_crds::crdgen::all_crds`).

use std::time::Duration;

use causeway_crds::crdgen::install::{Action, plan};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use thiserror::Error;

/// Why the CRDs could not be installed.
#[derive(Debug, Error)]
pub enum InstallError {
    /// Some CRDs may not be installed over what is there (nothing was written).
    #[error("nothing was installed:\n  {}", .reasons.join("\n  "))]
    Refused { reasons: Vec<String> },
    /// Reading the installed CRDs failed.
    #[error("reading the installed CRD {name}: {source}")]
    Read { name: String, source: kube::Error },
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

/// Installs `crds` as `manager` (see [`install_report`]), never over a newer or another
/// installer's CRD.
pub async fn install(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    manager: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    install_report(client, crds, manager, timeout, false)
        .await
        .map(drop)
}

/// Plans every CRD against what is installed (`force`: replace whatever is there); if
/// any is refused, writes nothing and says why for each. Otherwise server-side applies
/// those to create or update as `manager` and waits (up to `timeout` each) until every
/// one of `crds` is Established. Returns each CRD's name and what was done.
pub async fn install_report(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
    manager: &str,
    timeout: Duration,
    force: bool,
) -> Result<Vec<(String, Action)>, InstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut plans = Vec::with_capacity(crds.len());
    let mut reasons = Vec::new();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let installed = api
            .get_opt(&name)
            .await
            .map_err(|source| InstallError::Read {
                name: name.clone(),
                source,
            })?;
        match plan(installed.as_ref(), crd, force) {
            Ok(action) => plans.push((name, action)),
            Err(why) => reasons.push(why),
        }
    }
    if !reasons.is_empty() {
        return Err(InstallError::Refused { reasons });
    }
    for (crd, (name, action)) in crds.iter().zip(&plans) {
        if matches!(action, Action::Keep(_)) {
            continue;
        }
        api.patch(
            name,
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
    Ok(plans)
}
