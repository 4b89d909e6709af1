//! Front-proxy authentication, for the search API behind an APIService on a real hub:
//! kube-apiserver authenticates the user, drops the `Authorization` header and forwards
//! the request over a client certificate signed by its requestheader CA
//! (`--requestheader-client-ca-file`, published in kube-system's configmap
//! `extension-apiserver-authentication`), naming the user in `X-Remote-User` and the
//! groups in `X-Remote-Group` (and extras in `X-Remote-Extra-<key>`). Those headers are
//! believed only on a connection whose client certificate the TLS layer verified against
//! that CA (`--requestheader-client-ca`); anywhere else they are ignored.

use std::collections::BTreeMap;

use causeway_runtime::https::VerifiedClientCertificate;
use http::HeaderMap;
use k8s_openapi::api::authentication::v1::UserInfo;

/// The user the front proxy names, if it names one.
pub fn user(headers: &HeaderMap) -> Option<UserInfo> {
    // each value whole, as kube-apiserver's requestheader authenticator takes them (one
    // header per group): a comma belongs to the name (`Smith, John`), it separates
    // nothing
    let all = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(String::from)
            .collect()
    };
    let username = all("x-remote-user").into_iter().next()?;
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("x-remote-extra-")
            && let Ok(v) = value.to_str()
        {
            // header names carry extra keys percent-encoded (`X-Remote-Extra-Scopes%2Fx`)
            let key = k8s_validation::impersonation::unescape(key);
            extra.entry(key).or_default().push(v.to_string());
        }
    }
    Some(UserInfo {
        username: Some(username),
        groups: Some(all("x-remote-group")),
        extra: (!extra.is_empty()).then_some(extra),
        uid: None,
    })
}

/// Whether a front proxy with `cert` may name users: its common name is one of
/// `allowed` (`--requestheader-allowed-names`), or `allowed` is empty. Else says why,
/// as kube-apiserver's requestheader authenticator refuses it.
pub fn allowed(cert: &VerifiedClientCertificate, allowed: &[String]) -> Result<(), String> {
    if allowed.is_empty() {
        return Ok(());
    }
    match &cert.common_name {
        Some(cn) if allowed.contains(cn) => Ok(()),
        cn => Err(format!(
            "Unauthorized: the client certificate's common name {} is not one of --requestheader-allowed-names ({}): X-Remote-User is believed only from the front proxy",
            cn.as_deref()
                .map(|c| format!("\"{c}\""))
                .unwrap_or_else(|| "(none)".into()),
            allowed.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allowed_names_may_front() {
        let cert = |cn: Option<&str>| VerifiedClientCertificate {
            common_name: cn.map(String::from),
        };
        let names = ["front-proxy-client".to_string(), "aggregator".to_string()];
        // (common name, allowed names, allowed?)
        let table: &[(Option<&str>, &[String], bool)] = &[
            (Some("front-proxy-client"), &names, true),
            (Some("aggregator"), &names, true),
            (Some("kubelet"), &names, false),
            (Some("Front-Proxy-Client"), &names, false),
            (None, &names, false),
            (Some("anyone"), &[], true),
            (None, &[], true),
        ];
        for (cn, names, want) in table {
            let got = allowed(&cert(*cn), names);
            assert_eq!(got.is_ok(), *want, "{cn:?} {names:?}: {got:?}");
        }
        let why = allowed(&cert(Some("kubelet")), &names).unwrap_err();
        assert!(
            why.contains("\"kubelet\" is not one of --requestheader-allowed-names (front-proxy-client, aggregator)"),
            "{why}"
        );
    }

    #[test]
    fn the_front_proxy_headers_name_the_user() {
        let mut h = HeaderMap::new();
        assert!(user(&h).is_none(), "no X-Remote-User: nobody");
        h.append("X-Remote-User", "alice".parse().unwrap());
        h.append("X-Remote-Group", "devs".parse().unwrap());
        h.append("X-Remote-Group", "system:authenticated".parse().unwrap());
        h.append("X-Remote-Extra-Scopes%2Fteam", "pay".parse().unwrap());
        let u = user(&h).unwrap();
        assert_eq!(u.username.as_deref(), Some("alice"));
        assert_eq!(
            u.groups.unwrap(),
            ["devs".to_string(), "system:authenticated".to_string()]
        );
        assert_eq!(u.extra.unwrap()["scopes/team"], ["pay".to_string()]);
    }

    /// A comma is part of a user's or a group's name, as kube-apiserver reads the
    /// headers: `Smith, John` is not user `Smith`, and group `acme, platform-admins`
    /// does not make its members platform admins.
    #[test]
    fn a_comma_is_part_of_the_name_not_a_separator() {
        let mut h = HeaderMap::new();
        h.append("X-Remote-User", "Smith, John".parse().unwrap());
        h.append("X-Remote-Group", "acme, platform-admins".parse().unwrap());
        h.append("X-Remote-Group", "".parse().unwrap());
        h.append("X-Remote-Group", "devs".parse().unwrap());
        let u = user(&h).unwrap();
        assert_eq!(u.username.as_deref(), Some("Smith, John"));
        assert_eq!(
            u.groups.unwrap(),
            ["acme, platform-admins".to_string(), "devs".to_string()]
        );
    }
}
