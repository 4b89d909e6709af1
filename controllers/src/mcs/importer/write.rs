//! The importer's writes into a member: derived Services, ServiceImports and their
//! status, MCS EndpointSlices, and removal of what is no longer desired (the I/O half;
//! the decisions are in [`super::desired`]).

use super::*;

/// Memos of what the importer found already applied.
pub(super) struct Memos {
    services: apply::Memo<Service>,
    imports: apply::Memo<ServiceImport>,
    slices: apply::Memo<EndpointSlice>,
    status: apply::StatusMemo,
}

impl Default for Memos {
    /// What the importer alone sets, so that what it stops setting goes from the
    /// member: a ServiceImport's spec, a slice's endpoints and ports, and the derived
    /// Service's ports (an `appProtocol` the export dropped) and optional fields (the
    /// rest of its spec the API server defaults). The desired ports hold every field
    /// the API server defaults on a port ([`super::derived_ports`]), or this would
    /// apply them again every round.
    fn default() -> Self {
        Memos {
            services: apply::Memo::owning(&[
                "spec.ports",
                "spec.trafficDistribution",
                "spec.sessionAffinityConfig",
            ]),
            imports: apply::Memo::owning(&["spec"]),
            slices: apply::Memo::owning(&["endpoints", "ports"]),
            status: Default::default(),
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn write(
    memo: &mut Memos,
    cluster: &str,
    member: &kube::Client,
    want: &Desired,
    imports: &[Arc<ServiceImport>],
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    metrics: &Metrics,
    now: &Time,
) -> Failures {
    let slices_by_key = crate::watch::by_key(slices);
    let imports_by_key = crate::watch::by_key(imports);
    let services_by_key = crate::watch::by_key(services);
    let mut failures = Failures::new("importer", cluster);
    let key = |ns: Option<String>, n: String| (ns.unwrap_or_default(), n);
    // derived Services first: their IPs feed the ServiceImports
    let keep: BTreeSet<_> = want
        .services
        .iter()
        .map(|s| key(s.namespace(), s.name_any()))
        .collect();
    // derived Services the cluster refused (an IPv6-only import in an IPv4 cluster, a
    // ResourceQuota, an admission webhook, no cluster IP left), by service: said on the
    // member ServiceImport rather than waiting for cluster IPs that will not come
    let mut refused: std::collections::HashMap<(String, String), Refused> = Default::default();
    // derived Services whose write got no answer (a timeout, 429, a 5xx): only retried
    let mut unanswered: BTreeSet<(String, String)> = BTreeSet::new();
    let mut tell = |key: (String, String), e: &kube::Error| match refusal(e) {
        Some(why) => {
            refused.insert(key, why);
        }
        None => {
            unanswered.insert(key);
        }
    };
    for s in &want.services {
        let ns = s.namespace().unwrap_or_default();
        let mut actual = services_by_key
            .get(&(ns.clone(), s.name_any()))
            .map(|a| a.as_ref());
        let api = Api::<Service>::namespaced(member.clone(), &ns);
        // an import that changed type (or primary family): the old Service goes first
        // (that one exactly, by uid: a cache behind the last round's recreate must not
        // delete the new one)
        if let Some(old) = actual.filter(|a| needs_recreate(a, s)) {
            tracing::info!(cluster, namespace = %ns, service = %s.name_any(), "derived Service recreated: the import changed type or IP family");
            let dp = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: old.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&s.name_any(), &dp).await {
                Ok(_) => actual = None,
                // gone, or already another one: the next round sees which
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => continue,
                Err(e) => {
                    let key = service_key(s).unwrap_or_default();
                    tell(key.clone(), &e);
                    failures.failed(key, &e);
                    continue;
                }
            }
        }
        let r = memo.services.ensure(&api, s, actual).await;
        if let Err(apply::ApplyError::Kube { source, .. }) = &r {
            tell(service_key(s).unwrap_or_default(), source);
        }
        failures.check(service_key(s).unwrap_or_default(), r);
    }
    for (si, st) in &want.imports {
        let ns = si.namespace().unwrap_or_default();
        let api: Api<ServiceImport> = Api::namespaced(member.clone(), &ns);
        let actual = imports_by_key.get(&(ns.clone(), si.name_any())).copied();
        failures.check(
            (ns.clone(), si.name_any()),
            memo.imports
                .ensure(&api, si, actual.map(|a| a.as_ref()))
                .await,
        );
        failures.check(
            (ns.clone(), si.name_any()),
            memo.status
                .ensure(
                    &api,
                    &ns,
                    &si.name_any(),
                    "multicluster.x-k8s.io/v1beta1",
                    "ServiceImport",
                    &{
                        let previous = actual
                            .and_then(|a| a.status.as_ref())
                            .map(|s| s.conditions.as_slice())
                            .unwrap_or_default();
                        let key = (ns.clone(), si.name_any());
                        match refused.get(&key) {
                            Some(why) => json!(refused_status(st, why, previous, now)),
                            None if unanswered.contains(&key) => {
                                json!(unanswered_status(st, previous))
                            }
                            None => json!(st),
                        }
                    },
                    actual.and_then(|a| a.resource_version()),
                    || actual.and_then(|a| a.status.as_ref()).map(|s| json!(s)),
                )
                .await,
        );
    }
    for s in &want.slices {
        let ns = s.namespace().unwrap_or_default();
        let actual = slices_by_key.get(&(ns.clone(), s.name_any())).copied();
        let written = failures.check(
            service_key(s).unwrap_or_default(),
            memo.slices
                .ensure(
                    &Api::<EndpointSlice>::namespaced(member.clone(), &ns),
                    s,
                    actual.map(|a| a.as_ref()),
                )
                .await,
        ) == Outcome::Written;
        let exported_at = s
            .annotations()
            .get(annotations::EXPORTED_AT)
            .and_then(|v| v.parse::<i64>().ok());
        // the annotation comes from a member: a time that makes no latency is skipped
        let latency_ms = exported_at
            .and_then(|at| jiff::Timestamp::now().as_millisecond().checked_sub(at))
            .filter(|ms| *ms >= 0);
        if let (true, Some(ms)) = (written, latency_ms) {
            metrics.observe_propagation(cluster, ms as f64 / 1000.0);
        }
    }
    // remove what is no longer desired
    let keep_imports: BTreeSet<_> = want
        .imports
        .iter()
        .map(|(i, _)| key(i.namespace(), i.name_any()))
        .collect();
    for (k, e) in apply::remove_all_but(
        |ns| Api::<ServiceImport>::namespaced(member.clone(), ns),
        imports,
        &keep_imports,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    for (k, e) in apply::remove_all_but(
        |ns| Api::<Service>::namespaced(member.clone(), ns),
        services,
        &keep,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    let keep_slices: BTreeSet<_> = want
        .slices
        .iter()
        .map(|s| key(s.namespace(), s.name_any()))
        .collect();
    for (k, e) in apply::remove_all_but(
        |ns| Api::<EndpointSlice>::namespaced(member.clone(), ns),
        slices,
        &keep_slices,
        service_key,
    )
    .await
    {
        failures.failed(k, &e);
    }
    failures
}
