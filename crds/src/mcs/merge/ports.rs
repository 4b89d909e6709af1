//! The port union (CR-4, CR-5) and the per-port serving clusters (CR-6, DP-4).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{Export, PortCluster, PortClusters};
use crate::exported_service::ExportedServicePort;
use crate::mcs::{ServicePort, values};

/// The external properties of a port that must match across exports:
/// (name, protocol, port, appProtocol), normalised.
pub(super) type PortKey = (Option<String>, String, i32, Option<String>);

/// The port as it appears in the ServiceImport, normalised: an empty name or
/// appProtocol is unset, an unset protocol is `TCP`.
pub(super) fn normalize(port: &ExportedServicePort) -> ServicePort {
    let non_empty = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    ServicePort {
        name: non_empty(&port.name),
        protocol: Some(
            non_empty(&port.protocol).unwrap_or_else(|| values::PROTOCOL_TCP.to_owned()),
        ),
        app_protocol: non_empty(&port.app_protocol),
        port: port.port,
    }
}

/// The comparison key of an exported port.
pub(super) fn key(port: &ExportedServicePort) -> PortKey {
    key_of(&normalize(port))
}

/// Whether `spec` has exactly `port` of a ServiceImport (both normalised), the rule
/// that puts a cluster in the port's [`PortClusters`].
pub(super) fn has(spec: &crate::exported_service::ExportedServiceSpec, port: &ServicePort) -> bool {
    let non_empty = |s: &Option<String>| s.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
    let want = key_of(&ServicePort {
        name: non_empty(&port.name),
        protocol: Some(
            non_empty(&port.protocol).unwrap_or_else(|| values::PROTOCOL_TCP.to_owned()),
        ),
        app_protocol: non_empty(&port.app_protocol),
        port: port.port,
    });
    spec.ports.iter().any(|p| key(p) == want)
}

fn key_of(port: &ServicePort) -> PortKey {
    (
        port.name.clone(),
        port.protocol_or_default().to_owned(),
        port.port,
        port.app_protocol.clone(),
    )
}

/// The targetPort a cluster serves `port` on: unset, 0 and "" mean the port itself.
fn target_port(port: &ExportedServicePort) -> IntOrString {
    match &port.target_port {
        Some(IntOrString::Int(n)) if *n != 0 => IntOrString::Int(*n),
        Some(IntOrString::String(s)) if !s.is_empty() => IntOrString::String(s.clone()),
        _ => IntOrString::Int(port.port),
    }
}

/// The result of [`union`].
pub(super) struct PortUnion {
    /// Sorted by [`PortKey`].
    pub(super) ports: Vec<ServicePort>,
    /// Parallel to `ports`.
    pub(super) port_clusters: Vec<PortClusters>,
    /// Per cluster: its ports that clash with a higher-precedence port.
    pub(super) excluded: BTreeMap<String, Vec<ServicePort>>,
}

/// A port of the union being built, with the clusters serving it.
struct Slot {
    port: ServicePort,
    clusters: BTreeMap<String, IntOrString>,
}

/// Merges the ports of `order` (exports in precedence order): by name first,
/// then by (protocol, port); the first definition wins, and a cluster serves
/// only the ports it defines identically. An unnamed port stays alone (the derived
/// Service, like any, names every port once it has several): one beside other ports
/// clashes as a port of the same number does.
pub(super) fn union(order: &[Export<'_>]) -> PortUnion {
    let mut slots: Vec<Slot> = Vec::new();
    let mut by_name: BTreeMap<Option<String>, usize> = BTreeMap::new();
    let mut by_number: BTreeMap<(String, i32), usize> = BTreeMap::new();
    let mut excluded: BTreeMap<String, Vec<ServicePort>> = BTreeMap::new();

    for (nth, export) in order.iter().enumerate() {
        for exported in &export.spec.ports {
            let port = normalize(exported);
            let number = (port.protocol_or_default().to_owned(), port.port);
            // a Service of several ports names every one: an unnamed port cannot join
            // a union that has others, nor another port one that has an unnamed one
            // (the oldest export's own ports all stay: they are its Service's)
            let unnamed =
                nth > 0 && (port.name.is_none() || slots.iter().any(|s| s.port.name.is_none()));
            let slot = match by_name.get(&port.name) {
                Some(&i) => (slots[i].port == port).then_some(i),
                None if by_number.contains_key(&number) || unnamed => None,
                None => {
                    let i = slots.len();
                    by_name.insert(port.name.clone(), i);
                    by_number.insert(number, i);
                    slots.push(Slot {
                        port: port.clone(),
                        clusters: BTreeMap::new(),
                    });
                    Some(i)
                }
            };
            match slot {
                Some(i) => {
                    slots[i]
                        .clusters
                        .entry(export.cluster.to_owned())
                        .or_insert_with(|| target_port(exported));
                }
                None => excluded
                    .entry(export.cluster.to_owned())
                    .or_default()
                    .push(port),
            }
        }
    }

    slots.sort_by_cached_key(|slot| key_of(&slot.port));
    let ports = slots.iter().map(|slot| slot.port.clone()).collect();
    let port_clusters = slots
        .into_iter()
        .map(|slot| PortClusters {
            port: slot.port,
            clusters: slot
                .clusters
                .into_iter()
                .map(|(cluster, target_port)| PortCluster {
                    cluster,
                    target_port,
                })
                .collect(),
        })
        .collect();
    PortUnion {
        ports,
        port_clusters,
        excluded,
    }
}
