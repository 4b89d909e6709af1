//! Authentication (bearer tokens, client certificates, optional anonymous) and
//! authorization (system:masters, then the RBAC objects stored in the server).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::state::registry::gr;
use crate::state::store::Store;
use crate::state::stored::str_list;

/// An authenticated user (kube's `user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    /// User name.
    pub name: String,
    /// Groups.
    pub groups: Vec<String>,
    /// The user's unique id, "" when the authenticator gives none.
    pub uid: String,
    /// Extra attributes (a bound token's pod, an impersonated `Impersonate-Extra-*`).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// A member of `system:masters` (everything allowed).
    pub fn admin(name: &str) -> Self {
        User {
            name: name.to_string(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            ..User::default()
        }
    }

    /// kube's `authentication.k8s.io/v1` UserInfo (TokenReview, SelfSubjectReview,
    /// admission reviews): an empty uid and extra left out.
    pub fn info(&self) -> Value {
        let mut info = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }

    /// The anonymous user.
    pub fn anonymous() -> Self {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }
    }
}

/// Parses a kube-apiserver static token file: `token,user,uid,"group1,group2"` per line.
pub fn parse_token_file(text: &str) -> Result<Vec<(String, User)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        for c in line.chars() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => parts.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        parts.push(cur);
        if parts.len() < 3 {
            return Err(format!(
                "token file line {}: expected token,user,uid[,\"groups\"], got {} fields",
                i + 1,
                parts.len()
            ));
        }
        let mut groups: Vec<String> = parts
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        groups.push("system:authenticated".into());
        out.push((
            parts[0].trim().to_string(),
            User {
                name: parts[1].trim().to_string(),
                groups,
                uid: parts[2].trim().to_string(),
                ..User::default()
            },
        ));
    }
    Ok(out)
}

/// What a request wants to do.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'a str,
    /// API group.
    pub group: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// Subresource or "".
    pub subresource: &'a str,
    /// Namespace or "".
    pub namespace: &'a str,
    /// Object name or "".
    pub name: &'a str,
    /// A non-resource URL (`/healthz`, `/metrics`): set, it is what is asked about and
    /// only `nonResourceURLs` rules match; "" for resource requests.
    pub path: &'a str,
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    str_list(v.get(key))
}

/// kube's `appliesToUser`: a ServiceAccount subject without a namespace is one of the
/// binding's own namespace (`binding_ns`).
fn subject_matches(subject: &Value, user: &User, binding_ns: &str) -> bool {
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => name == user.name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// kube's RBAC `RuleAllows`: verbs, API groups, resources (`*`, exact
/// `resource/subresource`, or `*/subresource`) and names, or a non-resource URL.
fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    if !a.path.is_empty() {
        let url =
            |u: &String| u == a.path || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p));
        return any(&strs(rule, "verbs"), a.verb) && strs(rule, "nonResourceURLs").iter().any(url);
    }
    let resource = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let names = strs(rule, "resourceNames");
    let any_sub = format!("*/{}", a.subresource);
    any(&strs(rule, "verbs"), a.verb)
        && any(&strs(rule, "apiGroups"), a.group)
        && strs(rule, "resources")
            .iter()
            .any(|r| r == "*" || *r == resource || (!a.subresource.is_empty() && *r == any_sub))
        && (names.is_empty() || names.iter().any(|n| n == a.name))
}

/// RBAC decision: system:masters, else any binding whose role has a matching rule.
pub fn authorize(store: &Store, user: &User, a: &Attributes) -> bool {
    decide(store, user, a).is_some()
}

/// One binding that names the user: where it is, the subject that matched, and its role's
/// rules.
struct Grant {
    /// "" for a ClusterRoleBinding.
    namespace: String,
    binding: String,
    role_kind: String,
    role_name: String,
    subject: Value,
    rules: Vec<Value>,
}

