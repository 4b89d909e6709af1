//! Which port of a hub ServiceImport a backend names (an MCI backend's `service.port`,
//! an HTTPRoute backendRef's `port`): the one lookup causeway-proxy (what to serve) and
//! the controllers (what to report) share, so a backend the status calls resolved is one
//! the proxy can serve, and the other way round; and what both say of a `resource`
//! backend ([`resource_unsupported`]).

use k8s_openapi::api::core::v1::TypedLocalObjectReference;
use k8s_openapi::api::networking::v1::ServiceBackendPort;

use crate::mcs::ServicePort;
use crate::mcs::v1beta1::ServiceImport;

/// Whether a port's protocol is TCP (unset is TCP).
pub fn is_tcp(protocol: Option<&str>) -> bool {
    protocol.is_none_or(|p| p.eq_ignore_ascii_case("TCP"))
}

/// Why a backend's port is not a port of its ServiceImport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortError {
    /// The ServiceImport has no TCP port of that name or number (as asked: `http`,
    /// `8080`).
    NotFound(String),
    /// No port was named and the ServiceImport has not exactly one TCP port to take.
    Unspecified {
        /// How many TCP ports it has.
        tcp_ports: usize,
    },
}

impl PortError {
    /// What is wrong, for people, about ServiceImport `ns/name`.
    pub fn message(&self, ns: &str, name: &str) -> String {
        match self {
            PortError::NotFound(want) => {
                format!("ServiceImport {ns}/{name} has no TCP port {want}")
            }
            PortError::Unspecified { tcp_ports: 0 } => {
                format!("ServiceImport {ns}/{name} has no TCP port")
            }
            PortError::Unspecified { tcp_ports } => format!(
                "no port given and ServiceImport {ns}/{name} has {tcp_ports} TCP ports: name one"
            ),
        }
    }
}

/// The TCP port of `si` that `want` names: by name when it has one (an empty name is
/// none), else by number; with neither, its only TCP port.
pub fn service_port<'a>(
    si: &'a ServiceImport,
    want: Option<&ServiceBackendPort>,
) -> Result<&'a ServicePort, PortError> {
    let by_name = want
        .and_then(|p| p.name.as_deref())
        .filter(|n| !n.is_empty());
    let by_number = want.and_then(|p| p.number);
    let mut tcp = si
        .spec
        .ports
        .iter()
        .filter(|p| is_tcp(p.protocol.as_deref()));
    match (by_name, by_number) {
        (Some(n), _) => tcp
            .find(|p| p.name.as_deref() == Some(n))
            .ok_or_else(|| PortError::NotFound(n.to_string())),
        (None, Some(num)) => tcp
            .find(|p| p.port == num)
            .ok_or_else(|| PortError::NotFound(num.to_string())),
        (None, None) => {
            let all: Vec<&ServicePort> = tcp.collect();
            match all.as_slice() {
                [only] => Ok(only),
                _ => Err(PortError::Unspecified {
                    tcp_ports: all.len(),
                }),
            }
        }
    }
}

/// What is wrong with a `resource` backend (Karmada's validation accepts one): the
/// reason causeway-proxy answers 503 with, and the controller's `ResolvedRefs` says.
pub fn resource_unsupported(r: &TypedLocalObjectReference) -> String {
    let group = r
        .api_group
        .as_deref()
        .filter(|g| !g.is_empty())
        .map(|g| format!(".{g}"))
        .unwrap_or_default();
    format!(
        "resource backend {}{group}/{}: resource backends are not supported (causeway-proxy serves Service backends only): use a service backend",
        r.kind, r.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(ports: serde_json::Value) -> ServiceImport {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {"type": "ClusterSetIP", "ports": ports}}))
        .unwrap()
    }

    fn port(name: Option<&str>, number: Option<i32>) -> ServiceBackendPort {
        ServiceBackendPort {
            name: name.map(String::from),
            number,
        }
    }

    #[test]
    fn backend_ports_resolve_by_name_number_or_the_only_tcp_port() {
        let two = import(serde_json::json!([
            {"name": "metrics", "port": 9090, "protocol": "TCP"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "http", "port": 80},
        ]));
        let found =
            |want: Option<ServiceBackendPort>| service_port(&two, want.as_ref()).map(|p| p.port);
        assert_eq!(found(Some(port(Some("http"), None))), Ok(80));
        assert_eq!(found(Some(port(None, Some(9090)))), Ok(9090));
        // a name wins over a number; an empty name is none
        assert_eq!(found(Some(port(Some("http"), Some(9090)))), Ok(80));
        assert_eq!(found(Some(port(Some(""), Some(80)))), Ok(80));
        // not a TCP port, or not there
        assert_eq!(
            found(Some(port(Some("dns"), None))),
            Err(PortError::NotFound("dns".into()))
        );
        assert_eq!(
            found(Some(port(None, Some(8080)))),
            Err(PortError::NotFound("8080".into()))
        );
        assert_eq!(
            found(Some(port(Some("htp"), None))),
            Err(PortError::NotFound("htp".into()))
        );
        // none given: never the first of several
        assert_eq!(found(None), Err(PortError::Unspecified { tcp_ports: 2 }));
        assert_eq!(
            found(Some(port(None, None))),
            Err(PortError::Unspecified { tcp_ports: 2 })
        );
        let one = import(serde_json::json!([{"port": 80}, {"port": 53, "protocol": "UDP"}]));
        assert_eq!(service_port(&one, None).map(|p| p.port), Ok(80));
        let none = import(serde_json::json!([]));
        assert_eq!(
            service_port(&none, None),
            Err(PortError::Unspecified { tcp_ports: 0 })
        );
        assert_eq!(
            PortError::NotFound("8080".into()).message("demo", "web"),
            "ServiceImport demo/web has no TCP port 8080"
        );
        assert_eq!(
            PortError::Unspecified { tcp_ports: 2 }.message("demo", "web"),
            "no port given and ServiceImport demo/web has 2 TCP ports: name one"
        );
    }
}
