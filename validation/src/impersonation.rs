//! User impersonation as kube-apiserver's `WithImpersonation` filter reads it: the
//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>`
//! headers (`kubectl --as/--as-group/--as-uid`), the `impersonate` permissions the caller
//! needs for each ([`Impersonation::asks`]), and the user the request then acts as
//! ([`Impersonation::user`]). One reading for kubesim and Causeway's search API.

use std::collections::BTreeMap;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-";

/// What a request's `Impersonate-*` headers ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Impersonation {
    user: String,
    groups: Vec<String>,
    uid: Option<String>,
    extra: BTreeMap<String, Vec<String>>,
}

/// A user as the request acts as it (kube's `user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The name.
    pub name: String,
    /// The groups, with `system:authenticated` (or `system:unauthenticated`) as kube adds it.
    pub groups: Vec<String>,
    /// The uid, "" when none was asked for.
    pub uid: String,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// One `impersonate` permission the caller needs: kube's authorization attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ask {
    /// API group: "" or `authentication.k8s.io` (uids, userextras).
    pub group: &'static str,
    /// `users`, `serviceaccounts`, `groups`, `uids` or `userextras`.
    pub resource: &'static str,
    /// The extra's key for `userextras`, else "".
    pub subresource: String,
    /// A service account's namespace, else "".
    pub namespace: String,
    /// Who or what is impersonated.
    pub name: String,
}

impl Ask {
    /// kube-apiserver's 403 message when `caller` lacks this permission.
    pub fn forbidden(&self, caller: &str) -> String {
        forbidden_message(
            caller,
            "impersonate",
            self.group,
            self.resource,
            &self.subresource,
            &self.namespace,
            &self.name,
        )
    }
}

/// kube-apiserver's authorization 403 message for a resource request:
/// `pods "x" is forbidden: User "u" cannot delete resource "pods" in API group "" in the
/// namespace "n"` (no name for a request that names none, `resource/subresource`).
pub fn forbidden_message(
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: &str,
    namespace: &str,
    name: &str,
) -> String {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let subject = if name.is_empty() {
        qualified
    } else {
        format!("{qualified} \"{name}\"")
    };
    let full = if subresource.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{subresource}")
    };
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    format!(
        "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{full}\" in API group \"{group}\" {scope}"
    )
}

/// `%XX` escapes decoded, as kube reads an extra's key from a header name
/// (`Impersonate-Extra-`, a front proxy's `X-Remote-Extra-`: `%2F` for `/`, which a
/// header name cannot hold); an escape that does not decode to UTF-8 leaves the key as
/// written.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

