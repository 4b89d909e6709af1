//! Front-proxy authentication, for the search API behind an APIService on a real hub:
//! kube-apiserver authenticates the user, drops the `Authorization` header and forwards
//! the request over a client certificate signed by its requestheader CA
//! (`--requestheader-client-ca-file`, published in kube-system's configmap
//! `extension-apiserver-authentication`), naming the user in `X-Remote-User` and the
//! groups in `X-Remote-Group` (and extras in `X-Remote-Extra-<key>`). Those headers are
//! believed only on a connection whose client certificate the TLS layer verified against
//! that CA (`--requestheader-client-ca`); anywhere else they are ignored.

use std::collections::BTreeMap;

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

#[cfg(test)]
mod tests {
    use super::*;

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
