//! kube-apiserver's rules for its own RBAC objects: subjects' apiGroup defaults,
//! validation of Roles, ClusterRoles and bindings (kube's messages), a binding's
//! immutable roleRef, privilege-escalation prevention (a user may grant only what it
//! holds, unless it has `escalate` on the role or `bind` on the role a binding names),
//! and kube-controller-manager's ClusterRole aggregation.

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause, invalid_field, required_field};
use crate::http::auth::{Attributes, User, authorize, rules_for};
use crate::state::cluster::State;
use crate::state::registry::{ResourceType, gr};
use crate::state::selectors::LabelSelector;
use crate::state::store::Store;
use crate::state::stored::{meta_str, str_list};

const RBAC: &str = "rbac.authorization.k8s.io";

fn kind_of(rt: &ResourceType) -> Option<&'static str> {
    if rt.group != RBAC {
        return None;
    }
    match rt.plural.as_str() {
        "roles" => Some("Role"),
        "clusterroles" => Some("ClusterRole"),
        "rolebindings" => Some("RoleBinding"),
        "clusterrolebindings" => Some("ClusterRoleBinding"),
        _ => None,
    }
}

/// `SetDefaults_Subject`: a User or Group subject's apiGroup is RBAC's.
pub fn defaults(rt: &ResourceType, obj: &mut Value) {
    if !matches!(kind_of(rt), Some("RoleBinding" | "ClusterRoleBinding")) {
        return;
    }
    for s in obj
        .get_mut("subjects")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        let group = s.get("apiGroup").and_then(Value::as_str).unwrap_or("");
        if group.is_empty() && matches!(kind, "User" | "Group") {
            s["apiGroup"] = json!(RBAC);
        }
    }
}

/// Go's `%#v` of a `[]string`, as field errors print an invalid list.
fn go_strings(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
        field: field.into(),
    }
}

fn required(field: &str, detail: &str) -> Cause {
    let mut c = required_field(field);
    if !detail.is_empty() {
        c.message = format!("Required value: {detail}");
    }
    c
}

