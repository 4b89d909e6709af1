//! Karmada's MultiClusterIngress validation (MCI-2): the rules of its webhook
//! (`validatingmci.go`, lifted from Kubernetes 1.27 Ingress validation with
//! `AllowInvalidSecretName=false` and `AllowInvalidWildcardHostRule=false`).
//!
//! Causeway runs no webhook, so the controller reports these errors as a condition and
//! an Event on the object, and causeway-proxy does not serve an invalid object.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{IngressBackend, IngressSpec};
use kube::ResourceExt;

use super::MultiClusterIngress;
use k8s_validation::{is_dns1123_label, is_dns1123_subdomain};

/// One validation failure: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.rules[0].host`.
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every validation error of `mci`; empty when it is valid.
pub fn validate(mci: &MultiClusterIngress) -> Vec<FieldError> {
    let mut errs = Errors::default();
    let name = mci.name_any();
    if !is_dns1123_subdomain(&name) {
        errs.push(
            "metadata.name",
            format!("{name:?} must be a DNS subdomain (lowercase alphanumerics, '-' and '.')"),
        );
    }
    validate_spec(&mci.spec, &mut errs);
    errs.0
}

/// Every validation error of an IngressSpec (field paths start at `spec`).
pub fn validate_spec(spec: &IngressSpec, errs: &mut Errors) {
    let rules = spec.rules.as_deref().unwrap_or_default();
    if rules.is_empty() && spec.default_backend.is_none() {
        errs.push(
            "spec",
            "either `defaultBackend` or `rules` must be specified",
        );
    }
    if let Some(b) = &spec.default_backend {
        backend(b, "spec.defaultBackend", errs);
    }
    if let Some(class) = &spec.ingress_class_name
        && !is_dns1123_subdomain(class)
    {
        errs.push(
            "spec.ingressClassName",
            format!("{class:?} must be a DNS subdomain"),
        );
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if let Some(host) = rule.host.as_deref().filter(|h| !h.is_empty()) {
            host_name(host, &format!("{at}.host"), errs);
        }
        let Some(http) = &rule.http else { continue };
        if http.paths.is_empty() {
            errs.push(format!("{at}.http.paths"), "at least one path is required");
        }
        for (j, p) in http.paths.iter().enumerate() {
            let at = format!("{at}.http.paths[{j}]");
            path(p.path.as_deref(), &p.path_type, &at, errs);
            backend(&p.backend, &format!("{at}.backend"), errs);
        }
    }
    for (i, tls) in spec.tls.as_deref().unwrap_or_default().iter().enumerate() {
        let at = format!("spec.tls[{i}]");
        // as Kubernetes' (and Karmada's) Ingress validation: a TLS host may be an IP
        // address (certificates name those too), and an empty secretName is no Secret
        for (j, host) in tls.hosts.as_deref().unwrap_or_default().iter().enumerate() {
            dns_name(host, &format!("{at}.hosts[{j}]"), errs);
        }
        if let Some(secret) = tls.secret_name.as_deref().filter(|s| !s.is_empty())
            && !is_dns1123_subdomain(secret)
        {
            errs.push(
                format!("{at}.secretName"),
                format!("{secret:?} must be a valid Secret name (a DNS subdomain)"),
            );
        }
    }
}

/// Accumulated field errors.
#[derive(Debug, Default)]
pub struct Errors(pub Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }
}

/// A rule's host: a DNS name (or a wildcard one), not an IP address.
fn host_name(host: &str, at: &str, errs: &mut Errors) {
    if host.parse::<IpAddr>().is_ok() {
        errs.push(
            at,
            format!("{host:?} must be a DNS name, not an IP address"),
        );
        return;
    }
    dns_name(host, at, errs);
}

/// A DNS subdomain, or a wildcard one (`*.` and a subdomain).
fn dns_name(host: &str, at: &str, errs: &mut Errors) {
    let ok = match host.strip_prefix("*.") {
        Some(rest) => is_dns1123_subdomain(rest),
        None => is_dns1123_subdomain(host),
    };
    if !ok {
        errs.push(
            at,
            format!(
                "{host:?} must be a DNS subdomain (e.g. foo.example.com) or a wildcard subdomain (e.g. *.example.com)"
            ),
        );
    }
}