impl Grant {
    /// kube-apiserver's RBAC reason: `RBAC: allowed by ClusterRoleBinding "x" of
    /// ClusterRole "y" to User "z"`.
    fn reason(&self) -> String {
        let (bkind, bname) = if self.namespace.is_empty() {
            ("ClusterRoleBinding", self.binding.clone())
        } else {
            (
                "RoleBinding",
                format!("{}/{}", self.binding, self.namespace),
            )
        };
        let s = |k: &str| self.subject.get(k).and_then(Value::as_str).unwrap_or("");
        let who = match s("kind") {
            "ServiceAccount" => format!("ServiceAccount \"{}/{}\"", s("name"), s("namespace")),
            k => format!("{k} \"{}\"", s("name")),
        };
        format!(
            "RBAC: allowed by {bkind} \"{bname}\" of {} \"{}\" to {who}",
            self.role_kind, self.role_name
        )
    }
}

/// The bindings that apply to `user` in `namespace` ("" for cluster-wide only):
/// ClusterRoleBindings first, then the namespace's RoleBindings, as kube's RBAC walks them.
fn grants(store: &Store, user: &User, namespace: &str) -> Vec<Grant> {
    let rbac = "rbac.authorization.k8s.io";
    let grant = |b: &Value, ns: &str| -> Option<Grant> {
        let subject = b
            .get("subjects")
            .and_then(Value::as_array)?
            .iter()
            .find(|s| subject_matches(s, user, ns))?
            .clone();
        let field = |p: &str| {
            b.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (role_kind, role_name) = (field("/roleRef/kind"), field("/roleRef/name"));
        let role = if role_kind == "ClusterRole" {
            store.get(&gr(rbac, "clusterroles"), "", &role_name)
        } else {
            store.get(&gr(rbac, "roles"), ns, &role_name)
        };
        let rules = role
            .and_then(|o| o.value.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default();
        Some(Grant {
            namespace: ns.to_string(),
            binding: crate::state::stored::meta_str(b, "name").to_string(),
            role_kind,
            role_name,
            subject,
            rules,
        })
    };
    let mut out: Vec<Grant> = store
        .list(&gr(rbac, "clusterrolebindings"), None)
        .iter()
        .filter_map(|b| grant(&b.value, ""))
        .collect();
    if !namespace.is_empty() {
        out.extend(
            store
                .list(&gr(rbac, "rolebindings"), Some(namespace))
                .iter()
                .filter_map(|b| grant(&b.value, namespace)),
        );
    }
    out
}

fn is_master(user: &User) -> bool {
    user.groups.iter().any(|g| g == "system:masters")
}

/// [`authorize`] with its reason, as kube-apiserver's RBAC authorizer words it
/// (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to User "z"`); None: denied.
pub fn decide(store: &Store, user: &User, a: &Attributes) -> Option<String> {
    if is_master(user) {
        return Some(String::new());
    }
    grants(store, user, a.namespace)
        .iter()
        .find(|g| g.rules.iter().any(|r| rule_allows(r, a)))
        .map(Grant::reason)
}

/// The rules of every binding that names `user` in `namespace` (kube's `RulesFor`; a
/// `system:masters` member holds everything).
pub fn rules_for(store: &Store, user: &User, namespace: &str) -> Vec<Value> {
    if is_master(user) {
        return vec![
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
            json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
        ];
    }
    grants(store, user, namespace)
        .into_iter()
        .flat_map(|g| g.rules)
        .collect()
}

/// What `user` may do in `namespace`, as a SelfSubjectRulesReview's status
/// (`kubectl auth can-i --list`).
pub fn rules_review(store: &Store, user: &User, namespace: &str) -> Value {
    let (mut resource, mut non_resource) = (Vec::new(), Vec::new());
    for r in &rules_for(store, user, namespace) {
        let list = |k: &str| json!(strs(r, k));
        if strs(r, "nonResourceURLs").is_empty() {
            let mut rule = json!({"verbs": list("verbs"), "apiGroups": list("apiGroups"), "resources": list("resources")});
            if !strs(r, "resourceNames").is_empty() {
                rule["resourceNames"] = list("resourceNames");
            }
            resource.push(rule);
        } else {
            non_resource
                .push(json!({"verbs": list("verbs"), "nonResourceURLs": list("nonResourceURLs")}));
        }
    }
    json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_file_parses_groups() {
        let t = parse_token_file("# c\nabc,alice,1,\"dev,ops\"\nxyz,bob,2\n").unwrap();
        assert_eq!(t[0].1.name, "alice");
        assert_eq!(t[0].1.groups, vec!["dev", "ops", "system:authenticated"]);
        assert_eq!(t[1].1.groups, vec!["system:authenticated"]);
        assert!(parse_token_file("only,two").is_err());
    }

    #[test]
    fn rbac_roles_and_bindings() {
        let mut s = Store::new(100);
        s.put(&gr("rbac.authorization.k8s.io", "clusterroles"), json!({"metadata": {"name": "view"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]}));
        s.put(&gr("rbac.authorization.k8s.io", "roles"), json!({"metadata": {"name": "cm-edit", "namespace": "a"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"], "resourceNames": ["one"]}]}));
        s.put(&gr("rbac.authorization.k8s.io", "clusterrolebindings"), json!({"metadata": {"name": "v"}, "subjects": [{"kind": "Group", "name": "viewers"}], "roleRef": {"kind": "ClusterRole", "name": "view"}}));
        s.put(&gr("rbac.authorization.k8s.io", "rolebindings"), json!({"metadata": {"name": "e", "namespace": "a"}, "subjects": [{"kind": "User", "name": "carol"}], "roleRef": {"kind": "Role", "name": "cm-edit"}}));
        let viewer = User {
            name: "v".into(),
            groups: vec!["viewers".into()],
            ..Default::default()
        };
        let carol = User {
            name: "carol".into(),
            groups: vec![],
            ..Default::default()
        };
        let at = |verb, ns, name| Attributes {
            verb,
            group: "",
            resource: "configmaps",
            subresource: "",
            namespace: ns,
            name,
            path: "",
        };
        assert!(authorize(&s, &viewer, &at("list", "", "")));
        assert!(!authorize(&s, &viewer, &at("create", "a", "")));
        assert!(authorize(&s, &carol, &at("update", "a", "one")));
        assert!(!authorize(&s, &carol, &at("update", "a", "two")));
        assert!(!authorize(&s, &carol, &at("update", "b", "one")));
        assert!(authorize(&s, &User::admin("root"), &at("delete", "z", "q")));
        s.put(&gr("rbac.authorization.k8s.io", "clusterroles"), json!({"metadata": {"name": "health"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/logs/*"]}]}));
        s.put(&gr("rbac.authorization.k8s.io", "clusterrolebindings"), json!({"metadata": {"name": "h"}, "subjects": [{"kind": "User", "name": "carol"}], "roleRef": {"kind": "ClusterRole", "name": "health"}}));
        let url = |verb, path| Attributes {
            path,
            ..at(verb, "", "")
        };
        for (verb, path, want) in [
            ("get", "/healthz", true),
            ("get", "/logs/a", true),
            ("post", "/healthz", false),
            ("get", "/metrics", false),
        ] {
            assert_eq!(
                authorize(&s, &carol, &url(verb, path)),
                want,
                "{verb} {path}"
            );
        }
        assert!(
            !authorize(&s, &viewer, &url("get", "/healthz")),
            "view has no URL rules"
        );
        assert_eq!(
            decide(&s, &viewer, &at("list", "", "")).as_deref(),
            Some(
                r#"RBAC: allowed by ClusterRoleBinding "v" of ClusterRole "view" to Group "viewers""#
            )
        );
        assert_eq!(
            decide(&s, &carol, &at("update", "a", "one")).as_deref(),
            Some(r#"RBAC: allowed by RoleBinding "e/a" of Role "cm-edit" to User "carol""#)
        );
    }
}
