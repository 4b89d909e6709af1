//! User impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>` headers;
//! `kubectl --as/--as-group/--as-uid`), as kube-apiserver's `WithImpersonation` filter
//! does it: each thing asked for is authorized for the caller with the verb
//! `impersonate` (users, serviceaccounts, groups, uids, userextras/<key>), then the
//! request goes on as the impersonated user.

use http::HeaderMap;
use k8s_validation::impersonation::Impersonation;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Attributes, User, authorize};
use crate::state::store::Store;

/// Whom a request's `Impersonate-*` headers name, if any (a group, uid or extra
/// without a user is kube's 500). Read without the state: most requests ask for none.
pub fn requested(headers: &HeaderMap) -> ApiResult<Option<Impersonation>> {
    let pairs = headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
    Impersonation::from_headers(pairs)
        .map_err(|e| ApiError::internal(format!("Internal error occurred: {e}")))
}

/// The user a request acts as once `caller` may impersonate each thing `imp` names
/// (403 otherwise).
pub fn act_as(store: &Store, caller: &User, imp: &Impersonation) -> ApiResult<User> {
    for ask in imp.asks() {
        let a = Attributes {
            verb: "impersonate",
            group: ask.group,
            resource: ask.resource,
            subresource: &ask.subresource,
            namespace: &ask.namespace,
            name: &ask.name,
            path: "",
        };
        if !authorize(store, caller, &a) {
            return Err(ApiError::forbidden(&caller.name, &a));
        }
    }
    let u = imp.user();
    Ok(User {
        name: u.name,
        groups: u.groups,
        uid: u.uid,
        extra: u.extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::registry::gr;
    use serde_json::json;

    fn apply(store: &Store, headers: &HeaderMap, caller: User) -> ApiResult<User> {
        match requested(headers)? {
            Some(imp) => act_as(store, &caller, &imp),
            None => Ok(caller),
        }
    }

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