fn path(path: Option<&str>, path_type: &str, at: &str, errs: &mut Errors) {
    let p = path.unwrap_or_default();
    match path_type {
        "Exact" | "Prefix" => {
            if !p.starts_with('/') {
                errs.push(
                    format!("{at}.path"),
                    format!("{p:?} must be an absolute path (start with '/')"),
                );
                return;
            }
            for bad in ["//", "/./", "/../", "%2f", "%2F"] {
                if p.contains(bad) {
                    errs.push(
                        format!("{at}.path"),
                        format!("{p:?} must not contain {bad:?}"),
                    );
                }
            }
            for bad in ["/..", "/."] {
                if p.ends_with(bad) {
                    errs.push(
                        format!("{at}.path"),
                        format!("{p:?} must not end with {bad:?}"),
                    );
                }
            }
        }
        "ImplementationSpecific" => {
            if !p.is_empty() && !p.starts_with('/') {
                errs.push(
                    format!("{at}.path"),
                    format!("{p:?} must be an absolute path (start with '/')"),
                );
            }
        }
        "" => errs.push(
            format!("{at}.pathType"),
            "pathType is required: one of Exact, Prefix, ImplementationSpecific",
        ),
        other => errs.push(
            format!("{at}.pathType"),
            format!("{other:?} is not supported: use Exact, Prefix or ImplementationSpecific"),
        ),
    }
}

fn backend(b: &IngressBackend, at: &str, errs: &mut Errors) {
    match (&b.service, &b.resource) {
        (Some(_), Some(_)) => {
            errs.push(at, "set exactly one of `service` and `resource`, not both")
        }
        (None, None) => errs.push(at, "set one of `service` or `resource`"),
        (None, Some(r)) => {
            if r.kind.is_empty() {
                errs.push(format!("{at}.resource.kind"), "kind is required");
            }
            if r.name.is_empty() {
                errs.push(format!("{at}.resource.name"), "name is required");
            }
        }
        (Some(svc), None) => {
            if svc.name.is_empty() {
                errs.push(format!("{at}.service.name"), "name is required");
            } else if !is_dns1035_label(&svc.name) {
                errs.push(
                    format!("{at}.service.name"),
                    format!(
                        "{:?} must be a DNS-1035 label (lowercase alphanumerics and '-', starting with a letter)",
                        svc.name
                    ),
                );
            }
            let port = svc.port.as_ref();
            let name = port
                .and_then(|p| p.name.as_deref())
                .filter(|n| !n.is_empty());
            let number = port.and_then(|p| p.number);
            match (name, number) {
                (Some(_), Some(_)) => errs.push(
                    format!("{at}.service.port"),
                    "set exactly one of `name` and `number`, not both",
                ),
                (None, None) => errs.push(
                    format!("{at}.service.port"),
                    "a port `name` or `number` is required",
                ),
                (None, Some(n)) if !(1..=65535).contains(&n) => errs.push(
                    format!("{at}.service.port.number"),
                    format!("{n} must be between 1 and 65535"),
                ),
                (Some(n), None) if !is_iana_svc_name(n) => errs.push(
                    format!("{at}.service.port.name"),
                    format!(
                        "{n:?} must be a port name: at most 15 lowercase alphanumerics or '-', with a letter, no leading, trailing or double '-'"
                    ),
                ),
                _ => {}
            }
        }
    }
}

