//! ResourceQuotas as a cluster keeps them: kube-controller-manager's resourcequota
//! controller writes `status.hard` and `status.used` ([`reconcile`]), and
//! kube-apiserver's ResourceQuota admission plugin refuses a create that would go over
//! a quota of its namespace ([`admit`], kube's 403 `exceeded quota: …` and
//! `failed quota: …: must specify …`).
//!
//! Tracked: object counts (`pods`, `services`, `configmaps`, `secrets`,
//! `persistentvolumeclaims`, `replicationcontrollers`, `resourcequotas`,
//! `services.loadbalancers`, `services.nodeports`, `count/<resource>[.<group>]`), the
//! compute requests and limits of live Pods (`cpu`, `memory`, `ephemeral-storage`, as
//! `requests.*` and `limits.*`), and `requests.storage` of claims. Scopes (`Terminating`,
//! `NotTerminating`, `BestEffort`, `NotBestEffort`, `PriorityClass` through
//! `scopeSelector`) select Pods; a scoped quota counts nothing else, as in kube. Other
//! resource names are kept in `hard` with a `used` of 0.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::state::cluster::State;
use crate::state::quantity::parse_milli;
use crate::state::registry::{GroupResource, ResourceType, gr};
use crate::state::sim::pods;
use crate::state::store::Store;
use crate::state::stored::StoredObj;

fn quotas_gr() -> GroupResource {
    gr("", "resourcequotas")
}

/// How a quantity is written back: with binary (`Mi`) or decimal (`k`, `m`) suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Binary,
    Decimal,
}

fn format_of(s: &str) -> Format {
    if s.trim().ends_with('i') {
        Format::Binary
    } else {
        Format::Decimal
    }
}

/// The canonical text of a quantity written as `text` whose value is `millis`.
pub(crate) fn canonical_text(millis: i128, text: &str) -> String {
    canonical(millis, format_of(text))
}