impl Impersonation {
    /// Reads the `Impersonate-*` headers of `headers` (name, value) pairs, names in any
    /// case, as kube reads them: the first `Impersonate-User` and `Impersonate-Uid`
    /// values (empty ones ask for nothing), every group and extra value. `Ok(None)`:
    /// none asked for. A group, uid or extra without a user is refused, as kube does,
    /// with what to do; so is a value that is not UTF-8.
    pub fn from_headers<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Option<Impersonation>, String> {
        let mut imp = Impersonation {
            user: String::new(),
            groups: Vec::new(),
            uid: None,
            extra: BTreeMap::new(),
        };
        let (mut user_seen, mut uid_seen) = (false, false);
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            let is_ours = matches!(name.as_str(), USER | GROUP | UID) || name.starts_with(EXTRA);
            if !is_ours {
                continue;
            }
            let value = std::str::from_utf8(value)
                .map_err(|_| format!("the {name} header is not UTF-8 text"))?;
            match name.as_str() {
                USER if !user_seen => {
                    user_seen = true;
                    imp.user = value.to_string();
                }
                UID if !uid_seen => {
                    uid_seen = true;
                    imp.uid = Some(value.to_string()).filter(|u| !u.is_empty());
                }
                USER | UID => {}
                GROUP => imp.groups.push(value.to_string()),
                n => {
                    let key = unescape(&n[EXTRA.len()..]);
                    imp.extra.entry(key).or_default().push(value.to_string());
                }
            }
        }
        let others = !imp.groups.is_empty() || imp.uid.is_some() || !imp.extra.is_empty();
        if imp.user.is_empty() {
            if !others {
                return Ok(None);
            }
            let mut asked: Vec<String> =
                imp.groups.iter().map(|g| format!("group {g:?}")).collect();
            asked.extend(imp.extra.keys().map(|k| format!("extra {k:?}")));
            asked.extend(imp.uid.iter().map(|u| format!("uid {u:?}")));
            return Err(format!(
                "requested {} without impersonating a user: set Impersonate-User (kubectl --as) too",
                asked.join(", ")
            ));
        }
        Ok(Some(imp))
    }

    /// The service account the user names (`system:serviceaccount:<ns>:<name>`).
    /// kube's `SplitUsername`: a valid namespace (DNS label) and name (DNS subdomain),
    /// else the name is an ordinary user's.
    fn service_account(&self) -> Option<(&str, &str)> {
        self.user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| {
                !name.contains(':')
                    && crate::is_dns1123_label(ns)
                    && crate::is_dns1123_subdomain(name)
            })
    }

    /// The `impersonate` permissions the caller needs, in kube's order: the user (or
    /// service account), each group, each extra value, the uid.
    pub fn asks(&self) -> Vec<Ask> {
        let ask = |group, resource, subresource: &str, namespace: &str, name: &str| Ask {
            group,
            resource,
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let mut out = vec![match self.service_account() {
            Some((ns, name)) => ask("", "serviceaccounts", "", ns, name),
            None => ask("", "users", "", "", &self.user),
        }];
        out.extend(self.groups.iter().map(|g| ask("", "groups", "", "", g)));
        for (key, values) in &self.extra {
            out.extend(
                values
                    .iter()
                    .map(|v| ask("authentication.k8s.io", "userextras", key, "", v)),
            );
        }
        out.extend(
            self.uid
                .iter()
                .map(|u| ask("authentication.k8s.io", "uids", "", "", u)),
        );
        out
    }

    /// The user the request acts as once every [`Self::asks`] is allowed. A service
    /// account without groups asked gets its own; a non-anonymous user is in
    /// `system:authenticated` unless the groups asked say authenticated or
    /// unauthenticated; `system:anonymous` is in `system:unauthenticated`.
    pub fn user(&self) -> UserInfo {
        let mut groups = self.groups.clone();
        if groups.is_empty()
            && let Some((ns, _)) = self.service_account()
        {
            groups = vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
        let has = |g: &str| groups.iter().any(|x| x == g);
        if self.user != "system:anonymous" {
            if !has("system:authenticated") && !has("system:unauthenticated") {
                groups.push("system:authenticated".into());
            }
        } else if !has("system:unauthenticated") {
            groups.push("system:unauthenticated".into());
        }
        UserInfo {
            name: self.user.clone(),
            groups,
            uid: self.uid.clone().unwrap_or_default(),
            extra: self.extra.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(h: &[(&str, &str)]) -> Result<Option<Impersonation>, String> {
        Impersonation::from_headers(h.iter().map(|(k, v)| (*k, v.as_bytes())))
    }

    #[test]
    fn no_impersonate_headers_is_none() {
        assert_eq!(read(&[("Authorization", "Bearer x")]), Ok(None));
    }

    #[test]
    fn a_user_its_groups_and_what_must_be_allowed() {
        let imp = read(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "devs"),
            ("impersonate-group", "ops"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-example.org%2Fteam", "pay"),
        ])
        .unwrap()
        .unwrap();
        let u = imp.user();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, vec!["devs", "ops", "system:authenticated"]);
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.extra["scopes"], vec!["view"]);
        assert_eq!(u.extra["example.org/team"], vec!["pay"]);
        let asks: Vec<(String, String, String)> = imp
            .asks()
            .iter()
            .map(|a| {
                (
                    a.resource.to_string(),
                    a.subresource.clone(),
                    a.name.clone(),
                )
            })
            .collect();
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            asks,
            vec![
                s("users", "", "alice"),
                s("groups", "", "devs"),
                s("groups", "", "ops"),
                s("userextras", "example.org/team", "pay"),
                s("userextras", "scopes", "view"),
                s("uids", "", "u-1"),
            ]
        );
    }

    #[test]
    fn service_accounts_and_the_anonymous_user_get_kubes_groups() {
        let sa = read(&[("Impersonate-User", "system:serviceaccount:gen:robot")])
            .unwrap()
            .unwrap();
        assert_eq!(
            sa.user().groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:gen",
                "system:authenticated"
            ]
        );
        let ask = &sa.asks()[0];
        assert_eq!(
            (ask.resource, ask.namespace.as_str(), ask.name.as_str()),
            ("serviceaccounts", "gen", "robot")
        );
        // groups asked for replace the service account's own
        let sa = read(&[
            ("Impersonate-User", "system:serviceaccount:gen:robot"),
            ("Impersonate-Group", "x"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(sa.user().groups, vec!["x", "system:authenticated"]);
        let anon = read(&[("Impersonate-User", "system:anonymous")])
            .unwrap()
            .unwrap();
        assert_eq!(anon.user().groups, vec!["system:unauthenticated"]);
        let unauth = read(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "system:unauthenticated"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(unauth.user().groups, vec!["system:unauthenticated"]);
        // not a service account name (kube's SplitUsername): a user
        for odd in [
            "system:serviceaccount:gen",
            "system:serviceaccount:Gen:robot",
            "system:serviceaccount:gen:Bad!",
        ] {
            let odd = read(&[("Impersonate-User", odd)]).unwrap().unwrap();
            assert_eq!(odd.asks()[0].resource, "users");
            assert_eq!(odd.user().groups, vec!["system:authenticated"]);
        }
    }

    /// Empty values ask for nothing, as in kube: an empty user alone is no
    /// impersonation, an empty uid no uid; the first user value counts.
    #[test]
    fn empty_and_repeated_values_read_as_kube_reads_them() {
        assert_eq!(read(&[("Impersonate-User", "")]), Ok(None));
        let imp = read(&[("Impersonate-User", "alice"), ("Impersonate-Uid", "")])
            .unwrap()
            .unwrap();
        assert!(imp.asks().iter().all(|a| a.resource != "uids"));
        let imp = read(&[("Impersonate-User", "alice"), ("Impersonate-User", "bob")])
            .unwrap()
            .unwrap();
        assert_eq!(imp.user().name, "alice");
        assert!(
            read(&[("Impersonate-User", ""), ("Impersonate-User", "bob")])
                .unwrap()
                .is_none()
        );
        assert!(Impersonation::from_headers([("impersonate-user", &b"\xff"[..])]).is_err());
    }

    #[test]
    fn groups_without_a_user_are_refused_with_what_to_do() {
        let e = read(&[("Impersonate-Group", "devs")]).unwrap_err();
        assert!(
            e.contains("group \"devs\" without impersonating a user"),
            "{e}"
        );
        assert!(e.contains("--as"), "{e}");
    }

    #[test]
    fn forbidden_messages_are_kubes() {
        let imp = read(&[("Impersonate-User", "system:serviceaccount:gen:robot")])
            .unwrap()
            .unwrap();
        assert_eq!(
            imp.asks()[0].forbidden("bob"),
            "serviceaccounts \"robot\" is forbidden: User \"bob\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"gen\""
        );
        assert_eq!(
            forbidden_message(
                "bob",
                "impersonate",
                "authentication.k8s.io",
                "userextras",
                "scopes",
                "",
                "view"
            ),
            "userextras.authentication.k8s.io \"view\" is forbidden: User \"bob\" cannot impersonate resource \"userextras/scopes\" in API group \"authentication.k8s.io\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message("alice", "list", "", "nodes", "", "", ""),
            "nodes is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        );
    }

    #[test]
    fn extra_keys_unescape_as_kube_does() {
        assert_eq!(unescape("a%2Fb"), "a/b");
        assert_eq!(unescape("100%"), "100%");
        assert_eq!(unescape("%zz"), "%zz");
        assert_eq!(unescape("%ff"), "%ff");
    }
}