/// RFC 1035 label: lowercase alphanumerics and '-', starting with a letter.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// IANA service name (a named port): 1–15 chars of `[a-z0-9-]`, at least one letter,
/// no leading, trailing or consecutive '-'.
pub fn is_iana_svc_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mci(yaml: &str) -> MultiClusterIngress {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn fields(yaml: &str) -> Vec<String> {
        validate(&mci(yaml)).into_iter().map(|e| e.field).collect()
    }

    const HEAD: &str = "apiVersion: networking.karmada.io/v1alpha1\nkind: MultiClusterIngress\nmetadata: {name: demo, namespace: default}\n";

    #[test]
    fn karmada_sample_is_valid() {
        let sample = include_str!("../../../examples/31-mci-karmada-sample.yaml");
        assert_eq!(validate(&mci(sample)), vec![]);
    }

    #[test]
    fn table() {
        let cases: &[(&str, &[&str])] = &[
            ("spec: {}", &["spec"]),
            (
                "spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}",
                &[],
            ),
            (
                "spec: {defaultBackend: {service: {name: web, port: {number: 80, name: http}}}}",
                &["spec.defaultBackend.service.port"],
            ),
            (
                "spec: {defaultBackend: {service: {name: web, port: {}}}}",
                &["spec.defaultBackend.service.port"],
            ),
            (
                "spec: {defaultBackend: {service: {name: 9web, port: {number: 0}}}}",
                &[
                    "spec.defaultBackend.service.name",
                    "spec.defaultBackend.service.port.number",
                ],
            ),
            (
                "spec: {defaultBackend: {service: {name: web, port: {name: Http}}}}",
                &["spec.defaultBackend.service.port.name"],
            ),
            (
                "spec: {defaultBackend: {resource: {kind: Bucket, name: b}, service: {name: web, port: {number: 1}}}}",
                &["spec.defaultBackend"],
            ),
            (
                "spec: {defaultBackend: {resource: {kind: Bucket, name: b}}}",
                &[],
            ),
            (
                "spec: {ingressClassName: Bad_Class, defaultBackend: {service: {name: web, port: {number: 80}}}}",
                &["spec.ingressClassName"],
            ),
            (
                "spec: {rules: [{host: 10.0.0.1, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].host"],
            ),
            (
                "spec: {rules: [{host: '*.example.com', http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &[],
            ),
            (
                "spec: {rules: [{host: 'a.*.example.com', http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].host"],
            ),
            (
                "spec: {rules: [{http: {paths: [{path: a, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].http.paths[0].path"],
            ),
            (
                "spec: {rules: [{http: {paths: [{path: /a//b, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].http.paths[0].path"],
            ),
            (
                "spec: {rules: [{http: {paths: [{path: /a/.., pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].http.paths[0].path"],
            ),
            (
                "spec: {rules: [{http: {paths: [{path: /a%2Fb, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].http.paths[0].path"],
            ),
            (
                "spec: {rules: [{http: {paths: [{path: /a, pathType: Regex, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &["spec.rules[0].http.paths[0].pathType"],
            ),
            (
                "spec: {rules: [{http: {paths: [{pathType: ImplementationSpecific, backend: {service: {name: web, port: {number: 80}}}}]}}]}",
                &[],
            ),
            (
                "spec: {rules: [{http: {paths: []}}]}",
                &["spec", "spec.rules[0].http.paths"],
            ),
            (
                "spec: {defaultBackend: {service: {name: web, port: {number: 80}}}, tls: [{hosts: ['*.a.com', 'b_c'], secretName: Bad}]}",
                &["spec.tls[0].hosts[1]", "spec.tls[0].secretName"],
            ),
            // as Kubernetes' and Karmada's: an IP in tls hosts, an empty secretName
            (
                "spec: {defaultBackend: {service: {name: web, port: {number: 80}}}, tls: [{hosts: ['10.0.0.1'], secretName: ip-cert}]}",
                &[],
            ),
            (
                "spec: {defaultBackend: {service: {name: web, port: {number: 80}}}, tls: [{hosts: [a.com], secretName: ''}]}",
                &[],
            ),
        ];
        for (spec, want) in cases {
            let got = fields(&format!("{HEAD}{spec}"));
            let got: Vec<&str> = got.iter().map(String::as_str).collect();
            // `spec.rules: [{http: {paths: []}}]` has rules, so only the paths error.
            let want: Vec<&str> = want
                .iter()
                .copied()
                .filter(|f| !(*f == "spec" && spec.contains("rules")))
                .collect();
            assert_eq!(got, want, "{spec}");
        }
    }

    #[test]
    fn name_must_be_a_subdomain() {
        let y = "apiVersion: networking.karmada.io/v1alpha1\nkind: MultiClusterIngress\nmetadata: {name: Demo}\nspec: {defaultBackend: {service: {name: web, port: {number: 80}}}}";
        assert_eq!(fields(y), vec!["metadata.name"]);
    }

    #[test]
    fn messages_say_what_to_do() {
        let e = &validate(&mci(&format!(
            "{HEAD}spec: {{defaultBackend: {{service: {{name: web, port: {{number: 70000}}}}}}}}"
        )))[0];
        assert_eq!(
            e.to_string(),
            "spec.defaultBackend.service.port.number: 70000 must be between 1 and 65535"
        );
    }

    #[test]
    fn port_names() {
        for ok in ["http", "h2c", "a-b", "x1"] {
            assert!(is_iana_svc_name(ok), "{ok}");
        }
        for bad in ["", "80", "-a", "a-", "a--b", "HTTP", "abcdefghijklmnop"] {
            assert!(!is_iana_svc_name(bad), "{bad}");
        }
    }
}