/// `resource.Quantity`'s canonical text of `millis`.
fn canonical(millis: i128, format: Format) -> String {
    if millis == 0 {
        return "0".into();
    }
    let (sign, m) = if millis < 0 {
        ("-", -millis)
    } else {
        ("", millis)
    };
    if m % 1000 != 0 {
        // a fraction: decimal milli units
        return format!("{sign}{m}m");
    }
    let mut v = m / 1000;
    match format {
        Format::Binary => {
            let mut i = 0;
            while v % 1024 == 0 && i < 6 {
                v /= 1024;
                i += 1;
            }
            format!("{sign}{v}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i])
        }
        Format::Decimal => {
            let mut i = 0;
            while v % 1000 == 0 && i < 6 {
                v /= 1000;
                i += 1;
            }
            format!("{sign}{v}{}", ["", "k", "M", "G", "T", "P", "E"][i])
        }
    }
}

fn live_pod(p: &Value) -> bool {
    !crate::state::sim::terminating(p) && !pods::finished(p)
}

fn amount(c: &Value, kind: &str, res: &str) -> Option<(i128, Format)> {
    pods::container_amount(c, kind, res).map(|(m, text)| (m, format_of(&text)))
}

fn pod_amount(p: &Value, kind: &str, res: &str) -> (i128, Option<Format>) {
    let (m, text) = pods::pod_amount(p, kind, res);
    (m, text.as_deref().map(format_of))
}

/// What one object adds to resource `key` of a quota (None: nothing).
fn object_usage(
    group: &str,
    plural: &str,
    obj: &Value,
    key: &str,
) -> Option<(i128, Option<Format>)> {
    let count = Some((1000, Some(Format::Decimal)));
    let core = group.is_empty();
    match key {
        k if k.starts_with("count/") => {
            let name = &k["count/".len()..];
            let (res, g) = name.split_once('.').unwrap_or((name, ""));
            (res == plural && g == group).then_some(count)?
        }
        "pods" if core && plural == "pods" => live_pod(obj).then_some(count)?,
        "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas"
            if core && plural == key =>
        {
            count
        }
        "services.loadbalancers" if core && plural == "services" => {
            (obj.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer"))
                .then_some(count)?
        }
        "services.nodeports" if core && plural == "services" => {
            let t = obj
                .pointer("/spec/type")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !matches!(t, "NodePort" | "LoadBalancer") {
                return None;
            }
            let n = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|p| p.len())
                .unwrap_or(0) as i128;
            Some((n * 1000, Some(Format::Decimal)))
        }
        "requests.storage" if core && plural == "persistentvolumeclaims" => amount(
            obj.get("spec").unwrap_or(&Value::Null),
            "requests",
            "storage",
        )
        .map(|(m, f)| (m, Some(f))),
        _ if core && plural == "pods" => {
            if !live_pod(obj) {
                return None;
            }
            let (kind, res) = match key {
                "cpu" | "memory" | "ephemeral-storage" => ("requests", key),
                k => k.split_once('.')?,
            };
            if !matches!(kind, "requests" | "limits") {
                return None;
            }
            Some(pod_amount(obj, kind, res))
        }
        _ => None,
    }
}

/// Whether a quota's scopes take in `obj` (a scoped quota takes in Pods only).
fn in_scope(quota: &Value, plural_group: (&str, &str), obj: &Value) -> bool {
    let mut selectors: Vec<(String, String, Vec<String>)> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| (s.to_string(), "Exists".to_string(), vec![]))
        .collect();
    for e in quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        selectors.push((
            e.get("scopeName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            e.get("operator")
                .and_then(Value::as_str)
                .unwrap_or("")
                .into(),
            values,
        ));
    }
    if selectors.is_empty() {
        return true;
    }
    if plural_group != ("pods", "") {
        return false;
    }
    selectors.iter().all(|(scope, op, values)| {
        let terminating = obj
            .pointer("/spec/activeDeadlineSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|s| s >= 0);
        let best_effort = crate::state::sim::pods::qos_class(obj) == "BestEffort";
        match scope.as_str() {
            "Terminating" => terminating,
            "NotTerminating" => !terminating,
            "BestEffort" => best_effort,
            "NotBestEffort" => !best_effort,
            "PriorityClass" => {
                let class = obj
                    .pointer("/spec/priorityClassName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match op.as_str() {
                    "In" => values.iter().any(|v| v == class),
                    "NotIn" => !values.iter().any(|v| v == class),
                    "Exists" => !class.is_empty(),
                    "DoesNotExist" => class.is_empty(),
                    _ => false,
                }
            }
            _ => false,
        }
    })
}

/// The resources a quota's usage counts from, for key `key`: (group, plural).
fn sources(key: &str) -> Vec<(String, String)> {
    match key {
        k if k.starts_with("count/") => {
            let name = &k["count/".len()..];
            let (res, g) = name.split_once('.').unwrap_or((name, ""));
            vec![(g.to_string(), res.to_string())]
        }
        "services.loadbalancers" | "services.nodeports" => vec![(String::new(), "services".into())],
        "requests.storage" => vec![(String::new(), "persistentvolumeclaims".into())],
        "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas" => vec![(String::new(), key.into())],
        _ => vec![(String::new(), "pods".into())],
    }
}

/// `hard` of a quota: name → (millis, format), unparsable values left out.
fn hard(quota: &Value) -> BTreeMap<String, (i128, Format)> {
    quota
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let s = v.as_str()?;
            parse_milli(s).ok().map(|m| (k.clone(), (m, format_of(s))))
        })
        .collect()
}

/// A namespace's objects of each kind, listed once for all the quotas and resources
/// of a pass that count that kind.
type Listed = HashMap<(String, String), Vec<Arc<StoredObj>>>;

/// What the quota's namespace uses of each hard resource now.
fn used(store: &Store, quota: &Value, listed: &mut Listed) -> BTreeMap<String, (i128, Format)> {
    let ns = quota
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut out = BTreeMap::new();
    for (key, (_, hard_format)) in hard(quota) {
        let mut total = 0;
        let mut format = None;
        for (g, plural) in sources(&key) {
            let objects = listed
                .entry((g.clone(), plural.clone()))
                .or_insert_with(|| store.list(&gr(&g, &plural), Some(ns)));
            for o in objects.iter() {
                if !in_scope(quota, (&plural, &g), &o.value) {
                    continue;
                }
                if let Some((m, f)) = object_usage(&g, &plural, &o.value, &key) {
                    total += m;
                    if let Some(f) = f {
                        format.get_or_insert(f);
                    }
                }
            }
        }
        out.insert(key, (total, format.unwrap_or(hard_format)));
    }
    out
}

fn list(map: &BTreeMap<String, (i128, Format)>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, (m, f))| (k.clone(), json!(canonical(*m, *f))))
            .collect(),
    )
}

