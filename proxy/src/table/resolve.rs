//! MCI-4 backend resolution: a backend's Service, through the hub ServiceImport and
//! the exporting clusters' EndpointSlices, to the ready endpoints of each cluster.

use super::*;
use causeway_crds::mci::backend::{is_tcp, service_port};

/// Ready endpoints by cluster, and how many endpoints are unready.
pub(super) type ByCluster = BTreeMap<String, (BTreeSet<SocketAddr>, usize)>;

/// MCI-4: the ready endpoints of `svc` by cluster and the port's `appProtocol`, or why
/// there are none; with `only`, only that cluster's (cluster-local backends). MCI-7:
/// terminating endpoints get no new requests, unless no endpoint of the backend is
/// ready and some are still serving: then those take the traffic until they are gone
/// (as kube-proxy does, KEP-1669), rather than every request getting a 503.
pub(super) fn resolve(
    idx: &Index<'_>,
    ns: &str,
    svc: &IngressServiceBackend,
    blocked: &[String],
    only: Option<&str>,
) -> Result<(ByCluster, Option<String>), String> {
    let name = svc.name.as_str();
    let si = idx
        .imports
        .get(&(ns, name))
        .ok_or_else(|| format!("no ServiceImport {ns}/{name} (is the Service exported?)"))?;
    // the port lookup the controllers report with (MCI and HTTPRoute status)
    let port = service_port(si, svc.port.as_ref()).map_err(|e| e.message(ns, name))?;
    let by_name = svc
        .port
        .as_ref()
        .and_then(|p| p.name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let port_name = port.name.as_deref().unwrap_or("");
    let serving: BTreeSet<&str> = idx
        .exports
        .get(&(ns, name))
        .into_iter()
        .flatten()
        .filter(|es| !blocked.contains(&es.spec.cluster))
        .filter(|es| only.is_none_or(|c| es.spec.cluster == c))
        .filter(|es| {
            es.spec.ports.iter().any(|p| {
                is_tcp(p.protocol.as_deref())
                    && p.name.as_deref().unwrap_or("") == port_name
                    && (by_name || p.port == port.port)
            })
        })
        .map(|es| es.spec.cluster.as_str())
        .collect();
    let mut out: BTreeMap<String, (BTreeSet<SocketAddr>, usize)> = BTreeMap::new();
    let mut draining: BTreeMap<String, BTreeSet<SocketAddr>> = BTreeMap::new();
    for sl in idx.slices.get(&(ns, name)).into_iter().flatten() {
        let Some(cluster) = sl
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SOURCE_CLUSTER))
        else {
            continue;
        };
        if !serving.contains(cluster.as_str()) {
            continue;
        }
        let Some(target) = sl.ports.iter().flatten().find_map(|p| {
            (p.name.as_deref().unwrap_or("") == port_name && is_tcp(p.protocol.as_deref()))
                .then_some(p.port)
                .flatten()
        }) else {
            continue;
        };
        let Ok(target) = u16::try_from(target) else {
            continue;
        };
        let (eps, unready) = out.entry(cluster.clone()).or_default();
        for ep in &sl.endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready) != Some(false);
            let terminating = c.and_then(|c| c.terminating) == Some(true);
            if terminating {
                if c.and_then(|c| c.serving) == Some(true) {
                    let d = draining.entry(cluster.clone()).or_default();
                    d.extend(
                        ep.addresses
                            .iter()
                            .filter_map(|a| a.parse::<IpAddr>().ok())
                            .map(|ip| SocketAddr::new(ip, target)),
                    );
                }
                continue;
            }
            if !ready {
                *unready += ep.addresses.len().min(1);
                continue;
            }
            for a in &ep.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    eps.insert(SocketAddr::new(ip, target));
                }
            }
        }
    }
    out.retain(|_, (v, _)| !v.is_empty());
    if out.is_empty() {
        out = draining
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(c, v)| (c, (v, 0)))
            .collect();
    }
    Ok((out, port.app_protocol.clone()))
}

pub(super) fn backend_key(svc: &IngressServiceBackend) -> String {
    let port = svc.port.as_ref();
    match (
        port.and_then(|p| p.name.clone()).filter(|n| !n.is_empty()),
        port.and_then(|p| p.number),
    ) {
        (Some(n), _) => format!("{}:{n}", svc.name),
        (None, Some(n)) => format!("{}:{n}", svc.name),
        (None, None) => svc.name.clone(),
    }
}
