//! What a causeway-proxy publishes on its hub Lease for the MCI controller (MCI-10): the
//! ports it serves ([`PROXY_PORTS`](crate::well_known::annotations::PROXY_PORTS),
//! `80/http,443/https`) and the MCI TLS Secrets it cannot serve a certificate from
//! ([`PROXY_TLS_PROBLEMS`](crate::well_known::annotations::PROXY_TLS_PROBLEMS), JSON).
//! The proxy writes these texts and the controller reads them, both through this module.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A TLS Secret that does not exist.
pub const SECRET_NOT_FOUND: &str = "TLSSecretNotFound";
/// A TLS Secret without `tls.crt` or `tls.key`.
pub const SECRET_INCOMPLETE: &str = "TLSSecretIncomplete";
/// A TLS Secret whose certificate or key does not parse, or do not match.
pub const SECRET_INVALID: &str = "TLSSecretInvalid";

/// One served port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Port {
    /// The port number.
    pub port: i32,
    /// Whether it terminates TLS.
    pub https: bool,
}

/// The ports annotation for an HTTP port and an optional HTTPS one.
pub fn ports_text(http: u16, https: Option<u16>) -> String {
    let mut s = format!("{http}/http");
    if let Some(h) = https {
        s.push_str(&format!(",{h}/https"));
    }
    s
}

/// The ports of an annotation; entries that are not `PORT[/SCHEME]` with a port in
/// 1..=65535 are skipped.
pub fn parse_ports(text: &str) -> Vec<Port> {
    text.split(',')
        .filter_map(|e| {
            let mut it = e.trim().split('/');
            let port: i32 = it.next()?.parse().ok()?;
            let https = it.next().is_some_and(|s| s.eq_ignore_ascii_case("https"));
            (1..=65535).contains(&port).then_some(Port { port, https })
        })
        .collect()
}

/// Why a proxy serves the default certificate for an MCI's TLS Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsProblem {
    /// One of [`SECRET_NOT_FOUND`], [`SECRET_INCOMPLETE`], [`SECRET_INVALID`].
    pub reason: String,
    /// What is wrong, for people.
    pub message: String,
}

/// The problems of a proxy's TLS Secrets, by `namespace/name`.
pub type TlsProblems = BTreeMap<String, TlsProblem>;

/// The key of a Secret in [`TlsProblems`].
pub fn secret_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The annotation's text, or `None` when there is no problem (the annotation is left
/// out).
pub fn tls_problems_text(problems: &TlsProblems) -> Option<String> {
    (!problems.is_empty()).then(|| serde_json::to_string(problems).unwrap_or_default())
}

/// The problems an annotation lists; an annotation that does not parse lists none (the
/// error says why).
pub fn parse_tls_problems(text: &str) -> Result<TlsProblems, serde_json::Error> {
    serde_json::from_str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_round_trip_and_bad_entries_are_skipped() {
        let cases: &[(&str, &[(i32, bool)])] = &[
            ("80/http,443/https", &[(80, false), (443, true)]),
            ("8080", &[(8080, false)]),
            (" 80/http , 443/HTTPS ", &[(80, false), (443, true)]),
            ("0/http,70000/https,x/http,,443/https", &[(443, true)]),
            ("", &[]),
        ];
        for (text, want) in cases {
            let got: Vec<(i32, bool)> = parse_ports(text)
                .into_iter()
                .map(|p| (p.port, p.https))
                .collect();
            assert_eq!(&got, want, "{text:?}");
        }
        assert_eq!(ports_text(80, Some(443)), "80/http,443/https");
        assert_eq!(parse_ports(&ports_text(8080, None)).len(), 1);
    }

    #[test]
    fn tls_problems_round_trip_and_none_is_no_annotation() {
        assert_eq!(tls_problems_text(&TlsProblems::new()), None);
        let p = TlsProblems::from([(
            secret_key("web", "cert"),
            TlsProblem {
                reason: SECRET_NOT_FOUND.into(),
                message: "not found".into(),
            },
        )]);
        let text = tls_problems_text(&p).unwrap();
        assert_eq!(parse_tls_problems(&text).unwrap(), p);
        assert!(parse_tls_problems("not json").is_err());
    }
}