/// The resourcequota controller: the `status.hard` and `status.used` of every quota in
/// `namespaces` (where something changed) as they are now. True when it wrote something.
pub fn reconcile(st: &mut State, namespaces: &BTreeSet<String>) -> bool {
    let mut changed = false;
    for ns in namespaces {
        let mut listed = Listed::new();
        for q in st.store.list(&quotas_gr(), Some(ns)) {
            let used = used(&st.store, &q.value, &mut listed);
            let hard = q.value.pointer("/spec/hard").cloned().unwrap_or(json!({}));
            let status = json!({"hard": hard, "used": list(&used)});
            if q.value.get("status") != Some(&status) {
                let mut v = q.value.clone();
                v["status"] = status;
                st.store.put(&quotas_gr(), v);
                changed = true;
            }
        }
    }
    changed
}

/// kube's `prettyPrint` of a resource list: `k=v` sorted by name, comma-joined.
fn pretty(items: &[(String, String)]) -> String {
    items
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The pod evaluator's constraint: a quota on cpu or memory needs every container to
/// say its request (or limit) of it.
fn must_specify(pod: &Value, tracked: &[String]) -> Option<String> {
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for key in tracked {
        let (kind, res) = match key.as_str() {
            "cpu" | "memory" => ("requests", key.as_str()),
            "requests.cpu" | "requests.memory" | "limits.cpu" | "limits.memory" => {
                key.split_once('.').unwrap_or_default()
            }
            _ => continue,
        };
        let list = |k: &str| {
            pod.pointer(&format!("/spec/{k}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        for c in list("containers")
            .iter()
            .chain(list("initContainers").iter())
        {
            let has = amount(c, kind, res).is_some();
            if !has {
                let name = c
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let names = missing.entry(key.clone()).or_default();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "must specify {}",
        missing
            .iter()
            .map(|(k, names)| {
                let mut names = names.clone();
                names.sort();
                format!("{k} for: {}", names.join(","))
            })
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// The ResourceQuota admission plugin on a create of `obj` (of kind `rt`): `Err` is
/// kube's reason for refusing it (a 403).
pub fn admit(store: &Store, rt: &ResourceType, obj: &Value) -> Result<(), String> {
    let Some(ns) = obj.pointer("/metadata/namespace").and_then(Value::as_str) else {
        return Ok(());
    };
    let mut quotas = store.list(&quotas_gr(), Some(ns));
    quotas.sort_by(|a, b| a.name().cmp(b.name()));
    let mut listed = Listed::new();
    for q in quotas {
        if !in_scope(&q.value, (&rt.plural, &rt.group), obj) {
            continue;
        }
        let hard = hard(&q.value);
        let me = (rt.group.clone(), rt.plural.clone());
        let tracked: Vec<String> = hard
            .keys()
            .filter(|k| sources(k).contains(&me))
            .cloned()
            .collect();
        if rt.group.is_empty()
            && rt.plural == "pods"
            && let Some(why) = must_specify(obj, &tracked)
        {
            return Err(format!("failed quota: {}: {why}", q.name()));
        }
        let now = used(store, &q.value, &mut listed);
        let mut exceeded = Vec::new();
        for key in &tracked {
            let Some((delta, f)) = object_usage(&rt.group, &rt.plural, obj, key) else {
                continue;
            };
            if delta == 0 {
                continue;
            }
            let (limit, hard_format) = hard[key];
            let (in_use, use_format) = now.get(key).copied().unwrap_or((0, hard_format));
            if in_use + delta > limit {
                exceeded.push((
                    key.clone(),
                    canonical(delta, f.unwrap_or(hard_format)),
                    canonical(in_use, use_format),
                    canonical(limit, hard_format),
                ));
            }
        }
        if !exceeded.is_empty() {
            let part = |i: usize| -> Vec<(String, String)> {
                exceeded
                    .iter()
                    .map(|e| (e.0.clone(), [&e.1, &e.2, &e.3][i].clone()))
                    .collect()
            };
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                q.name(),
                pretty(&part(0)),
                pretty(&part(1)),
                pretty(&part(2))
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_as_kube_writes_them() {
        for (millis, format, want) in [
            (0, Format::Decimal, "0"),
            (500, Format::Decimal, "500m"),
            (1500, Format::Decimal, "1500m"),
            (2000, Format::Decimal, "2"),
            (3_000_000, Format::Decimal, "3k"),
            (1_500_000, Format::Decimal, "1500"),
            (128 * 1024 * 1024 * 1000, Format::Binary, "128Mi"),
            (1024 * 1024 * 1024 * 1000, Format::Binary, "1Gi"),
            (1536 * 1024 * 1024 * 1000, Format::Binary, "1536Mi"),
            (100_000, Format::Binary, "100"),
        ] {
            assert_eq!(canonical(millis, format), want, "{millis} {format:?}");
        }
    }
}
