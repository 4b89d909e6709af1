//! User impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>` headers;
//! `kubectl --as/--as-group/--as-uid`), as kube-apiserver's `WithImpersonation` filter
//! does it: each thing asked for is authorized for the caller with the verb
//! `impersonate` (users, serviceaccounts, groups, uids, userextras/<key>), then the
//! request goes on as the impersonated user.

use std::collections::BTreeMap;

use http::HeaderMap;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Attributes, User, authorize};
use crate::state::store::Store;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// One thing a request asks to impersonate, as the attributes the caller needs
/// `impersonate` on.
struct Ask {
    group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: String,
    name: String,
}

fn value(v: &http::HeaderValue) -> ApiResult<String> {
    v.to_str().map(str::to_string).map_err(|_| {
        ApiError::bad_request("an Impersonate-* header value is not visible ASCII text")
    })
}

/// The user a request acts as: `caller`, or whom its `Impersonate-*` headers name once
/// `caller` may impersonate each of them (403 otherwise; a group, uid or extra without
/// a user is kube's 500).
pub fn apply(store: &Store, headers: &HeaderMap, caller: User) -> ApiResult<User> {
    let user = headers
        .get(USER)
        .map(value)
        .transpose()?
        .unwrap_or_default();
    let groups = headers
        .get_all(GROUP)
        .iter()
        .map(value)
        .collect::<ApiResult<Vec<_>>>()?;
    let uid = headers.get(UID).map(value).transpose()?;
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, v) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA) {
            // kube unescapes the key (`%2F` for `/`, which a header name cannot hold)
            let key = percent_decode(key);
            extra.entry(key).or_default().push(value(v)?);
        }
    }
    if user.is_empty() {
        if groups.is_empty() && extra.is_empty() && uid.is_none() {
            return Ok(caller);
        }
        let mut asked: Vec<String> = groups.iter().map(|g| format!("group {g:?}")).collect();
        asked.extend(uid.iter().map(|u| format!("uid {u:?}")));
        asked.extend(extra.keys().map(|k| format!("extra {k:?}")));
        return Err(ApiError::internal(format!(
            "Internal error occurred: requested {} without impersonating a user: set Impersonate-User (kubectl --as) too",
            asked.join(", ")
        )));
    }
    let mut asks = Vec::new();
    let service_account = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'));
    let mut new_groups = Vec::new();
    match service_account {
        Some((ns, name)) => {
            asks.push(Ask {
                group: "",
                resource: "serviceaccounts",
                subresource: String::new(),
                namespace: ns.to_string(),
                name: name.to_string(),
            });
            if groups.is_empty() {
                new_groups = vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => asks.push(Ask {
            group: "",
            resource: "users",
            subresource: String::new(),
            namespace: String::new(),
            name: user.clone(),
        }),
    }
    for g in &groups {
        asks.push(Ask {
            group: "",
            resource: "groups",
            subresource: String::new(),
            namespace: String::new(),
            name: g.clone(),
        });
        new_groups.push(g.clone());
    }
    if let Some(u) = &uid {
        asks.push(Ask {
            group: "authentication.k8s.io",
            resource: "uids",
            subresource: String::new(),
            namespace: String::new(),
            name: u.clone(),
        });
    }
    for (key, values) in &extra {
        for v in values {
            asks.push(Ask {
                group: "authentication.k8s.io",
                resource: "userextras",
                subresource: key.clone(),
                namespace: String::new(),
                name: v.clone(),
            });
        }
    }
    for ask in &asks {
        let a = Attributes {
            verb: "impersonate",
            group: ask.group,
            resource: ask.resource,
            subresource: &ask.subresource,
            namespace: &ask.namespace,
            name: &ask.name,
            path: "",
        };
        if !authorize(store, &caller, &a) {
            return Err(ApiError::forbidden(&caller.name, &a));
        }
    }
    // kube: a non-anonymous user is in system:authenticated unless the groups asked for
    // say authenticated or unauthenticated; the anonymous user in system:unauthenticated
    let has = |g: &str| new_groups.iter().any(|x| x == g);
    if user != "system:anonymous" {
        if !has("system:authenticated") && !has("system:unauthenticated") {
            new_groups.push("system:authenticated".into());
        }
    } else if !has("system:unauthenticated") {
        new_groups.push("system:unauthenticated".into());
    }
    Ok(User {
        name: user,
        groups: new_groups,
        uid: uid.unwrap_or_default(),
        extra,
    })
}

/// `%XX` escapes decoded (url.PathUnescape); a malformed escape is kept as written.
fn percent_decode(s: &str) -> String {
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
    String::from_utf8(decoded).unwrap_or_else(|_| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::registry::gr;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn bob() -> User {
        User {
            name: "bob".into(),
            groups: vec!["system:authenticated".into()],
            ..User::default()
        }
    }

    /// A store where bob may impersonate the user alice, the group devs and the
    /// service account gen/robot, and nothing else.
    fn store() -> Store {
        let mut s = Store::new(100);
        let rbac = "rbac.authorization.k8s.io";
        s.put(
            &gr(rbac, "clusterroles"),
            json!({"metadata": {"name": "imp"}, "rules": [
                {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["alice"]},
                {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["devs"]},
                {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/scopes"], "verbs": ["impersonate"]}]}),
        );
        s.put(
            &gr(rbac, "clusterrolebindings"),
            json!({"metadata": {"name": "imp"}, "subjects": [{"kind": "User", "name": "bob"}],
                   "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "imp"}}),
        );
        s
    }

    #[test]
    fn no_headers_is_the_caller() {
        assert_eq!(apply(&store(), &HeaderMap::new(), bob()).unwrap(), bob());
    }

    #[test]
    fn users_groups_and_service_accounts_as_kube_builds_them() {
        let s = store();
        let alice = apply(&s, &headers(&[("impersonate-user", "alice")]), bob()).unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, vec!["system:authenticated"]);
        let dev = apply(
            &s,
            &headers(&[("impersonate-user", "alice"), ("impersonate-group", "devs")]),
            bob(),
        )
        .unwrap();
        assert_eq!(dev.groups, vec!["devs", "system:authenticated"]);
        let sa = apply(
            &s,
            &headers(&[("impersonate-user", "system:serviceaccount:gen:robot")]),
            bob(),
        )
        .unwrap();
        assert_eq!(
            sa.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:gen",
                "system:authenticated"
            ]
        );
        let scoped = apply(
            &s,
            &headers(&[
                ("impersonate-user", "alice"),
                ("impersonate-extra-scopes", "view"),
                ("impersonate-extra-scopes", "edit"),
            ]),
            bob(),
        )
        .unwrap();
        assert_eq!(scoped.extra["scopes"], vec!["view", "edit"]);
    }

    #[test]
    fn what_the_caller_may_not_impersonate_is_forbidden_with_kubes_message() {
        let s = store();
        let e = apply(&s, &headers(&[("impersonate-user", "carol")]), bob()).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "users \"carol\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let e = apply(
            &s,
            &headers(&[
                ("impersonate-user", "alice"),
                ("impersonate-group", "system:masters"),
            ]),
            bob(),
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "groups \"system:masters\" is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
        );
        let e = apply(
            &s,
            &headers(&[("impersonate-user", "alice"), ("impersonate-uid", "1234")]),
            bob(),
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("uids.authentication.k8s.io \"1234\" is forbidden"),
            "{}",
            e.message
        );
        let e = apply(&s, &headers(&[("impersonate-group", "devs")]), bob()).unwrap_err();
        assert_eq!(e.code, 500);
        assert!(
            e.message.contains("without impersonating a user"),
            "{}",
            e.message
        );
        // a master may impersonate anyone
        let root = User::admin("root");
        let carol = apply(&s, &headers(&[("impersonate-user", "carol")]), root).unwrap();
        assert_eq!(carol.name, "carol");
    }
}
