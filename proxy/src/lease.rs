//! Publishing: a `coordination.k8s.io/v1` Lease `causeway-proxy-<name>` in the hub
//! namespace `causeway-system`, carrying the addresses and ports this proxy serves
//! (read by the MCI controller for `status.loadBalancer`), where it serves mesh traffic
//! (read by the Gateway API controller, GW-4), and the MCI TLS Secrets it
//! cannot serve, from the first route table on, renewed every 5 s and at once when those
//! change, deleted on graceful shutdown. The annotations' formats are `causeway_crds::mci::lease`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use causeway_crds::mci::lease::{TlsProblems, tls_problems_text};
use causeway_crds::well_known::SYSTEM_NAMESPACE;
use causeway_crds::well_known::annotations::{PROXY_ADDRESSES, PROXY_PORTS, PROXY_TLS_PROBLEMS};
use causeway_crds::well_known::labels::{COMPONENT, PROXY_COMPONENT};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;

/// Lease duration.
pub const DURATION_SECONDS: i32 = 15;
/// Renewal period.
pub const RENEW: Duration = Duration::from_secs(5);

/// The Lease name for a proxy name.
pub fn lease_name(name: &str) -> String {
    format!("causeway-proxy-{name}")
}

/// The Lease object (applied: an annotation left out is removed). `mesh`: where the
/// proxy serves mesh traffic (`<ip>:<first>-<last>`, GW-4), if it does.
pub fn lease(
    name: &str,
    addresses: &str,
    ports: &str,
    mesh: Option<&str>,
    tls: &TlsProblems,
) -> Lease {
    let mut annotations = BTreeMap::from([
        (PROXY_ADDRESSES.into(), addresses.into()),
        (PROXY_PORTS.into(), ports.into()),
    ]);
    if let Some(m) = mesh {
        annotations.insert(causeway_crds::gateway::mesh::PROXY_MESH.into(), m.into());
    }
    if let Some(t) = tls_problems_text(tls) {
        annotations.insert(PROXY_TLS_PROBLEMS.into(), t);
    }
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(name)),
            namespace: Some(SYSTEM_NAMESPACE.into()),
            labels: Some(BTreeMap::from([(COMPONENT.into(), PROXY_COMPONENT.into())])),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(lease_name(name)),
            lease_duration_seconds: Some(DURATION_SECONDS),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

async fn ensure_namespace(client: &Client) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(SYSTEM_NAMESPACE).await?.is_some() {
        return Ok(());
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(SYSTEM_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Keeps the Lease until `stop`, then deletes it.
pub async fn run(
    client: Client,
    name: String,
    addresses: String,
    ports: String,
    mesh: Option<String>,
    mut tls: tokio::sync::watch::Receiver<Option<TlsProblems>>,
    stop: CancellationToken,
) {
    // published once the first route table is built: a proxy that serves nothing yet is
    // no entry point, and its TLS problems are known only then (a Lease without them
    // would clear the MCIs' port errors for a moment at every restart)
    tokio::select! {
        built = tls.wait_for(Option::is_some) => if built.is_err() {
            // the rebuild loop ended before a first table: nothing to publish
            return;
        },
        _ = stop.cancelled() => return,
    }
    let api: Api<Lease> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let lname = lease_name(&name);
    let pp = PatchParams::apply("causeway-proxy").force();
    let mut ns_ok = false;
    loop {
        if !ns_ok {
            match ensure_namespace(&client).await {
                Ok(()) => ns_ok = true,
                Err(e) => {
                    tracing::warn!(error = %e, "creating hub namespace {SYSTEM_NAMESPACE} failed; retrying")
                }
            }
        }
        if ns_ok {
            let problems = tls.borrow_and_update().clone().unwrap_or_default();
            let l = lease(&name, &addresses, &ports, mesh.as_deref(), &problems);
            if let Err(e) = api.patch(&lname, &pp, &Patch::Apply(&l)).await {
                tracing::warn!(lease = %lname, error = %e, "renewing the proxy Lease failed; retrying");
                ns_ok = false;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RENEW) => {}
            // the rebuild loop stopped (it holds the sender): renewals go on
            changed = tls.changed() => if changed.is_err() {
                tokio::select! {
                    _ = tokio::time::sleep(RENEW) => {}
                    _ = stop.cancelled() => break,
                }
            },
            _ = stop.cancelled() => break,
        }
    }
    match api.delete(&lname, &DeleteParams::default()).await {
        Ok(_) => tracing::info!(lease = %lname, "proxy Lease deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => tracing::warn!(lease = %lname, error = %e, "deleting the proxy Lease failed"),
    }
}