/// `ValidatePolicyRule`.
fn policy_rule(rule: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    let list = |k: &str| str_list(rule.get(k));
    if list("verbs").is_empty() {
        out.push(required(
            &format!("{path}.verbs"),
            "verbs must contain at least one value",
        ));
    }
    let urls = list("nonResourceURLs");
    if !urls.is_empty() {
        let field = format!("{path}.nonResourceURLs");
        if namespaced {
            out.push(invalid_field(
                &field,
                format!(
                    "Invalid value: {}: namespaced rules cannot apply to non-resource URLs",
                    go_strings(&urls)
                ),
            ));
        }
        if !list("apiGroups").is_empty()
            || !list("resources").is_empty()
            || !list("resourceNames").is_empty()
        {
            out.push(invalid_field(
                &field,
                format!(
                    "Invalid value: {}: rules cannot apply to both regular resources and non-resource URLs",
                    go_strings(&urls)
                ),
            ));
        }
        return;
    }
    if list("apiGroups").is_empty() {
        out.push(required(
            &format!("{path}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if list("resources").is_empty() {
        out.push(required(
            &format!("{path}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

fn role_ref(obj: &Value) -> (String, String, String) {
    let f = |k: &str| {
        obj.pointer(&format!("/roleRef/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (f("apiGroup"), f("kind"), f("name"))
}

/// `ValidateRoleBindingSubject`.
fn subject(s: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    let f = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("");
    if f("name").is_empty() {
        out.push(required(&format!("{path}.name"), ""));
    }
    match f("kind") {
        "ServiceAccount" => {
            if !f("name").is_empty() {
                for msg in k8s_validation::dns1123_subdomain(f("name")) {
                    out.push(invalid_field(
                        &format!("{path}.name"),
                        format!("Invalid value: {:?}: {msg}", f("name")),
                    ));
                }
            }
            if !f("apiGroup").is_empty() {
                out.push(not_supported(
                    &format!("{path}.apiGroup"),
                    f("apiGroup"),
                    &[""],
                ));
            }
            if !namespaced && f("namespace").is_empty() {
                out.push(required(&format!("{path}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if f("apiGroup") != RBAC {
                out.push(not_supported(
                    &format!("{path}.apiGroup"),
                    f("apiGroup"),
                    &[RBAC],
                ));
            }
        }
        k => out.push(not_supported(
            &format!("{path}.kind"),
            k,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

/// kube-apiserver's validation of a Role, ClusterRole, RoleBinding or ClusterRoleBinding
/// (`old`: on update, where a binding's roleRef may not change).
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let Some(kind) = kind_of(rt) else {
        return Ok(());
    };
    let mut causes = Vec::new();
    match kind {
        "Role" | "ClusterRole" => {
            let rules = obj.get("rules").and_then(Value::as_array);
            for (i, r) in rules.into_iter().flatten().enumerate() {
                policy_rule(r, kind == "Role", &format!("rules[{i}]"), &mut causes);
            }
            if let Some(agg) = obj.get("aggregationRule").filter(|a| !a.is_null()) {
                let selectors = agg.get("clusterRoleSelectors").and_then(Value::as_array);
                if selectors.is_none_or(Vec::is_empty) {
                    causes.push(required(
                        "aggregationRule.clusterRoleSelectors",
                        "at least one clusterRoleSelector required if aggregationRule is non-nil",
                    ));
                }
                for (i, s) in selectors.into_iter().flatten().enumerate() {
                    if let Err(e) = LabelSelector::from_json(Some(s)) {
                        causes.push(invalid_field(
                            &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                            format!("Invalid value: {}", e.message),
                        ));
                    }
                }
            }
        }
        _ => {
            let (group, ref_kind, name) = role_ref(obj);
            if group != RBAC {
                causes.push(not_supported("roleRef.apiGroup", &group, &[RBAC]));
            }
            let kinds: &[&str] = if kind == "RoleBinding" {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !kinds.contains(&ref_kind.as_str()) {
                causes.push(not_supported("roleRef.kind", &ref_kind, kinds));
            }
            if name.is_empty() {
                causes.push(required("roleRef.name", ""));
            }
            let subjects = obj.get("subjects").and_then(Value::as_array);
            for (i, s) in subjects.into_iter().flatten().enumerate() {
                subject(
                    s,
                    kind == "RoleBinding",
                    &format!("subjects[{i}]"),
                    &mut causes,
                );
            }
            if let Some(old) = old
                && role_ref(old) != (group.clone(), ref_kind.clone(), name.clone())
            {
                causes.push(invalid_field(
                    "roleRef",
                    format!(
                        "Invalid value: rbac.RoleRef{{APIGroup:{group:?}, Kind:{ref_kind:?}, Name:{name:?}}}: cannot change roleRef"
                    ),
                ));
            }
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(kind, RBAC, meta_str(obj, "name"), causes))
}

/// One rule broken into single (group, resource, verb[, name]) or (url, verb) rules, as
/// kube's `BreakdownRule`.
fn breakdown(rule: &Value) -> Vec<Value> {
    let list = |k: &str| str_list(rule.get(k));
    let (verbs, names) = (list("verbs"), list("resourceNames"));
    let mut out = Vec::new();
    for g in list("apiGroups") {
        for r in list("resources") {
            for v in &verbs {
                if names.is_empty() {
                    out.push(json!({"apiGroups": [g], "resources": [r], "verbs": [v]}));
                }
                for n in &names {
                    out.push(
                        json!({"apiGroups": [g], "resources": [r], "resourceNames": [n], "verbs": [v]}),
                    );
                }
            }
        }
    }
    for u in list("nonResourceURLs") {
        for v in &verbs {
            out.push(json!({"nonResourceURLs": [u], "verbs": [v]}));
        }
    }
    out
}

/// kube's `ruleCovers`: `owner` grants everything `sub` (a broken-down rule) does.
fn covers(owner: &Value, sub: &Value) -> bool {
    let list = |r: &Value, k: &str| str_list(r.get(k));
    let has = |set: &[String], x: &str| set.iter().any(|s| s == x);
    let has_all = |set: &[String], xs: &[String]| xs.iter().all(|x| has(set, x));
    let star_or_all = |k: &str| {
        let set = list(owner, k);
        has(&set, "*") || has_all(&set, &list(sub, k))
    };
    let owned = list(owner, "resources");
    let resources = has(&owned, "*")
        || list(sub, "resources").iter().all(|r| {
            has(&owned, r)
                || r.split_once('/')
                    .is_some_and(|(_, s)| has(&owned, &format!("*/{s}")))
        });
    let owned_urls = list(owner, "nonResourceURLs");
    let urls = list(sub, "nonResourceURLs").iter().all(|u| {
        owned_urls
            .iter()
            .any(|o| o == u || o.strip_suffix('*').is_some_and(|p| u.starts_with(p)))
    });
    let (owned_names, names) = (list(owner, "resourceNames"), list(sub, "resourceNames"));
    let names_ok = owned_names.is_empty() || (!names.is_empty() && has_all(&owned_names, &names));
    star_or_all("verbs") && star_or_all("apiGroups") && resources && names_ok && urls
}

/// kube's `CompactString` of a rule: `{APIGroups:["apps"], Resources:["deployments"],
/// Verbs:["delete"]}`.
fn compact_string(rule: &Value) -> String {
    let mut parts = Vec::new();
    for (key, label) in [
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ] {
        let v = str_list(rule.get(key));
        if !v.is_empty() {
            let q: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
            parts.push(format!("{label}:[{}]", q.join(" ")));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// A rule's (group, resource, name) when it names one of each at most.
type SimpleResource = (String, String, Option<String>);

/// kube's `CompactRules`: single-group, single-resource rules (at most one name) merged
/// into one rule per (group, resource, name) with their verbs.
fn compact(rules: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut simple: Vec<(SimpleResource, Value)> = Vec::new();
    for r in rules {
        let list = |k: &str| str_list(r.get(k));
        let (groups, resources, names) =
            (list("apiGroups"), list("resources"), list("resourceNames"));
        if groups.len() == 1
            && resources.len() == 1
            && names.len() <= 1
            && list("nonResourceURLs").is_empty()
        {
            let key = (
                groups[0].clone(),
                resources[0].clone(),
                names.first().cloned(),
            );
            match simple.iter_mut().find(|(k, _)| *k == key) {
                Some((_, existing)) => {
                    let mut verbs = str_list(existing.get("verbs"));
                    verbs.extend(list("verbs"));
                    existing["verbs"] = json!(verbs);
                }
                None => simple.push((key, r)),
            }
        } else {
            out.push(r);
        }
    }
    out.extend(simple.into_iter().map(|(_, r)| r));
    out
}

/// kube's `ConfirmNoEscalation`: `user`'s own rules in `namespace` cover every rule in
/// `rules`; otherwise the message naming what is not held.
fn confirm_no_escalation(
    store: &Store,
    user: &User,
    namespace: &str,
    rules: &[Value],
) -> Result<(), String> {
    let owned = rules_for(store, user, namespace);
    let missing: Vec<Value> = rules
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owned.iter().any(|o| covers(o, sub)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    Err(format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        lines.join("\n")
    ))
}

fn full_authority() -> Vec<Value> {
    vec![
        json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
    ]
}

/// Whether only what garbage collection writes (owners, finalizers) differs.
fn only_gc_fields(obj: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(k);
            }
        }
        v
    };
    strip(obj) == strip(old)
}

/// Privilege-escalation prevention on a write of an RBAC object by `user` (`old`: on
/// update): kube-apiserver's 403 when the user would grant what it does not hold.
pub fn no_escalation(
    store: &Store,
    rt: &ResourceType,
    obj: &Value,
    old: Option<&Value>,
    user: &User,
) -> ApiResult<()> {
    let Some(kind) = kind_of(rt) else {
        return Ok(());
    };
    if user.groups.iter().any(|g| g == "system:masters")
        || old.is_some_and(|o| only_gc_fields(obj, o))
    {
        return Ok(());
    }
    let name = meta_str(obj, "name");
    let ns = meta_str(obj, "namespace");
    let forbidden = |msg: String| ApiError::forbidden_because(RBAC, &rt.plural, name, &msg);
    let allowed = |verb: &str, resource: &str, name: &str| {
        authorize(
            store,
            user,
            &Attributes {
                verb,
                group: RBAC,
                resource,
                subresource: "",
                namespace: ns,
                name,
                path: "",
            },
        )
    };
    match kind {
        "Role" | "ClusterRole" => {
            // kube asks with the request's name: none on a create
            let asked = if old.is_some() { name } else { "" };
            if allowed("escalate", &rt.plural, asked) {
                return Ok(());
            }
            let rules: Vec<Value> = obj
                .get("rules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            confirm_no_escalation(store, user, ns, &rules).map_err(forbidden)?;
            let agg = |v: &Value| v.get("aggregationRule").filter(|a| !a.is_null()).cloned();
            // an aggregationRule gathers anything: kube asks for full authority to set,
            // keep or drop one
            if (agg(obj).is_some() || old.and_then(agg).is_some())
                && confirm_no_escalation(store, user, ns, &full_authority()).is_err()
            {
                return Err(forbidden(
                    "must have cluster-admin privileges to use the aggregationRule".into(),
                ));
            }
            Ok(())
        }
        _ => {
            let (_, ref_kind, ref_name) = role_ref(obj);
            let resource = if ref_kind == "ClusterRole" {
                "clusterroles"
            } else {
                "roles"
            };
            if allowed("bind", resource, &ref_name) {
                return Ok(());
            }
            let role = store
                .get(
                    &gr(RBAC, resource),
                    if ref_kind == "ClusterRole" { "" } else { ns },
                    &ref_name,
                )
                .ok_or_else(|| ApiError::not_found(RBAC, resource, &ref_name))?;
            let rules: Vec<Value> = role
                .value
                .get("rules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            confirm_no_escalation(store, user, ns, &rules).map_err(forbidden)
        }
    }
}

/// kube-controller-manager's ClusterRole aggregation: a ClusterRole with an
/// `aggregationRule` holds the rules of every other ClusterRole its selectors match (in
/// name order, each rule once). True when a role changed (aggregation through several
/// levels, view into edit into admin, settles over passes).
pub fn aggregate(st: &mut State) -> bool {
    let names: Vec<String> = st
        .store
        .list(&gr(RBAC, "clusterroles"), None)
        .iter()
        .filter(|r| {
            r.value
                .pointer("/aggregationRule/clusterRoleSelectors")
                .is_some()
        })
        .map(|r| r.name().to_string())
        .collect();
    let mut changed = false;
    for name in names {
        // each role reads its sources as they are now, this pass's writes included, so
        // roles that aggregate each other settle instead of swapping rules every pass
        let roles = st.store.list(&gr(RBAC, "clusterroles"), None);
        let Some(role) = roles.iter().find(|r| r.name() == name) else {
            continue;
        };
        let Some(selectors) = role
            .value
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let selectors: Vec<LabelSelector> = selectors
            .iter()
            .filter_map(|s| LabelSelector::from_json(Some(s)).ok())
            .collect();
        let me = meta_str(&role.value, "name");
        let mut sources: Vec<&Value> = roles
            .iter()
            .map(|r| &r.value)
            .filter(|r| meta_str(r, "name") != me)
            .filter(|r| {
                let labels = r.pointer("/metadata/labels");
                selectors.iter().any(|s| s.matches(labels))
            })
            .collect();
        sources.sort_by_key(|r| meta_str(r, "name").to_string());
        let mut rules: Vec<Value> = Vec::new();
        for r in sources
            .iter()
            .filter_map(|r| r.get("rules").and_then(Value::as_array))
            .flatten()
        {
            if !rules.contains(r) {
                rules.push(r.clone());
            }
        }
        let current = role.value.get("rules").cloned().unwrap_or(json!([]));
        if current == json!(rules) || (current.is_null() && rules.is_empty()) {
            continue;
        }
        let mut v = role.value.clone();
        v["rules"] = json!(rules);
        if let Some(rt) = st.registry.by_group_resource(&gr(RBAC, "clusterroles")) {
            crate::state::deletion::store_update(st, &rt, v);
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_is_kubes_rule_covers() {
        let owner =
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]});
        let yes = |sub: Value| breakdown(&sub).iter().all(|s| covers(&owner, s));
        assert!(yes(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
        assert!(yes(
            json!({"apiGroups": [""], "resources": ["deployments/status"], "verbs": ["list"]})
        ));
        assert!(yes(
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]})
        ));
        assert!(!yes(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]})
        ));
        assert!(!yes(
            json!({"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]})
        ));
        assert!(!yes(
            json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
        ));
        // "*" asked is covered only by "*"
        assert!(!yes(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]})
        ));
        // a named owner rule covers only those names
        let named = json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]});
        assert!(covers(
            &named,
            &json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"], "verbs": ["get"]})
        ));
        assert!(!covers(
            &named,
            &json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
        let urls = json!({"nonResourceURLs": ["/logs/*"], "verbs": ["get"]});
        assert!(covers(
            &urls,
            &json!({"nonResourceURLs": ["/logs/x"], "verbs": ["get"]})
        ));
        assert!(!covers(
            &urls,
            &json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})
        ));
        assert!(!covers(
            &urls,
            &json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]})
        ));
    }

    #[test]
    fn missing_rights_are_worded_and_compacted_as_kube_does() {
        let store = Store::new(10);
        let user = User {
            name: "jane".into(),
            groups: vec!["dev".into()],
            ..User::default()
        };
        let e = confirm_no_escalation(
            &store,
            &user,
            "a",
            &[
                json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["delete", "get"]}),
                json!({"nonResourceURLs": ["/logs"], "verbs": ["get"]}),
            ],
        )
        .unwrap_err();
        assert_eq!(
            e,
            "user \"jane\" (groups=[\"dev\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"delete\" \"get\"]}\n{NonResourceURLs:[\"/logs\"], Verbs:[\"get\"]}"
        );
    }
}
